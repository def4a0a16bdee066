"""Runs a case: its stages along its routes, each through the state machine, with the agent
loop.

A case is one conversation. A stage appends its messages, sends, and (with ``run_tools``)
answers tool calls and sends again until the model stops calling tools or ``max_turns``.
"""

from __future__ import annotations

import dataclasses
import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from ..apis import case_label
from ..casefile.load import LoadedCase
from ..casefile.names import names_checked, names_known_at_load, offered_at_load, unoffered
from ..casefile.params import api_params, stage_params
from ..casefile.routes import is_routed
from ..casefile.schema import (
    AgentExpect,
    AllowedTools,
    BfclTools,
    Expect,
    McpTools,
    Stage,
    Toolbox,
    ToolChoiceFunction,
)
from ..faults import Fault, FaultPlan, stage_plan
from ..judge.second import SecondModel
from ..keypaths import KeyPath
from ..matchers.limits import DEFAULT_LIMIT_S as DEFAULT_MATCH_TIMEOUT_S
from ..records import (
    CASE_END,
    BackgroundTask,
    CaseResult,
    Failure,
    Interaction,
    Judgement,
    Reply,
    RunResult,
    StageAttempt,
    StageResult,
    ToolCall,
    ToolRun,
    Turn,
)
from ..scrubbing import Scrubber
from ..transport.client import ApiClient, InteractionSink
from ..transport.errors import ReplayError, TransportError
from ..wire import RequestParts, WireApi, wire_api
from .background import task_error
from .check import Outcome, check, check_agent
from .interpolate import InterpolationError, capture, interpolate, resolve_expect
from .machine import CaseRoute, StageMachine, StageState
from .outcome_check import python_check, stage_outcome
from .progressive import ProgressiveRuns
from .toolbox import ToolboxSource
from .tools import CaseTools, tool_message
from .toolset import Anchor, Restore, Toolset, ToolSource, ToolSourceFault, WorldState
from .usercode import UserLoop


@dataclass(frozen=True)
class CaseRun:
    """One case against one model: what an item asks the session to run, and the one place
    that builds the case's result."""

    loaded: LoadedCase
    model: str | None
    nodeid: str
    display_file: str
    """The case file as messages show it: relative to where pytest was started."""
    api: str = "chat"
    """The wire API the run speaks (``chat``, ``responses``, ``messages``)."""
    row: str | None = None
    """The id of the case's ``parametrize`` row the run fills in (None: it has none)."""

    @property
    def label(self) -> str:
        """``name``, ``name[model]``, ``name[model-api]`` or ``name[api]``: the item's name,
        and its cassette's. Chat, the default API, adds nothing, so ids and cassettes of
        chat cases stay as they were before a case could speak another API."""
        return case_label(self.loaded.outline.name, self.model, self.api, self.row)

    @property
    def case_name(self) -> str:
        """The case's name, with its row's id when it has one (``name[Paris]``): what
        reports name the case by, beside the model and the API."""
        name = self.loaded.outline.name
        return name if self.row is None else f"{name}[{self.row}]"

    def row_values(self) -> dict[str, Any]:
        """The values of the run's ``parametrize`` row, by name (none: no row)."""
        table = self.loaded.case.parametrize
        if self.row is None or table is None:
            return {}
        return dict(table.row(self.row))

    @property
    def wire(self) -> WireApi:
        return wire_api(self.api)

    def result(self, runs: list[RunResult] | None = None, error: str | None = None,
               notes: list[str] | None = None) -> CaseResult:
        """The case's result: no runs (skipped), its runs, or one run that could not start."""
        valid = not self.loaded.problems()
        repeat = self.loaded.case.repeat if valid else None
        return CaseResult(
            case=self.case_name, model=self.model, api=self.api,
            file=self.display_file, line=self.loaded.document.start_line, runs=runs or [],
            min_pass_rate=repeat.min_pass_rate if repeat else 1.0, error=error,
            notes=list(notes or []), routed=valid and is_routed(self.loaded.case))

    def not_run(self, reason: str) -> CaseResult:
        """The result of a run that could not start, or that the plugin broke off."""
        return self.result([RunResult(1, error=reason)])


class McpProvider(Protocol):
    """Where a run gets its MCP servers' tools: started live (and recorded), or replayed."""

    notes: list[str]
    """What the case should be told of its servers (one started again), as they open."""

    async def source(self, case_run: CaseRun, index: int, entry: McpTools) -> ToolSource:
        """The tools of ``entry`` (``tools[index]`` of the case) as a source; raise
        ``ToolSourceFault`` when the server cannot be reached or lacks an included tool."""


@dataclass
class RunContext:
    """What the session plugs a case run into: where requests go, what becomes of the
    exchanges, and how often and how long. Every dependency of the run is here."""

    client: ApiClient
    api_key: str | None = None
    sink: InteractionSink | None = None
    """Recording: every exchange goes here (the cassette's list)."""
    verdict: Callable[[], str | None] | None = None
    """Asked once every run is over: a failure of the whole case that no pass rate can
    outvote (replay: recorded answers the case left unused), or None."""
    runs: int = 1
    match_timeout_s: float = DEFAULT_MATCH_TIMEOUT_S
    """How long a stage's expectations may take to check."""
    scrubber: Scrubber = field(default_factory=Scrubber)
    """Masks the endpoint's credentials in every turn, tool run and exchange as it is made."""
    mcp: McpProvider | None = None
    """Opens the case's MCP servers' tools; ``None``: a case with MCP tools cannot run."""
    user_loop: UserLoop = field(default_factory=UserLoop)
    """Where the case's async user code runs (toolbox methods, ``python`` tools), every
    stage of the case on the same loop; closed when the case ends (``run_case``)."""
    judge: SecondModel | None = None
    """Judges ``expect.judge`` criteria; ``None``: the case has none."""
    simulator: SecondModel | None = None
    """Plays ``simulate_user``; ``None``: the case has none."""
    run_faults: tuple[Fault, ...] = ()
    """``--toolbench-fault``: faults for every stage (those the transport injects)."""
    inject: bool = True
    """Whether the faults are injected (the dry run shows them, and sends nothing)."""


@dataclass
class Conversation:
    """The messages so far, tool calls still waiting for results, and captured values."""

    messages: list[dict[str, Any]] = field(default_factory=list)
    pending: list[ToolCall] = field(default_factory=list)
    variables: dict[str, Any] = field(default_factory=dict)
    native: dict[int, list[dict[str, Any]]] = field(default_factory=dict)
    """The API's own turn of each assistant message that came from a reply, by the
    message's index: the adapter sends it back as it came (``RequestParts.native``)."""
    failed_results: set[int] = field(default_factory=set)
    """The indexes of the tool messages whose run failed (``RequestParts.failed_results``)."""

    def add_reply(self, reply: Reply) -> None:
        """The reply as the next assistant message, its native turn kept beside it."""
        if reply.native_turn is not None:
            self.native[len(self.messages)] = reply.native_turn
        self.messages.append(reply.to_message())

    def add_tool_runs(self, runs: list[ToolRun]) -> None:
        """The runs' tool messages, each failed one noted by its index."""
        for run in runs:
            if run.failed:
                self.failed_results.add(len(self.messages))
            self.messages.append(tool_message(run))

    def snapshot(self) -> Conversation:
        """A copy to go back to. Messages are never changed once appended (every change
        appends a new one), so copying the lists is enough."""
        return Conversation(list(self.messages), list(self.pending), dict(self.variables),
                            dict(self.native), set(self.failed_results))


async def run_case(case_run: CaseRun, ctx: RunContext) -> CaseResult:
    """Run every run of the case with its tools, opened once for all of them and closed when
    the case ends (fresh MCP servers per case, unless a server is session-scoped)."""
    return scrubbed(await _run_case(case_run, ctx), ctx.scrubber)


async def _run_case(case_run: CaseRun, ctx: RunContext) -> CaseResult:
    try:
        notes = ctx.mcp.notes if ctx.mcp is not None else []
        try:
            toolset = await open_toolset(case_run, ctx)
        except ToolSourceFault as fault:
            return case_run.result([_setup_failed(case_run, fault)], notes=notes)
        unknown = _unoffered_names(case_run, toolset)
        if unknown is not None:
            await toolset.aclose()
            return case_run.result([unknown], notes=notes)
        try:
            runs = [await run_once(case_run, ctx, number, toolset)
                    for number in range(1, ctx.runs + 1)]
        finally:
            await toolset.tasks.cancel()  # a run broken off leaves no task behind
            await toolset.aclose()
    finally:
        ctx.user_loop.close()
    return case_run.result(runs, error=unplayed(ctx.verdict, runs), notes=notes)


def unplayed(verdict: Callable[[], str | None] | None, runs: list[RunResult]) -> str | None:
    """What ``verdict`` finds left unplayed in the cassette, asked only when every run
    passed. A run that failed ended at its failure, and the exchanges recorded after it
    were never asked for: said first ("the case sent 1 request, but ... holds 3: the case
    changed since it was recorded; re-record it"), that consequence would hide the real
    failure and invite re-recording over a regression. Nor does a faulted run's: its
    agent (or its retries) may give up before the recording's end."""
    if verdict is None or not all(run.passed for run in runs) or any(
            turn.fault is not None for run in runs for turn in run.turns):
        return None
    return verdict()


def scrubbed(result: CaseResult, scrubber: Scrubber) -> CaseResult:
    """``result`` with the secrets masked where the run did not mask them as it went: the
    failures (an expectation may hold ``${env.OPENAI_API_KEY}``), the toolboxes' states
    (a toolbox may keep a key), errors and notes. Turns and tool runs were masked as made."""
    if scrubber.pattern is None:
        return result
    for run in result.runs:
        run.error = scrubber.data(run.error)
        for stage in run.stages:
            for attempt in stage.attempts:
                attempt.failures = scrubber.data(attempt.failures)
                attempt.state = scrubber.data(attempt.state)
                attempt.state_errors = scrubber.data(attempt.state_errors)
    result.error, result.notes = scrubber.data(result.error), scrubber.data(result.notes)
    return result


async def open_toolset(case_run: CaseRun, ctx: RunContext) -> Toolset:
    """The case's own tools, then each ``{mcp: NAME}``, ``{toolbox: ...}`` and ``{bfcl: ...}``
    entry's, in the order of ``tools``."""
    case = case_run.loaded.case
    sources: list[ToolSource] = [CaseTools(case, ctx.user_loop)]
    paths: list[KeyPath] = [("tools",)]
    try:
        for index, entry in enumerate(case.tools):
            if isinstance(entry, McpTools):
                if ctx.mcp is None:
                    raise ToolSourceFault("MCP servers cannot be used here", ("tools", index))
                sources.append(await ctx.mcp.source(case_run, index, entry))
            elif isinstance(entry, Toolbox):
                sources.append(ToolboxSource(entry, ("tools", index), ctx.user_loop))
            elif isinstance(entry, BfclTools):
                from .bfcl import BfclSource  # bfcl-eval: only for cases that use it

                sources.append(BfclSource(entry.bfcl, ("tools", index)))
            else:
                continue
            paths.append(("tools", index))
        return Toolset(sources, paths)
    except BaseException:
        for source in reversed(sources):
            await source.aclose()
        raise


def _unoffered_names(case_run: CaseRun, toolset: Toolset) -> RunResult | None:
    """A case with an MCP server's tools, whose names were not known at load: the tool
    names it refers to that no tool offers, failed before the first request (None: all
    are offered)."""
    case = case_run.loaded.case
    if names_known_at_load(case) or not names_checked(case):
        return None
    offered = [*offered_at_load(case), *(tool.name for tool in toolset.tools)]
    failures = [Failure(message, path, case_run.loaded.line_at(path))
                for path, message in unoffered(case, offered)]
    if not failures:
        return None
    first = case.stages[0].name
    return RunResult(1, stages=[StageResult(first, [StageAttempt(first, 1, failures=failures)])])


def _setup_failed(case_run: CaseRun, fault: ToolSourceFault, number: int = 1) -> RunResult:
    """A run that could not start, its failure at the line of what declared the tools."""
    first = case_run.loaded.case.stages[0].name
    failure = Failure(fault.message, fault.path, case_run.loaded.line_at(fault.path))
    attempt = StageAttempt(first, 1, failures=[failure])
    return RunResult(number, stages=[StageResult(first, [attempt])])


async def run_once(case_run: CaseRun, ctx: RunContext, number: int,
                   toolset: Toolset) -> RunResult:
    case = case_run.loaded.case
    try:
        await toolset.begin_run()  # fresh toolbox instances, BFCL's chains, for every run
    except ToolSourceFault as fault:
        return _setup_failed(case_run, fault, number)
    except Exception as error:  # noqa: BLE001 - a tool source's own code failed to start
        return _setup_failed(case_run, ToolSourceFault(
            f"the tools could not start: {type(error).__name__}: {error}", ("tools",)), number)
    try:
        variables = case_run.row_values()
    except KeyError:  # its file changed between collection and now
        return _setup_failed(case_run, ToolSourceFault(
            f"row {case_run.row!r} is no longer one of the case's table: collect again",
            ("parametrize",)), number)
    run = RunResult(number)
    conversation = Conversation(variables=variables)
    if case.system:
        conversation.messages.append({"role": "system", "content": case.system})
    route = CaseRoute(case)
    with StageMachine() as machine:
        # An unrouted failure ends the run: later stages build on its conversation.
        while (index := route.next_stage()) is not None:
            stage_result = await run_stage(case_run, ctx, conversation, index,
                                           case.stages[index], machine, toolset, number)
            run.stages.append(stage_result)
            route.took(stage_result)
    background = await _end_background(case_run, toolset, run)
    if route.exhausted:
        run.stages.append(exhausted(case_run, route))
    elif case.expect is not None and run.passed:
        run.stages.append(await check_case_end(case_run, ctx, run, toolset, case.expect,
                                               conversation.variables))
    if background:
        if not run.stages or run.stages[-1].name != CASE_END:
            run.stages.append(StageResult(CASE_END, [StageAttempt(CASE_END, 1)]))
        run.stages[-1].attempts[-1].failures += background
    return run


async def _end_background(case_run: CaseRun, toolset: Toolset, run: RunResult
                          ) -> list[Failure]:
    """The run's end: every background task waited for (each within its time limit, past
    which it is cancelled), all of them into the run's record; the failures of those no
    stage judged, judged by the case's ``expect.background_errors`` if it has one."""
    await toolset.tasks.wait()
    run.background = list(toolset.tasks.records)
    failed = toolset.tasks.unjudged_failures()
    if not failed:
        return []
    expect = case_run.loaded.case.expect
    return background_failures(failed, expect, ("expect",), ("tools",),
                               case_run.loaded.line_at)


def background_failures(failed: list[BackgroundTask], expect: AgentExpect | None,
                        base: KeyPath, plain: KeyPath, line_of: Callable[[KeyPath], int]
                        ) -> list[Failure]:
    """Failed background tasks against ``expect.background_errors`` (their errors, each
    ``NAME: ERROR``); without it, each task's failure at ``plain``."""
    if expect is not None and "background_errors" in expect.model_fields_set:
        errors = [task_error(task) for task in failed]
        return [Failure(f"background tasks: {mismatch.message}", path, line_of(path),
                        mismatch.expected, mismatch.actual)
                for mismatch in expect.background_errors.match(errors, ("background_errors",))
                for path in [(*base, *mismatch.path)]]
    return [Failure(f"background task {task.task} ({task.name}) failed: {task.error}", plain,
                    line_of(plain)) for task in failed]


def exhausted(case_run: CaseRun, route: CaseRoute) -> StageResult:
    """The run stopped at ``max_iterations``: its failure, with the path so far, reported
    with the case-level checks."""
    path = ("max_iterations",)
    failure = Failure(route.exhausted_message(), path, case_run.loaded.line_at(path))
    return StageResult(CASE_END, [StageAttempt(CASE_END, 1, failures=[failure])])


async def check_case_end(case_run: CaseRun, ctx: RunContext, run: RunResult,
                         toolset: Toolset, expect: AgentExpect,
                         variables: dict[str, Any]) -> StageResult:
    """The case's own ``expect`` (``${...}`` filled in from what the stages captured):
    state and probes now, every call of the run as the trajectory."""
    attempt = StageAttempt(CASE_END, 1)
    attempt.trajectory = [call for stage in run.stages
                          for call in stage.attempts[-1].trajectory]
    line_of = case_run.loaded.line_at
    try:
        if case_run.loaded.document.may_interpolate:
            expect = resolve_expect(expect, variables)
        world, attempt.probes = await observe(toolset, expect, ctx.scrubber)
    except ToolSourceFault as fault:
        attempt.failures.append(Failure(fault.message, fault.path, line_of(fault.path)))
        return StageResult(CASE_END, [attempt])
    except InterpolationError as error:
        attempt.failures.append(Failure(error.message, error.path, line_of(error.path)))
        return StageResult(CASE_END, [attempt])
    _keep_state(attempt, world, toolset)
    attempt.failures = check_agent(expect, attempt.trajectory, world, attempt.probes,
                                   ("expect",), case_run.loaded.line_at,
                                   ctx.match_timeout_s, run.path)
    return StageResult(CASE_END, [attempt])


async def run_stage(case_run: CaseRun, ctx: RunContext, conversation: Conversation,
                    index: int, stage: Stage, machine: StageMachine,
                    toolset: Toolset, run_number: int = 1) -> StageResult:
    result = StageResult(stage.name)
    attempts = stage.retry.attempts if stage.retry else 1
    before = conversation.snapshot()
    try:
        world_before = await _checkpoint(toolset, attempts > 1)
    except ToolSourceFault as fault:
        return StageResult(stage.name, [_broken_attempt(case_run, stage, 1, fault)])
    machine.begin_stage()
    toolset.begin_stage(stage)
    for number in range(1, attempts + 1):
        if number > 1:
            machine.fire("retry")
            _restore(conversation, before)
            try:
                await world_before()  # a retry starts from the toolboxes' state before it
            except ToolSourceFault as fault:  # the attempts so far are kept, as they ran
                result.attempts.append(_broken_attempt(case_run, stage, number, fault))
                break
        attempt = await StageRunner(case_run, ctx, conversation, index, stage, machine,
                                    toolset, run_number).run(number)
        result.attempts.append(attempt)
        if attempt.passed or not attempt.turns:
            break  # an attempt that sent nothing failed on the case itself: retry can't help
    return result


def _keep_state(attempt: StageAttempt, world: WorldState, toolset: Toolset) -> None:
    """The toolboxes' state into the attempt's record, and why any could not be read."""
    if toolset.stateful:
        attempt.state, attempt.state_errors = world.states, dict(world.errors)


def _broken_attempt(case_run: CaseRun, stage: Stage, number: int,
                    fault: ToolSourceFault) -> StageAttempt:
    """An attempt that could not start: a tool source broke (a state that cannot be put
    back), at the line of what declared it."""
    failure = Failure(fault.message, fault.path, case_run.loaded.line_at(fault.path))
    return StageAttempt(stage.name, number, failures=[failure])


async def _checkpoint(toolset: Toolset, needed: bool) -> Restore:
    """What puts the toolboxes back as they are now; nothing to copy unless ``needed``."""
    return await toolset.checkpoint() if needed and toolset.rewinds else _nothing


async def _nothing() -> None:
    """No state to put back."""


def _restore(conversation: Conversation, before: Conversation) -> None:
    vars(conversation).update(vars(before.snapshot()))  # every field, as snapshot copies them


class StageRunner:
    """One attempt at one stage, driving the state machine from idle to passed or failed."""

    def __init__(self, case_run: CaseRun, ctx: RunContext, conversation: Conversation,
                 index: int, stage: Stage, machine: StageMachine, toolset: Toolset,
                 run_number: int = 1) -> None:
        self.case_run, self.ctx = case_run, ctx
        self.run_number = run_number
        self.toolset = toolset
        self.conversation, self.index = conversation, index
        self.stage = stage
        self.machine = machine
        self.base: tuple[str | int, ...] = ("stages", index, "expect")
        self._resolved: Expect | None = None
        self._stream_end: Anchor | None = None
        """The latest streamed reply's end on the stream's clock, for its tool runs."""
        self.faults: FaultPlan | None = None
        """The faults of the attempt under way (None: none)."""
        self.raised: str | None = None
        """The transport's failure (``ExceptionType: message``) that ended the variant
        under way, when its stage's ``expect.error`` checks it instead of failing."""

    async def run(self, number: int) -> StageAttempt:
        attempt = StageAttempt(self.stage.name, number)
        trail_start = len(self.machine.trail) - 1
        case = self.case_run.loaded.case
        plan = stage_plan(self.stage.faults, case.faults, list(self.ctx.run_faults), self.index,
                          self.stage.name, f"{self.run_number}/{number}")
        self.faults = plan if plan and self.ctx.inject else None
        try:
            await self._run(attempt)
            if attempt.state is None and self.toolset.stateful:  # the loop broke off
                _keep_state(attempt, await self.toolset.snapshot(), self.toolset)
        except InterpolationError as error:
            attempt.failures.append(self._failure(error.message, error.path))
        except ToolSourceFault as fault:  # a tool server broke: the case fails, naming it
            attempt.failures.append(Failure(fault.message, fault.path,
                                            self._line_of(fault.path)))
        finally:
            attempt.trail = self.machine.trail[trail_start:]
        if self.faults is not None:
            attempt.failures += [self._failure(message, path)
                                 for message, path in plan.unselected()]
        return attempt

    async def _run(self, attempt: StageAttempt) -> None:
        # Tool results must follow the assistant message that asked for them, so calls left
        # open by the previous stage are answered first: once, for both variants.
        if self.conversation.pending and not self._stage_sends_tool_messages():
            self.machine.fire("answer_pending")
            attempt.answered_first = await self._answer(self.conversation.pending)
        start = self.conversation.snapshot()
        carried = self.conversation  # the first (streamed) variant carries the conversation on
        variants = [True, False] if self.stage.stream == "both" else [bool(self.stage.stream)]
        world_start = await _checkpoint(self.toolset, len(variants) > 1)
        world_carried: Restore = _nothing
        outcomes: list[Outcome] = []
        try:
            for position, streamed in enumerate(variants):
                if position:
                    self.machine.fire("other_variant")
                    self.conversation = start.snapshot()
                    world_carried = await self.toolset.checkpoint()
                    await world_start()  # the other variant's calls run on the state before
                outcome = await self._run_variant(attempt, streamed)
                if outcome is None:
                    return
                if self.stage.await_background:
                    await self.toolset.tasks.wait()  # so state and probes see what they did
                outcome = await self._observe(attempt, outcome, first=not position)
                if not self._check(attempt, outcome, streamed, len(variants) > 1):
                    return
                outcomes.append(outcome)
        finally:
            self.conversation = carried
            await world_carried()  # and the toolboxes, as the first variant left them
        self._compare(attempt, outcomes)
        self._check_background(attempt)
        await self._python_check(attempt, outcomes[0])
        self._check_sources(attempt)
        await self._judge(attempt)
        self._capture(attempt, outcomes[0])
        self.machine.fire("mismatch" if attempt.failures else "all_hold")

    async def _run_variant(self, attempt: StageAttempt, streamed: bool) -> Outcome | None:
        """The agent loop for one variant, or the simulated conversation; None when the
        stage already failed."""
        if self.stage.simulate_user is not None:
            from .simulate import converse

            return await converse(self, attempt, self.stage.simulate_user, streamed)
        self._append_stage_messages()
        replies: list[Reply] = []
        self.raised, turns_before = None, len(attempt.turns)
        if not await self.agent_loop(attempt, streamed, replies):
            return None
        # Every request counts, its retries (an injected fault's too) with it.
        requests = sum(1 + len(turn.retries) for turn in attempt.turns[turns_before:])
        return Outcome(replies, [call for r in replies for call in r.tool_calls],
                       requests=requests, raised=self.raised)

    async def agent_loop(self, attempt: StageAttempt, streamed: bool,
                         replies: list[Reply]) -> bool:
        """Send, answer the tool calls, send again, until a reply calls none (its replies
        appended to ``replies``); False when the stage failed on the way. With
        ``run_tools: once`` the reply to the first tool results ends it, whatever it asks."""
        sent = 0
        progressive = streamed and self.stage.run_tools == "progressive"
        while True:
            early = ProgressiveRuns(self.toolset) if progressive else None
            turn = await self._send(attempt, streamed, first=not sent, early=early)
            if turn.reply is None:
                await _drop(early)
                return self.raised is not None  # a failure the stage expects is checked
            reply = turn.reply
            replies.append(reply)
            sent += 1
            self.conversation.add_reply(reply)
            self.conversation.pending = list(reply.tool_calls)
            once_over = self.stage.run_tools == "once" and sent > 1
            if not (reply.tool_calls and self.stage.run_tools) or once_over:
                await _drop(early)
                turn.stop_reason = "end_turn"
                # A simulated user answers the agent's turn before anything is checked.
                self.machine.fire("end_turn" if self.stage.simulate_user is None
                                  else "user_turn")
                break
            if sent >= self.stage.max_turns:
                await _drop(early)
                self._stop_at_max_turns(attempt, turn, reply)
                return False
            turn.stop_reason = "tool_use"
            self.machine.fire("tool_use")
            turn.tool_runs = await self._answer(reply.tool_calls, early, self._stream_end)
        return True

    async def _judge(self, attempt: StageAttempt) -> None:
        """``expect.judge``: every criterion judged over the conversation so far, once the
        other expectations held (a stage that failed already needs no verdict)."""
        if attempt.failures or not self.stage.expect.judge:
            return
        expect = self._expect()
        from ..judge.verdicts import judge

        judge_model = self.ctx.judge
        if judge_model is None:
            attempt.failures.append(self._failure(
                "judge error: no judge model configured", ("expect", "judge")))
            return
        for index, criterion in enumerate(expect.criteria):
            judgement, turns = await judge(judge_model, self.conversation.messages,
                                           criterion.criterion, criterion.samples)
            attempt.side_turns += turns
            attempt.judgements.append(judgement)
            if not judgement.passed:
                attempt.failures.append(self._failure(
                    judgement_failure(judgement), ("expect", "judge", index)))

    async def _observe(self, attempt: StageAttempt, outcome: Outcome, first: bool
                       ) -> Outcome:
        """The toolboxes' state once the loop is done, then the probes' calls: what the
        agent's expectations read. The first variant's go into the attempt's record."""
        world, probes = await observe(self.toolset, self._expect(), self.ctx.scrubber)
        if first:
            attempt.trajectory = list(outcome.tool_calls)
            _keep_state(attempt, world, self.toolset)
            attempt.probes = probes
        return dataclasses.replace(outcome, world=world, probes=probes)

    def _stop_at_max_turns(self, attempt: StageAttempt, turn: Turn, reply: Reply) -> None:
        turn.stop_reason = "max_turns"
        self.machine.fire("max_turns")
        names = ", ".join(call.name for call in reply.tool_calls)
        attempt.failures.append(self._failure(
            f"max_turns ({self.stage.max_turns}) reached and the model still calls tools:"
            f" {names}", ("max_turns",)))

    @property
    def simulator(self) -> SecondModel | None:
        """The simulated user of the case, if it has one."""
        return self.ctx.simulator

    def add_user_message(self, text: str) -> None:
        """One user message (a simulated user's) appended to the conversation."""
        self.conversation.messages.append({"role": "user", "content": text})

    def fail(self, attempt: StageAttempt, message: str, path: tuple[str | int, ...]) -> None:
        """The stage fails at ``path`` (below the stage) with ``message``."""
        attempt.failures.append(self._failure(message, path))

    def _append_stage_messages(self) -> None:
        variables = self.conversation.variables
        if self.stage.user is not None:
            content = interpolate(self.stage.user, variables, ("user",))
            self.conversation.messages.append({"role": "user", "content": content})
        for index, message in enumerate(self.stage.messages):
            self.conversation.messages.append(
                interpolate(message, variables, ("messages", index)))

    def _stage_sends_tool_messages(self) -> bool:
        return any(message.get("role") == "tool" for message in self.stage.messages)

    async def _answer(self, calls: list[ToolCall], early: ProgressiveRuns | None = None,
                      anchor: Anchor | None = None) -> list[ToolRun]:
        """Run the tools (those a progressive stream started: awaited), append their
        messages, and go on to sending. ``anchor``: a streamed reply's end, where the runs
        sit on the stream's clock."""
        ran = (await early.runs(calls, anchor or Anchor(0.0, time.perf_counter()))
               if early is not None else await self.toolset.run(calls, anchor))
        runs: list[ToolRun] = self.ctx.scrubber.data(ran)
        self.conversation.add_tool_runs(runs)
        self.conversation.pending = []
        self.machine.fire("send")
        return runs

    async def _send(self, attempt: StageAttempt, streamed: bool, first: bool = True,
                    early: ProgressiveRuns | None = None) -> Turn:
        """One request and its reply; ``early``: run each streamed call as it closes."""
        if self.machine.state in (StageState.IDLE, StageState.SIMULATING):
            self.machine.fire("send")
        body = self._body(streamed, first)
        turn = Turn(request=body, streamed=streamed, progressive=early is not None)
        self._stream_end = None
        started = time.perf_counter()
        injected = len(self.faults.injections) if self.faults is not None else 0
        try:
            pending = await self.ctx.client.open(
                body, wire=self.case_run.wire, stream=streamed, model=self.case_run.model,
                api_key=self.ctx.api_key,
                sink=self._keep if self.ctx.sink is not None else None, faults=self.faults)
            turn.retries = pending.retries
            self.machine.fire("headers")
            turn.reply = await pending.read(None if early is None else early.start)
            stats = turn.reply.stream
            if stats is not None and stats.ended_ms is not None:
                self._stream_end = Anchor(stats.ended_ms, time.perf_counter())
        except TransportError as error:
            turn.error, turn.stop_reason = str(error), "error"
            turn.error_injected = error.injected
            if isinstance(error, ReplayError) and self.faults and self.faults.injections:
                turn.error += f"\n{self.faults.injections[-1].before()}"
            turn.retries = turn.retries or list(error.retries)
            if self._expects_error() and not isinstance(error, ReplayError):
                self.raised = self.ctx.scrubber.text(f"{type(error).__name__}: {error.message}")
                self.machine.fire("expected_error")
            else:
                self.machine.fire("transport_error")
        finally:
            turn.elapsed_ms = (time.perf_counter() - started) * 1000
            if self.faults is not None and self.faults.injections[injected:]:
                # Its attempts' faults (its retries say each); the last one is shown.
                turn.fault = self.faults.injections[-1].record(not turn.error_injected)
        # Scrubbed where it is made: the conversation, the checks, the failure text and the
        # reports only ever see this copy.
        turn = self.ctx.scrubber.turn(turn)
        attempt.turns.append(turn)
        if turn.error is not None and self.raised is None:
            attempt.failures.append(self._failure(turn.error, ()))
        return turn

    def _expects_error(self) -> bool:
        """The stage's ``expect.error`` checks a transport failure (after the retries)."""
        return "error" in self.stage.expect.model_fields_set

    def _keep(self, interaction: Interaction) -> None:
        """While recording (only then is it the client's sink), the client hands over every
        exchange, retried ones too; the cassette keeps them scrubbed."""
        assert self.ctx.sink is not None
        self.ctx.sink(self.ctx.scrubber.interaction(interaction))

    def _body(self, streamed: bool, first: bool = True) -> dict[str, Any]:
        """The request, in the words of the API the case speaks. ``first``: the stage's
        first request; after it, under ``run_tools: once``, a tool choice that forces a call
        is not sent again (it would force another call instead of the answer)."""
        case, stage, api = self.case_run.loaded.case, self.stage, self.case_run.api
        params = {**api_params(case.params, api), **api_params(
            interpolate(stage.params, self.conversation.variables, ("params",)), api)}
        choice = stage.tool_choice
        if not first and stage.run_tools == "once" and forces_a_call(choice):
            choice = None
        return self.case_run.wire.request(RequestParts(
            model=self.case_run.model, messages=list(self.conversation.messages),
            native=dict(self.conversation.native),
            failed_results=frozenset(self.conversation.failed_results),
            tools=self.toolset.tools, tool_choice=choice, params=params,
            stream=streamed))

    def _check(self, attempt: StageAttempt, outcome: Outcome, streamed: bool,
               label: bool) -> bool:
        try:
            failures = check(self._expect(), outcome, self.base, self._line_of,
                             self.ctx.match_timeout_s)
        except InterpolationError as error:
            failures = [self._failure(error.message, error.path)]
        failures.extend(self._parallel_calls(outcome))
        if label:
            variant = "streamed" if streamed else "not streamed"
            for failure in failures:
                failure.message = f"[{variant}] {failure.message}"
        attempt.failures.extend(failures)
        if failures:
            self.machine.fire("mismatch")
        return not failures

    def _expect(self) -> Expect:
        """The stage's expectations with ``${...}`` filled in from what the stages before
        captured (nothing is captured during a stage): resolved once, when first read."""
        if self._resolved is None:
            self._resolved = (
                resolve_expect(self.stage.expect, self.conversation.variables)
                if self.case_run.loaded.document.may_interpolate else self.stage.expect)
        return self._resolved

    def _parallel_calls(self, outcome: Outcome) -> list[Failure]:
        """``parallel_tool_calls: false`` asked the server for one call a reply at most."""
        asked, path = stage_params(self.case_run.loaded.case, self.index,
                                   self.case_run.api).get("parallel_tool_calls", (None, ()))
        if asked is not False:
            return []
        return [Failure(f"parallel_tool_calls is false, yet one reply made {len(reply.tool_calls)}"
                        f" tool calls: {', '.join(call.name for call in reply.tool_calls)}",
                        path, self._line_of(path))
                for reply in outcome.replies if len(reply.tool_calls) > 1]

    def _compare(self, attempt: StageAttempt, outcomes: list[Outcome]) -> None:
        """``stream: both``: the streamed and the plain reply must say the same."""
        if len(outcomes) < 2:
            return
        streamed, plain = (_comparable(outcome) for outcome in outcomes)
        for key in streamed:
            if streamed[key] != plain[key]:
                attempt.failures.append(Failure(
                    f"streamed and non-streamed replies differ in {key}",
                    (*self.base[:-1], "stream"), self._line_of(("stages", self.index, "stream")),
                    expected=plain[key], actual=streamed[key]))

    async def _python_check(self, attempt: StageAttempt, outcome: Outcome) -> None:
        """``expect.python``: the team's own check of the stage (no agent object here)."""
        python = self.stage.expect.python
        if python is None or attempt.failures:
            return
        record = stage_outcome(self.stage.name, outcome,
                               [turn.request for turn in attempt.turns])
        failures = await python_check(python, record, None, (*self.base, "python"),
                                      self._line_of, self.ctx.client.config.limits.deadline_s,
                                      None)
        attempt.failures.extend(failures)

    def _check_background(self, attempt: StageAttempt) -> None:
        """A stage that waited for the background tools judges those that failed."""
        expect = self._expect()
        if not (self.stage.await_background or "background_errors" in expect.model_fields_set):
            return
        attempt.failures += background_failures(
            self.toolset.tasks.unjudged_failures(), expect, self.base,
            ("stages", self.index, "await_background"), self._line_of)

    def _check_sources(self, attempt: StageAttempt) -> None:
        """What the tool sources find wrong with the stage (BFCL's turn check)."""
        if attempt.failures:
            return
        expect = self._expect()
        stage = self.stage if expect is self.stage.expect else \
            self.stage.model_copy(update={"expect": expect})
        for found in self.toolset.end_stage(stage):
            failure = self._failure(found.message, found.path)
            failure.expected, failure.actual = found.expected, found.actual
            attempt.failures.append(failure)

    def _capture(self, attempt: StageAttempt, outcome: Outcome) -> None:
        if attempt.failures or not self.stage.capture:
            return
        try:
            self.conversation.variables.update(
                capture(self.stage.capture, outcome.reply, outcome.tool_calls))
        except InterpolationError as error:
            attempt.failures.append(self._failure(error.message, error.path))

    def _failure(self, message: str, path: tuple[str | int, ...]) -> Failure:
        full = ("stages", self.index, *path)
        return Failure(message, full, self._line_of(full))

    def _line_of(self, path: tuple[str | int, ...]) -> int:
        return self.case_run.loaded.line_at(path)


async def _drop(early: ProgressiveRuns | None) -> None:
    """Calls a progressive stream started whose answers will not be sent: let them end."""
    if early is not None:
        await early.drop()


def forces_a_call(choice: str | ToolChoiceFunction | AllowedTools | None) -> bool:
    """Whether a stage's ``tool_choice`` makes the model call a tool: ``required``, a
    named tool, or ``allowed_tools`` in mode ``required``."""
    if isinstance(choice, AllowedTools):
        return choice.allowed_tools.mode == "required"
    return choice == "required" or isinstance(choice, ToolChoiceFunction)


async def observe(toolset: Toolset, expect: AgentExpect, scrubber: Scrubber
                  ) -> tuple[WorldState, list[ToolRun]]:
    """The toolboxes' state, then the runs of ``expect.probe``'s calls, one at a time in
    order, through the toolset as the model's calls go (an MCP server's are recorded and
    replayed with the model's)."""
    # Masked before it is checked: a failure cuts a long value, and a cut secret would no
    # longer be found whole to mask.
    world: WorldState = scrubber.data(await toolset.snapshot())
    probes: list[ToolRun] = []
    for index, probe in enumerate(expect.probe or []):
        arguments = probe.call.arguments
        call = ToolCall(probe.call.name, json.dumps(arguments), f"probe_{index}", arguments)
        probes += scrubber.data(await toolset.run([call]))
    return world, probes


def _comparable(outcome: Outcome) -> dict[str, Any]:
    reply: Reply = outcome.reply
    return {
        "text": reply.text,
        "reasoning": reply.reasoning,
        "finish_reason": reply.finish_reason,
        "tool_calls": [{"name": c.name, "arguments": c.arguments} for c in outcome.tool_calls],
    }


def judgement_failure(judgement: Judgement) -> str:
    """Why a criterion failed: the criterion, the verdict (and split), each sample's
    reasoning or judge error, the judge model and the template's version."""
    head = "judge error" if judgement.errors else "judge says fail"
    lines = [(f"{head}: {judgement.criterion!r}: {judgement.verdict}"
              f" (judge {judgement.model}, {judgement.template})")]
    many = len(judgement.samples) > 1
    for number, sample in enumerate(judgement.samples, 1):
        label = f"sample {number}: " if many else ""
        said = (f"judge error: {sample.error}" if sample.error is not None
                else f"{sample.verdict}: {sample.reasoning}")
        lines.append(f"  {label}{said}")
    return "\n".join(lines)
