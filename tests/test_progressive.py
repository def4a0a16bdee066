"""``run_tools: progressive``: each call of a streamed reply runs the moment its arguments
close in the stream, while the stream goes on; ``expect.stream.progressive``; the turn's
timeline in the JSON report and the time saved in the summary.

Every test runs the plugin through pytester against a real loopback server of each wire
API whose scripted model streams a call's arguments in several events, a pause between
events, so "closed before the stream ended, in time" is measurable.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from support.chat_server import ChatServer
from support.gemini_server import GeminiServer
from support.scripted_model import ScriptedModel, calls, says

from pytest_toolbench.report.html_page import ms

PAUSE_S = 0.1
"""Between two events of a streamed reply: well above a busy machine's scheduling noise
(the client stamps each event when it reads it, which a busy neighbour can delay)."""

TOOLS_MODULE = '''
import time

def lookup(city):
    time.sleep(0.05)
    return {"city": city, "temp_c": 21}
'''

CASE = """
name: trip
model: m
endpoint: {{api: {api}, base_url: '{url}'}}
tools:
  - name: lookup
    parameters: {{type: object, properties: {{city: {{type: string}}}}, required: [city]}}
    python: progressive_tools:lookup
stages:
  - name: plan
    user: Weather in Paris and Lyon?
    stream: true
    run_tools: progressive
    expect:
      text: {{$contains: sunny}}
      tool_calls: [{{name: lookup, arguments: {{city: Paris}}}},
                   {{name: lookup, arguments: {{city: Lyon}}}}]
      stream: {{progressive: {progressive}}}
"""

TWO_CALLS = calls(("lookup", {"city": "Paris"}), ("lookup", {"city": "Lyon"}))

APIS = ["chat", "responses", "messages", "gemini"]


@pytest.fixture
def tools_module(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(progressive_tools=TOOLS_MODULE)
    pytester.syspathinsert()


@pytest.fixture
def gemini_server() -> Iterator[GeminiServer]:
    with GeminiServer().start() as server:
        yield server


def server_for(api: str, chat_server: ChatServer, gemini_server: GeminiServer) -> ChatServer:
    return gemini_server if api == "gemini" else chat_server


def write_case(pytester: pytest.Pytester, api: str, url: str, progressive: str = "true",
               body: str = CASE) -> None:
    pytester.makefile(".case.yaml", progressive=body.format(api=api, url=url,
                                                            progressive=progressive))


def report(pytester: pytest.Pytester) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((pytester.path / "r.json").read_text(encoding="utf-8"))
    return data


def first_turn(data: dict[str, Any]) -> dict[str, Any]:
    turn: dict[str, Any] = data["cases"][0]["runs"][0]["stages"][0]["attempts"][0]["turns"][0]
    return turn


@pytest.mark.parametrize("api", APIS)
def test_progressive_stage_runs_a_call_while_its_stream_goes_on(
    pytester: pytest.Pytester, chat_server: ChatServer, gemini_server: GeminiServer,
    tools_module: None, api: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ("OPENAI_API_KEY", "ANTHROPIC_API_KEY", "GEMINI_API_KEY"):
        monkeypatch.setenv(name, "sk-test")
    server = server_for(api, chat_server, gemini_server)
    server.set_handler(ScriptedModel(TWO_CALLS, says("Both are sunny."), pause_s=PAUSE_S))
    # Gemini sends each call whole, in one part: it runs as its part arrives, and the
    # stream is not progressive by the check's measure (arguments in several events).
    write_case(pytester, api, server.base_url, "false" if api == "gemini" else "true")
    result = pytester.runpytest("--toolbench-live", "-p", "no:cacheprovider",
                                "--toolbench-report=r.json", "--toolbench-html=r.html")
    result.assert_outcomes(passed=1)
    turn = first_turn(report(pytester))
    timeline = turn["timeline"]
    assert timeline["progressive"] is True
    first, second = timeline["calls"]
    ended = timeline["stream_ended_ms"]
    assert [first["name"], second["name"]] == ["lookup", "lookup"]
    # The first call closed while the stream went on (the second call's events came after
    # it, a pause apart), and its tool ran then, not after the stream's end.
    assert first["closed_ms"] + PAUSE_S * 1000 / 2 <= ended
    assert first["closed_ms"] <= first["started_ms"] < ended
    assert first["started_ms"] < first["ended_ms"]
    assert second["closed_ms"] <= second["started_ms"]
    # Gemini's second call comes in the stream's last event: its tool starts no sooner
    # than the stream's end; only the first one's overlap is saved.
    assert timeline["saved_ms"] > 0 if api != "gemini" else timeline["saved_ms"] >= 0
    assert [run["started_ms"] for run in turn["tool_runs"]] == [first["started_ms"],
                                                                 second["started_ms"]]
    result.stdout.fnmatch_lines(["*progressive execution saved * ms*"])
    page = (pytester.path / "r.html").read_text(encoding="utf-8")
    drawn = page[page.index('<div class="timeline tools">'):]
    drawn = drawn[:drawn.index("</div>")]
    assert (f"lookup: closed {ms(first['closed_ms'])}, ran {ms(first['started_ms'])}"
            f" to {ms(first['ended_ms'])}") in drawn
    assert f"stream ended {ms(ended)}" in drawn


@pytest.mark.parametrize("api", ["chat", "responses", "messages"])
def test_a_server_that_holds_its_calls_to_the_end_fails_stream_progressive(
    pytester: pytest.Pytester, chat_server: ChatServer, tools_module: None, api: str,
    monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ("OPENAI_API_KEY", "ANTHROPIC_API_KEY"):
        monkeypatch.setenv(name, "sk-test")
    chat_server.set_handler(ScriptedModel(TWO_CALLS, says("Both are sunny."),
                                          pause_s=PAUSE_S, buffered=True))
    write_case(pytester, api, chat_server.base_url)
    result = pytester.runpytest("--toolbench-live", "-p", "no:cacheprovider")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines([
        ("*progressive.case.yaml:17: *the stream did not send its calls as they were made:"
        " lookup's arguments came in * events, the last at * ms, and the stream ended at"
        " * ms: no sooner*")])


def test_stream_progressive_false_holds_for_a_buffered_server_and_fails_for_a_streaming_one(
    pytester: pytest.Pytester, chat_server: ChatServer, tools_module: None
) -> None:
    chat_server.set_handler(ScriptedModel(TWO_CALLS, says("Both are sunny."),
                                          pause_s=PAUSE_S, buffered=True))
    write_case(pytester, "chat", chat_server.base_url, "false")
    pytester.runpytest("--toolbench-live", "-p", "no:cacheprovider").assert_outcomes(passed=1)
    chat_server.set_handler(ScriptedModel(TWO_CALLS, says("Both are sunny."),
                                          pause_s=PAUSE_S))
    result = pytester.runpytest("--toolbench-live", "-p", "no:cacheprovider")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines([("*the stream sent every call as it was made*expected it not"
                                 " to*")])


def test_a_recorded_progressive_stream_replays_with_its_recorded_times(
    pytester: pytest.Pytester, chat_server: ChatServer, tools_module: None
) -> None:
    chat_server.set_handler(ScriptedModel(TWO_CALLS, says("Both are sunny."),
                                          pause_s=PAUSE_S))
    write_case(pytester, "chat", chat_server.base_url)
    pytester.runpytest("--toolbench-record", "-p", "no:cacheprovider").assert_outcomes(
        passed=1)
    served = len(chat_server.requests)
    result = pytester.runpytest("-p", "no:cacheprovider", "--toolbench-report=r.json")
    result.assert_outcomes(passed=1)  # replayed instantly, it is still progressive
    assert len(chat_server.requests) == served
    timeline = first_turn(report(pytester))["timeline"]
    # The stream's times are the recorded ones; the tools ran now, placed after the
    # moment that let them start.
    assert timeline["stream_ended_ms"] >= 4 * PAUSE_S * 1000
    assert all(call["started_ms"] >= call["closed_ms"] for call in timeline["calls"])


def test_run_tools_true_runs_the_calls_after_the_stream_and_saves_nothing(
    pytester: pytest.Pytester, chat_server: ChatServer, tools_module: None
) -> None:
    chat_server.set_handler(ScriptedModel(TWO_CALLS, says("Both are sunny."),
                                          pause_s=PAUSE_S))
    write_case(pytester, "chat", chat_server.base_url,
               body=CASE.replace("run_tools: progressive", "run_tools: true"))
    result = pytester.runpytest("--toolbench-live", "-p", "no:cacheprovider",
                                "--toolbench-report=r.json")
    result.assert_outcomes(passed=1)
    timeline = first_turn(report(pytester))["timeline"]
    assert timeline["progressive"] is False and timeline["saved_ms"] is None
    assert all(call["started_ms"] >= timeline["stream_ended_ms"]
               for call in timeline["calls"])
    assert "progressive execution saved" not in result.stdout.str()


def test_progressive_needs_a_streamed_stage(pytester: pytest.Pytester,
                                            tools_module: None) -> None:
    write_case(pytester, "chat", "http://127.0.0.1:9/v1",
               body=CASE.replace("    stream: true\n", ""))
    result = pytester.runpytest("-p", "no:cacheprovider")
    assert result.ret == pytest.ExitCode.INTERRUPTED
    result.stdout.fnmatch_lines([("*progressive.case.yaml:11*run_tools: progressive runs each"
                                 " call as its arguments close in the stream: the stage needs"
                                 " stream: true*")])


def test_stream_progressive_with_no_streamed_call_fails_saying_so(
    pytester: pytest.Pytester, chat_server: ChatServer, tools_module: None
) -> None:
    chat_server.set_handler(ScriptedModel(says("Both are sunny."), pause_s=PAUSE_S))
    write_case(pytester, "chat", chat_server.base_url,
               body=CASE.replace("      tool_calls: [{{name: lookup, arguments: {{city: Paris}}}},\n"
                                 "                   {{name: lookup, arguments: {{city: Lyon}}}}]\n",
                                 ""))
    result = pytester.runpytest("--toolbench-live", "-p", "no:cacheprovider")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines([("*stream.progressive reads the stage's streamed calls, and no"
                                 " streamed reply of the stage called a tool*")])



ISSUE_CASE = """name: clarify_then_book
model: m
endpoint: {{base_url: '{url}'}}
max_iterations: 6
tools:
  - name: book_table
    parameters: {{type: object, properties: {{party: {{type: integer}}, time: {{type: string}}}}}}
    result: {{booked: true}}
  - name: notify_kitchen
    python: kitchen:notify
    background: true
stages:
  - name: ask
    user: Book me a table.
    expect: {{tool_calls: [{{name: book_table}}]}}
    next: {{pass: confirm, fail: clarify}}
  - name: clarify
    user: For two, tonight at eight.
    expect: {{tool_calls: [{{name: book_table}}]}}
    next: {{pass: confirm, fail: clarify}}
  - name: confirm
    run_tools: progressive
    stream: true
    await_background: true
    expect:
      text: {{$contains: booked}}
      stream: {{progressive: true}}
expect:
  path: {{$contains: [ask, confirm]}}
"""

KITCHEN = '''
import time

def notify(**kwargs):
    time.sleep(0.3)
    with open("kitchen.log", "a") as log:
        log.write("notified\\n")
    return {"notified": True}
'''


def test_the_issues_case_branches_runs_calls_as_they_close_and_waits_for_the_kitchen(
    pytester: pytest.Pytester, chat_server: ChatServer
) -> None:
    pytester.makepyfile(kitchen=KITCHEN)
    pytester.syspathinsert()
    booking = ("book_table", {"party": 2, "time": "20:00"})
    chat_server.set_handler(ScriptedModel(
        says("For how many, and when?"), calls(booking),
        calls(("notify_kitchen", {"party": 2}), booking),
        says("You are booked for two at eight."),
        pause_s=PAUSE_S / 2))
    pytester.makefile(".case.yaml", book=ISSUE_CASE.format(url=chat_server.base_url))
    result = pytester.runpytest("--toolbench-live", "-p", "no:cacheprovider",
                                "--toolbench-report=r.json")
    result.assert_outcomes(passed=1)
    run = report(pytester)["cases"][0]["runs"][0]
    assert [stage["name"] for stage in run["stages"]][:3] == ["ask", "clarify", "confirm"]
    # The kitchen was told in the background, and had been by the confirm stage's checks.
    assert [(task["name"], task["status"]) for task in run["background"]] == [
        ("notify_kitchen", "done")]
    confirm = run["stages"][2]["attempts"][-1]
    notified = next(run for turn in confirm["turns"] for run in turn["tool_runs"]
                    if run["name"] == "notify_kitchen")
    assert json.loads(notified["content"]) == {"status": "started", "task": "task_1"}
    assert (pytester.path / "kitchen.log").read_text() == "notified\n"
    assert confirm["turns"][0]["timeline"]["progressive"] is True
