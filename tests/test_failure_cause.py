"""A failure leads with its cause: the first expectation that failed, not the recorded
exchanges its early end left unplayed ("the case sent 1 request, but ... holds 3: the case
changed since it was recorded; re-record it"), which would invite re-recording over a
regression. That is said only when nothing failed before it: in the terminal, the JSON
report's ``error``, junit's ``message`` and the short summary; for plain model cases,
agent cases and ``toolbench_agent`` tests. An agent that could not connect, having sent
nothing, is told it never reached the proxy.

Each test records against the loopback chat server, changes what the case expects (or
the agent), and replays with the server stopped.
"""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET

import pytest
from support.chat_server import ChatServer, RecordedRequest, Reply, completion, json_reply

UNPLAYED = "changed since it was recorded"


def echo(request: RecordedRequest) -> Reply:
    return json_reply(completion(text=f"echo: {request.json()['messages'][-1]['content']}"))


def replay(pytester: pytest.Pytester, *args: str) -> pytest.RunResult:
    return pytester.runpytest("-rf", "--toolbench-report=r.json", "--junitxml=j.xml", *args)


def reported(pytester: pytest.Pytester) -> tuple[str | None, str]:
    """The JSON report's ``error`` of the one case, and junit's ``message``."""
    (record,) = json.loads((pytester.path / "r.json").read_text())["cases"]
    (failure,) = ET.parse(pytester.path / "j.xml").getroot().iter("failure")
    return record["error"], failure.get("message", "")


def assert_led_by(result: pytest.RunResult, pytester: pytest.Pytester, headline: str) -> None:
    """``headline`` (an fnmatch pattern) opens the failure and the short summary, the
    JSON error is not the unplayed exchanges, and nothing says them."""
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["_*_", headline])
    summary = [line for line in result.outlines if line.startswith("FAILED ")]
    assert len(summary) == 1
    assert UNPLAYED not in result.stdout.str()
    error, message = reported(pytester)
    assert error is None or UNPLAYED not in error
    assert UNPLAYED not in message


# -- a plain model case ---------------------------------------------------------------------

THREE_STAGES = """name: chat
endpoint: {{base_url: "{url}", retries: 0}}
stages:
  - name: first
    user: one
    expect: {{text: {{$contains: "{said}"}}}}
  - name: second
    user: two
  - name: third
    user: three
"""


def test_a_case_failing_in_its_first_stage_leads_with_that_failure(
        pytester: pytest.Pytester, chat_server: ChatServer) -> None:
    chat_server.set_handler(echo)
    pytester.makefile(".case.yaml", s=THREE_STAGES.format(url=chat_server.base_url, said="one"))
    pytester.runpytest("--toolbench-record").assert_outcomes(passed=1)
    chat_server.close()
    pytester.makefile(".case.yaml", s=THREE_STAGES.format(url=chat_server.base_url,
                                                          said="ONE"))

    result = replay(pytester)

    headline = "s.case.yaml:6: chat: stages[[]0[]].expect.text: 'echo: one' does not contain 'ONE'"
    assert_led_by(result, pytester, headline)
    result.stdout.fnmatch_lines(["FAILED s.case.yaml::chat - s.case.yaml:6: chat: stages*"])
    assert reported(pytester)[1].startswith("s.case.yaml:6: chat: stages[0].expect.text")


def test_a_case_that_passes_with_exchanges_left_over_still_says_so(
        pytester: pytest.Pytester, chat_server: ChatServer) -> None:
    chat_server.set_handler(echo)
    pytester.makefile(".case.yaml", s=THREE_STAGES.format(url=chat_server.base_url, said="one"))
    pytester.runpytest("--toolbench-record").assert_outcomes(passed=1)
    chat_server.close()
    shorter = THREE_STAGES.format(url=chat_server.base_url, said="one")
    pytester.makefile(".case.yaml", s=shorter[:shorter.index("  - name: second")])

    result = replay(pytester)

    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines([
        ("s.case.yaml:1: chat: the case sent 1 request, but __cassettes__/s/chat.yaml holds 3:"
         f" the case {UNPLAYED}; re-record it with: *")])


# -- an agent case and a toolbench_agent test -----------------------------------------------

BOT = """
import os

import httpx2

BASE_URL = None  # None: the proxy's, from OPENAI_BASE_URL


def make_agent():
    def ask(user):
        base = BASE_URL or os.environ["OPENAI_BASE_URL"]
        with httpx2.Client(timeout=30) as client:
            reply = client.post(base + "/chat/completions", json={
                "model": "test-model", "messages": [{"role": "user", "content": user}]})
        reply.raise_for_status()
        return reply.json()["choices"][0]["message"]["content"]
    return ask
"""

AGENT_CASE = """name: bot
agent: {{python: bot:make_agent}}
endpoint: {{base_url: "{url}"}}
stages:
  - name: first
    user: one
    expect: {{text: {{$contains: "{said}"}}}}
  - name: second
    user: two
"""


def record_agent_case(pytester: pytest.Pytester, chat_server: ChatServer) -> None:
    chat_server.set_handler(echo)
    pytester.makepyfile(bot=BOT)
    pytester.syspathinsert()
    pytester.makefile(".case.yaml", a=AGENT_CASE.format(url=chat_server.base_url, said="one"))
    pytester.runpytest_subprocess("--toolbench-record").assert_outcomes(passed=1)
    chat_server.close()


def test_an_agent_case_failing_in_its_first_stage_leads_with_that_failure(
        pytester: pytest.Pytester, chat_server: ChatServer) -> None:
    record_agent_case(pytester, chat_server)
    pytester.makefile(".case.yaml", a=AGENT_CASE.format(url=chat_server.base_url, said="ONE"))

    result = replay(pytester)

    assert_led_by(result, pytester,
                  "a.case.yaml:7: bot: stages[[]0[]].expect.text: 'echo: one' does not contain"
                  " 'ONE'")


def test_an_agent_that_cannot_connect_is_told_it_never_reached_the_proxy(
        pytester: pytest.Pytester, chat_server: ChatServer) -> None:
    record_agent_case(pytester, chat_server)
    # The agent changed: its client now goes to a fixed URL, where nothing listens.
    pytester.makepyfile(bot=BOT.replace('BASE_URL = None', 'BASE_URL = "http://127.0.0.1:9/v1"'))

    guarded = replay(pytester)
    allowed = replay(pytester, "--toolbench-allow-connect", "127.0.0.1:9")

    # The socket guard refuses the connection and says where it went: that leads, once.
    assert_led_by(guarded, pytester, "a.case.yaml:*: bot: stages[[]0[]]: the agent connected"
                  " to 127.0.0.1:9, not to the plugin's proxy: refused*")
    assert "never reached it" not in guarded.stdout.str()
    # Allowed there, it finds nothing listening: it never reached the proxy, and is told.
    assert_led_by(allowed, pytester, "a.case.yaml:*: bot: stages[[]0[]].user: the agent raised"
                  " ConnectError: *; it sent no request to the plugin's proxy, so it never"
                  " reached it: check that its client takes its base URL from OPENAI_BASE_URL*")


FIXTURE_TEST = """
from bot import make_agent


def test_bot(toolbench_agent):
    agent = make_agent()
    first = agent("one")
    assert "{said}" in first
    agent("two")
"""


def test_a_fixture_test_failing_its_own_assertion_is_one_failure_not_an_error(
        pytester: pytest.Pytester, chat_server: ChatServer) -> None:
    chat_server.set_handler(echo)
    pytester.makepyfile(bot=BOT, test_bot=FIXTURE_TEST.format(said="one"))
    pytester.runpytest_subprocess("--toolbench-record", "--toolbench-base-url",
                                  chat_server.base_url).assert_outcomes(passed=1)
    chat_server.close()
    pytester.makepyfile(test_bot=FIXTURE_TEST.format(said="ONE"))

    result = replay(pytester)

    result.assert_outcomes(failed=1)  # no teardown error beside it
    result.stdout.fnmatch_lines(["*assert 'ONE' in 'echo: one'*"])
    assert UNPLAYED not in result.stdout.str()
    error, message = reported(pytester)
    assert error is not None and "assert 'ONE' in 'echo: one'" in error
    assert UNPLAYED not in message
