"""What changed between two sets of cases, each case a typed record of the JSON report.

Two JSON reports give their case records as the report loader reads them; two cassette
folders give one record per cassette (``diff_cassettes``), so both are compared by the same
code.
Of a case: a verdict that flipped (reports only: cassettes hold none), tool calls that
appeared, disappeared or changed arguments, answers whose text changed (a short word diff),
errors that came or went, the number of turns, and latency, time to first token and tokens
that moved past the threshold.

What is compared of a case is its first run, and of each stage its last attempt: the
answer the stage ended with. Calls are paired by tool name, in order.
"""

from __future__ import annotations

import difflib
import json
import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from ..report.json_report import AttemptRecord, CaseRecord

WORDS_AROUND = 4
"""Unchanged words kept either side of a change in an answer's word diff."""
MAX_CHANGED_WORDS = 12


@dataclass(frozen=True)
class Change:
    nodeid: str
    kind: str
    """verdict, case added, case removed, unreadable, call added, call removed, arguments,
    answer, error, turns, latency_ms, ttft_ms, total_tokens."""
    detail: str
    regression: bool = False


@dataclass(frozen=True)
class Limits:
    """What counts as news for a figure."""

    threshold: float
    """Percent a figure must move by."""
    min_ms: float
    """Milliseconds a timing must move by, whatever the percent (replays take ~1 ms)."""


def compare_cases(nodeid: str, old: CaseRecord, new: CaseRecord,
                  limits: Limits) -> Iterator[Change]:
    """Every change between two records of one case."""
    if old.outcome != new.outcome:
        regressed = old.outcome == "passed" and new.outcome == "failed"
        yield Change(nodeid, "verdict", f"{old.outcome} -> {new.outcome}", regressed)
    old_stages, new_stages = _final_stages(old), _final_stages(new)
    for name in [*new_stages, *(n for n in old_stages if n not in new_stages)]:
        yield from _stage_changes(nodeid, name, old_stages.get(name), new_stages.get(name))
    if old.turns != new.turns:
        yield Change(nodeid, "turns", f"{_num(old.turns)} -> {_num(new.turns)}")
    for figure in ("latency_ms", "ttft_ms", "total_tokens"):
        floor = 0.0 if figure == "total_tokens" else limits.min_ms
        detail = _figure_change(getattr(old, figure), getattr(new, figure), limits.threshold,
                                floor)
        if detail:
            yield Change(nodeid, figure, detail)


def _final_stages(case: CaseRecord) -> dict[str, AttemptRecord]:
    """Stage name -> the last attempt of that stage in the case's first run."""
    stages = case.runs[0].stages if case.runs else []
    return {stage.name: stage.attempts[-1] for stage in stages if stage.attempts}


def _stage_changes(nodeid: str, stage: str, old: AttemptRecord | None,
                   new: AttemptRecord | None) -> Iterator[Change]:
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
    if old is None or new is None:
        return
    old_error, new_error = _error(old), _error(new)
    if old_error != new_error:  # says more than the answer an error leaves empty
        yield Change(nodeid, "error", f"{stage}: {old_error or 'none'} -> {new_error or 'none'}")
        return
    old_text, new_text = _answer(old), _answer(new)
    if old_text != new_text:
        yield Change(nodeid, "answer", f"{stage}: {word_diff(old_text, new_text)}")


def _calls(attempt: AttemptRecord | None) -> list[tuple[str, str]]:
    """(name, arguments) of every call in the attempt's replies, in order."""
    if attempt is None:
        return []
    return [(call.name, call.arguments) for turn in attempt.turns if turn.reply is not None
            for call in turn.reply.tool_calls]


def _answer(attempt: AttemptRecord) -> str:
    """The text of the attempt's last reply: what the stage ended with."""
    replies = [turn.reply for turn in attempt.turns if turn.reply is not None]
    return replies[-1].text if replies else ""


def _error(attempt: AttemptRecord) -> str | None:
    """Why the attempt's last turn got no answer, or the error its reply carried."""
    if not attempt.turns:
        return None
    last = attempt.turns[-1]
    error = last.error or (last.reply.error if last.reply is not None else None)
    if error and last.reply is not None and not 200 <= last.reply.status < 300:
        return f"HTTP {last.reply.status}: {error}"
    return error or None


def _parsed(arguments: str) -> Any:
    """Arguments compared as JSON values: spacing and key order are not changes."""
    try:
        return json.loads(arguments)
    except (ValueError, RecursionError):
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
    before, after = _number(old), _number(new)
    if before is None or after is None or not math.isfinite(before - after):
        # Unknown, not a number, or past the floats: a change only if it shows as one.
        return None if _num(old) == _num(new) else f"{_num(old)} -> {_num(new)}"
    if abs(after - before) < max(floor, 1e-9):
        return None
    percent = (after - before) / before * 100 if before else math.inf
    if abs(percent) <= threshold:
        return None
    return f"{_num(old)} -> {_num(new)} ({percent:+.0f}%)" if before else \
        f"{_num(old)} -> {_num(new)}"


def _number(value: Any) -> float | None:
    """A figure as a float (an integer past the largest float as infinity); None when it is
    not a number at all."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    try:
        return float(value)
    except OverflowError:
        return math.inf if value > 0 else -math.inf


def _num(value: Any) -> str:
    number = _number(value)
    if number is not None:
        return f"{number:g}"
    return "unknown" if value is None else repr(value)[:40]
