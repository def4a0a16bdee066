"""Atomic file writes: a temp file beside the target, flushed, then renamed over it.

A run killed mid-write leaves the previous file whole, and at worst a stray temp file
(``.NAME.XXXXXXXX.tmp``), which the next write of the same file removes. A file replaced
keeps its permission bits; a new one gets those the umask allows, as ``open`` would give.
"""

from __future__ import annotations

import os
import secrets
import stat
from pathlib import Path

_TEMP_SUFFIX = ".tmp"


def write_atomic(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    mode = _mode_of(path)
    fd, temp = _create_temp(path)
    try:
        if mode is not None:
            os.chmod(temp, mode)
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temp, path)
    except BaseException:
        temp.unlink(missing_ok=True)
        raise
    _remove_stray_temps(path)


def _mode_of(path: Path) -> int | None:
    """The permission bits of the file about to be replaced; None when there is none."""
    try:
        return stat.S_IMODE(path.stat().st_mode)
    except OSError:
        return None


def _create_temp(path: Path) -> tuple[int, Path]:
    """A new temp file beside ``path``, created with mode 0666 so that the umask applies
    (``tempfile.mkstemp`` makes every file 0600, private whatever the umask says)."""
    while True:
        temp = path.with_name(f".{path.name}.{secrets.token_hex(4)}{_TEMP_SUFFIX}")
        try:
            return os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666), temp
        except FileExistsError:  # pragma: no cover - 32 random bits: next to never
            continue


def _remove_stray_temps(path: Path) -> None:
    """Temp files of ``path`` left by a run killed mid-write (ours is renamed by now).

    Only names this module makes (``.NAME.`` + no dot + ``.tmp``) are touched; another
    process writing the same file at the same moment would lose its temp file, but two
    writers of one file race anyway, and the file itself is never half-written.
    """
    prefix = f".{path.name}."
    try:
        entries = list(os.scandir(path.parent))
    except OSError:
        return
    for entry in entries:
        middle = entry.name[len(prefix):-len(_TEMP_SUFFIX)]
        if (entry.name.startswith(prefix) and entry.name.endswith(_TEMP_SUFFIX) and middle
                and "." not in middle and entry.is_file(follow_symlinks=False)):
            Path(entry.path).unlink(missing_ok=True)
