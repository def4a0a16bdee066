"""Typos that would cost requests are refused at load, each at its line: by ``toolbench
validate`` and by collection alike. A tool name no tool offers (did you mean), a finish
reason no API gives, text where a number is matched, an empty expectation, a stage key
written at case level (and a case key in a stage)."""

from __future__ import annotations

import json
import sys
import textwrap

import pytest
from support.chat_server import ChatServer

from pytest_toolbench.commands.cli import main

TYPOS = """\
name: orders
run_tools: true
tools:
  - name: get_order_status
    result: {status: shipped}
stages:
  - name: ask
    user: Where is order 42?
    tool_choice: {name: get_order_stauts}
    system: You answer about orders.
    expect:
      finish_reason: tool_call
      usage: {total_tokens: "<500"}
      text:
  - name: answer
    user: and now?
    expect:
"""

TYPO_LINES = [
    ("orders.case.yaml:2: run_tools: unknown key 'run_tools': this is a stage key: move it"
    " under a stage"),
    ("orders.case.yaml:10: stages[0].system: unknown key 'system': this is a case key: move"
    " it out of the stage"),
    ("orders.case.yaml:12: stages[0].expect.finish_reason: finish_reason 'tool_call' is none"
    " of stop, length, tool_calls, content_filter; did you mean `tool_calls`?"),
    ("orders.case.yaml:13: stages[0].expect.usage.total_tokens: usage.total_tokens is a"
    " number; the text '<500' never equals one: write {$lt: 500}"),
    "orders.case.yaml:14: stages[0].expect.text: `text:` is empty",
    ("orders.case.yaml:17: stages[1].expect: `expect:` is empty: give at least one"
    " expectation under it, or leave the key out"),
]

NAMES = """\
name: orders
tools:
  - name: get_order_status
    result: {status: shipped}
  - name: cancel_order
    result: {done: true}
stages:
  - name: ask
    user: Where is order 42?
    tool_choice: {name: get_order_stauts}
    expect:
      tool_calls: [{name: get_order_statsu, arguments: {id: 42}}]
  - name: answer
    run_tools: true
    expect:
      trajectory:
        $includes: [{name: {$in: [get_order_status, cancel_ordr]}}]
        $not: [{name: delete_everything}]
      probe:
        - call: {name: get_status}
          result: {$any: true}
"""

NAME_LINES = [
    ("orders.case.yaml:10: stages[0].tool_choice.name: tool_choice names 'get_order_stauts',"
    " which is not one of the case's tools; did you mean `get_order_status`?"),
    ("orders.case.yaml:12: stages[0].expect.tool_calls[0].name: expects a call of"
    " 'get_order_statsu', which is not one of the case's tools; did you mean"
    " `get_order_status`?"),
    ("orders.case.yaml:17: stages[1].expect.trajectory.$includes[0].name.$in[1]: expects a"
    " call of 'cancel_ordr', which is not one of the case's tools; did you mean"
    " `cancel_order`?"),
    ("orders.case.yaml:20: stages[1].expect.probe[0].call.name: probe calls 'get_status',"
    " which is not one of the case's tools; did you mean `get_order_status`?"),
]


def validate(pytester: pytest.Pytester, capsys: pytest.CaptureFixture[str],
             *paths: str) -> tuple[int, list[str]]:
    pytester.chdir()
    code = main(["validate", *paths])
    return code, capsys.readouterr().out.splitlines()


ENUMS = """\
name: orders
endpoint: {api: chats}
stages:
  - name: ask
    user: Where is order 42?
    tool_choice: requird
    stream: bothh
"""

ENUM_LINES = [
    ("orders.case.yaml:2: endpoint.api: Input should be 'chat', 'responses', 'messages'"),
    ("orders.case.yaml:6: stages[0].tool_choice: Input should be 'auto', 'none' or 'required'"
    " (did you mean 'required'?)"),
    "orders.case.yaml:7: stages[0].stream: Input should be 'both' (did you mean 'both'?)",
]


OPERANDS = """\
name: orders
stages:
  - name: ask
    user: Where is order 42?
    expect:
      text: 42
      reasoning: {$contains: [order, 42]}
      usage: {completion_tokens: {$len: "3"}}
"""

OPERAND_LINES = [
    ("orders.case.yaml:6: stages[0].expect.text: text is matched against text; the number 42"
    ' never equals it: quote it ("42")'),
    ("orders.case.yaml:7: stages[0].expect.reasoning.$contains[1]: reasoning is matched"
    ' against text; the number 42 is never found in it: quote it ("42")'),
    ("orders.case.yaml:8: stages[0].expect.usage.completion_tokens.$len: '$len' takes a number"
    " or a matcher on one"),
]


@pytest.mark.parametrize(("text", "starts"), [pytest.param(TYPOS, TYPO_LINES, id="keys"),
                                               pytest.param(NAMES, NAME_LINES, id="names"),
                                               pytest.param(ENUMS, ENUM_LINES, id="enums"),
                                               pytest.param(OPERANDS, OPERAND_LINES,
                                                            id="operands")])
def test_each_typo_is_an_error_at_its_line_in_validate_and_collection(
        pytester: pytest.Pytester, capsys: pytest.CaptureFixture[str], text: str,
        starts: list[str]) -> None:
    pytester.makefile(".case.yaml", orders=text)

    code, out = validate(pytester, capsys, "orders.case.yaml")

    assert code == 1
    problems = [line.strip() for line in out if line.startswith("  orders.case.yaml:")]
    assert len(problems) == len(starts), out
    for problem, start in zip(problems, starts):
        assert problem.startswith(start), (problem, start)
    result = pytester.runpytest("-p", "no:cacheprovider")
    result.assert_outcomes(errors=1)
    shown = [line.strip() for line in result.outlines]
    for start in starts:
        assert any(line.startswith(start) for line in shown), (start, result.outlines)


def test_the_same_names_spelled_right_validate(pytester: pytest.Pytester,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    """What the checks refuse, written as meant, loads: ``$not`` may name a tool no tool
    offers (it is never called), a comparison is an operator, api_finish_reason takes an
    API's own words, ``${...}`` names are known as the case runs."""
    pytester.makefile(".case.yaml", orders=NAMES.replace("stauts", "status")
                      .replace("statsu", "status").replace("cancel_ordr", "cancel_order")
                      .replace("get_status", "get_order_status") + textwrap.dedent("""\
                      ---
                      name: numbers
                      tools: [{name: lookup, result: 1}]
                      stages:
                        - name: ask
                          user: hi
                          capture: {tool: tool_calls.0.name}
                          expect:
                            finish_reason: {$in: [stop, length]}
                            api_finish_reason: end_turn
                            usage: {total_tokens: {$lt: 500}, prompt_tokens: 12}
                            status: 200
                            text: ""
                        - name: again
                          user: hi
                          expect:
                            tool_calls: [{name: "${tool}"}]
                      """))

    assert validate(pytester, capsys, "orders.case.yaml") == (0, ["1 file, 2 cases: ok"])


def test_an_mcp_servers_tool_names_are_checked_before_the_first_request(
        pytester: pytest.Pytester, chat_server: ChatServer) -> None:
    """An MCP server's tools are known once it is started: the run checks the names the
    case refers to then, and fails at the name's line without sending anything."""
    server = f"{{command: [{json.dumps(sys.executable)}, -m, mcp_server_time]}}"
    pytester.makefile(".case.yaml", clock=textwrap.dedent(f"""\
        name: clock
        endpoint: {{base_url: "{chat_server.base_url}", retries: 0}}
        mcp_servers:
          time: {server}
        tools: [{{mcp: time}}]
        stages:
          - name: ask
            user: What time is it?
            tool_choice: {{name: get_current_tme}}
        """))

    assert main(["validate", str(pytester.path / "clock.case.yaml")]) == 0  # not known yet
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "--toolbench-live")

    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines([
        ("*clock.case.yaml:9: clock: stages[[]0].tool_choice.name: tool_choice names"
        " 'get_current_tme', which is not one of the case's tools; did you mean"
        " `get_current_time`?")])
    assert chat_server.requests == []
