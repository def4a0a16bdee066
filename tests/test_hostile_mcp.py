"""MCP servers that misbehave, second round (issue 33): a flood of stderr, garbage for an
answer, twin tools, endless pages, a 401, secrets in the command, a session-scoped server
that dies. Every run is a subprocess with a timeout; the model is the loopback chat server.
"""

from __future__ import annotations

import http.server
import json
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from support.chat_server import ChatServer, RecordedRequest, completion, json_reply

PYTHON = json.dumps(sys.executable)
BROKEN = json.dumps(str(Path(__file__).parent / "support" / "broken_mcp.py"))
SECRET = "sk-hostile-9d8c7b6a5f4e"


def echo_then_done(request: RecordedRequest) -> Any:
    if any(m["role"] == "tool" for m in request.json()["messages"]):
        return json_reply(completion(text="done"))
    return json_reply(completion(tool_calls=[("echo", {"text": "hi"})]))


def server_case(name: str, server: str, chat: ChatServer) -> str:
    return f"""name: {name}
endpoint: {{base_url: '{chat.base_url}', retries: 0}}
mcp_servers:
  flaky: {server}
tools:
  - mcp: flaky
stages:
  - name: ask
    user: echo hi
    run_tools: true
"""


def broken(mode: str, extra: str = "") -> str:
    return f"{{command: [{PYTHON}, {BROKEN}, {mode}]{extra}}}"


def run(pytester: pytest.Pytester, *cases: str, args: tuple[str, ...] = ()
        ) -> tuple[pytest.RunResult, float]:
    pytester.makefile(".case.yaml", hostile="---\n".join(cases))
    started = time.monotonic()
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "--toolbench-live",
                                           *args, timeout=90)
    return result, time.monotonic() - started


def test_a_server_flooding_stderr_is_stopped_at_its_startup_timeout_with_a_bounded_tail(
        pytester: pytest.Pytester, chat_server: ChatServer) -> None:
    chat_server.set_handler(echo_then_done)
    result, took = run(pytester,
                       server_case("flood", broken("flood_stderr", ", startup_timeout_s: 3"),
                                   chat_server),
                       server_case("fine", broken("ok"), chat_server))
    result.assert_outcomes(failed=1, passed=1)
    result.stdout.fnmatch_lines([
        "*tools?0?: MCP server 'flaky' did not start within 3 s (startup_timeout_s)",
        "*its stderr ends:",
        "*(* before these lines left out)",
        "*xxxx... ?* more characters left out?"])
    assert took < 40
    assert len(result.stdout.str()) < 100_000


def test_garbage_for_the_initialize_answer_fails_at_once_saying_so(
        pytester: pytest.Pytester, chat_server: ChatServer) -> None:
    chat_server.set_handler(echo_then_done)
    result, took = run(pytester, server_case(
        "garbage", broken("garbage_init", ", startup_timeout_s: 30"), chat_server))
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines([("*MCP server 'flaky' did not start: sent a message that is"
                                 " not JSON-RPC*")])
    assert "startup_timeout_s" not in result.stdout.str()
    assert took < 25


def test_two_tools_of_one_name_fail_the_case_naming_it(
        pytester: pytest.Pytester, chat_server: ChatServer) -> None:
    chat_server.set_handler(echo_then_done)
    result, _ = run(pytester, server_case("twins", broken("twin_tools"), chat_server))
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines([("*hostile.case.yaml:6: twins: tools?0?: MCP server 'flaky'"
                                 " lists two tools named 'echo'*")])
    assert chat_server.requests == []


def test_endless_pages_of_tools_end_at_the_startup_timeout_which_is_named(
        pytester: pytest.Pytester, chat_server: ChatServer) -> None:
    chat_server.set_handler(echo_then_done)
    result, _ = run(pytester, server_case(
        "pages", broken("endless_cursor", ", startup_timeout_s: 8, call_timeout_s: 60"),
        chat_server))
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines([("*MCP server 'flaky' tools/list got no answer within 8 s"
                                 " (startup_timeout_s)*")])
    assert "call_timeout_s" not in result.stdout.str()


@pytest.fixture
def refusing_url() -> Iterator[str]:
    """A loopback HTTP server that answers every request 401 Unauthorized."""
    class Refuse(http.server.BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            self.send_response(401)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", "2")
            self.end_headers()
            self.wfile.write(b"{}")

        do_GET = do_POST

        def log_message(self, *args: Any) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Refuse)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/mcp"
    finally:
        server.shutdown()
        server.server_close()


def test_an_http_server_refusing_the_token_is_reported_with_its_status(
        pytester: pytest.Pytester, chat_server: ChatServer, refusing_url: str) -> None:
    chat_server.set_handler(echo_then_done)
    result, _ = run(pytester, server_case(
        "refused", f'{{url: "{refusing_url}", startup_timeout_s: 10}}', chat_server))
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*MCP server 'flaky' did not start: *401*"])


def test_credentials_filled_into_a_command_or_any_env_name_are_masked_in_the_stderr_tail(
        pytester: pytest.Pytester, chat_server: ChatServer,
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", SECRET)
    chat_server.set_handler(echo_then_done)
    server = (f'{{command: [{PYTHON}, {BROKEN}, show_secrets, "${{env.OPENAI_API_KEY}}"],'
              f' env: {{PLAIN: "${{env.OPENAI_API_KEY}}"}}}}')
    result, _ = run(pytester, server_case("shown", server, chat_server),
                    args=("--toolbench-report=r.json", "--junitxml=j.xml"))
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*argv: ?'<scrubbed>'?", "*('PLAIN', '<scrubbed>')*"])
    for text in (result.stdout.str(), result.stderr.str(),
                 (pytester.path / "r.json").read_text(), (pytester.path / "j.xml").read_text()):
        assert SECRET not in text


def test_a_session_server_that_died_is_restarted_for_the_next_case_which_says_so(
        pytester: pytest.Pytester, chat_server: ChatServer) -> None:
    chat_server.set_handler(echo_then_done)
    marker = pytester.path / "crashed-once"
    shared = f"""mcp_servers:
  flaky: {{command: [{PYTHON}, {BROKEN}, crash_once, {json.dumps(str(marker))}],
           scope: session}}
"""
    case = """name: NAME
endpoint: {base_url: 'URL', retries: 0}
tools: [{mcp: flaky}]
stages:
  - {name: ask, user: echo hi, run_tools: true}
""".replace("URL", chat_server.base_url)
    pytester.makefile(".case.yaml", hostile="---\n".join(
        [shared, case.replace("NAME", "first"),
         case.replace("NAME", "second") + "  - {name: fail, user: again, expect: {text: never}}\n",
         case.replace("NAME", "third")]))
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "--toolbench-live",
                                           "--toolbench-concurrency", "1",
                                           "--toolbench-report=r.json", timeout=90)
    result.assert_outcomes(failed=2, passed=1)
    result.stdout.fnmatch_lines([("*first: tools?0?: MCP server 'flaky' closed the connection"
                                 " (during tools/call echo)*"), "*Traceback: crashed once"])
    note = ("MCP server 'flaky' (scope: session) stopped in an earlier case (first) and was"
            " started again")
    result.stdout.fnmatch_lines([f"note: {note}"])  # in the failure text of the second
    notes = {case["case"]: case["notes"]
             for case in json.loads((pytester.path / "r.json").read_text())["cases"]}
    assert notes == {"first": [], "second": [note], "third": []}
    tool_results = [m["content"] for r in chat_server.requests for m in r.json()["messages"]
                    if m["role"] == "tool"]
    assert tool_results.count('{"echo": {"text": "hi"}}') >= 2
