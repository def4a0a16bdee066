"""Blocking work (sync tools) run off the event loop, in daemon threads.

Not the loop's default executor: its threads are joined when the interpreter exits, so work
still running past its time limit (a tool stuck in ``time.sleep``) would keep pytest alive
until it returned. A daemon thread is left behind instead, and ends with the process.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import threading
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


class ThreadCrashed(Exception):
    """The work raised a ``BaseException`` that is not an ``Exception`` (``SystemExit``...).

    Handed over as is, it would stop the event loop every case runs on.
    """

    def __init__(self, error: BaseException) -> None:
        super().__init__(str(error))
        self.error = error


async def in_daemon_thread(work: Callable[[], T], name: str) -> T:
    """Run ``work`` in a daemon thread of its own and await what it returns or raises.

    Cancelling the await (a timeout, the session stopping) leaves the thread to finish
    alone; what it returns then is dropped.
    """
    loop = asyncio.get_running_loop()
    outcome: asyncio.Future[T] = loop.create_future()
    context = contextvars.copy_context()  # as asyncio.to_thread: the caller's context vars

    def run() -> None:
        settle: Callable[[], None]
        try:
            settle = functools.partial(outcome.set_result, context.run(work))
        except Exception as error:  # noqa: BLE001 - handed to the awaiting coroutine
            settle = functools.partial(outcome.set_exception, error)
        except BaseException as error:  # noqa: BLE001 - SystemExit must not reach the loop
            settle = functools.partial(outcome.set_exception, ThreadCrashed(error))
        _hand_over(loop, settle, outcome)

    threading.Thread(target=run, name=name, daemon=True).start()
    return await outcome


def _hand_over(loop: asyncio.AbstractEventLoop, settle: Callable[[], None],
               outcome: asyncio.Future[T]) -> None:
    """From the worker thread: settle ``outcome`` on the loop, unless nobody waits any more."""

    def on_loop() -> None:
        if not outcome.done():  # a timeout cancelled it meanwhile
            settle()

    try:
        loop.call_soon_threadsafe(on_loop)
    except RuntimeError:  # the loop is closed: the session ended while the work ran
        pass
