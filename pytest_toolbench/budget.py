"""The session's token budget (``--toolbench-max-tokens``): how many tokens live cases may
use before no more are started.

Tokens are what the replies' ``usage.total_tokens`` reported, counted when a live or record
case ends; replayed cases spend none. A case is started only while the budget is not spent,
so cases already under way when it runs out (up to ``--toolbench-concurrency``) finish,
and the session ends a little past the budget rather than cutting a case in half. Under
pytest-xdist each worker holds an equal share: workers cannot see each other's spending
without a channel of their own, and a share keeps the whole within the budget.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field


class BudgetSpent(Exception):
    """A live case was not started: the budget is spent. Its message is the skip reason."""


@dataclass
class TokenBudget:
    limit: int | None
    """Tokens this process may use; None: no budget."""
    source: str = "--toolbench-max-tokens"
    """The flag or ini key the budget came from, as the user wrote it."""
    whole: int | None = None
    """The session's budget when this process holds a share of it (an xdist worker)."""
    spent: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    @classmethod
    def shared(cls, limit: int | None, source: str, workers: int) -> TokenBudget:
        """This process's share of ``limit`` when ``workers`` processes hold it (at least
        one token, so every worker may start a case)."""
        if limit is None or workers <= 1:
            return cls(limit, source)
        return cls(max(1, limit // workers), source, whole=limit)

    def spend(self, tokens: int | None) -> None:
        """Count a live case's tokens (None: its replies reported none)."""
        with self._lock:  # cases end on the event loop's thread, items ask on pytest's
            self.spent += tokens or 0

    @property
    def exhausted(self) -> bool:
        return self.limit is not None and self.spent >= self.limit

    def check(self) -> None:
        """Raise BudgetSpent when no live case may start any more."""
        if self.exhausted:
            raise BudgetSpent(f"token budget spent: {self.spent} of {self.describe()}")

    def describe(self) -> str:
        """``40 tokens used (--toolbench-max-tokens)``, or a worker's share of it."""
        if self.whole is None:
            return f"{self.limit} tokens used ({self.source})"
        return (f"this worker's {self.limit} tokens used ({self.source} {self.whole},"
                " shared by the workers)")
