"""What changed between two sets of cases, each case a typed record of the JSON report.

Two JSON reports give their case records as the report loader reads them; two cassette
folders give one record per cassette (``diff_cassettes``), so both are compared by the same
code.
Of a case: a verdict that flipped (reports only: cassettes hold none), a request the case
sent otherwise while the answers before it were the same (the case, or what the plugin
makes of it, changed: no model did that), tool calls that appeared, disappeared or changed
arguments, injected faults that came, went or changed, answers whose text changed (a short
word diff; marked when they follow a changed request), errors that came or went, the number of turns, and latency, time to first token
(left out between a replayed and a live run) and tokens that moved past the threshold.

What is compared of a case is its first run, and of each stage its last attempt: the
answer the stage ended with. Calls are paired by tool name, in order.
"""

from __future__ import annotations

import dataclasses
import difflib
import json
import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..report.json_report import AttemptRecord, CaseRecord, TurnRecord

WORDS_AROUND = 4
"""Unchanged words kept either side of a change in an answer's word diff."""
MAX_CHANGED_WORDS = 12


@dataclass(frozen=True)
class Change:
    nodeid: str
    kind: str
    """verdict, case added, case removed, unreadable, request, call added, call removed,
    arguments, fault, answer, error, turns, latency_ms, ttft_ms, total_tokens."""
    detail: str
    regression: bool = False
    stage: str | None = field(default=None, compare=False, repr=False)
    """The stage a request change is in (the answers from it on follow a changed
    request)."""


@dataclass(frozen=True)
class Limits:
    """What counts as news for a figure."""

    threshold: float
    """Percent a figure must move by."""
    min_ms: float
    """Milliseconds a timing must move by, whatever the percent (replays take ~1 ms)."""
    timings: bool = True
    """Compare latency and time to first token: not between a replayed run (whose times
    are the replay's) and a live one."""


def compare_cases(nodeid: str, old: CaseRecord, new: CaseRecord,
                  limits: Limits) -> Iterator[Change]:
    """Every change between two records of one case: first the requests the case sent
    (while the answers before them were the same), then the answers."""
    if old.outcome != new.outcome:
        regressed = old.outcome == "passed" and new.outcome == "failed"
        yield Change(nodeid, "verdict", f"{old.outcome} -> {new.outcome}", regressed)
    old_path, new_path = _path(old), _path(new)
    if old_path and new_path and old_path != new_path:  # a report with no path says nothing
        yield Change(nodeid, "path", f"{' → '.join(old_path)} -> {' → '.join(new_path)}")
    old_stages, new_stages = _final_stages(old), _final_stages(new)
    names = [*new_stages, *(n for n in old_stages if n not in new_stages)]
    requests = list(request_changes(nodeid, names, old_stages, new_stages))
    yield from requests
    changed_from = min((names.index(change.stage) for change in requests
                        if change.stage is not None), default=len(names))
    for position, name in enumerate(names):
        for change in _stage_changes(nodeid, name, old_stages.get(name), new_stages.get(name)):
            yield change if position < changed_from else dataclasses.replace(
                change, detail=f"{change.detail} (after a changed request)")
    if old.turns != new.turns:
        yield Change(nodeid, "turns", f"{_num(old.turns)} -> {_num(new.turns)}")
    for figure in ("latency_ms", "ttft_ms") if limits.timings else ():
        detail = _figure_change(getattr(old, figure), getattr(new, figure), limits.threshold,
                                limits.min_ms)
        if detail:
            yield Change(nodeid, figure, detail)
    for figure in ("total_tokens",):
        detail = _figure_change(getattr(old, figure), getattr(new, figure), limits.threshold,
                                0.0)
        if detail:
            yield Change(nodeid, figure, detail)


def request_changes(nodeid: str, names: list[str], old: dict[str, AttemptRecord],
                    new: dict[str, AttemptRecord]) -> Iterator[Change]:
    """Requests that differ while every answer before them was the same: the case (or
    what the plugin makes of it) sends something else, which no model did. Once an answer
    differs, the requests after it carry that answer and are not compared. Ids and
    signatures a server made up are left out (``_IDS``)."""
    for name in names:
        before, after = old.get(name), new.get(name)
        if before is None or after is None:
            return
        for number, (was, now) in enumerate(zip(before.turns, after.turns), 1):
            if was.request is not None and now.request is not None:
                differences = _differences(_request(was.request), _request(now.request))
                if differences:
                    yield Change(nodeid, "request", f"{name}: request {number}: "
                                 + "; ".join(differences), stage=name)
                    return
            if _answer_of(was) != _answer_of(now):
                return
        if len(before.turns) != len(after.turns):
            return


_IDS = frozenset({"id", "call_id", "tool_call_id", "tool_use_id", "signature",
                  "thoughtSignature", "thought_signature", "encrypted_content"})
"""Keys whose values a server makes up afresh (call and item ids, reasoning signatures)
and a request sends back: two runs of one case differ in them without any change."""

MAX_REQUEST_DIFFERENCES = 3


def _request(body: dict[str, Any]) -> Any:
    """A request as compared: without the model it names (cassettes of two models are
    compared by case name) and without ids and signatures."""
    return _without_ids({key: value for key, value in body.items() if key != "model"})


def _without_ids(value: Any) -> Any:
    if isinstance(value, dict):
        return {key: "<id>" if key in _IDS and isinstance(item, str) else _without_ids(item)
                for key, item in value.items()}
    if isinstance(value, list):
        return [_without_ids(item) for item in value]
    return value


def _differences(old: Any, new: Any, path: str = "") -> list[str]:
    """Where two JSON values differ, by key path, the first few."""
    if isinstance(old, dict) and isinstance(new, dict):
        found = []
        for key in dict.fromkeys([*old, *new]):
            found += _differences(old.get(key, _ABSENT), new.get(key, _ABSENT),
                                  f"{path}.{key}" if path else str(key))
            if len(found) >= MAX_REQUEST_DIFFERENCES:
                return found[:MAX_REQUEST_DIFFERENCES]
        return found
    if isinstance(old, list) and isinstance(new, list) and len(old) == len(new):
        found = []
        for index, (a, b) in enumerate(zip(old, new)):
            found += _differences(a, b, f"{path}.{index}" if path else str(index))
            if len(found) >= MAX_REQUEST_DIFFERENCES:
                return found[:MAX_REQUEST_DIFFERENCES]
        return found
    if old == new and type(old) is type(new):
        return []
    if isinstance(old, list) and isinstance(new, list):
        return [f"{path or 'body'}: {len(old)} -> {len(new)} items"]
    if isinstance(old, str) and isinstance(new, str) and max(len(old), len(new)) > SHORT:
        # Cut to their starts, two long texts that differ late would read the same.
        return [f"{path or 'body'}: {word_diff(old, new)}"]
    return [f"{path or 'body'}: {_short(old)} -> {_short(new)}"]


SHORT = 56
"""Values longer than this are cut (``_short``), and texts shown as a word diff."""


def _short(value: Any) -> str:
    text = _show(value)
    return text if len(text) <= SHORT + 4 else text[:SHORT + 1] + "..."


def _answer_of(turn: TurnRecord) -> Any:
    """What the model said in a turn, ids aside: what the next request carries."""
    reply = turn.reply
    if reply is None:
        return turn.error
    return (reply.status, reply.text, reply.reasoning, reply.error,
            [(call.name, _parsed(call.arguments)) for call in reply.tool_calls])


def _path(case: CaseRecord) -> list[str]:
    """The stages the case's first run went through (routes may take another way)."""
    return case.runs[0].path if case.runs else []


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
    old_faults, new_faults = _faults(old), _faults(new)
    if old_faults != new_faults:  # injected on purpose: never read as the service's doing
        yield Change(nodeid, "fault", f"{stage}: injected {', '.join(old_faults) or 'none'}"
                                      f" -> {', '.join(new_faults) or 'none'}")
    old_error, new_error = _error(old), _error(new)
    if old_error != new_error:  # says more than the answer an error leaves empty
        yield Change(nodeid, "error", f"{stage}: {old_error or 'none'} -> {new_error or 'none'}")
        return
    old_text, new_text = _answer(old), _answer(new)
    if old_text != new_text:
        yield Change(nodeid, "answer", f"{stage}: {word_diff(old_text, new_text)}")


def _faults(attempt: AttemptRecord) -> list[str]:
    """The faults injected into the attempt's requests: ``status 429 at request 1``."""
    return [f"{turn.fault.get('does', turn.fault.get('kind'))} at request"
            f" {turn.fault.get('request')}" for turn in attempt.turns if turn.fault]


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
