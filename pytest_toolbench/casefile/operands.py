"""Expectations that could never hold, refused at load: an empty one, a finish reason no
API gives, text where a number is matched (``usage: {total_tokens: "<500"}``).

Each is a typo that would otherwise fail (or, under ``$not``, pass) every run for a reason
the failure hides; each is a ``KeyedError`` below the expectation's key, at its line.
"""

from __future__ import annotations

import difflib
import json
import re
from typing import Any

from ..keypaths import KeyedError, KeyPath, format_key_path

FINISH_REASONS = ("stop", "length", "tool_calls", "content_filter")
"""``finish_reason`` in chat completions' words, which every API's reply is read into (an
API's own word is ``api_finish_reason``)."""

NUMERIC = frozenset({"usage", "latency_ms", "status", "chunks", "ttft_ms"})
"""Expectations whose values are numbers (``usage``: an object of them)."""

TEXT = frozenset({"text", "reasoning", "error", "api_finish_reason"})
"""Expectations whose values are text."""
_TEXT_OPERANDS = ("$eq", "$ne", "$contains", "$icontains")
_COMPARISON = re.compile(r"^\s*(<=|>=|<|>|==|!=)\s*(-?[0-9.]+)\s*$")
_OPERATORS = {"<": "$lt", "<=": "$lte", ">": "$gt", ">=": "$gte", "==": "$eq", "!=": "$ne"}


def check_expectation(key: str, spec: Any) -> None:
    """Raise KeyedError (path below ``key``) when the expectation ``key: spec`` is empty or
    can never hold."""
    if spec is None:
        raise KeyedError(f"`{key}:` is empty: give what it must match, or leave the key out"
                         " ({$eq: null} matches a null)")
    if key == "finish_reason":
        _known_reasons(spec, ())
    elif key in NUMERIC:
        _numbers(key, spec, ())
    elif key in TEXT:
        _texts(key, spec, ())


def _known_reasons(spec: Any, path: KeyPath) -> None:
    if isinstance(spec, str):
        if spec not in FINISH_REASONS:
            close = difflib.get_close_matches(spec, FINISH_REASONS, n=1, cutoff=0.6)
            hint = f"; did you mean `{close[0]}`?" if close else ""
            raise KeyedError(
                f"finish_reason {spec!r} is none of {', '.join(FINISH_REASONS)}{hint}"
                " (every API's reason is read into these; an API's own word:"
                " api_finish_reason)", path)
    elif isinstance(spec, dict):
        for operator in ("$eq", "$ne"):
            if operator in spec:
                _known_reasons(spec[operator], (*path, operator))
        for operator in ("$in", "$anyof"):
            if isinstance(spec.get(operator), list):
                for index, item in enumerate(spec[operator]):
                    _known_reasons(item, (*path, operator, index))


def _numbers(key: str, spec: Any, path: KeyPath) -> None:
    """A text literal where ``key`` holds numbers: it can never equal one."""
    if isinstance(spec, str):
        raise KeyedError(f"{format_key_path((key, *path))} is a number; the text {spec!r} never"
                         " equals one"
                         f"{_written_as(spec)}", path)
    if isinstance(spec, dict) and not any(str(name).startswith("$") for name in spec):
        if key != "usage":  # only usage is an object (of numbers, or objects of them)
            return
        for name, value in spec.items():
            _numbers(key, value, (*path, name))
    elif isinstance(spec, dict):
        for operator in ("$eq", "$ne"):
            if operator in spec:
                _numbers(key, spec[operator], (*path, operator))


def _texts(key: str, spec: Any, path: KeyPath) -> None:
    """A number or boolean where ``key`` holds text (``text: 21``): never equal, never in
    it; as YAML reads it unquoted."""
    if isinstance(spec, (bool, int, float)):
        kind = "boolean" if isinstance(spec, bool) else "number"
        relation = "never equals it" if not path or path[-1] in ("$eq", "$ne") else (
            "is never found in it")
        raise KeyedError(f"{key} is matched against text; the {kind} {json.dumps(spec)}"
                         f" {relation}: quote it"
                         f" ({json.dumps(str(json.dumps(spec)))})", path)
    if isinstance(spec, dict):
        for operator in _TEXT_OPERANDS:
            operand = spec.get(operator)
            if isinstance(operand, list):
                for index, item in enumerate(operand):
                    _texts(key, item, (*path, operator, index))
            elif operand is not None:
                _texts(key, operand, (*path, operator))


def _written_as(text: str) -> str:
    """How a comparison written as text is a matcher."""
    found = _COMPARISON.match(text)
    if found is None:
        return " (compare with {$lt: N}, {$lte: N}, {$gt: N}, {$gte: N})"
    operator, number = found.groups()
    return f": write {{{_OPERATORS[operator]}: {number}}}"
