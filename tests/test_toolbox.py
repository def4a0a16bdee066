"""Stateful toolboxes: a class's methods as tools, a fresh instance per run (SPEC 12).

Every test runs the plugin through pytester against the loopback chat server, which plays
the model's calls; the toolbox is a real class in a module the test writes.
"""

from __future__ import annotations

import json
import sys
from typing import Any

import pytest
from support.chat_server import (
    ChatServer,
    RecordedRequest,
    chunks_for,
    completion,
    json_reply,
    sse_reply,
)

BANK_MODULE = '''
import asyncio
import time
from dataclasses import dataclass


@dataclass
class Entry:
    kind: str
    amount: int


class Account:
    """A bank account."""

    def __init__(self, balance: int = 0, owner: str = "ann") -> None:
        self.balance = balance
        self.owner = owner
        self.entries: list[Entry] = []
        self._audit = []

    def deposit(self, amount: int, note: str = "") -> int:
        """Put money in.

        Args:
            amount: How much, in euros.
            note: What the money is for.
        """
        self.balance += amount
        self.entries.append(Entry("deposit", amount))
        return self.balance

    async def withdraw(self, amount: int) -> dict:
        """Take money out.

        :param amount: how much, in euros
        """
        await asyncio.sleep(0)
        if amount > self.balance:
            raise ValueError("insufficient funds")
        self.balance -= amount
        self.entries.append(Entry("withdraw", amount))
        return {"balance": self.balance}

    def get_balance(self) -> int:
        """The balance now."""
        return self.balance

    def stall(self) -> str:
        time.sleep(3)
        return "late"


class Ledger(Account):
    def state(self) -> dict:
        return {"total": self.balance, "count": len(self.entries)}


class Unreadable(Account):
    async def state(self) -> dict:
        raise OSError("the ledger is locked")


class Locked(Account):
    def __init__(self) -> None:
        super().__init__()
        import threading
        self._lock = threading.Lock()


class Shadow:
    def save(self, json: str, copy: bool = False) -> dict:
        return {"json": json, "copy": copy}


class Starred:
    def spread(self, *values: int) -> int:
        return sum(values)


class Untyped:
    def guess(self, value) -> int:
        return 1


class Broken:
    def __init__(self) -> None:
        raise RuntimeError("no database")

    def ping(self) -> str:
        return "pong"
'''


@pytest.fixture
def bank(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(bank=BANK_MODULE)
    pytester.syspathinsert()


def assistant_turns(request: RecordedRequest) -> int:
    return sum(1 for m in request.json()["messages"] if m["role"] == "assistant")


def tool_messages(request: RecordedRequest) -> list[str]:
    return [m["content"] for m in request.json()["messages"] if m["role"] == "tool"]


def play(chat_server: ChatServer, *steps: list[tuple[str, Any]]) -> None:
    """Each request of a stage gets the next step's calls (after the last: a text answer);
    the count restarts at every new user message."""
    def answer(request: RecordedRequest) -> Any:
        messages = request.json()["messages"]
        last_user = max(i for i, m in enumerate(messages) if m["role"] == "user")
        turn = sum(1 for m in messages[last_user:] if m["role"] == "assistant")
        if turn < len(steps):
            return json_reply(completion(tool_calls=steps[turn]))
        return json_reply(completion(text="done"))
    chat_server.set_handler(answer)


def write_case(pytester: pytest.Pytester, server: ChatServer, body: str) -> None:
    pytester.makefile(".case.yaml", bank=f"endpoint: {{base_url: '{server.base_url}'}}\n"
                      + body)


def run_live(pytester: pytest.Pytester, *args: str) -> pytest.RunResult:
    return pytester.runpytest("--toolbench-live", "-p", "no:cacheprovider", *args)


def test_methods_become_tools_with_schemas_from_hints_and_docstrings(
        pytester: pytest.Pytester, chat_server: ChatServer, bank: None) -> None:
    play(chat_server)
    write_case(pytester, chat_server, """name: offered
tools:
  - toolbox: {python: "bank:Account", init: {balance: 100}}
    include: [deposit, withdraw, get_balance]
stages:
  - name: ask
    user: hi
""")
    run_live(pytester).assert_outcomes(passed=1)
    tools = {tool["function"]["name"]: tool["function"]
             for tool in chat_server.requests[0].json()["tools"]}
    assert list(tools) == ["deposit", "withdraw", "get_balance"]
    assert tools["deposit"]["description"] == "Put money in."
    assert tools["deposit"]["parameters"] == {
        "type": "object", "required": ["amount"],
        "properties": {"amount": {"type": "integer", "description": "How much, in euros."},
                       "note": {"type": "string", "default": "",
                                "description": "What the money is for."}}}
    assert tools["withdraw"]["parameters"]["properties"]["amount"]["description"] == (
        "how much, in euros")
    assert tools["get_balance"]["parameters"] == {"type": "object", "properties": {}}


def test_every_public_method_is_offered_unless_include_names_some(
        pytester: pytest.Pytester, chat_server: ChatServer, bank: None) -> None:
    play(chat_server)
    write_case(pytester, chat_server, """name: all_methods
tools:
  - toolbox: {python: "bank:Ledger"}
stages:
  - name: ask
    user: hi
""")
    run_live(pytester).assert_outcomes(passed=1)
    names = [tool["function"]["name"] for tool in chat_server.requests[0].json()["tools"]]
    assert names == ["deposit", "withdraw", "get_balance", "stall"]  # state() is no tool


def test_calls_run_on_one_instance_in_order_sync_and_async(
        pytester: pytest.Pytester, chat_server: ChatServer, bank: None) -> None:
    play(chat_server, [("deposit", {"amount": 50}), ("withdraw", {"amount": 30})],
         [("get_balance", {})])
    write_case(pytester, chat_server, """name: moves
tools:
  - toolbox: {python: "bank:Account", init: {balance: 100}}
stages:
  - name: ask
    user: move money
    run_tools: true
""")
    run_live(pytester).assert_outcomes(passed=1)
    assert tool_messages(chat_server.requests[1]) == ["150", '{"balance": 120}']
    assert tool_messages(chat_server.requests[2])[-1] == "120"


def test_each_repeat_gets_a_fresh_instance(
        pytester: pytest.Pytester, chat_server: ChatServer, bank: None) -> None:
    play(chat_server, [("deposit", {"amount": 5})])
    write_case(pytester, chat_server, """name: fresh
tools:
  - toolbox: {python: "bank:Account", init: {balance: 10}}
repeat: {runs: 3}
stages:
  - name: ask
    user: add five
    run_tools: true
""")
    run_live(pytester).assert_outcomes(passed=1)
    answers = [tool_messages(request) for request in chat_server.requests
               if tool_messages(request)]
    assert answers == [["15"], ["15"], ["15"]]


def test_parameters_may_have_the_names_of_pydantic_model_attributes(
        pytester: pytest.Pytester, chat_server: ChatServer, bank: None) -> None:
    play(chat_server, [("save", {"json": "{}", "copy": True})])
    write_case(pytester, chat_server, """name: shadow
tools:
  - toolbox: {python: "bank:Shadow"}
stages:
  - name: ask
    user: save
    run_tools: true
""")
    run_live(pytester).assert_outcomes(passed=1)
    tool = chat_server.requests[0].json()["tools"][0]["function"]
    assert set(tool["parameters"]["properties"]) == {"json", "copy"}
    assert tool_messages(chat_server.requests[1]) == ['{"json": "{}", "copy": true}']


def test_method_failures_bad_arguments_and_timeouts_are_answers(
        pytester: pytest.Pytester, chat_server: ChatServer, bank: None) -> None:
    play(chat_server, [("withdraw", {"amount": 500}), ("deposit", {"amount": "lots"}),
                       ("deposit", {"amount": 1, "currency": "EUR"}), ("stall", {})])
    write_case(pytester, chat_server, """name: failing
tools:
  - toolbox: {python: "bank:Account", init: {balance: 10}, }
    timeout_s: 0.3
stages:
  - name: ask
    user: go
    run_tools: true
""")
    run_live(pytester).assert_outcomes(passed=1)
    errors = [json.loads(content)["error"] for content in tool_messages(chat_server.requests[1])]
    assert errors[0] == "ValueError: insufficient funds"
    assert errors[1].startswith("arguments do not fit deposit: amount: ")
    assert errors[2].startswith("arguments do not fit deposit: currency: ")
    assert errors[3] == "stall timed out after 0.3 s"


def test_a_constructor_that_raises_fails_the_case_at_the_toolbox(
        pytester: pytest.Pytester, chat_server: ChatServer, bank: None) -> None:
    play(chat_server)
    write_case(pytester, chat_server, """name: broken
tools:
  - toolbox: {python: "bank:Broken"}
stages:
  - name: ask
    user: hi
""")
    result = run_live(pytester)
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines([
        ("*bank.case.yaml:4: broken: tools?0?.toolbox: toolbox 'Broken': Broken(**init)"
        " raised RuntimeError: no database")])
    assert chat_server.requests == []


@pytest.mark.parametrize(("entry", "line", "message"), [
    ('{toolbox: {python: "bank:Starred"}}', 3,
     ("tools[0]: Starred.spread takes *values, which no JSON Schema can describe: give the"
     " method's parameters in `schemas: {spread: {parameters: ...}}`")),
    ('{toolbox: {python: "bank:Untyped"}}', 3,
     "tools[0]: parameter 'value' of Untyped.guess has no type hint*"),
    ('{toolbox: {python: "bank:Account", init: {balanse: 1}}}', 3,
     "tools[0].toolbox.init: init does not fit Account(): *'balanse'*"),
    ('{toolbox: {python: "bank:Account"}, include: [deposit, rob]}', 3,
     ("tools[0].include[1]: Account has no public method 'rob' (its methods: deposit,"
     " withdraw, get_balance, stall)")),
    ('{toolbox: {python: "bank:entry"}}', 3, "tools[0].toolbox.python: 'bank' has no*"),
    ('{toolbox: {python: "bank:Entry", init: {kind: a, amount: 1}}, include: [kind]}', 3,
     "tools[0].include[0]: Entry has no public method 'kind'*"),
])
def test_a_toolbox_that_cannot_be_described_is_a_collection_error(
        pytester: pytest.Pytester, bank: None, entry: str, line: int, message: str) -> None:
    pytester.makefile(".case.yaml", bank=f"name: bad\ntools:\n  - {entry}\nstages:\n"
                      "  - name: s\n    user: hi\n")
    result = pytester.runpytest("-p", "no:cacheprovider")
    result.assert_outcomes(errors=1)
    pattern = message.replace("[", "?").replace("]", "?")  # fnmatch: [...] is a class
    result.stdout.fnmatch_lines([f"*bank.case.yaml:{line}: {pattern}"])


def test_schemas_given_per_method_describe_what_hints_cannot(
        pytester: pytest.Pytester, chat_server: ChatServer, bank: None) -> None:
    play(chat_server, [("spread", {"values": [1, 2]})])
    write_case(pytester, chat_server, """name: given
tools:
  - toolbox: {python: "bank:Starred"}
    schemas:
      spread:
        description: Adds numbers.
        parameters: {type: object, properties: {values: {type: array}}}
stages:
  - name: ask
    user: add
    run_tools: true
""")
    run_live(pytester).assert_outcomes(passed=1)
    tool = chat_server.requests[0].json()["tools"][0]["function"]
    assert tool["description"] == "Adds numbers."
    assert tool["parameters"] == {"type": "object", "properties": {"values": {"type": "array"}}}
    # Arguments go as they came: spread(values=[1, 2]) is no call of spread(*values).
    assert json.loads(tool_messages(chat_server.requests[1])[0])["error"].startswith(
        "TypeError")


def test_a_method_name_that_clashes_with_a_case_tool_is_a_collection_error(
        pytester: pytest.Pytester, bank: None) -> None:
    pytester.makefile(".case.yaml", bank="""name: clash
tools:
  - {name: deposit, result: ok}
  - toolbox: {python: "bank:Account"}
stages:
  - name: s
    user: hi
""")
    result = pytester.runpytest("-p", "no:cacheprovider")
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines([
        ("*bank.case.yaml:4: tools?1?: tool name 'deposit' clash: toolbox 'Account' and the"
        " case's tool both offer it; leave one out (toolboxes: `include`)")])


# --- expect.state -----------------------------------------------------------------------


def test_state_after_a_stage_matches_public_attributes_as_json(
        pytester: pytest.Pytester, chat_server: ChatServer, bank: None) -> None:
    play(chat_server, [("deposit", {"amount": 50})], [("withdraw", {"amount": 30})])
    write_case(pytester, chat_server, """name: state_ok
tools:
  - toolbox: {python: "bank:Account", init: {balance: 100}}
    name: bank
stages:
  - name: move
    user: move money
    run_tools: true
    expect:
      state:
        bank:
          balance: 120
          entries: [{kind: deposit, amount: 50}, {kind: withdraw, amount: 30}]
          _audit: {$absent: true}
""")
    run_live(pytester).assert_outcomes(passed=1)


def test_a_state_mismatch_shows_the_path_and_a_diff(
        pytester: pytest.Pytester, chat_server: ChatServer, bank: None) -> None:
    play(chat_server, [("deposit", {"amount": 50})])
    write_case(pytester, chat_server, """name: state_wrong
tools:
  - toolbox: {python: "bank:Account", init: {balance: 100}}
stages:
  - name: move
    user: move money
    run_tools: true
    expect:
      state:
        Account:
          entries: [{kind: withdraw, amount: 50}]
""")
    result = run_live(pytester)
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines([
        ("*bank.case.yaml:12: state_wrong: stages?0?.expect.state.Account.entries?0?.kind:"
        " expected 'withdraw', got 'deposit'"),
    ])


def test_state_reads_the_state_method_when_there_is_one(
        pytester: pytest.Pytester, chat_server: ChatServer, bank: None) -> None:
    play(chat_server, [("deposit", {"amount": 5})])
    write_case(pytester, chat_server, """name: own_state
tools:
  - toolbox: {python: "bank:Ledger", init: {balance: 1}}
stages:
  - name: move
    user: add
    run_tools: true
    expect:
      state: {Ledger: {$exact: {total: 6, count: 1}}}
""")
    run_live(pytester).assert_outcomes(passed=1)


def test_a_diff_of_a_long_state_is_shown_line_by_line(
        pytester: pytest.Pytester, chat_server: ChatServer, bank: None) -> None:
    play(chat_server, [("deposit", {"amount": 50, "note": "rent for the flat in town"})])
    write_case(pytester, chat_server, """name: state_diff
tools:
  - toolbox: {python: "bank:Account", init: {balance: 100, owner: "a rather long owner name"}}
stages:
  - name: move
    user: add
    run_tools: true
    expect:
      state:
        Account:
          entries:
            - {kind: deposit, amount: 50}
            - {kind: deposit, amount: 20}
            - {kind: withdraw, amount: 5}
""")
    result = run_live(pytester)
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines([("*:12: state_diff: *expect.state.Account.entries: expected 3"
                                 " elements, got 1*"), "*--- expected", "*+++ actual", "*@@*",
                                 '*-    "amount": 20,'])


def test_state_without_a_toolbox_is_a_collection_error(pytester: pytest.Pytester) -> None:
    pytester.makefile(".case.yaml", bank="""name: stateless
stages:
  - name: s
    user: hi
    expect:
      state: {x: 1}
""")
    result = pytester.runpytest("-p", "no:cacheprovider")
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines([("*bank.case.yaml:6: stages?0?.expect.state: expect.state"
                                 " reads the state of the case's toolboxes, and it has none*")])


def test_a_retried_stage_starts_from_the_state_before_it(
        pytester: pytest.Pytester, chat_server: ChatServer, bank: None) -> None:
    play(chat_server, [("deposit", {"amount": 10})])
    write_case(pytester, chat_server, """name: retried
tools:
  - toolbox: {python: "bank:Account", init: {balance: 0}}
stages:
  - name: move
    user: add ten
    run_tools: true
    retry: {attempts: 2}
    expect:
      text: never said
""")
    run_live(pytester).assert_outcomes(failed=1)
    answers = [tool_messages(request) for request in chat_server.requests
               if tool_messages(request)]
    assert answers == [["10"], ["10"]]  # not 20: the retry ran on a balance of 0


def test_a_state_that_cannot_be_read_fails_state_saying_why(
        pytester: pytest.Pytester, chat_server: ChatServer, bank: None) -> None:
    play(chat_server)
    write_case(pytester, chat_server, """name: unreadable
tools:
  - toolbox: {python: "bank:Unreadable"}
stages:
  - name: move
    user: hi
    expect:
      state: {Unreadable: {}}
""")
    result = run_live(pytester)
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines([("*:9: unreadable: stages?0?.expect.state: no state to check:"
                                 " OSError: the ledger is locked")])


def test_stream_both_runs_each_variant_on_the_state_before_and_goes_on_from_the_first(
        pytester: pytest.Pytester, chat_server: ChatServer, bank: None) -> None:
    def answer(request: RecordedRequest) -> Any:
        said: dict[str, Any] = ({"text": "done"} if tool_messages(request)
                                else {"tool_calls": [("deposit", {"amount": 5})]})
        if request.json().get("stream"):
            return sse_reply(chunks_for(**said))
        return json_reply(completion(**said))
    chat_server.set_handler(answer)
    write_case(pytester, chat_server, """name: both
tools:
  - toolbox: {python: "bank:Account"}
stages:
  - name: move
    user: add five
    stream: both
    run_tools: true
    expect:
      state: {Account: {balance: 5}}
expect:
  state: {Account: {balance: 5}}
""")
    run_live(pytester).assert_outcomes(passed=1)


def test_a_toolbox_that_cannot_be_copied_fails_a_retried_stage_saying_so(
        pytester: pytest.Pytester, chat_server: ChatServer, bank: None) -> None:
    play(chat_server)
    write_case(pytester, chat_server, """name: locked
tools:
  - toolbox: {python: "bank:Locked"}
stages:
  - name: move
    user: hi
    retry: {attempts: 2}
""")
    result = run_live(pytester)
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines([("*:4: locked: tools?0?: toolbox 'Locked' cannot be copied, and"
                                 " a retried stage (or stream: both) starts again from the"
                                 " state before it: TypeError: *")])


def test_the_case_end_expect_checks_state_after_every_stage(
        pytester: pytest.Pytester, chat_server: ChatServer, bank: None) -> None:
    play(chat_server, [("deposit", {"amount": 10})])
    write_case(pytester, chat_server, """name: at_the_end
tools:
  - toolbox: {python: "bank:Account"}
stages:
  - name: one
    user: add ten
    run_tools: true
  - name: two
    user: add ten more
    run_tools: true
expect:
  state: {Account: {balance: 25}}
""")
    result = run_live(pytester)
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines([
        "*bank.case.yaml:13: at_the_end: expect.state.Account.balance: expected 25, got 20",
        "*--- stage 'end of case': failed ---"])


# --- expect.trajectory --------------------------------------------------------------------

MOVES = [[("get_balance", {})], [("withdraw", {"amount": 30}), ("deposit", {"amount": 5})]]


def trajectory_case(pytester: pytest.Pytester, chat_server: ChatServer, spec: str) -> None:
    play(chat_server, *MOVES)
    write_case(pytester, chat_server, f"""name: path
tools:
  - toolbox: {{python: "bank:Account", init: {{balance: 100}}}}
stages:
  - name: move
    user: move money
    run_tools: true
    expect:
      trajectory: {spec}
""")


@pytest.mark.parametrize("spec", [
    "[{name: get_balance}, {name: withdraw, arguments: {amount: 30}}, {name: deposit}]",
    "{$unordered: [{name: deposit}, {name: get_balance}, {name: withdraw}]}",
    "{$contains: [{name: get_balance}, {name: deposit}]}",
    "{$includes: [{name: deposit}, {name: get_balance}]}",
    "{$not: [{name: transfer}, {name: withdraw, arguments: {amount: {$gt: 50}}}]}",
    "{$contains: [{name: get_balance}, {name: withdraw}], $not: {name: delete}, max_calls: 3}",
])
def test_a_trajectory_that_happened_passes(
        pytester: pytest.Pytester, chat_server: ChatServer, bank: None, spec: str) -> None:
    trajectory_case(pytester, chat_server, spec)
    run_live(pytester).assert_outcomes(passed=1)


CALLS_MADE = ('the calls made: #0 get_balance({}), #1 withdraw({"amount": 30}),'
              ' #2 deposit({"amount": 5})')


@pytest.mark.parametrize(("spec", "failure"), [
    ("[{name: withdraw}, {name: get_balance}, {name: deposit}]",
     "trajectory?0?.name: expected 'withdraw', got 'get_balance'"),
    ("[{name: get_balance}, {name: withdraw}]", "trajectory: expected 2 calls, got 3: *"),
    ("{$contains: [{name: deposit}, {name: get_balance}]}",
     ("trajectory.$contains?1?: no call after call 2 matches expected call 1"
     " {'name': 'get_balance'}")),
    ("{$not: [{name: withdraw}]}",
     "trajectory.$not?0?: call 1 withdraw({\"amount\": 30}) must never happen"),
    ("{max_calls: 2}", "trajectory.max_calls: 3 calls, more than max_calls 2"),
])
def test_a_trajectory_failure_lists_the_calls_made(
        pytester: pytest.Pytester, chat_server: ChatServer, bank: None, spec: str,
        failure: str) -> None:
    trajectory_case(pytester, chat_server, spec)
    result = run_live(pytester)
    result.assert_outcomes(failed=1)
    pattern = CALLS_MADE.replace("[", "?").replace("]", "?")
    result.stdout.fnmatch_lines([(f"*bank.case.yaml:10: path: stages?0?.expect.{failure}"
                                 f"; {pattern}")])


@pytest.mark.parametrize(("spec", "message"), [
    ("{$sometimes: []}", "unknown trajectory key '$sometimes'; allowed: *"),
    ("{max_calls: -1}", "max_calls takes a count (0 or more), got -1"),
    ("[{name: a, args: {}}]", "unknown key 'args' in an expected call*"),
    ("calls", "trajectory takes a list of calls in order, or a mapping of *"),
])
def test_a_bad_trajectory_is_a_collection_error(
        pytester: pytest.Pytester, spec: str, message: str) -> None:
    pytester.makefile(".case.yaml", bank=f"""name: bad
stages:
  - name: s
    user: hi
    expect:
      trajectory: {spec}
""")
    result = pytester.runpytest("-p", "no:cacheprovider")
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines([f"*bank.case.yaml:6: stages?0?.expect.trajectory*: {message}"])


def test_the_case_end_trajectory_spans_every_stage(
        pytester: pytest.Pytester, chat_server: ChatServer, bank: None) -> None:
    play(chat_server, [("get_balance", {})], [("deposit", {"amount": 1})])
    write_case(pytester, chat_server, """name: whole
tools:
  - toolbox: {python: "bank:Account"}
stages:
  - name: one
    user: look
    run_tools: true
  - name: two
    user: add
    run_tools: true
expect:
  trajectory:
    $contains: [{name: deposit}, {name: deposit}, {name: get_balance}]
    $not: {name: withdraw}
""")
    result = run_live(pytester)
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines([
        ("*bank.case.yaml:14: whole: expect.trajectory.$contains?2?: no call after call 3"
        " matches expected call 2 {'name': 'get_balance'}; the calls made: #0 get_balance({}),"
        ' #1 deposit({"amount": 1}), #2 get_balance({}), #3 deposit({"amount": 1})')])


# --- expect.probe -------------------------------------------------------------------------


def test_probes_read_the_world_after_the_stage_and_are_no_part_of_the_trajectory(
        pytester: pytest.Pytester, chat_server: ChatServer, bank: None) -> None:
    play(chat_server, [("withdraw", {"amount": 30})])
    pytester.makepyfile(notes="def list_notes():\n    return ['milk', 'eggs']\n")
    write_case(pytester, chat_server, """name: probed
tools:
  - {name: list_notes, python: "notes:list_notes"}
  - toolbox: {python: "bank:Account", init: {balance: 100}}
stages:
  - name: move
    user: take thirty
    run_tools: true
    expect:
      trajectory: [{name: withdraw}]
      probe:
        - {call: {name: get_balance}, result: 70}
        - {call: {name: list_notes}, result: {$contains: milk}}
        - {call: {name: withdraw, arguments: {amount: 1000}}, error: {$contains: insufficient}}
""")
    run_live(pytester).assert_outcomes(passed=1)
    assert len(chat_server.requests) == 2  # probes send nothing to the model


@pytest.mark.parametrize(("probe", "line", "said"), [
    ("{call: {name: get_balance}, result: 99}", 11,
     "stages?0?.expect.probe?0?.result: probe get_balance({}): expected 99, got 70"),
    ("{call: {name: withdraw, arguments: {amount: 500}}, result: {$any: true}}", 11,
     ('stages?0?.expect.probe?0?.call: probe withdraw({"amount": 500}) failed:'
     " ValueError: insufficient funds")),
    ("{call: {name: deposit, arguments: {amount: 1}}, error: {$any: true}}", 11,
     ('stages?0?.expect.probe?0?.error: probe deposit({"amount": 1}) was expected to fail,'
     " and answered: 71")),
])
def test_a_probe_that_gets_another_answer_fails_at_its_line(
        pytester: pytest.Pytester, chat_server: ChatServer, bank: None, probe: str,
        line: int, said: str) -> None:
    play(chat_server, [("withdraw", {"amount": 30})])
    write_case(pytester, chat_server, f"""name: probed
tools:
  - toolbox: {{python: "bank:Account", init: {{balance: 100}}}}
stages:
  - name: move
    user: take thirty
    run_tools: true
    expect:
      probe:
        - {probe}
""")
    result = run_live(pytester)
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines([f"*bank.case.yaml:{line}: probed: {said}"])


FINDER = "def find(name: str) -> str:\n    return 'found ' + name\n"


@pytest.mark.parametrize(("expected", "outcome"), [
    ("found ${who}", "passed"),
    ("lost ${who}", "failed"),
])
def test_captured_values_fill_a_probes_call_and_answer(
        pytester: pytest.Pytester, chat_server: ChatServer, expected: str,
        outcome: str) -> None:
    play(chat_server)  # every reply says "done"
    pytester.makepyfile(notes=FINDER)
    pytester.syspathinsert()
    write_case(pytester, chat_server, f"""name: filled
tools:
  - {{name: find, python: "notes:find"}}
stages:
  - name: ask
    user: who?
    capture: {{who: text}}
  - name: check
    user: again
    expect:
      probe:
        - {{call: {{name: find, arguments: {{name: "${{who}}"}}}}, result: "{expected}"}}
expect:
  probe: [{{call: {{name: find, arguments: {{name: "${{who}}"}}}}, result: "found ${{who}}"}}]
""")
    result = run_live(pytester, "--toolbench-report=r.json")
    result.assert_outcomes(**{outcome: 1})
    if outcome == "failed":
        result.stdout.fnmatch_lines([
            ("*bank.case.yaml:13: filled: stages?1?.expect.probe?0?.result: probe"
            " find({\"name\": \"done\"}): expected 'lost done', got 'found done'")])
        return
    stages = json.loads((pytester.path / "r.json").read_text())["cases"][0]["runs"][0]["stages"]
    assert [run["content"] for run in stages[1]["attempts"][0]["probes"]] == ["found done"]
    assert [run["arguments"] for run in stages[2]["attempts"][0]["probes"]] == [
        '{"name": "done"}']


def test_a_placeholder_no_stage_captures_in_a_probe_is_a_collection_error(
        pytester: pytest.Pytester, bank: None) -> None:
    pytester.makefile(".case.yaml", bank="""name: bad
tools:
  - toolbox: {python: "bank:Account"}
stages:
  - name: s
    user: hi
    capture: {said: text}
    expect:
      probe: [{call: {name: deposit, arguments: {amount: "${said}"}}}]
expect:
  probe: [{call: {name: deposit, arguments: {amount: "${sayd}"}}}]
""")
    result = pytester.runpytest("-p", "no:cacheprovider")
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines([
        ("*bank.case.yaml:9: stages?0?.expect.probe?0?.call.arguments.amount: ${said} is"
        " captured by this stage, after its checks; only later stages can use it"),
        ("*bank.case.yaml:11: expect.probe?0?.call.arguments.amount: ${sayd} is not defined;"
        " did you mean `said`?")])


def test_a_placeholder_in_expect_stream_is_checked_like_the_others(
        pytester: pytest.Pytester) -> None:
    pytester.makefile(".case.yaml", bank="""name: streamed
stages:
  - name: ask
    user: hi
    stream: true
    expect:
      stream:
        chunks: {$anyof: [{$gte: 1}, "${nope}"]}
""")
    result = pytester.runpytest("-p", "no:cacheprovider")
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines([
        "*bank.case.yaml:8: stages?0?.expect.stream.chunks.$anyof?1?: ${nope} is not defined*"])


def test_a_probe_of_a_tool_the_case_lacks_is_a_collection_error(
        pytester: pytest.Pytester, bank: None) -> None:
    pytester.makefile(".case.yaml", bank="""name: bad
tools:
  - toolbox: {python: "bank:Account"}
stages:
  - name: s
    user: hi
    expect:
      probe: [{call: {name: balance}, result: 0}]
""")
    result = pytester.runpytest("-p", "no:cacheprovider")
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines([("*bank.case.yaml:8: stages?0?.expect.probe?0?.call.name: probe"
                                 " calls 'balance', which is not one of the case's tools*")])


def test_case_end_probes_run_after_the_last_stage(
        pytester: pytest.Pytester, chat_server: ChatServer, bank: None) -> None:
    play(chat_server, [("deposit", {"amount": 5})])
    write_case(pytester, chat_server, """name: end_probe
tools:
  - toolbox: {python: "bank:Account"}
stages:
  - name: one
    user: add
    run_tools: true
  - name: two
    user: add
    run_tools: true
expect:
  probe: [{call: {name: get_balance}, result: 10}]
""")
    run_live(pytester).assert_outcomes(passed=1)


def test_a_probe_of_an_mcp_tool_is_recorded_and_replayed_without_the_server(
        pytester: pytest.Pytester, chat_server: ChatServer) -> None:
    python = json.dumps(sys.executable)
    chat_server.set_handler(lambda request: json_reply(completion(text="noon")))
    case = pytester.makefile(".case.yaml", clock=f"""endpoint: {{base_url: '{chat_server.base_url}'}}
name: clock
model: m
mcp_servers:
  time: {{command: [{python}, -m, mcp_server_time, --local-timezone, UTC]}}
tools:
  - mcp: time
stages:
  - name: ask
    user: What time is it?
    expect:
      probe:
        - call: {{name: get_current_time, arguments: {{timezone: Europe/Paris}}}}
          result: {{timezone: Europe/Paris}}
""")
    record = pytester.runpytest_subprocess("-p", "no:cacheprovider", "--toolbench-record")
    record.assert_outcomes(passed=1)
    cassette = (case.parent / "__cassettes__" / "clock" / "clock[m].yaml").read_text()
    assert "get_current_time" in cassette and "method: tools/call" in cassette
    chat_server.close()
    case.write_text(case.read_text().replace(sys.executable, "/nonexistent/python"))
    pytester.runpytest_subprocess("-p", "no:cacheprovider").assert_outcomes(passed=1)
    # A probe that asks otherwise than the recorded one fails replay with a diff.
    case.write_text(case.read_text().replace("timezone: Europe/Paris}", "timezone: Asia/Tokyo}"))
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines([("*tools/call of MCP server 'time' differs from the one"
                                 " recorded in*")])


# --- reports ------------------------------------------------------------------------------


def test_reports_show_each_stages_trajectory_probes_and_state(
        pytester: pytest.Pytester, chat_server: ChatServer, bank: None) -> None:
    play(chat_server, [("deposit", {"amount": 5}), ("withdraw", {"amount": 2})])
    write_case(pytester, chat_server, """name: reported
tools:
  - toolbox: {python: "bank:Account", init: {balance: 10, owner: "<b>eve</b>"}}
stages:
  - name: move
    user: move
    run_tools: true
    expect:
      probe: [{call: {name: get_balance}, result: 13}]
expect:
  trajectory: {max_calls: 1}
""")
    result = run_live(pytester, "--toolbench-report=report.json",
                      "--toolbench-html=report.html")
    result.assert_outcomes(failed=1)
    report = json.loads((pytester.path / "report.json").read_text())
    move, end = report["cases"][0]["runs"][0]["stages"]
    attempt = move["attempts"][0]
    assert [call["name"] for call in attempt["trajectory"]] == ["deposit", "withdraw"]
    assert attempt["state"] == {"Account": {
        "balance": 13, "owner": "<b>eve</b>",
        "entries": [{"kind": "deposit", "amount": 5}, {"kind": "withdraw", "amount": 2}]}}
    assert [(run["call_id"], run["content"]) for run in attempt["probes"]] == [
        ("probe_0", "13")]
    assert end["name"] == "end of case" and not end["passed"]
    assert end["attempts"][0]["failures"][0]["key_path"] == ["expect", "trajectory",
                                                               "max_calls"]
    # The case-level checks are reported as one more stage, but counted as none.
    assert report["cases"][0]["stages"] == 1
    result.stdout.re_match_lines([r"\s*reported\s+failed\s+1\s+2\s+2\s"])
    page = (pytester.path / "report.html").read_text()
    assert ('trajectory: #0 <b>deposit</b>({&quot;amount&quot;: 5}) → #1 <b>withdraw</b>'
            in page)
    assert "probe get_balance({})" in page
    assert "<summary>state: Account</summary>" in page
    assert "&lt;b&gt;eve&lt;/b&gt;" in page and "<b>eve</b>" not in page
