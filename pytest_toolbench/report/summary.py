"""The rich summary table printed at the end of the session."""

from __future__ import annotations

import io
from collections import defaultdict
from collections.abc import Callable

from rich import box
from rich.console import Console
from rich.table import Table
from rich.text import Text

from ..apis import DEFAULT_API
from .json_report import CaseRecord

# The outcome comes right after the names, so a narrow terminal never hides it.
COLUMNS = ("case", "model", "api", "outcome", "stages", "turns", "calls", "tokens",
           "judge tokens", "user tokens", "latency", "ttft", "path")
SECOND_MODELS = {"judge tokens": "judge_tokens", "user tokens": "simulator_tokens"}
"""The columns of the second models' tokens (the judge's, the simulated user's), apart
from the model's: shown when a case used one."""
OUTCOME_STYLE = {"passed": "green", "failed": "red", "xfailed": "yellow", "xpassed": "yellow",
                 "skipped": "dim", "interrupted": "red"}


def render_summary(records: list[CaseRecord], width: int, color: bool) -> str:
    """The table of cases, then pass rates per model and per API when more than one ran."""
    buffer = io.StringIO()
    console = Console(file=buffer, width=max(width, 60), force_terminal=color,
                      color_system="standard" if color else None, highlight=False)
    models = sorted({record.model or "-" for record in records})
    apis = sorted({record.api for record in records})
    console.print(_case_table(records, models, apis))
    saved = progressive_saved(records)
    if saved is not None:
        console.print(Text(saved))
    for table in rate_tables(records):
        console.print(table)
    return buffer.getvalue()


def progressive_saved(records: list[CaseRecord]) -> str | None:
    """The line that says what ``run_tools: progressive`` saved, or None when no case
    ran its tools so."""
    saved = [record.saved_ms for record in records if record.saved_ms is not None]
    if not saved:
        return None
    cases = f"{len(saved)} case{'s' if len(saved) > 1 else ''}"
    return (f"progressive execution saved {sum(saved):.1f} ms in {cases} (tools run as"
            " their calls closed in the stream)")


def render_rates(records: list[CaseRecord], width: int, color: bool) -> str:
    """The pass rates per model and per API alone (``toolbench merge`` prints them)."""
    buffer = io.StringIO()
    console = Console(file=buffer, width=max(width, 60), force_terminal=color,
                      color_system="standard" if color else None, highlight=False)
    for table in rate_tables(records):
        console.print(table)
    return buffer.getvalue()


def rate_tables(records: list[CaseRecord]) -> list[Table]:
    """A pass-rate table per model, then per API, each when more than one ran."""
    tables = []
    if len({record.model or "-" for record in records}) > 1:
        tables.append(_rate_table(records, "model", lambda record: record.model or "-"))
    if len({record.api for record in records}) > 1:
        tables.append(_rate_table(records, "API", lambda record: record.api))
    return tables


def _case_table(records: list[CaseRecord], models: list[str], apis: list[str]) -> Table:
    """With one model or one API, it is named in the title and its column left out to save
    width (chat, the default API, is not named)."""
    named = [f"model: {models[0]}"] if len(models) == 1 and models[0] != "-" else []
    named += [f"API: {apis[0]}"] if apis != [DEFAULT_API] and len(apis) == 1 else []
    title = f"toolbench ({', '.join(named)})" if named else "toolbench"
    used = {column for column, key in SECOND_MODELS.items()
            if any(getattr(record, key) is not None for record in records)}
    routed = any(record.routed for record in records)
    columns = [c for c in COLUMNS
               if (c != "model" or len(models) > 1) and (c != "api" or len(apis) > 1)
               and (c not in SECOND_MODELS or c in used) and (c != "path" or routed)]
    table = Table(title=Text(title, style="table.title"), title_justify="left",
                  box=box.SIMPLE_HEAD, pad_edge=False, padding=(0, 0))
    # Figures never wrap; names fold, down to a readable width, when the terminal is narrow.
    for column in columns:
        numeric = column not in ("case", "model", "api", "outcome", "path")
        table.add_column(column, justify="right" if numeric else "left",
                         no_wrap=numeric or column == "outcome", overflow="fold",
                         min_width={"case": 12, "model": 8}.get(column))
    for record in records:
        cells: dict[str, str | Text] = {
            # Names are text, never markup: a model called "m[/]" must not break the table.
            "case": Text(record.case), "model": Text(record.model or "-"),
            "api": Text(record.api), "outcome": _outcome(record),
            "stages": str(record.stages), "turns": str(record.turns),
            "calls": str(record.tool_calls), "tokens": _count(record.total_tokens),
            "judge tokens": _count(record.judge_tokens),
            "user tokens": _count(record.simulator_tokens),
            "latency": _ms(record.latency_ms), "ttft": _ms(record.ttft_ms),
            "path": Text(_paths(record)),
        }
        table.add_row(*(cells[column] for column in columns))
    return table


def _paths(record: CaseRecord) -> str:
    """The stages each run went through (``ask → clarify → confirm``), each different
    path once, in the order of the runs; ``-`` for a case without routes."""
    if not record.routed:
        return "-"
    paths = dict.fromkeys(" → ".join(run.path) for run in record.runs if run.path)
    return " | ".join(paths) or "-"


def _outcome(record: CaseRecord) -> str:
    outcome = record.outcome
    if record.runs_total > 1:
        outcome += f" {record.passes}/{record.runs_total}"
    if record.pass_hat_k is not None:
        outcome += f" pass^{record.runs_total} {record.pass_hat_k:.2f}"
    style = OUTCOME_STYLE.get(record.outcome, "")
    return f"[{style}]{outcome}[/]" if style else outcome


def _rate_table(records: list[CaseRecord], what: str, key: Callable[[CaseRecord], str]
                ) -> Table:
    """Runs passed and the pass rate of each ``key`` (model or API)."""
    passes: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    for record in records:
        tally = passes[key(record)]
        tally[0] += record.passes
        tally[1] += record.runs_total
    table = Table(title=f"pass rate per {what}", title_justify="left", box=box.SIMPLE_HEAD,
                  pad_edge=False, padding=(0, 0))
    table.add_column(what.lower())
    table.add_column("runs passed", justify="right")
    table.add_column("pass rate", justify="right")
    for name, (passed, total) in sorted(passes.items()):
        table.add_row(Text(name), f"{passed}/{total}", f"{passed / total:.0%}" if total else "-")
    return table


def _count(value: int | None) -> str:
    """Unknown (no reply reported usage) is ``-``; a reported 0 stays 0; a count too long
    for its column (a server's nonsense) in powers of ten, so the table still fits."""
    if value is None:
        return "-"
    text = str(value)
    digits = text.lstrip("-")
    if len(digits) <= _MAX_DIGITS:
        return text
    return f"{text[:len(text) - len(digits)]}{digits[0]}.{digits[1:3]}e{len(digits) - 1}"


_MAX_DIGITS = 9


def _ms(value: float | None) -> str:
    if value is None:
        return "-"
    return f"{value / 1000:.2f} s" if value >= 1000 else f"{value:.0f} ms"
