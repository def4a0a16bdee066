"""Responses API replies -> :class:`Reply`: one response object, or its stream of events.

Both are read through the same output items, so a streamed and a whole reply of the same
answer give the same Reply:

- ``message`` items: their ``output_text`` parts are the text; a ``refusal`` part is text
  too (it is the answer the model gave instead, and a text expectation shows it);
- ``function_call`` items: one ToolCall each, ``id`` = the item's ``call_id`` (what the
  ``function_call_output`` pairs with), arguments as sent;
- ``reasoning`` items: their ``summary[].text`` and ``content[].text`` are the reasoning,
  never the text (a ``<think>`` block opening the text is reasoning too, as over chat); an
  item with only ``encrypted_content`` reads as ``[redacted reasoning]``
  (``base.REDACTED_REASONING``, the rule of every API).

``finish_reason`` is chat's word for why the reply ended: an ``incomplete`` response's
``incomplete_details.reason`` (``max_output_tokens`` -> ``length``, also when the reply holds
the function call it was cut in; ``content_filter`` -> ``content_filter``; ``incomplete``
when no reason is given), else ``tool_calls`` when the reply calls a function, else
``status`` (``completed`` -> ``stop``). A ``failed`` response has none, and its
``error.message`` is the reply's error. ``api_finish_reason`` is ``status``, or
``incomplete_details.reason`` when incomplete.

``Reply.native_turn`` is the response's ``output`` items as the server sent them (a
stream's: each ``response.output_item.done`` item; an item that never got one, its
``output_item.added`` object with what the deltas said), so the turn can go back as input.

A stream's events are read by their data's ``type``. Items are found by ``item_id`` (an
item without ``id`` by its ``call_id``: llama.cpp opens function calls so) or by
``output_index``. Unknown event types are counted and ignored. The value a ``.done`` event
gives wins over the deltas before it (it is the server's last word); where they differ, that
is a problem. Each problem starts with the name of the check it broke:

- ``responses stream: JSON``: an event's data is not a JSON object;
- ``responses stream: event type``: the ``event:`` line and the data's ``type`` differ, or
  the data has no ``type`` (an ``event: error`` may carry its error alone);
- ``responses stream: terminal event``: ``response.completed``, ``failed`` or ``incomplete``
  carries no response, or an event came after it or after ``data: [DONE]`` (a stream that
  never ends so is seen by the stream's ``done``, which ``expect.stream.done`` checks). A
  ``data: [DONE]`` is chat's end marker, which relays (OpenRouter) send after the terminal
  event; it is read as the official SDK reads it, as the end, and is not counted;
- ``responses stream: sequence_number``: an event whose ``sequence_number`` is not above
  every one before it (sent out of order, or twice); listed first, as it explains what
  reads wrong after it. A server that sends no numbers (llama.cpp) is not held to them;
- ``responses stream: cut``: the stream ended inside an event;
- ``responses stream: item``: an item opened twice, or without an object; a function call
  without a name;
- ``responses stream: delta for an item never opened``: a delta or ``.done`` for an item no
  ``response.output_item.added`` opened (the item is read all the same);
- ``responses stream: output_index``: ``item_id`` and ``output_index`` name different items;
- ``responses stream: call_id``: a function call without ``call_id``, or one shared by two;
- ``responses stream: .done disagrees with deltas``: ``output_text.done``,
  ``function_call_arguments.done``, ``content_part.done``, ``output_item.done``... say
  other than the deltas before them (a function call whose ``call_id`` changes is said so
  here, once: the terminal output may hold either id);
- ``responses stream: terminal output disagrees with the stream``: the terminal response's
  ``output`` holds other function calls than the stream did;
- ``responses stream: error event`` / ``response.failed``: an in-band error, named by its
  code and said to be transient when it is (``base.stream_error``).

Whole bodies: ``responses body: JSON``, ``responses body: response object`` (no ``output``
list), ``responses body: item``, ``responses body: call_id``. A non-2xx body gives the
API's error message (``error.message``, or whatever shape the body has) and no problem.
Arguments that are not JSON set ``ToolCall.arguments_error``; the checks fail streamed ones.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ..records import Reply, ToolCall
from .base import (
    REDACTED_REASONING,
    Event,
    dumps,
    error_kind,
    error_message,
    snippet,
    split_think,
    stream_error,
    with_token_totals,
)
from .stream import CallPart, StreamAccumulator, ToolCallParts, read_whole

__all__ = ["END", "ResponsesStream", "read_response_body"]

BODY = "responses body"
STREAM = "responses stream"
TERMINAL = {"response.completed": "completed", "response.failed": "failed",
            "response.incomplete": "incomplete"}
END = "response.completed, response.failed or response.incomplete"
"""What ends a stream properly, as messages name it."""

_FINISH = {"completed": "stop", "max_output_tokens": "length",
           "content_filter": "content_filter"}
"""The API's words -> chat's (a word not here stays as sent)."""

PartKey = tuple[str, int]
"""(kind, index): ``text`` (message content), ``summary`` and ``reasoning`` (a reasoning
item's summary and content), ``arguments`` (a function call's, index 0)."""


# --- items ------------------------------------------------------------------------------


@dataclass
class _Snapshot:
    """One output item as a whole: a body's item, an ``output_item`` event's, or a streamed
    item once its deltas are in."""

    type: str
    id: str | None = None
    call_id: str | None = None
    name: str = ""
    parts: dict[PartKey, str] = field(default_factory=dict)
    kinds: set[str] = field(default_factory=set)
    """The kinds the item's data spoke of (``content: []`` speaks of text: it has none)."""
    encrypted: bool = False
    """A reasoning item that carries ``encrypted_content``."""

    def joined(self, kind: str) -> str:
        texts = [text for (k, _), text in sorted(self.parts.items()) if k == kind]
        return ("\n\n" if kind == "summary" else "").join(texts)


def _snapshot(data: dict[str, Any]) -> _Snapshot:
    """An item object of the API -> its snapshot."""
    kind = data.get("type")
    snap = _Snapshot(type=kind if isinstance(kind, str) else "",
                     id=_str_or_none(data.get("id")), call_id=_str_or_none(data.get("call_id")),
                     name=data["name"] if isinstance(data.get("name"), str) else "")
    if snap.type == "message":
        _read_parts(snap, "text", data.get("content"), ("text", "refusal"))
    elif snap.type == "reasoning":
        _read_parts(snap, "summary", data.get("summary"), ("text",))
        _read_parts(snap, "reasoning", data.get("content"), ("text",))
        snap.encrypted = _encrypted(data)
    elif snap.type == "function_call" and "arguments" in data:
        snap.kinds.add("arguments")
        snap.parts["arguments", 0] = _text_of(data["arguments"])
    return snap


def _encrypted(data: dict[str, Any] | None) -> bool:
    return isinstance(data, dict) and bool(data.get("encrypted_content"))


def _read_parts(snap: _Snapshot, kind: str, parts: Any, keys: tuple[str, ...]) -> None:
    """The text of each part of a list (``output_text``'s ``text``, ``refusal``'s
    ``refusal``...); parts of other types (an image, an unknown kind) hold none."""
    if not isinstance(parts, list):
        return
    snap.kinds.add(kind)
    for index, part in enumerate(parts):
        text = _part_text(part, keys)
        if text is not None:
            snap.parts[kind, index] = text


def _part_text(part: Any, keys: tuple[str, ...] = ("text", "refusal")) -> str | None:
    if not isinstance(part, dict):
        return None
    return next((part[key] for key in keys if isinstance(part.get(key), str)), None)


def _text_of(value: Any) -> str:
    """Arguments as text: some servers send an object where the API says a string."""
    if isinstance(value, str):
        return value
    return "" if value is None else dumps(value)


def _str_or_none(value: Any) -> str | None:
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)  # an integer id still pairs
    return value if isinstance(value, str) and value else None


# --- items -> Reply ---------------------------------------------------------------------


def _fill(reply: Reply, items: list[_Snapshot], calls: list[CallPart], response: dict[str, Any],
          check: str) -> None:
    """Text, reasoning, calls, usage and finish reasons from the items, the function calls'
    parts and the response."""
    text = "".join(item.joined("text") for item in items if item.type == "message")
    pieces = [piece for item in items if item.type == "reasoning"
              for piece in _reasoning_of(item)]
    reply.text, thought = split_think(text)
    reply.reasoning = "\n\n".join(pieces) if pieces else thought
    reply.tool_calls = [_call(part, position, reply.problems, check)
                        for position, part in enumerate(calls)]
    _check_call_ids(reply.tool_calls, reply.problems, check)
    usage = with_token_totals(response.get("usage"), "input_tokens", "output_tokens")
    reply.usage = usage if usage is not None else reply.usage
    _set_finish(reply, response)


def _reasoning_of(item: _Snapshot) -> list[str]:
    """A reasoning item's text: its summary and content, else the marker when it came only
    encrypted (``base.REDACTED_REASONING``)."""
    said = [piece for piece in (item.joined("summary"), item.joined("reasoning")) if piece]
    return said or ([REDACTED_REASONING] if item.encrypted else [])


def _call(part: CallPart, position: int, problems: list[str], check: str) -> ToolCall:
    if not part.name:
        problems.append(f"{check}: item: function call {position} ({part.id or 'no call_id'})"
                        " has no name")
    return part.build()


def _whole_calls(items: list[_Snapshot]) -> list[CallPart]:
    """The function calls of whole items (a body's output), each as sent."""
    calls = ToolCallParts(CallPart)
    for item in items:
        if item.type == "function_call":
            part = calls.open()
            part.id, part.name, part.final = item.call_id, item.name, item.parts.get(
                ("arguments", 0))
    return calls.parts


def _check_call_ids(calls: list[ToolCall], problems: list[str], check: str) -> None:
    """Every call has a ``call_id`` of its own: the tool results pair with calls by it."""
    names: dict[str, list[str]] = {}
    for position, call in enumerate(calls):
        if call.id is None:
            problems.append(f"{check}: call_id: function call {position} ({call.name or 'no name'})"
                            " has no call_id, so no function_call_output can pair with it")
        else:
            names.setdefault(call.id, []).append(call.name or "no name")
    problems.extend(
        f"{check}: call_id: {len(shared)} function calls share call_id {call_id!r}"
        f" ({', '.join(shared)}), so their results cannot be told apart"
        for call_id, shared in names.items() if len(shared) > 1)


def _set_finish(reply: Reply, response: dict[str, Any]) -> None:
    status = response.get("status")
    status = status if isinstance(status, str) and status else None
    details = response.get("incomplete_details")
    reason = details.get("reason") if isinstance(details, dict) else None
    if status == "incomplete" and isinstance(reason, str) and reason:
        reply.api_finish_reason = reason
    else:
        reply.api_finish_reason = status
    if response.get("error") is not None and reply.error is None:
        reply.error = error_message(response["error"])
    if status == "failed":
        reply.error = reply.error or "the response failed and said no more (no error.message)"
        reply.finish_reason = None
    elif status == "incomplete" or not reply.tool_calls:
        # A reply cut off by the token limit reads "length" even when it holds the call it
        # was cut in, as chat's and the Messages API's do.
        reply.finish_reason = _FINISH.get(reply.api_finish_reason or "", reply.api_finish_reason)
    else:
        reply.finish_reason = "tool_calls"


# --- whole bodies -----------------------------------------------------------------------


def read_response_body(status: int, body: bytes | str, content_type: str) -> Reply:
    """A whole response of any status -> Reply (see the module's docstring)."""
    reply, payload = read_whole(BODY, status, body, content_type, said="the body")
    if payload is None:
        return reply
    if not isinstance(payload, dict) or not isinstance(payload.get("output"), list):
        if isinstance(payload, dict) and payload.get("error") is not None:
            reply.error = error_message(payload["error"])
        else:
            reply.problems.append(f"{BODY}: response object: the body has no output list, so"
                                  f" it is no Responses API response: {snippet(dumps(payload))}")
    else:
        items = _body_items(payload["output"], reply.problems)
        _fill(reply, items, _whole_calls(items), payload, BODY)
        reply.native_turn = [item for item in payload["output"] if isinstance(item, dict)]
    return reply


def _body_items(output: list[Any], problems: list[str]) -> list[_Snapshot]:
    items = []
    for index, item in enumerate(output):
        if isinstance(item, dict):
            items.append(_snapshot(item))
        else:
            problems.append(f"{BODY}: item: output[{index}] is not an object:"
                            f" {snippet(dumps(item))}")
    return items


# --- streams ----------------------------------------------------------------------------


@dataclass
class _Part:
    deltas: list[str] = field(default_factory=list)
    final: str | None = None
    """What a ``.done`` event said it is: it wins over the deltas."""

    def said(self) -> str | None:
        """What the stream has said of this part so far; None when nothing."""
        if self.final is not None:
            return self.final
        return "".join(self.deltas) if self.deltas else None


@dataclass
class _Item:
    """An output item being streamed."""

    key: str
    """Its ``id``, or ``call_id`` (a function call opened without ``id``), or ``#index``."""
    head: _Snapshot
    """Type, ids and name, as the latest event that gave them said."""
    parts: dict[PartKey, _Part] = field(default_factory=dict)
    opened: dict[str, Any] | None = None
    """The item object ``response.output_item.added`` gave."""
    whole: dict[str, Any] | None = None
    """The item object ``response.output_item.done`` gave: the server's last word on it."""
    call: CallPart | None = None
    """A function call's arguments being put together (from the reply's ``ToolCallParts``,
    keyed by the item's key): their deltas, the ``.done`` value, when they completed."""

    def said(self, kind: str) -> str | None:
        if kind == "arguments":
            return self.call.said() if self.call is not None else None
        texts = [text for (k, _), part in sorted(self.parts.items())
                 if k == kind and (text := part.said()) is not None]
        return ("\n\n" if kind == "summary" else "").join(texts) if texts else None

    def snapshot(self) -> _Snapshot:
        parts = {key: part.said() or "" for key, part in self.parts.items()}
        return _Snapshot(self.head.type, self.head.id, self.head.call_id, self.head.name, parts,
                         encrypted=_encrypted(self.whole) or _encrypted(self.opened))

    def tool_call(self) -> CallPart:
        """The function call as it stands: the arguments assembled, the ids and name the
        item's latest event gave."""
        assert self.call is not None
        self.call.id, self.call.name = self.head.call_id, self.head.name
        return self.call

    def native(self) -> dict[str, Any]:
        """The item as it goes back into the conversation: ``output_item.done``'s object;
        without one, the opening object (or the type and ids) with what the deltas said."""
        if self.whole is not None:
            return self.whole
        rebuilt = dict(self.opened or {"type": self.head.type})
        for key, value in (("id", self.head.id), ("call_id", self.head.call_id),
                           ("name", self.head.name)):
            if value:
                rebuilt.setdefault(key, value)
        arguments = self.said("arguments")
        if arguments is not None:
            rebuilt["arguments"] = arguments
        for kind, (member, part_type) in _NATIVE_PARTS.items():
            texts = [part.said() or "" for (k, _), part in sorted(self.parts.items()) if k == kind]
            if texts:
                rebuilt[member] = [_native_part(part_type, text) for text in texts]
        return rebuilt


_NATIVE_PARTS = {"text": ("content", "output_text"), "summary": ("summary", "summary_text"),
                 "reasoning": ("content", "reasoning_text")}
"""Part kind -> the item's list member and the part type an item rebuilt from deltas gets."""


def _native_part(part_type: str, text: str) -> dict[str, Any]:
    part: dict[str, Any] = {"type": part_type, "text": text}
    if part_type == "output_text":
        part["annotations"] = []  # the API's input form of an output_text part has them
    return part


_DELTAS: dict[str, tuple[str, str, str]] = {
    # event type -> (part kind, the index field, the item type an unopened item is taken for)
    "response.output_text.delta": ("text", "content_index", "message"),
    "response.refusal.delta": ("text", "content_index", "message"),
    "response.function_call_arguments.delta": ("arguments", "", "function_call"),
    "response.reasoning_summary_text.delta": ("summary", "summary_index", "reasoning"),
    "response.reasoning_text.delta": ("reasoning", "content_index", "reasoning"),
}
_DONES: dict[str, tuple[str, str, str, str]] = {
    # event type -> (part kind, the index field, the item type, the field with the whole text)
    "response.output_text.done": ("text", "content_index", "message", "text"),
    "response.refusal.done": ("text", "content_index", "message", "refusal"),
    "response.content_part.done": ("text", "content_index", "message", "part"),
    "response.function_call_arguments.done": ("arguments", "", "function_call", "arguments"),
    "response.reasoning_summary_text.done": ("summary", "summary_index", "reasoning", "text"),
    "response.reasoning_summary_part.done": ("summary", "summary_index", "reasoning", "part"),
    "response.reasoning_text.done": ("reasoning", "content_index", "reasoning", "text"),
}
_OPENS_PART = {"response.content_part.added": "message",
               "response.reasoning_summary_part.added": "reasoning"}
_TTFT = {"response.output_text.delta", "response.refusal.delta",
         "response.function_call_arguments.delta"}


class ResponsesStream(StreamAccumulator):
    """Maps the events of one streamed Responses API reply onto the accumulator."""

    where = STREAM
    end = END
    end_marker = "[DONE]"

    def __init__(self) -> None:
        super().__init__()
        self._items: dict[str, _Item] = {}
        self.calls = ToolCallParts(CallPart)
        """The items' function-call arguments, keyed by item key."""
        self._by_index: dict[int, _Item] = {}
        self._unopened: set[str] = set()
        self._terminal: str | None = None
        self._response: dict[str, Any] = {}
        self._done_marker = False
        self._sequence: tuple[int, int] | None = None
        """The last ``sequence_number`` and the event that carried it."""
        self._out_of_order: list[str] = []
        self._renamed: dict[str, str] = {}
        """A function call's earlier ``call_id`` -> the one its ``output_item.done`` gave."""

    def marked_end(self) -> None:
        self._done_marker = True  # chat's end marker, which relays add after the terminal

    def read(self, event: Event, offset_ms: float) -> None:
        payload = self._payload(event)
        kind = self._type_of(event, payload) if payload is not None else None
        if payload is None or kind is None:
            return
        self._check_sequence(kind, payload)
        ended = self._terminal or ("data: [DONE]" if self._done_marker else None)
        if ended is not None:
            self.problem(f"terminal event: event {self.events} ({kind}) arrived after {ended}")
        if kind in _TTFT:
            self.first_output(offset_ms)
        handler = _HANDLERS.get(kind)
        if handler is not None:
            handler(self, kind, payload, offset_ms)
        elif kind in _DELTAS:
            self._delta(kind, payload, offset_ms)
        elif kind in _DONES:
            self._part_done(kind, payload, offset_ms)
        elif kind in _OPENS_PART:
            self._find(payload, kind, _OPENS_PART[kind])
        # Any other type (response.created, annotations, future events) is counted only.

    def complete(self, reply: Reply) -> None:
        items = [item.snapshot() for item in self._items.values()]
        response = dict(self._response)
        if "status" not in response and self._terminal is not None:
            response["status"] = TERMINAL[self._terminal]
        calls = [item.tool_call() for item in self._items.values()
                 if item.head.type == "function_call"]
        _fill(reply, items, calls, response, STREAM)
        if self.error is None and reply.error is not None:  # a response.failed's error
            error = response.get("error")
            reply.problems.append(stream_error(STREAM, self._terminal or "response.failed",
                                               error_kind(error), reply.error))
        reply.native_turn = [item.native() for item in self._items.values()]
        self._compare_terminal(reply.tool_calls)
        # An event out of order explains what reads wrong after it: it comes first.
        reply.problems[:0] = self._out_of_order

    # -- reading one event -----------------------------------------------------------------

    def _payload(self, event: Event) -> dict[str, Any] | None:
        payload = self.payload(event)
        if payload is None:
            return None
        if not isinstance(payload, dict):
            self.problem(f"JSON: event {self.events} is not a JSON object:"
                                  f" {snippet(event.data)}")
            return None
        return payload

    def _check_sequence(self, kind: str, payload: dict[str, Any]) -> None:
        """``sequence_number``s rise event by event; a server that sends none (llama.cpp)
        is not held to them."""
        number = _as_index(payload.get("sequence_number"))
        if number is None:
            return
        if self._sequence is not None and number <= self._sequence[0]:
            before, where = self._sequence
            self._out_of_order.append(
                f"{STREAM}: sequence_number: event {self.events} ({kind}) has sequence_number"
                f" {number}, not after event {where}'s {before}: the server sent its events out"
                " of order or twice")
        if self._sequence is None or number > self._sequence[0]:
            self._sequence = (number, self.events)

    def _type_of(self, event: Event, payload: dict[str, Any]) -> str | None:
        """The data's ``type``; the ``event:`` line only stands in when the data has none."""
        named, given = event.event, payload.get("type")
        where = f"{STREAM}: event type: event {self.events}"
        if isinstance(given, str) and given:
            if named not in ("message", given):
                self.problems.append(f"{where} is {named!r} on its event line and {given!r} in"
                                      f" its data; read as {given!r}")
            return given
        if named == "error":  # servers' error events often carry only the error: it is read
            return named
        if named != "message":
            self.problems.append(f"{where} has no type in its data; read as {named!r}, from"
                                  " its event line")
            return named
        self.problems.append(f"{where} has no type, in its data or on an event line; ignored")
        return None

    def _response_event(self, kind: str, payload: dict[str, Any], offset_ms: float) -> None:
        """``response.created``, ``in_progress`` and the terminal events: the response."""
        response = payload.get("response")
        if isinstance(response, dict):
            self.set_usage(with_token_totals(response.get("usage"), "input_tokens",
                                             "output_tokens"))
        if kind not in TERMINAL:
            return
        if self._terminal is not None:
            return  # a second terminal event: already a problem; the first one stands
        self._terminal = kind
        self.done = True
        if isinstance(response, dict):
            self._response = response
        else:
            self.problem(f"terminal event: {kind} (event {self.events})"
                                  " carries no response object")

    def _error_event(self, kind: str, payload: dict[str, Any], offset_ms: float) -> None:
        error = payload.get("error")
        message = payload.get("message")
        self._set_error(message if isinstance(message, str) and message
                        else error_message(error if error is not None else payload),
                        error_kind(error if isinstance(error, dict) else payload))

    def _set_error(self, message: str, kind: str | None = None) -> None:
        """The stream's in-band error, said as the problem that fails the stage."""
        self.in_band_error("error event", message, kind)

    # -- items -------------------------------------------------------------------------------

    def _item_added(self, kind: str, payload: dict[str, Any], offset_ms: float) -> None:
        data = self._item_data(kind, payload)
        if data is None:
            return
        head, index = _snapshot(data), _as_index(payload.get("output_index"))
        key = _item_key(head, index, len(self._items))
        if key in self._items:
            self.problem(f"item: item {key!r} opened twice (event"
                                  f" {self.events})")
            return
        item = self._open(key, head, index)
        item.opened = data
        for part_key, text in head.parts.items():
            if not text:
                continue
            if part_key[0] == "arguments":  # opened with its arguments already: they were said
                self._call_of(item).pieces.append(text)
            else:  # an item opened with its content already: that content was said
                item.parts[part_key] = _Part([text])
        if head.type == "function_call":
            self.first_output(offset_ms)  # the call's opening is its first token

    def _item_done(self, kind: str, payload: dict[str, Any], offset_ms: float) -> None:
        data = self._item_data(kind, payload)
        if data is None:
            return
        done, index = _snapshot(data), _as_index(payload.get("output_index"))
        key = _item_key(done, index, len(self._items))
        item = (self._items.get(key) or (self._by_index.get(index) if index is not None else None)
                or self._by_call_id(done.call_id))
        if item is None:
            self._never_opened(key, kind)
            item = self._open(key, done, index)
        self._compare_head(item, done, kind)
        item.whole = data
        if done.type == "function_call":
            self._call_of(item).closed(offset_ms)
            self.closed_call(item.tool_call(), offset_ms)
        for part_kind in sorted(done.kinds):
            self._close_kind(item, done, part_kind, kind)

    def _by_call_id(self, call_id: str | None) -> _Item | None:
        """The function call of ``call_id``: an item opened with an ``id`` and closed
        without one is still found."""
        return next((item for item in self._items.values()
                     if call_id is not None and item.head.call_id == call_id), None)

    def _item_data(self, kind: str, payload: dict[str, Any]) -> dict[str, Any] | None:
        data = payload.get("item")
        if not isinstance(data, dict):
            self.problem(f"item: {kind} (event {self.events}) carries no"
                                  f" item object: {snippet(dumps(data))}")
            return None
        return data

    def _open(self, key: str, head: _Snapshot, index: int | None) -> _Item:
        item = _Item(key, _Snapshot(head.type, head.id, head.call_id, head.name))
        self._items[key] = item
        if index is not None:
            self._by_index.setdefault(index, item)
        if head.type == "function_call":
            self._call_of(item)
        return item

    def _call_of(self, item: _Item) -> CallPart:
        """The item's function-call arguments, opened when first needed."""
        if item.call is None:
            item.call = self.calls.open(item.key)
        return item.call

    def _compare_head(self, item: _Item, done: _Snapshot, kind: str) -> None:
        """``output_item.done`` names the same function and call as the item's opening."""
        head = item.head
        for what, before, after in (("name", head.name, done.name),
                                    ("call_id", head.call_id, done.call_id)):
            if before and after and before != after:
                self._disagrees(item, kind, f"its {what} {after!r}", f"{before!r}")
        if head.call_id and done.call_id and head.call_id != done.call_id:
            self._renamed[head.call_id] = done.call_id  # said once: not again at the end
        head.name = done.name or head.name
        head.call_id = done.call_id or head.call_id
        head.id = done.id or head.id

    def _close_kind(self, item: _Item, done: _Snapshot, part_kind: str, kind: str) -> None:
        """One kind of an item's content, as ``output_item.done`` gives it: it must be what
        the stream said, and it is what the reply holds."""
        said, value = item.said(part_kind), done.joined(part_kind)
        if said is not None and said != value:
            self._disagrees(item, kind, snippet(value), snippet(said))
        if part_kind == "arguments":
            self._call_of(item).final = value
            return
        for key in [key for key in item.parts if key[0] == part_kind]:
            del item.parts[key]
        for key, text in done.parts.items():
            if key[0] == part_kind:
                item.parts[key] = _Part(final=text)

    # -- parts -------------------------------------------------------------------------------

    def _delta(self, kind: str, payload: dict[str, Any], offset_ms: float) -> None:
        part_kind, index_field, item_type = _DELTAS[kind]
        item = self._find(payload, kind, item_type)
        delta = payload.get("delta")
        if not isinstance(delta, str):
            self.problem(f"JSON: {kind} (event {self.events}) has no string"
                                  f" delta: {snippet(dumps(delta))}")
            return
        if part_kind == "arguments":
            self._call_of(item).arguments(delta, offset_ms)
            return
        part = item.parts.setdefault((part_kind, _index(payload, index_field)), _Part())
        part.deltas.append(delta)

    def _part_done(self, kind: str, payload: dict[str, Any], offset_ms: float) -> None:
        part_kind, index_field, item_type, text_field = _DONES[kind]
        item = self._find(payload, kind, item_type)
        if part_kind == "arguments":
            self._call_of(item).closed(offset_ms)  # complete here if no delta said when
        value = payload.get(text_field)
        if text_field == "part":
            value = _part_text(value)
        if kind == "response.function_call_arguments.done":
            self._compare_head(item, _Snapshot("function_call", name=_name(payload)), kind)
        if isinstance(value, str):  # a .done without its text says nothing to compare
            part: _Part | CallPart = (
                self._call_of(item) if part_kind == "arguments" else
                item.parts.setdefault((part_kind, _index(payload, index_field)), _Part()))
            said = part.said()
            if said is not None and said != value:
                self._disagrees(item, kind, snippet(value), snippet(said))
            part.final = value
        if part_kind == "arguments":
            self.closed_call(item.tool_call(), offset_ms)  # the API's mark: complete

    def _find(self, payload: dict[str, Any], kind: str, item_type: str) -> _Item:
        """The item an event is about, by ``item_id`` or ``output_index``; one no
        ``output_item.added`` opened is a problem, and opened here so nothing is lost."""
        item_id = _str_or_none(payload.get("item_id"))
        index = _as_index(payload.get("output_index"))
        by_id = self._items.get(item_id) if item_id is not None else None
        by_index = self._by_index.get(index) if index is not None else None
        if by_id is not None and by_index is not None and by_id is not by_index:
            self.problems.append(
                f"{STREAM}: output_index: {kind} (event {self.events}) names item {item_id!r}"
                f" and output_index {index}, which is item {by_index.key!r}; read as {item_id!r}")
        found = by_id or by_index
        if found is not None:
            return found
        key = item_id or (f"#{index}" if index is not None else "#unnamed")
        self._never_opened(key, kind)
        return self._open(key, _Snapshot(item_type, id=item_id), index)

    def _never_opened(self, key: str, kind: str) -> None:
        if key not in self._unopened:  # once per item: its every delta would say the same
            self._unopened.add(key)
            self.problems.append(
                f"{STREAM}: delta for an item never opened: {kind} (event {self.events}) is for"
                f" item {key!r}, which no response.output_item.added opened")

    def _disagrees(self, item: _Item, kind: str, says: str, said: str) -> None:
        self.problem(f".done disagrees with deltas: {kind} (event"
                              f" {self.events}) of item {item.key!r} says {says}; the stream"
                              f" before it said {said}")

    def _compare_terminal(self, calls: list[ToolCall]) -> None:
        """The terminal response's output holds the calls the stream made, no other."""
        output = self._response.get("output")
        if not isinstance(output, list):
            return  # a terminal response without output says nothing of the calls
        terminal = [_call_line(self._renamed.get(item.call_id or "", item.call_id), item.name,
                               item.parts.get(("arguments", 0), ""))
                    for item in map(_snapshot, (i for i in output if isinstance(i, dict)))
                    if item.type == "function_call"]
        streamed = [_call_line(call.id, call.name, call.arguments_raw) for call in calls]
        if sorted(terminal) != sorted(streamed):
            self.problems.append(
                f"{STREAM}: terminal output disagrees with the stream: {self._terminal}'s output"
                f" holds {_calls_text(terminal)}; the stream made {_calls_text(streamed)}")


_HANDLERS: dict[str, Callable[[ResponsesStream, str, dict[str, Any], float], None]] = {
    "response.created": ResponsesStream._response_event,
    "response.in_progress": ResponsesStream._response_event,
    **{kind: ResponsesStream._response_event for kind in TERMINAL},
    "error": ResponsesStream._error_event,
    "response.output_item.added": ResponsesStream._item_added,
    "response.output_item.done": ResponsesStream._item_done,
}


def _item_key(head: _Snapshot, index: int | None, count: int) -> str:
    if head.id is not None:
        return head.id
    if head.call_id is not None:
        return head.call_id  # llama.cpp: function calls have no id; deltas name the call_id
    return f"#{index}" if index is not None else f"#{count}"


def _as_index(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _index(payload: dict[str, Any], name: str) -> int:
    """A part's index field; a server that sends none (llama.cpp) has one part: 0."""
    index = _as_index(payload.get(name)) if name else None
    return 0 if index is None else index


def _name(payload: dict[str, Any]) -> str:
    name = payload.get("name")
    return name if isinstance(name, str) else ""


def _call_line(call_id: str | None, name: str, arguments: str) -> str:
    return f"{name or 'no name'}({arguments}) [{call_id or 'no call_id'}]"


def _calls_text(calls: list[str]) -> str:
    return ", ".join(calls) if calls else "no function call"
