"""Routes: ``next`` on a stage, ``max_iterations`` and ``expect.path`` on a case.

The cases run through the plugin (pytester) against the loopback servers, whose scripted
model (``support.scripted_model``) answers each of the four wire APIs in its own shape:
a conversation that branches and loops, live, then recorded and replayed with the server
gone; the bound; the path matcher; bad routes as collection errors at their lines; the
graph and the dry run.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from support.chat_server import ChatServer
from support.gemini_server import GeminiServer
from support.scripted_model import ScriptedModel, calls, says

from pytest_toolbench.commands.cli import main

APIS = ("chat", "responses", "messages", "gemini")

BOOKING = """
name: clarify_then_book
model: MODEL
endpoint: {api: API, base_url: 'URL'}
max_iterations: 6
tools:
  - name: book_table
    parameters: {type: object, properties: {party: {type: integer}, time: {type: string}}}
    result: {booked: true}
stages:
  - name: ask
    user: Book me a table.
    expect: {tool_calls: [{name: book_table}]}
    next: {pass: confirm, fail: clarify}
  - name: clarify
    user: For two, tonight at eight.
    expect: {tool_calls: [{name: book_table}]}
    next: {pass: confirm, fail: clarify}
  - name: confirm
    run_tools: true
    expect:
      text: {$contains: booked}
expect:
  path: {$contains: [ask, confirm]}
"""
"""The issue's case: asked for a table, the model asks back twice before it books."""


def booking(api: str, url: str, case: str = BOOKING, **replace: str) -> str:
    model = "gemini-2.5-flash" if api == "gemini" else "test-model"
    text = case.replace("MODEL", model).replace("API", api).replace("URL", url)
    for old, new in replace.items():
        text = text.replace(old, new)
    return text


def clarified_twice() -> ScriptedModel:
    return ScriptedModel(says("For how many people?"), says("And at what time?"),
                         calls(("book_table", {"party": 2, "time": "20:00"})),
                         says("Your table is booked for two at eight."))


@pytest.fixture(params=APIS)
def api(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def server(api: str) -> Iterator[ChatServer]:
    with (GeminiServer() if api == "gemini" else ChatServer()).start() as started:
        yield started


def run(pytester: pytest.Pytester, *args: str) -> pytest.RunResult:
    return pytester.runpytest("-p", "no:cacheprovider", *args)


def report_of(pytester: pytest.Pytester, *args: str) -> tuple[pytest.RunResult, list[Any]]:
    """The run and the cases of its JSON report."""
    path = pytester.path / "report.json"
    result = run(pytester, f"--toolbench-report={path}", *args)
    return result, json.loads(path.read_text())["cases"]


def stages_of(case: dict[str, Any]) -> list[tuple[str, str | None, bool, bool]]:
    """Each stage the first run ran: its name, where it led, passed, branch taken."""
    return [(stage["name"], stage["next"], stage["passed"], stage["branch"])
            for stage in case["runs"][0]["stages"]]


# -- a conversation that branches and loops, over each API, live then replayed -------------

def test_a_routed_failure_is_a_branch_and_a_loop_goes_on_with_the_conversation(
        pytester: pytest.Pytester, api: str, server: ChatServer) -> None:
    model = clarified_twice()
    server.set_handler(model)
    pytester.makefile(".case.yaml", book=booking(api, server.base_url))
    recorded, cases = report_of(pytester, "--toolbench-record")
    recorded.assert_outcomes(passed=1)
    assert model.left == 0 and len(server.requests) == 4  # the last: the tool's result back
    assert [served.api for served in model.served] == [api] * 4
    # The loop went on from where the conversation was: the second "clarify" carried both
    # questions the model asked.
    carried = json.dumps(server.requests[1].json())
    assert "For how many people?" in carried and "And at what time?" not in carried
    again = json.dumps(server.requests[2].json())
    assert "And at what time?" in again and again.count("For two, tonight at eight.") == 2
    path = ["ask", "clarify", "clarify", "confirm"]
    assert cases[0]["runs"][0]["path"] == path
    recorded.stdout.fnmatch_lines(["*toolbench summary*", "* outcome *ttft path*",
                                   "* passed *ms *- ask → clarify →*"])  # folded at 80
    assert stages_of(cases[0]) == [("ask", "clarify", False, True),
                                   ("clarify", "clarify", False, True),
                                   ("clarify", "confirm", True, False),
                                   ("confirm", "end", True, False),
                                   ("end of case", None, True, False)]
    server.close()  # replay takes the recorded route with nothing to answer live
    replayed, cases = report_of(pytester, "--toolbench-html=report.html")
    replayed.assert_outcomes(passed=1)
    assert cases[0]["runs"][0]["path"] == path
    page = (pytester.path / "report.html").read_text()
    assert "path: ask → clarify → clarify → confirm" in page
    assert page.count(">branch taken</span> → clarify") == 2


def test_an_unrouted_failure_still_fails_the_run_and_a_routed_end_passes_it(
        pytester: pytest.Pytester, server: ChatServer, api: str) -> None:
    server.set_handler(ScriptedModel(*[says("Which day?")] * 4))
    straight = booking(api, server.base_url).replace(
        "    next: {pass: confirm, fail: clarify}\n", "")
    given_up = booking(api, server.base_url).replace(
        "next: {pass: confirm, fail: clarify}", "next: {fail: end}", 1).replace(
        "name: clarify_then_book", "name: given_up").replace(
        "  path: {$contains: [ask, confirm]}", "  path: [ask]")
    pytester.makefile(".case.yaml", book=f"{straight}---\n{given_up}")
    result, cases = report_of(pytester, "--toolbench-live", "-rA")
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines([("*book.case.yaml:12: clarify_then_book*: stages[[]0[]].expect"
                                 ".tool_calls: expected 1 call, got 0*")])
    straight_case, given_up_case = cases
    assert straight_case["runs"][0]["path"] == ["ask"]
    assert stages_of(straight_case) == [("ask", None, False, False)]
    assert given_up_case["runs"][0]["path"] == ["ask"]
    assert stages_of(given_up_case)[0] == ("ask", "end", False, True)


def test_max_iterations_fails_the_run_with_the_path_so_far(
        pytester: pytest.Pytester, server: ChatServer, api: str) -> None:
    server.set_handler(ScriptedModel(*[says("Which day?")] * 6))
    pytester.makefile(".case.yaml", book=booking(api, server.base_url).replace(
        "max_iterations: 6", "max_iterations: 4"))
    result, cases = report_of(pytester, "--toolbench-live")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines([("*book.case.yaml:4: clarify_then_book*: max_iterations:"
                                 " max_iterations (4) reached:"
                                 " ask → clarify → clarify → clarify → …")])
    assert len(server.requests) == 4
    assert cases[0]["runs"][0]["path"] == ["ask", "clarify", "clarify", "clarify"]
    assert cases[0]["runs"][0]["passed"] is False


def test_the_default_bound_is_twenty_stage_runs(pytester: pytest.Pytester,
                                                chat_server: ChatServer) -> None:
    chat_server.set_handler(ScriptedModel(*[says("Which day?")] * 25))
    pytester.makefile(".case.yaml", book=booking("chat", chat_server.base_url).replace(
        "max_iterations: 6\n", ""))
    result = run(pytester, "--toolbench-live")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*max_iterations (20) reached: ask → clarify → *"])
    assert len(chat_server.requests) == 20


def test_expect_path_fails_at_its_line_with_the_path_taken(
        pytester: pytest.Pytester, chat_server: ChatServer) -> None:
    chat_server.set_handler(clarified_twice())
    pytester.makefile(".case.yaml", book=booking("chat", chat_server.base_url).replace(
        "path: {$contains: [ask, confirm]}", "path: {$not: [clarify]}"))
    result = run(pytester, "--toolbench-live")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines([
        ("*book.case.yaml:23: clarify_then_book*: expect.path.$not[[]0[]]: stage 'clarify' ran, and"
        " never may; the path taken: ask → clarify → clarify → confirm")])


def test_a_next_name_routes_a_pass_and_skips_the_stages_between(
        pytester: pytest.Pytester, chat_server: ChatServer) -> None:
    chat_server.set_handler(ScriptedModel(says("Hello."), says("Bye."), says("Oh, one more.")))
    pytester.makefile(".case.yaml", skip=f"""
name: skipping
endpoint: {{base_url: '{chat_server.base_url}'}}
stages:
  - name: greet
    user: Hi
    next: leave
  - name: later
    user: The stage after greet in the file, run last.
    next: end
  - name: leave
    user: Bye
    expect: {{text: Bye.}}
    next: later
expect:
  path: [greet, leave, later]
""")
    result, cases = report_of(pytester, "--toolbench-live")
    result.assert_outcomes(passed=1)
    assert cases[0]["runs"][0]["path"] == ["greet", "leave", "later"]
    assert [request.json()["messages"][-1]["content"] for request in chat_server.requests] \
        == ["Hi", "Bye", "The stage after greet in the file, run last."]


# -- checked before anything is sent ------------------------------------------------------

BAD_ROUTES = """
name: bad_routes
max_iterations: MAX
stages:
  - name: ask
    user: Book me a table.
    next: {pass: confrim, fail: clarify}
  - name: clarify
    user: For two.
    next: clarify
  - name: stray
    user: Never reached.
  - name: confirm
    user: Thanks.
    capture: {booking: text}
  - name: goodbye
    user: "Booking ${booking}, and ${bookng}"
"""


def test_bad_routes_are_collection_errors_at_their_lines(pytester: pytest.Pytester) -> None:
    pytester.makefile(".case.yaml", bad=BAD_ROUTES.replace("MAX", "0"))
    first = run(pytester, "--collect-only")
    first.stdout.fnmatch_lines([("*bad.case.yaml:2: max_iterations: max_iterations bounds"
                                " the stage runs of one run of the case: 1 or more, got 0*")])
    pytester.makefile(".case.yaml", bad=BAD_ROUTES.replace("MAX", "5"))
    result = run(pytester, "--collect-only")
    result.stdout.fnmatch_lines([
        ("*bad.case.yaml:6: stages[[]0[]].next.pass: next names stage 'confrim', which the case"
        " lacks (did you mean 'confirm'?); a route goes to one of: ask, clarify, stray,"
        " confirm, goodbye, end*")])
    assert "no route" not in result.stdout.str()  # told once the targets are all stages
    pytester.makefile(".case.yaml", bad=BAD_ROUTES.replace("MAX", "5").replace(
        "confrim", "confirm"))
    result = run(pytester, "--collect-only")
    result.stdout.fnmatch_lines([
        ("*bad.case.yaml:9: stages[[]1[]].next: a loop with no way out: clarify → clarify"
        " never reaches end*"),
        "*bad.case.yaml:10: stages[[]2[]].name: stage 'stray' is reached by no route*",
        ("*bad.case.yaml:16: stages[[]4[]].user: ${bookng} is not defined; did you mean"
        " `booking`?*")])
    assert "${booking} is" not in result.stdout.str()  # every way to goodbye captures it
    assert main(["validate", str(pytester.path / "bad.case.yaml")]) == 1


def test_a_name_some_route_reaches_without_capturing_is_an_error(
        pytester: pytest.Pytester) -> None:
    pytester.makefile(".case.yaml", skip="""
name: skipped_capture
stages:
  - name: ask
    user: Where?
    capture: {city: text}
    next: {pass: answer, fail: again}
  - name: again
    user: Which city?
    next: answer
  - name: answer
    user: "Weather in ${city}?"
""")
    result = run(pytester, "--collect-only")
    result.stdout.fnmatch_lines([
        ("*skip.case.yaml:11: stages[[]2[]].user: ${city} is not captured on every route to"
        " this stage: ask → again → answer reaches it without a pass of 'ask', which"
        " captures it*")])


# -- the machine drawn and printed ----------------------------------------------------------

def test_graph_draws_the_routes_between_the_stages(pytester: pytest.Pytester,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    file = pytester.makefile(".case.yaml", book=booking("chat", "http://127.0.0.1:9/v1"))
    assert main(["graph", str(file)]) == 0
    drawn = capsys.readouterr().out
    for line in ("stage0 --> stage1: fail", "stage0 --> stage2: pass",
                 "stage1 --> stage1: fail", "stage1 --> stage2: pass",
                 "stage2 --> ended: pass"):
        assert f"  {line}\n" in drawn, drawn
    assert 'state "end" as ended' in drawn


def test_dry_run_prints_the_routes_and_the_bound(pytester: pytest.Pytester) -> None:
    pytester.makefile(".case.yaml", book=booking("chat", "http://127.0.0.1:9/v1"))
    result = run(pytester, "--toolbench-dry-run", "--toolbench-live")
    result.stdout.fnmatch_lines([
        ("*routes (max_iterations 6): ask: pass → confirm, fail → clarify;"
        " clarify: pass → confirm, fail → clarify; confirm: pass → end*")])


def test_a_straight_case_shows_no_routes(pytester: pytest.Pytester) -> None:
    file = pytester.makefile(".case.yaml", book=booking("chat", "http://127.0.0.1:9/v1")
                             .replace("    next: {pass: confirm, fail: clarify}\n", "")
                             .replace("expect:\n  path: {$contains: [ask, confirm]}\n", ""))
    result = run(pytester, "--toolbench-dry-run", "--toolbench-live")
    result.stdout.fnmatch_lines([f"*{Path(file).name}::clarify_then_book*: ready"])
    assert "routes (" not in result.stdout.str()


# -- agent cases route the same way -----------------------------------------------------------

AGENT_CASE = """name: refund_routed
agent:
  python: FACTORY
  init: INIT
model: MODEL
endpoint: {base_url: "BASE_URL"}
max_iterations: 5
stages:
  - name: ask
    user: Refund my order, please.
    expect: {tool_calls: {$includes: [{name: issue_refund}]}}
    next: {pass: when, fail: clarify}
  - name: clarify
    user: It is order 913.
    expect: {tool_calls: {$includes: [{name: issue_refund, arguments: {order_id: "913"}}]}}
    next: {pass: when, fail: clarify}
  - name: when
    user: When will the money arrive?
    expect: {text: {$contains: days}}
expect:
  path: [ask, clarify, when]
  state: {refunds: ["913"]}
"""
AGENT_FRAMEWORKS = ("openai-chat", "openai-responses-stream", "anthropic", "gemini")
"""One agent of each wire API (its real SDK), through the plugin's proxy."""


@pytest.mark.parametrize("framework_id", AGENT_FRAMEWORKS)
def test_an_agent_case_takes_its_routes_live_and_replayed(
        pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, framework_id: str) -> None:
    from support.agents.frameworks import FRAMEWORKS, PLACEHOLDER_KEYS

    framework = next(f for f in FRAMEWORKS if f.id == framework_id)
    for name, value in PLACEHOLDER_KEYS.items():
        monkeypatch.setenv(name, value)
    model = ScriptedModel(says("Which order is it?"),
                          calls(("lookup_order", {"order_id": "913"})),
                          calls(("issue_refund", {"order_id": "913"})), says("Refunded."),
                          says("Within five working days."))
    with (GeminiServer() if framework.api == "gemini" else ChatServer()).start() as server:
        server.set_handler(model)
        pytester.makefile(".case.yaml", refund=AGENT_CASE.replace(
            "FACTORY", framework.factory).replace("INIT", json.dumps(framework.init)).replace(
            "MODEL", "gemini-2.5-flash" if framework.api == "gemini" else "test-model").replace(
            "BASE_URL", server.base_url))
        recorded, cases = report_of(pytester, "--toolbench-record")
        assert model.left == 0 and server.errors == []
    recorded.assert_outcomes(passed=1)
    assert cases[0]["runs"][0]["path"] == ["ask", "clarify", "when"]
    assert stages_of(cases[0])[0] == ("ask", "clarify", False, True)
    replayed, cases = report_of(pytester)
    replayed.assert_outcomes(passed=1)
    assert cases[0]["runs"][0]["path"] == ["ask", "clarify", "when"]


# -- the judge's verdict is the stage's ------------------------------------------------------

JUDGED = """
name: judged_route
model: agent-model
endpoint: {base_url: "URL"}
judge: {model: judge-model, endpoint: {base_url: "URL"}}
stages:
  - name: answer
    user: Refund order 913
    expect:
      text: {$contains: refund}
      judge: [Says the order was refunded]
    next: {pass: end, fail: apologise}
  - name: apologise
    user: You did not say whether it was refunded.
    expect: {text: {$contains: sorry}}
expect:
  path: [answer, apologise]
"""


def test_a_judge_that_fails_the_stage_takes_its_fail_route_live_and_replayed(
        pytester: pytest.Pytester, chat_server: ChatServer) -> None:
    from support.chat_server import completion, json_reply
    from support.second_models import Script, verdict

    script = Script(judge=[verdict("chat", "fail", "It never says the refund was issued.")],
                    model=[json_reply(completion("I looked at the refund form.")),
                           json_reply(completion("I am sorry: the refund is issued."))])
    chat_server.set_handler(script)
    pytester.makefile(".case.yaml", judged=JUDGED.replace("URL", chat_server.base_url))
    recorded, cases = report_of(pytester, "--toolbench-record")
    recorded.assert_outcomes(passed=1)
    assert script.left() == {}
    assert stages_of(cases[0])[:2] == [("answer", "apologise", False, True),
                                       ("apologise", "end", True, False)]
    chat_server.close()
    replayed, cases = report_of(pytester)
    replayed.assert_outcomes(passed=1)
    assert cases[0]["runs"][0]["path"] == ["answer", "apologise"]


def test_diff_shows_a_changed_route(pytester: pytest.Pytester, chat_server: ChatServer,
                                    capsys: pytest.CaptureFixture[str]) -> None:
    chat_server.set_handler(clarified_twice())
    pytester.makefile(".case.yaml", book=booking("chat", chat_server.base_url))
    report_of(pytester, "--toolbench-live")
    (pytester.path / "report.json").rename(pytester.path / "old.json")
    chat_server.set_handler(ScriptedModel(calls(("book_table", {"party": 2, "time": "20:00"})),
                                          says("Your table is booked.")))
    report_of(pytester, "--toolbench-live")[0].assert_outcomes(passed=1)
    main(["diff", str(pytester.path / "old.json"), str(pytester.path / "report.json")])
    shown = capsys.readouterr().out
    assert re.search(r"\n +path +ask → clarify → clarify → confirm -> ask → confirm\n", shown), \
        shown
