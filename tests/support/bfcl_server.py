"""A loopback chat server that plays a BFCL multi-turn record's calls, turn by turn.

``script`` maps the user messages of a conversation so far (one a turn) to the calls the
"model" makes in that turn, each ``{name, arguments}``; the handler answers a request with
the next step's calls, then with a plain text once the turn's steps are played. Steps are
one call each (``one_a_step``) or the whole turn at once. The request says which turn and
step it is at (the user messages, the assistant messages since the last), so the handler
keeps no state and a record's requests may interleave with other records'.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Callable
from typing import Any

from pytest_toolbench.bfcl.backend import as_arguments, parse_call

from .chat_server import RecordedRequest, Reply, completion, json_reply

Calls = list[dict[str, Any]]
Script = dict[tuple[str, ...], Calls]


def truth_calls(record: dict[str, Any], turn: list[str]) -> Calls:
    """A turn's ground-truth strings as the tool calls a model would send."""
    calls = []
    for text in turn:
        parsed = parse_call(text)
        calls.append({"name": parsed.name,
                      "arguments": as_arguments(parsed, record["involved_classes"])})
    return calls


def user_texts(record: dict[str, Any], added_text: str) -> list[str]:
    """The user message of each turn, as the imported case sends it."""
    return [turn[0]["content"] if turn else added_text for turn in record["question"]]


def add_record(script: Script, texts: list[str], turns: list[Calls]) -> None:
    """The record's turns under their conversation keys; a key another record already
    holds with other calls raises (the two records cannot share one server)."""
    for index, calls in enumerate(turns):
        key = tuple(texts[:index + 1])
        if script.get(key, calls) != calls:
            raise ValueError(f"two records share the conversation {key!r}")
        script[key] = calls


def steps_of(calls: Calls, one_a_step: bool) -> list[Calls]:
    if not calls:
        return []
    return [[call] for call in calls] if one_a_step else [calls]


def handler(script: Script, one_a_step: bool) -> Callable[[RecordedRequest], Reply]:
    ids = itertools.count()

    def answer(request: RecordedRequest) -> Reply:
        messages = request.json()["messages"]
        users = [index for index, message in enumerate(messages) if message["role"] == "user"]
        key = tuple(messages[index]["content"] for index in users)
        done = sum(1 for message in messages[users[-1]:] if message["role"] == "assistant")
        steps = steps_of(script[key], one_a_step)
        if done >= len(steps):
            return json_reply(completion("Done."))
        tool_calls = [{"id": f"call_{next(ids)}", "type": "function",
                       "function": {"name": call["name"],
                                    "arguments": json.dumps(call["arguments"])}}
                      for call in steps[done]]
        return json_reply(completion(tool_calls=tool_calls))

    return answer
