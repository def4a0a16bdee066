"""A reply's bytes as an injected fault has them arrive: held back, slowed, cut or changed.

Both places that inject faults into replies use it: the agent proxy (``agent_faults.py``,
toward an agent) and the plugin's own client (``client.py``, toward a case of its loop).
Either hands over the reply's bytes as they come, live or replayed, and forwards what
``reshaped`` yields; ``CutShort`` says the connection closes there, the rest unsent.

A stream is counted and spaced an SSE event at a time (a live server's network chunks may
hold several events, or part of one; a replay's, all of them); a whole body is one piece.
A fault that neither counts, spaces nor changes the events (a ``stall_s``, a ``delay`` of
the first byte only) passes the pieces on as they come, unsplit, as a reply without a fault
is passed on: the same bytes, without the splitting's cost.
``status`` and ``disconnect`` faults are not here: the request they select is answered by
the injector itself and never reaches the service.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Final

from ..faults import Fault
from .mutate import mutate_reply

RESHAPING: Final = frozenset({"stall_s", "cut", "delay", "mutate"})
"""The kinds that act on the real reply (live or replayed) rather than stand in for it."""


class CutShort(Exception):
    """The fault closes the connection here: the rest of the reply is never sent."""

    def __init__(self, sent: int, streamed: bool) -> None:
        self.sent = sent
        self.streamed = streamed
        super().__init__(self.describe())

    def describe(self) -> str:
        """What the receiver got before the close, in words."""
        if not self.streamed:
            return "the connection was closed halfway through the body"
        events = f"{self.sent} event{'' if self.sent == 1 else 's'}"
        return f"the connection was closed after {events} of the stream, with no terminator"


def held_s(fault: Fault) -> float:
    """How long the reply's first byte is held back (a ``stall_s``, or a ``delay``'s
    ``first_byte_ms``)."""
    if fault.stall_s is not None:
        return fault.stall_s
    return fault.delay.first_byte_ms / 1000 if fault.delay is not None else 0.0


def changes_length(fault: Fault) -> bool:
    """Whether the bytes delivered differ from the reply's (its ``Content-Length`` and
    ``Content-Encoding`` no longer hold)."""
    return fault.mutate is not None or fault.cut is not None


async def reshaped(pieces: AsyncIterator[bytes], fault: Fault, streamed: bool,
                   api: str | None, sleep: Callable[[float], Awaitable[None]] = asyncio.sleep
                   ) -> AsyncIterator[bytes]:
    """``pieces`` (the reply's bytes, any chunking, ``Content-Encoding`` undone) as
    ``fault`` has them delivered; raises CutShort where a ``cut`` closes the connection.
    The first byte's hold (``held_s``) is the caller's: it comes before the reply's head.
    ``sleep`` holds back each further chunk of a ``delay``."""
    items = _events(pieces) if streamed and _by_event(fault) else pieces
    if fault.mutate is not None:
        whole = [piece async for piece in items]
        items = _listed(mutate_reply(api, fault.mutate, whole, streamed))
    elif fault.cut is not None and not streamed:
        body = b"".join([piece async for piece in items])
        yield body[:len(body) // 2]
        raise CutShort(0, streamed=False)
    sent = 0
    async for piece in items:
        if fault.cut is not None and sent >= fault.cut.after_chunks:
            raise CutShort(sent, streamed=True)
        if fault.delay is not None and fault.delay.chunk_ms and sent:
            await sleep(fault.delay.chunk_ms / 1000)
        yield piece
        sent += 1
    if fault.cut is not None:  # fewer events than it lets through: the close still comes early
        raise CutShort(sent, streamed)


def _by_event(fault: Fault) -> bool:
    """Whether ``fault`` acts on a stream an event at a time: a ``cut`` counts the events, a
    ``delay``'s ``chunk_ms`` spaces them, a ``mutate`` changes them."""
    spaced = fault.delay is not None and bool(fault.delay.chunk_ms)
    return spaced or fault.cut is not None or fault.mutate is not None


async def _events(pieces: AsyncIterator[bytes]) -> AsyncIterator[bytes]:
    """A stream's bytes, one SSE event a piece: what ``cut`` counts and ``delay`` spaces."""
    buffer = b""
    async for chunk in pieces:
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
