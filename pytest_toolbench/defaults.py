"""Defaults that both the settings and the code they configure need to know (the wire
APIs are the registry's, ``apis.py``).

A leaf module: it imports nothing, so reading a default loads no library (the plugin
resolves its settings in every pytest run, case files or not).
"""

from __future__ import annotations

from typing import Final

CASSETTE_FOLDER: Final = "__cassettes__"
"""The folder beside each case file that holds its cassettes (unless ``cassette_dir``)."""

MATCH_TIMEOUT_S: Final = 10.0
"""How long the checks of one stage may run (``--toolbench-match-timeout``)."""

STDERR_KEEP_BYTES: Final = 65536
"""Of a stdio MCP server's stderr, the last this many bytes are kept (the rest is read and
let go as the server writes it)."""

STDERR_TAIL_LINES: Final = 15
"""How many of those last lines a failure message shows."""

STDERR_LINE_CHARS: Final = 500
"""A longer line of a stderr tail is cut there, saying how much it left out."""

TOOL_RESULT_CHARS: Final = 1_048_576
"""A tool's result longer than this is cut before the model is sent it, saying how much it
left out: the request, the cassette and the reports all hold the cut result."""

DIFF_LINE_CHARS: Final = 2000
"""A line of a request diff longer than this is cut, saying how much it left out."""

SIMULATED_TURNS_MAX: Final = 50
"""The most ``simulate_user.max_turns`` may say: each simulated message resends the whole
conversation, so a recording grows with the square of the turns."""

JUDGE_SAMPLES_MAX: Final = 25
"""The most ``samples`` a judge criterion may ask for (each one is a request)."""

PROGRESSIVE_LEAD_MS: Final = 1.0
"""``expect.stream.progressive``: a call's arguments count as complete before the stream
ended when their last piece arrived at least this long before its last event (events a
server writes back to back at the end arrive microseconds apart)."""
