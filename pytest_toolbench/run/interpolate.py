"""``capture`` and ``${name}`` / ``${env.NAME}`` interpolation across stages.

A ``${name}`` names a value an earlier stage captured. ``undefined_names`` checks that
when a case file is loaded (so collection and ``toolbench validate`` report a typo at its
line); ``interpolate`` fills the values in as the case runs.
"""

from __future__ import annotations

import difflib
import json
import os
import re
from collections.abc import Iterator
from typing import Any

from ..casefile.schema import Case, Expect, Stage
from ..matchers import MatcherError, compile_matcher, compile_tool_calls, compile_trajectory
from ..records import Reply, ToolCall

PLACEHOLDER = re.compile(r"\$\{([^}]+)\}")
KeyPath = tuple[str | int, ...]
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
        return PLACEHOLDER.sub(lambda m: _lookup(m.group(1).strip(), variables, path), value)
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


def did_you_mean(name: str, known: Any) -> str:
    close = difflib.get_close_matches(name, list(known), n=1, cutoff=0.6)
    return f"; did you mean `{close[0]}`?" if close else ""


# ---------------------------------------------------------------------------- load time


def undefined_names(case: Case) -> Iterator[tuple[KeyPath, str]]:
    """Each ``${name}`` that no earlier stage captures: its key path in the case, and why.

    A stage's own ``capture`` runs after its checks, so it serves later stages only.
    ``${env.NAME}`` is read when the stage runs and is not checked here.
    """
    captured: list[str] = []
    for index, stage in enumerate(case.stages):
        for path, value in _interpolated(stage):
            for where, name in _placeholders(value, ("stages", index, *path)):
                if name not in captured and not name.startswith("env."):
                    yield where, _undefined(name, captured, case, index)
        captured.extend(name for name in stage.capture if name not in captured)


def _interpolated(stage: Stage) -> Iterator[tuple[KeyPath, Any]]:
    """The values of a stage that ``${...}`` is filled into (``expect.stream`` and
    ``expect.probe`` are not)."""
    yield ("user",), stage.user
    yield ("messages",), stage.messages
    yield ("params",), stage.params
    for key in sorted(stage.expect.model_fields_set - {"stream", "probe"}):
        yield ("expect", key), getattr(stage.expect, key).spec


def _placeholders(value: Any, path: KeyPath) -> Iterator[tuple[KeyPath, str]]:
    if isinstance(value, str):
        yield from ((path, match.group(1).strip()) for match in PLACEHOLDER.finditer(value))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from _placeholders(item, (*path, index))
    elif isinstance(value, dict):
        for key, item in value.items():
            yield from _placeholders(item, (*path, key))


def _undefined(name: str, captured: list[str], case: Case, index: int) -> str:
    own = case.stages[index]
    later = next((stage.name for stage in case.stages[index + 1:] if name in stage.capture), None)
    if name in own.capture:
        return (f"${{{name}}} is captured by this stage, after its checks;"
                " only later stages can use it")
    if later is not None:
        return (f"${{{name}}} is captured by stage {later!r}, which runs after this one;"
                " a stage sees only what earlier stages captured")
    hint = did_you_mean(name, captured) or (
        f" (earlier stages capture: {', '.join(captured)})" if captured else
        f" (no earlier stage captures it: `capture: {{{name}: PATH}}` on one would)")
    return f"${{{name}}} is not defined{hint}"


# ---------------------------------------------------------------------------- run time


def has_placeholder(value: Any) -> bool:
    if isinstance(value, str):
        return "${" in value
    if isinstance(value, list):
        return any(has_placeholder(item) for item in value)
    if isinstance(value, dict):
        return any(has_placeholder(key) or has_placeholder(item) for key, item in value.items())
    return False


_COMPILERS = {"tool_calls": compile_tool_calls, "trajectory": compile_trajectory}
"""The keys whose matchers are not compiled by ``compile_matcher``."""


def resolve_expect(expect: Expect, variables: dict[str, Any]) -> Expect:
    """The stage's expectations with ``${...}`` filled in; those matchers compiled anew.

    Matchers are compiled at collection, when captured values are not known yet; only the
    few that name a variable are compiled again here.
    """
    updates: dict[str, Any] = {}
    for key in expect.model_fields_set:
        spec = getattr(getattr(expect, key), "spec", None)  # matchers have a spec
        if has_placeholder(spec):
            compile_spec = _COMPILERS.get(key, compile_matcher)
            try:
                updates[key] = compile_spec(interpolate(spec, variables, ("expect", key)))
            except MatcherError as error:
                raise InterpolationError(
                    f"after interpolation: {error.message}", ("expect", key, *error.path)
                ) from None
    return expect.model_copy(update=updates) if updates else expect


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
