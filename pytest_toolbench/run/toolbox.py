"""A toolbox as a tool source: one instance of a Python class, its methods the tools.

Every run of the case (each repeat) builds a fresh instance from ``init``. Calls run on it
one at a time, in the order the model made them (a reply's calls would otherwise race on
the instance's state), sync methods in a daemon thread and async ones on the case run's
user loop, within the toolbox's ``timeout_s``, with the rules of ``python`` tools: whatever
a method raises is an answer the model reads. Its constructor, ``state()`` and deep copies
are the team's code too: every call into the instance goes through ``run/usercode.py``. Its state, for ``expect.state`` and the reports, is what its
``state()`` returns, or else its public attributes, as JSON.

A toolbox is local Python: a replayed case runs it for real, as it runs ``python`` tools.
Its results go into the requests that follow, which replay compares with the recorded
ones, so a toolbox that answers otherwise than when the case was recorded (a clock, a
random number) fails the replay at the request it changed.
"""

from __future__ import annotations

import asyncio
import copy
import functools
import json
from collections.abc import Awaitable, Callable
from typing import Any

from pydantic import BaseModel, ValidationError
from pydantic_core import PydanticSerializationError, to_jsonable_python

from ..casefile.schema import Tool, Toolbox
from ..casefile.toolbox import STATE_METHOD, MethodTool
from ..keypaths import KeyPath
from ..records import ToolCall
from .tools import tool_failure
from .toolset import ToolAnswer, ToolFailed, ToolSourceFault
from .usercode import UserCodeFailed, UserLoop, call_user


class ToolboxSource:
    """The tools of one ``{toolbox: ...}`` entry (a ``ToolSource`` that keeps state)."""

    server = None

    def __init__(self, entry: Toolbox, path: KeyPath, loop: UserLoop | None = None) -> None:
        """``path``: the entry's key path in the case, for messages; ``loop``: where its
        async methods run (the case run's)."""
        self._loop = loop
        self.entry = entry
        self.label = entry.label
        self.owner = f"toolbox {entry.label!r}"
        self.tools: list[Tool] = entry.tools
        self._methods = {method.name: method for method in entry.methods}
        self.background = {name: entry.timeout_s for name in entry.background}
        """The methods the model starts and never waits for, each with its time limit."""
        self._path = path
        self._instance: Any = None
        self._lock = asyncio.Lock()

    async def begin_run(self) -> None:
        """A fresh instance for a new run of the case."""
        cls = self.entry.toolbox.cls
        try:
            self._instance = await self._user(functools.partial(cls, **self.entry.toolbox.init),
                                              f"{cls.__qualname__}.__init__")
        except UserCodeFailed as failure:  # its failure fails the case, named
            said = "" if failure.overran else "raised "
            where = f"\n{failure.frames.rstrip()}" if failure.frames else ""
            raise ToolSourceFault(f"{self.owner}: {cls.__qualname__}(**init) {said}"
                                  f"{failure.message}{where}", (*self._path, "toolbox")
                                  ) from None

    async def call(self, call: ToolCall) -> ToolAnswer:
        try:
            method = self._methods[call.name]
            arguments = _arguments(method, call)
            async with self._lock:
                result = await self._user(
                    functools.partial(getattr(self._instance, call.name), **arguments),
                    call.name)
            return ToolAnswer(as_json_text(result))
        except ToolFailed as failure:
            return ToolAnswer.failed(str(failure))
        except UserCodeFailed as failure:
            return ToolAnswer.failed(tool_failure(failure, call.name, self.entry.timeout_s))

    async def snapshot(self) -> Any:
        """The instance's state as JSON data; ``ToolFailed`` says why there is none."""
        try:
            if callable(getattr(self._instance, STATE_METHOD, None)):
                found = await self._user(getattr(self._instance, STATE_METHOD), STATE_METHOD)
                what = f"{STATE_METHOD}() of {self.owner}"
            else:
                found = await self._user(functools.partial(_attributes, self._instance),
                                         "attributes")
                what = f"the attributes of {self.owner}"
            return await self._user(functools.partial(_jsonable, found, what), "state")
        except UserCodeFailed as failure:
            raise ToolFailed(failure.message) from None

    async def checkpoint(self) -> Callable[[], Awaitable[None]]:
        """Puts the instance back as it is now (a stage's retry, its other variant);
        ``ToolSourceFault`` when it cannot be copied, now or when put back."""
        saved = await self._copy(self._instance)

        async def restore() -> None:
            self._instance = await self._copy(saved)
        return restore

    async def _copy(self, instance: Any) -> Any:
        try:
            return await self._user(functools.partial(copy.deepcopy, instance), "__deepcopy__")
        except UserCodeFailed as failure:
            raise ToolSourceFault(
                f"{self.owner} cannot be copied, and a retried stage (or stream: both) starts"
                f" again from the state before it: {failure.message}", self._path) from None

    async def _user(self, fn: Callable[[], Any], name: str) -> Any:
        """``fn()``, the toolbox's own code, abandoned after the toolbox's ``timeout_s``."""
        return await call_user(fn, timeout_s=self.entry.timeout_s, loop=self._loop,
                               what=f"toolbox {self.label}.{name}")

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
    """The instance's public attributes."""
    return {name: value for name, value in _all_attributes(instance).items()
            if not name.startswith("_")}


def _all_attributes(instance: Any) -> dict[str, Any]:
    try:
        return dict(vars(instance))
    except TypeError:  # __slots__
        slots = getattr(type(instance), "__slots__", ())
        return {name: getattr(instance, name) for name in slots if hasattr(instance, name)}


def _jsonable(found: Any, what: str) -> Any:
    """A state as JSON data (the user's serializers run here); ``ToolFailed`` if it is not."""
    try:
        return to_jsonable_python(found)
    except (PydanticSerializationError, ValueError, TypeError, RecursionError) as exc:
        raise ToolFailed(f"{what} are not JSON: {exc}") from None


def as_json_text(result: Any) -> str:
    """A string as is; anything else as strict JSON, dataclasses, models and sets too."""
    if isinstance(result, str):
        return result
    try:
        return json.dumps(to_jsonable_python(result), allow_nan=False)
    except (PydanticSerializationError, ValueError, TypeError, RecursionError) as exc:
        raise ToolFailed(f"the tool's result is not JSON: {exc}") from None
