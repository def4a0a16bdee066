"""A criterion judged: one request a sample, a structured verdict each, the majority.

The judge is asked for ``{"reasoning": string, "verdict": "pass" | "fail"}`` (reasoning
first) in its API's own structured mode (``WireApi.structured``), at temperature 0 with a
seed where the API takes one (sample N sends seed N). It fails closed: a reply that is no
valid verdict (an HTTP or transport error, a refusal, a reply cut at its token limit, text
that is not the JSON asked for, a verdict that is neither ``pass`` nor ``fail``) is a judge
error, and a criterion with a judge error never passes, whatever its other samples say.
"""

from __future__ import annotations

import json
from typing import Any

from ..records import Judgement, JudgeSample, Turn
from ..wire.base import JSON_ERRORS, structured_answer
from .prompts import JUDGE_TEMPLATE, compact, template, transcript
from .second import SecondModel

ANSWER = "verdict"
"""The name of the structured answer (a Messages judge calls a tool of this name)."""

VERDICT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"reasoning": {"type": "string"},
                   "verdict": {"type": "string", "enum": ["pass", "fail"]}},
    "required": ["reasoning", "verdict"],
    "additionalProperties": False,
}
MAX_TOKENS = 512
"""The judge's token limit: room for a few sentences of reasoning and the verdict."""


async def judge(judge_model: SecondModel, messages: list[dict[str, Any]], criterion: str,
                samples: int) -> tuple[Judgement, list[Turn]]:
    """``criterion`` judged ``samples`` times over the conversation ``messages``."""
    prompt = template(JUDGE_TEMPLATE)
    asked = [{"role": "system", "content": prompt.fill("system")},
             {"role": "user", "content": prompt.fill("user", transcript=transcript(messages),
                                                     criterion=criterion)}]
    judgement = Judgement(criterion, judge_model.model, prompt.version)
    turns: list[Turn] = []
    for number in range(samples):
        parts = judge_model.parts(asked, {"temperature": 0, "seed": number,
                                          "max_tokens": MAX_TOKENS})
        turn = await judge_model.ask(judge_model.wire.structured(parts, ANSWER, VERDICT_SCHEMA))
        turns.append(turn)
        judgement.samples.append(read_verdict(turn))
    return judgement, turns


def read_verdict(turn: Turn) -> JudgeSample:
    """The verdict of one judge reply, or the judge error it is."""
    reply = turn.reply
    if reply is None:
        return _error(f"no reply: {turn.error}")
    if not 200 <= reply.status < 300:
        return _error(f"HTTP {reply.status}: {reply.error or 'no error message'}")
    if reply.problems:
        return _error(f"a garbled reply: {'; '.join(reply.problems)}")
    if reply.finish_reason == "content_filter":
        return _error(f"the judge refused: {reply.text!r}")
    if reply.finish_reason == "length":
        return _error("the reply was cut off at the judge's token limit (finish_reason"
                      f" length): {reply.text[:200]!r}")
    return _verdict_of(structured_answer(reply, ANSWER))


class _TwiceGiven(ValueError):
    """A JSON object of the judge's names a key twice."""


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """A JSON object whose keys are each given once: a reply that says ``verdict`` twice
    says two things, and which one a parser keeps is no verdict (fail closed)."""
    found: dict[str, Any] = {}
    for key, value in pairs:
        if key in found:
            raise _TwiceGiven(key)
        found[key] = value
    return found


def _verdict_of(answer: str | dict[str, Any]) -> JudgeSample:
    if isinstance(answer, str):
        text = answer
        try:
            answer = json.loads(text, object_pairs_hook=_unique_keys)
        except _TwiceGiven as twice:
            return _error(f"no verdict: the reply gives {twice.args[0]!r} more than once:"
                          f" {text.strip()[:200]!r}")
        except JSON_ERRORS:
            shown = text.strip()[:200] or "an empty reply"
            return _error(f"no verdict: the reply is not the JSON asked for (a refusal?):"
                          f" {shown!r}")
    if not isinstance(answer, dict):
        return _error(f"no verdict: the reply is not a JSON object: {compact(answer)[:200]}")
    verdict, reasoning = answer.get("verdict"), answer.get("reasoning")
    if verdict is None:
        return _error(f"no verdict in the reply: {compact(answer)[:200]}")
    if verdict not in ("pass", "fail"):
        return _error(f"an invalid verdict {compact(verdict)[:80]}: neither pass nor fail")
    if not isinstance(reasoning, str):
        return _error(f"no reasoning with the verdict {verdict!r}: {compact(answer)[:200]}")
    return JudgeSample(verdict, reasoning)


def _error(message: str) -> JudgeSample:
    return JudgeSample(None, error=message)
