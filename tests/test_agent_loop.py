"""The agent loop, tools, capture, retries, repeats, models and stream: both (SPEC 3, 6, 8).

Every test runs the plugin through pytester against the loopback chat server.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
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
from transitions import Machine, MachineError

from pytest_toolbench.run.machine import (
    MACHINE,
    TRANSITIONS,
    StageMachine,
    StageState,
)

WEATHER_TOOLS = """
tools:
  - name: get_weather
    parameters: {type: object, properties: {city: {type: string}}, required: [city]}
    result: {temp_c: 21, sky: sunny}
  - name: convert
    parameters: {type: object, properties: {celsius: {type: number}}}
    python: loop_tools:to_fahrenheit
"""

LOOP_TOOLS_MODULE = '''
import time

def to_fahrenheit(celsius):
    return {"fahrenheit": celsius * 9 / 5 + 32}

def explode(**kwargs):
    raise RuntimeError("the weather service is down")

def sleepy(**kwargs):
    time.sleep(3)
    return "too late"

async def async_echo(text):
    return {"echo": text}
'''


@pytest.fixture
def tools_module(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(loop_tools=LOOP_TOOLS_MODULE)
    pytester.syspathinsert()


def assistant_turns(request: RecordedRequest) -> int:
    return sum(1 for m in request.json()["messages"] if m["role"] == "assistant")


def tool_messages(request: RecordedRequest) -> list[dict[str, Any]]:
    return [m for m in request.json()["messages"] if m["role"] == "tool"]


def write_case(pytester: pytest.Pytester, server: ChatServer, body: str,
               name: str = "loop") -> None:
    pytester.makefile(".case.yaml", **{name: f"endpoint: {{base_url: '{server.base_url}'}}\n"
                                       + body})


def run_live(pytester: pytest.Pytester, *args: str) -> pytest.RunResult:
    return pytester.runpytest("--toolbench-live", "-p", "no:cacheprovider", *args)


def test_three_turn_loop_with_parallel_calls(
    pytester: pytest.Pytester, chat_server: ChatServer, tools_module: None
) -> None:
    def answer(request: RecordedRequest) -> Any:
        turn = assistant_turns(request)
        if turn == 0:  # two calls at once
            return json_reply(completion(tool_calls=[("get_weather", {"city": "Paris"}),
                                                     ("get_weather", {"city": "Lyon"})]))
        if turn == 1:
            return json_reply(completion(tool_calls=[("convert", {"celsius": 21})]))
        return json_reply(completion(text="It is 69.8 F in Paris and Lyon."))

    chat_server.set_handler(answer)
    write_case(pytester, chat_server, f"""name: trip
model: m
{WEATHER_TOOLS}
stages:
  - name: plan
    user: Weather in Paris and Lyon, in Fahrenheit?
    run_tools: true
    expect:
      finish_reason: stop
      text: {{$contains: "69.8"}}
      tool_calls:
        - {{name: get_weather, arguments: {{city: Lyon}}}}
        - {{name: get_weather, arguments: {{city: Paris}}}}
        - {{name: convert, arguments: {{celsius: 21}}}}
""")
    result = run_live(pytester, "-v")
    result.assert_outcomes(passed=1)
    third = chat_server.requests[2]
    results = [m["content"] for m in tool_messages(third)]
    assert results == ['{"temp_c": 21, "sky": "sunny"}', '{"temp_c": 21, "sky": "sunny"}',
                       '{"fahrenheit": 69.8}']
    assert [m["tool_call_id"] for m in tool_messages(third)] == ["call_0", "call_1", "call_0"]
    result.stdout.fnmatch_lines(["toolbench (model: m)*", "*trip*passed*1*3*3*"])  # 1 stage, 3 turns, 3 calls


def test_failure_shows_every_tool_run_and_stop_reason(
    pytester: pytest.Pytester, chat_server: ChatServer, tools_module: None
) -> None:
    def answer(request: RecordedRequest) -> Any:
        if assistant_turns(request) == 0:
            return json_reply(completion(tool_calls=[("get_weather", {"city": "Paris"})]))
        return json_reply(completion(text="Sunny."))

    chat_server.set_handler(answer)
    write_case(pytester, chat_server, f"""name: wrong_text
{WEATHER_TOOLS}
stages:
  - name: ask
    user: Weather?
    run_tools: true
    expect:
      text: {{$contains: "rain"}}
""")
    result = run_live(pytester)
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines([
        "*loop.case.yaml:1?: wrong_text: stages?0?.expect.text: *",
        "*> request 1: 1 message, last user: Weather?",
        "*call get_weather({\"city\": \"Paris\"})",
        "*tool get_weather({\"city\": \"Paris\"}) -> {\"temp_c\": 21, \"sky\": \"sunny\"}*",
        "*stop reason: tool_calls (the tools run, then it sends again)",
        "*> request 2: 3 messages, last tool:*",
        "*text: Sunny.",
        "*stop reason: stop (the stage ends)",
        ("states: idle -> sending -> receiving -> running_tools -> sending -> receiving"
        " -> checking -> failed"),
    ])


@pytest.mark.parametrize(
    ("tool", "expected_error"),
    [
        ("python: loop_tools:explode", "RuntimeError: the weather service is down"),
        ("python: loop_tools:sleepy\n    timeout_s: 0.3", "get_weather timed out after 0.3 s"),
        ('error: "upstream timeout"', "upstream timeout"),
    ],
)
def test_tool_failures_become_error_messages(
    pytester: pytest.Pytester, chat_server: ChatServer, tools_module: None, tool: str,
    expected_error: str,
) -> None:
    def answer(request: RecordedRequest) -> Any:
        if assistant_turns(request) == 0:
            return json_reply(completion(tool_calls=[("get_weather", {"city": "Paris"})]))
        return json_reply(completion(text="Sorry, no weather."))

    chat_server.set_handler(answer)
    write_case(pytester, chat_server, f"""name: failing_tool
tools:
  - name: get_weather
    {tool}
stages:
  - name: ask
    user: Weather?
    run_tools: true
    expect:
      text: {{$contains: "no weather"}}
""")
    started = time.monotonic()
    result = run_live(pytester)
    result.assert_outcomes(passed=1)
    assert time.monotonic() - started < 10
    sent = tool_messages(chat_server.requests[1])
    assert sent[0]["content"] == f'{{"error": "{expected_error}"}}'


def test_unknown_tool_and_invalid_arguments_are_answered_with_errors(
    pytester: pytest.Pytester, chat_server: ChatServer
) -> None:
    def answer(request: RecordedRequest) -> Any:
        if assistant_turns(request) == 0:
            return json_reply(completion(tool_calls=[("teleport", {"to": "Mars"}),
                                                     ("get_weather", "{city: Paris")]))
        return json_reply(completion(text="done"))

    chat_server.set_handler(answer)
    write_case(pytester, chat_server, """name: unknown
tools:
  - name: get_weather
    result: sunny
stages:
  - name: ask
    user: Go
    run_tools: true
""")
    run_live(pytester).assert_outcomes(passed=1)
    contents = [m["content"] for m in tool_messages(chat_server.requests[1])]
    assert contents[0] == '{"error": "unknown tool: teleport"}'
    assert contents[1].startswith('{"error": "arguments are not valid JSON:')


def test_model_that_never_stops_calling_tools_fails_at_max_turns(
    pytester: pytest.Pytester, chat_server: ChatServer
) -> None:
    chat_server.set_default(json_reply(completion(tool_calls=[("get_weather", {"city": "X"})])))
    write_case(pytester, chat_server, """name: endless
tools:
  - name: get_weather
    result: sunny
stages:
  - name: ask
    user: Go
    run_tools: true
    max_turns: 3
""")
    result = run_live(pytester)
    result.assert_outcomes(failed=1)
    assert len(chat_server.requests) == 3
    result.stdout.fnmatch_lines([
        ("*endless: stages[[]0[]].max_turns: max_turns (3) reached and the model still calls"
        " tools: get_weather"),
        "*stop reason: tool_calls (max_turns reached)",
    ])


def forced_or_answer(request: RecordedRequest) -> Any:
    """A model that calls the tool whenever the request forces it, else answers with the
    result it was sent (or calls the tool when it has none yet)."""
    body = request.json()
    results = [message["content"] for message in body["messages"] if message["role"] == "tool"]
    if "tool_choice" in body or not results:
        return json_reply(completion(tool_calls=[("get_weather", {"city": "Paris"})]))
    return json_reply(completion(text=f"It is {json.loads(results[-1])['temp_c']} degrees"))


FORCED_ONCE = """name: forced_once
tools:
  - name: get_weather
    result: {temp_c: 21}
stages:
  - name: ask
    user: Weather in Paris?
    tool_choice: {name: get_weather}
    run_tools: once
    expect:
      tool_calls: [{name: get_weather, arguments: {city: Paris}}]
      text: {$contains: "21"}
"""


def test_run_tools_once_runs_the_forced_call_and_takes_the_answer(
    pytester: pytest.Pytester, chat_server: ChatServer
) -> None:
    """The forced-tool pattern in one stage: the call, its result sent back without the
    forcing tool choice (sent again, it would force another call), the answer checked."""
    chat_server.set_handler(forced_or_answer)
    write_case(pytester, chat_server, FORCED_ONCE)
    run_live(pytester).assert_outcomes(passed=1)
    first, second = (request.json() for request in chat_server.requests)
    assert first["tool_choice"] == {"type": "function", "function": {"name": "get_weather"}}
    assert "tool_choice" not in second
    assert second["messages"][-1] == {"role": "tool", "tool_call_id": "call_0",
                                      "content": '{"temp_c": 21}'}


def test_run_tools_true_with_the_forced_tool_loops_until_max_turns(
    pytester: pytest.Pytester, chat_server: ChatServer
) -> None:
    """What ``once`` is for: the full loop sends the forced choice every time."""
    chat_server.set_handler(forced_or_answer)
    write_case(pytester, chat_server, FORCED_ONCE.replace("run_tools: once",
                                                          "run_tools: true\n    max_turns: 3"))
    result = run_live(pytester)
    result.assert_outcomes(failed=1)
    assert len(chat_server.requests) == 3
    result.stdout.fnmatch_lines(["*max_turns (3) reached and the model still calls tools*"])


def test_run_tools_once_stops_at_the_reply_to_the_results_whatever_it_asks(
    pytester: pytest.Pytester, chat_server: ChatServer
) -> None:
    """A reply that calls again ends the stage all the same; its calls stay open, and the
    next stage answers them first."""
    chat_server.set_default(json_reply(completion(tool_calls=[("get_weather", {"city": "X"})])))
    write_case(pytester, chat_server, """name: once_only
tools:
  - name: get_weather
    result: sunny
stages:
  - name: ask
    user: Go
    run_tools: once
    expect:
      tool_calls: {$len: 2}
      finish_reason: tool_calls
  - name: next
    expect:
      tool_calls: [{name: get_weather}]
""")
    result = run_live(pytester, "-rA")
    result.assert_outcomes(passed=1)
    assert len(chat_server.requests) == 3
    assert [len(tool_messages(request)) for request in chat_server.requests] == [0, 1, 2]


def test_run_tools_once_without_a_call_sends_one_request(
    pytester: pytest.Pytester, chat_server: ChatServer
) -> None:
    chat_server.enqueue(json_reply(completion(text="no tools needed")))
    write_case(pytester, chat_server, """name: no_call
tools: [{name: get_weather, result: sunny}]
stages:
  - name: ask
    user: Hi
    run_tools: once
    expect: {text: {$contains: "no tools"}, tool_calls: []}
""")
    run_live(pytester).assert_outcomes(passed=1)
    assert len(chat_server.requests) == 1


def test_run_tools_takes_true_false_once_or_progressive(pytester: pytest.Pytester) -> None:
    pytester.makefile(".case.yaml", loop="""name: twice
stages:
  - name: ask
    user: Hi
    run_tools: twice
""")
    result = pytester.runpytest("--collect-only", "-p", "no:cacheprovider")
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines([("*loop.case.yaml:5: stages[[]0[]].run_tools: run_tools takes"
                                  " true (the agent loop), once (one round of tool runs),"
                                  " progressive (*) or false; got 'twice'")])


def test_pending_calls_are_answered_before_the_next_stage(
    pytester: pytest.Pytester, chat_server: ChatServer
) -> None:
    chat_server.enqueue(
        json_reply(completion(tool_calls=[("get_weather", {"city": "Paris"})])),
        json_reply(completion(text="21 degrees")),
    )
    write_case(pytester, chat_server, """name: two_stages
tools:
  - name: get_weather
    result: {temp_c: 21}
stages:
  - name: choose
    user: Weather in Paris?
    tool_choice: {name: get_weather}
    expect:
      tool_calls: [{name: get_weather}]
  - name: answer
    expect:
      text: {$contains: "21"}
""")
    run_live(pytester).assert_outcomes(passed=1)
    second = chat_server.requests[1].json()
    assert second["messages"][-1] == {"role": "tool", "tool_call_id": "call_0",
                                      "content": '{"temp_c": 21}'}
    assert second["messages"][-2]["tool_calls"][0]["function"]["name"] == "get_weather"
    assert chat_server.requests[0].json()["tool_choice"] == {
        "type": "function", "function": {"name": "get_weather"}}


def test_capture_and_interpolation(
    pytester: pytest.Pytester, chat_server: ChatServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TRIP_UNIT", "kelvin")
    chat_server.enqueue(
        json_reply(completion(tool_calls=[("get_weather", {"city": "Lyon"})])),
        json_reply(completion(text="ok")),
    )
    write_case(pytester, chat_server, """name: captured
tools:
  - name: get_weather
    result: {temp_c: 21}
stages:
  - name: pick
    user: Pick a city
    capture: {city: tool_calls.0.arguments.city}
  - name: use
    user: "Now ${city} in ${env.TRIP_UNIT}"
""")
    run_live(pytester).assert_outcomes(passed=1)
    last = chat_server.requests[1].json()["messages"][-1]
    assert last == {"role": "user", "content": "Now Lyon in kelvin"}


def test_a_doubled_dollar_sends_a_literal_placeholder(
    pytester: pytest.Pytester, chat_server: ChatServer
) -> None:
    """``$${`` is the escape of a literal ``${``: not checked at collection, sent as text."""
    chat_server.enqueue(json_reply(completion(text="ok")), json_reply(completion(text="ok")))
    write_case(pytester, chat_server, """name: escaped
stages:
  - name: ask
    user: "The total is $${price}; keep $$ and $ as they are"
    capture: {price: text}
  - name: again
    messages: [{role: user, content: "${price} then $${price}"}]
""")
    run_live(pytester).assert_outcomes(passed=1)
    sent = [request.json()["messages"][-1]["content"] for request in chat_server.requests]
    assert sent == ["The total is ${price}; keep $$ and $ as they are", "ok then ${price}"]


def test_expectations_use_captured_values(
    pytester: pytest.Pytester, chat_server: ChatServer
) -> None:
    chat_server.enqueue(
        json_reply(completion(tool_calls=[("get_weather", {"city": "Lyon"})])),
        json_reply(completion(text="Lyon is sunny")),
        json_reply(completion(tool_calls=[("get_weather", {"city": "Lyon"})])),
        json_reply(completion(text="Paris is sunny")),
    )
    write_case(pytester, chat_server, """name: follows
tools:
  - name: get_weather
    result: sunny
stages:
  - name: pick
    user: Pick a city
    capture: {city: tool_calls.0.arguments.city}
    expect: {tool_calls: [{name: get_weather}]}
  - name: check
    user: Now describe it
    expect:
      text: {$regex: "^${city} is"}
""")
    run_live(pytester).assert_outcomes(passed=1)
    result = run_live(pytester)
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        ["*follows: stages?1?.expect.text: 'Paris is sunny' does not match regex '^Lyon is'"])


def test_a_placeholder_spelled_with_yaml_escapes_is_still_one(
    pytester: pytest.Pytester, chat_server: ChatServer
) -> None:
    """``\\x24{city}`` in a double-quoted string is ``${city}`` once YAML has read it: it is
    checked at collection and filled in when the stage runs, like one written plainly."""
    chat_server.enqueue(
        json_reply(completion(tool_calls=[("get_weather", {"city": "Lyon"})])),
        json_reply(completion(text="Lyon is sunny")),
    )
    case = """name: escaped
tools:
  - name: get_weather
    result: sunny
stages:
  - name: pick
    user: Pick a city
    capture: {city: tool_calls.0.arguments.city}
  - name: check
    user: "Now \\x24{city}"
    expect:
      text: {$regex: "^\\x24{city} is"}
"""
    assert "${" not in case
    write_case(pytester, chat_server, case)
    run_live(pytester).assert_outcomes(passed=1)
    assert chat_server.requests[1].json()["messages"][-1]["content"] == "Now Lyon"

    write_case(pytester, chat_server, case.replace("x24{city}", "x24{town}"))
    result = run_live(pytester)
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(["  loop.case.yaml:11: stages[[]1[]].user: ${town} is not defined*",
                                 "  loop.case.yaml:13: stages[[]1[]].expect.text.$regex: ${town} is*"])


def test_missing_variable_is_a_collection_error_at_its_line(
    pytester: pytest.Pytester, chat_server: ChatServer
) -> None:
    chat_server.set_default(json_reply(completion(text="ok")))
    write_case(pytester, chat_server, """name: undefined
stages:
  - name: first
    user: hi
  - name: second
    user: "about ${town}"
""")
    result = run_live(pytester)
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines([("  loop.case.yaml:7: stages[[]1[]].user: ${town} is not"
                                  " defined (no earlier stage captures it: *)")])

    write_case(pytester, chat_server, """name: undefined
stages:
  - name: only
    user: hi
    expect: {text: "${reply}"}
    capture: {reply: text}
""")
    result = run_live(pytester)
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines([("  loop.case.yaml:6: stages[[]0[]].expect.text: ${reply} is"
                                  " captured by this stage, after its checks;*")])
    assert not chat_server.requests


def test_retry_reruns_from_the_conversation_before_the_stage(
    pytester: pytest.Pytester, chat_server: ChatServer
) -> None:
    chat_server.enqueue(json_reply(completion(text="cloudy")),
                        json_reply(completion(text="cloudy")),
                        json_reply(completion(text="sunny")))
    write_case(pytester, chat_server, """name: flaky
stages:
  - name: ask
    user: Weather?
    retry: {attempts: 3}
    expect:
      text: sunny
""")
    report = pytester.path / "report.json"
    run_live(pytester, f"--toolbench-report={report}").assert_outcomes(passed=1)
    bodies = [request.json()["messages"] for request in chat_server.requests]
    assert bodies[0] == bodies[1] == bodies[2] == [{"role": "user", "content": "Weather?"}]
    attempts = json.loads(report.read_text())["cases"][0]["runs"][0]["stages"][0]["attempts"]
    assert [a["passed"] for a in attempts] == [False, False, True]
    assert attempts[1]["trail"] == ["idle", "sending", "receiving", "checking", "failed"]


def test_repeat_passes_on_the_pass_rate(
    pytester: pytest.Pytester, chat_server: ChatServer
) -> None:
    chat_server.enqueue(*(json_reply(completion(text=t))
                          for t in ["yes", "no", "yes", "no", "no", "no", "no", "no"]))
    write_case(pytester, chat_server, """name: repeated
repeat: {runs: 4, min_pass_rate: 0.5}
stages:
  - name: ask
    user: Say yes
    expect: {text: "yes"}
""")
    result = run_live(pytester)
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["*repeated*passed 2/4*"])
    result = run_live(pytester, "--toolbench-repeat=4")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["passed 0/4 runs; needed 50%", "*=== run 1 ===*"])


def test_several_models_give_one_item_each_and_pass_rates(
    pytester: pytest.Pytester, chat_server: ChatServer
) -> None:
    chat_server.set_handler(lambda request: json_reply(completion(
        text="yes" if request.json()["model"] == "good" else "no")))
    write_case(pytester, chat_server, """name: ask
stages:
  - name: ask
    user: Say yes
    expect: {text: "yes"}
""")
    result = run_live(pytester, "--toolbench-model=good,bad", "-v")
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines([
        "*loop.case.yaml::ask[[]good[]] PASSED*",
        "*loop.case.yaml::ask[[]bad[]] FAILED*",
        "*pass rate per model*",
        "*bad*0/1*0%*",
        "*good*1/1*100%*",
    ])


STREAM_BOTH_CASE = """name: both
stages:
  - name: ask
    user: Weather?
    stream: both
    expect: {text: {$contains: sunny}}
"""


def _both(text_streamed: str, text_plain: str) -> Any:
    def answer(request: RecordedRequest) -> Any:
        if request.json().get("stream"):
            return sse_reply(chunks_for(text=text_streamed, split=3))
        return json_reply(completion(text=text_plain))
    return answer


def test_stream_both_passes_when_replies_agree(
    pytester: pytest.Pytester, chat_server: ChatServer
) -> None:
    chat_server.set_handler(_both("Paris is sunny", "Paris is sunny"))
    write_case(pytester, chat_server, STREAM_BOTH_CASE)
    run_live(pytester).assert_outcomes(passed=1)
    assert [r.json().get("stream", False) for r in chat_server.requests] == [True, False]


def test_stream_both_fails_with_a_diff_when_replies_differ(
    pytester: pytest.Pytester, chat_server: ChatServer
) -> None:
    chat_server.set_handler(_both("Paris is sunny", "Paris is sunny today"))
    write_case(pytester, chat_server, STREAM_BOTH_CASE)
    result = run_live(pytester)
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines([
        "*both: stages[[]0[]].stream: streamed and non-streamed replies differ in text",
        '*- expected: "Paris is sunny today"',
        '*+ actual:   "Paris is sunny"',
    ])


def test_stream_both_answers_calls_left_open_once(
    pytester: pytest.Pytester, chat_server: ChatServer, tmp_path: Path
) -> None:
    ledger = tmp_path / "ledger.txt"
    pytester.makepyfile(ledger_tools=f"""
def book(city):
    with open({str(ledger)!r}, "a") as handle:
        handle.write(city + "\\n")
    return "booked"
""")
    pytester.syspathinsert()

    def answer(request: RecordedRequest) -> Any:
        if assistant_turns(request) == 0:
            return json_reply(completion(tool_calls=[("book", {"city": "Rome"})]))
        if request.json().get("stream"):
            return sse_reply(chunks_for(text="done", split=2))
        return json_reply(completion(text="done"))

    chat_server.set_handler(answer)
    write_case(pytester, chat_server, """name: booking
tools:
  - name: book
    python: ledger_tools:book
stages:
  - name: choose
    user: Book Rome
  - name: confirm
    stream: both
    expect: {text: done}
""")
    run_live(pytester).assert_outcomes(passed=1)
    assert ledger.read_text() == "Rome\n"  # a side effect happens once, not per variant
    streamed, plain = chat_server.requests[1].json(), chat_server.requests[2].json()
    assert streamed["messages"] == plain["messages"]
    assert streamed["messages"][-1] == {"role": "tool", "tool_call_id": "call_0",
                                        "content": "booked"}


def test_runs_move_through_the_table_apart_and_the_machine_keeps_none_of_them() -> None:
    """Runs under way at once move apart; a trigger the table forbids raises and moves
    nothing. No run joins the machine: nothing is bound to it, nothing is left behind."""
    with StageMachine() as first, StageMachine() as second:
        for machine in (first, second):
            machine.begin_stage()
        first.fire("send")
        second.fire("send")
        second.fire("transport_error")
        with pytest.raises(MachineError):
            first.fire("all_hold")  # sending: the table has no all_hold from here
        assert first.state is StageState.SENDING
        for trigger in ("headers", "end_turn", "all_hold"):
            first.fire(trigger)
    assert first.trail == ["idle", "sending", "receiving", "checking", "passed"]
    assert second.trail == ["idle", "sending", "failed"]
    assert MACHINE.models == []
    assert not hasattr(first, "send") and not hasattr(first, "trigger")


def test_stages_move_through_the_machines_own_events() -> None:
    """A move is transitions' own dispatch: a callback the table gains runs and a condition
    that fails holds the run where it is, with no code of ours that knows of either."""
    sent: list[str] = []

    def extended(move: dict[str, Any]) -> dict[str, Any]:
        if move["trigger"] == "send":
            return dict(move, after=lambda: sent.append("after send"))
        if move["trigger"] == "headers":
            return dict(move, conditions=lambda: False)
        return move

    machine = Machine(model=None, states=StageState, auto_transitions=False,
                      transitions=[extended(move) for move in TRANSITIONS])
    with StageMachine(machine) as run:
        run.fire("send")
        run.fire("headers")  # its condition fails: the run stays where it is
        assert (run.state, run.trail) == (StageState.SENDING, ["idle", "sending"])
        run.begin_stage()
        with pytest.raises(MachineError, match="headers"):
            run.fire("headers")  # idle: the table has no headers from here
    assert sent == ["after send"]
