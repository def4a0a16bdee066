"""The time limit of matching: a deadline that every step which could run away respects.

A catastrophic regex (``(a|aa)+$`` against ``aaa...ab``) or a JSON Schema check of a huge
value must fail the stage, never hang the session. ``time_limit(seconds)`` sets the deadline
for the matching done inside it; regex searches get the time left as their timeout (the
``regex`` package stops a search at its timeout; ``re`` cannot be stopped, and holds the GIL
while it runs), and JSON Schema validation and one-to-one pairing look at the clock as they
go. Past the deadline, ``MatchTimeout`` ends the whole match: it is not a mismatch, which
``$not`` or ``$anyof`` could turn into a pass.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Final

import regex

from ..defaults import MATCH_TIMEOUT_S

DEFAULT_LIMIT_S: Final = MATCH_TIMEOUT_S
"""The limit when no ``time_limit`` is in force (a matcher used on its own)."""

# A context variable, so matching in several threads at once keeps one deadline each.
_DEADLINE: ContextVar[float | None] = ContextVar("toolbench_match_deadline", default=None)


class MatchTimeout(Exception):
    """Matching passed its deadline; ``what`` names the matcher that was running."""

    def __init__(self, what: str) -> None:
        super().__init__(what)
        self.what = what


@contextmanager
def time_limit(seconds: float) -> Iterator[None]:
    """Matching inside this block must finish within ``seconds``."""
    token = _DEADLINE.set(time.monotonic() + seconds)
    try:
        yield
    finally:
        _DEADLINE.reset(token)


def time_left() -> float:
    deadline = _DEADLINE.get()
    return DEFAULT_LIMIT_S if deadline is None else deadline - time.monotonic()


def check_time(what: str) -> None:
    """Raise ``MatchTimeout`` naming ``what`` once the deadline has passed."""
    if time_left() <= 0:
        raise MatchTimeout(what)


def search(pattern: regex.Pattern[str], text: str, what: str) -> bool:
    """``pattern.search(text)`` within the time left; ``what`` names it if it runs out."""
    left = time_left()
    if left <= 0:
        raise MatchTimeout(what)
    try:
        return pattern.search(text, timeout=left) is not None
    except TimeoutError:
        raise MatchTimeout(what) from None
