"""Credentials never leak: not to the terminal, the failure text, the JSON report, junitxml,
the session header, the logs or the cassettes, even when the server echoes them back in an
error body, a streamed text or tool-call arguments; and a dummy key changes nothing."""

from __future__ import annotations

import itertools
import json
import re
import textwrap
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml
from support.chat_server import (
    ChatServer,
    RecordedRequest,
    Reply,
    chunks_for,
    completion,
    json_reply,
    sse_reply,
)

from pytest_toolbench.records import Interaction, StreamEvent
from pytest_toolbench.scrubbing import SCRUBBED, Scrubber

KEY = "sk-test-4f9a2c7e1b8d"
HEADER_SECRET = "hdr-secret-98765"
EVERY_OUTPUT = ("-v", "-rA", "--tb=long", "--junitxml=junit.xml", "--toolbench-report=report.json",
                "-o", "log_cli=true", "--log-level=DEBUG")


def telling_secrets() -> Callable[[RecordedRequest], Reply]:
    """A server that answers with the credentials it got, in the way the user message asks."""
    flaky_calls = itertools.count()

    def handle(request: RecordedRequest) -> Reply:
        body = request.json()
        leak = f"{request.headers.get('authorization')} {request.headers.get('x-api-key')}"
        ask = body["messages"][-1]["content"]
        if ask == "error":
            return json_reply({"error": {"message": f"invalid key: {leak}", "type": "auth"}}, 401)
        if ask == "flaky" and next(flaky_calls) % 2 == 0:
            # Retried: the retry line, and the failed exchange the cassette keeps, carry it.
            down = {"error": {"message": f"down for {leak}"}}
            return json_reply(down, 500, {"retry-after": "0"})
        return echo(leak, ask, bool(body.get("stream")))

    return handle


def echo(leak: str, ask: str, streamed: bool) -> Reply:
    """``leak`` as the reply's text, or as a tool call's arguments when asked for a tool."""
    if ask == "tool":
        calls = [("lookup", {"token": leak})]
        return (sse_reply(chunks_for(tool_calls=calls, split=3)) if streamed
                else json_reply(completion(tool_calls=calls)))
    text = f"you sent {leak}"
    return sse_reply(chunks_for(text, split=3)) if streamed else json_reply(completion(text))


CASSETTES = {"error_body", "retried", "streamed_text", "plain_text", "tool_arguments",
             "conversation"}


def leaky_suite(base_url: str) -> str:
    head = textwrap.dedent(f"""\
        endpoint:
          base_url: "{base_url}"
          retries: 1
          timeout_s: 5
          headers: {{X-Api-Key: {HEADER_SECRET}, X-Team: search}}
        """)
    bodies = [
        "name: error_body\nstages: [{name: ask, user: error}]\n",
        "name: retried\nstages: [{name: ask, user: flaky, expect: {text: nothing}}]\n",
        "name: streamed_text\nstages: [{name: ask, user: hi, stream: true, expect: {text: nothing}}]\n",
        "name: plain_text\nstages: [{name: ask, user: hi, expect: {text: nothing}}]\n",
        textwrap.dedent("""\
            name: tool_arguments
            tools: [{name: lookup}]
            stages:
              - {name: ask, user: tool, stream: both, tool_choice: required,
                 expect: {tool_calls: [{name: lookup, arguments: {token: nothing}}]}}
            """),
        textwrap.dedent("""\
            name: conversation
            stages:
              - {name: first, user: hi, expect: {text: {$contains: you sent}}}
              - {name: second, user: hi, stream: true, expect: {text: {$contains: you sent}}}
            """),
    ]
    return "---\n".join(head + body for body in bodies)


def written_files(root: Path) -> dict[str, str]:
    """Every file the run wrote: the reports and the cassettes."""
    return {str(path.relative_to(root)): path.read_text(encoding="utf-8")
            for path in sorted(root.rglob("*"))
            if path.is_file() and (path.suffix in (".xml", ".json") or "__cassettes__" in path.parts)}


def streamed_text(cassette: Path) -> str:
    """The text a cassette's streamed reply reassembles to, from its content deltas."""
    (interaction,) = yaml.safe_load(cassette.read_text(encoding="utf-8"))["interactions"]
    chunks = [json.loads(event["data"]) for event in interaction["response"]["events"]
              if event["data"] != "[DONE]"]
    return "".join(choice["delta"].get("content") or ""
                   for chunk in chunks for choice in chunk["choices"])


def test_echoed_credentials_reach_no_output_and_no_file(
        pytester: pytest.Pytester, chat_server: ChatServer,
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    chat_server.set_handler(telling_secrets())
    pytester.makefile(".case.yaml", leaky=leaky_suite(chat_server.base_url))

    result = pytester.runpytest("--toolbench-record", *EVERY_OUTPUT)

    result.assert_outcomes(passed=1, failed=5)
    files = written_files(pytester.path)
    assert set(files) == {"junit.xml", "report.json",
                          *(f"__cassettes__/leaky/{name}.yaml" for name in CASSETTES)}
    for where, text in {"stdout": result.stdout.str(), "stderr": result.stderr.str(),
                        **files}.items():
        assert KEY not in text, where
        assert HEADER_SECRET not in text, where
    # The server did echo them: the output shows where, masked.
    result.stdout.fnmatch_lines([
        f"*error: invalid key: Bearer {SCRUBBED} {SCRUBBED}*",
        f"*retry: attempt 1 failed (HTTP 500: down for Bearer {SCRUBBED} {SCRUBBED})*",
        f'*"token": "Bearer {SCRUBBED} {SCRUBBED}"*',
    ])
    assert f"down for Bearer {SCRUBBED} {SCRUBBED}" in files["__cassettes__/leaky/retried.yaml"]
    cassettes = pytester.path / "__cassettes__/leaky"
    assert streamed_text(cassettes / "streamed_text.yaml") == \
        f"you sent Bearer {SCRUBBED} {SCRUBBED}"


def test_the_key_is_sent_in_the_authorization_header_only(
        pytester: pytest.Pytester, chat_server: ChatServer,
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    chat_server.set_handler(telling_secrets())
    pytester.makefile(".case.yaml", leaky=leaky_suite(chat_server.base_url))

    pytester.runpytest("--toolbench-record", "-k", "conversation").assert_outcomes(passed=1)

    first, second = chat_server.requests
    assert first.headers["authorization"] == second.headers["authorization"] == f"Bearer {KEY}"
    # The second request carries the first reply, which echoed the key: masked.
    assert KEY not in second.body.decode()
    assert second.json()["messages"][1]["content"] == f"you sent Bearer {SCRUBBED} {SCRUBBED}"


@pytest.mark.parametrize("replay_key", [KEY, None], ids=["key_set", "no_key"])
def test_a_recording_with_echoed_credentials_replays_the_same(
        pytester: pytest.Pytester, chat_server: ChatServer, monkeypatch: pytest.MonkeyPatch,
        replay_key: str | None) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    chat_server.set_handler(telling_secrets())
    pytester.makefile(".case.yaml", leaky=leaky_suite(chat_server.base_url))
    pytester.runpytest("--toolbench-record").assert_outcomes(passed=1, failed=5)
    sent = len(chat_server.requests)
    if replay_key is None:
        monkeypatch.delenv("OPENAI_API_KEY")

    result = pytester.runpytest("-v", "--tb=long")

    result.assert_outcomes(passed=1, failed=5)
    assert "differs from the one recorded" not in result.stdout.str()
    assert KEY not in result.stdout.str()
    assert len(chat_server.requests) == sent


@pytest.mark.parametrize("secret_url", [
    "http://tb-user:{password}@{host}/v1",
    "http://{host}/v1?api-key={password}",
], ids=["userinfo", "query"])
def test_base_url_credentials_are_masked_in_the_header_failure_text_and_logs(
        pytester: pytest.Pytester, chat_server: ChatServer, monkeypatch: pytest.MonkeyPatch,
        secret_url: str) -> None:
    password = "pw-0123456789"
    host = chat_server.base_url.split("//")[1].split("/")[0]
    monkeypatch.setenv("TOOLBENCH_BASE_URL", secret_url.format(password=password, host=host))
    chat_server.set_handler(lambda request: json_reply(completion(
        f"{request.path} {request.headers.get('authorization')}")))
    pytester.makefile(".case.yaml", c="name: c\nendpoint: {retries: 0}\n"
                                      "stages: [{name: ask, user: hi, expect: {text: nothing}}]\n")

    result = pytester.runpytest("--toolbench-live", *EVERY_OUTPUT)

    result.assert_outcomes(failed=1)
    masked = secret_url.format(password=SCRUBBED, host=host).replace("tb-user:", "")
    result.stdout.fnmatch_lines([f"toolbench: mode=live, answers from {masked} *",
                                 "*HTTP Request: POST http://*"])
    output = result.stdout.str() + result.stderr.str() + "".join(written_files(pytester.path)
                                                                 .values())
    assert password not in output
    assert "tb-user:pw" not in output
    assert "dGItdXNlcjpwdy0wMTIzNDU2Nzg5" not in output  # tb-user:pw-0123456789 as Basic auth


def recording(pytester: pytest.Pytester, chat_server: ChatServer) -> dict[str, bytes]:
    """Record the suite and return its cassettes, their timings blanked (they vary)."""
    pytester.runpytest("--toolbench-record").assert_outcomes(passed=2)
    cassettes = sorted((pytester.path / "__cassettes__").rglob("*.yaml"))
    return {path.name: re.sub(rb"(elapsed_ms|at_ms): [0-9.e+-]+", rb"\1: T", path.read_bytes())
            for path in cassettes}


@pytest.mark.parametrize("key", ["1", "sk-never-echoed-0123"], ids=["dummy", "not_echoed"])
def test_a_key_changes_nothing_in_a_cassette_it_does_not_appear_in(
        pytester: pytest.Pytester, chat_server: ChatServer, monkeypatch: pytest.MonkeyPatch,
        key: str) -> None:
    reply = "1 + 1 = 2, and 11 is prime"
    chat_server.set_handler(lambda request: sse_reply(chunks_for(reply, split=1))
                            if request.json().get("stream") else json_reply(completion(reply)))
    pytester.makefile(".case.yaml", c=textwrap.dedent(f"""\
        endpoint: {{base_url: "{chat_server.base_url}", retries: 1}}
        params: {{temperature: 1, max_tokens: 100}}
        name: plain
        stages: [{{name: ask, user: "1 + 1?", expect: {{text: "{reply}"}}}}]
        ---
        endpoint: {{base_url: "{chat_server.base_url}", retries: 1}}
        name: streamed
        stages: [{{name: ask, user: "11?", stream: true, expect: {{text: "{reply}"}}}}]
        """))
    without_key = recording(pytester, chat_server)
    monkeypatch.setenv("OPENAI_API_KEY", key)

    with_key = recording(pytester, chat_server)

    assert with_key == without_key
    assert b"json: |" in with_key["plain.yaml"]
    assert chat_server.requests[-1].headers["authorization"] == f"Bearer {key}"


@pytest.mark.parametrize("split", [1, 2, 3, 5, 8])
def test_a_key_split_across_stream_deltas_is_masked_in_the_events(split: int) -> None:
    text = f"{KEY}: yours, and {KEY} again"
    calls = [("lookup", {"token": KEY})]
    events = [StreamEvent(json.dumps(chunk), 1.0)
              for chunk in chunks_for(text, tool_calls=calls, split=split)]
    interaction = Interaction({"messages": []}, 200, "text/event-stream", events=events)

    scrubbed = Scrubber((KEY,)).interaction(interaction)

    assert scrubbed.events is not None and len(scrubbed.events) == len(events)
    assert all(KEY not in event.data for event in scrubbed.events)
    deltas = [json.loads(event.data)["choices"] for event in scrubbed.events]
    content = "".join(c[0]["delta"].get("content") or "" for c in deltas if c)
    arguments = "".join(call["function"]["arguments"] for c in deltas if c
                        for call in c[0]["delta"].get("tool_calls", []))
    assert content == f"{SCRUBBED}: yours, and {SCRUBBED} again"
    assert json.loads(arguments) == {"token": SCRUBBED}
    assert interaction.events == events  # the original is left as it was
