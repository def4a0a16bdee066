"""One thread for plain agents: their factories, every stage, their state and close.

Frameworks keep things on the thread that runs them: openai-agents' ``Runner.run_sync``
keeps the thread's event loop between runs, and its shared HTTP client is bound to that
loop; a later stage, run or case on another thread would find the client "bound to a
different event loop". So every plain call of the session's agent cases goes to one
daemon thread (agent cases run one at a time), with no event loop running in it, one
call at a time, in order. ``call_user`` still owns the deadline: a call is handed over as
a coroutine function that waits for the thread, and a call past its deadline is
abandoned with the thread; the session goes on with a new one.

When the session ends the thread closes the event loop a framework left set on it (its
connections are finalized there, not by the garbage collector later) and exits.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextvars
import ctypes
import queue
import sys
import threading
from collections.abc import Callable
from typing import Any

_Job = tuple[Callable[[], Any], concurrent.futures.Future[Any]] | None


class AgentThread:
    """A daemon thread that runs plain agents' calls, in order."""

    def __init__(self, name: str) -> None:
        self.name = name
        """The thread's name (an abandoned run's thread is found by it)."""
        self._jobs: queue.SimpleQueue[_Job] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None

    def submit(self, fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]
               ) -> concurrent.futures.Future[Any]:
        """Run ``fn(*args, **kwargs)`` on this thread after the calls before it (the
        ``ThreadRunner`` of ``run/usercode.py``); its outcome."""
        if self._thread is None:
            self._thread = threading.Thread(target=self._serve, name=self.name, daemon=True)
            self._thread.start()
        done: concurrent.futures.Future[Any] = concurrent.futures.Future()
        context = contextvars.copy_context()
        self._jobs.put((lambda: context.run(fn, *args, **kwargs), done))
        return done

    def _serve(self) -> None:
        try:
            while (job := self._jobs.get()) is not None:
                work, done = job
                if not done.set_running_or_notify_cancel():
                    continue
                try:
                    done.set_result(work())
                except AgentAbandoned:
                    return  # stopped: its caller gave up on it
                except BaseException as error:  # noqa: BLE001 - the caller names it
                    done.set_exception(error)
            _close_left_loop()
        except AgentAbandoned:
            return  # stopped between two calls

    def stop(self) -> None:
        """Stop the thread of an agent left running past its deadline, at its next Python
        step (CPython; elsewhere it is only left behind), and end it.

        Its time is up and nobody waits for it any more, but the proxy's URLs are the
        whole session's: a request it sent later would reach the next case. CPython
        delivers the exception when the thread next runs Python code (after its sleep,
        or once the proxy has cut its connections)."""
        thread = self._thread
        self.close()
        set_async_exc = getattr(getattr(ctypes, "pythonapi", None),
                                "PyThreadState_SetAsyncExc", None)
        if thread is None or thread.ident is None or set_async_exc is None \
                or not thread.is_alive():
            return
        set_async_exc(ctypes.c_ulong(thread.ident), ctypes.py_object(AgentAbandoned))

    def close(self) -> None:
        """End the thread once its calls are done (an abandoned one: whenever it returns)."""
        if self._thread is not None:
            self._jobs.put(None)


class AgentAbandoned(BaseException):
    """Raised in an abandoned agent's thread: whatever it does next, it stops there."""


def _close_left_loop() -> None:
    """Close the event loop a framework's ``run_sync`` set on this thread and left open."""
    # On a thread that is not the main one neither creates a loop: each returns the one
    # set, or raises. Policies are deprecated from Python 3.14, get_event_loop() warned
    # with no loop running before 3.12.
    current = (asyncio.get_event_loop if sys.version_info >= (3, 12)
               else asyncio.get_event_loop_policy().get_event_loop)
    try:
        loop = current()
    except RuntimeError:  # none was set
        return
    if not loop.is_closed() and not loop.is_running():
        try:
            loop.run_until_complete(loop.shutdown_asyncgens())
        finally:
            loop.close()
