"""The support agents of ``support.agents``, each on its real SDK or framework, against the
loopback servers: what each SDK reads and calls, before any proxy stands between them.

Each agent meets a scripted model (``support.scripted_model``) that answers its API in the
service's own shape, whole or streamed as the agent asks; the test checks what the agent
returned, the requests it sent (its API's path, the tool results going back, the whole
conversation carried into the next message) and the state its tools left.
"""

from __future__ import annotations

import json
import re

import pytest
from support.agents.frameworks import (
    PLACEHOLDER_KEYS,
    Framework,
    build,
    converse,
    framework_params,
    origin_of,
    point_sdks_at,
)
from support.chat_server import ChatServer, RecordedRequest
from support.gemini_server import GeminiServer
from support.scripted_model import ScriptedModel, calls, says

REFUND = (calls(("lookup_order", {"order_id": "913"})),
          calls(("issue_refund", {"order_id": "913"})),
          says("Order 913 is refunded: 42.5."),
          says("Within five working days."))
KEY_VARIABLES = {"chat": "OPENAI_API_KEY", "responses": "OPENAI_API_KEY",
                 "messages": "ANTHROPIC_API_KEY", "gemini": "GEMINI_API_KEY"}
PATHS = {"chat": "/v1/chat/completions", "responses": "/v1/responses",
         "messages": "/v1/messages"}


def server_for(framework: Framework) -> ChatServer:
    return GeminiServer() if framework.api == "gemini" else ChatServer()


def path_pattern(framework: Framework) -> str:
    """The path its SDK posts to; google-genai's version (``v1`` since 2.x, ``v1beta``
    before) is its own choice, both are the service's."""
    if framework.api != "gemini":
        return re.escape(PATHS[framework.api])
    if framework.streams:
        return r"/v1(beta)?/models/gemini-2\.5-flash:streamGenerateContent\?alt=sse"
    return r"/v1(beta)?/models/gemini-2\.5-flash:generateContent"


def sent(request: RecordedRequest) -> str:
    """The request body, JSON read back into one text (escapes undone) to search in."""
    return json.dumps(request.json(), ensure_ascii=False).replace('\\"', '"')


@framework_params
def test_the_agent_runs_its_tool_loop_over_its_api(framework: Framework,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    model = ScriptedModel(*REFUND)
    with server_for(framework).start() as server:
        server.set_handler(model)
        point_sdks_at(monkeypatch, origin_of(server.base_url))
        agent = build(framework)
        replies = converse(agent, ["Refund order 913", "When will the money arrive?"])
    assert server.errors == []
    assert replies == ["Order 913 is refunded: 42.5.", "Within five working days."]
    assert agent.state() == {"refunds": ["913"]}
    assert model.left == 0
    assert [(s.api, s.streamed) for s in model.served] == [(framework.api, framework.streams)] * 4
    requests = server.requests
    assert all(re.fullmatch(path_pattern(framework), r.path) for r in requests), \
        [r.path for r in requests]
    assert "kettle" in sent(requests[1])  # lookup_order's result went back
    assert "refunded" in sent(requests[2])  # issue_refund's result went back
    assert "Refund order 913" in sent(requests[3])  # the conversation goes on
    assert "When will the money arrive?" in sent(requests[3])


@framework_params
def test_the_agent_sends_the_key_of_its_sdks_variable(framework: Framework,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """openai: ``authorization: Bearer``; anthropic 2.x: ``authorization: Bearer`` too (1.x
    sent ``x-api-key``); google-genai: ``x-goog-api-key``. A proxy in between must keep
    every one of them out of what it stores."""
    model = ScriptedModel(says("Hello."))
    with server_for(framework).start() as server:
        server.set_handler(model)
        point_sdks_at(monkeypatch, origin_of(server.base_url))
        assert converse(build(framework), ["Hi"]) == ["Hello."]
    key = PLACEHOLDER_KEYS[KEY_VARIABLES[framework.api]]
    carrying = [name for name, value in server.requests[0].headers.items() if key in value]
    assert carrying, f"no header carries {KEY_VARIABLES[framework.api]}"
