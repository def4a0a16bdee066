"""Messages API replies -> :class:`Reply`: one ``message`` body, or its stream of events.

A reply is a list of content blocks: ``text`` blocks are the answer, ``tool_use`` blocks the
calls (``input`` an object), ``thinking`` and ``redacted_thinking`` blocks the reasoning.
Tools the service runs itself (``server_tool_use`` blocks: web_search, web_fetch,
code_execution...; their input streams as ``input_json_delta`` too) and their results
(``web_search_tool_result`` and every other ``*_tool_result``) are no calls to run: they
stay in the reply's turn and go back in it as they came. A
stream opens with ``message_start``, then per block ``content_block_start``, its
``content_block_delta`` events and ``content_block_stop``, then ``message_delta`` (the
``stop_reason`` and the output usage) and ``message_stop``; ``ping`` may come anywhere, an
``error`` event ends the stream in band.

``Reply.native_turn`` is the reply's content blocks as the server sent them (a stream's
rebuilt from its events: the text, thinking and input the deltas gave, the ``signature``
of a ``signature_delta``, the citations of ``citations_delta``), so the turn can go back.

The reading never raises: each slip is a message in ``Reply.problems`` that starts with its
check's name (``messages stream: ...``, ``messages body: ...``; listed in ``messages.py``).

What servers do differently, read as they mean (llama.cpp's ``llama-server`` among them):

- ``content_block_start`` of a ``tool_use`` without ``input`` (the start value is ``{}``);
- a tool without arguments streams no ``input_json_delta``, or only ``""``: ``{}``;
- a block started again while it is open, with the same type and id (llama-server sends
  it when a call's last arguments come with the final result): the same block, no slip;
- several blocks open at once, each stopped at the end;
- an in-band error as ``data: {"error": {...}}`` without ``type``, or as plain text after
  ``event: error``;
- a usage number sent as ``null`` in ``message_delta`` does not wipe the one
  ``message_start`` gave.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, TypeGuard

from ..records import Reply, ToolCall
from .base import (
    REDACTED_REASONING,
    Event,
    arguments_json,
    dumps,
    error_message,
    snippet,
    split_think,
    with_token_totals,
)
from .stream import CallPart, StreamAccumulator, ToolCallParts, read_whole

__all__ = ["MessageStream", "read_message"]

STREAM = "messages stream"
BODY = "messages body"

STOP_REASONS = {
    "end_turn": "stop",
    "stop_sequence": "stop",
    "tool_use": "tool_calls",
    "max_tokens": "length",
    # The context window ran out before max_tokens: chat completions say "length" for both.
    "model_context_window_exceeded": "length",
    "refusal": "content_filter",
}
"""``stop_reason`` -> the normalised finish reason; any other word (``pause_turn``) stays."""

_CACHE_KEYS = ("cache_read_input_tokens", "cache_creation_input_tokens")

# Which block type each delta type belongs to, and the field that carries its text. A
# citations_delta carries no text; a delta type not listed here is ignored, as the API asks.
_DELTAS = {
    "text_delta": ("text", "text"),
    "input_json_delta": ("tool_use", "partial_json"),
    "thinking_delta": ("thinking", "thinking"),
    "signature_delta": ("thinking", "signature"),
    "citations_delta": ("text", None),
}
_TEXT_FIELDS = {"text_delta": "text", "input_json_delta": "partial_json",
                "thinking_delta": "thinking"}
"""The deltas whose text the block keeps, and the field that carries it."""
_FITS: dict[str, frozenset[str]] = {}
"""Block type -> the delta types that fit it (filled as block types come)."""


def _fitting(block_type: str) -> frozenset[str]:
    """The delta types that fit a block of ``block_type`` (an input delta fits every call,
    the client's and the service's own)."""
    fits = _FITS.get(block_type)
    if fits is None:
        fits = _FITS[block_type] = frozenset(
            kind for kind, (belongs, _) in _DELTAS.items()
            if block_type == belongs or (belongs == "tool_use" and _takes_input(block_type)))
    return fits


@dataclass
class _UseCall(CallPart):
    """The call of a ``tool_use`` block: its ``partial_json`` pieces are the arguments, and
    they are complete when the block stops (``closed``), as the API says."""

    start_input: Any = None
    """The block's ``input`` as it opened: the whole input of a body, ``{}`` (or absent) at
    the start of a stream."""


@dataclass
class _Block:
    """One content block, whole or being put together from deltas."""

    index: int
    type: str
    id: str | None = None
    name: str = ""
    parts: list[str] = field(default_factory=list)
    """Text, thinking, or the ``partial_json`` pieces (a ``tool_use`` block's are its call's
    pieces: the same list)."""
    call: _UseCall | None = None
    """A ``tool_use`` block's call (from the reply's ``ToolCallParts``, keyed by the block's
    index): its id, name and input pieces."""
    fits: frozenset[str] = frozenset()
    """The delta types that fit the block (a stream's)."""
    stopped: bool = False
    raw: dict[str, Any] = field(default_factory=dict)
    """The block as the server sent it: a body's whole, or a stream's
    ``content_block_start`` with what the deltas add besides text and input (the thinking
    ``signature``, ``citations``), so the turn can go back as it came."""

    def label(self) -> str:
        named = f" {self.name}" if self.name else ""
        return f"block {self.index} ({self.type}{named})"


def _block(index: int, content: dict[str, Any], **kwargs: Any) -> _Block:
    """The block of ``content``: a body's block, or a stream's ``content_block``."""
    return _Block(index, content["type"], id=_text_or_none(content.get("id")),
                  name=_text_or_none(content.get("name")) or "", **kwargs)


def _open_call(calls: ToolCallParts[_UseCall], block: _Block, content: dict[str, Any]) -> None:
    """A ``tool_use`` block's call, opened in ``calls`` under the block's index."""
    if block.type == "tool_use":
        block.call = calls.open(block.index)
        block.call.id, block.call.name = block.id, block.name
        block.call.start_input = content.get("input")
        block.parts = block.call.pieces


# --- what bodies and streams share ------------------------------------------------------


def _is_int(value: Any) -> TypeGuard[int]:
    return type(value) is int  # JSON's integers (a bool is no index)


def _text_or_none(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def _usage(usage: dict[str, Any] | None) -> dict[str, Any] | None:
    """The API's usage with the chat names added. ``input_tokens`` leaves out the prompt
    tokens read from or written to the cache; ``prompt_tokens`` counts them, as chat
    completions' does, so one usage expectation reads the same over every API."""
    if usage is None:
        return None
    merged = dict(usage)
    given_in, given_out = usage.get("input_tokens"), usage.get("output_tokens")
    cached = sum(usage[key] for key in _CACHE_KEYS if _is_int(usage.get(key)))
    if _is_int(given_in) and cached:
        merged["prompt_tokens"] = given_in + cached
        if _is_int(given_out):
            merged["total_tokens"] = given_in + cached + given_out
    return with_token_totals(merged, "input_tokens", "output_tokens")


def _set_stop_reason(reply: Reply, reason: str | None) -> None:
    reply.api_finish_reason = reason
    reply.finish_reason = STOP_REASONS.get(reason, reason) if reason is not None else None


def _tool_call(block: _Block, streamed: bool, where: str, problems: list[str]) -> ToolCall:
    """A ``tool_use`` block's call: its input as the arguments' JSON text."""
    part = block.call
    assert part is not None
    streamed_json = "".join(part.pieces)
    if streamed and streamed_json.strip() and _has_input(part.start_input):
        problems.append(f"{where}: tool_use input: {block.label()} opened with input"
                        f" {snippet(dumps(part.start_input))} and streamed partial_json too;"
                        " read the partial_json")
    if not streamed_json.strip():  # no deltas, or only "": the input the block opened with
        part.final = _input_text(block, streamed, where, problems)
    call = part.build()
    if call.arguments_error is None and not isinstance(call.arguments, dict):
        problems.append(f"{where}: tool_use input: {block.label()}: the input is JSON but not"
                        f" an object: {snippet(call.arguments_raw)}")
    return call


def _takes_input(block_type: str) -> bool:
    """Whether a block's input streams as ``input_json_delta``: the client's ``tool_use``,
    and the calls the service runs itself (``server_tool_use``: web_search, web_fetch,
    code_execution...; ``mcp_tool_use``)."""
    return block_type.endswith("tool_use")


def _has_input(value: Any) -> bool:
    return value is not None and value != {}


def _input_text(block: _Block, streamed: bool, where: str, problems: list[str]) -> str:
    """The JSON text of the input a block opened with (a stream's starts as ``{}``)."""
    value = block.call.start_input if block.call is not None else None
    if isinstance(value, dict):
        return dumps(value)
    if value is None:
        if not streamed:
            problems.append(f"{where}: tool_use input: {block.label()} has no input; read as {{}}")
        return "{}"
    if isinstance(value, str):
        problems.append(f"{where}: tool_use input: {block.label()} has its input as a string,"
                        f" not an object: {snippet(value)}")
        return value
    return dumps(value)  # a list or a number: the caller says it is not an object


def _check_ids(calls: list[ToolCall], blocks: list[_Block], where: str,
               problems: list[str]) -> None:
    """Every tool result pairs with its call by id: each call needs its own."""
    seen: set[str] = set()
    for call, block in zip(calls, blocks):
        if not call.id:
            problems.append(f"{where}: tool_use ids: {block.label()} has no id, so no tool"
                            " result can pair with it")
        elif call.id in seen:
            problems.append(f"{where}: tool_use ids: {block.label()} repeats id {call.id!r}"
                            " of an earlier call")
        seen.add(call.id or "")


def _check_stop_reason(reply: Reply, where: str, problems: list[str]) -> None:
    """``tool_use`` says the reply ends in calls; a finished turn says it does not."""
    reason = reply.api_finish_reason
    if reason == "tool_use" and not reply.tool_calls:
        problems.append(f"{where}: stop_reason fits the blocks: stop_reason is tool_use but"
                        " no tool_use block came")
    elif reason in ("end_turn", "stop_sequence") and reply.tool_calls:
        names = ", ".join(call.name for call in reply.tool_calls)
        problems.append(f"{where}: stop_reason fits the blocks: stop_reason is {reason} but"
                        f" the reply calls {names}; a reply with tool_use blocks stops with"
                        " tool_use")


def _fill(reply: Reply, blocks: list[_Block], streamed: bool, where: str) -> None:
    """Text, reasoning and tool calls from the blocks, in their order."""
    text: list[str] = []
    reasoning: list[str] = []
    uses = [block for block in blocks if block.call is not None]
    for block in blocks:
        if block.type == "text":
            text.append("".join(block.parts))
        elif block.type == "thinking":
            reasoning.append("".join(block.parts))
        elif block.type == "redacted_thinking":
            reasoning.append(REDACTED_REASONING)
    reply.tool_calls = [_tool_call(block, streamed, where, reply.problems) for block in uses]
    _check_ids(reply.tool_calls, uses, where, reply.problems)
    # A model that thinks in tags, on a server that does not take them apart: reasoning too.
    reply.text, thought = split_think("".join(text))
    given = "\n\n".join(part for part in reasoning if part)
    reply.reasoning = given or thought
    reply.native_turn = ([_native(block, call, reply.problems)
                          for block, call in _with_calls(blocks, reply)]
                         if streamed else [block.raw for block in blocks])


def _with_calls(blocks: list[_Block], reply: Reply) -> list[tuple[_Block, ToolCall | None]]:
    """Each block beside its tool call (``None`` for the blocks that are no call)."""
    calls = iter(reply.tool_calls)
    return [(block, next(calls) if block.call is not None else None) for block in blocks]


def _native(block: _Block, call: ToolCall | None, problems: list[str]) -> dict[str, Any]:
    """A streamed block as the turn goes back: its start with the text, thinking or input
    the deltas gave (input that joins into no object is ``{}``, the only kind the API takes).
    """
    native = dict(block.raw)
    if call is not None:
        native["input"] = call.arguments if isinstance(call.arguments, dict) else {}
    elif block.type in ("text", "thinking"):
        native[block.type] = "".join(block.parts)
    elif _takes_input(block.type) and "".join(block.parts).strip():
        native["input"] = _service_input(block, problems)
    return native


def _service_input(block: _Block, problems: list[str]) -> dict[str, Any]:
    """The streamed input of a call the service ran itself (it goes back as it came)."""
    raw = "".join(block.parts)
    value, error = arguments_json(raw)
    if error is None and isinstance(value, dict):
        return value
    problems.append(f"{STREAM}: tool_use input: {block.label()}: the input_json_delta pieces"
                    f" join into no JSON object: {snippet(raw)}; sent back as {{}}")
    return {}


# --- a whole body -----------------------------------------------------------------------


def read_message(status: int, body: bytes | str, content_type: str) -> Reply:
    """A non-streamed response of any status -> Reply; a non-2xx one sets ``error``."""
    reply, payload = read_whole(BODY, status, body, content_type)
    return reply if payload is None else _message_reply(reply, payload)


def _message_reply(reply: Reply, payload: Any) -> Reply:
    if isinstance(payload, dict) and (payload.get("type") == "error" or "error" in payload):
        reply.error = error_message(payload.get("error"))
        return reply
    content = payload.get("content") if isinstance(payload, dict) else None
    kind = payload.get("type", "message") if isinstance(payload, dict) else None
    if not isinstance(content, list) or kind != "message":
        reply.problems.append(f"{BODY}: message shape: the response is not a message (type"
                              f" message with a content list): {snippet(dumps(payload))}")
        return reply
    assert isinstance(payload, dict)
    _fill(reply, _body_blocks(content, reply.problems), False, BODY)
    _set_stop_reason(reply, _text_or_none(payload.get("stop_reason")))
    usage = payload.get("usage")
    reply.usage = _usage(usage if isinstance(usage, dict) else None)
    _check_stop_reason(reply, BODY, reply.problems)
    return reply


def _body_blocks(content: list[Any], problems: list[str]) -> list[_Block]:
    blocks, calls = [], ToolCallParts(_UseCall)
    for index, item in enumerate(content):
        if not isinstance(item, dict) or not isinstance(item.get("type"), str):
            problems.append(f"{BODY}: message shape: content block {index} is not an object"
                            f" with a type: {snippet(dumps(item))}")
            continue
        block = _block(index, item, stopped=True, raw=item)
        _open_call(calls, block, item)
        if block.call is None:
            block.parts = [_block_text(item)]
        blocks.append(block)
    return blocks


def _block_text(item: dict[str, Any]) -> str:
    """A text block's ``text``, a thinking block's ``thinking`` (empty for the rest)."""
    key = "thinking" if item.get("type") == "thinking" else "text"
    return _text_or_none(item.get(key)) or ""


# --- a stream -----------------------------------------------------------------------------


class MessageStream(StreamAccumulator):
    """Maps the events of one streamed Messages API response onto the accumulator."""

    where = STREAM
    end = "message_stop"

    def __init__(self) -> None:
        super().__init__()
        self._blocks: dict[int, _Block] = {}
        self.calls = ToolCallParts(_UseCall)
        """The ``tool_use`` blocks' calls, keyed by block index."""
        self._stop_reason: str | None = None
        self._started = False
        self._late_said = False
        self._early_said = False

    def read(self, event: Event, offset_ms: float) -> None:
        payload = self.payload(event)
        kind = payload.get("type") if type(payload) is dict else None
        named = event.event
        if type(kind) is not str or (named != kind and named != "message"):
            payload = self._typed(event, payload)  # what is not a well-typed event
            if payload is None:
                return
            kind = payload["type"]
        if self.done and not self._late_said:
            self._late_said = True  # ``message_stop`` (or an ``error`` event) ended it
            self.problem(f"terminal event: event {self.events} ({kind}) arrived after the"
                         " stream's end")
        handler = _HANDLERS.get(kind)
        if handler is None:
            return  # new event types may come; the API asks clients to pass them by
        if not self._started and not self._early_said \
                and kind not in ("message_start", "ping", "error"):
            self._early_said = True  # said once; the events are still read
            self.problem(f"message_start first: event {self.events} ({kind}) came before any"
                         " message_start")
        handler(self, payload, offset_ms)

    def complete(self, reply: Reply) -> None:
        # A stream without message_stop is not a problem here: ``stream.done`` says so, and
        # ``expect.stream.done`` checks it (naming message_stop) unless the case turns it off.
        if self.done and self.error is None:
            self._check_complete()
        reply.usage = _usage(self.usage)
        _fill(reply, [self._blocks[index] for index in sorted(self._blocks)], True, STREAM)
        _set_stop_reason(reply, self._stop_reason)
        if self.done and self.error is None:
            _check_stop_reason(reply, STREAM, reply.problems)

    # -- one event

    def _typed(self, event: Event, payload: Any) -> dict[str, Any] | None:
        """An event that is not a JSON object whose ``type`` its ``event:`` line agrees
        with: read with its type set (from the event line, or ``error``), or None after
        saying why it cannot be read."""
        if payload is None:  # not JSON: already said
            if event.event == "error":
                self.done = True  # an error event in plain text ends the stream too
            return None
        if not isinstance(payload, dict):
            self.problem(f"JSON: event {self.events} is not a JSON object:"
                         f" {snippet(event.data)}")
            return None
        kind = payload.get("type")
        named = event.event if event.event != "message" else None
        if kind is None and (named is not None or "error" in payload):
            kind = named or "error"  # llama-server's in-band {"error": {...}}
        if not isinstance(kind, str):
            self.problem(f"event type: event {self.events} has no type:"
                         f" {snippet(event.data)}")
            return None
        if named is not None and named != kind:
            self.problem(f"event type: event {self.events} is named"
                         f" {named!r} but its data says type {kind!r}")
        return payload if payload.get("type") == kind else {**payload, "type": kind}

    def _on_message_start(self, payload: dict[str, Any], offset_ms: float) -> None:
        if self._started:
            self.problem(f"message_start first: event {self.events} is a"
                                  " second message_start")
            return
        self._started = True
        message = payload.get("message")
        usage = message.get("usage") if isinstance(message, dict) else None
        self.merge_usage(usage)

    def _on_block_start(self, payload: dict[str, Any], offset_ms: float) -> None:
        index, content = payload.get("index"), payload.get("content_block")
        if not _is_int(index) or not isinstance(content, dict) \
                or not isinstance(content.get("type"), str):
            self.problem(f"block shape: event {self.events}:"
                                  " content_block_start without an integer index and a"
                                  f" content_block with a type: {snippet(dumps(payload))}")
            return
        block = _block(index, content, raw=dict(content), fits=_fitting(content["type"]))
        old = self._blocks.get(index)
        if old is not None:
            self._started_again(old, block)
            return
        self._blocks[index] = block
        _open_call(self.calls, block, content)
        first = _text_or_none(content.get("thinking" if block.type == "thinking" else "text"))
        if first and block.type in ("text", "thinking"):
            block.parts.append(first)
        if block.type == "tool_use" or first:
            self.first_output(offset_ms)

    def _started_again(self, old: _Block, new: _Block) -> None:
        """A block opened twice: llama-server's repeat of an open block is the same block."""
        if not old.stopped and old.type == new.type and old.id == new.id \
                and new.name in ("", old.name):
            return
        was = "stopped" if old.stopped else "open"
        self.problem(f"block started twice: event {self.events} starts"
                              f" block {new.index} ({new.type}) again while {old.label()}"
                              f" is {was}; kept the first")

    def _on_block_delta(self, payload: dict[str, Any], offset_ms: float) -> None:
        index = payload.get("index")
        block = self._blocks.get(index) if type(index) is int else None
        if block is None:
            self._never_started(index, "delta for a block never started", "content_block_delta")
            return
        if block.stopped:
            self.problem(f"delta after its block stopped: event"
                         f" {self.events} adds to {block.label()}, which had stopped")
        delta = payload.get("delta")
        if not isinstance(delta, dict) or type(kind := delta.get("type")) is not str:
            self.problem(f"delta shape: event {self.events} has no delta"
                         f" object with a type: {snippet(dumps(payload))}")
            return
        if kind not in block.fits:
            if kind in _DELTAS:  # a delta type not listed is ignored, as the API asks
                self.problem(f"delta type does not fit the block: event {self.events} sends"
                             f" {kind} into {block.label()}; it belongs in a"
                             f" {_DELTAS[kind][0]} block")
            return
        key = _TEXT_FIELDS.get(kind)
        value = delta.get(key) if key is not None else None
        if type(value) is not str:
            self._other_delta(block, kind, delta)
        elif value:
            block.parts.append(value)
            if block.call is not None:
                block.call.said_ms = offset_ms
            if self.ttft_ms is None and kind != "thinking_delta":
                self.first_output(offset_ms)  # time to the answer or a call, not to thinking

    def _other_delta(self, block: _Block, kind: str, delta: dict[str, Any]) -> None:
        """A delta that carries no text to keep: a signature, a citation, or a slip."""
        key = _DELTAS[kind][1]
        if key is None:
            _add_citation(block, delta.get("citation"))
            return
        value = delta.get(key)
        if not isinstance(value, str):
            self.problem(f"delta shape: event {self.events}: {kind}"
                         f" without a string {key}: {snippet(dumps(delta))}")
        else:  # a signature_delta carries the whole signature: set, not joined
            block.raw["signature"] = value

    def _on_block_stop(self, payload: dict[str, Any], offset_ms: float) -> None:
        index = payload.get("index")
        block = self._blocks.get(index) if type(index) is int else None
        if block is None:
            self._never_started(index, "stop for a block never started", "content_block_stop")
            return
        if block.stopped:
            self.problem(f"block stopped twice: event {self.events} stops {block.label()}"
                         " again")
        block.stopped = True
        if block.call is not None:
            block.call.closed(offset_ms)  # the first stop: the call's input is complete
            self.closed_call(block.call, offset_ms)

    def _never_started(self, index: Any, check: str, kind: str) -> None:
        self.problem(f"{check}: event {self.events} is a {kind} for block {dumps(index)},"
                     " which no content_block_start opened")

    def _on_message_delta(self, payload: dict[str, Any], offset_ms: float) -> None:
        delta = payload.get("delta")
        reason = delta.get("stop_reason") if isinstance(delta, dict) else None
        if isinstance(reason, str) and reason:
            self._stop_reason = reason
        self.merge_usage(payload.get("usage"))

    def _on_message_stop(self, payload: dict[str, Any], offset_ms: float) -> None:
        self.done = True

    def _on_error(self, payload: dict[str, Any], offset_ms: float) -> None:
        self.in_band_error("error event", payload.get("error", payload))
        self.done = True  # an error event is how the API ends a stream that failed

    def _on_ping(self, payload: dict[str, Any], offset_ms: float) -> None:
        pass

    # -- helpers

    def _check_complete(self) -> None:
        """After ``message_stop``: every block stopped, and the reply said why it ended."""
        for index in sorted(self._blocks):
            block = self._blocks[index]
            if not block.stopped:
                self.problem(f"block never stopped: {block.label()} had no"
                                      " content_block_stop before message_stop")
        if self._stop_reason is None:
            self.problem("stop_reason: message_stop came, but no"
                                  " message_delta gave a stop_reason")


def _add_citation(block: _Block, citation: Any) -> None:
    """A ``citations_delta``'s citation, kept on the text block it cites for."""
    if citation is None:
        return
    citations = block.raw.get("citations")
    block.raw["citations"] = [*(citations if isinstance(citations, list) else []), citation]


_HANDLERS = {
    "message_start": MessageStream._on_message_start,
    "content_block_start": MessageStream._on_block_start,
    "content_block_delta": MessageStream._on_block_delta,
    "content_block_stop": MessageStream._on_block_stop,
    "message_delta": MessageStream._on_message_delta,
    "message_stop": MessageStream._on_message_stop,
    "error": MessageStream._on_error,
    "ping": MessageStream._on_ping,
}
