"""``expect.path``: the names of the stages a run went through, in order, as the trajectory
is matched for calls.

    [ask, clarify, confirm]      these stages, in this order, and no others
    {$ordered: [...]}            the same
    {$contains: [ask, confirm]}  these in this order, others before, between and after
    {$unordered: [...]}          these stages in any order, and no others
    {$includes: [...]}           at least these, in any order
    {$not: [clarify]}            none of these ever ran
    {$len: {$lte: 4}}            any other operator, on the list of names

Each stage is a matcher on its name: ``ask``, ``{$regex: "^ask"}``. Every mismatch message
ends with the path taken, so a failure shows the route that happened.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Final

from .compiled import _ELEMENTS, _AllOf, _Items
from .compiler import _compile, _compile_operators
from .core import Matcher, MatcherError, Mismatch, Path, _Matcher, _short
from .trajectory import list_part

_KEYS: Final = ("$ordered", "$contains", "$unordered", "$includes", "$not")
_STAGES = _Items("stage", _short)
ARROW: Final = " → "


class _InOrder(_Matcher):
    """These stages in this order, any others around them (the earliest that matches
    each leaves the most room for the rest)."""

    def __init__(self, spec: Any, items: Sequence[_Matcher]) -> None:
        super().__init__(spec)
        self._items = items

    def match(self, actual: Any, path: Path = ()) -> list[Mismatch]:
        position = 0
        for index, item in enumerate(self._items):
            found = next((at for at in range(position, len(actual))
                          if not item.match(actual[at])), None)
            if found is None:
                after = f" after {actual[position - 1]!r}" if position else ""
                return [Mismatch(path + (index,), f"no stage{after} matches {_short(item.spec)}",
                                 item.spec, list(actual))]
            position = found + 1
        return []


class _Never(_Matcher):
    """None of these stages ran."""

    def __init__(self, spec: Any, items: Sequence[_Matcher]) -> None:
        super().__init__(spec)
        self._items = items

    def match(self, actual: Any, path: Path = ()) -> list[Mismatch]:
        return [Mismatch(path + (index,), f"stage {name!r} ran, and never may", item.spec, name)
                for index, item in enumerate(self._items)
                for name in dict.fromkeys(actual) if not item.match(name)]


class _Path(_Matcher):
    """The parts of a path spec, each mismatch followed by the path taken."""

    def __init__(self, spec: Any, inner: _Matcher) -> None:
        super().__init__(spec)
        self._inner = inner

    def match(self, actual: Any, path: Path = ()) -> list[Mismatch]:
        names = list(actual) if isinstance(actual, (list, tuple)) else []
        taken = ARROW.join(names) or "no stage"
        return [Mismatch(m.path, f"{m.message}; the path taken: {taken}", m.expected, m.actual)
                for m in self._inner.match(names, path)]


def compile_path(spec: Any) -> Matcher:
    """Compile an ``expect.path`` spec for the list of the stage names a run went through."""
    if isinstance(spec, (list, tuple)):
        return _Path(spec, _part("$ordered", spec, ()))
    if not isinstance(spec, Mapping) or not spec:
        raise MatcherError("path takes a list of stage names in order, or a mapping of"
                           f" {', '.join(_KEYS)} or another operator; got {_short(spec)}")
    parts = [_part(key, spec[key], (key,)) if key in _KEYS
             else _compile_operators({key: spec[key]}, ()) for key in spec]
    return _Path(spec, parts[0] if len(parts) == 1 else _AllOf(spec, parts))


def _part(key: str, value: Any, path: Path) -> _Matcher:
    if key == "$not" and not isinstance(value, (list, tuple)):
        value = [value]  # one stage that must never run
    return list_part(key, value, path, _compile, "stage names", in_order=_InOrder,
                     never=_Never, ordered=_STAGES, paired=_ELEMENTS)

