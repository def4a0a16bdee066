"""An agent case's second models: its judge, and a simulated user whose every message is
one call of the agent.

The judge reads the case's conversation as the agent had it: each text it was called with,
the tool calls its model requests made, and the text it returned. A simulated user talks
with the agent as with the plugin's loop (``simulate.py``): each message one call, the
agent's returned text back to the simulated user, until ``###STOP###`` or ``max_turns``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Awaitable, Callable
from typing import Any

from ..casefile.schema import Expect, SimulateUser
from ..judge.second import SecondModel
from ..judge.simulator import STOP, next_message
from ..judge.verdicts import judge
from ..records import SimulatedMessage, StageAttempt, ToolCall
from .runner import judgement_failure

Ask = Callable[[str], Awaitable[tuple[Any, list[ToolCall]]]]
"""One call of the agent with a user text: what it returned (None when the call failed,
its failure noted) and the tool calls its model requests made meanwhile."""
Fail = Callable[[StageAttempt, str, tuple[str | int, ...]], None]
"""Fails the attempt with a message at a path below the stage."""


def said(history: list[dict[str, Any]], text: str, answer: str,
         calls: list[ToolCall]) -> None:
    """One exchange with the agent appended to ``history`` (chat-shaped, as the judge's
    transcript reads it): the user's text (when known), the calls, the agent's answer."""
    if text:
        history.append({"role": "user", "content": text})
    if calls:
        history.append({"role": "assistant", "content": "", "tool_calls": [
            {"id": call.id or "", "type": "function",
             "function": {"name": call.name, "arguments": call.arguments_raw}}
            for call in calls]})
    history.append({"role": "assistant", "content": answer})


async def converse(simulator: SecondModel | None, spec: SimulateUser, attempt: StageAttempt,
                   ask: Ask, fail: Fail, history: list[dict[str, Any]]) -> str | None:
    """The simulated conversation; the agent's last answer, or None when the stage failed
    on the way (a simulator error, an agent call that failed)."""
    if simulator is None:
        fail(attempt, "simulator error: no simulator model configured", ("simulate_user",))
        return None
    if spec.model is not None:
        simulator = dataclasses.replace(simulator, model=spec.model)
    answer: str | None = None
    attempt.ended = "max_turns"
    for number in range(spec.max_turns):
        if number == 0 and spec.opening is not None:
            text = spec.opening
        else:
            message = await next_message(simulator, spec.instructions, attempt.conversation,
                                         seed=number)
            attempt.side_turns.append(message.turn)
            if message.text is None:
                attempt.ended = None
                fail(attempt, f"simulator error: {message.error} (the simulated user,"
                     f" {simulator.model}, not the agent)", ("simulate_user",))
                return None
            text = message.text
        attempt.conversation.append(SimulatedMessage("user", text))
        if STOP in text:
            attempt.ended = "stop"
            break
        answer, calls = await ask(text)
        if not isinstance(answer, str):
            attempt.ended = None
            return None
        said(history, text, answer, calls)
        attempt.conversation.append(SimulatedMessage("agent", answer))
    if answer is None:
        fail(attempt, "the simulated user stopped before the agent said anything: nothing"
             " to check", ("simulate_user",))
    return answer


async def judge_stage(judge_model: SecondModel | None, expect: Expect, attempt: StageAttempt,
                      fail: Fail, history: list[dict[str, Any]]) -> None:
    """``expect.judge`` of an agent case's stage (or a test's check), over the
    conversation so far."""
    if judge_model is None:
        fail(attempt, "judge error: no judge model configured", ("expect", "judge"))
        return
    for index, criterion in enumerate(expect.criteria):
        judgement, turns = await judge(judge_model, history, criterion.criterion,
                                       criterion.samples)
        attempt.side_turns += turns
        attempt.judgements.append(judgement)
        if not judgement.passed:
            fail(attempt, judgement_failure(judgement), ("expect", "judge", index))


def calls_of(exchanges: list[Any]) -> list[ToolCall]:
    """The tool calls of the replies of ``exchanges`` (the proxy's)."""
    return [call for exchange in exchanges if exchange.reply is not None
            for call in exchange.reply.tool_calls]

