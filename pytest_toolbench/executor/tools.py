"""Running the tools a reply asked for: canned results, Python callables, errors.

All calls of one reply run concurrently. A tool never crashes the executor: an exception,
a timeout, an unknown tool or arguments that are not JSON become an error tool message.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import time
from typing import Any

from ..models.case import Case, Tool, resolve_callable
from ..models.records import ToolCall, ToolRun


async def run_tool_calls(calls: list[ToolCall], case: Case) -> list[ToolRun]:
    """Run every call at once; the runs come back in the order of the calls."""
    return list(await asyncio.gather(*(run_tool_call(call, case.tool(call.name))
                                       for call in calls)))


async def run_tool_call(call: ToolCall, tool: Tool | None) -> ToolRun:
    started = time.perf_counter()
    try:
        content = await _answer(call, tool)
        error = None
    except ToolFailed as failure:
        error = str(failure)
        content = json.dumps({"error": error})
    duration = (time.perf_counter() - started) * 1000
    return ToolRun(call.id, call.name, call.arguments_raw, content, error, duration)


def tool_message(run: ToolRun) -> dict[str, Any]:
    return {"role": "tool", "tool_call_id": run.call_id or "", "content": run.content}


class ToolFailed(Exception):
    """The tool could not give a result; the message goes back to the model."""


async def _answer(call: ToolCall, tool: Tool | None) -> str:
    if tool is None:
        raise ToolFailed(f"unknown tool: {call.name}")
    if not tool.has_implementation:
        raise ToolFailed(f"tool {call.name} has no implementation (result, python or error)")
    if call.arguments_error is not None:
        raise ToolFailed(f"arguments are not valid JSON: {call.arguments_error}")
    if "error" in tool.model_fields_set:
        raise ToolFailed(tool.error or "tool failed")
    if tool.python is not None:
        return _as_content(await _call_python(tool, call.arguments))
    return _as_content(tool.result)


async def _call_python(tool: Tool, arguments: Any) -> Any:
    if not isinstance(arguments, dict):
        raise ToolFailed(f"arguments must be a JSON object, got {json.dumps(arguments)}")
    function = resolve_callable(tool.python or "")
    try:
        if inspect.iscoroutinefunction(function):
            return await asyncio.wait_for(function(**arguments), tool.timeout_s)
        # A sync tool runs in a thread so a slow one cannot stall the other cases.
        return await asyncio.wait_for(asyncio.to_thread(function, **arguments), tool.timeout_s)
    except asyncio.TimeoutError:
        raise ToolFailed(f"{tool.name} timed out after {tool.timeout_s:g} s") from None
    except Exception as exc:  # noqa: BLE001 - the tool is user code: a failure is an answer
        raise ToolFailed(f"{type(exc).__name__}: {exc}") from None


def _as_content(result: Any) -> str:
    """A string is sent as is; anything else as JSON."""
    if isinstance(result, str):
        return result
    try:
        return json.dumps(result)
    except (TypeError, ValueError) as exc:
        raise ToolFailed(f"the tool's result is not JSON: {exc}") from None
