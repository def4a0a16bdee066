"""``toolbench diff OLD NEW``: what changed between two JSON reports, or two cassette
folders, case by case.

Reports are matched by node id; cassettes by path, or by case name when no path is in both
folders (``diff_cassettes``). What is compared is ``diff_compare``'s; between a replayed run
and a live one (the reports' ``run.mode``), timings are not. The exit status is 1
when a verdict regressed (``passed`` -> ``failed``), so a nightly job can watch a model or
server drift; cassettes hold no verdict, so comparing them exits 0 (2 on a usage error).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from ..atomic import write_atomic
from ..report.failure import plural
from ..report.json_report import CaseRecord, ReportUnreadable, RunInfo, read_report_run
from .diff_compare import Change, Limits, compare_cases

DEFAULT_THRESHOLD = 20.0
DEFAULT_MIN_MS = 100.0
"""Timings closer than this are not news whatever the percent (replays take ~1 ms)."""


@dataclass(frozen=True)
class Comparison:
    old: Path
    new: Path
    changes: list[Change]
    compared: int
    """Cases (or cassettes) in both."""
    cassettes: bool = False
    by_name: bool = False
    """Cassettes paired by case name, models aside: no path was in both folders."""
    timings_left_out: str | None = None
    """Why latency and time to first token were not compared (one run was replayed)."""

    @property
    def regressed(self) -> int:
        return sum(change.regression for change in self.changes)

    @property
    def requests_changed(self) -> int:
        """Cases whose requests changed (not only their answers)."""
        return len({change.nodeid for change in self.changes if change.kind == "request"})

    def tally(self) -> str:
        cases = len({change.nodeid for change in self.changes})
        what = self.what_changed()
        changed = f"{cases} changed" + (f" ({what})" if what else "")
        timings = f"; {self.timings_left_out}" if self.timings_left_out else ""
        if not self.cassettes:
            return (f"{plural(self.compared, 'case')} compared, {changed}, "
                    f"{plural(self.regressed, 'verdict')} regressed{timings}")
        paired = ", paired by case name (no path is in both folders)" if self.by_name else ""
        return (f"{plural(self.compared, 'cassette')} compared{paired}, {changed}; cassettes"
                " hold no verdicts, so none is compared")

    def what_changed(self) -> str:
        """What the changed cases are, each counted once under the first of ``_WHAT`` its
        changes fall in: ``1 in the requests sent, 3 added, 3 removed``."""
        kinds: dict[str, set[str]] = {}
        for change in self.changes:
            kinds.setdefault(change.nodeid, set()).add(change.kind)
        counts = dict.fromkeys(_WHAT.values(), 0)
        for found in kinds.values():
            counts[next(what for kind, what in _WHAT.items() if kind in found or not kind)] += 1
        return ", ".join(f"{count} {what}" for what, count in counts.items() if count)


_WHAT = {
    "request": "in the requests sent", "verdict": "in verdicts",
    "call added": "in answers", "call removed": "in answers", "arguments": "in answers",
    "answer": "in answers", "error": "in answers", "turns": "in answers",
    "unreadable": "unreadable",
    "case added": "added", "cassette added": "added (only in NEW)",
    "case removed": "removed", "cassette removed": "removed (only in OLD)",
    "": "in figures",  # latency_ms, ttft_ms, total_tokens: whatever is left
}
"""A change's kind -> what a case with it is said to be, the first that applies."""


# ---------------------------------------------------------------------------- comparing


def compare_reports(old: Path, new: Path, limits: Limits) -> Comparison:
    """Two JSON reports, case by case in the new report's order, by node id. Between a
    replayed run and a live one, timings are not compared: a replay's are its own."""
    old_run, old_records = read_report_run(old)
    new_run, new_records = read_report_run(new)
    before = {case.nodeid: case for case in old_records}
    after = {case.nodeid: case for case in new_records}
    left_out = _timings_left_out(old_run, new_run)
    if left_out is not None:
        limits = dataclasses.replace(limits, timings=False)
    changes: list[Change] = []
    for nodeid in [*after, *(n for n in before if n not in after)]:
        if nodeid not in before:
            changes.append(Change(nodeid, "case added", f"new case: {after[nodeid].outcome}"))
        elif nodeid not in after:
            changes.append(Change(nodeid, "case removed", f"was {before[nodeid].outcome}"))
        else:
            changes.extend(compare_cases(nodeid, before[nodeid], after[nodeid], limits))
    return Comparison(old, new, changes, len(before.keys() & after.keys()),
                      timings_left_out=left_out)


def _timings_left_out(old: RunInfo, new: RunInfo) -> str | None:
    """Why timings are not compared, when one run was replayed and the other was not."""
    if old.mode is None or new.mode is None or old.replayed == new.replayed:
        return None
    return (f"latency and time to first token not compared: OLD ran {old.mode}, NEW"
            f" {new.mode} (a replay's timings are its own)")


def compare_folders(old: Path, new: Path, limits: Limits) -> Comparison:
    """Two cassette folders, cassette by cassette in path order."""
    from .diff_cassettes import pair, read_folder, shown

    sides = []
    for folder in (old, new):
        cases = read_folder(folder)
        if not cases:
            raise ReportUnreadable(f"no cassette (*.yaml) below {folder}")
        sides.append(cases)
    pairs = pair(*sides)
    changes: list[Change] = []
    for before, after in pairs.pairs:
        name = shown(before, after)
        if before.record is None or after.record is None:
            changes.extend(Change(name, "unreadable", f"{side}: {case.error}")
                           for side, case in (("old", before), ("new", after)) if case.error)
        else:
            changes.extend(compare_cases(name, before.record, after.record, limits))
    changes.extend(Change(case.path, "cassette added", _exchanges(case.record, case.error))
                   for case in pairs.only_new)
    changes.extend(Change(case.path, "cassette removed", _exchanges(case.record, case.error))
                   for case in pairs.only_old)
    return Comparison(old, new, changes, len(pairs.pairs), cassettes=True,
                      by_name=pairs.by_name)


def _exchanges(record: CaseRecord | None, error: str | None) -> str:
    if record is None:
        return f"unreadable: {error}"
    return plural(record.turns, "exchange")


# ---------------------------------------------------------------------------- output


def render_text(comparison: Comparison) -> str:
    """A plain table: one line per change, the case named once."""
    lines = [f"toolbench diff {comparison.old} -> {comparison.new}: {comparison.tally()}"]
    changes = comparison.changes
    if not changes:
        return lines[0] + "\n"
    width = max(len(change.kind) for change in changes) + 2
    current = None
    for change in changes:
        if change.nodeid != current:
            lines.append(change.nodeid)
            current = change.nodeid
        mark = "!" if change.regression else " "
        lines.append(f" {mark} {change.kind:<{width}}{change.detail}")
    return "\n".join(lines) + "\n"


def render_markdown(comparison: Comparison) -> str:
    lines = [f"### toolbench diff: `{comparison.old}` -> `{comparison.new}`", "",
             comparison.tally()]
    if comparison.changes:
        lines += ["", "| case | change | detail |", "|---|---|---|"]
        lines += [f"| `{_cell(c.nodeid)}` | {'**regressed** ' if c.regression else ''}"
                  f"{c.kind} | {_cell(c.detail)} |" for c in comparison.changes]
    return "\n".join(lines) + "\n"


def as_json(comparison: Comparison) -> dict[str, Any]:
    return {"old": str(comparison.old), "new": str(comparison.new),
            "compared": "cassettes" if comparison.cassettes else "reports",
            "paired_by": ("case name" if comparison.by_name else "path")
            if comparison.cassettes else "node id",
            "cases_compared": comparison.compared, "regressed": comparison.regressed,
            "requests_changed": comparison.requests_changed,
            "timings_compared": comparison.timings_left_out is None,
            "summary": comparison.tally(),
            "changes": [{key: value for key, value in asdict(change).items()
                         if key != "stage"} for change in comparison.changes]}


def render_json(comparison: Comparison) -> str:
    return json.dumps(as_json(comparison), indent=2, ensure_ascii=False) + "\n"


def _cell(text: str) -> str:
    """Markdown table cell: pipes and newlines would break the row."""
    return text.replace("|", "\\|").replace("\n", " ").replace("`", "'")


RENDERERS = {"text": render_text, "markdown": render_markdown, "json": render_json}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="toolbench diff",
        description="Compare two JSON reports (pytest --toolbench-report), or two cassette "
        "folders, case by case: verdicts that flipped (reports only), tool calls that "
        "appeared, disappeared or changed arguments, answers that changed, timings and "
        "tokens past a threshold. Exit 1 when a verdict regressed (passed -> failed), "
        "else 0; 2 on a usage error.")
    parser.add_argument("old", type=Path, metavar="OLD",
                        help="the earlier JSON report or cassette folder")
    parser.add_argument("new", type=Path, metavar="NEW",
                        help="the later JSON report or cassette folder")
    parser.add_argument("--format", choices=sorted(RENDERERS), default="text",
                        help="text (a table, default), markdown (for a PR comment or a job "
                        "summary) or json")
    parser.add_argument("--html", type=Path, metavar="PATH", default=None,
                        help="also write the diff as one self-contained HTML page")
    parser.add_argument("--threshold", type=_percent, default=DEFAULT_THRESHOLD,
                        metavar="PERCENT", help="report latency, time to first token and "
                        f"tokens that moved by more than this (default {DEFAULT_THRESHOLD:g})")
    parser.add_argument("--min-ms", type=_percent, default=DEFAULT_MIN_MS, metavar="MS",
                        help="timings that moved by less than this many ms are not reported "
                        f"(default {DEFAULT_MIN_MS:g})")
    return parser


def _percent(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not 0 <= value < float("inf"):
        raise argparse.ArgumentTypeError(f"expected a finite number >= 0, got {text!r}")
    return value


def compare(old: Path, new: Path, limits: Limits) -> Comparison:
    """Two reports or two folders; raise ReportUnreadable for anything else."""
    if old.is_dir() and new.is_dir():
        return compare_folders(old, new, limits)
    for path in (old, new):
        if path.is_dir():
            raise ReportUnreadable(f"{path} is a folder and the other is not: compare two "
                                   "JSON reports or two cassette folders")
    return compare_reports(old, new, limits)


def main(argv: Sequence[str]) -> int:
    args = build_parser().parse_args(argv)
    try:
        comparison = compare(args.old, args.new, Limits(args.threshold, args.min_ms))
        if args.html is not None:
            _write_page(args.html, comparison)
    except ReportUnreadable as error:
        print(f"toolbench diff: error: {error}", file=sys.stderr)
        return 2
    except OSError as exc:
        print(f"toolbench diff: error: cannot write {args.html}: {exc.strerror or exc}",
              file=sys.stderr)
        return 2
    sys.stdout.write(RENDERERS[args.format](comparison))
    return 1 if comparison.regressed else 0


def _write_page(path: Path, comparison: Comparison) -> None:
    from ..report.html_diff import render_diff_html

    write_atomic(path, render_diff_html(as_json(comparison),
                                        f"toolbench diff: {comparison.old.name} -> "
                                        f"{comparison.new.name}"))
