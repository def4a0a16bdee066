"""A toolbox as a tool source: one instance of a Python class, its methods the tools.

Every run of the case (each repeat) builds a fresh instance from ``init``. Calls run on it
one at a time, in the order the model made them (a reply's calls would otherwise race on
the instance's state), sync methods in a daemon thread and async ones on the loop, within
the toolbox's ``timeout_s``, with the rules of ``python`` tools: whatever a method raises is
an answer the model reads. Its state, for ``expect.state`` and the reports, is what its
``state()`` returns, or else its public attributes, as JSON.

A toolbox is local Python: a replayed case runs it for real, as it runs ``python`` tools.
Its results go into the requests that follow, which replay compares with the recorded
ones, so a toolbox that answers otherwise than when the case was recorded (a clock, a
random number) fails the replay at the request it changed.
"""

from __future__ import annotations

import asyncio
import copy
import json
from collections.abc import Callable
from typing import Any

from pydantic import BaseModel, ValidationError
from pydantic_core import PydanticSerializationError, to_jsonable_python

from ..casefile.schema import Tool, Toolbox
from ..casefile.toolbox import STATE_METHOD, MethodTool
from ..keypaths import KeyPath
from ..records import ToolCall
from .tools import call_user_code, describe
from .toolset import ToolAnswer, ToolFailed, ToolSourceFault


class ToolboxSource:
    """The tools of one ``{toolbox: ...}`` entry (a ``ToolSource`` that keeps state)."""

    server = None

    def __init__(self, entry: Toolbox, path: KeyPath) -> None:
        """``path``: the entry's key path in the case, for messages."""
        self.entry = entry
        self.label = entry.label
        self.owner = f"toolbox {entry.label!r}"
        self.tools: list[Tool] = entry.tools
        self._methods = {method.name: method for method in entry.methods}
        self._path = path
        self._instance: Any = None
        self._lock = asyncio.Lock()

    def begin_run(self) -> None:
        """A fresh instance for a new run of the case."""
        cls = self.entry.toolbox.cls
        try:
            self._instance = cls(**self.entry.toolbox.init)
        except Exception as exc:  # noqa: BLE001 - user code: its failure fails the case, named
            raise ToolSourceFault(f"{self.owner}: {cls.__qualname__}(**init) raised"
                                  f" {describe(exc)}", (*self._path, "toolbox")) from None

    async def call(self, call: ToolCall) -> ToolAnswer:
        try:
            method = self._methods[call.name]
            arguments = _arguments(method, call)
            async with self._lock:
                result = await call_user_code(getattr(self._instance, call.name), arguments,
                                              call.name, self.entry.timeout_s)
            return ToolAnswer(as_json_text(result))
        except ToolFailed as failure:
            return ToolAnswer.failed(str(failure))

    async def snapshot(self) -> Any:
        """The instance's state as JSON data; ``ToolFailed`` says why there is none."""
        if callable(getattr(self._instance, STATE_METHOD, None)):
            found = await call_user_code(getattr(self._instance, STATE_METHOD), {},
                                         f"{self.label}.{STATE_METHOD}", self.entry.timeout_s)
            what = f"{STATE_METHOD}() of {self.owner}"
        else:
            found = {name: value for name, value in _attributes(self._instance).items()
                     if not name.startswith("_")}
            what = f"the attributes of {self.owner}"
        try:
            return to_jsonable_python(found)
        except (PydanticSerializationError, ValueError, TypeError, RecursionError) as exc:
            raise ToolFailed(f"{what} are not JSON: {exc}") from None

    def checkpoint(self) -> Callable[[], None]:
        """Puts the instance back as it is now (a stage's retry, its other variant)."""
        try:
            saved = copy.deepcopy(self._instance)
        except Exception as exc:  # noqa: BLE001 - user code
            raise ToolSourceFault(
                f"{self.owner} cannot be copied, and a retried stage (or stream: both) starts"
                f" again from the state before it: {describe(exc)}", self._path) from None

        def restore() -> None:
            self._instance = copy.deepcopy(saved)
        return restore

    async def aclose(self) -> None:
        self._instance = None


def _arguments(method: MethodTool, call: ToolCall) -> dict[str, Any]:
    """The call's arguments, validated and converted to the method's types when they come
    from its hints; the given ones only, so the method's own defaults apply."""
    if call.arguments_error is not None:
        raise ToolFailed(f"arguments are not valid JSON: {call.arguments_error}")
    if not isinstance(call.arguments, dict):
        raise ToolFailed(f"arguments must be a JSON object, got {json.dumps(call.arguments)}")
    if method.arguments is None:
        return call.arguments
    try:
        given: BaseModel = method.arguments.model_validate(call.arguments)
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(map(str, error['loc'])) or 'arguments'}:"
                             f" {error['msg']}" for error in exc.errors())
        raise ToolFailed(f"arguments do not fit {method.name}: {problems}") from None
    fields = method.arguments.model_fields
    return {fields[name].alias or name: getattr(given, name) for name in given.model_fields_set}


def _attributes(instance: Any) -> dict[str, Any]:
    try:
        return dict(vars(instance))
    except TypeError:  # __slots__
        slots = getattr(type(instance), "__slots__", ())
        return {name: getattr(instance, name) for name in slots if hasattr(instance, name)}


def as_json_text(result: Any) -> str:
    """A string as is; anything else as strict JSON, dataclasses, models and sets too."""
    if isinstance(result, str):
        return result
    try:
        return json.dumps(to_jsonable_python(result), allow_nan=False)
    except (PydanticSerializationError, ValueError, TypeError, RecursionError) as exc:
        raise ToolFailed(f"the tool's result is not JSON: {exc}") from None
