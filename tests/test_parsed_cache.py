"""Parsed case files kept in pytest's cache directory: a later run reads them instead of
parsing, gives the same items and the same collection errors, and falls back to parsing
when the text changed, the entry is damaged, or there is no cache at all."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from pytest_toolbench.casefile.cache import PARSED_FOLDER, ParsedCache
from pytest_toolbench.casefile.loader import load_documents

GOOD = textwrap.dedent("""\
    name: weather
    model: [small, large]
    marks: [slow]
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
