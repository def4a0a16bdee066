"""BFCL multi-turn records -> cases (``toolbench import-bfcl`` on a ``multi_turn_*`` file).

A record becomes one case whose stages are its turns (``turn_0``, ``turn_1``...), each one
user message, the history carrying over; its tools a ``{bfcl: ...}`` entry naming BFCL's
backend classes (run from the installed ``bfcl-eval``), the record's initial config, the
long-context setting of its category and the functions held back until a turn (whose user
text BFCL sends as ``ADDED_FUNCTIONS_TEXT``); each turn's ground truth an
``expect.bfcl.ground_truth``. A stage allows 21 requests: BFCL allows 20 tool-calling steps
a turn and fails the record at the 21st.
"""

from __future__ import annotations

import re
from typing import Any, Final

from ..casefile.placeholders import escape_placeholders

MAX_STEPS: Final = 20
"""Tool-calling steps BFCL allows a turn; the 21st fails the record."""
ADDED_FUNCTIONS_TEXT: Final = (
    "I have updated some more functions you can choose from. What about now?")
"""The user text of a turn that adds held-back functions (the data has none)."""
_NOT_IN_MARK: Final = re.compile(r"[^A-Za-z0-9_]")


class MultiTurnUnmappable(Exception):
    """A multi-turn record the case format cannot express; skipped with this reason."""


def is_multi_turn(record: dict[str, Any]) -> bool:
    """A record of BFCL's multi-turn categories: it names backend classes, not functions."""
    return "involved_classes" in record


def multi_turn_case(record: dict[str, Any], record_id: str, category: str,
                    truths: dict[str, Any] | None) -> dict[str, Any]:
    """One multi-turn record as case data (not validated yet)."""
    turns = _turns(record)
    truth = _ground_truth(record_id, truths, len(turns))
    held_back = _held_back(record, len(turns))
    stages = [_stage(index, turn, truth[index], index in held_back)
              for index, turn in enumerate(turns)]
    entry: dict[str, Any] = {"involved_classes": record["involved_classes"],
                             "initial_config": record.get("initial_config") or {}}
    if "long_context" in category or "composite" in category:  # as BFCL decides it
        entry["long_context"] = True
    if held_back:
        entry["held_back"] = {f"turn_{index}": names for index, names in held_back.items()}
    return {
        "name": record_id,
        "description": f"BFCL {record_id} (category {category})",
        "marks": ["bfcl", f"bfcl_{_NOT_IN_MARK.sub('_', category)}"],
        "tools": [{"bfcl": entry}],
        "stages": stages,
    }


def _turns(record: dict[str, Any]) -> list[list[dict[str, Any]]]:
    question = record.get("question")
    if not isinstance(question, list) or not question or not all(
            isinstance(turn, list) for turn in question):
        raise MultiTurnUnmappable("the record has no list of turns")
    if not isinstance(record.get("involved_classes"), list):
        raise MultiTurnUnmappable("involved_classes is not a list of class names")
    return question


def _ground_truth(record_id: str, truths: dict[str, Any] | None, turns: int) -> list[Any]:
    if truths is None or record_id not in truths:
        raise MultiTurnUnmappable("the answers file has no record with this id")
    truth = truths[record_id]
    if not isinstance(truth, list) or not all(
            isinstance(turn, list) and all(isinstance(call, str) for call in turn)
            for turn in truth):
        raise MultiTurnUnmappable("its ground_truth is not a list of turns of call strings")
    if len(truth) != turns:
        raise MultiTurnUnmappable(f"its ground truth has {len(truth)} turns, the question"
                                  f" {turns}")
    return truth


def _held_back(record: dict[str, Any], turns: int) -> dict[int, list[str]]:
    """``missed_function``: turn index -> the functions first offered at that turn."""
    missed = record.get("missed_function") or {}
    if not isinstance(missed, dict):
        raise MultiTurnUnmappable("missed_function is not a mapping of turn -> functions")
    held: dict[int, list[str]] = {}
    for turn, names in missed.items():
        if not str(turn).isdigit() or int(turn) >= turns or not isinstance(names, list):
            raise MultiTurnUnmappable(f"missed_function names turn {turn!r}, which the"
                                      " question lacks")
        held[int(turn)] = [str(name) for name in names]
    return dict(sorted(held.items()))


def _stage(index: int, messages: list[dict[str, Any]], truth: list[str],
           adds_functions: bool) -> dict[str, Any]:
    stage: dict[str, Any] = {"name": f"turn_{index}"}
    if adds_functions:
        if messages:
            raise MultiTurnUnmappable(f"turn {index} adds held-back functions, yet has"
                                      " messages of its own")
        stage["user"] = ADDED_FUNCTIONS_TEXT
    elif (len(messages) == 1 and isinstance(messages[0], dict)
          and messages[0].get("role") == "user" and isinstance(messages[0].get("content"), str)):
        stage["user"] = messages[0]["content"]
    elif messages:
        stage["messages"] = [dict(message) for message in messages]
    else:
        raise MultiTurnUnmappable(f"turn {index} has no message")
    if "user" in stage:
        stage["user"] = escape_placeholders(stage["user"])
    if "messages" in stage:
        stage["messages"] = [_escaped(message) for message in stage["messages"]]
    stage.update({"run_tools": True, "max_turns": MAX_STEPS + 1,
                  "expect": {"bfcl": {"ground_truth": list(truth)}}})
    return stage


def _escaped(value: Any) -> Any:
    """A message's strings as a case file writes them: a ``${`` of BFCL's text is text."""
    if isinstance(value, str):
        return escape_placeholders(value)
    if isinstance(value, list):
        return [_escaped(item) for item in value]
    if isinstance(value, dict):
        return {key: _escaped(item) for key, item in value.items()}
    return value
