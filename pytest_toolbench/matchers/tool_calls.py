"""``expect.tool_calls`` (SPEC section 5): expected calls matched against ``ToolCall``s."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from ..records import ToolCall
from .compiled import _AllOf, _Items, _Sequence
from .compiler import _OPERATORS, _check_known, _compile, _compile_operators, _has_operators
from .core import (
    _REPR_LIMIT,
    Matcher,
    MatcherError,
    Mismatch,
    Path,
    _did_you_mean,
    _Matcher,
    _require,
    _short,
)
from .pairing import _OneToOne


def _describe_call(call: Any) -> str:
    if not isinstance(call, ToolCall):
        return _short(call)
    arguments = call.arguments_raw
    if len(arguments) > _REPR_LIMIT:
        arguments = arguments[: _REPR_LIMIT - 3] + "..."
    return f"{call.name}({arguments})"


_CALLS = _Items("call", _describe_call)
_CALL_KEYS: Final = ("name", "arguments")
_CALL_LISTS: Final = ("$ordered", "$unordered", "$includes")


class _ToolCall(_Matcher):
    """One expected call: ``name`` and ``arguments`` matchers, each optional."""

    def __init__(self, spec: Any, name: _Matcher | None, arguments: _Matcher | None) -> None:
        super().__init__(spec)
        self._name = name
        self._arguments = arguments

    def match(self, actual: Any, path: Path = ()) -> list[Mismatch]:
        if not isinstance(actual, ToolCall):
            return self._fail(path, f"expected a tool call, got {_short(actual)}", actual)
        mismatches = self._name.match(actual.name, path + ("name",)) if self._name else []
        if self._arguments:
            mismatches += self._match_arguments(self._arguments, actual, path + ("arguments",))
        return mismatches

    @staticmethod
    def _match_arguments(expected: _Matcher, call: ToolCall, path: Path) -> list[Mismatch]:
        if call.arguments_error is None:
            return expected.match(call.arguments, path)
        message = (f"arguments are not valid JSON ({call.arguments_error}): "
                   f"{_short(call.arguments_raw)}")
        return [Mismatch(path, message, expected.spec, call.arguments_raw)]


class _CallsAsData(_Matcher):
    """A general matcher applied to the calls seen as ``{name, arguments}`` objects."""

    def __init__(self, spec: Any, inner: _Matcher) -> None:
        super().__init__(spec)
        self._inner = inner

    def match(self, actual: Any, path: Path = ()) -> list[Mismatch]:
        if isinstance(actual, (list, tuple)):
            actual = [_call_data(call) for call in actual]
        return self._inner.match(actual, path)


def _call_data(call: Any) -> Any:
    if not isinstance(call, ToolCall):
        return call
    data: dict[str, Any] = {"name": call.name}
    if call.arguments_error is None:  # unparseable arguments read as a missing key
        data["arguments"] = call.arguments
    return data


def compile_tool_calls(spec: Any) -> Matcher:
    """Compile an ``expect.tool_calls`` spec (SPEC section 5) for a list of ``ToolCall``."""
    if isinstance(spec, (list, tuple)):
        return _call_list("$unordered", spec, (), spec)
    if isinstance(spec, Mapping) and _has_operators(spec, ()):
        _check_known(spec, sorted({*_OPERATORS, *_CALL_LISTS}), ())
        parts = [_call_list(key, spec[key], (key,), {key: spec[key]})
                 for key in spec if key in _CALL_LISTS]
        rest = {key: value for key, value in spec.items() if key not in _CALL_LISTS}
        if rest:
            parts.append(_CallsAsData(rest, _compile_operators(rest, ())))
        return parts[0] if len(parts) == 1 else _AllOf(spec, parts)
    raise MatcherError(
        "tool_calls takes a list of expected calls ([{name: ..., arguments: ...}]), "
        "{$ordered: [...]}, {$includes: [...]} or an operator mapping such as "
        f"{{$len: {{$gte: 1}}}}; got {_short(spec)}")


def _call_list(key: str, value: Any, path: Path, spec: Any) -> _Matcher:
    _require(isinstance(value, (list, tuple)), f"{key!r} takes a list of expected calls", path)
    items = [_compile_call(item, path + (index,)) for index, item in enumerate(value)]
    if key == "$ordered":
        return _Sequence(spec, items, _CALLS)
    return _OneToOne(spec, items, _CALLS, exact=key == "$unordered")


def _compile_call(spec: Any, path: Path) -> _ToolCall:
    _require(isinstance(spec, Mapping),
             f"an expected call is a mapping with 'name' and/or 'arguments', got {_short(spec)}",
             path)
    for key in spec:
        if key not in _CALL_KEYS:
            hint = _did_you_mean(str(key), _CALL_KEYS)
            raise MatcherError(f"unknown key {key!r} in an expected call{hint}; "
                               "allowed: 'name', 'arguments'", path + (key,))
    name = _compile(spec["name"], path + ("name",)) if "name" in spec else None
    arguments = _compile(spec["arguments"], path + ("arguments",)) if "arguments" in spec else None
    return _ToolCall(spec, name, arguments)
