"""A support agent on pydantic-ai: an ``Agent`` with two tools over ``OpenAIChatModel``,
whose ``OpenAIProvider`` reads OPENAI_BASE_URL and OPENAI_API_KEY; ``run_sync`` per user
message, the conversation carried over as its message history."""

from __future__ import annotations

from typing import Any

from pydantic_ai import Agent, ModelSettings, UsageLimits
from pydantic_ai.messages import ModelMessage
from pydantic_ai.models.openai import OpenAIChatModel
from pydantic_ai.providers.openai import OpenAIProvider

from support.agents.shop import MAX_TURNS, SYSTEM, Shop


class SupportAgent:
    def __init__(self, model: str, system: str, max_tokens: int | None) -> None:
        self.shop = shop = Shop()
        settings = ModelSettings(max_tokens=max_tokens) if max_tokens else None
        self.agent = agent = Agent(OpenAIChatModel(model, provider=OpenAIProvider()),
                                   system_prompt=system, model_settings=settings)

        @agent.tool_plain
        def lookup_order(order_id: str) -> dict[str, Any]:
            """Find an order by its number."""
            return shop.lookup_order(order_id)

        @agent.tool_plain
        def issue_refund(order_id: str) -> dict[str, Any]:
            """Refund an order in full."""
            return shop.issue_refund(order_id)

        self.history: list[ModelMessage] = []

    def __call__(self, user_text: str) -> str:
        result = self.agent.run_sync(user_text, message_history=self.history,
                                     usage_limits=UsageLimits(request_limit=MAX_TURNS))
        self.history = result.all_messages()
        return result.output

    def state(self) -> dict[str, Any]:
        return self.shop.state()


def make_agent(model: str = "test-model", system: str = SYSTEM,
               max_tokens: int | None = None) -> SupportAgent:
    return SupportAgent(model, system, max_tokens)
