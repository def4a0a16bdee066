"""Faults on cue against the real llama-server (llama.cpp), over three wire APIs: recorded
with their faults, the service's real replies are what the cassette keeps; replayed with
the same faults, offline, the verdicts are the record's; replayed without them, the same
cassettes pass as a clean run.

At temperature 0 with ``tool_choice: required`` the 270M model makes one call of
``get_weather`` on every route (see test_wire_apis_live.py), streamed token by token: a
stream of many events, which a cut stops after two.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from pytest_toolbench.commands.local_server import LocalServer

pytestmark = [pytest.mark.live_server, pytest.mark.xdist_group("model_servers")]

APIS = ("chat", "responses", "messages")
CASE = """name: NAME
params: {temperature: 0, max_tokens: 48}
tools:
  - name: get_weather
    description: Current weather for a city
    parameters: {type: object, properties: {city: {type: string}}, required: [city]}
stages:
  - name: ask
    user: What's the weather in Paris?
    tool_choice: required
    stream: true
    faults: FAULTS
    expect: EXPECT
"""
CALLS = "{tool_calls: [{name: get_weather}]}"

# name, faults, what they expect with them
CASES = [
    ("rate_limited", "[{request: 1, status: 429, retry_after_s: 0}]",
     "{tool_calls: [{name: get_weather}], requests: 2}"),
    ("dropped", "[{request: 1, disconnect: true}]",
     "{tool_calls: [{name: get_weather}], requests: 2}"),
    ("cut", "[{request: 1, cut: {after_chunks: 2}}]",
     "{error: {$regex: '^ConnectionLost: the connection was closed after 2 events'}}"),
    ("renamed", "[{request: 1, mutate: unknown_tool}]",
     "{tool_calls: [{name: {$regex: '^get_weather_not_offered$'}}]}"),
    ("slowed", "[{request: 1, delay: {first_byte_ms: 300, chunk_ms: 2}}]",
     "{tool_calls: [{name: get_weather}], latency_ms: {$gte: 300}}"),
]


def case_file(faults: bool) -> str:
    return "---\n".join(
        CASE.replace("NAME", name).replace("FAULTS", planned if faults else "[]")
        .replace("EXPECT", expect if faults else CALLS)
        for name, planned, expect in CASES)


def run(pytester: pytest.Pytester, base_url: str, report: str, *args: str
        ) -> tuple[pytest.RunResult, dict[str, dict[str, Any]]]:
    result = pytester.runpytest(
        "-p", "no:cacheprovider", "--toolbench-concurrency=1", f"--toolbench-base-url={base_url}",
        "--toolbench-api=" + ",".join(APIS), f"--toolbench-report={report}", *args)
    records = json.loads((pytester.path / report).read_text(encoding="utf-8"))["cases"]
    return result, {f"{record['case']}[{record['api']}]": record for record in records}


def real_replies(cassettes: Path) -> dict[str, list[Any]]:
    """Each cassette's replies, as recorded (their timing left out)."""
    replies = {}
    for path in sorted(cassettes.rglob("*.yaml")):
        exchanges = yaml_load(path)["interactions"]
        replies[path.name] = [[event["data"] for event in exchange["response"]["events"]]
                              for exchange in exchanges]
    return replies


def yaml_load(path: Path) -> Any:
    import yaml

    return yaml.safe_load(path.read_text(encoding="utf-8"))


def test_faults_recorded_from_llama_server_replay_with_the_same_verdicts(
        pytester: pytest.Pytester, llama_server: LocalServer) -> None:
    pytester.makefile(".case.yaml", faults=case_file(faults=True))
    recorded, live = run(pytester, llama_server.base_url, "record.json", "--toolbench-record")
    replayed, offline = run(pytester, "http://127.0.0.1:9/v1", "replay.json")
    kept = real_replies(pytester.path / "__cassettes__")
    pytester.makefile(".case.yaml", faults=case_file(faults=False))
    clean, _ = run(pytester, "http://127.0.0.1:9/v1", "clean.json")

    count = len(CASES) * len(APIS)
    recorded.assert_outcomes(passed=count)
    replayed.assert_outcomes(passed=count)
    assert {name: record["outcome"] for name, record in offline.items()} == {
        name: record["outcome"] for name, record in live.items()}
    # The cassettes hold the service's real replies: no renamed call, no cut stream (a
    # cut reply is kept whole), no injected error; without the faults they pass.
    assert all("not_offered" not in data and "pytest-toolbench" not in data
               for replies in kept.values() for reply in replies for data in reply)
    for name, replies in kept.items():
        assert len(replies) == 1, name  # one real exchange a case: the faults sent none
        assert len(replies[0]) > 2, name  # more events than the cut let through
    clean.assert_outcomes(passed=count)
    for name, record in live.items():
        fault = record["runs"][0]["stages"][0]["attempts"][0]["turns"][0]["fault"]
        assert fault["injected"] is True and fault["source"] == "fault 1 of stage ask", name
