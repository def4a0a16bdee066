"""The text of a failed case: verdict, expected vs actual, transcript, state trail."""

from __future__ import annotations

import difflib
import json
from typing import Any

from ..loader import format_key_path
from ..models.records import (
    CaseResult,
    Failure,
    Reply,
    RunResult,
    StageAttempt,
    ToolCall,
    ToolRun,
    Turn,
)

MAX_TEXT = 300
"""Longer texts are cut in the transcript; the JSON report keeps them whole."""


def render_failure(result: CaseResult, label: str) -> str:
    failed = [run for run in result.runs if not run.passed]
    lines = [verdict(result, label)]
    if len(result.runs) > 1:
        lines.append(f"passed {result.passes}/{len(result.runs)} runs; needed "
                     f"{result.min_pass_rate:.0%}")
    for run in failed[:3]:
        if len(result.runs) > 1:
            lines.append(f"\n=== run {run.number} ===")
        lines.extend(_run_text(run))
    if len(failed) > 3:
        lines.append(f"\n... and {len(failed) - 3} more failed runs (see --toolbench-report)")
    return "\n".join(lines)


def verdict(result: CaseResult, label: str) -> str:
    """One line: where the first failing expectation is, and what failed."""
    run = next((run for run in result.runs if not run.passed), None)
    if run is None:
        return f"{label} passed"
    failure = first_failure(run)
    if failure is None:
        return f"{result.file}:{result.line}: {label}: {run.error}"
    where = f"{result.file}:{failure.line or result.line}"
    key = f" {format_key_path(failure.key_path)}:" if failure.key_path else ""
    return f"{where}: {label}:{key} {failure.message}"


def first_failure(run: RunResult) -> Failure | None:
    for stage in run.stages:
        if not stage.passed and stage.attempts[-1].failures:
            return stage.attempts[-1].failures[0]
    return None


def _run_text(run: RunResult) -> list[str]:
    lines: list[str] = []
    if run.error:
        lines.append(run.error)
    for stage in run.stages:
        for attempt in stage.attempts:
            lines.extend(_attempt_text(attempt, len(stage.attempts)))
    return lines


def _attempt_text(attempt: StageAttempt, attempts: int) -> list[str]:
    title = f"stage {attempt.stage!r}"
    if attempts > 1:
        title += f" attempt {attempt.number}/{attempts}"
    outcome = "passed" if attempt.passed else "failed"
    lines = [f"\n--- {title}: {outcome} ---"]
    for failure in attempt.failures:
        lines.extend(_failure_text(failure))
    if attempt.turns or attempt.answered_first:
        lines.append("transcript:")
        if attempt.answered_first:
            lines.append("  calls left open by the previous stage, answered first:")
            lines.extend(_tool_run_text(run) for run in attempt.answered_first)
        for number, turn in enumerate(attempt.turns, 1):
            lines.extend(_turn_text(number, turn))
    lines.append("states: " + " -> ".join(attempt.trail))
    return lines


def _failure_text(failure: Failure) -> list[str]:
    where = f"line {failure.line}: " if failure.line else ""
    key = format_key_path(failure.key_path)
    lines = [f"{where}{key}: {failure.message}" if key else f"{where}{failure.message}"]
    if failure.expected is not None or failure.actual is not None:
        lines.extend("  " + line for line in expected_vs_actual(failure.expected, failure.actual))
    return lines


def expected_vs_actual(expected: Any, actual: Any) -> list[str]:
    """A diff of the two, pretty-printed as JSON (``-`` expected, ``+`` actual)."""
    left, right = _pretty(expected).splitlines(), _pretty(actual).splitlines()
    if len(left) == 1 and len(right) == 1:
        return [f"- expected: {left[0]}", f"+ actual:   {right[0]}"]
    diff = difflib.unified_diff(left, right, "expected", "actual", lineterm="", n=3)
    return list(diff)


def _pretty(value: Any) -> str:
    try:
        return json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False, default=_plain)
    except (TypeError, ValueError):
        return repr(value)


def _plain(value: Any) -> Any:
    """What JSON cannot hold: tool calls as the model made them, anything else as repr."""
    if isinstance(value, ToolCall):
        arguments = value.arguments if value.arguments_error is None else value.arguments_raw
        return {"name": value.name, "arguments": arguments}
    return repr(value)


def _turn_text(number: int, turn: Turn) -> list[str]:
    mode = "stream" if turn.streamed else "request"
    messages = turn.request.get("messages") or [{}]
    last = messages[-1]
    summary = f"{len(messages)} messages, last {last.get('role', '?')}: {_cut(_content(last))}"
    lines = [f"  > {mode} {number}: {summary}"]
    lines.extend(f"    retry: {line}" for line in turn.retries)
    if turn.error:
        lines.append(f"  < no reply: {turn.error}")
    elif turn.reply is not None:
        lines.extend(_reply_text(turn.reply))
    lines.extend(_tool_run_text(run) for run in turn.tool_runs)
    if turn.stop_reason:
        lines.append(f"    stop reason: {turn.stop_reason}")
    return lines


def _tool_run_text(run: ToolRun) -> str:
    outcome = f"error: {run.error}" if run.error else _cut(run.content)
    return f"    tool {run.name}({_cut(run.arguments)}) -> {outcome} [{run.duration_ms:.0f} ms]"


def _reply_text(reply: Reply) -> list[str]:
    figures = [f"{reply.latency_ms:.0f} ms"]
    if reply.ttft_ms is not None:
        figures.append(f"ttft {reply.ttft_ms:.0f} ms")
    if reply.usage and reply.usage.get("total_tokens") is not None:
        figures.append(f"{reply.usage['total_tokens']} tokens")
    lines = [f"  < {reply.status} finish_reason={reply.finish_reason} ({', '.join(figures)})"]
    if reply.error:
        lines.append(f"    error: {_cut(reply.error)}")
    if reply.text:
        lines.append(f"    text: {_cut(reply.text)}")
    for call in reply.tool_calls:
        lines.append(f"    call {call.name}({_cut(call.arguments_raw)})")
    lines.extend(f"    problem: {problem}" for problem in reply.problems)
    return lines


def _content(message: dict[str, Any]) -> str:
    content = message.get("content")
    if isinstance(content, str):
        return content
    if message.get("tool_calls"):
        return "tool calls " + ", ".join(c["function"]["name"] for c in message["tool_calls"])
    return json.dumps(content)


def _cut(text: str) -> str:
    text = text.replace("\n", "\\n")
    return text if len(text) <= MAX_TEXT else text[:MAX_TEXT] + f"... ({len(text)} chars)"
