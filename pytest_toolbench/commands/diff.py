"""``toolbench diff OLD NEW``: what changed between two JSON reports, case by case.

Cases are matched by node id. For each: a verdict that flipped, tool calls that appeared,
disappeared or changed arguments, answers whose text changed (a short word diff), and
latency, time to first token and tokens that moved past ``--threshold`` percent. The exit
status is 1 when a verdict regressed (``passed`` -> ``failed``), so a nightly job can
watch a model or server drift.

What is compared of a case is its first run, and of each stage its last attempt: the
answer the stage ended with. Calls are paired by tool name, in order.
"""

from __future__ import annotations

import argparse
import difflib
import json
import sys
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from .html import ReportUnreadable, load_report

Data = Mapping[str, Any]
DEFAULT_THRESHOLD = 20.0
DEFAULT_MIN_MS = 100.0
"""Timings closer than this are not news whatever the percent (replays take ~1 ms)."""
WORDS_AROUND = 4
MAX_CHANGED_WORDS = 12
"""Unchanged words kept either side of a change in an answer's word diff."""


@dataclass(frozen=True)
class Change:
    nodeid: str
    kind: str
    """verdict, case added, case removed, call added, call removed, arguments, answer,
    latency_ms, ttft_ms, total_tokens."""
    detail: str
    regression: bool = False


# ---------------------------------------------------------------------------- comparing


def compare(old: Data, new: Data, threshold: float, min_ms: float) -> list[Change]:
    """Every change between two report documents, in the new report's case order."""
    before = {case["nodeid"]: case for case in old["cases"]}
    after = {case["nodeid"]: case for case in new["cases"]}
    changes: list[Change] = []
    for nodeid in [*after, *(n for n in before if n not in after)]:
        if nodeid not in before:
            changes.append(Change(nodeid, "case added", f"new case: {after[nodeid]['outcome']}"))
        elif nodeid not in after:
            changes.append(Change(nodeid, "case removed", f"was {before[nodeid]['outcome']}"))
        else:
            changes.extend(_case_changes(before[nodeid], after[nodeid], threshold, min_ms))
    return changes


def _case_changes(old: Data, new: Data, threshold: float, min_ms: float) -> Iterator[Change]:
    nodeid = new["nodeid"]
    if old.get("outcome") != new.get("outcome"):
        regressed = old.get("outcome") == "passed" and new.get("outcome") == "failed"
        yield Change(nodeid, "verdict", f"{old.get('outcome')} -> {new.get('outcome')}",
                     regressed)
    old_stages, new_stages = _final_stages(old), _final_stages(new)
    for name in [*new_stages, *(n for n in old_stages if n not in new_stages)]:
        yield from _stage_changes(nodeid, name, old_stages.get(name), new_stages.get(name))
    for figure in ("latency_ms", "ttft_ms", "total_tokens"):
        detail = _figure_change(old.get(figure), new.get(figure), threshold,
                                0.0 if figure == "total_tokens" else min_ms)
        if detail:
            yield Change(nodeid, figure, detail)


def _final_stages(case: Data) -> dict[str, Data]:
    """Stage name -> the last attempt of that stage in the case's first run."""
    runs = case.get("runs") or [{}]
    return {stage["name"]: stage["attempts"][-1]
            for stage in runs[0].get("stages", []) if stage.get("attempts")}


def _stage_changes(nodeid: str, stage: str, old: Data | None,
                   new: Data | None) -> Iterator[Change]:
    old_calls, new_calls = _calls(old), _calls(new)
    for name in dict.fromkeys([c[0] for c in new_calls] + [c[0] for c in old_calls]):
        was = [args for called, args in old_calls if called == name]
        now = [args for called, args in new_calls if called == name]
        for before, after in zip(was, now):
            if _parsed(before) != _parsed(after):
                yield Change(nodeid, "arguments",
                             f"{stage}: {name} {_args_change(before, after)}")
        for args in now[len(was):]:
            yield Change(nodeid, "call added", f"{stage}: {name}({args})")
        for args in was[len(now):]:
            yield Change(nodeid, "call removed", f"{stage}: {name}({args})")
    old_text, new_text = _answer(old), _answer(new)
    if old is not None and new is not None and old_text != new_text:
        yield Change(nodeid, "answer", f"{stage}: {word_diff(old_text, new_text)}")


def _calls(attempt: Data | None) -> list[tuple[str, str]]:
    """(name, arguments) of every call in the attempt's replies, in order."""
    if attempt is None:
        return []
    return [(str(call.get("name")), str(call.get("arguments", "")))
            for turn in attempt.get("turns", []) if isinstance(turn, Mapping)
            for call in (turn.get("reply") or {}).get("tool_calls", [])]


def _answer(attempt: Data | None) -> str:
    """The text of the attempt's last reply: what the stage ended with."""
    replies = [turn["reply"] for turn in (attempt or {}).get("turns", [])
               if isinstance(turn, Mapping) and turn.get("reply")]
    return str(replies[-1].get("text") or "") if replies else ""


def _parsed(arguments: str) -> Any:
    """Arguments compared as JSON values: spacing and key order are not changes."""
    try:
        return json.loads(arguments)
    except ValueError:
        return arguments


def _args_change(before: str, after: str) -> str:
    """Key by key when both are JSON objects, else the two texts."""
    old, new = _parsed(before), _parsed(after)
    if not (isinstance(old, dict) and isinstance(new, dict)):
        return f"{before!r} -> {after!r}"
    keys = [key for key in dict.fromkeys([*old, *new]) if old.get(key, _ABSENT) !=
            new.get(key, _ABSENT)]
    return ", ".join(f"{key}: {_show(old.get(key, _ABSENT))} -> {_show(new.get(key, _ABSENT))}"
                     for key in keys)


_ABSENT = object()


def _show(value: Any) -> str:
    return "(absent)" if value is _ABSENT else json.dumps(value, ensure_ascii=False)


def word_diff(old: str, new: str) -> str:
    """``[-removed-]{+added+}`` with a few unchanged words around each change."""
    before, after = old.split(), new.split()
    pieces: list[str] = []
    for tag, i1, i2, j1, j2 in difflib.SequenceMatcher(a=before, b=after).get_opcodes():
        if tag == "equal":
            pieces.append(_elide(before[i1:i2], first=not pieces, last=i2 == len(before)))
            continue
        if i2 > i1:
            pieces.append(f"[-{_clip(before[i1:i2])}-]")
        if j2 > j1:
            pieces.append(f"{{+{_clip(after[j1:j2])}+}}")
    return " ".join(piece for piece in pieces if piece) or "(whitespace only)"


def _clip(words: Sequence[str]) -> str:
    """A changed run of words, cut short: the diff says what changed, not the whole text."""
    if len(words) <= MAX_CHANGED_WORDS:
        return " ".join(words)
    return " ".join(words[:MAX_CHANGED_WORDS]) + f" ... ({len(words)} words)"


def _elide(words: Sequence[str], first: bool, last: bool) -> str:
    keep_head = 0 if first else WORDS_AROUND
    keep_tail = 0 if last else WORDS_AROUND
    if len(words) <= keep_head + keep_tail + 1:
        return " ".join(words)
    head, tail = words[:keep_head], words[len(words) - keep_tail:]
    return " ".join([*head, "...", *tail])


def _figure_change(old: Any, new: Any, threshold: float, floor: float) -> str | None:
    if not isinstance(old, (int, float)) or not isinstance(new, (int, float)):
        return None if old == new else f"{_num(old)} -> {_num(new)}"
    if abs(new - old) < max(floor, 1e-9):
        return None
    percent = (new - old) / old * 100 if old else float("inf")
    if abs(percent) <= threshold:
        return None
    return f"{_num(old)} -> {_num(new)} ({percent:+.0f}%)" if old else \
        f"{_num(old)} -> {_num(new)}"


def _num(value: Any) -> str:
    return "unknown" if value is None else f"{value:g}"


# ---------------------------------------------------------------------------- output


def render_text(changes: Sequence[Change], old: Path, new: Path, compared: int) -> str:
    """A plain table: one line per change, the case named once."""
    lines = [f"toolbench diff {old} -> {new}: {_tally(changes, compared)}"]
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


def render_markdown(changes: Sequence[Change], old: Path, new: Path, compared: int) -> str:
    lines = [f"### toolbench diff: `{old}` -> `{new}`", "", _tally(changes, compared)]
    if changes:
        lines += ["", "| case | change | detail |", "|---|---|---|"]
        lines += [f"| `{_cell(c.nodeid)}` | {'**regressed** ' if c.regression else ''}"
                  f"{c.kind} | {_cell(c.detail)} |" for c in changes]
    return "\n".join(lines) + "\n"


def render_json(changes: Sequence[Change], old: Path, new: Path, compared: int) -> str:
    document = {"old": str(old), "new": str(new), "cases_compared": compared,
                "regressed": sum(change.regression for change in changes),
                "changes": [asdict(change) for change in changes]}
    return json.dumps(document, indent=2, ensure_ascii=False) + "\n"


def _tally(changes: Sequence[Change], compared: int) -> str:
    regressed = sum(change.regression for change in changes)
    cases = len({change.nodeid for change in changes})
    return (f"{compared} cases compared, {cases} changed, {regressed} "
            f"{'verdict' if regressed == 1 else 'verdicts'} regressed")


def _cell(text: str) -> str:
    """Markdown table cell: pipes and newlines would break the row."""
    return text.replace("|", "\\|").replace("\n", " ").replace("`", "'")


RENDERERS = {"text": render_text, "markdown": render_markdown, "json": render_json}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="toolbench diff",
        description="Compare two JSON reports (pytest --toolbench-report) case by case: "
        "verdicts that flipped, tool calls that appeared, disappeared or changed "
        "arguments, answers that changed, timings and tokens past a threshold. Exit 1 "
        "when a verdict regressed (passed -> failed), else 0; 2 on a usage error.")
    parser.add_argument("old", type=Path, metavar="OLD", help="the earlier JSON report")
    parser.add_argument("new", type=Path, metavar="NEW", help="the later JSON report")
    parser.add_argument("--format", choices=sorted(RENDERERS), default="text",
                        help="text (a table, default), markdown (for a PR comment or a job "
                        "summary) or json")
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


def main(argv: list[str]) -> int:
    args = build_parser().parse_args(argv)
    try:
        old, new = load_report(args.old), load_report(args.new)
    except ReportUnreadable as error:
        print(f"toolbench diff: error: {error}", file=sys.stderr)
        return 2
    changes = compare(old, new, args.threshold, args.min_ms)
    compared = len({c["nodeid"] for c in old["cases"]} & {c["nodeid"] for c in new["cases"]})
    sys.stdout.write(RENDERERS[args.format](changes, args.old, args.new, compared))
    return 1 if any(change.regression for change in changes) else 0
