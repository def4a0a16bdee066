"""Support agents written as a team writes them, one per SDK or framework, for agent cases.

Each module has a factory ``make_agent(**init)`` that returns the agent: a callable taking
the user's text and returning the reply text (plain or ``async``), which keeps its own
conversation between calls. Every one acts on a :class:`~support.agents.shop.Shop` through
two function tools (``lookup_order``, ``issue_refund``) and reads its endpoint from the
environment as its SDK does by default (no base URL in the code):

| module | SDK, API | base URL read from | paths called |
|---|---|---|---|
| openai_chat | openai, chat completions | ``OPENAI_BASE_URL`` (with ``/v1``) | ``/chat/completions`` |
| openai_responses | openai, Responses | ``OPENAI_BASE_URL`` | ``/responses`` |
| anthropic_messages | anthropic, Messages | ``ANTHROPIC_BASE_URL`` (no ``/v1``) | ``/v1/messages`` |
| gemini | google-genai | ``GOOGLE_GEMINI_BASE_URL`` (no version) | ``/v1/models/M:generateContent``, ``:streamGenerateContent?alt=sse`` (3.x: ``v1``) |
| openai_agents_sdk | openai-agents ``Runner.run_sync`` | ``OPENAI_BASE_URL`` | ``/responses`` (its default API) |
| pydantic_ai_agent | pydantic-ai ``run_sync``, ``OpenAIChatModel`` | ``OPENAI_BASE_URL`` | ``/chat/completions`` |

Keys: ``OPENAI_API_KEY``, ``ANTHROPIC_API_KEY``, ``GEMINI_API_KEY`` (or ``GOOGLE_API_KEY``);
each SDK refuses to build a client without one. Each factory also takes ``system`` (the
prompt: a changed agent) and ``max_tokens`` (for a small local model); the openai and
anthropic agents close their clients in ``close()`` / ``aclose()``. openai-agents also posts traces to
OpenAI's own host unless ``OPENAI_AGENTS_DISABLE_TRACING=1`` (read once, at first use).
"""
