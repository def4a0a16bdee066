"""The loopback "model" of the BFCL multi-turn tests and benchmark: it plays a record's
calls (its ground truth, or a perturbation of it) turn by turn.

``Player`` answers each request from the conversation alone (the user messages so far give
the record and the turn, the assistant messages since the last one the step), so it keeps
no state and the requests of many records may interleave. A turn's calls go one a step
(at most 20 steps, BFCL's limit: the calls past the 19th come together in the 20th) or all
at once.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pytest_toolbench.bfcl.backend import as_arguments, parse_call
from pytest_toolbench.commands.bfcl_multi import ADDED_FUNCTIONS_TEXT

from .chat_server import completion, json_reply


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def truths(data: Path, category: str) -> dict[str, list[list[str]]]:
    rows = read_jsonl(data / "possible_answer" / f"BFCL_v4_{category}.json")
    return {row["id"]: row["ground_truth"] for row in rows}


Calls = list[dict[str, Any]]


def call_of(text: str, classes: list[str]) -> dict[str, Any]:
    parsed = parse_call(text)
    return {"name": parsed.name, "arguments": as_arguments(parsed, classes)}


def truth_turns(record: dict[str, Any], truth: list[list[str]]) -> list[Calls]:
    return [[call_of(text, record["involved_classes"]) for text in turn] for turn in truth]


def steps_of(calls: Calls, one_a_step: bool) -> list[Calls]:
    """A turn's calls as the steps the server plays (see the module's docstring)."""
    if not calls:
        return []
    if not one_a_step:
        return [calls]
    return [[call] for call in calls[:19]] + ([calls[19:]] if calls[19:] else [])


def user_texts(record: dict[str, Any]) -> list[str]:
    return [turn[0]["content"] if turn else ADDED_FUNCTIONS_TEXT for turn in record["question"]]


class Player:
    """The loopback model: each record's calls, turn by turn, found from the conversation
    (its user messages so far, the assistant messages since the last)."""

    def __init__(self, one_a_step: bool) -> None:
        self.one_a_step = one_a_step
        self.script: dict[tuple[str, ...], Calls] = {}
        self.ids = iter(range(10**9))

    def add(self, record: dict[str, Any], turns: list[Calls]) -> None:
        texts = user_texts(record)
        for index, calls in enumerate(turns):
            key = tuple(texts[:index + 1])
            assert self.script.get(key, calls) == calls, f"two records share {key}"
            self.script[key] = calls

    def __call__(self, request: Any) -> Any:
        messages = request.json()["messages"]
        users = [i for i, message in enumerate(messages) if message["role"] == "user"]
        done = sum(1 for message in messages[users[-1]:] if message["role"] == "assistant")
        steps = steps_of(self.script[tuple(messages[i]["content"] for i in users)],
                         self.one_a_step)
        if done >= len(steps):
            return json_reply(completion("Done."))
        return json_reply(completion(tool_calls=[
            {"id": f"call_{next(self.ids)}", "type": "function",
             "function": {"name": call["name"], "arguments": json.dumps(call["arguments"])}}
            for call in steps[done]]))
