"""Defaults that both the settings and the code they configure need to know (the wire
APIs are the registry's, ``apis.py``).

A leaf module: it imports nothing, so reading a default loads no library (the plugin
resolves its settings in every pytest run, case files or not).
"""

from __future__ import annotations

from typing import Final

CASSETTE_FOLDER: Final = "__cassettes__"
"""The folder beside each case file that holds its cassettes (unless ``cassette_dir``)."""

MATCH_TIMEOUT_S: Final = 10.0
"""How long the checks of one stage may run (``--toolbench-match-timeout``)."""
