"""Agent cases' faults and bad input: broken references, agents that raise, return the
wrong thing or overrun, requests the proxy must refuse, and paths that are no model API.

pytester runs of the plugin against the loopback chat server, and the proxy itself spoken
to over real HTTP on loopback.
"""

from __future__ import annotations

import asyncio
import http.client
import json
import os
import time
from pathlib import Path
from typing import Any

import httpx2
import pytest
import yaml
from support.chat_server import completion, json_reply, start_chat_server

from pytest_toolbench.scrubbing import Scrubber
from pytest_toolbench.transport.proxy import ProxyRequest, ProxyResponse, ProxyServer, refused

AGENTS = '''
import json
import os
import time

import httpx2


def _post(path, body):
    with httpx2.Client(timeout=30) as client:
        return client.post(os.environ["OPENAI_BASE_URL"] + path, json=body,
                           headers={"Authorization": "Bearer " + os.environ["OPENAI_API_KEY"]})


def ask(user):
    reply = _post("/chat/completions", {"model": "m", "messages": [
        {"role": "user", "content": user}]})
    return reply.json()["choices"][0]["message"]["content"]


def make_plain():
    return ask


def make_broken():
    raise RuntimeError("no database")


def make_raising():
    def agent(user):
        return helper(user)
    return agent


def helper(user):
    raise ValueError("the agent tripped on " + user)


def make_wrong_type():
    return lambda user: {"text": user}


def make_slow():
    def agent(user):
        time.sleep(2.5)
        return ask("late " + user)
    return agent


def make_lister():
    def agent(user):
        with httpx2.Client(timeout=30) as client:
            listed = client.get(os.environ["OPENAI_BASE_URL"] + "/models")
        return f"{listed.status_code} " + ask(user)
    return agent


def make_tokenless():
    def agent(user):
        base = os.environ["OPENAI_BASE_URL"]
        scheme, _, rest = base.partition("://")
        host, _, path = rest.partition("/")
        with httpx2.Client(timeout=30) as client:
            without = client.post(f"{scheme}://{host}/{path.partition('/')[2]}/chat/completions",
                                  json={})
            guessed = client.post(f"{scheme}://{host}/guess/{path.partition('/')[2]}"
                                  "/chat/completions", json={})
        return f"{without.status_code} {guessed.status_code}"
    return agent


def make_moody():
    def agent(user):
        if os.path.exists("hang"):  # past any deadline, in steps it can be stopped at
            for _ in range(600):
                time.sleep(0.05)
        return ask(user)
    return agent


NOT_CALLABLE = 42
'''


@pytest.fixture
def agents(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(agents=AGENTS)
    pytester.syspathinsert()


def case(name: str, factory: str, expect: str = "", user: str = "hi",
         base_url: str = "http://127.0.0.1:9/v1") -> str:
    return (f"name: {name}\nagent: {{python: 'agents:{factory}'}}\n"
            f"endpoint: {{base_url: '{base_url}'}}\n"
            f"stages:\n  - name: ask\n    user: {user}\n" + (
                f"    expect:\n{expect}" if expect else ""))


def run(pytester: pytest.Pytester, *args: str) -> pytest.RunResult:
    return pytester.runpytest("-p", "no:cacheprovider", *args)


@pytest.mark.parametrize(("factory", "said"), [
    ("nowhere:make", "*cannot import 'nowhere'*"),
    ("agents:make_missing", "*'agents' has no callable 'make_missing'*"),
    ("agents:NOT_CALLABLE", "*'agents' has no callable 'NOT_CALLABLE'*"),
])
def test_an_agent_that_cannot_be_imported_is_a_collection_error_at_its_line(
        pytester: pytest.Pytester, agents: None, factory: str, said: str) -> None:
    pytester.makefile(".case.yaml", bad=f"name: bad\nagent:\n  python: '{factory}'\n"
                      "stages: [{name: ask, user: hi}]\n")
    result = run(pytester)
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines([f"*bad.case.yaml:3: agent.python: {said}"])


@pytest.mark.parametrize(("key", "line"), [
    ("tools: [{name: t}]", "tools"), ("system: be nice", "system"),
    ("params: {temperature: 0}", "params"), ("mcp_servers: {}", "mcp_servers")])
def test_the_loops_own_keys_are_collection_errors_on_an_agent_case(
        pytester: pytest.Pytester, agents: None, key: str, line: str) -> None:
    pytester.makefile(".case.yaml", loop=f"name: loop\nagent: {{python: 'agents:make_plain'}}\n"
                      f"{key}\nstages: [{{name: ask, user: hi}}]\n")
    result = run(pytester)
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines([
        (f"*loop.case.yaml:3: {line}: {line} is for the plugin's own loop, and an agent"
        " case's agent builds its own requests*")])


@pytest.mark.parametrize("key", ["run_tools: true", "stream: true", "tool_choice: auto",
                                 "messages: [{role: user, content: x}]"])
def test_a_stages_loop_keys_are_collection_errors_at_their_line(
        pytester: pytest.Pytester, agents: None, key: str) -> None:
    pytester.makefile(".case.yaml", loop="name: loop\nagent: {python: 'agents:make_plain'}\n"
                      f"stages:\n  - name: ask\n    user: hi\n    {key}\n")
    result = run(pytester)
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines([(f"*loop.case.yaml:6: stages[[]0].{key.split(':')[0]}: *"
                                 "builds its own requests*")])


def test_a_factory_that_raises_fails_the_stage_with_the_users_frames(
        pytester: pytest.Pytester, agents: None) -> None:
    pytester.makefile(".case.yaml", broken=case("broken", "make_broken"))
    result = run(pytester, "--toolbench-live")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines([
        ("*broken.case.yaml:2: broken: agent.python: the agent factory agents:make_broken"
        " raised RuntimeError: no database"),
        '*agents.py", line *, in make_broken*'])
    assert "pytest_toolbench" not in result.stdout.str()


def test_an_agent_that_raises_fails_the_stage_with_the_users_frames(
        pytester: pytest.Pytester, agents: None) -> None:
    pytester.makefile(".case.yaml", raising=case("raising", "make_raising"))
    result = run(pytester, "--toolbench-live")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines([
        ("*raising.case.yaml:6: raising: stages[[]0].user: the agent raised ValueError: the"
        " agent tripped on hi"),
        '*agents.py", line *, in agent*', '*agents.py", line *, in helper*'])
    assert "pytest_toolbench" not in result.stdout.str()


def test_an_answer_that_is_not_a_string_is_a_stage_error_naming_its_type(
        pytester: pytest.Pytester, agents: None) -> None:
    pytester.makefile(".case.yaml", typed=case("typed", "make_wrong_type"))
    result = run(pytester, "--toolbench-live")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines([("*typed.case.yaml:6: typed: stages[[]0].user: the agent"
                                 " returned dict, not str*")])


def test_an_agent_past_its_time_limit_fails_and_its_late_request_reaches_no_case(
        pytester: pytest.Pytester, agents: None) -> None:
    with start_chat_server() as server:
        server.set_handler(lambda request: json_reply(completion("fine")))
        pytester.makefile(".case.yaml", slow=case("slow", "make_slow",
                                                  base_url=server.base_url)
                          + "---\n" + case("after", "make_plain", base_url=server.base_url,
                                           expect="      requests: 1\n"))
        result = run(pytester, "--toolbench-record", "--toolbench-deadline", "1")
        result.assert_outcomes(passed=1, failed=1)
        result.stdout.fnmatch_lines([("*slow.case.yaml:6: slow: stages[[]0].user: the agent"
                                     " did not finish within 1 s (the stage's time limit)*")])
        time.sleep(2.5)  # past the slow agent's sleep: it would have sent by now
        sent = [request.json()["messages"][0]["content"] for request in server.requests]
    assert sent == ["hi"]  # the after case's; the slow agent's "late hi" never went out
    kept = yaml.safe_load((pytester.path / "__cassettes__" / "slow" / "after.yaml"
                           ).read_text())
    assert len(kept["interactions"]) == 1


def test_a_path_that_is_no_model_api_is_forwarded_recorded_and_replayed(
        pytester: pytest.Pytester, agents: None) -> None:
    with start_chat_server() as server:
        server.set_handler(lambda request: json_reply(completion("listed")))
        pytester.makefile(".case.yaml", lister=case(
            "lister", "make_lister", base_url=server.base_url,
            expect="      requests: 1\n      text: '404 listed'\n"))
        run(pytester, "--toolbench-record").assert_outcomes(passed=1)
        assert [request.path for request in server.requests] == [
            "/v1/models", "/v1/chat/completions"]
    kept = yaml.safe_load((pytester.path / "__cassettes__" / "lister" / "lister.yaml"
                           ).read_text())
    assert [(item.get("api"), item["request"]["method"], item["request"]["path"])
            for item in kept["interactions"]] == [
        (None, "GET", "/openai/v1/models"), ("chat", "POST", "/openai/v1/chat/completions")]
    run(pytester).assert_outcomes(passed=1)


def test_requests_without_the_sessions_token_are_refused(
        pytester: pytest.Pytester, agents: None) -> None:
    pytester.makefile(".case.yaml", tokenless=case("tokenless", "make_tokenless",
                                                   expect="      text: '403 403'\n"))
    pytester.makefile(".yaml", **{"__cassettes__/tokenless/tokenless": "version: 2\napi: agent\n"
                                  "interactions: []\n"})
    run(pytester).assert_outcomes(passed=1)


def test_a_recorded_case_that_sent_nothing_has_an_empty_cassette_and_replays(
        pytester: pytest.Pytester) -> None:
    pytester.makepyfile(quiet="def make():\n    return lambda user: 'no model needed'\n")
    pytester.syspathinsert()
    pytester.makefile(".case.yaml", quiet="name: quiet\nagent: {python: 'quiet:make'}\n"
                      "stages:\n  - name: ask\n    user: hi\n    expect: {requests: 0}\n")
    run(pytester, "--toolbench-record").assert_outcomes(passed=1)
    kept = yaml.safe_load((pytester.path / "__cassettes__" / "quiet" / "quiet.yaml"
                           ).read_text())
    assert kept["interactions"] == []
    run(pytester).assert_outcomes(passed=1)


def test_the_proxy_listens_on_loopback_and_refuses_without_its_token_or_a_case() -> None:
    proxy = ProxyServer()
    proxy.start()
    try:
        base = proxy.base_url("chat")
        assert base.startswith(f"http://127.0.0.1:{proxy.port}/{proxy.token}/openai/v1")
        assert len(proxy.token) >= 30
        with httpx2.Client(timeout=10) as client:
            wrong = client.post(f"http://127.0.0.1:{proxy.port}/x{proxy.token}/openai/v1"
                                "/chat/completions", json={})
            idle = client.post(f"{base}/chat/completions", json={})
        for response in (wrong, idle):
            assert response.status_code == 403
            body: dict[str, Any] = response.json()
            assert body["error"]["message"].startswith("pytest-toolbench:")
        assert "no agent case is running" in idle.json()["error"]["message"]
        assert json.dumps(proxy.environment()).count(proxy.token) == 3
    finally:
        proxy.close()


class _Answers:
    """A case's handler that answers every request (200)."""

    def owns(self, connection: int) -> bool:
        return True

    async def handle(self, request: ProxyRequest) -> ProxyResponse:
        return refused(200, "fine")


def test_a_connection_is_kept_alive_only_for_a_client_that_says_it_has_no_event_loop(
        ) -> None:
    proxy = ProxyServer()
    proxy.start()
    proxy.attach(_Answers())
    path = f"/{proxy.token}/openai/v1/chat/completions"
    sync_client = {"X-Stainless-Async": "false", "content-type": "application/json"}
    connections = [http.client.HTTPConnection("127.0.0.1", proxy.port, timeout=10)
                   for _ in range(3)]
    try:
        kept = connections[0]
        replies = []
        for _ in range(2):
            kept.request("POST", path, body=b"{}", headers=sync_client)
            replies.append(kept.getresponse())
            replies[-1].read()
        assert [reply.status for reply in replies] == [200, 200]
        assert not any(reply.will_close for reply in replies)
        assert kept.sock is not None
        proxy.attach(None)  # the case is over: its idle connections are closed
        assert kept.sock.recv(1) == b""

        proxy.attach(_Answers())
        for other, headers in zip(connections[1:], ({"X-Stainless-Async": "async:asyncio"}, {})):
            other.request("POST", path, body=b"{}", headers=headers)
            reply = other.getresponse()
            reply.read()
            assert reply.will_close, headers  # the connection closes after the reply
    finally:
        for connection in connections:
            connection.close()
        proxy.close()


def test_a_head_request_gets_the_head_of_its_answer_and_no_body() -> None:
    proxy = ProxyServer()
    proxy.start()
    try:
        with httpx2.Client(timeout=10) as client:
            response = client.head(proxy.base_url("chat") + "/models")  # no case: refused
        assert response.status_code == 403
        assert int(response.headers["content-length"]) > 0 and response.content == b""
    finally:
        proxy.close()


GATHERER = '''
import asyncio
import os

import httpx2


async def make():
    async def agent(user):
        async with httpx2.AsyncClient(timeout=30) as client:
            async def ask(text):
                reply = await client.post(os.environ["OPENAI_BASE_URL"] + "/chat/completions",
                                          json={"model": "m", "messages": [
                                              {"role": "user", "content": text}]})
                return reply.json()["choices"][0]["message"]["content"]
            answers = await asyncio.gather(*(ask(f"{user} {n}") for n in range(4)),
                                           ask(user), ask(user))
        return " ".join(answers)
    return agent
'''


def test_concurrent_requests_replay_whatever_order_they_come_in(
        pytester: pytest.Pytester) -> None:
    pytester.makepyfile(gatherer=GATHERER)
    pytester.syspathinsert()

    def echo(request: Any) -> Any:
        return json_reply(completion(request.json()["messages"][0]["content"].upper()))
    with start_chat_server() as server:
        server.set_handler(echo)
        pytester.makefile(".case.yaml", gather=case(
            "gather", "make", base_url=server.base_url,
            expect="      text: HI 0 HI 1 HI 2 HI 3 HI HI\n      requests: 6\n").replace(
                "agents:make", "gatherer:make"))
        run(pytester, "--toolbench-record").assert_outcomes(passed=1)
    run(pytester).assert_outcomes(passed=1)


def test_an_upstream_that_fails_fails_the_stage_and_keeps_the_old_cassette(
        pytester: pytest.Pytester, agents: None) -> None:
    with start_chat_server() as server:
        server.set_handler(lambda request: json_reply(completion("fine")))
        pytester.makefile(".case.yaml", down=case("down", "make_plain",
                                                  base_url=server.base_url))
        run(pytester, "--toolbench-record").assert_outcomes(passed=1)
    path = pytester.path / "__cassettes__" / "down" / "down.yaml"
    before = path.read_text()
    result = run(pytester, "--toolbench-record")  # the server is gone
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines([("down.case.yaml:5: down: stages[[]0]: the proxy's request to"
                                 " http://127.0.0.1:*/v1 failed*")])
    assert path.read_text() == before


def test_an_agent_abandoned_at_its_deadline_while_recording_keeps_the_good_cassette(
        pytester: pytest.Pytester, agents: None) -> None:
    with start_chat_server() as server:
        server.set_handler(lambda request: json_reply(completion("fine")))
        pytester.makefile(".case.yaml", moody=case("moody", "make_moody",
                                                   base_url=server.base_url))
        run(pytester, "--toolbench-record").assert_outcomes(passed=1)
        path = pytester.path / "__cassettes__" / "moody" / "moody.yaml"
        before = path.read_bytes()
        assert len(yaml.safe_load(before)["interactions"]) == 1
        (pytester.path / "hang").touch()
        result = run(pytester, "--toolbench-record", "--toolbench-deadline", "1")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines([("*moody: stages[[]0].user: the agent did not finish within"
                                 " 1 s (the stage's time limit)*")])
    assert path.read_bytes() == before
    (pytester.path / "hang").unlink()
    run(pytester).assert_outcomes(passed=1)


FIXTURE_TEST = '''
import agents


def test_asks(toolbench_agent):
    assert agents.ask("hi") == "fine"
'''


def test_a_fixture_test_that_failed_on_a_broken_server_keeps_the_good_cassette(
        pytester: pytest.Pytester, agents: None) -> None:
    pytester.makepyfile(test_asks=FIXTURE_TEST)
    with start_chat_server() as server:
        server.set_handler(lambda request: json_reply(completion("fine")))
        run(pytester, "--toolbench-record", "--toolbench-base-url", server.base_url
            ).assert_outcomes(passed=1)
        path = pytester.path / "__cassettes__" / "test_asks" / "test_asks.yaml"
        before = path.read_bytes()
        server.set_handler(lambda request: json_reply(
            {"error": {"message": "overloaded", "type": "server_error"}}, status=503))
        run(pytester, "--toolbench-record", "--toolbench-base-url", server.base_url
            ).assert_outcomes(failed=1)
    assert path.read_bytes() == before
    run(pytester).assert_outcomes(passed=1)


def test_a_live_loop_case_and_an_agent_case_share_a_session(
        pytester: pytest.Pytester, agents: None) -> None:
    with start_chat_server() as server:
        server.set_handler(lambda request: json_reply(completion("fine")))
        pytester.makefile(".case.yaml", mixed=(
            f"name: loop\nendpoint: {{base_url: '{server.base_url}'}}\n"
            "stages: [{name: ask, user: hi, expect: {text: fine}}]\n---\n"
            + case("agent", "make_plain", base_url=server.base_url,
                   expect="      text: fine\n") + "---\n"
            f"name: loop2\nendpoint: {{base_url: '{server.base_url}'}}\n"
            "stages: [{name: ask, user: hi, expect: {text: fine}}]\n"))
        result = run(pytester, "--toolbench-live", "--toolbench-concurrency", "4")
    result.assert_outcomes(passed=3)


HOSTILE = '''
import asyncio
import sys


def make_exiting():
    return lambda user: sys.exit(3)


def make_interrupting():
    def agent(user):
        raise KeyboardInterrupt
    return agent


def make_spinning():
    def agent(user):
        while True:
            pass
    return agent


async def make_async_spinning():
    async def agent(user):
        while True:
            pass
    return agent


async def make_swallowing():
    async def agent(user):
        while True:
            try:
                await asyncio.sleep(10)
            except asyncio.CancelledError:
                pass
    return agent
'''


def test_hostile_agents_fail_their_stage_and_the_session_goes_on(
        pytester: pytest.Pytester, agents: None) -> None:
    pytester.makepyfile(hostile=HOSTILE)
    # Their stage may take 1 s (ten times the endpoint's timeout): the case after them takes
    # the default, since the spinning agents, left running, slow every later case of the run.
    cases = [case(name, factory).replace("agents:", "hostile:").replace(
        "base_url:", "timeout_s: 0.1, base_url:") for name, factory in (
        ("exiting", "make_exiting"), ("interrupting", "make_interrupting"),
        ("spinning", "make_spinning"), ("async_spinning", "make_async_spinning"),
        ("swallowing", "make_swallowing"))]
    with start_chat_server() as server:
        server.set_handler(lambda request: json_reply(completion("fine")))
        after = case("after", "make_plain", base_url=server.base_url,
                     expect="      text: fine\n")
        pytester.makefile(".case.yaml", hostile="---\n".join([*cases, after]))
        started = time.monotonic()
        # In a process of its own: the two spinning agents, abandoned at their deadline,
        # spin on for as long as their process lives, and in this one would hold the GIL
        # against every later test of this worker (a loopback server's accept thread among them).
        result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "--toolbench-live")
    assert time.monotonic() - started < 30
    result.assert_outcomes(passed=1, failed=5)
    result.stdout.fnmatch_lines([
        "*exiting: stages[[]0].user: the agent raised SystemExit: 3*",
        "*interrupting: stages[[]0].user: the agent raised KeyboardInterrupt*",
        "*spinning: stages[[]0].user: the agent did not finish within 1 s*",
        "*async_spinning: stages[[]0].user: the agent did not finish within 1 s*",
        "*swallowing: stages[[]0].user: the agent did not finish within 1 s*"])


def test_live_agent_cases_spend_the_token_budget(pytester: pytest.Pytester,
                                                 agents: None) -> None:
    with start_chat_server() as server:
        server.set_handler(lambda request: json_reply(completion("fine")))  # 15 tokens each
        pytester.makefile(".case.yaml", budget="---\n".join(
            case(f"c{n}", "make_plain", base_url=server.base_url) for n in range(4)))
        result = run(pytester, "--toolbench-live", "--toolbench-max-tokens=20", "-rs")
        result.assert_outcomes(passed=2, skipped=2)
        assert len(server.requests) == 2
    result.stdout.fnmatch_lines(["*token budget spent: 30 of 20 tokens used*"])


def test_a_request_body_past_the_proxys_limit_is_refused_with_a_413(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("pytest_toolbench.transport.proxy.MAX_REQUEST_BYTES", 1000)
    proxy = ProxyServer()
    proxy.start()
    try:
        with httpx2.Client(timeout=10) as client:
            big = client.post(proxy.base_url("chat") + "/chat/completions",
                              content=b"x" * 5000)
        assert big.status_code == 413
        assert "larger than 1000 bytes" in big.json()["error"]["message"]
    finally:
        proxy.close()


ENV_CHANGER = '''
import os


def make():
    def agent(user):
        os.environ.pop("PATH_LIKE_SETTING", None)
        os.environ["LEFT_BY_THE_AGENT"] = "1"
        os.environ["OPENAI_BASE_URL"] = "http://example.invalid/v1"
        return "changed"
    return agent


def seen():
    def agent(user):
        return " ".join(f"{name}={os.environ.get(name)}" for name in (
            "PATH_LIKE_SETTING", "LEFT_BY_THE_AGENT"))
    return agent
'''


def test_an_agent_that_changes_the_environment_leaves_no_trace(
        pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH_LIKE_SETTING", "kept")
    pytester.makepyfile(changer=ENV_CHANGER)
    pytester.syspathinsert()
    pytester.makefile(".case.yaml", env=(
        case("changer", "make").replace("agents:", "changer:") + "---\n"
        + case("after", "seen", expect="      text: PATH_LIKE_SETTING=kept LEFT_BY_THE_AGENT=None\n"
               ).replace("agents:", "changer:")))
    run(pytester, "--toolbench-live").assert_outcomes(passed=2)
    assert "LEFT_BY_THE_AGENT" not in os.environ


BIG_READER = '''
import json
import os
import time

import httpx2


def make():
    def agent(user):
        with httpx2.Client(timeout=30) as client:
            with client.stream("POST", os.environ["OPENAI_BASE_URL"] + "/chat/completions",
                               json={"model": "m", "messages": []}) as response:
                pieces = []
                for piece in response.iter_bytes(65536):
                    pieces.append(piece)
                    time.sleep(0.001)  # a slow reader: the proxy's buffer fills
        reply = json.loads(b"".join(pieces))
        return str(len(reply["choices"][0]["message"]["content"]))
    return agent
'''


def test_a_large_reply_reaches_a_slow_agent_whole(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(big=BIG_READER)
    pytester.syspathinsert()
    body = completion("x" * 4_000_000)
    with start_chat_server() as server:
        server.set_handler(lambda request: json_reply(body))
        pytester.makefile(".case.yaml", big=case("big", "make", base_url=server.base_url,
                                                 expect="      text: '4000000'\n"
                                                 ).replace("agents:", "big:"))
        run(pytester, "--toolbench-record").assert_outcomes(passed=1)
    run(pytester).assert_outcomes(passed=1)


@pytest.mark.parametrize("below", [
    "/v1@127.0.0.1:{evil}/chat/completions",
    "/v1:1@127.0.0.1:{evil}/chat/completions",
    "/@127.0.0.1:{evil}/v1/chat/completions",
    "//user@127.0.0.1:{evil}/v1/chat/completions",
    "/v1/..//user@127.0.0.1:{evil}/chat/completions",
])
def test_a_path_with_user_at_host_in_it_cannot_forward_to_another_host(below: str) -> None:
    """The upstream URL is built from the request's path: whatever the path holds (an
    ``@``, a ``//``), it is a path on the endpoint's own host."""
    from pytest_toolbench.transport.agent_forward import LiveTap, Upstream
    from pytest_toolbench.transport.cassette import Cassette
    from pytest_toolbench.transport.proxy import FAMILIES

    with start_chat_server() as endpoint, start_chat_server() as evil:
        origin = endpoint.base_url.removesuffix("/v1")  # a base URL with no path
        upstreams = {api: Upstream(origin, None) for api in ("chat", "responses", "messages",
                                                               "gemini")}
        proxy = ProxyServer()
        proxy.start()
        tap = LiveTap(Cassette(Path("unused.yaml")), Scrubber(), upstreams, recording=False)
        proxy.attach(tap)
        connection = http.client.HTTPConnection("127.0.0.1", proxy.port, timeout=10)
        try:
            port = evil.base_url.split(":")[2].split("/")[0]
            target = f"/{proxy.token}/{FAMILIES['openai'].name}{below.format(evil=port)}"
            connection.request("POST", target, body=b"{}",
                               headers={"content-type": "application/json"})
            reply = connection.getresponse()
            reply.read()
        finally:
            connection.close()
            proxy.attach(None)
            tap.close()
            asyncio.run_coroutine_threadsafe(tap.aclose(), proxy.loop).result(10)
            proxy.close()
        assert evil.requests == []
        (forwarded,) = endpoint.requests  # to the endpoint's own host, whatever its answer
        assert reply.status in (200, 404)
        assert "authorization" not in forwarded.headers  # no userinfo made into Basic auth


PROCESS_CHANGER = '''
import os
import sys


def make():
    def agent(user):
        os.chdir(os.path.dirname(os.getcwd()))
        sys.path.insert(0, "/nowhere/left-by-the-agent")
        sys.modules["json"] = None  # every later "import json" fails
        return "changed"
    return agent


def seen():
    return lambda user: f"{os.getcwd()} {'/nowhere/left-by-the-agent' in sys.path}"
'''


def test_an_agent_that_changes_cwd_sys_path_or_sys_modules_leaves_no_trace(
        pytester: pytest.Pytester) -> None:
    """The working directory, ``sys.path`` and ``sys.modules`` are put back when an agent
    case ends, as the environment is; blocking a module the session uses fails the case
    that did it, and the session goes on to write its reports."""
    pytester.makepyfile(changer=PROCESS_CHANGER)
    pytester.makefile(".case.yaml", process=(
        case("changer", "make").replace("agents:", "changer:") + "---\n"
        + case("after", "seen", expect=f"      text: {pytester.path} False\n"
               ).replace("agents:", "changer:")))
    result = pytester.runpytest_subprocess(
        "-p", "no:cacheprovider", "--toolbench-live", "--toolbench-report=r.json",
        "--junitxml=j.xml", "-o", "pythonpath=.", timeout=120)
    result.assert_outcomes(passed=1, failed=1)
    assert "INTERNALERROR" not in result.stdout.str() + result.stderr.str()
    blocked = "the agent set sys.modules entries to None (json), which blocks every later"
    result.stdout.fnmatch_lines([f"*changer: {blocked} import of them*"])
    report = json.loads((pytester.path / "r.json").read_text())
    assert [(case["case"], case["outcome"]) for case in report["cases"]] == [
        ("changer", "failed"), ("after", "passed")]
