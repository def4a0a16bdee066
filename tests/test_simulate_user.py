"""The simulated user: a second model talks with the agent turn by turn until it writes
###STOP### or runs out of turns; recorded in the case's cassette and replayed offline.
Pytester runs against the loopback servers (chat for the agent, each API for the user)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from support.chat_server import ChatServer, completion, json_reply, start_chat_server
from support.gemini_server import GeminiServer
from support.second_models import Script, text, verdict

pytest_plugins = ["pytester"]


def conversation_case(user_url: str, api: str = "chat", max_turns: int = 4,
                      opening: bool = True, expect: str = "      ended: stop\n") -> str:
    opening_line = "      opening: Hi, I need help with an order\n" if opening else ""
    return f"""
name: refund_conversation
model: agent-model
endpoint: {{retries: 0}}
judge:
  model: judge-model
  endpoint: {{api: {api}, base_url: "{user_url}", retries: 0}}
tools:
  - name: lookup_order
    parameters: {{type: object, properties: {{order: {{type: string}}}}}}
    result: {{order: "913", amount: 40}}
  - name: issue_refund
    parameters: {{type: object, properties: {{order: {{type: string}}}}}}
    result: {{refunded: true}}
stages:
  - name: talk
    simulate_user:
      instructions: You are Ana. You want a refund for order 913. You do not know the amount.
{opening_line}      max_turns: {max_turns}
    run_tools: true
    expect:
{expect}"""


def agent_replies() -> list[Any]:
    """The agent: asks, looks the order up, refunds it, says so."""
    return [json_reply(completion("Which order is it?")),
            json_reply(completion(tool_calls=[("lookup_order", {"order": "913"})])),
            json_reply(completion("Order 913 is 40 euros. Shall I refund it?")),
            json_reply(completion(tool_calls=[("issue_refund", {"order": "913"})])),
            json_reply(completion("Done: 40 euros are refunded."))]


def user_replies(api: str) -> list[Any]:
    return [text(api, "Order 913."), text(api, "Yes please."), text(api, "Thanks! ###STOP###")]


@pytest.fixture
def gemini() -> Iterator[GeminiServer]:
    with GeminiServer().start() as server:
        yield server


def run(pytester: pytest.Pytester, server: ChatServer, *args: str) -> pytest.RunResult:
    return pytester.runpytest("-p", "no:cacheprovider", "--toolbench-base-url",
                              server.base_url, *args)


def attempt_of(report: Path) -> dict[str, Any]:
    case = json.loads(report.read_text())["cases"][0]
    attempt: dict[str, Any] = case["runs"][0]["stages"][0]["attempts"][0]
    return attempt


STOPS = """      ended: stop
      trajectory: {$contains: [{name: lookup_order}, {name: issue_refund}]}
      text: {$contains: refunded}
"""


@pytest.mark.parametrize("api", ["chat", "responses", "messages", "gemini"])
def test_a_conversation_that_stops(pytester: pytest.Pytester, chat_server: ChatServer,
                                   gemini: GeminiServer, api: str) -> None:
    script = Script(simulator=user_replies(api), model=agent_replies())
    chat_server.set_handler(script)
    gemini.set_handler(script)
    url = gemini.base_url if api == "gemini" else chat_server.base_url
    pytester.makefile(".case.yaml", talk=conversation_case(url, api, expect=STOPS))
    report = pytester.path / "report.json"
    result = run(pytester, chat_server, "--toolbench-live", "--toolbench-report", str(report))
    result.assert_outcomes(passed=1)
    attempt = attempt_of(report)
    assert attempt["ended"] == "stop"
    assert [(m["role"], m["text"]) for m in attempt["conversation"]] == [
        ("user", "Hi, I need help with an order"), ("agent", "Which order is it?"),
        ("user", "Order 913."), ("agent", "Order 913 is 40 euros. Shall I refund it?"),
        ("user", "Yes please."), ("agent", "Done: 40 euros are refunded."),
        ("user", "Thanks! ###STOP###")]
    assert [turn["role"] for turn in attempt["side_turns"]] == ["simulator"] * 3
    # The simulator sees the agent's words as the user's, its own as the assistant's, and
    # no tool call; the agent sees the simulated user's messages as the user's.
    last = json.dumps(script.requests["simulator"][-1])
    assert "Order 913 is 40 euros. Shall I refund it?" in last and "lookup_order" not in last
    assert "reveal what you know only when the agent asks" in last.lower()
    agent = script.requests["model"][-1]["messages"]
    assert [m["content"] for m in agent if m["role"] == "user"] == [
        "Hi, I need help with an order", "Order 913.", "Yes please."]


def test_a_conversation_that_runs_out_of_turns(pytester: pytest.Pytester,
                                              chat_server: ChatServer) -> None:
    chat_server.set_handler(Script(
        simulator=[text("chat", "What is the amount?")],
        model=[json_reply(completion("Which order?")), json_reply(completion("Hm?"))]))
    pytester.makefile(".case.yaml", talk=conversation_case(chat_server.base_url, max_turns=2))
    result = run(pytester, chat_server, "--toolbench-live")
    result.assert_outcomes(failed=1)
    assert ("talk.case.yaml:22: refund_conversation[agent-model]: stages[0].expect.ended: the"
            " simulated conversation ended by max_turns, expected stop") in result.stdout.str()


def test_the_simulator_writes_the_first_message_without_an_opening(
        pytester: pytest.Pytester, chat_server: ChatServer) -> None:
    script = Script(simulator=[text("chat", "Hello, order 913 please."),
                               text("chat", "###STOP###")],
                    model=[json_reply(completion("Refunded."))])
    chat_server.set_handler(script)
    pytester.makefile(".case.yaml", talk=conversation_case(chat_server.base_url,
                                                           opening=False))
    run(pytester, chat_server, "--toolbench-live").assert_outcomes(passed=1)
    first = script.requests["simulator"][0]["messages"]
    assert [m["role"] for m in first] == ["system", "user"]
    assert [body["seed"] for body in script.requests["simulator"]] == [0, 1]


@pytest.mark.parametrize("reply", ["empty", "error"])
def test_a_simulator_that_says_nothing_is_a_simulator_error(
        pytester: pytest.Pytester, chat_server: ChatServer, reply: str) -> None:
    said = (text("chat", "  ") if reply == "empty"
            else json_reply({"error": {"message": "overloaded"}}, status=503))
    chat_server.set_handler(Script(simulator=[said],
                                   model=[json_reply(completion("Which order?"))]))
    pytester.makefile(".case.yaml", talk=conversation_case(chat_server.base_url))
    result = run(pytester, chat_server, "--toolbench-live")
    result.assert_outcomes(failed=1)
    why = ("an empty reply (finish_reason stop)" if reply == "empty"
           else "HTTP 503: overloaded")
    assert (f"stages[0].simulate_user: simulator error: {why} (the simulated user,"
            " judge-model, not the agent)") in result.stdout.str()


def test_a_judged_conversation_recorded_then_replayed_with_the_server_gone(
        pytester: pytest.Pytester) -> None:
    expect = STOPS + "      judge: [The agent confirmed the refund before the user left]\n"
    with start_chat_server() as server:
        server.set_handler(Script(simulator=user_replies("messages"), model=agent_replies(),
                                  judge=[verdict("messages", "pass", "It said refunded.")]))
        pytester.makefile(".case.yaml", talk=conversation_case(server.base_url, "messages",
                                                               expect=expect))
        recorded = pytester.path / "recorded.json"
        run(pytester, server, "--toolbench-record", "--toolbench-report",
            str(recorded)).assert_outcomes(passed=1)
        base_url = server.base_url
    cassette = (pytester.path / "__cassettes__" / "talk" /
                "refund_conversation[agent-model].yaml").read_text()
    assert cassette.count("role: simulator") == 3 and cassette.count("role: judge") == 1
    replayed = pytester.path / "replayed.json"
    result = pytester.runpytest("-p", "no:cacheprovider", "--toolbench-base-url", base_url,
                                "--toolbench-report", str(replayed))
    result.assert_outcomes(passed=1)
    before, after = attempt_of(recorded), attempt_of(replayed)
    for key in ("conversation", "ended", "judgements"):
        assert after[key] == before[key]
    # The judge read the whole conversation, tool calls and results included.
    transcript = json.dumps(before["side_turns"][-1]["request"])
    assert "AGENT CALLS issue_refund" in transcript and "TOOL RESULT" in transcript


def test_simulate_user_beside_user_is_a_collection_error(pytester: pytest.Pytester) -> None:
    case = conversation_case("http://127.0.0.1:9/v1").replace(
        "    simulate_user:", "    user: hello\n    simulate_user:")
    pytester.makefile(".case.yaml", talk=case)
    result = pytester.runpytest("-p", "no:cacheprovider")
    assert ("talk.case.yaml:16: stages[0].user: give simulate_user or user, not both"
            in result.stdout.str())


def test_the_html_report_shows_the_conversation_and_the_verdicts(
        pytester: pytest.Pytester, chat_server: ChatServer) -> None:
    expect = STOPS + "      judge: [The agent confirmed the refund <before> the user left]\n"
    chat_server.set_handler(Script(simulator=user_replies("chat"), model=agent_replies(),
                                   judge=[verdict("chat", "fail", "It never said <done>.")]))
    pytester.makefile(".case.yaml", talk=conversation_case(chat_server.base_url,
                                                           expect=expect))
    page = pytester.path / "report.html"
    run(pytester, chat_server, "--toolbench-live", "--toolbench-html",
        str(page)).assert_outcomes(failed=1)
    html = page.read_text()
    assert "simulated conversation (ended: stop)" in html
    assert "<b>user</b>: Yes please.</div>" in html
    assert "<b>agent</b>: Done: 40 euros are refunded.</div>" in html
    assert ("judge (judge-model, judge-v1): <b>The agent confirmed the refund &lt;before&gt;"
            " the user left</b>: fail<ul><li>fail: It never said &lt;done&gt;.</li></ul>"
            in html)


AGENT = '''
import os

import httpx2


class Bot:
    """A support agent on plain HTTP: one chat request a message, no tools."""

    def __init__(self):
        self.history = [{"role": "system", "content": "Be brief."}]

    def __call__(self, user):
        self.history.append({"role": "user", "content": user})
        with httpx2.Client(timeout=30) as client:
            reply = client.post(os.environ["OPENAI_BASE_URL"] + "/chat/completions",
                                json={"model": "agent-model", "messages": self.history})
        reply.raise_for_status()
        message = reply.json()["choices"][0]["message"]
        self.history.append(message)
        return message["content"]


def make_agent():
    return Bot()
'''


def agent_case(base_url: str) -> str:
    return f"""
name: agent_conversation
agent: {{python: support_bot:make_agent}}
endpoint: {{base_url: "{base_url}", retries: 0}}
judge: {{model: judge-model, endpoint: {{api: messages}}}}
stages:
  - name: talk
    simulate_user:
      instructions: You are Ana. You want a refund for order 913.
      max_turns: 3
    expect:
      ended: stop
      text: {{$contains: refunded}}
      judge: [The agent said the refund is done]
"""


def test_an_agent_case_talks_with_the_simulated_user_and_is_judged(
        pytester: pytest.Pytester) -> None:
    pytester.makepyfile(support_bot=AGENT)
    pytester.makeconftest("")
    with start_chat_server() as server:
        script = Script(simulator=[text("messages", "Refund order 913, please."),
                                   text("messages", "###STOP###")],
                        model=[json_reply(completion("Done: order 913 is refunded."))],
                        judge=[verdict("messages", "pass", "It says refunded.")])
        server.set_handler(script)
        pytester.makefile(".case.yaml", talk=agent_case(server.base_url))
        recorded = pytester.path / "recorded.json"
        result = pytester.runpytest("-p", "no:cacheprovider", "--toolbench-record",
                                    "--toolbench-report", str(recorded))
        result.assert_outcomes(passed=1)
        # Each simulated message is one call of the agent; its text goes back.
        assert [m["content"] for m in script.requests["model"][0]["messages"]] == [
            "Be brief.", "Refund order 913, please."]
        transcript = json.dumps(script.requests["judge"][0])
        assert "USER: Refund order 913, please." in transcript
        assert "AGENT: Done: order 913 is refunded." in transcript
    replayed = pytester.path / "replayed.json"
    result = pytester.runpytest("-p", "no:cacheprovider", "--toolbench-report", str(replayed))
    result.assert_outcomes(passed=1)
    before, after = attempt_of(recorded), attempt_of(replayed)
    assert before["ended"] == "stop"
    for key in ("conversation", "ended", "judgements"):
        assert after[key] == before[key]


def test_max_turns_past_its_bound_is_a_collection_error_at_its_line(
        pytester: pytest.Pytester) -> None:
    case = conversation_case("http://127.0.0.1:9/v1", max_turns=1_000_000)
    line = case.lstrip("\n").splitlines().index("      max_turns: 1000000") + 1
    pytester.makefile(".case.yaml", talk=case)
    result = pytester.runpytest("-p", "no:cacheprovider")
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines([(f"*talk.case.yaml:{line}: stages[[]0].simulate_user.max_turns:"
                                 "*50*")])


@pytest.mark.parametrize("grows", ["one message", "the conversation"])
def test_a_simulated_user_past_the_reply_limit_fails_the_stage_and_records_nothing(
        pytester: pytest.Pytester, chat_server: ChatServer, grows: str) -> None:
    """A message over ``--toolbench-max-reply-bytes`` is refused as it arrives; messages
    under it that pile up fail the stage once the conversation the simulated user must be
    sent has outgrown the limit, not after the 50 turns."""
    size = 300_000 if grows == "one message" else 40_000
    script = Script(simulator=[text("chat", "x" * size)] * 50,
                    model=[json_reply(completion("Which order?"))] * 50)
    chat_server.set_handler(script)
    pytester.makefile(".case.yaml", talk=conversation_case(chat_server.base_url,
                                                           max_turns=50))
    result = run(pytester, chat_server, "--toolbench-record",
                 "--toolbench-max-reply-bytes", "100000")
    result.assert_outcomes(failed=1)
    why = ("reply too large: body larger than 100000 bytes (--toolbench-max-reply-bytes)"
           if grows == "one message" else
           "its request, the conversation so far, is *, past the reply limit of 100,000"
           " bytes (--toolbench-max-reply-bytes): not sent")
    result.stdout.fnmatch_lines([(f"*stages[[]0].simulate_user: simulator error: no reply:"
                                 f" {why}*")])
    assert len(script.requests["simulator"]) <= 3
    assert not (pytester.path / "__cassettes__").exists()  # a recording that broke off


BIG_ANSWER = '''
def make_agent():
    return lambda user: "y" * 150_000
'''


@pytest.mark.parametrize("second", ["simulator", "judge"])
def test_an_agents_answer_past_the_reply_limit_is_not_sent_to_the_second_model(
        pytester: pytest.Pytester, chat_server: ChatServer, second: str) -> None:
    pytester.makepyfile(big_bot=BIG_ANSWER)
    pytester.syspathinsert()
    stage = ("    simulate_user: {instructions: You are Ana., max_turns: 5}\n"
             if second == "simulator" else
             "    user: Refund order 913\n    expect: {judge: [Says refunded]}\n")
    pytester.makefile(".case.yaml", big=(
        "name: big\nagent: {python: big_bot:make_agent}\n"
        "judge: {model: judge-model, endpoint: {api: chat, retries: 0}}\n"
        f"stages:\n  - name: talk\n{stage}"))
    script = Script(simulator=[text("chat", "Hello.")] * 5,
                    judge=[verdict("chat", "pass")])
    chat_server.set_handler(script)
    result = run(pytester, chat_server, "--toolbench-record",
                 "--toolbench-max-reply-bytes", "100000")
    result.assert_outcomes(failed=1)
    why = ("no reply: its request, the conversation so far, is *, past the reply limit of"
           " 100,000 bytes (--toolbench-max-reply-bytes): not sent*")
    result.stdout.fnmatch_lines(
        [f"*big.case.yaml:*: big: stages[[]0].simulate_user: simulator error: {why}"]
        if second == "simulator" else
        ["*big.case.yaml:*: big: stages[[]0].expect.judge[[]0]: judge error*",
         f"*judge error: {why}"])
    assert len(script.requests[second]) == (1 if second == "simulator" else 0)
    assert not (pytester.path / "__cassettes__").exists()
