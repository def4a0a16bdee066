"""The ``toolbench_agent`` fixture: an agent case's proxy, cassette and checks for a plain
Python test.

While the test runs, the environment points every SDK at the session's proxy, as for an
agent case, and the test's requests are recorded or replayed by the same flags
(``--toolbench-record``, ``--toolbench-live``, replay by default) into one cassette per
test: ``__cassettes__/<test file stem>/<test name>.yaml`` beside the test file (or under
``--toolbench-cassette-dir``). ``check(...)`` takes a stage's expectation keys, validated
as a case file's are, checks them on the requests sent since the previous check (the
judge too: recorded in the test's cassette, replayed, asked again with
``--toolbench-rejudge``), and raises ``AssertionError`` with the failure text a case shows.
Each check is a stage of the test's record, which the summary and the reports show as a
case's (``record_test``).
"""

from __future__ import annotations

import inspect
import os
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from .apis import AGENT, conversation_keys
from .casefile.schema import Endpoint, Expect
from .defaults import CASSETTE_FOLDER
from .faults import Fault, stage_plan
from .judge.second import RoleModels
from .keypaths import KeyPath
from .netguard import Guard, remedy, unguarded
from .records import (
    CaseResult,
    Failure,
    Reply,
    RunResult,
    StageAttempt,
    StageResult,
    ToolCall,
    Turn,
)
from .report.failure import render_failure
from .run.agent import Toolbench, exchange_turn
from .run.agent_talk import judge_stage, said
from .run.check import Outcome, check
from .run.runner import scrubbed
from .run.usercode import UserLoop
from .transport.agent_replay import ReplayTap
from .transport.agent_tap import Exchange, Tap
from .transport.cassette import cassette_file_stem
from .transport.errors import ReplayError
from .wire.base import message_text

if TYPE_CHECKING:
    from .agent_cases import AgentCases
    from .session import SessionRuntime

NOT_HERE = ("state", "probe", "python", "bfcl", "ended", "background_errors")
"""Expectation keys that need what a test has no case for: an agent object the plugin
built (``state``, ``python``), the case's tools (``probe``, ``background_errors``), BFCL's
records (``bfcl``), a simulated user (``ended``)."""

TEST_RESULT = pytest.StashKey[CaseResult]()
"""A ``toolbench_agent`` test's result, on its item once the fixture is torn down: its
checks as stages, for the summary and the reports (``record_test``)."""

_JUDGE_WAIT_S = 600.0
"""The longest a check waits for its judge (each request has its own time limits)."""


class ToolbenchAgent:
    """What the ``toolbench_agent`` fixture gives a test: where its agent's requests went,
    and the stage checks of a case."""

    def __init__(self, tap: Tap, agents: AgentCases, name: str, file: str,
                 match_timeout_s: float, seconds: RoleModels | None = None,
                 run_faults: tuple[Fault, ...] = ()) -> None:
        self._tap = tap
        self._agents = agents
        self._name, self._file = name, file
        self._match_timeout_s = match_timeout_s
        self._seconds = seconds or RoleModels()
        self._judging = UserLoop("toolbench-judge")
        """Where the judge's requests run: a loop of its own, as the test may be running
        one on pytest's thread."""
        self._checked = 0
        self._history: list[dict[str, Any]] = []
        """The conversation so far as the judge reads it: each check's calls and answer."""
        self.stages: list[StageResult] = []
        """Each check so far, as a stage of a case."""
        self._run_faults = run_faults
        """``--toolbench-fault``: planned for the requests up to each check, as a stage's."""
        self._plan_next()

    def _plan_next(self) -> None:
        """The run's faults for the requests until the next check, counted from its first
        as a stage's are."""
        number = len(self.stages) + 1
        self._tap.faults(stage_plan([], [], list(self._run_faults), number - 1,
                                    f"check {number}") or None)

    @property
    def exchanges(self) -> list[Exchange]:
        """Every request the test sent through the proxy so far, and what came of it."""
        return self._tap.since(0)

    @property
    def requests(self) -> list[dict[str, Any]]:
        """The body of every model request so far, in order."""
        return [exchange.request for exchange in self.exchanges if exchange.api is not None]

    @property
    def replies(self) -> list[Reply]:
        """Every model reply so far, read by its API's wire reader."""
        return [exchange.reply for exchange in self.exchanges if exchange.reply is not None]

    @property
    def calls(self) -> list[ToolCall]:
        """Every tool call of every reply so far, in order."""
        return [call for reply in self.replies for call in reply.tool_calls]

    def base_url(self, api: str = "chat") -> str:
        """The proxy's base URL for wire API ``api``, for a client given its URL in code."""
        return Toolbench(lambda api: self._agents.proxy.base_url(api, self._tap.run),
                         None).base_url(api)

    def check(self, answer: str | None = None, /, *, user: str | None = None,
              **expect: Any) -> None:
        """Check a stage's expectations (``tool_calls=...``, ``text=...``, ``requests=...``,
        ``judge=[...]``) on the requests sent since the previous check; ``answer``: what
        the agent returned (``text`` reads it; without it, the last reply's text);
        ``user``: what the agent was asked, for the judge's transcript (without it, the
        last user message of the check's first request). Raises AssertionError with the
        failure text a case shows."""
        __tracebackhide__ = True  # the failure is the test's, at its call of check()
        frame = inspect.currentframe()
        line = frame.f_back.f_lineno if frame is not None and frame.f_back is not None else 0
        parsed = self._expect(expect, line)
        attempt = self._attempt(answer, user, parsed, line)
        self.stages.append(StageResult(attempt.stage, [attempt]))
        self._plan_next()
        if attempt.failures:
            raise AssertionError(render_failure(self._result([self.stages[-1]], line),
                                                self._name))

    def _attempt(self, answer: str | None, user: str | None, expect: Expect,
                 line: int) -> StageAttempt:
        """The requests since the previous check, as a stage's attempt checked by
        ``expect``."""
        exchanges = self._tap.since(self._checked)
        self._checked += len(exchanges)
        attempt = StageAttempt(f"check {len(self.stages) + 1}", 1)
        attempt.turns = [exchange_turn(exchange) for exchange in exchanges
                         if exchange.api is not None]
        attempt.failures = [Failure(exchange.error, (), line) for exchange in exchanges
                            if exchange.error is not None]
        replies = attempt.replies
        attempt.trajectory = calls = [call for reply in replies for call in reply.tool_calls]
        scrubber = self._tap.scrubber  # the agent's answer masked as an agent case's is
        text = (scrubber.text(answer) if answer is not None
                else replies[-1].text if replies else "")
        attempt.failures += check(expect, Outcome(replies, calls, answer=text), ("expect",),
                                  lambda _path: line, self._match_timeout_s)
        asked = user if user is not None else _asked(attempt.turns)
        said(self._history, scrubber.text(asked), text, calls)
        if not attempt.failures and expect.judge:
            self._judge(expect, attempt, line)
        return attempt

    def _judge(self, expect: Expect, attempt: StageAttempt, line: int) -> None:
        """``expect.judge``: each criterion judged over the conversation so far."""
        def fail(attempt: StageAttempt, message: str, path: KeyPath) -> None:
            attempt.failures.append(Failure(message, path, line))

        judge = self._seconds.models.get("judge")
        if judge is None:
            fail(attempt, "judge error: no judge model: name one with --toolbench-judge-model"
                          " or the ini key toolbench_judge_model", ("expect", "judge"))
            return
        with unguarded():  # the plugin's own judge, asked from within the test
            self._judging.submit(judge_stage(judge, expect, attempt, fail, list(self._history))
                                 ).result(_JUDGE_WAIT_S)

    def _expect(self, given: dict[str, Any], line: int) -> Expect:
        from pydantic import ValidationError

        unusable = [key for key in NOT_HERE if key in given]
        if unusable:
            raise TypeError(f"toolbench_agent.check: {', '.join(unusable)} cannot be checked"
                            " here (it needs an agent case); check it in the test itself")
        try:
            return Expect.model_validate(given)
        except ValidationError as error:
            problems = "; ".join(
                f"{'.'.join(map(str, problem['loc'])) or 'expect'}: {problem['msg']}"
                for problem in error.errors())
            raise TypeError(f"{self._file}:{line}: toolbench_agent.check: {problems}"
                            ) from None

    def _result(self, stages: list[StageResult], line: int, error: str | None = None
                ) -> CaseResult:
        return scrubbed(CaseResult(self._name, None, self._file, line, api=AGENT,
                                   runs=[RunResult(1, stages=stages)], error=error),
                        self._tap.scrubber)

    def result(self, line: int, error: str | None) -> CaseResult:
        """The test as a case: each check a stage, and the requests after the last one as
        a stage of their own (``unchecked``), so every request counts in the reports."""
        stages = list(self.stages)
        rest = [exchange_turn(exchange) for exchange in self._tap.since(self._checked)
                if exchange.api is not None]
        if rest:
            stages.append(StageResult("unchecked", [StageAttempt("unchecked", 1, turns=rest)]))
        return self._result(stages, line, error)

    def close(self) -> None:
        """Close the judge's clients, on the loop they ran on."""
        try:
            if self._seconds.clients:
                self._judging.submit(self._seconds.aclose()).result(_JUDGE_WAIT_S)
        finally:
            self._judging.close()

    def unused(self) -> str | None:
        """Recorded exchanges (the agent's, the judge's) the test left unplayed, or None."""
        verdicts = [*([self._tap.unused] if isinstance(self._tap, ReplayTap) else []),
                    *self._seconds.verdicts]
        return next(filter(None, (verdict() for verdict in verdicts)), None)


def agent_fixture(request: pytest.FixtureRequest, runtime: SessionRuntime
                  ) -> Iterator[ToolbenchAgent]:
    """Set up the proxy and cassette for one test, and save or verify it afterwards."""
    agents = runtime.agent_cases
    config = request.config
    settings = agents.settings
    node = request.node
    test_file = Path(str(node.path))
    name = _test_name(node)
    start = Path(config.invocation_params.dir)
    path, shown = _cassette_path(settings.cassette_dir, test_file, name, start)
    replaying = settings.replays(path.exists)
    hint = f"pytest '{node.nodeid}' --toolbench-record"
    line = _test_line(node)
    try:
        cassette = agents.cassette(path, shown, hint, replaying)
    except ReplayError as error:
        node.stash[TEST_RESULT] = CaseResult(name, None, _shown(test_file, start), line,
                                             api=AGENT, runs=[RunResult(1, error=str(error))])
        pytest.fail(str(error), pytrace=False)
    runtime.settle()
    seconds = runtime.fixture_seconds(cassette, replaying)
    with agents.attached(cassette, replaying, Endpoint(), name=node.nodeid) as tap:
        bench = ToolbenchAgent(tap, agents, name, _shown(test_file, start),
                               settings.match_timeout_s, seconds, settings.fault_plan())
        guard = node.stash[_GUARD] = agents.guard(
            "the test", remedy("toolbench_agent.base_url(api)"))
        try:
            yield bench
        finally:
            del node.stash[_GUARD]
            bench.close()
    failed = node.stash.get(_FAILED, False)
    agents.keep(tap, failed=failed, lost=bool(guard.escapes))
    # As a case's: what a test that failed left unplayed is its failure's effect, not a
    # second failure (a teardown error that says to re-record over a regression). A
    # connection past the proxy is the test's failure whatever else happened.
    unused = guard.take() or (None if failed else bench.unused())
    node.stash[TEST_RESULT] = result = bench.result(line, unused)
    seconds.write_verdicts(cassette, result)
    if unused is not None:
        pytest.fail(unused, pytrace=False)


def _asked(turns: list[Turn]) -> str:
    """What the agent was asked, as its first request of a check says: the text of the
    last user message of its conversation, whichever API's shape (chat's and the Messages
    API's ``messages``, Responses ``input``, Gemini ``contents``); "" when none says."""
    request = turns[0].request if turns else {}
    conversation = next((value for key in conversation_keys()
                         if isinstance(value := request.get(key), list)), None)
    if conversation is None:
        given = request.get("input")  # Responses: the input as one string
        return given if isinstance(given, str) else ""
    users = [message for message in conversation
             if isinstance(message, dict) and message.get("role") == "user"]
    if not users:
        return ""
    return message_text(users[-1].get("content", users[-1].get("parts")))


_GUARD = pytest.StashKey[Guard]()
"""On a ``toolbench_agent`` test's item while the fixture is set up: its socket guard."""


@contextmanager
def guarded_call(item: pytest.Item) -> Iterator[None]:
    """A ``toolbench_agent`` test's own body run under its socket guard (``netguard.py``):
    the test itself, not the other fixtures' setup (a server a fixture starts is the
    test's, not agent code)."""
    guard = item.stash.get(_GUARD, None)
    with guard.armed() if guard is not None else nullcontext():
        yield


_OUTCOME = pytest.StashKey[str]()
"""A ``toolbench_agent`` test's outcome so far (its setup's, then its call's), until its
teardown's report carries its record."""


def record_test(item: pytest.Item, call: pytest.CallInfo[None],
                report: pytest.TestReport) -> None:
    """A ``toolbench_agent`` test's reports, as a case item's: its outcome kept from each
    phase; at teardown its record (each check a stage) on the report, for the summary and
    the report files (across pytest-xdist too), and its figures for junitxml."""
    if not (report.passed and _OUTCOME in item.stash):
        item.stash[_OUTCOME] = _outcome(report)
    if call.when == "call":
        # A recording keeps the old cassette when a test that failed met an overloaded or
        # broken server, as a case's does (the fixture's teardown reads it).
        item.stash[_FAILED] = report.failed
        if call.excinfo is not None:
            item.stash[_RAISED] = call.excinfo.exconly().splitlines()[0]
    if call.when == "setup" and report.skipped:  # never runs: reported as a skipped case is
        _attach(item, report, CaseResult(_test_name(item), None, _test_file(item),
                                         _test_line(item), api=AGENT), "skipped")
    if call.when != "teardown" or TEST_RESULT not in item.stash:
        return
    result = item.stash[TEST_RESULT]
    outcome = "failed" if report.failed else item.stash.get(_OUTCOME, "passed")
    why = item.stash.get(_RAISED, None)
    if result.error is None and result.passed and outcome == "failed" and why:
        result.error = why  # the test's own assertion, or what it raised
    figures = list(result.figures())
    report.user_properties.extend(figures)
    item.user_properties.extend(figures)
    _attach(item, report, result, outcome)


def _attach(item: pytest.Item, report: pytest.TestReport, result: CaseResult,
            outcome: str) -> None:
    """``result``'s record on ``report``, when the session reads records."""
    from .settings import records_read

    if records_read(item.config):
        from .report.json_report import CaseRecord, marks_from_keywords

        marks = marks_from_keywords(report.keywords, item.config.getini("markers"))
        report.toolbench = CaseRecord.of(  # type: ignore[attr-defined]
            result, item.nodeid, outcome, marks).to_text()


_FAILED = pytest.StashKey[bool]()
"""On a ``toolbench_agent`` test's item: its call failed."""
_RAISED = pytest.StashKey[str]()
"""What a ``toolbench_agent`` test's call raised, its first line."""


def _outcome(report: pytest.TestReport) -> str:
    if hasattr(report, "wasxfail"):
        return "xpassed" if report.passed else "xfailed"
    return report.outcome


def _test_name(item: pytest.Item) -> str:
    """The test as a case is named: its node id below the file (``Class.test[id]``)."""
    return item.nodeid.split("::", 1)[-1].replace("::", ".")


def _test_line(item: pytest.Item) -> int:
    """The line of the test's ``def`` (1-based)."""
    return (item.location[1] or 0) + 1


def _test_file(item: pytest.Item) -> str:
    """The test's file as messages show it (from where pytest was started)."""
    return _shown(Path(str(item.path)), Path(item.config.invocation_params.dir))


def _cassette_path(cassette_dir: Path | None, test_file: Path, name: str,
                   start: Path) -> tuple[Path, str]:
    folder = (cassette_dir or test_file.parent / CASSETTE_FOLDER) / test_file.stem
    path = folder / f"{cassette_file_stem(name)}.yaml"
    return path, _shown(path, start)


def _shown(path: Path, start: Path) -> str:
    try:
        return os.path.relpath(path, start) if path.is_relative_to(start) else str(path)
    except ValueError:
        return str(path)
