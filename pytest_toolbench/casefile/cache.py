"""Parsed YAML files kept between runs, under pytest's cache directory: case files, and the
cassettes replay reads.

Composing a file's YAML is most of what collecting a case file or reading a cassette
costs. A file that parsed within the limits leaves its plain data here (``marshal``: the
fastest way back to dicts, lists and scalars), in an entry named after the file's path and
holding the digest of the exact bytes it was parsed from: an entry is used only for the
very same bytes (read by the same versions of the parser, PyYAML and Python), never by its
age, and a changed file overwrites its entry. Case files and cassettes keep their entries
in folders of their own (``PARSED_FOLDER``, ``CASSETTE_FOLDER``). Validation and
everything after it runs as on a first run, so an entry changes how fast a file loads,
never what it loads to.

An entry that cannot be read back exactly (truncated, corrupt, from another version) is
a miss: the file is parsed again and the entry rewritten. Files with YAML errors leave
no entry (their message needs the parse anyway). Without pytest's cache
(``-p no:cacheprovider``) nothing is kept and every file is parsed.
"""

from __future__ import annotations

import hashlib
import marshal
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from . import loader
from .loader import Document

PARSED_FOLDER = "toolbench-parsed"
"""The folder of pytest's cache directory (``.pytest_cache/d/...``) that holds the entries."""
CASSETTE_FOLDER = "toolbench-cassettes"
"""The folder of the entries of parsed cassettes (``transport/cassette.py``)."""
_MAGIC = b"toolbench-parsed-1\n"
CASSETTE_MAGIC = b"toolbench-cassette-1\n"
_DIGEST = 32


def _salt() -> bytes:
    """What else the parse depends on: the parser's own code (this module and the loader,
    by their text), PyYAML's and Python's versions. An entry written by others is not used."""
    code = b"".join(Path(module).read_bytes() for module in (__file__, loader.__file__))
    return _digest(code + f"|{yaml.__version__}|{yaml.__with_libyaml__}|{sys.version}".encode())

Entry = list[tuple[Any, int, int, bool]]
"""Per document: its data, first line, index in the file and whether it may interpolate."""


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
    """Parsed case files: their documents, one entry per case file path."""

    def get(self, file: Path, source: str) -> list[Document] | None:
        """The documents ``source`` (the text of ``file``) parsed to, when an entry holds
        exactly them; else None."""
        entries = self.data(file, _encoded(source), _well_formed)
        if entries is None:
            return None
        return [Document(data, start_line, source, index, may_interpolate)
                for data, start_line, index, may_interpolate in entries]

    def put(self, file: Path, source: str, documents: list[Document]) -> None:
        """Keep ``documents`` for ``source``."""
        self.keep(file, _encoded(source), [
            (document.data, document.start_line, document.index, document.may_interpolate)
            for document in documents])


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
        isinstance(entry, tuple) and len(entry) == 4 and isinstance(entry[1], int)
        and isinstance(entry[2], int) and isinstance(entry[3], bool) for entry in entries)
