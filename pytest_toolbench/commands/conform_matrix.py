"""The conformance matrix: what each probe's JSON-report record and raw replies mean.

A probe is a case file in ``pytest_toolbench/conform/probes``; this module knows, for each,
which failed expectations are the model's doing rather than the server's, and the few
checks the JSON report cannot express (reasoning, error bodies, stream indices), which read
the raw replies the probe's cassette holds.

A cell is ``pass``, ``fail`` (with its cause: ``protocol`` or ``model``) or
``not supported``. With several runs a probe passes when more than half of them pass.
"""

from __future__ import annotations

import enum
import html
import json
import re
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..apis import API_NAMES
from ..records import Interaction
from ..report.html_page import page
from ..report.json_report import CaseRecord, RunRecord
from ..wire import wire_api

__all__ = [
    "APIS",
    "PROBES",
    "Cause",
    "Cell",
    "Probe",
    "Verdict",
    "columns",
    "judge",
    "matrix_json",
    "render_html",
    "render_markdown",
    "render_table",
]

APIS = API_NAMES
"""The wire APIs a probe can run over, in column order."""
SHORT_CHARS = 100
"""The longest reason a table cell states; the JSON report and the HTML page have the
reason whole. A longer first clause gives way to its end ("expected 2, got 1")."""
WILDCARD = "*"
Pattern = tuple[int | str, ...]
"""A key path inside ``stages``: stage index, then keys under ``expect``; ``*`` any one."""


class Verdict(enum.Enum):
    PASS = "pass"
    FAIL = "fail"
    NOT_SUPPORTED = "not supported"


class Cause(enum.Enum):
    PROTOCOL = "protocol"  # the server broke the API's rules
    MODEL = "model"  # the server kept the rules; the model's answer fell short


@dataclass(frozen=True)
class Cell:
    """One probe against one API."""

    verdict: Verdict
    reason: str = ""
    cause: Cause | None = None
    passes: int = 0
    runs: int = 0
    summary: str = ""
    """The reason in a few words, for the tables; empty: the reason's first clause."""

    def label(self) -> str:
        """``pass``, ``fail (protocol)``, ``not supported``..."""
        if self.verdict is Verdict.FAIL and self.cause is not None:
            return f"fail ({self.cause.value})"
        return self.verdict.value


RawCheck = Callable[[Cell, Sequence[Interaction], str], Cell]
"""A check of a cell against the raw exchanges of its probe over one API (the third
argument)."""


@dataclass(frozen=True)
class Probe:
    """How to read one probe's outcome."""

    name: str
    """The case name, and the file stem in ``conform/probes``."""
    title: str
    model_paths: tuple[Pattern, ...] = ()
    """Failures under these key paths are the model's (a value it chose), not the server's."""
    raw_check: RawCheck | None = None
    """A check on the raw replies, applied after the report's verdict."""
    short_of_calls_unsupported: bool = False
    """A model that made too few calls leaves the probe not supported rather than failed."""


# ---------------------------------------------------------------------------- raw checks


def _check_reasoning(cell: Cell, interactions: Sequence[Interaction], api: str) -> Cell:
    """Not supported unless the server returned reasoning; then it must not be in content."""
    if cell.verdict is not Verdict.PASS:
        return cell  # no reply, or reasoning markup in the content: the failure says it
    wire = wire_api(api)
    reasoning, content = wire.sent_reasoning(list(interactions))
    if "<think>" in content or "</think>" in content:
        # The reply's text has it taken out as reasoning; the server still sent it as content.
        return Cell(Verdict.FAIL, "reasoning markup (<think>) sent in the content",
                    Cause.PROTOCOL, 0, cell.runs)
    if not reasoning:
        return Cell(Verdict.NOT_SUPPORTED,
                    f"the server returned no reasoning ({wire.reasoning_where})",
                    None, cell.passes, cell.runs)
    if _leaks(reasoning, content):
        return Cell(Verdict.FAIL, "the reasoning is repeated in the content",
                    Cause.PROTOCOL, 0, cell.runs)
    return cell


def _leaks(reasoning: str, content: str) -> bool:
    # A long enough tail of the reasoning found in the content: the same text, twice.
    tail = " ".join(reasoning.split())[-40:]
    return len(tail) >= 12 and tail in " ".join(content.split())


def _check_error_body(cell: Cell, interactions: Sequence[Interaction], api: str) -> Cell:
    """The rejected request's body must be ``{"error": {"message": "...", ...}}``."""
    if cell.verdict is not Verdict.PASS:
        return cell
    for interaction in interactions:
        error = interaction.body.get("error") if isinstance(interaction.body, dict) else None
        if not (isinstance(error, dict) and isinstance(error.get("message"), str)):
            shown = json.dumps(interaction.body)[:80] if interaction.body is not None else ""
            return Cell(Verdict.FAIL, f"HTTP {interaction.status}, but the body is not a JSON"
                        f' error object {{"error": {{"message": ...}}}}; it reads: {shown}',
                        Cause.PROTOCOL, 0, cell.runs)
    return cell


def _check_whole_parts(cell: Cell, interactions: Sequence[Interaction], api: str) -> Cell:
    """Gemini sends each call whole, in one part, by design: arguments that did not stream
    are its API's shape there, not a fault (a call missing, or a stream that broke, still
    fails)."""
    if api != "gemini" or cell.verdict is not Verdict.FAIL or "came whole" not in cell.reason:
        return cell
    return Cell(Verdict.NOT_SUPPORTED, "the API sends each call whole, in one part", None,
                cell.passes, cell.runs)


def _check_indices(cell: Cell, interactions: Sequence[Interaction], api: str) -> Cell:
    """The calls of one reply can be told apart (distinct ids; streamed calls with distinct
    ids on distinct indices), as the API's adapter judges it."""
    wire = wire_api(api)
    for interaction in interactions:
        problem = wire.call_id_problem(interaction)
        if problem:
            return Cell(Verdict.FAIL, problem, Cause.PROTOCOL, 0, cell.runs)
    return cell


# ---------------------------------------------------------------------------- the probes

_ARGUMENT_VALUES: Pattern = (0, "tool_calls", WILDCARD, "arguments")
PROBES = {probe.name: probe for probe in (
    Probe("plain_text", "plain text answer, no tools", model_paths=((0, "text"),)),
    Probe("forced_call", "tool_choice {name}: the named tool is called",
          model_paths=(_ARGUMENT_VALUES,)),
    Probe("required", "tool_choice required: a tool is called"),
    Probe("auto", "tool_choice auto: the model may call", model_paths=((0, "tool_calls"),)),
    Probe("none", "tool_choice none: no tool call"),
    Probe("parallel_calls", "parallel calls: distinct indices and ids",
          model_paths=((0, "tool_calls"),), raw_check=_check_indices,
          short_of_calls_unsupported=True),
    Probe("arguments_schema", "arguments are JSON and match the schema",
          model_paths=(_ARGUMENT_VALUES,)),
    Probe("strict_schema", "strict tool: arguments hold to the schema exactly"),
    Probe("stream_agreement", "streamed and non-streamed replies agree"),
    Probe("finish_reason", "finish_reason tool_calls on a tool call"),
    Probe("stream_usage", "usage arrives in a stream"),
    Probe("stream_done", "a stream ends with [DONE] or its terminal event"),
    Probe("stream_progressive", "a streamed call's arguments arrive in pieces, before the end",
          raw_check=_check_whole_parts),
    Probe("tool_round_trip", "a tool result is accepted and answered",
          model_paths=((1, "text"),)),
    Probe("error_shape", "invalid request: HTTP 400 with an error object",
          raw_check=_check_error_body),
    Probe("no_call_in_content", "a forced call is not left as text in content"),
    Probe("reasoning_separate", "reasoning is kept out of content",
          raw_check=_check_reasoning),
)}


# ---------------------------------------------------------------------------- verdicts


@dataclass
class _RunFailures:
    """One failed run of a probe: its failures as (cause, message), or why it had no reply."""

    failures: list[tuple[Cause, str]] = field(default_factory=list)


def judge(probe: Probe, record: CaseRecord | None,
          interactions: Sequence[Interaction], api: str = "chat") -> Cell:
    """The cell for ``probe`` over ``api`` from its JSON-report ``record`` and its raw
    replies."""
    if record is None:
        return Cell(Verdict.FAIL, "the probe did not run (see pytest's output with "
                    "--verbose)", Cause.PROTOCOL)
    passes = sum(1 for run in record.runs if run.passed)
    cell = _majority(probe, record.runs, passes)
    return probe.raw_check(cell, interactions, api) if probe.raw_check else cell


def _majority(probe: Probe, runs: list[RunRecord], passes: int) -> Cell:
    if runs and passes * 2 > len(runs):
        return Cell(Verdict.PASS, _of(passes, len(runs)), None, passes, len(runs))
    failed = [_run_failures(probe, run) for run in runs if not run.passed]
    cause, message = _first_failure(failed)
    tally = f" ({_of(passes, len(runs))} passed)" if len(runs) > 1 else ""
    reason, short = message + tally, _short(message) + tally
    if cause is Cause.MODEL and probe.short_of_calls_unsupported:
        return Cell(Verdict.NOT_SUPPORTED, f"model: {reason}; the model did not make the calls,"
                    " so the protocol was not exercised", None, passes, len(runs),
                    f"the model did not make the calls{tally}")
    if _refused(failed):
        return Cell(Verdict.NOT_SUPPORTED, f"the server refused the request: {reason}", None,
                    passes, len(runs), f"the server refused the request: {short}")
    return Cell(Verdict.FAIL, f"{cause.value}: {reason}", cause, passes, len(runs),
                f"{cause.value}: {short}")


def _short(reason: str) -> str:
    """What happened, without the detail: the first clause (a message puts its detail,
    such as the server's own words, after "; "); when that is still long, the mismatch it
    ends with ("expected 2, got 1"); when that is too, nothing (the label says enough)."""
    clause = reason.partition("; ")[0]
    if len(clause) <= SHORT_CHARS:
        return clause
    end = clause.rpartition(": ")[2]
    return end if len(end) <= SHORT_CHARS else ""


def _of(passes: int, runs: int) -> str:
    return f"{passes}/{runs} runs" if runs > 1 else ""


def _first_failure(failed: list[_RunFailures]) -> tuple[Cause, str]:
    """The first protocol failure if any run has one, else the first model failure."""
    every = [failure for run in failed for failure in run.failures]
    for wanted in (Cause.PROTOCOL, Cause.MODEL):
        for cause, message in every:
            if cause is wanted:
                return cause, message
    return Cause.PROTOCOL, "the probe failed without a reason in the report"


_REFUSED = re.compile(r"^expected \d+, got (400|404|422|501)\b")


def _refused(failed: list[_RunFailures]) -> bool:
    """A 400/404/422/501 to a well-formed request: the server does not take the feature."""
    return bool(failed) and all(
        any(_REFUSED.match(message) for _cause, message in run.failures) for run in failed)


def _run_failures(probe: Probe, run: RunRecord) -> _RunFailures:
    if run.error:
        return _RunFailures([(Cause.PROTOCOL, _one_line(run.error))])
    found = _RunFailures()
    for stage in run.stages:
        for failure in stage.attempts[-1].failures if stage.attempts else ():
            found.failures.append((_cause_of(probe, failure.key_path),
                                   _one_line(failure.message)))
    return found


def _cause_of(probe: Probe, key_path: Sequence[Any]) -> Cause:
    # key paths read ["stages", N, "expect", key, ...]; only expectations can be the model's.
    if len(key_path) < 4 or key_path[0] != "stages" or key_path[2] != "expect":
        return Cause.PROTOCOL
    where = (key_path[1], *key_path[3:])
    return Cause.MODEL if any(_under(where, pattern) for pattern in probe.model_paths) \
        else Cause.PROTOCOL


def _under(where: Sequence[Any], pattern: Pattern) -> bool:
    return len(where) >= len(pattern) and all(
        want == WILDCARD or want == got for want, got in zip(pattern, where))


def _one_line(text: str) -> str:
    return " ".join(text.split())


# ---------------------------------------------------------------------------- output


Row = tuple[str, str, Mapping[str, Cell]]
"""A probe's name, its title and its cell per API."""


def matrix_json(rows: Sequence[Row], about: Mapping[str, Any]) -> dict[str, Any]:
    """The ``--report`` document: what was probed, and every cell."""
    counts = Counter(cell.verdict.value for _name, _title, cells in rows
                     for cell in cells.values())
    return {
        "version": 1, **about, "apis": list(columns(rows)),
        "summary": {verdict.value: counts[verdict.value] for verdict in Verdict},
        "probes": [{"name": name, "title": title,
                    "cells": {api: _cell_json(cell) for api, cell in cells.items()}}
                   for name, title, cells in rows],
    }


def _cell_json(cell: Cell) -> dict[str, Any]:
    return {"verdict": cell.verdict.value, "cause": cell.cause.value if cell.cause else None,
            "reason": cell.reason, "passes": cell.passes, "runs": cell.runs}


def _cell_text(cell: Cell, whole: bool = False) -> str:
    """The label and the reason: short for the tables, ``whole`` for the HTML page."""
    reason = cell.reason if whole else cell.summary or _short(cell.reason)
    if cell.cause is not None:  # the label says it: fail (model)
        reason = reason.removeprefix(f"{cell.cause.value}: ")
    return f"{cell.label()}: {reason}" if reason and cell.verdict is not Verdict.PASS \
        else cell.label()


def columns(rows: Sequence[Row]) -> tuple[str, ...]:
    """The APIs the matrix has a column for, in ``APIS`` order."""
    present = {api for _name, _title, cells in rows for api in cells}
    return tuple(api for api in APIS if api in present)


def render_table(rows: Sequence[Row]) -> str:
    """A plain-text table for the terminal: probe, then one column per API."""
    apis = columns(rows)
    header = ("probe", *apis)
    lines = [(name, *(_cell_text(cells[api]) for api in apis)) for name, _title, cells in rows]
    # Every column but the last is padded to its widest cell.
    widths = [max(len(line[i]) for line in [header, *lines]) for i in range(len(header))]
    return "\n".join("  ".join(text.ljust(width) for text, width in zip(line, widths)).rstrip()
                     for line in [header, *lines]) + "\n"


def render_markdown(rows: Sequence[Row]) -> str:
    """A Markdown table to paste into a README or an issue."""
    apis = columns(rows)
    lines = ["| probe | checks | " + " | ".join(apis) + " |",
             "|---|---|" + "---|" * len(apis)]
    for name, title, cells in rows:
        texts = (_markdown_cell(cells[api]) for api in apis)
        lines.append(f"| `{name}` | {_escape(title)} | " + " | ".join(texts) + " |")
    return "\n".join(lines) + "\n"


def _markdown_cell(cell: Cell) -> str:
    text = _escape(_cell_text(cell))
    return f"**{text}**" if cell.verdict is Verdict.FAIL else text


def _escape(text: str) -> str:
    return text.replace("|", "\\|")


_HTML_STYLE = """
body{font:14px/1.4 system-ui,sans-serif;margin:2em;color:#222}
table{border-collapse:collapse}th,td{border:1px solid #ccc;padding:4px 8px;text-align:left;
vertical-align:top}td.pass{background:#e6f4ea}td.fail{background:#fde7e9}
td.unsupported{background:#f1f1f1;color:#555}code{font-size:13px}
"""


def render_html(rows: Sequence[Row], about: Mapping[str, Any]) -> str:
    """The matrix as one self-contained page: no script, nothing loaded from elsewhere."""
    apis = columns(rows)
    head = "".join(f"<th>{html.escape(api)}</th>" for api in apis)
    body = "\n".join(
        f"<tr><td><code>{html.escape(name)}</code></td><td>{html.escape(title)}</td>"
        + "".join(_html_cell(cells[api]) for api in apis) + "</tr>"
        for name, title, cells in rows)
    facts = ", ".join(f"{key}: {value}" for key, value in about.items() if value is not None)
    return page("toolbench conform", (
        f"<h1>toolbench conform</h1><p>{html.escape(facts)}</p>"
        f"<table><tr><th>probe</th><th>checks</th>{head}</tr>\n{body}</table>"),
        css=_HTML_STYLE)


def _html_cell(cell: Cell) -> str:
    kind = {Verdict.PASS: "pass", Verdict.FAIL: "fail"}.get(cell.verdict, "unsupported")
    return f"<td class=\"{kind}\">{html.escape(_cell_text(cell, whole=True))}</td>"
