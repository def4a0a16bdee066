"""The session's runtime: where cases run, one live client per endpoint, and which cassette.

pytest runs items one by one on its own thread. A replayed case runs there too, to the
end, on a loop of that thread: its answers are in its cassette, nothing is worth running
beside it, and it gets a client of its own over that cassette, closed when the case ends.
Live and record cases run on an event loop in a thread of their own, which keeps running
while pytest reports: cases started ahead (``--toolbench-concurrency``) wait for their
servers there, so up to N run at once while pytest still reports them in order, and their
clients' connection pools and breakers, one per endpoint, live on that loop.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import functools
import math
import os
import shlex
import threading
from collections.abc import Callable, Coroutine, Iterable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .apis import AGENT, API_NAMES, DEFAULT_API
from .budget import TokenBudget
from .casefile.cache import KeptParses
from .casefile.schema import Endpoint
from .judge.second import RoleModels, SecondModel
from .records import CaseResult
from .run.runner import CaseRun, RunContext, run_case
from .scrubbing import LogScrubber, Scrubber, endpoint_secrets, environment_secrets
from .settings import Mode, ResolvedEndpoint, Settings, missing_key
from .transport.breaker import CircuitBreaker
from .transport.cassette import Cassette, CassettePaths
from .transport.client import ApiClient, ClientConfig, InteractionSink
from .transport.errors import ReplayError
from .transport.ratelimit import LimiterStats, RateLimiter
from .transport.replay import Replayer

if TYPE_CHECKING:
    import httpx2

    from .agent_cases import AgentCases
    from .mcp.provider import SessionServers
    from .run.runner import McpProvider


@dataclass(frozen=True)
class CaseSetup:
    """What one run of a case starts from (``SessionRuntime.prepare``)."""

    endpoint: ResolvedEndpoint
    replaying: bool
    """Its answers come from ``cassette``; nothing is sent, and no key."""
    cassette: Cassette
    """Loaded when replaying; else the empty one a recording fills."""
    api_key: str | None
    """The key the endpoint's variable holds now (a live run sends it)."""
    scrubber: Scrubber
    """Masks the endpoint's credentials (and the case's MCP servers') wherever they appear."""


class SessionRuntime:
    """The session's runtime: the event loop thread, live clients, and cases under way."""

    def __init__(self, settings: Settings, start_dir: Path, budget: TokenBudget | None = None,
                 workers: int = 1) -> None:
        self.settings = settings
        self._workers = workers
        """xdist workers sharing the rate limits (each takes its share); 1 without xdist."""
        self._limiters: dict[str, RateLimiter] = {}
        """One per endpoint base URL, when --toolbench-rpm or --toolbench-tpm is given."""
        self.budget = budget or TokenBudget(None)
        """Live cases are started only while it is not spent (``--toolbench-max-tokens``)."""
        self.live_tokens: dict[str, int | None] = {}
        """The tokens each live case used, by node id, until its report takes them."""
        self._here: asyncio.AbstractEventLoop | None = None
        """The loop on pytest's own thread that replayed cases run on."""
        self._loop: asyncio.AbstractEventLoop | None = None
        """The loop of live and record cases, run by ``_thread``."""
        self._thread: threading.Thread | None = None
        self._clients: dict[ResolvedEndpoint, ApiClient] = {}
        """The live clients, one per endpoint: its connection pool and breaker are shared."""
        self._breakers: dict[str, CircuitBreaker] = {}
        self._endpoints: dict[tuple[Any, ...], ResolvedEndpoint] = {}
        """What each distinct case endpoint resolves to, per API (a suite has a few)."""
        self._endpoint_scrubbers: dict[tuple[ResolvedEndpoint, str | None], Scrubber] = {}
        """The scrubber of each endpoint and the key its environment variable holds."""
        self._scrubbers: dict[frozenset[str], Scrubber] = {}
        """Every scrubber made, by the secrets it masks (``scrubber``)."""
        self._cassettes = CassettePaths(settings.cassette_dir, start_dir)
        self.kept_cassettes: KeptParses | None = None
        """Cassettes parsed by earlier runs, under pytest's cache directory (None without)."""
        self._started: dict[str, concurrent.futures.Future[CaseResult]] = {}
        self._mcp_servers: SessionServers | None = None
        """The ``scope: session`` MCP servers, on the live loop; made when first needed."""
        self._environment_secrets = environment_secrets(os.environ)
        """Every credential-looking variable's value: a secret of every case."""
        self._log_scrubber = LogScrubber()
        self._log_scrubber.add(self._environment_secrets)
        self._log_scrubber.install()  # until the session ends: httpx2 logs each URL
        self._agents: AgentCases | None = None
        """The agent cases' proxy, made with the first agent case."""

    # -- running -------------------------------------------------------------------------

    def start(self, case_run: CaseRun) -> bool:
        """Start ``case_run`` now unless it already runs or ran (used to run live cases
        ahead), or the token budget is spent: it is then skipped when its turn comes.
        Whether it was started now."""
        if case_run.nodeid in self._started or self.budget.exhausted or _is_agent(case_run):
            return False  # an agent case runs when its turn comes, alone (agent_cases.py)
        self._start(case_run, self.replays(case_run))
        return True

    def running(self) -> int:
        """How many cases started ahead or waited for are still under way."""
        return sum(not future.done() for future in self._started.values())

    def mask(self, text: str) -> str:
        """``text`` with every credential the session knows masked (what a case printed)."""
        return self._log_scrubber.mask(text)

    def unfinished(self) -> list[str]:
        """The node ids of the cases started and not yet asked for (interrupted, at the
        end of a session that was stopped)."""
        return list(self._started)

    def result(self, case_run: CaseRun, refill: Callable[[], None] | None = None
               ) -> CaseResult:
        """Run ``case_run``, or wait for it if it was started ahead, and return what it did.
        Raises BudgetSpent for a live case not yet started when the token budget is spent.

        ``refill``: called whenever another case under way ends while this one is awaited,
        to start the next ones in its place. A case that takes long (a connection the
        server was slow to accept, a slow tool) then holds up one place of the
        concurrency, not every case behind it."""
        if _is_agent(case_run):
            return self._run_agent_case(case_run)
        if case_run.nodeid not in self._started:
            replaying = self.replays(case_run)
            if replaying and not self._rejudges(case_run):
                return self._run_here(self._execute(case_run, replaying))
            self.budget.check()
            self._start(case_run, replaying)
        future = self._started[case_run.nodeid]
        while refill is not None and not future.done():
            under_way = [other for other in self._started.values() if not other.done()]
            concurrent.futures.wait(under_way, return_when=concurrent.futures.FIRST_COMPLETED)
            if not future.done():
                refill()
        result = future.result()  # on Ctrl-C, close() cancels it
        del self._started[case_run.nodeid]
        return result

    def _run_agent_case(self, case_run: CaseRun) -> CaseResult:
        """Run an agent case on pytest's own thread, once every case started ahead has
        ended: while it runs, the environment points every SDK at the proxy."""
        self.settle()
        replaying = self.replays(case_run)
        if not replaying:
            self.budget.check()  # BudgetSpent: skipped, as a live case not yet started is
        path, shown, hint = self.cassette_location(case_run)
        made: list[tuple[Cassette, RoleModels]] = []

        def seconds(cassette: Cassette) -> RoleModels:
            made.append((cassette, self.own_seconds(SecondModels(self, case_run, cassette),
                                                    replaying)))
            return made[-1][1]

        result = self._run_here(self.agent_cases.execute(case_run, path, shown, hint,
                                                         replaying, seconds))
        for cassette, models in made:
            models.write_verdicts(cassette, result)
        if not replaying:
            self._spent(case_run, result.spent_tokens)
        elif self._rejudges(case_run):
            self._spent(case_run, result.side_tokens("judge"))
        return result

    def fixture_seconds(self, cassette: Cassette, replaying: bool) -> RoleModels:
        """A ``toolbench_agent`` test's judge (the command line's or the ini's model, over
        the session's endpoint), its exchanges in the test's ``cassette``."""
        return self.own_seconds(SecondModels(self, None, cassette), replaying)

    def own_seconds(self, seconds: SecondModels, replaying: bool) -> RoleModels:
        """The judge and simulated user of an agent case or test, on clients of their own
        (they run on pytest's own thread or a test's, not on the live cases' loop):
        replayed from the cassette (the judge live with ``--toolbench-rejudge``), else
        live, recorded into it unless the mode is live."""
        if not seconds.roles:  # replayed: a role's recorded exchanges are left unused
            return seconds.replayed(Scrubber(()), live_judge=False) if replaying \
                else RoleModels()
        endpoint = seconds.endpoint
        rejudge = self.settings.rejudge and "judge" in seconds.roles
        live = not replaying or rejudge
        client = ApiClient(_client_config(endpoint),
                           pacer=self._limiter(endpoint.base_url) if live else None)
        if replaying:
            replayed = seconds.replayed(self._scrubber(endpoint, endpoint.api_key()),
                                        live_judge=rejudge, client=client)
            replayed.clients.append(client)
            return replayed
        recording = self.settings.mode in (Mode.RECORD, Mode.MISSING)
        cassette = seconds.cassette
        return RoleModels(seconds.live(cassette.interactions.append if recording else None,
                                       client), [], [client])

    @property
    def agent_cases(self) -> AgentCases:
        """The runner of agent cases (and of the ``toolbench_agent`` fixture), with the
        session's one proxy."""
        if self._agents is None:
            from .agent_cases import AgentCases  # the proxy and h11: only with agent cases

            self._agents = AgentCases(self.settings, self.kept_cassettes, self._limiter,
                                      self.scrubber)
        return self._agents

    def settle(self) -> None:
        """Wait for every case started ahead: an agent case or test is about to point the
        environment at the proxy."""
        concurrent.futures.wait(list(self._started.values()))

    def _start(self, case_run: CaseRun, replaying: bool) -> None:
        self._started[case_run.nodeid] = self._submit(self._execute(case_run, replaying))

    def replays(self, case_run: CaseRun) -> bool:
        """Whether ``case_run``'s answers come from its cassette (or it fails for want of
        one): never a live request."""
        return self.settings.replays(lambda: self.cassette_path(case_run).exists())

    def _rejudges(self, case_run: CaseRun) -> bool:
        """Whether a replayed case asks its judge live (``--toolbench-rejudge``): it runs on
        the live loop, where the live clients are."""
        return self.settings.rejudge and case_run.loaded.case.judged

    def _run_here(self, coroutine: Coroutine[Any, Any, CaseResult]) -> CaseResult:
        """Run ``coroutine`` to the end on pytest's own thread.

        A loop of its own rather than ``asyncio.Runner``, which sets and restores a SIGINT
        handler around every run (more than a replayed case costs). Ctrl-C raises
        KeyboardInterrupt out of the loop, as anywhere in pytest; ``close()`` cancels and
        awaits what it left.
        """
        if self._here is None:
            self._here = asyncio.new_event_loop()
        return self._here.run_until_complete(coroutine)

    def _submit(self, coroutine: Coroutine[Any, Any, CaseResult]
                ) -> concurrent.futures.Future[CaseResult]:
        if self._loop is None:
            self._loop = asyncio.new_event_loop()
            self._thread = threading.Thread(target=self._loop.run_forever,
                                            name="toolbench-loop", daemon=True)
            self._thread.start()
        return asyncio.run_coroutine_threadsafe(coroutine, self._loop)

    def close(self) -> None:
        """Cancel every case still running (started ahead and never asked for, or cut off by
        Ctrl-C), close the clients, stop the loops.

        The cases are cancelled and awaited on the loop before it stops: a task left pending
        would be destroyed with the loop, and asyncio would say so on stderr.
        """
        self._started.clear()
        self._log_scrubber.remove()
        if self._agents is not None:
            self._agents.close()
        if self._here is not None:
            self._here.run_until_complete(_cancel_other_tasks())  # what a Ctrl-C left
            self._here.run_until_complete(self._here.shutdown_asyncgens())
            self._here.close()
            self._here = None
        if self._loop is None:
            return
        shutdown = asyncio.run_coroutine_threadsafe(self._shutdown(), self._loop)
        try:
            shutdown.result(timeout=_CANCEL_WAIT_S + 5)
        except concurrent.futures.TimeoutError:
            pass  # a client that would not close: the loop stops all the same
        self._loop.call_soon_threadsafe(self._loop.stop)
        if self._thread is not None:
            self._thread.join(timeout=10)
        if not self._loop.is_running():
            self._loop.close()
        self._loop = None

    async def _shutdown(self) -> None:
        if self._mcp_servers is not None:  # before the cases are cancelled: their tasks too
            await self._mcp_servers.aclose()
        await _cancel_other_tasks()
        await self._close_clients()
        await asyncio.get_running_loop().shutdown_asyncgens()  # streams cut off mid-way

    async def _close_clients(self) -> None:
        for client in self._clients.values():
            await client.aclose()

    # -- one case ------------------------------------------------------------------------

    def prepare(self, case_run: CaseRun, replaying: bool) -> CaseSetup:
        """What a run of ``case_run`` starts from (``replaying``: ``replays`` decided):
        its endpoint, its cassette (loaded when it replays), its key and scrubber. Raises
        ReplayError when the cassette cannot be replayed. The run and the dry run
        (``dryrun.py``) both start here."""
        endpoint = self._endpoint(case_run)
        path, shown = self._cassettes.locate(case_run.loaded.file, case_run.label)
        # From where pytest was started, not the rootdir (which the node id is relative to).
        hint = _printable(self._record_command(case_run))
        cassette = (Cassette.load(path, hint, shown, case_run.api, self.kept_cassettes)
                    if replaying
                    else Cassette(path, rerecord_hint=hint, shown=shown, api=case_run.api))
        api_key = endpoint.api_key()
        scrubber = self._scrubber(endpoint, api_key)
        if case_run.loaded.case.mcp_tools:
            scrubber = self._with_mcp_secrets(case_run, scrubber)
        return CaseSetup(endpoint, replaying, cassette, api_key, scrubber)

    async def _execute(self, case_run: CaseRun, replaying: bool) -> CaseResult:
        """Run ``case_run`` from its cassette (``replaying``: ``replays`` decided) or live."""
        try:
            setup = self.prepare(case_run, replaying)
        except ReplayError as error:
            return case_run.not_run(str(error))
        endpoint, cassette, api_key, scrubber = (setup.endpoint, setup.cassette,
                                                 setup.api_key, setup.scrubber)
        uses_mcp = bool(case_run.loaded.case.mcp_tools)
        if replaying:
            result = await self._replay(case_run, endpoint, Replayer(
                cassette, scrubber, self.settings.replay_speed), scrubber, cassette)
            if self._rejudges(case_run):
                self._spent(case_run, result.side_tokens("judge"))
            return result
        unsent = missing_key(endpoint, case_run.api, api_key)
        if unsent is not None:  # said before it costs a request, a retry and a 401
            return case_run.not_run(unsent)
        recording = self.settings.mode in (Mode.RECORD, Mode.MISSING)
        sink = cassette.interactions.append if recording else None
        seconds = SecondModels(self, case_run, cassette)
        result = await run_case(case_run, self._context(
            case_run, self._live_client(endpoint), scrubber, api_key=api_key,
            sink=sink, seconds=seconds.live(sink),
            mcp=self._live_mcp(scrubber, cassette if recording else None) if uses_mcp
            else None))
        if recording and not result.endpoint_failed:
            cassette.save()  # an endpoint failure keeps the old cassette: it replays nothing
        self._spent(case_run, result.spent_tokens)
        return result

    def _spent(self, case_run: CaseRun, tokens: int | None) -> None:
        """The tokens a case used live (the model's, the judge's, the simulator's) go to
        the budget and the case's report."""
        self.budget.spend(tokens)
        self.live_tokens[case_run.nodeid] = tokens

    def _with_mcp_secrets(self, case_run: CaseRun, scrubber: Scrubber) -> Scrubber:
        """``scrubber`` masking the credentials of the case's MCP servers (their ``env``
        and ``headers``) too."""
        from .mcp.provider import case_secrets

        secrets = case_secrets(case_run.loaded)
        return self.scrubber((*scrubber.secrets, *secrets)) if secrets else scrubber

    def _live_mcp(self, scrubber: Scrubber, cassette: Cassette | None) -> McpProvider:
        """Live MCP servers for one case, its exchanges kept in ``cassette`` if given."""
        from .mcp.provider import LiveMcp, SessionServers

        if self._mcp_servers is None:
            self._mcp_servers = SessionServers()
        return LiveMcp(self._mcp_servers, scrubber,
                       sink=cassette.mcp.append if cassette is not None else None)

    def _endpoint(self, case_run: CaseRun) -> ResolvedEndpoint:
        """The case's endpoint after precedence (command line > case > ini > environment),
        worked out once per distinct ``endpoint`` mapping and API."""
        case = case_run.loaded.case.endpoint
        key = (case_run.api, *(tuple(sorted(value.items())) if isinstance(value, dict)
                               else tuple(value) if isinstance(value, list)
                               else value for _name, value in case))
        if key not in self._endpoints:
            self._endpoints[key] = self.settings.endpoint_for(case, case_run.api)
        return self._endpoints[key]

    def _scrubber(self, endpoint: ResolvedEndpoint, api_key: str | None) -> Scrubber:
        """What masks ``endpoint``'s credentials (``api_key`` is the key its variable holds
        now) in the case's records, and from now on in the HTTP libraries' logs."""
        key = (endpoint, api_key)
        if key not in self._endpoint_scrubbers:
            self._endpoint_scrubbers[key] = self.scrubber(
                endpoint_secrets(api_key, endpoint.headers, endpoint.base_url))
        return self._endpoint_scrubbers[key]

    def scrubber(self, secrets: Iterable[str]) -> Scrubber:
        """The scrubber of every kind of case (the plugin's loop, an agent case, a
        ``toolbench_agent`` test, the judge and the simulated user): it masks ``secrets``
        (an endpoint's credentials, a case's MCP servers', what an agent sent as one) and
        the value of every credential-looking environment variable, in the case's records
        and, from now on, in the logs and in what the session's code prints."""
        found = frozenset((*secrets, *self._environment_secrets))
        if found not in self._scrubbers:
            self._log_scrubber.add(found)
            self._scrubbers[found] = Scrubber(found)
        return self._scrubbers[found]

    def _record_command(self, case_run: CaseRun) -> str:
        """The command that records ``case_run``'s cassette. The item exists only with the
        flags that made it: a model or API the command line forced on every case."""
        forced = "".join(
            f" --toolbench-{flag} {shlex.quote(value)}"
            for flag, value, given in (("model", case_run.model, self.settings.models),
                                       ("api", case_run.api, self.settings.apis))
            if given and value is not None)
        return f"pytest '{case_run.display_file}::{case_run.label}' --toolbench-record{forced}"

    async def _replay(self, case_run: CaseRun, endpoint: ResolvedEndpoint, replayer: Replayer,
                      scrubber: Scrubber, cassette: Cassette) -> CaseResult:
        """Run ``case_run`` on a client of its own whose every answer comes from its
        cassette, as do its MCP servers' (none is started)."""
        client = self._replay_client(endpoint, replayer)
        verdict: Callable[[], str | None] = replayer.unused
        seconds = SecondModels(self, case_run, cassette)
        replayed = seconds.replayed(scrubber, live_judge=self._rejudges(case_run))
        verdict = _first_of(verdict, *replayed.verdicts)
        mcp: McpProvider | None = None
        if case_run.loaded.case.mcp_tools:
            from .mcp.provider import ReplayedMcp
            from .mcp.source import RecordedCalls

            recorded = RecordedCalls(cassette.mcp, cassette.shown, cassette.rerecord_hint,
                                     scrubber)
            mcp = ReplayedMcp(recorded)
            verdict = _first_of(verdict, recorded.unused)
        try:
            result = await run_case(case_run, self._context(case_run, client, scrubber,
                                                            verdict=verdict, mcp=mcp,
                                                            seconds=replayed.models))
        finally:
            await client.aclose()
            await replayed.aclose()
        replayed.write_verdicts(cassette, result)
        return result

    def _context(self, case_run: CaseRun, client: ApiClient, scrubber: Scrubber, *,
                 api_key: str | None = None, sink: InteractionSink | None = None,
                 verdict: Callable[[], str | None] | None = None,
                 mcp: McpProvider | None = None,
                 seconds: dict[str, SecondModel] | None = None) -> RunContext:
        repeat = case_run.loaded.case.repeat
        seconds = seconds or {}
        return RunContext(client, api_key=api_key, sink=sink, verdict=verdict,
                          runs=self.settings.repeat or (repeat.runs if repeat else 1),
                          match_timeout_s=self.settings.match_timeout_s, scrubber=scrubber,
                          mcp=mcp, judge=seconds.get("judge"),
                          simulator=seconds.get("simulator"),
                          run_faults=self.settings.fault_plan())

    def _live_client(self, endpoint: ResolvedEndpoint) -> ApiClient:
        if endpoint not in self._clients:
            self._clients[endpoint] = ApiClient(_client_config(endpoint),
                                                 breaker=self._breaker(endpoint.base_url),
                                                 pacer=self._limiter(endpoint.base_url))
        return self._clients[endpoint]

    def _limiter(self, base_url: str) -> RateLimiter | None:
        """One rate limiter per endpoint, shared by the cases that reach it live; this
        process's share of the limits under xdist."""
        rpm, tpm = self.settings.rpm, self.settings.tpm
        if rpm is None and tpm is None:
            return None
        if base_url not in self._limiters:
            share = self._workers
            self._limiters[base_url] = RateLimiter(rpm and rpm / share, tpm and tpm / share)
        return self._limiters[base_url]

    def take_late_requests(self) -> dict[str, int]:
        """The requests refused since the last call because they came after their agent
        case (or ``toolbench_agent`` test) had ended, by its node id."""
        return self._agents.late_requests() if self._agents is not None else {}

    def take_limiter_stats(self) -> LimiterStats | None:
        """Requests, tokens and time waited on rate limits since the last call; None when
        no limit is set."""
        if self.settings.rpm is None and self.settings.tpm is None:
            return None
        total = LimiterStats()
        for limiter in list(self._limiters.values()):
            total.add(limiter.take_stats())
        return total

    def _replay_client(self, endpoint: ResolvedEndpoint, replayer: Replayer) -> ApiClient:
        return self.local_client(endpoint, replayer.transport())

    def local_client(self, endpoint: ResolvedEndpoint, transport: httpx2.AsyncBaseTransport
                     ) -> ApiClient:
        """A client for one case whose requests ``transport`` answers without the network
        (a replay, a dry run): cheap (no connection pool, no TLS context, no proxies from
        the environment), and its breaker its own, since it never reaches the endpoint
        whose circuit live cases share. Instant replay has no deadline to watch: every
        answer is there at once."""
        return ApiClient(
            _replay_config(endpoint, instant=not self.settings.replay_speed),
            transport=transport,
            breaker=self._new_breaker(),
            sleep=asyncio.sleep if self.settings.replay_speed else _no_sleep, jitter=False)

    def _breaker(self, base_url: str) -> CircuitBreaker:
        """One breaker per endpoint, shared by the cases that reach it live."""
        if base_url not in self._breakers:
            self._breakers[base_url] = self._new_breaker()
        return self._breakers[base_url]

    def _new_breaker(self) -> CircuitBreaker:
        return CircuitBreaker(self.settings.breaker_threshold, self.settings.breaker_cooldown_s)

    def cassette_path(self, case_run: CaseRun) -> Path:
        """Where ``case_run``'s cassette is (``CassettePaths``)."""
        return self._cassettes.locate(case_run.loaded.file, case_run.label)[0]

    def cassette_location(self, case_run: CaseRun) -> tuple[Path, str, str]:
        """Where ``case_run``'s cassette is, that path as messages show it, and the
        command that records it."""
        path, shown = self._cassettes.locate(case_run.loaded.file, case_run.label)
        return path, shown, _printable(self._record_command(case_run))


def _is_agent(case_run: CaseRun) -> bool:
    return case_run.api == AGENT
class SecondModels:
    """The judge and the simulated user of one case: which model, where, over which API.

    The judge model is ``--toolbench-judge-model`` > the case's ``judge.model`` > the ini's;
    its endpoint is the case's ``judge.endpoint`` over the case's own, resolved as a case's
    endpoint is, over ``judge.endpoint.api`` or else the case's API, except that the
    judge's own ``base_url`` and ``api_key_env`` win over the command line's (which name
    the model's). The simulated user
    speaks to the same endpoint, as ``simulate_user.model`` or else the judge model."""

    def __init__(self, runtime: SessionRuntime, case_run: CaseRun | None,
                 cassette: Cassette) -> None:
        self.runtime, self.cassette = runtime, cassette
        case = case_run.loaded.case if case_run is not None else None
        self.judge = case.judge if case is not None else None
        """The case's ``judge`` (a ``toolbench_agent`` test, which has no case: None)."""
        self.case_endpoint = case.endpoint if case is not None else Endpoint()
        self.own_api = (case_run.api if case_run is not None and case_run.api in API_NAMES
                        else DEFAULT_API)
        """The case item's API; chat for an agent case or test."""
        self.roles = ([role for role, wanted in (("judge", case.judged),
                                                 ("simulator", case.simulated)) if wanted]
                      if case is not None else ["judge"] if self.model else [])
        """A test's judge is there whenever a judge model is named (its checks say when
        it is asked)."""

    @functools.cached_property
    def model(self) -> str:
        judge = self.judge
        return self.runtime.settings.judge_model_for(judge.model if judge else None) or ""

    @functools.cached_property
    def api(self) -> str:
        """``judge.endpoint.api``, else the case item's (chat for an agent case)."""
        judge = self.judge
        return (judge.endpoint.api if judge is not None else None) or self.own_api

    @functools.cached_property
    def endpoint(self) -> ResolvedEndpoint:
        """Worked out when a role needs it (most replayed cases have none)."""
        given = self.judge.endpoint if self.judge is not None else None
        endpoint = self.case_endpoint if given is None else self.case_endpoint.model_copy(
            update={key: getattr(given, key) for key in given.model_fields_set})
        resolved = self.runtime.settings.endpoint_for(endpoint, self.api)
        if given is not None and given.base_url:  # the judge's own: no flag for the model's
            resolved = replace(resolved, base_url=given.base_url.rstrip("/"))
        if given is not None and given.api_key_env:
            resolved = replace(resolved, api_key_env=given.api_key_env, key_env_fallbacks=())
        return resolved

    def on(self, client: ApiClient) -> dict[str, SecondModel]:
        """Each role on ``client`` (the dry run's, which keeps the first request)."""
        return {role: self._model(role, client) for role in self.roles}

    def live(self, sink: InteractionSink | None, client: ApiClient | None = None
             ) -> dict[str, SecondModel]:
        """Each role on the endpoint's live client (or ``client``), its exchanges into
        ``sink``."""
        client = client or self.runtime._live_client(self.endpoint)
        return {role: self._model(role, client, sink) for role in self.roles}

    def replayed(self, scrubber: Scrubber, live_judge: bool, client: ApiClient | None = None
                 ) -> RoleModels:
        """Each role answered from the cassette by a replayer of its own; the judge live
        when ``live_judge``, on ``client`` (else the endpoint's shared live client), its
        exchanges kept to be written (``RoleModels.rejudged``) when the session writes
        verdicts."""
        found = RoleModels()
        for role in self.roles:
            if role == "judge" and live_judge:
                writes = self.runtime.settings.writes_verdicts
                found.rejudged = [] if writes else None
                found.models[role] = self._model(
                    role, client or self.runtime._live_client(self.endpoint),
                    found.rejudged.append if found.rejudged is not None else None)
                continue
            self._replayed(found, role, scrubber)
        # A role the case no longer has whose exchanges the cassette holds: left unused.
        recorded = {interaction.role for interaction in self.cassette.interactions
                    if interaction.role != "model"}
        for role in sorted(recorded - {"model", *self.roles}):
            if not (role == "judge" and live_judge):
                found.verdicts.append(Replayer(self.cassette, scrubber, role=role).unused)
        return found

    def _replayed(self, found: RoleModels, role: str, scrubber: Scrubber) -> None:
        """``role`` answered from the cassette by a replayer of its own."""
        replayer = Replayer(self.cassette, scrubber, self.runtime.settings.replay_speed,
                            role=role)
        client = self.runtime._replay_client(self.endpoint, replayer)
        found.models[role] = self._model(role, client)
        found.verdicts.append(replayer.unused)
        found.clients.append(client)

    def _model(self, role: str, client: ApiClient, sink: InteractionSink | None = None
               ) -> SecondModel:
        from .wire import wire_api

        api_key = self.endpoint.api_key()
        return SecondModel(role, self.model, wire_api(self.api), client, self.cassette.api,
                           api_key=api_key, sink=sink,
                           scrubber=self.runtime._scrubber(self.endpoint, api_key))


def _client_config(endpoint: ResolvedEndpoint) -> ClientConfig:
    return ClientConfig(endpoint.base_url, endpoint.headers, endpoint.timeout_s,
                        endpoint.retries, endpoint.limits)


@functools.lru_cache(maxsize=64)
def _replay_config(endpoint: ResolvedEndpoint, *, instant: bool) -> ClientConfig:
    """The client settings of replayed cases, once per endpoint: ``instant`` replay has no
    deadline to watch."""
    config = _client_config(endpoint)
    if instant:
        config = replace(config, limits=replace(config.limits, deadline_s=math.inf))
    return config


def _first_of(*verdicts: Callable[[], str | None]) -> Callable[[], str | None]:
    """One verdict: the first of ``verdicts`` that finds fault."""
    def verdict() -> str | None:
        return next((found for found in (each() for each in verdicts) if found), None)
    return verdict


def _printable(text: str) -> str:
    """``text`` with control characters escaped (``\\x00``, ``\\n``): the re-record hint goes
    into messages and into the cassette's first line, a YAML comment that a line break in a
    model or file name would end."""
    if text.isprintable():
        return text
    return "".join(char if char.isprintable() else repr(char)[1:-1] for char in text)


_CANCEL_WAIT_S = 5.0
"""How long cancelled cases get to unwind (close their streams) when the session ends."""


async def _cancel_other_tasks() -> None:
    """Cancel every task on this loop but the current one, and wait for them to end."""
    others = asyncio.all_tasks() - {asyncio.current_task()}
    for task in others:
        task.cancel()
    if others:
        await asyncio.wait(others, timeout=_CANCEL_WAIT_S)


async def _no_sleep(seconds: float) -> None:
    """Replay waits for nothing, retries' back-off included."""
