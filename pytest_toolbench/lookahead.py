"""Which items this process runs next, so live cases can be started ahead of pytest.

pytest runs items one by one; ``--toolbench-concurrency N`` keeps N of the next cases
running (starting one as another ends, from the items that follow) and lets each item wait
for its own result, so reports stay in order. The next items are
the collected ones that follow, after ``-k``, ``-m`` and ``--lf`` have chosen.

Inside a pytest-xdist worker there is no look-ahead: which items a worker runs next is
xdist's private business (its controller hands them out as workers finish), so a worker
runs its cases one at a time and ``-n N`` alone sets how many run at once.
"""

from __future__ import annotations

from collections.abc import Sequence

import pytest

LOOKAHEAD_KEY = pytest.StashKey["Lookahead"]()
"""The session's look-ahead, made once collection has chosen the items."""


class Lookahead:
    def __init__(self, config: pytest.Config, items: Sequence[pytest.Item]) -> None:
        self._items = list(items)
        self._position = {id(item): index for index, item in enumerate(self._items)}
        self._in_worker = hasattr(config, "workerinput")

    def upcoming(self, item: pytest.Item, count: int) -> list[pytest.Item]:
        """``item`` and the items expected to run right after it here, ``count`` in all."""
        if self._in_worker or id(item) not in self._position:
            return [item]
        start = self._position[id(item)]
        return self._items[start:start + count]
