"""One case of the HTML report: its runs, stages and attempts as a conversation.

Each turn shows what was sent (collapsed), the reply (text, reasoning, tool calls, both
finish reasons, protocol problems, a stream's timeline), the tools' answers; each attempt
its state trail, a simulated conversation message by message, its trajectory (every call,
in order), its probes, the criteria a judge checked (verdict, split, each sample's
reasoning), the toolboxes' state afterwards (collapsed), and failing expectations with
expected vs actual as a diff.
Everything is read from the case's typed record (``report/json_report.py``), and every
text is escaped (``e``). Only what a server or a tool sent as it was (a request body, a
usage object, a toolbox's state) is read as JSON data.
"""

from __future__ import annotations

import difflib
import json
from collections.abc import Mapping
from typing import Any

from ..apis import conversation_keys
from ..faults import delivery_note
from ..keypaths import format_key_path
from ..records import stop_text
from .html_page import Data, count, json_lines, ms, plural, pretty
from .html_page import escape as e
from .html_plots import stream_timeline, tools_timeline
from .json_report import (
    AttemptRecord,
    CaseRecord,
    FailureRecord,
    JudgementRecord,
    ReplyRecord,
    RunRecord,
    StageRecord,
    StreamRecord,
    ToolCallRecord,
    ToolRunRecord,
    TurnRecord,
)

OUTCOME_ORDER = {"failed": 0, "interrupted": 1, "xpassed": 2, "xfailed": 3, "skipped": 4,
                 "passed": 5}
"""Failures first: what needs reading comes before what passed."""
CONVERSATION_KEYS = conversation_keys()
"""Where the APIs' request bodies hold the conversation (the rest is settings)."""


def outcome_rank(outcome: str) -> int:
    return OUTCOME_ORDER.get(outcome, len(OUTCOME_ORDER))


def model_of(case: CaseRecord) -> str:
    return case.model or "-"


def api_of(case: CaseRecord) -> str:
    return case.api


def render_case(case: CaseRecord) -> str:
    attrs = {"nodeid": case.nodeid, "outcome": case.outcome, "model": model_of(case),
             "api": case.api, "file": case.file, "marks": " ".join(case.marks)}
    data = " ".join(f'data-{key}="{e(value)}"' for key, value in attrs.items())
    is_open = " open" if outcome_rank(case.outcome) < OUTCOME_ORDER["xfailed"] else ""
    parts = [_error_box("case", case.error)] if case.error else []
    parts.extend(_run(case, run, len(case.runs)) for run in case.runs)
    if not case.runs:
        parts.append('<div class="none">did not run</div>')
    marks = " ".join(f'<span class="mark">{e(mark)}</span>' for mark in case.marks)
    return (f'<details class="case" {data}{is_open}><summary>'
            f'<span class="badge o-{e(case.outcome)}">{e(case.outcome)}</span>'
            f'<span class="id">{e(case.nodeid)}</span>{marks}'
            f'<span class="figs">{e(_figures(case))}</span></summary>\n'
            f'<div class="body"><div class="muted">{e(case.file)}:'
            f'{e(case.line)} · {e(case.api)} API</div>\n'
            + "\n".join(parts) + "</div></details>")


def _figures(case: CaseRecord) -> str:
    runs = f"{case.passes}/{case.runs_total} runs, " if case.runs_total > 1 else ""
    return (f"{runs}{plural(case.turns, 'turn')}, "
            f"{plural(case.tool_calls, 'call')}, {count(case.total_tokens)} "
            f"tokens, {ms(case.latency_ms)}, ttft {ms(case.ttft_ms)}")


def _run(case: CaseRecord, run: RunRecord, runs: int) -> str:
    head = f'<div class="head">run {e(run.number)}</div>' if runs > 1 else ""
    error = _error_box("run", run.error) if run.error else ""
    path = (f'<div class="trail">path: {" → ".join(e(name) for name in run.path)}</div>'
            if case.routed else "")
    stages = "".join(_stage(case, stage) for stage in run.stages)
    return f'<div class="run">{head}{error}{path}{stages}{_background(run)}</div>'


def _background(run: RunRecord) -> str:
    """The run's background tasks: each started, ended, its result or error."""
    rows = []
    for task in run.background:
        said = (f"error: {task.error}" if task.error is not None
                else f"result: {task.result}")
        ended = ms(task.ended_ms) if task.ended_ms is not None else "-"
        server = f"MCP server {task.server}: " if task.server else ""
        rows.append(f'<div class="msg {"failed" if task.error else "tool"}"><div class="who">'
                    f"background {e(task.task)} {e(server)}{e(task.name)}({e(task.arguments)})"
                    f" · {e(task.status)} · started {ms(task.started_ms)}, ended {ended}</div>"
                    f"<pre>{e(said)}</pre></div>")
    return "".join(rows)


def _stage(case: CaseRecord, stage: StageRecord) -> str:
    outcome = stage.outcome
    state = "branch" if stage.branch else outcome
    routed = f" → {e(stage.next)}" if case.routed and stage.next else ""
    body = "".join(_attempt(case, attempt, len(stage.attempts)) for attempt in stage.attempts)
    return (f'<div class="stage {state}"><div class="head">stage {e(stage.name)} '
            f'<span class="badge o-{state}">{e(outcome)}</span>{routed}</div>{body}</div>')


def _attempt(case: CaseRecord, attempt: AttemptRecord, attempts: int) -> str:
    state = "passed" if attempt.passed else "failed"
    head = (f'<div class="head">attempt {e(attempt.number)} of {attempts}: {state}'
            "</div>") if attempts > 1 else ""
    trail = " → ".join(e(step) for step in attempt.trail)
    parts = [head, f'<div class="trail">states: {trail}</div>']
    parts.extend(_tool_run(run, "answers a call left open") for run in attempt.answered_first)
    parts.extend(_turn(turn, number) for number, turn in enumerate(attempt.turns, 1))
    parts.append(_conversation(attempt))
    parts.append(_trajectory(attempt.trajectory))
    parts.extend(_tool_run(run, "probe") for run in attempt.probes)
    parts.extend(_judgement(judgement) for judgement in attempt.judgements)
    if attempt.state is not None:
        parts.append(_state(attempt.state, attempt.state_errors))
    parts.extend(_failure(case, failure) for failure in attempt.failures)
    return f'<div class="attempt {state}">{"".join(parts)}</div>'


# ---------------------------------------------------------------------------- second models


def _conversation(attempt: AttemptRecord) -> str:
    """A simulated conversation, message by message, and how it ended."""
    if not attempt.conversation:
        return ""
    ended = f"ended: {e(attempt.ended)}" if attempt.ended else "broke off"
    rows = "".join(f'<div class="said {e(message.role)}"><b>{e(message.role)}</b>:'
                   f" {e(message.text)}</div>" for message in attempt.conversation)
    return (f'<div class="conversation"><div class="head">simulated conversation'
            f" ({ended})</div>{rows}</div>")


def _judgement(judgement: JudgementRecord) -> str:
    """One criterion as judged: the verdict and split, each sample's reasoning or error."""
    state = "passed" if judgement.passed else "failed"
    samples = "".join(
        f"<li>{e(sample.verdict)}: {e(sample.reasoning)}</li>" if sample.error is None
        else f"<li>judge error: {e(sample.error)}</li>" for sample in judgement.samples)
    return (f'<div class="judgement {state}">judge ({e(judgement.model)},'
            f" {e(judgement.template)}): <b>{e(judgement.criterion)}</b>:"
            f" {e(judgement.verdict)}<ul>{samples}</ul></div>")


# ---------------------------------------------------------------------------- the world


def _trajectory(calls: list[ToolCallRecord]) -> str:
    """Every call of the attempt in one line, each by its index (as failures name them)."""
    if not calls:
        return ""
    steps = " → ".join(f"#{index} <b>{e(call.name)}</b>({e(call.arguments)})"
                       for index, call in enumerate(calls))
    return f'<div class="trajectory">trajectory: {steps}</div>'


def _state(state: Any, errors: dict[str, str]) -> str:
    """The toolboxes' state afterwards, collapsed, as JSON; then why any could not be
    read."""
    unread = "".join(f'<div class="failure">state of {e(name)} could not be read:'
                     f" {e(error)}</div>" for name, error in errors.items())
    return (f'<details class="state"><summary>state: {e(", ".join(map(str, state)))}'
            f"</summary><pre>{e(json.dumps(state, indent=2, ensure_ascii=False))}</pre>"
            "</details>" + unread)


# ---------------------------------------------------------------------------- one turn


def _turn(turn: TurnRecord, number: int) -> str:
    kind = "streamed request" if turn.streamed else "request"
    retries = "".join(f"<li>{e(line)}</li>" for line in turn.retries)
    fault = turn.fault
    injected = ("" if fault is None else
                f'<div class="fault">injected fault ({e(str(fault.get("source", "")))}):'
                f' {e(str(fault.get("does", fault.get("kind", ""))))}'
                f'{e(delivery_note(fault))}</div>')
    head = (f'<div class="muted">{kind} {number}: {ms(turn.elapsed_ms)}, '
            f'stop: {e(_stop(turn))}</div>' + injected
            + (f'<ul class="muted">{retries}</ul>' if retries else ""))
    sent = _sent(turn.request) if turn.request is not None else ""
    body = _reply(turn.reply) if turn.reply is not None else _error_box("no reply", turn.error)
    runs = "".join(_tool_run(run, "tool") for run in turn.tool_runs)
    timeline = turn.timeline
    drawn = "" if timeline is None else tools_timeline(
        timeline.stream_ended_ms, [(call.name, call.closed_ms, call.started_ms, call.ended_ms)
                                   for call in timeline.calls], timeline.saved_ms)
    return head + sent + body + runs + drawn


def _stop(turn: TurnRecord) -> str:
    reply = turn.reply
    return stop_text(turn.stop_reason, None if reply is None
                     else reply.api_finish_reason or reply.finish_reason)


def _sent(request: Data) -> str:
    """The request body as sent, collapsed: its conversation one message a block (whatever
    the API calls them), then its other settings on one line."""
    messages: list[tuple[str, Any]] = []
    for key in CONVERSATION_KEYS:
        value = request.get(key)
        if isinstance(value, list):
            messages.extend((_role(item), item) for item in value)
        elif value is not None:
            messages.append((key, value))
    blocks = "".join(f'<div class="msg sent"><div class="who">{e(role)}</div>'
                     f"<pre>{e(_message_text(item))}</pre></div>" for role, item in messages)
    return (f'<details class="request"><summary>sent {plural(len(messages), "message")}'
            f"</summary>{blocks}"
            f'<div class="muted">{e(_settings(request))}</div></details>')


def _role(item: Any) -> str:
    if isinstance(item, Mapping):
        return str(item.get("role") or item.get("type") or "item")
    return "item"


def _message_text(item: Any) -> str:
    """A message's text when it is all text; otherwise its fields as JSON, role aside."""
    if isinstance(item, str):
        return item
    if isinstance(item, Mapping):
        rest = {key: value for key, value in item.items() if key not in ("role", "type")}
        if set(rest) == {"content"} and isinstance(rest["content"], str):
            return rest["content"]
        return json.dumps(rest, indent=2, ensure_ascii=False)
    return json.dumps(item, indent=2, ensure_ascii=False)


def _settings(request: Data) -> str:
    listed = request.get("tools")
    tools = [tool.get("name") or (tool.get("function") or {}).get("name")
             for tool in (listed if isinstance(listed, list) else [])
             if isinstance(tool, Mapping)]
    rest = {key: value for key, value in request.items()
            if key not in (*CONVERSATION_KEYS, "tools")}
    parts = [f"{key}: {json.dumps(value, ensure_ascii=False)}" for key, value in rest.items()]
    if tools:
        parts.append(f"tools: {', '.join(str(name) for name in tools)}")
    return " · ".join(parts)


def _reply(reply: ReplyRecord) -> str:
    parts = [(f'<div class="who">assistant · HTTP {e(reply.status)} · finish '
              f'{e(_finish(reply))} · {ms(reply.latency_ms)}'
              f'{_usage(reply.usage)}</div>')]
    if reply.reasoning:
        parts.append(f'<div class="reasoning"><div class="who">reasoning</div>'
                     f"<pre>{e(reply.reasoning)}</pre></div>")
    if reply.text:
        parts.append(f"<pre>{e(reply.text)}</pre>")
    parts.extend(_tool_call(call) for call in reply.tool_calls)
    if not reply.text and not reply.tool_calls:
        parts.append('<div class="none">no text, no tool call</div>')
    if reply.error:
        parts.append(f"<pre>error: {e(reply.error)}</pre>")
    parts.extend(f"<pre>protocol problem: {e(p)}</pre>" for p in reply.problems)
    if reply.stream is not None:
        parts.append(_stream(reply, reply.stream))
    return f'<div class="msg assistant">{"".join(parts)}</div>'


def _finish(reply: ReplyRecord) -> str:
    """The normalised finish reason, and the API's own word beside it when it differs."""
    normalised, own = reply.finish_reason, reply.api_finish_reason
    if own is None or own == normalised:
        return str(normalised)
    return f"{normalised} (API: {own})"


def _tool_call(call: ToolCallRecord) -> str:
    error = f"<pre>{e(call.arguments_error)}</pre>" if call.arguments_error else ""
    return (f'<div>calls <b>{e(call.name)}</b> <span class="muted">'
            f'{e(call.id)}</span><pre>{e(pretty(call.arguments))}</pre>{error}</div>')


def _tool_run(run: ToolRunRecord, role: str) -> str:
    kind = "error" if run.error else "tool"
    outcome = (f"<pre>error: {e(run.error)}</pre>" if run.error
               else f"<pre>{e(pretty(run.content))}</pre>")
    server = f"MCP server {e(run.server)}: " if run.server else ""
    return (f'<div class="msg {kind}"><div class="who">{e(role)} {server}{e(run.name)}'
            f"({e(run.arguments)}) · {ms(run.duration_ms)}</div>{outcome}</div>")


def _stream(reply: ReplyRecord, stream: StreamRecord) -> str:
    facts = (f"{stream.chunks} chunks, "
             f"{'ended properly' if stream.done else 'no end event'}, "
             f"{'usage sent' if stream.usage else 'no usage chunk'}")
    calls = [(call.name, call.completed_ms) for call in reply.tool_calls]
    return (f'<div class="muted">stream: {e(facts)}</div>'
            + stream_timeline(reply.ttft_ms, reply.latency_ms, calls))


# ---------------------------------------------------------------------------- failures


def _failure(case: CaseRecord, failure: FailureRecord) -> str:
    where = f"{case.file}:{failure.line or case.line}"
    return (f'<div class="failure"><span class="where">{e(where)}</span> '
            f'<span class="muted">{e(format_key_path(failure.key_path))}</span>'
            f"<div>{e(failure.message)}</div>"
            f"{_diff(failure.expected, failure.actual)}</div>")


def _diff(expected: Any, actual: Any) -> str:
    """Expected vs actual as a unified diff of their JSON; nothing when one is missing."""
    if expected is None or actual is None or expected == actual:
        return ""
    before, after = json_lines(expected), json_lines(actual)
    lines = list(difflib.unified_diff(before, after, "expected", "actual", lineterm="", n=3))
    return '<pre class="diff">' + "\n".join(_diff_line(line) for line in lines) + "</pre>"


def _diff_line(line: str) -> str:
    kind = {"+": "ins", "-": "del", "@": "hunk"}.get(line[:1], "")
    return f'<span class="{kind}">{e(line)}</span>' if kind else e(line)


def _error_box(what: str, error: Any) -> str:
    return f'<div class="msg error"><div class="who">{e(what)}</div><pre>{e(error)}</pre></div>'


def _usage(usage: Any) -> str:
    if not isinstance(usage, Mapping) or usage.get("total_tokens") is None:
        return ""
    return f" · {e(usage.get('total_tokens'))} tokens"
