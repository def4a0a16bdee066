"""Where an agent case's module is imported: at collection, with every SDK's base URL
variable pointing at the session's proxy, so a client the module builds at import time
talks to the proxy in every case that follows.

The case schema imports the module when it validates ``agent.python``; the session sets
how (``set_environment``) with its first case file, and unsets it when it ends. Without a
session (the schema used on its own) the module is imported as it is.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext

Environment = Callable[[], AbstractContextManager[object]]

_environment: list[Environment] = []


def set_environment(environment: Environment | None) -> None:
    """From now on agent modules are imported within ``environment()`` (None: as they are)."""
    _environment[:] = [environment] if environment is not None else []


def importing() -> AbstractContextManager[object]:
    """The environment an agent module is imported in."""
    return _environment[0]() if _environment else nullcontext()
