"""The ``toolbench`` command: one table of subcommands, each a module of its own.

Every subcommand has the same shape: a module under ``commands/`` with ``build_parser()``
and ``main(argv) -> int``, imported only when asked for, so a command works without the
others' dependencies (``serve-local`` needs the [local] extra, ``import-bfcl`` nothing
more). ``main`` hands a command the rest of the command line and prints a ``UsageError``
as ``toolbench COMMAND: error: ...`` with exit code 2.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.metadata
import sys
from dataclasses import dataclass

from .usage import ExitCode, UsageError

# ---------------------------------------------------------------------------- commands


@dataclass(frozen=True)
class Command:
    """A subcommand: the module whose ``main(argv)`` parses its options and runs it, and
    the line ``toolbench --help`` shows for it."""

    module: str
    summary: str


COMMANDS = {
    "validate": Command(
        "pytest_toolbench.commands.validate",
        "check case files against the schema; exit 1 on problems",
    ),
    "schema": Command(
        "pytest_toolbench.commands.schema",
        "print the JSON Schema of a case file, for editors",
    ),
    "graph": Command(
        "pytest_toolbench.commands.graph",
        "draw a case's executor flow as a Mermaid state diagram",
    ),
    "import-bfcl": Command(
        "pytest_toolbench.commands.bfcl",
        "turn Berkeley Function Calling Leaderboard files into case files",
    ),
    "serve-local": Command(
        "pytest_toolbench.commands.local_server",
        "start a local OpenAI-compatible model server (needs the [local] extra)",
    ),
    "html": Command(
        "pytest_toolbench.commands.html",
        "render a JSON report as one self-contained HTML page",
    ),
    "diff": Command(
        "pytest_toolbench.commands.diff",
        "compare two JSON reports or cassette folders; exit 1 when a verdict regressed",
    ),
    "merge": Command(
        "pytest_toolbench.commands.merge",
        "join the JSON reports of a suite's shards into one report",
    ),
    "conform": Command(
        "pytest_toolbench.commands.conform",
        "run the tool-calling probes against a server; print its conformance matrix",
    ),
}


def run_command(command: str, argv: list[str]) -> int:
    """Import the command's module now and hand it the rest of the command line."""
    module_name = COMMANDS[command].module
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name == module_name:
            raise UsageError(f"not available in this install ({module_name} is missing); "
                             "reinstall pytest-toolbench") from None
        hint = ' (pip install "pytest-toolbench[local]")' if command == "serve-local" else ""
        raise UsageError(f"needs the Python module {exc.name!r}, which is not installed{hint}"
                         ) from None
    return int(module.main(argv) or 0)


# ---------------------------------------------------------------------------- parser


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="toolbench",
        description="Tools for pytest-toolbench case files (*.case.yaml). "
        "Run the cases themselves with pytest.",
        epilog="Run 'toolbench COMMAND --help' for a command's options.",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {_version()}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name, command in COMMANDS.items():
        # Listed for --help only: main() hands each to its module before parsing.
        commands.add_parser(name, help=command.summary, add_help=False)
    return parser


def _version() -> str:
    try:
        return importlib.metadata.version("pytest-toolbench")
    except importlib.metadata.PackageNotFoundError:  # running from a source tree
        return "unknown"


# ---------------------------------------------------------------------------- main


def main(argv: list[str] | None = None) -> int:
    """Run ``toolbench`` with ``argv`` (default: the process's); return the exit code."""
    args_list = list(sys.argv[1:] if argv is None else argv)
    command = args_list[0] if args_list else None
    try:
        if command in COMMANDS:
            return run_command(command, args_list[1:])
        build_parser().parse_args(args_list)  # --help, --version, or a usage error
        return ExitCode.USAGE
    except UsageError as error:
        print(f"toolbench {command}: error: {error}", file=sys.stderr)
        return ExitCode.USAGE
    except SystemExit as exit_:  # argparse's --help, --version and usage errors
        return _exit_code(exit_)


def _exit_code(exit_: SystemExit) -> int:
    """The code ``sys.exit`` was given, as the process would have exited with it."""
    if exit_.code is None or isinstance(exit_.code, int):
        return exit_.code or 0
    print(exit_.code, file=sys.stderr)  # sys.exit("message") prints it and exits 1
    return 1


if __name__ == "__main__":
    sys.exit(main())
