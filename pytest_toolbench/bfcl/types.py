"""BFCL's parameter schemas as JSON Schema: its Python type names (``dict``, ``float``,
``tuple``) translated to JSON Schema's, everything else kept. The single-turn import and
the multi-turn tool source both offer BFCL's functions through it."""

from __future__ import annotations

from typing import Any, Final

# BFCL's Python type names -> JSON Schema; "any" is absent: it constrains nothing.
TYPE_NAMES: Final = {"dict": "object", "float": "number", "tuple": "array"}
_JSON_TYPES: Final = frozenset({"string", "integer", "number", "boolean", "array", "object",
                                "null"})


class NoJsonType(ValueError):
    """A type with no JSON Schema twin (Java's ``HashMap``, JavaScript's ``String``...)."""


def json_schema(schema: Any, where: str) -> Any:
    """A BFCL parameter schema as JSON Schema: BFCL's type names translated, all else kept.

    ``where`` names the schema in the reason given when a type has no JSON Schema twin
    (Java's ``HashMap``, JavaScript's ``String``...).
    """
    if isinstance(schema, list):
        return [json_schema(item, where) for item in schema]
    if not isinstance(schema, dict):
        return schema
    translated: dict[str, Any] = {}
    for key, value in schema.items():
        if key == "type":
            if value != "any":
                translated[key] = _json_type(value, where)
        elif key == "properties" and isinstance(value, dict):
            translated[key] = {name: json_schema(sub, f"{where}.{name}")
                               for name, sub in value.items()}
        elif key in ("items", "additionalProperties"):
            translated[key] = json_schema(value, f"{where}[]")
        else:
            translated[key] = value
    return translated


def _json_type(name: Any, where: str) -> str:
    translated = TYPE_NAMES.get(name, name) if isinstance(name, str) else None
    if translated not in _JSON_TYPES:  # a list of types, a number...: not BFCL's own
        raise NoJsonType(f"{where} has type {name!r}, which has no JSON Schema equivalent")
    return str(translated)
