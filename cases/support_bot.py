"""A support agent as a team writes one, on plain HTTP: ``support_agent.case.yaml`` tests it.

It speaks chat completions with httpx2 (the plugin's own dependency, so ``pip install -e .``
alone replays its case), reads its endpoint from ``OPENAI_BASE_URL`` and its key from
``OPENAI_API_KEY`` as the openai SDK does, and keeps its conversation between calls. Its
flow suits a small model: the first request of each user message must call a tool
(``tool_choice: required``), and once a tool has answered, the next must answer in words
(``none``).
"""

from __future__ import annotations

import json
import os
from typing import Any

import httpx2

SYSTEM = "You are the support agent of an online shop. Use the tools."
TOOLS = [
    {"type": "function", "function": {
        "name": "lookup_order", "description": "Find an order by its number.",
        "parameters": {"type": "object", "properties": {"order_id": {"type": "string"}},
                       "required": ["order_id"]}}},
    {"type": "function", "function": {
        "name": "issue_refund", "description": "Refund an order in full.",
        "parameters": {"type": "object", "properties": {"order_id": {"type": "string"}},
                       "required": ["order_id"]}}},
]
MAX_ROUNDS = 4
"""Tool rounds one user message may take: a model that keeps calling cannot loop forever."""
ORDERS = {"913": {"order_id": "913", "item": "kettle", "total": 42.5, "status": "delivered"}}


class SupportBot:
    """The agent: one call per user message, its answer the reply's text."""

    def __init__(self, model: str, max_tokens: int) -> None:
        self.model, self.max_tokens = model, max_tokens
        self.messages: list[dict[str, Any]] = [{"role": "system", "content": SYSTEM}]
        self.refunds: list[str] = []

    def __call__(self, user_text: str) -> str:
        self.messages.append({"role": "user", "content": user_text})
        message = self._complete(tool_choice="required")
        for _ in range(MAX_ROUNDS):
            if not message.get("tool_calls"):
                break
            for call in message["tool_calls"]:
                self.messages.append({"role": "tool", "tool_call_id": call["id"],
                                      "content": self._run(call["function"])})
            message = self._complete(tool_choice="none")
        return message.get("content") or ""

    def _complete(self, tool_choice: str) -> dict[str, Any]:
        base_url = os.environ.get("OPENAI_BASE_URL", "https://api.openai.com/v1")
        key = os.environ.get("OPENAI_API_KEY")
        headers = {"Authorization": f"Bearer {key}"} if key else {}
        body = {"model": self.model, "messages": self.messages, "tools": TOOLS,
                "tool_choice": tool_choice, "parallel_tool_calls": False,
                "temperature": 0, "seed": 7, "max_tokens": self.max_tokens}
        reply = httpx2.post(f"{base_url}/chat/completions", json=body, headers=headers,
                            timeout=120)
        reply.raise_for_status()
        message: dict[str, Any] = reply.json()["choices"][0]["message"]
        self.messages.append({key: value for key, value in message.items()
                              if key in ("role", "content", "tool_calls")})
        return message

    def _run(self, function: dict[str, Any]) -> str:
        try:
            arguments = json.loads(function.get("arguments") or "{}")
        except ValueError:
            return json.dumps({"error": "arguments are not JSON"})
        order_id = str(arguments.get("order_id", ""))
        if function["name"] == "lookup_order":
            return json.dumps(ORDERS.get(order_id) or {"error": f"no order {order_id}"})
        if function["name"] == "issue_refund" and order_id in ORDERS:
            self.refunds.append(order_id)
            return json.dumps({"refunded": order_id, "amount": ORDERS[order_id]["total"]})
        return json.dumps({"error": f"cannot {function['name']} {order_id}"})

    def state(self) -> dict[str, Any]:
        return {"refunds": self.refunds}


def make_agent(model: str = "gemma-3-270m", max_tokens: int = 48) -> SupportBot:
    return SupportBot(model, max_tokens)
