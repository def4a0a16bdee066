"""Anthropic's Messages API (``POST messages``): the case's conversation as content blocks.

Headers: ``x-api-key`` when there is a key (no ``Authorization``), and always
``anthropic-version: 2023-06-01``.

The request, from the chat-shaped conversation:

- every ``system`` (or ``developer``) message -> the top-level ``system`` string, joined with
  blank lines;
- ``user`` -> a user turn: its text, or its parts (``text`` kept; ``image_url`` as an
  ``image`` block, a ``data:`` URL as base64);
- ``assistant`` -> a ``text`` block if it has text (more than whitespace), then one
  ``tool_use`` block per call with ``input`` the parsed arguments. Arguments that are not a JSON object (the model
  sent broken JSON, and the tool run answered with an error) go as ``{}``: the API takes
  nothing else, and the tool result that follows says what went wrong. An assistant
  message with neither text nor calls is left out (the API refuses empty turns);
- an ``assistant`` message that came from a reply -> that reply's content blocks as the
  server sent them (``RequestParts.native``; a stream's rebuilt from its events): after a
  tool use with extended thinking the API wants the ``thinking`` blocks back unchanged,
  ``signature`` included, and ``redacted_thinking`` blocks with their ``data``. Only text
  blocks that are empty or whitespace are left out, as the API refuses them ("text content
  blocks must contain non-whitespace text");
- ``tool`` -> a ``tool_result`` block (``tool_use_id``, ``content`` as a string) in a user
  turn, with ``is_error: true`` when the tool run failed (``RequestParts.failed_results``:
  an unknown tool, arguments that are not JSON, an exception, a timeout, an ``error:``
  tool). Consecutive turns of one role merge, since the API wants them to alternate: tool
  results and the user message after them make one user turn, results first;
- tools -> ``{"name", "description", "input_schema"}``, ``"strict": true`` when the tool
  sets ``strict``;
- ``tool_choice``: ``auto`` -> ``{"type": "auto"}``, ``required`` -> ``{"type": "any"}``,
  ``none`` -> ``{"type": "none"}``, ``{name: X}`` -> ``{"type": "tool", "name": X}``;
  ``allowed_tools`` cannot be said (a collection error, see ``unsupported``);
- ``params.parallel_tool_calls: false`` -> ``disable_parallel_tool_use: true`` in the
  tool choice (``{"type": "auto"}`` when the stage gives none; nothing with ``none``, which
  makes no calls, or without tools); ``true`` is the API's default and is not sent;
- ``max_tokens`` is required: the case's token limit (``max_tokens``,
  ``max_completion_tokens`` or ``max_output_tokens``), else ``DEFAULT_MAX_TOKENS``;
- ``stream: true`` when streamed; every other param as it is.

Reading (``messages_reader.py``): text blocks are the text, ``tool_use`` blocks the calls,
``thinking`` blocks the reasoning (a ``redacted_thinking`` block adds
``[redacted reasoning]``, ``base.REDACTED_REASONING``); ``stop_reason`` is ``api_finish_reason``, normalised as
``end_turn``/``stop_sequence`` -> ``stop``, ``tool_use`` -> ``tool_calls``, ``max_tokens``
and ``model_context_window_exceeded`` -> ``length``, ``refusal`` -> ``content_filter``,
others (``pause_turn``) as sent. Usage is the API's, plus the chat names (``prompt_tokens``
counts the cached prompt tokens too); a stream's merges ``message_start``'s with
``message_delta``'s (the later numbers win). An error body's or ``error`` event's
``error.message`` is ``Reply.error``.

The checks, each a problem that starts with its name:

- ``messages body: JSON`` / ``message shape``: a 2xx body that is not JSON, or no message;
- ``messages stream: JSON`` / ``event type``: an event that is not a JSON object with a
  ``type``, or whose ``event:`` line names another type than its data;
- ``messages stream: message_start first``: an event before ``message_start``, or a second;
- ``messages stream: terminal event``: events after ``message_stop`` (or ``error``); a
  stream that never ends so is seen by ``StreamStats.done``, which ``expect.stream.done``
  checks, naming ``message_stop``; ``cut``: the stream ended inside an event;
- ``messages stream: block shape``: a ``content_block_start`` without index or block type;
- ``messages stream: delta for a block never started`` / ``stop for a block never
  started``: an index no ``content_block_start`` opened;
- ``messages stream: block started twice`` (other than llama-server's repeat of an open
  block), ``block stopped twice``, ``block never stopped`` (before ``message_stop``),
  ``delta after its block stopped``;
- ``messages stream: delta type does not fit the block`` (``input_json_delta`` into a
  text block...); ``delta shape``: a delta without its string field;
- ``messages stream: stop_reason``: ``message_stop`` without any ``stop_reason``;
- ``messages stream: error event``: an in-band error, named by its type and said to be
  transient when it is (``overloaded_error (transient: the service was overloaded; retry
  later)``, see ``base.stream_error``);
- ``tool_use ids`` (body and stream): a call without an id, or with another call's id;
- ``tool_use input``: an input that is not an object, or a streamed block that opened
  with an input and streamed ``partial_json`` too;
- ``stop_reason fits the blocks``: ``tool_use`` without a call, or a call with
  ``end_turn``/``stop_sequence``.

Streamed arguments that do not join into JSON (an empty ``partial_json`` overall is ``{}``)
are the call's ``arguments_error``, which fails a streamed stage as in every API.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any, ClassVar, cast

from ..casefile.params import stage_params
from ..records import Reply
from .base import (
    JSON_ERRORS,
    AnswerTool,
    Halver,
    RequestParts,
    SseItem,
    StreamReader,
    ToolNamed,
    Unsupported,
    WireApi,
    fault_headers,
    fault_message,
    message_text,
    take_token_limit,
)
from .messages_reader import MessageStream, read_message

if TYPE_CHECKING:
    from ..casefile.schema import AllowedTools, Case, Tool, ToolChoiceFunction

__all__ = ["ANTHROPIC_VERSION", "DEFAULT_MAX_TOKENS", "MESSAGES", "MessagesApi"]

ANTHROPIC_VERSION = "2023-06-01"
"""The ``anthropic-version`` header every request carries."""

DEFAULT_MAX_TOKENS = 1024
"""``max_tokens`` when the case sets no token limit: the API requires one."""

_ROLES = frozenset({"system", "developer", "user", "assistant", "tool"})
_PART_TYPES = frozenset({"text", "image_url"})
_TITLE = "the messages API (Anthropic Messages)"


REQUEST_FIELDS = frozenset({
    # The request's fields, as anthropic-python's MessageCreateParams names them (0.x to
    # 2.x, beta fields included; temperature, top_p and top_k are older models').
    "cache_control", "container", "context_management", "diagnostics", "inference_geo",
    "max_tokens", "mcp_servers", "messages", "metadata", "model", "output_config",
    "output_format", "service_tier", "speed", "stop_sequences", "stream", "system",
    "temperature", "thinking", "tool_choice", "tools", "top_k", "top_p", "user_profile_id",
    "workspace_id",
    # Translated: the token limit's other names, and parallel_tool_calls.
    "max_completion_tokens", "max_output_tokens", "parallel_tool_calls",
})
"""What ``params`` may hold over this API; ``seed`` or ``n`` (chat's) are refused."""

MIN_THINKING_BUDGET = 1024
"""The least ``thinking.budget_tokens`` the API takes."""


class MessagesApi(WireApi):
    name = "messages"
    title = "Messages API"
    path = "messages"
    reasoning_where = "thinking blocks"
    request_fields = REQUEST_FIELDS
    required_headers: ClassVar[Mapping[str, str]] = {"anthropic-version": ANTHROPIC_VERSION}

    def emptied(self, items: list[SseItem]) -> list[SseItem]:
        """No content blocks (none streamed), ``end_turn``."""
        return _kept_blocks(items, lambda block: False, Halver(0), "end_turn")

    def truncated(self, items: list[SseItem]) -> list[SseItem]:
        """Text blocks only, their text halved, ``max_tokens``."""
        total = sum(len(text) for item in items for text in _block_texts(item.data))
        return _kept_blocks(items, lambda block: block.get("type") != "tool_use",
                            Halver(total), "max_tokens")

    def fault_error(self, status: int, retry_after_s: float | None
                    ) -> tuple[dict[str, Any], list[tuple[str, str]]]:
        """Anthropic's shape: ``{"type": "error", "error": {type, message}}`` with
        ``rate_limit_error``, ``overloaded_error`` or ``api_error``, and ``request-id``."""
        kind = {429: "rate_limit_error", 529: "overloaded_error",
                504: "timeout_error"}.get(status, "api_error")
        body = {"type": "error", "error": {"type": kind, "message": fault_message(status)}}
        return body, fault_headers("request-id", retry_after_s)

    def structured(self, parts: RequestParts, name: str, schema: dict[str, Any]
                   ) -> RequestParts:
        """One tool whose input is the answer, its call forced (the API has no other
        structured mode every model takes)."""
        tool = AnswerTool(name, "Give your answer by calling this tool.", schema)
        return replace(parts, tools=cast(Any, [tool]), tool_choice=cast(Any, ToolNamed(name)))

    def request(self, parts: RequestParts) -> dict[str, Any]:
        params, limit = take_token_limit(parts.params)
        single = params.pop("parallel_tool_calls", None) is False
        system, messages = _conversation(parts.messages, parts.native, parts.failed_results)
        body: dict[str, Any] = {}
        if parts.model is not None:
            body["model"] = parts.model
        if system:
            body["system"] = system
        body["messages"] = messages
        if parts.tools:
            body["tools"] = [_tool(tool) for tool in parts.tools]
        choice = _tool_choice(parts.tool_choice, single and bool(parts.tools))
        if choice is not None:
            body["tool_choice"] = choice
        body["max_tokens"] = DEFAULT_MAX_TOKENS if limit is None else limit
        body.update(params)
        if parts.stream:
            body["stream"] = True
        return body

    def read_body(self, status: int, body: bytes | str, content_type: str) -> Reply:
        return read_message(status, body, content_type)

    def stream_reader(self) -> StreamReader:
        return MessageStream()

    def unsupported(self, case: Case, models: Sequence[str | None] | None = None
                    ) -> list[Unsupported]:
        found = super().unsupported(case, models) + _thinking_unsupported(case)
        for index, stage in enumerate(case.stages):
            if hasattr(stage.tool_choice, "allowed_tools"):
                found.append(Unsupported(
                    f"{_TITLE} has no allowed_tools tool_choice; give auto, required, none or"
                    " {name: TOOL}, or leave this API out of the case's (endpoint.apis: [chat,"
                    " responses])",
                    ("stages", index, "tool_choice")))
            for position, message in enumerate(stage.messages):
                found.extend(_message_unsupported(message, ("stages", index, "messages",
                                                            position)))
        return found


def _thinking_unsupported(case: Case) -> list[Unsupported]:
    """``thinking`` turned on with a budget the API refuses: ``budget_tokens`` must be at
    least ``MIN_THINKING_BUDGET`` and below ``max_tokens``, which is ``DEFAULT_MAX_TOKENS``
    (no room for any budget) when the case sets no token limit. Said once per key."""
    found: dict[tuple[str | int, ...], str] = {}
    for index in range(len(case.stages)):
        given = stage_params(case, index, MessagesApi.name)
        params = {key: value for key, (value, _path) in given.items()}
        thinking = params.get("thinking")
        if not isinstance(thinking, dict) or thinking.get("type") != "enabled":
            continue
        where = given["thinking"][1]
        problem = _budget_problem(thinking.get("budget_tokens"), take_token_limit(params)[1])
        if problem:
            found.setdefault(where, problem)
    return [Unsupported(message, where) for where, message in found.items()]


def _budget_problem(budget: Any, limit: Any) -> str | None:
    rule = (f"{_TITLE} needs thinking.budget_tokens of at least {MIN_THINKING_BUDGET} and"
            " below max_tokens")
    if budget is None:
        return f"{rule}; give budget_tokens"
    if not isinstance(budget, int) or isinstance(budget, bool):
        return None  # a ${placeholder}, or a value for the service to judge
    max_tokens = DEFAULT_MAX_TOKENS if limit is None else limit
    if not isinstance(max_tokens, int) or isinstance(max_tokens, bool):
        return None
    if MIN_THINKING_BUDGET <= budget < max_tokens:
        return None
    said = ("the default when the case sets no token limit" if limit is None
            else "the case's token limit")
    fix = (f"raise budget_tokens to {MIN_THINKING_BUDGET} or more" if budget < MIN_THINKING_BUDGET
           else f"set a token limit above the budget, e.g. max_tokens: {budget * 2}")
    return f"{rule}; here budget_tokens is {budget} and max_tokens {max_tokens} ({said}): {fix}"


def _message_unsupported(message: dict[str, Any], path: tuple[str | int, ...]
                         ) -> list[Unsupported]:
    """What one message of a stage asks that the API has no words for."""
    role = message.get("role")
    if role not in _ROLES:
        return [Unsupported(f"{_TITLE} has no {role!r} role; use system, user, assistant or"
                            " tool", (*path, "role"))]
    if role == "tool" and not message.get("tool_call_id"):
        return [Unsupported(f"{_TITLE} pairs each tool result with its call by id; give this"
                            " tool message a tool_call_id", path)]
    content = message.get("content")
    if role != "user" or not isinstance(content, list):
        return []
    return [Unsupported(f"{_TITLE} takes text and image_url parts here, not"
                        f" {_part_type(part)!r}", (*path, "content", index))
            for index, part in enumerate(content)
            if _part_type(part) not in _PART_TYPES]


def _part_type(part: Any) -> Any:
    return part.get("type") if isinstance(part, dict) else type(part).__name__


# --- the conversation ---------------------------------------------------------------------


def _conversation(messages: list[dict[str, Any]], native: dict[int, list[dict[str, Any]]],
                  failed: frozenset[int] = frozenset()) -> tuple[str, list[dict[str, Any]]]:
    """Chat messages -> (the system text, the alternating user and assistant turns); an
    assistant message with a native turn goes as that turn's blocks, the result of a failed
    tool run (by its index in ``failed``) as an error result."""
    system: list[str] = []
    turns: list[tuple[str, list[dict[str, Any]]]] = []
    for index, message in enumerate(messages):
        role = message.get("role")
        if role in ("system", "developer"):
            system.append(message_text(message.get("content")))
        elif role == "assistant" and index in native:
            _add(turns, "assistant", _native_blocks(native[index]))
        elif role == "assistant":
            _add(turns, "assistant", _assistant_blocks(message))
        elif role == "tool":
            _add(turns, "user", [_tool_result(message, index in failed)])
        else:  # user, and what collection refused (never crash on it)
            _add(turns, "user", _user_blocks(message.get("content")))
    return "\n\n".join(text for text in system if text), [_turn(*turn) for turn in turns]


def _add(turns: list[tuple[str, list[dict[str, Any]]]], role: str,
         blocks: list[dict[str, Any]]) -> None:
    """Append blocks as a turn of ``role``; a turn after one of the same role merges."""
    if not blocks:
        return
    if turns and turns[-1][0] == role:
        turns[-1][1].extend(blocks)
    else:
        turns.append((role, list(blocks)))


def _turn(role: str, blocks: list[dict[str, Any]]) -> dict[str, Any]:
    """One turn as sent: tool results first (the API's rule), a lone text as a string."""
    if role == "user":
        blocks = sorted(blocks, key=lambda block: block["type"] != "tool_result")
        if len(blocks) > 1:  # a blank text beside other blocks is refused; alone it is sent
            blocks = [b for b in blocks if b["type"] != "text" or _has_text(b)] or blocks[:1]
        if len(blocks) == 1 and blocks[0]["type"] == "text":
            return {"role": role, "content": blocks[0]["text"]}
    return {"role": role, "content": blocks}


def _user_blocks(content: Any) -> list[dict[str, Any]]:
    if not isinstance(content, list):
        return [{"type": "text", "text": content if isinstance(content, str) else ""}]
    blocks = []
    for part in content:
        kind = _part_type(part)
        if kind == "text" and isinstance(part.get("text"), str):
            blocks.append({"type": "text", "text": part["text"]})
        elif kind == "image_url":
            blocks.append(_image(part.get("image_url")))
    return blocks


def _image(image_url: Any) -> dict[str, Any]:
    """A chat ``image_url`` part as an ``image`` block: a data URL inline, others by URL."""
    url = image_url.get("url") if isinstance(image_url, dict) else image_url
    url = url if isinstance(url, str) else ""
    header, comma, data = url.partition(",")
    if url.startswith("data:") and comma and header.endswith(";base64"):
        media_type = header.removeprefix("data:").removesuffix(";base64")
        return {"type": "image",
                "source": {"type": "base64", "media_type": media_type, "data": data}}
    return {"type": "image", "source": {"type": "url", "url": url}}


def _native_blocks(blocks: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """A reply's content blocks as the server sent them: thinking blocks must go back
    unchanged, signature and all. Only blank text blocks are left out: the API refuses them
    in a request, and no signature covers them."""
    return [block for block in blocks if block.get("type") != "text" or _has_text(block)]


def _has_text(block: dict[str, Any]) -> bool:
    """Whether a text block holds more than whitespace: the API refuses one that does not
    (``text content blocks must contain non-whitespace text``)."""
    text = block.get("text")
    return isinstance(text, str) and bool(text.strip())


def _assistant_blocks(message: dict[str, Any]) -> list[dict[str, Any]]:
    blocks: list[dict[str, Any]] = []
    text = message_text(message.get("content"))
    if text.strip():
        blocks.append({"type": "text", "text": text})
    calls = message.get("tool_calls")
    for call in calls if isinstance(calls, list) else []:
        if isinstance(call, dict):
            blocks.append(_tool_use(call))
    return blocks


def _tool_use(call: dict[str, Any]) -> dict[str, Any]:
    function = call.get("function")
    function = function if isinstance(function, dict) else {}
    return {"type": "tool_use", "id": str(call.get("id") or ""),
            "name": str(function.get("name") or ""),
            "input": _input(function.get("arguments"))}


def _input(arguments: Any) -> dict[str, Any]:
    """Call arguments as the ``input`` object; anything but a JSON object is ``{}``."""
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments)
        except JSON_ERRORS:
            return {}
    return arguments if isinstance(arguments, dict) else {}


def _tool_result(message: dict[str, Any], failed: bool) -> dict[str, Any]:
    content = message.get("content")
    if isinstance(content, list):
        content = message_text(content)
    elif not isinstance(content, str):
        content = "" if content is None else json.dumps(content, ensure_ascii=False)
    result: dict[str, Any] = {"type": "tool_result", "tool_use_id": str(message.get("tool_call_id") or ""),
                              "content": content}
    if failed:
        result["is_error"] = True
    return result


# --- tools ----------------------------------------------------------------------------------


def _tool(tool: Tool) -> dict[str, Any]:
    body: dict[str, Any] = {"name": tool.name}
    if tool.description:
        body["description"] = tool.description
    body["input_schema"] = tool.parameters
    if tool.strict:
        body["strict"] = True
    return body


_CHOICES = {"auto": "auto", "required": "any", "none": "none"}


def _tool_choice(choice: str | ToolChoiceFunction | AllowedTools | None,
                 single: bool) -> dict[str, Any] | None:
    """The stage's tool choice in the API's words; ``single``: at most one call a reply."""
    if choice is None:
        return {"type": "auto", "disable_parallel_tool_use": True} if single else None
    # The schema's classes are not imported: this package leans on ``records`` alone.
    if isinstance(choice, str):
        said: dict[str, Any] = {"type": _CHOICES.get(choice, choice)}
    elif hasattr(choice, "allowed_tools"):  # refused at collection; the nearest if it comes
        said = {"type": "any" if choice.allowed_tools.mode == "required" else "auto"}
    else:
        said = {"type": "tool", "name": choice.name}
    if single and said["type"] != "none":  # "none" makes no calls and takes no such key
        said["disable_parallel_tool_use"] = True
    return said


MESSAGES = MessagesApi()


def _block_texts(data: Any) -> list[str]:
    """The text a Messages body or stream event carries (text blocks, text deltas)."""
    if not isinstance(data, dict):
        return []
    if data.get("type") == "content_block_delta":
        delta = data.get("delta") or {}
        return [delta["text"]] if isinstance(delta.get("text"), str) else []
    return [block["text"] for block in data.get("content") or []
            if isinstance(block, dict) and block.get("type") == "text"
            and isinstance(block.get("text"), str)]


def _kept_blocks(items: list[SseItem], keep: Callable[[dict[str, Any]], bool],
                 budget: Halver, stop_reason: str) -> list[SseItem]:
    """The reply with only the content blocks ``keep`` says, their text cut by
    ``budget``, the indexes of a stream's blocks counted again, ending by ``stop_reason``."""
    kept: list[SseItem] = []
    renumbered: dict[int, int] = {}
    for item in items:
        data = item.data
        if not isinstance(data, dict):
            kept.append(item)
            continue
        kind = data.get("type")
        if isinstance(data.get("content"), list):  # a whole body
            data["content"] = [_cut_block(block, budget) for block in data["content"]
                               if isinstance(block, dict) and keep(block)]
        if kind == "content_block_start":
            if not keep(data.get("content_block") or {}):
                continue
            renumbered[data.get("index", 0)] = data["index"] = len(renumbered)
        elif kind in ("content_block_delta", "content_block_stop"):
            if data.get("index", 0) not in renumbered:
                continue
            data["index"] = renumbered[data.get("index", 0)]
            delta = data.get("delta") or {}
            if isinstance(delta.get("text"), str):
                delta["text"] = budget.take(delta["text"])
        if "stop_reason" in data:
            data["stop_reason"] = stop_reason
        if kind == "message_delta" and isinstance(data.get("delta"), dict):
            data["delta"]["stop_reason"] = stop_reason
        kept.append(item)
    return kept


def _cut_block(block: dict[str, Any], budget: Halver) -> dict[str, Any]:
    if block.get("type") == "text" and isinstance(block.get("text"), str):
        block["text"] = budget.take(block["text"])
    return block
