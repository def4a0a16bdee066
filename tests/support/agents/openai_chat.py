"""A support agent on the openai SDK's chat completions: its own loop, sync or async,
streamed (the SDK's stream helper) or whole."""

from __future__ import annotations

from typing import Any

from openai import AsyncOpenAI, OpenAI
from openai.types.chat import ChatCompletionMessage

from support.agents.shop import SYSTEM, TOOLS, Shop, aconverse, converse

CHAT_TOOLS = [{"type": "function", "function": tool} for tool in TOOLS]


class _Conversation:
    """The messages so far and the shop the tools act on."""

    max_tokens: int | None = None
    """A limit on each reply, sent when set (a small local model rarely stops by itself)."""

    def __init__(self, model: str, stream: bool, system: str) -> None:
        self.model, self.stream = model, stream
        self.shop = Shop()
        self.messages: list[dict[str, Any]] = [{"role": "system", "content": system}]

    def request(self) -> dict[str, Any]:
        limit = {"max_tokens": self.max_tokens} if self.max_tokens else {}
        return {"model": self.model, "messages": self.messages, "tools": CHAT_TOOLS, **limit}

    def take(self, message: ChatCompletionMessage) -> str | None:
        """Keep the reply; answer its calls. The reply's text when it called nothing."""
        self.messages.append(message.model_dump(exclude_none=True))
        if not message.tool_calls:
            return message.content or ""
        for call in message.tool_calls:
            result = self.shop.run(call.function.name, call.function.arguments)
            self.messages.append({"role": "tool", "tool_call_id": call.id, "content": result})
        return None

    def state(self) -> dict[str, Any]:
        return self.shop.state()


class ChatAgent(_Conversation):
    def __init__(self, client: OpenAI, model: str, stream: bool, system: str) -> None:
        super().__init__(model, stream, system)
        self.client = client

    def __call__(self, user_text: str) -> str:
        self.messages.append({"role": "user", "content": user_text})
        return converse(self._reply, self.take)

    def close(self) -> None:
        self.client.close()

    def _reply(self) -> ChatCompletionMessage:
        if not self.stream:
            return self.client.chat.completions.create(**self.request()).choices[0].message
        with self.client.chat.completions.stream(**self.request()) as stream:
            for _event in stream:  # each chunk as it arrives
                pass
            return stream.get_final_completion().choices[0].message  # type: ignore[return-value]


class AsyncChatAgent(_Conversation):
    def __init__(self, client: AsyncOpenAI, model: str, stream: bool, system: str) -> None:
        super().__init__(model, stream, system)
        self.client = client

    async def __call__(self, user_text: str) -> str:
        self.messages.append({"role": "user", "content": user_text})
        return await aconverse(self._reply, self.take)

    async def aclose(self) -> None:
        """Close the client's connections (on the loop they were opened on)."""
        await self.client.close()

    async def _reply(self) -> ChatCompletionMessage:
        if not self.stream:
            reply = await self.client.chat.completions.create(**self.request())
            return reply.choices[0].message
        async with self.client.chat.completions.stream(**self.request()) as stream:
            async for _event in stream:
                pass
            final = await stream.get_final_completion()
            return final.choices[0].message  # type: ignore[return-value]


def make_agent(stream: bool = False, model: str = "test-model",
               system: str = SYSTEM, max_tokens: int | None = None) -> ChatAgent:
    """The sync agent; its client reads OPENAI_BASE_URL and OPENAI_API_KEY."""
    agent = ChatAgent(OpenAI(), model, stream, system)
    agent.max_tokens = max_tokens
    return agent


def make_async_agent(stream: bool = False, model: str = "test-model",
                     system: str = SYSTEM, max_tokens: int | None = None) -> AsyncChatAgent:
    """The async agent: an ``AsyncOpenAI`` client, bound to the loop it first runs on."""
    agent = AsyncChatAgent(AsyncOpenAI(), model, stream, system)
    agent.max_tokens = max_tokens
    return agent
