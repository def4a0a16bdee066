"""What a tool's ``strict: true`` asks of its parameters schema.

Strict function calling (structured outputs) holds the model's arguments to the schema
exactly, and the services accept only schemas where that is well defined: every object lists
each of its properties in ``required`` (an optional one is a union with ``null``) and sets
``additionalProperties: false``, at every depth. OpenAI's chat completions and Responses API
answer 400 to any other (Anthropic's Messages API likewise), so the items of a case that
would send one over an API with a strict mode fail before sending (``WireApi.unsupported``).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

__all__ = ["strict_schema_gaps"]

_LISTS_OF_SCHEMAS = ("anyOf", "oneOf", "allOf", "prefixItems")
_MAPS_OF_SCHEMAS = ("properties", "$defs", "definitions")


def strict_schema_gaps(parameters: Any) -> list[str]:
    """Where ``parameters`` falls short of a strict schema, one phrase each
    (``parameters.properties.address.required lacks 'zip'``); empty when it does not."""
    return list(_gaps(parameters, "parameters"))


def _gaps(schema: Any, where: str) -> Iterator[str]:
    if not isinstance(schema, dict):
        return
    if _is_object(schema):
        yield from _object_gaps(schema, where)
    for key in _MAPS_OF_SCHEMAS:
        members = schema.get(key)
        if isinstance(members, dict):
            for name, member in members.items():
                yield from _gaps(member, f"{where}.{key}.{name}")
    for key in _LISTS_OF_SCHEMAS:
        members = schema.get(key)
        if isinstance(members, list):
            for index, member in enumerate(members):
                yield from _gaps(member, f"{where}.{key}[{index}]")
    items = schema.get("items")
    if isinstance(items, dict):
        yield from _gaps(items, f"{where}.items")
    elif isinstance(items, list):  # the older tuple form
        for index, member in enumerate(items):
            yield from _gaps(member, f"{where}.items[{index}]")


def _is_object(schema: dict[str, Any]) -> bool:
    kind = schema.get("type")
    return kind == "object" or (isinstance(kind, list) and "object" in kind) \
        or isinstance(schema.get("properties"), dict)


def _object_gaps(schema: dict[str, Any], where: str) -> Iterator[str]:
    properties = schema.get("properties")
    required = schema.get("required")
    listed = set(required) if isinstance(required, list) else set()
    missing = [name for name in properties if name not in listed] \
        if isinstance(properties, dict) else []
    if missing:
        yield f"{where}.required lacks {', '.join(repr(name) for name in missing)}"
    if schema.get("additionalProperties") is not False:
        yield f"{where} needs additionalProperties: false"
