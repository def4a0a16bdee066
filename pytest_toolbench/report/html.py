"""The HTML report: one self-contained page rendered from the JSON report's data.

``render_html(document)`` takes the report as docs/report.md documents it (a dict, as
``json.load`` gives it back), so ``--toolbench-html`` and ``toolbench html REPORT.json``
draw the same page from the same data. The page loads nothing: its CSS, its script and its
plots (SVG) are inline, and a Content-Security-Policy allows only that script (by its
hash), so it works opened from a CI artifact and no text in it can run.

Everything a case carries came from a model, a tool or a server: untrusted. Every text goes
through ``_e`` (HTML escaping, quotes included) on its way into the page; the script only
reads attributes the page wrote and toggles ``hidden``.
"""

from __future__ import annotations

import base64
import difflib
import hashlib
import html
import json
from collections.abc import Iterable, Mapping, Sequence
from importlib import resources
from pathlib import Path
from typing import Any

from ..atomic import write_atomic
from ..casefile.loader import format_key_path
from .html_plots import dot_plot, stream_timeline

Data = Mapping[str, Any]
"""A JSON object of the report: a case, run, stage, attempt, turn, reply or tool run."""

OUTCOME_ORDER = {"failed": 0, "xpassed": 1, "xfailed": 2, "skipped": 3, "passed": 4}
"""Failures first: what needs reading comes before what passed."""
BUILTIN_MARKS = ("skip", "skipif", "xfail")


def render_html(document: Data, title: str = "toolbench report") -> str:
    """The whole page for one report document."""
    cases = sorted(document.get("cases", []), key=_failures_first)
    script = _asset("report.js")
    body = "\n".join([
        f"<h1>{_e(title)}</h1>",
        f'<div class="muted">{_e(_counts(document.get("summary", {})))}</div>',
        _overview(cases), _filters(cases),
        '<div id="cases">', *(_case(case) for case in cases), "</div>",
    ])
    return (f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">\n'
            f'<meta http-equiv="Content-Security-Policy" content="{_policy(script)}">\n'
            f'<meta name="viewport" content="width=device-width, initial-scale=1">\n'
            f"<title>{_e(title)}</title>\n<style>{_asset('report.css')}</style></head>\n"
            f"<body>\n{body}\n<script>{script}</script>\n</body></html>\n")


def write_html(path: Path, document: Data, title: str = "toolbench report") -> None:
    """Write the page atomically, like the JSON report: no reader sees half a page."""
    write_atomic(path, render_html(document, title))


def write_session_html(path: Path, records: Sequence[Any], keywords: Mapping[str, list[str]],
                       registered: Sequence[str]) -> None:
    """The session's page: its case records as the JSON report holds them, plus marks.

    ``records`` are the session's case records (``CaseRecord``, or their JSON data);
    ``keywords`` the keywords of each node id's test report, which name its marks.
    """
    cases = [_case_data(record) for record in records]
    for case in cases:
        case["marks"] = marks_from_keywords(keywords.get(case["nodeid"], []), registered)
    outcomes = [case["outcome"] for case in cases]
    summary = {"cases": len(cases), **{o: outcomes.count(o) for o in sorted(set(outcomes))}}
    write_html(path, {"version": 1, "summary": summary, "cases": cases})


def _case_data(record: Any) -> dict[str, Any]:
    """A record as plain JSON data, the shape the JSON report file holds."""
    data = record if isinstance(record, Mapping) else record.to_json()
    return dict(data)


def marks_from_keywords(keywords: Iterable[str], registered: Sequence[str]) -> list[str]:
    """The mark names among a test report's keywords (which also hold node names).

    ``registered`` is the ini ``markers`` list (``"name(args): help"`` lines); a case's
    marks must be registered, so the registered names and pytest's own are the marks.
    """
    names = {line.split(":")[0].split("(")[0].strip() for line in registered}
    return sorted(name for name in set(keywords) if name in names or name in BUILTIN_MARKS)


def _failures_first(case: Data) -> int:
    return _outcome_rank(case.get("outcome", ""))  # sorted() keeps the report's order within


def _outcome_rank(outcome: str) -> int:
    return OUTCOME_ORDER.get(outcome, len(OUTCOME_ORDER))


def _asset(name: str) -> str:
    return (resources.files(__package__) / "html_assets" / name).read_text(encoding="utf-8")


def _policy(script: str) -> str:
    """Nothing from outside; inline styles; only the page's own script, named by hash."""
    digest = base64.b64encode(hashlib.sha256(script.encode("utf-8")).digest()).decode()
    return (f"default-src 'none'; style-src 'unsafe-inline'; img-src data:; "
            f"script-src 'sha256-{digest}'")


def _e(value: Any) -> str:
    """Escaped text for the page, attributes included."""
    return html.escape("" if value is None else str(value), quote=True)


def _counts(summary: Data) -> str:
    return ", ".join(f"{value} {key}" for key, value in summary.items()) or "no cases"


# ---------------------------------------------------------------------------- overview


def _overview(cases: Sequence[Data]) -> str:
    """Pass rates per model, then each model's latency and TTFT spread as dot plots."""
    models = sorted({_model(case) for case in cases})
    rows = "\n".join(_model_row(model, [c for c in cases if _model(c) == model])
                     for model in models)
    return ("<h2>Models</h2>\n<table class=\"models\"><tr><th>model</th><th class=\"num\">cases"
            "</th><th class=\"num\">runs passed</th><th class=\"num\">pass rate</th>"
            "<th>outcomes</th><th>reply latency (ms)</th><th>time to first token (ms)</th></tr>"
            f"\n{rows}</table>")


def _model_row(model: str, cases: Sequence[Data]) -> str:
    passed = sum(case.get("passes", 0) for case in cases)
    total = sum(case.get("runs_total", 0) for case in cases)
    rate = f"{passed / total:.0%}" if total else "-"
    outcomes = sorted({case.get("outcome", "") for case in cases}, key=_outcome_rank)
    tally = " ".join(f'<span class="badge o-{_e(o)}">'
                     f"{sum(c.get('outcome') == o for c in cases)} {_e(o)}</span>"
                     for o in outcomes)
    replies = [reply for case in cases for reply in _replies(case)]
    latencies = [r["latency_ms"] for r in replies if r.get("latency_ms") is not None]
    ttfts = [r["ttft_ms"] for r in replies if r.get("ttft_ms") is not None]
    return (f"<tr><td>{_e(model)}</td><td class=\"num\">{len(cases)}</td>"
            f"<td class=\"num\">{passed}/{total}</td><td class=\"num\">{rate}</td>"
            f"<td>{tally}</td><td>{dot_plot(latencies)}</td><td>{dot_plot(ttfts)}</td></tr>")


def _model(case: Data) -> str:
    return str(case.get("model") or "-")


def _replies(case: Data) -> Iterable[Data]:
    for run in case.get("runs", []):
        for stage in run.get("stages", []):
            for attempt in stage.get("attempts", []):
                for turn in attempt.get("turns", []):
                    if isinstance(turn, Mapping) and turn.get("reply"):
                        yield turn["reply"]


def _filters(cases: Sequence[Data]) -> str:
    marks = sorted({mark for case in cases for mark in case.get("marks", [])})
    choices = [("outcome", sorted({c.get("outcome", "") for c in cases}, key=_outcome_rank)),
               ("model", sorted({_model(c) for c in cases})),
               ("file", sorted({str(c.get("file", "")) for c in cases})), ("marks", marks)]
    selects = "".join(_select(key, values) for key, values in choices if values)
    return (f'<h2>Cases</h2>\n<div class="filters">{selects}'
            '<label>node id <input id="search" type="search" placeholder="contains..."></label>'
            f'<span class="muted"><span id="shown">{len(cases)}</span> of {len(cases)} shown'
            "</span></div>")


def _select(key: str, values: Sequence[str]) -> str:
    label = "marker" if key == "marks" else key
    options = "".join(f'<option value="{_e(v)}">{_e(v)}</option>' for v in values)
    return (f'<label>{label} <select data-filter="{key}"><option value="">all</option>'
            f"{options}</select></label>")


# ---------------------------------------------------------------------------- one case


def _case(case: Data) -> str:
    outcome = str(case.get("outcome", ""))
    attrs = {"nodeid": case.get("nodeid", ""), "outcome": outcome, "model": _model(case),
             "file": case.get("file", ""), "marks": " ".join(case.get("marks", []))}
    data = " ".join(f'data-{key}="{_e(value)}"' for key, value in attrs.items())
    is_open = " open" if _outcome_rank(outcome) < OUTCOME_ORDER["xfailed"] else ""
    runs = case.get("runs", [])
    parts = [_error_box("case", case.get("error"))] if case.get("error") else []
    parts.extend(_run(case, run, len(runs)) for run in runs)
    if not runs:
        parts.append('<div class="none">did not run</div>')
    return (f'<details class="case" {data}{is_open}><summary>'
            f'<span class="badge o-{_e(outcome)}">{_e(outcome)}</span>'
            f'<span class="id">{_e(case.get("nodeid"))}</span>'
            f'<span class="figs">{_e(_figures(case))}</span></summary>\n'
            f'<div class="body"><div class="muted">{_e(case.get("file"))}:'
            f'{_e(case.get("line"))}</div>\n' + "\n".join(parts) + "</div></details>")


def _figures(case: Data) -> str:
    runs = f"{case.get('passes')}/{case.get('runs_total')} runs, " \
        if (case.get("runs_total") or 0) > 1 else ""
    return (f"{runs}{_n(case.get('turns'), 'turn')}, {_n(case.get('tool_calls'), 'call')}, "
            f"{_count(case.get('total_tokens'))} tokens, {_ms(case.get('latency_ms'))}, "
            f"ttft {_ms(case.get('ttft_ms'))}")


def _run(case: Data, run: Data, runs: int) -> str:
    head = f'<div class="head">run {_e(run.get("number"))}</div>' if runs > 1 else ""
    error = _error_box("run", run.get("error")) if run.get("error") else ""
    stages = "".join(_stage(case, stage) for stage in run.get("stages", []))
    return f'<div class="run">{head}{error}{stages}</div>'


def _stage(case: Data, stage: Data) -> str:
    state = "passed" if stage.get("passed") else "failed"
    attempts = stage.get("attempts", [])
    body = "".join(_attempt(case, attempt, len(attempts)) for attempt in attempts)
    return (f'<div class="stage {state}"><div class="head">stage {_e(stage.get("name"))} '
            f'<span class="badge o-{state}">{state}</span></div>{body}</div>')


def _attempt(case: Data, attempt: Data, attempts: int) -> str:
    state = "passed" if attempt.get("passed") else "failed"
    head = (f'<div class="head">attempt {_e(attempt.get("number"))} of {attempts}: {state}'
            "</div>") if attempts > 1 else ""
    trail = " → ".join(_e(step) for step in attempt.get("trail", []))
    parts = [head, f'<div class="trail">states: {trail}</div>']
    parts.extend(_tool_run(run, "answers a call left open") for run in
                 attempt.get("answered_first", []))
    parts.extend(_turn(turn, number) for number, turn in enumerate(attempt.get("turns", []), 1))
    parts.extend(_failure(case, failure) for failure in attempt.get("failures", []))
    return f'<div class="attempt {state}">{"".join(parts)}</div>'


# ---------------------------------------------------------------------------- conversation


def _turn(turn: Any, number: int) -> str:
    if not isinstance(turn, Mapping):  # the documented example shortens with "..."
        return f'<div class="none">{_e(turn)}</div>'
    kind = "streamed request" if turn.get("streamed") else "request"
    retries = "".join(f"<li>{_e(line)}</li>" for line in turn.get("retries", []))
    head = (f'<div class="muted">{kind} {number}: {_ms(turn.get("elapsed_ms"))}, '
            f'stop: {_e(turn.get("stop_reason"))}</div>'
            + (f'<ul class="muted">{retries}</ul>' if retries else ""))
    reply = turn.get("reply")
    body = _reply(reply) if isinstance(reply, Mapping) else _error_box("no reply", turn.get("error"))
    runs = "".join(_tool_run(run, "tool") for run in turn.get("tool_runs", []))
    return head + body + runs


def _reply(reply: Data) -> str:
    parts = [(f'<div class="who">assistant · HTTP {_e(reply.get("status"))} · finish '
              f'{_e(reply.get("finish_reason"))} · {_ms(reply.get("latency_ms"))}'
              f'{_usage(reply.get("usage"))}</div>')]
    if reply.get("text"):
        parts.append(f"<pre>{_e(reply['text'])}</pre>")
    parts.extend(_tool_call(call) for call in reply.get("tool_calls", []))
    if not reply.get("text") and not reply.get("tool_calls"):
        parts.append('<div class="none">no text, no tool call</div>')
    if reply.get("error"):
        parts.append(f"<pre>error: {_e(reply['error'])}</pre>")
    parts.extend(f"<pre>protocol problem: {_e(p)}</pre>" for p in reply.get("problems", []))
    if reply.get("stream") is not None:
        parts.append(_stream(reply))
    return f'<div class="msg assistant">{"".join(parts)}</div>'


def _tool_call(call: Data) -> str:
    arguments = _pretty(call.get("arguments", ""))
    error = f"<pre>{_e(call['arguments_error'])}</pre>" if call.get("arguments_error") else ""
    return (f'<div>calls <b>{_e(call.get("name"))}</b> <span class="muted">'
            f'{_e(call.get("id"))}</span><pre>{_e(arguments)}</pre>{error}</div>')


def _tool_run(run: Data, role: str) -> str:
    kind = "error" if run.get("error") else "tool"
    outcome = (f"<pre>error: {_e(run['error'])}</pre>" if run.get("error")
               else f"<pre>{_e(_pretty(run.get('content', '')))}</pre>")
    return (f'<div class="msg {kind}"><div class="who">{_e(role)} {_e(run.get("name"))}'
            f'({_e(run.get("arguments"))}) · {_ms(run.get("duration_ms"))}</div>{outcome}</div>')


def _stream(reply: Data) -> str:
    stream = reply["stream"]
    facts = (f"{stream.get('chunks')} chunks, {'[DONE]' if stream.get('done') else 'no [DONE]'}"
             f", {'usage sent' if stream.get('usage') else 'no usage chunk'}")
    names = [str(call.get("name")) for call in reply.get("tool_calls", [])]
    return (f'<div class="muted">stream: {_e(facts)}</div>'
            + stream_timeline(reply.get("ttft_ms"), reply.get("latency_ms"), names))


def _failure(case: Data, failure: Data) -> str:
    where = f"{case.get('file')}:{failure.get('line') or case.get('line')}"
    return (f'<div class="failure"><span class="where">{_e(where)}</span> '
            f'<span class="muted">{_e(format_key_path(failure.get("key_path", [])))}</span>'
            f'<div>{_e(failure.get("message"))}</div>'
            f'{_diff(failure.get("expected"), failure.get("actual"))}</div>')


def _diff(expected: Any, actual: Any) -> str:
    """Expected vs actual as a unified diff of their JSON; nothing when one is missing."""
    if expected is None or actual is None or expected == actual:
        return ""
    before, after = _json_lines(expected), _json_lines(actual)
    lines = list(difflib.unified_diff(before, after, "expected", "actual", lineterm="", n=3))
    return '<pre class="diff">' + "\n".join(_diff_line(line) for line in lines) + "</pre>"


def _diff_line(line: str) -> str:
    kind = {"+": "ins", "-": "del", "@": "hunk"}.get(line[:1], "")
    return f'<span class="{kind}">{_e(line)}</span>' if kind else _e(line)


def _json_lines(value: Any) -> list[str]:
    return json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False).splitlines()


def _error_box(what: str, error: Any) -> str:
    return f'<div class="msg error"><div class="who">{_e(what)}</div><pre>{_e(error)}</pre></div>'


# ---------------------------------------------------------------------------- small texts


def _pretty(text: str) -> str:
    """JSON text indented for reading; anything else as it came."""
    try:
        return json.dumps(json.loads(text), indent=2, ensure_ascii=False)
    except (ValueError, TypeError):
        return str(text)


def _usage(usage: Any) -> str:
    if not isinstance(usage, Mapping) or usage.get("total_tokens") is None:
        return ""
    return f" · {_e(usage.get('total_tokens'))} tokens"


def _n(count: Any, noun: str) -> str:
    return f"{count or 0} {noun}{'' if count == 1 else 's'}"


def _count(value: Any) -> str:
    return "-" if value is None else str(value)


def _ms(value: Any) -> str:
    if not isinstance(value, (int, float)):
        return "-"
    return f"{value / 1000:.2f} s" if value >= 1000 else f"{value:.1f} ms"
