"""A team's own code that exits, interrupts, never starts or never ends: the case fails
naming it, and the session goes on to the next case (issue 33).

Every run is a subprocess with a timeout, so a regression fails the test instead of
hanging it; the last case of each file is a plain one that must still pass.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import textwrap
import time
from typing import Any

import pytest
from support.chat_server import ChatServer, RecordedRequest, completion, json_reply
from support.signals import interruptible_pytest

HOSTILE_TOOLBOXES = '''
import argparse
import asyncio
import time


class Base:
    def ping(self) -> str:
        """Ping."""
        return "pong"


class ParsesArgs(Base):
    def __init__(self) -> None:
        argparse.ArgumentParser().parse_args()  # pytest's argv: exits with 2


class Interrupts(Base):
    def __init__(self) -> None:
        raise KeyboardInterrupt


class NeverStarts(Base):
    def __init__(self) -> None:
        while True:
            time.sleep(0.1)


class NeverStartsMarked(Base):
    def __init__(self) -> None:
        open("toolbox-started", "w").close()
        while True:
            time.sleep(0.1)


class NeverCopies(Base):
    def __deepcopy__(self, memo: dict) -> "NeverCopies":
        while True:
            time.sleep(0.1)


class CopiesOnce(Base):
    copies = 0

    def __deepcopy__(self, memo: dict) -> "CopiesOnce":
        CopiesOnce.copies += 1
        if CopiesOnce.copies > 1:
            raise RuntimeError("no second copy")
        return CopiesOnce()


class SwallowsCancel(Base):
    async def wait(self) -> str:
        """Wait."""
        while True:
            try:
                await asyncio.sleep(0.1)
            except asyncio.CancelledError:
                pass


class StateExits(Base):
    def state(self) -> dict:
        raise SystemExit("state is gone")


class BadHint(Base):
    def add(self, amount: "1/0") -> int:
        """Add."""
        return 1
'''


@pytest.fixture
def toolboxes(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(hostile_boxes=HOSTILE_TOOLBOXES)


def call_then_answer(name: str) -> Any:
    """First a call of ``name`` (of ``ping`` where it is not offered); once it has a
    result, the text ``done``."""
    def answer(request: RecordedRequest) -> Any:
        if any(m["role"] == "tool" for m in request.json()["messages"]):
            return json_reply(completion(text="done"))
        offered = {tool["function"]["name"] for tool in request.json()["tools"]}
        return json_reply(completion(tool_calls=[(name if name in offered else "ping", {})]))
    return answer


def box_case(name: str, box: str, server: ChatServer, *, timeout_s: float = 30,
             stage: str = "") -> str:
    return textwrap.dedent(f"""\
        name: {name}
        endpoint: {{base_url: "{server.base_url}", retries: 0}}
        tools:
          - toolbox: {{python: "hostile_boxes:{box}"}}
            timeout_s: {timeout_s}
        stages:
          - name: ask
            user: go
            run_tools: true
        """) + textwrap.indent(textwrap.dedent(stage), "    ")


def after(server: ChatServer) -> str:
    return textwrap.dedent(f"""\
        name: after
        endpoint: {{base_url: "{server.base_url}", retries: 0}}
        tools: [{{name: ping, result: pong}}]
        stages: [{{name: ask, user: go, run_tools: true, expect: {{text: done}}}}]
        """)


def run(pytester: pytest.Pytester, *cases: str,
        args: tuple[str, ...] = ("--toolbench-live",)) -> pytest.RunResult:
    pytester.makefile(".case.yaml", hostile="---\n".join(cases))
    return pytester.runpytest_subprocess("-p", "no:cacheprovider", *args, timeout=60)


@pytest.mark.parametrize(("box", "said"), [
    ("ParsesArgs", "ParsesArgs(**init) raised SystemExit: 2"),
    ("Interrupts", "Interrupts(**init) raised KeyboardInterrupt"),
])
def test_a_toolbox_that_exits_or_interrupts_fails_its_case_and_the_session_goes_on(
        pytester: pytest.Pytester, chat_server: ChatServer, toolboxes: None, box: str,
        said: str) -> None:
    chat_server.set_handler(call_then_answer("ping"))
    result = run(pytester, box_case("hostile", box, chat_server), after(chat_server))
    result.assert_outcomes(failed=1, passed=1)
    result.stdout.fnmatch_lines([(f"*hostile.case.yaml:4: hostile: tools?0?.toolbox:"
                                 f" toolbox '{box}': {said}"),
                                 "*hostile_boxes.py*, in __init__"])  # where, in its code
    assert "Traceback" not in result.stdout.str() + result.stderr.str()


def test_a_toolbox_that_never_starts_is_abandoned_at_its_timeout(
        pytester: pytest.Pytester, chat_server: ChatServer, toolboxes: None) -> None:
    chat_server.set_handler(call_then_answer("ping"))
    started = time.monotonic()
    result = run(pytester, box_case("stuck", "NeverStarts", chat_server, timeout_s=1),
                 after(chat_server))
    result.assert_outcomes(failed=1, passed=1)
    result.stdout.fnmatch_lines([("*:4: stuck: tools?0?.toolbox: toolbox 'NeverStarts':"
                                 " NeverStarts(**init) did not finish within 1 s")])
    assert time.monotonic() - started < 30


def test_an_async_method_that_swallows_cancellation_is_abandoned(
        pytester: pytest.Pytester, chat_server: ChatServer, toolboxes: None) -> None:
    chat_server.set_handler(call_then_answer("wait"))
    result = run(pytester, box_case("swallow", "SwallowsCancel", chat_server, timeout_s=2),
                 after(chat_server))
    result.assert_outcomes(passed=2)
    sent = [m["content"] for r in chat_server.requests for m in r.json()["messages"]
            if m["role"] == "tool"]
    assert '{"error": "wait timed out after 2 s"}' in sent


@pytest.mark.parametrize("mode", ["live", "replay"])
def test_a_deep_copy_that_never_ends_fails_the_retried_stage(
        pytester: pytest.Pytester, chat_server: ChatServer, toolboxes: None,
        mode: str) -> None:
    chat_server.set_handler(call_then_answer("ping"))
    case = box_case("nocopy", "NeverCopies", chat_server, timeout_s=1,
                    stage="retry: {attempts: 2}\n")
    if mode == "replay":  # recorded with a copyable state, replayed with the stuck one
        pytester.makepyfile(hostile_boxes="class NeverCopies:\n    def ping(self) -> str:\n"
                            "        return 'pong'\n")
        run(pytester, case, after(chat_server), args=("--toolbench-record",)
            ).assert_outcomes(passed=2)
        pytester.makepyfile(hostile_boxes=HOSTILE_TOOLBOXES)
        result = pytester.runpytest_subprocess("-p", "no:cacheprovider", timeout=60)
    else:
        result = run(pytester, case, after(chat_server))
    result.assert_outcomes(failed=1, passed=1)
    result.stdout.fnmatch_lines([("*:4: nocopy: tools?0?: toolbox 'NeverCopies' cannot be"
                                 " copied, *: did not finish within 1 s")])


def test_a_restore_that_fails_on_retry_keeps_the_first_attempt_and_says_why(
        pytester: pytest.Pytester, chat_server: ChatServer, toolboxes: None) -> None:
    chat_server.set_handler(call_then_answer("ping"))
    case = box_case("restore", "CopiesOnce", chat_server,
                    stage="retry: {attempts: 2}\nexpect: {text: never said}\n")
    result = run(pytester, case, after(chat_server), args=("--toolbench-live",
                                                        "--toolbench-report=report.json"))
    result.assert_outcomes(failed=1, passed=1)
    result.stdout.fnmatch_lines([("*:4: restore: tools?0?: toolbox 'CopiesOnce' cannot be"
                                 " copied, *: RuntimeError: no second copy")])
    output = result.stdout.str() + result.stderr.str()
    assert "Traceback" not in output and "pluggy/" not in output
    report = json.loads((pytester.path / "report.json").read_text())
    case_record = next(c for c in report["cases"] if c["case"] == "restore")
    attempts = case_record["runs"][0]["stages"][0]["attempts"]
    assert len(attempts) == 2
    assert attempts[0]["turns"], "the first attempt's transcript is kept"
    assert "no second copy" in attempts[1]["failures"][0]["message"]


def test_a_state_method_that_exits_is_named_where_state_is_read(
        pytester: pytest.Pytester, chat_server: ChatServer, toolboxes: None) -> None:
    chat_server.set_handler(call_then_answer("ping"))
    case = box_case("state", "StateExits", chat_server,
                    stage="expect: {state: {StateExits: {}}}\n")
    result = run(pytester, case, after(chat_server))
    result.assert_outcomes(failed=1, passed=1)
    result.stdout.fnmatch_lines([("*: state: stages?0?.expect.state: no state to check:"
                                 " SystemExit: state is gone")])


def test_a_state_that_cannot_be_read_is_an_error_in_the_reports_not_an_empty_state(
        pytester: pytest.Pytester, chat_server: ChatServer, toolboxes: None) -> None:
    chat_server.set_handler(call_then_answer("ping"))
    result = run(pytester, box_case("state", "StateExits", chat_server),
                 args=("--toolbench-live", "--toolbench-report=r.json",
                       "--toolbench-html=r.html"))
    result.assert_outcomes(passed=1)
    report = json.loads((pytester.path / "r.json").read_text())
    attempt = report["cases"][0]["runs"][0]["stages"][0]["attempts"][0]
    assert attempt["state"] == {}
    assert attempt["state_errors"] == {"StateExits": "SystemExit: state is gone"}
    assert "state of StateExits could not be read: SystemExit: state is gone" in (
        pytester.path / "r.html").read_text()


def test_a_type_hint_that_raises_is_a_collection_error_at_its_line(
        pytester: pytest.Pytester, chat_server: ChatServer, toolboxes: None) -> None:
    result = run(pytester, box_case("hint", "BadHint", chat_server))
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines([("*hostile.case.yaml:4: *tools?0?*: the signature of"
                                  " BadHint.add cannot be read: a type hint raised"
                                  " ZeroDivisionError: division by zero")])
    assert "Traceback" not in result.stdout.str()


@pytest.mark.parametrize("mode", ["live", "replay"])
def test_ctrl_c_while_a_toolbox_never_starts_stops_the_session_at_once(
        pytester: pytest.Pytester, chat_server: ChatServer, toolboxes: None,
        mode: str) -> None:
    chat_server.set_handler(call_then_answer("ping"))
    case = box_case("stuck", "NeverStartsMarked", chat_server, timeout_s=120)
    args = ["--toolbench-live"] if mode == "live" else []
    if mode == "replay":  # a cassette to replay, recorded with a toolbox that starts
        run(pytester, case.replace("NeverStartsMarked", "Base"),
            args=("--toolbench-record",)).assert_outcomes(passed=1)
    pytester.makefile(".case.yaml", hostile=case)
    process = subprocess.Popen([*interruptible_pytest(), "-p", "no:cacheprovider", *args],
                               cwd=pytester.path, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 30
        while not os.path.exists(pytester.path / "toolbox-started"):
            assert time.monotonic() < deadline, "the toolbox never started"
            time.sleep(0.05)
        process.send_signal(signal.SIGINT)
        interrupted = time.monotonic()
        out, err = process.communicate(timeout=20)
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()
    assert time.monotonic() - interrupted < 8
    assert process.returncode == pytest.ExitCode.INTERRUPTED, out + err
    # A real Ctrl-C is no failure of the toolbox's (as its own KeyboardInterrupt is): the
    # case is marked interrupted and counted in no total.
    assert "no tests ran" in out and "failed" not in out, out
    assert "KeyboardInterrupt" in out
