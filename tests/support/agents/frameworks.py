"""The support agents as the tests drive them: which factory, with what, over which API.

One row per way a team builds an agent: the openai SDK sync and async, over chat
completions and Responses, streamed and whole; the anthropic SDK's Messages, streamed; the
Gemini API through google-genai; openai-agents and pydantic-ai with their defaults.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import gc
import importlib
import inspect
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import pytest

PLACEHOLDER_KEYS = {"OPENAI_API_KEY": "sk-test-0000", "ANTHROPIC_API_KEY": "sk-ant-test-0000",
                    "GEMINI_API_KEY": "gemini-test-0000"}

RUN_SYNC_REUSES_ITS_LOOP = pytest.mark.filterwarnings(
    "ignore:asynchronous generator .* was scheduled after loop.shutdown_asyncgens"
    ":ResourceWarning")
"""openai-agents' ``Runner.run_sync`` keeps its thread's event loop between runs (its HTTP
client is shared and bound to it) but calls ``shutdown_asyncgens`` on it after each run, so
every later run warns (0.24). Nothing is wrong with the run itself; on a new thread per
run it fails instead (the shared client "is bound to a different event loop")."""

RUN_SYNC_LEAVES_ITS_LOOP_OPEN = pytest.mark.filterwarnings("ignore:unclosed:ResourceWarning")
"""pydantic-ai's ``run_sync`` runs on its thread's event loop and leaves it open, with its
cached HTTP client's connection: both are finalized by the garbage collector (which
``converse`` runs before it returns, so nothing is left for a later test)."""


@dataclass(frozen=True)
class Framework:
    id: str
    factory: str
    """``module:callable`` as an agent case names it."""
    api: str
    """The wire API it speaks: chat, responses, messages or gemini."""
    streams: bool
    """Whether its requests ask for a stream."""
    init: dict[str, Any] = field(default_factory=dict)
    marks: tuple[pytest.MarkDecorator, ...] = ()

    @property
    def is_async(self) -> bool:
        return "async" in self.factory.rpartition(":")[2]


FRAMEWORKS = (
    Framework("openai-chat", "support.agents.openai_chat:make_agent", "chat", False),
    Framework("openai-chat-stream", "support.agents.openai_chat:make_agent", "chat", True,
              {"stream": True}),
    Framework("openai-chat-async", "support.agents.openai_chat:make_async_agent", "chat",
              False),
    Framework("openai-chat-async-stream", "support.agents.openai_chat:make_async_agent",
              "chat", True, {"stream": True}),
    Framework("openai-responses", "support.agents.openai_responses:make_agent", "responses",
              False),
    Framework("openai-responses-stream", "support.agents.openai_responses:make_agent",
              "responses", True, {"stream": True}),
    Framework("openai-responses-async", "support.agents.openai_responses:make_async_agent",
              "responses", False),
    Framework("openai-responses-async-stream",
              "support.agents.openai_responses:make_async_agent", "responses", True,
              {"stream": True}),
    Framework("anthropic-stream", "support.agents.anthropic_messages:make_agent", "messages",
              True),
    Framework("anthropic", "support.agents.anthropic_messages:make_agent", "messages", False,
              {"stream": False}),
    Framework("gemini", "support.agents.gemini:make_agent", "gemini", False),
    Framework("gemini-stream", "support.agents.gemini:make_agent", "gemini", True,
              {"stream": True}),
    Framework("openai-agents", "support.agents.openai_agents_sdk:make_agent", "responses",
              False, marks=(RUN_SYNC_REUSES_ITS_LOOP,)),
    Framework("pydantic-ai", "support.agents.pydantic_ai_agent:make_agent", "chat", False,
              marks=(RUN_SYNC_LEAVES_ITS_LOOP_OPEN,)),
)

framework_params = pytest.mark.parametrize(
    "framework", [pytest.param(f, marks=f.marks, id=f.id) for f in FRAMEWORKS])


def origin_of(base_url: str) -> str:
    """``http://127.0.0.1:PORT`` of a loopback server's base URL (``.../v1``, ``.../v1beta``)."""
    return base_url.rsplit("/", 1)[0]


def point_sdks_at(monkeypatch: pytest.MonkeyPatch, origin: str) -> None:
    """Every SDK's base URL variable at ``origin``, placeholder keys, tracing off: what the
    plugin's proxy sets while an agent case runs, here pointing straight at a server."""
    monkeypatch.setenv("OPENAI_BASE_URL", f"{origin}/v1")
    monkeypatch.setenv("ANTHROPIC_BASE_URL", origin)
    monkeypatch.setenv("GOOGLE_GEMINI_BASE_URL", origin)
    monkeypatch.setenv("OPENAI_AGENTS_DISABLE_TRACING", "1")
    monkeypatch.delenv("GOOGLE_API_KEY", raising=False)
    for name, value in PLACEHOLDER_KEYS.items():
        monkeypatch.setenv(name, value)


def build(framework: Framework, **extra: Any) -> Any:
    """The agent its factory returns, given the row's ``init``."""
    module, _, name = framework.factory.partition(":")
    return getattr(importlib.import_module(module), name)(**framework.init, **extra)


def converse(agent: Any, texts: Iterable[str]) -> list[str]:
    """Each text said to the agent in turn, its replies, as the plugin runs agents: a plain
    agent on one thread of its own, with no event loop running in it (openai-agents'
    ``run_sync`` keeps that thread's loop, and its shared HTTP client, between calls); an
    async agent on one loop (a client is bound to the loop it first ran on)."""
    if not (inspect.iscoroutinefunction(agent)
            or inspect.iscoroutinefunction(type(agent).__call__)):
        with concurrent.futures.ThreadPoolExecutor(1) as thread:
            replies = [thread.submit(agent, text).result(timeout=60) for text in texts]
            thread.submit(_close_the_threads_loop).result(timeout=10)
        gc.collect()  # what the framework left behind is finalized under this test's filters
        return replies

    async def all_of_them() -> list[str]:
        try:
            return [await agent(text) for text in texts]
        finally:
            await agent.aclose()

    return asyncio.run(all_of_them())


def _close_the_threads_loop() -> None:
    """Close the event loop a framework's ``run_sync`` set for this thread and left open."""
    try:
        loop = asyncio.get_event_loop_policy().get_event_loop()
    except RuntimeError:  # none was set
        return
    if not loop.is_closed():
        loop.run_until_complete(loop.shutdown_asyncgens())
        loop.close()
