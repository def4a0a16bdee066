"""Compiling a spec into a ``Matcher``: the ``$`` operator table and the dispatch."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, Final

from .compiled import (
    _ELEMENTS,
    _Absent,
    _AllOf,
    _AnyOf,
    _Check,
    _Json,
    _Len,
    _Literal,
    _Not,
    _Object,
    _Optional,
    _Sequence,
)
from .core import (
    Matcher,
    MatcherError,
    Path,
    _did_you_mean,
    _is_operator,
    _Matcher,
    _require,
    _short,
)
from .operators import _DEFAULT_TOLERANCE, _TESTS, _approx
from .pairing import _OneToOne

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


def _schema(spec: Any, value: Any, path: Path) -> _Matcher:
    # jsonschema (with referencing, attrs and rpds) takes a tenth of a second to import:
    # only suites that use $schema pay for it, at their first.
    from .schema import compile_schema

    return compile_schema(spec, value, path)


def _absent(spec: Any, value: Any, path: Path) -> _Matcher:
    _require(value is True, "'$absent' takes true: {key: {$absent: true}}", path)
    return _Absent(spec)


def _a_length(value: Any, path: Path) -> Any:
    """``$len`` matches a number: text (``$len: "3"``) could never equal one."""
    _require(not isinstance(value, str), f"'$len' takes a number or a matcher on one (a"
             f" length is a number), got {value!r}", path)
    return value


_COMPOUNDS: dict[str, Callable[[Any, Any, Path], _Matcher]] = {
    "$len": lambda spec, value, path: _Len(spec, _compile(_a_length(value, path), path)),
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
