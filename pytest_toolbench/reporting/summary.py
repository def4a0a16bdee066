"""The rich summary table printed at the end of the session."""

from __future__ import annotations

import io
from collections import defaultdict
from typing import Any

from rich import box
from rich.console import Console
from rich.table import Table

OUTCOME_STYLE = {"passed": "green", "failed": "red", "xfailed": "yellow", "xpassed": "yellow",
                 "skipped": "dim"}


def render_summary(records: list[dict[str, Any]], width: int, color: bool) -> str:
    """The table of cases, then pass rates per model when more than one model ran."""
    buffer = io.StringIO()
    console = Console(file=buffer, width=max(width, 60), force_terminal=color,
                      color_system="standard" if color else None, highlight=False)
    console.print(_case_table(records))
    models = {record["model"] for record in records}
    if len(models) > 1:
        console.print(_model_table(records))
    return buffer.getvalue()


def _case_table(records: list[dict[str, Any]]) -> Table:
    table = Table(title="toolbench", title_justify="left", box=box.SIMPLE_HEAD,
                  pad_edge=False, collapse_padding=True)
    widest_case = max((len(record["case"]) for record in records), default=4)
    for column in ("case", "model", "stages", "turns", "calls", "tokens", "latency",
                   "ttft", "outcome"):
        numeric = column not in ("case", "model", "outcome")
        table.add_column(column, justify="right" if numeric else "left",
                         no_wrap=column != "case", overflow="fold",
                         min_width=min(widest_case, 30) if column == "case" else None)
    for record in records:
        table.add_row(
            record["case"], record["model"] or "-", str(record["stages"]), str(record["turns"]),
            str(record["tool_calls"]), str(record["total_tokens"] or "-"),
            _ms(record["latency_ms"]), _ms(record["ttft_ms"]), _outcome(record),
        )
    return table


def _outcome(record: dict[str, Any]) -> str:
    outcome = record["outcome"]
    if record["runs_total"] > 1:
        outcome += f" {record['passes']}/{record['runs_total']}"
    style = OUTCOME_STYLE.get(record["outcome"], "")
    return f"[{style}]{outcome}[/]" if style else outcome


def _model_table(records: list[dict[str, Any]]) -> Table:
    passes: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    for record in records:
        tally = passes[record["model"] or "-"]
        tally[0] += record["passes"]
        tally[1] += record["runs_total"]
    table = Table(title="pass rate per model", title_justify="left", box=box.SIMPLE_HEAD,
                  pad_edge=False, collapse_padding=True)
    table.add_column("model")
    table.add_column("runs passed", justify="right")
    table.add_column("pass rate", justify="right")
    for model, (passed, total) in sorted(passes.items()):
        table.add_row(model, f"{passed}/{total}", f"{passed / total:.0%}" if total else "-")
    return table


def _ms(value: float | None) -> str:
    if value is None:
        return "-"
    return f"{value / 1000:.2f} s" if value >= 1000 else f"{value:.0f} ms"
