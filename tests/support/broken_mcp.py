"""A scripted stdio MCP server that breaks on purpose, for the fault tests.

    python broken_mcp.py MODE

It speaks just enough JSON-RPC by hand (initialize, tools/list, tools/call) to reach the
fault MODE names: ``exit_at_start`` (writes to stderr, exits 3 before answering),
``slow_start`` (never answers initialize), ``slow_call`` (never answers tools/call),
``crash_call`` (exits 1 on tools/call), ``garbage_call`` (answers tools/call with a line
that is not JSON), ``is_error`` (answers tools/call with ``isError: true``), ``count``
(answers tools/call with how many calls this process has had: its state). Each of its
tools/call answers ``{"echo": ARGUMENTS}`` otherwise. Hostile ones: ``flood_stderr`` (writes
stderr without end, never answers), ``garbage_init`` (answers initialize with a line that is
not JSON, then waits), ``crash_once`` (exits 1 on tools/call unless the file its next
argument names exists, which it makes first), ``show_secrets`` (writes its arguments and environment to stderr,
exits 3), ``twin_tools`` (lists two tools named ``echo``), ``endless_cursor`` (every
tools/list page names a next one). Further arguments are ignored (tests tag the process
with one, to find it).
"""

from __future__ import annotations

import json
import os
import sys
import time
from typing import Any

MODE = sys.argv[1] if len(sys.argv) > 1 else "ok"
CALLS = [0]
TOOLS = [{"name": "echo", "description": "Echoes its text",
          "inputSchema": {"type": "object", "properties": {"text": {"type": "string"}},
                          "required": ["text"]}}]


def send(message: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(message) + "\n")
    sys.stdout.flush()


def answer(request: dict[str, Any]) -> dict[str, Any] | None:
    method, params = request.get("method"), request.get("params") or {}
    if method == "initialize":
        if MODE == "slow_start":
            time.sleep(60)
        return {"protocolVersion": params.get("protocolVersion", "2025-06-18"),
                "capabilities": {"tools": {}},
                "serverInfo": {"name": "broken", "version": "1"}}
    if method == "tools/list":
        if MODE == "twin_tools":
            return {"tools": [*TOOLS, {**TOOLS[0], "description": "The other echo"}]}
        if MODE == "endless_cursor":
            return {"tools": TOOLS, "nextCursor": f"page-{params.get('cursor', '')}x"[:200]}
        return {"tools": TOOLS}
    if method == "tools/call":
        return call(params)
    return {}


def call(params: dict[str, Any]) -> dict[str, Any]:
    if MODE == "slow_call":
        time.sleep(600)  # longer than any test waits: it never answers
    if MODE == "crash_once" and not os.path.exists(sys.argv[2]):
        open(sys.argv[2], "w").close()
        print("Traceback: crashed once", file=sys.stderr, flush=True)
        sys.exit(1)
    if MODE == "crash_call":
        print("Traceback: the echo backend is gone", file=sys.stderr, flush=True)
        sys.exit(1)
    if MODE == "garbage_call":
        sys.stdout.write("this is not JSON-RPC\n")
        sys.stdout.flush()
        time.sleep(60)
    CALLS[0] += 1
    if MODE == "count":
        return {"content": [{"type": "text", "text": f"call {CALLS[0]}"}], "isError": False}
    text = json.dumps({"echo": params.get("arguments")})
    return {"content": [{"type": "text", "text": text}], "isError": MODE == "is_error"}


def main() -> None:
    print(f"broken MCP server starting in mode {MODE}", file=sys.stderr, flush=True)
    if MODE == "exit_at_start":
        print("fatal: NOTES_DB is not configured", file=sys.stderr, flush=True)
        sys.exit(3)
    if MODE == "show_secrets":
        print(f"argv: {sys.argv[2:]}", file=sys.stderr)
        print(f"environment: {sorted(os.environ.items())}", file=sys.stderr, flush=True)
        sys.exit(3)
    if MODE == "flood_stderr":
        line = "x" * 1000 + "\n"
        while True:
            sys.stderr.write(line)
    if MODE == "garbage_init":
        sys.stdin.readline()
        sys.stdout.write("<html>this is not JSON-RPC</html>\n")
        sys.stdout.flush()
        time.sleep(60)
    for line in sys.stdin:
        request = json.loads(line)
        if "id" not in request:
            continue  # a notification
        result = answer(request)
        send({"jsonrpc": "2.0", "id": request["id"], "result": result})


if __name__ == "__main__":
    main()
