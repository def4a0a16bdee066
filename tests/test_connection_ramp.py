"""Live cases open their connections to one server a few milliseconds apart, so a server
with a short listen backlog (``socketserver``'s 5) takes them all at once instead of
dropping the SYNs past its accept queue, which the client would only send again after
the kernel's 1 s retransmission timeout."""

from __future__ import annotations

import asyncio
import http.server
import json
import threading
import time
from collections.abc import Iterator

import pytest
from support.chat_server import completion

from pytest_toolbench.transport.ramp import ConnectionRamp

CASES = 16
REPLY_DELAY_S = 0.2
LATE_S = 0.8
"""A request this long after the first came back through a dropped SYN (resent after
1 s), not through the start-up of its case."""


class _Server(http.server.ThreadingHTTPServer):
    """The standard library's threading server as it is: HTTP/1.1 keep-alive, a thread
    per connection, a listen backlog of ``request_queue_size`` = 5."""

    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.arrivals: list[float] = []
        self.lock = threading.Lock()


class _Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _Server

    def do_POST(self) -> None:
        with self.server.lock:
            self.server.arrivals.append(time.monotonic())
        self.rfile.read(int(self.headers["content-length"]))
        time.sleep(REPLY_DELAY_S)
        data = json.dumps(completion(tool_calls=[("get_weather", {"city": "Paris"})])).encode()
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, format: str, *args: object) -> None:
        """Quiet."""


@pytest.fixture
def backlog_server() -> Iterator[_Server]:
    server = _Server()
    assert server.request_queue_size == 5
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()


def test_connections_opened_at_once_are_all_taken_by_a_short_backlog(
    pytester: pytest.Pytester, backlog_server: _Server
) -> None:
    base_url = f"http://127.0.0.1:{backlog_server.server_address[1]}/v1"
    documents = [f"""name: case{number}
endpoint: {{base_url: '{base_url}'}}
tools:
  - name: get_weather
    parameters: {{type: object, properties: {{city: {{type: string}}}}}}
stages:
  - name: ask
    user: "Weather in Paris?"
    expect:
      tool_calls: [{{name: get_weather, arguments: {{city: Paris}}}}]
""" for number in range(CASES)]
    pytester.makefile(".case.yaml", weather="---\n".join(documents))
    # Without the ramp, 16 connections at once overflow a backlog of 5 in every run. With
    # it, a run beside a busy test worker can still find the server's accept thread
    # descheduled for longer than the ramp's spacing: one more run tells that hiccup from
    # a missing ramp, which would fail both.
    late: list[list[float]] = []
    for _attempt in range(2):
        backlog_server.arrivals.clear()
        result = pytester.runpytest_subprocess(
            "--toolbench-live", f"--toolbench-concurrency={CASES}", "-p", "no:cacheprovider")
        result.assert_outcomes(passed=CASES)
        arrivals = backlog_server.arrivals
        assert len(arrivals) == CASES
        after_first = sorted(round(at - arrivals[0], 2) for at in arrivals)
        if after_first[-1] < LATE_S:
            return
        late.append(after_first)
    raise AssertionError(f"requests arrived {late} s after the first, in both runs: a"
                         " connection waited for a SYN sent again")


class FakeTime:
    """A clock that only moves when the ramp sleeps; the moments requests went out."""

    def __init__(self) -> None:
        self.now = 0.0
        self.sleeps: list[float] = []
        self.sent: list[float] = []

    def clock(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds
        await asyncio.sleep(0)

    def ramp(self) -> ConnectionRamp:
        return ConnectionRamp(0.002, keepalive_expiry_s=5.0, clock=self.clock, sleep=self.sleep)

    async def send(self, ramp: ConnectionRamp, count: int) -> None:
        """``count`` requests at once, each counted out once all have gone."""
        async def one() -> None:
            await ramp.enter()
            self.sent.append(self.now)

        await asyncio.gather(*(one() for _ in range(count)))
        for _ in range(count):
            ramp.leave()


def test_new_connections_go_out_spaced_and_reused_ones_at_once() -> None:
    fake = FakeTime()
    ramp = fake.ramp()

    async def run() -> None:
        await fake.send(ramp, 16)
        first = list(fake.sent)
        fake.sent.clear()
        await fake.send(ramp, 16)  # the 16 connections are in the pool now
        assert fake.sent == [first[-1]] * 16
        await fake.send(ramp, 18)  # two more than ever: those two wait
        assert fake.sent[-1] == pytest.approx(first[-1] + 0.004)

    asyncio.run(run())
    assert ramp.opened == 18 and ramp.in_flight == 0


def test_the_first_requests_after_16_at_once_are_2_ms_apart() -> None:
    fake = FakeTime()
    ramp = fake.ramp()
    asyncio.run(fake.send(ramp, 16))
    assert fake.sent == pytest.approx([0.002 * n for n in range(16)])


def test_the_count_starts_again_once_the_pool_let_its_connections_expire() -> None:
    fake = FakeTime()
    ramp = fake.ramp()

    async def run() -> None:
        await fake.send(ramp, 4)
        fake.now += 4.9
        await fake.send(ramp, 4)
        assert ramp.opened == 4  # kept alive: reused
        fake.now += 5.0
        await fake.send(ramp, 4)
        assert ramp.opened == 8  # expired: opened again, spaced

    asyncio.run(run())


def test_a_request_cancelled_while_waiting_is_counted_out() -> None:
    fake = FakeTime()

    async def run() -> None:
        ramp = ConnectionRamp(0.002, clock=fake.clock, sleep=asyncio.sleep)
        await ramp.enter()
        waiting = asyncio.ensure_future(ramp.enter())
        await asyncio.sleep(0)
        waiting.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiting
        assert ramp.in_flight == 1 and ramp.opened == 1

    asyncio.run(run())
