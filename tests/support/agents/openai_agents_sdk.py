"""A support agent on the OpenAI Agents SDK (``openai-agents``): an ``Agent`` with two
function tools, run by ``Runner.run_sync``; the conversation carried over as its input
list. The SDK's default model provider talks to the Responses API at OPENAI_BASE_URL."""

from __future__ import annotations

from typing import Any

from agents import Agent, ModelSettings, Runner, TResponseInputItem, function_tool

from support.agents.shop import MAX_TURNS, SYSTEM, Shop


class SupportAgent:
    def __init__(self, model: str, system: str, max_tokens: int | None) -> None:
        self.shop = shop = Shop()

        @function_tool
        def lookup_order(order_id: str) -> dict[str, Any]:
            """Find an order by its number."""
            return shop.lookup_order(order_id)

        @function_tool
        def issue_refund(order_id: str) -> dict[str, Any]:
            """Refund an order in full."""
            return shop.issue_refund(order_id)

        self.agent = Agent(name="support", instructions=system, model=model,
                           tools=[lookup_order, issue_refund],
                           model_settings=ModelSettings(max_tokens=max_tokens))
        self.history: list[TResponseInputItem] = []

    def __call__(self, user_text: str) -> str:
        turn: list[TResponseInputItem] = [{"role": "user", "content": user_text}]
        result = Runner.run_sync(self.agent, self.history + turn, max_turns=MAX_TURNS)
        self.history = result.to_input_list()
        return str(result.final_output)

    def state(self) -> dict[str, Any]:
        return self.shop.state()


def make_agent(model: str = "test-model", system: str = SYSTEM,
               max_tokens: int | None = None) -> SupportAgent:
    return SupportAgent(model, system, max_tokens)
