"""A support agent on the anthropic SDK's Messages API: its own loop of content blocks,
streamed through the SDK's stream helper (or whole)."""

from __future__ import annotations

from typing import Any

from anthropic import Anthropic
from anthropic.types import Message

from support.agents.shop import SYSTEM, TOOLS, Shop, converse

MESSAGES_TOOLS = [{"name": tool["name"], "description": tool["description"],
                   "input_schema": tool["parameters"]} for tool in TOOLS]


class MessagesAgent:
    def __init__(self, client: Anthropic, model: str, stream: bool, system: str) -> None:
        self.client, self.model, self.stream, self.system = client, model, stream, system
        self.max_tokens = 256
        self.shop = Shop()
        self.messages: list[dict[str, Any]] = []

    def __call__(self, user_text: str) -> str:
        self.messages.append({"role": "user", "content": user_text})
        return converse(self._reply, self.take)

    def close(self) -> None:
        self.client.close()

    def _reply(self) -> Message:
        request: dict[str, Any] = {"model": self.model, "max_tokens": self.max_tokens,
                                   "system": self.system, "tools": MESSAGES_TOOLS,
                                   "messages": self.messages}
        if not self.stream:
            return self.client.messages.create(**request)
        with self.client.messages.stream(**request) as stream:
            for _event in stream:  # each event as it arrives
                pass
            return stream.get_final_message()

    def take(self, message: Message) -> str | None:
        blocks = [block.model_dump(exclude_none=True) for block in message.content]
        self.messages.append({"role": "assistant", "content": blocks})
        uses = [block for block in message.content if block.type == "tool_use"]
        if not uses:
            return "".join(block.text for block in message.content if block.type == "text")
        self.messages.append({"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": use.id,
             "content": self.shop.run(use.name, use.input)} for use in uses]})
        return None

    def state(self) -> dict[str, Any]:
        return self.shop.state()


def make_agent(stream: bool = True, model: str = "test-model",
               system: str = SYSTEM, max_tokens: int = 256) -> MessagesAgent:
    """Its client reads ANTHROPIC_BASE_URL (no ``/v1``) and ANTHROPIC_API_KEY."""
    agent = MessagesAgent(Anthropic(), model, stream, system)
    agent.max_tokens = max_tokens
    return agent
