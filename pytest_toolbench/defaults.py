"""Defaults, and the wire APIs' names, that both the settings and the code they configure
need to know.

A leaf module: it imports nothing, so reading a default loads no library (the plugin
resolves its settings in every pytest run, case files or not).
"""

from __future__ import annotations

from typing import Final

CASSETTE_FOLDER: Final = "__cassettes__"
"""The folder beside each case file that holds its cassettes (unless ``cassette_dir``)."""

MATCH_TIMEOUT_S: Final = 10.0
"""How long the checks of one stage may run (``--toolbench-match-timeout``)."""

API_PATHS: Final = {"chat": "chat/completions", "responses": "responses", "messages": "messages"}
"""The wire APIs a case can speak, and where each one's requests go below the base URL."""

API_NAMES: Final = tuple(API_PATHS)

DEFAULT_KEY_ENVS: Final = {"chat": "OPENAI_API_KEY", "responses": "OPENAI_API_KEY",
                           "messages": "ANTHROPIC_API_KEY"}
"""Where each API's key is read from when no setting names the variable."""


def api_names(text: str) -> tuple[str, ...]:
    """``"chat, responses"``: the wire APIs a comma-separated list names, each once, in the
    order given; ValueError naming the first unknown one. The command line, the ini and
    ``toolbench conform --api`` all read API lists with it."""
    names = tuple(dict.fromkeys(part.strip() for part in text.split(",") if part.strip()))
    unknown = next((name for name in names if name not in API_PATHS), None)
    if unknown is not None:
        raise ValueError(f"unknown API {unknown!r}; choose from {', '.join(API_NAMES)}")
    return names
