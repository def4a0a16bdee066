"""Defences against hostile servers, and the limits that bound every reply.

A reply has a total deadline and a size limit besides the timeout between bytes: a server
that trickles, pings or streams forever, or sends a compression bomb, fails its case with
the limit named, in bounded time and memory. Limits are settings, checked at start-up.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import socket
import textwrap
import time
import tracemalloc
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import httpx2
import pytest
from support.chat_server import (
    ChatServer,
    RecordedRequest,
    Reply,
    SSEPause,
    chunks_for,
    completion,
    huge_reply,
    json_reply,
    sse_reply,
    stall_reply,
)
from support.hostile_server import (
    endless_events,
    gzip_bomb,
    keep_alive_forever,
    trickle,
)

from pytest_toolbench.transport.client import ApiClient, ClientConfig
from pytest_toolbench.transport.sse import SSEDecoder, SSETooLarge
from pytest_toolbench.wire import wire_api

TIMEOUT_S = 1.0
DEADLINE_S = 1.5
"""Above the timeout: each of these servers sends something well within every timeout."""
MARGIN_S = 3.0
"""Generous: a slow, shared CI machine."""
MIB = 1024 * 1024
URL = "http://127.0.0.1:*/v1/chat/completions"


def hostile_then_normal(hostile: Reply) -> Callable[[RecordedRequest], Reply]:
    """The case ``hostile`` gets ``hostile``; the case ``after`` a normal reply."""
    def handler(request: RecordedRequest) -> Reply:
        if request.json()["messages"][-1]["content"] == "after":
            return json_reply(completion("fine"))
        return hostile
    return handler


def two_cases(hostile_url: str, normal_url: str, *, stream: bool = False,
              timeout_s: float = TIMEOUT_S) -> str:
    return textwrap.dedent(f"""\
        name: hostile
        endpoint: {{base_url: "{hostile_url}", retries: 0, timeout_s: {timeout_s}}}
        stages: [{{name: ask, user: hostile, stream: {str(stream).lower()}}}]
        ---
        name: after
        endpoint: {{base_url: "{normal_url}", retries: 0, timeout_s: {TIMEOUT_S}}}
        stages: [{{name: ask, user: after, expect: {{text: fine}}}}]
        """)


def run_hostile(pytester: pytest.Pytester, server: ChatServer, hostile: Reply, *args: str,
                stream: bool = False, timeout_s: float = TIMEOUT_S,
                url: str | None = None) -> tuple[pytest.RunResult, float]:
    """Run the two cases live; the hostile one must fail, the next one still pass."""
    server.set_handler(hostile_then_normal(hostile))
    pytester.makefile(".case.yaml", f=two_cases(url or server.base_url, server.base_url,
                                                stream=stream, timeout_s=timeout_s))
    started = time.monotonic()
    result = pytester.runpytest("--toolbench-live", "-v", "--durations=0", "--durations-min=0",
                                *args)
    elapsed = time.monotonic() - started
    result.assert_outcomes(failed=1, passed=1)
    assert "Traceback" not in result.stdout.str()
    return result, elapsed


def hostile_took(result: pytest.RunResult) -> float:
    """The seconds the case ``hostile`` ran (pytest's ``--durations``): what an upper bound
    is about, without the run's start-up and the other case, which a loaded machine slows
    by more than any margin."""
    took = [float(match[1]) for line in result.outlines
            if (match := re.fullmatch(r"\s*([\d.]+)s call\s+\S+::hostile\s*", line))]
    assert len(took) == 1, result.outlines
    return took[0]


def verdict(result: pytest.RunResult, reason: str) -> None:
    result.stdout.fnmatch_lines([f"f.case.yaml:*: hostile: stages[[]0[]]: {reason}"])

# -- settings ------------------------------------------------------------------------------


@pytest.mark.parametrize("value", ["nan", "inf", "-inf", "-1", "0", "soon"])
def test_a_timeout_that_is_not_a_positive_finite_number_is_a_usage_error(
        pytester: pytest.Pytester, value: str) -> None:
    result = pytester.runpytest(f"--toolbench-timeout={value}")

    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([
        f"*--toolbench-timeout must be a finite number of seconds > 0; got '{value}'"])


def test_a_bad_ini_timeout_names_the_ini_key(pytester: pytest.Pytester) -> None:
    pytester.makeini("[pytest]\ntoolbench_timeout = nan\n")

    result = pytester.runpytest()

    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([
        "*ini toolbench_timeout must be a finite number of seconds > 0; got 'nan'"])


def test_a_good_timeout_runs(pytester: pytest.Pytester, chat_server: ChatServer) -> None:
    chat_server.set_default(json_reply(completion("fine")))
    pytester.makefile(".case.yaml", ok=textwrap.dedent(f"""\
        name: ok
        endpoint: {{base_url: "{chat_server.base_url}"}}
        stages: [{{name: ask, user: hi, expect: {{text: fine}}}}]
        """))

    result = pytester.runpytest("--toolbench-live", "--toolbench-timeout=0.5")

    result.assert_outcomes(passed=1)


@pytest.mark.parametrize(("flag", "value", "wanted"), [
    ("deadline", "nan", "a finite number of seconds > 0"),
    ("deadline", "0", "a finite number of seconds > 0"),
    ("max-reply-bytes", "0", "a whole number >= 1"),
    ("max-reply-bytes", "inf", "a whole number >= 1"),
    ("max-reply-bytes", "1.5e6", "a whole number >= 1"),
    ("max-stream-events", "-5", "a whole number >= 1"),
    ("replay-speed", "inf", "a finite number >= 0"),
    ("breaker-cooldown", "nan", "a finite number >= 0"),
    ("concurrency", "1.5", "a whole number >= 1"),
])
def test_other_numbers_are_checked_the_same_way(pytester: pytest.Pytester, flag: str,
                                                value: str, wanted: str) -> None:
    result = pytester.runpytest(f"--toolbench-{flag}={value}")

    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([f"*--toolbench-{flag} must be {wanted}; got '{value}'"])


# -- base URL ------------------------------------------------------------------------------


@pytest.mark.parametrize("suffix", ["?api-version=2024-06-01", "/?api-version=2024-06-01"])
def test_a_query_in_the_base_url_goes_after_the_path(
        pytester: pytest.Pytester, chat_server: ChatServer, suffix: str) -> None:
    chat_server.set_default(json_reply(completion("fine")))
    pytester.makefile(".case.yaml", ok=textwrap.dedent(f"""\
        name: ok
        endpoint: {{base_url: "{chat_server.base_url}{suffix}"}}
        stages: [{{name: ask, user: hi, expect: {{text: fine}}}}]
        """))

    result = pytester.runpytest("--toolbench-live")

    result.assert_outcomes(passed=1)
    assert [r.path for r in chat_server.requests] == [
        "/v1/chat/completions?api-version=2024-06-01"]


# -- the total deadline --------------------------------------------------------------------

DEADLINE_FAULTS = {
    "headers_trickled": (trickle(0.2), False),
    "body_trickled": (trickle(0.2, after_headers=True), False),
    "stream_trickled": (trickle(0.2, stream=True, after_headers=True), True),
    "keep_alive_comments_forever": (keep_alive_forever(every_s=0.2), True),
    "data_events_forever": (endless_events(every_s=0.1), True),
}


@pytest.mark.parametrize("name", list(DEADLINE_FAULTS))
def test_a_reply_that_never_completes_fails_at_the_total_deadline(
        pytester: pytest.Pytester, chat_server: ChatServer, name: str) -> None:
    hostile, stream = DEADLINE_FAULTS[name]

    result, elapsed = run_hostile(pytester, chat_server, hostile,
                                  f"--toolbench-deadline={DEADLINE_S:g}", stream=stream)

    verdict(result, "deadline exceeded: no complete reply within 1.5 s (total deadline,"
                    f" --toolbench-deadline) from {URL}")
    assert DEADLINE_S * 0.9 <= elapsed
    assert hostile_took(result) < DEADLINE_S + MARGIN_S


def test_the_deadline_is_kept_in_the_task_that_sends() -> None:
    """Sending and reading wait under the deadline in the task that asked, not in a task
    started for each wait; the request goes below the base URL, its query after the path."""
    seen: list[asyncio.Task[Any] | None] = []

    class Body(httpx2.AsyncByteStream):
        async def __aiter__(self) -> AsyncIterator[bytes]:
            seen.append(asyncio.current_task())
            yield json.dumps(completion("fine")).encode()

    async def handle(request: httpx2.Request) -> httpx2.Response:
        seen.append(asyncio.current_task())
        return httpx2.Response(200, headers={"content-type": "application/json"}, stream=Body())

    async def ask() -> tuple[asyncio.Task[Any] | None, httpx2.URL, str]:
        client = ApiClient(ClientConfig("http://llm.invalid/v1?api-version=1", retries=0),
                           transport=httpx2.MockTransport(handle))
        try:
            pending = await client.open({"messages": []}, wire=wire_api("chat"), stream=False)
            reply = await pending.read()
        finally:
            await client.aclose()
        return asyncio.current_task(), pending.response.request.url, reply.text

    task, url, text = asyncio.run(ask())

    assert seen == [task, task]
    assert str(url) == "http://llm.invalid/v1/chat/completions?api-version=1"
    assert text == "fine"


def test_without_a_deadline_setting_a_reply_gets_ten_timeouts(
        pytester: pytest.Pytester, chat_server: ChatServer) -> None:
    result, _ = run_hostile(pytester, chat_server, keep_alive_forever(every_s=0.04),
                            stream=True, timeout_s=0.5)  # also the connect's: not less

    verdict(result, f"deadline exceeded: no complete reply within 5 s (total deadline, *) from {URL}")
    assert hostile_took(result) < 5 + MARGIN_S


def test_cases_started_together_do_not_use_up_each_others_timeout(
        pytester: pytest.Pytester, chat_server: ChatServer) -> None:
    """Sixteen cases, each with an endpoint of its own (a timeout of its own), start at once
    on one event loop: what one case does to start (its client) must not be counted
    against another's connect timeout. Each client once built an SSL context of its own,
    ~25 ms of processor time on the loop, so the first case's 0.25 s connect timeout ran
    out while the others started, and on a loaded machine a case next to one other could
    fail to connect."""
    chat_server.set_handler(lambda request: json_reply(completion("fine")))
    cases = "---\n".join(textwrap.dedent(f"""\
        name: case_{n}
        endpoint: {{base_url: "{chat_server.base_url}", retries: 0, timeout_s: 0.25{n:02d}}}
        stages: [{{name: ask, user: hi, expect: {{text: fine}}}}]
        """) for n in range(16))
    pytester.makefile(".case.yaml", together=cases)

    result = pytester.runpytest("--toolbench-live", "--toolbench-concurrency=16")

    result.assert_outcomes(passed=16)
    assert len(chat_server.requests) == 16


def test_the_ini_deadline_applies(pytester: pytest.Pytester, chat_server: ChatServer) -> None:
    pytester.makeini("[pytest]\ntoolbench_deadline = 1.2\n")

    result, _ = run_hostile(pytester, chat_server, trickle(0.2, after_headers=True))

    verdict(result, "deadline exceeded: no complete reply within 1.2 s *")


# -- the size limits -----------------------------------------------------------------------


def test_a_stream_that_never_ends_fails_at_the_size_limit(
        pytester: pytest.Pytester, chat_server: ChatServer) -> None:
    result, _ = run_hostile(pytester, chat_server, endless_events(per_write=100),
                            "--toolbench-max-reply-bytes=1048576", stream=True)

    verdict(result, "reply too large: stream larger than 1048576 bytes"
                    f" (--toolbench-max-reply-bytes) from {URL}")


def test_a_body_past_the_size_limit_fails(pytester: pytest.Pytester,
                                          chat_server: ChatServer) -> None:
    result, _ = run_hostile(pytester, chat_server, huge_reply(2 * MIB),
                            "--toolbench-max-reply-bytes=1048576")

    verdict(result, "reply too large: body larger than 1048576 bytes"
                    f" (--toolbench-max-reply-bytes) from {URL}")


def test_a_stream_of_too_many_events_fails_at_the_event_limit(
        pytester: pytest.Pytester, chat_server: ChatServer) -> None:
    result, _ = run_hostile(pytester, chat_server, endless_events(per_write=100),
                            "--toolbench-max-stream-events=1000", stream=True)

    verdict(result, "reply too large: stream of more than 1000 events"
                    f" (--toolbench-max-stream-events) from {URL}")


@pytest.mark.parametrize("stream", [True, False], ids=["stream", "body"])
def test_a_gzip_bomb_is_stopped_at_the_size_limit_in_bounded_memory(
        pytester: pytest.Pytester, chat_server: ChatServer, stream: bool) -> None:
    # 4 GiB once inflated; 64 MiB of it arrive in each network write.
    bomb = gzip_bomb(4096 * MIB, stream=stream)
    tracemalloc.start()
    try:
        result, _ = run_hostile(pytester, chat_server, bomb, "--toolbench-max-reply-bytes=1048576",
                                stream=stream)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()

    what = "stream" if stream else "body"
    verdict(result, f"reply too large: {what} larger than 1048576 bytes once gzip-decoded"
                    f" (--toolbench-max-reply-bytes) from {URL}")
    assert peak < 32 * MIB  # one network read inflated at once would be 64 MiB


# -- timeouts name the limit and the URL ---------------------------------------------------


@contextlib.contextmanager
def unanswered_port() -> Iterator[str]:
    """A loopback URL whose listener never accepts: with its backlog full, the kernel
    drops further SYNs, so connecting hangs until the client's connect timeout."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(0)
        port = listener.getsockname()[1]
        fillers = [socket.socket() for _ in range(4)]
        try:
            for filler in fillers:
                filler.setblocking(False)
                filler.connect_ex(("127.0.0.1", port))
            time.sleep(0.05)
            yield f"http://127.0.0.1:{port}/v1"
        finally:
            for filler in fillers:
                filler.close()


def test_a_connect_timeout_names_the_limit_and_the_url(pytester: pytest.Pytester,
                                                       chat_server: ChatServer) -> None:
    with unanswered_port() as url:
        result, _ = run_hostile(pytester, chat_server, json_reply(completion("unused")),
                                url=url)

    verdict(result, f"connect failed: no connection within 1 s (timeout) to {URL}")
    assert hostile_took(result) < TIMEOUT_S + MARGIN_S


def test_no_response_before_the_timeout_names_the_limit_and_the_url(
        pytester: pytest.Pytester, chat_server: ChatServer) -> None:
    result, _ = run_hostile(pytester, chat_server, stall_reply(TIMEOUT_S + 3))

    verdict(result, f"read timed out: no response within 1 s (timeout) from {URL}")


def test_a_stall_mid_stream_names_the_limit_and_the_url(pytester: pytest.Pytester,
                                                        chat_server: ChatServer) -> None:
    stalled = sse_reply([*chunks_for("partial")[:2], SSEPause(TIMEOUT_S + 3)])

    result, _ = run_hostile(pytester, chat_server, stalled, stream=True)

    verdict(result, "read timed out: no more data within 1 s (timeout) while reading the body"
                    f" from {URL}")


def test_messages_leave_out_the_query_of_the_url(pytester: pytest.Pytester,
                                                 chat_server: ChatServer) -> None:
    url = f"{chat_server.base_url}?api-version=2024&key=query-secret"

    result, _ = run_hostile(pytester, chat_server, stall_reply(TIMEOUT_S + 3), url=url)

    verdict(result, f"read timed out: no response within 1 s (timeout) from {URL}")
    assert "query-secret" not in result.stdout.str()


# -- the SSE decoder's own bound -----------------------------------------------------------


def test_a_line_without_end_is_refused_at_the_decoders_limit() -> None:
    decoder = SSEDecoder(max_event_chars=100)
    decoder.feed(b"data: " + b"x" * 90)

    with pytest.raises(SSETooLarge, match="^an SSE line longer than 100 characters$"):
        decoder.feed(b"x" * 20)


def test_an_event_of_many_data_lines_is_refused_at_the_decoders_limit() -> None:
    decoder = SSEDecoder(max_event_chars=100)

    with pytest.raises(SSETooLarge, match="^an SSE event longer than 100 characters$"):
        for _ in range(30):
            decoder.feed(b"data: 0123456789\n")


def test_events_up_to_the_decoders_limit_pass() -> None:
    decoder = SSEDecoder(max_event_chars=21)
    events = []
    for _ in range(1000):  # the limit is per event, not per stream
        events += decoder.feed(b"data: 0123456789\ndata: 0123456789\n\n")

    assert len(events) == 1000
    assert events[0].data == "0123456789\n0123456789"
