"""SIGTERM and SIGHUP end the session as Ctrl-C does.

``timeout``, a cancelled CI job and a closed terminal send them; by default they end the
process at once, so no ``finally`` runs: stdio MCP servers would be left running (adopted
by PID 1) and no report written. From the first case file collected to the end of the
session, each becomes a ``KeyboardInterrupt`` in the main thread, which pytest handles as
Ctrl-C: the servers are stopped, the reports written with what ran, the interrupted cases
marked so. A project without case files keeps the default.

A handler someone else installed (the project's conftest, a CI wrapper) is left alone.
"""

from __future__ import annotations

import signal
import threading
from types import FrameType
from typing import Any

STOPPING_SIGNALS = tuple(getattr(signal, name) for name in ("SIGTERM", "SIGHUP")
                         if hasattr(signal, name))

_installed: dict[int, Any] = {}
stopped_by: str | None = None
"""The signal that stopped the session (``SIGTERM``), if one did."""


def _interrupt(number: int, _frame: FrameType | None) -> None:
    global stopped_by
    stopped_by = signal.Signals(number).name
    raise KeyboardInterrupt(stopped_by)


def install() -> None:
    """Make SIGTERM and SIGHUP interrupt the session, where nobody else handles them."""
    if threading.current_thread() is not threading.main_thread():
        return  # only the main thread may set handlers (pytest run inside a thread)
    for number in STOPPING_SIGNALS:
        if signal.getsignal(number) is signal.SIG_DFL:
            _installed[number] = signal.signal(number, _interrupt)


def uninstall() -> None:
    """Put back what was there, if the handler is still this module's."""
    if threading.current_thread() is not threading.main_thread():
        return
    for number, previous in list(_installed.items()):
        if signal.getsignal(number) is _interrupt:
            signal.signal(number, previous)
        del _installed[number]
