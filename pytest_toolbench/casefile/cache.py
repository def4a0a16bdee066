"""Parsed YAML files kept between runs, under pytest's cache directory: case files, and the
cassettes replay reads.

Composing a file's YAML is most of what collecting a case file or reading a cassette
costs. A file that parsed within the limits leaves its plain data here (``marshal``: the
fastest way back to dicts, lists and scalars), in an entry named after the file's path and
holding the digest of the exact bytes it was parsed from: an entry is used only for the
very same bytes (read by the same plugin code and the same versions of Python, PyYAML and
pydantic), never by its age, and a changed file overwrites its entry. Case files and
cassettes keep their entries in folders of their own (``PARSED_FOLDER``,
``CASSETTE_FOLDER``).

A case file's entry also holds, once its cases validated, their outlines
(``outline.Outline``): what collection asks of each, and the digests of the files a case
read beside it (a table of rows, a system prompt): an entry is used only while those
files, too, hold the same bytes. A run that reads them back makes the
items from the outlines, and each case is validated when it first runs, as it would have
been at collection; an entry changes how fast a file loads, never what it loads to.

An entry that cannot be read back exactly (truncated, corrupt, from another version) is
a miss: the file is parsed again and the entry rewritten. Files with YAML errors leave
no entry (their message needs the parse anyway). Without pytest's cache
(``-p no:cacheprovider``) nothing is kept and every file is parsed and validated.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import marshal
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from .files import reads_unchanged
from .loader import Document
from .outline import SHARED_SERVERS, Outline

PARSED_FOLDER = "toolbench-parsed"
"""The folder of pytest's cache directory (``.pytest_cache/d/...``) that holds the entries."""
CASSETTE_FOLDER = "toolbench-cassettes"
"""The folder of the entries of parsed cassettes (``transport/cassette.py``)."""
_MAGIC = b"toolbench-parsed-2\n"
CASSETTE_MAGIC = b"toolbench-cassette-1\n"
_DIGEST = 32


def _salt() -> bytes:
    """What else a parse and an outline depend on: the plugin's own code (every module of
    the package, by its text: the parser, the schema, the matchers and the wire APIs'
    checks), and the versions of PyYAML, pydantic and Python. An entry written by others
    is not used."""
    package = Path(__file__).resolve().parent.parent
    code = b"".join(module.read_bytes() for module in sorted(package.rglob("*.py")))
    versions = [yaml.__version__, str(yaml.__with_libyaml__), sys.version,
                *(_version(name) for name in ("pydantic", "pydantic-core"))]
    return _digest(code + "|".join(versions).encode())


def _version(distribution: str) -> str:
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return "-"

Entry = list[tuple[bytes, int, int, bool, Any]]
"""Per document: its data (``marshal`` bytes), first line, index in the file, whether it may
interpolate, and its outline as plain data (None: not known)."""


class KeptParses:
    """Entries in ``folder``, one per file path, each the plain data (a list) a parse of the
    file's exact bytes gave; ``magic`` names the kind of file, so no entry is read as
    another kind's. ``hits`` and ``misses`` count look-ups."""

    def __init__(self, folder: Path, magic: bytes = _MAGIC) -> None:
        self.folder = folder
        self.magic = magic
        self.hits = 0
        self.misses = 0

    def data(self, file: Path, content: bytes,
             well_formed: Callable[[list[Any]], bool] = lambda data: True) -> list[Any] | None:
        """What the parse of ``content`` (the bytes of ``file``) gave, when an entry holds
        exactly that and it is ``well_formed``; else None."""
        try:
            with open(self._path(file), "rb", buffering=0) as entry:  # unbuffered: cheaper
                blob = entry.read()
        except OSError:
            blob = b""
        data = _decode(blob, self.magic, _content_digest(content))
        if data is None or not well_formed(data):
            self.misses += 1
            return None
        self.hits += 1
        return data

    def keep(self, file: Path, content: bytes, data: list[Any]) -> None:
        """Keep ``data`` for ``content``. Data marshal cannot hold exactly (a date, a
        binary value taken apart) is not kept; a folder that cannot be written is not used."""
        try:
            payload = marshal.dumps(data)
        except ValueError:
            return
        blob = self.magic + _content_digest(content) + _digest(payload) + payload
        path = self._path(file)
        temporary = path.with_name(f"{path.name}.{os.getpid()}.tmp")
        try:
            self.folder.mkdir(parents=True, exist_ok=True)
            temporary.write_bytes(blob)
            os.replace(temporary, path)  # whole or not at all, for xdist's workers too
        except OSError:
            temporary.unlink(missing_ok=True)

    def _path(self, file: Path) -> Path:
        return self.folder / hashlib.blake2b(os.fsencode(file.absolute()),
                                             digest_size=16).hexdigest()


class ParsedCache(KeptParses):
    """Parsed case files: their documents, and the outlines of their cases once known; one
    entry per case file path."""

    def get(self, file: Path, source: str) -> list[Document] | None:
        """The documents ``source`` (the text of ``file``) parsed to, when an entry holds
        exactly them; else None. Their data stays packed until asked for."""
        entries = self.data(file, _encoded(source), _well_formed)
        if entries is None:
            return None
        documents = [Document(None, start_line, source, index, may_interpolate, packed,
                              _outline(outline))
                     for packed, start_line, index, may_interpolate, outline in entries]
        if not all(reads_unchanged(document.outline.reads) for document in documents
                   if isinstance(document.outline, Outline)):
            self.hits -= 1  # a file a case reads changed: parsed and validated again
            self.misses += 1
            return None
        return documents

    def put(self, file: Path, source: str, documents: list[Document]) -> None:
        """Keep ``documents`` for ``source``, with the outlines they hold."""
        try:
            entries = [(document.pack(), document.start_line, document.index,
                        document.may_interpolate, _outline_data(document.outline))
                       for document in documents]
        except ValueError:  # a value marshal cannot hold (a date)
            return
        self.keep(file, _encoded(source), entries)


def _outline(data: Any) -> Outline | str | None:
    if data == SHARED_SERVERS:
        return SHARED_SERVERS
    return Outline.from_data(data) if data is not None else None


def _outline_data(outline: Outline | str | None) -> Any:
    if isinstance(outline, Outline):
        return outline.to_data() if outline.keepable else None
    return outline


def _encoded(source: str) -> bytes:
    return source.encode("utf-8", "surrogatepass")


def _digest(data: bytes) -> bytes:
    return hashlib.blake2b(data, digest_size=_DIGEST).digest()


def _content_digest(content: bytes) -> bytes:
    return _digest(_SALT + content)


_SALT = _salt()


def _decode(blob: bytes, magic: bytes, content: bytes) -> list[Any] | None:
    header = len(magic) + 2 * _DIGEST
    if (len(blob) < header or not blob.startswith(magic)
            or blob[len(magic):len(magic) + _DIGEST] != content):
        return None
    payload = blob[header:]
    if blob[len(magic) + _DIGEST:header] != _digest(payload):
        return None  # written in part, or changed since
    try:
        data = marshal.loads(payload)
    except (ValueError, EOFError, TypeError):
        return None
    return data if isinstance(data, list) else None


def _well_formed(entries: list[Any]) -> bool:
    return all(
        isinstance(entry, tuple) and len(entry) == 5 and isinstance(entry[0], bytes)
        and isinstance(entry[1], int) and isinstance(entry[2], int)
        and isinstance(entry[3], bool) for entry in entries)
