"""Faults on cue while an agent case is recorded (docs/case-format.md#faults): the proxy
answers a ``status`` or ``disconnect`` itself, so the service never sees that request, and
holds back, slows, cuts or changes the service's real reply for the others; the cassette
keeps the real exchanges only, and replaying it with the same faults gives the verdict the
recording gave, the server gone. Then how the reports mark an injected fault, apart from a
service's own error.

The agents are the real SDK agents of ``support/agents`` against the loopback servers of
``support`` (``ScriptedModel``), which count what reached them.
"""

from __future__ import annotations

import json
import re
import shutil
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest
import yaml
from support.agents.frameworks import PLACEHOLDER_KEYS, Framework
from support.chat_server import ChatServer, JsonReply, RecordedRequest
from support.gemini_server import GeminiServer
from support.scripted_model import ScriptedModel
from test_faults_on_cue import REFUND, by_id, case_text, run

from pytest_toolbench.faults import fault_from

RETRIED = """      tool_calls: [{name: lookup_order}, {name: issue_refund}]
      text: {$contains: refunded}
      state: {refunds: ["913"]}
      requests: 4"""
"""The refund case's own expectations, and one request more than the model's three
answers: the SDK's retry of the faulted one."""


@pytest.fixture
def keys(monkeypatch: pytest.MonkeyPatch) -> None:
    for name, value in PLACEHOLDER_KEYS.items():
        monkeypatch.setenv(name, value)


def serve(framework: Framework) -> ChatServer:
    return GeminiServer() if framework.api == "gemini" else ChatServer()


def record(pytester: pytest.Pytester, framework: Framework, *args: str, faults: str = "",
           expect: str | None = None) -> tuple[pytest.RunResult, list[RecordedRequest]]:
    """The refund case recorded from a loopback server playing the model's three answers
    (with ``faults`` on its stage, ``args`` on the command line); the run, and what
    reached the server."""
    server = serve(framework)
    with server.start():
        server.set_handler(ScriptedModel(*REFUND))
        pytester.makefile(".case.yaml", refund=case_text(
            framework, server.base_url, faults, *(() if expect is None else (expect,))))
        result = run(pytester, "--toolbench-record", "-rA", *args)
        assert server.errors == []
        return result, list(server.requests)


def replay(pytester: pytest.Pytester, framework: Framework, *args: str, faults: str = "",
           expect: str | None = None) -> pytest.RunResult:
    """The refund case replayed from its cassette, its endpoint a port nobody listens on."""
    dead = "http://127.0.0.1:9/v1beta" if framework.api == "gemini" else "http://127.0.0.1:9/v1"
    pytester.makefile(".case.yaml", refund=case_text(
        framework, dead, faults, *(() if expect is None else (expect,))))
    return run(pytester, "-rA", *args)


def cassette(pytester: pytest.Pytester) -> Path:
    (path,) = (pytester.path / "__cassettes__" / "refund").glob("refund*.yaml")
    return path


def exchanges(path: Path) -> list[dict[str, Any]]:
    """The cassette's interactions, their clocks left out (two recordings of one exchange
    differ only there)."""
    interactions = yaml.safe_load(path.read_text())["interactions"]
    for interaction in interactions:
        response = interaction["response"]
        response.pop("elapsed_ms", None)
        for event in response.get("events") or ():
            event.pop("at_ms", None)
    return interactions  # type: ignore[no-any-return]


def turns(report: Path) -> list[dict[str, Any]]:
    return [turn for case in json.loads(report.read_text())["cases"] for run_ in case["runs"]
            for stage in run_["stages"] for attempt in stage["attempts"]
            for turn in attempt["turns"]]


def verdict(result: pytest.RunResult) -> list[str]:
    """What a run says of the case: its outcome, and each line naming why it failed (its
    case file's line and what the agent raised), the durations left out."""
    said = result.stdout.lines
    return [*(re.sub(r"\d+(\.\d+)?\s*(ms|s)\b", "T", line) for line in said
              if line.startswith("refund.case.yaml:") or "the agent raised" in line),
            str(result.parseoutcomes())]


# -- status and disconnect: answered by the proxy, never sent ---------------------------


ANSWERED = [
    # the sync openai SDK retries the 429 (the case's own fault)
    ("openai-chat", (), "[{request: 1, status: 429, retry_after_s: 0}]", "429"),
    # the anthropic SDK's stream retries a dropped connection (a suite-wide fault)
    ("anthropic-stream", ("--toolbench-fault", "disconnect@2"), "", "disconnect"),
]


@pytest.mark.parametrize(("name", "flags", "faults", "kind"), ANSWERED,
                         ids=[row[0] for row in ANSWERED])
def test_a_status_or_disconnect_fault_never_reaches_the_service_and_replays(
        name: str, flags: tuple[str, ...], faults: str, kind: str,
        pytester: pytest.Pytester, keys: None) -> None:
    """Recorded with the fault: the server answers the model's three turns and nothing
    else (the faulted request never reached it), the agent's SDK retried it (four
    requests), and the cassette holds the three real exchanges, no trace of the fault in
    it; replayed with the same fault, the server gone, the case passes the same way."""
    framework = by_id(name)
    recorded, reached = record(pytester, framework, *flags, "--toolbench-report",
                               "recorded.json", faults=faults, expect=RETRIED)

    recorded.assert_outcomes(passed=1)
    assert len(reached) == 3  # the three answers; the faulted request is not among them
    text = cassette(pytester).read_text()
    kept = exchanges(cassette(pytester))
    assert [interaction["response"]["status"] for interaction in kept] == [200, 200, 200]
    assert [json.loads(interaction["request"]["json"]) for interaction in kept] == [
        request.json() for request in reached]
    for trace in ("429", "Too Many Requests", "rate_limit", "injected", "toolbench-fault",
                  "stall", "disconnect", "overloaded"):
        assert trace not in text
    faulted = [turn["fault"] for turn in turns(pytester.path / "recorded.json")]
    assert [(fault or {}).get("kind") for fault in faulted] == (
        ["status", None, None, None] if kind == "429" else [None, "disconnect", None, None])

    replayed = replay(pytester, framework, *flags, "--toolbench-report", "replayed.json",
                      faults=faults, expect=RETRIED)
    replayed.assert_outcomes(passed=1)
    assert [turn["fault"] for turn in turns(pytester.path / "replayed.json")] == faulted


def test_a_status_fault_the_sdk_does_not_retry_fails_the_recording_and_its_replay_alike(
        pytester: pytest.Pytester, keys: None) -> None:
    """google-genai does not retry a 429: recording, the agent raises the SDK's error for
    the real service's 429 at its second request, which the server never got; the
    cassette keeps the one real exchange, and the replay fails the same way."""
    framework = by_id("gemini")
    recorded, reached = record(pytester, framework, "--toolbench-fault", "status=429@2")
    replayed = replay(pytester, framework, "--toolbench-fault", "status=429@2")

    assert len(reached) == 1
    recorded.assert_outcomes(failed=1)
    recorded.stdout.fnmatch_lines(["*the agent raised*429*RESOURCE_EXHAUSTED*",
                                   "*injected fault (--toolbench-fault 1): status 429*"])
    kept = exchanges(cassette(pytester))
    assert [interaction["response"]["status"] for interaction in kept] == [200]
    assert "RESOURCE_EXHAUSTED" not in cassette(pytester).read_text()
    assert verdict(replayed) == verdict(recorded)


# -- the others: the real reply held back, slowed, cut or changed -----------------------


RESHAPED = [
    # A stall and a slowed stream: the agent gets every reply, late; the case passes.
    ("openai-chat", "stall_s=0.3@2", "passed"),
    ("anthropic-stream", "delay=100/20@1", "passed"),
    # Its stream cut after one event: the async SDK does not retry a stream broken off,
    # the agent raises, and the cassette must still hold the real reply whole, for the
    # replay to cut it again at the same place.
    ("openai-chat-async-stream", "cut=1@1", "failed"),
    # A call of a tool the request did not offer: the agent answers that it failed, a
    # request the clean recording never saw.
    ("gemini", "mutate=unknown_tool@1", "failed"),
    ("openai-chat", "mutate=malformed_arguments@1", "failed"),
]


HELD_MS = {"stall_s=0.3@2": 300, "delay=100/20@1": 100}
"""How long a fault holds its reply back at least: the turn's time shows it."""


@pytest.mark.parametrize(("name", "fault", "outcome"), RESHAPED,
                         ids=[f"{row[0]}-{row[1].partition('=')[0]}" for row in RESHAPED])
def test_a_reply_fault_while_recording_keeps_the_real_reply_and_replays_alike(
        name: str, fault: str, outcome: str, pytester: pytest.Pytester, keys: None) -> None:
    """The faulted request reaches the service; the cassette keeps its reply as the
    service sent it (the clean recording's, whole: no ``_not_offered`` name, no broken
    arguments, the stream to its end), and replaying it with the same fault, the server
    gone, gives the recording's verdict."""
    framework = by_id(name)
    clean, _ = record(pytester, framework)
    clean.assert_outcomes(passed=1)
    reference = exchanges(cassette(pytester))
    shutil.rmtree(pytester.path / "__cassettes__")

    recorded, reached = record(pytester, framework, "--toolbench-fault", fault,
                               "--toolbench-report", "recorded.json")
    kept = exchanges(cassette(pytester))
    replayed = replay(pytester, framework, "--toolbench-fault", fault,
                      "--toolbench-report", "replayed.json")

    assert recorded.parseoutcomes().get(outcome) == 1, recorded.stdout.str()
    assert verdict(replayed) == verdict(recorded)
    at = int(fault.rpartition("@")[2])
    for report in ("recorded.json", "replayed.json"):  # injected where the plan says
        faulted = [turn for turn in turns(pytester.path / report) if turn["fault"]]
        assert [turn["fault"]["request"] for turn in faulted] == [at]
        assert faulted[0]["fault"]["entry"] == fault_from(fault).entry()
        assert faulted[0]["elapsed_ms"] >= HELD_MS.get(fault, 0)
    # Every request reached the service, and each reply it sent is kept as it sent it.
    assert len(kept) == len(reached)
    assert [json.loads(interaction["request"]["json"]) for interaction in kept] == [
        request.json() for request in reached]
    assert kept[:at] == reference[:at]
    text = cassette(pytester).read_text()
    assert "_not_offered" not in "\n".join(
        json.dumps(interaction["response"]) for interaction in kept)
    assert "injected" not in text and "toolbench-fault" not in text
    if outcome == "passed":  # held back or slowed, not changed: the very same recording
        assert kept == reference


def test_a_cut_reply_the_sdk_retries_is_recorded_as_its_retry(
        pytester: pytest.Pytester, keys: None) -> None:
    """The sync openai SDK retries a whole reply cut at half: both requests reach the
    service (the model answers the same call twice, under two ids: call_1, then call_3),
    the cassette keeps the retry's exchange only, and the replay cuts that one and answers
    the retry from it, as the recording went."""
    framework = by_id("openai-chat")
    server = ChatServer()
    with server.start():
        model = ScriptedModel(REFUND[0], *REFUND)
        server.set_handler(model)
        pytester.makefile(".case.yaml", refund=case_text(
            framework, server.base_url, "[{request: 1, cut: {after_chunks: 0}}]", RETRIED))
        recorded = run(pytester, "--toolbench-record", "-rA")
        reached = list(server.requests)
    replayed = replay(pytester, framework, faults="[{request: 1, cut: {after_chunks: 0}}]",
                      expect=RETRIED)

    recorded.assert_outcomes(passed=1)
    assert len(reached) == 4 and model.left == 0
    assert reached[0].json() == reached[1].json()  # the retry: the same body again
    assert_the_retry_was_kept(pytester, reached)
    replayed.assert_outcomes(passed=1)


def assert_the_retry_was_kept(pytester: pytest.Pytester, reached: list[Any]) -> None:
    """The cassette holds the exchanges from the retry on (the reply the agent gave up on
    is not kept): the requests the server got after the first, and the retry's reply (the
    model's second answer, whose call is call_3)."""
    kept = exchanges(cassette(pytester))
    assert [json.loads(interaction["request"]["json"]) for interaction in kept] == [
        request.json() for request in reached[1:]]
    first = json.loads(kept[0]["response"]["json"])
    assert first["choices"][0]["message"]["tool_calls"][0]["id"] == "call_3"


IMPATIENT = """
from openai import APITimeoutError, OpenAI
from support.agents.openai_chat import ChatAgent
from support.agents.shop import SYSTEM


class ImpatientAgent(ChatAgent):
    \"\"\"Waits 0.2 s for its first reply, then asks again at once (its own retry).\"\"\"

    asked = 0

    def _reply(self):
        self.asked += 1
        if self.asked > 1:
            return super()._reply()
        try:
            return self.client.with_options(timeout=0.2, max_retries=0).chat.completions.create(
                **self.request()).choices[0].message
        except APITimeoutError:
            return super()._reply()


def make_agent():
    return ImpatientAgent(OpenAI(), "test-model", False, SYSTEM)
"""


def test_a_stall_the_agent_gives_up_on_is_neither_recorded_nor_checked_and_replays(
        pytester: pytest.Pytester, keys: None) -> None:
    """An agent that waits 0.2 s for its first reply, stalled 0.5 s: it asks again during
    the stall. Recording, both requests reach the service; the stalled reply, sent after
    the agent left, is neither kept nor read as the model's (its call is no call the agent
    made); replaying, the retry during the stall is answered from the exchange the stalled
    request was matched to. Both pass with four requests."""
    pytester.makepyfile(impatient_bot=IMPATIENT)
    pytester.makeconftest("")  # the bot beside the case is importable
    framework = Framework("impatient", "impatient_bot:make_agent", "chat", False)
    faults = "[{request: 1, stall_s: 0.5}]"
    server = ChatServer()
    with server.start():
        server.set_handler(ScriptedModel(REFUND[0], *REFUND))
        pytester.makefile(".case.yaml", refund=case_text(framework, server.base_url, faults,
                                                         RETRIED))
        recorded = run(pytester, "--toolbench-record", "--toolbench-report", "recorded.json")
        reached = list(server.requests)
    replayed = replay(pytester, framework, "--toolbench-report", "replayed.json",
                      faults=faults, expect=RETRIED)

    recorded.assert_outcomes(passed=1)
    assert len(reached) == 4 and reached[0].json() == reached[1].json()
    assert_the_retry_was_kept(pytester, reached)
    replayed.assert_outcomes(passed=1)
    for report in ("recorded.json", "replayed.json"):
        stalled = [turn for turn in turns(pytester.path / report) if turn["fault"]]
        assert [turn["fault"]["does"] for turn in stalled] == ["stall 0.5 s"]
        assert stalled[0]["elapsed_ms"] >= 500


# -- the reports: an injected fault marked so, a service's own error not ----------------


def test_the_reports_mark_an_injected_fault_and_never_the_services_own_error(
        pytester: pytest.Pytester, keys: None) -> None:
    """Recorded while the server answers the first request with its own 429 (the SDK
    retries it): no report calls it injected. Replayed with an injected 429 at request 2
    (the second retry of the same body): junit counts one injected fault, the HTML page
    marks that turn, and the JSON report's turn says ``injected``; the service's own 429,
    replayed from the cassette, is still no fault."""
    framework = by_id("openai-chat")
    model = ScriptedModel(*REFUND)
    limited = {"error": {"message": "Rate limit reached for test-model", "type": "requests",
                         "code": "rate_limit_exceeded", "param": None}}

    def first_limited(request: RecordedRequest) -> Any:
        if not model.served and not hasattr(first_limited, "done"):
            first_limited.done = True  # type: ignore[attr-defined]
            return JsonReply(limited, status=429, headers={"retry-after": "0"})
        return model(request)

    server = ChatServer()
    with server.start():
        server.set_handler(first_limited)
        pytester.makefile(".case.yaml", refund=case_text(
            framework, server.base_url, expect=RETRIED))
        recorded = run(pytester, "--toolbench-record", "--junitxml", "own.xml",
                       "--toolbench-html", "own.html", "--toolbench-report", "own.json")
        assert len(server.requests) == 4
    faulted = replay(pytester, framework, "--toolbench-fault", "status=429,retry_after_s=0@2",
                     "--junitxml", "faulted.xml", "--toolbench-html", "faulted.html",
                     "--toolbench-report", "faulted.json", expect=RETRIED.replace(
                         "requests: 4", "requests: 5"))

    recorded.assert_outcomes(passed=1)
    faulted.assert_outcomes(passed=1)
    own, injected = (pytester.path / "own.json"), (pytester.path / "faulted.json")
    assert [(turn["reply"]["status"], turn["fault"]) for turn in turns(own)] == [
        (429, None), (200, None), (200, None), (200, None)]
    assert [turn["reply"]["status"] for turn in turns(injected)] == [429, 429, 200, 200, 200]
    fault = turns(injected)[1]["fault"]
    assert fault == {"injected": True, "kind": "status", "does": "status 429 (retry-after 0 s)",
                     "entry": {"status": 429, "retry_after_s": 0, "request": 2},
                     "source": "--toolbench-fault 1", "request": 2, "delivered": True}
    assert [turn["fault"] for index, turn in enumerate(turns(injected)) if index != 1] == [
        None] * 4

    assert properties(pytester.path / "faulted.xml").get("faults_injected") == "1"
    assert properties(pytester.path / "own.xml").get("turns") == "4"
    assert "faults_injected" not in properties(pytester.path / "own.xml")

    page = html_turns(pytester.path / "faulted.html")
    assert sorted(page) == ["1", "2", "3", "4", "5"]
    assert page["2"].startswith(
        '<div class="fault">injected fault (--toolbench-fault 1): status 429 (retry-after 0 s)'
        "</div>")
    assert "HTTP 429" in page["2"] and "a fault injected by pytest-toolbench" in page["2"]
    assert "HTTP 429" in page["1"] and "Rate limit reached for test-model</pre>" in page["1"]
    assert [number for number, turn in page.items() if "injected" in turn] == ["2"]
    own_page = html_turns(pytester.path / "own.html")
    assert "HTTP 429" in own_page["1"]
    assert "Rate limit reached for test-model</pre>" in own_page["1"]
    assert [number for number, turn in own_page.items() if "injected" in turn] == []


def html_turns(page: Path) -> dict[str, str]:
    """The HTML page's turns, by their number: each from just after its head (``request
    1: 3.8 ms, stop: ...``) to the next turn's."""
    parts = re.split(r'<div class="muted">(?:streamed )?request (\d+): [^<]*</div>',
                     page.read_text())
    return dict(zip(parts[1::2], parts[2::2]))


def properties(junit: Path) -> dict[str, str]:
    """The junit properties of the one test case in ``junit``."""
    (case,) = ET.parse(junit).getroot().iter("testcase")
    return {prop.get("name", ""): prop.get("value", "") for prop in case.iter("property")}


def test_live_faults_act_on_the_service_as_recording_does_and_write_no_cassette(
        pytester: pytest.Pytester, keys: None) -> None:
    """Live, as recording: the async streamed SDK's first request gets an injected 503
    that never reaches the server (the SDK retries it), and its last reply is slowed
    on its way; nothing is written."""
    framework = by_id("openai-chat-async-stream")
    server = ChatServer()
    with server.start():
        server.set_handler(ScriptedModel(*REFUND))
        pytester.makefile(".case.yaml", refund=case_text(
            framework, server.base_url, "[{request: 1, status: 503, retry_after_s: 0},"
            " {request: 4, delay: {first_byte_ms: 150, chunk_ms: 10}}]", RETRIED))
        result = run(pytester, "--toolbench-live", "--toolbench-report", "live.json")
        reached = len(server.requests)

    result.assert_outcomes(passed=1)
    assert reached == 3
    faulted = turns(pytester.path / "live.json")
    assert [(turn["fault"] or {}).get("does") for turn in faulted] == [
        "status 503 (retry-after 0 s)", None, None,
        "delay 150 ms to the first byte, 10 ms a chunk"]
    assert faulted[0]["reply"]["status"] == 503 and faulted[3]["elapsed_ms"] >= 150
    assert not (pytester.path / "__cassettes__").exists()
