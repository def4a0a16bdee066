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

_MAX_DEPTH = 100
"""The deepest nesting a case file may have, aliases expanded. No case comes near it; much
deeper data overflows Python's recursion limit in the constructor and the matchers."""
_COMPOSER_SAFE_LENGTH = 4096
"""Text this short cannot nest deep enough (a level takes a character) to overflow the C
stack in libyaml's recursive composer, which it does, with a segfault, near 30,000 levels;
longer text has its depth checked on the event stream before it is composed."""


class KeyedError(ValueError):
    """A validation error that knows the key path, below the field it was raised for, of
    the value at fault, so the message can name that value's own line."""

    def __init__(self, message: str, path: KeyPath = ()) -> None:
        super().__init__(message)
        self.message = message
        self.path = path


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
    try:
        _check_depth(file, source)
        return _compose(file, source)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        # libyaml puts an error at the end of the text on a line past the last one.
        line = min(mark.line + 1, len(source.splitlines()) or 1) if mark else None
        problem = exc.problem or exc.context or "invalid YAML"
        raise CaseFileError(file, line, f"YAML syntax error: {problem}") from None
    except yaml.reader.ReaderError as exc:  # a control character: not a MarkedYAMLError
        # libyaml counts UTF-8 bytes; splitlines breaks lines where YAML does, on text
        # that (up to here) has passed the reader.
        before = source.encode()[: exc.position].decode(errors="ignore")
        line = len((before + "|").splitlines())
        problem = str(exc).partition("\n")[0]
        raise CaseFileError(file, line, f"YAML syntax error: {problem}") from None


def _compose(file: Path, source: str) -> list[Document]:
    loader = _Loader(source)
    last_line = len(source.splitlines()) or 1
    try:
        return [_document(file, loader, node, last_line) for node in _nodes(loader)]
    finally:
        loader.dispose()


def _check_depth(file: Path, source: str) -> None:
    """Refuse deep nesting in long text before libyaml's recursive composer sees it."""
    if len(source) <= _COMPOSER_SAFE_LENGTH or _openers(source) <= _COMPOSER_SAFE_LENGTH:
        return  # _map_lines checks the depth of short text
    depth = 0
    for event in yaml.parse(source, Loader=_Loader):
        if isinstance(event, yaml.CollectionStartEvent):
            depth += 1
            if depth > _MAX_DEPTH:
                mark = event.start_mark
                raise _too_deep(file, mark.line + 1 if mark else None, ())
        elif isinstance(event, yaml.CollectionEndEvent):
            depth -= 1


def _openers(source: str) -> int:
    """A bound on the nesting depth that costs a few ``str.count`` instead of a second parse:
    every collection opens with one of these (block mappings with their first ``:``)."""
    return sum(source.count(indicator) for indicator in "[{-:?")


def _too_deep(file: Path, line: int | None, path: KeyPath) -> CaseFileError:
    return CaseFileError(file, line, f"nested deeper than {_MAX_DEPTH} levels", path)


def _nodes(loader: Any) -> Iterator[yaml.Node]:
    while loader.check_node():
        node = loader.get_node()
        if node is not None:
            yield node


def _document(file: Path, loader: Any, node: yaml.Node, last_line: int) -> Document:
    lines: dict[KeyPath, int] = {}
    _map_lines(file, node, (), lines, {})
    # libyaml marks an empty value at the very end of the text on a line past the last.
    lines = {path: min(line, last_line) for path, line in lines.items()}
    try:
        data = construct_plain(loader, node)
    except (ValueError, TypeError, LookupError, AttributeError):
        # PyYAML's constructors let these out on values such as 2024-02-30, !!int x or an
        # integer of over 4,300 digits: name the first scalar that cannot be read.
        raise _unreadable(file, node) from None
    start_line = min(node.start_mark.line + 1, last_line)
    return Document(data=data, lines=lines, start_line=start_line)


def _unreadable(file: Path, root: yaml.Node) -> CaseFileError:
    nodes, seen = [root], set()
    while nodes:
        node = nodes.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        if isinstance(node, yaml.ScalarNode):
            try:
                yaml.constructor.SafeConstructor().construct_object(node)
            except Exception as exc:  # noqa: BLE001 - whatever it is, the user must fix it
                kind = node.tag.rpartition(":")[2]
                message = f"cannot read {node.value[:40]!r} as {kind}: {exc}"
                return CaseFileError(file, node.start_mark.line + 1,
                                     f"{message} (quote it if it is text)")
        elif isinstance(node, yaml.MappingNode):
            nodes.extend(child for pair in reversed(node.value) for child in pair[::-1])
        elif isinstance(node, yaml.SequenceNode):
            nodes.extend(reversed(node.value))
    return CaseFileError(file, root.start_mark.line + 1, "a value cannot be read")


def _map_lines(
    file: Path, node: yaml.Node, path: KeyPath, lines: dict[KeyPath, int], depths: dict[int, int]
) -> int:
    """Record the line of every key and item below ``node``; reject duplicate keys,
    recursive aliases and nesting deeper than ``_MAX_DEPTH``. Returns the node's depth.

    ``depths`` holds the depth of every node mapped so far (-1 while in progress), so an
    alias costs one look-up however often it is used (a billion-laughs file stays linear)
    and its lines are its anchor's.
    """
    known = depths.get(id(node))
    line = lines.get(path, node.start_mark.line + 1)
    if known == -1:
        raise CaseFileError(file, line, "an alias inside the node it refers to: recursive"
                            " data cannot be sent as JSON", path)
    if len(path) + (known or 0) > _MAX_DEPTH:
        raise _too_deep(file, line, path[:4])  # where it starts: the rest is [0][0]...
    if known is not None:
        return known
    depths[id(node)] = -1
    depth = _map_children(file, node, path, lines, depths)
    depths[id(node)] = depth
    return depth


def _map_children(
    file: Path, node: yaml.Node, path: KeyPath, lines: dict[KeyPath, int], depths: dict[int, int]
) -> int:
    deepest = 0
    if isinstance(node, yaml.MappingNode):
        for key_node, value_node in node.value:
            key = key_node.value if isinstance(key_node, yaml.ScalarNode) else str(key_node)
            child = (*path, key)
            if child in lines:
                raise CaseFileError(
                    file, key_node.start_mark.line + 1, f"duplicate key '{key}'", child
                )
            lines[child] = key_node.start_mark.line + 1
            deepest = max(deepest, 1 + _map_lines(file, value_node, child, lines, depths))
    elif isinstance(node, yaml.SequenceNode):
        for index, item in enumerate(node.value):
            lines[(*path, index)] = item.start_mark.line + 1
            deepest = max(deepest, 1 + _map_lines(file, item, (*path, index), lines, depths))
    return deepest


_STR_TAG = "tag:yaml.org,2002:str"
_SEQ_TAG = "tag:yaml.org,2002:seq"
_MAP_TAG = "tag:yaml.org,2002:map"
_SCALAR_TAGS = frozenset(f"tag:yaml.org,2002:{kind}" for kind in
                         ("null", "bool", "int", "float", "timestamp", "binary"))


class _NotPlain(Exception):
    """A node the fast path leaves to PyYAML's constructor."""


def construct_plain(loader: Any, node: yaml.Node) -> Any:
    """``loader.construct_document(node)``, several times faster on JSON-like data.

    PyYAML's general constructor spends most of its time on bookkeeping that maps with
    string keys, lists and scalars do not need, and case files and cassettes are nothing
    else; anything more (an explicit tag, a merge key ``<<``, a key that is not a string)
    goes to it whole, so the result is always the one it would give. Aliases stay shared.
    """
    try:
        return _PlainBuilder(loader).build(node)
    except _NotPlain:
        return loader.construct_document(node)


def load_yaml(text: str) -> Any:
    """``yaml.load(text, CSafeLoader)`` of a single document, with the fast constructor."""
    loader = _Loader(text)
    try:
        node = loader.get_single_node()
        return None if node is None else construct_plain(loader, node)
    finally:
        loader.dispose()


class _PlainBuilder:
    def __init__(self, loader: Any) -> None:
        self.loader = loader
        self.constructors: dict[str, Any] = loader.yaml_constructors
        self.built: dict[int, Any] = {}  # id(collection node) -> value: aliases share it

    def build(self, node: yaml.Node) -> Any:
        if type(node) is yaml.ScalarNode:
            if node.tag == _STR_TAG:
                return node.value
            if node.tag not in _SCALAR_TAGS:
                raise _NotPlain
            return self.constructors[node.tag](self.loader, node)
        if id(node) in self.built:
            return self.built[id(node)]
        if type(node) is yaml.SequenceNode and node.tag == _SEQ_TAG:
            items: list[Any] = []
            self.built[id(node)] = items
            items.extend([self.build(item) for item in node.value])
            return items
        if type(node) is yaml.MappingNode and node.tag == _MAP_TAG:
            return self._mapping(node)
        raise _NotPlain

    def _mapping(self, node: yaml.MappingNode) -> dict[str, Any]:
        mapping: dict[str, Any] = {}
        self.built[id(node)] = mapping
        for key_node, value_node in node.value:
            if type(key_node) is not yaml.ScalarNode or key_node.tag != _STR_TAG:
                raise _NotPlain
            mapping[key_node.value] = self.build(value_node)
        return mapping
