"""The judge and the simulated user against the real llama-server with Gemma 3 270M: the
protocol (each API's structured request accepted, each answer read as a verdict or as a
judge error of what it said, never of the transport) and record/replay identity. Not the
small model's wisdom: its verdicts are whatever it says."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from pytest_toolbench.commands.local_server import LocalServer, free_port

pytestmark = [pytest.mark.live_server, pytest.mark.xdist_group("model_servers")]


def cases(base_url: str, api: str) -> str:
    return f"""
name: judged
model: gemma-3-270m
endpoint: {{base_url: "{base_url}", timeout_s: 120}}
params: {{temperature: 0, seed: 7, max_tokens: 24}}
judge:
  model: gemma-3-270m
  endpoint: {{api: {api}}}
stages:
  - name: greet
    user: Say hello in one short sentence.
    expect:
      judge:
        - The agent greeted the user
        - {{criterion: The reply is in English, samples: 3}}
---
name: simulated
model: gemma-3-270m
endpoint: {{base_url: "{base_url}", timeout_s: 120}}
params: {{temperature: 0, seed: 7, max_tokens: 24}}
judge:
  model: gemma-3-270m
  endpoint: {{api: {api}}}
stages:
  - name: talk
    simulate_user:
      instructions: You are Ana. You want to know the opening hours of the shop.
      max_turns: 2
"""


def attempts(report: Path) -> dict[str, dict[str, Any]]:
    found = {}
    for case in json.loads(report.read_text())["cases"]:
        (attempt,) = case["runs"][0]["stages"][0]["attempts"]
        found[case["case"]] = {"outcome": case["outcome"],
                               "judgements": attempt["judgements"],
                               "conversation": attempt["conversation"],
                               "ended": attempt["ended"],
                               "failures": [f["message"] for f in attempt["failures"]]}
    return found


@pytest.mark.parametrize("api", ["chat", "messages"])
def test_the_local_model_as_judge_and_user_records_and_replays_alike(
        pytester: pytest.Pytester, llama_server: LocalServer, api: str) -> None:
    pytester.makefile(".case.yaml", second=cases(llama_server.base_url, api))
    recorded, replayed = pytester.path / "recorded.json", pytester.path / "replayed.json"
    pytester.runpytest("-p", "no:cacheprovider", "--toolbench-record",
                       "--toolbench-concurrency", "1", "--toolbench-report", str(recorded))
    live = attempts(recorded)
    judged = live["judged"]
    assert [len(j["samples"]) for j in judged["judgements"]] in ([1], [1, 3])
    for judgement in judged["judgements"]:
        for sample in judgement["samples"]:
            # The server took the structured request and answered: a verdict, or a judge
            # error about what the model wrote, never an HTTP or transport one.
            assert sample["verdict"] in ("pass", "fail") or not sample["error"].startswith(
                ("HTTP", "no reply")), sample
    conversation = live["simulated"]
    assert conversation["conversation"][0]["role"] == "user"
    assert conversation["ended"] in ("stop", "max_turns") or any(
        "simulator error" in failure for failure in conversation["failures"])
    # Replayed with the server out of reach: every verdict and message as recorded.
    result = pytester.runpytest("-p", "no:cacheprovider", "--toolbench-base-url",
                                f"http://127.0.0.1:{free_port()}/v1",
                                "--toolbench-report", str(replayed))
    assert "differs from the one recorded" not in result.stdout.str()
    assert attempts(replayed) == live
