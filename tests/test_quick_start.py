"""The README's quick start, run as the README shows it, against a server that answers as
the local model (``toolbench serve-local``: Gemma 3 270M behind llama-cpp-python) does.

What that model does, read from the example suite's cassettes (cases/__cassettes__/) and
docs/conformance.md: a forced ``tool_choice`` gets a real call; offered tools with
``tool_choice: auto`` it answers the question back as text, and a streamed request with
``auto`` and tools gets an empty stream with no ``[DONE]``; asked for an answer after the
tool result (``tool_choice: none``) it replies with an empty text. Its streams carry no
usage chunk. A quick start that passes here asks no more of a model than that.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Any

import pytest
from support.chat_server import (
    ChatServer,
    RecordedRequest,
    Reply,
    chunks_for,
    completion,
    json_reply,
    sse_reply,
)

README = Path(__file__).parent.parent / "README.md"


def quick_start_blocks() -> list[str]:
    """The YAML blocks of the README's "## Quick start" section, as printed there."""
    section = README.read_text(encoding="utf-8").split("\n## Quick start\n", 1)[1]
    section = section.split("\n## ", 1)[0]
    return re.findall(r"^```yaml\n(.*?)^```$", section, re.MULTILINE | re.DOTALL)


def quick_start_case() -> str:
    """The quick start's first case: its tools are the case's own."""
    blocks = quick_start_blocks()
    assert blocks, "the quick start has no ```yaml block"
    return blocks[0]


def quick_start_mcp_case() -> str:
    """The quick start's case whose tools come from an MCP server."""
    found = [block for block in quick_start_blocks() if "mcp_servers:" in block]
    assert len(found) == 1, "the quick start shows no MCP case"
    return found[0]


FORCED_CALLS = {"get_weather": {"city": "Paris"}, "get_current_time": {"timezone": "UTC"}}
"""What the local model calls each quick-start tool with when the request forces it."""


def like_the_local_model(request: RecordedRequest) -> Reply:
    body = request.json()
    tools, choice, streamed = body.get("tools"), body.get("tool_choice", "auto"), body.get("stream")
    question = next(message["content"] for message in reversed(body["messages"])
                    if message["role"] == "user")
    if tools and isinstance(choice, dict):
        name = choice["function"]["name"]
        parts: dict[str, Any] = {"tool_calls": [(name, FORCED_CALLS[name])]}
    elif tools and choice == "auto":
        if streamed:  # "Automatic streaming tool choice is not supported" in the server
            return sse_reply([], done=False)
        parts = {"text": question}
    elif body["messages"][-1]["role"] == "tool":
        parts = {"text": ""}
    else:
        parts = {"text": question}
    if streamed:
        return sse_reply(chunks_for(**parts, usage=None))
    return json_reply(completion(**parts))


def test_the_quick_start_passes_with_the_local_model_as_written(
        pytester: pytest.Pytester, chat_server: ChatServer,
        monkeypatch: pytest.MonkeyPatch) -> None:
    chat_server.set_handler(like_the_local_model)
    pytester.path.joinpath("weather.case.yaml").write_text(quick_start_case(), encoding="utf-8")
    monkeypatch.setenv("TOOLBENCH_BASE_URL", chat_server.base_url)  # serve-local's export

    recorded = pytester.runpytest("weather.case.yaml", "--toolbench-record",
                                  "--toolbench-concurrency", "1")

    recorded.assert_outcomes(passed=1)
    # The call was answered with the tool's result before the model was asked again.
    sent_back = [message for request in chat_server.requests
                 for message in request.json()["messages"] if message["role"] == "tool"]
    assert sent_back and '"temp_c": 21' in sent_back[0]["content"]
    chat_server.close()  # replay: offline
    pytester.runpytest("weather.case.yaml").assert_outcomes(passed=1)


def test_the_quick_start_runs_over_three_apis_in_one_session(
        pytester: pytest.Pytester, chat_server: ChatServer,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Its params hold ``seed``, which only chat's request takes: the Responses and Messages
    items fail on it alone, at its line and sending nothing; chat's item runs."""
    chat_server.set_handler(like_the_local_model)
    case = quick_start_case()
    seed_line = next(number for number, line in enumerate(case.splitlines(), start=1)
                     if line.startswith("params:") and "seed" in line)
    pytester.path.joinpath("weather.case.yaml").write_text(case, encoding="utf-8")
    monkeypatch.setenv("TOOLBENCH_BASE_URL", chat_server.base_url)

    result = pytester.runpytest("weather.case.yaml", "--toolbench-record",
                                "--toolbench-api", "chat,responses,messages",
                                "--toolbench-concurrency", "1")

    result.assert_outcomes(passed=1, failed=2)
    for title in ("Responses", "Messages"):
        result.stdout.fnmatch_lines([(
            f"weather.case.yaml:{seed_line}: case 'paris_weather': the {title} API's request"
            " has no field 'seed', and the service refuses a field it does not know: give it"
            " only to the APIs that take it (params: {chat: {seed: 7}}), or leave this API"
            " out (endpoint.apis)")])
    assert {request.path for request in chat_server.requests} == {"/v1/chat/completions"}


def test_the_quick_starts_mcp_case_is_valid_and_starts_no_server_to_say_so(
        pytester: pytest.Pytester) -> None:
    from pytest_toolbench.commands.cli import main

    pytester.path.joinpath("clock.case.yaml").write_text(quick_start_mcp_case(),
                                                          encoding="utf-8")
    assert main(["validate", "clock.case.yaml"]) == 0
    result = pytester.runpytest("--collect-only", "-q", "clock.case.yaml")
    result.stdout.fnmatch_lines(["clock.case.yaml::utc_time[[]gemma-3-270m[]]",
                                 "1 test collected*"])


def test_the_quick_starts_mcp_case_passes_with_the_local_model_and_the_real_server(
        pytester: pytest.Pytester, chat_server: ChatServer,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """As the README runs it: mcp-server-time answers the call (``python`` is this
    interpreter, the one the server is installed in), then replay needs neither."""
    chat_server.set_handler(like_the_local_model)
    case = pytester.path / "clock.case.yaml"
    here = json.dumps(sys.executable)
    case.write_text(quick_start_mcp_case().replace("[python,", f"[{here},"), encoding="utf-8")
    assert here in case.read_text(encoding="utf-8")
    monkeypatch.setenv("TOOLBENCH_BASE_URL", chat_server.base_url)

    recorded = pytester.runpytest("clock.case.yaml", "--toolbench-record",
                                  "--toolbench-concurrency", "1")

    recorded.assert_outcomes(passed=1)
    offered = chat_server.requests[0].json()["tools"]
    assert [tool["function"]["name"] for tool in offered] == ["get_current_time"]
    sent_back = [json.loads(message["content"]) for request in chat_server.requests
                 for message in request.json()["messages"] if message["role"] == "tool"]
    assert sent_back and sent_back[0]["timezone"] == "UTC"
    assert sent_back[0]["datetime"].endswith("+00:00")  # the server's answer, not a canned one
    chat_server.close()
    case.write_text(case.read_text(encoding="utf-8").replace(here, '"/nonexistent/python"'),
                    encoding="utf-8")
    pytester.runpytest("clock.case.yaml").assert_outcomes(passed=1)
