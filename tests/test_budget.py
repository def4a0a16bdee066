"""``--toolbench-max-tokens N``: live cases stop being started once the session's replies
used N tokens; the rest are skipped with that reason, never failed, and the summary says so.
"""

from __future__ import annotations

import json

import pytest
from support.chat_server import ChatServer, completion, json_reply

CASES = 5
TOKENS_PER_CASE = 15  # the loopback server's usage: total_tokens 15


def write_cases(pytester: pytest.Pytester, base_url: str, count: int = CASES) -> None:
    cases = [f"""name: c{number}
endpoint: {{base_url: '{base_url}'}}
stages:
  - name: ask
    user: Say hi {number}
    expect: {{text: {{$contains: hi}}}}
""" for number in range(count)]
    pytester.makefile(".case.yaml", budget="---\n".join(cases))


@pytest.fixture
def server(chat_server: ChatServer) -> ChatServer:
    chat_server.set_default(json_reply(completion("hi there")))
    return chat_server


def test_cases_past_the_budget_are_skipped_and_the_summary_says_so(
        pytester: pytest.Pytester, server: ChatServer) -> None:
    write_cases(pytester, server.base_url)
    report = pytester.path / "report.json"
    result = pytester.runpytest("-p", "no:cacheprovider", "--toolbench-live", "-rs",
                                "--toolbench-concurrency=1", "--toolbench-max-tokens=40",
                                f"--toolbench-report={report}")
    result.assert_outcomes(passed=3, skipped=2)  # 15, 30, 45: the fourth is not started
    assert len(server.requests) == 3
    result.stdout.fnmatch_lines([
        ("*token budget: 45 of 40 tokens used (--toolbench-max-tokens);"
         " 2 cases not started (skipped)*"),
        ("SKIPPED [[]1[]] budget.case.yaml:*: token budget spent: 45 of 40 tokens used"
         " (--toolbench-max-tokens)*")])
    cases = json.loads(report.read_text())["cases"]
    assert [(case["case"], case["outcome"], case["runs"]) for case in cases[3:]] == [
        ("c3", "skipped", []), ("c4", "skipped", [])]


def test_cases_started_ahead_stop_at_the_budget_too(pytester: pytest.Pytester,
                                                    server: ChatServer) -> None:
    """With cases started ahead, those under way when the budget runs out finish; no new
    one starts."""
    write_cases(pytester, server.base_url, count=8)
    result = pytester.runpytest("-p", "no:cacheprovider", "--toolbench-live",
                                "--toolbench-concurrency=2", "--toolbench-max-tokens=20")
    outcomes = result.parseoutcomes()
    assert outcomes["passed"] == len(server.requests) <= 3
    assert outcomes["skipped"] == 8 - outcomes["passed"]
    result.stdout.fnmatch_lines(["*token budget: * of 20 tokens used*cases not started*"])


def test_the_budget_within_the_limit_skips_nothing_and_replay_spends_none(
        pytester: pytest.Pytester, server: ChatServer) -> None:
    write_cases(pytester, server.base_url, count=2)
    pytester.makeini("[pytest]\ntoolbench_max_tokens = 100\n")
    result = pytester.runpytest("-p", "no:cacheprovider", "--toolbench-record")
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines([("*token budget: 30 of 100 tokens used"
                                  " (ini toolbench_max_tokens)*")])
    replayed = pytester.runpytest("-p", "no:cacheprovider", "--toolbench-max-tokens=1")
    replayed.assert_outcomes(passed=2)
    replayed.stdout.fnmatch_lines(["*token budget: 0 of 1 tokens used*"])


@pytest.mark.parametrize("value", ["0", "ten", "1.5", "nan"])
def test_a_budget_that_is_no_positive_whole_number_is_a_usage_error(
        pytester: pytest.Pytester, value: str) -> None:
    write_cases(pytester, "http://127.0.0.1:9", count=1)
    result = pytester.runpytest(f"--toolbench-max-tokens={value}")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([(f"*--toolbench-max-tokens must be a whole number >= 1;"
                                  f" got '{value}'*")])


def test_under_xdist_each_worker_holds_its_share(pytester: pytest.Pytester,
                                                 server: ChatServer) -> None:
    write_cases(pytester, server.base_url, count=8)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "--toolbench-live",
                                           "-n", "2", "--toolbench-max-tokens=40",
                                           timeout=60)
    outcomes = result.parseoutcomes()
    # Each worker holds 20: it starts a second case at 15, and none at 30.
    assert outcomes["passed"] == len(server.requests) <= 4
    assert outcomes["skipped"] == 8 - outcomes["passed"]
    result.stdout.fnmatch_lines([(f"*token budget: {15 * outcomes['passed']} of 40 tokens"
                                  " used (--toolbench-max-tokens: 20 a worker);*")])
