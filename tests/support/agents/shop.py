"""The world the support agents act on: a few orders, and the refunds issued."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

SYSTEM = ("You are the support agent of an online shop. Look an order up with lookup_order"
          " before you refund it with issue_refund. Answer in one short sentence.")
MAX_TURNS = 6
"""Model requests one user message may take before the agent gives up (no endless loop)."""

TOOLS: list[dict[str, Any]] = [
    {"name": "lookup_order", "description": "Find an order by its number.",
     "parameters": {"type": "object", "properties": {"order_id": {"type": "string"}},
                    "required": ["order_id"]}},
    {"name": "issue_refund", "description": "Refund an order in full.",
     "parameters": {"type": "object", "properties": {"order_id": {"type": "string"}},
                    "required": ["order_id"]}},
]
"""The tools as JSON Schema, for the SDKs that take schemas rather than functions."""

Reply = TypeVar("Reply")


def converse(reply: Callable[[], Reply], take: Callable[[Reply], str | None]) -> str:
    """An agent's own loop: ask the model, ``take`` its reply (answering the tools it
    called), until a reply is the answer (``take`` returns its text)."""
    for _ in range(MAX_TURNS):
        answer = take(reply())
        if answer is not None:
            return answer
    raise RuntimeError(f"no answer after {MAX_TURNS} model requests")


async def aconverse(reply: Callable[[], Awaitable[Reply]],
                    take: Callable[[Reply], str | None]) -> str:
    """``converse`` for an async client."""
    for _ in range(MAX_TURNS):
        answer = take(await reply())
        if answer is not None:
            return answer
    raise RuntimeError(f"no answer after {MAX_TURNS} model requests")


class Shop:
    """Orders by number; ``refunds`` lists the orders refunded, in order."""

    def __init__(self) -> None:
        self.orders = {"913": {"order_id": "913", "item": "kettle", "total": 42.5,
                               "status": "delivered"},
                       "914": {"order_id": "914", "item": "teapot", "total": 18.0,
                               "status": "shipped"}}
        self.refunds: list[str] = []

    def lookup_order(self, order_id: str) -> dict[str, Any]:
        """The order, or an error naming the number."""
        order = self.orders.get(str(order_id))
        return dict(order) if order else {"error": f"no order {order_id}"}

    def issue_refund(self, order_id: str) -> dict[str, Any]:
        """Refund the order once; a second refund or an unknown order is an error."""
        order_id = str(order_id)
        if order_id not in self.orders:
            return {"error": f"no order {order_id}"}
        if order_id in self.refunds:
            return {"error": f"order {order_id} is already refunded"}
        self.refunds.append(order_id)
        return {"refunded": order_id, "amount": self.orders[order_id]["total"]}

    def run(self, name: str, arguments: Any) -> str:
        """A tool call answered as JSON text, whatever the model sent."""
        if isinstance(arguments, str):
            try:
                arguments = json.loads(arguments or "{}")
            except ValueError:
                return json.dumps({"error": "arguments are not JSON"})
        tool = {"lookup_order": self.lookup_order, "issue_refund": self.issue_refund}.get(name)
        if tool is None:
            return json.dumps({"error": f"unknown tool: {name}"})
        try:
            return json.dumps(tool(**arguments))
        except TypeError as error:
            return json.dumps({"error": str(error)})

    def state(self) -> dict[str, Any]:
        return {"refunds": list(self.refunds)}
