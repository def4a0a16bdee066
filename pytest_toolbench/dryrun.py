"""``--toolbench-dry-run``: each case item's first request, and what the item lacks to run.

Nothing is sent. A case is set up as its run would be (``SessionRuntime.prepare``: its
endpoint, cassette, key and scrubber) and run by the runner itself, on a client whose
transport takes the first request the client hands it and ends the run there
(``FirstRequest``): the request is the one a run would send, built by the case's wire
adapter and the client (URL and query, every header, the canonical body), and it never
reaches a network. A replayed case's MCP servers list their tools from its cassette, as in
replay; a live case's are not started: their tools come from the cassette when it holds a
listing, and their commands are looked up on ``PATH``.

What an item needs and lacks is said in words: an invalid case (a toolbox or ``python:``
tool that does not import), a cassette to replay, a key variable for a service's own API, an
MCP server's command or environment variable, a ``${env.NAME}`` the first stage reads.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx2

from .apis import AGENT
from .casefile.routes import route_table
from .casefile.schema import Case, McpTools
from .faults import Fault, stage_plan
from .keypaths import KeyPath
from .records import CaseResult
from .report.failure import plural
from .run.runner import CaseRun, RunContext, run_case
from .run.toolset import ToolSource
from .scrubbing import SCRUBBED, Scrubber, is_credential, mask_urls
from .session import CaseSetup, SecondModels, SessionRuntime
from .settings import Mode, hosted_service, key_variables
from .transport.cassette import Cassette
from .transport.errors import ReplayError
from .transport.proxy import FAMILIES
from .transport.replay import Replayer

if TYPE_CHECKING:
    from .casefile.schema import Tool


class FirstRequest(Exception):
    """Raised by the dry run's transport with the first request a case's client sends."""

    def __init__(self, request: httpx2.Request, role: str) -> None:
        super().__init__(request.url)
        self.request = request
        self.role = role
        """Whose request: the ``model``'s, or the ``simulator``'s (a simulated user that
        speaks first)."""


def _taking(role: str) -> httpx2.MockTransport:
    """The dry run's transport for ``role``'s client: a request goes no further."""
    def take(request: httpx2.Request) -> httpx2.Response:
        raise FirstRequest(request, role)
    return httpx2.MockTransport(take)


@dataclass(frozen=True)
class ShownRequest:
    """A request as the dry run shows it: credentials masked."""

    method: str
    url: str
    headers: list[tuple[str, str]]
    body: str
    """The canonical body as sent (keys sorted), or indented a key a line."""


@dataclass
class Plan:
    """What one item would do first, and what it lacks to run."""

    nodeid: str
    api: str
    answers: str
    """Where its answers come from: ``the cassette PATH``, or ``URL (live)``."""
    request: ShownRequest | None = None
    missing: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    routes: str | None = None
    """A routed case's routes and bound, in a line; None for a straight case."""
    runs: list[str] = field(default_factory=list)
    """What will run, where no request can be shown (an agent case: its factory, the proxy
    its SDKs are pointed at, the cassette it replays)."""
    faults: list[str] = field(default_factory=list)
    """Its fault plan: each fault of each stage, what it does to which requests."""

    @property
    def ready(self) -> bool:
        return not self.missing


def plan_items(runtime: SessionRuntime, items: list[tuple[CaseRun, str | None]],
               indent: bool = False) -> list[Plan]:
    """The plan of every ``(case run, its problems or None)``, one after another on a loop
    of this thread; ``indent``: bodies a key a line."""
    loop = asyncio.new_event_loop()
    try:
        return [loop.run_until_complete(plan_case(runtime, case_run, invalid, indent))
                for case_run, invalid in items]
    finally:
        loop.close()


async def plan_case(runtime: SessionRuntime, case_run: CaseRun, invalid: str | None,
                    indent: bool = False) -> Plan:
    """What ``case_run`` would send first and what it lacks; ``invalid``: its problems."""
    if invalid is not None:  # "N problems in case file", then one line each
        problems = [line.strip() for line in invalid.splitlines()[1:]] or [invalid]
        return Plan(case_run.nodeid, case_run.api, "",
                    missing=[f"a valid case: {'; '.join(problems)}"])
    replaying = runtime.replays(case_run)
    plan = await _plan_case(runtime, case_run, replaying, indent)
    plan.routes = routes_line(case_run.loaded.case)
    return plan


def routes_line(case: Case) -> str | None:
    """``routes (max_iterations 6): ask: pass → confirm, fail → clarify; ...``; None for
    a case that runs straight."""
    table = route_table(case)
    if not table.routed:
        return None
    stages = "; ".join(f"{name}: " + ", ".join(f"{verdict} → {target}"
                                               for verdict, target in table.edges(index))
                       for index, name in enumerate(table.stages))
    return f"routes (max_iterations {case.max_iterations}): {stages}"


async def _plan_case(runtime: SessionRuntime, case_run: CaseRun, replaying: bool,
                     indent: bool) -> Plan:
    if case_run.api == AGENT:  # its requests are its own code's: none is known before it runs
        return _agent_plan(runtime, case_run, replaying)
    missing: list[str] = []
    try:
        setup = runtime.prepare(case_run, replaying)
        cassette = setup.cassette if replaying else _recorded(setup.cassette, case_run.api)
    except ReplayError as error:  # no cassette to replay: the request is still worth showing
        missing.append(str(error))
        setup, cassette = runtime.prepare(case_run, replaying=False), None
    plan = Plan(case_run.nodeid, case_run.api, _answers(setup, replaying), missing=missing)
    if not replaying:
        _check_key(plan, setup, case_run.api)
    clients = [runtime.local_client(setup.endpoint, _taking("model"))]
    seconds = SecondModels(runtime, case_run, setup.cassette)
    if seconds.roles:  # the judge asks after a reply; a simulated user may speak first
        clients.append(runtime.local_client(seconds.endpoint, _taking("simulator")))
    on_seconds = seconds.on(clients[-1]) if seconds.roles else {}
    context = RunContext(clients[0], api_key=None if replaying else setup.api_key,
                         scrubber=setup.scrubber,
                         mcp=PlannedMcp(replaying, cassette, setup.scrubber, plan),
                         judge=on_seconds.get("judge"), simulator=on_seconds.get("simulator"),
                         inject=False)
    plan.faults = fault_plan_lines(case_run, runtime.settings.fault_plan())
    try:
        result = await run_case(case_run, context)
    except FirstRequest as first:
        plan.request = shown_request(first.request, setup.scrubber, indent)
        if first.role != "model":
            plan.notes.append(f"the first request is the {first.role}'s")
        if replaying and cassette is not None:
            await _check_replays(first, cassette, setup.scrubber, plan)
    except Exception as error:  # noqa: BLE001 - the case's own code (a tool source) broke
        plan.missing.append(f"a run that starts: {type(error).__name__}: {error}")
    else:
        plan.missing += _why_nothing_sent(result)
    finally:
        for client in clients:
            await client.aclose()
    return plan


def _agent_plan(runtime: SessionRuntime, case_run: CaseRun, replaying: bool) -> Plan:
    """An agent case: its agent's code sends its own requests, through the proxy, once it
    runs, so none is known before; what it needs to run."""
    path, shown, hint = runtime.cassette_location(case_run)
    agent = case_run.loaded.case.agent
    plan = Plan(case_run.nodeid, AGENT, f"the cassette {shown}" if replaying
                else "the APIs its requests name, through the plugin's proxy (live)")
    plan.notes.append("an agent case: its agent builds its own requests, known once"
                      f" {agent.python if agent else 'its factory'} runs (it imports)")
    case = case_run.loaded.case
    if agent is not None:
        given = ", ".join([*agent.init, "model"] if case_run.model else list(agent.init))
        stages = ", ".join(stage.name for stage in case.stages)
        plan.runs.append(f"the factory {agent.python}({given}) makes the agent, once a run;"
                         " each stage's user text is sent to it"
                         f" ({_count(len(case.stages), 'stage')}: {stages})")
    variables = ", ".join(name for family in FAMILIES.values() for name in family.env)
    plan.runs.append(f"its SDKs are pointed at the plugin's loopback proxy: {variables}"
                     " (and toolbench.base_url(), for a factory that takes toolbench)")
    plan.faults = fault_plan_lines(case_run, runtime.settings.fault_plan())
    if replaying:
        try:
            cassette = runtime.agent_cases.cassette(path, shown, hint, replaying=True)
        except ReplayError as error:
            plan.missing.append(str(error))
        else:
            plan.runs.append(f"the proxy answers from {shown}:"
                             f" {_count(len(cassette.interactions), 'recorded exchange')}, in"
                             " order; nothing reaches the network")
    else:
        recording = runtime.settings.mode in (Mode.RECORD, Mode.MISSING)
        plan.runs.append("the proxy forwards each request to its API's service (the case's"
                         " endpoint, if it names one)"
                         + (f" and records it in {shown}" if recording else "; nothing is"
                            " recorded"))
    return plan


def fault_plan_lines(case_run: CaseRun, run_faults: tuple[Fault, ...]) -> list[str]:
    """Each stage's faults in words: ``stage ask: fault 1 of stage ask: status 429 at
    request 1``."""
    case = case_run.loaded.case
    return [f"stage {stage.name}: {line}" for index, stage in enumerate(case.stages)
            for line in stage_plan(stage.faults, case.faults, list(run_faults), index,
                                   stage.name).lines()]


async def _check_replays(first: FirstRequest, cassette: Cassette, scrubber: Scrubber,
                         plan: Plan) -> None:
    """Whether the cassette answers the first request as replay matches it (the route,
    the body, among its role's exchanges): a case changed since it was recorded lacks a
    cassette that fits."""
    try:
        await Replayer(cassette, scrubber, role=first.role).handle(first.request)
    except ReplayError as error:
        plan.missing.append(str(error))


def _answers(setup: CaseSetup, replaying: bool) -> str:
    if replaying:
        return f"the cassette {setup.cassette.shown}"
    return f"{mask_urls(setup.endpoint.base_url)} (live)"


def _check_key(plan: Plan, setup: CaseSetup, api: str) -> None:
    """A live case without a key: missing for the service's own API, which needs one; a
    note elsewhere (a local server needs none)."""
    if setup.api_key is not None:
        return
    variables = key_variables(setup.endpoint)
    if hosted_service(setup.endpoint, api):  # the run stops there (settings.missing_key)
        plan.missing.append(f"a key: set {variables}")
    else:
        plan.notes.append(f"sent without a key ({variables} not set)")


def _recorded(empty: Cassette, api: str) -> Cassette | None:
    """A live case's cassette as it is on disk, if it reads (its MCP servers' listings)."""
    try:
        return Cassette.load(empty.path, shown=empty.shown, api=api)
    except ReplayError:
        return None


def _why_nothing_sent(result: CaseResult) -> list[str]:
    """The failures that ended a run before its first request (an unset ``${env.NAME}``, a
    toolbox whose ``__init__`` raised, an MCP listing the cassette lacks)."""
    found = [f"{failure.message} (line {failure.line})" if failure.line else failure.message
             for run in result.runs for stage in run.stages for attempt in stage.attempts
             for failure in attempt.failures]
    found += [run.error for run in result.runs if run.error]
    return found or ["the run ended before its first request"]


def shown_request(request: httpx2.Request, scrubber: Scrubber, indent: bool = False
                  ) -> ShownRequest:
    """``request`` with its credentials masked: credential headers, the endpoint's secrets
    wherever they appear, credentials in the URL. The body as sent (the canonical JSON:
    keys sorted, no spaces), or ``indent``ed a key a line."""
    headers = [(name, _masked_header(name, value, scrubber))
               for name, value in request.headers.items()]
    body = request.content.decode("utf-8", errors="replace")
    if indent:
        body = json.dumps(json.loads(body), indent=2, sort_keys=True, ensure_ascii=False)
    return ShownRequest(request.method, scrubber.text(mask_urls(str(request.url))), headers,
                        scrubber.text(body))


def _masked_header(name: str, value: str, scrubber: Scrubber) -> str:
    """A credential header's value masked whole, its scheme kept (``Bearer <scrubbed>``)."""
    if not is_credential(name):
        return scrubber.text(value)
    scheme, space, _credential = value.partition(" ")
    return f"{scheme} {SCRUBBED}" if space and scheme.isalpha() else SCRUBBED


class PlannedMcp:
    """A case's MCP servers as the dry run sees them: none is started. Replayed, the tools
    come from the cassette as in replay; live, from the cassette when it holds a listing,
    each server's command looked up on ``PATH``."""

    def __init__(self, replaying: bool, cassette: Cassette | None, scrubber: Scrubber,
                 plan: Plan) -> None:
        """``cassette``: the one replayed, or the one on disk for a live case (None: none
        that reads)."""
        self._replaying, self._cassette = replaying, cassette
        self._scrubber, self._plan = scrubber, plan
        self.notes: list[str] = []

    async def source(self, case_run: CaseRun, index: int, entry: McpTools) -> ToolSource:
        from .mcp.provider import resolved
        from .mcp.source import McpSource, RecordedCalls

        path: KeyPath = ("tools", index)
        server = resolved(case_run.loaded, index, entry)  # an unset variable: a fault
        if not self._replaying:
            self._check_server(server.name, server.command, server.cwd, server.url)
        cassette = self._cassette
        if not self._replaying and not _lists(cassette, entry.mcp):
            cassette = None  # recorded before the case used this server
        if cassette is None:  # replayed: the missing cassette is said already
            if not self._replaying:
                self._plan.notes.append(
                    f"MCP server {entry.mcp!r}: its tools are not in the request (it lists"
                    " them when it starts; no cassette holds a listing)")
            return _Unlisted(entry.mcp)
        if not self._replaying:
            self._plan.notes.append(f"MCP server {entry.mcp!r}: its tools as"
                                    f" {cassette.shown} recorded them")
        recorded = RecordedCalls(cassette.mcp, cassette.shown, cassette.rerecord_hint,
                                 self._scrubber)
        return McpSource(entry.mcp, recorded.listing(entry.mcp, path), entry, path,
                         recorded.caller(entry.mcp, path))

    def _check_server(self, name: str, command: tuple[str, ...] | None, cwd: str | None,
                      url: str | None) -> None:
        if command is None:
            self._plan.notes.append(f"MCP server {name!r} at {mask_urls(url or '')}"
                                    " (not contacted)")
        elif not _runnable(command[0], cwd):
            self._plan.missing.append(f"MCP server {name!r}: its command {command[0]!r} is"
                                      " not found (on PATH, or as a file)")


def _lists(cassette: Cassette | None, server: str) -> bool:
    """Whether ``cassette`` holds a ``tools/list`` of ``server``."""
    return cassette is not None and any(exchange.server == server
                                        and exchange.method == "tools/list"
                                        for exchange in cassette.mcp)


def _runnable(program: str, cwd: str | None) -> bool:
    """Whether ``program`` would start: found on ``PATH``, or a file (relative: to ``cwd``)."""
    if os.sep in program or (os.altsep and os.altsep in program):
        return os.access(Path(cwd or ".") / program, os.X_OK)
    return shutil.which(program) is not None


class _Unlisted:
    """A live MCP server's tools before it starts: none known (a ``ToolSource``)."""

    def __init__(self, server: str) -> None:
        self.server = server
        self.owner = f"MCP server {server!r}"
        self.tools: list[Tool] = []

    async def call(self, call: Any) -> Any:
        raise AssertionError("a dry run calls no tool")  # it stops at the first request

    async def aclose(self) -> None:
        """Nothing was started."""


# -- what the terminal shows ----------------------------------------------------------------

def render(plan: Plan, write: Callable[[str], None], quiet: bool) -> None:
    """One line an item (``quiet``), else its request in full under its verdict."""
    verdict = "ready" if plan.ready else "missing: " + "; ".join(
        need.splitlines()[0] for need in plan.missing)
    request = plan.request
    where = f"{plan.api} {request.method} {request.url}" if request else plan.api
    if quiet:
        faults = f" ({plural(len(plan.faults), 'fault')} planned)" if plan.faults else ""
        write(f"{plan.nodeid}: {where}: {verdict}{faults}")
        return
    write(f"{plan.nodeid}: {'ready' if plan.ready else 'NOT READY'}")
    if plan.answers:
        write(f"    answers from {plan.answers}")
    if plan.routes:
        write(f"    {plan.routes}")
    for need in plan.missing:
        write(_indented(f"missing: {need}"))
    for note in plan.notes:
        write(f"    note: {note}")
    for line in plan.runs:
        write(f"    runs: {line}")
    for fault in plan.faults:
        write(f"    injected fault: {fault}")
    if request is None:
        if not plan.runs:
            write("    no request (see what is missing)")
        return
    write(f"    {request.method} {request.url}  ({plan.api})")
    for name, value in request.headers:
        write(f"    {name}: {value}")
    write(_indented(request.body))


def _count(number: int, noun: str) -> str:
    return f"{number} {noun}{'' if number == 1 else 's'}"


def _indented(text: str) -> str:
    return "\n".join(f"    {line}" for line in text.splitlines())


def tally(plans: list[Plan], others: int) -> str:
    """``toolbench dry run: 18 items ready, 2 missing something; nothing was sent``."""
    ready = sum(plan.ready for plan in plans)
    parts = [f"{ready} {'item' if ready == 1 else 'items'} ready"]
    if len(plans) > ready:
        parts.append(f"{len(plans) - ready} missing something")
    if others:
        parts.append(f"{others} other {'test' if others == 1 else 'tests'} not run")
    return f"toolbench dry run: {', '.join(parts)}; nothing was sent"
