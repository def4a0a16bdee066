"""Record against the real local model server, then replay with the server out of reach.

Each test writes case files, records them (``--toolbench-record``) with a fake API key in
the environment, then replays them with the endpoint pointed at a port nobody listens on:
the outcomes must be the same, and the key must appear in no file and in no output.

What the model does (Gemma 3 270M, llama-cpp-python 0.3.36, chatml-function-calling):
a forced ``tool_choice`` yields a real ``get_weather`` call with ``city: Paris``; with
``auto`` it mostly answers text. The server rejects a prompt longer than its context with
400 ``context_length_exceeded``, and a parameter of the wrong type with a 500 that quotes
the validation error. It sends no usage chunk in streams.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from typing import Any

import pytest
import yaml

from pytest_toolbench.commands.local_server import LocalServer, free_port

pytestmark = [pytest.mark.live_server, pytest.mark.xdist_group("model_servers")]

FAKE_KEY = "sk-test-FAKE0123456789abcdefXYZ"
WEATHER_TOOL = {
    "name": "get_weather",
    "description": "Current weather for a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                   "required": ["city"]},
}


@dataclass
class Project:
    """A pytester directory of case files that talk to the local server."""

    pytester: pytest.Pytester
    base_url: str

    def write(self, stem: str, *cases: dict[str, Any]) -> None:
        endpoint = {"base_url": self.base_url, "timeout_s": 60}
        documents = [{**case, "endpoint": {**endpoint, **case.get("endpoint", {})}}
                     for case in cases]
        text = yaml.safe_dump_all(documents, sort_keys=False, width=1 << 20)
        self.pytester.path.joinpath(f"{stem}.case.yaml").write_text(text, encoding="utf-8")

    def record(self) -> pytest.RunResult:
        return self._run("--toolbench-record")

    def replay(self) -> pytest.RunResult:
        return self.replay_with()

    def replay_with(self, *args: str) -> pytest.RunResult:
        # Nothing listens there: a replay that touched the network would fail to connect.
        unreachable = f"http://127.0.0.1:{free_port()}/v1"
        return self._run("--toolbench-base-url", unreachable, *args)

    def record_then_replay(self, **outcomes: int) -> tuple[pytest.RunResult, pytest.RunResult]:
        """Record, replay, and check both runs end with ``outcomes``."""
        recorded = self.record()
        recorded.assert_outcomes(**outcomes)
        replayed = self.replay()
        replayed.assert_outcomes(**outcomes)
        self.assert_key_nowhere()
        return recorded, replayed

    def cassette(self, stem: str, case: str) -> dict[str, Any]:
        path = self.pytester.path / "__cassettes__" / stem / f"{case}.yaml"
        data: dict[str, Any] = yaml.safe_load(path.read_text(encoding="utf-8"))
        return data

    def assert_key_nowhere(self) -> None:
        files = [path for path in self.pytester.path.rglob("*") if path.is_file()]
        assert any(path.parent.parent.name == "__cassettes__" for path in files)
        leaks = [str(path) for path in files if FAKE_KEY.encode() in path.read_bytes()]
        assert leaks == [], f"the API key was written to {leaks}"

    def _run(self, *args: str) -> pytest.RunResult:
        result = self.pytester.runpytest("-v", *args)
        output = "\n".join(result.outlines + result.errlines)
        assert FAKE_KEY not in output, "the API key appeared in the output"
        return result


@pytest.fixture
def project(pytester: pytest.Pytester, local_server: LocalServer,
            monkeypatch: pytest.MonkeyPatch) -> Project:
    # The server ignores the key; the plugin sends it, and must store and print it nowhere.
    monkeypatch.setenv("OPENAI_API_KEY", FAKE_KEY)
    for name in ("TOOLBENCH_BASE_URL", "OPENAI_BASE_URL"):
        monkeypatch.delenv(name, raising=False)
    return Project(pytester, local_server.base_url)


def forced_call(name: str, *, stream: bool, city_pattern: str = "(?i)^\\s*paris\\s*$"
                ) -> dict[str, Any]:
    expect: dict[str, Any] = {
        "finish_reason": "tool_calls",
        "tool_calls": [{"name": "get_weather", "arguments": {"city": {"$regex": city_pattern}}}],
    }
    if stream:
        expect["stream"] = {"done": True, "chunks": {"$gte": 4}, "ttft_ms": {"$type": "number"}}
    return {
        "name": name,
        "params": {"temperature": 0, "max_tokens": 48},
        "tools": [WEATHER_TOOL],
        "stages": [{"name": "ask", "user": "What's the weather in Paris?",
                    "tool_choice": {"name": "get_weather"}, "stream": stream,
                    "expect": expect}],
    }


def short_text(name: str, *, stream: bool) -> dict[str, Any]:
    expect: dict[str, Any] = {
        "finish_reason": {"$in": ["stop", "length"]},
        "text": {"$all": [{"$type": "string"}, {"$len": {"$gte": 1}}]},
        "tool_calls": [],
    }
    if stream:
        expect["stream"] = {"done": True}
    else:
        expect["usage"] = {"completion_tokens": {"$gte": 1, "$lte": 8}}
    return {
        "name": name,
        "params": {"temperature": 0, "max_tokens": 8},
        "stages": [{"name": "ask", "user": "Say hello.", "stream": stream, "expect": expect}],
    }


def test_forced_tool_call_records_and_replays_offline(project: Project) -> None:
    project.write("weather", forced_call("forced_call", stream=False),
                  forced_call("forced_call_streamed", stream=True))

    recorded, replayed = project.record_then_replay(passed=2)

    for result in (recorded, replayed):
        result.stdout.fnmatch_lines(["*::forced_call PASSED*", "*::forced_call_streamed PASSED*"])
    plain = project.cassette("weather", "forced_call")["interactions"]
    assert [i["response"]["status"] for i in plain] == [200]
    call = json.loads(plain[0]["response"]["json"])["choices"][0]["message"]["tool_calls"][0]
    assert call["function"]["name"] == "get_weather"
    streamed = project.cassette("weather", "forced_call_streamed")["interactions"]
    assert json.loads(streamed[0]["request"]["json"])["stream"] is True
    events = streamed[0]["response"]["events"]
    assert len(events) >= 5 and events[-1]["data"] == "[DONE]"


def test_short_text_answer_records_and_replays_offline(project: Project) -> None:
    project.write("hello", short_text("hello", stream=False),
                  short_text("hello_streamed", stream=True))

    project.record_then_replay(passed=2)

    body = json.loads(project.cassette("hello", "hello")["interactions"][0]["request"]["json"])
    assert body["max_tokens"] == 8 and "tools" not in body


def test_rejected_requests_keep_their_status_in_replay(project: Project) -> None:
    too_long = {
        "name": "over_context",
        "params": {"max_tokens": 4},
        # About 2,500 tokens: more than the server's 2,048-token context.
        "stages": [{"name": "ask", "user": "word " * 2500,
                    "expect": {"status": 400,
                               "error": {"$regex": "(?i)maximum context length"}}}],
    }
    wrong_type = {
        "name": "bad_param",
        "endpoint": {"retries": 1},
        "params": {"max_tokens": "lots"},
        "stages": [{"name": "ask", "user": "hi",
                    "expect": {"status": 500, "error": {"$regex": "max_tokens"}}}],
    }
    project.write("rejected", too_long, wrong_type)

    project.record_then_replay(passed=2)

    statuses = {case: [i["response"]["status"]
                       for i in project.cassette("rejected", case)["interactions"]]
                for case in ("over_context", "bad_param")}
    # A 500 is retried (retries: 1), and both attempts are kept so replay sees them too.
    assert statuses == {"over_context": [400], "bad_param": [500, 500]}


def test_failing_expectation_fails_the_same_way_in_replay(project: Project) -> None:
    project.write("weather", forced_call("wrong_city", stream=False, city_pattern="(?i)london"))

    recorded, replayed = project.record_then_replay(failed=1)

    for result in (recorded, replayed):
        result.stdout.fnmatch_lines(["*::wrong_city FAILED*", "*city*Paris*london*"])


def test_a_replay_and_a_live_run_of_the_same_cassettes_show_no_drift(project: Project) -> None:
    """The done-when of reports that say how they were made: ``toolbench diff`` of a
    replayed run against a live one of the same cases shows nothing, though the live
    run's timings are the server's and its call ids new."""
    round_trip = forced_call("round_trip", stream=False)
    round_trip["stages"].append({"name": "answer", "run_tools": True, "tool_choice": "none",
                                 "expect": {"finish_reason": {"$in": ["stop", "length"]}}})
    round_trip["tools"] = [{**WEATHER_TOOL, "result": {"temp_c": 21}}]
    project.write("drift", round_trip, short_text("hello_streamed", stream=True))
    one_at_a_time = ("--toolbench-concurrency", "1")
    project._run("--toolbench-record", *one_at_a_time).assert_outcomes(passed=2)
    project._run("--toolbench-live", *one_at_a_time, "--toolbench-report=live.json"
                 ).assert_outcomes(passed=2)
    project.replay_with("--toolbench-report=replayed.json").assert_outcomes(passed=2)
    replayed, live = (project.pytester.path / name for name in ("replayed.json", "live.json"))
    assert json.loads(live.read_text())["run"]["mode"] == "live"

    diff = project.pytester.run(sys.executable, "-m", "pytest_toolbench.commands.cli", "diff",
                                str(replayed), str(live))

    assert diff.ret == 0
    assert diff.outlines == [
        (f"toolbench diff {replayed} -> {live}: 2 cases compared, 0 changed, 0 verdicts"
        " regressed; latency and time to first token not compared: OLD ran replay, NEW live"
        " (a replay's timings are its own)")]
