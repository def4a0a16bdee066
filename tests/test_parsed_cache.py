"""Parsed case files kept in pytest's cache directory: a later run reads them instead of
parsing, gives the same items and the same collection errors, and falls back to parsing
when the text changed, the entry is damaged, or there is no cache at all. Once a file's
cases validated, their outlines are kept too: a later collection makes the items from
them and each case is validated when it first runs."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
from support.chat_server import ChatServer, completion, json_reply

from pytest_toolbench.casefile.cache import PARSED_FOLDER, ParsedCache
from pytest_toolbench.casefile.load import load_case_file
from pytest_toolbench.casefile.loader import load_documents
from pytest_toolbench.casefile.outline import Outline
from pytest_toolbench.commands.cli import main as cli_main

GOOD = textwrap.dedent("""\
    name: weather
    model: [small, large]
    marks: [slow]
    tools: [{name: get_weather}]
    stages:
      - name: ask
        user: hi
        expect: {tool_calls: [{name: get_weather, arguments: {city: {$regex: "^Par"}}}]}
    ---
    name: plain
    stages: [{name: ask, user: hi}]
    """)

BROKEN = textwrap.dedent("""\
    name: fine
    stages: [{name: ask, user: hi}]
    ---
    name: typo
    stages:
      - name: ask
        usr: hi
    """)

ERROR = "broken.case.yaml:7: stages[0].usr: unknown key 'usr'"


def entries(pytester: pytest.Pytester) -> list[Path]:
    folder = pytester.path / ".pytest_cache" / "d" / PARSED_FOLDER
    return sorted(path for path in folder.iterdir()) if folder.exists() else []


def collect(pytester: pytest.Pytester, *args: str) -> pytest.RunResult:
    return pytester.runpytest("--collect-only", "-q", "-p", "no:randomly", *args)


def shown(result: pytest.RunResult) -> list[str]:
    """What the user sees, less the timing of the last line."""
    return [line.split(" in ")[0] for line in result.outlines]


@pytest.fixture
def suite(pytester: pytest.Pytester) -> pytest.Pytester:
    pytester.makeini("[pytest]\nmarkers =\n    slow: slow cases\n")
    pytester.makefile(".case.yaml", good=GOOD, broken=BROKEN)
    return pytester


def test_a_second_run_reads_the_kept_files_and_shows_the_same(suite: pytest.Pytester) -> None:
    first = collect(suite)
    assert len(entries(suite)) == 2  # both parsed; broken.case.yaml fails validation only
    second = collect(suite)
    assert shown(second) == shown(first)
    assert "good.case.yaml::weather[small]" in first.stdout.str()
    assert "good.case.yaml::plain" in first.stdout.str()
    assert ERROR in second.stdout.str()
    assert second.ret == first.ret == pytest.ExitCode.INTERRUPTED


def test_the_kept_entry_is_what_a_run_reads(suite: pytest.Pytester) -> None:
    """An entry is used, not parsed again: one that says otherwise for the same text wins."""
    collect(suite)
    path = suite.path / "good.case.yaml"
    cache = ParsedCache(suite.path / ".pytest_cache" / "d" / PARSED_FOLDER)
    documents = load_documents(path)
    documents[1].data = {**documents[1].data, "name": "from_the_cache"}
    cache.put(path, path.read_text(), documents)
    collect(suite).stdout.fnmatch_lines(["*good.case.yaml::from_the_cache"])


def test_a_changed_file_is_parsed_again(suite: pytest.Pytester) -> None:
    collect(suite)
    (suite.path / "good.case.yaml").write_text(GOOD.replace("name: plain", "name: renamed"))
    result = collect(suite)
    result.stdout.fnmatch_lines(["*good.case.yaml::renamed"])
    assert "::plain" not in result.stdout.str()
    # Fixed, the broken file collects; it is the same entry, overwritten.
    (suite.path / "broken.case.yaml").write_text(BROKEN.replace("usr:", "user:"))
    fixed = collect(suite)
    fixed.stdout.fnmatch_lines(["*broken.case.yaml::typo", "5 tests collected*"])
    assert len(entries(suite)) == 2


@pytest.mark.parametrize("damage", [
    lambda blob: blob[: len(blob) // 2],                  # cut short
    lambda blob: blob[:-3] + b"\x00\xff\x13",             # its data changed
    lambda blob: b"not an entry at all",                  # something else
    lambda blob: b"",                                     # empty
])
def test_a_damaged_entry_is_ignored_and_written_again(suite: pytest.Pytester, damage) -> None:
    first = collect(suite)
    for entry in entries(suite):
        entry.write_bytes(damage(entry.read_bytes()))
    second = collect(suite)
    assert shown(second) == shown(first)
    third = collect(suite)  # the entries were written again, whole
    assert shown(third) == shown(first)
    assert all(entry.read_bytes().startswith(b"toolbench-parsed") for entry in entries(suite))


def test_without_the_cacheprovider_every_file_is_parsed(suite: pytest.Pytester) -> None:
    first = collect(suite, "-p", "no:cacheprovider")
    second = collect(suite, "-p", "no:cacheprovider")
    assert not (suite.path / ".pytest_cache").exists()
    assert shown(second) == shown(first)
    assert ERROR in first.stdout.str()
    assert "good.case.yaml::weather[large]" in first.stdout.str()


def test_data_marshal_cannot_hold_is_not_kept(tmp_path: Path) -> None:
    """A date is a value marshal does not know: such a file is parsed every time."""
    path = tmp_path / "dated.case.yaml"
    path.write_text("name: dated\nwhen: 2024-01-02\nstages: [{name: ask, user: hi}]\n")
    cache = ParsedCache(tmp_path / "kept")
    load_documents(path, kept=cache)
    assert cache.misses == 1
    assert not (tmp_path / "kept").exists() or not list((tmp_path / "kept").iterdir())
    kept = load_documents(path, kept=cache)
    assert kept[0].data["when"].isoformat() == "2024-01-02"
    assert cache.hits == 0


# --- outlined case files: collected from their outlines, validated when first run ----------

VALIDATED = textwrap.dedent("""\
    import sys

    def pytest_collection_finish(session):
        # The case schema is imported with the first case validated.
        print("cases validated at collection:",
              "pytest_toolbench.casefile.schema" in sys.modules)
    """)


def test_a_second_collection_makes_the_items_without_validating_them(
        suite: pytest.Pytester) -> None:
    suite.makeconftest(VALIDATED)
    (suite.path / "broken.case.yaml").unlink()
    first = suite.runpytest_subprocess("--collect-only", "-q", "-p", "no:randomly")
    second = suite.runpytest_subprocess("--collect-only", "-q", "-p", "no:randomly")
    first.stdout.fnmatch_lines(["cases validated at collection: True"])
    second.stdout.fnmatch_lines(["cases validated at collection: False"])
    assert shown(second)[:3] == shown(first)[:3]
    assert "good.case.yaml::weather[small]" in second.stdout.str()


def passing_case(base_url: str) -> str:
    return textwrap.dedent(f"""\
        name: greet
        marks: [slow]
        endpoint: {{base_url: "{base_url}", retries: 0, timeout_s: 5}}
        stages:
          - name: ask
            user: hi
            expect: {{text: {{$regex: "^hello"}}, finish_reason: stop}}
        """)


def test_an_outlined_case_runs_and_fails_as_a_validated_one(
        pytester: pytest.Pytester, chat_server: ChatServer) -> None:
    pytester.makeini("[pytest]\nmarkers =\n    slow: slow cases\n")
    pytester.makefile(".case.yaml", greet=passing_case(chat_server.base_url))
    chat_server.set_default(json_reply(completion("hello there")))
    collect(pytester)  # writes the outlines
    pytester.runpytest("--toolbench-live", "-m", "slow").assert_outcomes(passed=1)
    chat_server.set_default(json_reply(completion("goodbye")))
    failed = pytester.runpytest("--toolbench-live", "-m", "slow")
    failed.assert_outcomes(failed=1)
    failed.stdout.fnmatch_lines(["*greet.case.yaml:7: greet: stages?0?.expect.text: 'goodbye' does not match*"])
    assert len(chat_server.requests) == 2


def test_a_case_that_imports_code_is_validated_at_every_collection(
        pytester: pytest.Pytester) -> None:
    pytester.makepyfile(weather_tools="def get_weather(city):\n    return {'sky': 'sunny'}\n")
    pytester.makeconftest("")  # puts the module's directory on sys.path
    pytester.makefile(".case.yaml", tools=textwrap.dedent("""\
        name: python_tool
        tools:
          - name: get_weather
            python: weather_tools:get_weather
            parameters: {type: object, properties: {city: {type: string}}}
        stages: [{name: ask, user: hi}]
        """))
    assert collect(pytester).ret == pytest.ExitCode.OK
    (pytester.path / "weather_tools.py").write_text("def other():\n    pass\n")
    gone = pytester.runpytest_subprocess("--collect-only", "-q", "-p", "no:randomly")
    gone.stdout.fnmatch_lines(["*tools.case.yaml:4*has no callable 'get_weather'*"])
    assert gone.ret == pytest.ExitCode.INTERRUPTED


def test_an_api_first_asked_for_later_is_checked_and_then_kept(
        pytester: pytest.Pytester) -> None:
    pytester.makeconftest(VALIDATED)
    pytester.makefile(".case.yaml", seeded=textwrap.dedent("""\
        name: seeded
        params: {seed: 7}
        stages: [{name: ask, user: hi}]
        ---
        mcp_servers:
          time: {command: [mcp-server-time]}
        """))

    def collect_over(*args: str) -> pytest.RunResult:
        return pytester.runpytest_subprocess("--collect-only", "-q", "-p", "no:randomly", *args)

    assert collect_over().ret == pytest.ExitCode.OK  # chat takes a seed
    for validated in ("True", "False"):  # checked, then read back from the outline
        refused = pytester.runpytest_subprocess("-p", "no:randomly", "--toolbench-api",
                                                "messages")
        refused.stdout.fnmatch_lines([
            f"cases validated at collection: {validated}",
            "*seeded.case.yaml:2: case 'seeded': *no field 'seed'*"])
        refused.assert_outcomes(failed=1)
    chat = collect_over()
    chat.stdout.fnmatch_lines(["seeded.case.yaml::seeded", "cases validated at collection: False"])


def outlined_as_valid(pytester: pytest.Pytester, text: str) -> None:
    """``typo.case.yaml`` holding ``text``, with a cache entry whose outlines say each of
    its cases validated (with nothing refused over chat), whatever the text says."""
    path = pytester.makefile(".case.yaml", typo=text)
    cache = ParsedCache(pytester.path / ".pytest_cache" / "d" / PARSED_FOLDER)
    documents = load_documents(path)
    for document in documents:
        document.outline = Outline(document.data["name"], (None,), None, (),
                                   unsupported={"chat": []})
    cache.put(path, path.read_text(), documents)


def test_an_outlined_case_that_no_longer_validates_fails_with_its_problems(
        pytester: pytest.Pytester) -> None:
    """An entry whose outline says a case is fine while its text is not (which only a
    change the cache cannot see could cause): the case fails when it would run, with the
    problems collection would have shown, and nothing is sent."""
    outlined_as_valid(pytester, BROKEN)
    result = pytester.runpytest("-p", "no:randomly", "--toolbench-base-url",
                                "http://127.0.0.1:9/v1", "--toolbench-live")
    result.assert_outcomes(failed=2)
    result.stdout.fnmatch_lines(["*1 problem in case file*",
                                 "*typo.case.yaml:7: stages?0?.usr: unknown key 'usr'*"])
    assert "ConnectError" not in result.stdout.str()


def test_validate_checks_an_outlined_file_again(
        pytester: pytest.Pytester, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    """``toolbench validate`` validates every case, outlined in the cache or not."""
    outlined_as_valid(pytester, BROKEN)
    monkeypatch.chdir(pytester.path)
    assert cli_main(["validate", "typo.case.yaml"]) == 1
    out = capsys.readouterr().out
    assert "typo.case.yaml:7: stages[0].usr: unknown key 'usr'" in out
    assert out.endswith("1 file, 0 cases: 1 problem in 1 file\n")


def test_a_case_let_go_after_its_run_is_validated_again_when_asked_for(tmp_path: Path) -> None:
    """An item lets its outlined case go once it has run (the session keeps no case it ran);
    asked for again (a rerun), it is validated again from the kept bytes."""
    path = tmp_path / "good.case.yaml"
    path.write_text(GOOD)
    cache = ParsedCache(tmp_path / "kept")
    load_case_file(path, cache).keep(cache)  # a first collection: validated, outlined
    weather, plain = load_case_file(path, cache)
    ran = weather.case
    weather.forget()
    again = weather.case
    assert again is not ran
    assert again.name == ran.name == "weather"
    assert plain.case.name == "plain"
    assert [stage.name for stage in again.stages] == ["ask"]
