"""Replies of a hostile chat-completions server, played by the loopback ``ChatServer``.

Each is a reply kind ``ChatServer`` plays like its own (it calls ``send(writer)``): a
response trickled a byte at a time, keep-alive comments or data events that never end,
and a compression bomb. None ends by itself the way a normal reply does, so each stops
after ``for_s`` seconds (or ``max_bytes``): a client without defences makes its test fail,
slowly, instead of hanging it.

    chat_server.set_default(keep_alive_forever(every_s=0.2))
"""

from __future__ import annotations

import asyncio
import json
import zlib
from collections.abc import Mapping
from dataclasses import dataclass, field

from .chat_server import (
    JsonReply,
    SSEReply,
    _chunk,
    _head,
    _write,
    chunks_for,
    completion,
    json_reply,
    sse_reply,
)

__all__ = [
    "CompressionBomb",
    "EndlessStream",
    "TrickleReply",
    "endless_events",
    "gzip_bomb",
    "keep_alive_forever",
    "trickle",
]

BOUND_S = 10.0
"""How long a hostile reply goes on at most: past any limit a test sets."""
SSE_HEADERS = {"content-type": "text/event-stream", "cache-control": "no-cache",
               "transfer-encoding": "chunked"}
CONTENT_CHUNK = json.dumps(chunks_for("xx")[1]).encode()
"""One ``chat.completion.chunk`` with a content delta, as the data of each endless event."""


@dataclass(frozen=True)
class TrickleReply:
    """A normal response sent one byte every ``every_s``, from its status line on, or
    (``after_headers``) from its body on."""

    of: JsonReply | SSEReply
    every_s: float
    after_headers: bool = False
    for_s: float = BOUND_S
    delay_s: float = 0.0

    async def send(self, writer: asyncio.StreamWriter) -> bool:
        whole = self.of.render()
        start = whole.index(b"\r\n\r\n") + 4 if self.after_headers else 0
        await _write(writer, whole[:start])
        stop = asyncio.get_running_loop().time() + self.for_s
        for index in range(start, len(whole)):
            if asyncio.get_running_loop().time() > stop:
                return False
            await _write(writer, whole[index : index + 1])
            await asyncio.sleep(self.every_s)
        return True


@dataclass(frozen=True)
class EndlessStream:
    """An SSE stream that never ends: ``piece`` written every ``every_s`` (0: as fast as
    the client reads), until ``for_s`` or ``max_bytes`` run out."""

    piece: bytes
    every_s: float
    for_s: float = BOUND_S
    max_bytes: int = 256 * 1024 * 1024
    delay_s: float = 0.0

    async def send(self, writer: asyncio.StreamWriter) -> bool:
        await _write(writer, _head(200, SSE_HEADERS))
        stop, sent = asyncio.get_running_loop().time() + self.for_s, 0
        while asyncio.get_running_loop().time() < stop and sent < self.max_bytes:
            await _write(writer, _chunk(self.piece))
            sent += len(self.piece)
            await asyncio.sleep(self.every_s)
        return False


@dataclass(frozen=True)
class CompressionBomb:
    """A body declared ``Content-Encoding: gzip`` that inflates to ``inflated_bytes`` of
    ``unit`` repeated, at about 300 to 1; ``segments_per_write`` MiB leave in each write."""

    unit: bytes
    inflated_bytes: int
    content_type: str = "text/event-stream"
    segments_per_write: int = 64
    delay_s: float = 0.0
    headers: Mapping[str, str] = field(default_factory=dict)

    async def send(self, writer: asyncio.StreamWriter) -> bool:
        header, segment, segment_bytes = _gzip_segment(self.unit)
        head = {**SSE_HEADERS, "content-type": self.content_type, "content-encoding": "gzip"}
        await _write(writer, _head(200, {**head, **self.headers}))
        await _write(writer, _chunk(header))
        for _ in range(0, self.inflated_bytes, segment_bytes * self.segments_per_write):
            await _write(writer, _chunk(segment * self.segments_per_write))
        # No gzip trailer: a client that got this far has already held it all.
        await _write(writer, b"0\r\n\r\n")
        return False


def _gzip_segment(unit: bytes) -> tuple[bytes, bytes, int]:
    """A gzip header, and a deflate segment inflating to about 1 MiB of ``unit``.

    A full flush ends the segment on a byte boundary with no reference to what came
    before, so the segment repeated N times is valid deflate data for N times its bytes:
    the server makes gigabytes without compressing them.
    """
    block = unit * max(1, (1024 * 1024) // len(unit))
    compressor = zlib.compressobj(9, zlib.DEFLATED, zlib.MAX_WBITS | 16)
    compressed = compressor.compress(block) + compressor.flush(zlib.Z_FULL_FLUSH)
    return compressed[:10], compressed[10:], len(block)


def trickle(every_s: float, *, stream: bool = False, after_headers: bool = False,
            for_s: float = BOUND_S) -> TrickleReply:
    """A small completion (or stream), one byte every ``every_s``."""
    of = sse_reply(chunks_for("slowly")) if stream else json_reply(completion("slowly"))
    return TrickleReply(of, every_s, after_headers, for_s)


def keep_alive_forever(every_s: float, for_s: float = BOUND_S) -> EndlessStream:
    """Headers, then ``: ping`` comments and nothing else."""
    return EndlessStream(b": ping\n\n", every_s, for_s)


def endless_events(every_s: float = 0.0, per_write: int = 1, for_s: float = BOUND_S,
                   max_bytes: int = 256 * 1024 * 1024) -> EndlessStream:
    """Content-delta data events, ``per_write`` at a time, never a finish or ``[DONE]``."""
    event = b"data: " + CONTENT_CHUNK + b"\n\n"
    return EndlessStream(event * per_write, every_s, for_s, max_bytes)


def gzip_bomb(inflated_bytes: int, *, stream: bool = True,
              unit: bytes | None = None) -> CompressionBomb:
    """A gzip body inflating to ``inflated_bytes``: SSE data events, or a JSON text."""
    if stream:
        return CompressionBomb(unit or b"data: " + CONTENT_CHUNK + b"\n\n", inflated_bytes)
    return CompressionBomb(unit or b" ", inflated_bytes, content_type="application/json")

