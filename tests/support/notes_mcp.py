"""A streamable-HTTP MCP server built with the SDK's MCPServer, on a loopback port the OS
picks, for the tests: a notes store whose state lives as long as the server.

    python notes_mcp.py TOKEN

It prints ``PORT <n>`` once it listens; every request must carry ``Authorization: Bearer
TOKEN`` (401 otherwise). Tools: ``add_note(text)``, ``list_notes()``, ``fail()`` (answers
with ``isError: true``).
"""

from __future__ import annotations

import socket
import sys
from typing import Any

import uvicorn
from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError

TOKEN = sys.argv[1] if len(sys.argv) > 1 else "secret-token-123"
notes: list[str] = []
server = MCPServer("notes")


@server.tool()
def add_note(text: str) -> dict[str, Any]:
    """Add a note; returns how many notes there are."""
    notes.append(text)
    return {"count": len(notes)}


@server.tool()
def list_notes() -> list[str]:
    """Every note so far."""
    return list(notes)


@server.tool()
def fail() -> str:
    """Always fails (a ToolError: its words reach the client)."""
    raise ToolError("the notes store is read-only today")


def guarded(app: Any) -> Any:
    async def asgi(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            headers = dict(scope.get("headers") or [])
            if headers.get(b"authorization") != f"Bearer {TOKEN}".encode():
                await send({"type": "http.response.start", "status": 401, "headers": []})
                await send({"type": "http.response.body", "body": b"unauthorized"})
                return
        await app(scope, receive, send)
    return asgi


def main() -> None:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    print(f"PORT {sock.getsockname()[1]}", flush=True)
    config = uvicorn.Config(guarded(server.streamable_http_app()), log_level="warning",
                            lifespan="on")
    uvicorn.Server(config).run(sockets=[sock])


if __name__ == "__main__":
    main()
