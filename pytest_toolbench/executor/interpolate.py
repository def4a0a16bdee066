"""``capture`` and ``${name}`` / ``${env.NAME}`` interpolation across stages."""

from __future__ import annotations

import json
import os
import re
from typing import Any

from ..matchers import MatcherError, compile_matcher, compile_tool_calls
from ..models.case import Expect
from ..models.records import Reply, ToolCall

PLACEHOLDER = re.compile(r"\$\{([^}]+)\}")
_MISSING = object()


class InterpolationError(Exception):
    """A ``${...}`` or capture path names something that does not exist."""


def interpolate(value: Any, variables: dict[str, Any], stage: str) -> Any:
    """Replace placeholders in every string inside ``value`` (lists and dicts included)."""
    if isinstance(value, str):
        return PLACEHOLDER.sub(lambda m: _lookup(m.group(1).strip(), variables, stage), value)
    if isinstance(value, list):
        return [interpolate(item, variables, stage) for item in value]
    if isinstance(value, dict):
        return {key: interpolate(item, variables, stage) for key, item in value.items()}
    return value


def _lookup(name: str, variables: dict[str, Any], stage: str) -> str:
    if name.startswith("env."):
        value = os.environ.get(name[4:])
        if value is None:
            raise InterpolationError(
                f"stage {stage!r}: ${{{name}}}: environment variable {name[4:]!r} is not set"
            )
        return value
    if name not in variables:
        known = ", ".join(sorted(variables)) or "none captured yet"
        raise InterpolationError(f"stage {stage!r}: ${{{name}}} is not defined ({known})")
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


def resolve_expect(expect: Expect, variables: dict[str, Any], stage: str) -> Expect:
    """The stage's expectations with ``${...}`` filled in; those matchers compiled anew.

    Matchers are compiled at collection, when captured values are not known yet; only the
    few that name a variable are compiled again here.
    """
    updates: dict[str, Any] = {}
    for key in expect.model_fields_set:
        spec = getattr(getattr(expect, key), "spec", None)  # matchers have a spec
        if has_placeholder(spec):
            compile_spec = compile_tool_calls if key == "tool_calls" else compile_matcher
            try:
                updates[key] = compile_spec(interpolate(spec, variables, stage))
            except MatcherError as error:
                raise InterpolationError(
                    f"stage {stage!r}: expect.{key} after interpolation: {error.message}"
                ) from None
    return expect.model_copy(update=updates) if updates else expect


def capture(paths: dict[str, str], reply: Reply | None, calls: list[ToolCall],
            stage: str) -> dict[str, Any]:
    """Evaluate ``capture`` paths against a stage's outcome."""
    view = reply_view(reply, calls)
    captured = {}
    for name, path in paths.items():
        value = resolve_path(view, path)
        if value is _MISSING:
            raise InterpolationError(f"stage {stage!r}: capture {name!r}: {path!r} not found")
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
