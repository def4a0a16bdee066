"""The ``toolbench_agent`` fixture: an agent case's proxy, cassette and checks for a plain
Python test.

While the test runs, the environment points every SDK at the session's proxy, as for an
agent case, and the test's requests are recorded or replayed by the same flags
(``--toolbench-record``, ``--toolbench-live``, replay by default) into one cassette per
test: ``__cassettes__/<test file stem>/<test name>.yaml`` beside the test file (or under
``--toolbench-cassette-dir``). ``check(...)`` takes a stage's expectation keys, validated
as a case file's are, checks them on the requests sent since the previous check, and
raises ``AssertionError`` with the failure text a case shows.
"""

from __future__ import annotations

import inspect
import os
from collections.abc import Generator, Iterator
from pathlib import Path
from typing import Any

import pytest

from .agent_cases import AgentCases
from .apis import AGENT
from .casefile.schema import Endpoint, Expect
from .defaults import CASSETTE_FOLDER
from .records import CaseResult, Failure, Reply, RunResult, StageAttempt, StageResult, ToolCall
from .report.failure import render_failure
from .run.agent import Toolbench, exchange_turn
from .run.check import Outcome, check
from .run.runner import scrubbed
from .settings import Mode
from .transport.agent_replay import ReplayTap
from .transport.agent_tap import Exchange, Tap
from .transport.cassette import cassette_file_stem
from .transport.errors import ReplayError

_NOT_HERE = ("state", "probe", "python", "bfcl")
"""Expectation keys that need what a test has no case for (an agent object, tools)."""


class ToolbenchAgent:
    """What the ``toolbench_agent`` fixture gives a test: where its agent's requests went,
    and the stage checks of a case."""

    def __init__(self, tap: Tap, agents: AgentCases, name: str, file: str,
                 match_timeout_s: float) -> None:
        self._tap = tap
        self._agents = agents
        self._name, self._file = name, file
        self._match_timeout_s = match_timeout_s
        self._checked = 0
        self._stage = 0

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
        return Toolbench(self._agents.proxy.base_url, None).base_url(api)

    def check(self, answer: str | None = None, /, **expect: Any) -> None:
        """Check a stage's expectations (``tool_calls=...``, ``text=...``, ``requests=...``)
        on the requests sent since the previous check; ``answer``: what the agent returned
        (``text`` reads it; without it, the last reply's text). Raises AssertionError with
        the failure text a case shows."""
        __tracebackhide__ = True  # the failure is the test's, at its call of check()
        frame = inspect.currentframe()
        line = frame.f_back.f_lineno if frame is not None and frame.f_back is not None else 0
        parsed = self._expect(expect, line)
        exchanges = self._tap.since(self._checked)
        self._checked += len(exchanges)
        self._stage += 1
        attempt = StageAttempt(f"check {self._stage}", 1)
        attempt.turns = [exchange_turn(exchange) for exchange in exchanges
                         if exchange.api is not None]
        attempt.failures = [Failure(exchange.error, (), line) for exchange in exchanges
                            if exchange.error is not None]
        replies = attempt.replies
        calls = [call for reply in replies for call in reply.tool_calls]
        scrubber = self._tap.scrubber  # the agent's answer masked as an agent case's is
        text = (scrubber.text(answer) if answer is not None
                else replies[-1].text if replies else "")
        attempt.failures += check(parsed, Outcome(replies, calls, answer=text), ("expect",),
                                  lambda _path: line, self._match_timeout_s)
        if attempt.failures:
            result = scrubbed(CaseResult(self._name, None, self._file, line, api=AGENT, runs=[
                RunResult(1, stages=[StageResult(attempt.stage, [attempt])])]), scrubber)
            raise AssertionError(render_failure(result, self._name))

    def _expect(self, given: dict[str, Any], line: int) -> Expect:
        from pydantic import ValidationError

        unusable = [key for key in _NOT_HERE if key in given]
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


def agent_fixture(request: pytest.FixtureRequest, agents: AgentCases,
                  settle: Any) -> Iterator[ToolbenchAgent]:
    """Set up the proxy and cassette for one test, and save or verify it afterwards."""
    config = request.config
    settings = agents.settings
    node = request.node
    test_file = Path(str(node.path))
    name = node.nodeid.split("::", 1)[-1].replace("::", ".")
    start = Path(config.invocation_params.dir)
    path, shown = _cassette_path(settings.cassette_dir, test_file, name, start)
    replaying = settings.mode is Mode.REPLAY or (settings.mode is Mode.MISSING
                                                  and path.exists())
    hint = f"pytest '{node.nodeid}' --toolbench-record"
    try:
        cassette = agents.cassette(path, shown, hint, replaying)
    except ReplayError as error:
        pytest.fail(str(error), pytrace=False)
    settle()
    _watch_outcomes(config)
    with agents.attached(cassette, replaying, Endpoint()) as tap:
        yield ToolbenchAgent(tap, agents, name, _shown(test_file, start),
                             settings.match_timeout_s)
    agents.keep(tap, failed=node.stash.get(_FAILED, False))
    if isinstance(tap, ReplayTap):
        unused = tap.unused()
        if unused is not None:
            pytest.fail(unused, pytrace=False)


_FAILED = pytest.StashKey[bool]()
"""On a test item: its call failed (the fixture's teardown reads it)."""


class _Outcomes:
    """Notes on each test item whether its call failed: a recording keeps the old cassette
    when a test that failed met an overloaded or broken server, as a case's does."""

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_makereport(self, item: pytest.Item, call: pytest.CallInfo[None]
                                  ) -> Generator[None, pytest.TestReport, pytest.TestReport]:
        report = yield
        if call.when == "call":
            item.stash[_FAILED] = report.failed
        return report


def _watch_outcomes(config: pytest.Config) -> None:
    """Register ``_Outcomes`` once a session, with the first test that uses the fixture."""
    if not config.pluginmanager.has_plugin(_OUTCOMES):
        config.pluginmanager.register(_Outcomes(), _OUTCOMES)


_OUTCOMES = "toolbench-agent-outcomes"


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

