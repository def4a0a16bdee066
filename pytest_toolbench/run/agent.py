"""Runs an agent case: the team's own agent, stage by stage, judged by what it sent.

Each run of the case (each repeat) calls the factory once (``agent.python`` with ``init``,
``model=`` when the case names one and ``toolbench=`` when it takes them) for a fresh
agent; each stage calls the agent once with its ``user`` text. Every call into the team's
code goes through ``run/usercode.py``, within the stage's time limit: a plain agent on
the session's agent thread (``agent_thread.py``) with no event loop running, an async one
(and every stage of its case) on one ``UserLoop``. Meanwhile its requests go through the proxy to the case's ``Tap``, which forwards
and records them or replays them; the stage's exchanges, read by their APIs' wire readers,
are its turns, and the stage's expectations are checked on them as on the plugin's own
loop's (``check.Outcome`` with the agent's answer).
"""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field
from typing import Any, Protocol

from pydantic_core import PydanticSerializationError, to_jsonable_python

from ..casefile.schema import AGENT_PARAMETERS, AgentExpect, Stage
from ..casefile.toolbox import STATE_METHOD
from ..faults import Fault, FaultPlan, stage_plan
from ..judge.second import SecondModel
from ..keypaths import KeyPath
from ..netguard import Guard
from ..records import (
    CASE_END,
    CaseResult,
    Failure,
    RunResult,
    StageAttempt,
    StageResult,
    ToolCall,
    Turn,
)
from ..scrubbing import Scrubber
from ..transport.agent_tap import Exchange
from .agent_talk import calls_of, converse, judge_stage, said
from .agent_thread import AgentThread
from .check import Outcome, check, check_agent
from .interpolate import InterpolationError, capture, interpolate, resolve_expect
from .machine import CaseRoute
from .outcome_check import python_check, stage_outcome
from .runner import CaseRun, exhausted, scrubbed, unplayed
from .toolset import ToolFailed, WorldState
from .usercode import ThreadRunner, UserCodeFailed, UserLoop, call_user


class AgentTraffic(Protocol):
    """The case's side of the proxy, as a run sees it (``transport.agent_tap.Tap``)."""

    def mark(self) -> int:
        """Where the exchanges of what comes next begin."""

    def since(self, start: int) -> list[Exchange]:
        """The exchanges since ``start``, once those under way have ended."""

    @property
    def scrubber(self) -> Scrubber:
        """The case's scrubber: the session's secrets and the credentials the agent sent
        so far (``SessionRuntime.scrubber``)."""

    def faults(self, plan: FaultPlan | None) -> None:
        """The faults of the stage attempt under way (None: none)."""


@dataclass
class AgentContext:
    """What the session plugs an agent case's run into."""

    traffic: AgentTraffic
    base_url: Callable[[str], str]
    """The proxy's base URL for a wire API (``toolbench.base_url``)."""
    abandon: Callable[[], None]
    """Called when an agent is left running past its stage's time limit: the proxy
    refuses whatever it sends from then on."""
    hang_up: Callable[[], None]
    """Called when a run is over: the proxy closes the connections its agent opened, so
    its clients see them end (and no socket is left for the garbage collector)."""
    stage_timeout_s: float
    runs: int = 1
    match_timeout_s: float = 10.0
    verdict: Callable[[], str | None] | None = None
    """Asked once the runs are over: recorded exchanges left unplayed, or None."""
    judge: SecondModel | None = None
    """Judges ``expect.judge`` criteria; ``None``: the case has none."""
    simulator: SecondModel | None = None
    """Plays ``simulate_user``; ``None``: the case has none."""
    run_faults: tuple[Fault, ...] = ()
    """``--toolbench-fault``: faults for every stage of every case of the run."""
    thread: AgentThread = field(default_factory=lambda: AgentThread("toolbench-agent"))
    """Where plain agents' calls run: the session's one thread for them, so a framework
    that keeps its event loop and clients on its thread (openai-agents' ``run_sync``)
    finds them again at the next stage, run and case."""
    guard: Guard | None = None
    """Armed around every call into the agent: its connections go to the proxy or are
    refused (``netguard.py``); what it refused fails the stage."""


class Toolbench:
    """What an agent factory's ``toolbench`` parameter is given: where its clients must
    send their requests when it does not take its base URLs from the environment."""

    def __init__(self, base_url: Callable[[str], str], model: str | None) -> None:
        self._base_url = base_url
        self.model = model
        """The case's model for this run (None: the case names none)."""

    def base_url(self, api: str = "chat") -> str:
        """The proxy's base URL for wire API ``api`` (``chat``, ``responses``,
        ``messages``, ``gemini``), as the API's SDK takes it."""
        return self._base_url(api)


async def run_agent_case(case_run: CaseRun, ctx: AgentContext) -> CaseResult:
    """Every run of the case; an agent abandoned at its time limit ends the case there."""
    runs: list[RunResult] = []
    for number in range(1, ctx.runs + 1):
        run, abandoned = await AgentRun(case_run, ctx, number).run()
        runs.append(run)
        if abandoned:
            break
    result = case_run.result(runs, error=unplayed(ctx.verdict, runs))
    # As the plugin's own loop does: what the run did not mask as it went (the failures,
    # the agent's state, errors) is masked now, with every credential the agent sent.
    return scrubbed(result, ctx.traffic.scrubber)


class AgentRun:
    """One run of an agent case: a fresh agent, then each stage in order."""

    def __init__(self, case_run: CaseRun, ctx: AgentContext, number: int) -> None:
        self.case_run, self.ctx, self.number = case_run, ctx, number
        self.case = case_run.loaded.case
        assert self.case.agent is not None
        self.spec = self.case.agent
        self.loop: UserLoop | None = None
        self.thread = ctx.thread
        """Where the run's plain calls run (every stage of a plain agent on one thread)."""
        self.agent: Any = None
        self.abandoned = False
        self.variables: dict[str, Any] = {}
        """The run's ``${name}`` values: its ``parametrize`` row's, then what stages capture."""
        self.history: list[dict[str, Any]] = []
        """The conversation so far as the judge reads it: each text the agent was called
        with, its model's tool calls and its answer (stages that passed)."""

    async def run(self) -> tuple[RunResult, bool]:
        run = RunResult(self.number)
        self.loop = UserLoop()
        try:
            built = self._row() or await self._build()
            route = CaseRoute(self.case)
            while (index := route.next_stage()) is not None:
                stage = self.case.stages[index]
                if built is not None:  # the factory failed: the first stage says so
                    attempt = StageAttempt(stage.name, 1, failures=[built])
                    run.stages.append(StageResult(stage.name, [attempt]))
                    break
                result = await self._stage(index, stage)
                run.stages.append(result)
                if self.abandoned:
                    break  # the agent is gone: no route can go on with it
                route.took(result)
            if route.exhausted:
                run.stages.append(exhausted(self.case_run, route))
            elif self.case.expect is not None and run.passed:
                run.stages.append(await self._case_end(run, self.case.expect))
        finally:
            await self._hang_up()
        return run, self.abandoned

    async def _hang_up(self) -> None:
        """The agent's own ``aclose()`` or ``close()``, if it has one (its clients'
        connections closed before its loop stops); then the proxy closes whatever
        connections are left, and the loop stops."""
        assert self.loop is not None
        close = getattr(self.agent, "aclose", None) or getattr(self.agent, "close", None)
        if callable(close) and not self.abandoned:
            try:
                with self._guarded():
                    await call_user(_entry(close), timeout_s=self.ctx.stage_timeout_s,
                                    what=f"the agent's {close.__name__}()", loop=self.loop,
                                    thread=self.thread)
            except UserCodeFailed:
                pass  # the run's verdict is in; a close that fails changes none of it
        self.ctx.hang_up()
        self.loop.close()

    def _row(self) -> Failure | None:
        """The values of the run's ``parametrize`` row, or the failure when its table no
        longer has it."""
        try:
            self.variables = self.case_run.row_values()
        except KeyError:  # its file changed between collection and now
            return self._failure(f"row {self.case_run.row!r} is no longer one of the case's"
                                 " table: collect again", ("parametrize",))
        return None

    async def _build(self) -> Failure | None:
        """Call the factory; the failure that stops the run when it cannot."""
        factory = _resolve(self.spec.python)
        try:
            kwargs: dict[str, Any] = interpolate(self.spec.init, self.variables,
                                                 ("agent", "init"))
        except InterpolationError as error:  # an unset ${env.NAME}
            return self._failure(error.message, error.path)
        accepted = _parameters(factory)
        if "model" in accepted and self.case_run.model is not None:  # else its own default
            kwargs["model"] = self.case_run.model
        if "toolbench" in accepted:
            kwargs["toolbench"] = Toolbench(self.ctx.base_url, self.case_run.model)
        started = self.ctx.traffic.mark()
        try:
            with self._guarded():
                self.agent = await call_user(_entry(factory),
                                             timeout_s=self.ctx.stage_timeout_s,
                                             what=f"agent factory {self.spec.python}",
                                             loop=self.loop, thread=self.thread, **kwargs)
        except UserCodeFailed as failed:
            self._abandon_if_overrun(failed)
            return self._failure(self._escaped() or
                                 f"the agent factory {self.spec.python} {_said(failed)}",
                                 ("agent", "python"))
        self.ctx.traffic.since(started)  # a factory's own requests are no stage's
        escaped = self._escaped()
        if escaped is not None:
            return self._failure(escaped, ("agent", "python"))
        if not callable(self.agent):
            return self._failure(f"the agent factory {self.spec.python} returned"
                                 f" {type(self.agent).__name__}, which is not callable: it"
                                 " must return the agent (user text -> reply text)",
                                 ("agent", "python"))
        return None

    async def _stage(self, index: int, stage: Stage) -> StageResult:
        result = StageResult(stage.name)
        attempts = stage.retry.attempts if stage.retry else 1
        for number in range(1, attempts + 1):
            attempt = await self._attempt(index, stage, number)
            result.attempts.append(attempt)
            if attempt.passed or self.abandoned:
                break
        return result

    async def _attempt(self, index: int, stage: Stage, number: int) -> StageAttempt:
        attempt = StageAttempt(stage.name, number)
        history = list(self.history)  # a retry starts from the conversation before it
        started = self.ctx.traffic.mark()
        plan = stage_plan(stage.faults, self.case.faults, list(self.ctx.run_faults), index,
                          stage.name, f"{self.number}/{number}")
        self.ctx.traffic.faults(plan or None)
        try:
            return await self._faulted_attempt(attempt, index, stage, started, history, plan)
        finally:
            self.ctx.traffic.faults(None)

    async def _faulted_attempt(self, attempt: StageAttempt, index: int, stage: Stage,
                               started: int, history: list[dict[str, Any]], plan: FaultPlan
                               ) -> StageAttempt:
        """The attempt, its requests under ``plan``."""
        base: KeyPath = ("stages", index, "expect")
        if stage.simulate_user is not None:
            answer = await converse(self.ctx.simulator, stage.simulate_user, attempt,
                                    lambda text: self._asked(attempt, index, text),
                                    self._fail_at(index), history)
        else:
            try:
                text = interpolate(stage.user, self.variables, ("user",))
            except InterpolationError as error:
                attempt.failures.append(self._failure(error.message,
                                                      ("stages", index, *error.path)))
                return attempt
            answer, calls = await self._asked(attempt, index, text)
            if isinstance(answer, str):
                said(history, text, answer, calls)
        exchanges = self.ctx.traffic.since(started)
        model = [exchange for exchange in exchanges if exchange.api is not None]
        attempt.turns = [exchange_turn(exchange) for exchange in model]
        # What the proxy could not do comes first: an agent's failure is mostly its effect;
        # a connection that went past the proxy, before that.
        escaped = self._escaped()
        attempt.failures[:0] = [
            *([self._failure(escaped, ("stages", index))] if escaped is not None else []),
            *(self._failure(exchange.error, ("stages", index))
              for exchange in exchanges if exchange.error is not None)]
        attempt.failures += [self._failure(message, path) for message, path in plan.unselected()]
        # A reply a fault changed, cut or stood in for is not the model's, nor one the
        # agent gave up on while a fault held it back: what the stage checks is what the
        # model said to the agent (its requests count them all).
        replies = [turn.reply for turn, exchange in zip(attempt.turns, model)
                   if turn.reply is not None and _the_models(exchange)]
        calls = [call for reply in replies for call in reply.tool_calls]
        attempt.trajectory = calls
        raised = answer if isinstance(answer, Raised) else None
        if attempt.failures or not isinstance(answer, (str, Raised)):
            return attempt
        outcome = Outcome(replies, calls, await self._world(stage.expect, base, attempt),
                          answer=answer if isinstance(answer, str) else "",
                          ended=attempt.ended, requests=len(attempt.turns),
                          raised=raised.message if raised is not None else None)
        try:
            expect = (resolve_expect(stage.expect, self.variables)
                      if self.case_run.loaded.document.may_interpolate else stage.expect)
        except InterpolationError as error:
            attempt.failures.append(self._failure(error.message, ("stages", index,
                                                                  *error.path)))
            return attempt
        attempt.failures += check(expect, outcome, base, self._line_of,
                                  self.ctx.match_timeout_s)
        if expect.python is not None:
            record = stage_outcome(stage.name, outcome, [turn.request for turn in attempt.turns])
            attempt.failures += await python_check(
                expect.python, record, self.agent, (*base, "python"), self._line_of,
                self.ctx.stage_timeout_s, self.loop)
        if not attempt.failures and stage.expect.judge:
            await judge_stage(self.ctx.judge, stage.expect, attempt, self._fail_at(index), history)
        if not attempt.failures:
            self.history = history
        if not attempt.failures and stage.capture:
            try:
                # ``text`` is what the agent returned, as the expectations read it.
                answered = dataclasses.replace(outcome.reply, text=outcome.text)
                self.variables.update(capture(stage.capture, answered, calls))
            except InterpolationError as error:
                attempt.failures.append(self._failure(error.message,
                                                      ("stages", index, *error.path)))
        return attempt

    async def _asked(self, attempt: StageAttempt, index: int, text: str
                     ) -> tuple[Any, list[ToolCall]]:
        """One call of the agent, and the tool calls its model requests made meanwhile."""
        started = self.ctx.traffic.mark()
        answer = await self._ask(attempt, index, text)
        return answer, calls_of(self.ctx.traffic.since(started))

    def _fail_at(self, index: int) -> Callable[[StageAttempt, str, KeyPath], None]:
        """What fails an attempt of stage ``index`` at a path below the stage."""
        def fail(attempt: StageAttempt, message: str, path: KeyPath) -> None:
            attempt.failures.append(self._failure(message, ("stages", index, *path)))
        return fail

    async def _ask(self, attempt: StageAttempt, index: int, text: str) -> Any:
        """Call the agent with the stage's text; what it returned, or None when it failed
        (the failure noted in ``attempt``)."""
        started, refused = self.ctx.traffic.mark(), self._refused()
        try:
            with self._guarded():
                answer = await call_user(_entry(self.agent), text,
                                         timeout_s=self.ctx.stage_timeout_s,
                                         what=f"agent {self.spec.python}", loop=self.loop,
                                         thread=self.thread)
        except UserCodeFailed as failed:
            self._abandon_if_overrun(failed)
            if _expects_error(self.case.stages[index]) and not failed.overran:
                return Raised(failed.message)  # what expect.error matches
            # Sent nothing, and not refused by the guard (whose own failure says where the
            # connection went and what to change): it never reached the proxy.
            unheard = (failed.cannot_connect and self._refused() == refused
                       and not self.ctx.traffic.since(started))
            attempt.failures.append(self._failure(
                f"the agent {_said(failed, NEVER_REACHED if unheard else '')}",
                ("stages", index, "user")))
            return None
        if _expects_error(self.case.stages[index]):
            attempt.failures.append(self._failure(
                f"the agent returned {_quoted(answer)}, but expect.error says it must raise",
                ("stages", index, "expect", "error")))
            return None
        if not isinstance(answer, str):
            attempt.failures.append(self._failure(
                f"the agent returned {type(answer).__name__}, not str: an agent returns"
                " its reply's text", ("stages", index, "user")))
            return answer
        # Masked as a model's reply is: an echoed key reaches no check, judge or report.
        return self.ctx.traffic.scrubber.text(answer)

    def _abandon_if_overrun(self, failed: UserCodeFailed) -> None:
        """An agent past its time limit is left running: the proxy refuses it from now on,
        the case ends with this run, and its thread is stopped at its next Python step."""
        if failed.overran:
            self.abandoned = True
            self.ctx.abandon()

    async def _world(self, expect: AgentExpect, base: KeyPath, attempt: StageAttempt
                     ) -> WorldState:
        """The agent's state, when ``expect.state`` asks for it."""
        if "state" not in expect.model_fields_set:
            return WorldState()
        try:
            with self._guarded():
                state = await read_state(self.agent, self.ctx.stage_timeout_s, self.loop,
                                         self.thread)
        except ToolFailed as failed:
            return WorldState(errors={"agent": str(failed)})
        # Masked before it is checked, as a toolbox's state is: a failure may cut a value.
        state = self.ctx.traffic.scrubber.data(state)
        attempt.state = {"agent": state}
        return WorldState(states=state)

    async def _case_end(self, run: RunResult, expect: AgentExpect) -> StageResult:
        attempt = StageAttempt(CASE_END, 1)
        attempt.trajectory = [call for stage in run.stages
                              for call in stage.attempts[-1].trajectory]
        try:
            if self.case_run.loaded.document.may_interpolate:
                expect = resolve_expect(expect, self.variables)
        except InterpolationError as error:
            attempt.failures.append(self._failure(error.message, error.path))
            return StageResult(CASE_END, [attempt])
        world = await self._world(expect, ("expect",), attempt)
        attempt.failures = check_agent(expect, attempt.trajectory, world, [], ("expect",),
                                       self._line_of, self.ctx.match_timeout_s, run.path)
        return StageResult(CASE_END, [attempt])

    def _guarded(self) -> AbstractContextManager[None]:
        """The agent's connections guarded while the block runs (``netguard.py``)."""
        return self.ctx.guard.armed() if self.ctx.guard is not None else nullcontext()

    def _refused(self) -> int:
        """How many hosts the guard has refused the agent so far."""
        return len(self.ctx.guard.escapes) if self.ctx.guard is not None else 0

    def _escaped(self) -> str | None:
        """What the guard refused the agent since last asked, as a failure says it."""
        return self.ctx.guard.take() if self.ctx.guard is not None else None

    def _failure(self, message: str, path: KeyPath) -> Failure:
        return Failure(message, path, self._line_of(path))

    def _line_of(self, path: KeyPath) -> int:
        return self.case_run.loaded.line_at(path)


def _is_json(value: Any) -> bool:
    try:
        to_jsonable_python(value)
    except (PydanticSerializationError, ValueError, TypeError, RecursionError):
        return False
    return True


def exchange_turn(exchange: Exchange) -> Turn:
    """A model exchange as a stage's turn: what the transcript and reports show."""
    injection = exchange.injection
    return Turn(request=exchange.request, streamed=exchange.streamed, reply=exchange.reply,
                error=exchange.error, elapsed_ms=exchange.elapsed_ms,
                stop_reason="error" if exchange.error is not None else None,
                fault=(injection.record(exchange.delivered) if injection is not None
                       else None))


@dataclass(frozen=True)
class Raised:
    """What an agent raised, when its stage's ``expect.error`` says it must."""

    message: str
    """``ExceptionType: message``."""


def _expects_error(stage: Stage) -> bool:
    return "error" in stage.expect.model_fields_set


def _the_models(exchange: Exchange) -> bool:
    """Whether the agent got the model's own reply: no injected fault stood in for it, cut
    or changed it, and the agent did not give up on it while one held it back (a delay or
    a stall leaves it as the model gave it)."""
    injection = exchange.injection
    return injection is None or (exchange.delivered
                                 and injection.fault.kind in ("delay", "stall_s"))


def _quoted(answer: Any) -> str:
    text = repr(answer)
    return text if len(text) <= 200 else text[:200] + "..."


NEVER_REACHED = (
    "; it sent no request to the plugin's proxy, so it never reached it: check that its"
    " client takes its base URL from OPENAI_BASE_URL, ANTHROPIC_BASE_URL or"
    " GOOGLE_GEMINI_BASE_URL (or from the factory's toolbench.base_url()) when it is made,"
    " not a URL of its own")
"""Said after a connection error of an agent that sent the proxy nothing."""


def _said(failed: UserCodeFailed, why: str = "") -> str:
    """``raised ValueError: boom`` (then ``why``) and the user's frames, or ``did not
    finish ...``."""
    if failed.overran:
        return f"{failed.message} (the stage's time limit)"
    frames = f"\n{failed.frames.rstrip()}" if failed.frames.strip() else ""
    return f"raised {failed.message}{why}{frames}"


def _resolve(python: str) -> Callable[..., Any]:
    from ..casefile.schema import resolve_callable

    return resolve_callable(python)  # type: ignore[no-any-return]


def _entry(target: Callable[..., Any]) -> Callable[..., Any]:
    """What ``call_user`` is given for ``target``: an object whose ``__call__`` is async,
    that method (so it runs on the run's loop); anything else as it is (a plain one runs on
    the run's thread)."""
    method = getattr(target, "__call__", None)  # noqa: B004 - which kind of callable
    if not inspect.iscoroutinefunction(target) and inspect.iscoroutinefunction(method):
        return method
    return target


def _parameters(factory: Callable[..., Any]) -> set[str]:
    """Which of the parameters the plugin may pass (``model``, ``toolbench``) the factory
    takes by name."""
    try:
        parameters = inspect.signature(factory).parameters
    except (TypeError, ValueError):
        return set()
    return {name for name in AGENT_PARAMETERS if name in parameters}


async def read_state(agent: Any, timeout_s: float, loop: UserLoop | None,
                     thread: ThreadRunner | None) -> Any:
    """The agent's state as JSON data, read as a toolbox's is: what its ``state()``
    returns, else its public attributes; ``ToolFailed`` says why there is none."""
    method = getattr(agent, STATE_METHOD, None)
    if callable(method):
        try:
            found = await call_user(method, timeout_s=timeout_s,
                                    what=f"the agent's {STATE_METHOD}()", loop=loop,
                                    thread=thread)
        except UserCodeFailed as failed:
            raise ToolFailed(f"the agent's {STATE_METHOD}() {_said(failed)}") from None
        what = f"{STATE_METHOD}() of the agent"
    else:
        try:
            attributes = dict(vars(agent))
        except TypeError:  # __slots__, or no __dict__
            attributes = {name: getattr(agent, name) for name in dir(agent)
                          if not name.startswith("_") and not callable(getattr(agent, name))}
        # An agent holds clients and the like beside its state: only what is JSON counts.
        found = {name: value for name, value in attributes.items()
                 if not name.startswith("_") and _is_json(value)}
        what = "the agent's attributes"
    try:
        return to_jsonable_python(found)
    except (PydanticSerializationError, ValueError, TypeError, RecursionError) as exc:
        raise ToolFailed(f"{what} are not JSON: {exc}") from None
