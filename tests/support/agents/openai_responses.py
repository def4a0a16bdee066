"""A support agent on the openai SDK's Responses API: its own loop over input items, sync
or async, streamed (the raw event stream, read to ``response.completed``) or whole."""

from __future__ import annotations

from typing import Any

from openai import AsyncOpenAI, OpenAI
from openai.types.responses import Response

from support.agents.shop import SYSTEM, TOOLS, Shop, aconverse, converse

RESPONSES_TOOLS = [{"type": "function", **tool} for tool in TOOLS]


class _Conversation:
    max_tokens: int | None = None
    """A limit on each reply, sent when set (a small local model rarely stops by itself)."""

    def __init__(self, model: str, stream: bool, system: str) -> None:
        self.model, self.stream, self.system = model, stream, system
        self.shop = Shop()
        self.items: list[dict[str, Any]] = []

    def request(self) -> dict[str, Any]:
        limit = {"max_output_tokens": self.max_tokens} if self.max_tokens else {}
        return {"model": self.model, "instructions": self.system, "input": self.items,
                "tools": RESPONSES_TOOLS, "stream": self.stream, **limit}

    def take(self, response: Response) -> str | None:
        """Keep the output items; answer the calls. The text when nothing was called."""
        calls = []
        for item in response.output:
            self.items.append(item.model_dump(exclude_none=True))
            if item.type == "function_call":
                calls.append(item)
        if not calls:
            return response.output_text
        for call in calls:
            self.items.append({"type": "function_call_output", "call_id": call.call_id,
                               "output": self.shop.run(call.name, call.arguments)})
        return None

    def state(self) -> dict[str, Any]:
        return self.shop.state()


def _completed(event: Any) -> Response | None:
    return event.response if event.type == "response.completed" else None


class ResponsesAgent(_Conversation):
    def __init__(self, client: OpenAI, model: str, stream: bool, system: str) -> None:
        super().__init__(model, stream, system)
        self.client = client

    def __call__(self, user_text: str) -> str:
        self.items.append({"role": "user", "content": user_text})
        return converse(self._reply, self.take)

    def close(self) -> None:
        self.client.close()

    def _reply(self) -> Response:
        reply = self.client.responses.create(**self.request())
        if isinstance(reply, Response):
            return reply
        final = None
        for event in reply:
            final = _completed(event) or final
        if final is None:
            raise RuntimeError("the stream ended without response.completed")
        return final


class AsyncResponsesAgent(_Conversation):
    def __init__(self, client: AsyncOpenAI, model: str, stream: bool, system: str) -> None:
        super().__init__(model, stream, system)
        self.client = client

    async def __call__(self, user_text: str) -> str:
        self.items.append({"role": "user", "content": user_text})
        return await aconverse(self._reply, self.take)

    async def aclose(self) -> None:
        """Close the client's connections (on the loop they were opened on)."""
        await self.client.close()

    async def _reply(self) -> Response:
        reply = await self.client.responses.create(**self.request())
        if isinstance(reply, Response):
            return reply
        final = None
        async for event in reply:
            final = _completed(event) or final
        if final is None:
            raise RuntimeError("the stream ended without response.completed")
        return final


def make_agent(stream: bool = False, model: str = "test-model",
               system: str = SYSTEM, max_tokens: int | None = None) -> ResponsesAgent:
    agent = ResponsesAgent(OpenAI(), model, stream, system)
    agent.max_tokens = max_tokens
    return agent


def make_async_agent(stream: bool = False, model: str = "test-model",
                     system: str = SYSTEM,
                     max_tokens: int | None = None) -> AsyncResponsesAgent:
    agent = AsyncResponsesAgent(AsyncOpenAI(), model, stream, system)
    agent.max_tokens = max_tokens
    return agent
