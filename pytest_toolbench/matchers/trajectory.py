"""``expect.trajectory``: every call the agent loop made, matched as a path through tools.

    [call, call]                 these calls, in this order, and no others
    {$unordered: [call, ...]}    these calls in any order, and no others
    {$includes: [call, ...]}     at least these, in any order
    {$contains: [call, ...]}     these in this order, others before, between and after
    {$not: [call, ...]}          none of the calls matches any of these
    {max_calls: N}               at most N calls

Each ``call`` is ``{name: M, arguments: M}`` as in ``expect.tool_calls``; a mapping may
give several keys, and all must hold. Every mismatch message ends with the calls that were
made, so a failure shows the trajectory that happened.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, Final

from ..records import ToolCall
from .compiled import _AllOf, _Items, _Sequence
from .core import Matcher, MatcherError, Mismatch, Path, _did_you_mean, _Matcher, _require, _short
from .pairing import _OneToOne
from .tool_calls import _CALLS, _compile_call, _describe_call, _ToolCall

_KEYS: Final = ("$ordered", "$unordered", "$includes", "$contains", "$not", "max_calls")
SHOWN_CALLS: Final = 12
"""A failure lists this many calls of the trajectory, then how many more there were."""


class _Subsequence(_Matcher):
    """These calls in this order, any others around them (greedy: the earliest call that
    matches each expected one leaves the most room for the rest)."""

    def __init__(self, spec: Any, items: Sequence[_ToolCall]) -> None:
        super().__init__(spec)
        self._items = items

    def match(self, actual: Any, path: Path = ()) -> list[Mismatch]:
        position = 0
        for index, item in enumerate(self._items):
            found = next((at for at in range(position, len(actual))
                          if not item.match(actual[at])), None)
            if found is None:
                after = f" after call {position - 1}" if position else ""
                return [Mismatch(path + (index,), f"no call{after} matches expected call"
                                 f" {index} {_short(item.spec)}", item.spec, list(actual))]
            position = found + 1
        return []


class _Never(_Matcher):
    """No call matches any of these."""

    def __init__(self, spec: Any, items: Sequence[_ToolCall]) -> None:
        super().__init__(spec)
        self._items = items

    def match(self, actual: Any, path: Path = ()) -> list[Mismatch]:
        return [Mismatch(path + (index,), f"call {at} {_describe_call(call)} must never"
                         f" happen", item.spec, call)
                for index, item in enumerate(self._items)
                for at, call in enumerate(actual) if not item.match(call)]


class _AtMost(_Matcher):
    def match(self, actual: Any, path: Path = ()) -> list[Mismatch]:
        if len(actual) <= self._spec:
            return []
        return self._fail(path, f"{len(actual)} calls, more than max_calls {self._spec}",
                          len(actual))


class _Trajectory(_Matcher):
    """The parts of a trajectory spec, each mismatch followed by the calls made."""

    def __init__(self, spec: Any, inner: _Matcher) -> None:
        super().__init__(spec)
        self._inner = inner

    def match(self, actual: Any, path: Path = ()) -> list[Mismatch]:
        calls = list(actual) if isinstance(actual, (list, tuple)) else []
        made = made_calls(calls)
        return [Mismatch(m.path, f"{m.message}; the calls made: {made}", m.expected, m.actual)
                for m in self._inner.match(calls, path)]


def made_calls(calls: Sequence[ToolCall]) -> str:
    """The trajectory in one line, each call by its index as messages give it:
    ``#0 name(arguments), #1 ...``."""
    if not calls:
        return "none"
    shown = ", ".join(f"#{index} {_describe_call(call)}"
                      for index, call in enumerate(calls[:SHOWN_CALLS]))
    more = len(calls) - SHOWN_CALLS
    return f"{shown}, ... and {more} more" if more > 0 else shown


def compile_trajectory(spec: Any) -> Matcher:
    """Compile an ``expect.trajectory`` spec for the list of a stage's (or case's) calls."""
    if isinstance(spec, (list, tuple)):
        return _Trajectory(spec, _part("$ordered", spec, ()))
    if not isinstance(spec, Mapping) or not spec:
        raise MatcherError(
            "trajectory takes a list of calls in order, or a mapping of $ordered,"
            f" $unordered, $includes, $contains, $not, max_calls; got {_short(spec)}")
    for key in spec:
        if key not in _KEYS:
            raise MatcherError(f"unknown trajectory key {key!r}{_did_you_mean(str(key), _KEYS)};"
                               f" allowed: {', '.join(_KEYS)}", (key,))
    parts = [_part(key, spec[key], (key,)) for key in spec]
    return _Trajectory(spec, parts[0] if len(parts) == 1 else _AllOf(spec, parts))


def _part(key: str, value: Any, path: Path) -> _Matcher:
    """One key's matcher, its mismatches placed under the key."""
    if key == "max_calls":
        _require(isinstance(value, int) and not isinstance(value, bool) and value >= 0,
                 f"max_calls takes a count (0 or more), got {_short(value)}", path)
        return _Under(path, _AtMost(value))
    if key == "$not" and isinstance(value, Mapping):
        value = [value]  # one call that must never happen
    return list_part(key, value, path, _compile_call, "calls", in_order=_Subsequence,
                     never=_Never, ordered=_CALLS, paired=_CALLS)


def list_part(key: str, value: Any, path: Path, compile_item: Callable[[Any, Path], Any],
              what: str, *, in_order: Callable[[Any, Any], _Matcher],
              never: Callable[[Any, Any], _Matcher], ordered: _Items,
              paired: _Items) -> _Matcher:
    """The matcher of one list key ($ordered, $contains, $not, $unordered, $includes) over
    items that ``compile_item`` compiles, its mismatches placed under the key: the shape
    that ``expect.trajectory`` (calls) and ``expect.path`` (stage names) share."""
    _require(isinstance(value, (list, tuple)), f"{key!r} takes a list of {what}", path)
    items = [compile_item(item, path + (index,)) for index, item in enumerate(value)]
    matcher: _Matcher
    if key == "$ordered":
        matcher = _Sequence(value, items, ordered)
    elif key == "$contains":
        matcher = in_order(value, items)
    elif key == "$not":
        matcher = never(value, items)
    else:
        matcher = _OneToOne(value, items, paired, exact=key == "$unordered")
    return _Under(path, matcher)


class _Under(_Matcher):
    """A part's mismatches at the part's key, so each names its own line."""

    def __init__(self, path: Path, inner: _Matcher) -> None:
        super().__init__(inner.spec)
        self._path = path
        self._inner = inner

    def match(self, actual: Any, path: Path = ()) -> list[Mismatch]:
        return self._inner.match(actual, path + self._path)
