"""Replay overhead: a suite of recorded cases replayed by pytest, against plain pytest tests.

Writes (in a temporary directory) FILES case files of CASES_PER_FILE single-stage cases
each (default 100 x 10 = 1000: a realistic suite keeps related cases together in one file),
records every cassette once against the loopback chat server with ``--toolbench-record``
(so the real cassette writer produced them), then times ``pytest DIR -q`` replaying them.

Baseline, measured in the same run: as many plain pytest functions in as many files, each
sending the same request body through one shared ``httpx.Client`` whose transport is
``httpx.MockTransport(router.handler)`` of a respx router answering with the same reply,
and checking the same things (finish reason, tool name, argument regex).

Both run as ``python -m pytest DIR -q -p no:cacheprovider`` subprocesses, the sides taking
turns run by run; the figures are medians of --repeat runs (the baseline after one untimed
run that writes its bytecode; the recording run already read the case files). Target:
replay <= 1.5 x baseline. ``--cached``: both sides run with pytest's cache instead, as on
a developer's machine, so the case side reads its case files back parsed
(``.pytest_cache/d/toolbench-parsed``, filled by the recording run) and, from the first
timed run on, its cassettes too (``.pytest_cache/d/toolbench-cassettes``).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

from _common import (
    MODEL,
    TOOL_SCHEMA,
    Timing,
    alternating_runs,
    clean_env,
    count_instructions,
    median,
    print_table,
    repeat_runs,
    run_pytest,
    start_chat_server,
    tool_call_handler,
    weather_chunks,
    weather_reply,
    write_case_suite,
    write_pytest_ini,
)

TARGET_RATIO = 1.5
PYTEST_ARGS = [".", "-q", "-p", "no:cacheprovider"]
CACHED_ARGS = [".", "-q"]

BASELINE_CONFTEST = '''\
"""One shared httpx.Client whose transport is a respx router: the plain-pytest baseline."""

import json
import pathlib

import httpx
import pytest
import respx

# city -> response body, as the loopback server sent it when the cassettes were recorded.
with open(pathlib.Path(__file__).with_name("replies.json"), encoding="utf-8") as file:
    REPLIES = json.load(file)
CONTENT_TYPE = {content_type!r}


def _answer(request):
    body = json.loads(request.content)
    city = body["messages"][-1]["content"].rsplit(" ", 1)[-1].rstrip("?")
    return httpx.Response(200, text=REPLIES[city], headers={{"content-type": CONTENT_TYPE}})


@pytest.fixture(scope="session")
def client():
    router = respx.Router(assert_all_called=False)
    router.post(path__regex=r"/chat/completions$").mock(side_effect=_answer)
    transport = httpx.MockTransport(router.handler)
    with httpx.Client(base_url="http://llm.invalid/v1/", transport=transport) as client:
        yield client
'''

BASELINE_HEAD = '''\
import json
import re

import pytest

MODEL = {model!r}
TOOLS = [{{"type": "function", "function": {{"name": "get_weather",
           "description": "Current weather for a city", "parameters": {schema!r}}}}}]


def _reply(client, body):
    response = client.post("chat/completions", json=body)
    assert response.status_code == 200
    return response.json()["choices"][0]


def _streamed_reply(client, body):
    with client.stream("POST", "chat/completions", json=body) as response:
        assert response.status_code == 200
        finish, name, parts = None, "", []
        for line in response.iter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            for choice in json.loads(line[6:])["choices"]:
                finish = choice["finish_reason"] or finish
                for call in choice["delta"].get("tool_calls") or []:
                    name = call["function"].get("name") or name
                    parts.append(call["function"].get("arguments", ""))
    call = {{"function": {{"name": name, "arguments": "".join(parts)}}}}
    return {{"finish_reason": finish, "message": {{"tool_calls": [call]}}}}


def _ask(client, city, stream):
    body = {{"model": MODEL, "messages": [{{"role": "user",
            "content": f"What's the weather in {{city}}?"}}], "tools": TOOLS,
            "temperature": 0, "seed": 7}}
    if stream:
        body.update(stream=True, stream_options={{"include_usage": True}})
    choice = _streamed_reply(client, body) if stream else _reply(client, body)
    assert choice["finish_reason"] == "tool_calls"
    (call,) = choice["message"]["tool_calls"]
    assert call["function"]["name"] == "get_weather"
    assert re.search(f"(?i)^{{city}}$", json.loads(call["function"]["arguments"])["city"])
'''

BASELINE_TEST = '''

@pytest.mark.tools
def test_weather_{index:05d}(client):
    _ask(client, "City{index}", {stream!r})
'''


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--files", type=int, default=100, help="case files (default 100)")
    parser.add_argument("--cases-per-file", type=int, default=10,
                        help="cases per file (default 10: 1000 cases in all)")
    parser.add_argument("--repeat", type=int, default=3,
                        help="timed runs per side (median; default 3)")
    parser.add_argument("--stream", action="store_true",
                        help="streamed stages (SSE replies) instead of JSON bodies")
    parser.add_argument("--profile", type=int, default=0, metavar="N",
                        help="after timing, profile one replay run (all threads) and print"
                             " its top N")
    parser.add_argument("--instructions", action="store_true",
                        help="also count each side's instructions once under valgrind"
                             " (cachegrind): a ratio the machine's load does not move")
    parser.add_argument("--cached", action="store_true",
                        help="run both sides with pytest's cache (parsed case files kept)")
    parser.add_argument("--keep", type=Path, default=None,
                        help="generate into this directory and keep it (for profiling)")
    return parser.parse_args()


def prepare_cases(root: Path, args: argparse.Namespace) -> int:
    """Write the case files and record their cassettes against the loopback server."""
    count = write_case_suite(root, args.files, args.cases_per_file, args.stream)
    with start_chat_server() as server:
        server.set_handler(tool_call_handler())
        recorded = run_pytest([*pytest_args(args), "--toolbench-record",
                               f"--toolbench-base-url={server.base_url}"], root)
    if recorded.returncode != 0:
        sys.exit(f"recording failed:\n{recorded.output[-3000:]}")
    cassettes = len(list(root.glob("__cassettes__/*/*.yaml")))
    print(f"recorded {cassettes} cassettes in {recorded.wall_s:.1f} s")
    return count


def prepare_baseline(root: Path, args: argparse.Namespace) -> int:
    """The same number of plain pytest functions, through a respx-mocked shared client."""
    root.mkdir(parents=True, exist_ok=True)
    write_pytest_ini(root)
    cities = [f"City{index}" for index in range(args.files * args.cases_per_file)]
    replies = {city: _body(city, args.stream) for city in cities}
    (root / "replies.json").write_text(json.dumps(replies))
    content_type = "text/event-stream" if args.stream else "application/json"
    (root / "conftest.py").write_text(BASELINE_CONFTEST.format(content_type=content_type))
    head = BASELINE_HEAD.format(model=MODEL, schema=TOOL_SCHEMA)
    index = 0
    for number in range(args.files):
        tests = []
        for _ in range(args.cases_per_file):
            tests.append(BASELINE_TEST.format(index=index, stream=args.stream))
            index += 1
        (root / f"test_suite_{number:04d}.py").write_text(head + "".join(tests))
    return index


def _body(city: str, stream: bool) -> str:
    """The body the loopback server answers ``city`` with (see ``tool_call_handler``)."""
    if not stream:
        return json.dumps(weather_reply(city))
    events = "".join(f"data: {json.dumps(chunk)}\n\n" for chunk in weather_chunks(city))
    return events + "data: [DONE]\n\n"


def pytest_args(args: argparse.Namespace) -> list[str]:
    return CACHED_ARGS if args.cached else PYTEST_ARGS


def time_sides(cases: Path, baseline: Path, repeat: int, argv: list[str]
               ) -> list[list[Timing]]:
    """``repeat`` timed runs of each side, taking turns, after one untimed run of the
    baseline (it writes the bytecode of its Python test files, which every later run reads;
    the case files were just recorded, so they are in the page cache already)."""
    repeat_runs(lambda: run_pytest(argv, baseline), 1)
    return alternating_runs([lambda: run_pytest(argv, cases),
                             lambda: run_pytest(argv, baseline)], repeat)


def report(count: int, cases: list[Timing], baseline: list[Timing], stream: bool) -> None:
    ours, theirs = median([t.wall_s for t in cases]), median([t.wall_s for t in baseline])
    kind = "streamed" if stream else "JSON"
    print(f"\nreplay of {count} single-stage cases ({kind} replies), median of {len(cases)}")
    print_table(
        ["run", "wall s (median)", "runs", "ms/case", "peak RSS MB"],
        [
            ["toolbench replay", ours, _walls(cases), 1000 * ours / count,
             median([t.maxrss_mb for t in cases])],
            ["baseline: pytest + httpx + respx", theirs, _walls(baseline),
             1000 * theirs / count, median([t.maxrss_mb for t in baseline])],
        ],
    )
    ratio = ours / theirs
    verdict = "met" if ratio <= TARGET_RATIO else "MISSED"
    print(f"ratio {ratio:.2f}x (target <= {TARGET_RATIO}x): {verdict}")


def report_instructions(base: Path, argv: list[str]) -> None:
    """Each side's instruction count (the Python files' bytecode is cached by then)."""
    ours = count_instructions(argv, base / "cases")
    theirs = count_instructions(argv, base / "baseline")
    if ours is None or theirs is None:
        print("instructions: valgrind is not installed")
        return
    print(f"instructions: toolbench {ours / 1e9:.2f} G, baseline {theirs / 1e9:.2f} G,"
          f" ratio {ours / theirs:.2f}x")


def _walls(timings: list[Timing]) -> str:
    return " ".join(f"{t.wall_s:.2f}" for t in timings)


def profile(root: Path, top: int) -> None:
    """One replay run profiled in every thread (replayed cases run on pytest's own; live
    ones would run on the session's loop thread)."""
    script = Path(__file__).with_name("profile_threads.py")
    command = [sys.executable, str(script), "--top", str(top), "--", *PYTEST_ARGS]
    subprocess.run(command, cwd=root, env=clean_env(), check=False)


def run(base: Path, args: argparse.Namespace) -> None:
    count = prepare_cases(base / "cases", args)
    prepare_baseline(base / "baseline", args)
    argv = pytest_args(args)
    cases, baseline = time_sides(base / "cases", base / "baseline", args.repeat, argv)
    report(count, cases, baseline, args.stream)
    if args.instructions:
        report_instructions(base, argv)
    if args.profile:
        profile(base / "cases", args.profile)


def main() -> None:
    args = parse_args()
    if args.keep is not None:
        run(args.keep, args)
        return
    with tempfile.TemporaryDirectory(prefix="toolbench-replay-") as base:
        run(Path(base), args)


if __name__ == "__main__":
    main()
