"""An MCP server's tools as a ``ToolSource`` of the agent loop, live or replayed.

Live, each ``tools/list`` and ``tools/call`` goes to the server and, while recording, into
the case's cassette. Replayed, both are answered from the cassette: the listing the server
gave, and each call's result, found by its name and arguments; a call no recorded one
matches fails the case with a diff, as a model request does. Replay starts no server.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import Any

from ..casefile.schema import McpTools, Tool
from ..cuts import cut
from ..defaults import TOOL_RESULT_CHARS
from ..keypaths import KeyPath
from ..records import McpExchange, ToolCall
from ..run.toolset import Restore, ToolAnswer, ToolSourceFault
from ..scrubbing import Scrubber
from ..transport.replay import request_diff

Caller = Callable[[str, dict[str, Any]], Awaitable[dict[str, Any]]]
"""``tools/call``: a tool's name and arguments -> the server's result."""


class McpSource:
    """The tools one ``{mcp: NAME}`` entry takes from its server (a ``ToolSource``)."""

    def __init__(self, server: str, listing: dict[str, Any], entry: McpTools, path: KeyPath,
                 caller: Caller, closer: Callable[[], Awaitable[None]] | None = None,
                 checkpoint: Callable[[], Awaitable[Restore]] | None = None,
                 call_timeout_s: float = 60.0) -> None:
        """``listing``: the server's ``tools/list`` result; ``path``: the entry's key path;
        ``checkpoint``: how a ``scope: case`` server is put back for a retried stage (none
        for a shared server, whose state other cases hold too, or a replayed one)."""
        self.server = server
        self.owner = f"MCP server {server!r}"
        self._path = path
        self._caller = caller
        self._closer = closer
        self.checkpoint = checkpoint
        self.tools = _offered(server, listing, entry, path)
        self.background = _background(server, self.tools, entry, path, call_timeout_s)
        """The tools the model starts and never waits for, each with its time limit."""

    async def call(self, call: ToolCall) -> ToolAnswer:
        if call.arguments_error is not None:
            return ToolAnswer.failed(f"arguments are not valid JSON: {call.arguments_error}")
        if not isinstance(call.arguments, dict):
            return ToolAnswer.failed(
                f"arguments must be a JSON object, got {json.dumps(call.arguments)}")
        return answer_of(await self._caller(call.name, call.arguments))

    async def aclose(self) -> None:
        closer, self._closer = self._closer, None
        if closer is not None:
            await closer()


OFFERED_KEYS = ("name", "description", "inputSchema")
"""What of a listed tool the model is offered, and all that replay reads of it."""


def kept_listing(listing: dict[str, Any]) -> dict[str, Any]:
    """A ``tools/list`` result as a cassette keeps it: every tool, each with only
    ``OFFERED_KEYS`` (its ``outputSchema``, ``annotations``, ``icons``... are never sent)."""
    tools = listing.get("tools")
    return {"tools": [{key: tool[key] for key in OFFERED_KEYS if key in tool}
                      if isinstance(tool, dict) else tool
                      for tool in (tools if isinstance(tools, list) else [])]}


def _offered(server: str, listing: dict[str, Any], entry: McpTools, path: KeyPath
             ) -> list[Tool]:
    """The listed tools as the case's requests offer them, those ``include`` names only."""
    listed: dict[str, dict[str, Any]] = {}
    for tool in listing.get("tools", []):
        if isinstance(tool, dict) and isinstance(tool.get("name"), str):
            if tool["name"] in listed:  # which one the model's call means: no way to tell
                raise ToolSourceFault(f"MCP server {server!r} lists two tools named"
                                      f" {tool['name']!r}; a call could not say which", path)
            listed[tool["name"]] = tool
    for position, name in enumerate(entry.include or []):
        if name not in listed:
            raise ToolSourceFault(
                f"MCP server {server!r} lists no tool {name!r} (it lists:"
                f" {', '.join(sorted(listed)) or 'none'})", (*path, "include", position))
    names = entry.include if entry.include is not None else list(listed)
    return [_tool(listed[name]) for name in names]


def _background(server: str, offered: list[Tool], entry: McpTools, path: KeyPath,
                timeout_s: float) -> dict[str, float]:
    """``background``'s tools, each one the server offers, with the server's call limit."""
    names = {tool.name for tool in offered}
    for position, name in enumerate(entry.background):
        if name not in names:
            raise ToolSourceFault(
                f"MCP server {server!r} lists no tool {name!r} to run in the background (it"
                f" lists: {', '.join(sorted(names)) or 'none'})",
                (*path, "background", position))
    return {name: timeout_s for name in entry.background}


def _tool(listed: dict[str, Any]) -> Tool:
    """A listed MCP tool as the wire adapters send one: name, description, inputSchema."""
    schema = listed.get("inputSchema")
    description = listed.get("description")
    # Not validated: the server's names and schemas are sent as the server gave them.
    return Tool.model_construct(
        {"name", "description", "parameters"}, name=listed["name"],
        description=description if isinstance(description, str) else "",
        parameters=schema if isinstance(schema, dict) else {"type": "object", "properties": {}})


def kept_result(result: dict[str, Any]) -> dict[str, Any]:
    """A ``tools/call`` result as a cassette keeps it: as sent, unless its answer is past
    ``TOOL_RESULT_CHARS``; then as one text block of the answer cut as the model got it
    (it replays as the same answer)."""
    answer = answer_of(result)
    if len(answer.content) <= TOOL_RESULT_CHARS:
        return result
    return {"content": [{"type": "text", "text": cut(answer.content, TOOL_RESULT_CHARS)}],
            "isError": result.get("isError") is True}


def answer_of(result: dict[str, Any]) -> ToolAnswer:
    """A ``tools/call`` result as the tool message: its text blocks, one a line, then its
    structured content as JSON unless a text block already says it; ``isError: true`` makes
    the answer a failed tool's."""
    blocks = result.get("content")
    parts = [_block_text(block) for block in (blocks if isinstance(blocks, list) else [])]
    structured = result.get("structuredContent")
    if structured is not None and not any(_says(part, structured) for part in parts):
        parts.append(json.dumps(structured, ensure_ascii=False))
    content = "\n".join(parts)
    if result.get("isError") is True:
        return ToolAnswer(content, content or "the tool failed")
    return ToolAnswer(content)


def _block_text(block: Any) -> str:
    """A text block's text; another block (image, audio, resource) as JSON, its bulky data
    left out."""
    if isinstance(block, dict) and block.get("type") == "text" and isinstance(
            block.get("text"), str):
        return str(block["text"])
    if isinstance(block, dict):
        resource = block.get("resource")
        if isinstance(resource, dict) and isinstance(resource.get("text"), str):
            return str(resource["text"])
        return json.dumps({key: value for key, value in block.items()
                           if key not in ("data", "blob")}, ensure_ascii=False)
    return json.dumps(block)


def _says(text: str, value: Any) -> bool:
    try:
        return bool(json.loads(text) == value)
    except ValueError:
        return False


class RecordedCalls:
    """Replay: one case's recorded MCP exchanges, handed out as its calls ask for them."""

    def __init__(self, exchanges: list[McpExchange], shown: str, hint: str,
                 scrubber: Scrubber) -> None:
        self._exchanges = exchanges
        self._used: set[int] = set()
        self._shown, self._hint, self._scrubber = shown, hint, scrubber

    def listing(self, server: str, path: KeyPath) -> dict[str, Any]:
        """The ``tools/list`` result recorded for ``server``."""
        for exchange in self._exchanges:
            if exchange.server == server and exchange.method == "tools/list":
                return exchange.result
        raise ToolSourceFault(f"{self._shown} holds no tools/list of MCP server {server!r}:"
                              f" the case changed since it was recorded; re-record with:"
                              f" {self._hint}", path)

    def caller(self, server: str, path: KeyPath) -> Caller:
        async def call(name: str, arguments: dict[str, Any]) -> dict[str, Any]:
            return self._answer(server, {"name": name, "arguments": arguments}, path)
        return call

    def _answer(self, server: str, params: dict[str, Any], path: KeyPath) -> dict[str, Any]:
        # Calls of one reply run at once, so they may have ended in any order: any unused
        # recorded call of the server with the same name and arguments answers.
        params = self._scrubber.data(params)
        waiting = [index for index, exchange in enumerate(self._exchanges)
                   if index not in self._used and exchange.server == server
                   and exchange.method == "tools/call"]
        for index in waiting:
            if self._exchanges[index].params == params:
                self._used.add(index)
                return self._exchanges[index].result
        if not waiting:
            raise ToolSourceFault(
                f"tools/call {params['name']} of MCP server {server!r} was not recorded in"
                f" {self._shown} (its recorded calls are all used); re-record with:"
                f" {self._hint}", path)
        raise ToolSourceFault(
            f"tools/call of MCP server {server!r} differs from the one recorded in"
            f" {self._shown}; re-record with: {self._hint}\n"
            + request_diff(self._exchanges[waiting[0]].params, params), path)

    def unused(self) -> str | None:
        """Why the case fails when recorded calls were left unused, or None."""
        left = [exchange for index, exchange in enumerate(self._exchanges)
                if exchange.method == "tools/call" and index not in self._used]
        if not left:
            return None
        names = ", ".join(f"{exchange.server}/{exchange.params.get('name')}" for exchange in left)
        return (f"{self._shown} holds MCP calls the case did not make ({names}): the case"
                f" changed since it was recorded; re-record it with: {self._hint}")
