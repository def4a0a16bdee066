"""A replay reports its own figures: the latency it took, not the recording's, for agent
cases as for the plugin's own cases; the recorded latency stays in the JSON report under
its own name (``recorded_latency_ms``).

The server answers each request after a pause, so the recording's latency is long and the
replay's (from the cassette, the server stopped) short.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from support.chat_server import RecordedRequest, completion, json_reply, start_chat_server

PAUSE_S = 2.0  # long beside the replay, which a busy machine can slow to half a second

CASES = """name: agent_case
agent: {python: support.agents.openai_chat:make_agent}
endpoint: {base_url: "BASE_URL"}
stages:
  - {name: ask, user: Hello, expect: {text: Hi there.}}
---
name: model_case
endpoint: {base_url: "BASE_URL"}
stages:
  - {name: ask, user: Hello, expect: {text: Hi there.}}
"""


def slow(request: RecordedRequest) -> Any:
    return json_reply(completion("Hi there."), delay_s=PAUSE_S)


def records(pytester: pytest.Pytester, *args: str) -> dict[str, dict[str, Any]]:
    pytester.runpytest("-p", "no:cacheprovider", "--toolbench-report", "report.json",
                       *args).assert_outcomes(passed=2)
    report = json.loads((pytester.path / "report.json").read_text())
    return {case["case"]: case for case in report["cases"]}


def test_a_replay_reports_its_own_latency_and_keeps_the_recorded_one_apart(
        pytester: pytest.Pytester) -> None:
    with start_chat_server() as server:
        server.set_handler(slow)
        pytester.makefile(".case.yaml", hello=CASES.replace("BASE_URL", server.base_url))
        recorded = records(pytester, "--toolbench-record")
    replayed = records(pytester)
    for name in ("agent_case", "model_case"):
        was, now = recorded[name], replayed[name]
        assert was["latency_ms"] >= PAUSE_S * 1000, was
        assert was["recorded_latency_ms"] is None  # a live run has no recording to show
        assert now["latency_ms"] < PAUSE_S * 1000 / 2, now  # the cassette answered at once
        assert now["recorded_latency_ms"] >= PAUSE_S * 1000
        [reply] = [turn["reply"] for run in now["runs"] for stage in run["stages"]
                   for attempt in stage["attempts"] for turn in attempt["turns"]]
        assert reply["latency_ms"] == now["latency_ms"]
