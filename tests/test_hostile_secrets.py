"""A credential that takes a path the scrubbers did not watch, second round (issue 33): a
toolbox that keeps the key in its state, an expectation that reads it from the environment,
an MCP server whose URL carries it, logged by whatever logger. The rule: the value of any
credential-looking environment variable is masked wherever it appears.
"""

from __future__ import annotations

import http.server
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from support.chat_server import ChatServer, RecordedRequest, completion, json_reply

SECRET = "sk-hostile-secret-0c9f8e7d6b5a"
OUTPUTS = ("r.json", "r.html", "j.xml", "l.txt")

KEEPER = '''
import os
import sys


class Keeper:
    def __init__(self) -> None:
        self.key = os.environ["OPENAI_API_KEY"]
        self.calls = 0

    def ping(self) -> str:
        """Ping."""
        self.calls += 1
        print(f"the key is {self.key}")
        print(f"the key is {self.key}", file=sys.stderr)
        return "pong"
'''


def ping_then_done(request: RecordedRequest) -> Any:
    if any(m["role"] == "tool" for m in request.json()["messages"]):
        return json_reply(completion(text="done"))
    return json_reply(completion(tool_calls=[("ping", {})]))


def run(pytester: pytest.Pytester, case: str) -> pytest.RunResult:
    pytester.makefile(".case.yaml", hostile=case)
    return pytester.runpytest_subprocess(
        "-p", "no:cacheprovider", "--toolbench-live", "--toolbench-report=r.json",
        "--toolbench-html=r.html", "--junitxml=j.xml", "--log-file=l.txt",
        "--log-file-level=DEBUG", "--log-level=DEBUG", "-rA", timeout=60)


def assert_nowhere(pytester: pytest.Pytester, result: pytest.RunResult) -> None:
    texts = {"stdout": result.stdout.str(), "stderr": result.stderr.str()}
    texts |= {name: (pytester.path / name).read_text() for name in OUTPUTS
              if (pytester.path / name).exists()}
    assert set(texts) >= {"stdout", "r.json", "r.html", "j.xml"}
    leaked = [name for name, text in texts.items() if SECRET in text]
    assert leaked == []


@pytest.fixture
def key(monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setenv("OPENAI_API_KEY", SECRET)
    return SECRET


def test_a_key_kept_in_a_toolbox_state_or_printed_is_masked_in_every_output(
        pytester: pytest.Pytester, chat_server: ChatServer, key: str) -> None:
    pytester.makepyfile(keeper=KEEPER)
    chat_server.set_handler(ping_then_done)
    result = run(pytester, f"""name: keeper
endpoint: {{base_url: '{chat_server.base_url}', retries: 0}}
tools: [{{toolbox: {{python: "keeper:Keeper"}}}}]
stages:
  - name: ask
    user: ping
    run_tools: true
    expect:
      state: {{Keeper: {{calls: 2}}}}
""")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*stages?0?.expect.state*", "*the key is <scrubbed>*"])
    assert "<scrubbed>" in (pytester.path / "r.json").read_text()
    assert_nowhere(pytester, result)


def test_a_key_an_expectation_reads_from_the_environment_is_masked_in_the_verdict(
        pytester: pytest.Pytester, chat_server: ChatServer, key: str) -> None:
    chat_server.set_handler(lambda request: json_reply(completion(text="no key here")))
    result = run(pytester, f"""name: expecting
endpoint: {{base_url: '{chat_server.base_url}', retries: 0}}
stages:
  - name: ask
    user: say the key
    expect:
      text: {{$contains: "${{env.OPENAI_API_KEY}}"}}
""")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*stages?0?.expect.text*<scrubbed>*"])
    assert_nowhere(pytester, result)


@pytest.fixture
def refusing_url() -> Iterator[str]:
    """A loopback HTTP server that answers every request 401."""
    class Refuse(http.server.BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            self.send_response(401)
            self.send_header("Content-Length", "0")
            self.end_headers()

        do_GET = do_DELETE = do_POST

        def log_message(self, *args: Any) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Refuse)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/mcp"
    finally:
        server.shutdown()
        server.server_close()


@pytest.mark.parametrize("where", ["query", "query from env"])
def test_a_key_in_an_mcp_url_is_masked_in_every_logger(
        pytester: pytest.Pytester, chat_server: ChatServer, refusing_url: str, key: str,
        where: str) -> None:
    chat_server.set_handler(ping_then_done)
    value = SECRET if where == "query" else "${env.OPENAI_API_KEY}"
    result = run(pytester, f"""name: logged
endpoint: {{base_url: '{chat_server.base_url}', retries: 0}}
mcp_servers:
  remote: {{url: "{refusing_url}?api_key={value}", startup_timeout_s: 10}}
tools: [{{mcp: remote}}]
stages: [{{name: ask, user: hi}}]
""")
    result.assert_outcomes(failed=1)
    log = (pytester.path / "l.txt").read_text()
    assert "httpx2" in log or "HTTP Request" in log  # the loggers did log the requests
    assert_nowhere(pytester, result)


def test_the_rule_is_documented() -> None:
    page = (Path(__file__).parent.parent / "docs" / "hostile-input.md").read_text()
    assert "credential" in page and "environment variable" in page
