"""What every matcher shares: ``Mismatch``, ``MatcherError``, ``MISSING``, the ``Matcher``
protocol and its base class, and the JSON value semantics (equality, types, short reprs)."""

from __future__ import annotations

import difflib
import enum
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final, Protocol

from ..keypaths import KeyedError

Path = tuple[str | int, ...]


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


def _require(condition: bool, message: str, path: Path) -> None:
    if not condition:
        raise MatcherError(message, path)


# --- the base of compiled matchers ----------------------------------------------------------


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
