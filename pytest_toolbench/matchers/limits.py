"""The time limit of matching: a deadline that every step which could run away respects.

A catastrophic regex (``(a|aa)+$`` against ``aaa...ab``) or a JSON Schema check of a huge
value must fail the stage, never hang the session. ``time_limit(seconds)`` sets the deadline
for the matching done inside it; regex searches get the time left as their timeout (the
``regex`` package stops a search at its timeout; ``re`` cannot be stopped, and holds the GIL
while it runs), and JSON Schema validation and one-to-one pairing look at the clock as they
go. Past the deadline, ``MatchTimeout`` ends the whole match: it is not a mismatch, which
``$not`` or ``$anyof`` could turn into a pass.

Only matching counts: importing the regex package and compiling a pattern (``untimed``)
depend on the case file alone, and a loaded machine that slows them must not turn a
pattern that would match or fail at once into one that ran out of time.

A pattern whose work is bounded whatever the text (``quick_search``: no repetition,
back-reference or conditional, and a text short enough) is searched with ``re`` at once:
the regex package's compile costs several times re's, and most patterns in case files are
words, classes and anchors. The regex package is imported with the first pattern that
needs it.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import TYPE_CHECKING, Final

from ..defaults import MATCH_TIMEOUT_S
from .regex_ways import ways

if TYPE_CHECKING:
    import regex

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


@contextmanager
def untimed() -> Iterator[None]:
    """The time spent inside this block does not count against the deadline: for work that
    depends on the case file alone, never on the value matched (importing the regex
    package, compiling a case's pattern). A loaded machine slows it, and a pattern that
    would finish at once must not fail at the limit for it; it cannot run away."""
    started = time.monotonic()
    try:
        yield
    finally:
        deadline = _DEADLINE.get()
        if deadline is not None:
            _DEADLINE.set(deadline + (time.monotonic() - started))


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


QUICK_SEARCH_STEPS: Final = 1_000_000
"""The most work ``quick_search`` lets ``re`` do, in pattern elements tried: a few
milliseconds at worst, whatever the pattern and the text."""


def quick_search(pattern: re.Pattern[str], text: str, what: str) -> bool | None:
    """``pattern.search(text)`` with ``re`` when the work it can do is bounded (see
    ``regex_ways``) and small, else None: search with the regex package, under the time
    limit, instead. ``re`` cannot be stopped; that bound, not the clock, keeps it within
    the limit."""
    count = ways(pattern.pattern)
    if count is None or (len(text) + 1) * count * (len(pattern.pattern) + 1) > QUICK_SEARCH_STEPS:
        return None
    check_time(what)
    return pattern.search(text) is not None
