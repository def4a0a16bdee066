"""Long texts cut at a limit, each cut saying how much it left out.

The limits (``defaults.py``): a tool's result (``TOOL_RESULT_CHARS``), a line of a request
diff (``DIFF_LINE_CHARS``), a line of an MCP server's stderr tail (``STDERR_LINE_CHARS``).
A cut text is never longer than its limit, so cutting it again changes nothing: a result
cut when it was recorded replays as the same text.
"""

from __future__ import annotations


def cut(text: str, limit: int) -> str:
    """``text`` whole when it fits in ``limit`` characters; else its start and a note of
    how many characters were left out, ``limit`` characters in all."""
    if len(text) <= limit:
        return text
    kept = max(limit - 60, 0)
    for _ in range(2):  # the note's own length depends on the count it states
        note = f"... [{len(text) - kept:,} more characters left out]"
        kept = max(limit - len(note), 0)
    return text[:kept] + note
