"""The pytest plugin: options, collection of case files, reports. Thin; delegates."""

from __future__ import annotations

import fnmatch
import functools
import gc
import sys
from collections.abc import Generator
from pathlib import Path
from typing import Any

import pytest

from .collect import ENGINE_KEY, LOOKAHEAD_KEY, SETTINGS_KEY, CaseFile, CaseItem
from .engine import Engine
from .lookahead import Lookahead
from .models.case import Endpoint
from .reporting.json_report import case_record, write_report
from .reporting.summary import render_summary
from .scrubbing import mask_urls
from .settings import DEFAULT_FILES, OPTIONS, Settings

FROZEN_KEY = pytest.StashKey[bool]()


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("toolbench", "toolbench: LLM tool-calling cases (*.case.yaml)")
    for flag, name, metavar, help_text in OPTIONS:
        group.addoption(f"--toolbench-{flag}", dest=f"toolbench_{name}", default=None,
                        metavar=metavar, help=help_text)
        parser.addini(f"toolbench_{name}", help_text, default=None)
    group.addoption("--toolbench-record", dest="toolbench_record", action="store_true",
                    help="shorthand for --toolbench-mode=record: run live, rewrite cassettes")
    group.addoption("--toolbench-live", dest="toolbench_live", action="store_true",
                    help="shorthand for --toolbench-mode=live: run live, write nothing")
    group.addoption("--toolbench-files", dest="toolbench_files", default=None, metavar="GLOBS",
                    help="globs of case files, comma-separated (default: *.case.yaml,*.case.yml)")
    parser.addini("toolbench_files", "globs of case files, one per line", type="linelist",
                  default=list(DEFAULT_FILES))


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config: pytest.Config) -> None:
    # Registered first, so it runs last: after pytest's own end-of-session collections,
    # which then need not scan what collection froze.
    config.add_cleanup(functools.partial(_unfreeze, config))
    settings = Settings.from_config(config)
    config.stash[SETTINGS_KEY] = settings
    config.stash[ENGINE_KEY] = Engine(settings, Path(config.invocation_params.dir))
    config.pluginmanager.register(SessionReports(config), "toolbench-reports")


def pytest_unconfigure(config: pytest.Config) -> None:
    engine = config.stash.get(ENGINE_KEY, None)
    if engine is not None:
        engine.close()


def pytest_collect_file(file_path: Path, parent: pytest.Collector) -> CaseFile | None:
    globs = parent.config.stash[SETTINGS_KEY].files
    if any(fnmatch.fnmatch(file_path.name, glob) for glob in globs):
        return CaseFile.from_parent(parent, path=file_path)
    return None


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Remember the final order (after -k, -m, --lf) so live cases can start ahead."""
    config.stash[LOOKAHEAD_KEY] = Lookahead(config, items)


@pytest.hookimpl(trylast=True)
def pytest_collection_finish(session: pytest.Session) -> None:
    """Freeze what collection built: cases, schemas and compiled matchers live until the
    session ends, and a frozen object is not re-scanned by every later garbage collection
    (in a 10,000-case session those scans took a third of the time)."""
    if any(isinstance(item, CaseItem) for item in session.items):
        # No gc.collect() first: it would scan all of it once more. Collection's garbage is
        # freed by reference counting; a rare cycle waits for the unfreeze at the end.
        gc.freeze()
        session.config.stash[FROZEN_KEY] = True


def _unfreeze(config: pytest.Config) -> None:
    """Let the finished session's objects be collected again, when the process goes on.

    A command-line run (its arguments are the process's) exits right after: unfrozen, the
    interpreter's exit would scan them all once more, seconds for a large suite. An
    in-process run (pytester, an IDE calling ``pytest.main``) unfreezes, so a long-lived
    process does not keep every finished session.
    """
    if not config.stash.get(FROZEN_KEY, False):
        return
    if tuple(config.invocation_params.args) != tuple(sys.argv[1:]):
        gc.unfreeze()


def pytest_report_header(config: pytest.Config) -> str:
    settings = config.stash[SETTINGS_KEY]
    endpoint = settings.endpoint_for(Endpoint())
    where = "cassettes" if not settings.mode.is_live else f"{mask_urls(endpoint.base_url)}"\
        " (unless a case sets endpoint.base_url)"
    return f"toolbench: mode={settings.mode.value}, answers from {where}"


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]
                              ) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    report = yield
    if not isinstance(item, CaseItem):
        return report
    if call.when == "call" and item.result is None and call.excinfo is not None:
        # The plugin broke off the run with an unexpected exception: the case must still be
        # in the reports, failed, or a gate that reads them could pass without it.
        item.result = item.broken_result(call.excinfo)
    if call.when == "call" and item.result is not None:
        record = case_record(item.result, item.nodeid, _outcome(report))
        for key in ("latency_ms", "ttft_ms", "total_tokens", "tool_calls", "turns"):
            if record[key] is not None:
                report.user_properties.append((key, record[key]))
                item.user_properties.append((key, record[key]))  # junitxml reads teardown's
    elif call.when == "setup" and report.skipped:  # a skipped case never runs: report it too
        record = case_record(item.unrun_result(), item.nodeid, _outcome(report))
    else:
        return report
    report.toolbench = record  # type: ignore[attr-defined]  # travels with xdist reports
    return report


def _outcome(report: pytest.TestReport) -> str:
    if hasattr(report, "wasxfail"):
        return "xpassed" if report.passed else "xfailed"
    return report.outcome


class SessionReports:
    """Gathers the case records of the session (from xdist workers too) and reports them."""

    def __init__(self, config: pytest.Config) -> None:
        self.config = config
        self.records: list[dict[str, Any]] = []

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        record = getattr(report, "toolbench", None)
        if record is not None:
            self.records.append(record)

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        if not self.records or self.config.get_verbosity() < 0:
            return
        writer = terminalreporter._tw
        terminalreporter.write_sep("=", "toolbench summary")
        terminalreporter.write(render_summary(self.records, writer.fullwidth, writer.hasmarkup))

    def pytest_sessionfinish(self) -> None:
        path = self.config.stash[SETTINGS_KEY].report
        if path is None or hasattr(self.config, "workerinput"):
            return  # xdist workers send their records to the controller, which writes once
        outcomes = [record["outcome"] for record in self.records]
        counts = {outcome: outcomes.count(outcome) for outcome in sorted(set(outcomes))}
        write_report(path, self.records, {"cases": len(self.records), **counts})
