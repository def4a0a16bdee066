"""Which items this process runs next, so live cases can be started ahead of pytest.

pytest runs items one by one; ``--toolbench-concurrency N`` starts the next N cases early
and lets each item wait for its own result, so reports stay in order. In a plain session
the next items are the collected ones that follow. In a pytest-xdist worker they are the
indices the controller has sent to this worker: xdist has no public API for them, so its
worker queue is read when it looks as expected, and otherwise only the current item runs.
Under ``--dist worksteal`` a case started ahead may be stolen by another worker and run
there too: a repeated request, never a wrong result (cassette writes are atomic).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest


class Lookahead:
    def __init__(self, config: pytest.Config, items: Sequence[pytest.Item]) -> None:
        self._config = config
        self._items = list(items)
        self._position = {id(item): index for index, item in enumerate(self._items)}

    def upcoming(self, item: pytest.Item, count: int) -> list[pytest.Item]:
        """``item`` and the items expected to run right after it here, ``count`` in all."""
        if id(item) not in self._position:
            return [item]
        if hasattr(self._config, "workerinput"):
            return [item, *self._worker_queue()][:count]
        start = self._position[id(item)]
        return self._items[start:start + count]

    def _worker_queue(self) -> list[pytest.Item]:
        interactor = _xdist_interactor(self._config)
        queue = getattr(getattr(interactor, "torun", None), "_items", None)
        if interactor is None or queue is None:
            return []
        indices = [getattr(interactor, "nextitem_index", None), *list(queue)]
        return [self._items[i] for i in indices
                if isinstance(i, int) and not isinstance(i, bool) and 0 <= i < len(self._items)]


def _xdist_interactor(config: pytest.Config) -> Any:
    for plugin in config.pluginmanager.get_plugins():
        if type(plugin).__name__ == "WorkerInteractor":
            return plugin
    return None
