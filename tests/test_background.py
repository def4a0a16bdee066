"""Background tools: ``background: true`` on a ``python`` tool, ``background: [METHOD]`` on a
toolbox and ``background: [NAME]`` on an MCP server's tools. The model is answered at once
that the task started; the tool runs on its own; ``await_background`` waits for it before a
stage's checks; the run's end waits for the rest; a task that raised fails the case
(``expect.background_errors`` may allow it); the report lists every task.

Each test runs the plugin through pytester against the loopback chat server.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import pytest
from support.chat_server import ChatServer, RecordedRequest
from support.notes import NOTES_TOKEN, notes_server
from support.scripted_model import ScriptedModel, calls, says

KITCHEN_MODULE = '''
import time


class Kitchen:
    def __init__(self):
        self.tickets = []

    def book(self, party: int) -> dict:
        """Book a table."""
        return {"booked": True, "party": party}

    def notify(self, dish: str) -> dict:
        """Tell the kitchen (slow)."""
        time.sleep(0.4)
        self.tickets.append(dish)
        return {"notified": dish}


def jammed(dish):
    time.sleep(0.1)
    raise RuntimeError("the kitchen printer is jammed")


def stuck(dish):
    time.sleep(5)
    return "too late"
'''

TOOLBOX_CASE = """
name: dinner
model: m
endpoint: {{base_url: '{url}'}}
tools:
  - toolbox: {{python: "kitchen:Kitchen"}}
    background: [notify]
stages:
  - name: order
    user: A table for two, and tell the kitchen about the soup.
    run_tools: true
    expect:
      tool_calls: [{{name: book}}, {{name: notify}}]
      state: {{Kitchen: {{tickets: []}}}}        # notify is still running
  - name: confirm
    user: Is the kitchen told?
    await_background: true
    expect:
      state: {{Kitchen: {{tickets: [soup]}}}}    # it ended before these checks
      probe: [{{call: {{name: book, arguments: {{party: 2}}}}, result: {{booked: true}}}}]
"""


def dinner_model() -> ScriptedModel:
    """The model books, tells the kitchen in one reply, then answers twice."""
    return ScriptedModel(calls(("book", {"party": 2}), ("notify", {"dish": "soup"})),
                         says("Booked."), says("Yes, the kitchen knows."))


@pytest.fixture
def kitchen(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(kitchen=KITCHEN_MODULE)
    pytester.syspathinsert()


def tool_results(request: RecordedRequest) -> list[Any]:
    return [json.loads(m["content"]) for m in request.json()["messages"]
            if m["role"] == "tool"]


def run_record(pytester: pytest.Pytester) -> dict[str, Any]:
    data = json.loads((pytester.path / "r.json").read_text(encoding="utf-8"))
    run: dict[str, Any] = data["cases"][0]["runs"][0]
    return run


def test_a_background_toolbox_method_runs_on_its_own_and_a_later_stage_checks_its_state(
    pytester: pytest.Pytester, chat_server: ChatServer, kitchen: None
) -> None:
    chat_server.set_handler(dinner_model())
    pytester.makefile(".case.yaml", dinner=TOOLBOX_CASE.format(url=chat_server.base_url))
    started = time.monotonic()
    result = pytester.runpytest("--toolbench-live", "-p", "no:cacheprovider",
                                "--toolbench-report=r.json", "--toolbench-html=r.html")
    result.assert_outcomes(passed=1)
    page = (pytester.path / "r.html").read_text(encoding="utf-8")
    assert "background task_1 notify({&quot;dish&quot;: &quot;soup&quot;}) · done" in page
    # The model was told only that the task started, at once.
    assert tool_results(chat_server.requests[1]) == [
        {"booked": True, "party": 2}, {"status": "started", "task": "task_1"}]
    background = run_record(pytester)["background"]
    assert [(task["task"], task["name"], task["status"], json.loads(task["result"]))
            for task in background] == [("task_1", "notify", "done", {"notified": "soup"})]
    task = background[0]
    assert task["ended_ms"] - task["started_ms"] >= 400 and task["error"] is None
    assert time.monotonic() - started < 30


def test_without_await_background_the_stage_sees_the_state_before_the_task_ended(
    pytester: pytest.Pytester, chat_server: ChatServer, kitchen: None
) -> None:
    chat_server.set_handler(dinner_model())
    pytester.makefile(".case.yaml", dinner=TOOLBOX_CASE.format(url=chat_server.base_url)
                      .replace("    await_background: true\n", ""))
    result = pytester.runpytest("--toolbench-live", "-p", "no:cacheprovider")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*dinner.case.yaml:17: *expected 1 element, got 0*"])


def test_a_recorded_background_case_replays_with_its_toolbox_run_again(
    pytester: pytest.Pytester, chat_server: ChatServer, kitchen: None
) -> None:
    chat_server.set_handler(dinner_model())
    pytester.makefile(".case.yaml", dinner=TOOLBOX_CASE.format(url=chat_server.base_url))
    pytester.runpytest("--toolbench-record", "-p", "no:cacheprovider").assert_outcomes(
        passed=1)
    served = len(chat_server.requests)
    result = pytester.runpytest("-p", "no:cacheprovider", "--toolbench-report=r.json")
    result.assert_outcomes(passed=1)
    assert len(chat_server.requests) == served
    assert [task["status"] for task in run_record(pytester)["background"]] == ["done"]


JAMMED_CASE = """
name: notify
model: m
endpoint: {{base_url: '{url}'}}
tools:
  - name: notify_kitchen
    parameters: {{type: object, properties: {{dish: {{type: string}}}}}}
    python: kitchen:{function}
    background: true
    timeout_s: {timeout}
stages:
  - name: order
    user: Tell the kitchen.
    run_tools: true
    expect: {{text: {{$contains: Told}}}}
{case_expect}"""


def told_the_kitchen() -> ScriptedModel:
    """The model calls the kitchen once, then says it told it."""
    return ScriptedModel(calls(("notify_kitchen", {"dish": "soup"})), says("Told the kitchen."))


def jammed_case(url: str, function: str = "jammed", timeout: float = 30,
                case_expect: str = "") -> str:
    return JAMMED_CASE.format(url=url, function=function, timeout=timeout,
                              case_expect=case_expect)


def test_a_background_task_that_raises_fails_the_case_with_its_exception(
    pytester: pytest.Pytester, chat_server: ChatServer, kitchen: None
) -> None:
    chat_server.set_handler(told_the_kitchen())
    pytester.makefile(".case.yaml", notify=jammed_case(chat_server.base_url))
    result = pytester.runpytest("--toolbench-live", "-p", "no:cacheprovider",
                                "--toolbench-report=r.json")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines([("*notify.case.yaml:4: *background task task_1"
                                 " (notify_kitchen) failed: RuntimeError: the kitchen printer"
                                 " is jammed*")])
    assert [(task["status"], task["error"]) for task in run_record(pytester)["background"]] \
        == [("failed", "RuntimeError: the kitchen printer is jammed")]


def test_expect_background_errors_may_allow_a_task_that_raised(
    pytester: pytest.Pytester, chat_server: ChatServer, kitchen: None
) -> None:
    chat_server.set_handler(told_the_kitchen())
    pytester.makefile(".case.yaml", notify=jammed_case(
        chat_server.base_url,
        case_expect="expect: {background_errors: [{$contains: printer is jammed}]}\n"))
    pytester.runpytest("--toolbench-live", "-p", "no:cacheprovider").assert_outcomes(passed=1)
    pytester.makefile(".case.yaml", notify=jammed_case(
        chat_server.base_url, case_expect="expect: {background_errors: []}\n"))
    chat_server.set_handler(told_the_kitchen())
    result = pytester.runpytest("--toolbench-live", "-p", "no:cacheprovider")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*notify.case.yaml:15: *background tasks: *"])


def test_a_task_past_its_timeout_at_the_runs_end_is_cancelled_and_fails_the_case(
    pytester: pytest.Pytester, chat_server: ChatServer, kitchen: None
) -> None:
    chat_server.set_handler(told_the_kitchen())
    pytester.makefile(".case.yaml", notify=jammed_case(chat_server.base_url, "stuck", 0.5))
    started = time.monotonic()
    result = pytester.runpytest("--toolbench-live", "-p", "no:cacheprovider",
                                "--toolbench-report=r.json")
    result.assert_outcomes(failed=1)
    assert time.monotonic() - started < 4.5  # the task sleeps 5 s; its limit is 0.5 s
    result.stdout.fnmatch_lines([("*background task task_1 (notify_kitchen) failed:"
                                 " notify_kitchen timed out after 0.5 s*")])
    assert [task["status"] for task in run_record(pytester)["background"]] == ["failed"]


@pytest.mark.parametrize(("entry", "line", "message"), [
    ("- name: t\n    result: 1\n    background: true", 5,
     "background: true runs a python tool on its own; this tool has no python function"),
    ("- toolbox: {python: 'kitchen:Kitchen'}\n    background: [cook]", 4,
     "background names 'cook', which is not one of the toolbox's tools (book, notify)"),
])
def test_background_declaration_errors_are_collection_errors_at_their_lines(
    pytester: pytest.Pytester, kitchen: None, entry: str, line: int, message: str
) -> None:
    pytester.makefile(".case.yaml", bad=f"""name: bad
tools:
  {entry}
stages:
  - {{name: s, user: hi}}
""")
    result = pytester.runpytest("--collect-only", "-p", "no:cacheprovider")
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines([f"*bad.case.yaml:{line}: *{message}*"])


@pytest.fixture
def notes_url() -> Iterator[str]:
    pytest.importorskip("mcp")
    with notes_server() as url:
        yield url


def test_a_background_mcp_tool_is_answered_at_once_and_a_later_probe_sees_it(
    pytester: pytest.Pytester, chat_server: ChatServer, notes_url: str
) -> None:
    chat_server.set_handler(ScriptedModel(calls(("add_note", {"text": "soup"})),
                                          says("Noted."), says("Yes.")))
    pytester.makefile(".case.yaml", notes=f"""name: notes
model: m
endpoint: {{base_url: '{chat_server.base_url}'}}
mcp_servers:
  notes: {{url: "{notes_url}", headers: {{Authorization: "Bearer {NOTES_TOKEN}"}}}}
tools:
  - mcp: notes
    include: [add_note, list_notes]
    background: [add_note]
stages:
  - name: note
    user: note the soup
    run_tools: true
    expect: {{text: Noted.}}
  - name: check
    user: noted?
    await_background: true
    expect:
      probe: [{{call: {{name: list_notes}}, result: {{$contains: soup}}}}]
""")
    result = pytester.runpytest("--toolbench-record", "-p", "no:cacheprovider",
                                "--toolbench-report=r.json")
    result.assert_outcomes(passed=1)
    assert tool_results(chat_server.requests[1]) == [{"status": "started", "task": "task_1"}]
    assert [(task["name"], task["server"], task["status"])
            for task in run_record(pytester)["background"]] == [("add_note", "notes", "done")]
    # Replay answers the MCP calls from the cassette, the background one too: no server.
    result = pytester.runpytest("-p", "no:cacheprovider", "--toolbench-report=r.json")
    result.assert_outcomes(passed=1)
    assert [task["status"] for task in run_record(pytester)["background"]] == ["done"]
