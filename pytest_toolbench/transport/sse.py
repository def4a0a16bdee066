"""Incremental Server-Sent Events decoding, per the WHATWG HTML "server-sent events" spec.

Bytes arrive in arbitrary pieces; :class:`SSEDecoder` turns them into :class:`SSEEvent`
objects as soon as each event's terminating blank line is seen. It works on whole lines of
decoded text (``str.find`` / ``str.split``), never character by character, because a
benchmark pushes tens of megabytes of tool-call deltas through it.
"""

from __future__ import annotations

import codecs
from typing import NamedTuple

__all__ = ["DEFAULT_MAX_EVENT_CHARS", "SSEDecoder", "SSEEvent", "SSETooLarge"]

DEFAULT_MAX_EVENT_CHARS = 16 * 1024 * 1024
"""Far above any real chat-completions chunk; below it, a server cannot make one line, or
one event of many ``data`` lines, grow until memory runs out."""


class SSETooLarge(ValueError):
    """A line, or the data of one event, is longer than the decoder's limit."""


class SSEEvent(NamedTuple):
    """One dispatched event (a named tuple: made once per event, at 100k events a stream,
    it costs a fifth of a frozen dataclass)."""

    data: str
    """The event's ``data`` lines joined with ``"\\n"``."""
    event: str = "message"
    """The ``event`` field, ``"message"`` when none was given."""
    id: str | None = None
    """The last event ID at dispatch time (it persists across events, as the spec says)."""


class SSEDecoder:
    """Incremental decoder per the WHATWG SSE spec.

    Feed it bytes with :meth:`feed` at any boundaries, then call :meth:`close` at the end
    of the stream. Attributes a caller may read:

    - ``comments``: number of ``:`` comment lines seen (keep-alives);
    - ``retry``: the last valid ``retry`` field, in ms, or ``None``;
    - ``truncated``: set by :meth:`close` when the stream ended inside an event, i.e.
      data was pending without the blank line that dispatches it. The spec discards such
      an event; the flag lets callers report it.
    - ``cut``: set with ``truncated``: the lines of that event as they came (a last line
      perhaps half received), so a recording can keep them and a replay end the same way.

    A line, or an event's data, longer than ``max_event_chars`` raises :class:`SSETooLarge`.
    """

    def __init__(self, max_event_chars: int = DEFAULT_MAX_EVENT_CHARS) -> None:
        self.max_event_chars = max_event_chars
        # "utf-8-sig" strips a BOM at stream start only (even one split across chunks).
        self._decoder = codecs.getincrementaldecoder("utf-8-sig")(errors="replace")
        self._tail: list[str] = []  # pieces of the current, not yet terminated line
        self._tail_chars = 0
        self._skip_lf = False  # the last chunk ended in CR: a leading LF completes a CRLF
        self._data: list[str] = []
        self._data_chars = 0  # the joined length of ``_data``: its lines plus the breaks
        self._event_type = ""
        self._last_id = ""
        self.comments = 0
        self.retry: int | None = None
        self.truncated = False
        self.cut: str | None = None

    def feed(self, chunk: bytes) -> list[SSEEvent]:
        """Decode ``chunk`` and return the events it completes."""
        return self._feed_text(self._decoder.decode(chunk))

    def close(self) -> list[SSEEvent]:
        """End of stream: flush the decoder; an unterminated event is discarded, except the
        end marker ``data: [DONE]`` lacking only its blank line (or its line break too):
        servers that end so did end the stream as they should."""
        events = self._feed_text(self._decoder.decode(b"", final=True))
        raw_tail = "".join(self._tail)
        tail = raw_tail.strip()
        if tail.startswith("data:") and tail[5:].strip() == "[DONE]":
            self._process_lines([tail])
            tail = raw_tail = ""
        if [line.strip() for line in self._data] == ["[DONE]"]:
            events.extend(self._process_lines([""]))  # the blank line that never came
        # A half-received line counts unless it is a comment (a keep-alive cut short).
        self.truncated = bool(self._data) or bool(tail and not tail.startswith(":"))
        if self.truncated:
            lines = [f"event: {self._event_type}"] if self._event_type else []
            lines += [f"data: {line}" for line in self._data]
            self.cut = "\n".join([*lines, raw_tail] if raw_tail else lines)
        self._tail.clear()
        self._tail_chars = 0
        self._clear_data()
        self._event_type = ""
        return events

    def _feed_text(self, text: str) -> list[SSEEvent]:
        if self._skip_lf and text:
            self._skip_lf = False
            if text[0] == "\n":
                text = text[1:]
        if "\r" in text:
            # A CR at the very end may be the first half of a CRLF split across chunks:
            # treat it as a line break now and drop the LF if the next chunk starts with one.
            self._skip_lf = text[-1] == "\r"
            text = text.replace("\r\n", "\n").replace("\r", "\n")
        last_break = text.rfind("\n")
        if last_break < 0:
            if text:
                self._tail.append(text)
                self._tail_chars += len(text)
                self._check_size(self._tail_chars, "line")
            return []
        # Only the unterminated remainder is kept: the tail never holds complete lines.
        self._tail.append(text[:last_break])
        complete = "".join(self._tail)
        self._tail = [text[last_break + 1 :]] if last_break + 1 < len(text) else []
        self._tail_chars = len(text) - last_break - 1
        events = self._process_lines(complete.split("\n"))
        self._check_size(self._tail_chars, "line")
        return events

    def _process_lines(self, lines: list[str]) -> list[SSEEvent]:
        # The hot path: a stream is data lines, event lines (the Messages and Responses
        # APIs name every event) and the blank lines that dispatch them, read here without
        # a call per line.
        events: list[SSEEvent] = []
        data = self._data  # cleared in place, never replaced
        for line in lines:
            if not line:
                if data:
                    events.append(self._dispatch())
                else:
                    self._event_type = ""
            elif line.startswith("data:"):
                value = line[6:] if line.startswith(" ", 5) else line[5:]
                data.append(value)
                self._data_chars += len(value) + 1
                if self._data_chars > self.max_event_chars:
                    self._check_size(self._data_chars - 1, "event")
            elif line.startswith("event:"):
                self._event_type = line[7:] if line.startswith(" ", 6) else line[6:]
            elif line[0] == ":":
                self.comments += 1
            else:
                self._process_field(line)
        return events

    def _process_field(self, line: str) -> None:
        name, colon, value = line.partition(":")
        if colon and value.startswith(" "):
            value = value[1:]
        if name == "data":
            self._add_data(value)
        elif name == "event":
            self._event_type = value
        elif name == "id" and "\0" not in value:  # the spec ignores IDs containing NULL
            self._last_id = value
        elif name == "retry" and value.isascii() and value.isdigit():
            self.retry = int(value)
        # Any other field (or a bad id / retry value) is ignored, as the spec requires.

    def _add_data(self, value: str) -> None:
        self._data.append(value)
        self._data_chars += len(value) + 1
        if self._data_chars > self.max_event_chars:
            self._check_size(self._data_chars - 1, "event")

    def _check_size(self, chars: int, what: str) -> None:
        if chars > self.max_event_chars:
            raise SSETooLarge(f"an SSE {what} longer than {self.max_event_chars} characters")

    def _clear_data(self) -> None:
        self._data.clear()
        self._data_chars = 0

    def _dispatch(self) -> SSEEvent:
        """The event whose data lines are in (there is at least one)."""
        lines = self._data
        data = lines[0] if len(lines) == 1 else "\n".join(lines)
        lines.clear()
        self._data_chars = 0
        event = _new_event(SSEEvent, (data, self._event_type or "message", self._last_id or None))
        self._event_type = ""
        return event


_new_event = tuple.__new__
"""``SSEEvent(data, event, id)`` without the keyword handling of a named tuple's
constructor."""
