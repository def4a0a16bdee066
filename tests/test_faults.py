"""The fault matrix: every way an endpoint can misbehave ends the case with a named reason,
in bounded time, and the session goes on to the next case.

Each test runs a file of two cases through pytester in live mode: ``faulty`` meets the
fault, then ``after`` (same server, a normal reply) must still pass. Timeouts are 1 s and
``retries: 0`` unless the test is about retries.
"""

from __future__ import annotations

import json
import re
import socket
import textwrap
import time
from collections.abc import Callable
from dataclasses import dataclass

import pytest
from support.chat_server import (
    ChatServer,
    RecordedRequest,
    Reply,
    SSEPause,
    SSEReply,
    chunks_for,
    completion,
    huge_reply,
    json_reply,
    reset_reply,
    sse_reply,
    stall_reply,
    text_reply,
)

TIMEOUT_S = 1.0
MARGIN_S = 3.0
"""Generous: in-process pytest start-up and a slow, shared CI machine."""


def closed_port_url() -> str:
    """A loopback URL nobody listens on: connecting is refused at once."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"http://127.0.0.1:{port}/v1"


def fault_then_normal(fault: Reply | list[Reply]) -> Callable[[RecordedRequest], Reply]:
    """Requests of ``faulty`` get the fault(s) in turn; ``after`` gets a normal reply."""
    faults = fault if isinstance(fault, list) else [fault]

    def handler(request: RecordedRequest) -> Reply:
        body = request.json()
        if body["messages"][-1]["content"] == "after":
            return json_reply(completion("fine"))
        return faults.pop(0) if len(faults) > 1 else faults[0]
    return handler


def two_cases(faulty_url: str, normal_url: str, *, stream: bool = False, retries: int = 0,
              expect: str = "{}") -> str:
    return textwrap.dedent(f"""\
        name: faulty
        endpoint: {{base_url: "{faulty_url}", retries: {retries}, timeout_s: {TIMEOUT_S}}}
        stages:
          - name: ask
            user: fault
            stream: {str(stream).lower()}
            expect: {expect}
        ---
        name: after
        endpoint: {{base_url: "{normal_url}", retries: 0, timeout_s: {TIMEOUT_S}}}
        stages:
          - name: ask
            user: after
            expect: {{text: fine}}
        """)


def run_timed(pytester: pytest.Pytester, *args: str) -> tuple[pytest.RunResult, float]:
    started = time.monotonic()
    result = pytester.runpytest("--toolbench-live", "-v", *args)
    return result, time.monotonic() - started


def stream_of(text: str) -> SSEReply:
    return sse_reply(chunks_for(text, split=2))


HTML_502 = text_reply("<html><body><h1>502 Bad Gateway</h1></body></html>", status=502,
                      content_type="text/html")
RESET_MID_STREAM = reset_reply(len(stream_of("hello world").render()) // 2, of=stream_of(
    "hello world"))


@dataclass(frozen=True)
class Fault:
    reply: Reply | None
    """What the server does; None: the faulty case talks to a closed port."""
    stream: bool
    reason: str
    """fnmatch pattern of the failure's verdict, after ``faulty: stages[0]...``."""
    min_s: float = 0.0
    """The fault must really be waited out (timeouts), not cut short."""


FAULTS = {
    "connection_refused": Fault(None, False,
                                "*connect failed: http://127.0.0.1:*/v1/chat/completions: ?*"),
    "reset_before_headers": Fault(reset_reply(0), False,
                                  "*connection lost: http://127.0.0.1:*/v1/chat/completions: ?*"),
    "reset_mid_stream": Fault(RESET_MID_STREAM, True,
                              "*connection lost: while reading the body: ?*"),
    "stall_before_first_byte": Fault(stall_reply(TIMEOUT_S + 3), False,
                                     "*read timed out: *no response within 1 s*",
                                     min_s=TIMEOUT_S * 0.9),
    "stall_mid_stream": Fault(sse_reply([*chunks_for("partial")[:2], SSEPause(TIMEOUT_S + 3),
                                         *chunks_for("partial")[2:]]), True,
                              ("*read timed out: no more data within 1 s (timeout) while reading"
                               " the body from http://127.0.0.1:*/v1/chat/completions"),
                              min_s=TIMEOUT_S * 0.9),
    "stream_without_done": Fault(sse_reply(chunks_for("cut short"), done=False), True,
                                 "*stream.done: stream ended without data: [[]DONE[]]"),
    "chunk_not_json": Fault(sse_reply(["{not json", *chunks_for("ok")]), True,
                            "*expect: chat stream: JSON: event 1 is not JSON: *'{not json'"),
    "html_error_page": Fault(HTML_502, False, "*expect.status: expected 200, got 502; *"),
    "html_page_with_200": Fault(
        text_reply("<html><body>Sign in to continue</body></html>", content_type="text/html"),
        False, "*response body (text/html) is not JSON: *"),
}


@pytest.mark.parametrize("name", list(FAULTS))
def test_fault_ends_the_case_with_a_reason_and_the_session_goes_on(
        pytester: pytest.Pytester, chat_server: ChatServer, name: str) -> None:
    fault = FAULTS[name]
    chat_server.set_handler(fault_then_normal(fault.reply or json_reply(completion("unused"))))
    url = chat_server.base_url if fault.reply is not None else closed_port_url()
    pytester.makefile(".case.yaml", f=two_cases(url, chat_server.base_url, stream=fault.stream))

    result, elapsed = run_timed(pytester)

    result.assert_outcomes(failed=1, passed=1)
    result.stdout.fnmatch_lines(["*f.case.yaml::faulty FAILED*", "*f.case.yaml::after PASSED*"])
    result.stdout.fnmatch_lines([f"*f.case.yaml:*: faulty: stages[[]0[]]{fault.reason}"])
    assert "Traceback" not in result.stdout.str()
    assert fault.min_s <= elapsed < TIMEOUT_S + MARGIN_S


def test_html_error_page_shows_the_page_text(pytester: pytest.Pytester,
                                             chat_server: ChatServer) -> None:
    chat_server.set_handler(fault_then_normal(HTML_502))
    pytester.makefile(".case.yaml", f=two_cases(chat_server.base_url, chat_server.base_url))

    result, _ = run_timed(pytester)

    result.stdout.fnmatch_lines(["  < 502 finish_reason=None (*)",
                                 "    error: <html><body><h1>502 Bad Gateway</h1></body></html>"])


def test_a_20_mb_completion_parses(pytester: pytest.Pytester, chat_server: ChatServer) -> None:
    size = 20 * 1024 * 1024
    chat_server.set_handler(fault_then_normal(huge_reply(size, piece_bytes=1024 * 1024)))
    pytester.makefile(".case.yaml", f=two_cases(
        chat_server.base_url, chat_server.base_url,
        expect=f"{{text: {{$len: {{$gt: {size - 1000}}}}}, finish_reason: stop}}"))

    result, elapsed = run_timed(pytester)

    result.assert_outcomes(passed=2)
    assert elapsed < 15


# -- retries -----------------------------------------------------------------------------

def test_429_with_retry_after_is_retried_then_passes(pytester: pytest.Pytester,
                                                     chat_server: ChatServer) -> None:
    limited = json_reply({"error": {"message": "Rate limit reached"}}, status=429,
                         headers={"Retry-After": "1"})
    chat_server.set_handler(fault_then_normal([limited, json_reply(completion("fine"))]))
    pytester.makefile(".case.yaml", f=two_cases(chat_server.base_url, chat_server.base_url,
                                                retries=2, expect="{text: fine}"))

    result, elapsed = run_timed(pytester, "--toolbench-report=report.json")

    result.assert_outcomes(passed=2)
    faulty = [r for r in chat_server.requests if r.json()["messages"][-1]["content"] == "fault"]
    assert len(faulty) == 2
    assert 0.95 <= elapsed < 1.0 + MARGIN_S  # Retry-After was honoured
    report = json.loads((pytester.path / "report.json").read_text())
    (turn,) = report["cases"][0]["runs"][0]["stages"][0]["attempts"][0]["turns"]
    assert turn["retries"] == [
        "attempt 1 failed (HTTP 429: Rate limit reached); retried after 1.00 s"]


@pytest.mark.parametrize("status", [500, 503, 529])
def test_5xx_every_time_fails_naming_the_status_after_retries(
        pytester: pytest.Pytester, chat_server: ChatServer, status: int) -> None:
    chat_server.set_handler(fault_then_normal(
        json_reply({"error": {"message": "upstream is down"}}, status=status)))
    pytester.makefile(".case.yaml", f=two_cases(chat_server.base_url, chat_server.base_url,
                                                retries=1))

    result, elapsed = run_timed(pytester)

    result.assert_outcomes(failed=1, passed=1)
    result.stdout.fnmatch_lines([
        (f"*f.case.yaml:*: faulty: stages[[]0[]].expect.status: expected 200, got {status};"
         " the server said: upstream is down"),
        "  > request 1: 1 message, last user: fault",
        f"    retry: attempt 1 failed (HTTP {status}: upstream is down); retried after *",
        f"  < {status} finish_reason=None (*)",
        "    error: upstream is down",
    ])
    faulty = [r for r in chat_server.requests if r.json()["messages"][-1]["content"] == "fault"]
    assert len(faulty) == 2  # the first try and one retry
    assert elapsed < TIMEOUT_S + MARGIN_S


# -- circuit breaker ---------------------------------------------------------------------

def six_cases(url: str, retries: int) -> str:
    return "---\n".join(textwrap.dedent(f"""\
        name: case_{n}
        endpoint: {{base_url: "{url}", retries: {retries}, timeout_s: {TIMEOUT_S}}}
        stages: [{{name: ask, user: hi}}]
        """) for n in range(1, 7))


def test_dead_endpoint_opens_the_circuit(pytester: pytest.Pytester) -> None:
    pytester.makefile(".case.yaml", dead=six_cases(closed_port_url(), retries=1))

    result, elapsed = run_timed(pytester, "--toolbench-concurrency=1")

    result.assert_outcomes(failed=6)
    for n in (1, 2, 3):
        result.stdout.fnmatch_lines([
            f"*dead.case.yaml:*: case_{n}: stages[[]0[]]: connect failed: *"])
    for n in (4, 5, 6):
        result.stdout.fnmatch_lines([
            (f"*dead.case.yaml:*: case_{n}: stages[[]0[]]: circuit open: 3 consecutive transport"
            " failures*Last error: connect failed*")])
    assert elapsed < 8  # three cases' retries at most; the last three fail at once


def test_dead_endpoint_with_concurrency_ends_in_seconds(pytester: pytest.Pytester) -> None:
    pytester.makefile(".case.yaml", dead=six_cases(closed_port_url(), retries=2))

    result, elapsed = run_timed(pytester)

    result.assert_outcomes(failed=6)
    for n in range(1, 7):
        verdict = (rf"^\S*dead\.case\.yaml:\d+: case_{n}: stages\[0\]: "
                   r"(connect failed|circuit open): ")
        assert any(re.match(verdict, line) for line in result.stdout.lines), n
    assert elapsed < 8


@pytest.mark.parametrize("status", [503, 529])
def test_endpoint_answering_5xx_every_time_opens_the_circuit(
        pytester: pytest.Pytester, chat_server: ChatServer, status: int) -> None:
    chat_server.set_default(json_reply({"error": {"message": "overloaded"}}, status=status))
    pytester.makefile(".case.yaml", down=six_cases(chat_server.base_url, retries=0))

    result, elapsed = run_timed(pytester, "--toolbench-concurrency=1")

    result.assert_outcomes(failed=6)
    result.stdout.fnmatch_lines([("*down.case.yaml:*: case_6: stages[[]0[]]: circuit open: *"
                                 f"Last error: HTTP {status}")])
    assert len(chat_server.requests) == 3
    assert elapsed < TIMEOUT_S + MARGIN_S


def test_error_chunk_inside_a_stream_names_its_type_and_that_it_is_transient(
        pytester: pytest.Pytester, chat_server: ChatServer) -> None:
    chat_server.set_handler(fault_then_normal(sse_reply([
        *chunks_for("Hel")[:2],
        {"error": {"message": "The server had an error while processing your request.",
                   "type": "server_error", "param": None, "code": None}}])))
    pytester.makefile(".case.yaml", f=two_cases(chat_server.base_url, chat_server.base_url,
                                                stream=True))

    result, _ = run_timed(pytester)

    result.assert_outcomes(failed=1, passed=1)
    result.stdout.fnmatch_lines([
        ("*f.case.yaml:*: faulty: stages[[]0[]].expect: chat stream: error chunk server_error"
        " (transient: the service failed on its side; retry later): The server had an error"
        " while processing your request.")])
