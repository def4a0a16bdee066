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


# -- every kind of case: the plugin's loop, an agent case, a toolbench_agent test -----------
# (issue 36) A team's own credential, TEAM_API_KEY, is sent in a request body, a header
# and a query string, echoed back by the upstream, kept in the state, printed and logged:
# it is masked in every output of every kind of case, recorded and replayed.

TEAM_SECRET = "team-secret-5e1d9c3b7a"
KINDS = ("model", "agent", "fixture")
EVERY_OUTPUT = ("-p", "no:cacheprovider", "-v", "-rA", "--tb=long", "--showlocals",
                "--junitxml=j.xml", "--toolbench-report=r.json", "--toolbench-html=r.html",
                "--log-level=DEBUG", "--log-file=l.txt",
                "--log-file-level=DEBUG")

TEAM_AGENT = '''
import logging
import os

from openai import OpenAI

from support.agents.openai_chat import ChatAgent
from support.agents.shop import SYSTEM


class TeamAgent(ChatAgent):
    """The support agent, with the team's key in its prompt, a header, the query string
    and its state."""

    def state(self):
        return {**super().state(), "team_key": self.team_key}


def make_agent(stream=False):
    key = os.environ["TEAM_API_KEY"]
    client = OpenAI(max_retries=0, default_headers={"X-Team-Key": key},
                    default_query={"key": key})
    agent = TeamAgent(client, "test-model", stream, f"{SYSTEM} Team key: {key}.")
    agent.team_key = key
    print(f"built with {key}")
    logging.getLogger("team").warning("built with %s", key)
    return agent
'''

TEAM_TOOLBOX = '''
import logging
import os


class Desk:
    """A toolbox that keeps the team's key in its state, prints it and logs it."""

    def __init__(self):
        self.team_key = os.environ["TEAM_API_KEY"]

    def lookup_order(self, order_id: str, note: str = "") -> dict:
        """Find an order by its number."""
        print(f"looking up with {self.team_key}")
        logging.getLogger("team").warning("looking up with %s", self.team_key)
        return {"order_id": order_id, "status": "delivered"}
'''

TEAM_MODEL_CASE = """name: team_model
endpoint: {{base_url: "{base_url}?key={secret}", retries: 0}}
tools: [{{toolbox: {{python: "team_toolbox:Desk"}}}}]
stages:
  - name: ask
    user: "Refund order 913 for ${{env.TEAM_API_KEY}}"
    run_tools: true
    expect:
      text: nothing
      state: {{Desk: {{team_key: nothing}}}}
"""

TEAM_AGENT_CASE = """name: team_agent
agent: {python: "team_agent:make_agent"}
stages:
  - name: ask
    user: Refund order 913
    expect:
      text: nothing
      state: {team_key: nothing}
"""

TEAM_FIXTURE_TESTS = '''
import team_agent


def test_checked(toolbench_agent):
    agent = team_agent.make_agent()
    answer = agent("Refund order 913")
    agent.close()
    toolbench_agent.check(answer, text="nothing")


def test_asserted(toolbench_agent):
    agent = team_agent.make_agent()
    agent("Refund order 913")
    agent.close()
    assert agent.state() == {"refunds": []}
'''


def echoing_the_team_key(request: RecordedRequest) -> Any:
    """A model that calls lookup_order, then answers; both echo what the request carried
    (its header, its query string, its body)."""
    body = request.json()
    sent = " ".join(str(part) for part in (request.path, request.headers.get("x-team-key"),
                                           body["messages"][0]["content"]))
    if any(message["role"] == "tool" for message in body["messages"]):
        return json_reply(completion(text=f"Refunded. You sent {sent}"))
    return json_reply(completion(tool_calls=[("lookup_order",
                                              {"order_id": "913", "note": sent})]))


def write_kind(pytester: pytest.Pytester, kind: str, base_url: str) -> None:
    if kind == "model":
        pytester.makepyfile(team_toolbox=TEAM_TOOLBOX)
        pytester.makefile(".case.yaml", team=TEAM_MODEL_CASE.format(base_url=base_url,
                                                                    secret=TEAM_SECRET))
        return
    pytester.makepyfile(team_agent=TEAM_AGENT)
    if kind == "agent":
        pytester.makefile(".case.yaml", team=TEAM_AGENT_CASE)
    else:
        pytester.makepyfile(test_team=TEAM_FIXTURE_TESTS)


def every_output(pytester: pytest.Pytester, result: pytest.RunResult) -> dict[str, str]:
    """The terminal (its failure lines too), the reports, the log file and the
    cassettes."""
    texts = {"stdout": result.stdout.str(), "stderr": result.stderr.str()}
    texts |= {name: (pytester.path / name).read_text() for name in OUTPUTS}
    texts |= {str(path.relative_to(pytester.path)): path.read_text()
              for path in sorted((pytester.path / "__cassettes__").rglob("*.yaml"))}
    return texts


def leaked_to(outputs: dict[str, str], secret: str) -> list[str]:
    """The outputs that hold ``secret``, or its start: a failure that cuts a long value
    must not cut a secret before it is masked."""
    return [name for name, text in outputs.items() if secret[:-6] in text]


@pytest.mark.parametrize("kind", KINDS)
def test_a_teams_secret_is_masked_in_every_output_of_every_kind_of_case(
        pytester: pytest.Pytester, chat_server: ChatServer, monkeypatch: pytest.MonkeyPatch,
        kind: str) -> None:
    monkeypatch.setenv("TEAM_API_KEY", TEAM_SECRET)
    monkeypatch.setenv("OPENAI_AGENTS_DISABLE_TRACING", "1")
    chat_server.set_handler(echoing_the_team_key)
    write_kind(pytester, kind, chat_server.base_url)
    pytester.syspathinsert()
    # The model case's base URL is its own (it carries the key in its query string).
    flags = () if kind == "model" else ("--toolbench-base-url", chat_server.base_url)
    failed = 2 if kind == "fixture" else 1

    recorded = pytester.runpytest("--toolbench-record", *flags, *EVERY_OUTPUT)
    recorded.assert_outcomes(failed=failed)
    # The secret was in play: sent in the body, a header and the query, and echoed.
    request = chat_server.requests[-1]
    assert TEAM_SECRET in request.body.decode()
    assert TEAM_SECRET in request.path
    assert kind == "model" or request.headers["x-team-key"] == TEAM_SECRET
    outputs = every_output(pytester, recorded)
    assert any(name.startswith("__cassettes__") for name in outputs)
    assert leaked_to(outputs, TEAM_SECRET) == [], f"recorded: {kind}"
    # Where it was, the outputs show it masked: the echoed reply, the state, the prints.
    terminal = recorded.stdout.str()
    assert "You sent /v1/chat/completions?key=<scrubbed>" in terminal
    assert ("built with <scrubbed>" if kind != "model" else "looking up with <scrubbed>"
            ) in terminal
    assert ("'team_key': '<scrubbed>'" if kind == "fixture"
            else "team_key: expected 'nothing', got '<scrubbed>'") in terminal

    replayed = pytester.runpytest(*flags, *EVERY_OUTPUT)
    replayed.assert_outcomes(failed=failed)
    assert "differs from the one recorded" not in replayed.stdout.str()
    assert leaked_to(every_output(pytester, replayed), TEAM_SECRET) == [], f"replayed: {kind}"


GEMINI_QUERY_AGENT = '''
import os

import httpx2

KEY = "AIza-hard-coded-3c8e1f0a9b"


def make_agent():
    """A Gemini agent on plain HTTP that sends its own key as Gemini's ``?key=``."""
    def agent(user):
        url = (os.environ["GOOGLE_GEMINI_BASE_URL"]
               + "/v1beta/models/gemini-2.5-flash:generateContent?key=" + KEY)
        body = {"contents": [{"role": "user", "parts": [{"text": user}]}]}
        reply = httpx2.post(url, json=body, timeout=30)
        return reply.json()["candidates"][0]["content"]["parts"][0]["text"]
    return agent
'''


def test_a_key_an_agent_sends_as_geminis_query_key_is_masked_where_it_is_echoed(
        pytester: pytest.Pytester) -> None:
    """Not the value of any variable: a credential query value the agent sent is a secret
    of its case, masked in the echoing reply as a credential header's value is."""
    from support.gemini_server import GeminiServer, response, text

    key = "AIza-hard-coded-3c8e1f0a9b"
    pytester.makepyfile(gemini_query=GEMINI_QUERY_AGENT)
    pytester.syspathinsert()
    pytester.makefile(".case.yaml", query="""name: query_key
agent: {python: "gemini_query:make_agent"}
stages: [{name: ask, user: hi, expect: {text: nothing}}]
""")
    with GeminiServer().start() as server:
        server.set_handler(lambda request: json_reply(response(text(f"got {request.path}"))))
        recorded = pytester.runpytest("--toolbench-record", "--toolbench-base-url",
                                      server.base_url, *EVERY_OUTPUT)
        assert key in server.requests[0].path  # forwarded as sent
    recorded.assert_outcomes(failed=1)
    echoed = "got /v1beta/models/gemini-2.5-flash:generateContent?key=<scrubbed>"
    recorded.stdout.fnmatch_lines([f"*expected 'nothing', got '{echoed}'"])
    replayed = pytester.runpytest(*EVERY_OUTPUT)
    replayed.assert_outcomes(failed=1)
    for result in (recorded, replayed):
        outputs = every_output(pytester, result)
        assert echoed in outputs["__cassettes__/query/query_key.yaml"]
        assert leaked_to(outputs, key) == []


PLAIN_AGENT = '''
import os

import httpx2


def make_agent():
    def agent(user):
        body = {"model": "m", "messages": [{"role": "user", "content": user}]}
        reply = httpx2.post(os.environ["OPENAI_BASE_URL"] + "/chat/completions", json=body,
                            timeout=30)
        return reply.json()["choices"][0]["message"]["content"]
    return agent
'''


def test_a_replay_masks_what_is_a_secret_of_its_own_environment(
        pytester: pytest.Pytester, chat_server: ChatServer,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A value the recording did not know as a secret is masked in the replay of a machine
    whose environment holds it as one, as a replayed case of the plugin's loop masks it."""
    pytester.makepyfile(plain_agent=PLAIN_AGENT)
    pytester.syspathinsert()
    pytester.makefile(".case.yaml", plain="""name: plain
agent: {python: "plain_agent:make_agent"}
stages: [{name: ask, user: hi, expect: {text: nothing}}]
""")
    chat_server.set_handler(lambda request: json_reply(completion(f"the code is {TEAM_SECRET}")))
    pytester.runpytest("--toolbench-record", "--toolbench-base-url", chat_server.base_url,
                       "-p", "no:cacheprovider").assert_outcomes(failed=1)
    monkeypatch.setenv("TEAM_API_KEY", TEAM_SECRET)

    replayed = pytester.runpytest(*EVERY_OUTPUT)

    replayed.assert_outcomes(failed=1)
    replayed.stdout.fnmatch_lines(["*text: the code is <scrubbed>*"])
    outputs = every_output(pytester, replayed)
    del outputs["__cassettes__/plain/plain.yaml"]  # recorded where it was no secret
    assert leaked_to(outputs, TEAM_SECRET) == []


CRED_AGENT = '''
import os


class Keeper:
    def __init__(self):
        self.judge_cred = os.environ["JUDGE_CRED"]

    def __call__(self, user):
        return "hello"


def make_agent():
    return Keeper()
'''


def test_the_variable_a_case_names_for_its_judge_is_a_secret_of_the_agent_case(
        pytester: pytest.Pytester, chat_server: ChatServer,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """``judge.endpoint.api_key_env`` names a variable whose name looks like no
    credential's: its value is masked in the agent's state all the same."""
    cred = "judge-cred-value-4b7e2a9c1d"
    monkeypatch.setenv("JUDGE_CRED", cred)
    pytester.makepyfile(cred_agent=CRED_AGENT)
    pytester.syspathinsert()
    pytester.makefile(".case.yaml", cred=f"""name: cred
agent: {{python: "cred_agent:make_agent"}}
judge: {{model: judge-model, endpoint: {{base_url: "{chat_server.base_url}",
                                       api_key_env: JUDGE_CRED}}}}
stages:
  - name: ask
    user: hi
    expect:
      state: {{judge_cred: nothing}}
      judge: [Greets]
""")

    result = pytester.runpytest("--toolbench-live", *EVERY_OUTPUT)

    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*judge_cred: expected 'nothing', got '<scrubbed>'*"])
    assert leaked_to(every_output(pytester, result), cred) == []
