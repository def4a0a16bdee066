"""The operators that judge the value alone (``$eq``, ``$regex``, ``$gt``, ``$approx``...)."""

from __future__ import annotations

import functools
import operator
import re
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from .core import (
    _TYPES,
    MISSING,
    MatcherError,
    Path,
    _did_you_mean,
    _is_number,
    _require,
    _same,
    _short,
    _Test,
    _type_name,
)
from .limits import quick_search, search, untimed

if TYPE_CHECKING:
    import regex

# --- operators that judge the value alone ---------------------------------------------------


def _eq(value: Any, path: Path) -> _Test:
    return lambda actual: None if _same(value, actual) else (
        f"expected {_short(value)}, got {_short(actual)}")


def _ne(value: Any, path: Path) -> _Test:
    return lambda actual: None if not _same(value, actual) else (
        f"expected anything but {_short(value)}")


def _any(value: Any, path: Path) -> _Test:
    _require(value is True, "'$any' takes true: {key: {$any: true}}", path)
    return lambda actual: "expected a value, got <missing>" if actual is MISSING else None


class _Unsearchable(Exception):
    """A pattern in re's syntax that the regex package reads otherwise."""


@functools.lru_cache(maxsize=4096)
def _compiled(source: str) -> regex.Pattern[str]:
    """``source`` compiled with the regex package, whose search stops at a timeout (re's
    cannot). Compiled when first searched with it, not at collection: it costs more than
    re's compile, and a collect-only run never searches. Compiled patterns are immutable,
    so cases that share a pattern share it."""
    import regex  # a tenth of a case file's import time: only for patterns that need it

    try:
        return regex.compile(source)
    except regex.error as error:
        raise _Unsearchable(str(error)) from None


def _regex(value: Any, path: Path) -> _Test:
    _require(isinstance(value, str), f"'$regex' takes a string, got {_short(value)}", path)
    try:
        plain = re.compile(value)  # the SPEC's syntax: re's (the regex package accepts more)
    except re.error as error:
        raise MatcherError(f"bad regex {value!r}: {error}", path) from None

    what = f"$regex {value!r}"

    def test(actual: Any) -> str | None:
        if not isinstance(actual, str):
            return f"expected a string matching regex {value!r}, got {_short(actual)}"
        found = quick_search(plain, actual, what)
        if found is None:  # the work could run away: the regex package, under the limit
            try:
                with untimed():
                    pattern = _compiled(value)
                found = search(pattern, actual, what)
            except _Unsearchable as error:
                return f"regex {value!r} cannot be searched with a time limit: {error}"
        return None if found else f"{_short(actual)} does not match regex {value!r}"

    return test


def _contains(value: Any, path: Path, fold: bool = False) -> _Test:
    needles = list(value) if isinstance(value, (list, tuple)) else [value]
    canon: Callable[[Any], Any] = (
        (lambda v: v.casefold() if isinstance(v, str) else v) if fold else (lambda v: v))

    def test(actual: Any) -> str | None:
        if isinstance(actual, str):
            if any(not isinstance(needle, str) for needle in needles):
                return f"cannot search the string {_short(actual)} for {_short(value)}: quote it"
            missing = [n for n in needles if canon(n) not in canon(actual)]
        elif isinstance(actual, (list, tuple)):
            missing = [n for n in needles if not any(_same(canon(n), canon(a)) for a in actual)]
        else:
            return f"expected a string or list containing {_short(value)}, got {_short(actual)}"
        shown = ", ".join(_short(needle) for needle in missing)
        return f"{_short(actual)} does not contain {shown}" if missing else None

    return test


def _in(value: Any, path: Path) -> _Test:
    _require(isinstance(value, (list, tuple)), "'$in' takes a list of acceptable values", path)
    return lambda actual: None if any(_same(v, actual) for v in value) else (
        f"expected one of {_short(value)}, got {_short(actual)}")


# The SPEC's normalisation; all whitespace goes, not just spaces, as models wrap lines.
_LOOSE_TABLE = str.maketrans({"'": '"', **{char: None for char in ",./-_*^"}})


def _loosen(text: str) -> str:
    return "".join(text.lower().translate(_LOOSE_TABLE).split())


def _loose(value: Any, path: Path) -> _Test:
    _require(isinstance(value, str), f"'$loose' takes a string, got {_short(value)}", path)
    target = _loosen(value)

    def test(actual: Any) -> str | None:
        if isinstance(actual, str) and _loosen(actual) == target:
            return None
        return f"{_short(actual)} does not loosely equal {value!r}"

    return test


def _type(value: Any, path: Path) -> _Test:
    if not isinstance(value, str) or value not in _TYPES:  # a list is unhashable
        hint = _did_you_mean(str(value), list(_TYPES)) or f"; known: {', '.join(_TYPES)}"
        raise MatcherError(f"unknown type {_short(value)}{hint}", path)
    test = _TYPES[value]
    return lambda actual: None if test(actual) else (
        f"expected type {value!r}, got {_type_name(actual)} {_short(actual)}")


def _comparison(symbol: str, compare: Callable[[Any, Any], bool]) -> Callable[[Any, Path], _Test]:
    def build(value: Any, path: Path) -> _Test:
        _require(_is_number(value), f"'{path[-1]}' takes a number, got {_short(value)}", path)

        def test(actual: Any) -> str | None:
            if not _is_number(actual):
                return f"expected a number {symbol} {_short(value)}, got {_short(actual)}"
            # _short: repr of an int past 4,300 digits raises, and matching never may.
            return None if compare(actual, value) else (
                f"expected {symbol} {_short(value)}, got {_short(actual)}")

        return test

    return build


_DEFAULT_TOLERANCE = 1e-6


def _approx(value: Any, tolerance: Any, path: Path) -> _Test:
    _require(_is_number(value), f"'$approx' takes a number, got {_short(value)}", path)
    _require(_is_number(tolerance) and tolerance >= 0,
             f"'$tol' takes a non-negative number, got {_short(tolerance)}", path[:-1] + ("$tol",))

    def test(actual: Any) -> str | None:
        if _is_number(actual) and _within(actual, value, tolerance):
            return None
        return (f"expected {_short(value)} within relative tolerance {_short(tolerance)},"
                f" got {_short(actual)}")

    return test


def _within(actual: float, expected: float, tolerance: float) -> bool:
    """Relative to the expected value; the absolute floor lets 0 match a rounding error."""
    if actual == expected:
        return True
    try:
        return abs(actual - expected) <= max(tolerance * abs(expected), 1e-12)
    except OverflowError:  # an int beyond float range: too far from anything a float can be
        return False


_TESTS: dict[str, Callable[[Any, Path], _Test]] = {
    "$eq": _eq,
    "$ne": _ne,
    "$any": _any,
    "$regex": _regex,
    "$contains": _contains,
    "$icontains": lambda value, path: _contains(value, path, fold=True),
    "$in": _in,
    "$loose": _loose,
    "$type": _type,
    "$gt": _comparison(">", operator.gt),
    "$gte": _comparison(">=", operator.ge),
    "$lt": _comparison("<", operator.lt),
    "$lte": _comparison("<=", operator.le),
}
