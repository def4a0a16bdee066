"""The SDK-built notes MCP server (``notes_mcp.py``) started for a test: over streamable
HTTP, on a loopback port of its own, every request carrying ``NOTES_TOKEN``."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

NOTES_TOKEN = "notes-token-5f2a9c"


@contextmanager
def notes_server() -> Iterator[str]:
    """The server's URL while it runs; killed afterwards."""
    script = Path(__file__).parent / "notes_mcp.py"
    process = subprocess.Popen([sys.executable, str(script), NOTES_TOKEN],
                               stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        assert process.stdout is not None
        port = process.stdout.readline().split()[1]
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        process.kill()
        process.wait(timeout=10)
        if process.stdout is not None:
            process.stdout.close()
