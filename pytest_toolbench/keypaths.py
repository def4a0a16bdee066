"""Key paths: where a value sits in a case document, as ``("stages", 0, "expect")``.

Every layer names the value at fault by its key path (the case file's loader maps a path to
its line), so the type, its printed form and the error that carries one live here, below
all of them.
"""

from __future__ import annotations

from collections.abc import Sequence

KeyPath = tuple[str | int, ...]


class KeyedError(ValueError):
    """A validation error that knows the key path, below the field it was raised for, of
    the value at fault, so the message can name that value's own line."""

    def __init__(self, message: str, path: KeyPath = ()) -> None:
        super().__init__(message)
        self.message = message
        self.path = path


def format_key_path(path: Sequence[str | int]) -> str:
    """``("stages", 0, "expect")`` -> ``stages[0].expect``."""
    text = ""
    for part in path:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else str(part))
    return text
