"""The agent proxy's bounds: what it reads before it checks, how many connections and
request bytes it holds, what it forwards and records of a reply, and whose a request is.

Hostile clients on loopback, run inside an agent case of a pytester run (the agent's code
shares its process with the proxy, so the memory it measures is the proxy's), scripted
loopback servers upstream, and the proxy itself spoken to over raw sockets.
"""

from __future__ import annotations

import http.client
import json
import socket
import time
from collections.abc import Iterator

import httpx2
import pytest
import yaml
from support.chat_server import (
    chunks_for,
    completion,
    huge_reply,
    json_reply,
    sse_reply,
    start_chat_server,
)
from support.hostile_server import endless_events, keep_alive_forever

from pytest_toolbench.transport.proxy import (
    MAX_CONNECTIONS,
    MAX_REQUEST_BYTES,
    ProxyRequest,
    ProxyResponse,
    ProxyServer,
    refused,
)

MIB = 1024 * 1024


def run(pytester: pytest.Pytester, *args: str) -> pytest.RunResult:
    return pytester.runpytest("-p", "no:cacheprovider", *args)


def agent_case(name: str, factory: str, base_url: str = "http://127.0.0.1:9/v1",
               expect: str = "", module: str = "agents") -> str:
    return (f"name: {name}\nagent: {{python: '{module}:{factory}'}}\n"
            f"endpoint: {{base_url: '{base_url}'}}\n"
            f"stages:\n  - name: ask\n    user: hi\n"
            + (f"    expect:\n{expect}" if expect else ""))


def head_only(port: int, target: str, length: int) -> bytes:
    """Send a POST's head announcing ``length`` bytes and none of them; what comes back
    within 5 s (the status line and headers at least), or b"" when nothing does."""
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        sock.sendall(f"POST {target} HTTP/1.1\r\nhost: proxy\r\ncontent-type: application/json"
                     f"\r\ncontent-length: {length}\r\n\r\n".encode())
        received = b""
        try:
            while b"\r\n\r\n" not in received:
                piece = sock.recv(65536)
                if not piece:
                    break
                received += piece
        except TimeoutError:
            pass
        return received


class _Answers:
    """A case's handler that answers every request (200)."""

    def owns(self, connection: int) -> bool:
        return True

    async def handle(self, request: ProxyRequest) -> ProxyResponse:
        return refused(200, "fine")


# -- item: the proxy checks before it reads -------------------------------------------------


def test_a_request_without_the_token_is_refused_on_its_head_its_body_never_read() -> None:
    proxy = ProxyServer()
    proxy.start()
    proxy.attach(_Answers())
    try:
        started = time.monotonic()
        answer = head_only(proxy.port, "/not-the-token/openai/v1/chat/completions", 60 * MIB)
        assert answer.startswith(b"HTTP/1.1 403 "), answer
        assert time.monotonic() - started < 4  # not waiting for a body that never comes
    finally:
        proxy.close()


def test_an_oversized_request_gets_a_413_on_its_head() -> None:
    proxy = ProxyServer()
    proxy.start()
    proxy.attach(_Answers())
    try:
        answer = head_only(proxy.port, f"/{proxy.token}/openai/v1/chat/completions",
                           MAX_REQUEST_BYTES + 1)
        assert answer.startswith(b"HTTP/1.1 413 "), answer
        assert b"connection: close" in answer.lower()
    finally:
        proxy.close()


def test_connections_past_the_bound_are_refused_with_a_503_that_says_so() -> None:
    proxy = ProxyServer()
    proxy.start()
    proxy.attach(_Answers())
    path = f"/{proxy.token}/openai/v1/models"
    # Each served once and kept alive (a sync client's): every one is open on the proxy.
    kept = [http.client.HTTPConnection("127.0.0.1", proxy.port, timeout=10)
            for _ in range(MAX_CONNECTIONS)]
    try:
        for connection in kept:
            connection.request("GET", path, headers={"X-Stainless-Async": "false"})
            connection.getresponse().read()
        extra = socket.create_connection(("127.0.0.1", proxy.port), timeout=5)
        with extra:
            extra.sendall(f"GET {path} HTTP/1.1\r\nhost: p\r\n\r\n".encode())
            answer = b""
            while (piece := extra.recv(65536)):
                answer += piece
        assert answer.startswith(b"HTTP/1.1 503 "), answer
        assert f"{MAX_CONNECTIONS} connections".encode() in answer
        assert b"retry-after: 1" in answer.lower()
        for connection in kept:
            connection.close()
        deadline = time.monotonic() + 10
        while not (again := head_only(proxy.port, path, 0)).startswith(b"HTTP/1.1 200 "):
            assert time.monotonic() < deadline, again  # room again once they closed
            time.sleep(0.1)
    finally:
        for connection in kept:
            connection.close()
        proxy.close()


def test_a_chunked_body_is_refused_once_it_goes_past_a_bound(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A body of no announced length is counted as it comes: past the largest body, a 413;
    past the room left over all connections, a 503."""
    monkeypatch.setattr("pytest_toolbench.transport.proxy.MAX_REQUEST_BYTES", MIB)
    proxy = ProxyServer()
    proxy.start()
    proxy.attach(_Answers())

    def pieces(count: int) -> Iterator[bytes]:
        for _ in range(count):
            yield b" " * (256 * 1024)
    try:
        with httpx2.Client(timeout=10) as client:
            url = proxy.base_url("chat") + "/chat/completions"
            assert client.post(url, content=pieces(2)).status_code == 200
            big = client.post(url, content=pieces(8))
            assert big.status_code == 413
            assert f"larger than {MIB} bytes" in big.json()["error"]["message"]
            monkeypatch.setattr("pytest_toolbench.transport.proxy.MAX_BUFFERED_BYTES", MIB // 2)
            full = client.post(url, content=pieces(3))
            assert full.status_code == 503
            assert "takes at most 524288 at once" in full.json()["error"]["message"]
            assert client.post(url, content=pieces(1)).status_code == 200  # nothing left held
    finally:
        proxy.close()


FLOOD = '''
import json
import os
import resource
import socket
import threading
import time
from urllib.parse import urlsplit

PIECE = b" " * (1024 * 1024)


def _peak_mb():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _one(host, port, path, statuses):
    sock = socket.create_connection((host, port), timeout=5)
    try:
        sock.sendall((f"POST {path} HTTP/1.1\\r\\nhost: x\\r\\ncontent-type: application/json"
                      f"\\r\\ncontent-length: {60 * 1024 * 1024}\\r\\n\\r\\n").encode())
        try:
            for _ in range(4):  # 4 MB of the 60 announced, then a wait for the answer
                sock.sendall(PIECE)
        except OSError:
            pass
        sock.settimeout(3)
        answer = b""
        try:
            while b"\\r\\n\\r\\n" not in answer:
                piece = sock.recv(65536)
                if not piece:
                    break
                answer += piece
        except OSError:
            pass
        statuses.append(answer.split(b" ")[1].decode() if answer.startswith(b"HTTP/") else
                        "none")
    finally:
        sock.close()


def make():
    def agent(user):
        url = urlsplit(os.environ["OPENAI_BASE_URL"])
        before, statuses = _peak_mb(), []
        threads = [threading.Thread(target=_one, args=(url.hostname, url.port,
                                                       url.path + "/chat/completions",
                                                       statuses)) for _ in range(40)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(20)
        with open("flood.json", "w") as out:
            json.dump({"statuses": statuses, "grew_mb": _peak_mb() - before}, out)
        return "flooded"
    return agent
'''


def test_a_flood_of_big_requests_is_refused_in_bounded_memory(
        pytester: pytest.Pytester) -> None:
    """40 connections announce 60 MB each and send 4 of them: the proxy takes what its
    bound on request bytes allows, refuses the rest on their heads, and its process grows
    by far less than the 160 MB sent."""
    pytester.makepyfile(flood=FLOOD)
    pytester.syspathinsert()
    pytester.makefile(".case.yaml", flood=agent_case("flood", "make", module="flood",
                                                     expect="      text: flooded\n"))
    pytester.makefile(".yaml", **{"__cassettes__/flood/flood": "version: 2\napi: agent\n"
                                  "interactions: []\n"})
    started = time.monotonic()
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    result.assert_outcomes(passed=1)
    seen = json.loads((pytester.path / "flood.json").read_text())
    statuses = seen["statuses"]
    assert len(statuses) == 40
    assert statuses.count("503") >= 36, statuses
    assert seen["grew_mb"] < 100, seen
    assert time.monotonic() - started < 40


# -- item: the reply limits hold through the proxy --------------------------------------


READERS = '''
import os

import httpx2


def make_streamer():
    def agent(user):
        with httpx2.Client(timeout=30) as client:
            with client.stream("POST", os.environ["OPENAI_BASE_URL"] + "/chat/completions",
                               json={"model": "m", "stream": True, "messages": [
                                   {"role": "user", "content": user}]}) as response:
                size = sum(len(piece) for piece in response.iter_bytes())
        return f"read {size}"
    return agent


def make_reader():
    def agent(user):
        with httpx2.Client(timeout=30) as client:
            reply = client.post(os.environ["OPENAI_BASE_URL"] + "/chat/completions",
                                json={"model": "m", "messages": [
                                    {"role": "user", "content": user}]})
        return f"read {len(reply.content)}"
    return agent
'''


@pytest.mark.parametrize(("factory", "hostile", "said"), [
    ("make_streamer", endless_events(per_write=100),
     ("reply too large: stream larger than 1048576 bytes (--toolbench-max-reply-bytes)"
     " from http://127.0.0.1:*/v1/chat/completions")),
    ("make_reader", huge_reply(8 * MIB),
     ("reply too large: body larger than 1048576 bytes (--toolbench-max-reply-bytes)"
     " from http://127.0.0.1:*/v1/chat/completions")),
], ids=["endless_stream", "big_body"])
def test_a_reply_past_the_size_limit_fails_the_agent_case_and_records_nothing(
        pytester: pytest.Pytester, factory: str, hostile: object, said: str) -> None:
    pytester.makepyfile(readers=READERS)
    pytester.syspathinsert()
    with start_chat_server() as server:
        server.set_default(hostile)  # type: ignore[arg-type]
        pytester.makefile(".case.yaml", big=agent_case("big", factory, server.base_url,
                                                       module="readers"))
        started = time.monotonic()
        result = run(pytester, "--toolbench-record", "--toolbench-max-reply-bytes=1048576",
                     "--toolbench-report=report.json")
        took = time.monotonic() - started
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines([f"*big.case.yaml:*: big: stages[[]0]: {said}*"])
    assert took < 8  # the endless stream goes on for 10 s unless cut
    assert not (pytester.path / "__cassettes__" / "big" / "big.yaml").exists()
    assert (pytester.path / "report.json").stat().st_size < 200_000


def test_a_reply_that_never_ends_is_cut_at_the_deadline_and_records_nothing(
        pytester: pytest.Pytester) -> None:
    """Keep-alive comments without end: the stage's time limit and the reply's deadline
    (both --toolbench-deadline) end it, whichever comes first, and nothing is kept."""
    pytester.makepyfile(readers=READERS)
    pytester.syspathinsert()
    with start_chat_server() as server:
        server.set_default(keep_alive_forever(every_s=0.01, for_s=40))
        pytester.makefile(".case.yaml", slow=agent_case("slow", "make_streamer",
                                                        server.base_url, module="readers"))
        started = time.monotonic()
        result = run(pytester, "--toolbench-record", "--toolbench-deadline=1.5")
        took = time.monotonic() - started
    result.assert_outcomes(failed=1)
    result.stdout.re_match_lines([
        (r".*slow\.case\.yaml:\d+: slow: stages\[0\].*: (deadline exceeded: no complete"
        r" reply within 1\.5 s \(total deadline, --toolbench-deadline\)|the agent did not"
        r" finish within 1\.5 s \(the stage's time limit\))")])
    assert took < 20  # the stream goes on for 40 s unless cut (a loaded machine: ~11 s)
    assert not (pytester.path / "__cassettes__" / "slow" / "slow.yaml").exists()


def test_a_reply_within_the_limit_still_passes_and_is_recorded(
        pytester: pytest.Pytester) -> None:
    pytester.makepyfile(readers=READERS)
    pytester.syspathinsert()
    with start_chat_server() as server:
        server.set_default(sse_reply(chunks_for("fine")))
        pytester.makefile(".case.yaml", ok=agent_case("ok", "make_streamer", server.base_url,
                                                      module="readers"))
        run(pytester, "--toolbench-record", "--toolbench-max-reply-bytes=1048576"
            ).assert_outcomes(passed=1)
    run(pytester, "--toolbench-max-reply-bytes=1048576").assert_outcomes(passed=1)


def test_a_replayed_reply_past_the_size_limit_fails_naming_it(
        pytester: pytest.Pytester) -> None:
    pytester.makepyfile(readers=READERS)
    pytester.syspathinsert()
    body = completion("x" * 300_000)
    with start_chat_server() as server:
        server.set_default(json_reply(body))
        pytester.makefile(".case.yaml", big=agent_case("big", "make_reader", server.base_url,
                                                       module="readers"))
        run(pytester, "--toolbench-record").assert_outcomes(passed=1)
    result = run(pytester, "--toolbench-max-reply-bytes=100000")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines([("*big: stages[[]0]: reply too large: body larger than 100000"
                                 " bytes (--toolbench-max-reply-bytes)*")])


# -- item: one case's traffic is that case's -----------------------------------------------


LEAKER = '''
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx2

NEXT_CASE_RUNS, LATE_ONES_SENT = Path("next-case-runs"), Path("late-ones-sent")
LEFT_RUNNING = []


def _ask(base, text):
    with httpx2.Client(timeout=10) as client:
        return client.post(base + "/chat/completions", json={
            "model": "m", "messages": [{"role": "user", "content": text}]})


def _wait_for(flag):
    until = time.monotonic() + 20
    while not flag.exists() and time.monotonic() < until:
        time.sleep(0.02)


def late(base):
    _wait_for(NEXT_CASE_RUNS)  # this case is over; the next one is running
    for number in range(6):
        try:
            _ask(base, f"late {number}")
        except Exception:
            pass
    LATE_ONES_SENT.touch()


def _leaking(leave):
    def agent(user):
        NEXT_CASE_RUNS.unlink(missing_ok=True)
        LATE_ONES_SENT.unlink(missing_ok=True)
        leave(os.environ["OPENAI_BASE_URL"])  # the URL of this case's run
        return _ask(os.environ["OPENAI_BASE_URL"], user).json()["choices"][0]["message"][
            "content"]
    return agent


def make_thread_leaker():
    return _leaking(lambda base: threading.Thread(target=late, args=(base,),
                                                  daemon=True).start())


def make_process_leaker():
    return _leaking(lambda base: LEFT_RUNNING.append(subprocess.Popen(
        [sys.executable, "-c", "import sys, leaker; leaker.late(sys.argv[1])", base],
        start_new_session=True)))


def make_patient():
    def agent(user):
        NEXT_CASE_RUNS.touch()
        _wait_for(LATE_ONES_SENT)  # the leaker's thread or process sends meanwhile
        for process in LEFT_RUNNING:  # reaped, so none outlives this session's reports
            process.wait(10)
        reply = _ask(os.environ["OPENAI_BASE_URL"], user)
        return reply.json()["choices"][0]["message"]["content"]
    return agent
'''


@pytest.mark.parametrize("leaker", ["make_thread_leaker", "make_process_leaker"],
                         ids=["daemon_thread", "detached_process"])
def test_a_request_after_its_case_ended_is_refused_and_never_counted_in_the_next(
        pytester: pytest.Pytester, leaker: str) -> None:
    pytester.makepyfile(leaker=LEAKER)
    pytester.syspathinsert()
    with start_chat_server() as server:
        server.set_handler(lambda request: json_reply(completion("fine")))
        pytester.makefile(".case.yaml", leak=(
            agent_case("leaker", leaker, server.base_url, module="leaker",
                       expect="      requests: 1\n")
            + "---\n" + agent_case("after", "make_patient", server.base_url, module="leaker",
                                   expect="      requests: 1\n      text: fine\n")))
        recorded = run(pytester, "--toolbench-record")
        sent = [request.json()["messages"][0]["content"] for request in server.requests]
    recorded.assert_outcomes(passed=2)
    assert sent == ["hi", "hi"]  # the late ones never went upstream
    kept = yaml.safe_load((pytester.path / "__cassettes__" / "leak" / "after.yaml"
                           ).read_text())
    assert len(kept["interactions"]) == 1
    recorded.stdout.fnmatch_lines([
        ("*late requests: 6 sent by the agent of *leak.case.yaml::leaker after its case"
        " ended, refused (403)*")])

    replayed = run(pytester)
    replayed.assert_outcomes(passed=2)
    replayed.stdout.fnmatch_lines([
        ("*late requests: 6 sent by the agent of *leak.case.yaml::leaker after its case"
        " ended, refused (403)*")])
