"""The ``toolbench`` command: check case files, print their schema, draw their flow.

``validate`` prints the same messages as collection (both go through ``casefile``);
``graph`` prints ``reporting.graph``'s drawing of the executor's own ``TRANSITIONS`` table,
so the picture cannot drift from what runs. ``import-bfcl`` and ``serve-local`` live in
their own modules, imported only when asked for, so the other commands work without their
dependencies.
"""

from __future__ import annotations

import argparse
import contextlib
import enum
import fnmatch
import importlib
import importlib.metadata
import json
import os
import sys
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .casefile import CaseFileErrors, LoadedCase, describe_errors, load_case_file
from .models.case import Case
from .reporting.graph import case_graph
from .settings import DEFAULT_FILES

SCHEMA_DIALECT = "https://json-schema.org/draft/2020-12/schema"  # what pydantic generates
SCHEMA_ID = "urn:pytest-toolbench:case-file"
SCHEMA_TITLE = "pytest-toolbench case file"
SCHEMA_PATH = Path(__file__).with_name("case.schema.json")
"""The committed copy of ``toolbench schema``, shipped in the package for editors."""

# As pytest's default ``norecursedirs``, so a directory validates what pytest would collect.
SKIPPED_DIRS = (".*", "*.egg", "_darcs", "build", "CVS", "dist", "node_modules", "venv", "{arch}")


class ExitCode(enum.IntEnum):
    OK = 0  # every file is valid / the command did its job
    INVALID = 1  # a case file has problems
    USAGE = 2  # the command line is wrong: a missing path, an unknown case name


class UsageError(Exception):
    """The command line asks for something that cannot be done; exit code 2."""


# ---------------------------------------------------------------------------- validate


def run_validate(args: argparse.Namespace) -> int:
    files = find_case_files(args.paths, args.glob or DEFAULT_FILES)
    problems, bad_files, cases = 0, 0, 0
    with _import_paths(files):
        for file in files:
            try:
                cases += len(load_case_file(file))
            except CaseFileErrors as errors:
                print(describe_errors(errors))
                problems, bad_files = problems + len(errors.errors), bad_files + 1
    counted = f"{_plural(len(files), 'file')}, {_plural(cases, 'case')}"
    if problems:
        print(f"{counted}: {_plural(problems, 'problem')} in {_plural(bad_files, 'file')}")
        return ExitCode.INVALID
    print(f"{counted}: ok")
    return ExitCode.OK


def find_case_files(paths: Sequence[Path], globs: Sequence[str]) -> list[Path]:
    """Named files as they are; directories searched for ``globs``, in a stable order."""
    files: list[Path] = []
    for path in paths:
        if path.is_dir():
            found = sorted(_walk(path, globs))
            if not found:
                raise UsageError(f"no case files ({', '.join(globs)}) under {path}")
            files.extend(found)
        elif path.exists():
            files.append(path)
        else:
            raise UsageError(f"no such file or directory: {path}")
    return list(dict.fromkeys(files))  # a file named twice is checked once


def _walk(directory: Path, globs: Sequence[str]) -> Iterator[Path]:
    for root, dirs, names in os.walk(directory):
        dirs[:] = [name for name in dirs if not _matches(name, SKIPPED_DIRS)]
        yield from (Path(root, name) for name in names if _matches(name, globs))


def _matches(name: str, globs: Sequence[str]) -> bool:
    return any(fnmatch.fnmatch(name, glob) for glob in globs)


@contextlib.contextmanager
def _import_paths(files: Sequence[Path]) -> Iterator[None]:
    """Put on ``sys.path`` what pytest would, so ``python:`` tools import as in collection.

    pytest (``--import-mode=prepend``, its default) prepends the package root of each
    conftest.py it loads. A console script's path starts at its own bin directory, so the
    working directory goes first as well, as with ``python -m pytest``.
    """
    cwd = Path.cwd()
    wanted = [cwd, *(root for file in files for root in _conftest_roots(file, cwd))]
    added = [entry for entry in dict.fromkeys(map(str, wanted)) if entry not in sys.path]
    sys.path[:0] = added
    try:
        yield
    finally:
        for entry in added:
            with contextlib.suppress(ValueError):
                sys.path.remove(entry)


def _conftest_roots(file: Path, top: Path) -> Iterator[Path]:
    """The package roots of the conftest.py files from ``file``'s directory up to ``top``."""
    directory = file.resolve().parent
    while True:
        if (directory / "conftest.py").is_file():
            root = directory
            while (root / "__init__.py").is_file():
                root = root.parent
            yield root
        if directory == top.resolve() or directory.parent == directory:
            return
        if not directory.is_relative_to(top.resolve()):
            return  # outside the project: only the file's own directory counts
        directory = directory.parent


def _plural(count: int, noun: str) -> str:
    return f"{count} {noun}{'' if count == 1 else 's'}"


# ---------------------------------------------------------------------------- schema


def case_schema() -> dict[str, Any]:
    """The JSON Schema of one case (one YAML document of a case file), from the models."""
    generated = Case.model_json_schema()
    generated.pop("title", None)
    return {"$schema": SCHEMA_DIALECT, "$id": SCHEMA_ID, "title": SCHEMA_TITLE, **generated}


def schema_text() -> str:
    return json.dumps(case_schema(), indent=2, ensure_ascii=False) + "\n"


def run_schema(args: argparse.Namespace) -> int:
    if args.output is None:
        sys.stdout.write(schema_text())
        return ExitCode.OK
    try:
        args.output.write_text(schema_text(), encoding="utf-8")
    except OSError as exc:
        raise UsageError(f"cannot write {args.output}: {exc.strerror or exc}") from None
    print(f"wrote the case-file schema to {args.output}")
    return ExitCode.OK


# ---------------------------------------------------------------------------- graph


def run_graph(args: argparse.Namespace) -> int:
    if not args.case_file.is_file():
        raise UsageError(f"no such case file: {args.case_file}")
    with _import_paths([args.case_file]):
        try:
            loaded = load_case_file(args.case_file)
        except CaseFileErrors as errors:
            print(describe_errors(errors), file=sys.stderr)
            return ExitCode.INVALID
    source = case_graph(_pick_case(loaded, args.name, args.case_file))
    print(f"```mermaid\n{source}```" if args.markdown else source, end="")
    return ExitCode.OK


def _pick_case(loaded: list[LoadedCase], name: str | None, file: Path) -> Case:
    by_name = {item.case.name: item.case for item in loaded}
    if name is None and len(by_name) == 1:
        return loaded[0].case
    if name is not None and name in by_name:
        return by_name[name]
    problem = f"has no case named {name!r}" if name is not None else f"holds {len(by_name)} cases"
    raise UsageError(f"{file} {problem}; name one of: {', '.join(by_name)}")


# ---------------------------------------------------------------------------- delegates


@dataclass(frozen=True)
class Delegate:
    """A subcommand owned by another module, whose ``main(argv)`` parses its own options."""

    module: str
    summary: str
    description: str


DELEGATES = {
    "import-bfcl": Delegate(
        "pytest_toolbench.bfcl",
        "turn Berkeley Function Calling Leaderboard files into case files",
        "Turn BFCL question and answer files into case files; "
        "'toolbench import-bfcl --help' lists its arguments.",
    ),
    "serve-local": Delegate(
        "pytest_toolbench.local_server",
        "start a local OpenAI-compatible model server (needs the [local] extra)",
        "Start a real local model server for trying live mode without an API key; "
        "'toolbench serve-local --help' lists its options.",
    ),
}


def run_delegate(command: str, argv: list[str]) -> int:
    """Import the command's module now and hand it the rest of the command line."""
    module_name = DELEGATES[command].module
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
    _add_validate(commands)
    _add_schema(commands)
    _add_graph(commands)
    for name, delegate in DELEGATES.items():
        # Listed for --help only: main() hands these to their module before parsing.
        commands.add_parser(name, help=delegate.summary, description=delegate.description,
                            add_help=False)
    return parser


def _add_validate(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    validate = commands.add_parser(
        "validate", help="check case files against the schema; exit 1 on problems",
        description="Check case files as collection does, printing every problem as "
        "file:line, key path and message. Exit 0 when all are valid, 1 when any is not, "
        "2 when a path does not exist.",
    )
    validate.add_argument("paths", nargs="+", type=Path, metavar="PATH",
                          help="a case file, or a directory searched for case files")
    validate.add_argument("--glob", action="append", metavar="PATTERN",
                          help="file-name pattern searched for in directories; repeat for "
                          f"several (default: {' '.join(DEFAULT_FILES)}, as ini toolbench_files)")
    validate.set_defaults(run=run_validate)


def _add_schema(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    schema = commands.add_parser(
        "schema", help="print the JSON Schema of a case file, for editors",
        description="Print the JSON Schema of one case (one YAML document of a case file), "
        "generated from the models that validate cases. Point an editor at it with "
        "'# yaml-language-server: $schema=PATH' as a case file's first line. "
        f"A copy ships with the package: {SCHEMA_PATH}",
    )
    schema.add_argument("--output", "-o", type=Path, metavar="PATH",
                        help="write the schema to PATH instead of printing it")
    schema.set_defaults(run=run_schema)


def _add_graph(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    graph = commands.add_parser(
        "graph", help="draw a case's executor flow as a Mermaid state diagram",
        description="Print the executor's state machine for each stage of a case as a "
        "Mermaid stateDiagram-v2, leaving out what the stage's settings rule out "
        "(the tool loop without run_tools, other_variant without stream: both, retry "
        "without retry:).",
    )
    graph.add_argument("case_file", type=Path, metavar="CASE_FILE", help="the case file")
    graph.add_argument("name", nargs="?", metavar="NAME",
                       help="the case to draw; needed when the file holds several")
    graph.add_argument("--markdown", action="store_true",
                       help="wrap the diagram in a ```mermaid fence, for Markdown pages")
    graph.set_defaults(run=run_graph)


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
        if command in DELEGATES:
            return run_delegate(command, args_list[1:])
        args = build_parser().parse_args(args_list)
        return int(args.run(args))
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
