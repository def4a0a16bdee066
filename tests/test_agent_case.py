"""Agent cases: a team's own agent code, recorded and replayed through the plugin's proxy.

Every test runs the plugin through pytester. The agents are real code in modules the test
writes: one on plain httpx2, one on the openai SDK (sync and async). Live and recording
runs reach the loopback chat server through the proxy; replays run with it stopped.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from support.chat_server import (
    ChatServer,
    RecordedRequest,
    SSEPause,
    chunks_for,
    completion,
    json_reply,
    sse_reply,
    start_chat_server,
)

HTTP_AGENT = '''
import json
import os

import httpx2

TOOLS = [
    {"type": "function", "function": {"name": "lookup_order", "parameters": {
        "type": "object", "properties": {"order_id": {"type": "string"}}}}},
    {"type": "function", "function": {"name": "issue_refund", "parameters": {
        "type": "object", "properties": {"order_id": {"type": "string"}}}}},
]


class Bot:
    """A support agent on plain HTTP: chat completions with tools, its own loop."""

    def __init__(self, tone, model):
        self.model = model or "test-model"
        self.history = [{"role": "system", "content": "Be " + tone + "."}]
        self.refunds = 0

    def __call__(self, user):
        self.history.append({"role": "user", "content": user})
        for _ in range(5):
            with httpx2.Client(timeout=30) as client:
                reply = client.post(os.environ["OPENAI_BASE_URL"] + "/chat/completions",
                                    headers={"Authorization": "Bearer " + os.environ["OPENAI_API_KEY"]},
                                    json={"model": self.model, "messages": self.history,
                                          "tools": TOOLS})
            reply.raise_for_status()
            message = reply.json()["choices"][0]["message"]
            self.history.append(message)
            if not message.get("tool_calls"):
                return message["content"]
            for call in message["tool_calls"]:
                if call["function"]["name"] == "issue_refund":
                    self.refunds += 1
                self.history.append({"role": "tool", "tool_call_id": call["id"],
                                     "content": json.dumps({"ok": True})})
        return "gave up"


def make_agent(tone="plain", model=None):
    return Bot(tone, model)
'''

REFUND_CASE = """name: refund_order
agent:
  python: support_bot:make_agent
  init: {tone: terse}
endpoint: {base_url: "BASE_URL"}
stages:
  - name: ask
    user: Refund order 913
    expect:
      tool_calls: [{name: lookup_order, arguments: {order_id: "913"}}, {name: issue_refund}]
      text: {$contains: refund}
      requests: 3
      state: {refunds: 1}
  - name: when
    user: When will the money arrive?
    expect:
      trajectory: {$not: {name: issue_refund}}
      text: {$contains: days}
"""


def play(server: ChatServer, *answers: list[Any]) -> Callable[[RecordedRequest], Any]:
    """Each stage's requests get the next steps of its list: tool calls, then the text.
    The stage is told by the number of user messages so far."""
    def answer(request: RecordedRequest) -> Any:
        messages = request.json()["messages"]
        stage = sum(1 for m in messages if m["role"] == "user") - 1
        last_user = max(i for i, m in enumerate(messages) if m["role"] == "user")
        turn = sum(1 for m in messages[last_user:] if m["role"] == "assistant")
        step = answers[stage][turn]
        body = completion(text=step) if isinstance(step, str) else completion(tool_calls=[step])
        if request.json().get("stream"):
            return sse_reply(chunks_for(text=step) if isinstance(step, str)
                             else chunks_for(tool_calls=[step]))
        return json_reply(body)
    server.set_handler(answer)
    return answer


REFUND_SCRIPT = (
    [("lookup_order", {"order_id": "913"}), ("issue_refund", {"order_id": "913"}),
     "Your refund is on its way."],
    ["It arrives within 5 days."],
)


@pytest.fixture
def support_bot(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(support_bot=HTTP_AGENT)
    pytester.syspathinsert()


def write_case(pytester: pytest.Pytester, base_url: str, text: str = REFUND_CASE) -> Path:
    return pytester.makefile(".case.yaml", refund=text.replace("BASE_URL", base_url))


def run(pytester: pytest.Pytester, *args: str) -> pytest.RunResult:
    return pytester.runpytest("-p", "no:cacheprovider", *args)


def cassette(pytester: pytest.Pytester, name: str = "refund_order") -> dict[str, Any]:
    path = pytester.path / "__cassettes__" / "refund" / f"{name}.yaml"
    return yaml.safe_load(path.read_text())  # type: ignore[no-any-return]


def test_an_agent_case_is_recorded_then_replayed_with_the_server_stopped(
        pytester: pytest.Pytester, support_bot: None,
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-secret-key-of-the-team-123")
    with start_chat_server() as server:
        play(server, *REFUND_SCRIPT)
        write_case(pytester, server.base_url)
        recorded = run(pytester, "--toolbench-record")
        recorded.assert_outcomes(passed=1)
        assert len(server.requests) == 4
        assert server.requests[0].headers["authorization"] == (
            "Bearer sk-secret-key-of-the-team-123")
    text = (pytester.path / "__cassettes__" / "refund" / "refund_order.yaml").read_text()
    assert "sk-secret-key-of-the-team-123" not in text
    kept = cassette(pytester)
    assert kept["api"] == "agent"
    assert [item["api"] for item in kept["interactions"]] == ["chat"] * 4
    assert [item["request"]["path"] for item in kept["interactions"]] == [
        "/openai/v1/chat/completions"] * 4
    replayed = run(pytester, "--toolbench-report", "report.json", "--toolbench-html",
                   "report.html")  # the server is gone: every answer is the cassette's
    replayed.assert_outcomes(passed=1)
    report = json.loads((pytester.path / "report.json").read_text())
    [record] = report["cases"]
    assert (record["api"], record["outcome"], record["turns"]) == ("agent", "passed", 4)
    assert "refund_order" in (pytester.path / "report.html").read_text()


def test_a_wrong_expectation_fails_the_same_live_and_replayed(
        pytester: pytest.Pytester, support_bot: None) -> None:
    wrong = REFUND_CASE.replace("requests: 3", "requests: 2")
    with start_chat_server() as server:
        play(server, *REFUND_SCRIPT)
        write_case(pytester, server.base_url, wrong)
        recorded = run(pytester, "--toolbench-record")
    replayed = run(pytester)
    for result in (recorded, replayed):
        result.assert_outcomes(failed=1)
        result.stdout.fnmatch_lines(["*refund.case.yaml:12*requests*expected 2*got 3*"])


def test_a_changed_agent_fails_its_replay_naming_the_difference(
        pytester: pytest.Pytester, support_bot: None) -> None:
    with start_chat_server() as server:
        play(server, *REFUND_SCRIPT)
        write_case(pytester, server.base_url)
        run(pytester, "--toolbench-record").assert_outcomes(passed=1)
    pytester.makepyfile(support_bot=HTTP_AGENT.replace('"Be " + tone', '"Be very " + tone'))
    replayed = run(pytester)
    replayed.assert_outcomes(failed=1)
    replayed.stdout.fnmatch_lines([
        ("*differs from the one recorded in __cassettes__/refund/refund_order.yaml, first at"
         ' messages[[]0].content: recorded "Be terse.", sent "Be very terse."; re-record*'),
        "*-*Be terse.*", "*+*Be very terse.*"])


OPENAI_AGENT = '''
import openai

TOOLS = [{"type": "function", "function": {"name": "lookup_order", "parameters": {
    "type": "object", "properties": {"order_id": {"type": "string"}}}}},
    {"type": "function", "function": {"name": "issue_refund", "parameters": {
    "type": "object", "properties": {"order_id": {"type": "string"}}}}}]


class Agent:
    def __init__(self, client, stream, model):
        self.client, self.stream, self.model = client, stream, model or "test-model"
        self.history = []

    def answered(self, message):
        self.history.append(message.model_dump(exclude_none=True))
        for call in message.tool_calls or []:
            self.history.append({"role": "tool", "tool_call_id": call.id, "content": "{}"})
        return not message.tool_calls


class SyncAgent(Agent):
    def __call__(self, user):
        self.history.append({"role": "user", "content": user})
        while True:
            asked = dict(model=self.model, messages=self.history, tools=TOOLS)
            if self.stream:
                with self.client.chat.completions.stream(**asked) as events:
                    message = events.get_final_completion().choices[0].message
            else:
                message = self.client.chat.completions.create(**asked).choices[0].message
            if self.answered(message):
                return message.content

    def close(self):
        self.client.close()


class AsyncAgent(Agent):
    async def __call__(self, user):
        self.history.append({"role": "user", "content": user})
        while True:
            asked = dict(model=self.model, messages=self.history, tools=TOOLS)
            if self.stream:
                async with self.client.chat.completions.stream(**asked) as events:
                    message = (await events.get_final_completion()).choices[0].message
            else:
                message = (await self.client.chat.completions.create(**asked)
                           ).choices[0].message
            if self.answered(message):
                return message.content

    async def aclose(self):
        await self.client.close()


def make_agent(stream=False, model=None):
    return SyncAgent(openai.OpenAI(max_retries=0), stream, model)


async def make_async_agent(stream=False, model=None):
    return AsyncAgent(openai.AsyncOpenAI(max_retries=0), stream, model)
'''


@pytest.mark.parametrize("factory", ["make_agent", "make_async_agent"])
@pytest.mark.parametrize("stream", [False, True])
def test_an_openai_sdk_agent_records_and_replays(
        pytester: pytest.Pytester, factory: str, stream: bool) -> None:
    pytester.makepyfile(sdk_bot=OPENAI_AGENT)
    pytester.syspathinsert()
    case = (REFUND_CASE.replace("support_bot:make_agent", f"sdk_bot:{factory}")
            .replace("init: {tone: terse}", f"init: {{stream: {str(stream).lower()}}}")
            .replace("      state: {refunds: 1}\n", ""))
    if stream:
        case = case.replace("      requests: 3\n", "      requests: 3\n"
                            "      stream: {done: true, chunks: {$gte: 3}}\n")
    with start_chat_server() as server:
        play(server, *REFUND_SCRIPT)
        write_case(pytester, server.base_url, case)
        run(pytester, "--toolbench-record").assert_outcomes(passed=1)
        assert [request.json().get("stream", False) for request in server.requests] == (
            [stream] * 4)
    kept = cassette(pytester)
    assert all(("events" in item["response"]) == stream for item in kept["interactions"])
    run(pytester).assert_outcomes(passed=1)


FIXTURE_TEST = '''
import sdk_bot


def test_refund(toolbench_agent):
    agent = sdk_bot.make_agent()
    answer = agent("Refund order 913")
    toolbench_agent.check(answer, tool_calls=[{"name": "lookup_order"}, {"name": "issue_refund"}],
                          text={"$contains": "refund"}, requests=3)
    assert [call.name for call in toolbench_agent.calls] == ["lookup_order", "issue_refund"]
    assert len(toolbench_agent.requests) == 3
    answer = agent("When will the money arrive?")
    toolbench_agent.check(answer, tool_calls=[], text={"$contains": "WEEKS"})
    agent.close()
'''


def test_the_fixture_records_and_replays_a_plain_test(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(sdk_bot=OPENAI_AGENT, test_refund=FIXTURE_TEST)
    pytester.syspathinsert()
    with start_chat_server() as server:
        play(server, *REFUND_SCRIPT)
        recorded = run(pytester, "--toolbench-record", "--toolbench-base-url", server.base_url)
    path = pytester.path / "__cassettes__" / "test_refund" / "test_refund.yaml"
    kept = yaml.safe_load(path.read_text())
    assert len(kept["interactions"]) == 4
    replayed = run(pytester)
    for result in (recorded, replayed):
        result.assert_outcomes(failed=1)
        result.stdout.fnmatch_lines([
            "E*test_refund.py:12: test_refund: expect.text: *WEEKS*",
            "E*--- stage 'check 2': failed ---"])


STREAM_WATCHER = '''
import os
import time

import httpx2


def make():
    def agent(user):
        body = {"model": "m", "stream": True, "messages": [{"role": "user", "content": user}]}
        arrivals = []
        with httpx2.Client(timeout=30) as client:
            with client.stream("POST", os.environ["OPENAI_BASE_URL"] + "/chat/completions",
                               json=body) as response:
                for line in response.iter_lines():
                    if line.startswith("data: {"):
                        arrivals.append(time.monotonic())
        return "apart" if arrivals[-1] - arrivals[0] > 0.8 else "together"
    return agent
'''


def test_a_stream_reaches_the_agent_chunk_by_chunk_as_the_server_sends_it(
        pytester: pytest.Pytester) -> None:
    pytester.makepyfile(watcher=STREAM_WATCHER)
    pytester.syspathinsert()
    chunks = chunks_for(text="first and then the rest", split=6)
    with start_chat_server() as server:
        server.enqueue(sse_reply([chunks[0], chunks[1], SSEPause(1.2), *chunks[2:]]))
        pytester.makefile(".case.yaml", watch=(
            f"name: watch\nagent: {{python: 'watcher:make'}}\n"
            f"endpoint: {{base_url: '{server.base_url}'}}\n"
            "stages:\n  - name: ask\n    user: hi\n    expect:\n      text: apart\n"
            "      stream: {done: true, chunks: {$gte: 5}}\n"))
        run(pytester, "--toolbench-record").assert_outcomes(passed=1)
    path = pytester.path / "__cassettes__" / "watch" / "watch.yaml"
    events = yaml.safe_load(path.read_text())["interactions"][0]["response"]["events"]
    assert events[2]["at_ms"] - events[1]["at_ms"] >= 1000  # kept as they came
    # Replayed with the recorded timing, the agent sees the same pause.
    run(pytester, "--toolbench-replay-speed", "1").assert_outcomes(passed=1)


CHECKS = '''
def no_date_promised(outcome, agent):
    assert "monday" not in outcome.text.lower(), "the agent promised a date: " + outcome.text
    assert outcome.stage == "when"
    assert agent is None or agent.refunds == 1


def calls_named(outcome, agent):
    assert [call.name for call in outcome.tool_calls] == ["lookup_order"], outcome.tool_calls
    assert outcome.tool_calls[0].arguments == {"order_id": "913"}
    assert len(outcome.requests) == 1 and agent is None


async def broken(outcome, agent):
    return {}["missing"]
'''


def test_expect_python_checks_an_agents_stage_and_a_loops_stage(
        pytester: pytest.Pytester, support_bot: None) -> None:
    pytester.makepyfile(support_checks=CHECKS)
    monday = (REFUND_SCRIPT[0], ["It arrives on Monday."])
    with start_chat_server() as server:
        play(server, *monday)
        write_case(pytester, server.base_url, REFUND_CASE.replace(
            "      text: {$contains: days}\n",
            "      python: support_checks:no_date_promised\n"))
        pytester.makefile(".case.yaml", loop=(
            f"name: loop\nendpoint: {{base_url: '{server.base_url}'}}\n"
            "tools: [{name: lookup_order, parameters: {type: object}}]\n"
            "stages:\n  - name: ask\n    user: Refund order 913\n"
            "    expect:\n      python: support_checks:calls_named\n      requests: 1\n"
            "---\nname: broken\n"
            f"endpoint: {{base_url: '{server.base_url}'}}\n"
            "stages:\n  - name: ask\n    user: Refund order 913\n"
            "    expect: {python: 'support_checks:broken'}\n"))
        result = run(pytester, "--toolbench-live")
    result.assert_outcomes(passed=1, failed=2)
    result.stdout.fnmatch_lines([
        ("*refund.case.yaml:18: refund_order: stages[[]1].expect.python:"
        " support_checks:no_date_promised: the agent promised a date: It arrives on Monday."),
    ])
    result.stdout.fnmatch_lines([
        ("*loop.case.yaml:16: broken: stages[[]0].expect.python: support_checks:broken raised"
        " KeyError: 'missing'"),
        '*support_checks.py", line 14, in broken*'])


JUDGED_CASE = REFUND_CASE.replace(
    "name: refund_order\n", "name: refund_order\njudge:\n  model: judge-model\n").replace(
    "      text: {$contains: days}\n", "      judge: [Says when the money arrives]\n")
"""The refund case with its second stage judged."""


def test_an_agents_stage_is_judged_live_and_the_verdict_replays(
        pytester: pytest.Pytester, support_bot: None) -> None:
    from support.second_models import verdict

    with start_chat_server() as server:
        agent = play(server, *REFUND_SCRIPT)
        judged: list[str] = []

        def answer(request: RecordedRequest) -> Any:
            if request.json().get("model") == "judge-model":
                judged.append(json.dumps(request.json()))
                return verdict("chat", "pass", "It says five days.")
            return agent(request)
        server.set_handler(answer)
        write_case(pytester, server.base_url, JUDGED_CASE)
        run(pytester, "--toolbench-record").assert_outcomes(passed=1)
    assert len(judged) == 1 and "It arrives within 5 days." in judged[0]
    kept = cassette(pytester)
    assert [item.get("role", "model") for item in kept["interactions"]] == [
        "model"] * 4 + ["judge"]
    run(pytester).assert_outcomes(passed=1)


def test_rejudge_replays_the_agent_and_asks_the_judge_live(
        pytester: pytest.Pytester, support_bot: None) -> None:
    from support.second_models import verdict

    with start_chat_server() as server:
        agent = play(server, *REFUND_SCRIPT)
        verdicts = iter([verdict("chat", "pass", "It says five days."),
                         verdict("chat", "fail", "It names no day.")])
        sent = {"model": 0, "judge": 0}

        def answer(request: RecordedRequest) -> Any:
            role = "judge" if request.json().get("model") == "judge-model" else "model"
            sent[role] += 1
            return next(verdicts) if role == "judge" else agent(request)
        server.set_handler(answer)
        write_case(pytester, server.base_url, JUDGED_CASE)
        run(pytester, "--toolbench-record").assert_outcomes(passed=1)
        recorded = cassette(pytester)
        result = run(pytester, "--toolbench-rejudge", "--toolbench-base-url", server.base_url)
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*judge says fail*", "*fail: It names no day.*"])
    assert sent == {"model": 4, "judge": 2}  # the agent's requests were replayed
    assert cassette(pytester) == recorded  # nothing written


def test_recorded_exchanges_the_agent_left_unplayed_fail_the_case(
        pytester: pytest.Pytester, support_bot: None) -> None:
    with start_chat_server() as server:
        play(server, *REFUND_SCRIPT)
        write_case(pytester, server.base_url)
        run(pytester, "--toolbench-record").assert_outcomes(passed=1)
    one_stage = REFUND_CASE[:REFUND_CASE.index("  - name: when")]
    write_case(pytester, "http://127.0.0.1:9/v1", one_stage)
    replayed = run(pytester)
    replayed.assert_outcomes(failed=1)
    replayed.stdout.fnmatch_lines([
        ("*refund_order: the agent sent 3 requests, but __cassettes__/refund/refund_order.yaml"
        " holds 4: the agent changed since it was recorded; re-record it with: pytest"
        " 'refund.case.yaml::refund_order' --toolbench-record")])


GIVEN_URLS = '''
import httpx2


def make(toolbench, model="claude-test"):
    base = toolbench.base_url("messages")

    def agent(user):
        with httpx2.Client(base_url=base, timeout=30) as client:
            reply = client.post("/v1/messages", headers={"x-api-key": "sk-ant-the-teams-own-key"},
                                json={"model": model, "max_tokens": 64,
                                      "messages": [{"role": "user", "content": user}]})
        if reply.status_code != 200:
            with open("refused.json", "w") as seen:
                seen.write(reply.text)
            return "refused"
        blocks = reply.json()["content"]
        return " ".join(block["text"] for block in blocks if block["type"] == "text")
    return agent
'''


def test_a_factory_given_the_proxys_url_records_and_replays_another_api(
        pytester: pytest.Pytester) -> None:
    pytester.makepyfile(given=GIVEN_URLS)
    pytester.syspathinsert()
    message = {"id": "msg_1", "type": "message", "role": "assistant", "model": "claude-test",
               "content": [{"type": "text", "text": "Looking it up."},
                           {"type": "tool_use", "id": "toolu_1", "name": "lookup_order",
                            "input": {"order_id": "913"}}],
               "stop_reason": "tool_use", "stop_sequence": None,
               "usage": {"input_tokens": 20, "output_tokens": 7}}
    text = ("name: given\nagent: {python: 'given:make'}\n"
            "endpoint: {base_url: 'BASE_URL'}\n"
            "stages:\n  - name: ask\n    user: Refund order 913\n    expect:\n"
            "      text: Looking it up.\n      api_finish_reason: tool_use\n"
            "      tool_calls: [{name: lookup_order, arguments: {order_id: '913'}}]\n")
    with start_chat_server() as server:
        server.set_handler(lambda request: json_reply(message))
        pytester.makefile(".case.yaml", given=text.replace("BASE_URL", server.base_url))
        run(pytester, "--toolbench-record").assert_outcomes(passed=1)
        assert [request.path for request in server.requests] == ["/v1/messages"]
        assert server.requests[0].headers["x-api-key"] == "sk-ant-the-teams-own-key"
    path = pytester.path / "__cassettes__" / "given" / "given[claude-test].yaml"
    assert not path.exists()  # the model is the factory's default, not the case's
    kept = yaml.safe_load((pytester.path / "__cassettes__" / "given" / "given.yaml").read_text())
    assert [(item["api"], item["request"]["path"]) for item in kept["interactions"]] == [
        ("messages", "/anthropic/v1/messages")]
    assert "sk-ant-the-teams-own-key" not in json.dumps(kept)
    run(pytester).assert_outcomes(passed=1)
    # A changed request is refused with a 400 in the Messages API's own error shape.
    pytester.makepyfile(given=GIVEN_URLS.replace('"max_tokens": 64', '"max_tokens": 65'))
    changed = run(pytester)
    changed.assert_outcomes(failed=1)
    changed.stdout.fnmatch_lines([
        ("given.case.yaml:5: given: stages[[]0]: the agent's request POST"
        " /anthropic/v1/messages differs from the one recorded in"
        " __cassettes__/given/given.yaml, first at max_tokens: recorded 64, sent 65;"
        " re-record it with: *"),
        '-  "max_tokens": 64,', '+  "max_tokens": 65,'])
    refused = json.loads((pytester.path / "refused.json").read_text())
    assert refused["type"] == "error"
    assert refused["error"]["type"] == "invalid_request_error"
    assert "differs from the one recorded" in refused["error"]["message"]


def test_the_placeholder_key_is_replaced_by_the_endpoints_own_upstream(
        pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.setenv("LOCAL_SERVER_KEY", "sk-local-server-key-4242")
    pytester.makepyfile(sdk_bot=OPENAI_AGENT)
    pytester.syspathinsert()
    case = (REFUND_CASE.replace("support_bot:make_agent", "sdk_bot:make_agent")
            .replace("init: {tone: terse}", "init: {}")
            .replace("      state: {refunds: 1}\n", ""))
    with start_chat_server() as server:
        play(server, *REFUND_SCRIPT)
        write_case(pytester, server.base_url, case)
        run(pytester, "--toolbench-record", "--toolbench-api-key-env",
            "LOCAL_SERVER_KEY").assert_outcomes(passed=1)
        keys = {request.headers["authorization"] for request in server.requests}
    assert keys == {"Bearer sk-local-server-key-4242"}
    assert "sk-local-server-key-4242" not in (
        pytester.path / "__cassettes__" / "refund" / "refund_order.yaml").read_text()


def test_capture_reads_the_agents_answer_and_calls_for_later_stages(
        pytester: pytest.Pytester, support_bot: None) -> None:
    case = REFUND_CASE.replace(
        "      state: {refunds: 1}\n",
        "      state: {refunds: 1}\n    capture: {said: text, order: tool_calls.0.arguments.order_id}\n"
    ).replace("user: When will the money arrive?", "user: 'You said: ${said} (order ${order})'")
    pytester.makepyfile(support_bot=HTTP_AGENT.replace(
        'return message["content"]', 'return "Bot: " + message["content"]'))
    with start_chat_server() as server:
        play(server, *REFUND_SCRIPT)
        write_case(pytester, server.base_url, case)
        run(pytester, "--toolbench-live").assert_outcomes(passed=1)
        last_user = [m["content"] for m in server.requests[-1].json()["messages"]
                     if m["role"] == "user"][-1]
    assert last_user == "You said: Bot: Your refund is on its way. (order 913)"


def test_stream_checks_fail_when_the_agent_streamed_nothing(
        pytester: pytest.Pytester, support_bot: None) -> None:
    case = REFUND_CASE.replace("      requests: 3\n", "      requests: 3\n      stream: {done: true}\n")
    with start_chat_server() as server:
        play(server, *REFUND_SCRIPT)
        write_case(pytester, server.base_url, case)
        result = run(pytester, "--toolbench-live")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines([("*refund.case.yaml:13: refund_order: stages[[]0].expect.stream:"
                                 " no reply of the stage was streamed: the agent asked for none")])


def test_the_fixture_without_a_cassette_fails_with_the_command_that_records_it(
        pytester: pytest.Pytester) -> None:
    pytester.makepyfile(sdk_bot=OPENAI_AGENT, test_refund=FIXTURE_TEST)
    pytester.syspathinsert()
    result = run(pytester)
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines([
        ("*no cassette at __cassettes__/test_refund/test_refund.yaml; record it with:"
        " pytest 'test_refund.py::test_refund' --toolbench-record*")])


IMPORT_TIME_CLIENT = '''
import openai

CLIENT = openai.OpenAI(max_retries=0)  # built when the module is imported, at collection


def make():
    def agent(user):
        reply = CLIENT.chat.completions.create(
            model="test-model", messages=[{"role": "user", "content": user}])
        return reply.choices[0].message.content
    return agent
'''


def test_a_client_built_when_the_module_is_imported_goes_through_the_proxy(
        pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_BASE_URL", "http://127.0.0.1:9/v1")  # nothing listens there
    pytester.makepyfile(import_time=IMPORT_TIME_CLIENT)
    pytester.syspathinsert()
    cases = "---\n".join(
        f"name: c{n}\nagent: {{python: 'import_time:make'}}\n"
        "endpoint: {base_url: 'BASE_URL'}\n"
        f"stages:\n  - name: ask\n    user: q{n}\n    expect: {{text: fine, requests: 1}}\n"
        for n in range(2))
    # In processes of their own: the module's client, never closed, keeps the connection
    # the proxy left open for it (a sync client's is kept alive) until it is collected.
    with start_chat_server() as server:
        server.set_handler(lambda request: json_reply(completion("fine")))
        pytester.makefile(".case.yaml", imported=cases.replace("BASE_URL", server.base_url))
        pytester.runpytest_subprocess("-p", "no:cacheprovider", "--toolbench-record"
                                      ).assert_outcomes(passed=2)
        assert len(server.requests) == 2
    pytester.runpytest_subprocess("-p", "no:cacheprovider").assert_outcomes(passed=2)
