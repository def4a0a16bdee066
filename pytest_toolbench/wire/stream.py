"""What every API's reader shares: the stream accumulator, tool-call assembly, and the
prologue of a whole body.

An API's stream reader is a ``StreamAccumulator`` that says only how its events map onto
it (``read``) and what the reply is once they are in (``complete``); the base owns the rest,
once for every API: counting the events, the time to the first output, the JSON of each
event (``payload``), a stream cut inside an event, the first in-band error, the usage, the
``StreamStats``, and the name every protocol problem starts with (``chat stream: ...``).
Tool calls are put together in ``ToolCallParts``, each call a ``CallPart`` found by the
key the vendor gives it (chat's index or id, a Messages ``tool_use`` block's index, a
Responses item's id; Gemini's calls come whole, keyed by none): its id, name, argument
pieces, the whole value a closing event gives (which wins over the pieces), and when the
arguments completed (pydantic-ai's ``ModelResponsePartsManager`` and openai-python's
``accumulate_event`` are the same idea). The API says only what its events mean.

``read_whole`` is the start of every reader of a whole body: a non-2xx status is the error
its body says, a 2xx body that is not JSON is a problem named as the API's body check.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, ClassVar, Generic, TypeVar

from ..records import Reply, StreamStats, ToolCall
from .base import (
    JSON_ERRORS,
    Event,
    arguments_json,
    error_kind,
    error_message,
    http_error,
    loads_event,
    read_body_json,
    snippet,
    stream_error,
)

__all__ = ["CallPart", "StreamAccumulator", "ToolCallParts", "read_whole", "reported_model"]

CUT = "cut: the stream ended inside an event (no blank line after its last data line)"


def read_whole(where: str, status: int, body: bytes | str, content_type: str,
               said: str = "the response body") -> tuple[Reply, Any]:
    """A whole response's reply so far and its JSON: a non-2xx status sets the error its
    body says (whatever shape it has), a 2xx body that is not JSON is the problem
    ``{where}: JSON: ...``; either way the JSON is None and the reader is done."""
    whole = read_body_json(body)
    if not 200 <= status < 300:
        return Reply(status=status, error=http_error(status, whole)), None
    if whole.parse_error:
        problem = (f"{where}: JSON: {said} ({content_type or 'no content type'}) is not JSON:"
                   f" {whole.parse_error}: {snippet(whole.text)}")
        return Reply(status=status, problems=[problem]), None
    return Reply(status=status, model=reported_model(whole.payload)), whole.payload


def reported_model(payload: Any) -> str | None:
    """The model a server says answered, where the APIs name it: a body's or an event's
    ``model`` (chat, Responses, Messages) or ``modelVersion`` (Gemini), or that of the
    ``response`` (Responses) or ``message`` (Messages) an opening stream event carries."""
    if not isinstance(payload, dict):
        return None
    for holder in (payload, payload.get("response"), payload.get("message")):
        if isinstance(holder, dict):
            for key in ("model", "modelVersion"):
                if isinstance(holder.get(key), str) and holder[key]:
                    return str(holder[key])
    return None


class StreamAccumulator(ABC):
    """One streamed reply of one API, read event by event into a Reply."""

    where: ClassVar[str]
    """How the API's stream problems start: ``chat stream``."""
    end: ClassVar[str]
    """What ends the API's stream properly, as messages name it (``data: [DONE]``)."""

    def __init__(self) -> None:
        self.problems: list[str] = []
        self.events = 0
        """The events read so far (an end marker that is no event, chat's ``[DONE]``, aside)."""
        self.done = False
        """The stream ended as its API says it must."""
        self.usage: dict[str, Any] | None = None
        self.error: str | None = None
        """The first in-band error's message: the cause (later ones are fallout)."""
        self.ttft_ms: float | None = None
        self.model: str | None = None
        """The model the first event that names one says answered."""
        self.on_call: Callable[[ToolCall], None] | None = None
        """Told of each tool call the moment the API marks its arguments complete
        (``closed_call``), while the stream goes on: ``run_tools: progressive``."""
        self.last_ms: float | None = None
        """When the latest event (an end marker too) arrived."""
        self._wall_ms: float | None = None
        """A replayed stream: when the latest event arrived in this run."""

    end_marker: ClassVar[str | None] = None
    """A data payload that ends the stream and is no event (chat's ``[DONE]``)."""

    def add(self, event: Event, offset_ms: float, wall_ms: float | None = None) -> None:
        """Read one event; ``offset_ms``: when it arrived, after the request was sent
        (a replayed stream: when it was recorded to arrive, and ``wall_ms`` when it did:
        the time to the first token is the replay's, as its latency is)."""
        data = event.data
        self.last_ms = offset_ms
        if wall_ms is not None:
            self._wall_ms = wall_ms
        if self.end_marker is not None and not data.startswith("{") \
                and data.strip() == self.end_marker:
            self.marked_end()
            return
        self.events += 1
        self.read(event, offset_ms)

    def marked_end(self) -> None:
        """The end marker arrived: the stream's proper end."""
        self.done = True

    @abstractmethod
    def read(self, event: Event, offset_ms: float) -> None:
        """Map one event (already counted) onto the accumulator."""

    def finish(self, *, truncated: bool = False) -> Reply:
        """The reply; ``truncated``: the stream ended inside an event."""
        if truncated:
            self.problem(CUT)
        reply = Reply(usage=self.usage, model=self.model, error=self.error,
                      ttft_ms=self.ttft_ms,
                      stream=StreamStats(done=self.done, chunks=self.events, end=self.end,
                                         usage=self.usage is not None,
                                         ended_ms=self.last_ms),
                      problems=self.problems)
        self.complete(reply)
        return reply

    @abstractmethod
    def complete(self, reply: Reply) -> None:
        """Fill in what the events said: text, reasoning, calls, finish reasons."""

    # -- what the API's mapping calls ----------------------------------------------------

    def problem(self, message: str) -> None:
        """A protocol problem, named as the API's stream: ``{where}: {message}``."""
        self.problems.append(f"{self.where}: {message}")

    def payload(self, event: Event) -> Any:
        """The event's data as JSON, or None after saying it is not JSON (an ``error``
        event in plain text is still the stream's error)."""
        try:
            data = loads_event(event.data)
        except JSON_ERRORS as exc:
            if event.event == "error":
                self.in_band_error("error event", event.data.strip() or
                                   "an error event with no data")
            else:
                self.problem(f"JSON: event {self.events} is not JSON: {exc}:"
                             f" {snippet(event.data)}")
            return None
        if self.model is None:
            self.model = reported_model(data)
        return data

    def closed_call(self, part: CallPart, offset_ms: float) -> None:
        """The API marked ``part``'s arguments complete at ``offset_ms`` (the first mark
        counts): ``on_call`` hears of the call now, once."""
        if part.closed_ms is not None:
            return
        part.closed_ms = offset_ms
        if self.on_call is not None:
            self.on_call(self.built(part))

    def built(self, part: CallPart) -> ToolCall:
        """The call ``part`` makes as it stands (an API may read its arguments its own way)."""
        return part.build()

    def first_output(self, offset_ms: float) -> None:
        """Text or a call arrived: the first one is the time to first token (of this run:
        a replayed stream's, not its recording's)."""
        if self.ttft_ms is None:
            self.ttft_ms = offset_ms if self._wall_ms is None else self._wall_ms

    def in_band_error(self, carrier: str, error: Any, kind: str | None = None) -> None:
        """An error sent inside the stream (an object with a message, or text), said as the
        problem that fails the stage; only the first counts."""
        if self.error is not None:
            return
        self.error = error if isinstance(error, str) else error_message(error)
        said = kind if kind is not None or isinstance(error, str) else error_kind(error)
        self.problems.append(stream_error(self.where, carrier, said, self.error))

    def set_usage(self, usage: Any) -> None:
        """Usage restated whole: the latest object wins (``null`` changes nothing)."""
        if isinstance(usage, dict):
            self.usage = usage

    def merge_usage(self, usage: Any) -> None:
        """Usage given in parts: later numbers win, nulls do not wipe earlier ones."""
        if isinstance(usage, dict):
            given = {key: value for key, value in usage.items() if value is not None}
            self.usage = {**(self.usage or {}), **given}


@dataclass
class CallPart:
    """One tool call being put together: its id, name and arguments, as pieces (deltas) or
    whole (the value a closing event gives, which wins over the pieces)."""

    position: int
    """Where the call stands in the reply, for messages."""
    id: str | None = None
    name: str = ""
    pieces: list[str] = field(default_factory=list)
    final: str | None = None
    """The arguments whole, as the event that closed them gave them (Responses'
    ``.done``): the vendor's last word, over the pieces."""
    completed_ms: float | None = None
    """When the arguments were complete: their last piece that carried text, else the
    event that closed them."""
    closed_ms: float | None = None
    """When the API's own mark said the arguments were complete (``closed_call``)."""
    said_ms: float | None = None
    """When the last event that carried a piece of the arguments arrived."""

    def arguments(self, text: str, offset_ms: float) -> None:
        """A piece of the arguments arrived at ``offset_ms``."""
        self.pieces.append(text)
        if text:
            self.said_ms = self.completed_ms = offset_ms
        elif self.completed_ms is None:
            self.completed_ms = offset_ms

    def closed(self, offset_ms: float, final: str | None = None) -> None:
        """The vendor closed the arguments at ``offset_ms`` (with their whole value, when it
        gives one): complete then, unless a piece already said when."""
        if final is not None:
            self.final = final
            if self.said_ms is None:  # said whole by the closing event
                self.said_ms = offset_ms
        if self.completed_ms is None:
            self.completed_ms = offset_ms

    def said(self) -> str | None:
        """The arguments as said so far: the closing value, else the pieces joined; None
        when nothing was said of them."""
        if self.final is not None:
            return self.final
        return "".join(self.pieces) if self.pieces else None

    def build(self) -> ToolCall:
        """The call; arguments that are not JSON are its ``arguments_error``."""
        raw = self.said() or ""
        arguments, error = arguments_json(raw)
        return ToolCall(name=self.name, arguments_raw=raw, id=self.id, arguments=arguments,
                        arguments_error=error, completed_ms=self.completed_ms,
                        closed_ms=self.closed_ms, said_ms=self.said_ms,
                        argument_events=None if self.completed_ms is None
                        else self.argument_events)

    @property
    def argument_events(self) -> int:
        """How many events carried a piece of the arguments: the pieces that said
        something, else one when the closing event gave them whole."""
        carried = sum(1 for piece in self.pieces if piece)
        return carried or int(self.final is not None)


P = TypeVar("P", bound=CallPart)


class ToolCallParts(Generic[P]):
    """The tool calls of one reply, each found again by the key the vendor gives it (an
    index, an id) or opened anew; in the order they opened."""

    def __init__(self, kind: type[P]) -> None:
        self.kind = kind
        """The part class (an API may add its own merging to ``CallPart``)."""
        self.parts: list[P] = []
        self._by_key: dict[Any, P] = {}

    def get(self, key: Any) -> P | None:
        return self._by_key.get(key)

    def open(self, key: Any = None) -> P:
        """A new call, found by ``key`` from now on (None: by no key)."""
        part = self.kind(len(self.parts))
        self.parts.append(part)
        if key is not None:
            self._by_key[key] = part
        return part

    def key(self, key: Any, part: P) -> None:
        """Find ``part`` by ``key`` too (the first call to claim a key keeps it)."""
        self._by_key.setdefault(key, part)

    def __len__(self) -> int:
        return len(self.parts)
