"""The session's agent cases: the proxy, the environment, one case at a time.

An agent case's own code finds the model APIs through the environment, which is the
whole process's: so agent cases run one at a time, on pytest's own thread, never started
ahead, and the environment points at the proxy only while one runs. The proxy itself
(``transport/proxy.py``) is started with the first agent case and kept to the session's
end, so its URLs stay valid for clients an agent module built at import time.
"""

from __future__ import annotations

import asyncio
import itertools
import os
import sys
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path

from .apis import AGENT, API_NAMES, DEFAULT_API, REGISTRY
from .casefile.cache import KeptParses
from .casefile.schema import Endpoint
from .judge.second import RoleModels
from .netguard import Guard, guard_for, remedy
from .records import CaseResult
from .run.agent import AgentContext, run_agent_case
from .run.agent_thread import AgentThread
from .run.runner import CaseRun
from .scrubbing import Scrubber, endpoint_secrets, environment_secrets
from .settings import Mode, Settings
from .transport.agent_forward import LiveTap, Upstream
from .transport.agent_replay import ReplayTap
from .transport.agent_tap import PLACEHOLDER_KEY, Tap
from .transport.cassette import Cassette
from .transport.errors import ReplayError
from .transport.proxy import ProxyServer
from .transport.ratelimit import RequestPacer

TRACING_OFF = {"OPENAI_AGENTS_DISABLE_TRACING": "1"}
"""openai-agents posts traces to a fixed host of OpenAI's, which no base URL moves."""

CASE_REMEDY = remedy("the URL the factory's toolbench parameter gives (toolbench.base_url(api))")
"""What to change, as an agent case that went past the proxy says it."""


class AgentCases:
    """Runs the session's agent cases through its one proxy."""

    def __init__(self, settings: Settings, kept: KeptParses | None = None,
                 pacer_for: Callable[[str], RequestPacer | None] = lambda base_url: None,
                 scrubber: Callable[[Iterable[str]], Scrubber] = Scrubber) -> None:
        self.settings = settings
        self.kept = kept
        self.pacer_for = pacer_for
        """The rate limits of the endpoint at a base URL, shared with the session's other
        live requests to it."""
        self.scrubber = scrubber
        """The session's one scrubber for given secrets (``SessionRuntime.scrubber``): the
        environment's credentials masked too, and in the logs from then on."""
        self._proxy: ProxyServer | None = None
        self._threads = itertools.count(1)
        self._thread = self._new_thread()
        """Where plain agents run (``run/agent_thread.py``); a new one after an abandon."""

    @property
    def proxy(self) -> ProxyServer:
        """The session's proxy, started when first asked for."""
        if self._proxy is None:
            self._proxy = ProxyServer()
            self._proxy.start()
        return self._proxy

    def _new_thread(self) -> AgentThread:
        return AgentThread(f"toolbench-agent-{next(self._threads)}")

    def close(self) -> None:
        self._thread.close()
        if self._proxy is not None:
            self._proxy.close()
            self._proxy = None

    async def execute(self, case_run: CaseRun, path: Path, shown: str, hint: str,
                      replaying: bool, seconds: Callable[[Cassette], RoleModels] | None = None
                      ) -> CaseResult:
        """Run ``case_run``: from its cassette at ``path`` (``replaying``), else live,
        recorded unless the mode is live; ``seconds`` sets up its judge."""
        case = case_run.loaded.case
        try:
            cassette = self.cassette(path, shown, hint, replaying)
        except ReplayError as error:
            return case_run.not_run(str(error))
        endpoint = self.settings.endpoint_for(case.endpoint)
        second = seconds(cassette) if seconds is not None else RoleModels()
        with _process_kept() as blocked, \
                self.attached(cassette, replaying, case.endpoint, whole=True,
                              name=case_run.nodeid) as tap:
            guard = self.guard("the agent", CASE_REMEDY)
            verdicts = [*([tap.unused] if isinstance(tap, ReplayTap) else []),
                        *second.verdicts, guard.take]
            # The judge's and simulated user's credentials (judge.endpoint.api_key_env names
            # its variable, whatever its name) are the case's secrets too.
            tap.learn(secret for model in second.models.values()
                      for secret in model.scrubber.secrets)
            context = AgentContext(
                tap, lambda api: self.proxy.base_url(api, tap.run), lambda: self._abandon(tap),
                lambda: self.proxy.drop(tap.connections),
                stage_timeout_s=endpoint.limits.deadline_s,
                runs=self.settings.repeat or (case.repeat.runs if case.repeat else 1),
                match_timeout_s=self.settings.match_timeout_s,
                verdict=lambda: next(filter(None, (each() for each in verdicts)), None),
                judge=second.models.get("judge"), simulator=second.models.get("simulator"),
                run_faults=self.settings.fault_plan(), thread=self._thread,
                guard=guard)
            try:
                result = await run_agent_case(case_run, context)
            finally:
                for client in second.clients:
                    await client.aclose()
        if blocked:  # put back, but the case's own code broke the session's imports
            said = (f"the agent set sys.modules entries to None ({', '.join(blocked)}),"
                    " which blocks every later import of them in the process it shares with"
                    " the session; they were put back as they were")
            result.error = said if result.error is None else f"{result.error}; {said}"
        self.keep(tap, failed=not result.passed,
                  lost=result.endpoint_failed or bool(guard.escapes))
        return result

    def guard(self, who: str, remedy: str) -> Guard:
        """A socket guard for one case or test: ``who``'s code may connect to the proxy
        and to the hosts ``--toolbench-allow-connect`` names, nowhere else
        (``netguard.py``)."""
        return guard_for(self.proxy.port, self.settings.allow_connect, who, remedy)

    def cassette(self, path: Path, shown: str, hint: str, replaying: bool) -> Cassette:
        """The cassette at ``path``: loaded to replay (ReplayError: it cannot be), else an
        empty one to record into."""
        if replaying:
            return Cassette.load(path, hint, shown, AGENT, self.kept)
        return Cassette(path, rerecord_hint=hint, shown=shown, api=AGENT)

    @contextmanager
    def importing(self) -> Iterator[None]:
        """The environment an agent module is imported in at collection: every SDK's base
        URL variable at the proxy (which refuses requests until a case runs)."""
        with _environment({**self.proxy.environment(), **TRACING_OFF, **_placeholder_keys()},
                          whole=False):
            yield

    @contextmanager
    def attached(self, cassette: Cassette, replaying: bool, endpoint: Endpoint,
                 whole: bool = False, name: str = "") -> Iterator[Tap]:
        """The proxy answering from ``cassette`` (``replaying``) or forwarding to the APIs
        ``endpoint`` resolves to, and the environment pointing every SDK at it, while the
        block runs; ``whole``: the whole environment is put back after (an agent case's
        code may change any of it), else the variables set (a test's own changes stay
        its own)."""
        # Resolved before the environment points at the proxy: OPENAI_BASE_URL is one of
        # the places an endpoint's base URL comes from.
        upstreams = {api: self._upstream(endpoint, api) for api in API_NAMES}
        # The environment's credentials as the case starts (a test's own included), before
        # the placeholder keys are set; what the agent sends as credentials is added.
        scrubber = self.scrubber((*environment_secrets(os.environ), *(
            secret for upstream in upstreams.values() for secret in
            endpoint_secrets(upstream.api_key, upstream.headers, upstream.base_url))))
        recording = not replaying and self.settings.mode in (Mode.RECORD, Mode.MISSING)
        tap: Tap = (ReplayTap(cassette, scrubber, self.settings.replay_speed, self.scrubber,
                              upstreams[DEFAULT_API].limits) if replaying
                    else LiveTap(cassette, scrubber, upstreams, recording, self.scrubber))
        proxy = self.proxy
        tap.run = proxy.attach(tap, name)  # its own URLs: what comes on them is its own
        try:
            with _environment({**proxy.environment(tap.run), **TRACING_OFF,
                               **_placeholder_keys()},
                              whole):
                yield tap
        finally:
            proxy.attach(None)
            tap.close()
            if isinstance(tap, LiveTap):
                asyncio.run_coroutine_threadsafe(tap.aclose(), proxy.loop).result(10)

    def late_requests(self) -> dict[str, int]:
        """Requests refused since the last call for coming after their case run ended, by
        the name of that run (``ProxyServer.late_requests``)."""
        return self._proxy.late_requests() if self._proxy is not None else {}

    def keep(self, tap: Tap, failed: bool, lost: bool = False) -> None:
        """Save what ``tap`` recorded, unless the recording is not whole (``lost``, or
        ``Tap.whole`` says so for a run that ``failed``, or not): the old cassette stays,
        as a case of the plugin's own loop keeps it."""
        if isinstance(tap, LiveTap) and tap.recording and not lost and tap.whole(failed):
            tap.keep_held()
            tap.cassette.save()

    def _upstream(self, case_endpoint: Endpoint, api: str) -> Upstream:
        endpoint = self.settings.endpoint_for(case_endpoint, api)
        return Upstream(endpoint.base_url, endpoint.api_key(), endpoint.headers,
                        endpoint.timeout_s, endpoint.limits, self.pacer_for(endpoint.base_url))

    def _abandon(self, tap: Tap) -> None:
        """An agent left running: its case's tap refuses it, its connections are cut, its
        thread is stopped at its next Python step and the session goes on with another."""
        tap.abandoned = True
        tap.close()
        if self._proxy is not None:
            self._proxy.drop(tap.connections)
        self._thread.stop()
        self._thread = self._new_thread()


def _placeholder_keys() -> dict[str, str]:
    """A key for each API whose variables hold none, so SDK clients can be built."""
    return {row.key_envs[0]: PLACEHOLDER_KEY for row in REGISTRY.values()
            if not any(os.environ.get(name) for name in row.key_envs)}


@contextmanager
def _process_kept() -> Iterator[list[str]]:
    """The working directory, ``sys.path`` and ``sys.modules`` put back as they were when
    the block ends, as the environment is: an agent case's code may change any of them,
    and the session (its reports, the next case) goes on in the same process. Yields the
    list the block's blocked imports are named in when it ends (a module set to None:
    every later ``import`` of it fails)."""
    cwd, path, modules = os.getcwd(), list(sys.path), dict(sys.modules)
    blocked: list[str] = []
    try:
        yield blocked
    finally:
        try:
            moved = os.getcwd() != cwd
        except OSError:  # the agent removed the directory it moved to
            moved = True
        if moved:
            os.chdir(cwd)
        sys.path[:] = path
        for name, module in list(sys.modules.items()):
            if module is None and name not in modules:
                blocked.append(name)
                del sys.modules[name]
        for name, module in modules.items():
            now = sys.modules.get(name, _GONE)
            if now is not module:
                if now is None:
                    blocked.append(name)
                sys.modules[name] = module
        blocked.sort()


_GONE = object()


@contextmanager
def _environment(wanted: dict[str, str], whole: bool) -> Iterator[None]:
    """``wanted`` set while the block runs; after it, each restored (unset if it was), or
    with ``whole`` the whole environment as it was."""
    before: dict[str, str | None] = (
        {**os.environ} if whole else {name: os.environ.get(name) for name in wanted})
    os.environ.update(wanted)
    try:
        yield
    finally:
        if whole:
            for name in set(os.environ) - set(before):
                os.environ.pop(name, None)
        _put_back(before)


def _put_back(values: dict[str, str | None]) -> None:
    for name, value in values.items():
        if value is None:
            os.environ.pop(name, None)
        elif os.environ.get(name) != value:
            os.environ[name] = value
