"""MCP servers as a case's tools (``mcp_servers:``, ``tools: [{mcp: NAME}]``).

- ``servers.py``: a declared server resolved for one run (placeholders filled in, its
  credentials named for scrubbing); no SDK needed.
- ``connection.py``: one live server, through the official ``mcp`` SDK (imported only
  here, when a case first starts a server), its faults said in words.
- ``source.py``: a server's tools as a ``ToolSource`` of the agent loop, live (each
  exchange recorded) or replayed from the case's cassette, which starts nothing.
- ``provider.py``: what the session plugs into a run: fresh servers per case, shared ones
  for ``scope: session``, and the safety net that leaves no server process behind.
"""
