"""A scripted model that answers every wire API in its real shape, for agents built on SDKs.

An agent written on the openai, anthropic or google-genai SDK (or a framework on top of
them) picks its API and whether to stream by itself; the test only says what the model
should answer, turn by turn. :class:`ScriptedModel` is a handler for the loopback servers
(``server.set_handler(model)``): each request takes the next scripted turn and gets it
rendered for the API its path names, whole or streamed as the request asked, in the shape
the service sends (so each SDK's own parser, not a lenient one, reads it):

    model = ScriptedModel(calls(("lookup_order", {"order_id": "913"})), says("Refunded."))
    chat_server.set_handler(model)

- chat completions (``/v1/chat/completions``): a ``chat.completion``, or its chunks with
  ``[DONE]``;
- Responses (``/v1/responses``): a ``response`` object, or the semantic events from
  ``response.created`` to ``response.completed`` with sequence numbers;
- Messages (``/v1/messages``): a ``message``, or ``message_start`` ... ``message_stop``;
- Gemini (``/v1beta/models/M:generateContent`` or ``:streamGenerateContent?alt=sse``, on a
  :class:`~support.gemini_server.GeminiServer`): a ``GenerateContentResponse``, or one
  event per part.

A request past the end of the script gets a 500 saying so, which fails the agent loudly.
Every reply closes its connection: an SDK's pool keeps no connection past the test (and
the event loop) it was opened in; openai-agents shares one HTTP client across runs, and a
kept connection fails on the next run's loop ("bound to a different event loop").
"""

from __future__ import annotations

import collections
import dataclasses
import itertools
import json
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from support.chat_server import (
    JsonReply,
    RecordedRequest,
    SSEPause,
    SSEReply,
    chunks_for,
    completion,
    json_reply,
    named_event,
    sse_reply,
)
from support.gemini_server import gemini_sse
from support.gemini_server import response as gemini_response

USAGE = {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}


@dataclass(frozen=True)
class ToolCall:
    """One call the model makes: a tool's name and its arguments."""

    name: str
    arguments: Mapping[str, Any]


@dataclass(frozen=True)
class Turn:
    """One reply of the model: text, calls, or both (text first)."""

    text: str = ""
    calls: tuple[ToolCall, ...] = ()


def says(text: str) -> Turn:
    """A reply that is text only."""
    return Turn(text=text)


def calls(*pairs: tuple[str, Mapping[str, Any]], text: str = "") -> Turn:
    """A reply that calls tools, each given as ``(name, arguments)``."""
    return Turn(text=text, calls=tuple(ToolCall(name, args) for name, args in pairs))


@dataclass
class Served:
    """What the model answered one request with."""

    api: str
    streamed: bool
    turn: Turn


class ScriptedModel:
    """Answers each request with the next scripted turn, in the API and mode it asked for."""

    def __init__(self, *turns: Turn, pause_s: float = 0.0, buffered: bool = False) -> None:
        """``pause_s``: a streamed reply waits this long between its events, so a call's
        arguments arrive over time, as a model writes them; ``buffered``: it waits as long
        as all those pauses first, then sends every event at once (a server that holds its
        calls back to the end of the stream)."""
        self.pause_s, self.buffered = pause_s, buffered
        self.turns: collections.deque[Turn] = collections.deque(turns)
        self.served: list[Served] = []
        """Every answer given, in order: which API, streamed or not, and the turn."""
        self._lock = threading.Lock()
        self._ids = itertools.count(1)

    def __call__(self, request: RecordedRequest) -> JsonReply | SSEReply:
        api, streamed = _api_of(request)
        with self._lock:
            turn = self.turns.popleft() if self.turns else None
            if turn is not None:
                self.served.append(Served(api, streamed, turn))
            first_id = next(self._ids)
            for _ in range(len(turn.calls) if turn else 0):
                next(self._ids)
        if turn is None:
            body = {"error": {"message": "the scripted model has no turn left",
                              "type": "server_error", "code": None, "param": None}}
            return json_reply(body, status=500)
        ids = [f"call_{first_id + n}" for n in range(len(turn.calls))]
        reply = RENDERERS[api](turn, ids, streamed)
        if isinstance(reply, SSEReply) and self.pause_s > 0:
            reply = _paced(reply, self.pause_s, self.buffered)
        return dataclasses.replace(reply, headers={**reply.headers, "connection": "close"})

    @property
    def left(self) -> int:
        """How many scripted turns no request has taken yet."""
        with self._lock:
            return len(self.turns)


def _paced(reply: SSEReply, pause_s: float, buffered: bool) -> SSEReply:
    """``reply``'s events ``pause_s`` apart; ``buffered``: all of the waiting first."""
    events = list(reply.events)
    if buffered:  # one write: the events cannot arrive apart, however busy the machine
        whole = b"".join(piece for piece in reply.pieces() if isinstance(piece, bytes))
        return dataclasses.replace(reply, events=(SSEPause(pause_s * len(events)), whole),
                                   done=False)
    paced = [piece for event in events for piece in (SSEPause(pause_s), event)]
    return dataclasses.replace(reply, events=tuple(paced))


def _api_of(request: RecordedRequest) -> tuple[str, bool]:
    path = request.path.split("?")[0]
    if ":streamGenerateContent" in path:
        return "gemini", True
    if ":generateContent" in path:
        return "gemini", False
    streamed = bool(request.json().get("stream"))
    for suffix, api in (("/chat/completions", "chat"), ("/responses", "responses"),
                        ("/messages", "messages")):
        if path.endswith(suffix):
            return api, streamed
    raise ValueError(f"no wire API is served at {request.path}")


# -- chat completions ----------------------------------------------------------------------


def _chat(turn: Turn, ids: list[str], streamed: bool) -> JsonReply | SSEReply:
    tool_calls = [{"id": call_id, "type": "function",
                   "function": {"name": call.name, "arguments": json.dumps(call.arguments)}}
                  for call_id, call in zip(ids, turn.calls)]
    text = turn.text or None
    if streamed:
        return sse_reply(chunks_for(text, tool_calls, split=6))
    return json_reply(completion(text, tool_calls))


# -- Responses -----------------------------------------------------------------------------

_RESPONSES_USAGE = {"input_tokens": 10, "input_tokens_details": {"cached_tokens": 0},
                    "output_tokens": 5, "output_tokens_details": {"reasoning_tokens": 0},
                    "total_tokens": 15}


def _responses_items(turn: Turn, ids: list[str]) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = []
    if turn.text:
        items.append({"type": "message", "id": "msg_1", "role": "assistant",
                      "status": "completed", "content": [
                          {"type": "output_text", "text": turn.text, "annotations": []}]})
    for call_id, call in zip(ids, turn.calls):
        items.append({"type": "function_call", "id": f"fc_{call_id}", "call_id": call_id,
                      "name": call.name, "arguments": json.dumps(call.arguments),
                      "status": "completed"})
    return items


def _response(output: list[dict[str, Any]], status: str) -> dict[str, Any]:
    return {"id": "resp_1", "object": "response", "created_at": 1700000000, "status": status,
            "model": "test-model", "output": output, "parallel_tool_calls": True,
            "tool_choice": "auto", "tools": [], "temperature": 1.0, "top_p": 1.0,
            "error": None, "incomplete_details": None, "instructions": None,
            "metadata": {}, "usage": _RESPONSES_USAGE if status == "completed" else None}


def _responses_item_events(index: int, item: dict[str, Any]) -> list[dict[str, Any]]:
    if item["type"] == "message":
        text = item["content"][0]["text"]
        where = {"item_id": item["id"], "output_index": index, "content_index": 0}
        opened = {**item, "status": "in_progress", "content": []}
        part = {"type": "output_text", "text": "", "annotations": []}
        return [{"type": "response.output_item.added", "output_index": index, "item": opened},
                {"type": "response.content_part.added", **where, "part": part},
                *({"type": "response.output_text.delta", **where, "delta": piece,
                   "logprobs": []} for piece in _pieces(text)),
                {"type": "response.output_text.done", **where, "text": text, "logprobs": []},
                {"type": "response.content_part.done", **where,
                 "part": {**part, "text": text}},
                {"type": "response.output_item.done", "output_index": index, "item": item}]
    where = {"item_id": item["id"], "output_index": index}
    opened = {**item, "arguments": "", "status": "in_progress"}
    return [{"type": "response.output_item.added", "output_index": index, "item": opened},
            *({"type": "response.function_call_arguments.delta", **where, "delta": piece}
              for piece in _pieces(item["arguments"])),
            {"type": "response.function_call_arguments.done", **where,
             "arguments": item["arguments"], "name": item["name"]},
            {"type": "response.output_item.done", "output_index": index, "item": item}]


def _responses(turn: Turn, ids: list[str], streamed: bool) -> JsonReply | SSEReply:
    items = _responses_items(turn, ids)
    if not streamed:
        return json_reply(_response(items, "completed"))
    events = [{"type": "response.created", "response": _response([], "in_progress")},
              {"type": "response.in_progress", "response": _response([], "in_progress")},
              *(event for index, item in enumerate(items)
                for event in _responses_item_events(index, item)),
              {"type": "response.completed", "response": _response(items, "completed")}]
    numbered = [{**event, "sequence_number": n} for n, event in enumerate(events)]
    return sse_reply([named_event(e["type"], e) for e in numbered], done=False)


# -- Messages ------------------------------------------------------------------------------


def _message_blocks(turn: Turn, ids: list[str]) -> list[dict[str, Any]]:
    blocks: list[dict[str, Any]] = [{"type": "text", "text": turn.text}] if turn.text else []
    blocks += [{"type": "tool_use", "id": f"toolu_{call_id}", "name": call.name,
                "input": dict(call.arguments)} for call_id, call in zip(ids, turn.calls)]
    return blocks


def _message(blocks: list[dict[str, Any]], stop_reason: str | None) -> dict[str, Any]:
    return {"id": "msg_1", "type": "message", "role": "assistant", "model": "test-model",
            "content": blocks, "stop_reason": stop_reason, "stop_sequence": None,
            "usage": {"input_tokens": 10, "output_tokens": 5}}


def _message_block_events(index: int, block: dict[str, Any]) -> list[dict[str, Any]]:
    if block["type"] == "text":
        opened, deltas = {"type": "text", "text": ""}, [
            {"type": "text_delta", "text": piece} for piece in _pieces(block["text"])]
    else:
        opened, deltas = {**block, "input": {}}, [
            {"type": "input_json_delta", "partial_json": piece}
            for piece in _pieces(json.dumps(block["input"]))]
    return [{"type": "content_block_start", "index": index, "content_block": opened},
            *({"type": "content_block_delta", "index": index, "delta": delta}
              for delta in deltas),
            {"type": "content_block_stop", "index": index}]


def _messages(turn: Turn, ids: list[str], streamed: bool) -> JsonReply | SSEReply:
    blocks = _message_blocks(turn, ids)
    stop_reason = "tool_use" if turn.calls else "end_turn"
    if not streamed:
        return json_reply(_message(blocks, stop_reason))
    events = [{"type": "message_start", "message": {**_message([], None),
                                                    "usage": {"input_tokens": 10,
                                                              "output_tokens": 1}}},
              *(event for index, block in enumerate(blocks)
                for event in _message_block_events(index, block)),
              {"type": "message_delta", "delta": {"stop_reason": stop_reason,
                                                  "stop_sequence": None},
               "usage": {"output_tokens": 5}},
              {"type": "message_stop"}]
    return sse_reply([named_event(e["type"], e) for e in events], done=False)


# -- Gemini --------------------------------------------------------------------------------


def _gemini(turn: Turn, ids: list[str], streamed: bool) -> JsonReply | SSEReply:
    parts: list[dict[str, Any]] = [{"text": turn.text}] if turn.text else []
    parts += [{"functionCall": {"name": call.name, "args": dict(call.arguments)}}
              for call in turn.calls]
    if not streamed:
        return json_reply(gemini_response(*parts))
    if not parts:
        return gemini_sse([gemini_response()])
    events = [gemini_response(part, finish=None) for part in parts[:-1]]
    return gemini_sse([*events, gemini_response(parts[-1])])


def _pieces(text: str, size: int = 5) -> list[str]:
    return [text[i:i + size] for i in range(0, len(text), size)] or [""]


RENDERERS: dict[str, Callable[[Turn, list[str], bool], JsonReply | SSEReply]] = {
    "chat": _chat, "responses": _responses, "messages": _messages, "gemini": _gemini}
"""One renderer per wire API: the scripted turn as that API's reply, whole or streamed."""
