"""``run_tools: progressive`` against the real llama-server (llama.cpp) over three wire APIs:
the model's streamed call runs the moment the API marks its arguments complete, and the
turn's timeline in the JSON report says when each thing happened.

At temperature 0 with a forced choice the 270M model makes one call; llama-server streams
its arguments token by token (several events), then closes it. The stage goes on with
``max_turns: 2``: the second request, forced again, calls again, which ends the stage at
``max_turns``; what is checked is the first turn's timeline.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from pytest_toolbench.commands.local_server import LocalServer

pytestmark = [pytest.mark.live_server, pytest.mark.xdist_group("model_servers")]

APIS = ("chat", "responses", "messages")

CASE = """
name: progressive
params: {temperature: 0, max_tokens: 48}
tools:
  - name: get_weather
    description: Current weather for a city
    parameters: {type: object, properties: {city: {type: string}}, required: [city]}
    result: {temp_c: 21, sky: sunny}
stages:
  - name: ask
    user: What's the weather in Paris?
    tool_choice: required
    stream: true
    run_tools: progressive
    max_turns: 2
"""


def test_a_streamed_call_of_llama_server_runs_as_it_closes_on_every_api(
        pytester: pytest.Pytester, llama_server: LocalServer) -> None:
    pytester.makefile(".case.yaml", progressive=CASE)
    report = pytester.path / "report.json"
    result = pytester.runpytest(
        "-p", "no:cacheprovider", "--toolbench-mode=live", "--toolbench-concurrency=1",
        f"--toolbench-base-url={llama_server.base_url}", "--toolbench-api=" + ",".join(APIS),
        f"--toolbench-report={report}")
    records = json.loads(report.read_text(encoding="utf-8"))["cases"]
    assert sorted(record["api"] for record in records) == sorted(APIS)
    result.stdout.fnmatch_lines([("*max_turns (2) reached and the model still calls tools:"
                                 " get_weather*")])
    for record in records:
        turn: dict[str, Any] = record["runs"][0]["stages"][0]["attempts"][-1]["turns"][0]
        call = turn["reply"]["tool_calls"][0]
        assert json.loads(call["arguments"]) == {"city": "Paris"}, record["api"]
        # Token by token: the arguments came in several events.
        assert call["argument_events"] > 1, (record["api"], call)
        timeline = turn["timeline"]
        assert timeline["progressive"] is True
        (ran,) = timeline["calls"]
        # The tool started at the API's mark, after it, never before.
        assert ran["closed_ms"] is not None, (record["api"], timeline)
        assert ran["closed_ms"] <= ran["started_ms"] <= ran["ended_ms"]
        assert ran["closed_ms"] <= timeline["stream_ended_ms"]
        assert json.loads(turn["tool_runs"][0]["content"]) == {"temp_c": 21, "sky": "sunny"}
