"""A circuit breaker per endpoint, so a dead endpoint fails fast instead of timing out.

closed --(threshold consecutive transport failures)--> open
open --(cool-down elapsed, next request allowed through)--> half_open
half_open --(success)--> closed      half_open --(failure)--> open

Three states and four moves: a plain enum and an assignment each read more clearly than a
state-machine library would.
"""

from __future__ import annotations

import enum
import time
from collections.abc import Callable

from .errors import CircuitOpen

DEFAULT_THRESHOLD = 3
DEFAULT_COOLDOWN_S = 30.0


class BreakerState(enum.Enum):
    CLOSED = "closed"  # requests flow; consecutive failures are counted
    OPEN = "open"  # requests fail at once until the cool-down has passed
    HALF_OPEN = "half_open"  # one trial request decides: closed again, or open again


class CircuitBreaker:
    """Counts consecutive transport failures of one endpoint and opens after ``threshold``."""

    def __init__(
        self,
        threshold: int = DEFAULT_THRESHOLD,
        cooldown_s: float = DEFAULT_COOLDOWN_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.threshold = threshold
        self.cooldown_s = cooldown_s
        self._clock = clock
        self.state = BreakerState.CLOSED
        self.failures = 0
        self.last_error: str | None = None
        self._opened_at = 0.0

    def check(self) -> None:
        """Raise CircuitOpen while the circuit is open, or half-open with a trial under way."""
        waited = self._clock() - self._opened_at
        if self.state is BreakerState.HALF_OPEN and waited < self.cooldown_s:
            raise self._open_error("a trial request is deciding whether it closes")
        if self.state is BreakerState.OPEN and waited < self.cooldown_s:
            raise self._open_error(f"requests fail at once for {self.cooldown_s:g} s")
        if self.state is not BreakerState.CLOSED:
            # This request is the trial. One that never reports (cancelled) blocks the
            # others for one cool-down at most.
            self.state = BreakerState.HALF_OPEN
            self._opened_at = self._clock()

    def _open_error(self, what: str) -> CircuitOpen:
        return CircuitOpen(f"{self.failures} consecutive transport failures of this endpoint; "
                           f"{what}. Last error: {self.last_error}")

    def record_failure(self, error: str) -> None:
        self.failures += 1
        self.last_error = error
        if self.threshold <= 0:
            return  # a threshold of 0 disables the breaker
        if self.state is BreakerState.HALF_OPEN or self.failures >= self.threshold:
            self.state = BreakerState.OPEN
            self._opened_at = self._clock()

    def record_success(self) -> None:
        self.failures = 0
        if self.state is BreakerState.HALF_OPEN:
            self.state = BreakerState.CLOSED
