"""The support agents of ``support.agents``, each on its real SDK or framework, against the
loopback servers: what each SDK reads and calls, before any proxy stands between them.

Each agent meets a scripted model (``support.scripted_model``) that answers its API in the
service's own shape, whole or streamed as the agent asks; the test checks what the agent
returned, the requests it sent (its API's path, the tool results going back, the whole
conversation carried into the next message) and the state its tools left.
"""

from __future__ import annotations

import gc
import json
import re
import sys
from collections.abc import Iterator
from typing import Any

import pytest
import yaml
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


OPENAI_AGENTS_MODULE = "support.agents.openai_agents_sdk"


@pytest.fixture(autouse=True)
def frameworks_imported_here_stay_here() -> Iterator[None]:
    """The modules a test imports in this process are dropped after it, as pytester drops
    an in-process run's: openai-agents' package is named ``agents``, and left in
    ``sys.modules`` it would be what a later test's own ``agents`` module imports as. The
    support agent built on it goes too, or a later run would mix its classes with those
    of the package imported again ("must be a RunConfig instance ..., got RunConfig")."""
    before = set(sys.modules)
    yield
    for name in set(sys.modules) - before:
        if name.split(".")[0] == "agents" or name == OPENAI_AGENTS_MODULE:
            del sys.modules[name]


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


# -- through the plugin: recorded, then replayed with the server stopped -------------------

CASES = """name: refund_order
agent:
  python: FACTORY
  init: INIT
model: MODEL
endpoint: {base_url: "BASE_URL"}
stages:
  - name: ask
    user: Refund order 913
    expect:
      tool_calls: [{name: lookup_order, arguments: {order_id: "913"}}, {name: issue_refund}]
      text: {$contains: refunded}
      requests: 3
      state: {refunds: ["913"]}
  - name: when
    user: When will the money arrive?
    expect:
      trajectory: {$not: {name: issue_refund}}
      tool_calls: []
      text: {$contains: days}
      requests: 1
---
name: refund_the_other_order
agent:
  python: FACTORY
  init: INIT
model: MODEL
endpoint: {base_url: "BASE_URL"}
stages:
  - name: ask
    user: Refund order 913
    expect:
      tool_calls: {$includes: [{name: issue_refund, arguments: {order_id: "914"}}]}
  - name: when
    user: When will the money arrive?
"""
"""Two cases of one agent: the first passes, the second expects the wrong order refunded
(at line 33) and must fail the same way recorded and replayed: its first stage fails, so
its second never runs (3 + 1 + 3 requests)."""
WRONG_LINE = 33
CHANGED_SYSTEM = "Refund whatever order the customer names, at once."


def cases_for(framework: Framework, base_url: str, **init: Any) -> str:
    model = "gemini-2.5-flash" if framework.api == "gemini" else "test-model"
    return (CASES.replace("FACTORY", framework.factory).replace("MODEL", model)
            .replace("INIT", json.dumps({**framework.init, **init}))
            .replace("BASE_URL", base_url))


def run_cases(pytester: pytest.Pytester, *args: str) -> pytest.RunResult:
    result = pytester.runpytest("-p", "no:cacheprovider", "-p", "no:randomly", *args)
    gc.collect()  # a framework's leftovers are finalized under this test's filters
    return result


def verdicts(result: pytest.RunResult) -> list[str]:
    """Each case's outcome, in order, from pytest's ``-rA`` summary lines."""
    found = (re.match(r"(PASSED|FAILED) \S+::([\w.-]+)", line) for line in result.outlines)
    return [f"{match[1]} {match[2]}" for match in found if match]


@framework_params
def test_the_agent_case_replays_with_the_verdicts_it_was_recorded_with(
        framework: Framework, pytester: pytest.Pytester,
        monkeypatch: pytest.MonkeyPatch) -> None:
    for name, value in PLACEHOLDER_KEYS.items():
        monkeypatch.setenv(name, value + "-the-teams-own-secret")
    monkeypatch.setenv("OPENAI_AGENTS_DISABLE_TRACING", "1")
    with server_for(framework).start() as server:
        server.set_handler(ScriptedModel(*REFUND, *REFUND))
        pytester.makefile(".case.yaml", refund=cases_for(framework, server.base_url))
        recorded = run_cases(pytester, "--toolbench-record", "-rA")
        assert server.errors == []
        assert len(server.requests) == 7
    replayed = run_cases(pytester, "-rA")  # the server is gone: every answer is recorded
    changed = pytester.makefile(".case.yaml", refund=cases_for(
        framework, "http://127.0.0.1:9/v1", system=CHANGED_SYSTEM))
    after_the_change = run_cases(pytester, "-rA", str(changed) + "::refund_order")

    expected = ["PASSED refund_order", "FAILED refund_the_other_order"]
    assert verdicts(recorded) == expected, recorded.stdout.str()
    assert verdicts(replayed) == expected, replayed.stdout.str()
    for result in (recorded, replayed):
        result.stdout.fnmatch_lines([f"*refund.case.yaml:{WRONG_LINE}*tool_calls*914*"])
    cassettes = pytester.path / "__cassettes__" / "refund"
    kept = {path.name.partition("[")[0]: path.read_text() for path in cassettes.iterdir()}
    assert not [name for name, text in kept.items() if "the-teams-own-secret" in text]
    apis = {name: [item["api"] for item in yaml.safe_load(text)["interactions"]]
            for name, text in kept.items()}
    assert apis == {"refund_order": [framework.api] * 4,
                    "refund_the_other_order": [framework.api] * 3}
    after_the_change.assert_outcomes(failed=1)
    after_the_change.stdout.fnmatch_lines(["*differs from the one recorded*"])
    assert "Refund whatever order" in after_the_change.stdout.str()
