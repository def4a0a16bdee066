"""The case's own tools as a tool source: canned results, Python callables, errors.

A tool never crashes the executor: an exception (``SystemExit`` and ``KeyboardInterrupt``
included), a timeout, an unknown tool, arguments that are not JSON or a result that is not
strict JSON become an error tool message. A call of a tool no source offers comes here too,
and is answered "unknown tool".
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import json
from collections.abc import Awaitable, Callable
from typing import Any

from ..casefile.schema import Case, Tool, resolve_callable
from ..records import ToolCall, ToolRun
from .threads import in_daemon_thread
from .toolset import ToolAnswer, ToolFailed


class CaseTools:
    """The tools a case defines itself (a ``ToolSource``)."""

    server = None
    owner = "the case's tools"

    def __init__(self, case: Case) -> None:
        self.case = case
        self.tools: list[Tool] = case.function_tools

    async def call(self, call: ToolCall) -> ToolAnswer:
        try:
            return ToolAnswer(await _answer(call, self.case.tool(call.name)))
        except ToolFailed as failure:
            return ToolAnswer.failed(str(failure))

    async def aclose(self) -> None:
        """Nothing to release."""


def tool_message(run: ToolRun) -> dict[str, Any]:
    return {"role": "tool", "tool_call_id": run.call_id or "", "content": run.content}


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
        return as_content(await _call_python(tool, call.arguments))
    return as_content(tool.result)


async def _call_python(tool: Tool, arguments: Any) -> Any:
    if not isinstance(arguments, dict):
        raise ToolFailed(f"arguments must be a JSON object, got {json.dumps(arguments)}")
    return await call_user_code(resolve_callable(tool.python or ""), arguments, tool.name,
                                tool.timeout_s)


async def call_user_code(function: Callable[..., Any], arguments: dict[str, Any], name: str,
                         timeout_s: float) -> Any:
    """``function(**arguments)``, sync or async, within ``timeout_s``: what it returns, or
    ``ToolFailed`` saying what it raised or that it ran out of time."""
    if inspect.iscoroutinefunction(function):
        running: Awaitable[Any] = _guarded(function, arguments)
    else:  # in a thread of its own, so a slow one cannot stall the other cases
        running = in_daemon_thread(functools.partial(_call_sync, function, arguments),
                                   name=f"toolbench-tool-{name}")
    try:
        return await asyncio.wait_for(running, timeout_s)
    except asyncio.TimeoutError:
        raise ToolFailed(f"{name} timed out after {timeout_s:g} s") from None


async def _guarded(function: Callable[..., Awaitable[Any]], arguments: dict[str, Any]) -> Any:
    """Await an async tool; whatever it raises becomes ``ToolFailed``.

    ``SystemExit`` or ``KeyboardInterrupt`` escaping a task would stop the event loop that
    every case runs on, and the session would wait for it forever.
    """
    try:
        return await function(**arguments)
    except asyncio.CancelledError:
        if _being_cancelled():
            raise  # a timeout, or the session is stopping
        raise ToolFailed("CancelledError: the tool cancelled itself") from None
    except GeneratorExit:
        raise
    except BaseException as exc:  # noqa: BLE001 - the tool is user code: a failure is an answer
        raise ToolFailed(describe(exc)) from None


def _being_cancelled() -> bool:
    """Whether someone cancelled this task (a tool may raise CancelledError by itself)."""
    task = asyncio.current_task()
    cancelling = getattr(task, "cancelling", None)  # Python 3.11+; before, assume so
    return cancelling is None or cancelling() > 0


def _call_sync(function: Callable[..., Any], arguments: dict[str, Any]) -> Any:
    """A sync tool, in its worker thread; whatever it raises becomes ``ToolFailed``."""
    try:
        return function(**arguments)
    except BaseException as exc:  # noqa: BLE001 - SystemExit too: a failure is an answer
        raise ToolFailed(describe(exc)) from None


def describe(exc: BaseException) -> str:
    text = str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def as_content(result: Any) -> str:
    """A string is sent as is; anything else as strict JSON (no NaN or Infinity)."""
    if isinstance(result, str):
        return result
    try:
        return json.dumps(result, allow_nan=False)
    except (TypeError, ValueError, RecursionError) as exc:
        raise ToolFailed(f"the tool's result is not JSON: {exc}") from None
