"""The support agents of ``support.agents`` against the real model server: each framework's
agent case recorded through the plugin's proxy from llama-server, then replayed with the
endpoint out of reach, telling the same story.

Gemma 3 270M is tiny: the tests check the protocol (every request reached llama-server
over the agent's own API; the cassette holds them all and no key) and that replay is the
recording, verdict for verdict and turn for turn, not what the model says: at 48 tokens it
may cut a call's arguments, which llama-server answers with a 500 that the agent raises (such a
recording keeps the cassette there was, as any recording that failed on a 5xx). llama-server
answers chat completions, Responses and Messages, not Gemini's API, so the google-genai
agent is proven against the loopback Gemini server only (tests/test_agent_frameworks.py).
"""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
import yaml
from support.agents.frameworks import FRAMEWORKS, PLACEHOLDER_KEYS, Framework

from pytest_toolbench.commands.local_server import LocalServer, free_port

pytestmark = [pytest.mark.live_server, pytest.mark.xdist_group("model_servers")]

LIVE = [pytest.param(f, marks=f.marks, id=f.id) for f in FRAMEWORKS if f.api != "gemini"]
CASE = """name: refund_live
agent:
  python: {factory}
  init: {init}
model: gemma-3-270m
endpoint: {{base_url: "{base_url}", timeout_s: 120}}
stages:
  - name: ask
    user: Refund order 913
    expect:
      requests: {{$gte: 1}}
"""


def outcomes(result: pytest.RunResult) -> dict[str, int]:
    return {name: count for name, count in result.parseoutcomes().items()
            if name in ("passed", "failed", "error", "errors")}


def verdict_lines(result: pytest.RunResult) -> list[str]:
    """Each failure's first line (``refund.case.yaml:9: refund_live[...]: ...``)."""
    return [line for line in result.outlines if line.startswith("refund.case.yaml:")]


def turns_of(report: dict[str, Any]) -> list[Any]:
    """What each request of the case got back, as the JSON report keeps it."""
    [case] = report["cases"]
    [run] = case["runs"]
    return [[(turn.get("text"), turn.get("tool_calls"), turn.get("finish_reason"))
             for turn in attempt["turns"]]
            for stage in run["stages"] for attempt in stage["attempts"]]


@pytest.mark.parametrize("framework", LIVE)
def test_the_agent_case_recorded_from_llama_server_replays_the_same(
        framework: Framework, llama_server: LocalServer, pytester: pytest.Pytester,
        monkeypatch: pytest.MonkeyPatch) -> None:
    for name, value in PLACEHOLDER_KEYS.items():
        monkeypatch.setenv(name, value + "-the-teams-own-secret")
    init = json.dumps({**framework.init, "max_tokens": 48})
    pytester.makefile(".case.yaml", refund=CASE.format(
        factory=framework.factory, init=init, base_url=llama_server.base_url))
    recorded = pytester.runpytest("-p", "no:cacheprovider", "--toolbench-record",
                                  "--toolbench-report", "recorded.json")
    unreachable = f"http://127.0.0.1:{free_port()}/v1"
    replayed = pytester.runpytest("-p", "no:cacheprovider", "--toolbench-base-url", unreachable,
                                  "--toolbench-report", "replayed.json")

    # The model's words decide the verdict: at 48 tokens it may cut a call's arguments, and
    # llama-server then answers 500. A recording that failed on a 5xx keeps the cassette
    # there was (here none), by the plugin's own rule: replay then asks for a recording.
    cassettes = pytester.path / "__cassettes__" / "refund"
    if not cassettes.exists():
        assert outcomes(recorded) == {"failed": 1}
        [line] = verdict_lines(recorded)
        assert re.search(r"\b5\d\d\b", line), line  # the server's status, in the SDK's words
        assert outcomes(replayed) == {"failed": 1}
        [line] = verdict_lines(replayed)
        assert "no cassette at __cassettes__/refund/" in line and "--toolbench-record" in line
        return
    # Otherwise replay gives the recording's verdict, for the same reason.
    assert outcomes(replayed) == outcomes(recorded) != {}
    assert verdict_lines(replayed) == verdict_lines(recorded)
    [path] = cassettes.iterdir()
    text = path.read_text()
    assert "the-teams-own-secret" not in text
    interactions = yaml.safe_load(text)["interactions"]
    assert interactions
    assert [item["api"] for item in interactions] == [framework.api] * len(interactions)
    first = json.loads((pytester.path / "recorded.json").read_text())
    again = json.loads((pytester.path / "replayed.json").read_text())
    assert turns_of(first) == turns_of(again)
