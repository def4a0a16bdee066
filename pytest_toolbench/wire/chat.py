"""Chat completions (``POST chat/completions``): the case format's own shape.

The conversation is already in this API's words, so a request is the messages, the tools
and the params as they are; reading is ``chat_reader.py``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..records import Reply
from .base import RequestParts, StreamReader, WireApi
from .chat_reader import StreamAssembler, parse_completion

if TYPE_CHECKING:
    from ..casefile.schema import Tool


class ChatCompletions(WireApi):
    name = "chat"
    title = "chat completions"

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


CHAT = ChatCompletions()
