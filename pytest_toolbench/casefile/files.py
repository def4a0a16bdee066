"""Files a case reads beside it: a system prompt (``system: {file: ...}``), a table of rows
(``parametrize: {file: ...}``).

Each is read relative to the case file's folder, while the case validates, within the
case-file size limit. What was read is noted, with the digest of its bytes, in the
validation's ``Reads``: the parsed-file cache keeps a case's outline only alongside those
digests, and uses it only while every file still has the same bytes (``reads_unchanged``).
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..keypaths import KeyedError
from .loader import MAX_FILE_BYTES

Read = tuple[str, bytes]
"""A file read: its absolute path and the digest of its bytes."""


@dataclass
class Reads:
    """Where a case file lies, and what its cases read beside it: the validation context
    (``Case.model_validate(data, context=...)``)."""

    folder: Path | None
    """The case file's folder; None: validated without a file (files cannot be read)."""
    read: list[Read] = field(default_factory=list)


def read_beside(context: Any, name: Any, what: str) -> tuple[Path, str]:
    """The path and text of ``name``, relative to the case file; KeyedError at ``file``
    when it is not a relative path or cannot be read as UTF-8 text."""
    if not isinstance(name, str) or not name:
        raise KeyedError(f"`file:` takes the path of {what}, relative to the case file",
                         ("file",))
    if not isinstance(context, Reads) or context.folder is None:
        raise KeyedError(f"{what} is read from a file only in a case file", ("file",))
    path = context.folder / name
    try:
        with path.open("rb") as handle:
            data = handle.read(MAX_FILE_BYTES + 1)
    except OSError as exc:
        raise KeyedError(f"cannot read {what} {name!r}: {exc.strerror or exc}",
                         ("file",)) from None
    if len(data) > MAX_FILE_BYTES:
        raise KeyedError(f"{name!r} is larger than {MAX_FILE_BYTES // (1024 * 1024)} MB, the"
                         " most a file a case reads may be", ("file",))
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise KeyedError(f"{name!r} is not UTF-8 text (byte {exc.start}: {exc.reason})",
                         ("file",)) from None
    context.read.append((str(path.resolve()), digest(data)))
    return path, text.replace("\r\n", "\n").replace("\r", "\n")


def digest(data: bytes) -> bytes:
    return hashlib.blake2b(data, digest_size=16).digest()


def reads_unchanged(reads: Sequence[Read]) -> bool:
    """Whether every file still holds the bytes it was read with."""
    for name, known in reads:
        try:
            data = Path(name).read_bytes()
        except OSError:
            return False
        if digest(data) != known:
            return False
    return True
