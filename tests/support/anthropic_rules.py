"""What Anthropic's Messages API refuses in a request, for loopback stand-ins to refuse too.

A stand-in that answers whatever it is sent would let a request through that the real
service turns away; handlers call ``refusal(body)`` first and answer with it when it is not
None. Each rule is one the service enforces, with the status and error shape it answers
with (the wording is the service's, but tests assert on the plugin's text, never on it).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from support.chat_server import JsonReply, json_reply

__all__ = ["refusal"]


def refusal(body: dict[str, Any]) -> JsonReply | None:
    """The 400 the service answers ``body`` with, or None when it takes the request."""
    for where, block in _blocks(body):
        if block.get("type") == "text" and not str(block.get("text", "")).strip():
            return _invalid(f"{where}: text content blocks must contain non-whitespace text")
    return None


def _blocks(body: dict[str, Any]) -> Iterator[tuple[str, dict[str, Any]]]:
    """Every content block of every turn, with its place as the service names it."""
    for turn_index, turn in enumerate(body.get("messages", [])):
        content = turn.get("content")
        for block_index, block in enumerate(content if isinstance(content, list) else []):
            yield f"messages.{turn_index}.content.{block_index}", block


def _invalid(message: str) -> JsonReply:
    return json_reply({"type": "error", "error": {"type": "invalid_request_error",
                                                  "message": message}}, status=400)
