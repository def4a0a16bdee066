"""YAML text -> plain data, plus a map from key paths to 1-based line numbers.

The line map is the single source of truth for ``file:line`` in every message: schema
errors, matcher errors and failing expectations all look their key path up here.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

try:  # libyaml is several times faster; collection of large suites depends on it.
    from yaml import CSafeLoader as _Loader
except ImportError:  # pragma: no cover - depends on how PyYAML was built
    from yaml import SafeLoader as _Loader  # type: ignore[assignment]

KeyPath = tuple[str | int, ...]


@dataclass(frozen=True)
class CaseFileError(Exception):
    """A problem in a case file that the user must fix; printed without a traceback."""

    file: Path
    line: int | None
    message: str
    key_path: KeyPath = ()

    def __str__(self) -> str:
        where = f"{self.file}:{self.line}" if self.line else str(self.file)
        key = f" {format_key_path(self.key_path)}:" if self.key_path else ""
        return f"{where}:{key} {self.message}"


@dataclass
class Document:
    """One YAML document of a case file."""

    data: Any
    lines: dict[KeyPath, int] = field(default_factory=dict)
    """Key path -> 1-based line of the key (for mappings) or the item (for sequences)."""
    start_line: int = 1

    def line_of(self, path: Sequence[str | int]) -> int:
        """The line of ``path``, or of its nearest ancestor that the file spells out."""
        for end in range(len(path), 0, -1):
            line = self.lines.get(tuple(path[:end]))
            if line is not None:
                return line
        return self.start_line


def format_key_path(path: Sequence[str | int]) -> str:
    """``("stages", 0, "expect")`` -> ``stages[0].expect``."""
    text = ""
    for part in path:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else str(part))
    return text


def load_documents(file: Path, text: str | None = None) -> list[Document]:
    """Parse every YAML document of ``file``; raise CaseFileError on bad YAML."""
    try:
        source = file.read_text(encoding="utf-8") if text is None else text
    except UnicodeDecodeError as exc:
        raise CaseFileError(file, None, f"not UTF-8 text (byte {exc.start}: {exc.reason})") \
            from None
    except OSError as exc:
        raise CaseFileError(file, None, f"cannot read the file: {exc.strerror or exc}") from None
    loader = _Loader(source)
    try:
        return [_document(file, loader, node) for node in _nodes(loader)]
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = mark.line + 1 if mark else None
        problem = exc.problem or exc.context or "invalid YAML"
        raise CaseFileError(file, line, f"YAML syntax error: {problem}") from None
    finally:
        loader.dispose()


def _nodes(loader: Any) -> Iterator[yaml.Node]:
    while loader.check_node():
        node = loader.get_node()
        if node is not None:
            yield node


def _document(file: Path, loader: Any, node: yaml.Node) -> Document:
    lines: dict[KeyPath, int] = {}
    _map_lines(file, node, (), lines)
    data = loader.construct_document(node)
    return Document(data=data, lines=lines, start_line=node.start_mark.line + 1)


def _map_lines(file: Path, node: yaml.Node, path: KeyPath, lines: dict[KeyPath, int]) -> None:
    """Record the line of every key and item below ``node``; reject duplicate keys."""
    if isinstance(node, yaml.MappingNode):
        for key_node, value_node in node.value:
            key = key_node.value if isinstance(key_node, yaml.ScalarNode) else str(key_node)
            child = (*path, key)
            if child in lines:
                raise CaseFileError(
                    file, key_node.start_mark.line + 1, f"duplicate key '{key}'", child
                )
            lines[child] = key_node.start_mark.line + 1
            _map_lines(file, value_node, child, lines)
    elif isinstance(node, yaml.SequenceNode):
        for index, item in enumerate(node.value):
            lines[(*path, index)] = item.start_mark.line + 1
            _map_lines(file, item, (*path, index), lines)
