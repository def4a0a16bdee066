"""``--toolbench-rejudge --toolbench-record``: a changed criterion costs judge calls, not a
new recording. The model's exchanges are replayed and kept in the cassette byte for byte;
only the judge's are asked again and written, for the plugin's own cases and agent cases.

The upstream is the loopback chat server. After the recording it would answer the model
differently (so a re-recorded exchange would show) and it counts each role's requests.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from support.chat_server import RecordedRequest, completion, json_reply, start_chat_server
from support.second_models import role_of, verdict

CASES = """name: model_case
judge: {model: judge-model}
endpoint: {base_url: "BASE_URL"}
stages:
  - name: hi
    user: Say hello
    expect:
      judge: [CRITERION]
---
name: agent_case
agent: {python: support.agents.openai_chat:make_agent}
judge: {model: judge-model}
endpoint: {base_url: "BASE_URL"}
stages:
  - name: hi
    user: Say hello
    expect:
      judge: [CRITERION]
"""


class Upstream:
    """The model says ``said``; the judge gives ``verdict`` with ``reasoning``."""

    def __init__(self) -> None:
        self.said, self.verdict, self.reasoning = "Hello there!", "pass", "It greets."
        self.sent = {"model": 0, "judge": 0, "simulator": 0}

    def __call__(self, request: RecordedRequest) -> Any:
        role = role_of(request)
        self.sent[role] += 1
        if role == "judge":
            return verdict("chat", self.verdict, self.reasoning)
        return json_reply(completion(self.said))


def blocks(path: Path) -> dict[str, list[str]]:
    """The cassette's exchanges as the file spells them, by role."""
    found: dict[str, list[str]] = {"model": [], "judge": []}
    lines = path.read_text().splitlines()[path.read_text().splitlines().index("interactions:")
                                          + 1:]
    items: list[list[str]] = []
    for line in lines:
        if line.startswith("- "):
            items.append([])
        elif not line.startswith("  "):
            break  # the next top-level key
        items[-1].append(line)
    for item in items:
        found["judge" if item[0] == "- role: judge" else "model"].append("\n".join(item))
    return found


def run(pytester: pytest.Pytester, *args: str) -> pytest.RunResult:
    return pytester.runpytest("-p", "no:cacheprovider", *args)


def test_rejudge_with_record_writes_only_the_new_verdicts(pytester: pytest.Pytester) -> None:
    folder = pytester.path / "__cassettes__" / "greet"
    upstream = Upstream()
    with start_chat_server() as server:
        server.set_handler(upstream)
        text = CASES.replace("BASE_URL", server.base_url)
        pytester.makefile(".case.yaml", greet=text.replace("CRITERION", "Greets the user"))
        run(pytester, "--toolbench-record").assert_outcomes(passed=2)
        before = {name: blocks(folder / f"{name}.yaml") for name in ("model_case",
                                                                     "agent_case")}
        # The criterion changes; the model would now answer otherwise.
        pytester.makefile(".case.yaml", greet=text.replace("CRITERION",
                                                           "Greets the user in French"))
        upstream.said, upstream.verdict, upstream.reasoning = "CHANGED", "fail", "No French."
        upstream.sent = {"model": 0, "judge": 0, "simulator": 0}
        rejudged = run(pytester, "--toolbench-rejudge", "--toolbench-record")
        assert upstream.sent == {"model": 0, "judge": 2, "simulator": 0}
    rejudged.assert_outcomes(failed=2)
    rejudged.stdout.fnmatch_lines(["*judge says fail*Greets the user in French*",
                                   "*fail: No French.*"])
    for name, was in before.items():
        now = blocks(folder / f"{name}.yaml")
        assert now["model"] == was["model"], name  # byte for byte
        assert len(was["judge"]) == len(now["judge"]) == 1
        assert "Greets the user in French" in now["judge"][0], name
        assert "No French." in now["judge"][0] and "It greets." in was["judge"][0]
    replayed = run(pytester)  # the server is gone: the new verdicts replay
    replayed.assert_outcomes(failed=2)
    replayed.stdout.fnmatch_lines(["*fail: No French.*"])


def test_rejudge_with_record_keeps_the_cassette_when_the_judge_fails_to_answer(
        pytester: pytest.Pytester) -> None:
    folder = pytester.path / "__cassettes__" / "greet"
    upstream = Upstream()
    with start_chat_server() as server:
        server.set_handler(upstream)
        text = CASES.replace("BASE_URL", server.base_url)
        pytester.makefile(".case.yaml", greet=text.replace("CRITERION", "Greets the user"))
        run(pytester, "--toolbench-record").assert_outcomes(passed=2)
    written = {path.name: path.read_bytes() for path in folder.iterdir()}
    # The judge's endpoint is gone: no verdict, and nothing is written.
    run(pytester, "--toolbench-rejudge", "--toolbench-record").assert_outcomes(failed=2)
    assert {path.name: path.read_bytes() for path in folder.iterdir()} == written
