"""``toolbench diff OLD NEW``: two JSON reports of real runs, compared case by case."""

from __future__ import annotations

import json
import re
import uuid
from pathlib import Path
from typing import Any

import pytest
from support.chat_server import (
    ChatServer,
    SSEPause,
    chunks_for,
    completion,
    json_reply,
    sse_reply,
)
from test_html_report import external_loads, messages_body

from pytest_toolbench.commands.cli import main

CASES = """name: weather
model: m1
endpoint: {{base_url: '{url}'}}
tools:
  - name: get_weather
    result: {{temp_c: 21}}
  - name: get_time
    result: {{hour: 3}}
stages:
  - name: ask
    user: Weather in Paris?
    expect:
      tool_calls: {{$includes: [{{name: get_weather}}]}}
---
name: chat
model: m1
endpoint: {{base_url: '{url}'}}
stages:
  - name: hello
    user: hi
"""


def record(pytester: pytest.Pytester, server: ChatServer, name: str,
           calls: list[tuple[str, dict[str, Any]]], text: str) -> Path:
    """One live run whose weather stage gets ``calls`` (or text) and whose chat gets ``text``."""
    def answer(request: Any) -> Any:
        if "tools" in request.json() and calls:
            return json_reply(completion(tool_calls=calls))
        return json_reply(completion(text=text))
    server.set_handler(answer)
    pytester.makefile(".case.yaml", suite=CASES.format(url=server.base_url))
    pytester.runpytest("--toolbench-live", f"--toolbench-report={name}")
    return pytester.path / name


# Live recordings on a busy machine differ in latency by more than the diff's default
# floor; the tests of what changed in answers and calls leave timings out with this.
STEADY = ("--min-ms", "60000")


def run(capsys: pytest.CaptureFixture[str], *argv: str | Path) -> tuple[int, str]:
    capsys.readouterr()  # what the recording runs printed
    code = main(["diff", *map(str, argv)])
    return code, capsys.readouterr().out


@pytest.fixture
def reports(pytester: pytest.Pytester, chat_server: ChatServer) -> tuple[Path, Path, Path]:
    """Last night: Paris, a greeting. Tonight: Lyon plus a new call, then no call at all."""
    old = record(pytester, chat_server, "old.json", [("get_weather", {"city": "Paris"})],
                 "Hello! How can I help you today?")
    new = record(pytester, chat_server, "new.json",
                 [("get_weather", {"city": "Lyon"}), ("get_time", {})],
                 "Hello! How may I help you today?")
    gone = record(pytester, chat_server, "gone.json", [], "Hello! How can I help you today?")
    return old, new, gone


def test_diff_shows_changed_arguments_new_calls_and_answers(
    reports: tuple[Path, Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    old, new, _ = reports
    code, out = run(capsys, old, new, *STEADY)
    assert code == 0  # nothing that passed fails now
    assert out.splitlines() == [
        (f"toolbench diff {old} -> {new}: 2 cases compared, 2 changed (2 in answers), 0"
         " verdicts regressed"),
        "suite.case.yaml::weather[m1]",
        '   arguments   ask: get_weather city: "Paris" -> "Lyon"',
        "   call added  ask: get_time({})",
        "suite.case.yaml::chat[m1]",
        "   answer      hello: Hello! How [-can-] {+may+} I help you today?",
    ]


def test_diff_exits_1_on_a_regressed_verdict_and_names_the_missing_call(
    reports: tuple[Path, Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    old, _, gone = reports
    code, out = run(capsys, old, gone, *STEADY)
    assert code == 1
    assert " ! verdict       passed -> failed" in out.splitlines()
    assert '   call removed  ask: get_weather({"city": "Paris"})' in out.splitlines()
    assert ", 1 verdict regressed" in out.splitlines()[0]
    assert "changed (1 in verdicts" in out.splitlines()[0]


def test_diff_as_markdown_and_json(
    reports: tuple[Path, Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    old, _, gone = reports
    code, out = run(capsys, old, gone, "--format", "markdown", *STEADY)
    assert code == 1
    lines = out.splitlines()
    assert lines[0] == f"### toolbench diff: `{old}` -> `{gone}`"
    assert "| case | change | detail |" in lines
    assert "| `suite.case.yaml::weather[m1]` | **regressed** verdict | passed -> failed |" in lines
    code, out = run(capsys, old, gone, "--format", "json", *STEADY)
    document = json.loads(out)
    assert code == 1 and document["regressed"] == 1 and document["cases_compared"] == 2
    assert {"nodeid": "suite.case.yaml::weather[m1]", "kind": "verdict",
            "detail": "passed -> failed", "regression": True} in document["changes"]


def test_diff_of_a_report_with_itself_is_empty(
    reports: tuple[Path, Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    old, _, _ = reports
    assert run(capsys, old, old) == (
        0, f"toolbench diff {old} -> {old}: 2 cases compared, 0 changed, 0 verdicts regressed\n")


def test_diff_reports_timings_past_the_threshold_only(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    def report(name: str, latency: float) -> Path:
        case = {"nodeid": "a.case.yaml::a", "outcome": "passed", "latency_ms": latency,
                "ttft_ms": None, "total_tokens": 10, "runs": []}
        path = tmp_path / name
        path.write_text(json.dumps({"version": 1, "cases": [case]}), encoding="utf-8")
        return path
    old, slower = report("old.json", 1000.0), report("new.json", 1500.0)
    assert "   latency_ms  1000 -> 1500 (+50%)" in run(capsys, old, slower)[1]
    assert "latency_ms" not in run(capsys, old, slower, "--threshold", "60")[1]


def test_diff_usage_errors_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["diff", str(tmp_path / "a.json"), str(tmp_path / "b.json")]) == 2
    assert capsys.readouterr().err == (
        f"toolbench diff: error: cannot read {tmp_path / 'a.json'}: No such file or directory\n")
    assert main(["diff", "a", "b", "--threshold", "nan"]) == 2
    assert "--threshold: expected a finite number >= 0, got 'nan'" in capsys.readouterr().err


# ---------------------------------------------------------------------------- cassette folders

RECORDED = """name: weather
model: m1
endpoint: {{base_url: '{url}'}}
tools:
  - name: get_weather
    result: {{temp_c: 21}}
  - name: get_time
    result: {{hour: 3}}
stages:
  - name: ask
    user: Weather in Paris?
---
name: chat
model: m1
endpoint: {{base_url: '{url}'}}
stages:
  - name: hello
    user: hi
    stream: true
"""


def record_cassettes(pytester: pytest.Pytester, server: ChatServer, folder: str,
                     calls: dict[str, list[tuple[str, dict[str, Any]]]], text: str,
                     pause_s: float = 0.0, *flags: str) -> Path:
    """Record the suite into ``folder`` with --toolbench-record: the weather case gets the
    calls of its model, the streamed chat ``text`` after a pause of ``pause_s``."""
    def answer(request: Any) -> Any:
        body = request.json()
        if "tools" in body:
            return json_reply(completion(tool_calls=calls[body["model"]]))
        return sse_reply([SSEPause(pause_s), *chunks_for(text)])
    server.set_handler(answer)
    pytester.makefile(".case.yaml", suite=RECORDED.format(url=server.base_url))
    result = pytester.runpytest("--toolbench-record", f"--toolbench-cassette-dir={folder}",
                                *flags)
    result.assert_outcomes(passed=2)
    return pytester.path / folder


def test_diff_of_two_recordings_of_a_suite_compares_each_cassettes_replies(
    pytester: pytest.Pytester, chat_server: ChatServer, capsys: pytest.CaptureFixture[str]
) -> None:
    old = record_cassettes(pytester, chat_server, "old", {"m1": [("get_weather",
                           {"city": "Paris"})]}, "Hello! How can I help you today?")
    new = record_cassettes(pytester, chat_server, "new", {"m1": [
        ("get_weather", {"city": "Lyon"}), ("get_time", {})]},
         "Hello! How may I <b>help</b> you today?", 0.4)
    assert sorted(p.relative_to(old).as_posix() for p in old.rglob("*.yaml")) == [
        "suite/chat[m1].yaml", "suite/weather[m1].yaml"]
    code, out = run(capsys, old, new, "--html", pytester.path / "diff.html")
    assert code == 0  # cassettes hold no verdict to regress
    lines = out.splitlines()
    assert lines[:3] == [
        (f"toolbench diff {old} -> {new}: 2 cassettes compared, 2 changed (2 in answers);"
         " cassettes hold no verdicts, so none is compared"),
        "suite/chat[m1].yaml",
        ("   answer      exchange 1: Hello! How [-can-] {+may+} I [-help-] {+<b>help</b>+} you"
         " today?")]
    assert re.fullmatch(r"   latency_ms  [\d.]+ -> 4\d\d(\.\d)? \(\+\d+%\)", lines[3])
    assert re.fullmatch(r"   ttft_ms     [\d.]+ -> 4\d\d(\.\d)? \(\+\d+%\)", lines[4])
    assert lines[5:] == [
        "suite/weather[m1].yaml",
        '   arguments   exchange 1: get_weather city: "Paris" -> "Lyon"',
        "   call added  exchange 1: get_time({})"]

    page = (pytester.path / "diff.html").read_text(encoding="utf-8")
    assert "<script" not in page and external_loads(page) == []
    assert ('<del class="del">can</del> <ins class="ins">may</ins> I <del class="del">help'
            '</del> <ins class="ins">&lt;b&gt;help&lt;/b&gt;</ins>') in page
    assert '<td rowspan="3" class="id">suite/chat[m1].yaml</td>' in page
    assert "cassettes hold no verdicts" in page

    code, out = run(capsys, old, new, "--format", "json")
    document = json.loads(out)
    assert (document["compared"], document["paired_by"], document["cases_compared"],
            document["regressed"]) == ("cassettes", "path", 2, 0)


def test_diff_of_two_models_pairs_cassettes_by_case_name(
    pytester: pytest.Pytester, chat_server: ChatServer, capsys: pytest.CaptureFixture[str]
) -> None:
    """One folder per model: no path is in both, so the cassettes pair by case name."""
    calls = {"m1": [("get_weather", {"city": "Paris"})],
             "m2": [("get_weather", {"city": "Paris", "unit": "C"})]}
    one = record_cassettes(pytester, chat_server, "one", calls, "Hi there")
    two = record_cassettes(pytester, chat_server, "two", calls, "Hi there", 0.0,
                           "--toolbench-model=m2")
    # Timings are not this test's subject: a loaded machine can make one recording's reply
    # take past --min-ms, which the diff rightly reports as a change.
    code, out = run(capsys, one, two, "--min-ms", "60000")
    assert code == 0
    assert out.splitlines() == [
        (f"toolbench diff {one} -> {two}: 2 cassettes compared, paired by case name (no path"
         " is in both folders), 1 changed (1 in answers); cassettes hold no verdicts, so none"
         " is compared"),
        "suite/weather[m1].yaml -> suite/weather[m2].yaml",
        '   arguments  exchange 1: get_weather unit: (absent) -> "C"']


def test_diff_of_folders_names_what_it_cannot_compare(
    pytester: pytest.Pytester, chat_server: ChatServer, capsys: pytest.CaptureFixture[str]
) -> None:
    calls = {"m1": [("get_weather", {"city": "Paris"})]}
    old = record_cassettes(pytester, chat_server, "old", calls, "Hi")
    new = record_cassettes(pytester, chat_server, "new", calls, "Hi")
    cut = new / "suite" / "weather[m1].yaml"
    cut.write_bytes(cut.read_bytes()[:200])  # a recording cut short by a full disk
    (new / "suite" / "chat[m1].yaml").rename(new / "suite" / "greet[m1].yaml")
    code, out = run(capsys, old, new)
    assert code == 0
    assert out.splitlines()[1:] == [
        "suite/weather[m1].yaml",
        ("   unreadable        new: cassette unreadable: suite/weather[m1].yaml: "
         "interactions[0].response: missing"),
        "suite/greet[m1].yaml",
        "   cassette added    1 exchange",
        "suite/chat[m1].yaml",
        "   cassette removed  1 exchange"]
    assert out.splitlines()[0].endswith(
        ": 1 cassette compared, 3 changed (1 unreadable, 1 added (only in NEW), 1 removed (only"
        " in OLD)); cassettes hold no verdicts, so none is compared")
    assert main(["diff", str(old), str(pytester.path / "old.json")]) == 2
    assert capsys.readouterr().err == (
        f"toolbench diff: error: {old} is a folder and the other is not: compare two JSON "
        "reports or two cassette folders\n")
    (pytester.path / "empty").mkdir()
    assert main(["diff", str(old), str(pytester.path / "empty")]) == 2
    assert capsys.readouterr().err == (
        f"toolbench diff: error: no cassette (*.yaml) below {pytester.path / 'empty'}\n")


def test_diff_of_messages_api_cassettes_reads_them_with_that_apis_reader(
    pytester: pytest.Pytester, chat_server: ChatServer, capsys: pytest.CaptureFixture[str]
) -> None:
    pytester.makefile(".case.yaml", suite=f"""name: greet
model: m1
endpoint: {{base_url: '{chat_server.base_url}'}}
stages:
  - {{name: hello, user: hi}}
""")
    folders = []
    for folder, text in (("old", "Hello there"), ("new", "Hello friend")):
        chat_server.set_handler(lambda request, text=text: json_reply(
            messages_body(text, "greet back")))
        pytester.runpytest("--toolbench-record", "--toolbench-api=messages",
                           f"--toolbench-cassette-dir={folder}").assert_outcomes(passed=1)
        folders.append(pytester.path / folder)
    code, out = run(capsys, *folders)
    assert (code, out.splitlines()[1:]) == (0, [
        "suite/greet[m1-messages].yaml",
        "   answer  exchange 1: Hello [-there-] {+friend+}"])


def test_diff_of_reports_names_errors_and_extra_turns(
    pytester: pytest.Pytester, chat_server: ChatServer, capsys: pytest.CaptureFixture[str]
) -> None:
    """Tonight the chat gets a 400 where it got an answer, and the weather stage's agent
    loop needs one more turn."""
    pytester.makefile(".case.yaml", suite=f"""name: weather
endpoint: {{base_url: '{chat_server.base_url}'}}
tools: [{{name: get_weather, result: {{temp_c: 21}}}}]
stages:
  - {{name: ask, user: Weather in Paris?, run_tools: true}}
---
name: chat
endpoint: {{base_url: '{chat_server.base_url}'}}
stages:
  - {{name: hello, user: hi}}
""")
    for name, calls, broken in (("old.json", 1, False), ("new.json", 2, True)):
        def answer(request: Any, calls: int = calls, broken: bool = broken) -> Any:
            body = request.json()
            if "tools" not in body:
                return json_reply({"error": {"message": "model not found"}}, 400) if broken \
                    else json_reply(completion(text="hello"))
            done = sum(message["role"] == "tool" for message in body["messages"])
            return json_reply(completion(tool_calls=[("get_weather", {"city": "Paris"})])
                              if done < calls else completion(text="21 degrees"))
        chat_server.set_handler(answer)
        pytester.runpytest("--toolbench-live", f"--toolbench-report={name}")
    code, out = run(capsys, pytester.path / "old.json", pytester.path / "new.json")
    assert code == 1
    assert out.splitlines()[1:] == [
        "suite.case.yaml::weather",
        '   call added    ask: get_weather({"city": "Paris"})',
        "   turns         2 -> 3",
        "   total_tokens  30 -> 45 (+50%)",
        "suite.case.yaml::chat",
        " ! verdict       passed -> failed",
        "   error         hello: none -> HTTP 400: model not found",
        "   total_tokens  15 -> unknown"]


def test_diff_of_cassettes_from_a_server_that_counts_in_infinity(
    pytester: pytest.Pytester, chat_server: ChatServer, capsys: pytest.CaptureFixture[str]
) -> None:
    """A reply's usage as the server wrote it, Infinity and NaN included (Python's JSON
    reader accepts both): the cassettes still compare, and such a count is no count."""
    def counts(total: Any) -> Any:
        def answer(request: Any) -> Any:
            body = completion(text="hi", usage={"prompt_tokens": 1, "completion_tokens": 1,
                                                "total_tokens": 2})
            body["usage"]["total_tokens"] = total
            return json_reply(body)
        return answer
    for folder, total in (("old", 12), ("new", float("inf"))):
        chat_server.set_handler(counts(total))
        pytester.makefile(".case.yaml", suite=(
            f"name: hi\nendpoint: {{base_url: '{chat_server.base_url}'}}\n"
            "stages: [{name: ask, user: hi}]\n"))
        pytester.runpytest("--toolbench-record", f"--toolbench-cassette-dir={folder}"
                           ).assert_outcomes(passed=1)

    code, out = run(capsys, pytester.path / "old", pytester.path / "new")

    assert code == 0
    assert "   total_tokens  12 -> unknown" in out.splitlines()


# ---------------------------------------------------------------------------- replay vs live

LOOP_CASE = """name: trip
model: test-model
endpoint: {{base_url: '{url}'}}
tools:
  - name: get_weather
    result: {{temp_c: 21}}
stages:
  - name: ask
    user: {question}
    run_tools: true
"""


def slow_server_with_fresh_ids(server: ChatServer) -> None:
    """A server that takes 0.3 s a reply and makes up new call ids every time, as real
    ones do: a live run differs from its cassette in timings and ids, never in words."""
    def answer(request: Any) -> Any:
        if any(message["role"] == "tool" for message in request.json()["messages"]):
            return json_reply(completion(text="It is 21 degrees."), delay_s=0.3)
        call = {"id": f"call_{uuid.uuid4().hex}", "type": "function",
                "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}
        return json_reply(completion(tool_calls=[call]), delay_s=0.3)
    server.set_handler(answer)


def test_a_replay_and_a_live_run_of_the_same_cassette_show_no_drift(
        pytester: pytest.Pytester, chat_server: ChatServer,
        capsys: pytest.CaptureFixture[str]) -> None:
    slow_server_with_fresh_ids(chat_server)
    pytester.makefile(".case.yaml", loop=LOOP_CASE.format(url=chat_server.base_url,
                                                           question="Weather in Paris?"))
    for mode, report in (("--toolbench-record", "recorded.json"), ("--toolbench-live",
                                                                  "live.json"),
                         ("--toolbench-mode=replay", "replayed.json")):
        pytester.runpytest("-p", "no:cacheprovider", mode, f"--toolbench-report={report}"
                           ).assert_outcomes(passed=1)
    replayed, live = pytester.path / "replayed.json", pytester.path / "live.json"
    live_latency = json.loads(live.read_text())["cases"][0]["latency_ms"]
    assert live_latency >= 600 > json.loads(replayed.read_text())["cases"][0]["latency_ms"]
    code, out = run(capsys, replayed, live)
    assert (code, out) == (0, (
        f"toolbench diff {replayed} -> {live}: 1 case compared, 0 changed, 0 verdicts"
        " regressed; latency and time to first token not compared: OLD ran replay, NEW live"
        " (a replay's timings are its own)\n"))
    # Two live runs keep their timings compared; their ids differ and are no change either.
    code, out = run(capsys, pytester.path / "recorded.json", live)
    assert (code, out.splitlines()[0]) == (0, (
        f"toolbench diff {pytester.path / 'recorded.json'} -> {live}: 1 case compared,"
        " 0 changed, 0 verdicts regressed"))


def test_diff_tells_a_changed_request_from_a_changed_answer(
        pytester: pytest.Pytester, chat_server: ChatServer,
        capsys: pytest.CaptureFixture[str]) -> None:
    slow_server_with_fresh_ids(chat_server)
    case = pytester.makefile(".case.yaml", loop=LOOP_CASE.format(
        url=chat_server.base_url, question="Weather in Paris?"))
    run_live = ("-p", "no:cacheprovider", "--toolbench-live")
    pytester.runpytest(*run_live, "--toolbench-report=before.json").assert_outcomes(passed=1)
    # The model answers otherwise; the case sent the same: an answer change alone.
    chat_server.set_handler(lambda request: json_reply(completion(text="Sunny.")))
    pytester.runpytest(*run_live, "--toolbench-report=other.json").assert_outcomes(passed=1)
    before, other = pytester.path / "before.json", pytester.path / "other.json"
    code, out = run(capsys, before, other)
    assert code == 0
    assert "   call removed  ask: get_weather({\"city\": \"Paris\"})" in out.splitlines()
    assert not [line for line in out.splitlines() if line.split()[0] == "request"]
    # The case asks otherwise: the request change comes first, the answers follow it.
    case.write_text(case.read_text().replace("Weather in Paris?", "Weather in Lyon?"))
    pytester.runpytest(*run_live, "--toolbench-report=edited.json").assert_outcomes(passed=1)
    edited = pytester.path / "edited.json"
    code, out = run(capsys, before, edited)
    assert out.splitlines()[0].endswith(
        "1 case compared, 1 changed (1 in the requests sent), 0 verdicts regressed")
    assert out.splitlines()[1:6] == [
        "loop.case.yaml::trip[test-model]",
        ('   request       ask: request 1: messages.0.content: "Weather in Paris?" ->'
         ' "Weather in Lyon?"'),
        '   call removed  ask: get_weather({"city": "Paris"}) (after a changed request)',
        "   answer        ask: [-It is 21 degrees.-] {+Sunny.+} (after a changed request)",
        "   turns         2 -> 1",
    ]
    assert "   latency_ms" in out  # two live runs: their timings are compared
    document = json.loads(run(capsys, before, edited, "--format", "json")[1])
    assert document["requests_changed"] == 1 and document["timings_compared"] is True


LONG_QUESTION = ("You are planning a trip for a customer who wants to know the weather before"
                 " choosing what to pack. What is the weather in {city} today?")


def test_a_request_changed_at_the_end_of_a_long_prompt_shows_the_changed_words(
        pytester: pytest.Pytester, chat_server: ChatServer,
        capsys: pytest.CaptureFixture[str]) -> None:
    slow_server_with_fresh_ids(chat_server)
    case = pytester.makefile(".case.yaml", loop=LOOP_CASE.format(
        url=chat_server.base_url, question=LONG_QUESTION.format(city="Paris")))
    run_live = ("-p", "no:cacheprovider", "--toolbench-live")
    pytester.runpytest(*run_live, "--toolbench-report=before.json").assert_outcomes(passed=1)
    case.write_text(case.read_text().replace("in Paris today", "in Lyon today"))
    pytester.runpytest(*run_live, "--toolbench-report=after.json").assert_outcomes(passed=1)

    code, out = run(capsys, pytester.path / "before.json", pytester.path / "after.json",
                    "--min-ms", "60000")

    assert code == 0
    assert out.splitlines()[1:3] == [
        "loop.case.yaml::trip[test-model]",
        ("   request  ask: request 1: messages.0.content: ... is the weather in [-Paris-]"
         " {+Lyon+} today?")]
    assert out.splitlines()[0].endswith(
        ": 1 case compared, 1 changed (1 in the requests sent), 0 verdicts regressed")
