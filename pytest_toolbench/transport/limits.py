"""What one reply may cost: its total time, its size, its number of stream events.

The timeout between bytes alone does not bound a reply: a server can trickle a byte a
second, send keep-alive comments or data events forever, or compress gigabytes into a few
kilobytes. :class:`ReplyLimits` bounds each reply whole, and :class:`BoundedDecoder` undoes
``Content-Encoding`` in pieces of at most :data:`PIECE_BYTES`, so a compression bomb is
counted, and refused, before it is held in memory. Whoever reads a reply (the client, the
agent proxy) says a limit it went past in the same words (``too_large``,
``too_many_events``, ``deadline_exceeded``).
"""

from __future__ import annotations

import zlib
from collections.abc import Iterator
from dataclasses import dataclass

from .errors import DeadlineExceeded, ReplyTooLarge

__all__ = [
    "ACCEPT_ENCODING",
    "DEFAULT_MAX_REPLY_BYTES",
    "DEFAULT_MAX_STREAM_EVENTS",
    "BoundedDecoder",
    "DecodingFailed",
    "ReplyLimits",
    "deadline_exceeded",
    "too_large",
    "too_many_events",
]

DEFAULT_DEADLINE_S = 600.0
DEFAULT_MAX_REPLY_BYTES = 64 * 1024 * 1024
DEFAULT_MAX_STREAM_EVENTS = 100_000
"""A reply of 32k tokens streams about 32k events; the cap bounds the per-event records."""
PIECE_BYTES = 64 * 1024
"""The most one decompression step may produce (a 64 KiB gzip chunk can inflate to 64 MiB)."""
ACCEPT_ENCODING = "gzip, deflate"
"""Only what :class:`BoundedDecoder` undoes; other codings a server sends are passed on as
they are, as httpx2 does with codings it does not know."""


@dataclass(frozen=True)
class ReplyLimits:
    """The bounds of one reply, from sending the request to its last byte."""

    deadline_s: float = DEFAULT_DEADLINE_S
    """Total time for one request and its whole reply (the timeout is between bytes)."""
    max_bytes: int = DEFAULT_MAX_REPLY_BYTES
    """Body or stream size, counted after ``Content-Encoding`` is undone."""
    max_events: int = DEFAULT_MAX_STREAM_EVENTS
    """SSE events in one streamed reply."""


def too_large(what: str, limit: int, where: str, encoding: str = "") -> ReplyTooLarge:
    """A ``what`` (``body``, ``stream``) from ``where`` past ``limit`` bytes, counted once
    its ``encoding`` was undone."""
    decoded = f" once {encoding}-decoded" if encoding else ""
    return ReplyTooLarge(f"{what} larger than {limit} bytes{decoded}"
                         f" (--toolbench-max-reply-bytes) from {where}")


def too_many_events(limit: int, where: str) -> ReplyTooLarge:
    return ReplyTooLarge(f"stream of more than {limit} events (--toolbench-max-stream-events)"
                         f" from {where}")


def deadline_exceeded(deadline_s: float, where: str) -> DeadlineExceeded:
    return DeadlineExceeded(f"no complete reply within {deadline_s:g} s (total deadline,"
                            f" --toolbench-deadline) from {where}")


class DecodingFailed(ValueError):
    """The body does not decode with the ``Content-Encoding`` its server declared."""


class BoundedDecoder:
    """Undoes ``Content-Encoding: gzip`` / ``deflate`` (in any chain), piece by piece."""

    def __init__(self, content_encoding: str) -> None:
        codings = [c.strip().lower() for c in content_encoding.split(",")]
        # Codings are listed in the order they were applied: undo them last first.
        self._stages = [_Inflater(c) for c in reversed(codings) if c in _WBITS]

    def decode(self, data: bytes) -> Iterator[bytes]:
        """The decoded bytes of ``data``, in pieces of at most :data:`PIECE_BYTES`."""
        yield from _through(self._stages, data)

    def flush(self) -> Iterator[bytes]:
        """What the decompressors still hold at the end of the body."""
        for index, stage in enumerate(self._stages):
            yield from _through(self._stages[index + 1 :], stage.flush())


class _Inflater:
    def __init__(self, coding: str) -> None:
        self._coding = coding
        self._wbits = _WBITS[coding]
        self._zlib = zlib.decompressobj(self._wbits)
        self._started = False

    def feed(self, data: bytes) -> Iterator[bytes]:
        try:
            piece = self._first(data) if not self._started else self._zlib.decompress(
                data, PIECE_BYTES)
            while True:
                if piece:
                    yield piece
                if not self._zlib.unconsumed_tail:
                    return
                piece = self._zlib.decompress(self._zlib.unconsumed_tail, PIECE_BYTES)
        except zlib.error as exc:
            raise DecodingFailed(f"the body is not valid {self._coding} ({exc})") from None

    def _first(self, data: bytes) -> bytes:
        # "deflate" is meant to be zlib-wrapped, but some servers send raw deflate: try
        # the wrapper first and fall back, as browsers and httpx2 do.
        self._started = True
        try:
            return self._zlib.decompress(data, PIECE_BYTES)
        except zlib.error:
            if self._coding != "deflate":
                raise
            self._zlib = zlib.decompressobj(-zlib.MAX_WBITS)
            return self._zlib.decompress(data, PIECE_BYTES)

    def flush(self) -> bytes:
        # Everything fed was already drained to the last piece; what is left is small.
        try:
            return self._zlib.flush()
        except zlib.error as exc:
            raise DecodingFailed(f"the body is not valid {self._coding} ({exc})") from None


_WBITS = {"gzip": zlib.MAX_WBITS | 16, "x-gzip": zlib.MAX_WBITS | 16, "deflate": zlib.MAX_WBITS}


def _through(stages: list[_Inflater], data: bytes) -> Iterator[bytes]:
    if not stages:
        if data:
            yield data
        return
    for piece in stages[0].feed(data):
        yield from _through(stages[1:], piece)
