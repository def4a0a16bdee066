"""What every ``toolbench`` subcommand shares: its exit codes, and the usage error that
``cli.main`` prints as ``toolbench COMMAND: error: ...`` with exit code 2."""

from __future__ import annotations

import enum


class ExitCode(enum.IntEnum):
    OK = 0  # every file is valid / the command did its job
    INVALID = 1  # a case file has problems
    USAGE = 2  # the command line is wrong: a missing path, an unknown case name


class UsageError(Exception):
    """The command line asks for something that cannot be done; exit code 2."""
