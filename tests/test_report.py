"""--toolbench-report: a JSON report of every case, model, stage and attempt (SPEC 9)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from support.chat_server import ChatServer, completion, json_reply

CASES = """name: weather
model: [m1, m2]
endpoint: {{base_url: '{url}'}}
tools:
  - name: get_weather
    result: {{temp_c: 21}}
stages:
  - name: ask
    user: Weather in Paris?
    retry: {{attempts: 2}}
    expect:
      tool_calls: [{{name: get_weather, arguments: {{city: Paris}}}}]
---
name: chat
model: m1
endpoint: {{base_url: '{url}'}}
stages:
  - name: hello
    user: hi
    expect: {{text: hello}}
"""


def serve(server: ChatServer) -> None:
    def answer(request: Any) -> Any:
        body = request.json()
        if "tools" not in body:
            return json_reply(completion(text="hello"))
        city = "Lyon" if body["model"] == "m2" else "Paris"
        return json_reply(completion(tool_calls=[("get_weather", {"city": city})]))
    server.set_handler(answer)


def load(path: Path) -> dict[str, Any]:
    return json.loads(path.read_text(encoding="utf-8"))  # type: ignore[no-any-return]


def test_report_holds_every_case_stage_and_attempt(
    pytester: pytest.Pytester, chat_server: ChatServer
) -> None:
    serve(chat_server)
    pytester.makefile(".case.yaml", suite=CASES.format(url=chat_server.base_url))
    report = pytester.path / "out" / "report.json"
    result = pytester.runpytest("--toolbench-live", f"--toolbench-report={report}")
    result.assert_outcomes(passed=2, failed=1)
    document = load(report)
    assert document["version"] == 1
    assert document["summary"] == {"cases": 3, "failed": 1, "passed": 2}
    by_id = {case["nodeid"]: case for case in document["cases"]}
    assert set(by_id) == {"suite.case.yaml::weather[m1]", "suite.case.yaml::weather[m2]",
                          "suite.case.yaml::chat[m1]"}
    failed = by_id["suite.case.yaml::weather[m2]"]
    assert failed["outcome"] == "failed" and failed["model"] == "m2"
    attempts = failed["runs"][0]["stages"][0]["attempts"]
    assert [a["passed"] for a in attempts] == [False, False]
    call = attempts[0]["turns"][0]["reply"]["tool_calls"][0]
    assert call["name"] == "get_weather" and json.loads(call["arguments"]) == {"city": "Lyon"}
    assert attempts[0]["failures"][0]["line"] == 12
    assert "arguments.city" in attempts[0]["failures"][0]["message"]
    passed = by_id["suite.case.yaml::weather[m1]"]
    assert passed["total_tokens"] == 15 and passed["tool_calls"] == 1
    assert passed["latency_ms"] > 0
    assert attempts[0]["trail"] == ["idle", "sending", "receiving", "checking", "failed"]
    assert [p.name for p in report.parent.iterdir()] == ["report.json"]  # no temp file left


def test_report_is_complete_under_xdist(
    pytester: pytest.Pytester, chat_server: ChatServer
) -> None:
    serve(chat_server)
    pytester.makefile(".case.yaml", suite=CASES.format(url=chat_server.base_url))
    report = pytester.path / "report.json"
    result = pytester.runpytest_subprocess("--toolbench-live", "-n", "2",
                                           f"--toolbench-report={report}")
    result.assert_outcomes(passed=2, failed=1)
    cases = load(report)["cases"]
    assert sorted(case["nodeid"] for case in cases) == [
        "suite.case.yaml::chat[m1]", "suite.case.yaml::weather[m1]",
        "suite.case.yaml::weather[m2]"]
    assert all(case["runs"][0]["stages"][0]["attempts"] for case in cases)


def test_junitxml_carries_figures_as_properties(
    pytester: pytest.Pytester, chat_server: ChatServer
) -> None:
    serve(chat_server)
    pytester.makefile(".case.yaml", suite=CASES.format(url=chat_server.base_url))
    junit = pytester.path / "junit.xml"
    pytester.runpytest("--toolbench-live", f"--junitxml={junit}")
    xml = junit.read_text(encoding="utf-8")
    assert '<testcase classname="suite.case.yaml" name="chat[m1]"' in xml
    assert '<property name="total_tokens" value="15" />' in xml
    assert '<property name="latency_ms" value="' in xml
    assert '<property name="tool_calls" value="1" />' in xml
