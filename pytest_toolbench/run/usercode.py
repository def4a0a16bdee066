"""Every call into a team's own code, made where it can be abandoned.

A toolbox's constructor, methods, ``state()`` and deep copies, ``python:`` tools, an agent
and its factory: code the plugin does not control, which may raise ``SystemExit`` (an
``argparse`` that reads pytest's argv), raise ``KeyboardInterrupt`` itself, sleep forever,
or swallow ``CancelledError``. None of that may stop or stall the session:

- a plain function runs on a daemon thread of its own, with no event loop running in it
  (frameworks start their own inside: pydantic-ai's ``run_sync``, openai-agents'
  ``Runner.run_sync``), or on the thread a ``ThreadRunner`` keeps for it (an agent's calls,
  every one on the same thread);
- a coroutine function runs on a ``UserLoop``: an event loop on a daemon thread of its own,
  never the loop the case's requests run on;
- at the deadline the call is abandoned: the thread or task is left behind, never waited
  for (a daemon thread ends with the process);
- whatever the code raises, ``BaseException`` included, becomes ``UserCodeFailed`` naming
  it. A real Ctrl-C (SIGINT) is raised in the main thread, which only waits here, so it
  still stops the session at once.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextvars
import inspect
import os
import socket
import threading
import traceback
from collections.abc import Callable, Coroutine
from typing import Any, Protocol, TypeVar

T = TypeVar("T")

_PACKAGE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
"""The plugin's own directory: its frames are dropped from a user's traceback."""

_CLOSE_GRACE_S = 1.0
"""How long a closing ``UserLoop`` lets cancelled tasks finish before it stops anyway."""


class UserCodeFailed(Exception):
    """User code did not give an answer: it raised, exited, was interrupted, or overran."""

    def __init__(self, message: str, *, what: str, frames: str = "",
                 overran: bool = False, cannot_connect: bool = False) -> None:
        super().__init__(f"{what}: {message}")
        self.cannot_connect = cannot_connect
        """Whether what it raised is a failure to connect (or was raised from one)."""
        self.message = message
        """What happened: ``SystemExit: 2``, ``ValueError: boom``, ``did not finish within
        2 s``."""
        self.what = what
        """The code that failed, as messages name it (``toolbox Bank.__init__``)."""
        self.frames = frames
        """The user's own traceback frames as text (the plugin's frames dropped)."""
        self.overran = overran
        """Whether the code ran past its deadline (and was abandoned)."""


def describe(exc: BaseException) -> str:
    """``ValueError: boom``, or the type's name alone when the exception says nothing."""
    text = str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def user_frames(exc: BaseException) -> str:
    """The frames of ``exc``'s traceback outside the plugin, as ``traceback`` prints them."""
    frames = [frame for frame in traceback.extract_tb(exc.__traceback__)
              if not os.path.abspath(frame.filename).startswith(_PACKAGE + os.sep)]
    return "".join(traceback.format_list(frames))


def _failed(exc: BaseException, what: str) -> UserCodeFailed:
    if isinstance(exc, UserCodeFailed):
        return exc
    return UserCodeFailed(describe(exc), what=what, frames=user_frames(exc),
                          cannot_connect=cannot_connect(exc))


def cannot_connect(exc: BaseException) -> bool:
    """Whether ``exc``, or an exception it was raised from, is a failure to connect: an
    OSError of connecting (refused, reset, no such host), or a client library's own
    (openai's and anthropic's ``APIConnectionError``, httpx's ``ConnectError``,
    requests' ``ConnectionError``, aiohttp's ``ClientConnectorError``), known by name as
    the plugin imports none of them."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, (ConnectionError, socket.gaierror)) or any(
                "Connect" in kind.__name__ for kind in type(current).__mro__):
            return True
        current = current.__cause__ or current.__context__
    return False


class ThreadRunner(Protocol):
    """A thread of the caller's that runs plain functions (``run/agent_thread.py``)."""

    def submit(self, fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]
               ) -> concurrent.futures.Future[Any]:
        """Run ``fn(*args, **kwargs)`` there; its outcome, whatever it raised included."""


class UserLoop:
    """An asyncio event loop on a daemon thread of its own, for one case run's async user
    code: an async agent and every stage of its case share it (an ``AsyncOpenAI`` client is
    bound to the loop it first ran on). The thread starts with the first coroutine; ``close()``
    stops it, abandoning code that never yields."""

    def __init__(self, name: str = "toolbench-user-loop") -> None:
        self._name = name
        self._loop: asyncio.AbstractEventLoop | None = None
        self._closed = False
        self._lock = threading.Lock()

    def submit(self, coroutine: Coroutine[Any, Any, T]) -> concurrent.futures.Future[T]:
        """Run ``coroutine`` on the loop; its outcome, as a thread-safe future."""
        try:
            loop = self._started()
        except RuntimeError:
            coroutine.close()  # never to run: no "never awaited" warning
            raise
        return asyncio.run_coroutine_threadsafe(coroutine, loop)

    def _started(self) -> asyncio.AbstractEventLoop:
        with self._lock:
            if self._closed:
                raise RuntimeError("the UserLoop is closed")
            if self._loop is None:
                self._loop = asyncio.new_event_loop()
                threading.Thread(target=self._serve, args=(self._loop,), name=self._name,
                                 daemon=True).start()
            return self._loop

    @staticmethod
    def _serve(loop: asyncio.AbstractEventLoop) -> None:
        asyncio.set_event_loop(loop)
        try:
            loop.run_forever()
            # Code abandoned at close may complain as it is torn down: nobody listens.
            loop.set_exception_handler(lambda _loop, _context: None)
            pending = asyncio.all_tasks(loop)
            for task in pending:
                task.cancel()
            if pending:
                loop.run_until_complete(asyncio.wait(pending, timeout=_CLOSE_GRACE_S))
            loop.run_until_complete(loop.shutdown_asyncgens())
        finally:
            loop.close()

    def close(self) -> None:
        """Stop the loop; safe to call twice, never waits for code that does not yield."""
        with self._lock:
            loop, self._loop, self._closed = self._loop, None, True
        if loop is not None:
            try:
                loop.call_soon_threadsafe(loop.stop)
            except RuntimeError:  # closed already
                pass


async def call_user(fn: Callable[..., Any], /, *args: Any, timeout_s: float, what: str,
                    loop: UserLoop | None = None, thread: ThreadRunner | None = None,
                    **kwargs: Any) -> Any:
    """Call ``fn(*args, **kwargs)`` where it can be abandoned and return its result.

    A plain function runs on ``thread``, else on a daemon thread of its own; a coroutine
    function (or a plain one that returns a coroutine) runs on ``loop``, else on a
    ``UserLoop`` of its own closed afterwards. At ``timeout_s`` the call is abandoned and
    ``UserCodeFailed`` says so; any ``BaseException`` from user code becomes
    ``UserCodeFailed`` naming it. ``what`` names the code in messages (``toolbox
    Bank.__init__``).
    """
    deadline = asyncio.get_running_loop().time() + timeout_s
    if inspect.iscoroutinefunction(fn):
        return await _on_user_loop(lambda: fn(*args, **kwargs), deadline, timeout_s, what, loop)
    if thread is None:
        result = await _within(_in_thread(fn, args, kwargs, what), deadline, timeout_s, what)
    else:
        result = await _on_thread(thread.submit(fn, args, kwargs), deadline, timeout_s, what)
    if inspect.iscoroutine(result):  # a plain function that made a coroutine: run it too
        return await _on_user_loop(lambda: result, deadline, timeout_s, what, loop)
    return result


async def _within(waiting: asyncio.Future[T], deadline: float, timeout_s: float,
                  what: str) -> T:
    remaining = deadline - asyncio.get_running_loop().time()
    try:
        return await asyncio.wait_for(waiting, max(remaining, 0))
    except asyncio.TimeoutError:
        raise UserCodeFailed(f"did not finish within {timeout_s:g} s", what=what,
                             overran=True) from None


async def _on_thread(running: concurrent.futures.Future[T], deadline: float, timeout_s: float,
                     what: str) -> T:
    """The outcome of a call ``running`` on a ``ThreadRunner``'s thread, by the deadline."""
    try:
        return await _within(asyncio.wrap_future(running), deadline, timeout_s, what)
    except UserCodeFailed:
        raise
    except BaseException as exc:  # the call's own exception (SystemExit too), or a cancel
        if running.done() and not running.cancelled() and running.exception() is exc:
            raise _failed(exc, what) from None
        raise  # this side's: cancelled (Ctrl-C), not the user's code


def _in_thread(fn: Callable[..., T], args: tuple[Any, ...], kwargs: dict[str, Any],
               what: str) -> asyncio.Future[T]:
    """``fn`` on a daemon thread of its own; its outcome, on the calling loop."""
    loop = asyncio.get_running_loop()
    outcome: asyncio.Future[T] = loop.create_future()
    context = contextvars.copy_context()  # as asyncio.to_thread: the caller's context vars

    def settle(result: T | None, error: BaseException | None) -> None:
        if outcome.done():  # abandoned at its deadline
            return
        if error is not None:
            outcome.set_exception(error)
        else:
            outcome.set_result(result)  # type: ignore[arg-type]

    def run() -> None:
        try:
            result, error = context.run(fn, *args, **kwargs), None
        except BaseException as exc:  # noqa: BLE001 - SystemExit too: user code's failure
            result, error = None, _failed(exc, what)
        try:
            loop.call_soon_threadsafe(settle, result, error)
        except RuntimeError:  # the calling loop is closed: the session ended meanwhile
            pass

    threading.Thread(target=run, name=f"toolbench-user-{what}"[:60], daemon=True).start()
    return outcome


async def _on_user_loop(make: Callable[[], Any], deadline: float, timeout_s: float,
                        what: str, loop: UserLoop | None) -> Any:
    own = loop is None
    user_loop = UserLoop() if loop is None else loop
    try:
        running = user_loop.submit(_guarded(make, what))
        return await _within(asyncio.wrap_future(running), deadline, timeout_s, what)
    finally:
        if own:
            user_loop.close()


async def _guarded(make: Callable[[], Any], what: str) -> Any:
    """Await the user's coroutine on the user loop; whatever it raises, named.

    A ``CancelledError`` is passed on only when the task was cancelled from outside (the
    deadline, the loop closing); one the code raised itself is its failure. So is
    ``GeneratorExit``, which only closing the abandoned coroutine throws in.
    """
    try:
        return await make()
    except asyncio.CancelledError as exc:
        task = asyncio.current_task()
        if task is not None and task.cancelling():
            raise
        raise _failed(exc, what) from None
    except GeneratorExit:  # the abandoned coroutine collected: nobody waits for it
        raise
    except BaseException as exc:  # noqa: BLE001 - user code: a failure is an answer
        raise _failed(exc, what) from None
