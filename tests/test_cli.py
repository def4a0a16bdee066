"""The ``toolbench`` command: validate, schema, graph and the delegated subcommands."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import sysconfig
import textwrap
import types
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from pytest_toolbench.commands.cli import main
from pytest_toolbench.commands.schema import SCHEMA_PATH, schema_text
from pytest_toolbench.run.machine import TRANSITIONS, StageState

VALID = """\
name: paris_weather
tools:
  - name: get_weather
    parameters: {type: object, properties: {city: {type: string}}}
    result: {temp_c: 21}
stages:
  - name: ask
    user: What's the weather in Paris?
    expect:
      finish_reason: tool_calls
  - name: answer
    run_tools: true
    stream: both
    max_turns: 3
    retry: {attempts: 2}
    expect:
      text: {$contains: ["21"]}
"""

ALL_TRIGGERS = {row["trigger"] for row in TRANSITIONS}


def write(directory: Path, name: str, text: str) -> Path:
    path = directory / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text), encoding="utf-8")
    return path


@pytest.fixture
def cases(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty project directory, made the working directory so messages show short paths."""
    monkeypatch.chdir(tmp_path)
    return tmp_path


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


# ---------------------------------------------------------------------------- the script


def test_console_script_prints_help() -> None:
    script = Path(sysconfig.get_path("scripts"), "toolbench")
    done = subprocess.run([str(script), "--help"], check=False, capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0, done.stderr
    for command in ("validate", "schema", "graph", "import-bfcl", "serve-local"):
        assert command in done.stdout


@pytest.mark.parametrize("command", ["validate", "schema", "graph"])
def test_every_command_has_help(capsys: pytest.CaptureFixture[str], command: str) -> None:
    code, out, _ = run(capsys, command, "--help")
    assert code == 0
    assert out.startswith(f"usage: toolbench {command}")
    assert len(out.splitlines()) > 5  # a description and options, not just a usage line


def test_no_command_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(capsys)
    assert code == 2
    assert "required: COMMAND" in err


# ---------------------------------------------------------------------------- validate


def test_valid_file_passes(cases: Path, capsys: pytest.CaptureFixture[str]) -> None:
    write(cases, "weather.case.yaml", VALID)
    assert run(capsys, "validate", "weather.case.yaml") == (0, "1 file, 1 case: ok\n", "")


def test_directory_is_searched_for_case_files(cases: Path,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    write(cases, "suite/a.case.yaml", VALID)
    write(cases, "suite/deep/b.case.yml", VALID + "---\n" + VALID.replace("paris", "rome"))
    write(cases, "suite/notes.yaml", "not: a case")
    write(cases, "suite/.hidden/c.case.yaml", "broken: [")
    code, out, _ = run(capsys, "validate", "suite")
    assert (code, out) == (0, "2 files, 3 cases: ok\n")


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        pytest.param("name: x\nstages: [\n", "bad.case.yaml:2: YAML syntax error", id="yaml"),
        pytest.param(
            "name: x\nstages:\n  - name: s\n    expect:\n      tool_cals: []\n",
            "bad.case.yaml:5: stages[0].expect.tool_cals: unknown key 'tool_cals'"
            " (did you mean 'tool_calls'?)",
            id="unknown-key",
        ),
        pytest.param(
            "name: x\nstages:\n  - name: s\n    expect:\n      text: {$regex: '(open'}\n",
            "bad.case.yaml:5: stages[0].expect.text.$regex: bad regex '(open'",
            id="bad-regex",
        ),
    ],
)
def test_problems_name_file_and_line(cases: Path, capsys: pytest.CaptureFixture[str],
                                     text: str, expected: str) -> None:
    write(cases, "bad.case.yaml", text)
    code, out, _ = run(capsys, "validate", "bad.case.yaml")
    assert code == 1
    assert expected in out
    assert out.endswith("1 file, 0 cases: 1 problem in 1 file\n")


def test_every_file_and_problem_is_reported(cases: Path,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    write(cases, "good.case.yaml", VALID)
    write(cases, "bad.case.yaml", "name: x\nstage: []\n")
    code, out, _ = run(capsys, "validate", ".")
    assert code == 1
    assert "bad.case.yaml:2: stage: unknown key 'stage' (did you mean 'stages'?)" in out
    assert "bad.case.yaml:1: missing required key 'stages'" in out
    assert out.endswith("2 files, 1 case: 2 problems in 1 file\n")


def test_unreadable_file_is_a_problem_not_a_traceback(cases: Path,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    (cases / "latin1.case.yaml").write_bytes("name: caf\xe9\n".encode("latin-1"))
    code, out, _ = run(capsys, "validate", "latin1.case.yaml")
    assert code == 1
    assert "latin1.case.yaml: not UTF-8 text (byte 9" in out


TOOL_CASE = """\
name: local_tool
tools: [{name: add, python: "{module}:add"}]
stages: [{name: s}]
"""


@pytest.mark.parametrize("with_conftest", [True, False])
def test_python_tools_import_as_under_pytest(cases: Path, capsys: pytest.CaptureFixture[str],
                                            with_conftest: bool) -> None:
    """pytest puts a conftest.py's directory on sys.path; validate does the same, and undoes it."""
    module = f"toolbench_cli_tools_{with_conftest}".lower()
    write(cases, f"suite/{module}.py", "def add(a, b):\n    return a + b\n")
    write(cases, "suite/tools.case.yaml", TOOL_CASE.replace("{module}", module))
    if with_conftest:
        write(cases, "suite/conftest.py", "")
    path_before = list(sys.path)
    try:
        code, out, _ = run(capsys, "validate", "suite")
    finally:
        sys.modules.pop(module, None)
    assert sys.path == path_before
    if with_conftest:
        assert (code, out) == (0, "1 file, 1 case: ok\n")
    else:
        assert code == 1
        assert f"tools.case.yaml:2: tools[0].python: cannot import {module!r}" in out


SCRIPTS = Path(sysconfig.get_path("scripts"))


def command(cwd: Path, name: str, *argv: str) -> tuple[int, list[str]]:
    """A console script run as a user runs it (pytester.run would put the directory on
    PYTHONPATH, which is just what must not be)."""
    done = subprocess.run([str(SCRIPTS / name), *argv], cwd=cwd, check=False,
                          capture_output=True, text=True, timeout=60)
    return done.returncode, done.stdout.splitlines()


def test_validate_finds_the_tool_import_problem_pytest_finds(pytester: pytest.Pytester) -> None:
    """``toolbench validate`` and ``pytest`` agree that a module beside the cases is not
    importable, and the fix they name works for both."""
    pytester.makepyfile(mytools="def add(a, b):\n    return a + b\n")
    pytester.makefile(".case.yaml", tools=TOOL_CASE.replace("{module}", "mytools"))
    problem = ("  tools.case.yaml:2: tools[[]0].python: cannot import 'mytools': No module named"
               " 'mytools'; *add a conftest.py (it may be empty) beside the module, or set"
               " `pythonpath = .`*")
    code, out = command(pytester.path, "toolbench", "validate", "tools.case.yaml")
    assert code == 1
    pytest.LineMatcher(out).fnmatch_lines([problem, "1 file, 0 cases: 1 problem in 1 file"])
    _, out = command(pytester.path, "pytest", "--collect-only", "tools.case.yaml")
    pytest.LineMatcher(out).fnmatch_lines([problem])
    pytester.makeini("[pytest]\npythonpath = .\n")
    assert command(pytester.path, "toolbench", "validate", "tools.case.yaml") == (
        0, ["1 file, 1 case: ok"])
    _, out = command(pytester.path, "pytest", "--collect-only", "tools.case.yaml")
    pytest.LineMatcher(out).fnmatch_lines(["*1 test collected*"])


def test_validate_works_where_warnings_are_errors(pytester: pytest.Pytester) -> None:
    """``filterwarnings = error`` (this project's own setting) must not turn pytest's notes
    about modules the command imported first into a crash."""
    pytester.makeini("[pytest]\nfilterwarnings = error\n")
    pytester.makefile(".case.yaml", weather=VALID)
    assert command(pytester.path, "toolbench", "validate", ".") == (0, ["1 file, 1 case: ok"])
    code, out = command(pytester.path, "toolbench", "graph", "weather.case.yaml")
    assert (code, out[:4]) == (0, ["---", 'title: "paris_weather"', "---", "stateDiagram-v2"])


def test_validate_names_what_a_cases_api_cannot_express(
        pytester: pytest.Pytester, capsys: pytest.CaptureFixture[str]) -> None:
    """The items over that API would fail (sending nothing): a problem at its line, once
    for all the case's models; with endpoint.unsupported: skip, the case says it is fine."""
    case = ("name: seeded\nmodel: [a, b]\nendpoint: {apis: [chat, responses]%s}\n"
            "params: {temperature: 0, seed: 7}\nstages: [{name: ask, user: hi}]\n")
    pytester.makefile(".case.yaml", seeded=case % "")
    code, out, _ = run(capsys, "validate", "seeded.case.yaml")
    assert code == 1
    assert out == ("seeded.case.yaml:4: case 'seeded': the Responses API's request has no field"
                   " 'seed', and the service refuses a field it does not know: give it only to"
                   " the APIs that take it (params: {chat: {seed: 7}}), or leave this API out"
                   " (endpoint.apis)\n1 file, 1 case: 1 problem in 1 file\n")
    pytester.makefile(".case.yaml", seeded=case % ", unsupported: skip")
    assert run(capsys, "validate", "seeded.case.yaml") == (0, "1 file, 1 case: ok\n", "")


def test_validate_reads_the_ini_as_pytest_does(pytester: pytest.Pytester,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    """The case-file globs of ``toolbench_files``; Python test modules are not imported."""
    pytester.makeini("[pytest]\ntoolbench_files = *.llm.yaml\n")
    write(pytester.path, "suite/weather.llm.yaml", VALID)
    write(pytester.path, "suite/notes.case.yaml", "not: [a case")
    write(pytester.path, "suite/test_boom.py", "raise RuntimeError('imported')\n")
    assert run(capsys, "validate", "suite") == (0, "1 file, 1 case: ok\n", "")


def mcp_suite(started: Path) -> str:
    """A file-level stdio server whose command would create ``started`` if it ran, and
    a case that takes its tools."""
    starts = f"open({str(started)!r}, 'w').close()"
    return f"""mcp_servers:
  clock: {{command: [{json.dumps(sys.executable)}, -c, {json.dumps(starts)}]}}
---
name: ok
tools:
  - mcp: clock
    include: [get_current_time]
stages: [{{name: s, user: what time is it?, tool_choice: {{name: get_current_time}}}}]
"""


def test_validate_checks_mcp_declarations_without_starting_a_server(
        cases: Path, capsys: pytest.CaptureFixture[str]) -> None:
    started = cases / "started"
    write(cases, "clock.case.yaml", mcp_suite(started))
    assert run(capsys, "validate", "clock.case.yaml") == (0, "1 file, 1 case: ok\n", "")
    write(cases, "typo.case.yaml", mcp_suite(started).replace("command:", "comand:"))
    write(cases, "undefined.case.yaml", mcp_suite(started).replace("mcp: clock", "mcp: clok"))
    code, out, _ = run(capsys, "validate", ".")
    assert code == 1
    assert out.splitlines() == [
        "2 problems in case file",
        ("  typo.case.yaml:2: mcp_servers.clock.comand: unknown key 'comand' (did you mean"
        " 'command'?)"),
        ("  typo.case.yaml:6: tools[0].mcp: MCP server 'clock' is not defined (mcp_servers of"
        " this case and file: none)"),
        "1 problem in case file",
        ("  undefined.case.yaml:6: tools[0].mcp: MCP server 'clok' is not defined; did you"
        " mean `clock`? (mcp_servers of this case and file: clock)"),
        "3 files, 1 case: 3 problems in 2 files"]
    assert not started.exists()  # no run of validate started the server


UNDEFINED = """\
name: typo
stages:
  - name: first
    user: hi
    capture: {ticker: text}
  - name: second
    user: "price of ${tickr}"
  - name: third
    expect: {text: {$contains: "${later}"}}
  - name: fourth
    user: "${env.HOME} ${ticker}"
    capture: {later: text}
"""


def test_undefined_variables_are_found_before_anything_runs(
        pytester: pytest.Pytester, capsys: pytest.CaptureFixture[str]) -> None:
    """At the line of the string that uses them, with the name meant; collection agrees."""
    pytester.makefile(".case.yaml", typo=UNDEFINED)
    problems = [
        "  typo.case.yaml:7: stages[1].user: ${tickr} is not defined; did you mean `ticker`?",
        ("  typo.case.yaml:9: stages[2].expect.text.$contains: ${later} is captured by stage"
         " 'fourth', which runs after this one; a stage sees only what earlier stages captured"),
    ]
    code, out, _ = run(capsys, "validate", "typo.case.yaml")
    assert code == 1
    assert out.splitlines() == ["2 problems in case file", *problems,
                                "1 file, 0 cases: 2 problems in 1 file"]
    pytester.runpytest().stdout.fnmatch_lines(["2 problems in case file", *problems])


@pytest.mark.parametrize(
    ("paths", "message"),
    [
        (["missing.case.yaml"], "no such file or directory: missing.case.yaml"),
        (["empty"], "no case files (*.case.yaml, *.case.yml) under empty"),
    ],
)
def test_bad_paths_are_usage_errors(cases: Path, capsys: pytest.CaptureFixture[str],
                                    paths: list[str], message: str) -> None:
    (cases / "empty").mkdir()
    code, out, err = run(capsys, "validate", *paths)
    assert (code, out) == (2, "")
    assert err == f"toolbench validate: error: {message}\n"


def test_glob_option_replaces_the_default_patterns(cases: Path,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    write(cases, "suite/one.yaml", VALID)
    write(cases, "suite/two.case.yaml", "broken: [")
    code, out, _ = run(capsys, "validate", "suite", "--glob", "*.yaml", "--glob", "none")
    assert code == 1  # both files matched *.yaml
    assert out.endswith("2 files, 1 case: 1 problem in 1 file\n")


# ---------------------------------------------------------------------------- schema


def test_schema_describes_a_case(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "schema")
    schema = json.loads(out)
    assert code == 0
    assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    assert schema["title"] == "pytest-toolbench case file"
    assert schema["$id"]
    case = schema["then"]  # a document with a name or stages is a case
    assert {"name", "model", "endpoint", "tools", "stages"} <= set(case["properties"])
    assert case["required"] == ["name", "stages"]
    assert case["additionalProperties"] is False
    assert set(schema["else"]["properties"]) == {"mcp_servers", "defaults"}


def test_schema_accepts_a_file_level_document_and_rejects_a_case_key_in_defaults() -> None:
    validator = jsonschema.Draft202012Validator(json.loads(schema_text()))
    shared = {"defaults": {"model": "gpt-4.1-mini", "params": {"temperature": 0},
                           "tools": [{"name": "lookup", "result": {"ok": True}}]},
              "mcp_servers": {"time": {"command": ["mcp-server-time"]}}}
    assert list(validator.iter_errors(shared)) == []
    shared["defaults"]["stages"] = []
    assert ["'stages' was unexpected" in error.message
            for error in validator.iter_errors(shared)] == [True]


def test_schema_accepts_a_case_and_rejects_an_unknown_key() -> None:
    validator = jsonschema.Draft202012Validator(json.loads(schema_text()))
    case: dict[str, Any] = yaml.safe_load(VALID)
    assert list(validator.iter_errors(case)) == []
    case["stages"][0]["expect"]["tool_cals"] = []
    assert ["'tool_cals' was unexpected" in error.message
            for error in validator.iter_errors(case)] == [True]


def test_committed_schema_matches_the_models() -> None:
    assert SCHEMA_PATH.read_text(encoding="utf-8") == schema_text(), (
        "pytest_toolbench/case.schema.json is out of date with the models; regenerate it:"
        " toolbench schema --output pytest_toolbench/case.schema.json"
    )


READ_AT_IMPORT = """\
import linecache, sys
import pytest_toolbench.casefile.schema as schema
print(any(name.endswith("schema.py") and "casefile" in name for name in linecache.cache))
print(schema.Case.model_json_schema()["$defs"]["Endpoint"]["properties"]["retries"]
      ["description"])
"""


def test_field_docstrings_are_read_when_the_schema_is_made_not_at_every_collection() -> None:
    """Reading the models' source for their field docstrings costs a third of building
    them: the JSON Schema is made rarely, a case file is collected on every run."""
    done = subprocess.run([sys.executable, "-c", READ_AT_IMPORT], capture_output=True,
                          text=True, check=True, timeout=60)
    assert done.stdout.splitlines() == [
        "False", "Retries of transient failures (connect errors, 429, 5xx)."]


def test_schema_output_writes_the_file(tmp_path: Path,
                                       capsys: pytest.CaptureFixture[str]) -> None:
    target = tmp_path / "case.schema.json"
    code, out, _ = run(capsys, "schema", "--output", str(target))
    assert (code, out) == (0, f"wrote the case-file schema to {target}\n")
    assert target.read_text(encoding="utf-8") == schema_text()


def test_schema_output_to_a_missing_directory_is_a_usage_error(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(capsys, "schema", "--output", str(tmp_path / "no" / "such.json"))
    assert code == 2
    assert err.startswith(f"toolbench schema: error: cannot write {tmp_path / 'no'}")


# ---------------------------------------------------------------------------- graph

EDGE = re.compile(r"^(\w+) --> (\w+): (.+)$")


def graph_of(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    code, out, err = run(capsys, "graph", *argv)
    assert (code, err) == (0, "")
    return out


def stage_states(diagram: str, stage_id: str) -> set[str]:
    return set(re.findall(rf'^\s*state "(\w+)" as {stage_id}__\w+$', diagram, re.MULTILINE))


def stage_triggers(diagram: str, stage_id: str) -> dict[str, str]:
    """Trigger name -> its full label, for the edges inside one stage."""
    triggers = {}
    for line in diagram.splitlines():
        match = EDGE.match(line.strip())
        if match and match[1].startswith(f"{stage_id}__"):
            for label in match[3].split(" | "):
                triggers[label.split(" ")[0]] = label
    return triggers


def test_graph_draws_each_stage_from_the_table(cases: Path,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    write(cases, "weather.case.yaml", VALID)
    diagram = graph_of(capsys, "weather.case.yaml")
    assert 'state "ask" as stage0' in diagram
    assert 'state "answer" as stage1' in diagram
    assert "stage0 --> stage1: pass" in diagram
    assert "stage1 --> ended: pass" in diagram
    # ask: one request, no loop, no retry, no second variant
    assert stage_states(diagram, "stage0") == {
        state.value for state in StageState if state is not StageState.RUNNING_TOOLS}
    assert set(stage_triggers(diagram, "stage0")) == ALL_TRIGGERS - {
        "answer_pending", "tool_use", "max_turns", "other_variant", "retry", "expected_error"}
    # answer: everything the table has, with its settings in the labels (but an expected
    # error: it has no expect.error)
    assert stage_states(diagram, "stage1") == {state.value for state in StageState}
    answer = stage_triggers(diagram, "stage1")
    assert set(answer) == ALL_TRIGGERS - {"expected_error"}
    assert answer["tool_use"] == "tool_use (max 3 turns)"
    assert answer["max_turns"] == "max_turns (3 sent)"
    assert answer["retry"] == "retry (up to 2 attempts)"


def test_a_stage_that_expects_an_error_checks_the_transports_failure(
        cases: Path, capsys: pytest.CaptureFixture[str]) -> None:
    write(cases, "down.case.yaml", """\
        name: down
        stages:
          - {name: ask, expect: {error: {$contains: overloaded}}}
        """)
    diagram = graph_of(capsys, "down.case.yaml")
    assert stage_triggers(diagram, "stage0")["expected_error"] == "expected_error"
    edges = [line.strip() for line in diagram.splitlines() if "expected_error" in line]
    assert [edge.split(":")[0] for edge in edges] == [
        "stage0__sending --> stage0__checking", "stage0__receiving --> stage0__checking"]


def test_pending_tool_calls_are_answered_only_after_a_stage_without_the_loop(
        cases: Path, capsys: pytest.CaptureFixture[str]) -> None:
    write(cases, "loop.case.yaml", """\
        name: loop
        stages:
          - {name: first, run_tools: true}
          - {name: second}
          - {name: third}
          - name: fourth
            messages: [{role: tool, tool_call_id: c1, content: done}]
        """)
    diagram = graph_of(capsys, "loop.case.yaml")
    has_pending = ["answer_pending" in stage_triggers(diagram, f"stage{index}")
                   for index in range(4)]
    assert has_pending == [False, False, True, False]
    assert "running_tools" in stage_states(diagram, "stage2")
    assert "running_tools" not in stage_states(diagram, "stage1")


def test_graph_is_plain_state_diagram_syntax(cases: Path,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    """Every line is one of the few stateDiagram-v2 forms, and edges join declared states."""
    write(cases, "weather.case.yaml", VALID)
    lines = graph_of(capsys, "weather.case.yaml").splitlines()
    assert lines[:4] == ["---", 'title: "paris_weather"', "---", "stateDiagram-v2"]
    forms = [r"direction LR", r"classDef \w+ [\w:,]+", r'state "[\w.-]+" as \w+',
             r"Class \w+ \w+", r"state \w+ \{", r"\}", r"(\[\*\]|\w+) --> (\[\*\]|\w+)(: .+)?", ""]
    declared = set(re.findall(r' as (\w+)$', "\n".join(lines), re.MULTILINE))
    depth = 0
    for line in lines[4:]:
        assert any(re.fullmatch(form, line.strip()) for form in forms), line
        depth += line.count("{") - line.count("}")
        if "-->" in line:
            ends = re.findall(r"(\[\*\]|\w+)", line.split(":")[0])
            assert all(end == "[*]" or end in declared for end in ends), line
    assert depth == 0


def test_graph_markdown_wraps_in_a_fence(cases: Path, capsys: pytest.CaptureFixture[str]) -> None:
    write(cases, "weather.case.yaml", VALID)
    out = graph_of(capsys, "weather.case.yaml", "--markdown")
    assert out.startswith("```mermaid\n---\n")
    assert out.endswith("\n```")


def test_graph_needs_a_name_when_the_file_has_several_cases(
        cases: Path, capsys: pytest.CaptureFixture[str]) -> None:
    write(cases, "two.case.yaml", VALID + "---\nname: other\nstages: [{name: only}]\n")
    code, _, err = run(capsys, "graph", "two.case.yaml")
    assert code == 2
    assert err == ("toolbench graph: error: two.case.yaml holds 2 cases;"
                   " name one of: paris_weather, other\n")
    assert 'state "only" as stage0' in graph_of(capsys, "two.case.yaml", "other")


def test_graph_takes_a_pytest_node_id_as_pytest_prints_it(
        cases: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``FILE::NAME``, and ``FILE::NAME[MODEL]`` (one item per model: one flow for all)."""
    write(cases, "suite/two.case.yaml", VALID + "---\nname: other\nmodel: [m1, m2]\n"
                                                "stages: [{name: only}]\n")
    by_name = graph_of(capsys, "suite/two.case.yaml", "other")

    assert graph_of(capsys, "suite/two.case.yaml::other") == by_name
    assert graph_of(capsys, "suite/two.case.yaml::other[m2]") == by_name
    assert 'state "ask" as stage0' in graph_of(capsys, "suite/two.case.yaml::paris_weather")


@pytest.mark.parametrize(("argv", "says"), [
    (["two.case.yaml::nope"],
     "two.case.yaml has no case named 'nope'; name one of: paris_weather, other"),
    (["two.case.yaml::other[m3]"],
     "two.case.yaml has no item 'other[m3]'; its items: other[m1], other[m2]"),
    (["two.case.yaml::other", "paris_weather"],
     "two.case.yaml::other names the case already; leave out 'paris_weather'"),
    (["nope.case.yaml::other"], "no such case file: nope.case.yaml"),
])
def test_graph_of_a_node_id_that_names_nothing_says_what_there_is(
        cases: Path, capsys: pytest.CaptureFixture[str], argv: list[str], says: str) -> None:
    write(cases, "two.case.yaml", VALID + "---\nname: other\nmodel: [m1, m2]\n"
                                          "stages: [{name: only}]\n")
    code, out, err = run(capsys, "graph", *argv)
    assert (code, out, err) == (2, "", f"toolbench graph: error: {says}\n")


def test_graph_of_an_invalid_file_shows_its_problems(
        cases: Path, capsys: pytest.CaptureFixture[str]) -> None:
    write(cases, "bad.case.yaml", "name: x\nstages: []\n")
    code, out, err = run(capsys, "graph", "bad.case.yaml")
    assert (code, out) == (1, "")
    assert "bad.case.yaml:2: stages: List should have at least 1 item" in err


# ---------------------------------------------------------------------------- delegates


def test_delegates_get_the_rest_of_the_command_line(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    seen: list[list[str]] = []

    def fake_main(argv: list[str]) -> int:
        seen.append(argv)
        return 3

    module = types.ModuleType("pytest_toolbench.commands.bfcl")
    module.main = fake_main  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "pytest_toolbench.commands.bfcl", module)
    code, _, _ = run(capsys, "import-bfcl", "q.json", "a.json", "out", "--help")
    assert (code, seen) == (3, [["q.json", "a.json", "out", "--help"]])


def test_a_missing_delegate_module_is_reported(monkeypatch: pytest.MonkeyPatch,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setitem(sys.modules, "pytest_toolbench.commands.bfcl", None)
    code, _, err = run(capsys, "import-bfcl", "x")
    assert code == 2
    assert err.startswith("toolbench import-bfcl: error: not available in this install")


def test_validate_reports_every_problem_of_an_agent_case_at_once(
        pytester: pytest.Pytester) -> None:
    """Three keys of the plugin's own loop on an agent case: three problems in one run of
    ``toolbench validate`` (and of pytest's collection), each at its line, not one a run."""
    pytester.makepyfile(bot="def make():\n    return lambda text: text\n")
    pytester.makeini("[pytest]\npythonpath = .\n")
    pytester.makefile(".case.yaml", bot=(
        "name: bot\nagent: {python: 'bot:make'}\nparams: {temperature: 0}\n"
        "stages:\n  - name: ask\n    user: hi\n    tool_choice: required\n"
        "    run_tools: true\n  - name: more\n    expect: {text: hi}\n"))
    said = "is for the plugin's own loop, and an agent case's agent builds its own requests"
    problems = [f"  bot.case.yaml:3: params: params {said}",
                f"  bot.case.yaml:7: stages[[]0[]].tool_choice: tool_choice {said}",
                f"  bot.case.yaml:8: stages[[]0[]].run_tools: run_tools {said}",
                ("  bot.case.yaml:9: stages[[]1[]]: an agent case's stage needs `user` (the"
                 " text its agent is called with) or `simulate_user`")]

    code, out = command(pytester.path, "toolbench", "validate", "bot.case.yaml")

    assert code == 1
    pytest.LineMatcher(out).fnmatch_lines([*problems, "1 file, 0 cases: 4 problems in 1 file"])
    _, out = command(pytester.path, "pytest", "--collect-only", "bot.case.yaml")
    pytest.LineMatcher(out).fnmatch_lines(problems)
