"""A case's ``marks`` as pytest marks, with pytest's complaints pointed at the case file.

pytest warns about a mark it does not know (or refuses it under ``--strict-markers``) from
the line that asked for it, which for a case is the plugin's own code; here the warning
is issued again at the mark's line in the case file, and a refusal becomes a message.

The marks ``toolbench import-bfcl`` writes, ``bfcl`` and ``bfcl_<category>``, are
registered as they are met, so a generated suite needs no ini of its own.
"""

from __future__ import annotations

import functools
import re
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from .casefile.load import LoadedCase

__all__ = ["MarkRefused", "case_marks"]

_IMPORTED = re.compile(r"^bfcl(?:_(?P<category>\w+))?$")
_REGISTERED_KEY = pytest.StashKey[set[str]]()
_ACCEPTED_KEY = pytest.StashKey[set[str]]()
"""Mark names pytest took without a warning: a registered mark stays registered."""


class MarkRefused(Exception):
    """pytest refused a mark: ``--strict-markers``, or its warning turned into an error."""

    def __init__(self, line: int, message: str) -> None:
        super().__init__(message)
        self.line = line
        self.message = message


def case_marks(config: pytest.Config, loaded: LoadedCase) -> list[pytest.MarkDecorator]:
    """The case's marks in order; raises MarkRefused naming the line of a refused one."""
    decorators = []
    accepted = config.stash.setdefault(_ACCEPTED_KEY, set())
    for index, mark in enumerate(loaded.outline.marks):
        name, value = _entry(mark)
        if name in accepted:  # pytest said nothing of it before, and never will
            decorator: pytest.MarkDecorator = getattr(pytest.mark, name)
        else:
            _register_imported(config, name)
            line_of = functools.partial(loaded.line_of, "marks", index)
            decorator, quiet = _named(name, loaded.file, line_of)
            if quiet:
                accepted.add(name)
        decorators.append(_applied(decorator, name, value))
    return decorators


def _entry(mark: str | dict[str, Any]) -> tuple[str, Any]:
    """``smoke`` or ``{name: value}`` as (name, value); ``None`` for a bare name."""
    if isinstance(mark, str):
        return mark, None
    ((name, value),) = mark.items()
    return name, value


def _applied(decorator: pytest.MarkDecorator, name: str, value: Any) -> pytest.MarkDecorator:
    """``{xfail: "reason"}``, ``{skip: "reason"}``, ``{name: {kwarg: ...}}`` or ``{name: x}``."""
    if isinstance(value, dict):
        return decorator(**value)
    if name in ("skip", "xfail") and value is not None:
        return decorator(reason=str(value))
    return decorator if value is None else decorator(value)


def _named(name: str, file: Path, line_of: Callable[[], int]
           ) -> tuple[pytest.MarkDecorator, bool]:
    """``pytest.mark.NAME``, any unknown-mark warning issued again at ``file:line``
    (``line_of()``: looked up only when there is something to say), and whether pytest
    accepted the name without a word: a registered or built-in mark, which every later
    case may take without asking again."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", pytest.PytestUnknownMarkWarning)
        try:
            decorator: pytest.MarkDecorator = getattr(pytest.mark, name)
        except pytest.fail.Exception as refusal:  # --strict-markers
            raise MarkRefused(line_of(), refusal.msg or str(refusal)) from None
    for warning in caught:
        try:
            warnings.warn_explicit(warning.message, warning.category, str(file), line_of())
        except Warning as error:  # -W error, or filterwarnings = error
            raise MarkRefused(line_of(), f"{type(error).__name__}: {error}") from None
    return decorator, not caught


def _register_imported(config: pytest.Config, name: str) -> None:
    """Register ``bfcl`` / ``bfcl_<category>`` the first time a case carries it."""
    found = _IMPORTED.match(name)
    registered = config.stash.setdefault(_REGISTERED_KEY, set())
    if found is None or name in registered:
        return
    registered.add(name)
    category = found.group("category")
    what = f"category {category} of " if category else ""
    config.addinivalue_line(
        "markers", f"{name}: cases of {what}the Berkeley Function Calling Leaderboard, "
        "as written by toolbench import-bfcl")
