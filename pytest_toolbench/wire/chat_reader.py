"""Chat-completions responses -> :class:`Reply`: streamed deltas reassembled, or one body.

Reasoning comes in ``reasoning_content`` or ``reasoning`` (message or delta), as
``thinking`` parts of a content list (Mistral's Magistral), or as a ``<think>`` block that
opens the content; either way it is kept apart from the text.

Servers differ in how they stream tool calls; :class:`StreamAssembler` reads them all and
records protocol slips in ``Reply.problems`` instead of raising, so that a stage fails with
a clear reason only where the spec (section 6) or an expectation asks.

Tool-call deltas are matched to calls like this:

- with an ``index``: the call of that index (new index, new call). A header sent again
  (``id``/``name`` repeated) does not duplicate the name; only ``arguments`` append.
- without an ``index`` (Ollama sends every call whole, index-less):

  1. an ``id`` already seen continues that call (a repeated header);
  2. otherwise an ``id`` or a ``name`` opens a new call;
  3. ``arguments`` alone continue the single open call (or open one when there is none);
     with several calls open they are appended to the last one and reported as ambiguous.

A legacy ``function_call`` delta (llama.cpp sends it beside ``tool_calls``) counts only
when the whole response has no ``tool_calls``. Only choice 0 is read: a reply has one text.

Other shapes real servers send, read as they mean:

- ``delta.tool_calls`` as one object instead of a list (TGI): one call delta;
- arguments that are not JSON only because an end-of-sequence token (``</s>``,
  ``<|eot_id|>``) trails them (TGI sends it in a last, nameless delta): read without the
  token, and recorded as a problem, since the stream's arguments were not JSON;
- a lone choice whose ``index`` is not 0: the reply's choice (several choices none of which
  is 0 are a problem: which one is the reply cannot be told);
- ``finish_reason: ""`` (relays): no finish reason, so it never hides a real one;
- streamed ``delta.content`` as a list of text parts, as non-streamed messages allow;
- a ``refusal`` (message or delta, OpenAI's) is the reply's text when there is no content:
  the answer the model gave instead, as the Responses API's refusal part is read;
- usage only in ``x_groq.usage`` (Groq).

A ``tool_calls`` member of any other type is a problem: a call is never dropped unsaid.
"""

from __future__ import annotations

import json
import re
from typing import Any, cast

from ..records import Reply, ToolCall
from .base import JSON_ERRORS as _JSON_ERRORS
from .base import Event, arguments_json, error_message, message_text, snippet, split_think
from .stream import CallPart, StreamAccumulator, ToolCallParts, read_whole

__all__ = ["StreamAssembler", "parse_completion"]

STREAM = "chat stream"
BODY = "chat body"
"""How the problems of a stream and of a whole body start."""

def _dumps(value: Any) -> str:
    """``json.dumps`` of parsed server data; data nested just shallow enough for json to
    read can still be too deep to write from a deeper stack."""
    try:
        return json.dumps(value)
    except RecursionError:
        return "<JSON nested too deep to show>"


# Special tokens some servers leak at the end of generated text: ``</s>``, ``<eos>``,
# ``<end_of_turn>``, and the ``<|...|>`` family (``<|eot_id|>``, ``<|im_end|>``...).
_TRAILING_EOS = re.compile(r"(?:</s>|<eos>|<end_of_turn>|<\|[A-Za-z0-9_]{1,32}\|>)\s*\Z")


def _without_eos(raw: str) -> tuple[str, list[str]]:
    """``raw`` without the end-of-sequence tokens that trail it, and those tokens in order."""
    tokens: list[str] = []
    text = raw.rstrip()
    while match := _TRAILING_EOS.search(text):
        tokens.insert(0, match.group().strip())
        text = text[: match.start()].rstrip()
    return text, tokens


def _arguments_text(arguments: Any) -> str:
    """Arguments as a string: some servers send a JSON object instead of a string."""
    if isinstance(arguments, str):
        return arguments
    if arguments is None:
        return ""
    return _dumps(arguments)


class _CallBuilder(CallPart):
    """One tool call being put together from chat deltas."""

    def merge(self, item: dict[str, Any], problems: list[str]) -> None:
        """Apply one tool-call item: ``{"id": ..., "function": {"name", "arguments"}}``."""
        call_id = item.get("id")
        if call_id is not None and call_id != "" and self.id is None:
            self.id = str(call_id)  # some servers send an integer id
        function = item.get("function")
        if not isinstance(function, dict):
            return
        name = function.get("name")
        if isinstance(name, str) and name and name != self.name:
            if self.name:
                problems.append(
                    f"{STREAM}: tool call {self.position} renamed from {self.name!r} to"
                    f" {name!r}; kept {self.name!r}"
                )
            else:
                self.name = name
        if "arguments" in function:
            self.pieces.append(_arguments_text(function["arguments"]))

    def arrived(self, function: Any, offset_ms: float) -> None:
        """A delta of this call arrived at ``offset_ms``: the arguments are complete at the
        last delta that carried some (at the call's opening when none ever does)."""
        carried = isinstance(function, dict) and bool(_arguments_text(function.get("arguments")))
        if carried:
            self.said_ms = self.completed_ms = offset_ms
        elif self.completed_ms is None:
            self.completed_ms = offset_ms

    def finished(self, problems: list[str], where: str) -> ToolCall:
        """The finished call; invalid JSON arguments are recorded, not raised."""
        call = self.build()
        if not self.name:
            problems.append(f"{where}: tool call {self.position} has no name")
        # Not a problem of the response when the arguments are not JSON: the executor
        # answers such a call with an error tool message, and checks decide (always for
        # streams, SPEC section 6). llama.cpp pads arguments with spaces ("{ ... } "), which
        # arguments_json strips.
        if call.arguments_error is not None and self._read_without_eos(call, problems, where):
            call.arguments_error = None
        return call

    def _read_without_eos(self, call: ToolCall, problems: list[str], where: str) -> bool:
        """Arguments that are JSON once the end-of-sequence tokens after them are left out."""
        text, tokens = _without_eos(call.arguments_raw)
        if not tokens:
            return False
        arguments, error = arguments_json(text)
        if error is not None:
            return False
        call.arguments = arguments
        call.arguments_raw = text  # what goes back to the model: its arguments, no token
        problems.append(
            f"{where}: tool call {self.position} ({self.name or 'no name'}): its arguments end"
            f" in the end-of-sequence token {' '.join(tokens)!r}, which is not JSON; read"
            " without it"
        )
        return True


class _ToolCalls(ToolCallParts[_CallBuilder]):
    """The tool calls of one reply, matched to deltas by index (or the rule above): keyed
    ``("index", N)`` and ``("id", ID)``."""

    def __init__(self, where: str) -> None:
        super().__init__(_CallBuilder)
        self.where = where

    def add(self, item: Any, problems: list[str], chunk: int, offset_ms: float) -> None:
        """Apply one tool-call delta item of data event number ``chunk``, which arrived
        ``offset_ms`` after the request was sent."""
        if not isinstance(item, dict):
            problems.append(f"{self.where}: event {chunk}: tool-call delta is not an object:"
                            f" {snippet(repr(item))}")
            return
        index = item.get("index")
        if isinstance(index, int) and not isinstance(index, bool):
            builder = self.get(("index", index)) or self.open(("index", index))
        else:
            builder = self._without_index(item, problems, chunk)
        builder.merge(item, problems)
        builder.arrived(item.get("function"), offset_ms)
        if builder.id is not None and "id" in item:
            self.key(("id", builder.id), builder)

    def add_member(self, member: Any, problems: list[str], chunk: int,
                   offset_ms: float) -> bool:
        """Apply a delta's ``tool_calls`` member; true when it held a call delta.

        A list of call deltas, or one call delta as an object (TGI); ``null`` and ``[]``
        hold none; anything else is a problem rather than a call lost unsaid.
        """
        items = _call_items(member, problems, f"{self.where}: event {chunk}: ")
        for item in items:
            self.add(item, problems, chunk, offset_ms)
        return bool(items)

    def add_whole(self, item: Any, problems: list[str]) -> None:
        """One complete call of a non-streamed message: always a call of its own."""
        if not isinstance(item, dict):
            problems.append(f"{self.where}: tool call is not an object: {snippet(repr(item))}")
            return
        self.open().merge(item, problems)

    def _without_index(self, item: dict[str, Any], problems: list[str], chunk: int) -> _CallBuilder:
        call_id = item.get("id")
        known = self.get(("id", str(call_id))) if call_id is not None else None
        if known is not None:
            return known
        function = item.get("function")
        has_name = isinstance(function, dict) and bool(function.get("name"))
        if call_id not in (None, "") or has_name or not self.parts:
            return self.open()
        if len(self.parts) > 1:
            problems.append(
                f"{self.where}: event {chunk}: tool-call delta has no index while"
                f" {len(self.parts)} calls are open; appended to the last one"
            )
        return self.parts[-1]

    def build(self, problems: list[str]) -> list[ToolCall]:
        return [builder.finished(problems, self.where) for builder in self.parts]


def _call_items(member: Any, problems: list[str], where: str) -> list[Any]:
    """The items of a ``tool_calls`` member: a list, or one object (TGI streams one)."""
    if isinstance(member, list):
        return member
    if isinstance(member, dict):
        return [member]
    if member is not None:
        problems.append(f"{where}tool_calls is neither a list nor an object:"
                        f" {snippet(_dumps(member))}")
    return []


def _reply_choice(choices: Any) -> dict[str, Any] | None:
    """The choice that is the reply: choice 0 (no ``index`` counts as 0), or a lone choice
    whatever its index."""
    dicts = _choice_objects(choices)
    for choice in dicts:
        if choice.get("index", 0) == 0:
            return choice
    return dicts[0] if len(dicts) == 1 else None


def _no_reply_choice(choices: Any) -> str | None:
    """Why ``_reply_choice`` found none among several choices; None when there were none."""
    dicts = _choice_objects(choices)
    if len(dicts) < 2:
        return None
    indexes = ", ".join(_dumps(choice.get("index")) for choice in dicts)
    return f"{len(dicts)} choices (index {indexes}) and none with index 0, so none was read"


def _choice_objects(choices: Any) -> list[dict[str, Any]]:
    if not isinstance(choices, list):
        return []
    return [choice for choice in choices if isinstance(choice, dict)]


def _finish_reason(choice: dict[str, Any]) -> str | None:
    """The choice's finish reason; ``""`` (relays send it for "not yet") counts as none."""
    reason = choice.get("finish_reason")
    return None if reason is None or reason == "" else str(reason)


def _chunk_usage(chunk: dict[str, Any]) -> dict[str, Any] | None:
    """A chunk's usage object: ``usage``, or Groq's ``x_groq.usage``."""
    usage = chunk.get("usage")
    if isinstance(usage, dict):
        return usage
    groq = chunk.get("x_groq")
    usage = groq.get("usage") if isinstance(groq, dict) else None
    return usage if isinstance(usage, dict) else None


class StreamAssembler(StreamAccumulator):
    """Maps the SSE events of one streamed chat-completions response onto the accumulator:
    ``data: [DONE]`` ends it, each chunk's choice 0 gives text, reasoning and call deltas."""

    where = STREAM
    end = "data: [DONE]"
    end_marker = "[DONE]"

    def __init__(self) -> None:
        super().__init__()
        self._text: list[str] = []
        self._refusal: list[str] = []
        self._reasoning: list[str] = []
        self._tool_calls = _ToolCalls(STREAM)
        self._legacy: _CallBuilder | None = None  # a ``function_call`` delta stream
        self._finish_reason: str | None = None
        self._closed = 0
        """How many of the calls (in order) are marked complete."""

    def read(self, event: Event, offset_ms: float) -> None:
        if self.done:
            self.problem(f"terminal event: event {self.events} arrived after [DONE]")
        if event.event == "error":
            self._event_error(event.data)
            return
        chunk = self.payload(event)
        if chunk is not None:
            self._read_chunk(chunk, offset_ms)

    def complete(self, reply: Reply) -> None:
        reply.tool_calls = _calls_of(self._tool_calls, self._legacy, self.problems)
        _set_text(reply, "".join(self._text) or "".join(self._refusal),
                  "".join(self._reasoning) or None)
        _set_finish_reason(reply, self._finish_reason)

    def _read_chunk(self, chunk: Any, offset_ms: float) -> None:
        if not isinstance(chunk, dict):
            self.problem(f"JSON: event {self.events} is not a JSON object:"
                         f" {snippet(str(chunk))}")
            return
        if chunk.get("error") is not None:
            self.in_band_error("error chunk", chunk["error"])
        self.set_usage(_chunk_usage(chunk))  # ``usage: null`` rides on every chunk of some
        choice = _reply_choice(chunk.get("choices"))
        if choice is None:
            if why := _no_reply_choice(chunk.get("choices")):
                self.problem(f"choice: event {self.events} has {why}")
            return
        finish_reason = _finish_reason(choice)
        if finish_reason is not None:
            self._finish_reason = finish_reason
        delta = choice.get("delta")
        if isinstance(delta, dict) and self._read_delta(delta, offset_ms):
            self.first_output(offset_ms)
        if self._tool_calls.parts or self._legacy is not None:
            self._close_calls(offset_ms)

    def _close_calls(self, offset_ms: float) -> None:
        """Chat's marks of complete arguments: a call is complete once the next call's
        index opens, and every call once a finish reason comes."""
        parts = self._tool_calls.parts
        if len(parts) > self._closed + (self._finish_reason is None):
            upto = len(parts) - (self._finish_reason is None)
            while self._closed < upto:
                self.closed_call(parts[self._closed], offset_ms)
                self._closed += 1
        if self._legacy is not None and self._finish_reason is not None:
            self.closed_call(self._legacy, offset_ms)

    def built(self, part: CallPart) -> ToolCall:
        return cast(_CallBuilder, part).finished([], STREAM)

    def _read_delta(self, delta: dict[str, Any], offset_ms: float) -> bool:
        """Apply one delta; true when it carried content or a tool-call delta."""
        carried = False
        content, thought = _content(delta.get("content"))
        if content:
            self._text.append(content)
            carried = True
        if thought:
            self._reasoning.append(thought)
        refusal = delta.get("refusal")
        if isinstance(refusal, str) and refusal:
            self._refusal.append(refusal)
            carried = True
        reasoning = _reasoning_of(delta)
        if reasoning:
            self._reasoning.append(reasoning)
        if self._tool_calls.add_member(delta.get("tool_calls"), self.problems, self.events,
                                       offset_ms):
            carried = True
        function_call = delta.get("function_call")
        if isinstance(function_call, dict):
            if self._legacy is None:
                self._legacy = _CallBuilder(0)
            self._legacy.merge({"function": function_call}, self.problems)
            self._legacy.arrived(function_call, offset_ms)
            carried = True
        return carried

    def _event_error(self, data: str) -> None:
        """An ``event: error`` payload: JSON with an error (or that is one), or plain text."""
        try:
            payload = json.loads(data)
        except _JSON_ERRORS:
            self.in_band_error("error event", data.strip())
            return
        if isinstance(payload, dict) and "error" in payload:
            payload = payload["error"]
        self.in_band_error("error event", payload)


def _content(content: Any) -> tuple[str, str]:
    """A message's or delta's content -> (its text, its reasoning). A list's ``thinking``
    parts are reasoning (Mistral's Magistral: ``{"type": "thinking", "thinking": [{"type":
    "text", "text": ...}]}``, whole or in deltas); its other parts with text are text."""
    if not isinstance(content, list):
        return message_text(content), ""
    thinking = [isinstance(part, dict) and part.get("type") == "thinking" for part in content]
    text = message_text([part for part, thought in zip(content, thinking) if not thought])
    reasoning = "".join(message_text(part.get("thinking"))
                        for part, thought in zip(content, thinking) if thought)
    return text, reasoning


def _reasoning_of(message: dict[str, Any]) -> str:
    """A message's or delta's reasoning: ``reasoning_content`` (DeepSeek, vLLM, llama.cpp)
    or ``reasoning`` (OpenRouter, Ollama, newer vLLM), whichever holds text."""
    for key in ("reasoning_content", "reasoning"):
        value = message.get(key)
        if isinstance(value, str) and value:
            return value
    return ""


def _set_text(reply: Reply, text: str, reasoning: str | None) -> None:
    """The reply's text and reasoning; a ``<think>`` block that opens the text is reasoning
    (kept apart even when the server also sent reasoning of its own, which then wins)."""
    reply.text, thought = split_think(text)
    reply.reasoning = reasoning if reasoning is not None else thought


_NORMALISED = {"function_call": "tool_calls"}
"""Chat finish reasons that mean one of the normalised ones (the legacy function call)."""


def _set_finish_reason(reply: Reply, reason: str | None) -> None:
    reply.api_finish_reason = reason
    reply.finish_reason = _NORMALISED.get(reason, reason) if reason is not None else None


def _calls_of(
    tool_calls: _ToolCalls, legacy: _CallBuilder | None, problems: list[str]
) -> list[ToolCall]:
    """Built tool calls; a legacy ``function_call`` only when there are no ``tool_calls``."""
    if tool_calls.parts or legacy is None:
        return tool_calls.build(problems)
    return [legacy.finished(problems, tool_calls.where)]


def parse_completion(
    status: int, body: bytes | str, content_type: str = "application/json"
) -> Reply:
    """A non-streamed response (any status) -> Reply.

    A non-2xx response sets ``error``: ``error.message`` (object or string) or the raw body
    text (``text/plain``, HTML). A 2xx body that is not a chat completion is a problem.
    """
    reply, payload = read_whole(BODY, status, body, content_type)
    if payload is None:
        return reply
    return _completion_reply(reply, payload)


def _completion_reply(reply: Reply, payload: Any) -> Reply:
    """A parsed 2xx JSON body -> Reply; anything but a chat completion is a problem."""
    if isinstance(payload, dict) and payload.get("error") is not None:
        reply.error = error_message(payload["error"])
        return reply
    choices = payload.get("choices") if isinstance(payload, dict) else None
    choice = _reply_choice(choices)
    message = choice.get("message") if choice is not None else None
    if choice is None and (why := _no_reply_choice(choices)):
        reply.problems.append(f"{BODY}: choice: the response has {why}")
        return reply
    if choice is None or not isinstance(message, dict):
        reply.problems.append(f"{BODY}: completion shape: the response is not a chat"
                              f" completion: {snippet(_dumps(payload))}")
        return reply
    refusal = message.get("refusal")
    text, thought = _content(message.get("content"))
    text = text or (refusal if isinstance(refusal, str) else "")
    _set_text(reply, text, _reasoning_of(message) or thought or None)
    reply.tool_calls = _message_calls(message, reply.problems)
    _set_finish_reason(reply, _finish_reason(choice))
    usage = payload.get("usage")
    reply.usage = usage if isinstance(usage, dict) else None
    return reply


def _message_calls(message: dict[str, Any], problems: list[str]) -> list[ToolCall]:
    """The tool calls of a complete assistant message (legacy ``function_call`` as fallback)."""
    calls = _ToolCalls(BODY)
    for item in _call_items(message.get("tool_calls"), problems, f"{BODY}: "):
        calls.add_whole(item, problems)
    legacy = None
    if isinstance(message.get("function_call"), dict):
        legacy = _CallBuilder(0)
        legacy.merge({"function": message["function_call"]}, problems)
    return _calls_of(calls, legacy, problems)
