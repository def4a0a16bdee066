"""YAML text -> plain data, plus a map from key paths to 1-based line numbers.

The line map is the single source of truth for ``file:line`` in every message: schema
errors, matcher errors and failing expectations all look their key path up here.
"""

from __future__ import annotations

import itertools
import marshal
import os
import sys
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Protocol

import yaml

try:  # libyaml is several times faster; collection of large suites depends on it.
    from yaml import CSafeLoader as _SafeLoader
except ImportError:  # pragma: no cover - depends on how PyYAML was built
    from yaml import SafeLoader as _SafeLoader  # type: ignore[assignment]

from ..keypaths import KeyPath, format_key_path


class _Loader(_SafeLoader):
    """The safe loader, resolving the tag of a plain scalar once per text.

    No path resolvers are registered, so a node's tag depends on its kind alone, and a plain
    scalar's (``str``, ``int``, ``bool``...) on its text alone; matching the resolvers'
    regular expressions cost more than composing the node, and case files and cassettes
    repeat the same keys and values. The composer asks for every node's tag."""

    _plain_tags: ClassVar[dict[str, str]] = {}
    """Plain scalar text -> its tag, for short texts, up to ``_PLAIN_TAGS_KEPT`` of them."""

    def resolve(self, kind: type[yaml.Node], value: Any, implicit: Any) -> str:
        if kind is not yaml.ScalarNode:
            return _SEQ_TAG if kind is yaml.SequenceNode else _MAP_TAG
        if not implicit[0]:  # quoted, or a block scalar: text
            return _STR_TAG
        known = self._plain_tags.get(value)
        if known is not None:
            return known
        tag: str = _resolve(self, kind, value, implicit)
        if len(value) <= 64 and len(self._plain_tags) < _PLAIN_TAGS_KEPT:
            self._plain_tags[value] = tag
        return tag

    def descend_resolver(self, current_node: Any, current_index: Any) -> None:
        """Nothing to follow: no path resolvers."""

    def ascend_resolver(self) -> None:
        """Nothing to follow: no path resolvers."""


_PLAIN_TAGS_KEPT = 10_000
_resolve: Any = _SafeLoader.resolve

_MAX_DEPTH = 100
"""The deepest nesting a case file may have, aliases expanded. No case comes near it; much
deeper data overflows Python's recursion limit in the constructor and the matchers."""
_COMPOSER_SAFE_LENGTH = 4096
"""Text this short cannot nest deep enough (a level takes a character) to overflow the C
stack in libyaml's recursive composer, which it does, with a segfault, near 30,000 levels;
longer text has its depth checked on the event stream before it is composed."""
MAX_FILE_BYTES = 10 * 1024 * 1024
"""The largest case file read. Cases are written by people; bulk data belongs in a tool."""
MAX_VALUES = 200_000
"""The most values (keys, items, scalars) a case file may hold, aliases expanded. Composing
costs about 300 bytes and 4 microseconds a value, and every request sends the data again,
so a billion-laughs file or a million-key mapping is refused before either happens."""


class YamlProblem(ValueError):
    """YAML that parses but cannot be used (too deep, too large, recursive, a duplicate key),
    at a 1-based ``line`` (0: unknown) and key path."""

    def __init__(self, message: str, line: int = 0, path: KeyPath = ()) -> None:
        super().__init__(f"line {line}: {message}" if line else message)
        self.message = message
        self.line = line
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
    start_line: int = 1
    source: str = ""
    """The text of the whole file, which the document's lines are mapped from."""
    index: int = 0
    """Which of the file's documents this is (empty ones not counted)."""
    may_interpolate: bool = True
    """False when no text value or key of it holds ``${``: nothing of it is ever filled in
    (most suites write no placeholder), and its checks need not look."""
    packed: bytes | None = field(default=None, repr=False, compare=False)
    """The data as ``marshal`` bytes (``data`` None) until it is first needed: a document
    read back from the parsed-file cache whose case is not validated yet."""
    outline: Any = None
    """What validation noted of the document for later collections (``outline.Outline``,
    or ``outline.SHARED_SERVERS``); None: not validated, or not to be kept."""
    _lines: dict[KeyPath, int] | None = field(default=None, repr=False, compare=False)

    def unpacked(self) -> Any:
        """The document's data, unpacked from ``packed`` when first asked for."""
        if self.packed is not None and self.data is None:
            self.data = marshal.loads(self.packed)
        return self.data

    def pack(self) -> bytes:
        """The data as ``marshal`` bytes (ValueError: a value marshal cannot hold)."""
        if self.packed is None:
            self.packed = marshal.dumps(self.data)
        return self.packed

    @property
    def lines(self) -> dict[KeyPath, int]:
        """Key path -> 1-based line of the key (for mappings) or the item (for sequences).

        Mapped when first asked for: only messages need lines, and most cases never print
        one, so collection keeps no map per case (it cost as much as building the data).
        """
        if self._lines is None:
            self._lines = map_lines(self.source, self.index)
        return self._lines

    def line_of(self, path: Sequence[str | int]) -> int:
        """The line of ``path``, or of its nearest ancestor that the file spells out."""
        for end in range(len(path), 0, -1):
            line = self.lines.get(tuple(path[:end]))
            if line is not None:
                return line
        return self.start_line


class ParsedDocuments(Protocol):
    """Documents kept from an earlier parse of the same text (``cache.ParsedCache``)."""

    def get(self, file: Path, source: str) -> list[Document] | None: ...

    def put(self, file: Path, source: str, documents: list[Document]) -> None: ...


def load_documents(file: Path, text: str | None = None,
                   kept: ParsedDocuments | None = None) -> list[Document]:
    """Parse every YAML document of ``file``; raise CaseFileError on bad YAML, or on a file
    past the limits (``MAX_FILE_BYTES``, ``MAX_VALUES``, nesting). ``kept``: documents of
    an earlier parse of the same text, used instead of parsing, and given the new ones."""
    source = _read(file) if text is None else text
    if len(source) > MAX_FILE_BYTES:
        raise CaseFileError(file, None, _too_large(len(source.encode(errors="replace"))))
    documents = kept.get(file, source) if kept is not None else None
    if documents is None:
        documents = _parse(file, source)
        if kept is not None:
            kept.put(file, source, documents)
    return documents


def _parse(file: Path, source: str) -> list[Document]:
    try:
        _check_events(source, MAX_VALUES)
        return _compose(file, source)
    except YamlProblem as exc:
        raise CaseFileError(file, exc.line or None, exc.message, exc.path) from None
    except yaml.MarkedYAMLError as exc:
        too_deep = _depth_limit_of_pyyaml(exc)
        if too_deep is not None:
            raise CaseFileError(file, too_deep.line or None, too_deep.message) from None
        found, problem = syntax_error(exc)
        # libyaml puts an error at the end of the text on a line past the last one.
        line = min(found, len(source.splitlines()) or 1) if found else None
        raise CaseFileError(file, line, f"YAML syntax error: {problem}") from None
    except yaml.reader.ReaderError as exc:  # a control character: not a MarkedYAMLError
        # libyaml counts UTF-8 bytes; splitlines breaks lines where YAML does, on text
        # that (up to here) has passed the reader.
        before = source.encode()[: exc.position].decode(errors="ignore")
        line = len((before + "|").splitlines())
        problem = str(exc).partition("\n")[0]
        raise CaseFileError(file, line, f"YAML syntax error: {problem}") from None


def syntax_error(exc: yaml.MarkedYAMLError) -> tuple[int, str]:
    """The 1-based line (0: unknown) and the problem of a YAML syntax error.

    A quote never closed is reported where it opens: PyYAML marks the problem where the
    text (or the document) ends, and the quote it was scanning as the error's context.
    """
    opened = exc.context_mark
    if (opened is not None and exc.context == "while scanning a quoted scalar"
            and any(end in (exc.problem or "") for end in _ENDS)):
        return opened.line + 1, "a quote opens here and is never closed"
    mark = exc.problem_mark or exc.context_mark
    return (mark.line + 1 if mark else 0), exc.problem or exc.context or "invalid YAML"


_ENDS = ("unexpected end of stream", "unexpected document")
"""PyYAML's problem when a scalar runs to the end of the text, or into ``---``/``...``
(libyaml says "document indicator", PyYAML's Python scanner "document separator")."""


def _read(file: Path) -> str:
    """The file's text as text mode reads it; a file past MAX_FILE_BYTES is refused by its
    size, before it is read (and a special file that never ends, once that much is read)."""
    try:
        with file.open("rb") as handle:
            size = os.fstat(handle.fileno()).st_size
            data = handle.read(size + 1) if size <= MAX_FILE_BYTES else b""
            if len(data) > size:  # it grew, or a special file (size 0): read on, bounded
                data += handle.read(MAX_FILE_BYTES + 1 - len(data))
    except OSError as exc:
        raise CaseFileError(file, None, f"cannot read the file: {exc.strerror or exc}") from None
    if size > MAX_FILE_BYTES or len(data) > MAX_FILE_BYTES:
        raise CaseFileError(file, None, _too_large(size if size > MAX_FILE_BYTES else None))
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise CaseFileError(file, None, f"not UTF-8 text (byte {exc.start}: {exc.reason})") \
            from None
    return text.replace("\r\n", "\n").replace("\r", "\n")  # text mode's newlines


def _too_large(size: int | None) -> str:
    """``size``: the file's, when known (a special file has none, and no end)."""
    mib = 1024 * 1024
    limit = f"{MAX_FILE_BYTES // mib} MB"
    what = (f"is {size / mib:.1f} MB; a case file may be at most {limit}" if size is not None
            else f"is larger than {limit}, the most a case file may be")
    return f"the file {what} (bulk data belongs in a python tool that reads it)"


def _compose(file: Path, source: str) -> list[Document]:
    loader = _Loader(source)
    last_line = len(source.splitlines()) or 1
    documents: list[Document] = []
    budget = MAX_VALUES  # for the whole file: many documents must not add up past it
    try:
        for node in _documents(loader):
            data, values, placeholders = _build(file, loader, node, budget)
            start_line = min(node.start_mark.line + 1, last_line)
            documents.append(Document(data, start_line, source, len(documents), placeholders))
            budget -= values
        return documents
    finally:
        loader.dispose()


def map_lines(source: str, index: int) -> dict[KeyPath, int]:
    """The line map of document ``index`` of ``source`` (text that loaded as a case file)."""
    if not source:
        return {}
    loader = _Loader(source)
    try:
        node = next(itertools.islice(_documents(loader), index, None), None)
        if node is None:
            return {}
        mapper = _LineMapper(budget=MAX_VALUES)
        mapper.map(node, ())
    finally:
        loader.dispose()
    # libyaml marks an empty value at the very end of the text on a line past the last.
    last_line = len(source.splitlines()) or 1
    return {path: min(line, last_line) for path, line in mapper.lines.items()}


def _documents(loader: Any) -> Iterator[yaml.Node]:
    """The composed documents, but for empty ones (like the one a final ``---`` opens)."""
    while loader.check_node():
        node = loader.get_node()
        if node is not None and not _is_empty(node):
            yield node


def _is_empty(node: yaml.Node) -> bool:
    """A document with nothing in it, like the one a final ``---`` opens."""
    return (isinstance(node, yaml.ScalarNode) and node.tag == _NULL_TAG and node.value == ""
            and not node.style)


def _check_events(source: str, max_values: int | None) -> None:
    """Refuse, before libyaml composes it, text nested too deep for its recursive composer
    (or, past ``max_values``, holding too many values to compose): the event stream shows
    both at no cost in memory. Short text can do neither, and skips this second parse."""
    deep = len(source) > _COMPOSER_SAFE_LENGTH and _openers(source) > _COMPOSER_SAFE_LENGTH
    # A value takes at least one character, so text shorter than max_values holds fewer.
    many = max_values is not None and len(source) >= max_values
    if deep or many:
        _walk_events(source, max_values)


def _walk_events(source: str, max_values: int | None) -> None:
    """Raise the YamlProblem of the first level past ``_MAX_DEPTH`` or value past
    ``max_values`` in ``source``'s event stream."""
    depth = values = 0
    for event in yaml.parse(source, Loader=_Loader):
        if isinstance(event, yaml.CollectionEndEvent):
            depth -= 1
            continue
        if isinstance(event, yaml.CollectionStartEvent):
            depth += 1
            if depth > _MAX_DEPTH:
                raise _too_deep(_line(event), ())
        if isinstance(event, yaml.NodeEvent):  # a scalar, an alias or a collection
            values += 1
            if max_values is not None and values > max_values:
                raise YamlProblem(_too_many(max_values, expanded=False), _line(event))


def _depth_limit_of_pyyaml(exc: yaml.MarkedYAMLError) -> YamlProblem | None:
    """PyYAML's own limit on nesting, where it has one, worded as the product's.

    Some builds of PyYAML (the libyaml in PyYAML 6.0.4's wheels, for one; not 6.0.3's)
    stop at 1,000 levels, which the scanner may reach before an event past ``_MAX_DEPTH``
    is seen: a flow collection's opening bracket makes it read up to 1,024 characters
    ahead. Which of the two limits stops the text is no concern of the user's, so the
    message is the same: the product's, at the line PyYAML stopped at. None: ``exc`` is
    another error."""
    if _NESTING_PROBLEM not in (exc.problem or ""):
        return None
    mark = exc.problem_mark or exc.context_mark
    return _too_deep(mark.line + 1 if mark else 0, ())


_NESTING_PROBLEM = "maximum nesting depth"
"""How libyaml words its limit: ``exceeded maximum nesting depth``."""


def _line(event: yaml.Event) -> int:
    return event.start_mark.line + 1 if event.start_mark else 0


def _openers(source: str) -> int:
    """A bound on the nesting depth that costs a few ``str.count`` instead of a second parse:
    every collection opens with one of these (block mappings with their first ``:``)."""
    return sum(source.count(indicator) for indicator in "[{-:?")


def _too_deep(line: int, path: KeyPath) -> YamlProblem:
    return YamlProblem(f"nested deeper than {_MAX_DEPTH} levels", line, path)


def _too_many(limit: int, *, expanded: bool) -> str:
    what = "keys, items and scalars" + (", aliases expanded" if expanded else "")
    return (f"the file passes {limit:,} values ({what}) here; a case file may hold at most"
            " that many (bulk data belongs in a python tool that reads it)")


def _build(file: Path, loader: Any, node: yaml.Node, budget: int) -> tuple[Any, int, bool]:
    """The data of document ``node``, how many values it holds (aliases expanded) and
    whether a text in it holds ``${``, within the limits: at most ``budget`` values and
    ``_MAX_DEPTH`` levels, no duplicate key, no alias inside itself. When it is not, the
    line map says what and where."""
    builder = _PlainBuilder(loader, budget, _MAX_DEPTH)
    try:
        data, values = builder.build_document(node)
        return data, values, builder.placeholders
    except _OverLimit:
        _LineMapper(budget).map(node, ())  # raises the YamlProblem that says where
        raise YamlProblem("the file passes a limit of case files") from None
    except _NotPlain:  # a tag or a merge key: PyYAML's constructor, once the limits hold
        pass
    except _CONSTRUCTOR_ERRORS:
        raise _unreadable(file, node) from None
    _depth, values = _LineMapper(budget).map(node, ())
    try:
        return loader.construct_document(node), values, True  # placeholders: not looked for
    except _CONSTRUCTOR_ERRORS:
        raise _unreadable(file, node) from None


_CONSTRUCTOR_ERRORS = (ValueError, TypeError, LookupError, AttributeError)
"""What PyYAML's constructors let out on values such as 2024-02-30, ``!!int x`` or an
integer of over 4,300 digits."""


def _unreadable(file: Path, root: yaml.Node) -> CaseFileError:
    """The error that names the first scalar of ``root`` that cannot be read."""
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


_IN_PROGRESS = (-1, -1)


class _LineMapper:
    """One walk over a composed document: the line of every key and item, by key path, and
    the checks that need the whole graph, each refusal at its line: duplicate keys,
    recursive aliases, nesting deeper than ``_MAX_DEPTH`` and more than ``budget`` values
    once aliases are expanded. (``_PlainBuilder`` keeps the same limits without the lines;
    this walk says where they are passed.)

    The depth and value count of every node are kept by id, so an alias costs one look-up
    however often it is used (a billion-laughs file stays linear, and is refused at the
    first anchor that expands past the budget) and its lines are its anchor's.
    """

    def __init__(self, budget: int) -> None:
        self.budget = budget
        self.lines: dict[KeyPath, int] = {}
        """Key path -> 1-based line of the key (for mappings) or the item (for sequences)."""
        self.measured: dict[int, tuple[int, int]] = {}
        """id(node) -> (depth, values); ``_IN_PROGRESS`` while its children are walked."""

    def map(self, node: yaml.Node, path: KeyPath) -> tuple[int, int]:
        """Walk ``node`` at ``path``; return its depth and its value count, itself included."""
        known = self.measured.get(id(node))
        line = self.lines.get(path, node.start_mark.line + 1)
        if known is _IN_PROGRESS:
            raise YamlProblem("an alias inside the node it refers to: recursive data cannot be"
                              " sent as JSON", line, path)
        if len(path) + (known[0] if known else 0) > _MAX_DEPTH:
            raise _too_deep(line, path[:4])  # where it starts: the rest is [0][0]...
        if known is not None:
            return known
        self.measured[id(node)] = _IN_PROGRESS
        measure = self._children(node, path)
        if measure[1] > self.budget:
            raise YamlProblem(_too_many(MAX_VALUES, expanded=True), line, path)
        self.measured[id(node)] = measure
        return measure

    def _children(self, node: yaml.Node, path: KeyPath) -> tuple[int, int]:
        deepest = 0
        values = 1 + (len(node.value) if isinstance(node, yaml.MappingNode) else 0)  # keys
        for child, child_path in self._items(node, path):
            if type(child) is yaml.ScalarNode and len(child_path) <= _MAX_DEPTH:
                deepest, values = max(deepest, 1), values + 1  # a leaf: nothing to walk
                continue
            depth, count = self.map(child, child_path)
            deepest, values = max(deepest, depth + 1), values + count
        return deepest, values

    def _items(self, node: yaml.Node, path: KeyPath) -> Iterator[tuple[yaml.Node, KeyPath]]:
        """The children of ``node`` with their key paths, lines recorded on the way."""
        if isinstance(node, yaml.SequenceNode):
            for index, item in enumerate(node.value):
                self.lines[(*path, index)] = item.start_mark.line + 1
                yield item, (*path, index)
        elif isinstance(node, yaml.MappingNode):
            for key_node, value_node in node.value:
                key = key_node.value if isinstance(key_node, yaml.ScalarNode) else str(key_node)
                child = (*path, key)
                if child in self.lines:
                    raise YamlProblem(f"duplicate key '{key}'", key_node.start_mark.line + 1,
                                      child)
                self.lines[child] = key_node.start_mark.line + 1
                yield value_node, child


_STR_TAG = "tag:yaml.org,2002:str"
_NULL_TAG = "tag:yaml.org,2002:null"
_SEQ_TAG = "tag:yaml.org,2002:seq"
_MAP_TAG = "tag:yaml.org,2002:map"
_SCALAR_TAGS = frozenset(f"tag:yaml.org,2002:{kind}" for kind in
                         ("null", "bool", "int", "float", "timestamp", "binary"))


class _NotPlain(Exception):
    """A node the fast path leaves to PyYAML's constructor."""


class _OverLimit(Exception):
    """A document past a limit (too deep, too many values, a duplicate key, an alias inside
    itself): ``_LineMapper`` says which, and where."""


def construct_plain(loader: Any, node: yaml.Node) -> Any:
    """``loader.construct_document(node)``, several times faster on JSON-like data.

    PyYAML's general constructor spends most of its time on bookkeeping that maps with
    string keys, lists and scalars do not need, and case files and cassettes are nothing
    else; anything more (an explicit tag, a merge key ``<<``, a key that is not a string,
    a duplicate key, a recursive alias) goes to it whole, so the result is always the one
    it would give. Aliases stay shared.
    """
    try:
        return _PlainBuilder(loader).build_document(node)[0]
    except (_NotPlain, _OverLimit):
        return loader.construct_document(node)


def load_yaml(text: str) -> Any:
    """``yaml.load(text, CSafeLoader)`` of a single document, with the fast constructor.

    For text from elsewhere (cassettes): nesting that would crash libyaml or overflow
    Python's stack raises YamlProblem (a ValueError; "nested deeper than 100 levels" at
    its line, whether PyYAML or this module stopped it), as bad YAML raises yaml.YAMLError.
    """
    try:
        return _load_single(text)
    except yaml.MarkedYAMLError as exc:
        too_deep = _depth_limit_of_pyyaml(exc)
        if too_deep is None:
            raise
        raise too_deep from None


def _load_single(text: str) -> Any:
    _check_events(text, max_values=None)
    loader = _Loader(text)
    try:
        node = loader.get_single_node()
        return None if node is None else construct_plain(loader, node)
    except RecursionError:  # nesting too short to check first, too deep for Python
        pass
    finally:
        loader.dispose()
    _walk_events(text, max_values=None)  # says where it passes _MAX_DEPTH
    raise YamlProblem("nested too deep to read")


class _PlainBuilder:
    """Plain data from a composed document, counting its values and levels on the way, as
    ``_LineMapper`` counts them: an alias counts its anchor's values again, and reaches as
    deep as its anchor does below where it is used. Past ``max_values`` or ``max_depth``
    it stops (``_OverLimit``)."""

    def __init__(self, loader: Any, max_values: int = sys.maxsize,
                 max_depth: int = sys.maxsize) -> None:
        self.loader = loader
        self.constructors: dict[str, Any] = loader.yaml_constructors
        self.max_values = max_values
        self.max_depth = max_depth
        self.values = 0
        """Values built so far: keys, items and scalars, aliases expanded."""
        self.deepest = 0
        """The deepest level reached inside the collection being built."""
        self.built: dict[int, Any] = {}
        """id(collection node) -> its value: the aliases of a node share it."""
        self.measured: dict[int, tuple[int, int]] = {}
        """id(collection node) -> (levels below it, values in it), once it is built."""
        self.placeholders = False
        """Whether a text value or key built so far holds ``${``."""

    def build_document(self, node: yaml.Node) -> tuple[Any, int]:
        """The document's data and how many values it holds."""
        return self.build(node, 0), self.values

    def build(self, node: yaml.Node, depth: int) -> Any:
        self.values += 1
        if type(node) is yaml.ScalarNode:
            if depth > self.deepest:
                self.deepest = depth
                if depth > self.max_depth:
                    raise _OverLimit
            if node.tag == _STR_TAG:
                text: str = node.value
                if "${" in text:
                    self.placeholders = True
                return text
            if node.tag not in _SCALAR_TAGS:
                raise _NotPlain
            return self.constructors[node.tag](self.loader, node)
        key = id(node)
        if key in self.built:
            return self._again(key, depth)
        if depth > self.max_depth or self.values > self.max_values:
            raise _OverLimit
        values, outer_deepest = self.values - 1, self.deepest
        self.deepest = depth
        value: Any
        if type(node) is yaml.SequenceNode and node.tag == _SEQ_TAG:
            value = []
            self.built[key] = value
            value.extend([self.build(item, depth + 1) for item in node.value])
        elif type(node) is yaml.MappingNode and node.tag == _MAP_TAG:
            value = self._mapping(node, key, depth)
        else:
            raise _NotPlain
        if self.values > self.max_values:
            raise _OverLimit
        self.measured[key] = (self.deepest - depth, self.values - values)
        self.deepest = max(self.deepest, outer_deepest)
        return value

    def _again(self, key: int, depth: int) -> Any:
        """A collection met before, through an alias: one value, its values counted again."""
        measure = self.measured.get(key)
        if measure is None:  # an alias inside the collection it refers to
            raise _OverLimit
        levels, values = measure
        self.values += values - 1  # ``build`` counted it once already
        self.deepest = max(self.deepest, depth + levels)
        if depth + levels > self.max_depth or self.values > self.max_values:
            raise _OverLimit
        return self.built[key]

    def _mapping(self, node: yaml.MappingNode, key: int, depth: int) -> dict[str, Any]:
        mapping: dict[str, Any] = {}
        self.built[key] = mapping
        self.values += len(node.value)  # the keys
        for key_node, value_node in node.value:
            if type(key_node) is not yaml.ScalarNode or key_node.tag != _STR_TAG:
                raise _NotPlain
            name = key_node.value
            if "${" in name:
                self.placeholders = True
            if name in mapping:
                raise _OverLimit  # a duplicate key
            mapping[name] = self.build(value_node, depth + 1)
        return mapping
