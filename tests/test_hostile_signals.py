"""SIGTERM and SIGHUP, what ``timeout`` and a cancelled CI job send, end the session as
Ctrl-C does (issue 33): no stdio MCP server outlives it, and the reports are written with
the interrupted cases in them, marked so."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest
from support.chat_server import ChatServer, RecordedRequest, completion, json_reply
from support.processes import processes_tagged

PYTHON = json.dumps(sys.executable)
BROKEN = json.dumps(str(Path(__file__).parent / "support" / "broken_mcp.py"))


# The bounds. Starting a session with its servers and cases took up to 36 s beside two busy
# processes on a loaded 2-core machine: it has two minutes. Stopping has one: the stuck
# tool calls never answer (and the cases' own call timeout is two minutes), so a session
# that ends within a minute was stopped by the signal.
START_WITHIN_S = 120.0
STOP_WITHIN_S = 60.0


def wait_for(condition: Callable[[], bool]) -> None:
    deadline = time.monotonic() + START_WITHIN_S
    while not condition() and time.monotonic() < deadline:
        time.sleep(0.05)


def echo(request: RecordedRequest) -> object:
    if any(m["role"] == "tool" for m in request.json()["messages"]):
        return json_reply(completion(text="done"))
    return json_reply(completion(tool_calls=[("echo", {"text": "hi"})]))


def stuck_cases(pytester: pytest.Pytester, chat_server: ChatServer, tag: str,
                *names: str) -> None:
    """Cases called ``names``, each of whose tool calls waits on its stdio server (its
    process tagged ``tag``) for two minutes."""
    case = f"""name: NAME
endpoint: {{base_url: '{chat_server.base_url}', retries: 0}}
mcp_servers:
  stuck: {{command: [{PYTHON}, {BROKEN}, slow_call, {tag}], call_timeout_s: 120}}
tools: [{{mcp: stuck}}]
stages: [{{name: ask, user: echo, run_tools: true}}]
"""
    pytester.makefile(".case.yaml", stuck="---\n".join(
        case.replace("NAME", name) for name in names))


@pytest.mark.parametrize("sent", [signal.SIGTERM, signal.SIGHUP])
def test_a_stopping_signal_during_an_mcp_call_stops_servers_and_writes_reports(
        pytester: pytest.Pytester, chat_server: ChatServer, sent: signal.Signals) -> None:
    tag = f"toolbench-test-{sent.name}"
    chat_server.set_handler(echo)
    stuck_cases(pytester, chat_server, tag, "first", "second")
    process = subprocess.Popen(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "--toolbench-live",
         "--toolbench-report=r.json", "--junitxml=j.xml"],
        cwd=pytester.path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        wait_for(lambda: len(chat_server.requests) >= 2 or process.poll() is not None)
        assert len(processes_tagged(tag)) == 2  # both cases asked the model, which called
        time.sleep(0.5)                         # the stuck tool
        process.send_signal(sent)
        stopped = time.monotonic()
        out, err = process.communicate(timeout=STOP_WITHIN_S)
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()
    assert time.monotonic() - stopped < STOP_WITHIN_S
    assert process.returncode == pytest.ExitCode.INTERRUPTED, out + err
    assert processes_tagged(tag) == []
    report = json.loads((pytester.path / "r.json").read_text())
    outcomes = {case["case"]: (case["outcome"], case["runs"][0]["error"])
                for case in report["cases"]}
    said = f"interrupted: the session was stopped ({sent.name}) while the case ran"
    assert outcomes == {"first": ("interrupted", said), "second": ("interrupted", said)}
    junit = (pytester.path / "j.xml").read_text()
    assert junit.count("<testcase") == 2 and said in junit
    assert "Traceback" not in err


def test_sigterm_to_an_xdist_controller_stops_the_workers_servers_and_writes_the_report(
        pytester: pytest.Pytester, chat_server: ChatServer) -> None:
    # A tag of this run's own: servers another run left behind must not count as this one's.
    tag = f"toolbench-test-sigterm-xdist-{uuid.uuid4().hex[:12]}"
    chat_server.set_handler(echo)
    stuck_cases(pytester, chat_server, tag, "a", "b", "c", "d")
    process = subprocess.Popen(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "--toolbench-live",
         "-n", "2", "--toolbench-report=r.json"],
        cwd=pytester.path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        wait_for(lambda: (len(chat_server.requests) >= 2 and len(processes_tagged(tag)) >= 2)
                 or process.poll() is not None)  # a server in each worker, cases in stuck calls
        assert len(processes_tagged(tag)) >= 2
        time.sleep(0.5)
        process.send_signal(signal.SIGTERM)
        out, err = process.communicate(timeout=STOP_WITHIN_S)
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()
    assert process.returncode == pytest.ExitCode.INTERRUPTED, out + err
    deadline = time.monotonic() + 10
    while processes_tagged(tag) and time.monotonic() < deadline:
        time.sleep(0.1)  # the workers wind down after the controller
    assert processes_tagged(tag) == []
    assert json.loads((pytester.path / "r.json").read_text())["summary"]["cases"] == 0
