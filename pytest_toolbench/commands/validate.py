"""``toolbench validate PATH...``: check case files by pytest's own collection of them.

``collect_cases`` runs ``pytest --collect-only`` over the paths in this process, so the
command accepts exactly what ``pytest`` collects: the same ini, conftest.py files and
``sys.path``, the same messages. ``graph`` collects through it too.
"""

from __future__ import annotations

import argparse
import contextlib
import fnmatch
import io
import sys
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from ..casefile.load import CaseFileErrors
from ..items import CaseFile, CaseItem
from ..report.failure import plural
from ..settings import DEFAULT_FILES, SETTINGS_KEY
from .usage import ExitCode, UsageError


def build_parser() -> argparse.ArgumentParser:
    validate = argparse.ArgumentParser(
        prog="toolbench validate",
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
    return validate


def main(argv: list[str]) -> int:
    return run(build_parser().parse_args(argv))


def run(args: argparse.Namespace) -> int:
    collected = collect_cases(args.paths, args.glob)
    for problem in collected.problems:
        print(problem.text)
    cases = len({(item.path, item.loaded.outline.name) for item in collected.items
                 if item.invalid is None})
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
        self._refusals: set[str] = set()

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
        """A case item; its case validated now if collection made it from the outline kept
        in pytest's cache (it validated when that was written: this checks it again)."""
        if not isinstance(item, CaseItem):
            return
        self.collected.items.append(item)
        errors = item.loaded.problems()
        where = item.nodeid.partition("::")[0]
        if errors is not None and not any(problem.where == where
                                          for problem in self.collected.problems):
            self.collected.problems.append(Problem(where, str(item.invalid),
                                                   len(errors.errors)))
        elif errors is None and item.refused and item.refused[0] not in self._refusals:
            # What an API cannot express fails the case's items over it: a problem of the
            # file, said once for all the case's models.
            self._refusals.update(item.refused)
            self.collected.problems.append(Problem(where, "\n".join(item.refused),
                                                   len(item.refused)))

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
