"""``$unordered`` and ``$includes``: expectations paired one-to-one with list elements."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from .compiled import _count_message, _Items
from .core import MISSING, Mismatch, Path, _Matcher, _short
from .limits import check_time


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
        what = "$unordered" if self._exact else "$includes"
        results = [self._row(item, actual, path, what) for item in self._items]
        pairs = _pair([[not found for found in row] for row in results], what)
        mismatches = [self._no_partner(i, results[i], pairs, actual, path)
                      for i, j in enumerate(pairs) if j is None]
        if self._exact and len(actual) != len(self._items):
            mismatches = self._extra(actual, pairs, path) + mismatches
        return mismatches

    @staticmethod
    def _row(item: _Matcher, actual: Sequence[Any], path: Path, what: str) -> list[list[Mismatch]]:
        check_time(what)  # n x m matches: a long list against many expectations adds up
        return [item.match(value, path + (j,)) for j, value in enumerate(actual)]

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


def _pair(fits: list[list[bool]], what: str) -> list[int | None]:
    """Maximum bipartite matching (Kuhn's augmenting paths): expectation -> element index."""
    owner: dict[int, int] = {}
    for i in range(len(fits)):
        check_time(what)
        _augment(fits, owner, i, set())
    pairs: list[int | None] = [None] * len(fits)
    for j, i in owner.items():
        pairs[i] = j
    return pairs


def _augment(fits: list[list[bool]], owner: dict[int, int], i: int, seen: set[int]) -> bool:
    """Pair expectation ``i`` with a free element, or with one whose owner can move on to
    another (``owner``: element -> expectation, updated in place)."""
    for j, fit in enumerate(fits[i]):
        if fit and j not in seen:
            seen.add(j)
            if j not in owner or _augment(fits, owner, owner[j], seen):
                owner[j] = i
                return True
    return False


def _inline(mismatches: list[Mismatch], depth: int, limit: int = 3) -> str:
    """Mismatches of one candidate on one line, paths relative to the candidate."""
    parts = []
    for mismatch in mismatches[:limit]:
        where = ".".join(str(key) for key in mismatch.path[depth:])
        parts.append(f"{where}: {mismatch.message}" if where else mismatch.message)
    more = f"; and {len(mismatches) - limit} more" if len(mismatches) > limit else ""
    return "; ".join(parts) + more
