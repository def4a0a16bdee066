"""The text of a failed case: verdict, expected vs actual, transcript, state trail."""

from __future__ import annotations

import dataclasses
import difflib
import json
from collections.abc import Mapping, Sequence
from typing import Any

from ..apis import conversation_keys
from ..faults import delivery_note
from ..keypaths import format_key_path
from ..matchers import MISSING
from ..records import (
    CaseResult,
    Failure,
    Reply,
    RunResult,
    StageAttempt,
    ToolCall,
    ToolRun,
    Turn,
    stop_text,
)

MAX_TEXT = 300
"""Longer texts are cut in the transcript; the JSON report keeps them whole."""
ONE_LINE = 100
"""Expected and actual up to this long are shown on a line each; longer, as a diff."""


def render_failure(result: CaseResult, label: str) -> str:
    """A failure of the whole case first; then the verdict of its runs, its diff and the
    other failures once each, then the transcripts."""
    failed = [run for run in result.runs if not run.passed]
    runs = _render_runs(result, label, failed) if failed else ""
    notes = "\n".join(f"note: {note}" for note in result.notes)
    if result.error is None:
        return "\n".join(filter(None, [runs or f"{label} passed", notes]))
    return "\n".join(filter(None, [f"{result.file}:{result.line}: {label}: {result.error}",
                                    runs, notes]))


def _render_runs(result: CaseResult, label: str, failed: list[RunResult]) -> str:
    first = failed[0]
    lines = [verdict(result, label)]
    headline = first_failure(first)
    if headline is not None:
        headline = dataclasses.replace(headline, actual=as_named(headline.expected,
                                                                 headline.actual))
    if headline is not None and _diff_adds(headline):
        lines.extend("  " + line for line in expected_vs_actual(headline.expected,
                                                                headline.actual))
    shown = _final_failures(first)
    lines.extend(_failure_line(result, failure) for failure in shown[1:])
    if len(result.runs) > 1:
        lines.append(f"passed {result.passes}/{len(result.runs)} runs; needed "
                     f"{result.min_pass_rate:.0%}")
    for run in failed[:3]:
        if len(result.runs) > 1:
            lines.append(f"\n=== run {run.number} ===")
        if run.error and (run is not first or headline is not None):
            lines.append(run.error)  # the verdict shows the first run's error when it has no other
        lines.extend(_run_text(result, run, {id(failure) for failure in shown}))
    if len(failed) > 3:
        lines.append(f"\n... and {plural(len(failed) - 3, 'more failed run')}"
                     " (see --toolbench-report)")
    return "\n".join(lines)


def verdict(result: CaseResult, label: str) -> str:
    """One line: where the first failing expectation of a run is, and what failed."""
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
    failures = _final_failures(run)
    return failures[0] if failures else None


def _final_failures(run: RunResult) -> list[Failure]:
    """The failures of the stage that failed the run (its last attempt), less repeats."""
    for stage in run.stages:
        if not (stage.passed or stage.branch) and stage.attempts[-1].failures:
            return _without_repeats(stage.attempts[-1].failures)
    return []


def _without_repeats(failures: list[Failure]) -> list[Failure]:
    """Once a failure says a list is empty ("expected 1 call, got 0"), the others at the
    same key path ("call 0 found no partner: there are no calls") say it again."""
    empty = {failure.key_path for failure in failures
             if isinstance(failure.actual, (list, tuple)) and not failure.actual}
    kept, said = [], set()
    for failure in failures:
        if failure.key_path in empty and failure.key_path in said:
            continue
        said.add(failure.key_path)
        kept.append(failure)
    return kept


def _diff_adds(failure: Failure) -> bool:
    """Whether expected vs actual says more than the message does.

    Not for operators (``{"$lte": 5}`` vs ``50``: the message says "expected <= 5, got
    50"), nor a missing value, nor values the message already quotes whole.
    """
    expected, actual = failure.expected, failure.actual
    if expected is None and actual is None or actual is MISSING:
        return False
    if isinstance(expected, dict) and any(str(key).startswith("$") for key in expected):
        return False
    return not all(_quoted(value, failure.message) for value in (expected, actual))


def as_named(expected: Any, actual: Any) -> Any:
    """A tool call, or a list of them, as the parts the expectation names (``name``,
    ``arguments`` or both), so the diff shows no difference the case did not ask about;
    anything else as it is. Arguments that are not JSON are their text (``json_value``)."""
    if isinstance(actual, ToolCall) and isinstance(expected, Mapping):
        return _call_parts(actual, _named_keys([expected]))
    if (isinstance(actual, (list, tuple)) and isinstance(expected, (list, tuple))
            and all(isinstance(call, ToolCall) for call in actual)
            and all(isinstance(spec, Mapping) for spec in expected)):
        keys = _named_keys(expected)
        return [_call_parts(call, keys) for call in actual]
    return actual


def _named_keys(specs: Sequence[Mapping[str, Any]]) -> set[str]:
    """The parts of a call that expected calls name; both, when they name neither."""
    named = {key for spec in specs for key in _CALL_PARTS if key in spec}
    return named or set(_CALL_PARTS)


_CALL_PARTS = ("name", "arguments")


def _call_parts(call: ToolCall, keys: set[str]) -> dict[str, Any]:
    whole: dict[str, Any] = json_value(call)
    return {key: value for key, value in whole.items() if key in keys}


def _quoted(value: Any, message: str) -> bool:
    """The message holds the value whole, as Python or JSON writes it (``'yes'``, ``200``)."""
    return repr(value) in message or _compact(value) in message


def _failure_line(result: CaseResult, failure: Failure) -> str:
    key = format_key_path(failure.key_path)
    where = f"{result.file}:{failure.line or result.line}:"
    return f"{where} {key}: {failure.message}" if key else f"{where} {failure.message}"


def _run_text(result: CaseResult, run: RunResult, shown: set[int]) -> list[str]:
    lines: list[str] = []
    for stage in run.stages:
        for attempt in stage.attempts:
            routed = stage.next if stage.branch and attempt is stage.attempts[-1] else None
            lines.extend(_attempt_text(result, attempt, len(stage.attempts), shown, routed))
    if len(run.path) > 1 or any(stage.branch for stage in run.stages):
        lines.append(f"\npath: {' → '.join(run.path)}")
    return lines


def _attempt_text(result: CaseResult, attempt: StageAttempt, attempts: int,
                  shown: set[int], routed: str | None = None) -> list[str]:
    """``routed``: where a route took the failure of the stage's last attempt."""
    title = f"stage {attempt.stage!r}"
    if attempts > 1:
        title += f" attempt {attempt.number}/{attempts}"
    outcome = ("passed" if attempt.passed else "failed" if routed is None
               else f"branch taken (failed, routed to {routed})")
    lines = [f"\n--- {title}: {outcome} ---"]
    lines.extend(_failure_line(result, failure) for failure in
                 _without_repeats(attempt.failures) if id(failure) not in shown)
    if attempt.turns or attempt.answered_first:
        lines.append("transcript:")
        if attempt.answered_first:
            lines.append("  calls left open by the previous stage, answered first:")
            lines.extend(_tool_run_text(run) for run in attempt.answered_first)
        for number, turn in enumerate(attempt.turns, 1):
            lines.extend(_turn_text(number, turn))
    lines.extend(_conversation_text(attempt))
    lines.extend(_judged_text(attempt))
    if attempt.trail:  # an agent's stage has none: its own code ran it
        lines.append("states: " + " -> ".join(attempt.trail))
    return lines


def _conversation_text(attempt: StageAttempt) -> list[str]:
    """A simulated conversation, message by message, and how it ended."""
    if not attempt.conversation:
        return []
    ended = f" (ended: {attempt.ended})" if attempt.ended else " (broke off)"
    return [f"conversation{ended}:", *(
        f"  {'user' if message.role == 'user' else 'agent'}: {_cut(message.text) or '-'}"
        for message in attempt.conversation)]


def _judged_text(attempt: StageAttempt) -> list[str]:
    """The criteria judged, each with its verdict (failed ones are said above in full)."""
    if not attempt.judgements:
        return []
    return ["judged:", *(f"  {judgement.verdict}: {judgement.criterion}"
                         f" (judge {judgement.model}, {judgement.template})"
                         for judgement in attempt.judgements)]


def expected_vs_actual(expected: Any, actual: Any) -> list[str]:
    """A diff of the two, pretty-printed as JSON (``-`` expected, ``+`` actual)."""
    short = _compact(expected), _compact(actual)
    if max(map(len, short)) <= ONE_LINE:
        return [f"- expected: {short[0]}", f"+ actual:   {short[1]}"]
    left, right = _pretty(expected).splitlines(), _pretty(actual).splitlines()
    diff = difflib.unified_diff(left, right, "expected", "actual", lineterm="", n=3)
    return list(diff)


def _compact(value: Any) -> str:
    try:
        return json.dumps(value, sort_keys=True, ensure_ascii=False, default=json_value)
    except (TypeError, ValueError):
        return repr(value)


def _pretty(value: Any) -> str:
    try:
        return json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False, default=json_value)
    except (TypeError, ValueError):
        return repr(value)


def json_value(value: Any) -> Any:
    """What JSON cannot hold: tool calls as the model made them (the shape expectations
    give them), anything else as repr. The failure text and the reports both use it."""
    if isinstance(value, ToolCall):
        arguments = value.arguments if value.arguments_error is None else value.arguments_raw
        return {"name": value.name, "arguments": arguments}
    return repr(value)


def _turn_text(number: int, turn: Turn) -> list[str]:
    mode = "stream" if turn.streamed else "request"
    # The conversation's list under whichever key the API keeps it (chat's and the
    # Messages API's ``messages``, Responses ``input`` items, Gemini ``contents``).
    messages = next((value for key in conversation_keys()
                     if isinstance(value := turn.request.get(key), list) and value),
                    None) or turn.request.get("input") or [{}]
    if not isinstance(messages, list):
        messages = [{"role": "user", "content": messages}]  # Responses: input as one string
    last = messages[-1] if isinstance(messages[-1], dict) else {}
    kind = last.get("role") or last.get("type") or "?"
    summary = (f"{plural(len(messages), 'message')}, last {kind}:"
               f" {_cut(_content(last))}")
    lines = [f"  > {mode} {number}: {summary}"]
    if turn.fault is not None:
        lines.append(f"    injected fault ({turn.fault['source']}): {turn.fault['does']},"
                     f" not the service's own{delivery_note(turn.fault)}")
    lines.extend(f"    retry: {_cut(line, keep_end=40)}" for line in turn.retries)
    if turn.error:
        # The first line only: a replay mismatch's request diff is printed once, above.
        first_line = turn.error.splitlines()[0]
        lines.append(f"  < no reply after {_ms(turn.elapsed_ms)}: {_cut(first_line)}")
    elif turn.reply is not None:
        lines.extend(_reply_text(turn.reply))
    lines.extend(_tool_run_text(run) for run in turn.tool_runs)
    if turn.reply is not None and turn.stop_reason:
        own = turn.reply.api_finish_reason or turn.reply.finish_reason
        lines.append(f"    stop reason: {stop_text(turn.stop_reason, own)}")
    return lines


def _tool_run_text(run: ToolRun) -> str:
    outcome = f"error: {_cut(run.error)}" if run.error else _cut(run.content)
    server = f" (MCP server {run.server})" if run.server else ""
    return (f"    tool {run.name}({_cut(run.arguments)}){server} -> {outcome}"
            f" [{run.duration_ms:.0f} ms]")


def _reply_text(reply: Reply) -> list[str]:
    figures = [f"{reply.latency_ms:.0f} ms"]
    if reply.ttft_ms is not None:
        figures.append(f"ttft {reply.ttft_ms:.0f} ms")
    if reply.usage and reply.usage.get("total_tokens") is not None:
        figures.append(f"{reply.usage['total_tokens']} tokens")
    reason = f"finish_reason={reply.finish_reason}"
    if reply.api_finish_reason not in (None, reply.finish_reason):
        reason += f" ({reply.api_finish_reason})"
    lines = [f"  < {reply.status} {reason} ({', '.join(figures)})"]
    if reply.error:
        lines.append(f"    error: {_cut(reply.error)}")
    if reply.reasoning:
        lines.append(f"    reasoning: {_cut(reply.reasoning)}")
    if reply.text:
        lines.append(f"    text: {_cut(reply.text)}")
    for call in reply.tool_calls:
        lines.append(f"    call {call.name}({_cut(call.arguments_raw)})")
    lines.extend(f"    problem: {problem}" for problem in reply.problems)
    return lines


def _content(message: dict[str, Any]) -> str:
    """What a sent message says, in one line, whichever API's shape it has."""
    content = message.get("content")
    if isinstance(content, str):
        return content
    if isinstance(message.get("parts"), list):  # Gemini: text, calls, function responses
        return " ".join(_part_text(part) for part in message["parts"])
    if message.get("tool_calls"):
        return "tool calls " + ", ".join(c["function"]["name"] for c in message["tool_calls"])
    for key in ("output", "arguments"):  # Responses: function_call_output, function_call
        if isinstance(message.get(key), str):
            return str(message[key])
    return json.dumps(content)


def _part_text(part: Any) -> str:
    if not isinstance(part, dict):
        return json.dumps(part)
    if isinstance(part.get("text"), str):
        return str(part["text"])
    for key, said in (("functionCall", "call"), ("functionResponse", "result of")):
        if isinstance(part.get(key), dict):
            return f"{said} {part[key].get('name')}"
    return json.dumps(part)


def plural(count: int, noun: str) -> str:
    """``1 message``, ``2 messages``."""
    return f"{count} {noun}{'' if count == 1 else 's'}"


def _ms(value: float) -> str:
    return f"{value / 1000:.2f} s" if value >= 1000 else f"{value:.0f} ms"


def _cut(text: str, keep_end: int = 0) -> str:
    """One line of at most about ``MAX_TEXT``; the last ``keep_end`` characters are kept
    (a retry line ends with the wait)."""
    text = text.replace("\n", "\\n")
    if len(text) <= MAX_TEXT:
        return text
    head, tail = text[:MAX_TEXT - keep_end], text[len(text) - keep_end:] if keep_end else ""
    return f"{head}... ({len(text)} chars){' ...' + tail if tail else ''}"
