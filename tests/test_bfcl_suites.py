"""A suite written by ``toolbench import-bfcl``, as its user runs it: no leaderboard data
needed, the records are written here."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from pytest_toolbench.commands.bfcl import main

QUESTION = {
    "id": "demo_0",
    "question": [[{"role": "user", "content": "What is the weather in Paris?"}]],
    "function": [{"name": "get_weather", "description": "Current weather",
                  "parameters": {"type": "dict", "properties": {"city": {"type": "string"}},
                                 "required": ["city"]}}],
}
ANSWER = {"id": "demo_0", "ground_truth": [{"get_weather": {"city": ["Paris"]}}]}


def write_jsonl(path: Path, *rows: dict[str, object]) -> Path:
    path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    return path


def test_the_importer_marks_need_no_registration(pytester: pytest.Pytester) -> None:
    questions = write_jsonl(pytester.path / "BFCL_v4_demo.json", QUESTION)
    answers = write_jsonl(pytester.path / "answers.json", ANSWER)
    assert main([str(questions), str(answers), str(pytester.path / "bfcl")]) == 0

    result = pytester.runpytest("bfcl", "--collect-only", "-q", "--strict-markers",
                                "-W", "error::pytest.PytestUnknownMarkWarning",
                                "-m", "bfcl and bfcl_demo")

    result.stdout.fnmatch_lines(["bfcl/demo_000-000.case.yaml::demo_0", "1 test collected*"])
    assert result.ret == pytest.ExitCode.OK
    # The suite holds its case files and nothing else: no conftest.py, no ini.
    assert [p.name for p in (pytester.path / "bfcl").iterdir()] == ["demo_000-000.case.yaml"]


@pytest.mark.parametrize("content", ["", "\n  \n"], ids=["empty", "blank lines"])
def test_an_empty_answers_file_reads_as_no_answers(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], content: str
) -> None:
    questions = write_jsonl(tmp_path / "BFCL_v4_irrelevance.json", QUESTION)
    answers = tmp_path / "answers.json"
    answers.write_text(content, encoding="utf-8")

    assert main([str(questions), str(answers), str(tmp_path / "out")]) == 0

    out = capsys.readouterr().out
    assert out.splitlines()[1] == (f"note: {answers} is empty: every case expects no tool "
                                   "call, as with '-' (irrelevance)")
    written = (tmp_path / "out" / "irrelevance_000-000.case.yaml").read_text(encoding="utf-8")
    assert next(yaml.safe_load_all(written))["stages"][0]["expect"] == {"tool_calls": []}


def test_an_answers_file_without_answers_is_still_an_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    questions = write_jsonl(tmp_path / "BFCL_v4_demo.json", QUESTION)

    assert main([str(questions), str(questions), str(tmp_path / "out")]) == 1

    assert "holds no answer records" in capsys.readouterr().err
