"""A reply changed in its API's own shape, whole or streamed (an injected ``mutate`` fault).

The reply's bytes are read into JSON items (a whole body: one; a stream: one a server-sent
event, its event name kept), changed, and written back the way they came. Two changes read
every API alike, by the keys its calls are made of: ``malformed_arguments`` (the first
call's arguments made invalid JSON) and ``unknown_tool`` (the first call's name made one
the request did not offer). ``empty`` and ``truncated`` are each API's own
(``WireApi.emptied``, ``WireApi.truncated`` in its adapter).
"""

from __future__ import annotations

import json
from typing import Any, Final

from ..wire import wire_api
from ..wire.base import JSON_ERRORS, SseItem

UNOFFERED_SUFFIX: Final = "_not_offered"
"""What ``unknown_tool`` appends to the first call's name."""
_ARGUMENT_STRINGS: Final = ("arguments", "partial_json")
"""Where calls carry their arguments as JSON text (whole, or a stream's pieces)."""
_ARGUMENT_OBJECTS: Final = ("args", "input")
"""Where calls carry them as an object (a Gemini ``functionCall``, a Messages
``tool_use`` block)."""


def mutate_reply(api: str | None, kind: str, pieces: list[bytes], streamed: bool
                 ) -> list[bytes]:
    """``pieces`` (a whole body, or a stream's events one a piece) changed by ``kind``."""
    if api is None:
        return pieces
    items = _read(pieces, streamed)
    if kind == "malformed_arguments":
        _Malformer().walk(items)
    elif kind == "unknown_tool":
        name = _first_call_name(items)
        if name is not None:
            _rename(items, name, name + UNOFFERED_SUFFIX)
    elif kind == "empty":
        items = wire_api(api).emptied(items)
    else:
        items = wire_api(api).truncated(items)
    return _written(items, streamed)


def _read(pieces: list[bytes], streamed: bool) -> list[SseItem]:
    if not streamed:
        return [SseItem(None, _json(b"".join(pieces).decode("utf-8", "replace")))]
    items = []
    for piece in pieces:
        event, lines = None, []
        for line in piece.decode("utf-8", "replace").splitlines():
            if line.startswith("event:"):
                event = line[6:].strip()
            elif line.startswith("data:"):
                lines.append(line[5:].removeprefix(" "))
        if lines or event:
            items.append(SseItem(event, _json("\n".join(lines))))
    return items


def _json(text: str) -> Any:
    try:
        return json.loads(text)
    except JSON_ERRORS:
        return text


def _written(items: list[SseItem], streamed: bool) -> list[bytes]:
    if not streamed:
        data = items[0].data if items else ""
        return [(data if isinstance(data, str) else json.dumps(data)).encode()]
    pieces = []
    for item in items:
        data = item.data if isinstance(item.data, str) else json.dumps(item.data)
        head = f"event: {item.event}\n" if item.event else ""
        pieces.append(f"{head}data: {data}\n\n".encode())
    return pieces


class _Malformer:
    """The first call's arguments made invalid JSON wherever the reply carries them: its
    first streamed piece and each whole copy (a ``{`` before them), or an object
    replaced by such text."""

    def __init__(self) -> None:
        self.first: str | None = None
        """The first call's whole arguments, once a whole copy was seen."""
        self.pieced = False

    def walk(self, value: Any) -> None:
        if isinstance(value, SseItem):
            self.walk(value.data)
        elif isinstance(value, list):
            for item in value:
                self.walk(item)
        elif isinstance(value, dict):
            for key in list(value):
                self._member(value, key)

    def _member(self, owner: dict[str, Any], key: str) -> None:
        value = owner[key]
        if key in _ARGUMENT_STRINGS and isinstance(value, str):
            whole = isinstance(_json(value), dict)
            if (whole and self.first in (None, value)) or (not whole and not self.pieced):
                owner[key] = "{" + value
                self.first = value if whole else self.first
                self.pieced = self.pieced or not whole
            return
        if key in _ARGUMENT_OBJECTS and isinstance(value, dict) and _is_call(owner):
            text = json.dumps(value)
            if self.first in (None, text):
                self.first = text
                owner[key] = "{" + text
            return
        self.walk(value)


def _is_call(value: dict[str, Any]) -> bool:
    """A call as an API writes one: a name and its arguments (chat's ``function``, a
    Responses ``function_call`` item, a Messages ``tool_use`` block, a Gemini
    ``functionCall``)."""
    return isinstance(value.get("name"), str) and any(
        key in value for key in (*_ARGUMENT_STRINGS, *_ARGUMENT_OBJECTS))


def _first_call_name(value: Any) -> str | None:
    if isinstance(value, SseItem):
        return _first_call_name(value.data)
    if isinstance(value, dict):
        if _is_call(value) or value.get("type") in ("function_call", "tool_use"):
            name = value.get("name")
            if isinstance(name, str) and name:
                return name
        children = [child for key, child in value.items() if key != "tools"]
    elif isinstance(value, list):
        children = value
    else:
        return None
    return next(filter(None, map(_first_call_name, children)), None)


def _rename(value: Any, old: str, new: str) -> None:
    """Every call named ``old`` named ``new`` (the request's own ``tools`` echoed in a
    Responses reply left as offered)."""
    if isinstance(value, SseItem):
        _rename(value.data, old, new)
    elif isinstance(value, list):
        for item in value:
            _rename(item, old, new)
    elif isinstance(value, dict):
        if value.get("name") == old and (
                _is_call(value) or value.get("type") in ("function_call", "tool_use")):
            value["name"] = new
        for key, child in value.items():
            if key != "tools":
                _rename(child, old, new)
