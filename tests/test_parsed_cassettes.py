"""Parsed cassettes kept in pytest's cache directory: a later replay reads them instead of
parsing and shows the same outcomes; a cassette re-recorded or edited is read again; a
damaged entry is ignored; without the cache every cassette is parsed; a broken cassette
fails its case with the same message every run."""

from __future__ import annotations

import json
import re
import textwrap
from pathlib import Path

import pytest
from support.chat_server import ChatServer, RecordedRequest, Reply, completion, json_reply

from pytest_toolbench.casefile.cache import CASSETTE_FOLDER, CASSETTE_MAGIC, KeptParses
from pytest_toolbench.casefile.loader import load_yaml


def echo(request: RecordedRequest) -> Reply:
    return json_reply(completion(request.json()["messages"][-1]["content"]))


def suite(base_url: str) -> str:
    head = f'endpoint: {{base_url: "{base_url}", retries: 0, timeout_s: 2}}\n'
    return "---\n".join(head + textwrap.dedent(body) for body in ("""\
        name: plain
        stages: [{name: ask, user: hello, expect: {text: hello}}]
        """, """\
        name: failing
        stages: [{name: ask, user: hi, expect: {text: goodbye}}]
        """))


CASSETTE = Path("__cassettes__/s/plain.yaml")


def entries(pytester: pytest.Pytester) -> list[Path]:
    folder = pytester.path / ".pytest_cache" / "d" / CASSETTE_FOLDER
    return sorted(folder.iterdir()) if folder.exists() else []


def replay(pytester: pytest.Pytester, *args: str) -> pytest.RunResult:
    return pytester.runpytest("-v", "-p", "no:randomly", *args)


def shown(result: pytest.RunResult) -> list[str]:
    """What the user sees, less timings and the widths of the summary's columns (which a
    latency of more digits widens)."""
    return [" ".join(re.sub(r"─+", "─", re.sub(r"\d+ ms", "N ms", line.split(" in ")[0])).split())
            for line in result.outlines]


@pytest.fixture
def recorded(pytester: pytest.Pytester, chat_server: ChatServer) -> ChatServer:
    chat_server.set_handler(echo)
    pytester.makefile(".case.yaml", s=suite(chat_server.base_url))
    pytester.runpytest("--toolbench-record").assert_outcomes(passed=1, failed=1)
    return chat_server


def expect_the_recorded_outcomes(result: pytest.RunResult) -> None:
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines([
        "s.case.yaml::plain PASSED*", "s.case.yaml::failing FAILED*",
        "*failing: stages[[]0[]].expect.text: expected 'goodbye', got 'hi'"])


def test_a_second_replay_reads_the_kept_cassettes_and_shows_the_same(
        pytester: pytest.Pytester, recorded: ChatServer) -> None:
    assert entries(pytester) == []  # recording reads no cassette
    first = replay(pytester)
    assert len(entries(pytester)) == 2
    kept = {path: path.read_bytes() for path in entries(pytester)}
    second = replay(pytester)
    expect_the_recorded_outcomes(first)
    expect_the_recorded_outcomes(second)
    assert shown(second) == shown(first)
    assert {path: path.read_bytes() for path in entries(pytester)} == kept


def test_the_kept_entry_is_what_a_replay_reads(pytester: pytest.Pytester,
                                               recorded: ChatServer) -> None:
    """An entry is used, not parsed again: one that says otherwise for the same bytes wins."""
    replay(pytester)
    path = pytester.path / CASSETTE
    data = load_yaml(path.read_text())
    data["interactions"][0]["response"]["json"] = json.dumps(completion("from the cache"))
    KeptParses(pytester.path / ".pytest_cache" / "d" / CASSETTE_FOLDER, CASSETTE_MAGIC).keep(
        path, path.read_bytes(), [data])
    result = replay(pytester)
    result.assert_outcomes(failed=2)
    result.stdout.fnmatch_lines(["*plain: *expected 'hello', got 'from the cache'"])


def test_a_rerecorded_cassette_is_read_again(pytester: pytest.Pytester,
                                             recorded: ChatServer) -> None:
    expect_the_recorded_outcomes(replay(pytester))
    recorded.set_handler(lambda request: json_reply(completion("goodbye")))
    pytester.runpytest("--toolbench-record").assert_outcomes(passed=1, failed=1)
    result = replay(pytester)
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(["s.case.yaml::plain FAILED*", "s.case.yaml::failing PASSED*",
                                 "*plain: *expected 'hello', got 'goodbye'"])
    assert len(entries(pytester)) == 2  # the same entries, overwritten


def test_a_cassette_edited_by_hand_is_read_again(pytester: pytest.Pytester,
                                                 recorded: ChatServer) -> None:
    expect_the_recorded_outcomes(replay(pytester))
    path = pytester.path / CASSETTE
    request, reply = path.read_text().split("response:")
    assert reply.count('"content": "hello"') == 1
    path.write_text(request + "response:" + reply.replace('"content": "hello"',
                                                          '"content": "edited"'))
    result = replay(pytester)
    result.assert_outcomes(failed=2)
    result.stdout.fnmatch_lines(["*plain: *expected 'hello', got 'edited'"])


@pytest.mark.parametrize("damage", [
    lambda blob: blob[: len(blob) // 2],                  # cut short
    lambda blob: blob[:-3] + b"\x00\xff\x13",             # its data changed
    lambda blob: b"not an entry at all",                  # something else
    lambda blob: b"",                                     # empty
])
def test_a_damaged_entry_is_ignored_and_written_again(pytester: pytest.Pytester,
                                                      recorded: ChatServer, damage) -> None:
    first = replay(pytester)
    kept = kept_data(pytester)
    assert len(kept) == 2 and None not in kept.values()
    for path in entries(pytester):
        path.write_bytes(damage(path.read_bytes()))
    assert all(data is None for data in kept_data(pytester).values())  # none is usable
    second = replay(pytester)
    expect_the_recorded_outcomes(second)
    assert shown(second) == shown(first)
    # Written again: each entry holds what the first did for its cassette's bytes (marshal's
    # bytes for equal data may differ, by which strings were shared when it was written),
    # and the next replay reads them rather than writing them.
    assert kept_data(pytester) == kept
    written = {path: path.read_bytes() for path in entries(pytester)}
    third = replay(pytester)
    assert shown(third) == shown(first)
    assert {path: path.read_bytes() for path in entries(pytester)} == written


def kept_data(pytester: pytest.Pytester) -> dict[Path, list[object] | None]:
    """Per cassette, what its entry gives for its bytes (None: no usable entry)."""
    kept = KeptParses(pytester.path / ".pytest_cache" / "d" / CASSETTE_FOLDER, CASSETTE_MAGIC)
    return {path: kept.data(path, path.read_bytes())
            for path in sorted((pytester.path / CASSETTE.parent).glob("*.yaml"))}


def test_without_the_cacheprovider_every_cassette_is_parsed(pytester: pytest.Pytester,
                                                            recorded: ChatServer) -> None:
    first = replay(pytester, "-p", "no:cacheprovider")
    second = replay(pytester, "-p", "no:cacheprovider")
    expect_the_recorded_outcomes(first)
    assert shown(second) == shown(first)
    assert entries(pytester) == []


@pytest.mark.parametrize(("broken", "says"), [
    ("version: 2\ninteractions: [\n", "YAML syntax error at line 3"),
    ("version: 2\ninteractions: {}\n", "interactions: expected a list, got a mapping"),
])
def test_a_broken_cassette_fails_its_case_the_same_way_every_run(
        pytester: pytest.Pytester, recorded: ChatServer, broken: str, says: str) -> None:
    (pytester.path / CASSETTE).write_text(broken)
    for _ in range(2):
        result = replay(pytester)
        result.assert_outcomes(failed=2)
        result.stdout.fnmatch_lines([
            f"*plain: *cassette unreadable: __cassettes__/s/plain.yaml: {says}*; re-record*"])
