"""Case files and case items: what pytest collects, runs and reports.

The plugin imports this module when it meets the first case file. Collecting a file read
back outlined from the cache (``casefile/outline.py``) needs little more than PyYAML's
version; pydantic and the case schema come with the first case validated, and the runner
with httpx2 and transitions with the first case run (``_runtime``). jsonschema comes with
the first ``$schema``, the regex package with the first ``$regex`` that ``re`` cannot be
trusted with, rich with the first summary, the case records with the first one a summary
or report reads.
"""

from __future__ import annotations

import atexit
import contextlib
import functools
import gc
from collections.abc import Callable, Generator, Iterator, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from . import stopping
from .agent_imports import set_environment
from .apis import AGENT, case_label
from .budget import BudgetSpent, TokenBudget
from .casefile.cache import CASSETTE_FOLDER, CASSETTE_MAGIC, PARSED_FOLDER, KeptParses, ParsedCache
from .casefile.load import CaseFileErrors, LoadedCase, describe_errors, load_case_file
from .keypaths import KeyPath
from .lookahead import LOOKAHEAD_KEY
from .marks import MarkRefused, case_marks
from .settings import LATE_REQUESTS_KEY, SETTINGS_KEY, records_read

if TYPE_CHECKING:
    from .records import CaseResult
    from .run.runner import CaseRun
    from .session import SessionRuntime

RUNTIME_KEY = pytest.StashKey["SessionRuntime"]()
PARSED_KEY = pytest.StashKey["ParsedCache | None"]()
"""Case files parsed by earlier runs, under pytest's cache directory (None without it)."""


AHEAD_FACTOR = 8
"""Live cases are started at most ``AHEAD_FACTOR x concurrency`` items ahead of the one
pytest runs: finished ones wait there for their turn to be reported."""


class CaseFailed(Exception):
    """The case ran and did not pass; ``repr_failure`` prints its story."""

    def __init__(self, result: CaseResult) -> None:
        super().__init__(result.case)
        self.result = result


class CaseFile(pytest.File):
    """A ``*.case.yaml`` file: one item per case, model and wire API."""

    @functools.cached_property
    def shown(self) -> Path:
        """The file as the user would name it: relative to where pytest was started, when
        it lies below it."""
        return _display(self.config, self.path)

    def collect(self) -> list[CaseItem]:
        with _collector_paused():  # what is made here lives on as the file's items
            return self._items()

    def _items(self) -> list[CaseItem]:
        _start_session(self.config)
        kept = self.config.stash[PARSED_KEY]
        try:
            loaded = load_case_file(self.path, kept)
        except CaseFileErrors as errors:
            raise self.CollectError(self.described(errors)) from None
        settings = self.config.stash[SETTINGS_KEY]
        items: list[CaseItem] = []
        try:
            for case in loaded:
                outline = case.outline
                if outline.api == AGENT:  # its agent's requests say which APIs
                    apis: tuple[str, ...] = (AGENT,)
                    refusals: dict[str, Refusal | None] = {AGENT: None}
                else:
                    apis = settings.apis_for(outline.api, outline.only)
                    refusals = {api: self._refusal(case, api, settings.models) for api in apis}
                if case.outline.wants_judge and settings.judge_model_for(None) is None:
                    raise self.CollectError(self._no_judge(case))
                for row in outline.rows or (None,):
                    for model in settings.models or outline.models:
                        items.extend(self._item(case, model, api, row, refusals[api])
                                     for api in apis)
        except CaseFileErrors as errors:  # an outlined case validated for other models
            raise self.CollectError(self.described(errors)) from None
        finally:
            loaded.keep(kept)  # what the APIs said, refusals too
        return items

    def described(self, errors: CaseFileErrors) -> str:
        """The file's problems as collection shows them: at the file as the user names it."""
        return describe_errors(CaseFileErrors([replace(error, file=self.shown)
                                               for error in errors.errors]))

    def _item(self, case: LoadedCase, model: str | None, api: str, row: str | None,
              refusal: Refusal | None) -> CaseItem:
        name = case_label(case.outline.name, model, api, row)
        try:
            item = CaseItem.from_parent(self, name=name, loaded=case, model=model, api=api,
                                        row=row, nodeid=_item_nodeid(self, name))
        except MarkRefused as refused:
            raise self.CollectError(f"{self.shown}:{refused.line}: {refused}") from None
        if refusal is not None and refusal.skip:
            item.add_marker(pytest.mark.skip(reason="; ".join(refusal.problems)))
        elif refusal is not None:
            item.refused = refusal.problems
        return item

    def _no_judge(self, case: LoadedCase) -> str:
        """Each place a case needs a judge model, none being configured anywhere: the judge
        is never silently the model under test."""
        return "\n".join(
            f"{self.shown}:{case.line_at(path)}: case {case.outline.name!r}:"
            f" {'a judge criterion' if path[-1] == 'judge' else 'simulate_user without a model'}"
            " needs a judge model, and none is configured: give the case `judge: {model:"
            " ...}`, --toolbench-judge-model or the ini key toolbench_judge_model"
            for path in case.outline.wants_judge)

    def _refusal(self, case: LoadedCase, api: str, models: Sequence[str | None]
                 ) -> Refusal | None:
        """Why the case's items over ``api`` do not run, if they do not: the case's
        ``endpoint.apis`` leaves the API out (skipped), or the case, run with ``models``
        (none given: its own), asks what the API cannot express (failed, or skipped when
        the case says ``endpoint.unsupported: skip``), each problem at its line. With its
        own models, what an API says is noted in the case's outline, which a later run
        reads instead."""
        outline = case.outline
        if outline.only and api not in outline.only:
            line = case.line_at(("endpoint", "apis"))
            said = (f"{self.shown}:{line}: case {outline.name!r} runs over"
                    f" {', '.join(outline.only)} only (endpoint.apis)")
            return Refusal([said], skip=True)
        problems = [f"{self.shown}:{case.line_at(path)}:"
                    f" case {outline.name!r}: {message}"
                    for message, path in _unsupported(case, api, models)]
        return Refusal(problems, outline.skips_unsupported) if problems else None


@dataclass(frozen=True)
class Refusal:
    """Why a case's items over one API do not run."""

    problems: list[str]
    """Each reason, as ``file:line: case 'name' ...: message``."""
    skip: bool
    """Skipped (the case says so); else failed."""


def _unsupported(case: LoadedCase, api: str, models: Sequence[str | None]
                 ) -> list[tuple[str, KeyPath]]:
    def check(run_with: Sequence[str | None] | None = None) -> list[tuple[str, KeyPath]]:
        from .wire import wire_api

        return [(problem.message, problem.path)
                for problem in wire_api(api).unsupported(case.case, run_with)]

    return check(models) if models else case.outline.unsupported_over(api, check)


class CaseItem(pytest.Item):
    """One case (one row of its table) against one model over one wire API."""

    def __init__(self, *, loaded: LoadedCase, model: str | None, api: str = "chat",
                 row: str | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.loaded = loaded
        self.model = model
        self.api = api
        self.row = row
        """The id of the ``parametrize`` row the item runs (None: the case has none)."""
        self.refused: list[str] = []
        """What the item's API cannot express of the case (``file:line: case 'name':
        message`` each): the item fails with it, sending nothing."""
        self.result: CaseResult | None = None
        for mark in case_marks(self.config, loaded):
            self.add_marker(mark)

    @functools.cached_property
    def case_run(self) -> CaseRun:
        from .run.runner import CaseRun

        file = self.parent
        assert isinstance(file, CaseFile)  # only case files make case items
        return CaseRun(self.loaded, self.model, self.nodeid, str(file.shown), self.api,
                       self.row)

    @functools.cached_property
    def invalid(self) -> str | None:
        """The case's problems, when it does not validate; None when it does. A case read back
        outlined from the cache is validated here, when it is first about to run: it
        validated when its entry was written (the same text, plugin code and library
        versions), so this finds a problem only if what it depends on changed since, and
        the case then fails with the problems its collection would have shown."""
        with _collector_paused():  # the validated cases live on, as at collection
            errors = self.loaded.problems()
        if errors is None:
            return None
        file = self.parent
        assert isinstance(file, CaseFile)  # only case files make case items
        return file.described(errors)

    def runtest(self) -> None:
        problems = self.invalid or self.refusal_text()
        if problems is not None:
            self.result = self.case_run.result(error=problems)
            raise CaseFailed(self.result)
        runtime = _runtime(self.config)
        refill = self._start_ahead(runtime)
        try:
            self.result = runtime.result(self.case_run, refill)
        except BudgetSpent as spent:
            # Reported at the case's file and line, as a skip mark is, not at this line.
            raise pytest.skip.Exception(str(spent), _use_item_location=True) from None
        if not self.result.passed:
            raise CaseFailed(self.result)

    def refusal_text(self) -> str | None:
        """What the item fails with when its API cannot express the case; None when it can."""
        if not self.refused:
            return None
        header = (f"the {self.api} API cannot express the case; nothing was sent (the case's"
                  " endpoint.unsupported: skip would skip this item):")
        return "\n".join([header, *self.refused])

    def teardown(self) -> None:
        """Its reports made, the case is let go (validated again if it runs again)."""
        self.loaded.forget()

    def unrun_result(self) -> CaseResult:
        """The result of a case that did not run (skipped): no runs at all."""
        return self.case_run.result()

    def broken_result(self, excinfo: pytest.ExceptionInfo[BaseException]) -> CaseResult:
        """The result of a run the plugin broke off (an exception that is not a verdict):
        failed, with the exception as its error."""
        return self.case_run.not_run(f"internal error: {excinfo.exconly()}")

    def _start_ahead(self, runtime: SessionRuntime) -> Callable[[], None] | None:
        """Live cases: start this one and the next ones so ``concurrency`` run at once; the
        function that starts more as they end (None: one case at a time)."""
        settings = self.config.stash[SETTINGS_KEY]
        lookahead = self.config.stash.get(LOOKAHEAD_KEY, None)
        if not settings.mode.is_live or settings.concurrency < 2 or lookahead is None:
            return None

        def refill() -> None:
            free = settings.concurrency - runtime.running()
            for item in lookahead.upcoming(self, settings.concurrency * AHEAD_FACTOR):
                if free <= 0:
                    return
                if (isinstance(item, CaseItem) and item.get_closest_marker("skip") is None
                        and item.invalid is None and not item.refused
                        and runtime.start(item.case_run)):
                    free -= 1

        refill()
        return refill

    def repr_failure(self, excinfo: pytest.ExceptionInfo[BaseException],
                     style: Any = None) -> str:
        if isinstance(excinfo.value, CaseFailed):
            from .report.failure import render_failure

            return render_failure(excinfo.value.result, self.name)
        return str(super().repr_failure(excinfo, style=style))

    def reportinfo(self) -> tuple[Any, int, str]:
        return self.path, self.loaded.document.start_line - 1, f"case: {self.name}"


@contextlib.contextmanager
def _collector_paused() -> Iterator[None]:
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def _start_session(config: pytest.Config) -> None:
    """With the first case file: the cache of parsed files, and the hooks that report cases."""
    if PARSED_KEY in config.stash:
        return
    config.stash[PARSED_KEY] = _parsed_cache(config)
    set_environment(lambda: _runtime(config).agent_cases.importing())
    config.add_cleanup(lambda: set_environment(None))
    _freeze_at_exit()
    stopping.install()  # SIGTERM, SIGHUP: as Ctrl-C (servers stopped, reports written)
    config.pluginmanager.register(CaseReports(records_read(config)), "toolbench-case-reports")


def session_runtime(config: pytest.Config) -> SessionRuntime:
    """The session's runtime (the ``toolbench_agent`` fixture runs through it too)."""
    return _runtime(config)


def _runtime(config: pytest.Config) -> SessionRuntime:
    """The runtime that runs cases, made with the first case run."""
    runtime = config.stash.get(RUNTIME_KEY, None)
    if runtime is None:
        from .session import SessionRuntime

        settings = config.stash[SETTINGS_KEY]
        workers = getattr(config, "workerinput", {}).get("workercount", 1)
        budget = TokenBudget.shared(settings.max_tokens, settings.max_tokens_source, workers)
        runtime = SessionRuntime(settings, Path(config.invocation_params.dir), budget, workers)
        runtime.kept_cassettes = _parsed_cassettes(config)
        config.stash[RUNTIME_KEY] = runtime
        config.stash[LATE_REQUESTS_KEY] = runtime.take_late_requests
        config.add_cleanup(runtime.close)
    return runtime


@functools.cache
def _freeze_at_exit() -> None:
    """When the interpreter exits, keep its last garbage collections off what is left.

    Python's shutdown runs full collections while it tears the modules down, and each walks
    every object still alive: a session's cases, items and compiled matchers, 2-3 s of the
    exit after collecting 10,000 cases. Frozen (``gc.freeze``) at exit, they are freed by
    reference counting as the modules go, as before, and no collection scans them. Only at
    exit: the session and anything run in-process after it collect as usual."""
    atexit.register(gc.freeze)


def _parsed_cache(config: pytest.Config) -> ParsedCache | None:
    """Parsed case files kept in pytest's cache directory; None under ``-p no:cacheprovider``."""
    cache = getattr(config, "cache", None)
    if cache is None:
        return None
    return ParsedCache(cache.mkdir(PARSED_FOLDER))


def _parsed_cassettes(config: pytest.Config) -> KeptParses | None:
    """Parsed cassettes kept in pytest's cache directory; None under ``-p no:cacheprovider``."""
    cache = getattr(config, "cache", None)
    if cache is None:
        return None
    return KeptParses(cache.mkdir(CASSETTE_FOLDER), CASSETTE_MAGIC)


class CaseReports:
    """Hooks on case items: each one's test report carries its figures (for junit) and,
    when the session reads them (``records``), its case record."""

    def __init__(self, records: bool) -> None:
        self.records = records
        self._unreported: dict[str, CaseItem] = {}
        """Case items begun whose run has no report yet: the interrupted ones, at the end."""

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_protocol(self, item: pytest.Item) -> None:
        if isinstance(item, CaseItem):
            self._unreported[item.nodeid] = item

    @pytest.hookimpl(tryfirst=True)
    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> None:
        """Interrupted (Ctrl-C, SIGTERM, SIGHUP): the case that was running, and those
        started ahead, are reported as interrupted, so every report holds them; before
        the reports are written (``tryfirst``)."""
        if exitstatus != pytest.ExitCode.INTERRUPTED:
            return
        runtime = session.config.stash.get(RUNTIME_KEY, None)
        ahead = set(runtime.unfinished()) if runtime is not None else set()
        items = [*self._unreported.values(),
                 *(item for item in session.items if isinstance(item, CaseItem)
                   and item.nodeid in ahead and item.nodeid not in self._unreported)]
        self._unreported.clear()
        for item in items:
            self._report_interrupted(item)

    def _report_interrupted(self, item: CaseItem) -> None:
        how = stopping.stopped_by or "KeyboardInterrupt"
        result = item.case_run.not_run(f"interrupted: the session was stopped ({how})"
                                       " while the case ran")
        report = pytest.TestReport(
            item.nodeid, item.location, dict.fromkeys(item.keywords, 1), "failed",
            f"{result.file}:{result.line}: {item.name}: {result.runs[0].error}", "call",
            user_properties=list(result.figures()), toolbench_interrupted=True)
        if self.records:
            from .report.json_report import CaseRecord, marks_from_keywords

            marks = marks_from_keywords(report.keywords, item.config.getini("markers"))
            report.toolbench = CaseRecord.of(  # type: ignore[attr-defined]
                result, item.nodeid, "interrupted", marks).to_text()
        item.ihook.pytest_runtest_logreport(report=report)

    @pytest.hookimpl(tryfirst=True)
    def pytest_report_teststatus(self, report: pytest.TestReport,
                                 config: pytest.Config) -> tuple[str, str, str] | None:
        """An interrupted case is marked INTERRUPTED in the terminal and counted in none of
        its totals, as pytest leaves out a test cut off by Ctrl-C: the session was stopped,
        the case did not fail (junitxml still needs it as a failure, to hold it at all)."""
        if getattr(report, "toolbench_interrupted", False):
            return "", "!", "INTERRUPTED"
        return None

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_makereport(self, item: pytest.Item, call: pytest.CallInfo[None]
                                  ) -> Generator[None, pytest.TestReport, pytest.TestReport]:
        report = yield
        if not isinstance(item, CaseItem):
            return report
        if call.when != "setup" or not report.passed:  # it ran, or never will
            self._unreported.pop(item.nodeid, None)
        _mask_sections(report, item.config)
        if call.when == "call":
            self._budget_figures(report, item, call)
            self._limit_figures(report, item)
            _late_requests(report, item)
        if call.when == "call" and item.result is None and call.excinfo is not None:
            # Not started (the token budget is spent): reported as a skipped case. Or the
            # plugin broke off the run with an unexpected exception: the case must still
            # be in the reports, failed, or a gate that reads them could pass.
            item.result = (item.unrun_result() if _not_started(call)
                           else item.broken_result(call.excinfo))
        if call.when == "call" and item.result is not None:
            result = item.result
            item.result = None  # the report carries the record; the item lives to the end
        elif call.when == "setup" and report.skipped:  # a skipped case never runs: report it
            result = item.unrun_result()
        else:
            return report
        for figure in result.figures() if call.when == "call" else ():
            report.user_properties.append(figure)
            item.user_properties.append(figure)  # junitxml reads teardown's
        if self.records:
            from .report.json_report import CaseRecord, marks_from_keywords

            # The marks go in the record: bfcl marks are registered where their cases are
            # collected, which under xdist is a worker, not the controller that reports.
            marks = marks_from_keywords(report.keywords, item.config.getini("markers"))
            record = CaseRecord.of(result, item.nodeid, _outcome(report), marks)
            # JSON text on the report: it travels to the xdist controller, which reads it.
            report.toolbench = record.to_text()  # type: ignore[attr-defined]
        return report


    def _budget_figures(self, report: pytest.TestReport, item: CaseItem,
                        call: pytest.CallInfo[None]) -> None:
        """What the summary says of the token budget, on the report so it reaches the xdist
        controller: the tokens the case used live, whether the budget kept it from
        starting, and the budget this process held."""
        runtime = _runtime(item.config)
        budget = runtime.budget
        if budget.limit is None:
            return
        report.toolbench_budget = {  # type: ignore[attr-defined]
            "tokens": runtime.live_tokens.pop(item.nodeid, None),
            "skipped": _not_started(call), "limit": budget.limit}


    def _limit_figures(self, report: pytest.TestReport, item: CaseItem) -> None:
        """Requests, tokens and time waited on rate limits since the last report, so the
        summary (on the xdist controller too) can add them up."""
        stats = _runtime(item.config).take_limiter_stats()
        if stats is not None:
            report.toolbench_limits = [  # type: ignore[attr-defined]
                stats.requests, stats.tokens, stats.waited_s]


def _late_requests(report: pytest.TestReport, item: CaseItem) -> None:
    """The requests the proxy refused since the last report for coming after their case
    had ended, by that case, on the report so the summary (on the xdist controller too)
    names them."""
    late = _runtime(item.config).take_late_requests()
    if late:
        report.toolbench_late = late  # type: ignore[attr-defined]


def _mask_sections(report: pytest.TestReport, config: pytest.Config) -> None:
    """What the case's code printed (a toolbox, a tool, an agent), as pytest captured it
    for the terminal and junitxml, with the session's credentials masked."""
    runtime = config.stash.get(RUNTIME_KEY, None)
    if runtime is not None and report.sections:
        report.sections = [(title, runtime.mask(text)) for title, text in report.sections]


def mask_test_report(report: pytest.TestReport, config: pytest.Config) -> None:
    """A ``toolbench_agent`` test's report as a case's is: what it printed and logged, and
    its failure (the test's own assertion may show an agent's state, ``--showlocals`` its
    variables), with the session's credentials masked. A failure that held one is shown
    as masked text."""
    _mask_sections(report, config)
    runtime = config.stash.get(RUNTIME_KEY, None)
    if runtime is None or report.longrepr is None:
        return
    text = str(report.longrepr)
    masked = runtime.mask(text)
    if masked != text:
        report.longrepr = masked


def _not_started(call: pytest.CallInfo[None]) -> bool:
    """Whether the case was skipped instead of started (the token budget was spent)."""
    return call.excinfo is not None and call.excinfo.errisinstance(pytest.skip.Exception)


def _outcome(report: pytest.TestReport) -> str:
    if hasattr(report, "wasxfail"):
        return "xpassed" if report.passed else "xfailed"
    return report.outcome


def _item_nodeid(parent: pytest.File, name: str) -> str:
    """The node id of item ``name`` (``case`` or ``case[model]``), spelled out as a string.

    pytest 9 keeps ids structured, and reads the ``[...]`` of an id string (as ``--lf``,
    ``--ff`` and ``--nf`` read their cache) as parameters apart from the name. An id built
    from the name ``case[model]`` would keep the brackets in its name and never equal what
    the cache holds; parsed from a string, it is split the same way. pytest 8 keeps the
    string as it is, which is the id it would have built.
    """
    return f"{parent.nodeid}::{name}"


def _display(config: pytest.Config, path: Path) -> Path:
    """``path`` relative to where pytest was started, when it lies below it."""
    try:
        return path.relative_to(config.invocation_params.dir)
    except ValueError:
        return path


def dry_run(session: pytest.Session) -> int:
    """``--toolbench-dry-run``: each case item's first request and what it lacks, on the
    terminal, in the order pytest would run them; nothing runs, nothing is sent. The number
    of items that lack something."""
    from .dryrun import plan_items, render, tally

    config = session.config
    cases = [item for item in session.items if isinstance(item, CaseItem)]
    plans = plan_items(_runtime(config), [(item.case_run, item.invalid or item.refusal_text())
                                          for item in cases],
                       indent=config.get_verbosity() > 0)
    for item, plan in zip(cases, plans):
        skip = item.get_closest_marker("skip")
        if skip is not None:
            plan.notes.append(f"skipped by its mark: {skip.kwargs.get('reason', '')}"
                              if skip.kwargs.get("reason") else "skipped by its mark")
    reporter = config.pluginmanager.get_plugin("terminalreporter")
    write = reporter.write_line if reporter is not None else print
    if reporter is not None:
        reporter.write_sep("=", "toolbench dry run: nothing is sent")
    for plan in plans:
        render(plan, write, quiet=config.get_verbosity() < 0)
    write(tally(plans, len(session.items) - len(cases)))
    return sum(not plan.ready for plan in plans)
