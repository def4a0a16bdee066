"""Faults on cue (docs/case-format.md#faults): a case recorded clean from a loopback server,
replayed with the faults its case, its file's defaults or ``--toolbench-fault`` names; the
agents' own SDKs (their retries, their errors) decide the verdicts.

Not to be confused with ``test_faults.py`` and ``test_agent_faults.py``: those are the
endpoint's and the agent's own misbehaviour, which the plugin copes with; these are faults
a case asks the plugin to inject.
"""

from __future__ import annotations

import gc
import json
import sys

import pytest
from support.agents.frameworks import FRAMEWORKS, PLACEHOLDER_KEYS, Framework
from support.chat_server import ChatServer
from support.gemini_server import GeminiServer
from support.scripted_model import ScriptedModel, calls, says

REFUND = (calls(("lookup_order", {"order_id": "913"})),
          calls(("issue_refund", {"order_id": "913"})),
          says("Order 913 is refunded: 42.5."))
CASE = """name: refund
agent:
  python: FACTORY
  init: INIT
model: MODEL
endpoint: {base_url: "BASE_URL"}
stages:
  - name: ask
    user: Refund order 913
FAULTS    expect:
EXPECT
"""
PASSING = """      tool_calls: [{name: lookup_order}, {name: issue_refund}]
      text: {$contains: refunded}
      state: {refunds: ["913"]}"""


def by_id(name: str) -> Framework:
    return next(framework for framework in FRAMEWORKS if framework.id == name)


def case_text(framework: Framework, base_url: str, faults: str = "",
              expect: str = PASSING) -> str:
    model = "gemini-2.5-flash" if framework.api == "gemini" else "test-model"
    return (CASE.replace("FACTORY", framework.factory).replace("MODEL", model)
            .replace("INIT", json.dumps(framework.init)).replace("BASE_URL", base_url)
            .replace("FAULTS", f"    faults: {faults}\n" if faults else "")
            .replace("EXPECT", expect))


def run(pytester: pytest.Pytester, *args: str) -> pytest.RunResult:
    result = pytester.runpytest("-p", "no:cacheprovider", "-p", "no:randomly", *args)
    gc.collect()
    return result


@pytest.fixture
def keys(monkeypatch: pytest.MonkeyPatch) -> None:
    for name, value in PLACEHOLDER_KEYS.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("OPENAI_AGENTS_DISABLE_TRACING", "1")


def record(pytester: pytest.Pytester, framework: Framework) -> None:
    """The refund case, recorded clean from the loopback server (gone after)."""
    server = GeminiServer() if framework.api == "gemini" else ChatServer()
    with server.start():
        server.set_handler(ScriptedModel(*REFUND))
        pytester.makefile(".case.yaml", refund=case_text(framework, server.base_url))
        recorded = run(pytester, "--toolbench-record")
        assert server.errors == []
    recorded.assert_outcomes(passed=1)


RETRIES: dict[str, bool] = {}
"""Whether a support agent's SDK retries a 429 or a dropped connection by itself: the
openai and anthropic SDKs (and the frameworks on the openai SDK) do, two times by default;
google-genai, unless it is given retry options, does not."""


def retries(framework: Framework) -> bool:
    return framework.api != "gemini"


MATRIX = [framework for framework in FRAMEWORKS if framework.id in (
    "openai-chat", "openai-chat-async-stream", "openai-responses", "openai-responses-stream",
    "anthropic-stream", "gemini", "openai-agents", "pydantic-ai")]


@pytest.mark.parametrize("framework", [pytest.param(f, marks=f.marks, id=f.id)
                                       for f in MATRIX])
def test_faults_replayed_into_a_clean_recording_meet_the_sdks_own_retries(
        framework: Framework, pytester: pytest.Pytester, keys: None) -> None:
    """Recorded once without faults; replayed under --toolbench-fault with the server gone:
    what the agent's SDK does about each fault is the verdict."""
    record(pytester, framework)
    rate_limited = run(pytester, "--toolbench-fault", "status=429,retry_after_s=0@1",
                       "--toolbench-report", "limited.json", "-rA")
    dropped = run(pytester, "--toolbench-fault", "disconnect@2", "-rA")
    malformed = run(pytester, "--toolbench-fault", "mutate=malformed_arguments@1", "-rA")

    if retries(framework):
        rate_limited.assert_outcomes(passed=1)
        dropped.assert_outcomes(passed=1)
    else:  # the agent raised the SDK's error for the real service's 429
        rate_limited.assert_outcomes(failed=1)
        rate_limited.stdout.fnmatch_lines(["*the agent raised*429*RESOURCE_EXHAUSTED*"])
        dropped.assert_outcomes(failed=1)
    rate_limited.stdout.fnmatch_lines(
        ["*injected fault (--toolbench-fault 1): status 429 (retry-after 0 s)*"]
        if not retries(framework) else ["*1 passed*"])
    turns = [turn for case in json.loads((pytester.path / "limited.json").read_text())["cases"]
             for run_ in case["runs"] for stage in run_["stages"]
             for attempt in stage["attempts"] for turn in attempt["turns"]]
    assert turns[0]["fault"]["injected"] is True
    assert turns[0]["fault"]["kind"] == "status" and turns[0]["reply"]["status"] == 429
    assert [turn["fault"] for turn in turns[1:]] == [None] * (len(turns) - 1)
    assert len(turns) == (4 if retries(framework) else 1)
    # Arguments that are not JSON: the agent tells its model so, a request the clean
    # recording never saw (or its SDK refuses the reply): the case fails, naming the fault.
    malformed.assert_outcomes(failed=1)
    malformed.stdout.fnmatch_lines([("*injected fault (--toolbench-fault 1):"
                                    " mutate: malformed_arguments*")])


def test_a_cut_stream_is_what_the_agent_raises_and_expect_error_matches_it(
        pytester: pytest.Pytester, keys: None) -> None:
    framework = by_id("openai-chat-async-stream")
    record(pytester, framework)
    cut = run(pytester, "--toolbench-fault", "cut=1@1", "-rA")
    pytester.makefile(".case.yaml", refund=case_text(
        framework, "http://127.0.0.1:9/v1", "[{request: 1, cut: {after_chunks: 1}}]",
        "      error: {$regex: '(?i)(peer closed|incomplete|connection)'}\n      requests: 1"))
    expected = run(pytester, "-rA")
    pytester.makefile(".case.yaml", refund=case_text(
        framework, "http://127.0.0.1:9/v1", "[{request: 3, delay: {first_byte_ms: 1}}]",
        "      error: {$contains: Connection}"))
    returned = run(pytester)  # slowed, not broken: the agent answers

    cut.assert_outcomes(failed=1)
    cut.stdout.fnmatch_lines(["*the agent raised*", "*injected fault*cut after 1 chunks*"])
    expected.assert_outcomes(passed=1)
    returned.assert_outcomes(failed=1)
    returned.stdout.fnmatch_lines([("*the agent returned 'Order 913 is refunded: 42.5.',"
                                   " but expect.error says it must raise*")])
    # The stage's own fault selected nothing: the stage sent fewer requests than it names.
    pytester.makefile(".case.yaml", refund=case_text(
        framework, "http://127.0.0.1:9/v1", "[{request: 9, status: 500}]"))
    unselected = run(pytester)
    unselected.assert_outcomes(failed=1)
    unselected.stdout.fnmatch_lines([("*fault 1 of stage ask selected nothing: the stage"
                                     " sent 3 requests*")])


def test_a_naive_agent_gives_up_on_an_overload_and_says_so(
        pytester: pytest.Pytester, keys: None) -> None:
    """The issue's second case: a 529 in Anthropic's shape, the agent (no retries of its
    SDK's) raises the SDK's class for it, and expect.error holds."""
    framework = by_id("anthropic-stream")
    record(pytester, framework)
    pytester.makefile(".case.yaml", refund=case_text(
        framework, "http://127.0.0.1:9", "[{request: 1, status: 529}, {request: 2, status: 529},"
        " {request: 3, status: 529}]", "      error: {$contains: overloaded}\n      requests: 3"))
    result = run(pytester, "-rA")
    result.assert_outcomes(passed=1)


BROKEN = """name: broken
agent: {python: support.agents.openai_chat:make_agent}
faults: [{status: 200}]
stages:
  - name: ask
    user: hi
    faults:
      - {request: 0, status: 429}
      - {foo: 1}
      - {rate: 0.5, cut: {after_chunks: 2}}
      - {status: 429, disconnect: true}
---
name: a_model_case
model: m
stages:
  - name: ask
    user: hi
    faults: [{request: 1, cut: {after_chunks: 1}}]
"""


def test_every_fault_key_is_checked_at_its_line(pytester: pytest.Pytester) -> None:
    path = pytester.makefile(".case.yaml", broken=BROKEN)
    result = pytester.run(sys.executable, "-m", "pytest_toolbench.commands.cli", "validate",
                          str(path))
    assert result.ret != 0
    result.stdout.fnmatch_lines([
        "*broken.case.yaml:3: faults[[]0[]].status: *429, 500, 502, 503, 504 or 529*",
        "*broken.case.yaml:8: stages[[]0[]].faults[[]0[]].request: *greater than or equal to 1*",
        "*broken.case.yaml:9: *unknown fault key 'foo'*",
        "*broken.case.yaml:10: *rate needs a seed*",
        "*broken.case.yaml:11: *exactly one of status, disconnect*got status, disconnect*",
    ])
    # A model case takes every kind too (its transport injects them).
    assert "broken.case.yaml:18" not in result.stdout.str()


def test_a_bad_fault_flag_is_a_usage_error(pytester: pytest.Pytester) -> None:
    pytester.makefile(".case.yaml", one="name: one\nmodel: m\nstages: [{name: a, user: hi}]\n")
    for flag, said in (("status=200@1", "*--toolbench-fault 'status=200@1': status: *529*"),
                       ("cut@2", "*'cut' has no value*"),
                       ("status=429,rate=0.5", "*rate needs a seed*"),
                       ("rate=0.5", "*the fault: a fault has exactly one of status*got none*")):
        result = pytester.runpytest("-p", "no:cacheprovider", "--toolbench-fault", flag)
        assert result.ret == pytest.ExitCode.USAGE_ERROR
        result.stderr.fnmatch_lines([said])


def test_defaults_faults_come_before_the_cases_own(pytester: pytest.Pytester,
                                                    keys: None) -> None:
    """A defaults document's faults reach every case of the file; a stage's fault that
    selects the same request wins (the stage's own first)."""
    framework = by_id("openai-chat")
    record(pytester, framework)
    text = case_text(framework, "http://127.0.0.1:9/v1", "[{request: 1, status: 503}]",
                     PASSING + "\n      requests: 5")
    pytester.makefile(".case.yaml", refund="defaults:\n  faults: [{request: 1, status: 500},"
                      " {request: 2, status: 502}]\n---\n" + text)
    result = run(pytester, "--toolbench-report", "report.json")
    result.assert_outcomes(passed=1)
    turns = [turn["fault"] for case in json.loads((pytester.path / "report.json").read_text())[
        "cases"] for run_ in case["runs"] for stage in run_["stages"]
        for attempt in stage["attempts"] for turn in attempt["turns"]]
    assert [(fault or {}).get("does") for fault in turns] == [
        "status 503", "status 502", None, None, None]
    assert [(fault or {}).get("source") for fault in turns[:2]] == [
        "fault 1 of stage ask", "fault 2 of the case"]


def test_the_dry_run_lists_each_items_fault_plan_and_diff_shows_the_faults(
        pytester: pytest.Pytester, keys: None) -> None:
    framework = by_id("openai-chat")
    record(pytester, framework)
    pytester.makefile(".case.yaml", refund=case_text(
        framework, "http://127.0.0.1:9/v1", "[{request: 1, status: 429, retry_after_s: 0}]"))
    planned = run(pytester, "--toolbench-dry-run", "--toolbench-fault", "cut=2,api=chat@3")
    planned.stdout.fnmatch_lines([
        "*refund*: ready",
        ("*injected fault: stage ask: fault 1 of stage ask: status 429 (retry-after 0 s)"
        " at request 1"),
        ("*injected fault: stage ask: --toolbench-fault 1: cut after 2 chunks at request 3"
        " of chat")])
    run(pytester, "--toolbench-report", "faulted.json").assert_outcomes(passed=1)
    pytester.makefile(".case.yaml", refund=case_text(framework, "http://127.0.0.1:9/v1"))
    run(pytester, "--toolbench-report", "clean.json").assert_outcomes(passed=1)
    diff = pytester.run(sys.executable, "-m", "pytest_toolbench.commands.cli", "diff",
                        "clean.json", "faulted.json")
    diff.stdout.fnmatch_lines([("*fault*ask: injected none -> status 429 (retry-after 0 s)"
                               " at request 1*")])


PLAIN_SDKS = [framework for framework in FRAMEWORKS if framework.id in (
    "openai-chat", "openai-chat-async-stream", "openai-responses", "openai-responses-stream",
    "anthropic-stream", "anthropic", "gemini", "gemini-stream")]


CUT_SHORT = {
    # The SDK's stream helper refuses a completion cut by its length limit.
    "openai-chat-async-stream": "*the agent raised LengthFinishReasonError*",
    # The agent itself wants response.completed, and got response.incomplete.
    "openai-responses-stream": "*the agent raised RuntimeError: the stream ended without"
                               " response.completed*"}
"""What an agent does with a reply truncated at its length limit, when it is not to answer
with the half it got."""


@pytest.mark.parametrize("framework", [pytest.param(f, marks=f.marks, id=f.id)
                                       for f in PLAIN_SDKS])
def test_a_reply_mutated_in_its_apis_shape_is_read_by_its_sdk(
        framework: Framework, pytester: pytest.Pytester, keys: None) -> None:
    """Whole or streamed, the changed reply is one the SDK reads: the agent answers with
    what it got (half the text; no text), or answers a tool it was not offered, which sends
    a request the clean recording never saw: the failure names the fault before it."""
    record(pytester, framework)
    truncated = run(pytester, "--toolbench-fault", "mutate=truncated@3")
    emptied = run(pytester, "--toolbench-fault", "mutate=empty@3")
    renamed = run(pytester, "--toolbench-fault", "mutate=unknown_tool@1")

    truncated.assert_outcomes(failed=1)
    truncated.stdout.fnmatch_lines([CUT_SHORT.get(framework.id,
                                                  "*refund.case.yaml:12*text*'Order 913 is r'*")])
    emptied.assert_outcomes(failed=1)
    emptied.stdout.fnmatch_lines(["*refund.case.yaml:12*text*''*"])
    renamed.assert_outcomes(failed=1)
    renamed.stdout.fnmatch_lines(["*differs from the one recorded*",
                                  ("*the fault injected just before: --toolbench-fault 1,"
                                  " mutate: unknown_tool at request 1*")])


MODEL_CASE = """name: hello
model: MODEL
endpoint: {base_url: "BASE_URL", apis: [APIS]}
stages:
  - name: ask
    user: Say hello
    faults: FAULTS
    expect: EXPECT
"""


def model_case(base_url: str, apis: str, model: str = "test-model", faults: str = "[]",
               expect: str = "{text: {$contains: Hello}}") -> str:
    return (MODEL_CASE.replace("BASE_URL", base_url).replace("APIS", apis)
            .replace("MODEL", model).replace("FAULTS", faults).replace("EXPECT", expect))


@pytest.mark.parametrize("apis", ["chat, responses, messages", "gemini"])
def test_a_model_case_puts_the_plugins_own_retries_under_test(
        apis: str, pytester: pytest.Pytester, keys: None) -> None:
    """The plugin's own transport meets the faults: it retries a 429 and a dropped
    connection (its retries say each), and gives up on a 503 that lasts, which the
    stage's expect can name."""
    server = GeminiServer() if apis == "gemini" else ChatServer()
    count = len(apis.split(","))
    model = "gemini-2.5-flash" if apis == "gemini" else "test-model"
    with server.start():
        server.set_handler(ScriptedModel(*[says("Hello there.")] * count))
        pytester.makefile(".case.yaml", hello=model_case(server.base_url, apis, model))
        run(pytester, "--toolbench-record").assert_outcomes(passed=count)
    dead = "http://127.0.0.1:9/v1"
    pytester.makefile(".case.yaml", hello=model_case(
        dead, apis, model, "[{request: 1, status: 429, retry_after_s: 0}, {request: 2,"
        " disconnect: true}]"))
    retried = run(pytester, "--toolbench-report", "retried.json", "-rA")
    pytester.makefile(".case.yaml", hello=model_case(dead, apis, model, "[{status: 503}]"))
    down = run(pytester, "-rA")
    pytester.makefile(".case.yaml", hello=model_case(
        dead, apis, model, "[{status: 503}]",
        "{status: 503, error: {$contains: Service unavailable}}"))
    expected = run(pytester)

    retried.assert_outcomes(passed=count)
    turns = [turn for case in json.loads((pytester.path / "retried.json").read_text())["cases"]
             for run_ in case["runs"] for stage in run_["stages"]
             for attempt in stage["attempts"] for turn in attempt["turns"]]
    assert len(turns) == count
    for turn in turns:
        assert turn["reply"]["status"] == 200
        assert turn["fault"]["kind"] == "disconnect" and turn["fault"]["request"] == 2
        assert len(turn["retries"]) == 2
        assert "HTTP 429" in turn["retries"][0] and "injected" in turn["retries"][0]
        assert "closed with no reply" in turn["retries"][1]
    down.assert_outcomes(failed=count)
    down.stdout.fnmatch_lines([("*status*503*Service unavailable (HTTP 503, a fault injected"
                               " by pytest-toolbench)*")])
    expected.assert_outcomes(passed=count)


def test_repeat_with_a_rate_fault_gives_the_same_resilience_rate_in_every_session(
        pytester: pytest.Pytester, keys: None) -> None:
    """A rate picks by its seed, the run and the request: each run of a repeat draws its
    own requests, and a second session draws the same ones. The Gemini agent's SDK does
    not retry, so a run whose requests draw a 500 fails: 2 runs of 4 pass with seed 1."""
    framework = by_id("gemini")
    repeated = "model: MODEL\nrepeat: {runs: 4, min_pass_rate: 0.5}\n"
    server = GeminiServer()
    with server.start():
        server.set_handler(ScriptedModel(*REFUND * 4))
        pytester.makefile(".case.yaml", refund=case_text(
            framework, server.base_url).replace("model: gemini-2.5-flash\n", repeated.replace(
                "MODEL", "gemini-2.5-flash")))
        run(pytester, "--toolbench-record").assert_outcomes(passed=1)
    figures = []
    for report in ("first.json", "second.json"):
        run(pytester, "--toolbench-fault", "status=500,rate=0.2,seed=1",
            "--toolbench-report", report).assert_outcomes(passed=1)
        case = json.loads((pytester.path / report).read_text())["cases"][0]
        figures.append((case["passes"], case["runs_total"], case["pass_hat_k"],
                        [run_["passed"] for run_ in case["runs"]]))
    assert figures[0] == figures[1] == (2, 4, 0.0, [False, True, True, False])
