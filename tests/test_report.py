"""--toolbench-report: a JSON report of every case, model, stage and attempt (SPEC 9)."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import textwrap
from html import escape as html_escape
from pathlib import Path
from typing import Any

import pytest
from support.chat_server import (
    ChatServer,
    chunks_for,
    completion,
    json_reply,
    reset_reply,
    sse_reply,
    stall_reply,
)

from pytest_toolbench.report.provenance import answered_as
from pytest_toolbench.wire.stream import reported_model

CASES = """name: weather
model: [m1, m2]
endpoint: {{base_url: '{url}'}}
tools:
  - name: get_weather
    result: {{temp_c: 21}}
stages:
  - name: ask
    user: Weather in Paris?
    retry: {{attempts: 2}}
    expect:
      tool_calls: [{{name: get_weather, arguments: {{city: Paris}}}}]
---
name: chat
model: m1
endpoint: {{base_url: '{url}'}}
stages:
  - name: hello
    user: hi
    expect: {{text: hello}}
"""


def serve(server: ChatServer) -> None:
    def answer(request: Any) -> Any:
        body = request.json()
        if "tools" not in body:
            return json_reply(completion(text="hello"))
        city = "Lyon" if body["model"] == "m2" else "Paris"
        return json_reply(completion(tool_calls=[("get_weather", {"city": city})]))
    server.set_handler(answer)


def load(path: Path) -> dict[str, Any]:
    return json.loads(path.read_text(encoding="utf-8"))  # type: ignore[no-any-return]


def test_report_holds_every_case_stage_and_attempt(
    pytester: pytest.Pytester, chat_server: ChatServer
) -> None:
    serve(chat_server)
    pytester.makefile(".case.yaml", suite=CASES.format(url=chat_server.base_url))
    report = pytester.path / "out" / "report.json"
    result = pytester.runpytest("--toolbench-live", f"--toolbench-report={report}")
    result.assert_outcomes(passed=2, failed=1)
    document = load(report)
    assert document["version"] == 1
    assert document["summary"] == {"cases": 3, "failed": 1, "passed": 2}
    by_id = {case["nodeid"]: case for case in document["cases"]}
    assert set(by_id) == {"suite.case.yaml::weather[m1]", "suite.case.yaml::weather[m2]",
                          "suite.case.yaml::chat[m1]"}
    failed = by_id["suite.case.yaml::weather[m2]"]
    assert failed["outcome"] == "failed" and failed["model"] == "m2"
    attempts = failed["runs"][0]["stages"][0]["attempts"]
    assert [a["passed"] for a in attempts] == [False, False]
    call = attempts[0]["turns"][0]["reply"]["tool_calls"][0]
    assert call["name"] == "get_weather" and json.loads(call["arguments"]) == {"city": "Lyon"}
    assert attempts[0]["failures"][0]["line"] == 12
    assert "arguments.city" in attempts[0]["failures"][0]["message"]
    # The call the expectation saw, as data in the expectation's own shape (not a repr).
    assert attempts[0]["failures"][0]["actual"] == {"name": "get_weather",
                                                    "arguments": {"city": "Lyon"}}
    passed = by_id["suite.case.yaml::weather[m1]"]
    assert passed["total_tokens"] == 15 and passed["tool_calls"] == 1
    assert passed["latency_ms"] > 0
    assert attempts[0]["trail"] == ["idle", "sending", "receiving", "checking", "failed"]
    assert [p.name for p in report.parent.iterdir()] == ["report.json"]  # no temp file left


@pytest.mark.parametrize("verbosity", [[], ["-q"]], ids=["default", "quiet"])
def test_report_is_complete_under_xdist(
    pytester: pytest.Pytester, chat_server: ChatServer, verbosity: list[str]
) -> None:
    serve(chat_server)
    pytester.makefile(".case.yaml", suite=CASES.format(url=chat_server.base_url))
    report = pytester.path / "report.json"
    result = pytester.runpytest_subprocess("--toolbench-live", "-n", "2",
                                           f"--toolbench-report={report}", *verbosity)
    result.assert_outcomes(passed=2, failed=1)
    cases = load(report)["cases"]
    assert sorted(case["nodeid"] for case in cases) == [
        "suite.case.yaml::chat[m1]", "suite.case.yaml::weather[m1]",
        "suite.case.yaml::weather[m2]"]
    assert all(case["runs"][0]["stages"][0]["attempts"] for case in cases)


COUNT_RESULTS_KEPT = """\
import gc

from pytest_toolbench.records import CaseResult


def pytest_sessionfinish(session):
    gc.collect()
    kept = sum(isinstance(thing, CaseResult) for thing in gc.get_objects())
    session.config.stash_results_kept = kept


def pytest_terminal_summary(terminalreporter, config):
    terminalreporter.write_line(f"case results kept: {config.stash_results_kept}")
"""


def test_the_session_keeps_each_case_as_its_record_not_its_whole_result(
    pytester: pytest.Pytester, chat_server: ChatServer
) -> None:
    """The report holds everything of every case: the result it was made of (every reply,
    request and turn as objects) is not kept to the session's end beside it."""
    serve(chat_server)
    pytester.makeconftest(COUNT_RESULTS_KEPT)
    pytester.makefile(".case.yaml", suite=CASES.format(url=chat_server.base_url))
    report = pytester.path / "report.json"

    # Passing cases only, in a process of their own: pytest keeps the last failure's
    # exception (and so its result) for post-mortem debugging.
    result = pytester.runpytest_subprocess("--toolbench-live", f"--toolbench-report={report}",
                                           "-k", "not m2")

    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines(["*toolbench summary*", "*weather*passed*",
                                 "case results kept: 0"])
    sent = load(report)["cases"][0]["runs"][0]["stages"][0]["attempts"][0]["turns"][0]
    assert sent["request"]["messages"] == [{"role": "user", "content": "Weather in Paris?"}]


def test_quiet_runs_hide_the_summary_and_still_write_the_report(
    pytester: pytest.Pytester, chat_server: ChatServer
) -> None:
    """Under ``-q`` no summary is shown; the report file, when asked for, still holds every
    case in full."""
    serve(chat_server)
    pytester.makefile(".case.yaml", suite=CASES.format(url=chat_server.base_url))
    report = pytester.path / "report.json"

    result = pytester.runpytest("--toolbench-live", "-q", f"--toolbench-report={report}")

    result.assert_outcomes(passed=2, failed=1)
    assert "toolbench summary" not in result.stdout.str()
    document = load(report)
    assert document["summary"] == {"cases": 3, "failed": 1, "passed": 2}
    by_id = {case["nodeid"]: case for case in document["cases"]}
    turn = by_id["suite.case.yaml::chat[m1]"]["runs"][0]["stages"][0]["attempts"][0]["turns"][0]
    assert turn["reply"]["text"] == "hello"

    result = pytester.runpytest("--toolbench-live")  # without -q, the summary is there
    result.stdout.fnmatch_lines(["*toolbench summary*"])


@pytest.mark.parametrize("verbosity", [[], ["-q"]], ids=["default", "quiet"])
def test_junitxml_carries_figures_as_properties(
    pytester: pytest.Pytester, chat_server: ChatServer, verbosity: list[str]
) -> None:
    serve(chat_server)
    pytester.makefile(".case.yaml", suite=CASES.format(url=chat_server.base_url))
    junit = pytester.path / "junit.xml"
    pytester.runpytest("--toolbench-live", f"--junitxml={junit}", *verbosity)
    xml = junit.read_text(encoding="utf-8")
    assert '<testcase classname="suite.case.yaml" name="chat[m1]"' in xml
    assert '<property name="total_tokens" value="15" />' in xml
    assert '<property name="latency_ms" value="' in xml
    assert '<property name="tool_calls" value="1" />' in xml


# ---------------------------------------------------------------------------- failure text


def only_once(text: str, needle: str) -> None:
    assert text.count(needle) == 1, f"{needle!r} appears {text.count(needle)} times in:\n{text}"


def test_failure_text_is_one_verdict_then_the_transcript(
    pytester: pytest.Pytester, chat_server: ChatServer
) -> None:
    """A missing call and a failed operator: each said once, without a diff that repeats
    the message; counts in the transcript agree in number."""
    usage = {"prompt_tokens": 10, "completion_tokens": 40, "total_tokens": 50}
    chat_server.set_handler(lambda request: json_reply(completion(text="no tools", usage=usage)))
    pytester.makefile(".case.yaml", suite=f"""\
        name: calls
        endpoint: {{base_url: '{chat_server.base_url}'}}
        tools: [{{name: get_weather, result: {{temp_c: 21}}}}]
        stages:
          - name: ask
            user: Weather in Paris?
            expect:
              tool_calls: [{{name: get_weather}}]
              usage: {{total_tokens: {{$lte: 5}}}}
        """)
    result = pytester.runpytest("--toolbench-live")
    result.assert_outcomes(failed=1)
    out = result.stdout.str()
    result.stdout.fnmatch_lines([
        "suite.case.yaml:8: calls: stages[0].expect.tool_calls: expected 1 call, got 0",
        "suite.case.yaml:9: stages[0].expect.usage.total_tokens: expected <= 5, got 50",
        "",
        "--- stage 'ask': failed ---",
        "transcript:",
        "  > request 1: 1 message, last user: Weather in Paris?",
    ])
    only_once(out, "expected 1 call, got 0")
    only_once(out, "expected <= 5, got 50")
    assert "found no partner" not in out
    assert '"$lte"' not in out and "1 messages" not in out


@pytest.mark.parametrize(("expected", "calls", "diff"), [
    pytest.param("[{name: get_weather}]", [("get_time", {"city": "Paris"})],
                 ['  - expected: {"name": "get_weather"}', '  + actual:   {"name": "get_time"}'],
                 id="name"),
    pytest.param("[{arguments: {city: Paris}}]", [("get_weather", {"city": "Lyon"})],
                 ['  - expected: {"arguments": {"city": "Paris"}}',
                  '  + actual:   {"arguments": {"city": "Lyon"}}'],
                 id="arguments"),
    pytest.param("[{name: get_weather, arguments: {city: Paris}}]",
                 [("get_weather", '{"city": "Par')],  # not JSON: the text in its place
                 ['  - expected: {"arguments": {"city": "Paris"}, "name": "get_weather"}',
                  '  + actual:   {"arguments": "{\\"city\\": \\"Par", "name": "get_weather"}'],
                 id="not-json"),
    pytest.param("[{name: get_weather}]", [("get_weather", {"city": "Paris"}),
                                           ("get_time", {"city": "Paris"})],
                 ['  - expected: [{"name": "get_weather"}]',
                  '  + actual:   [{"name": "get_weather"}, {"name": "get_time"}]'],
                 id="count"),
])
def test_a_failing_tool_call_diff_compares_what_the_case_named(
    pytester: pytest.Pytester, chat_server: ChatServer, expected: str,
    calls: list[tuple[str, Any]], diff: list[str],
) -> None:
    chat_server.set_handler(lambda request: json_reply(completion(tool_calls=calls)))
    pytester.makefile(".case.yaml", suite=f"""\
        name: calls
        endpoint: {{base_url: '{chat_server.base_url}'}}
        tools: [{{name: get_weather}}, {{name: get_time}}]
        stages:
          - name: ask
            user: Weather in Paris?
            expect:
              tool_calls: {expected}
        """)
    result = pytester.runpytest("--toolbench-live")
    result.assert_outcomes(failed=1)
    shown = [line for line in result.outlines if line.startswith(("  - expected", "  + actual"))]
    assert shown == diff
    assert "arguments_raw" not in result.stdout.str()


def test_replay_mismatch_diff_is_printed_once_with_relative_paths(
    pytester: pytest.Pytester, chat_server: ChatServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    chat_server.set_handler(lambda request: json_reply(completion(text="hello")))
    case = """\
        name: greet
        endpoint: {{base_url: '{url}'}}
        stages:
          - name: ask
            user: {user}
        """
    suite = pytester.mkdir("suite")
    pytester.makeini("[pytest]\n")  # the rootdir is here; pytest is started one level down
    (suite / "greet.case.yaml").write_text(
        textwrap.dedent(case.format(url=chat_server.base_url, user="hi there")))
    pytester.runpytest("suite", "--toolbench-record").assert_outcomes(passed=1)
    (suite / "greet.case.yaml").write_text(
        textwrap.dedent(case.format(url=chat_server.base_url, user="hi here")))
    monkeypatch.chdir(suite)
    result = pytester.runpytest()
    result.assert_outcomes(failed=1)
    out = result.stdout.str()
    only_once(out, '-      "content": "hi there",')
    result.stdout.fnmatch_lines([
        ("greet.case.yaml:4: greet: stages[0]: replay: request 1 differs from the one recorded"
         " in __cassettes__/greet/greet.yaml; re-record with:"
         " pytest 'greet.case.yaml::greet' --toolbench-record"),
    ])
    assert str(pytester.path) not in out.split("= FAILURES =")[1]  # the header names the rootdir


# ---------------------------------------------------------------------------- retries


def test_transport_retries_show_when_the_last_attempt_passes(
    pytester: pytest.Pytester, chat_server: ChatServer
) -> None:
    chat_server.enqueue(reset_reply(), json_reply(completion(text="late")))
    pytester.makefile(".case.yaml", suite=f"""\
        name: flaky
        endpoint: {{base_url: '{chat_server.base_url}', retries: 1}}
        stages:
          - {{name: ask, user: hi, expect: {{text: never}}}}
        """)
    report = pytester.path / "r.json"
    result = pytester.runpytest("--toolbench-live", f"--toolbench-report={report}")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["    retry: attempt 1 failed (connection lost*); retried after *s"])
    turn = load(report)["cases"][0]["runs"][0]["stages"][0]["attempts"][0]["turns"][0]
    assert len(turn["retries"]) == 1 and turn["reply"]["text"] == "late"


def test_transport_retries_show_when_the_last_attempt_fails(
    pytester: pytest.Pytester, chat_server: ChatServer
) -> None:
    chat_server.set_handler(lambda request: reset_reply())
    pytester.makefile(".case.yaml", suite=f"""\
        name: down
        endpoint: {{base_url: '{chat_server.base_url}', retries: 2}}
        stages: [{{name: ask, user: hi}}]
        """)
    report = pytester.path / "r.json"
    result = pytester.runpytest("--toolbench-live", f"--toolbench-report={report}")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines([
        "    retry: attempt 1 failed (connection lost*); retried after *s",
        "    retry: attempt 2 failed (connection lost*); retried after *s",
        "  < no reply after *: connection lost*",
    ])
    turn = load(report)["cases"][0]["runs"][0]["stages"][0]["attempts"][0]["turns"][0]
    assert [line.split(" failed")[0] for line in turn["retries"]] == ["attempt 1", "attempt 2"]
    assert len(chat_server.requests) == 3


def test_stage_retries_show_every_attempt(
    pytester: pytest.Pytester, chat_server: ChatServer
) -> None:
    """Every attempt of a stage with ``retry``: the failed ones with their failures, the one
    that passed, in the transcript and in the report."""
    chat_server.enqueue(json_reply(completion(text="no")), json_reply(completion(text="yes")),
                        json_reply(completion(text="other")))
    pytester.makefile(".case.yaml", suite=f"""\
        name: retried
        endpoint: {{base_url: '{chat_server.base_url}'}}
        stages:
          - name: ask
            user: say yes
            retry: {{attempts: 3}}
            expect: {{text: "yes"}}
          - name: then
            user: go on
            expect: {{text: more}}
        """)
    report = pytester.path / "r.json"
    result = pytester.runpytest("--toolbench-live", f"--toolbench-report={report}")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines([
        "suite.case.yaml:10: retried: stages[1].expect.text: expected 'more', got 'other'",
        "--- stage 'ask' attempt 1/2: failed ---",
        "suite.case.yaml:7: stages[0].expect.text: expected 'yes', got 'no'",
        "transcript:",
        "*",
        "--- stage 'ask' attempt 2/2: passed ---",
        "*",
        "--- stage 'then': failed ---",
    ])
    stages = load(report)["cases"][0]["runs"][0]["stages"]
    assert [a["passed"] for a in stages[0]["attempts"]] == [False, True]


# ---------------------------------------------------------------------------- ${name}


def test_an_unset_environment_variable_points_at_its_line(
    pytester: pytest.Pytester, chat_server: ChatServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("TOOLBENCH_TEST_UNSET", raising=False)
    chat_server.set_handler(lambda request: json_reply(completion(text="hello")))
    pytester.makefile(".case.yaml", suite=f"""\
        name: envs
        endpoint: {{base_url: '{chat_server.base_url}'}}
        stages:
          - name: first
            user: hi
          - name: second
            retry: {{attempts: 3}}
            messages:
              - role: user
                content: "key ${{env.TOOLBENCH_TEST_UNSET}}"
        """)
    result = pytester.runpytest("--toolbench-live")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines([
        ("suite.case.yaml:10: envs: stages[1].messages[0].content:"
         " ${env.TOOLBENCH_TEST_UNSET}: environment variable 'TOOLBENCH_TEST_UNSET' is not set"),
    ])
    assert "attempt 2/" not in result.stdout.str()  # nothing was sent: no retry
    assert len(chat_server.requests) == 1


# ---------------------------------------------------------------------------- figures


def test_unknown_figures_are_dashes_and_nulls_not_zeros(
    pytester: pytest.Pytester, chat_server: ChatServer
) -> None:
    """A stream without usage has no token count; a request that timed out took time."""
    def answer(request: Any) -> Any:
        if request.json()["messages"][-1]["content"] == "stall":
            return stall_reply(2.0)
        return sse_reply(chunks_for(text="hello", usage=None))
    chat_server.set_handler(answer)
    pytester.makefile(".case.yaml", suite=f"""\
        name: no_usage
        endpoint: {{base_url: '{chat_server.base_url}'}}
        stages: [{{name: ask, user: hi, stream: true}}]
        ---
        name: timed_out
        endpoint: {{base_url: '{chat_server.base_url}', timeout_s: 0.3, retries: 0}}
        stages: [{{name: ask, user: stall}}]
        """)
    report, junit = pytester.path / "r.json", pytester.path / "j.xml"
    result = pytester.runpytest("--toolbench-live", f"--toolbench-report={report}",
                                f"--junitxml={junit}")
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.re_match_lines([
        r"^ no_usage +passed +1 +1 +0 +- +\d+ ms +\d+ ms *$",
        # at least the 0.3 s timeout; how much more depends on how busy the machine is
        r"^ timed_out +failed +1 +1 +0 +- +([3-9]\d\d ms|\d+\.\d\d s) +- *$",
    ])
    result.stdout.fnmatch_lines(["  < no reply after *: read timed out*"])
    cases = {case["case"]: case for case in load(report)["cases"]}
    assert cases["no_usage"]["total_tokens"] is None
    assert cases["timed_out"]["latency_ms"] >= 300
    turn = cases["timed_out"]["runs"][0]["stages"][0]["attempts"][0]["turns"][0]
    assert turn["elapsed_ms"] >= 300 and turn["reply"] is None
    xml = junit.read_text(encoding="utf-8")
    no_usage = xml[xml.index('name="no_usage"'):xml.index('name="timed_out"')]
    assert '<property name="ttft_ms"' in no_usage and "total_tokens" not in no_usage


def test_a_case_record_survives_the_trip_to_the_xdist_controller(
    pytester: pytest.Pytester, chat_server: ChatServer
) -> None:
    """Every record of a real run, made plain data and read back, is the same typed record."""
    from pytest_toolbench.report.json_report import CaseRecord

    chat_server.set_handler(lambda request: json_reply(completion("hi")))
    pytester.makefile(".case.yaml", suite=f"""\
        name: greet
        endpoint: {{base_url: '{chat_server.base_url}'}}
        stages:
          - {{name: ask, user: hi, expect: {{text: {{$regex: "^hi$"}}}}}}
          - {{name: again, user: hi, stream: both, expect: {{text: nope}}}}
        """)
    report = pytester.path / "report.json"
    pytester.runpytest("--toolbench-live", f"--toolbench-report={report}")

    (data,) = load(report)["cases"]
    record = CaseRecord.from_json(data)

    assert record.outcome == "failed" and record.runs[0].stages[1].passed is False
    assert record.to_json() == data
    assert CaseRecord.from_json(record.to_json()) == record


def test_numbers_strict_json_cannot_hold_are_written_as_their_repr(
        pytester: pytest.Pytester, chat_server: ChatServer) -> None:
    """A server that answers with ``Infinity`` (Python's json reads it): the failing value
    is reported as ``inf``, and the report stays strict JSON that any reader loads."""
    body = completion(text="hello", usage={"prompt_tokens": 1, "completion_tokens": 1,
                                           "total_tokens": 2})
    body["usage"]["total_tokens"] = float("inf")  # json.dumps writes Infinity
    chat_server.set_handler(lambda request: json_reply(body))
    pytester.makefile(".case.yaml", t=f"""\
name: endless
endpoint: {{base_url: '{chat_server.base_url}'}}
stages:
  - {{name: ask, user: hi, expect: {{usage: {{total_tokens: {{$lt: 100}}}}}}}}
""")
    report = pytester.path / "report.json"

    result = pytester.runpytest("--toolbench-live", f"--toolbench-report={report}")

    result.assert_outcomes(failed=1)
    text = report.read_text(encoding="utf-8")
    assert "Infinity" not in text

    def refuse(constant: str) -> None:
        raise AssertionError(f"not strict JSON: {constant}")

    data = json.loads(text, parse_constant=refuse)
    (failure,) = data["cases"][0]["runs"][0]["stages"][0]["attempts"][0]["failures"]
    assert failure["key_path"] == ["stages", 0, "expect", "usage", "total_tokens"]
    assert failure["actual"] == "inf"


def test_marks_registered_where_cases_are_collected_reach_the_report_under_xdist(
        pytester: pytest.Pytester) -> None:
    """import-bfcl's marks are registered by the worker that collects their cases; each
    record carries its marks from there to the controller that writes the report."""
    pytester.makefile(".case.yaml", b="name: c\nmarks: [bfcl, bfcl_simple]\n"
                                      "stages: [{name: s, user: hi}]\n")
    report = pytester.path / "report.json"

    result = pytester.runpytest_subprocess("-n", "2", f"--toolbench-report={report}",
                                           "-p", "no:cacheprovider", timeout=60)

    result.assert_outcomes(failed=1)  # no cassette: what matters here is the record
    (case,) = load(report)["cases"]
    assert case["marks"] == ["bfcl", "bfcl_simple"]


# ---------------------------------------------------------------------------- how it was made

ASKED = """name: versioned
model: m1
stages:
  - name: ask
    user: hi
---
name: swapped
model: big-model
stages:
  - name: ask
    user: hi
    stream: true
"""


def test_the_reports_say_how_they_were_made_and_which_model_answered(
        pytester: pytest.Pytester, chat_server: ChatServer,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A server answering as another model than the one asked is noted in the summary; one
    that names a version of the model asked is not."""
    def answer(request: Any) -> Any:
        if request.json().get("stream"):
            return sse_reply(chunks_for("hello", model="small-model"))
        return json_reply(completion("hello", model="m1-2026-01-01"))
    chat_server.set_handler(answer)
    pytester.makefile(".case.yaml", models=ASKED)
    url = chat_server.base_url.replace("http://", "http://probe:hunter2@")
    monkeypatch.setenv("TOOLBENCH_BASE_URL", url)
    report, page = pytester.path / "report.json", pytester.path / "report.html"
    result = pytester.runpytest("--toolbench-live", f"--toolbench-report={report}",
                                f"--toolbench-html={page}")
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines([("model mismatch: asked big-model, the server answered as"
                                  " small-model (1 case: swapped)")])
    assert "asked m1" not in result.stdout.str()
    document = load(report)
    run = document["run"]
    assert list(document) == ["version", "run", "summary", "cases"]
    assert run["mode"] == "live" and run["revision"] is None
    assert run["base_url"].endswith(chat_server.base_url.split("//")[1])
    assert "hunter2" not in json.dumps(document) and "hunter2" not in page.read_text()
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", run["started"])
    assert 0 < run["duration_s"] < 60
    models = {case["case"]: case["runs"][0]["stages"][0]["attempts"][0]["turns"][0]["reply"]
              ["model"] for case in document["cases"]}
    assert models == {"versioned": "m1-2026-01-01", "swapped": "small-model"}
    html = page.read_text()
    assert html_escape(f"live, answers from {run['base_url']}; started {run['started']}") in html
    assert "model: asked big-model, the server answered as small-model" in html


def test_the_report_names_the_repositorys_revision(pytester: pytest.Pytester) -> None:
    def git(*args: str) -> str:
        return subprocess.run(["git", *args], cwd=pytester.path, check=True, text=True,
                              capture_output=True, timeout=30).stdout.strip()
    shutil.copytree(Path(__file__).parents[1] / "cases", pytester.path / "cases")
    git("init", "-q")
    git("add", "cases")
    git("-c", "user.name=t", "-c", "user.email=t@example.com", "commit", "-qm", "cases")
    args = ("cases/text.case.yaml", "-p", "no:cacheprovider", "--toolbench-report=r.json")
    pytester.runpytest(*args).assert_outcomes(passed=3)
    run = load(pytester.path / "r.json")["run"]
    assert run["revision"] == git("rev-parse", "HEAD")
    assert run["mode"] == "replay" and run["base_url"] is None
    with (pytester.path / "cases" / "text.case.yaml").open("a") as case:
        case.write("# changed\n")
    pytester.runpytest(*args).assert_outcomes(passed=3)
    assert load(pytester.path / "r.json")["run"]["revision"] == git("rev-parse", "HEAD") + "+dirty"


@pytest.mark.parametrize(("payload", "model"), [
    ({"object": "chat.completion", "model": "gpt-4o-mini-2024-07-18"}, "gpt-4o-mini-2024-07-18"),
    ({"type": "response.created", "response": {"model": "gpt-4.1"}}, "gpt-4.1"),
    ({"type": "message_start", "message": {"model": "claude-sonnet-4-5"}}, "claude-sonnet-4-5"),
    ({"candidates": [], "modelVersion": "gemini-2.5-flash"}, "gemini-2.5-flash"),
    ({"type": "content_block_delta"}, None),
    (["not", "an", "object"], None),
])
def test_each_apis_reply_names_its_model_where_that_api_says_it(payload: Any,
                                                                 model: str | None) -> None:
    assert reported_model(payload) == model


@pytest.mark.parametrize(("asked", "reported", "same"), [
    ("gpt-4o-mini", "gpt-4o-mini", True),
    ("gpt-4o-mini", "gpt-4o-mini-2024-07-18", True),
    ("claude-sonnet-4-5", "claude-sonnet-4-5-20250929", True),
    ("gemini-2.0-flash", "models/gemini-2.0-flash-001", True),
    ("gemini-2.5-flash", "gemini-2.5-flash-preview-05-20", True),
    ("gemma-3-270m", "/models/gemma-3-270m-it-Q8_0.gguf", True),
    ("gpt-4o", "gpt-4o-mini", False),
    ("gpt-4o", "gpt-4o-mini-2024-07-18", False),
    ("big-model", "small-model", False),
    ("m1", "m10", False),
])
def test_a_versioned_name_of_the_model_asked_is_no_mismatch(asked: str, reported: str,
                                                             same: bool) -> None:
    assert answered_as(asked, reported) is same
