"""How many ways ``re`` can try a pattern from one position of a text, read from the
pattern's own text: the bound that lets a pattern without repetition run on ``re``.

``re`` backtracks only into repetitions and alternatives. A pattern without repetition,
back-reference or conditional is tried from each position of the text at most ``ways``
ways (its alternatives multiplied out, lookarounds included), and each way tests every
element of the pattern at most once: a search costs at most about
``(len(text) + 1) * ways * (len(pattern) + 1)`` steps, whatever the text holds.

The reading is deliberately narrow. Anything it does not know for certain (a quantifier
``* + ? {``, a back-reference ``\\1`` or ``(?P=name)``, a conditional ``(?(1)...)``,
verbose mode ``(?x)`` whose comments could hide anything, ``\\N{...}``, an atomic group or
a comment group) answers None, and the pattern is searched under the time limit instead.
Patterns reach here after ``re.compile`` accepted them, so their syntax is ``re``'s.
"""

from __future__ import annotations

import functools
from typing import Final

MAX_WAYS: Final = 1_000_000
"""More ways than this answers None: the product of many alternatives grows fast."""

_FLAGS: Final = frozenset("aiLmsu-")
"""Inline flags that change what a character matches, never how the pattern is read
(``x``, verbose, is left out on purpose)."""


class _Unknown(Exception):
    """The pattern holds something this reading does not bound."""


@functools.lru_cache(maxsize=4096)
def ways(source: str) -> int | None:
    """The ways ``re`` can try ``source`` from one position, or None when unbounded or
    unknown (see the module's docstring)."""
    try:
        count, end = _Reader(source).alternatives(0)
    except _Unknown:
        return None
    return count if end == len(source) else None  # a stray ")": not a pattern of ours


class _Reader:
    """A recursive descent over the pattern's text: alternatives of sequences of atoms."""

    def __init__(self, source: str) -> None:
        self.source = source

    def alternatives(self, at: int) -> tuple[int, int]:
        """``a|b|c`` up to a ``)`` or the end: the sum of its branches' ways."""
        total, at = self.sequence(at)
        while self.source.startswith("|", at):
            count, at = self.sequence(at + 1)
            total += count
        return _bounded(total), at

    def sequence(self, at: int) -> tuple[int, int]:
        """Atoms one after the other up to ``|``, ``)`` or the end: the product of their
        ways."""
        source, product = self.source, 1
        while at < len(source) and source[at] not in "|)":
            char = source[at]
            if char in "*+?{":
                raise _Unknown  # repetition (a "{" re would read as a literal included)
            if char == "(":
                count, at = self.group(at)
                product = _bounded(product * count)
            elif char == "[":
                at = self.char_class(at)
            elif char == "\\":
                at = self.escape(at)
            else:  # a literal character, ".", "^" or "$": one test, no choice
                at += 1
        return product, at

    def group(self, at: int) -> tuple[int, int]:
        """``(...)`` in any of the forms that only group, capture, look around or set
        flags; its inner alternatives' ways."""
        at, closed = self.group_head(at + 1)
        if closed:
            return 1, at  # "(?i)": flags for the whole pattern, nothing to try
        count, at = self.alternatives(at)
        if not self.source.startswith(")", at):
            raise _Unknown
        return count, at + 1

    def group_head(self, at: int) -> tuple[int, bool]:
        """Past what follows ``(``: nothing, ``?:``, ``?=``, ``?!``, ``?<=``, ``?<!``,
        ``?P<name>``, or flags then ``:`` (a scoped group) or ``)`` (global flags: the
        group is closed already)."""
        source = self.source
        if not source.startswith("?", at):
            return at, False
        for head in ("?:", "?=", "?!", "?<=", "?<!"):
            if source.startswith(head, at):
                return at + len(head), False
        if source.startswith("?P<", at):
            end = source.find(">", at)
            if end == -1:
                raise _Unknown
            return end + 1, False
        end = at + 1
        while end < len(source) and source[end] in _FLAGS:
            end += 1
        if end == at + 1 or not source.startswith((":", ")"), end):
            raise _Unknown  # (?P=name), (?(1)...), (?#...), (?>...), or verbose flags
        return end + 1, source[end] == ")"

    def char_class(self, at: int) -> int:
        """Past ``[...]``: one test of one character, whatever it lists."""
        source, at = self.source, at + 1
        if source.startswith("^", at):
            at += 1
        if source.startswith("]", at):  # a "]" first is a member, not the end
            at += 1
        while at < len(source) and source[at] != "]":
            at += 2 if source[at] == "\\" else 1
        if at >= len(source):
            raise _Unknown
        return at + 1

    def escape(self, at: int) -> int:
        """Past ``\\`` and the character after it (``\\d``, ``\\.``, ``\\b``...); the
        digits or letters that may follow, as in ``\\x41``, read as literals do."""
        following = self.source[at + 1:at + 2]
        if following == "" or following in "123456789" or following == "N":
            raise _Unknown  # a back-reference, or \N{...} whose braces read as repetition
        return at + 2


def _bounded(count: int) -> int:
    if count > MAX_WAYS:
        raise _Unknown
    return count
