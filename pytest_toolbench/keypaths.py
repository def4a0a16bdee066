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


class KeyedErrors(KeyedError):
    """Several problems found at once, by a check that looks at every key it knows rather
    than stopping at the first: each is told at its own line. As a single KeyedError it is
    the first of them."""

    def __init__(self, errors: Sequence[KeyedError]) -> None:
        super().__init__(errors[0].message, errors[0].path)
        self.errors = list(errors)


def raise_all(errors: Sequence[KeyedError]) -> None:
    """Raise ``errors``: nothing when there are none, the one alone, or all of them."""
    if len(errors) == 1:
        raise errors[0]
    if errors:
        raise KeyedErrors(errors)


def format_key_path(path: Sequence[str | int]) -> str:
    """``("stages", 0, "expect")`` -> ``stages[0].expect``."""
    text = ""
    for part in path:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else str(part))
    return text
