"""The module pytest loads: options, the collection hook, the session's reports. Thin.

It costs a project nothing when it has no case file: this module imports only pytest and
the settings; the rest (``collect`` and all it needs) is imported with the first case file
collected, and ``collect`` then registers the hooks that concern case items.
"""

from __future__ import annotations

import fnmatch
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from . import stopping
from .defaults import CASSETTE_FOLDER
from .lookahead import LOOKAHEAD_KEY, Lookahead
from .settings import LATE_REQUESTS_KEY, OPTIONS, SETTINGS_KEY, Settings, summary_shown

if TYPE_CHECKING:
    from collections.abc import Generator, Iterator

    from .agent_fixture import ToolbenchAgent
    from .items import CaseFile
    from .report.json_report import CaseRecord, RunInfo


def pytest_addoption(parser: pytest.Parser) -> None:
    """Each option of ``OPTIONS`` as its flag and its ini twin (CLI > ini: ``Settings``);
    the flags' own default is None, so ``Settings`` can tell a flag given from one not."""
    group = parser.getgroup("toolbench", "toolbench: LLM tool-calling cases (*.case.yaml)")
    for option in OPTIONS:
        group.addoption(option.flag, dest=f"toolbench_{option.name}", default=None,
                        metavar=option.metavar, help=option.help_text)
        parser.addini(option.ini, option.help_text, type=option.ini_type,  # type: ignore[arg-type]
                      default=option.default if option.ini_type else None)
    group.addoption("--toolbench-record", dest="toolbench_record", action="store_true",
                    help="shorthand for --toolbench-mode=record: run live, rewrite cassettes")
    group.addoption("--toolbench-live", dest="toolbench_live", action="store_true",
                    help="shorthand for --toolbench-mode=live: run live, write nothing")
    group.addoption("--toolbench-dry-run", dest="toolbench_dry_run", action="store_true",
                    help="run nothing, send nothing: show each case item's first request"
                         " (credentials masked) and what it lacks to run; exit 1 if any"
                         " item lacks something")
    group.addoption("--toolbench-fault", dest="toolbench_fault", action="append",
                    default=None, metavar="KIND=VALUE@N",
                    help="inject a fault into every case's model requests, e.g."
                         " status=429@1 (the first request of each stage answered 429),"
                         " cut=2@3, mutate=empty@1, disconnect@2; repeatable")
    group.addoption("--toolbench-rejudge", dest="toolbench_rejudge", action="store_true",
                    help="replay the model from the cassettes and ask the judge live"
                         " (expect.judge criteria judged again; nothing is written, but"
                         " with --toolbench-record the new verdicts are)")


def pytest_configure(config: pytest.Config) -> None:
    config.stash[SETTINGS_KEY] = Settings.from_config(config)
    config.pluginmanager.register(SessionReports(config), "toolbench-reports")
    if getattr(config.option, "numprocesses", None) and not hasattr(config, "workerinput"):
        # pytest-xdist's controller collects nothing (no first case file to wait for) and
        # writes the reports: SIGTERM must not end it before they are written.
        stopping.install()


def pytest_unconfigure(config: pytest.Config) -> None:
    stopping.uninstall()  # installed with the first case file (items.py), if any


@pytest.hookimpl(tryfirst=True)
def pytest_keyboard_interrupt(excinfo: pytest.ExceptionInfo[BaseException]) -> None:
    """Ctrl-C, SIGTERM, SIGHUP, or an xdist worker told to stop: kill the stdio MCP servers
    now, before the session winds down. Their graceful stop (stdin closed, 2 s to exit,
    then terminated) is for a session that ends in its own time; one that is being stopped
    may be killed itself before it gets there (xdist interrupts a worker 5 s after asking
    it to stop and kills it 5 s later), which would leave the servers running. First of
    the hook's implementations: pytest's own formats the interrupted traceback, which took
    5 s on a busy machine."""
    from .mcp.processes import SERVER_PROCESSES

    SERVER_PROCESSES.kill_all()


@pytest.fixture
def toolbench_agent(request: pytest.FixtureRequest) -> Iterator[ToolbenchAgent]:
    """An agent test's proxy, cassette and checks: while the test runs, every SDK's base
    URL variable points at the plugin's proxy, which records or replays the requests by
    the toolbench flags (docs/agents.md)."""
    from .agent_fixture import agent_fixture
    from .items import session_runtime

    yield from agent_fixture(request, session_runtime(request.config))


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Generator[None, None, None]:
    """A ``toolbench_agent`` test's body runs under its socket guard: it may connect to the
    plugin's proxy and nowhere else (``agent_fixture.guarded_call``)."""
    if "toolbench_agent" not in getattr(item, "fixturenames", ()):
        return (yield)
    from .agent_fixture import guarded_call

    with guarded_call(item):
        return (yield)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]
                              ) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    """A ``toolbench_agent`` test's reports, as a case's: the session's credentials masked
    (``items.mask_test_report``), its record on them (``agent_fixture.record_test``)."""
    report = yield
    if "toolbench_agent" in getattr(item, "fixturenames", ()):
        from .agent_fixture import record_test
        from .items import mask_test_report

        mask_test_report(report, item.config)
        record_test(item, call, report)
    return report


def pytest_collect_file(file_path: Path, parent: pytest.Collector) -> CaseFile | None:
    globs = parent.config.stash[SETTINGS_KEY].files
    if any(fnmatch.fnmatch(file_path.name, glob) for glob in globs):
        from .items import CaseFile  # the first case file brings in the rest

        return CaseFile.from_parent(parent, path=file_path)
    return None


def pytest_ignore_collect(collection_path: Path) -> bool | None:
    """Cassette folders hold recorded answers, never tests: pytest does not walk them (a
    suite of a thousand cases has a thousand cassettes). None: the others decide."""
    return True if collection_path.name == CASSETTE_FOLDER else None


def pytest_collection_finish(session: pytest.Session) -> None:
    """Remember the final order so live cases can start ahead: after every plugin chose
    (-k, -m, --lf, and pytest-split's shard, which also deselects as late as it can)."""
    session.config.stash[LOOKAHEAD_KEY] = Lookahead(session.config, session.items)


@pytest.hookimpl(tryfirst=True)
def pytest_runtestloop(session: pytest.Session) -> bool | None:
    """``--toolbench-dry-run``: in place of running the items, each case item's first
    request and what it lacks; the items that lack something count as failed (exit 1)."""
    config = session.config
    if (not config.stash[SETTINGS_KEY].dry_run or config.option.collectonly
            or (session.testsfailed and not config.option.continue_on_collection_errors)):
        return None  # pytest's own loop: --collect-only, or the collection errors
    from .items import dry_run

    session.testsfailed += dry_run(session)
    return True


def pytest_report_header(config: pytest.Config) -> str:
    from .scrubbing import mask_urls

    settings = config.stash[SETTINGS_KEY]
    where = "cassettes" if not settings.mode.is_live else \
        f"{mask_urls(_base_urls_text(settings))} (unless a case sets endpoint.base_url)"
    return f"toolbench: mode={settings.mode.value}, answers from {where}"


def _base_urls_text(settings: Settings) -> str:
    """Where the session's APIs (the command line's, else the ini's, else chat) answer
    from: one URL, or each API's when they differ (Anthropic's and Gemini's defaults are
    their own)."""
    urls = {api: settings.base_url_for(None, api) for api in settings.apis_for(None)}
    if len(set(urls.values())) == 1:
        return next(iter(urls.values()))
    return ", ".join(f"{url} ({api})" for api, url in urls.items())


def _limits_text(rpm: float | None, tpm: float | None) -> str:
    given = [f"{name} {value:g}" for name, value in (("--toolbench-rpm", rpm),
                                                     ("--toolbench-tpm", tpm))
             if value is not None]
    return ", ".join(given)


class BudgetTally:
    """The token budget's figures over the session's case reports (from xdist workers
    too): tokens live cases used, cases the budget kept from starting, a worker's share."""

    def __init__(self) -> None:
        self.tokens = 0
        self.not_started = 0
        self.share: int | None = None

    def add(self, figures: dict[str, Any]) -> None:
        self.tokens += figures.get("tokens") or 0
        self.not_started += bool(figures.get("skipped"))
        self.share = figures.get("limit")

    def line(self, limit: int, source: str) -> str:
        """``token budget: 45 of 40 tokens used (--toolbench-max-tokens); 2 cases not
        started (skipped)``."""
        shared = f": {self.share} a worker" if self.share not in (None, limit) else ""
        cases = "case" if self.not_started == 1 else "cases"
        started = f"; {self.not_started} {cases} not started (skipped)" if self.not_started \
            else ""
        return f"token budget: {self.tokens} of {limit} tokens used ({source}{shared}){started}"


class SessionReports:
    """Gathers the case records of the session (from xdist workers too) and reports them.

    A record arrives as JSON text on its test report and is kept as that text (one string
    a case, which garbage collection never walks) until the reports at the end read it.
    """

    def __init__(self, config: pytest.Config) -> None:
        self.config = config
        self._arrived: list[str] = []
        """Each case's record as JSON text."""
        self._records: list[CaseRecord] | None = None
        self._budget = BudgetTally()
        self._limits = [0, 0, 0.0]
        self._late: dict[str, int] = {}
        """Requests the agent proxy refused for coming after their case had ended, by
        case."""
        """Requests, tokens and seconds waited on rate limits (--toolbench-rpm/-tpm)."""
        self._started = (datetime.now(timezone.utc), time.perf_counter())
        """When the session started: the reports say so, and how long it took."""

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        text = getattr(report, "toolbench", None)  # JSON text: it may come from a worker
        if text is not None:
            self._arrived.append(text)
            self._records = None
        figures = getattr(report, "toolbench_budget", None)
        if figures is not None:
            self._budget.add(figures)
        limits = getattr(report, "toolbench_limits", None)
        if limits is not None:
            self._limits = [a + b for a, b in zip(self._limits, limits)]
        self._add_late(getattr(report, "toolbench_late", None) or {})

    def _add_late(self, late: dict[str, int]) -> None:
        for name, count in late.items():
            self._late[name] = self._late.get(name, 0) + count

    def records(self) -> list[CaseRecord]:
        """The session's case records, in the order their reports arrived. (A method: pluggy
        reads every attribute of a plugin when it is registered.)"""
        if self._records is None:
            from .report.json_report import CaseRecord

            self._records = [CaseRecord.from_text(text) for text in self._arrived]
        return self._records

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        self._late_lines(terminalreporter)
        if not self._arrived or not summary_shown(self.config):
            return
        from .report.summary import render_summary

        writer = terminalreporter._tw
        terminalreporter.write_sep("=", "toolbench summary")
        terminalreporter.write(render_summary(self.records(), writer.fullwidth,
                                              writer.hasmarkup))
        from .report.provenance import model_mismatches

        for line in model_mismatches(self.records()):
            terminalreporter.write_line(f"model mismatch: {line}")
        settings = self.config.stash[SETTINGS_KEY]
        if settings.max_tokens is not None:
            terminalreporter.write_line(self._budget.line(settings.max_tokens,
                                                          settings.max_tokens_source))
        if settings.rpm is not None or settings.tpm is not None:
            requests, tokens, waited = self._limits
            terminalreporter.write_line(
                f"rate limits: {requests} requests, {tokens} tokens, {waited:.1f} s waited on"
                f" limits ({_limits_text(settings.rpm, settings.tpm)})")

    def _late_lines(self, terminalreporter: Any) -> None:
        """A line for each case whose agent left something running that sent requests after
        the case had ended: the proxy refused them, none counted in another case."""
        take = self.config.stash.get(LATE_REQUESTS_KEY, None)
        if take is not None:  # this process ran cases: what came after the last report
            self._add_late(take())
        for name, count in self._late.items():
            terminalreporter.write_line(
                f"late requests: {count} sent by the agent of {name} after its case ended,"
                " refused (403)")

    def pytest_sessionfinish(self) -> None:
        settings = self.config.stash[SETTINGS_KEY]
        if hasattr(self.config, "workerinput") or (settings.report is None
                                                    and settings.html is None):
            return  # xdist workers send their records to the controller, which writes once
        if settings.dry_run:
            return  # nothing ran: the last run's reports stay as they are
        run = self._run(settings)
        if settings.html is not None:
            from .report.html import write_html

            write_html(settings.html, self.records(), run=run)
        if settings.report is not None:
            from .report.json_report import report_document, write_report

            write_report(settings.report, report_document(self.records(), run))

    def _run(self, settings: Settings) -> RunInfo:
        """How this session ran, as the reports say it."""
        from .report.provenance import session_run
        from .scrubbing import mask_urls

        started, clock = self._started
        return session_run(settings.mode.value, mask_urls(_base_urls_text(settings)),
                           started, time.perf_counter() - clock, self.config.rootpath)

    def pytest_unconfigure(self) -> None:
        """The reports are written: the records need not outlive the session (pytest's
        last garbage collections would walk them all)."""
        self._arrived.clear()
        self._records = None
