"""Tools and expectations that misbehave, and Ctrl-C: the session never hangs.

A ``python:`` tool may exit, interrupt, sleep past its timeout or return NaN; a ``$schema``
may name a remote ``$ref``; a ``$regex`` may backtrack for ever; the user may press Ctrl-C
in the middle of a live run. Each is a failure with its reason, or a prompt and quiet end.
Runs that hung before these were handled go through a subprocess with a timeout, so a
regression fails the test instead of hanging it.
"""

from __future__ import annotations

import json
import os
import resource
import signal
import subprocess
import textwrap
import time
from collections.abc import Iterator
from typing import Any

import pytest
from support.chat_server import (
    ChatServer,
    RecordedRequest,
    SSEPause,
    chunks_for,
    completion,
    json_reply,
    sse_reply,
    start_chat_server,
)
from support.signals import interruptible_pytest

HOSTILE_TOOLS = '''
import asyncio
import pathlib
import sys
import time

def exits(**kwargs):
    sys.exit(3)

def interrupts(**kwargs):
    raise KeyboardInterrupt

async def exits_async(**kwargs):
    raise SystemExit("bye")

async def interrupts_async(**kwargs):
    raise KeyboardInterrupt

def sleeps(**kwargs):
    pathlib.Path("tool-started").touch()
    time.sleep(600)
    return "too late"

async def sleeps_async(**kwargs):
    pathlib.Path("tool-started").touch()
    await asyncio.sleep(600)
    return "too late"

def not_a_number(**kwargs):
    return {"temp_c": float("nan")}

def infinite(**kwargs):
    return [1.0, float("inf")]
'''


STALL_BOUND_S = 120
"""How long a run may take to reach a stall or to end past one: a bound for a hang, far
beyond what a loaded machine takes, and far short of the stalls' 600 s."""


@pytest.fixture
def hostile_tools(pytester: pytest.Pytester) -> None:
    """The tools module, importable in-process and by ``python -m pytest`` in pytester.path."""
    pytester.makepyfile(hostile_tools=HOSTILE_TOOLS)
    pytester.syspathinsert()


def tool_messages(request: RecordedRequest) -> list[dict[str, Any]]:
    return [m for m in request.json()["messages"] if m["role"] == "tool"]


def call_then_answer(request: RecordedRequest) -> Any:
    """First a call of the tool ``t``; once it has a result, the text ``done``."""
    if tool_messages(request):
        return json_reply(completion(text="done"))
    return json_reply(completion(tool_calls=[("t", {"city": "Paris"})]))


def tool_case(name: str, implementation: str, server: ChatServer, timeout_s: float = 30,
              stream: bool = False) -> str:
    return textwrap.dedent(f"""\
        name: {name}
        endpoint: {{base_url: "{server.base_url}", retries: 0}}
        tools:
          - name: t
            {implementation}
            timeout_s: {timeout_s}
        stages:
          - name: ask
            user: Weather?
            run_tools: true
            stream: {str(stream).lower()}
            expect: {{text: done}}
        """)


def sent_tool_results(server: ChatServer) -> list[str]:
    return [m["content"] for r in server.requests for m in tool_messages(r)]


def strict_json(text: str) -> Any:
    """``json.loads`` that refuses NaN and Infinity, as JSON itself does."""
    def refuse(constant: str) -> Any:
        raise ValueError(f"{constant} is not JSON")

    return json.loads(text, parse_constant=refuse)


# -- tools that exit, interrupt, or outlive their timeout ----------------------------------


def test_tools_raising_base_exceptions_are_answered_with_errors(
        pytester: pytest.Pytester, chat_server: ChatServer, hostile_tools: None) -> None:
    chat_server.set_handler(call_then_answer)
    cases = [("sync_exit", "exits"), ("sync_interrupt", "interrupts"),
             ("async_exit", "exits_async"), ("async_interrupt", "interrupts_async")]
    pytester.makefile(".case.yaml", hostile="---\n".join(
        tool_case(name, f"python: hostile_tools:{function}", chat_server)
        for name, function in cases))

    result = pytester.runpytest_subprocess("--toolbench-live", "-p", "no:cacheprovider",
                                           timeout=30)

    result.assert_outcomes(passed=4)
    assert sorted(sent_tool_results(chat_server)) == sorted([
        '{"error": "SystemExit: 3"}', '{"error": "KeyboardInterrupt"}',
        '{"error": "SystemExit: bye"}', '{"error": "KeyboardInterrupt"}'])


def test_sync_tool_past_its_timeout_does_not_keep_pytest_alive(
        pytester: pytest.Pytester, chat_server: ChatServer, hostile_tools: None) -> None:
    chat_server.set_handler(call_then_answer)
    pytester.makefile(".case.yaml", slow=tool_case(
        "sleeper", "python: hostile_tools:sleeps", chat_server, timeout_s=0.5))

    # The tool sleeps 600 s: a process that waited for it would pass the timeout (a hang).
    result = pytester.runpytest_subprocess("--toolbench-live", "-p", "no:cacheprovider",
                                           timeout=STALL_BOUND_S)

    result.assert_outcomes(passed=1)
    assert sent_tool_results(chat_server) == ['{"error": "t timed out after 0.5 s"}']


# -- results that are not JSON -------------------------------------------------------------


def test_nan_and_infinity_results_are_errors_and_requests_stay_json(
        pytester: pytest.Pytester, chat_server: ChatServer, hostile_tools: None) -> None:
    chat_server.set_handler(call_then_answer)
    pytester.makefile(".case.yaml", nan="---\n".join([
        tool_case("python_nan", "python: hostile_tools:not_a_number", chat_server),
        tool_case("python_infinity", "python: hostile_tools:infinite", chat_server),
    ]))

    result = pytester.runpytest("--toolbench-live", "-p", "no:cacheprovider")

    result.assert_outcomes(passed=2)
    for request in chat_server.requests:
        strict_json(request.body.decode())
    results = sent_tool_results(chat_server)
    assert len(results) == 2
    for content in results:
        error = strict_json(content)["error"]
        assert error.startswith("the tool's result is not JSON: "), error


def test_nan_and_infinity_in_a_case_file_are_collection_errors(
        pytester: pytest.Pytester, chat_server: ChatServer) -> None:
    """YAML reads .nan and .inf; JSON has no such numbers, so nothing may send them."""
    chat_server.set_handler(call_then_answer)
    pytester.makefile(".case.yaml", nan=tool_case(
        "canned", "result: {temp_c: .nan}", chat_server).replace(
        "user: Weather?", "user: Weather?\n    params: {temperature: .inf}"))

    result = pytester.runpytest("--toolbench-live", "-p", "no:cacheprovider")

    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(["*nan.case.yaml:5: tools[[]0[]].result.temp_c: *finite*",
                                 "*nan.case.yaml:1?: stages[[]0[]].params.temperature: *finite*"])
    assert chat_server.requests == []


# -- expectations that must not reach the network ------------------------------------------


@pytest.fixture
def schema_host() -> Iterator[ChatServer]:
    """A loopback server that would serve remote schemas: it must never be asked."""
    with start_chat_server() as server:
        yield server


def schema_case(server: ChatServer, schema: str) -> str:
    return textwrap.dedent(f"""\
        name: schema
        endpoint: {{base_url: "{server.base_url}", retries: 0}}
        stages:
          - name: ask
            user: Weather?
            expect:
              text:
                $json:
                  $schema: {schema}
        """)


def test_remote_ref_in_a_schema_is_a_collection_error_and_never_fetched(
        pytester: pytest.Pytester, chat_server: ChatServer, schema_host: ChatServer) -> None:
    chat_server.set_default(json_reply(completion(text='{"city": "Paris"}')))
    remote = f"{schema_host.base_url}/city.json"
    pytester.makefile(".case.yaml", remote=schema_case(
        chat_server, f'{{properties: {{city: {{$ref: "{remote}"}}}}}}'))

    result = pytester.runpytest("--toolbench-live", "-p", "no:cacheprovider")

    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines([
        (f"*remote.case.yaml:9: stages[[]0[]].expect.text.$json.$schema.properties.city.$ref:"
         f" $ref '{remote}' is not fetched: *")])
    assert schema_host.requests == []


def test_dynamic_ref_to_a_remote_schema_fails_the_case_without_a_fetch(
        pytester: pytest.Pytester, chat_server: ChatServer, schema_host: ChatServer) -> None:
    chat_server.set_default(json_reply(completion(text='["Paris"]')))
    remote = f"{schema_host.base_url}/item.json"
    pytester.makefile(".case.yaml", dynamic=schema_case(
        chat_server, f'{{items: {{$dynamicRef: "{remote}"}}}}'))

    result = pytester.runpytest("--toolbench-live", "-p", "no:cacheprovider")

    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines([f"*schema: reference '{remote}' is not fetched: *"])
    assert schema_host.requests == []


def test_refs_inside_the_schema_still_resolve(
        pytester: pytest.Pytester, chat_server: ChatServer) -> None:
    chat_server.set_default(json_reply(completion(text='{"city": 7}')))
    pytester.makefile(".case.yaml", local=schema_case(
        chat_server, "{definitions: {name: {type: string}},"
                     " properties: {city: {$ref: '#/definitions/name'}}}"))

    result = pytester.runpytest("--toolbench-live", "-p", "no:cacheprovider")

    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*expect.text.city: schema: 7 is not of type 'string'"])


# -- matching under a time limit -----------------------------------------------------------


def test_runaway_matchers_fail_the_case_at_the_time_limit(
        pytester: pytest.Pytester, chat_server: ChatServer) -> None:
    """``(a+)+$`` backtracks for ever with ``re`` (the regex package sees through it);
    ``(a|aa)+$`` backtracks with both, in ``$regex`` or in a schema's ``pattern``; an
    ``anyOf`` of 40 schemas over 200,000 items is millions of steps; ``uniqueItems`` over
    20,000 objects was every pair compared."""
    replies = {
        "few": "a" * 40 + "b",
        "many": json.dumps(list(range(200_000))),
        "objects": json.dumps([{"n": n} for n in range(20_000)] + [{"n": 0}]),
    }
    chat_server.set_handler(lambda request: json_reply(completion(
        text=replies[request.json()["messages"][-1]["content"]])))
    any_of = ", ".join(f"{{const: {-n}}}" for n in range(1, 41))
    cases = {
        "nested_plus": ("few", '{$regex: "(a+)+$"}'),
        "alternation": ("few", '{$regex: "(a|aa)+$"}'),
        "schema_pattern": ("few", '{$schema: {pattern: "(a|aa)+$"}}'),
        "huge_schema": ("many", f"{{$json: {{$schema: {{items: {{anyOf: [{any_of}]}}}}}}}}"),
        "unique_items": ("objects", "{$json: {$schema: {uniqueItems: true}}}"),
    }
    pytester.makefile(".case.yaml", runaway="---\n".join(textwrap.dedent(f"""\
        name: {name}
        endpoint: {{base_url: "{chat_server.base_url}", retries: 0}}
        stages:
          - name: ask
            user: {reply}
            expect: {{text: {matcher}}}
        """) for name, (reply, matcher) in cases.items()))

    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    result = pytester.runpytest_subprocess("--toolbench-live", "--toolbench-match-timeout=0.5",
                                           "-p", "no:cacheprovider", timeout=120)  # hung
    after = resource.getrusage(resource.RUSAGE_CHILDREN)

    # The processor time the run took, which a loaded machine does not stretch as it does
    # the wall clock's: a matcher that ran on past its limit would have spent it.
    assert (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime) < 20
    result.assert_outcomes(failed=5)
    limit = "did not finish within the matching time limit of 0.5 s (--toolbench-match-timeout)"
    result.stdout.fnmatch_lines([
        "*nested_plus: stages[[]0[]].expect.text: 'aaaa*' does not match regex '(a+)+$'",
        f"*alternation: stages[[]0[]].expect.text: $regex '(a|aa)+$' {limit}",
        f"*schema_pattern: stages[[]0[]].expect.text: $schema pattern '(a|aa)+$' {limit}",
        f"*huge_schema: stages[[]0[]].expect.text: $schema validation {limit}",
        "*unique_items: stages[[]0[]].expect.text: schema: [[]{'n': 0}, * has non-unique elements",
    ])


def test_compiling_a_pattern_is_not_matching_time(
        pytester: pytest.Pytester, chat_server: ChatServer) -> None:
    """A pattern of ten thousand alternatives takes the regex package most of a second to
    compile (more on a loaded machine), and a moment to search: the limit is the search's."""
    chat_server.set_default(json_reply(completion(text="a" * 40 + "b")))
    words = "|".join(f"w{n}x" for n in range(10_000))
    pytester.makefile(".case.yaml", big=textwrap.dedent(f"""\
        name: big_pattern
        endpoint: {{base_url: "{chat_server.base_url}", retries: 0}}
        stages:
          - name: ask
            user: hi
            expect: {{text: {{$regex: "(?:{words})+$"}}}}
        """))

    result = pytester.runpytest("--toolbench-live", "--toolbench-match-timeout=0.25",
                                "-p", "no:cacheprovider")

    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines([("*big_pattern: stages[[]0[]].expect.text:"
                                  " 'aaaa*' does not match regex '(?:w0x|w1x|*")])
    assert "time limit" not in result.stdout.str()


def test_match_timeout_setting_is_validated(pytester: pytest.Pytester) -> None:
    result = pytester.runpytest("--toolbench-match-timeout=0")
    result.stderr.fnmatch_lines(["*--toolbench-match-timeout must be *"])


# -- Ctrl-C ----------------------------------------------------------------------------------


def stalled_stream(request: RecordedRequest) -> Any:
    return sse_reply([*chunks_for("never")[:2], SSEPause(600), *chunks_for("never")[2:]])


@pytest.mark.parametrize("stall", ["stream", "async_tool", "sync_tool"])
def test_ctrl_c_cancels_running_cases_quietly_and_promptly(
        pytester: pytest.Pytester, chat_server: ChatServer, hostile_tools: None,
        stall: str) -> None:
    chat_server.set_handler(stalled_stream if stall == "stream" else call_then_answer)
    tool = {"stream": "result: sunny", "async_tool": "python: hostile_tools:sleeps_async",
            "sync_tool": "python: hostile_tools:sleeps"}[stall]
    pytester.makefile(".case.yaml", stall="---\n".join(
        tool_case(name, tool, chat_server, stream=stall == "stream")
        for name in ("first", "second")))
    process = subprocess.Popen(
        [*interruptible_pytest(), "--toolbench-live", "-p", "no:cacheprovider"],
        cwd=pytester.path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        wait_until_stalled(pytester, chat_server, stall)
        process.send_signal(signal.SIGINT)
        # The stall lasts 600 s: a run that waited for it would pass the timeout (a hang).
        out, err = process.communicate(timeout=STALL_BOUND_S)
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()
    assert process.returncode == pytest.ExitCode.INTERRUPTED, out + err
    assert "KeyboardInterrupt" in out
    assert "no tests ran" in out and "failed" not in out, out  # no tool's failure
    for noise in ("Task was destroyed", "Exception ignored", "Traceback"):
        assert noise not in err, err


def wait_until_stalled(pytester: pytest.Pytester, server: ChatServer, stall: str) -> None:
    deadline = time.monotonic() + STALL_BOUND_S
    while time.monotonic() < deadline:
        if stall == "stream" and server.requests:
            time.sleep(0.3)  # the first chunks are read; the stream is now stalled
            return
        if stall != "stream" and os.path.exists(pytester.path / "tool-started"):
            return
        time.sleep(0.05)
    raise AssertionError(f"the run never reached the stall ({stall})")
