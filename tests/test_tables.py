"""Tables of inputs (``parametrize:``) through pytester: one item per row with ids from the
values, ``-k`` selection, a cassette per row recorded from the loopback chat server and
replayed offline, rows from CSV, JSON Lines and YAML files beside the case, bad rows at
their lines, and the parsed-file cache that notices a changed rows file."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest
from support.chat_server import ChatServer, RecordedRequest, Reply, completion, json_reply

from pytest_toolbench.commands.cli import main


def echo(request: RecordedRequest) -> Reply:
    """The last user message back, and the system prompt after a ``|`` when there is one."""
    messages = request.json()["messages"]
    system = [message["content"] for message in messages if message["role"] == "system"]
    return json_reply(completion(messages[-1]["content"] + "".join(f"|{s}" for s in system)))


def weather_case(base_url: str, table: str) -> str:
    return textwrap.dedent(f"""\
        name: weather
        endpoint: {{base_url: "{base_url}", retries: 0, timeout_s: 5}}
        """) + table + textwrap.dedent("""\
        stages:
          - name: ask
            user: Weather in ${city} (${unit})?
            expect:
              text: {$contains: "${city}"}
        """)


ROWS = """\
parametrize:
  - {city: Paris, unit: c}
  - {city: Rome, unit: f}
  - {city: Oslo, unit: c}
"""


def test_three_rows_record_three_cassettes_and_replay(pytester: pytest.Pytester,
                                                      chat_server: ChatServer) -> None:
    chat_server.set_handler(echo)
    pytester.makefile(".case.yaml", weather=weather_case(chat_server.base_url, ROWS))

    recorded = pytester.runpytest("-p", "no:cacheprovider", "--toolbench-record", "-v")

    recorded.assert_outcomes(passed=3)
    recorded.stdout.fnmatch_lines(["*weather.case.yaml::weather?Paris-c? PASSED*",
                                   "*weather.case.yaml::weather?Rome-f? PASSED*",
                                   "*weather.case.yaml::weather?Oslo-c? PASSED*"])
    sent = sorted(request.json()["messages"][-1]["content"] for request in chat_server.requests)
    assert sent == ["Weather in Oslo (c)?", "Weather in Paris (c)?", "Weather in Rome (f)?"]
    folder = pytester.path / "__cassettes__" / "weather"
    assert sorted(path.name for path in folder.iterdir()) == [
        "weather[Oslo-c].yaml", "weather[Paris-c].yaml", "weather[Rome-f].yaml"]

    replayed = pytester.runpytest("-p", "no:cacheprovider", "-v",
                                  "--toolbench-report=report.json")

    replayed.assert_outcomes(passed=3)
    assert len(chat_server.requests) == 3  # replay sends nothing
    report = json.loads((pytester.path / "report.json").read_text(encoding="utf-8"))
    assert sorted(case["case"] for case in report["cases"]) == [
        "weather[Oslo-c]", "weather[Paris-c]", "weather[Rome-f]"]
    selected = pytester.runpytest("-p", "no:cacheprovider", "-k", "Rome", "-v")
    selected.assert_outcomes(passed=1, deselected=2)
    selected.stdout.fnmatch_lines(["*weather?Rome-f? PASSED*"])


def test_a_mapping_of_lists_is_the_cross_product(pytester: pytest.Pytester) -> None:
    pytester.makefile(".case.yaml", grid=textwrap.dedent("""\
        name: grid
        model: [small, large]
        parametrize: {city: [Paris, Rome], days: [1, 7]}
        stages: [{name: ask, user: "${city} in ${days} days"}]
        """))

    result = pytester.runpytest("-p", "no:cacheprovider", "--collect-only", "-q")

    result.stdout.fnmatch_lines([
        "grid.case.yaml::grid?Paris-1-small?", "grid.case.yaml::grid?Paris-1-large?",
        "grid.case.yaml::grid?Paris-7-small?", "grid.case.yaml::grid?Paris-7-large?",
        "grid.case.yaml::grid?Rome-1-small?", "grid.case.yaml::grid?Rome-1-large?",
        "grid.case.yaml::grid?Rome-7-small?", "grid.case.yaml::grid?Rome-7-large?",
        "8 tests collected*"])


@pytest.mark.parametrize(("name", "text"), [
    pytest.param("rows.csv", "city,unit\nParis,c\nRome,f\n\nOslo,c\n", id="csv"),
    pytest.param("rows.jsonl", "".join(json.dumps(row) + "\n" for row in (
        {"city": "Paris", "unit": "c"}, {"city": "Rome", "unit": "f"},
        {"city": "Oslo", "unit": "c"})), id="jsonl"),
    pytest.param("rows.yaml", "- {city: Paris, unit: c}\n- {city: Rome, unit: f}\n"
                 "- {city: Oslo, unit: c}\n", id="yaml"),
])
def test_rows_from_a_file_beside_the_case(pytester: pytest.Pytester, chat_server: ChatServer,
                                          name: str, text: str) -> None:
    chat_server.set_handler(echo)
    (pytester.path / "tables").mkdir()
    (pytester.path / "tables" / name).write_text(text, encoding="utf-8")
    (pytester.path / "cases").mkdir()
    (pytester.path / "cases" / "weather.case.yaml").write_text(
        weather_case(chat_server.base_url, f"parametrize: {{file: ../tables/{name}}}\n"),
        encoding="utf-8")

    result = pytester.runpytest("-p", "no:cacheprovider", "--toolbench-live", "-v")

    result.assert_outcomes(passed=3)
    result.stdout.fnmatch_lines(["*weather?Paris-c? PASSED*", "*weather?Rome-f? PASSED*",
                                 "*weather?Oslo-c? PASSED*"])


@pytest.mark.parametrize(("files", "table", "expected"), [
    pytest.param({}, "parametrize:\n  - {city: Paris, unit: c}\n  - {city: Rome}\n",
                 "weather.case.yaml:5: parametrize[1]: row 2 lacks unit: every row gives the"
                 " names of the first (city, unit)", id="inline-row"),
    pytest.param({}, "parametrize: {city: Paris}\n",
                 "weather.case.yaml:3: parametrize.city: parametrize.city takes a list of"
                 " values (at least one)", id="mapping-not-list"),
    pytest.param({"rows.csv": "city,unit\nParis,c\nRome\n"}, "parametrize: {file: rows.csv}\n",
                 "weather.case.yaml:3: parametrize.file: rows.csv:3: row 2 has 1 values; the"
                 " header names 2", id="csv-row"),
    pytest.param({"rows.jsonl": '{"city": "Paris", "unit": "c"}\n{"city": "Rome",\n'},
                 "parametrize: {file: rows.jsonl}\n",
                 "weather.case.yaml:3: parametrize.file: rows.jsonl:2: not JSON:",
                 id="jsonl-row"),
    pytest.param({"rows.yaml": "- {city: Paris, unit: c}\n- {city: Rome, units: f}\n"},
                 "parametrize: {file: rows.yaml}\n",
                 "weather.case.yaml:3: parametrize.file: rows.yaml:2: row 2 lacks unit and adds"
                 " units", id="yaml-row"),
    pytest.param({}, "parametrize: {file: missing.csv}\n",
                 "weather.case.yaml:3: parametrize.file: cannot read a table of rows"
                 " 'missing.csv'", id="no-file"),
])
def test_a_bad_row_is_an_error_at_its_line(pytester: pytest.Pytester,
                                           capsys: pytest.CaptureFixture[str],
                                           files: dict[str, str], table: str,
                                           expected: str) -> None:
    for name, text in files.items():
        (pytester.path / name).write_text(text, encoding="utf-8")
    pytester.makefile(".case.yaml", weather=weather_case("http://127.0.0.1:9/v1", table))
    pytester.chdir()

    assert main(["validate", "weather.case.yaml"]) == 1
    out = capsys.readouterr().out
    assert f"  {expected}" in out, out
    result = pytester.runpytest("-p", "no:cacheprovider")
    result.assert_outcomes(errors=1)
    assert any(line.strip().startswith(expected) for line in result.outlines), result.outlines


def test_a_placeholder_no_row_or_stage_defines_is_an_error(
        pytester: pytest.Pytester) -> None:
    pytester.makefile(".case.yaml", weather=weather_case(
        "http://127.0.0.1:9/v1", ROWS).replace("(${unit})", "(${units})"))

    result = pytester.runpytest("-p", "no:cacheprovider")

    result.stdout.fnmatch_lines([("*weather.case.yaml:9: stages?0?.user: ${units} is not"
                                 " defined; did you mean `unit`?")])


def test_a_changed_rows_file_is_read_again_through_the_cache(
        pytester: pytest.Pytester) -> None:
    """The parsed-file cache keeps the case's outline (its row ids) with the rows file's
    digest: a new row is collected though the case file did not change."""
    (pytester.path / "rows.csv").write_text("city,unit\nParis,c\n", encoding="utf-8")
    pytester.makefile(".case.yaml", weather=weather_case(
        "http://127.0.0.1:9/v1", "parametrize: {file: rows.csv}\n"))
    first = pytester.runpytest("--collect-only", "-q")
    first.stdout.fnmatch_lines(["weather.case.yaml::weather?Paris-c?", "1 test collected*"])
    again = pytester.runpytest("--collect-only", "-q")  # read back from the cache
    again.stdout.fnmatch_lines(["weather.case.yaml::weather?Paris-c?", "1 test collected*"])

    Path(pytester.path / "rows.csv").write_text("city,unit\nParis,c\nRome,f\n",
                                                encoding="utf-8")
    changed = pytester.runpytest("--collect-only", "-q")

    changed.stdout.fnmatch_lines(["weather.case.yaml::weather?Paris-c?",
                                  "weather.case.yaml::weather?Rome-f?", "2 tests collected*"])


def test_an_undefined_name_lists_the_tables_names_apart(pytester: pytest.Pytester,
                                                       capsys: pytest.CaptureFixture[str]
                                                       ) -> None:
    pytester.makefile(".case.yaml", grid=textwrap.dedent("""\
        name: grid
        parametrize: {city: [Paris, Rome], days: [1, 7]}
        stages:
          - {name: ask, user: "${city} in ${days} days", capture: {said: text}}
          - {name: again, user: "${weather}"}
        """))
    pytester.chdir()

    assert main(["validate", "grid.case.yaml"]) == 1
    assert ("  grid.case.yaml:5: stages[1].user: ${weather} is not defined (the table's"
            " names: city, days; earlier stages capture: said)") in capsys.readouterr().out
