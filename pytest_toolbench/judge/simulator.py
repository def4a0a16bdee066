"""The simulated user's next message.

The simulator model gets the case's instructions inside the template's built-in guidelines
and the conversation with the roles turned round: its own messages as the assistant's, the
agent's user-visible text (no tool calls, no results) as the user's. ``###STOP###``
anywhere in its message ends the conversation, as tau-bench reads it. An empty reply, or
none (an HTTP or transport error, a garbled reply), is a simulator error: told apart from
the agent failing.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..records import SimulatedMessage, Turn
from .prompts import SIMULATOR_TEMPLATE, template
from .second import SecondModel

STOP = "###STOP###"
MAX_TOKENS = 256
"""The simulated user's token limit: one short message."""
NOTHING_SAID = "(no answer)"
"""What the simulator reads when the agent's turn had no text (APIs refuse empty turns)."""


@dataclass(frozen=True)
class UserMessage:
    """What the simulator said, or why it said nothing."""

    text: str | None
    error: str | None
    turn: Turn

    @property
    def stops(self) -> bool:
        return self.text is not None and STOP in self.text


async def next_message(simulator: SecondModel, instructions: str,
                       conversation: list[SimulatedMessage], seed: int) -> UserMessage:
    """The simulated user's message after ``conversation`` (empty: its first)."""
    prompt = template(SIMULATOR_TEMPLATE)
    messages = [{"role": "system", "content": prompt.fill("system", instructions=instructions)},
                {"role": "user", "content": prompt.fill("start")}]
    for message in conversation:  # the roles turned round: the simulator is the assistant
        messages.append({"role": "assistant" if message.role == "user" else "user",
                         "content": message.text or NOTHING_SAID})
    parts = simulator.parts(messages, {"temperature": 0, "seed": seed,
                                       "max_tokens": MAX_TOKENS})
    turn = await simulator.ask(parts)
    return UserMessage(*_read(turn), turn)


def _read(turn: Turn) -> tuple[str | None, str | None]:
    reply = turn.reply
    if reply is None:
        return None, f"no reply: {turn.error}"
    if not 200 <= reply.status < 300:
        return None, f"HTTP {reply.status}: {reply.error or 'no error message'}"
    if reply.problems:
        return None, f"a garbled reply: {'; '.join(reply.problems)}"
    if not reply.text.strip():
        return None, (f"an empty reply (finish_reason {reply.finish_reason})"
                      + (f" with tool calls: {', '.join(c.name for c in reply.tool_calls)}"
                         if reply.tool_calls else ""))
    return reply.text.strip(), None
