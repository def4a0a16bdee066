"""A suite split over CI runners: pytest-split shards (with xdist inside each), joined again
by ``toolbench merge``, and the merged report read by ``toolbench diff`` and the HTML page.

One suite of three files, two models and two wire APIs is recorded against a loopback
server, then replayed from those cassettes: durations stored, three shards run, merged.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from support.chat_server import ChatServer, RecordedRequest, Reply, completion, json_reply

from pytest_toolbench.commands.cli import main

FILES = ("weather", "travel", "search")
CASES_PER_FILE = 2
MATRIX = ("--toolbench-model=a,b", "--toolbench-api=chat,messages")
ITEMS = len(FILES) * CASES_PER_FILE * 2 * 2


def anthropic_message(text: str) -> dict[str, Any]:
    return {"id": "msg_1", "type": "message", "role": "assistant", "model": "m",
            "content": [{"type": "text", "text": text}], "stop_reason": "end_turn",
            "usage": {"input_tokens": 7, "output_tokens": 3}}


def answer(request: RecordedRequest) -> Reply:
    """Each API's requests answered in its own shape; cases run at once when recording."""
    if request.path.endswith("/messages"):
        return json_reply(anthropic_message("hi from messages"))
    return json_reply(completion("hi there"))


def write_suite(pytester: pytest.Pytester, base_url: str) -> None:
    for file in FILES:
        cases = [f"""name: {file}_{number}
endpoint: {{base_url: '{base_url}'}}
stages:
  - name: ask
    user: Say hi ({file} {number})
    expect: {{text: {{$contains: hi}}}}
""" for number in range(CASES_PER_FILE)]
        pytester.makefile(".case.yaml", **{file: "---\n".join(cases)})


@pytest.fixture
def recorded_suite(pytester: pytest.Pytester, chat_server: ChatServer) -> ChatServer:
    chat_server.set_handler(answer)
    write_suite(pytester, chat_server.base_url)
    pytester.runpytest("-p", "no:cacheprovider", "--toolbench-record", *MATRIX
                       ).assert_outcomes(passed=ITEMS)
    chat_server.requests.clear()
    return chat_server


def reported_ids(path: Path) -> list[str]:
    return [case["nodeid"] for case in json.loads(path.read_text())["cases"]]


def run_shard(pytester: pytest.Pytester, durations: Path, group: int, *args: str
              ) -> pytest.RunResult:
    # least_duration gives every shard an item whatever the stored durations; the default
    # (duration_based_chunks) can leave a shard empty when one case took most of the time,
    # as the first one may on a busy machine.
    return pytester.runpytest_subprocess(
        "-p", "no:cacheprovider", *MATRIX, "--splits=3", f"--group={group}",
        "--splitting-algorithm=least_duration", f"--durations-path={durations}", *args,
        timeout=120)


def test_shards_with_xdist_run_every_case_once_and_merge_into_one_report(
        pytester: pytest.Pytester, recorded_suite: ChatServer,
        capsys: pytest.CaptureFixture[str]) -> None:
    durations = pytester.path / ".test_durations"
    stored = pytester.runpytest("-p", "no:cacheprovider", *MATRIX, "--store-durations",
                                f"--durations-path={durations}",
                                f"--toolbench-report={pytester.path / 'whole.json'}")
    stored.assert_outcomes(passed=ITEMS)
    whole = reported_ids(pytester.path / "whole.json")
    assert sorted(json.loads(durations.read_text())) == sorted(whole)  # ids as reported
    # Replayed cases take well under a millisecond, so the stored times are noise: one
    # slow case on a busy machine would take a shard of its own. Even times make the
    # split reproducible (a third of the cases each); the ids are what was stored.
    durations.write_text(json.dumps(dict.fromkeys(whole, 0.01)))

    shards = []
    for group in (1, 2, 3):
        report = pytester.path / f"shard{group}.json"
        result = run_shard(pytester, durations, group, "-n", "2", f"--toolbench-report={report}")
        result.stdout.fnmatch_lines([f"*2 workers [[]{ITEMS // 3} items[]]*",
                                     "*toolbench summary*"])
        assert result.parseoutcomes()["passed"] == len(reported_ids(report)) == ITEMS // 3
        shards.append(report)
    in_shards = [nodeid for report in shards for nodeid in reported_ids(report)]
    assert sorted(in_shards) == sorted(whole), "each case in exactly one shard"
    assert not recorded_suite.requests, "replayed shards touch no network"

    merged = pytester.path / "all.json"
    page = pytester.path / "all.html"
    code = main(["merge", *map(str, shards), "-o", str(merged), "--html", str(page)])
    out = capsys.readouterr().out
    assert code == 0, out
    assert f"merged 3 reports ({ITEMS} cases) into {merged}" in out
    document = json.loads(merged.read_text())
    assert document["summary"] == {"cases": ITEMS, "passed": ITEMS}
    assert sorted(reported_ids(merged)) == sorted(whole)
    assert "weather_0[a-messages]" in page.read_text()

    assert main(["diff", str(pytester.path / "whole.json"), str(merged)]) == 0
    assert f"{ITEMS} cases compared, 0 changed" in capsys.readouterr().out
    assert main(["html", str(merged), "-o", str(pytester.path / "again.html")]) == 0
    assert f"({ITEMS} cases)" in capsys.readouterr().out


def test_a_live_shard_sends_only_its_own_cases_requests(pytester: pytest.Pytester,
                                                         recorded_suite: ChatServer) -> None:
    """Cases started ahead (--toolbench-concurrency) are the shard's, never the ones
    pytest-split deselected."""
    durations = pytester.path / ".test_durations"
    report = pytester.path / "live.json"
    result = pytester.runpytest("-p", "no:cacheprovider", *MATRIX, "--splits=3", "--group=2",
                                f"--durations-path={durations}", "--toolbench-live",
                                "--toolbench-concurrency=8", f"--toolbench-report={report}")
    shard = reported_ids(report)
    result.assert_outcomes(passed=len(shard), deselected=ITEMS - len(shard))
    sent = sorted(request.json()["messages"][-1]["content"]
                  for request in recorded_suite.requests)
    wanted = sorted(f"Say hi ({nodeid.split('::')[1].split('[')[0].replace('_', ' ')})"
                    for nodeid in shard)
    assert sent == wanted
