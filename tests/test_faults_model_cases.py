"""Faults on cue in model cases (docs/case-format.md#faults): the plugin's own client meets
every fault kind over the four wire APIs, in record and in replay, and the verdicts are
the same in every mode.

Each API gets one file of cases that all run the same tool loop (call ``lookup_order``,
then answer), each with one fault and what it should do to the case. The file is recorded
once clean and once with its faults (against a loopback server, which counts what reached
it), then replayed with its faults from either cassette, the server gone.
"""

from __future__ import annotations

import gc
import json
import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml
from support.chat_server import ChatServer, JsonReply, RecordedRequest, SSEReply
from support.gemini_server import GeminiServer
from support.scripted_model import ScriptedModel, calls, says

CASE = """name: NAME
model: MODEL
endpoint: {base_url: "BASE_URL", api: API, timeout_s: 1.5, retries: 2}
tools:
  - name: lookup_order
    parameters: {type: object, properties: {order_id: {type: string}}, required: [order_id]}
    result: {order_id: "913", total: 42.5}
stages:
  - name: ask
    user: Refund order 913
    run_tools: true
    stream: STREAM
    faults: [FAULT]
    expect: EXPECT
"""

ANSWER = "Order 913 is refunded: 42.5 in total, back on your card within five days."
PASSES = "{text: {$contains: refunded}, requests: 2}"


# name, stream, fault, expect, what the run says (None: it passes; or by API), requests
# that reach the service when recorded with the fault.
CASES: list[tuple[str, bool, str, str, str | dict[str, str] | None, int]] = [
    ("clean", True, "", PASSES, None, 2),
    ("rate_limited", True, "{request: 1, status: 429, retry_after_s: 0}",
     "{text: {$contains: refunded}, requests: 3}", None, 2),
    ("overloaded", True, "{status: 529, retry_after_s: 0}",
     "{error: {$regex: '(?i)overloaded'}, requests: 3}", None, 0),
    ("overloaded_unexpected", False, "{status: 529, retry_after_s: 0}", PASSES,
     "*status*529*(HTTP 529, a fault injected by pytest-toolbench)*", 0),
    ("dropped", True, "{request: 2, disconnect: true}",
     "{text: {$contains: refunded}, requests: 3}", None, 2),
    ("stalled", True, "{request: 1, stall_s: 0.3}",
     "{text: {$contains: refunded}, latency_ms: {$gte: 300}}", None, 2),
    ("timed_out", True, "{request: 2, stall_s: 3}",
     "{error: {$regex: '^ReadTimedOut: no response within 1.5 s.*injected'}, requests: 2}",
     None, 1),
    ("slowed", True, "{request: 2, delay: {first_byte_ms: 200, chunk_ms: 5}}",
     "{text: {$contains: refunded}, latency_ms: {$gte: 200}}", None, 2),
    ("cut_expected", True, "{request: 2, cut: {after_chunks: 1}}",
     "{error: {$regex: '^ConnectionLost: the connection was closed after 1 event'}}", None, 2),
    ("cut_stream", True, "{request: 2, cut: {after_chunks: 2}}", PASSES,
     # A Gemini answer comes in one event: the close still comes before the end.
     {api: (f"*closed after {count} of the stream, with no terminator (a fault injected by"
            " pytest-toolbench: cut after 2 chunks)*")
      for api, count in (("chat", "2 events"), ("responses", "2 events"),
                         ("messages", "2 events"), ("gemini", "1 event"))}, 2),
    ("cut_body", False, "{request: 2, cut: {after_chunks: 0}}", PASSES,
     "*closed halfway through the body (a fault injected by pytest-toolbench*", 2),
    # Chat and Responses carry arguments as JSON text: the loop answers the call with the
    # tool error, and the model answers that (over a clean recording, see RECOVERED).
    # Messages and Gemini carry them as an object: text there is a reply of the wrong shape.
    ("malformed", False, "{request: 1, mutate: malformed_arguments}", PASSES,
     {"messages": "*tool_use lookup_order) has its input as a string, not an object*",
      "gemini": "*a functionCall needs a name and args as an object*"}, 2),
    # The loop answers a call of a tool it does not have with the error `unknown tool`.
    ("renamed", True, "{request: 1, mutate: unknown_tool}",
     "{tool_calls: [{name: {$regex: '^lookup_order_not_offered$'}}], text: {$contains: refunded}}",
     None, 2),
    ("empty", True, "{request: 2, mutate: empty}", PASSES, "*expect.text: '' does not contain 'refunded'*", 2),
    ("truncated", True, "{request: 2, mutate: truncated}",
     "{finish_reason: length, text: {$regex: '^Order 913 is'}}", None, 2),
    # A stage's own fault at a place it never reaches: the plan rotted.
    ("unselected", True, "{request: 9, status: 500}", PASSES,
     "*fault 1 of stage ask selected nothing: the stage sent 2 requests*", 2),
    ("truncated_body", False, "{request: 2, mutate: truncated}",
     "{finish_reason: length, text: {$regex: '^Order 913 is'}}", None, 2),
]
RECOVERED = {name: ["*differs from the one recorded*",
                    (f"*the fault injected just before: fault 1 of stage ask, mutate: {kind}"
                     " at request 1*")]
             for name, kind in (("malformed", "malformed_arguments"),
                                ("renamed", "unknown_tool"))}
"""Cases whose loop recovers with a request a clean recording never saw: replayed over
one, they fail, naming the fault before the first difference."""
APIS = ["chat", "responses", "messages", "gemini"]


class ToolThenAnswer:
    """The model of every case: a request that carries no tool result gets a call of
    ``lookup_order``; one that does, the answer. Answers any number of cases in any order
    (each case's requests depend on its faults)."""

    RESULT_MARKERS = ('"role": "tool"', '"role":"tool"', "function_call_output",
                      "tool_result", "functionResponse")

    def __call__(self, request: RecordedRequest) -> JsonReply | SSEReply:
        text = request.body.decode()
        answered = any(marker in text for marker in self.RESULT_MARKERS)
        turn = says(ANSWER) if answered else calls(("lookup_order", {"order_id": "913"}))
        return ScriptedModel(turn)(request)


def failure(said: str | dict[str, str] | None, api: str) -> str | None:
    """What the case's run says on ``api``; None: it passes."""
    return said.get(api) if isinstance(said, dict) else said


def case_file(api: str, base_url: str, faults: bool) -> str:
    model = "gemini-2.5-flash" if api == "gemini" else "test-model"
    documents = []
    for name, stream, fault, expect, _said, _reached in CASES:
        documents.append(
            CASE.replace("NAME", name).replace("MODEL", model).replace("BASE_URL", base_url)
            .replace("API", api).replace("STREAM", "true" if stream else "false")
            .replace("FAULT", fault if faults else "")
            .replace("EXPECT", expect if faults else PASSES))
    return "---\n".join(documents)


def run(pytester: pytest.Pytester, *args: str) -> pytest.RunResult:
    result = pytester.runpytest("-p", "no:cacheprovider", "-p", "no:randomly",
                                "--toolbench-concurrency", "4", "-rA", *args)
    gc.collect()
    return result


def verdicts(report: Path) -> dict[str, bool]:
    cases = json.loads(report.read_text())["cases"]
    return {case["case"]: case["outcome"] == "passed" for case in cases}


@pytest.mark.parametrize("api", APIS)
def test_every_fault_kind_gives_a_model_case_the_same_verdict_in_every_mode(
        api: str, pytester: pytest.Pytester, tmp_path: Path) -> None:
    """Live, recorded, replayed from the faulted recording and from a clean one: the same
    verdicts; the service never saw a status or disconnect fault's request; the cassette
    of a recording with faults holds the real exchanges, those of a clean recording."""
    server = GeminiServer() if api == "gemini" else ChatServer()
    dead = "http://127.0.0.1:9/v1beta" if api == "gemini" else "http://127.0.0.1:9/v1"
    cassettes = pytester.path / "__cassettes__"
    with server.start():
        server.set_handler(ToolThenAnswer())
        pytester.makefile(".case.yaml", orders=case_file(api, server.base_url, faults=False))
        run(pytester, "--toolbench-record").assert_outcomes(passed=len(CASES))
        clean = {name: recorded(cassettes, name) for name, *_ in CASES}
        shutil.copytree(cassettes, tmp_path / "clean")
        pytester.makefile(".case.yaml", orders=case_file(api, server.base_url, faults=True))
        before = len(server.requests)
        live = run(pytester, "--toolbench-live", "--toolbench-report", "live.json")
        reached = len(server.requests) - before
        record = run(pytester, "--toolbench-record", "--toolbench-report", "record.json")
    assert server.errors == []
    pytester.makefile(".case.yaml", orders=case_file(api, dead, faults=True))
    replayed = run(pytester, "--toolbench-report", "replayed.json")
    faulted = {name: recorded(cassettes, name) for name, *_ in CASES}
    shutil.rmtree(cassettes)
    shutil.copytree(tmp_path / "clean", cassettes)
    over_clean = run(pytester, "--toolbench-report", "over_clean.json")

    for result, report in ((live, "live"), (record, "record"), (replayed, "replayed"),
                           (over_clean, "over_clean")):
        expected = {name: failure(said, api) is None and (
            report != "over_clean" or name not in RECOVERED)
            for name, _stream, _fault, _expect, said, _reached in CASES}
        assert verdicts(pytester.path / f"{report}.json") == expected, (
            report, result.stdout.str())
    for name, lines in RECOVERED.items():
        over_clean.stdout.fnmatch_lines([f"*{name}*", *lines])
    for name, _stream, _fault, _expect, said, _reached in CASES:
        shown = failure(said, api)
        if shown is not None:
            for result in (live, replayed, *([over_clean] if name not in RECOVERED else [])):
                result.stdout.fnmatch_lines([f"*{name}*", shown])
    # Status and disconnect faults never reached the service, nor did a request held
    # past the client's timeout; every other fault acted on a real reply.
    assert reached == sum(case[-1] for case in CASES)
    # A recording with faults keeps the real exchanges, those a clean recording holds (a
    # cut reply whole); one that recovered, the real reply to the request the fault
    # changed, and the request after it as it was sent.
    for name in RECOVERED:
        assert faulted.pop(name)[0]["response"] == clean.pop(name)[0]["response"]
    assert faulted == {name: clean[name][:reached]
                       for name, _stream, _fault, _expect, _said, reached in CASES
                       if name not in RECOVERED}


def recorded(cassettes: Path, name: str) -> list[dict[str, Any]]:
    """The exchanges of case ``name``'s cassette, without their timings."""
    [path] = [path for path in cassettes.rglob(f"{name}[[]*") if path.is_file()]
    exchanges: list[dict[str, Any]] = yaml.safe_load(path.read_text())["interactions"]
    for exchange in exchanges:
        response = exchange["response"]
        response.pop("elapsed_ms")
        for event in response.get("events") or []:
            event.pop("at_ms")
    return exchanges


def test_the_runs_own_fault_plan_reaches_every_model_case(pytester: pytest.Pytester) -> None:
    """``--toolbench-fault`` replays a clean suite of model cases under a fault plan, no
    case file touched; the reports mark each fault as injected."""
    server = ChatServer()
    with server.start():
        server.set_handler(ToolThenAnswer())
        pytester.makefile(".case.yaml", orders=case_file("chat", server.base_url, faults=False))
        run(pytester, "--toolbench-record").assert_outcomes(passed=len(CASES))
    pytester.makefile(".case.yaml", orders=case_file("chat", "http://127.0.0.1:9/v1",
                                                     faults=False))
    slowed = run(pytester, "--toolbench-fault", "delay=30@2", "--toolbench-report", "slow.json")
    cut = run(pytester, "--toolbench-fault", "cut=1@2", "--toolbench-fault", "status=503@1",
              "--toolbench-html", "cut.html")

    slowed.assert_outcomes(passed=len(CASES))
    faults = [turn["fault"] for case in json.loads((pytester.path / "slow.json").read_text())[
        "cases"] for run_ in case["runs"] for stage in run_["stages"]
        for attempt in stage["attempts"] for turn in attempt["turns"]]
    assert [fault and (fault["injected"], fault["does"], fault["source"]) for fault in faults
            ] == [None, (True, "delay 30 ms to the first byte, 0 ms a chunk",
                         "--toolbench-fault 1")] * len(CASES)
    cut.assert_outcomes(failed=len(CASES))
    cut.stdout.fnmatch_lines([
        ("*injected fault (--toolbench-fault 1): cut after 1 chunks, not the service's own;"
         " no reply came through whole"),
        ("*retry: attempt 1 failed (HTTP 503: Service unavailable (HTTP 503, a fault injected"
        " by pytest-toolbench)*"),
        ("*closed after 1 event of the stream, with no terminator (a fault injected by"
        " pytest-toolbench: cut after 1 chunks)*")])
    page = (pytester.path / "cut.html").read_text()
    assert page.count("cut after 1 chunks; no reply came through whole") == len(CASES)


def test_a_seeded_rate_draws_the_same_requests_of_a_repeated_model_case_every_session(
        pytester: pytest.Pytester) -> None:
    """With no retries, each run of the repeat fails when its rate draws one of its two
    requests: the same runs in every session, in replay as in the recording."""
    repeated = (case_file("chat", "BASE", faults=False).split("---\n")[0]
                .replace("retries: 2", "retries: 0")
                .replace("model: test-model\n",
                         "model: test-model\nrepeat: {runs: 6, min_pass_rate: 0.1}\n"))
    server = ChatServer()
    with server.start():
        server.set_handler(ToolThenAnswer())
        pytester.makefile(".case.yaml", orders=repeated.replace("BASE", server.base_url))
        live = run(pytester, "--toolbench-live", "--toolbench-fault",
                   "status=500,rate=0.3,seed=4", "--toolbench-report", "live.json")
        run(pytester, "--toolbench-record").assert_outcomes(passed=1)
    pytester.makefile(".case.yaml", orders=repeated.replace("BASE", "http://127.0.0.1:9/v1"))
    figures = []
    for report in ("live.json", "first.json", "second.json"):
        if report != "live.json":
            run(pytester, "--toolbench-fault", "status=500,rate=0.3,seed=4",
                "--toolbench-report", report)
        case = json.loads((pytester.path / report).read_text())["cases"][0]
        figures.append((case["passes"], case["runs_total"],
                        [run_["passed"] for run_ in case["runs"]]))
    assert live.ret == pytest.ExitCode.OK
    assert figures[0] == figures[1] == figures[2]
    passes, total, _runs = figures[0]
    assert total == 6 and 0 < passes < 6, figures  # the rate drew some requests, not all
