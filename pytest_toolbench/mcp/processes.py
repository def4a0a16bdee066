"""The safety net under stdio servers: every server process this session started is known,
and any still alive when the interpreter exits is killed with its process group.

The SDK stops a server when its connection closes (close stdin, wait, kill the tree), and
the session closes every connection, on Ctrl-C too. This is for the paths that skip that:
a worker told to stop at once, a loop that would not wind down. The SDK does not hand out
its process, so a new child of this process running the server's command is taken for it
(read from ``/proc``; elsewhere the net is not there and the SDK's own shutdown is all).
"""

from __future__ import annotations

import atexit
import contextlib
import os
import signal
import threading
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

_PROC = Path("/proc")


class ServerProcesses:
    """The pids of the stdio servers this process started and has not seen stop."""

    def __init__(self) -> None:
        self._pids: set[int] = set()
        self._lock = threading.Lock()
        self._registered = False

    @contextlib.asynccontextmanager
    async def watch(self, transport: contextlib.AbstractAsyncContextManager[Any],
                    command: tuple[str, ...]) -> AsyncIterator[Any]:
        """Enter ``transport`` (which starts a server running ``command``), knowing its pid."""
        self._register()
        before = _children()
        pids: set[int] = set()
        try:
            async with transport as streams:
                pids = {pid for pid in _children() - before if _runs(pid, command)}
                with self._lock:
                    self._pids |= pids
                yield streams
        finally:
            with self._lock:
                self._pids -= pids

    @property
    def alive(self) -> set[int]:
        """The known servers still running."""
        with self._lock:
            return {pid for pid in self._pids if _exists(pid)}

    def kill_all(self) -> None:
        """Kill every known server still running, its whole process group."""
        with self._lock:
            pids, self._pids = set(self._pids), set()
        for pid in pids:
            with contextlib.suppress(OSError):
                os.killpg(pid, signal.SIGKILL)  # each server leads a session of its own

    def _register(self) -> None:
        if not self._registered:
            self._registered = True
            atexit.register(self.kill_all)


SERVER_PROCESSES = ServerProcesses()


def _children() -> set[int]:
    """The pids of this process's children (none where there is no ``/proc``)."""
    me = os.getpid()
    found = set()
    with contextlib.suppress(OSError):
        for entry in _PROC.iterdir():
            if entry.name.isdigit() and _parent(entry) == me:
                found.add(int(entry.name))
    return found


def _parent(entry: Path) -> int | None:
    try:
        stat = (entry / "stat").read_text()
    except OSError:
        return None
    fields = stat.rpartition(")")[2].split()  # the command name may hold spaces
    return int(fields[1]) if len(fields) > 1 else None


def _runs(pid: int, command: tuple[str, ...]) -> bool:
    """Whether ``pid`` runs ``command`` (its arguments; the program may be resolved)."""
    try:
        argv = (_PROC / str(pid) / "cmdline").read_bytes().split(b"\0")[:-1]
    except OSError:
        return False
    return [arg.decode(errors="replace") for arg in argv[1:]] == list(command[1:])


def _exists(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except OSError:
        return False
    return True
