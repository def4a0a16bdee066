"""Case results as plain JSON data: for the ``--toolbench-report`` file and for xdist.

Workers attach ``case_record(result)`` to their test reports; the controller sees the same
records whether the run was distributed or not, so summary and report are complete under -n.
The report's shape is documented in docs/report.md.
"""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path
from typing import Any

from ..atomic import write_atomic
from ..records import CaseResult, Reply, StageAttempt, ToolRun, Turn

REPORT_VERSION = 1


def case_record(result: CaseResult, nodeid: str, outcome: str) -> dict[str, Any]:
    """One item as JSON data: figures for the summary, and every run, stage and attempt."""
    return {
        "nodeid": nodeid,
        "case": result.case,
        "model": result.model,
        "file": result.file,
        "line": result.line,
        "outcome": outcome,
        "passes": result.passes,
        "runs_total": len(result.runs),
        "min_pass_rate": result.min_pass_rate,
        "error": result.error,
        "stages": max((len(run.stages) for run in result.runs), default=0),
        "turns": result.turns,
        "tool_calls": result.tool_calls,
        "total_tokens": result.total_tokens,
        "latency_ms": _round(result.latency_ms),
        "ttft_ms": _round(result.ttft_ms),
        "runs": [
            {"number": run.number, "passed": run.passed, "error": run.error,
             "stages": [{"name": stage.name, "passed": stage.passed,
                         "attempts": [_attempt(a) for a in stage.attempts]}
                        for stage in run.stages]}
            for run in result.runs
        ],
    }


def _attempt(attempt: StageAttempt) -> dict[str, Any]:
    return {
        "number": attempt.number,
        "passed": attempt.passed,
        "trail": attempt.trail,
        "failures": [_jsonable(asdict(failure)) for failure in attempt.failures],
        "answered_first": [_tool_run(run) for run in attempt.answered_first],
        "turns": [_turn(turn) for turn in attempt.turns],
    }


def _turn(turn: Turn) -> dict[str, Any]:
    return {
        "streamed": turn.streamed,
        "stop_reason": turn.stop_reason,
        "error": turn.error,
        "retries": turn.retries,
        "elapsed_ms": round(turn.elapsed_ms, 1),
        "reply": None if turn.reply is None else _reply(turn.reply),
        "tool_runs": [_tool_run(run) for run in turn.tool_runs],
    }


def _tool_run(run: ToolRun) -> dict[str, Any]:
    return {**asdict(run), "duration_ms": round(run.duration_ms, 1)}


def _reply(reply: Reply) -> dict[str, Any]:
    return {
        "status": reply.status,
        "finish_reason": reply.finish_reason,
        "text": reply.text,
        "tool_calls": [{"id": c.id, "name": c.name, "arguments": c.arguments_raw,
                        "arguments_error": c.arguments_error} for c in reply.tool_calls],
        "usage": reply.usage,
        "error": reply.error,
        "latency_ms": round(reply.latency_ms, 1),
        "ttft_ms": _round(reply.ttft_ms),
        "stream": None if reply.stream is None else asdict(reply.stream),
        "problems": reply.problems,
    }


def _round(ms: float | None) -> float | None:
    """Milliseconds to 0.1; unknown stays ``None`` (null), never 0."""
    return None if ms is None else round(ms, 1)


def _jsonable(value: Any) -> Any:
    """Round-trip through JSON, with anything JSON cannot hold shown as its repr."""
    return json.loads(json.dumps(value, default=repr))


def write_report(path: Path, records: list[dict[str, Any]], summary: dict[str, Any]) -> None:
    """Write the report atomically: an interrupted run leaves the previous one whole."""
    document = {"version": REPORT_VERSION, "summary": summary, "cases": records}
    write_atomic(path, json.dumps(document, indent=2, ensure_ascii=False))
