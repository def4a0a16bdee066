"""Parsed case files kept between runs, under pytest's cache directory.

Composing a case file's YAML is most of what collecting it costs. A file that parsed
within the limits leaves its documents' plain data here (``marshal``: the fastest way
back to dicts, lists and scalars), in an entry named after the file's path and holding
the digest of the text it was parsed from: an entry is used only for the very same text
(read by the same versions of the plugin, PyYAML and Python), never by its age, and a
changed file overwrites its entry. Validation and everything after it runs as on a first
run, so an entry changes how fast a file loads, never what it loads to.

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
from pathlib import Path
from typing import Any

import yaml

from . import loader
from .loader import Document

PARSED_FOLDER = "toolbench-parsed"
"""The folder of pytest's cache directory (``.pytest_cache/d/...``) that holds the entries."""
_MAGIC = b"toolbench-parsed-1\n"
_DIGEST = 32


def _salt() -> bytes:
    """What else the parse depends on: the parser's own code (this module and the loader,
    by their text), PyYAML's and Python's versions. An entry written by others is not used."""
    code = b"".join(Path(module).read_bytes() for module in (__file__, loader.__file__))
    return _digest(code + f"|{yaml.__version__}|{yaml.__with_libyaml__}|{sys.version}".encode())

Entry = list[tuple[Any, int, int, bool]]
"""Per document: its data, first line, index in the file and whether it may interpolate."""


class ParsedCache:
    """Entries in ``folder``, one per case file path."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.hits = 0
        self.misses = 0

    def get(self, file: Path, source: str) -> list[Document] | None:
        """The documents ``source`` (the text of ``file``) parsed to, when an entry holds
        exactly them; else None."""
        try:
            blob = self._path(file).read_bytes()
        except OSError:
            blob = b""
        documents = _decode(blob, _content_digest(source), source)
        if documents is None:
            self.misses += 1
        else:
            self.hits += 1
        return documents

    def put(self, file: Path, source: str, documents: list[Document]) -> None:
        """Keep ``documents`` for ``source``. Data marshal cannot hold exactly (a date, a
        binary value taken apart) is not kept; a folder that cannot be written is not used."""
        try:
            payload = marshal.dumps([(document.data, document.start_line, document.index,
                                      document.may_interpolate) for document in documents])
        except ValueError:
            return
        blob = _MAGIC + _content_digest(source) + _digest(payload) + payload
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


def _digest(data: bytes) -> bytes:
    return hashlib.blake2b(data, digest_size=_DIGEST).digest()


def _content_digest(source: str) -> bytes:
    return _digest(_SALT + source.encode("utf-8", "surrogatepass"))


_SALT = _salt()


def _decode(blob: bytes, content: bytes, source: str) -> list[Document] | None:
    header = len(_MAGIC) + 2 * _DIGEST
    if (len(blob) < header or not blob.startswith(_MAGIC)
            or blob[len(_MAGIC):len(_MAGIC) + _DIGEST] != content):
        return None
    payload = blob[header:]
    if blob[len(_MAGIC) + _DIGEST:header] != _digest(payload):
        return None  # written in part, or changed since
    try:
        entries = marshal.loads(payload)
    except (ValueError, EOFError, TypeError):
        return None
    if not _well_formed(entries):
        return None
    return [Document(data, start_line, source, index, may_interpolate)
            for data, start_line, index, may_interpolate in entries]


def _well_formed(entries: Any) -> bool:
    return isinstance(entries, list) and all(
        isinstance(entry, tuple) and len(entry) == 4 and isinstance(entry[1], int)
        and isinstance(entry[2], int) and isinstance(entry[3], bool) for entry in entries)
