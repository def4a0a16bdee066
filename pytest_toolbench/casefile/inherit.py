"""A case file's ``defaults:`` document: the keys every case of the file starts from.

```yaml
defaults:
  model: gpt-4.1-mini
  params: {temperature: 0}
  system: {file: prompts/support.md}
  tools: [{name: get_order_status, result: {status: shipped}}]
---
name: where_is_my_order
stages: [...]
```

A case's own value of a key wins; mappings (``endpoint``, ``params``, ``judge``) are merged
key by key, nested mappings too; ``tools`` are the defaults' then the case's, a case's tool
replacing the default of the same name; ``marks`` and ``faults`` are the defaults' then the
case's. An
agent case takes none of the keys only the plugin's own loop uses (its agent builds its
own requests). The merge is of plain data, before validation, so a case validates as if
it had written the keys itself; ``Inheritance.locate`` says in which document, and at
which line, a key path of the merged case was written.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..keypaths import KeyPath
from .loader import Document

DEFAULTS = "defaults"
"""The key of a file's defaults document."""
FILE_LEVEL = frozenset({"mcp_servers", DEFAULTS})
"""The keys of a file-level document (no case of its own): shared MCP servers, defaults."""
DEFAULT_KEYS = ("model", "endpoint", "system", "tools", "params", "judge", "marks",
                "faults")
"""The case keys a defaults document may give (``judge`` where the schema has it)."""
_MERGED = frozenset({"endpoint", "params", "judge"})
_LISTED = frozenset({"tools", "marks", "faults"})

Origins = dict[str, list[tuple[bool, int]]]
"""For ``tools`` and ``marks``: where each item of the merged list comes from (the
defaults?, its index there)."""


def is_file_level(data: Any) -> bool:
    """A document of ``mcp_servers`` and/or ``defaults`` alone."""
    return isinstance(data, dict) and bool(data) and set(data) <= FILE_LEVEL


def _loop_only() -> tuple[str, ...]:
    from .schema import LOOP_ONLY_KEYS

    return LOOP_ONLY_KEYS


def allowed_keys() -> list[str]:
    """The keys a defaults document may give, of those the case schema has."""
    from .schema import Case

    return [key for key in DEFAULT_KEYS if key in Case.model_fields]


def inherit(defaults: Mapping[str, Any], case: Any) -> tuple[Any, Origins]:
    """The case's data with the defaults under it, and where its list items come from."""
    if not isinstance(case, dict) or not defaults:
        return case, {}
    merged = dict(case)
    origins: Origins = {}
    for key, value in defaults.items():
        if "agent" in case and key in _loop_only():
            continue  # an agent case's agent builds its own requests
        own = case.get(key)
        if key not in case:
            merged[key] = value
            if key in _LISTED and isinstance(value, list):
                origins[key] = [(True, index) for index in range(len(value))]
        elif key in _MERGED and isinstance(value, dict) and isinstance(own, dict):
            merged[key] = _merged(value, own)
        elif key in _LISTED and isinstance(value, list) and isinstance(own, list):
            merged[key], origins[key] = _listed(key, value, own)
    return merged, origins


def _merged(under: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    merged = dict(under)
    for key, value in over.items():
        below = under.get(key)
        merged[key] = (_merged(below, value) if isinstance(below, dict)
                       and isinstance(value, dict) else value)
    return merged


def _listed(key: str, under: list[Any], over: list[Any]) -> tuple[list[Any], list[
        tuple[bool, int]]]:
    """The defaults' items then the case's; a tool the case names again is the case's."""
    own_names = {_tool_name(item) for item in over} - {None} if key == "tools" else set()
    kept = [(True, index) for index, item in enumerate(under)
            if _tool_name(item) not in own_names or key != "tools"]
    origins = kept + [(False, index) for index in range(len(over))]
    return [under[index] if default else over[index] for default, index in origins], origins


def _tool_name(item: Any) -> str | None:
    if isinstance(item, dict):
        name = item.get("name", item.get("mcp"))
        return name if isinstance(name, str) else None
    return None


class Inheritance:
    """Where each key path of a merged case was written: in the case's document or in the
    file's defaults."""

    def __init__(self, document: Document, defaults: Document, origins: Origins | None
                 ) -> None:
        self.document = document
        self.defaults = defaults
        self._origins = origins

    @property
    def origins(self) -> Origins:
        if self._origins is None:  # read back from the cache: the merge is made again
            data = self.defaults.unpacked() or {}
            self._origins = inherit(data.get(DEFAULTS) or {}, self.document.unpacked())[1]
        return self._origins

    def line_of(self, path: KeyPath) -> int:
        return self.locate(path)[0]

    def locate(self, path: KeyPath) -> tuple[int, KeyPath]:
        """The line of ``path`` and the key path as its document spells it (under
        ``defaults`` for a key the case takes from there)."""
        if path and path[0] in _LISTED and len(path) > 1 and isinstance(path[1], int):
            listed = self.origins.get(str(path[0]))
            if listed is not None and 0 <= path[1] < len(listed):
                default, index = listed[path[1]]
                own = (path[0], index, *path[2:])
                return self._in(default, own)
        return self._in(_spelled(self.defaults, (DEFAULTS, *path)) - 1
                        > _spelled(self.document, path), path)

    def _in(self, default: bool, path: KeyPath) -> tuple[int, KeyPath]:
        if default:
            return self.defaults.line_of((DEFAULTS, *path)), (DEFAULTS, *path)
        return self.document.line_of(path), path


def _spelled(document: Document, path: KeyPath) -> int:
    """How much of ``path`` the document spells out (the length of its longest prefix)."""
    for end in range(len(path), 0, -1):
        if tuple(path[:end]) in document.lines:
            return end
    return 0
