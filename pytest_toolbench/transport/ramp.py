"""New connections to one endpoint opened a few milliseconds apart, not all at once.

A server accepts connections from a queue whose length its ``listen`` call set: Python's
``socketserver`` (``http.server``'s servers, and many a test or local model server built
on them) asks for 5. Past that, Linux drops the SYN, and the client sends it again only
after the 1 s retransmission timeout: a request that would take 0.2 s takes 1.2 s. Cases
started together (``--toolbench-concurrency``) each need a connection of their own at
the start of a run, so a plain loopback server with 16 cases at once lost a second on
every run, whatever it could serve.

``ConnectionRamp`` spaces those connections: a request that needs a new connection, that
is one with more requests in flight to the endpoint than have ever been in flight before
(the pool has no idle connection for it), waits until ``CONNECTION_RAMP_S`` has passed
since the previous new connection was started. A request that can reuse a kept-alive
connection never waits, so the ramp costs a run (N - 1) x ``CONNECTION_RAMP_S`` once, at
its start: 30 ms at 16 cases. ``ramped_transport`` puts it in front of httpx2's transport
through httpx2's public transport API; only the live network has one, never a replay.

It counts requests, not connections: httpx2 does not say whether a request found an idle
connection, and a wrapper around the transport cannot see the pool. The count is exact
while the server keeps connections alive. Connections it closes (``Connection: close``,
its own idle timeout) are opened anew unpaced, one at a time as requests come, which is
not the burst the ramp is for; once the pool has stood idle for its keep-alive expiry,
when httpx2 has closed every connection, the count starts again from none.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import cast

import httpx2

from .tls import shared_ssl_context

CONNECTION_RAMP_S = 0.002
"""The least time between two new connections to one endpoint. The listen queue of 5
then holds what arrives in 10-12 ms: a Python server's accepting thread may wait up to
its interpreter's switch interval (5 ms) for the GIL while others run, and a process on a
busy machine a few milliseconds for a core. Long enough for those, short enough that 16
connections take 30 ms, against the 1 s a dropped SYN costs."""

Clock = Callable[[], float]
Sleep = Callable[[float], Awaitable[None]]


class ConnectionRamp:
    """Paces the requests of one connection pool that need a new connection."""

    def __init__(self, interval_s: float = CONNECTION_RAMP_S, keepalive_expiry_s: float = 5.0,
                 *, clock: Clock = time.monotonic, sleep: Sleep = asyncio.sleep) -> None:
        self.interval_s = interval_s
        self.keepalive_expiry_s = keepalive_expiry_s
        """How long the pool keeps an idle connection (httpx2's ``keepalive_expiry``)."""
        self.in_flight = 0
        """Requests sent and not yet read to the end (or failed): connections in use."""
        self.connections = 0
        """The most requests in flight at once so far, those waiting for their turn
        included: the connections the pool holds, or will once they are through."""
        self.opened = 0
        """Requests that needed a new connection."""
        self._clock = clock
        self._sleep = sleep
        self._last_opened = -math.inf
        self._idle_since = -math.inf
        self._turn = asyncio.Lock()
        """Held by the request waiting for its turn: the waiters open in arrival order."""

    async def enter(self) -> None:
        """Count a request in; if it needs a new connection, return once its turn came."""
        self.in_flight += 1
        if self.in_flight <= self.connections:
            if self.in_flight > 1 or self._clock() - self._idle_since < self.keepalive_expiry_s:
                return
            self.connections = 0  # idle past the expiry: httpx2 has closed every connection
        try:
            await self._wait_turn()
        except BaseException:  # cancelled while waiting: it never went out
            self.in_flight -= 1
            raise

    def leave(self) -> None:
        """Count a request out: its connection is back in the pool, or gone."""
        self.in_flight -= 1
        if self.in_flight == 0:
            self._idle_since = self._clock()

    async def _wait_turn(self) -> None:
        async with self._turn:
            while (wait := self._last_opened + self.interval_s - self._clock()) > 0:
                await self._sleep(wait)
            self._last_opened = self._clock()
        self.opened += 1
        self.connections = max(self.connections, self.in_flight)


class RampedTransport(httpx2.AsyncBaseTransport):
    """httpx2's network transport with a ``ConnectionRamp`` in front: each request counted
    in when it goes out and out when its response is closed (the connection released)."""

    def __init__(self, inner: httpx2.AsyncBaseTransport, ramp: ConnectionRamp) -> None:
        self.inner = inner
        self.ramp = ramp

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        await self.ramp.enter()
        try:
            response = await self.inner.handle_async_request(request)
        except BaseException:
            self.ramp.leave()
            raise
        response.stream = _Released(cast(httpx2.AsyncByteStream, response.stream),
                                    self.ramp.leave)
        return response

    async def aclose(self) -> None:
        await self.inner.aclose()


class _Released(httpx2.AsyncByteStream):
    """A response's body that calls ``release`` once, when it is closed."""

    def __init__(self, stream: httpx2.AsyncByteStream, release: Callable[[], None]) -> None:
        self._stream = stream
        self._release: Callable[[], None] | None = release

    def __aiter__(self) -> AsyncIterator[bytes]:
        return self._stream.__aiter__()  # the body's own chunks, no generator in between

    async def aclose(self) -> None:
        try:
            await self._stream.aclose()
        finally:
            release, self._release = self._release, None
            if release is not None:
                release()


def ramped_transport(limits: httpx2.Limits, *, trust_env: bool = True) -> RampedTransport:
    """The transport ``httpx2.AsyncClient`` would build for ``limits``, ramped, with the
    process's one SSL context (``tls.py``)."""
    expiry = limits.keepalive_expiry
    inner = httpx2.AsyncHTTPTransport(limits=limits, trust_env=trust_env,
                                      verify=shared_ssl_context(trust_env=trust_env))
    return RampedTransport(inner,
                           ConnectionRamp(keepalive_expiry_s=math.inf if expiry is None
                                          else expiry))
