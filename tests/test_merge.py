"""``toolbench merge``: shard reports joined into one, refused when two shards ran a case.

The whole path (shards run by pytest-split, merged, read by diff and the HTML page) is in
tests/test_shards.py; these check the command's own rules on reports written by hand.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from pytest_toolbench.commands.cli import main


def case(name: str, model: str, outcome: str = "passed", api: str | None = None,
         **extra: Any) -> dict[str, Any]:
    """A case record as version 1 of the format first wrote it: no ``api``, ``marks`` or
    ``request`` keys (``api`` only when given)."""
    passed = outcome == "passed"
    record: dict[str, Any] = {
        "nodeid": f"s.case.yaml::{name}[{model}{'-' + api if api else ''}]", "case": name,
        "model": model, "file": "s.case.yaml", "line": 1, "outcome": outcome,
        "passes": int(passed), "runs_total": 1, "min_pass_rate": 1.0, "error": None,
        "stages": 1, "turns": 1, "tool_calls": 0, "total_tokens": 15, "latency_ms": 1.0,
        "ttft_ms": None, "runs": [{"number": 1, "passed": passed, "error": None,
                                   "stages": []}], **extra}
    if api:
        record["api"] = api
    return record


def write(path: Path, *cases: dict[str, Any], version: Any = 1) -> Path:
    summary = {"cases": len(cases)}
    document: dict[str, Any] = {"summary": summary, "cases": list(cases)}
    if version is not None:
        document["version"] = version
    path.write_text(json.dumps(document))
    return path


def merge(*argv: Any) -> int:
    return main(["merge", *map(str, argv)])


def test_merge_joins_reports_and_recomputes_the_pass_rates(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    one = write(tmp_path / "one.json", case("x", "a"), case("y", "a", "failed"),
                case("x", "b", api="messages"))
    two = write(tmp_path / "two.json", case("y", "b", "skipped", passes=0, runs_total=0,
                                         runs=[]),
                case("z", "b", api="messages"), case("z", "a"))
    out = tmp_path / "all" / "merged.json"
    assert merge(one, two, "-o", out) == 0
    printed = capsys.readouterr().out
    document = json.loads(out.read_text())
    assert document["version"] == 1
    assert document["summary"] == {"cases": 6, "failed": 1, "passed": 4, "skipped": 1}
    assert [c["nodeid"].split("::")[1] for c in document["cases"]] == [
        "x[a]", "y[a]", "x[b-messages]", "y[b]", "z[b-messages]", "z[a]"]
    assert document["cases"][0]["api"] == "chat"  # read through the typed loader
    assert document["cases"][0]["marks"] == []
    assert f"merged 2 reports (6 cases) into {out}" in printed
    lines = [" ".join(line.split()) for line in printed.splitlines()]
    assert "a 2/3 67%" in lines and "b 2/2 100%" in lines  # per model: runs passed
    assert "chat 2/3 67%" in lines and "messages 2/2 100%" in lines  # per API


def test_a_case_in_two_shards_is_refused_naming_both(tmp_path: Path,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    one = write(tmp_path / "shard1.json", case("x", "a"), case("y", "a"))
    two = write(tmp_path / "shard2.json", case("z", "a"), case("y", "a", "failed"))
    out = tmp_path / "all.json"
    assert merge(one, two, "-o", out) == 2
    error = capsys.readouterr().err
    assert (f"toolbench merge: error: s.case.yaml::y[a] is in both {one} and {two}: each case"
            " must come from one shard") in error
    assert not out.exists()


def test_the_same_report_twice_is_refused(tmp_path: Path,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    one = write(tmp_path / "shard1.json", case("x", "a"))
    assert merge(one, one, "-o", tmp_path / "all.json") == 2
    assert f"s.case.yaml::x[a] is in both {one} and {one}" in capsys.readouterr().err


def test_reports_of_a_newer_format_or_no_report_are_refused(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    ok = write(tmp_path / "ok.json", case("x", "a"))
    newer = write(tmp_path / "newer.json", case("y", "a"), version=2)
    assert merge(ok, newer, "-o", tmp_path / "all.json") == 2
    assert (f"{newer} is a report of format version 2; this pytest-toolbench reads versions"
            " up to 1: upgrade it") in capsys.readouterr().err
    broken = write(tmp_path / "broken.json", {**case("y", "a"), "turns": "many"})
    assert merge(ok, broken, "-o", tmp_path / "all.json") == 2
    assert f"{broken}: case s.case.yaml::y[a]: turns:" in capsys.readouterr().err
    (tmp_path / "text.json").write_text("not json")
    assert merge(ok, tmp_path / "text.json", "-o", tmp_path / "all.json") == 2
    assert "text.json is not JSON" in capsys.readouterr().err
    assert not (tmp_path / "all.json").exists()


def test_a_report_without_a_version_is_read_as_the_first(tmp_path: Path) -> None:
    old = write(tmp_path / "old.json", case("x", "a"), version=None)
    assert merge(old, "-o", tmp_path / "all.json") == 0
    assert json.loads((tmp_path / "all.json").read_text())["summary"] == {
        "cases": 1, "passed": 1}


def test_merge_needs_an_output_and_writes_the_page_too(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    one = write(tmp_path / "one.json", case("x", "a"))
    assert merge(one) == 2
    assert "-o" in capsys.readouterr().err
    page = tmp_path / "page.html"
    assert merge(one, "-o", tmp_path / "all.json", "--html", page) == 0
    assert "x[a]" in page.read_text()
    assert f"wrote {page}" in capsys.readouterr().out


def test_every_reader_of_reports_takes_a_report_of_the_first_version(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A report as version 1 first wrote it (no ``version``, ``api``, ``marks`` or
    ``request``), and a case a script wrote with only the keys it needed: html, diff and
    merge read both through the one loader, the missing keys as their defaults."""
    first = write(tmp_path / "first.json", case("x", "a"), version=None)
    scripted = write(tmp_path / "scripted.json",
                     {"nodeid": "s.case.yaml::x[a]", "outcome": "failed"}, version=None)
    assert main(["html", str(first)]) == 0
    page = first.with_suffix(".html").read_text()
    assert 'data-api="chat"' in page and 'data-marks=""' in page
    assert main(["diff", str(first), str(scripted)]) == 1
    out = capsys.readouterr().out
    assert " ! verdict       passed -> failed" in out and "   turns         1 -> 0" in out
    assert merge(scripted, "-o", tmp_path / "all.json") == 0
    merged = json.loads((tmp_path / "all.json").read_text())
    assert merged["version"] == 1 and merged["cases"][0]["api"] == "chat"
    assert merged["cases"][0]["runs"] == [] and merged["cases"][0]["marks"] == []


def test_a_value_of_the_wrong_type_is_refused_by_every_reader_naming_case_and_key(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    broken = write(tmp_path / "broken.json", {**case("y", "a"), "latency_ms": "fast"})
    for argv in (["html", broken], ["diff", broken, broken], ["merge", broken, "-o",
                                                              tmp_path / "all.json"]):
        assert main([*map(str, argv)]) == 2
        assert (f"{broken}: case s.case.yaml::y[a]: latency_ms: "
                in capsys.readouterr().err)


def run_of(mode: str, started: str, duration_s: float) -> dict[str, Any]:
    return {"mode": mode, "base_url": None, "started": started, "duration_s": duration_s,
            "revision": "1a2b3c", "toolbench": "0.1.0"}


def test_the_shards_runs_become_one_that_diff_reads(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    shards = []
    for number, (started, took) in enumerate([("2026-11-27T03:00:05Z", 20.0),
                                              ("2026-11-27T03:00:00Z", 10.0)]):
        path = write(tmp_path / f"shard{number}.json", case(f"c{number}", "m"))
        document = json.loads(path.read_text())
        path.write_text(json.dumps({**document, "run": run_of("replay", started, took)}))
        shards.append(path)
    out = tmp_path / "merged.json"
    assert merge(*shards, "-o", out) == 0
    assert json.loads(out.read_text())["run"] == {
        "mode": "replay", "base_url": None, "started": "2026-11-27T03:00:00Z",
        "duration_s": 25.0, "revision": "1a2b3c", "toolbench": "0.1.0"}
    # A live run of the same cases, far slower: the diff leaves its timings out.
    live = tmp_path / "live.json"
    live.write_text(json.dumps({"version": 1, "run": run_of("live", "2026-11-27T04:00:00Z", 90),
                                "cases": [case("c0", "m", latency_ms=5000.0),
                                          case("c1", "m", latency_ms=5000.0)]}))
    capsys.readouterr()
    assert main(["diff", str(out), str(live)]) == 0
    assert capsys.readouterr().out == (
        f"toolbench diff {out} -> {live}: 2 cases compared, 0 changed, 0 verdicts regressed;"
        " latency and time to first token not compared: OLD ran replay, NEW live (a replay's"
        " timings are its own)\n")
