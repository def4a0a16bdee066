"""The matcher language of ``expect:`` (SPEC sections 4 and 5).

A spec is compiled once, at collection time, into a ``Matcher``; every problem with the spec
itself (unknown operator, bad regex, bad schema...) is a ``MatcherError`` raised then, with
the key path inside the spec. Matching never raises: it returns a list of ``Mismatch`` (empty
when the value matched), each with its path inside the actual value and a one-line message.

    MatcherError(ValueError)   the spec is invalid; ``.message`` and ``.path``
"""

from __future__ import annotations

import difflib
import enum
import json
import operator
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, Final, Protocol

import jsonschema

from .loader import KeyedError
from .models.records import ToolCall

Path = tuple[str | int, ...]

__all__ = [
    "MISSING",
    "Matcher",
    "MatcherError",
    "Mismatch",
    "compile_matcher",
    "compile_tool_calls",
]


class _Missing(enum.Enum):
    """Type of ``MISSING``; an enum so the sentinel survives copying and pickling (xdist)."""

    MISSING = "MISSING"

    def __repr__(self) -> str:
        return "<missing>"

    __str__ = __repr__


MISSING: Final = _Missing.MISSING
"""Stands for the value of a key that is not there."""


class MatcherError(KeyedError):
    """A matcher spec is invalid (unknown operator, bad regex, bad JSON Schema, mixed keys...).

    ``path`` is the key path inside the matcher spec where the problem is.
    """


@dataclass(frozen=True)
class Mismatch:
    """One way the actual value differs from the spec."""

    path: Path
    """Where in the actual value, e.g. ``(0, "arguments", "city")``."""
    message: str
    """One line, e.g. ``'Lyon' does not match regex '(?i)^paris$'``."""
    expected: Any
    """The spec fragment that failed."""
    actual: Any
    """The actual fragment, ``MISSING`` when absent."""


class Matcher(Protocol):
    """A compiled spec; reusable, and safe on any actual value."""

    def match(self, actual: Any, path: Path = ()) -> list[Mismatch]: ...

    @property
    def spec(self) -> Any: ...


# --- values ---------------------------------------------------------------------------------

_REPR_LIMIT = 80


def _short(value: Any) -> str:
    """``repr`` cut to one readable length; LLM text can be pages long."""
    try:
        text = repr(value)
    except Exception:  # noqa: BLE001 - a hostile __repr__ must not turn a mismatch into a crash
        text = f"<{type(value).__name__}>"
    return text if len(text) <= _REPR_LIMIT else text[: _REPR_LIMIT - 3] + "..."


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _same(expected: Any, actual: Any) -> bool:
    """JSON equality: numbers by value (21 == 21.0), but ``True`` is not ``1``.

    ``_is_number`` leaves bool out, so a bool only reaches the last line, which wants the
    same type on both sides.
    """
    if _is_number(expected) or _is_number(actual):
        return _is_number(expected) and _is_number(actual) and expected == actual
    if isinstance(expected, Mapping):
        return (
            isinstance(actual, Mapping)
            and expected.keys() == actual.keys()
            and all(_same(value, actual[key]) for key, value in expected.items())
        )
    if isinstance(expected, (list, tuple)):
        return (
            isinstance(actual, (list, tuple))
            and len(expected) == len(actual)
            and all(map(_same, expected, actual))
        )
    return type(expected) is type(actual) and bool(expected == actual)


_TYPES: dict[str, Callable[[Any], bool]] = {
    "null": lambda value: value is None,
    "boolean": lambda value: isinstance(value, bool),
    "integer": lambda value: isinstance(value, int) and not isinstance(value, bool),
    "number": _is_number,
    "string": lambda value: isinstance(value, str),
    "array": lambda value: isinstance(value, (list, tuple)),
    "object": lambda value: isinstance(value, Mapping),
}


def _type_name(value: Any) -> str:
    if value is MISSING:
        return "missing"
    return next((name for name, test in _TYPES.items() if test(value)), type(value).__name__)


def _did_you_mean(word: str, choices: Sequence[str]) -> str:
    # 0.7 rather than difflib's 0.6, which offers '$loose' for '$foo'.
    close = difflib.get_close_matches(word, choices, n=1, cutoff=0.7)
    return f"; did you mean {close[0]!r}?" if close else ""


def _is_operator(key: Any) -> bool:
    return isinstance(key, str) and key.startswith("$")


# --- compiled matchers ----------------------------------------------------------------------


class _Matcher:
    """Base of the compiled matchers: the spec, and whether a missing key may satisfy it."""

    accepts_missing = False

    def __init__(self, spec: Any) -> None:
        self._spec = spec

    @property
    def spec(self) -> Any:
        return self._spec

    def match(self, actual: Any, path: Path = ()) -> list[Mismatch]:
        raise NotImplementedError

    def _fail(self, path: Path, message: str, actual: Any) -> list[Mismatch]:
        return [Mismatch(path, message, self._spec, actual)]


_Test = Callable[[Any], "str | None"]
"""Looks at a value; returns why it fails, or ``None``."""


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


class _OneToOne(_Matcher):
    """Each expectation paired with its own element, in any order.

    A maximum bipartite matching rather than a greedy pass: greedy would let a loose
    expectation take the only element a stricter one could match.
    """

    def __init__(self, spec: Any, items: Sequence[_Matcher], names: _Items, exact: bool) -> None:
        super().__init__(spec)
        self._items = items
        self._names = names
        self._exact = exact

    def match(self, actual: Any, path: Path = ()) -> list[Mismatch]:
        if not isinstance(actual, (list, tuple)):
            return self._fail(path, f"expected a list, got {_short(actual)}", actual)
        results = [[item.match(value, path + (j,)) for j, value in enumerate(actual)]
                   for item in self._items]
        pairs = _pair([[not found for found in row] for row in results])
        mismatches = [self._no_partner(i, results[i], pairs, actual, path)
                      for i, j in enumerate(pairs) if j is None]
        if self._exact and len(actual) != len(self._items):
            mismatches = self._extra(actual, pairs, path) + mismatches
        return mismatches

    def _extra(self, actual: Sequence[Any], pairs: list[int | None], path: Path) -> list[Mismatch]:
        count = self._fail(path, _count_message(self._names, len(self._items), actual), actual)
        return count + [
            Mismatch(path + (j,), f"unexpected {self._names.noun} {j}: "
                     f"{self._names.describe(value)}", MISSING, value)
            for j, value in enumerate(actual) if j not in pairs
        ]

    def _no_partner(self, i: int, row: list[list[Mismatch]], pairs: list[int | None],
                    actual: Sequence[Any], path: Path) -> Mismatch:
        noun, spec = self._names.noun, self._items[i].spec
        head = f"expected {noun} {i} {_short(spec)} found no partner"
        if not row:
            return Mismatch(path, f"{head}: there are no {noun}s", spec, MISSING)
        taken = [j for j, found in enumerate(row) if not found]
        if taken:
            return Mismatch(path, f"{head}: {noun}s {taken} match it but are paired with "
                            "other expectations", spec, MISSING)
        closest = min(range(len(row)), key=lambda j: (len(row[j]), j in pairs, j))
        details = _inline(row[closest], len(path) + 1)
        return Mismatch(path, f"{head}; closest is {noun} {closest} "
                        f"{self._names.describe(actual[closest])}: {details}", spec, actual[closest])


def _pair(fits: list[list[bool]]) -> list[int | None]:
    """Maximum bipartite matching (Kuhn's augmenting paths): expectation -> element index."""
    owner: dict[int, int] = {}

    def augment(i: int, seen: set[int]) -> bool:
        for j, fit in enumerate(fits[i]):
            if fit and j not in seen:
                seen.add(j)
                if j not in owner or augment(owner[j], seen):
                    owner[j] = i
                    return True
        return False

    for i in range(len(fits)):
        augment(i, set())
    pairs: list[int | None] = [None] * len(fits)
    for j, i in owner.items():
        pairs[i] = j
    return pairs


def _inline(mismatches: list[Mismatch], depth: int, limit: int = 3) -> str:
    """Mismatches of one candidate on one line, paths relative to the candidate."""
    parts = []
    for mismatch in mismatches[:limit]:
        where = ".".join(str(key) for key in mismatch.path[depth:])
        parts.append(f"{where}: {mismatch.message}" if where else mismatch.message)
    more = f"; and {len(mismatches) - limit} more" if len(mismatches) > limit else ""
    return "; ".join(parts) + more


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


class _Schema(_Matcher):
    def __init__(self, spec: Any, validator: jsonschema.protocols.Validator) -> None:
        super().__init__(spec)
        self._validator = validator

    def match(self, actual: Any, path: Path = ()) -> list[Mismatch]:
        try:
            errors = list(self._validator.iter_errors(actual))
        except Exception as error:  # noqa: BLE001 - e.g. an unresolvable $ref: never a crash
            return self._fail(path, f"could not validate against the schema: {error}", actual)
        return [Mismatch(path + tuple(error.absolute_path), f"schema: {error.message}",
                         self._spec, error.instance) for error in errors]


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


def _regex(value: Any, path: Path) -> _Test:
    _require(isinstance(value, str), f"'$regex' takes a string, got {_short(value)}", path)
    try:
        pattern = re.compile(value)
    except re.error as error:
        raise MatcherError(f"bad regex {value!r}: {error}", path) from None

    def test(actual: Any) -> str | None:
        if not isinstance(actual, str):
            return f"expected a string matching regex {value!r}, got {_short(actual)}"
        found = pattern.search(actual)
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


def _require(condition: bool, message: str, path: Path) -> None:
    if not condition:
        raise MatcherError(message, path)


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


# --- operators built of other matchers ------------------------------------------------------


def _matcher_list(value: Any, path: Path, allow_empty: bool = True) -> list[_Matcher]:
    kind = "list" if allow_empty else "non-empty list"
    _require(isinstance(value, (list, tuple)) and (allow_empty or bool(value)),
             f"'{path[-1]}' takes a {kind} of matchers, got {_short(value)}", path)
    return [_compile(item, path + (index,)) for index, item in enumerate(value)]


def _exact(spec: Any, value: Any, path: Path) -> _Matcher:
    plain = isinstance(value, Mapping) and not any(_is_operator(key) for key in value)
    _require(plain, "'$exact' takes an object of plain keys: {$exact: {city: Paris}}", path)
    return _Object(spec, {key: _compile(v, path + (key,)) for key, v in value.items()}, exact=True)


def _absent(spec: Any, value: Any, path: Path) -> _Matcher:
    _require(value is True, "'$absent' takes true: {key: {$absent: true}}", path)
    return _Absent(spec)


def _schema(spec: Any, value: Any, path: Path) -> _Matcher:
    _require(isinstance(value, (Mapping, bool)), "'$schema' takes a JSON Schema object", path)
    dialect = value.get("$schema", "") if isinstance(value, Mapping) else ""
    # validator_for looks the dialect up in a dict: a mapping there is a TypeError.
    _require(isinstance(dialect, str), "a JSON Schema's own '$schema' is a URI string, got "
             f"{_short(dialect)}", path + ("$schema",))
    # An explicit default: an unknown "$schema" URI would otherwise warn at every compile.
    cls = jsonschema.validators.validator_for(value, default=jsonschema.Draft202012Validator)
    try:
        cls.check_schema(value)
    except jsonschema.SchemaError as error:
        raise MatcherError(f"invalid JSON Schema: {error.message}",
                           path + tuple(error.absolute_path)) from None
    return _Schema(spec, cls(value))


_COMPOUNDS: dict[str, Callable[[Any, Any, Path], _Matcher]] = {
    "$len": lambda spec, value, path: _Len(spec, _compile(value, path)),
    "$json": lambda spec, value, path: _Json(spec, _compile(value, path)),
    "$not": lambda spec, value, path: _Not(spec, _compile(value, path)),
    "$optional": lambda spec, value, path: _Optional(spec, _compile(value, path)),
    "$absent": _absent,
    "$exact": _exact,
    "$schema": _schema,
    "$all": lambda spec, value, path: _AllOf(spec, _matcher_list(value, path)),
    "$anyof": lambda spec, value, path: _AnyOf(spec, _matcher_list(value, path, False)),
    "$unordered": lambda spec, value, path: _OneToOne(
        spec, _matcher_list(value, path), _ELEMENTS, exact=True),
    "$includes": lambda spec, value, path: _OneToOne(
        spec, _matcher_list(value, path), _ELEMENTS, exact=False),
}

_OPERATORS: Final = sorted({*_TESTS, *_COMPOUNDS, "$approx", "$tol"})
# These say what happens when the key is missing, so nothing may sit beside them.
_ALONE: Final = ("$absent", "$optional")


# --- compiling ------------------------------------------------------------------------------


def compile_matcher(spec: Any) -> Matcher:
    """Compile a matcher spec (SPEC section 4); raises ``MatcherError`` when it is invalid."""
    return _compile(spec, ())


def _compile(spec: Any, path: Path) -> _Matcher:
    if isinstance(spec, Mapping):
        if _has_operators(spec, path):
            return _compile_operators(spec, path)
        fields = {key: _compile(value, path + (key,)) for key, value in spec.items()}
        return _Object(spec, fields, exact=False)
    if isinstance(spec, (list, tuple)):
        items = [_compile(item, path + (index,)) for index, item in enumerate(spec)]
        return _Sequence(spec, items, _ELEMENTS)
    return _Literal(spec)


def _has_operators(spec: Mapping[Any, Any], path: Path) -> bool:
    """Whether a mapping is operators rather than object keys; mixing them is an error."""
    operators = [key for key in spec if _is_operator(key)]
    plain = [repr(key) for key in spec if not _is_operator(key)]
    if operators and plain:
        raise MatcherError(
            f"cannot mix operators ({', '.join(operators)}) with plain keys "
            f"({', '.join(plain)}); put the operators under the key they test", path)
    return bool(operators)


def _check_known(spec: Mapping[str, Any], known: Sequence[str], path: Path) -> None:
    for key in spec:
        if key not in known:
            hint = _did_you_mean(key, known) or f"; known operators: {', '.join(known)}"
            raise MatcherError(f"unknown operator {key!r}{hint}", path + (key,))


def _compile_operators(spec: Mapping[str, Any], path: Path) -> _Matcher:
    _check_known(spec, _OPERATORS, path)
    for key in _ALONE:
        _require(key not in spec or len(spec) == 1,
                 f"{key!r} cannot be combined with other operators; put them inside it",
                 path + (key,))
    _require("$tol" not in spec or "$approx" in spec,
             "'$tol' is only valid beside '$approx'", path + ("$tol",))
    parts = [_compile_operator(key, spec, path) for key in spec if key != "$tol"]
    return parts[0] if len(parts) == 1 else _AllOf(spec, parts)


def _compile_operator(key: str, spec: Mapping[str, Any], path: Path) -> _Matcher:
    value, where = spec[key], path + (key,)
    if key == "$approx":  # the one operator that reads a sibling
        tolerance = spec.get("$tol", _DEFAULT_TOLERANCE)
        pair = {k: spec[k] for k in ("$approx", "$tol") if k in spec}
        return _Check(pair, _approx(value, tolerance, where))
    fragment: Any = spec if len(spec) == 1 else {key: value}
    if key in _TESTS:
        return _Check(fragment, _TESTS[key](value, where))
    return _COMPOUNDS[key](fragment, value, where)


# --- tool calls (SPEC section 5) ------------------------------------------------------------


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
