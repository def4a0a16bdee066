"""Cassettes through pytester: record, replay offline, mismatches, ``missing`` mode,
scrubbing, the file format, atomic writes, replay timing, and recording under xdist."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from support.chat_server import (
    ChatServer,
    RecordedRequest,
    Reply,
    SSEPause,
    chunks_for,
    completion,
    json_reply,
    sse_reply,
    text_reply,
)
from support.signals import interruptible_pytest

from pytest_toolbench.records import Interaction
from pytest_toolbench.records import Reply as ChatReply
from pytest_toolbench.transport.cassette import Cassette
from pytest_toolbench.transport.client import ApiClient, ClientConfig, InteractionSink
from pytest_toolbench.wire import wire_api


def assistant(request: RecordedRequest) -> Reply:
    """Echo the last user message (streamed if asked); ``use a tool`` asks for get_weather
    and then answers with the tool's result."""
    body = request.json()
    last = body["messages"][-1]
    if last["role"] == "tool":
        return json_reply(completion(f"It is {json.loads(last['content'])['temp_c']} C"))
    if last["content"] == "use a tool":
        return json_reply(completion(tool_calls=[("get_weather", {"city": "Paris"})]))
    if body.get("stream"):
        return sse_reply(chunks_for(last["content"]))
    return json_reply(completion(last["content"]))


def suite(base_url: str, user: str = "hello") -> str:
    head = f'endpoint: {{base_url: "{base_url}", retries: 0, timeout_s: 2}}\n'
    bodies = [f"""\
        name: plain
        params: {{temperature: 0}}
        stages: [{{name: ask, user: {user}, expect: {{text: {user}}}}}]
        """, """\
        name: streamed
        stages:
          - name: ask
            user: stream me
            stream: true
            expect: {text: stream me, stream: {done: true}}
        """, """\
        name: agent
        tools: [{name: get_weather, result: {temp_c: 21}}]
        stages:
          - {name: ask, user: use a tool, run_tools: true, expect: {text: It is 21 C}}
        """, """\
        name: failing
        stages: [{name: ask, user: hello, expect: {text: goodbye}}]
        """]
    return "---\n".join(head + textwrap.dedent(body) for body in bodies)


def cassette_files(root: Path) -> dict[str, bytes]:
    return {str(path.relative_to(root)): path.read_bytes()
            for path in sorted(root.rglob("*")) if path.is_file() and "__cassettes__" in path.parts}


@pytest.fixture
def recorded(pytester: pytest.Pytester, chat_server: ChatServer) -> ChatServer:
    """The suite recorded once against the loopback server."""
    chat_server.set_handler(assistant)
    pytester.makefile(".case.yaml", s=suite(chat_server.base_url))
    result = pytester.runpytest("--toolbench-record")
    result.assert_outcomes(passed=3, failed=1)
    return chat_server


def test_record_then_replay_offline_gives_the_same_outcomes(pytester: pytest.Pytester,
                                                            recorded: ChatServer) -> None:
    assert sorted(cassette_files(pytester.path)) == [
        f"__cassettes__/s/{name}.yaml" for name in ("agent", "failing", "plain", "streamed")]
    sent = len(recorded.requests)
    assert sent == 5  # the agent case sends two requests
    recorded.close()  # replay must not need the server

    result = pytester.runpytest("-v")

    result.assert_outcomes(passed=3, failed=1)
    result.stdout.fnmatch_lines([
        "toolbench: mode=replay*",
        "s.case.yaml::plain PASSED*", "s.case.yaml::streamed PASSED*",
        "s.case.yaml::agent PASSED*", "s.case.yaml::failing FAILED*",
        "*s.case.yaml:*: failing: stages[[]0[]].expect.text: expected 'goodbye', got 'hello'",
    ])
    assert len(recorded.requests) == sent


def test_missing_cassette_names_the_command_that_records_it(pytester: pytest.Pytester) -> None:
    pytester.makefile(".case.yaml", new="name: fresh\nmodel: m1\nstages: [{name: ask, user: hi}]\n")

    result = pytester.runpytest()

    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines([
        ("*new.case.yaml:1: fresh[[]m1[]]: no cassette at __cassettes__/new/fresh[[]m1[]].yaml;"
        " record it with: pytest 'new.case.yaml::fresh[[]m1[]]' --toolbench-record"),
    ])


def test_changed_request_fails_with_a_diff_of_the_bodies(pytester: pytest.Pytester,
                                                         recorded: ChatServer) -> None:
    pytester.makefile(".case.yaml", s=suite(recorded.base_url, user="hello again"))

    result = pytester.runpytest("-k", "plain")

    result.assert_outcomes(failed=1, deselected=3)
    result.stdout.fnmatch_lines([
        ("*s.case.yaml:*: plain: stages[[]0[]]: replay: request 1 differs from the one recorded"
        " in *plain.yaml; re-record with: pytest 's.case.yaml::plain' --toolbench-record"),
        "*--- recorded request",
        "*+++ sent request",
        '*-      "content": "hello",',
        '*+      "content": "hello again",',
    ])
    assert "temperature" not in "".join(
        line for line in result.stdout.lines if line.lstrip().startswith(("-", "+")))


def test_requests_go_out_as_canonical_json(pytester: pytest.Pytester,
                                          chat_server: ChatServer) -> None:
    """Keys sorted, compact: equal bodies are equal bytes, which replay relies on."""
    chat_server.set_handler(assistant)
    pytester.makefile(".case.yaml", c=f"""\
        name: ordered
        model: m1
        endpoint: {{base_url: "{chat_server.base_url}", retries: 0}}
        params: {{top_p: 1, max_tokens: 20}}
        stages: [{{name: ask, user: hello, stream: true}}]
        """)

    pytester.runpytest("--toolbench-record").assert_outcomes(passed=1)

    (request,) = chat_server.requests
    assert list(request.json()) == sorted(request.json())  # not as built (model first)
    assert request.body == json.dumps(request.json(), sort_keys=True).encode()


def _rewrite_plain_request(root: Path, change: Callable[[dict[str, Any]], None]) -> None:
    """The plain case's recorded request, changed and written back in another layout: keys
    unsorted (reversed), indented by four, as a person or another tool might."""
    path = root / "__cassettes__" / "s" / "plain.yaml"
    document = yaml.safe_load(path.read_text())
    request = document["interactions"][0]["request"]
    body = json.loads(request["json"])
    change(body)
    request["json"] = json.dumps(dict(reversed(list(body.items()))), indent=4)
    path.write_text(yaml.safe_dump(document, sort_keys=False))


def test_a_cassette_laid_out_otherwise_replays_the_same_request(pytester: pytest.Pytester,
                                                                recorded: ChatServer) -> None:
    _rewrite_plain_request(pytester.path, lambda body: None)
    recorded.close()

    result = pytester.runpytest("-k", "plain")

    result.assert_outcomes(passed=1, deselected=3)


def test_a_number_recorded_as_another_type_is_another_request(pytester: pytest.Pytester,
                                                              recorded: ChatServer) -> None:
    def temperature_as_float(body: dict[str, Any]) -> None:
        body["temperature"] = 0.0  # the case sends the integer 0

    _rewrite_plain_request(pytester.path, temperature_as_float)
    recorded.close()

    result = pytester.runpytest("-k", "plain")

    result.assert_outcomes(failed=1, deselected=3)
    result.stdout.fnmatch_lines([
        "*plain: stages[[]0[]]: replay: request 1 differs from the one recorded*",
        '*-  "temperature": 0.0',
        '*+  "temperature": 0',
    ])


def test_more_requests_than_recorded_fails_saying_so(pytester: pytest.Pytester,
                                                     recorded: ChatServer) -> None:
    text = suite(recorded.base_url).replace(
        "stages: [{name: ask, user: hello, expect: {text: hello}}]",
        "stages: [{name: ask, user: hello, expect: {text: hello}}, {name: more, user: more}]")
    pytester.makefile(".case.yaml", s=text)

    result = pytester.runpytest("-k", "plain")

    result.assert_outcomes(failed=1, deselected=3)
    result.stdout.fnmatch_lines([
        ("*s.case.yaml:*: plain: stages[[]1[]]: replay: the case sent request 2, but"
        " *plain.yaml holds only 1; re-record with: pytest 's.case.yaml::plain'"
        " --toolbench-record"),
    ])


def test_fewer_requests_than_recorded_fails_saying_so(pytester: pytest.Pytester,
                                                      chat_server: ChatServer) -> None:
    chat_server.set_handler(assistant)
    two_stages = "stages: [{name: ask, user: hello}, {name: more, user: more}]"
    case = f"name: shrinking\nendpoint: {{base_url: '{chat_server.base_url}'}}\n"
    pytester.makefile(".case.yaml", s=case + two_stages)
    pytester.runpytest("--toolbench-record").assert_outcomes(passed=1)
    pytester.makefile(".case.yaml", s=case + "stages: [{name: ask, user: hello}]")

    result = pytester.runpytest()

    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines([
        ("*s.case.yaml:1: shrinking: the case sent 1 request, but"
         " __cassettes__/s/shrinking.yaml holds 2: the case changed since it was recorded;"
         " re-record it with: pytest 's.case.yaml::shrinking' --toolbench-record"),
    ])


def test_fewer_requests_than_recorded_fails_the_case_whatever_its_pass_rate(
        pytester: pytest.Pytester, chat_server: ChatServer) -> None:
    chat_server.set_handler(assistant)
    case = (f"name: repeated\nendpoint: {{base_url: '{chat_server.base_url}'}}\n"
            "stages: [{name: ask, user: hello, expect: {text: hello}}]\n")
    pytester.makefile(".case.yaml", s=case + "repeat: {runs: 3, min_pass_rate: 0.5}\n")
    pytester.runpytest("--toolbench-record").assert_outcomes(passed=1)
    # Two runs replay exactly what the first two recorded, and pass; the third's answer
    # is left over.
    pytester.makefile(".case.yaml", s=case + "repeat: {runs: 2, min_pass_rate: 0.5}\n")

    result = pytester.runpytest("--toolbench-report", "report.json")

    result.assert_outcomes(failed=1)
    message = ("the case sent 2 requests, but __cassettes__/s/repeated.yaml holds 3: the case"
               " changed since it was recorded; re-record it with:"
               " pytest 's.case.yaml::repeated' --toolbench-record")
    result.stdout.fnmatch_lines([f"*s.case.yaml:1: repeated: {message}"])
    record = json.loads((pytester.path / "report.json").read_text())["cases"][0]
    assert (record["outcome"], record["passes"], record["error"]) == ("failed", 2, message)


def test_missing_mode_records_only_what_is_missing(pytester: pytest.Pytester,
                                                   recorded: ChatServer) -> None:
    before = cassette_files(pytester.path)
    (pytester.path / "__cassettes__/s/streamed.yaml").unlink()
    sent = len(recorded.requests)

    result = pytester.runpytest("--toolbench-mode=missing", "-v")

    result.assert_outcomes(passed=3, failed=1)
    new_requests = [r.json()["messages"][-1]["content"] for r in recorded.requests[sent:]]
    assert new_requests == ["stream me"]
    after = cassette_files(pytester.path)
    streamed = "__cassettes__/s/streamed.yaml"
    assert {k: v for k, v in after.items() if k != streamed} == {
        k: v for k, v in before.items() if k != streamed}  # byte for byte: not rewritten
    document = yaml.safe_load(after[streamed])
    request = json.loads(document["interactions"][0]["request"]["json"])
    assert request["messages"][-1]["content"] == "stream me"


def test_bad_mode_is_a_usage_error_listing_the_choices(pytester: pytest.Pytester) -> None:
    result = pytester.runpytest("--toolbench-mode=replya")

    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([
        "*--toolbench-mode must be one of replay, record, missing, live; got 'replya'"])


def test_secrets_never_reach_the_cassette(pytester: pytest.Pytester, chat_server: ChatServer,
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-fake-0123456789abcdef")

    def tell_secrets(request: RecordedRequest) -> Reply:  # a server that leaks what it got
        leak = f"{request.headers['authorization']} {request.headers['x-api-key']}"
        return json_reply(completion(f"you sent {leak}"))

    chat_server.set_handler(tell_secrets)
    pytester.makefile(".case.yaml", k=textwrap.dedent(f"""\
        name: keyed
        endpoint:
          base_url: "{chat_server.base_url}"
          headers: {{X-Api-Key: hdr-secret-98765, X-Team: search}}
        stages: [{{name: ask, user: hi, expect: {{text: {{$contains: "you sent Bearer"}}}}}}]
        """))

    result = pytester.runpytest("--toolbench-record")

    result.assert_outcomes(passed=1)
    (request,) = chat_server.requests
    assert request.headers["authorization"] == "Bearer sk-fake-0123456789abcdef"
    assert request.headers["x-api-key"] == "hdr-secret-98765"
    (text,) = (content.decode() for content in cassette_files(pytester.path).values())
    assert "sk-fake-0123456789abcdef" not in text
    assert "hdr-secret-98765" not in text
    assert "you sent Bearer <scrubbed> <scrubbed>" in text
    assert "authorization" not in text.lower()


def test_cassette_is_readable_yaml_with_sorted_bodies_and_timed_events(
        pytester: pytest.Pytester, recorded: ChatServer) -> None:
    plain = yaml.safe_load((pytester.path / "__cassettes__/s/plain.yaml").read_text())
    streamed_text = (pytester.path / "__cassettes__/s/streamed.yaml").read_text()
    streamed = yaml.safe_load(streamed_text)

    assert streamed_text.startswith(
        "# Recorded by pytest-toolbench. Re-record: pytest 's.case.yaml::streamed'"
        " --toolbench-record\n")
    (interaction,) = plain["interactions"]
    assert interaction["request"]["method"] == "POST"
    assert interaction["request"]["path"] == "/chat/completions"
    request = json.loads(interaction["request"]["json"])  # dict order = order in the file
    assert request == {"messages": [{"content": "hello", "role": "user"}], "temperature": 0}
    assert list(request) == ["messages", "temperature"]
    assert list(request["messages"][0]) == ["content", "role"]
    assert interaction["response"]["status"] == 200
    assert interaction["response"]["content_type"] == "application/json"
    reply = json.loads(interaction["response"]["json"])
    assert reply["choices"][0]["message"]["content"] == "hello"
    # JSON bodies are block scalars: one JSON line per file line, for reviewable diffs.
    assert '    json: |-\n      {\n        "messages": [\n' in streamed_text

    (stream,) = streamed["interactions"]
    body = json.loads(stream["request"]["json"])
    assert list(body) == sorted(body)
    assert body["stream"] is True
    assert stream["response"]["content_type"] == "text/event-stream"
    events = stream["response"]["events"]
    offsets = [event["at_ms"] for event in events]
    assert all(isinstance(offset, float) for offset in offsets)
    assert offsets == sorted(offsets)
    assert events[-1]["data"] == "[DONE]"
    assert json.loads(events[1]["data"])["choices"][0]["delta"] == {"content": "stream m"}


# -- atomic writes -----------------------------------------------------------------------

def test_save_that_fails_midway_leaves_the_old_cassette_whole(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "case.yaml"
    Cassette(path, [Interaction({"n": 1}, 200, "application/json", {"old": True})]).save()
    old = path.read_bytes()

    def disk_full(fd: int) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "fsync", disk_full)  # after the write, before the rename
    new = Cassette(path, [Interaction({"n": 2}, 200, "application/json", {"new": True})])
    with pytest.raises(OSError, match="No space left"):
        new.save()

    assert path.read_bytes() == old
    assert sorted(p.name for p in tmp_path.iterdir()) == ["case.yaml"]  # no temp file left


def test_killed_recording_leaves_the_old_cassettes_whole(pytester: pytest.Pytester,
                                                         recorded: ChatServer) -> None:
    """SIGKILL while one case's stream stalls: the finished case's cassette is new and whole,
    the stalled case's is the old one byte for byte, and no temp file is left."""
    before = cassette_files(pytester.path)

    def slow_stream(request: RecordedRequest) -> Reply:
        body = request.json()
        if body.get("stream"):
            return sse_reply([*chunks_for("stream me")[:2], SSEPause(30),
                              *chunks_for("stream me")[2:]])
        return json_reply(completion(body["messages"][-1]["content"] + "!"))

    recorded.set_handler(slow_stream)
    sent = len(recorded.requests)
    process = subprocess.Popen(
        [sys.executable, "-m", "pytest", "--toolbench-record", "-k", "plain or streamed"],
        cwd=pytester.path, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 30
        while len(recorded.requests) < sent + 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert len(recorded.requests) == sent + 2, "the recording never reached the server"
        plain_path = pytester.path / "__cassettes__/s/plain.yaml"
        while b"hello!" not in plain_path.read_bytes() and time.monotonic() < deadline:
            time.sleep(0.05)  # the plain case finishes and writes its cassette meanwhile
    finally:
        os.kill(process.pid, signal.SIGKILL)
        process.wait(timeout=10)

    after = cassette_files(pytester.path)
    assert sorted(after) == sorted(before)  # no temp file beside the cassettes
    assert after["__cassettes__/s/streamed.yaml"] == before["__cassettes__/s/streamed.yaml"]
    plain = yaml.safe_load(after["__cassettes__/s/plain.yaml"])
    reply = json.loads(plain["interactions"][0]["response"]["json"])
    assert reply["choices"][0]["message"]["content"] == "hello!"


# -- replay timing -----------------------------------------------------------------------

def record_a_paused_stream(pytester: pytest.Pytester, chat_server: ChatServer, *,
                           pause_s: float, timeout_s: float) -> None:
    """Record case ``paused`` of ``t.case.yaml``: a stream that pauses ``pause_s`` seconds
    after its first two chunks."""
    chat_server.set_handler(lambda request: sse_reply(
        [*chunks_for("slow")[:2], SSEPause(pause_s), *chunks_for("slow")[2:]]))
    pytester.makefile(".case.yaml", t=textwrap.dedent(f"""\
        name: paused
        endpoint: {{base_url: "{chat_server.base_url}", retries: 0, timeout_s: {timeout_s}}}
        stages: [{{name: ask, user: hi, stream: true, expect: {{text: slow}}}}]
        """))
    pytester.runpytest("--toolbench-record").assert_outcomes(passed=1)


@pytest.mark.parametrize(("speed", "low_ms", "high_ms"), [("1", 400, 2000), ("0", 0, 200)])
def test_replay_speed(pytester: pytest.Pytester, chat_server: ChatServer, speed: str,
                      low_ms: float, high_ms: float) -> None:
    record_a_paused_stream(pytester, chat_server, pause_s=0.5, timeout_s=2)

    started = time.monotonic()
    result = pytester.runpytest(f"--toolbench-replay-speed={speed}", "--toolbench-report=r.json")
    elapsed_ms = (time.monotonic() - started) * 1000

    result.assert_outcomes(passed=1)
    latency = json.loads((pytester.path / "r.json").read_text())["cases"][0]["latency_ms"]
    assert low_ms <= latency < high_ms
    assert elapsed_ms >= low_ms


def test_ctrl_c_during_a_replayed_case_stops_the_session_cleanly(
        pytester: pytest.Pytester, chat_server: ChatServer) -> None:
    """Replayed cases run on pytest's own thread: Ctrl-C in the middle of one (here waiting
    out a recorded 4 s pause) ends the session as pytest's own interrupt, at once, with
    nothing left pending on the loop."""
    record_a_paused_stream(pytester, chat_server, pause_s=4, timeout_s=30)
    chat_server.close()  # replay must not need it

    process = subprocess.Popen(
        [*interruptible_pytest(), "-p", "no:cacheprovider", "-v", "--toolbench-replay-speed=1"],
        cwd=pytester.path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"})
    assert process.stdout is not None
    shown = ""
    while "t.case.yaml::paused" not in shown and process.poll() is None:
        shown += process.stdout.read(1)  # pytest names the item as it starts it
    time.sleep(0.5)  # into the recorded pause
    os.kill(process.pid, signal.SIGINT)
    stdout, stderr = process.communicate(timeout=15)

    assert process.returncode == pytest.ExitCode.INTERRUPTED
    assert "KeyboardInterrupt" in shown + stdout
    assert "no tests ran" in stdout  # the case was cut off, not waited for
    assert "INTERRUPTED" in shown + stdout and "failed" not in stdout  # marked, not failed
    for leftover in ("Task was destroyed", "was never awaited", "Traceback"):
        assert leftover not in stderr


# -- xdist -------------------------------------------------------------------------------

def test_recording_under_xdist_writes_every_cassette(pytester: pytest.Pytester,
                                                     chat_server: ChatServer) -> None:
    chat_server.set_handler(assistant)
    head = f'endpoint: {{base_url: "{chat_server.base_url}", retries: 0}}\n'
    stages = "stages: [{{name: ask, user: text {n}, expect: {{text: text {n}}}}}]\n"
    pytester.makefile(".case.yaml", x="---\n".join(
        head + f"name: case_{n}\n" + stages.format(n=n) for n in range(4)))

    result = pytester.runpytest_subprocess("--toolbench-record", "-n", "2", timeout=60)

    result.assert_outcomes(passed=4)
    assert len(chat_server.requests) == 4  # each case recorded once, by one worker
    for n in range(4):
        document = yaml.safe_load((pytester.path / f"__cassettes__/x/case_{n}.yaml").read_text())
        (interaction,) = document["interactions"]
        assert json.loads(interaction["request"]["json"])["messages"] == [
            {"content": f"text {n}", "role": "user"}]
    chat_server.close()
    pytester.runpytest().assert_outcomes(passed=4)


# -- what a session keeps ----------------------------------------------------------------

@pytest.mark.parametrize("stream", [False, True])
def test_a_reply_keeps_its_exchange_only_when_a_recording_takes_it(
        chat_server: ChatServer, stream: bool) -> None:
    """A session keeps every reply to its end: an exchange nobody records (replay, live
    without recording) would be a second copy of each body, held for nothing."""
    chat_server.set_handler(assistant)

    async def exchange(sink: InteractionSink | None) -> ChatReply:
        client = ApiClient(ClientConfig(chat_server.base_url, retries=0, timeout_s=5))
        try:
            body = {"messages": [{"role": "user", "content": "hi"}], "stream": stream}
            pending = await client.open(body, wire=wire_api("chat"), stream=stream, sink=sink)
            return await pending.read()
        finally:
            await client.aclose()

    assert asyncio.run(exchange(None)).interaction is None
    kept: list[Interaction] = []
    recorded = asyncio.run(exchange(kept.append))
    assert kept == [recorded.interaction]
    assert kept[0].request["messages"][0]["content"] == "hi"
    assert (kept[0].events if stream else kept[0].body) and kept[0].elapsed_ms > 0


COUNT_KEPT_EXCHANGES = """\
import pytest_toolbench.session as session

original = session.run_case
kept = []


async def counting(case_run, ctx):
    result = await original(case_run, ctx)
    kept.extend(reply.interaction for reply in result.replies if reply.interaction)
    return result


def pytest_configure(config):
    session.run_case = counting


def pytest_terminal_summary(terminalreporter):
    terminalreporter.write_line(f"exchanges kept with the results: {len(kept)}")
    session.run_case = original
"""


@pytest.mark.parametrize("mode", ["--toolbench-record", "--toolbench-live", ""])
def test_only_a_recording_keeps_exchanges_with_the_results(
        pytester: pytest.Pytester, recorded: ChatServer, mode: str) -> None:
    pytester.makeconftest(COUNT_KEPT_EXCHANGES)

    result = pytester.runpytest(*[mode] if mode else [])

    result.assert_outcomes(passed=3, failed=1)
    kept = 5 if mode == "--toolbench-record" else 0  # the agent case sends two requests
    result.stdout.fnmatch_lines([f"exchanges kept with the results: {kept}"])


def test_recording_a_body_nested_too_deep_for_json_keeps_it_as_text(
        pytester: pytest.Pytester, chat_server: ChatServer) -> None:
    """A 2xx body nested deeper than Python's JSON reader goes: the case fails on it as a
    problem of the reply, and the cassette keeps the body as the text it was."""
    deep = "[" * 100_000 + "]" * 100_000
    chat_server.set_handler(lambda request: text_reply(deep, content_type="application/json"))
    pytester.makefile(".case.yaml", t=f"""\
name: deep
endpoint: {{base_url: '{chat_server.base_url}', retries: 0}}
stages: [{{name: ask, user: hi}}]
""")

    result = pytester.runpytest("--toolbench-record")

    result.assert_outcomes(failed=1)
    assert "internal error" not in result.stdout.str()
    result.stdout.fnmatch_lines(["*response body (application/json) is not JSON:*"])
    saved = yaml.safe_load((pytester.path / "__cassettes__/t/deep.yaml").read_text())
    assert saved["interactions"][0]["response"]["text"] == deep
