"""The ``toolbench_agent`` fixture: every expectation key ``check()`` takes works as in a
case or is refused, and a fixture test is a case in every report.

The tests run the plugin through pytester; the agent is the support agent on the openai
SDK (``support.agents.openai_chat``), and its model and judge are scripted on the loopback
chat server. Replays run with the server stopped.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
import yaml
from support.chat_server import (
    ChatServer,
    RecordedRequest,
    chunks_for,
    completion,
    json_reply,
    sse_reply,
    start_chat_server,
)
from support.second_models import role_of, verdict

from pytest_toolbench.agent_fixture import NOT_HERE
from pytest_toolbench.casefile.schema import Expect
from pytest_toolbench.commands.cli import main

STEPS: list[Any] = [("lookup_order", {"order_id": "913"}),
                    ("issue_refund", {"order_id": "913"}), "Order 913 is refunded."]
FALSE_CRITERION = "Promises a delivery date"


class Desk:
    """The model of every test (a call per tool result so far, then the answer) and the
    judge (it fails the false criterion, or every criterion once ``flipped``)."""

    def __init__(self) -> None:
        self.flipped = False
        self.sent = {"model": 0, "judge": 0, "simulator": 0}
        self.judged: list[str] = []
        """The transcripts the judge read."""

    def __call__(self, request: RecordedRequest) -> Any:
        role = role_of(request)
        self.sent[role] += 1
        if role == "judge":
            self.judged.append(request.json()["messages"][-1]["content"])
            holds = (FALSE_CRITERION.encode() not in request.body) != self.flipped
            return verdict("chat", "pass" if holds else "fail", "The transcript says so.")
        body = request.json()
        step = STEPS[min(sum(m["role"] == "tool" for m in body["messages"]), 2)]
        text, calls = (step, None) if isinstance(step, str) else (None, [step])
        if body.get("stream"):
            return sse_reply(chunks_for(text=text, tool_calls=calls))
        return json_reply(completion(text=text, tool_calls=calls))


# key -> (a value that holds, one that does not, whether the agent streams)
WORKS: dict[str, tuple[Any, Any, bool]] = {
    "status": (200, 500, False),
    "error": ({"$absent": True}, "boom", False),
    "finish_reason": ("stop", "length", False),
    "api_finish_reason": ("stop", "length", False),
    "text": ({"$contains": "refunded"}, {"$contains": "WEEKS"}, False),
    "reasoning": ({"$absent": True}, "thinking", False),
    "tool_calls": ([{"name": "lookup_order"}, {"name": "issue_refund"}],
                   [{"name": "issue_refund"}], False),
    "usage": ({"total_tokens": {"$gt": 0}}, {"total_tokens": 0}, False),
    "latency_ms": ({"$lt": 600_000}, {"$lt": 0}, False),
    "requests": (3, 2, False),
    "trajectory": ({"$not": {"name": "cancel_order"}}, {"$not": {"name": "issue_refund"}},
                   False),
    "stream": ({"done": True}, {"chunks": {"$gte": 10_000}}, True),
    "judge": (["Says the order is refunded"], [FALSE_CRITERION], False),
}

CHECK_TEST = '''
import json

import pytest
from support.agents.openai_chat import make_agent

PARAMS = json.loads({params!r})


@pytest.mark.parametrize(("key", "value", "stream"), [p[1:] for p in PARAMS],
                         ids=[p[0] for p in PARAMS])
def test_check(toolbench_agent, key, value, stream):
    agent = make_agent(stream=stream)
    answer = agent("Refund order 913")
    agent.close()
    toolbench_agent.check(answer, **{{key: value}})
'''


def write_check_tests(pytester: pytest.Pytester, keys: tuple[str, ...] = ()) -> None:
    """A test of each key's value that holds and one that fails, and of each refused key
    (only ``keys`` when given)."""
    works = {key: values for key, values in WORKS.items() if not keys or key in keys}
    params = [[f"{key}-holds", key, holds, stream] for key, (holds, _, stream) in works.items()]
    params += [[f"{key}-fails", key, fails, stream] for key, (_, fails, stream) in works.items()]
    params += [[f"{key}-refused", key, {}, False] for key in NOT_HERE
               if not keys or key in keys]
    pytester.makepyfile(test_checks=CHECK_TEST.format(params=json.dumps(params)))
    pytester.makeini("[pytest]\ntoolbench_judge_model = judge-model\n")


def outcomes(pytester: pytest.Pytester, *args: str) -> dict[str, tuple[str, str]]:
    """Each test's id -> its outcome and failure text."""
    recorder = pytester.inline_run("-p", "no:cacheprovider", *args)
    return {report.nodeid.split("[", 1)[1].rstrip("]"): (report.outcome, report.longreprtext)
            for report in recorder.getreports("pytest_runtest_logreport")
            if report.when == "call"}


def assert_each_key_works_or_is_refused(seen: dict[str, tuple[str, str]],
                                        judge_flipped: bool = False) -> None:
    for key in [key for key in WORKS if f"{key}-holds" in seen]:
        holds, fails = seen[f"{key}-holds"], seen[f"{key}-fails"]
        if key == "judge" and judge_flipped:
            holds, fails = fails, holds
        assert holds[0] == "passed", (key, holds)
        assert fails[0] == "failed" and f"expect.{key}" in fails[1], (key, fails)
    for key in [key for key in NOT_HERE if f"{key}-refused" in seen]:
        outcome, text = seen[f"{key}-refused"]
        assert outcome == "failed", key
        assert (f"TypeError: toolbench_agent.check: {key} cannot be checked here (it needs"
                " an agent case); check it in the test itself") in text


@pytest.fixture
def desk() -> Iterator[tuple[ChatServer, Desk]]:
    with start_chat_server() as server:
        model = Desk()
        server.set_handler(model)
        yield server, model


def test_every_expect_key_of_check_works_as_in_a_case_or_is_refused(
        pytester: pytest.Pytester, desk: tuple[ChatServer, Desk]) -> None:
    assert set(Expect.model_fields) == set(WORKS) | set(NOT_HERE), (
        "a new expect key: make check() take it (a value that holds and one that fails"
        " here) or refuse it (NOT_HERE)")
    server, model = desk
    write_check_tests(pytester)
    recorded = outcomes(pytester, "--toolbench-record", "--toolbench-base-url",
                        server.base_url)
    assert_each_key_works_or_is_refused(recorded)
    assert model.sent["judge"] == 2  # the judge was asked, once for each criterion
    for transcript in model.judged:  # what the agent was asked, read from its request
        assert ("USER: Refund order 913\nAGENT CALLS lookup_order({\"order_id\": \"913\"})\n"
                "AGENT CALLS issue_refund({\"order_id\": \"913\"})\n"
                "AGENT: Order 913 is refunded.") in transcript, transcript
    judged = pytester.path / "__cassettes__" / "test_checks" / "test_check[judge-fails].yaml"
    roles = [item.get("role", "model")
             for item in yaml.safe_load(judged.read_text())["interactions"]]
    assert roles == ["model"] * 3 + ["judge"]
    server.close()  # replay: every answer, the judge's too, from the cassettes
    assert_each_key_works_or_is_refused(outcomes(pytester))


def test_rejudge_asks_a_tests_judge_again_and_replays_its_agent(
        pytester: pytest.Pytester, desk: tuple[ChatServer, Desk]) -> None:
    server, model = desk
    write_check_tests(pytester, ("judge", "text"))
    outcomes(pytester, "--toolbench-record", "--toolbench-base-url", server.base_url)
    model.flipped, model.sent = True, {"model": 0, "judge": 0, "simulator": 0}
    rejudged = outcomes(pytester, "--toolbench-rejudge", "--toolbench-base-url",
                        server.base_url)
    assert_each_key_works_or_is_refused(rejudged, judge_flipped=True)
    assert model.sent == {"model": 0, "judge": 2, "simulator": 0}
    assert_each_key_works_or_is_refused(outcomes(pytester))  # nothing was written
    # With --toolbench-record the new verdicts are written, and only they.
    model.sent = {"model": 0, "judge": 0, "simulator": 0}
    rewritten = outcomes(pytester, "--toolbench-rejudge", "--toolbench-record",
                         "--toolbench-base-url", server.base_url)
    assert_each_key_works_or_is_refused(rewritten, judge_flipped=True)
    assert model.sent == {"model": 0, "judge": 2, "simulator": 0}
    server.close()
    assert_each_key_works_or_is_refused(outcomes(pytester), judge_flipped=True)


def test_a_judged_check_without_a_judge_model_fails_saying_how_to_name_one(
        pytester: pytest.Pytester, desk: tuple[ChatServer, Desk]) -> None:
    server, model = desk
    write_check_tests(pytester, ("judge",))
    pytester.makeini("[pytest]\n")
    seen = outcomes(pytester, "--toolbench-live", "--toolbench-base-url", server.base_url)
    for name in ("judge-holds", "judge-fails"):
        outcome, text = seen[name]
        assert outcome == "failed"
        assert ("expect.judge: judge error: no judge model: name one with"
                " --toolbench-judge-model or the ini key toolbench_judge_model") in text
    assert model.sent["judge"] == 0


REFUND_TEST = '''
from support.agents.openai_chat import make_agent


def test_refund(toolbench_agent):
    agent = make_agent()
    answer = agent("Refund order 913")
    toolbench_agent.check(answer, tool_calls=[{"name": "lookup_order"}, {"name": "issue_refund"}])
    answer = agent("Thanks!")
    agent.close()
    toolbench_agent.check(answer, text={"$contains": "refunded"})
'''


def reported(pytester: pytest.Pytester, name: str, *args: str) -> pytest.RunResult:
    return pytester.runpytest("-p", "no:cacheprovider", f"--toolbench-report={name}.json",
                              f"--toolbench-html={name}.html", "--junitxml", f"{name}.xml",
                              *args)


def test_a_fixture_test_is_a_case_in_the_summary_the_reports_and_the_diff(
        pytester: pytest.Pytester, desk: tuple[ChatServer, Desk],
        capsys: pytest.CaptureFixture[str]) -> None:
    server, _model = desk
    pytester.makepyfile(test_refund=REFUND_TEST)
    recorded = reported(pytester, "old", "--toolbench-record", "--toolbench-base-url",
                        server.base_url)
    recorded.assert_outcomes(passed=1)
    recorded.stdout.fnmatch_lines(["*toolbench summary*", "*toolbench (API: agent)*",
                                   "*test_refund *passed *2 *4 *2 *"])
    [case] = json.loads((pytester.path / "old.json").read_text())["cases"]
    assert (case["nodeid"], case["case"], case["api"], case["outcome"]) == (
        "test_refund.py::test_refund", "test_refund", "agent", "passed")
    assert (case["stages"], case["turns"], case["tool_calls"]) == (2, 4, 2)
    assert [stage["name"] for stage in case["runs"][0]["stages"]] == ["check 1", "check 2"]
    assert "test_refund" in (pytester.path / "old.html").read_text()
    assert 'name="turns" value="4"' in (pytester.path / "old.xml").read_text()
    # The test changes; its replay fails, and the diff of the two reports says so.
    pytester.makepyfile(test_refund=REFUND_TEST.replace('"refunded"', '"WEEKS"'))
    replayed = reported(pytester, "new")
    replayed.assert_outcomes(failed=1)
    replayed.stdout.fnmatch_lines(["*test_refund *failed *2 *4 *2 *"])
    [case] = json.loads((pytester.path / "new.json").read_text())["cases"]
    assert case["outcome"] == "failed" and case["recorded_latency_ms"] is not None
    capsys.readouterr()
    assert main(["diff", str(pytester.path / "old.json"), str(pytester.path / "new.json")]
                ) == 1
    out = capsys.readouterr().out
    assert "test_refund.py::test_refund" in out and "passed -> failed" in out, out


def test_a_fixture_test_that_fails_on_its_own_or_has_no_cassette_is_reported_failed(
        pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_refund=REFUND_TEST.replace(
        "    agent.close()\n", "    agent.close()\n    assert answer == 'no'\n"))
    pytester.makepyfile(test_other="import pytest\n\n\ndef test_plain():\n    assert True\n"
                        "\n\n@pytest.mark.skip(reason='later')\n"
                        "def test_later(toolbench_agent):\n    pass\n")
    reported(pytester, "run").assert_outcomes(passed=1, errors=1, skipped=1)  # no cassette
    later, case = json.loads((pytester.path / "run.json").read_text())["cases"]
    assert (later["case"], later["outcome"], later["marks"]) == ("test_later", "skipped",
                                                                 ["skip"])
    assert (case["case"], case["outcome"]) == ("test_refund", "failed")
    assert "no cassette at __cassettes__" in case["runs"][0]["error"]
    with start_chat_server() as server:
        server.set_handler(Desk())
        reported(pytester, "run", "--toolbench-record", "--toolbench-base-url",
                 server.base_url).assert_outcomes(failed=1, passed=1, skipped=1)
    _later, case = json.loads((pytester.path / "run.json").read_text())["cases"]
    assert case["outcome"] == "failed" and case["turns"] == 4
    assert case["error"].startswith("AssertionError: assert 'Order 913 is refunded.' == 'no'")


def test_the_runs_fault_plan_reaches_a_fixture_tests_requests_check_by_check(
        pytester: pytest.Pytester, desk: tuple[ChatServer, Desk], monkeypatch: pytest.MonkeyPatch
        ) -> None:
    """``--toolbench-fault`` reaches every case of the run, fixture tests too: the requests
    up to each check count as a stage's, and the agent's SDK retries the 429 it gets."""
    server, _model = desk
    pytester.makepyfile(test_refund=REFUND_TEST)
    reported(pytester, "clean", "--toolbench-record", "--toolbench-base-url",
             server.base_url).assert_outcomes(passed=1)
    monkeypatch.setenv("OPENAI_BASE_URL", "http://127.0.0.1:9/v1")
    faulted = reported(pytester, "faulted", "--toolbench-fault", "status=429,retry_after_s=0@1")

    faulted.assert_outcomes(passed=1)
    [case] = json.loads((pytester.path / "faulted.json").read_text())["cases"]
    checks = [[(turn["reply"]["status"], (turn["fault"] or {}).get("source"))
               for turn in stage["attempts"][0]["turns"]] for stage in case["runs"][0]["stages"]]
    assert checks[0][:2] == [(429, "--toolbench-fault 1"), (200, None)]
    assert checks[1][:2] == [(429, "--toolbench-fault 1"), (200, None)]
    assert 'name="faults_injected" value="2"' in (pytester.path / "faulted.xml").read_text()
