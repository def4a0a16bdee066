"""MCP servers as tools (issue 22): real servers from PyPI over stdio, an SDK-built server
over streamable HTTP, scripted broken ones; the model is the loopback chat server.

Every test runs the plugin through pytester.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from support.chat_server import ChatServer, RecordedRequest, completion, json_reply
from support.notes import NOTES_TOKEN, notes_server
from support.processes import processes_tagged

PYTHON = json.dumps(sys.executable)
TIME_SERVER = f"{{command: [{PYTHON}, -m, mcp_server_time, --local-timezone, UTC]}}"


def tool_messages(request: RecordedRequest) -> list[dict[str, Any]]:
    return [m for m in request.json()["messages"] if m["role"] == "tool"]


def calls_then_answers(*calls: tuple[str, dict[str, Any]], text: str = "done") -> Any:
    """A model that makes ``calls`` in its first reply, then answers with ``text`` and the
    tool results it was sent."""
    def answer(request: RecordedRequest) -> Any:
        results = tool_messages(request)
        if not results:
            return json_reply(completion(tool_calls=list(calls)))
        return json_reply(completion(text=f"{text}: " + " | ".join(
            m["content"] for m in results)))
    return answer


def write_case(pytester: pytest.Pytester, server: ChatServer, body: str,
               name: str = "mcp") -> Path:
    return pytester.makefile(".case.yaml", **{
        name: f"endpoint: {{base_url: '{server.base_url}'}}\n" + body})


def run(pytester: pytest.Pytester, *args: str) -> pytest.RunResult:
    return pytester.runpytest_subprocess("-p", "no:cacheprovider", *args)


TIME_CASE = f"""name: clock
model: m
mcp_servers:
  time: {TIME_SERVER}
tools:
  - mcp: time
    include: [get_current_time]
stages:
  - name: ask
    user: What time is it in Paris?
    run_tools: true
    expect:
      tool_calls: [{{name: get_current_time, arguments: {{timezone: Europe/Paris}}}}]
      text: {{$contains: Europe/Paris}}
"""


def test_a_stdio_server_is_listed_called_recorded_and_replayed_without_it(
        pytester: pytest.Pytester, chat_server: ChatServer) -> None:
    chat_server.set_handler(calls_then_answers(("get_current_time",
                                                {"timezone": "Europe/Paris"})))
    case = write_case(pytester, chat_server, TIME_CASE)
    run(pytester, "--toolbench-record").assert_outcomes(passed=1)
    first = chat_server.requests[0].json()
    assert [tool["function"]["name"] for tool in first["tools"]] == ["get_current_time"]
    assert first["tools"][0]["function"]["parameters"]["required"] == ["timezone"]
    result = json.loads(tool_messages(chat_server.requests[1])[0]["content"])
    assert result["timezone"] == "Europe/Paris" and "datetime" in result
    cassette = (case.parent / "__cassettes__" / "mcp" / "clock[m].yaml").read_text()
    assert "method: tools/list" in cassette and "method: tools/call" in cassette
    # Of each listed tool, what the model is offered: the server's outputSchema is not kept.
    assert '"inputSchema"' in cassette and '"name": "convert_time"' in cassette
    assert "outputSchema" not in cassette and "readOnlyHint" not in cassette
    # Replay: neither the model nor the server; a command that cannot start proves it.
    chat_server.close()
    case.write_text(case.read_text().replace(sys.executable, "/nonexistent/python"))
    result = run(pytester, "-v")
    result.assert_outcomes(passed=1)


BROKEN = json.dumps(str(Path(__file__).parent / "support" / "broken_mcp.py"))


def broken_case(mode: str, **limits: float) -> str:
    extra = "".join(f", {key}: {value}" for key, value in limits.items())
    return f"""name: {mode}
model: m
mcp_servers:
  flaky: {{command: [{PYTHON}, {BROKEN}, {mode}]{extra}}}
tools:
  - mcp: flaky
stages:
  - name: ask
    user: echo hi
    run_tools: true
"""


@pytest.mark.parametrize(("mode", "limits", "said"), [
    ("exit_at_start", {},
     [("*mcp.case.yaml:7: exit_at_start[[]m]: tools[[]0]: MCP server 'flaky'"
       " did not start: closed the connection"), "*fatal: NOTES_DB is not configured*"]),
    ("slow_start", {"startup_timeout_s": 4},
     ["*tools[[]0]: MCP server 'flaky' did not start within 4 s (startup_timeout_s)*",
      "*broken MCP server starting in mode slow_start*"]),
    ("slow_call", {"call_timeout_s": 1},
     [("*tools[[]0]: MCP server 'flaky' tools/call echo got no answer within 1 s"
      " (call_timeout_s)*")]),
    ("crash_call", {}, [("*tools[[]0]: MCP server 'flaky' closed the connection"
                        " (during tools/call echo)*"),
                        "*Traceback: the echo backend is gone*"]),
    ("garbage_call", {}, [("*tools[[]0]: MCP server 'flaky' sent a message that is not"
                          " JSON-RPC (Invalid JSON: *) (during tools/call echo)")]),
])
def test_a_broken_server_fails_its_case_naming_it_and_the_session_goes_on(
        pytester: pytest.Pytester, chat_server: ChatServer, mode: str,
        limits: dict[str, float], said: list[str]) -> None:
    chat_server.set_handler(calls_then_answers(("echo", {"text": "hi"})))
    write_case(pytester, chat_server, broken_case(mode, **limits))
    write_case(pytester, chat_server, broken_case("ok").replace("name: ok", "name: fine"),
               name="next")
    result = run(pytester, "--toolbench-live")
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(said)


SLOW_SDK_IMPORT = """
import sys
import time


class SlowSdk:
    \"\"\"The mcp SDK's first import takes 4 s, as it can on a loaded machine.\"\"\"

    def find_spec(self, name, path=None, target=None):
        if name == "mcp":
            sys.meta_path.remove(self)
            time.sleep(4)
        return None


sys.meta_path.insert(0, SlowSdk())
"""


def test_importing_the_sdk_is_not_part_of_a_servers_start(
        pytester: pytest.Pytester, chat_server: ChatServer) -> None:
    """``startup_timeout_s`` is the server's: the plugin's own import of the SDK, however
    slow, is done before it starts."""
    chat_server.set_handler(calls_then_answers(("echo", {"text": "hi"})))
    pytester.makeconftest(SLOW_SDK_IMPORT)
    write_case(pytester, chat_server, broken_case("ok", startup_timeout_s=3))
    result = run(pytester, "--toolbench-live")
    result.assert_outcomes(passed=1)


# -- lifecycle ----------------------------------------------------------------------------

def counting_cases(server: ChatServer, tag: str, scope: str, count: int = 3,
                   prefix: str = "c") -> str:
    """``count`` cases of one file calling a stateful server declared once for the file."""
    shared = f"""mcp_servers:
  counter: {{command: [{PYTHON}, {BROKEN}, count, {tag}], scope: {scope}}}
"""
    case = f"""name: {prefix}N
model: m
endpoint: {{base_url: '{server.base_url}'}}
tools: [{{mcp: counter}}]
stages:
  - {{name: ask, user: count, run_tools: true}}
"""
    return "---\n".join([shared, *(case.replace("N", str(n)) for n in range(count))])


def counts_seen(server: ChatServer) -> list[str]:
    return sorted(m["content"] for request in server.requests for m in tool_messages(request))


@pytest.mark.parametrize(("scope", "seen"), [("case", ["call 1"] * 3),
                                             ("session", ["call 1", "call 2", "call 3"])])
def test_servers_are_fresh_per_case_unless_session_scoped_and_none_outlives_the_session(
        pytester: pytest.Pytester, chat_server: ChatServer, scope: str,
        seen: list[str], request: pytest.FixtureRequest) -> None:
    tag = f"toolbench-test-scope-{scope}"
    chat_server.set_handler(calls_then_answers(("echo", {"text": "x"})))
    pytester.makefile(".case.yaml", counter=counting_cases(chat_server, tag, scope))
    run(pytester, "--toolbench-live", "--toolbench-concurrency", "1").assert_outcomes(passed=3)
    assert counts_seen(chat_server) == seen
    assert processes_tagged(tag) == []


def test_no_server_outlives_xdist_workers(pytester: pytest.Pytester,
                                          chat_server: ChatServer) -> None:
    tag = "toolbench-test-xdist-workers"
    chat_server.set_handler(calls_then_answers(("echo", {"text": "x"})))
    for scope in ("case", "session"):
        pytester.makefile(".case.yaml", **{scope: counting_cases(
            chat_server, f"{tag}-{scope}", scope, 4, prefix=f"{scope}_")})
    run(pytester, "--toolbench-live", "-n", "2").assert_outcomes(passed=8)
    assert processes_tagged(tag) == []


def test_ctrl_c_stops_every_server(pytester: pytest.Pytester, chat_server: ChatServer) -> None:
    from support.chat_server import stall_reply
    from support.signals import interruptible_pytest

    tag = "toolbench-test-ctrl-c"
    chat_server.set_handler(lambda request: stall_reply(20))  # the model never answers
    pytester.makefile(".case.yaml", fresh=counting_cases(chat_server, f"{tag}-case", "case", 1),
                      shared=counting_cases(chat_server, f"{tag}-session", "session", 1))
    process = subprocess.Popen(
        [*interruptible_pytest(), "-p", "no:cacheprovider", "--toolbench-live"],
        cwd=pytester.path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 30
    while len(processes_tagged(tag)) < 2 and time.monotonic() < deadline:
        time.sleep(0.1)  # both servers up, both cases waiting for the model
    assert len(processes_tagged(tag)) == 2
    os.kill(process.pid, signal.SIGINT)
    stdout, _ = process.communicate(timeout=30)
    assert process.returncode == pytest.ExitCode.INTERRUPTED, stdout
    assert processes_tagged(tag) == []


# -- streamable HTTP, credentials, failed tools ---------------------------------------------

@pytest.fixture
def notes_url() -> Iterator[str]:
    """The SDK-built notes server over streamable HTTP on a loopback port of its own."""
    with notes_server() as url:
        yield url


def test_a_streamable_http_server_with_a_token_from_the_environment_is_scrubbed_everywhere(
        pytester: pytest.Pytester, chat_server: ChatServer, notes_url: str,
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NOTES_TOKEN", NOTES_TOKEN)
    chat_server.set_handler(calls_then_answers(("add_note", {"text": f"key {NOTES_TOKEN}"}),
                                               ("fail", {})))
    write_case(pytester, chat_server, f"""name: notes
model: m
mcp_servers:
  notes: {{url: "{notes_url}", headers: {{Authorization: "Bearer ${{NOTES_TOKEN}}"}}}}
tools:
  - mcp: notes
    include: [add_note, fail]
stages:
  - name: ask
    user: note it
    tool_choice: {{name: add_note}}
    run_tools: true
    expect:
      text: {{$contains: "count"}}
""")
    result = run(pytester, "--toolbench-record", "--toolbench-report=r.json",
                 "--toolbench-html=r.html")
    result.assert_outcomes(passed=1)
    first = chat_server.requests[0].json()
    assert [tool["function"]["name"] for tool in first["tools"]] == ["add_note", "fail"]
    assert first["tool_choice"] == {"type": "function", "function": {"name": "add_note"}}
    report = json.loads((pytester.path / "r.json").read_text())
    runs = report["cases"][0]["runs"][0]["stages"][0]["attempts"][0]["turns"][0]["tool_runs"]
    assert [(run["server"], run["name"], run["is_error"]) for run in runs] == [
        ("notes", "add_note", False), ("notes", "fail", True)]
    assert json.loads(runs[0]["content"]) == {"count": 1}
    assert runs[1]["error"] == runs[1]["content"] and "fail" in runs[1]["error"]
    cassette = pytester.path / "__cassettes__" / "mcp" / "notes[m].yaml"
    for text in (result.stdout.str(), cassette.read_text(), (pytester.path / "r.json").read_text(),
                 (pytester.path / "r.html").read_text()):
        assert NOTES_TOKEN not in text
    assert "key <scrubbed>" in cassette.read_text()

    # Replay: no token in the environment, no server; the same story.
    monkeypatch.delenv("NOTES_TOKEN")
    run(pytester).assert_outcomes(passed=1)


def sent_tool_results(request: RecordedRequest) -> dict[str, dict[str, Any]]:
    """The tool results one request sends back, by call id, in any API's words: each as
    ``{content, is_error?}`` (only the Messages API can say a result is an error)."""
    body = request.json()
    if request.path.endswith("/messages"):
        return {block["tool_use_id"]: {key: block[key] for key in ("content", "is_error")
                                       if key in block}
                for turn in body["messages"] if isinstance(turn["content"], list)
                for block in turn["content"] if block["type"] == "tool_result"}
    if request.path.endswith("/responses"):
        return {item["call_id"]: {"content": item["output"]} for item in body["input"]
                if item.get("type") == "function_call_output"}
    return {m["tool_call_id"]: {"content": m["content"]} for m in tool_messages(request)}


def model_calling(calls: list[tuple[str, str]]) -> Any:
    """A model of any API that calls ``calls`` (id, name; no arguments) at once, then,
    given their results, answers "done"."""
    def answer(request: RecordedRequest) -> Any:
        first = not sent_tool_results(request)
        if request.path.endswith("/messages"):
            blocks = ([{"type": "tool_use", "id": id, "name": name, "input": {}}
                       for id, name in calls] if first else [{"type": "text", "text": "done"}])
            return json_reply({"id": "msg_1", "type": "message", "role": "assistant",
                               "model": "m", "content": blocks,
                               "stop_reason": "tool_use" if first else "end_turn",
                               "usage": {"input_tokens": 9, "output_tokens": 3}})
        if request.path.endswith("/responses"):
            output = ([{"type": "function_call", "id": f"fc_{id}", "call_id": id, "name": name,
                        "arguments": "{}", "status": "completed"} for id, name in calls]
                      if first else [{"type": "message", "id": "msg_1", "role": "assistant",
                                      "status": "completed", "content": [
                                          {"type": "output_text", "text": "done",
                                           "annotations": []}]}])
            return json_reply({"id": "resp_1", "object": "response", "status": "completed",
                               "output": output, "error": None, "incomplete_details": None,
                               "usage": {"input_tokens": 9, "output_tokens": 3,
                                         "total_tokens": 12}})
        if first:
            return json_reply(completion(tool_calls=[
                {"id": id, "type": "function", "function": {"name": name, "arguments": "{}"}}
                for id, name in calls]))
        return json_reply(completion(text="done"))
    return answer


@pytest.mark.parametrize("api", ["chat", "responses", "messages"])
def test_an_is_error_result_goes_back_as_a_failed_tool_over_every_api(
        pytester: pytest.Pytester, chat_server: ChatServer, notes_url: str, api: str,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The SDK-built server's ``fail`` answers ``isError: true``: the model is told so the
    way its API can (Messages: ``is_error: true``; chat and Responses: the tool message
    holds the failure's words, as for a failed ``python`` tool); the report marks the run
    failed. The same reply's ``list_notes`` result goes back as a plain one."""
    monkeypatch.setenv("NOTES_TOKEN", NOTES_TOKEN)
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-test-key")
    chat_server.set_handler(model_calling([("call_ok", "list_notes"), ("call_bad", "fail")]))
    write_case(pytester, chat_server, f"""name: notes
model: m
mcp_servers:
  notes: {{url: "{notes_url}", headers: {{Authorization: "Bearer ${{NOTES_TOKEN}}"}}}}
tools:
  - mcp: notes
    include: [list_notes, fail]
stages:
  - name: ask
    user: read the notes
    run_tools: true
    expect: {{text: done}}
""")
    result = run(pytester, "--toolbench-live", f"--toolbench-api={api}",
                 "--toolbench-report=r.json")
    result.assert_outcomes(passed=1)
    sent = sent_tool_results(chat_server.requests[1])
    assert sorted(sent) == ["call_bad", "call_ok"]
    assert "the notes store is read-only today" in sent["call_bad"]["content"]
    assert "read-only" not in sent["call_ok"]["content"]
    if api == "messages":
        assert sent["call_bad"]["is_error"] is True
        assert "is_error" not in sent["call_ok"]
    report = json.loads((pytester.path / "r.json").read_text())
    turn = report["cases"][0]["runs"][0]["stages"][0]["attempts"][0]["turns"][0]
    assert {run["name"]: run["is_error"] for run in turn["tool_runs"]} == {
        "list_notes": False, "fail": True}


def test_a_real_git_server_reads_a_repository_the_test_made(
        pytester: pytest.Pytester, chat_server: ChatServer, tmp_path: Path) -> None:
    repository = tmp_path / "repo"
    repository.mkdir()
    for command in (["init", "-q"], ["config", "user.email", "t@example.com"],
                    ["config", "user.name", "T"]):
        subprocess.run(["git", *command], cwd=repository, check=True)
    (repository / "README").write_text("hello\n")
    subprocess.run(["git", "add", "README"], cwd=repository, check=True)
    subprocess.run(["git", "commit", "-qm", "first words"], cwd=repository, check=True)
    chat_server.set_handler(calls_then_answers(("git_log", {"repo_path": str(repository)})))
    write_case(pytester, chat_server, f"""name: history
model: m
mcp_servers:
  git: {{command: [{PYTHON}, -m, mcp_server_git, --repository, "{repository}"]}}
tools:
  - mcp: git
    include: [git_log, git_status]
stages:
  - name: ask
    user: What was the last commit?
    run_tools: true
    expect:
      text: {{$contains: first words}}
""")
    run(pytester, "--toolbench-record").assert_outcomes(passed=1)
    run(pytester).assert_outcomes(passed=1)


# -- declarations -----------------------------------------------------------------------------

def test_declaration_errors_are_collection_errors_at_their_lines(
        pytester: pytest.Pytester) -> None:
    pytester.makefile(".case.yaml", bad=f"""mcp_servers:
  time: {TIME_SERVER}
---
name: a
mcp_servers:
  web: {{url: "http://127.0.0.1:1/mcp", env: {{A: b}}}}
  local: {{command: [x], sope: session}}
tools:
  - mcp: time
    exclude: [x]
stages: [{{name: s, user: hi}}]
""", undefined=f"""mcp_servers:
  time: {TIME_SERVER}
---
name: b
tools:
  - mcp: tme
stages: [{{name: s, user: hi}}]
""")
    result = run(pytester)
    result.stdout.fnmatch_lines([
        "3 problems in case file",
        "  bad.case.yaml:6: mcp_servers.web.env: env is not for a streamable HTTP (url) server",
        "  bad.case.yaml:7: mcp_servers.local.sope: unknown key 'sope' (did you mean 'scope'?)",
        "  bad.case.yaml:10: tools[[]0].exclude: unknown key 'exclude' (did you mean 'include'?)",
    ])
    result.stdout.fnmatch_lines([
        "1 problem in case file",
        ("  undefined.case.yaml:6: tools[[]0].mcp: MCP server 'tme' is not defined; did you mean"
        " `time`? (mcp_servers of this case and file: time)"),
    ])


def test_an_included_tool_the_server_lacks_and_a_name_clash_fail_at_their_lines(
        pytester: pytest.Pytester, chat_server: ChatServer) -> None:
    chat_server.set_handler(calls_then_answers(("get_current_time", {"timezone": "UTC"})))
    write_case(pytester, chat_server, f"""name: missing
model: m
mcp_servers:
  time: {TIME_SERVER}
tools:
  - mcp: time
    include: [get_current_time, get_weather]
stages: [{{name: s, user: hi}}]
---
name: clash
model: m
endpoint: {{base_url: '{chat_server.base_url}'}}
mcp_servers:
  time: {TIME_SERVER}
tools:
  - {{name: convert_time, result: 1}}
  - mcp: time
stages: [{{name: s, user: hi}}]
""")
    result = run(pytester, "--toolbench-live")
    result.assert_outcomes(failed=2)
    result.stdout.fnmatch_lines([
        ("mcp.case.yaml:8: missing[[]m]: tools[[]0].include[[]1]: MCP server 'time' lists no"
        " tool 'get_weather' (it lists: convert_time, get_current_time)"),
    ])
    result.stdout.fnmatch_lines([
        ("mcp.case.yaml:18: clash[[]m]: tools[[]1]: tool name 'convert_time' clash: MCP server"
        " 'time' and the case's tools both offer it*"),
    ])
    assert chat_server.requests == []  # neither case reached the model


def test_a_call_that_differs_from_the_recorded_one_fails_replay_with_a_diff(
        pytester: pytest.Pytester, chat_server: ChatServer) -> None:
    chat_server.set_handler(calls_then_answers(("get_current_time",
                                                {"timezone": "Europe/Paris"})))
    case = write_case(pytester, chat_server, TIME_CASE)
    run(pytester, "--toolbench-record").assert_outcomes(passed=1)
    cassette = case.parent / "__cassettes__" / "mcp" / "clock[m].yaml"
    recorded = cassette.read_text()
    # The recorded call asked for Rome; the recorded model reply still asks for Paris.
    start = recorded.index("method: tools/call")
    cassette.write_text(recorded[:start] + recorded[start:].replace(
        '"Europe/Paris"', '"Europe/Rome"', 1))
    result = run(pytester)
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines([
        "*tools[[]0]: tools/call of MCP server 'time' differs from the one recorded in*",
        '-    "timezone": "Europe/Rome"',
        '+    "timezone": "Europe/Paris"',
    ])


def test_recording_keeps_no_cassette_of_a_case_whose_server_broke(
        pytester: pytest.Pytester, chat_server: ChatServer) -> None:
    chat_server.set_handler(calls_then_answers(("echo", {"text": "hi"})))
    case = write_case(pytester, chat_server, broken_case("crash_call"))
    run(pytester, "--toolbench-record").assert_outcomes(failed=1)
    assert not (case.parent / "__cassettes__" / "mcp" / "crash_call[m].yaml").exists()


@pytest.mark.parametrize(("scope", "retried"), [("case", "call 2"), ("session", "call 3")])
def test_a_case_scoped_server_is_put_back_for_a_retried_stage(
        pytester: pytest.Pytester, chat_server: ChatServer, scope: str,
        retried: str) -> None:
    """The counter's state is its number of calls. The retried stage's second attempt finds
    the server as the stage found it (restarted, and sent the first stage's call again);
    a session's server, which other cases share, is left as it is."""
    chat_server.set_handler(failing_the_second_stage_once("echo"))
    tag = f"toolbench-test-rewind-{scope}"
    write_case(pytester, chat_server, REWOUND.format(
        server=f"{{command: [{PYTHON}, {BROKEN}, count, {tag}], scope: {scope}}}"))
    for mode in ("--toolbench-record", "--toolbench-mode=replay"):  # replay: no server
        run(pytester, mode, "--toolbench-report=r.json").assert_outcomes(passed=1)
        assert second_stage_results(pytester) == [["call 2"], [retried]]
        assert processes_tagged(tag) == []


def test_a_url_server_is_left_as_it_is_for_a_retried_stage(
        pytester: pytest.Pytester, chat_server: ChatServer, notes_url: str) -> None:
    """The plugin does not start a url server, so it does not start it again either: the
    retried stage's call is one more note, not the earlier ones sent again."""
    chat_server.set_handler(failing_the_second_stage_once("add_note"))
    write_case(pytester, chat_server, REWOUND.format(
        server=f"{{url: '{notes_url}', headers: {{Authorization: 'Bearer {NOTES_TOKEN}'}}}}"))
    run(pytester, "--toolbench-live", "--toolbench-report=r.json").assert_outcomes(passed=1)
    counts = [[json.loads(content)["count"] for content in attempt]
              for attempt in second_stage_results(pytester)]
    assert counts == [[2], [3]]


REWOUND = """name: rewound
model: m
mcp_servers:
  counter: {server}
tools: [{{mcp: counter}}]
stages:
  - {{name: first, user: count, run_tools: true}}
  - name: second
    user: again
    run_tools: true
    retry: {{attempts: 2}}
    expect: {{text: {{$regex: "^saw "}}}}
"""


def failing_the_second_stage_once(tool: str) -> Any:
    """A model that calls ``tool`` once a stage, then says what it saw; its first answer
    to the stage ``again`` fails that stage's expectation, which retries it."""
    attempts = {"again": 0}

    def answer(request: RecordedRequest) -> Any:
        messages = request.json()["messages"]
        last_user = max(i for i, m in enumerate(messages) if m["role"] == "user")
        results = [m["content"] for m in messages[last_user:] if m["role"] == "tool"]
        if not results:
            return json_reply(completion(tool_calls=[(tool, {"text": "x"})]))
        if messages[last_user]["content"] == "again":
            attempts["again"] += 1
            if attempts["again"] == 1:
                return json_reply(completion(text="not yet"))
        return json_reply(completion(text=f"saw {results[-1]}"))
    return answer


def second_stage_results(pytester: pytest.Pytester) -> list[list[str]]:
    """The tool results of each attempt of the second stage, from the JSON report."""
    stages = json.loads((pytester.path / "r.json").read_text())["cases"][0]["runs"][0]["stages"]
    return [[run["content"] for turn in attempt["turns"] for run in turn["tool_runs"]]
            for attempt in stages[1]["attempts"]]
