"""Reading cassettes, which are untrusted input: a file from someone else's pull request,
one cut short by a full disk, one edited by hand.

Every value's type is checked and every JSON body's nesting bounded here, so a bad
cassette fails its case with one message that names the value at fault, and nothing
half-read reaches the replay transport (where a wrong type would surface as a traceback).
"""

from __future__ import annotations

import json
import math
from typing import Any

import yaml

from ..apis import AGENT, API_NAMES
from ..casefile.loader import load_yaml, syntax_error
from ..records import Interaction, McpExchange, StreamEvent
from ..wire import WireApi, wire_api

MAX_JSON_DEPTH = 200
"""The deepest JSON body a cassette may hold. A request built from a case file (itself at
most 100 levels deep) stays far below it; much deeper data would overflow Python's stack
where bodies are compared, scrubbed and matched."""


ROLES = ("model", "judge", "simulator")
"""Whose exchange an interaction is: the model under test's, or a second model's."""


class CassetteUnreadable(ValueError):
    """A cassette that cannot be replayed; the message says what is wrong and where."""


def parse_cassette(text: str) -> Any:
    """The plain data of a cassette's YAML ``text``; CassetteUnreadable if it is not YAML."""
    try:
        return load_yaml(text)
    except yaml.MarkedYAMLError as exc:
        line, problem = syntax_error(exc)
        where = f" at line {line}" if line else ""
        raise CassetteUnreadable(f"YAML syntax error{where}: {problem}") from None
    except yaml.YAMLError as exc:  # a control character: not a MarkedYAMLError
        raise CassetteUnreadable(f"not YAML: {str(exc).partition(chr(10))[0]}") from None


def read_cassette_data(data: Any, version: int
                       ) -> tuple[str, list[Interaction], list[McpExchange]]:
    """The API, the interactions and the MCP exchanges of a cassette's parsed ``data``, which
    must be of format ``version``. A cassette without ``api`` holds chat completions
    (recorded before a case could speak another API); one without ``mcp``, no MCP exchange."""
    document = _Fields(data, "the file")
    found = document.get("version", int, None)
    if found != version:
        raise CassetteUnreadable(f"format {found}, this version reads {version}")
    api = document.get("api", str, "chat")
    if api not in (*API_NAMES, AGENT):
        raise CassetteUnreadable(f"api: {api!r} is not one of {', '.join(API_NAMES)}, {AGENT}")
    items = document.get("interactions", list)
    exchanges = document.get("mcp", list, [])
    wire = wire_api(api if api != AGENT else "chat")
    return api, [_interaction(item, f"interactions[{index}]", wire)
                 for index, item in enumerate(items)], [
        _mcp_exchange(item, f"mcp[{index}]") for index, item in enumerate(exchanges)]


def _mcp_exchange(item: Any, where: str) -> McpExchange:
    fields = _Fields(item, where)
    method = fields.get("method", str)
    if method not in ("tools/list", "tools/call"):
        raise CassetteUnreadable(f"{fields.at('method')}: {method!r} is not tools/list or"
                                 " tools/call")
    params = fields.json("params", dict) if "params" in fields.value else {}
    return McpExchange(server=fields.get("server", str), method=method,
                       result=fields.json("result", dict), params=params,
                       elapsed_ms=fields.number("elapsed_ms", 0.0))


def _interaction(item: Any, where: str, wire: WireApi) -> Interaction:
    """One exchange; a request without ``path`` went where ``wire`` sends it (cassettes
    written by hand leave it out)."""
    fields = _Fields(item, where)
    role = fields.get("role", str, "model")
    if role not in ROLES:
        raise CassetteUnreadable(f"{fields.at('role')}: {role!r} is not one of"
                                 f" {', '.join(ROLES)}")
    api = fields.get("api", str, None)
    if api is not None:
        if api not in API_NAMES:
            raise CassetteUnreadable(f"{fields.at('api')}: {api!r} is not one of"
                                     f" {', '.join(API_NAMES)}")
        wire = wire_api(api)
    request, response = fields.mapping("request"), fields.mapping("response")
    status = response.get("status", int)
    if not 100 <= status <= 599:
        raise CassetteUnreadable(f"{response.at('status')}: {status} is not an HTTP status")
    body_json = response.get("json", str) if "json" in response.value else None
    body = response.json("json") if body_json is not None else response.get("text", str, None)
    events = response.get("events", list, None)
    body_sent = request.json("json", dict)
    return Interaction(
        request=body_sent,
        status=status,
        content_type=response.get("content_type", str, ""),
        body=body,
        events=None if events is None else [
            _event(event, f"{response.at('events')}[{index}]")
            for index, event in enumerate(events)],
        elapsed_ms=response.number("elapsed_ms", 0.0),
        path=request.get("path", str, None) or _default_path(wire, body_sent, events),
        method=request.get("method", str, "POST"),
        body_json=body_json,
        role=role,
        api=api,
    )


def _default_path(wire: WireApi, body: dict[str, Any], events: list[Any] | None) -> str:
    model = body.get("model")
    return "/" + wire.url_path(model if isinstance(model, str) else None, events is not None)


def _event(item: Any, where: str) -> StreamEvent:
    fields = _Fields(item, where)
    return StreamEvent(fields.get("data", str), fields.number("at_ms"),
                       fields.get("event", str, "message"), fields.get("cut", bool, False))


_REQUIRED: Any = object()


class _Fields:
    """One mapping of a cassette, read key by key with each value's type checked."""

    def __init__(self, value: Any, where: str) -> None:
        if not isinstance(value, dict):
            raise CassetteUnreadable(f"{where}: expected a mapping, got {_kind(value)}")
        self.value: dict[Any, Any] = value
        self.where = where

    def at(self, key: str) -> str:
        return f"{self.where}.{key}" if self.where != "the file" else key

    def get(self, key: str, kind: type | tuple[type, ...], default: Any = _REQUIRED) -> Any:
        """The value of ``key``, which must be a ``kind`` (a bool is not an int here)."""
        if key not in self.value:
            if default is _REQUIRED:
                raise CassetteUnreadable(f"{self.at(key)}: missing")
            return default
        value = self.value[key]
        if not isinstance(value, kind) or (isinstance(value, bool) and kind is not bool):
            raise CassetteUnreadable(f"{self.at(key)}: expected {_NAMES[kind]}, got "
                                     f"{_kind(value)}")
        return value

    def mapping(self, key: str) -> _Fields:
        return _Fields(self.get(key, dict), self.at(key))

    def number(self, key: str, default: Any = _REQUIRED) -> float:
        value = self.get(key, (int, float), default)
        try:
            number = float(value)
        except OverflowError:  # an integer past the largest float
            number = math.inf
        if not math.isfinite(number):
            raise CassetteUnreadable(f"{self.at(key)}: expected a finite number, got"
                                     f" {_kind(value)}")
        return number

    def json(self, key: str, kind: type | None = None) -> Any:
        """The JSON text at ``key``, parsed; a ``kind`` if one is given."""
        where = self.at(key)
        text = self.get(key, str)
        try:
            value = json.loads(text)
        except RecursionError:
            raise CassetteUnreadable(f"{where}: JSON nested deeper than {MAX_JSON_DEPTH}"
                                     " levels") from None
        except ValueError as exc:
            raise CassetteUnreadable(f"{where}: not JSON ({exc})") from None
        # Nesting takes a bracket a level: counting them spares most bodies the walk.
        if text.count("[") + text.count("{") > MAX_JSON_DEPTH and _too_deep(value):
            raise CassetteUnreadable(f"{where}: JSON nested deeper than {MAX_JSON_DEPTH} levels")
        if kind is not None and not isinstance(value, kind):
            raise CassetteUnreadable(f"{where}: expected JSON {_NAMES[kind]}, got "
                                     f"{_kind(value)}")
        return value


def _too_deep(value: Any) -> bool:
    stack = [(value, 1)]
    while stack:
        node, depth = stack.pop()
        if isinstance(node, dict):
            node = list(node.values())
        if isinstance(node, list):
            if depth > MAX_JSON_DEPTH:
                return True
            stack.extend((child, depth + 1) for child in node)
    return False


_NAMES: dict[Any, str] = {dict: "a mapping", list: "a list", str: "a string", int: "an integer",
                          float: "a number", (int, float): "a number", bool: "a boolean"}


def _kind(value: Any) -> str:
    if value is None:
        return "nothing (null)"
    name = _NAMES.get(type(value), type(value).__name__)
    shown = repr(value)
    return f"{name} {shown[:40]}{'...' if len(shown) > 40 else ''}"
