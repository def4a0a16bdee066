"""The wire APIs a case can speak: chat completions, OpenAI's Responses API, Anthropic's
Messages API and Google's Gemini API, each a row of the registry (``apis.py``) and an
adapter file pair here.

A case is written once. The runner keeps its conversation in one shape (chat-completions
messages: ``system``, ``user``, ``assistant`` with ``tool_calls``, ``tool``), and a
``WireApi`` translates it into its API's request and reads that API's replies, whole or
streamed, into the one ``Reply`` that expectations check. Nothing above this package knows
which API a case speaks; nothing in it knows HTTP (``transport/`` sends what it builds).

The modules, each a leaf apart from ``records``:

    base.py          WireApi (what an adapter provides), RequestParts, shared helpers
    stream.py        StreamAccumulator: what every API's stream reader shares
    chat.py          chat completions: ``POST chat/completions``
    chat_reader.py   its replies: streamed deltas reassembled, or one body
    responses.py     the Responses API: ``POST responses``, instructions and input items
    responses_reader.py   its replies: output items, whole or from semantic stream events
    messages.py      the Messages API: ``POST messages``, content blocks and their events
    gemini.py        the Gemini API: ``POST models/MODEL:generateContent``, contents and parts
    gemini_reader.py   its replies: GenerateContentResponses, whole or streamed
"""

from __future__ import annotations

import importlib

from ..apis import API_NAMES, api_row
from .base import RequestParts, StreamReader, Unsupported, WireApi

__all__ = ["API_NAMES", "RequestParts", "StreamReader", "Unsupported", "WireApi", "wire_api"]

_ADAPTERS: dict[str, WireApi] = {}


def wire_api(name: str) -> WireApi:
    """The adapter of API ``name`` (one of ``API_NAMES``), imported on first use from where
    its registry row says."""
    adapter = _ADAPTERS.get(name)
    if adapter is None:
        module, _, attribute = api_row(name).adapter.partition(":")
        adapter = getattr(importlib.import_module(f"{__name__}.{module}"), attribute)
        _ADAPTERS[name] = adapter
    return adapter
