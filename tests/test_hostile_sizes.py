"""Sizes that would swamp the outputs, second round (issue 33): a tool's result of many
megabytes, a recorded request holding one in a replay diff. Each is cut at its documented
limit (``pytest_toolbench/defaults.py``, docs/hostile-input.md), saying how much it left out.
"""

from __future__ import annotations

import json
import textwrap

import pytest
from support.chat_server import ChatServer, RecordedRequest, completion, json_reply

from pytest_toolbench.defaults import DIFF_LINE_CHARS, TOOL_RESULT_CHARS

BIG = 5 * 1024 * 1024

HUGE_TOOLS = f'''
def huge(**kwargs):
    return "z" * {BIG}
'''


def call_then_done(request: RecordedRequest) -> object:
    if any(m["role"] == "tool" for m in request.json()["messages"]):
        return json_reply(completion(text="done"))
    return json_reply(completion(tool_calls=[("t", {})]))


def case(server: ChatServer, tool: str) -> str:
    return textwrap.dedent(f"""\
        name: big
        endpoint: {{base_url: "{server.base_url}", retries: 0}}
        tools:
          - name: t
            {tool}
        stages:
          - {{name: ask, user: go, run_tools: true, expect: {{text: done}}}}
        """)


def test_a_huge_tool_result_is_cut_before_the_model_cassette_and_reports_see_it(
        pytester: pytest.Pytester, chat_server: ChatServer) -> None:
    pytester.makepyfile(huge_tools=HUGE_TOOLS)
    chat_server.set_handler(call_then_done)
    pytester.makefile(".case.yaml", big=case(chat_server, "python: huge_tools:huge"))
    outputs = ("--toolbench-report=r.json", "--toolbench-html=r.html", "--junitxml=j.xml")
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "--toolbench-record",
                                           *outputs, timeout=120)
    result.assert_outcomes(passed=1)
    sent = next(m["content"] for m in chat_server.requests[1].json()["messages"]
            if m["role"] == "tool")
    assert len(sent) == TOOL_RESULT_CHARS
    kept = sent.index("... [")
    assert sent.endswith(f"... [{BIG - kept:,} more characters left out]")
    cassette = pytester.path / "__cassettes__" / "big" / "big.yaml"
    for path in (cassette, pytester.path / "r.json", pytester.path / "r.html"):
        assert path.stat().st_size < 3 * TOOL_RESULT_CHARS, path
    # The cut result replays as it was recorded.
    pytester.runpytest_subprocess("-p", "no:cacheprovider", timeout=120).assert_outcomes(
        passed=1)


def test_a_huge_recorded_result_in_a_request_diff_is_cut_line_by_line(
        pytester: pytest.Pytester, chat_server: ChatServer) -> None:
    chat_server.set_handler(call_then_done)
    pytester.makefile(".case.yaml", big=case(chat_server, "result: sunny"))
    pytester.runpytest_subprocess("-p", "no:cacheprovider", "--toolbench-record",
                                  timeout=60).assert_outcomes(passed=1)
    cassette = pytester.path / "__cassettes__" / "big" / "big.yaml"
    text = cassette.read_text()
    assert text.count('"content": "sunny"') == 1
    cassette.write_text(text.replace('"content": "sunny"',
                                     json.dumps({"content": "y" * 20_000_000})[1:-1]))
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "--junitxml=j.xml",
                                           "--toolbench-report=r.json", timeout=120)
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*request 2 differs from the one recorded*",
                                 "*-*yyyy... ?* more characters left out?*",
                                 '*+*"content": "sunny",*'])
    longest = max(len(line) for line in result.stdout.lines)
    assert longest < DIFF_LINE_CHARS + 200
    for name in ("j.xml", "r.json"):
        assert (pytester.path / name).stat().st_size < 200_000, name


@pytest.mark.parametrize("length", [0, 999, 1000, 1001, 10**6])
def test_a_cut_fits_its_limit_says_what_it_left_out_and_cuts_no_further(length: int) -> None:
    from pytest_toolbench.cuts import cut

    text = "".join(chr(0x61 + i % 26) for i in range(length))
    once = cut(text, 1000)
    assert len(once) <= 1000
    assert cut(once, 1000) == once
    if length <= 1000:
        assert once == text
    else:
        kept = once.index("... [")
        assert text.startswith(once[:kept])
        assert once.endswith(f"... [{length - kept:,} more characters left out]")
