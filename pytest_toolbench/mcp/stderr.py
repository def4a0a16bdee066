"""A stdio server's stderr, drained as it is written and kept as a bounded tail.

A server may write stderr without end. Nothing is spooled: a daemon thread reads the pipe
as the server writes it (a server is never blocked on a full pipe) and keeps only its last
``STDERR_KEEP_BYTES``, counting what it let go. Messages show the last
``STDERR_TAIL_LINES`` lines of that, each cut at ``STDERR_LINE_CHARS``, and say how much
they leave out. A failure message reads the tail once the server has stopped (its pipe
closed), waiting ``_EOF_WAIT_S`` at most for the last bytes.
"""

from __future__ import annotations

import os
import threading
from typing import IO

from ..cuts import cut
from ..defaults import STDERR_KEEP_BYTES, STDERR_LINE_CHARS, STDERR_TAIL_LINES

_CHUNK = 65536
_EOF_WAIT_S = 2.0


class StderrTail:
    """The pipe a stdio server writes its stderr to, and the end of what it wrote."""

    def __init__(self, keep_bytes: int = STDERR_KEEP_BYTES) -> None:
        read_end, write_end = os.pipe()
        self.writer: IO[str] | None = open(  # noqa: SIM115 - handed to the server's process
            write_end, "w", encoding="utf-8", errors="replace")
        """What the server's process gets as its stderr; closed here once it is started."""
        self._keep = keep_bytes
        self._kept = bytearray()
        self._dropped = 0
        self._lock = threading.Lock()
        self._ended = threading.Event()
        threading.Thread(target=self._drain, args=(read_end,), name="toolbench-mcp-stderr",
                         daemon=True).start()

    def started(self) -> None:
        """The server's process has its own copy of the pipe: close this one, so the pipe
        ends when the server (and whatever it started) is gone. Safe to call twice."""
        writer, self.writer = self.writer, None
        if writer is not None:
            writer.close()

    def _drain(self, read_end: int) -> None:
        try:
            while chunk := os.read(read_end, _CHUNK):
                with self._lock:
                    self._kept += chunk
                    over = len(self._kept) - self._keep
                    if over > 0:
                        del self._kept[:over]
                        self._dropped += over
        except OSError:
            pass
        finally:
            os.close(read_end)
            self._ended.set()

    def tail(self, wait: bool = True) -> str:
        """The last lines, indented for a message, with a first line saying what was left
        out; ``wait``: for the pipe to end first (the server stopped), briefly."""
        if wait:
            self._ended.wait(_EOF_WAIT_S)
        with self._lock:
            text, dropped = self._kept.decode("utf-8", errors="replace"), self._dropped
        lines = text.splitlines()
        shown, hidden = lines[-STDERR_TAIL_LINES:], lines[:-STDERR_TAIL_LINES]
        earlier = dropped + sum(len(line.encode()) + 1 for line in hidden)
        out = [f"    ({_bytes(earlier)} before these lines left out)"] if earlier else []
        return "\n".join(out + [f"    {cut(line, STDERR_LINE_CHARS)}" for line in shown])


def _bytes(count: int) -> str:
    return f"{count} bytes" if count < 10_000 else f"{count // 1024} KiB"
