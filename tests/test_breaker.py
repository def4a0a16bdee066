"""The circuit breaker's states, driven by a fake clock: no sleeping, no flakes."""

from __future__ import annotations

import pytest

from pytest_toolbench.transport.breaker import BreakerState, CircuitBreaker
from pytest_toolbench.transport.errors import CircuitOpen


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


def opened(clock: FakeClock, threshold: int = 2, cooldown_s: float = 30.0) -> CircuitBreaker:
    breaker = CircuitBreaker(threshold, cooldown_s, clock=clock)
    for n in range(threshold):
        breaker.check()
        breaker.record_failure(f"connect failed {n}")
    assert breaker.state is BreakerState.OPEN
    return breaker


def test_failures_below_the_threshold_keep_it_closed(clock: FakeClock) -> None:
    breaker = CircuitBreaker(3, 30.0, clock=clock)
    breaker.record_failure("a")
    breaker.record_failure("b")
    breaker.check()
    assert breaker.state is BreakerState.CLOSED
    breaker.record_success()
    breaker.record_failure("c")
    breaker.record_failure("d")
    assert breaker.state is BreakerState.CLOSED  # the success reset the count


def test_open_fails_at_once_with_the_last_error_until_the_cool_down(clock: FakeClock) -> None:
    breaker = opened(clock)
    clock.now += 29.9
    with pytest.raises(CircuitOpen, match=r"2 consecutive .*fail at once for 30 s.*"
                                          r"Last error: connect failed 1"):
        breaker.check()
    assert breaker.state is BreakerState.OPEN


def test_after_the_cool_down_one_trial_goes_through_and_others_wait(clock: FakeClock) -> None:
    breaker = opened(clock)
    clock.now += 30.0
    breaker.check()  # the trial
    assert breaker.state is BreakerState.HALF_OPEN
    with pytest.raises(CircuitOpen, match="a trial request is deciding"):
        breaker.check()


def test_a_successful_trial_closes_the_circuit(clock: FakeClock) -> None:
    breaker = opened(clock)
    clock.now += 31
    breaker.check()
    breaker.record_success()
    assert breaker.state is BreakerState.CLOSED
    breaker.check()  # flows again
    assert breaker.failures == 0


def test_a_failed_trial_opens_it_again_for_a_full_cool_down(clock: FakeClock) -> None:
    breaker = opened(clock)
    clock.now += 31
    breaker.check()
    breaker.record_failure("still down")
    assert breaker.state is BreakerState.OPEN
    clock.now += 29
    with pytest.raises(CircuitOpen, match="Last error: still down"):
        breaker.check()
    clock.now += 1
    breaker.check()
    assert breaker.state is BreakerState.HALF_OPEN


def test_a_trial_that_never_reports_blocks_others_for_one_cool_down(clock: FakeClock) -> None:
    breaker = opened(clock)
    clock.now += 30
    breaker.check()  # the trial request is cancelled: it reports neither way
    clock.now += 30
    breaker.check()  # the next request becomes the trial
    assert breaker.state is BreakerState.HALF_OPEN


def test_threshold_zero_never_opens(clock: FakeClock) -> None:
    breaker = CircuitBreaker(0, 30.0, clock=clock)
    for n in range(10):
        breaker.record_failure(str(n))
    breaker.check()
    assert breaker.state is BreakerState.CLOSED
