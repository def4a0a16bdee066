"""The user-code seam: every call into a team's own code can be abandoned (issue 33).

Real threads and event loops, real ``SystemExit`` and endless loops; each wait is bounded,
and each test checks that the caller's loop went on while the user's code did not.
"""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

import pytest

from pytest_toolbench.run.usercode import UserCodeFailed, UserLoop, call_user


def run(coroutine: Any) -> Any:
    return asyncio.run(asyncio.wait_for(coroutine, 30))


def exits() -> None:
    raise SystemExit(2)


def interrupts() -> None:
    raise KeyboardInterrupt


def fails_deep(depth: int) -> None:
    if depth == 0:
        raise ValueError("boom")
    fails_deep(depth - 1)


def sleeps_forever() -> None:
    while True:
        time.sleep(0.05)


async def swallows_cancel() -> str:
    while True:
        try:
            await asyncio.sleep(0.05)
        except asyncio.CancelledError:
            pass


async def never_yields() -> None:
    while True:
        time.sleep(0.05)  # noqa: ASYNC251 - the point: it blocks its loop


async def running_loop() -> asyncio.AbstractEventLoop:
    return asyncio.get_running_loop()


def loop_in_thread() -> bool:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True


class AsyncCallable:
    async def __call__(self, value: int) -> int:
        await asyncio.sleep(0)
        return value * 2


def test_a_plain_function_answers_from_a_thread_with_no_event_loop() -> None:
    assert run(call_user(lambda a, b=0: a + b, 2, b=3, timeout_s=5, what="add")) == 5
    assert run(call_user(loop_in_thread, timeout_s=5, what="probe")) is False
    assert run(call_user(asyncio.run, running_loop(), timeout_s=5, what="own loop"))


def test_whatever_returns_a_coroutine_runs_it_on_the_user_loop() -> None:
    assert run(call_user(AsyncCallable(), 4, timeout_s=5, what="object")) == 8


@pytest.mark.parametrize(("fn", "message"), [
    (exits, "SystemExit: 2"), (interrupts, "KeyboardInterrupt"),
    (lambda: fails_deep(3), "ValueError: boom"),
])
def test_whatever_user_code_raises_is_named(fn: Any, message: str) -> None:
    with pytest.raises(UserCodeFailed) as caught:
        run(call_user(fn, timeout_s=5, what="toolbox Bank.__init__"))
    assert caught.value.message == message
    assert str(caught.value) == f"toolbox Bank.__init__: {message}"
    assert "pytest_toolbench" not in caught.value.frames


def test_the_traceback_keeps_the_users_frames_only() -> None:
    with pytest.raises(UserCodeFailed) as caught:
        run(call_user(fails_deep, 2, timeout_s=5, what="deep"))
    assert caught.value.frames.count("in fails_deep") == 3
    assert "pytest_toolbench" not in caught.value.frames


@pytest.mark.parametrize("fn", [sleeps_forever, swallows_cancel, never_yields])
def test_code_that_never_ends_is_abandoned_at_its_deadline(fn: Any) -> None:
    async def main() -> tuple[float, int]:
        ticks = 0

        async def tick() -> None:
            nonlocal ticks
            while True:
                await asyncio.sleep(0.01)
                ticks += 1
        ticker = asyncio.ensure_future(tick())
        started = time.monotonic()
        with pytest.raises(UserCodeFailed) as caught:
            await call_user(fn, timeout_s=0.5, what="stuck")
        ticker.cancel()
        assert caught.value.message == "did not finish within 0.5 s"
        assert caught.value.overran
        return time.monotonic() - started, ticks

    took, ticks = run(main())
    assert 0.5 <= took < 5
    assert ticks > 5  # the caller's loop went on meanwhile


def test_a_user_loop_is_shared_by_its_calls_and_is_not_the_callers() -> None:
    loop = UserLoop()

    async def main() -> None:
        first = await call_user(running_loop, timeout_s=5, what="a", loop=loop)
        second = await call_user(running_loop, timeout_s=5, what="b", loop=loop)
        assert first is second
        assert first is not asyncio.get_running_loop()

    try:
        run(main())
    finally:
        loop.close()


def test_closing_a_user_loop_abandons_code_that_never_yields() -> None:
    loop = UserLoop(name="toolbench-test-stuck-loop")

    async def main() -> None:
        with pytest.raises(UserCodeFailed):
            await call_user(never_yields, timeout_s=0.3, what="stuck", loop=loop)
        started = time.monotonic()
        loop.close()
        loop.close()
        assert time.monotonic() - started < 1

    run(main())
    with pytest.raises(RuntimeError):
        loop.submit(running_loop())
    stuck = [thread for thread in threading.enumerate()
             if thread.name == "toolbench-test-stuck-loop"]
    assert all(thread.daemon for thread in stuck)


def test_a_user_loop_that_ran_nothing_starts_no_thread() -> None:
    before = threading.active_count()
    UserLoop().close()
    assert threading.active_count() == before
