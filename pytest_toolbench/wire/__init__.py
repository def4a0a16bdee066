"""The three wire APIs a case can speak: chat completions, OpenAI's Responses API and
Anthropic's Messages API.

A case is written once. The runner keeps its conversation in one shape (chat-completions
messages: ``system``, ``user``, ``assistant`` with ``tool_calls``, ``tool``), and a
``WireApi`` translates it into its API's request and reads that API's replies, whole or
streamed, into the one ``Reply`` that expectations check. Nothing above this package knows
which API a case speaks; nothing in it knows HTTP (``transport/`` sends what it builds).

The modules, each a leaf apart from ``records``:

    base.py          WireApi (what an adapter provides), RequestParts, shared helpers
    chat.py          chat completions: ``POST chat/completions``
    chat_reader.py   its replies: streamed deltas reassembled, or one body
    responses.py     the Responses API: ``POST responses``, instructions and input items
    responses_reader.py   its replies: output items, whole or from semantic stream events
    messages.py      the Messages API: ``POST messages``, content blocks and their events
"""

from __future__ import annotations

from ..defaults import API_NAMES
from .base import RequestParts, StreamReader, Unsupported, WireApi

__all__ = ["API_NAMES", "RequestParts", "StreamReader", "Unsupported", "WireApi", "wire_api"]


def wire_api(name: str) -> WireApi:
    """The adapter of API ``name`` (one of ``API_NAMES``)."""
    if name == "chat":
        from .chat import CHAT

        return CHAT
    if name == "responses":
        from .responses import RESPONSES

        return RESPONSES
    if name == "messages":
        from .messages import MESSAGES

        return MESSAGES
    raise ValueError(f"unknown API {name!r}: one of {', '.join(API_NAMES)}")
