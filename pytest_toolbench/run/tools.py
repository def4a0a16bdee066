"""The case's own tools as a tool source: canned results, Python callables, errors.

A tool never crashes the executor: an exception (``SystemExit`` and ``KeyboardInterrupt``
included), a timeout, an unknown tool, arguments that are not JSON or a result that is not
strict JSON become an error tool message. A call of a tool no source offers comes here too,
and is answered "unknown tool".
"""

from __future__ import annotations

import functools
import json
from typing import Any

from ..casefile.schema import Case, Tool, resolve_callable
from ..records import ToolCall, ToolRun
from .toolset import ToolAnswer, ToolFailed
from .usercode import UserCodeFailed, UserLoop, call_user


class CaseTools:
    """The tools a case defines itself (a ``ToolSource``)."""

    server = None
    owner = "the case's tools"

    def __init__(self, case: Case, loop: UserLoop | None = None) -> None:
        """``loop``: where async ``python`` tools run (the case run's)."""
        self.case = case
        self._loop = loop
        self.tools: list[Tool] = case.function_tools
        self.background = {tool.name: tool.timeout_s for tool in self.tools if tool.background}
        """The tools the model starts and never waits for, each with its time limit."""

    async def call(self, call: ToolCall) -> ToolAnswer:
        try:
            return ToolAnswer(await _answer(call, self.case.tool(call.name), self._loop))
        except ToolFailed as failure:
            return ToolAnswer.failed(str(failure))

    async def aclose(self) -> None:
        """Nothing to release."""


def tool_message(run: ToolRun) -> dict[str, Any]:
    return {"role": "tool", "tool_call_id": run.call_id or "", "content": run.content}


async def _answer(call: ToolCall, tool: Tool | None, loop: UserLoop | None) -> str:
    if tool is None:
        raise ToolFailed(f"unknown tool: {call.name}")
    if not tool.has_implementation:
        raise ToolFailed(f"tool {call.name} has no implementation (result, python or error)")
    if call.arguments_error is not None:
        raise ToolFailed(f"arguments are not valid JSON: {call.arguments_error}")
    if "error" in tool.model_fields_set:
        raise ToolFailed(tool.error or "tool failed")
    if tool.python is not None:
        return as_content(await _call_python(tool, call.arguments, loop))
    return as_content(tool.result)


async def _call_python(tool: Tool, arguments: Any, loop: UserLoop | None) -> Any:
    if not isinstance(arguments, dict):
        raise ToolFailed(f"arguments must be a JSON object, got {json.dumps(arguments)}")
    function = functools.partial(resolve_callable(tool.python or ""), **arguments)
    try:
        return await call_user(function, timeout_s=tool.timeout_s, loop=loop,
                               what=f"tool {tool.name}")
    except UserCodeFailed as failure:
        raise ToolFailed(tool_failure(failure, tool.name, tool.timeout_s)) from None


def tool_failure(failure: UserCodeFailed, name: str, timeout_s: float) -> str:
    """What the model reads of a tool's failure: what it raised, or that it ran out of time."""
    return f"{name} timed out after {timeout_s:g} s" if failure.overran else failure.message


def as_content(result: Any) -> str:
    """A string is sent as is; anything else as strict JSON (no NaN or Infinity)."""
    if isinstance(result, str):
        return result
    try:
        return json.dumps(result, allow_nan=False)
    except (TypeError, ValueError, RecursionError) as exc:
        raise ToolFailed(f"the tool's result is not JSON: {exc}") from None
