"""``capture`` and ``${name}`` / ``${env.NAME}`` interpolation across stages, as a case runs.

A ``${name}`` names a value an earlier stage captured; ``interpolate`` fills the values in.
That each name is captured by an earlier stage was checked when the case file was loaded
(``casefile/placeholders.py``).
"""

from __future__ import annotations

import json
import os
from typing import Any, TypeVar

from pydantic import ValidationError

from ..casefile.placeholders import did_you_mean, fill_placeholders
from ..casefile.schema import AgentExpect
from ..keypaths import KeyedError, KeyPath
from ..records import Reply, ToolCall

_MISSING = object()


class InterpolationError(Exception):
    """A ``${...}`` or capture path names something that does not exist.

    ``path`` is the key path, inside the stage, of the string that holds the placeholder.
    """

    def __init__(self, message: str, path: KeyPath = ()) -> None:
        super().__init__(message)
        self.message = message
        self.path = path


def interpolate(value: Any, variables: dict[str, Any], path: KeyPath = ()) -> Any:
    """Replace placeholders in every string inside ``value`` (lists and dicts included).

    ``path`` is where ``value`` sits in the stage, so an error can name the string's line.
    """
    if isinstance(value, str):
        return fill_placeholders(value, lambda name: _lookup(name, variables, path))
    if isinstance(value, list):
        return [interpolate(item, variables, (*path, index)) for index, item in enumerate(value)]
    if isinstance(value, dict):
        return {key: interpolate(item, variables, (*path, key)) for key, item in value.items()}
    return value


def _lookup(name: str, variables: dict[str, Any], path: KeyPath) -> str:
    if name.startswith("env."):
        value = os.environ.get(name[4:])
        if value is None:
            raise InterpolationError(
                f"${{{name}}}: environment variable {name[4:]!r} is not set", path)
        return value
    if name not in variables:
        raise InterpolationError(f"${{{name}}} is not defined{did_you_mean(name, variables)}"
                                 f" (captured so far: {', '.join(variables) or 'nothing'})", path)
    value = variables[name]
    return value if isinstance(value, str) else json.dumps(value)


def has_placeholder(value: Any) -> bool:
    if isinstance(value, str):
        return "${" in value
    if isinstance(value, list):
        return any(has_placeholder(item) for item in value)
    if isinstance(value, dict):
        return any(has_placeholder(key) or has_placeholder(item) for key, item in value.items())
    return False


Expectations = TypeVar("Expectations", bound=AgentExpect)


def resolve_expect(expect: Expectations, variables: dict[str, Any]) -> Expectations:
    """The expectations with ``${...}`` filled in, wherever they hold one: matchers,
    ``stream``, ``probe`` calls and their answers, ``bfcl`` ground truths alike.

    Expectations are validated (their matchers compiled) at collection, when captured
    values are not known yet; the keys that name a variable are written out as the case
    spelled them, filled in and validated again here, the others kept.
    """
    written = expect.model_dump(exclude_unset=True)  # a matcher dumps as its spec
    named = {key: value for key, value in written.items() if has_placeholder(value)}
    if not named:
        return expect
    filled = {key: interpolate(value, variables, ("expect", key))
              for key, value in named.items()}
    try:
        fresh = type(expect).model_validate(filled)
    except ValidationError as exc:
        detail = exc.errors()[0]
        keyed = (detail.get("ctx") or {}).get("error")
        inner = keyed.path if isinstance(keyed, KeyedError) else ()
        message = keyed.message if isinstance(keyed, KeyedError) else detail["msg"]
        raise InterpolationError(f"after interpolation: {message}",
                                 ("expect", *detail["loc"], *inner)) from None
    return expect.model_copy(update={key: getattr(fresh, key) for key in named})


def capture(paths: dict[str, str], reply: Reply | None, calls: list[ToolCall]) -> dict[str, Any]:
    """Evaluate ``capture`` paths against a stage's outcome."""
    view = reply_view(reply, calls)
    captured = {}
    for name, path in paths.items():
        value = resolve_path(view, path)
        if value is _MISSING:
            raise InterpolationError(f"capture {name!r}: {path!r} not found in the reply",
                                     ("capture", name))
        captured[name] = value
    return captured


def reply_view(reply: Reply | None, calls: list[ToolCall]) -> dict[str, Any]:
    """The paths ``text``, ``finish_reason``, ``tool_calls.N...``, ``usage.KEY``."""
    return {
        "text": reply.text if reply else "",
        "finish_reason": reply.finish_reason if reply else None,
        "tool_calls": [{"id": c.id, "name": c.name, "arguments": c.arguments} for c in calls],
        "usage": (reply.usage if reply else None) or {},
    }


def resolve_path(value: Any, path: str) -> Any:
    for part in path.split("."):
        if isinstance(value, dict) and part in value:
            value = value[part]
        elif isinstance(value, list) and part.isdigit() and int(part) < len(value):
            value = value[int(part)]
        else:
            return _MISSING
    return value
