"""Chat completions (``POST chat/completions``): the case format's own shape.

The conversation is already in this API's words, so a request is the messages, the tools
and the params as they are; reading is ``chat_reader.py``.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

from ..records import Interaction, Reply
from .base import JSON_ERRORS, RequestParts, StreamReader, WireApi
from .chat_reader import StreamAssembler, parse_completion

if TYPE_CHECKING:
    from ..casefile.schema import Tool


class ChatCompletions(WireApi):
    name = "chat"
    title = "chat completions"
    path = "chat/completions"
    reasoning_where = "reasoning_content or reasoning"

    def request(self, parts: RequestParts) -> dict[str, Any]:
        body: dict[str, Any] = {}
        if parts.model is not None:
            body["model"] = parts.model
        body["messages"] = list(parts.messages)
        if parts.tools:
            body["tools"] = [_tool(tool) for tool in parts.tools]
        if parts.tool_choice is not None:
            body["tool_choice"] = _tool_choice(parts.tool_choice)
        body.update(parts.params)
        if parts.stream:
            body["stream"] = True
            body.setdefault("stream_options", {"include_usage": True})
        return body

    def read_body(self, status: int, body: bytes | str, content_type: str) -> Reply:
        return parse_completion(status, body, content_type)

    def stream_reader(self) -> StreamReader:
        return StreamAssembler()

    def sent_reasoning(self, interactions: list[Interaction]) -> tuple[str, str]:
        """The raw fields, so reasoning sent as ``<think>`` content is seen as content."""
        reasoning, content = [], []
        for message in _raw_messages(interactions):
            for key in ("reasoning_content", "reasoning"):
                if isinstance(message.get(key), str):
                    reasoning.append(message[key])
            if isinstance(message.get("content"), str):
                content.append(message["content"])
        return "".join(reasoning).strip(), "".join(content)

    def call_id_problem(self, interaction: Interaction) -> str:
        """Streamed calls with distinct ids must not share an index; the ids of a reply's
        calls must be distinct (the reader matches deltas by index and leaves ids alone)."""
        if interaction.events is not None:
            return _shared_index(interaction)
        return _shared_id(interaction)


def _tool(tool: Tool) -> dict[str, Any]:
    function: dict[str, Any] = {"name": tool.name, "parameters": tool.parameters}
    if tool.description:
        function["description"] = tool.description
    if tool.strict is not None:
        function["strict"] = tool.strict
    return {"type": "function", "function": function}


def _tool_choice(choice: Any) -> Any:
    if isinstance(choice, str):
        return choice
    if hasattr(choice, "allowed_tools"):
        allowed = choice.allowed_tools
        return {"type": "allowed_tools", "allowed_tools": {
            "mode": allowed.mode,
            "tools": [{"type": "function", "function": {"name": name}}
                      for name in allowed.tools]}}
    return {"type": "function", "function": {"name": choice.name}}


def _raw_payloads(interactions: Iterable[Interaction]) -> Iterable[dict[str, Any]]:
    """Every JSON object a server sent: bodies, and the data payloads of streams."""
    for interaction in interactions:
        if isinstance(interaction.body, dict):
            yield interaction.body
        for event in interaction.events or ():
            try:
                payload = json.loads(event.data)
            except JSON_ERRORS:
                continue
            if isinstance(payload, dict):
                yield payload


def _raw_messages(interactions: Iterable[Interaction]) -> Iterable[Mapping[str, Any]]:
    """Every message and delta of every choice, as sent."""
    for payload in _raw_payloads(interactions):
        for choice in payload.get("choices") or ():
            if isinstance(choice, dict):
                for key in ("message", "delta"):
                    if isinstance(choice.get(key), dict):
                        yield choice[key]


def _shared_index(interaction: Interaction) -> str:
    ids_by_index: dict[Any, set[str]] = {}
    for message in _raw_messages([interaction]):
        for call in message.get("tool_calls") or ():
            if isinstance(call, dict) and isinstance(call.get("id"), str):
                ids_by_index.setdefault(call.get("index"), set()).add(call["id"])
    merged = {index: ids for index, ids in ids_by_index.items() if len(ids) > 1}
    return "".join(f"streamed calls {', '.join(sorted(ids))} share index {index}"
                   for index, ids in list(merged.items())[:1])


def _shared_id(interaction: Interaction) -> str:
    ids = [call.get("id") for message in _raw_messages([interaction])
           for call in message.get("tool_calls") or () if isinstance(call, dict)]
    repeated = [id_ for id_, count in Counter(ids).items() if count > 1 or id_ in (None, "")]
    return f"the calls of one reply have no distinct ids; they are: {ids}" if repeated else ""


CHAT = ChatCompletions()
