"""OpenAI's Responses API (``POST responses``): the conversation as ``instructions`` and
``input`` items; reading is ``responses_reader.py`` (its docstring names the checks).

The request, from the chat-shaped conversation:

- leading ``system`` messages -> ``instructions``, joined by blank lines; a later system
  message stays an ``input`` item with role ``system``;
- ``user`` -> ``{role: user, content}``; text parts become ``input_text``, ``image_url``
  parts ``input_image``; a string stays a string;
- ``assistant`` -> its text as ``{type: message, role: assistant, content: [{type:
  output_text, text}]}`` (none when empty), then one ``{type: function_call, call_id,
  name, arguments}`` per tool call. The text goes as an ``output_text`` part, not a plain
  string: the API takes both, and older llama.cpp servers only the part;
- an ``assistant`` message that came from a reply -> that reply's ``output`` items as the
  server sent them (``RequestParts.native``; a stream's rebuilt from its events), as the
  API's stateless loop does: ``reasoning`` items with their ``id``, ``summary`` and
  ``encrypted_content`` (when the case asks for it with ``include:
  [reasoning.encrypted_content]``), ``function_call`` items with their ``id``. Reasoning
  items that end the reply are left out: the API refuses one without the item that
  followed it (400 "... was provided without its required following item"), and a reply
  cut off while thinking has none;
- ``tool`` -> ``{type: function_call_output, call_id: tool_call_id, output}``;
- tools flat: ``{type: function, name, description, parameters, strict}`` (description
  when given; ``strict: false`` unless the case sets it, as the API takes a function without
  ``strict`` for a strict one and rewrites its schema to fit);
- ``tool_choice``: ``auto``/``none``/``required`` as they are, ``{name}`` ->
  ``{type: function, name}``, ``allowed_tools`` -> ``{type: allowed_tools, mode, tools:
  [{type: function, name}]}``;
- ``params`` as they are (``parallel_tool_calls`` is the API's own), but the token limit,
  in any of its names, goes as ``max_output_tokens``; ``stream: true`` when streaming.
  Nothing is added (no ``store``): params stay the case's.

Everything the case format asks can be said in this API; only a ``params`` key the
request has no field for (``REQUEST_FIELDS``: ``seed`` is chat's) is a collection error.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from ..records import Reply
from .base import (
    Halver,
    RequestParts,
    SseItem,
    StreamReader,
    WireApi,
    dumps,
    half,
    message_text,
    take_token_limit,
)
from .responses_reader import ResponsesStream, read_response_body

if TYPE_CHECKING:
    from ..casefile.schema import Tool

__all__ = ["RESPONSES", "ResponsesApi"]


REQUEST_FIELDS = frozenset({
    # The request's fields, as openai-python's ResponseCreateParams names them (1.x to 3.x).
    "access_programs", "background", "background_options", "context_management",
    "conversation", "image", "include", "input", "instructions", "max_output_tokens",
    "max_tool_calls", "metadata", "model", "moderation", "parallel_tool_calls",
    "previous_response_id", "prompt", "prompt_cache_key", "prompt_cache_options",
    "prompt_cache_retention", "reasoning", "safety_identifier", "service_tier", "store",
    "stream", "stream_options", "temperature", "text", "tool_choice", "tools", "top_logprobs",
    "top_p", "truncation", "user",
    # The token limit's other names, sent as max_output_tokens.
    "max_tokens", "max_completion_tokens",
})
"""What ``params`` may hold over this API; ``seed``, ``stop`` or ``n`` (chat's) are refused."""


class ResponsesApi(WireApi):
    name = "responses"
    title = "Responses API"
    path = "responses"
    reasoning_where = "reasoning items"
    request_fields = REQUEST_FIELDS

    def emptied(self, items: list[SseItem]) -> list[SseItem]:
        """No output items (none streamed), ``completed``."""
        return _kept_items(items, lambda item: False, None)

    def truncated(self, items: list[SseItem]) -> list[SseItem]:
        """Message items only, their text halved; ``incomplete`` for
        ``max_output_tokens``."""
        return _kept_items(items, lambda item: item.get("type") == "message",
                           "max_output_tokens")

    def structured(self, parts: RequestParts, name: str, schema: dict[str, Any]
                   ) -> RequestParts:
        """``text.format``: ``json_schema``, strict."""
        return replace(parts, params={**parts.params, "text": {"format": {
            "type": "json_schema", "name": name, "strict": True, "schema": schema}}})

    def request(self, parts: RequestParts) -> dict[str, Any]:
        body: dict[str, Any] = {}
        if parts.model is not None:
            body["model"] = parts.model
        instructions, rest = _instructions(parts.messages)
        if instructions is not None:
            body["instructions"] = instructions
        first = len(parts.messages) - len(rest)
        body["input"] = [item for index, message in enumerate(rest, start=first)
                         for item in _items_of(message, parts.native.get(index))]
        if parts.tools:
            body["tools"] = [_tool(tool) for tool in parts.tools]
        if parts.tool_choice is not None:
            body["tool_choice"] = _tool_choice(parts.tool_choice)
        params, limit = take_token_limit(parts.params)
        body.update(params)
        if limit is not None:
            body["max_output_tokens"] = limit
        if parts.stream:
            body["stream"] = True
        return body

    def read_body(self, status: int, body: bytes | str, content_type: str) -> Reply:
        return read_response_body(status, body, content_type)

    def stream_reader(self) -> StreamReader:
        return ResponsesStream()


def _instructions(messages: list[dict[str, Any]]) -> tuple[str | None, list[dict[str, Any]]]:
    """The leading system messages' text, joined by blank lines, and the messages after."""
    count = 0
    while count < len(messages) and messages[count].get("role") == "system":
        count += 1
    if count == 0:
        return None, messages
    texts = [message_text(message.get("content")) for message in messages[:count]]
    return "\n\n".join(texts), messages[count:]


def _items_of(message: dict[str, Any], native: list[dict[str, Any]] | None
              ) -> list[dict[str, Any]]:
    """A message's input items: the reply's own output items when it came from one."""
    if native is not None and message.get("role") == "assistant":
        return _without_trailing_reasoning(native)
    return _input_items(message)


def _without_trailing_reasoning(items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """A reply's items without the reasoning items that end it: the API refuses a reasoning
    item sent back without the item the model wrote after it, and a reply cut off while
    thinking (incomplete for ``max_output_tokens``) holds nothing after its reasoning."""
    end = len(items)
    while end and items[end - 1].get("type") == "reasoning":
        end -= 1
    return items[:end]


def _input_items(message: dict[str, Any]) -> list[dict[str, Any]]:
    """One chat message -> its ``input`` items (an assistant turn may give several)."""
    role = message.get("role")
    if role == "assistant":
        return _assistant_items(message)
    if role == "tool":
        return [{"type": "function_call_output", "call_id": message.get("tool_call_id"),
                 "output": _content(message.get("content"))}]
    return [{"role": role, "content": _content(message.get("content"))}]


def _assistant_items(message: dict[str, Any]) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = []
    text = message_text(message.get("content"))
    if text:
        items.append({"type": "message", "role": "assistant", "content": [
            {"type": "output_text", "text": text, "annotations": []}]})
    calls = message.get("tool_calls")
    for call in calls if isinstance(calls, list) else []:
        function = call.get("function") if isinstance(call, dict) else None
        if not isinstance(function, dict):
            continue
        arguments = function.get("arguments")
        items.append({"type": "function_call", "call_id": call.get("id"),
                      "name": function.get("name"),
                      "arguments": arguments if isinstance(arguments, str) else dumps(arguments)})
    return items


def _content(content: Any) -> Any:
    """Message content: a string as it is; chat's content parts as the API's input parts."""
    if content is None:
        return ""
    if not isinstance(content, list):
        return content
    return [_input_part(part) for part in content]


def _input_part(part: Any) -> Any:
    if not isinstance(part, dict):
        return part
    if part.get("type") == "text":
        return {"type": "input_text", "text": part.get("text")}
    if part.get("type") == "image_url":
        image = part.get("image_url")
        url = image.get("url") if isinstance(image, dict) else image
        converted: dict[str, Any] = {"type": "input_image", "image_url": url}
        if isinstance(image, dict) and "detail" in image:
            converted["detail"] = image["detail"]
        return converted
    return part  # already the API's own (input_text, input_file...), or for the server to judge


def _tool(tool: Tool) -> dict[str, Any]:
    body: dict[str, Any] = {"type": "function", "name": tool.name}
    if tool.description:
        body["description"] = tool.description
    body["parameters"] = tool.parameters
    # The API reads a function without strict as strict, and makes its schema strict to fit
    # (every property required, no other): an optional argument would be filled, and the
    # case would mean something else here than over chat. Unset means not strict.
    body["strict"] = bool(tool.strict)
    return body


def _tool_choice(choice: Any) -> Any:
    if isinstance(choice, str):
        return choice
    if hasattr(choice, "allowed_tools"):
        allowed = choice.allowed_tools
        return {"type": "allowed_tools", "mode": allowed.mode,
                "tools": [{"type": "function", "name": name} for name in allowed.tools]}
    return {"type": "function", "name": choice.name}


RESPONSES = ResponsesApi()


_ITEM_EVENT = "response.output_item.added"


def _kept_items(items: list[SseItem], keep: Callable[[dict[str, Any]], bool],
                incomplete: str | None) -> list[SseItem]:
    """The reply with only the output items ``keep`` says (a stream's ``output_index``
    counted again), their text halved when ``incomplete`` says why it ended early."""
    renumbered: dict[int, int] = {}
    for item in items:
        data = item.data
        if isinstance(data, dict) and data.get("type") == _ITEM_EVENT and keep(
                data.get("item") or {}):
            renumbered[data.get("output_index", 0)] = len(renumbered)
    budget = Halver(sum(len(data.get("delta") or "") for data in (i.data for i in items)
                        if isinstance(data, dict)
                        and data.get("type") == "response.output_text.delta"))
    kept = []
    for item in items:
        data = item.data
        if isinstance(data, dict):
            if "output_index" in data:
                if data["output_index"] not in renumbered:
                    continue
                data["output_index"] = renumbered[data["output_index"]]
                _cut_texts(data, budget, incomplete)
            for response in (data, data.get("response")):
                if isinstance(response, dict) and isinstance(response.get("output"), list):
                    response["output"] = [_cut_texts(output, budget, incomplete, whole=True)
                                          for output in response["output"]
                                          if isinstance(output, dict) and keep(output)]
                    if incomplete is not None:
                        response["status"] = "incomplete"
                        response["incomplete_details"] = {"reason": incomplete}
            if incomplete is not None and data.get("type") == "response.completed":
                data["type"] = item.event = "response.incomplete"
        kept.append(item)
    return kept


def _cut_texts(value: Any, budget: Halver, incomplete: str | None, whole: bool = False
               ) -> Any:
    """A stream event's or an output item's text halved (``incomplete`` only): a delta by
    what is left of the half, a whole copy of the text at its half."""
    if incomplete is None or not isinstance(value, dict):
        return value
    if value.get("type") == "response.output_text.delta" and not whole:
        value["delta"] = budget.take(value.get("delta") or "")
        return value
    for key, child in value.items():
        if key == "text" and isinstance(child, str):
            value[key] = half(child)
        elif isinstance(child, dict):
            _cut_texts(child, budget, incomplete, whole=True)
        elif isinstance(child, list):
            for part in child:
                _cut_texts(part, budget, incomplete, whole=True)
    return value
