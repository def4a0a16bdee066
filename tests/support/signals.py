"""A pytest child process that takes Ctrl-C, whatever the test run was started from."""

from __future__ import annotations

import sys

_PYTEST_TAKING_SIGINT = (
    "import signal, sys; signal.signal(signal.SIGINT, signal.default_int_handler);"
    " import pytest; sys.exit(pytest.console_main())"
)


def interruptible_pytest() -> list[str]:
    """The command that starts ``python -m pytest`` with SIGINT as KeyboardInterrupt, as
    Ctrl-C gives it; the arguments follow it.

    Ignored signals are inherited, and a background job of a non-interactive shell (or a
    ``nohup``) starts with SIGINT ignored; a Python started that way leaves it ignored,
    and a test that interrupts its child would see the child run on.
    """
    return [sys.executable, "-c", _PYTEST_TAKING_SIGINT]
