"""What changed between two sets of cases, each case in the JSON report's shape.

Two JSON reports give their case records as they are; two cassette folders give one
case-shaped record per cassette (``diff_cassettes``), so both are compared by the same code.
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
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

Data = Mapping[str, Any]
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


def compare_cases(nodeid: str, old: Data, new: Data, limits: Limits) -> Iterator[Change]:
    """Every change between two records of one case."""
    if old.get("outcome") != new.get("outcome"):
        regressed = old.get("outcome") == "passed" and new.get("outcome") == "failed"
        yield Change(nodeid, "verdict", f"{old.get('outcome')} -> {new.get('outcome')}",
                     regressed)
    old_stages, new_stages = _final_stages(old), _final_stages(new)
    for name in [*new_stages, *(n for n in old_stages if n not in new_stages)]:
        yield from _stage_changes(nodeid, name, old_stages.get(name), new_stages.get(name))
    if old.get("turns") != new.get("turns"):
        yield Change(nodeid, "turns", f"{_num(old.get('turns'))} -> {_num(new.get('turns'))}")
    for figure in ("latency_ms", "ttft_ms", "total_tokens"):
        floor = 0.0 if figure == "total_tokens" else limits.min_ms
        detail = _figure_change(old.get(figure), new.get(figure), limits.threshold, floor)
        if detail:
            yield Change(nodeid, figure, detail)


def _final_stages(case: Data) -> dict[str, Data]:
    """Stage name -> the last attempt of that stage in the case's first run."""
    runs = _list(case.get("runs"))
    stages = [_mapping(stage) for stage in _list(_mapping(runs[0] if runs else {}).get("stages"))]
    return {str(stage.get("name")): _mapping(_list(stage.get("attempts"))[-1])
            for stage in stages if _list(stage.get("attempts"))}


def _mapping(value: Any) -> Data:
    """``value`` if it is a mapping, else an empty one: a report may come from other hands,
    and a part of the wrong shape compares as missing instead of stopping the diff."""
    return value if isinstance(value, Mapping) else {}


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


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
    if old is None or new is None:
        return
    old_error, new_error = _error(old), _error(new)
    if old_error != new_error:  # says more than the answer an error leaves empty
        yield Change(nodeid, "error", f"{stage}: {old_error or 'none'} -> {new_error or 'none'}")
        return
    old_text, new_text = _answer(old), _answer(new)
    if old_text != new_text:
        yield Change(nodeid, "answer", f"{stage}: {word_diff(old_text, new_text)}")


def _turns(attempt: Data | None) -> list[Data]:
    return [turn for turn in _list(_mapping(attempt).get("turns")) if isinstance(turn, Mapping)]


def _calls(attempt: Data | None) -> list[tuple[str, str]]:
    """(name, arguments) of every call in the attempt's replies, in order."""
    return [(str(call.get("name")), str(call.get("arguments", "")))
            for turn in _turns(attempt)
            for call in _list(_mapping(turn.get("reply")).get("tool_calls"))
            if isinstance(call, Mapping)]


def _answer(attempt: Data) -> str:
    """The text of the attempt's last reply: what the stage ended with."""
    replies = [_mapping(turn["reply"]) for turn in _turns(attempt) if turn.get("reply")]
    return str(replies[-1].get("text") or "") if replies else ""


def _error(attempt: Data) -> str | None:
    """Why the attempt's last turn got no answer, or the error its reply carried."""
    turns = _turns(attempt)
    if not turns:
        return None
    reply = _mapping(turns[-1].get("reply"))
    error = turns[-1].get("error") or reply.get("error")
    status = reply.get("status")
    if error and isinstance(status, int) and not 200 <= status < 300:
        return f"HTTP {status}: {error}"
    return str(error) if error else None


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
