"""A ``simulate_user`` stage: a conversation between a simulated user and the agent.

The simulated user (``judge/simulator.py``) writes a message, or the stage's ``opening``
is its first; each goes to the agent as a user message, and the agent answers through the
plugin's own loop (its tools, toolboxes and MCP servers, ``run_tools`` as the stage says);
the agent's user-visible text goes back to the simulated user. It ends when a message holds
``###STOP###`` (``ended: stop``) or once the user sent ``max_turns`` messages and the agent
answered the last (``ended: max_turns``). The stage's other expectations read the whole
conversation: ``tool_calls`` and ``trajectory`` every call of it, in order; ``text``,
``finish_reason``, ``usage`` and ``stream`` the agent's last reply; ``latency_ms`` all of
its replies.
"""

from __future__ import annotations

import dataclasses
from typing import Protocol

from ..casefile.schema import SimulateUser
from ..judge.second import SecondModel
from ..judge.simulator import STOP, next_message
from ..records import Reply, SimulatedMessage, StageAttempt
from .check import Outcome
from .machine import StageMachine, StageState


class StageRunner(Protocol):
    """What a conversation needs of the stage's runner (``runner.StageRunner``)."""

    machine: StageMachine

    @property
    def simulator(self) -> SecondModel | None: ...

    def add_user_message(self, text: str) -> None: ...

    def fail(self, attempt: StageAttempt, message: str, path: tuple[str | int, ...]
             ) -> None: ...

    async def agent_loop(self, attempt: StageAttempt, streamed: bool,
                         replies: list[Reply]) -> bool: ...


async def converse(runner: StageRunner, attempt: StageAttempt, spec: SimulateUser,
                   streamed: bool) -> Outcome | None:
    """Run the conversation; its outcome, or None when the stage failed on the way."""
    simulator = runner.simulator
    if runner.machine.state is StageState.IDLE:
        runner.machine.fire("simulate")
    if simulator is None:  # collection refuses such a case; a run made by hand may not
        _broke(runner, attempt, "simulator error: no simulator model configured")
        return None
    if spec.model is not None:
        simulator = dataclasses.replace(simulator, model=spec.model)
    replies: list[Reply] = []
    said = attempt.conversation
    ended = "max_turns"
    for number in range(spec.max_turns):
        if number == 0 and spec.opening is not None:
            text = spec.opening
        else:
            message = await next_message(simulator, spec.instructions, said, seed=number)
            attempt.side_turns.append(message.turn)
            if message.text is None:
                _broke(runner, attempt, f"simulator error: {message.error} (the"
                       f" simulated user, {simulator.model}, not the agent)")
                return None
            text = message.text
        said.append(SimulatedMessage("user", text))
        if STOP in text:
            ended = "stop"
            break
        runner.add_user_message(text)
        first = len(replies)
        if not await runner.agent_loop(attempt, streamed, replies):
            return None
        said.append(SimulatedMessage("agent", visible_text(replies[first:])))
    attempt.ended = ended
    if not replies:
        _broke(runner, attempt, "the simulated user stopped before the agent said"
               " anything: nothing to check")
        return None
    runner.machine.fire("conversation_over")
    return Outcome(replies, [call for reply in replies for call in reply.tool_calls],
                   ended=ended)


def visible_text(replies: list[Reply]) -> str:
    """What the user sees of the agent's turn: its replies' text, not its tool calls."""
    return "\n".join(reply.text for reply in replies if reply.text.strip())


def _broke(runner: StageRunner, attempt: StageAttempt, message: str) -> None:
    runner.machine.fire("simulator_error")
    runner.fail(attempt, message, ("simulate_user",))
