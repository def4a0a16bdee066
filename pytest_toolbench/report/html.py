"""The HTML report: one self-contained page rendered from the cases' records.

``render_html(records)`` takes the typed case records the JSON report holds: the session's
own for ``--toolbench-html``, a saved report's read back (``json_report.read_report``) for
``toolbench html REPORT.json``, so both draw the same page from the same data. The page loads nothing (``html_page``): its CSS,
its script and its plots (SVG) are inline.

Everything a case carries came from a model, a tool or a server: untrusted. Every text goes
through ``escape`` on its way into the page; the script only reads attributes the page
wrote and toggles ``hidden``. This module draws the overview and the filters;
``html_case`` draws each case.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from pathlib import Path

from ..atomic import write_atomic
from .html_case import api_of, model_of, outcome_rank, render_case
from .html_page import asset, page
from .html_page import escape as e
from .html_plots import dot_plot
from .json_report import CaseRecord, ReplyRecord, RunInfo, outcome_counts
from .provenance import model_mismatches


def render_html(records: Sequence[CaseRecord], title: str = "toolbench report",
                run: RunInfo | None = None) -> str:
    """The whole page for one report's case records; ``run``: how its session ran."""
    cases = sorted(records, key=_failures_first)
    body = "\n".join([
        f"<h1>{e(title)}</h1>",
        *([f'<div class="muted run">{e(run.described())}</div>']
          if run is not None and run.mode is not None else []),
        f'<div class="muted">{e(_counts(outcome_counts(cases)))}</div>',
        *(f'<div class="note">model: {e(line)}</div>' for line in model_mismatches(cases)),
        _overview(cases), _filters(cases),
        '<div id="cases">', *(render_case(case) for case in cases), "</div>",
    ])
    return page(title, body, asset("report.js"))


def write_html(path: Path, records: Sequence[CaseRecord],
               title: str = "toolbench report", run: RunInfo | None = None) -> None:
    """Write the page atomically, like the JSON report: no reader sees half a page."""
    write_atomic(path, render_html(records, title, run))


def _failures_first(case: CaseRecord) -> int:
    return outcome_rank(case.outcome)  # sorted() keeps the report's order within


def _counts(summary: dict[str, int]) -> str:
    return ", ".join(f"{value} {key}" for key, value in summary.items())


# ---------------------------------------------------------------------------- overview


def _overview(cases: Sequence[CaseRecord]) -> str:
    """Pass rates per model, and per API when more than one ran, each with its reply
    latency and TTFT spread as dot plots."""
    tables = [_table("Models", "model", model_of, cases)]
    if len({api_of(case) for case in cases}) > 1:
        tables.append(_table("APIs", "API", api_of, cases))
    return "\n".join(tables)


def _table(title: str, heading: str, key: Callable[[CaseRecord], str],
           cases: Sequence[CaseRecord]) -> str:
    groups = sorted({key(case) for case in cases})
    rows = "\n".join(_row(group, [case for case in cases if key(case) == group])
                     for group in groups)
    return (f'<h2>{title}</h2>\n<table class="models"><tr><th>{heading}</th>'
            '<th class="num">cases</th><th class="num">runs passed</th>'
            '<th class="num">pass rate</th><th>outcomes</th><th>reply latency (ms)</th>'
            f"<th>time to first token (ms)</th></tr>\n{rows}</table>")


def _row(name: str, cases: Sequence[CaseRecord]) -> str:
    passed = sum(case.passes for case in cases)
    total = sum(case.runs_total for case in cases)
    rate = f"{passed / total:.0%}" if 0 <= passed <= total and total else "-"
    outcomes = sorted({case.outcome for case in cases}, key=outcome_rank)
    tally = " ".join(f'<span class="badge o-{e(o)}">'
                     f"{sum(c.outcome == o for c in cases)} {e(o)}</span>"
                     for o in outcomes)
    replies = [reply for case in cases for reply in _replies(case)]
    latencies = [reply.latency_ms for reply in replies]
    ttfts = [reply.ttft_ms for reply in replies if reply.ttft_ms is not None]
    return (f"<tr><td>{e(name)}</td><td class=\"num\">{len(cases)}</td>"
            f"<td class=\"num\">{passed}/{total}</td><td class=\"num\">{rate}</td>"
            f"<td>{tally}</td><td>{dot_plot(latencies)}</td><td>{dot_plot(ttfts)}</td></tr>")


def _replies(case: CaseRecord) -> Iterable[ReplyRecord]:
    return (turn.reply for run in case.runs for stage in run.stages
            for attempt in stage.attempts for turn in attempt.turns if turn.reply is not None)


def _filters(cases: Sequence[CaseRecord]) -> str:
    marks = sorted({mark for case in cases for mark in case.marks})
    choices = [("outcome", sorted({c.outcome for c in cases}, key=outcome_rank)),
               ("model", sorted({model_of(c) for c in cases})),
               ("api", sorted({api_of(c) for c in cases})),
               ("file", sorted({c.file for c in cases})), ("marks", marks)]
    selects = "".join(_select(key, values) for key, values in choices if values)
    return (f'<h2>Cases</h2>\n<div class="filters">{selects}'
            '<label>node id <input id="search" type="search" placeholder="contains..."></label>'
            f'<span class="muted"><span id="shown">{len(cases)}</span> of {len(cases)} shown'
            "</span></div>")


def _select(key: str, values: Sequence[str]) -> str:
    label = {"marks": "marker", "api": "API"}.get(key, key)
    options = "".join(f'<option value="{e(v)}">{e(v)}</option>' for v in values)
    return (f'<label>{label} <select data-filter="{key}"><option value="">all</option>'
            f"{options}</select></label>")
