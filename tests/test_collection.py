"""Collection of case files through pytester: items, selection, junit, collection errors.

Cases that must run talk to the loopback ``chat_server`` in live mode; its handler echoes
the last user message, so every case gets its own answer whatever order cases run in.
"""

from __future__ import annotations

import textwrap
import xml.etree.ElementTree as ET

import pytest
from support.chat_server import (
    ChatServer,
    RecordedRequest,
    Reply,
    chunks_for,
    completion,
    json_reply,
    sse_reply,
)


def echo(request: RecordedRequest) -> Reply:
    """Answer with the last user message's text, streamed when the request asks for it."""
    body = request.json()
    text = body["messages"][-1]["content"]
    if body.get("stream"):
        return sse_reply(chunks_for(text))
    return json_reply(completion(text))


def case(name: str, base_url: str, text: str = "hello", expect: str = "hello",
         extra: str = "") -> str:
    """One case document whose single stage sends ``text`` and expects ``expect`` back."""
    return textwrap.dedent(f"""\
        name: {name}
        endpoint: {{base_url: "{base_url}", retries: 0, timeout_s: 2}}
        {extra}
        stages:
          - name: ask
            user: {text}
            expect: {{text: {expect}}}
        """)


@pytest.fixture
def echoing(chat_server: ChatServer) -> ChatServer:
    chat_server.set_handler(echo)
    return chat_server


def test_one_item_per_case_and_model_and_yml_files(pytester: pytest.Pytester) -> None:
    pytester.makefile(".case.yaml", cases=textwrap.dedent("""\
        name: weather
        model: [small, large]
        stages: [{name: ask, user: hi}]
        ---
        name: plain
        stages: [{name: ask, user: hi}]
        """))
    pytester.makefile(".case.yml", other="name: short_ext\nstages: [{name: ask, user: hi}]\n")
    pytester.makefile(".yaml", notacase="name: ignored\nstages: [{name: ask, user: hi}]\n")

    result = pytester.runpytest("--collect-only", "-q")

    result.stdout.fnmatch_lines([
        "cases.case.yaml::weather[small]",
        "cases.case.yaml::weather[large]",
        "cases.case.yaml::plain",
        "other.case.yml::short_ext",
        "4 tests collected*",
    ])
    assert "ignored" not in result.stdout.str()
    assert result.ret == pytest.ExitCode.OK


def test_ini_toolbench_files_changes_the_globs(pytester: pytest.Pytester) -> None:
    pytester.makeini("[pytest]\ntoolbench_files =\n    *.tb.yaml\n")
    pytester.makefile(".tb.yaml", mine="name: chosen\nstages: [{name: ask, user: hi}]\n")
    pytester.makefile(".case.yaml", usual="name: default_glob\nstages: [{name: ask, user: hi}]\n")

    result = pytester.runpytest("--collect-only", "-q")

    result.stdout.fnmatch_lines(["mine.tb.yaml::chosen", "1 test collected*"])
    assert "default_glob" not in result.stdout.str()

    # The command line wins over the ini, and takes several globs separated by commas.
    result = pytester.runpytest("--collect-only", "-q", "--toolbench-files=*.case.yaml, x.*")
    result.stdout.fnmatch_lines(["usual.case.yaml::default_glob", "1 test collected*"])



def test_cassette_folders_are_not_collected(pytester: pytest.Pytester) -> None:
    """Cassettes are data: a test module or case file left in a ``__cassettes__`` folder
    is not collected, and pytest does not walk the folders at all."""
    pytester.makefile(".case.yaml", cases="name: kept\nstages: [{name: ask, user: hi}]\n")
    stray = pytester.mkdir("__cassettes__") / "cases"
    stray.mkdir()
    (stray / "stray.case.yaml").write_text("name: stray\nstages: [{name: ask, user: hi}]\n")
    (stray / "test_stray.py").write_text("def test_stray():\n    pass\n")
    (pytester.path / "test_beside.py").write_text("def test_beside():\n    pass\n")

    result = pytester.runpytest("--collect-only", "-q")

    result.stdout.fnmatch_lines(["cases.case.yaml::kept", "test_beside.py::test_beside",
                                 "2 tests collected*"])
    assert "stray" not in result.stdout.str()
    assert result.ret == pytest.ExitCode.OK

def test_marks_select_skip_and_xfail(pytester: pytest.Pytester, echoing: ChatServer) -> None:
    pytester.makeini("[pytest]\nmarkers =\n    smoke: quick checks\n    slow: long ones\n")
    url = echoing.base_url
    pytester.makefile(".case.yaml", marked="---\n".join([
        case("fast_one", url, extra="marks: [smoke]"),
        case("slow_one", url, extra="marks: [slow]"),
        case("skipped_one", url, extra='marks: [smoke, {skip: "not today"}]'),
        case("expected_to_fail", url, expect="goodbye",
             extra='marks: [smoke, {xfail: "flaky on small models"}]'),
    ]))

    result = pytester.runpytest("--toolbench-live", "--strict-markers", "-m", "smoke", "-rsx")

    result.assert_outcomes(passed=1, skipped=1, xfailed=1, deselected=1)
    result.stdout.fnmatch_lines([
        "SKIPPED*marked.case.yaml*not today",
        "XFAIL*marked.case.yaml::expected_to_fail*flaky on small models",
    ])
    sent = [request.json()["messages"][-1]["content"] for request in echoing.requests]
    assert sent == ["hello", "hello"]  # skipped and deselected cases sent nothing


def test_unregistered_mark_fails_under_strict_markers(pytester: pytest.Pytester) -> None:
    pytester.makefile(".case.yaml", c=case("marked", "http://127.0.0.1:9",
                                           extra="marks: [nosuchmark]"))

    result = pytester.runpytest("--strict-markers", "--collect-only")

    result.stdout.fnmatch_lines(["*'nosuchmark' not found in `markers` configuration option*"])
    assert result.ret != pytest.ExitCode.OK


def test_k_selects_by_case_name(pytester: pytest.Pytester, echoing: ChatServer) -> None:
    url = echoing.base_url
    pytester.makefile(".case.yaml", c="---\n".join(
        [case("paris_weather", url), case("rome_weather", url), case("greeting", url)]))

    result = pytester.runpytest("--toolbench-live", "-v", "-k", "weather and not rome")

    result.assert_outcomes(passed=1, deselected=2)
    result.stdout.fnmatch_lines(["c.case.yaml::paris_weather PASSED*"])
    assert len(echoing.requests) == 1


def test_last_failed_reruns_only_the_failed_case(pytester: pytest.Pytester,
                                                  echoing: ChatServer) -> None:
    url = echoing.base_url
    pytester.makefile(".case.yaml", c="---\n".join(
        [case("good", url), case("bad", url, expect="nope"), case("also_good", url)]))
    first = pytester.runpytest("--toolbench-live")
    first.assert_outcomes(passed=2, failed=1)

    second = pytester.runpytest("--toolbench-live", "--lf", "-v")

    second.assert_outcomes(failed=1)
    second.stdout.fnmatch_lines(["run-last-failure: rerun previous 1 failure*",
                                 "c.case.yaml::bad FAILED*"])
    assert "::good" not in second.stdout.str()


def test_x_stops_after_the_first_failure(pytester: pytest.Pytester, echoing: ChatServer) -> None:
    url = echoing.base_url
    pytester.makefile(".case.yaml", c="---\n".join(
        [case("first", url), case("broken", url, expect="nope"), case("never", url)]))

    result = pytester.runpytest("--toolbench-live", "-x", "-v")

    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(["*stopping after 1 failures*"])
    assert "c.case.yaml::never" not in result.stdout.str()


def test_junitxml_has_the_items_and_their_figures(pytester: pytest.Pytester,
                                                  echoing: ChatServer) -> None:
    url = echoing.base_url
    streamed = textwrap.dedent(f"""\
        name: streamed
        endpoint: {{base_url: "{url}", retries: 0}}
        stages:
          - name: ask
            user: hi there
            stream: true
            expect: {{text: hi there}}
        """)
    pytester.makefile(".case.yaml", c="---\n".join([case("plain", url), streamed]))

    result = pytester.runpytest("--toolbench-live", "--junitxml=out.xml")

    result.assert_outcomes(passed=2)
    root = ET.parse(pytester.path / "out.xml").getroot()
    cases = {tc.get("name"): tc for tc in root.iter("testcase")}
    assert set(cases) == {"plain", "streamed"}
    assert {tc.get("classname") for tc in cases.values()} == {"c.case.yaml"}
    properties = {name: {p.attrib["name"]: p.attrib["value"] for p in tc.iter("property")}
                  for name, tc in cases.items()}
    assert properties["plain"]["total_tokens"] == "15"  # the server's usage figure
    assert float(properties["plain"]["latency_ms"]) > 0
    assert "ttft_ms" not in properties["plain"]
    assert float(properties["streamed"]["ttft_ms"]) > 0
    assert float(properties["streamed"]["latency_ms"]) >= float(properties["streamed"]["ttft_ms"])


# -- collection errors -------------------------------------------------------------------

BROKEN = {
    "yaml_syntax": (
        """\
        name: x
        stages:
          - name: ask
            user: hi
           wrong: indent
        """,
        ["*bad.case.yaml:5: YAML syntax error: *"],
    ),
    "unterminated_quote": (  # at the line where the quote opens, not the end of the file
        """\
        name: x
        stages:
          - name: ask
            user: hi
            expect: {text: "21}
            stream: false
        """,
        ["*bad.case.yaml:5: YAML syntax error: a quote opens here and is never closed"],
    ),
    "wrong_type": (
        """\
        name: x
        stages:
          - name: ask
            user: hi
            max_turns: many
        """,
        ["*bad.case.yaml:5: stages[[]0[]].max_turns: *valid integer*"],
    ),
    "unknown_key": (
        """\
        name: x
        stages:
          - name: ask
            user: hi
            expect:
              tool_call: []
        """,
        [("*bad.case.yaml:6: stages[[]0[]].expect.tool_call: unknown key 'tool_call'"
         " (did you mean 'tool_calls'?)")],
    ),
    "duplicate_case_name": (
        """\
        name: twin
        stages: [{name: ask, user: hi}]
        ---
        name: twin
        stages: [{name: ask, user: hi}]
        """,
        ["*bad.case.yaml:4: name: duplicate case name 'twin'"],
    ),
    "duplicate_stage_name": (
        """\
        name: x
        stages:
          - name: ask
            user: hi
          - name: ask
            user: again
        """,
        ["*bad.case.yaml:5: stages[[]1[]].name: duplicate stage name 'ask'"],
    ),
    "bad_regex": (
        """\
        name: x
        stages:
          - name: ask
            user: hi
            expect:
              text: {$regex: "(unclosed"}
        """,
        ["*bad.case.yaml:6: stages[[]0[]].expect.text.$regex: bad regex '(unclosed': *"],
    ),
    "bad_schema": (
        """\
        name: x
        stages:
          - name: ask
            user: hi
            expect:
              tool_calls:
                - name: get_weather
                  arguments: {$schema: {type: 12}}
        """,
        [("*bad.case.yaml:8: stages[[]0[]].expect.tool_calls[[]0[]].arguments.$schema*"
         "invalid JSON Schema*")],
    ),
    "operators_mixed_with_keys": (
        """\
        name: x
        stages:
          - name: ask
            user: hi
            expect:
              usage: {$len: 3, total_tokens: 5}
        """,
        [("*bad.case.yaml:6: stages[[]0[]].expect.usage: cannot mix operators ($len) with"
         " plain keys ('total_tokens')*")],
    ),
    "python_tool_does_not_import": (
        """\
        name: x
        tools:
          - name: lookup
            python: no_such_module_zz:lookup
        stages: [{name: ask, user: hi}]
        """,
        [("*bad.case.yaml:4: tools[[]0[]].python: cannot import 'no_such_module_zz':"
         " No module named 'no_such_module_zz'; *add a conftest.py*")],
    ),
}


@pytest.mark.parametrize("kind", list(BROKEN))
def test_collection_error_names_file_line_and_key_path(pytester: pytest.Pytester,
                                                       kind: str) -> None:
    content, expected = BROKEN[kind]
    pytester.makefile(".case.yaml", bad=textwrap.dedent(content))
    pytester.makefile(".case.yaml", good="name: fine\nstages: [{name: ask, user: hi}]\n")

    result = pytester.runpytest("--collect-only")

    result.stdout.fnmatch_lines(["*ERROR collecting bad.case.yaml*", "1 problem in case file",
                                 *expected])
    result.assert_outcomes(errors=1)
    output = result.stdout.str() + result.stderr.str()
    assert "Traceback" not in output
    assert "pytest_toolbench" not in output  # no frame of the plugin's own code
    assert ".py:" not in output


def test_all_problems_of_a_file_are_listed_in_file_order(pytester: pytest.Pytester) -> None:
    pytester.makefile(".case.yaml", bad=textwrap.dedent("""\
        name: x
        stages:
          - name: ask
            usr: hi
            expect:
              text: {$regex: "["}
        """))

    result = pytester.runpytest("--collect-only")

    result.stdout.fnmatch_lines([
        "2 problems in case file",
        "*bad.case.yaml:4: stages[[]0[]].usr: unknown key 'usr' (did you mean 'user'?)",
        "*bad.case.yaml:6: stages[[]0[]].expect.text.$regex: bad regex '[[]': *",
    ])


REPORT_IMPORTS = """\
import sys


def pytest_terminal_summary(terminalreporter):
    for name in ("jsonschema", "regex"):
        terminalreporter.write_line(f"{name} imported: {name in sys.modules}")
"""


@pytest.mark.parametrize(("expect", "jsonschema", "regex"), [
    ('{$regex: "(?i)^HELLO$"}', False, False),  # re searches it: its work is bounded
    ('{$regex: "^hel+o$"}', False, True),  # a repetition: the regex package, timed
    ("{$schema: {type: string}}", True, True),
])
def test_heavy_matcher_libraries_are_imported_only_by_the_matchers_that_need_them(
        pytester: pytest.Pytester, echoing: ChatServer, expect: str, jsonschema: bool,
        regex: bool) -> None:
    pytester.makeconftest(REPORT_IMPORTS)
    pytester.makefile(".case.yaml", cases=case("one", echoing.base_url, expect=expect))

    result = pytester.runpytest_subprocess("--toolbench-live", "-p", "no:cacheprovider")

    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines([f"jsonschema imported: {jsonschema}",
                                 f"regex imported: {regex}"])


PLUGIN_IMPORTS = """\
import sys


def pytest_terminal_summary(terminalreporter):
    ours = sorted(name for name in sys.modules if name.startswith("pytest_toolbench."))
    terminalreporter.write_line(f"toolbench modules: {' '.join(ours)}")
"""


def test_a_session_without_case_files_loads_only_the_plugin_and_its_settings(
        pytester: pytest.Pytester) -> None:
    """The plugin's machinery (pydantic models, YAML, the runner, the report records) comes
    with the first case file; pluggy reading the plugin's attributes must not bring it."""
    pytester.makeconftest(PLUGIN_IMPORTS)
    pytester.makepyfile(test_plain="def test_plain():\n    assert True\n")

    result = pytester.runpytest_subprocess("-p", "no:cacheprovider")

    result.assert_outcomes(passed=1)
    line = next(line for line in result.stdout.lines if line.startswith("toolbench modules:"))
    loaded = set(line.split(":", 1)[1].split())
    assert "pytest_toolbench.plugin" in loaded
    assert loaded.isdisjoint({"pytest_toolbench.items", "pytest_toolbench.casefile.schema",
                              "pytest_toolbench.report.json_report", "pytest_toolbench.session"})
