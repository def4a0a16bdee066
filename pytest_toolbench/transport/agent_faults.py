"""Faults injected into an agent's exchanges, at the proxy: the one place its requests are
answered.

A tap asks the stage's ``FaultPlan`` about each request before it forwards or replays it.
A ``status`` or ``disconnect`` fault the tap answers itself (``Tap._answer_fault``): the
request reaches neither the service nor the cassette. Any other fault wraps the real
reply, live or replayed (``faulted``): held back, slowed, cut, or changed in its API's
own shape. A
reply the agent did not get whole (cut, or abandoned during a stall) is not kept by a
recording and uses up no recorded exchange in replay, so a case recorded without faults
replays with them: the agent's retry sends the same body again and is answered from it.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import AsyncIterator
from typing import Final

from ..faults import Injection
from .agent_tap import Exchange
from .mutate import mutate_reply
from .proxy import HangUp, ProxyResponse

ANSWERED: Final = frozenset({"status", "disconnect"})
"""The kinds the plugin answers itself: such a request is never sent upstream or
matched against a cassette."""


async def faulted(response: ProxyResponse, injection: Injection, exchange: Exchange,
                  api: str | None) -> ProxyResponse:
    """``response`` (the real reply, live or replayed) as the fault has the agent get it:
    after its stall or first-byte delay, then its chunks slowed, cut or changed."""
    fault = injection.fault
    exchange.injection, exchange.delivered = injection, False
    wait_s = fault.stall_s or (fault.delay.first_byte_ms / 1000 if fault.delay else 0.0)
    if wait_s:
        await asyncio.sleep(wait_s)
    content_type = next((value for name, value in response.headers
                         if name.lower() == "content-type"), "")
    streamed = content_type.startswith("text/event-stream")
    chunks = _chunks(response.chunks, injection, exchange, streamed, api)
    headers = response.headers
    if fault.mutate is not None or fault.cut is not None:  # the length changes
        headers = [(name, value) for name, value in headers
                   if name.lower() not in ("content-length", "content-encoding")]
    return dataclasses.replace(response, headers=headers, chunks=chunks)


async def _chunks(source: AsyncIterator[bytes] | bytes, injection: Injection,
                  exchange: Exchange, streamed: bool, api: str | None) -> AsyncIterator[bytes]:
    fault = injection.fault
    pieces = _events(source) if streamed else _whole(source)
    try:
        if fault.mutate is not None:
            whole = [piece async for piece in pieces]
            pieces = _listed(mutate_reply(api, fault.mutate, whole, streamed))
        elif fault.cut is not None and not streamed:
            body = b"".join([piece async for piece in pieces])
            yield body[:len(body) // 2]
            raise HangUp
        sent = 0
        async for piece in pieces:
            if fault.cut is not None and sent >= fault.cut.after_chunks:
                raise HangUp
            if fault.delay is not None and fault.delay.chunk_ms and sent:
                await asyncio.sleep(fault.delay.chunk_ms / 1000)
            yield piece
            sent += 1
        if fault.cut is not None:
            raise HangUp  # fewer chunks than it lets through: the close still comes early
        exchange.delivered = True
    finally:
        if not isinstance(source, bytes):
            await source.aclose()  # type: ignore[attr-defined]


async def _whole(source: AsyncIterator[bytes] | bytes) -> AsyncIterator[bytes]:
    if isinstance(source, bytes):
        yield source
        return
    async for chunk in source:
        yield chunk


async def _events(source: AsyncIterator[bytes] | bytes) -> AsyncIterator[bytes]:
    """A stream's bytes, one SSE event a piece (a live server's chunks may hold several,
    or part of one): what ``cut`` counts and ``delay`` spaces."""
    buffer = b""
    async for chunk in _whole(source):
        buffer += chunk
        while True:
            ends = [found for found in (buffer.find(b"\n\n"), buffer.find(b"\r\n\r\n"))
                    if found >= 0]
            if not ends:
                break
            end = min(ends)
            end += 4 if buffer.startswith(b"\r\n\r\n", end) else 2
            yield buffer[:end]
            buffer = buffer[end:]
    if buffer:
        yield buffer


async def _listed(pieces: list[bytes]) -> AsyncIterator[bytes]:
    for piece in pieces:
        yield piece
