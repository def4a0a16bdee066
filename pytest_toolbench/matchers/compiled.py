"""The compiled matchers: literals, objects, ordered lists and the operators that wrap
other matchers (``$len``, ``$json``, ``$not``, ``$all``, ``$anyof``...)."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from .core import MISSING, Mismatch, Path, _Matcher, _same, _short, _Test


class _Check(_Matcher):
    """An operator that judges the value alone (``$regex``, ``$gt``...)."""

    def __init__(self, spec: Any, test: _Test) -> None:
        super().__init__(spec)
        self._test = test

    def match(self, actual: Any, path: Path = ()) -> list[Mismatch]:
        message = self._test(actual)
        return [] if message is None else self._fail(path, message, actual)


class _Literal(_Matcher):
    def match(self, actual: Any, path: Path = ()) -> list[Mismatch]:
        if _same(self._spec, actual):
            return []
        return self._fail(path, f"expected {_short(self._spec)}, got {_short(actual)}", actual)


class _Object(_Matcher):
    """A mapping of plain keys: those keys must match; others are allowed unless ``exact``."""

    def __init__(self, spec: Any, fields: dict[Any, _Matcher], exact: bool) -> None:
        super().__init__(spec)
        self._fields = fields
        self._exact = exact

    def match(self, actual: Any, path: Path = ()) -> list[Mismatch]:
        if not isinstance(actual, Mapping):
            return self._fail(path, f"expected an object, got {_short(actual)}", actual)
        mismatches = [m for key, field in self._fields.items()
                      for m in _match_key(field, actual, key, path + (key,))]
        if self._exact:
            mismatches += [Mismatch(path + (key,), f"unexpected key {key!r}", MISSING, value)
                           for key, value in actual.items() if key not in self._fields]
        return mismatches


def _match_key(field: _Matcher, actual: Mapping[Any, Any], key: Any, path: Path) -> list[Mismatch]:
    value = actual.get(key, MISSING)
    if value is MISSING and not field.accepts_missing:
        return [Mismatch(path, f"missing key {key!r}", field.spec, MISSING)]
    return field.match(value, path)


class _Optional(_Matcher):
    accepts_missing = True

    def __init__(self, spec: Any, inner: _Matcher) -> None:
        super().__init__(spec)
        self._inner = inner

    def match(self, actual: Any, path: Path = ()) -> list[Mismatch]:
        return [] if actual is MISSING else self._inner.match(actual, path)


class _Absent(_Matcher):
    accepts_missing = True

    def match(self, actual: Any, path: Path = ()) -> list[Mismatch]:
        if actual is MISSING:
            return []
        return self._fail(path, f"should be absent, got {_short(actual)}", actual)


@dataclass(frozen=True)
class _Items:
    """How list elements are named in messages: plain elements, or tool calls."""

    noun: str
    describe: Callable[[Any], str]

    def count(self, n: int) -> str:
        return f"{n or 'no'} {self.noun}{'' if n == 1 else 's'}"


_ELEMENTS = _Items("element", _short)


class _Sequence(_Matcher):
    """A list of the same length, matched element by element in order."""

    def __init__(self, spec: Any, items: Sequence[_Matcher], names: _Items) -> None:
        super().__init__(spec)
        self._items = items
        self._names = names

    def match(self, actual: Any, path: Path = ()) -> list[Mismatch]:
        if not isinstance(actual, (list, tuple)):
            return self._fail(path, f"expected a list, got {_short(actual)}", actual)
        if len(actual) != len(self._items):
            return self._fail(path, _count_message(self._names, len(self._items), actual), actual)
        return [m for index, (item, value) in enumerate(zip(self._items, actual))
                for m in item.match(value, path + (index,))]


def _count_message(names: _Items, expected: int, actual: Sequence[Any]) -> str:
    listing = ", ".join(names.describe(value) for value in actual[:5])
    more = ", ..." if len(actual) > 5 else ""
    return f"expected {names.count(expected)}, got {len(actual)}" + (
        f": {listing}{more}" if actual else "")


class _AllOf(_Matcher):
    def __init__(self, spec: Any, children: list[_Matcher]) -> None:
        super().__init__(spec)
        self._children = children
        self.accepts_missing = bool(children) and all(c.accepts_missing for c in children)

    def match(self, actual: Any, path: Path = ()) -> list[Mismatch]:
        return [m for child in self._children for m in child.match(actual, path)]


class _AnyOf(_Matcher):
    def __init__(self, spec: Any, children: list[_Matcher]) -> None:
        super().__init__(spec)
        self._children = children
        self.accepts_missing = any(c.accepts_missing for c in children)

    def match(self, actual: Any, path: Path = ()) -> list[Mismatch]:
        failures = []
        for child in self._children:
            mismatches = child.match(actual, path)
            if not mismatches:
                return []
            failures.append(mismatches[0].message)
        reasons = " | ".join(failures)
        return self._fail(path, f"matches none of {len(failures)} alternatives: {reasons}", actual)


class _Not(_Matcher):
    def __init__(self, spec: Any, inner: _Matcher) -> None:
        super().__init__(spec)
        self._inner = inner

    def match(self, actual: Any, path: Path = ()) -> list[Mismatch]:
        if self._inner.match(actual, path):
            return []
        message = f"{_short(actual)} should not match {_short(self._inner.spec)}"
        return self._fail(path, message, actual)


class _Len(_Matcher):
    def __init__(self, spec: Any, inner: _Matcher) -> None:
        super().__init__(spec)
        self._inner = inner

    def match(self, actual: Any, path: Path = ()) -> list[Mismatch]:
        if not isinstance(actual, (str, list, tuple, Mapping)):
            message = f"expected a string, array or object to measure, got {_short(actual)}"
            return self._fail(path, message, actual)
        prefix = f"length of {_short(actual)}: "
        return [replace(m, message=prefix + m.message, expected=self._spec)
                for m in self._inner.match(len(actual), path)]


class _Json(_Matcher):
    def __init__(self, spec: Any, inner: _Matcher) -> None:
        super().__init__(spec)
        self._inner = inner

    def match(self, actual: Any, path: Path = ()) -> list[Mismatch]:
        if not isinstance(actual, str):
            return self._fail(path, f"expected a string holding JSON, got {_short(actual)}", actual)
        try:
            parsed = json.loads(actual)
        except (ValueError, RecursionError) as error:
            return self._fail(path, f"not valid JSON ({error}): {_short(actual)}", actual)
        return self._inner.match(parsed, path)
