"""Replay overhead: a suite of recorded cases replayed by pytest, against plain pytest tests.

Writes (in a temporary directory) FILES case files of CASES_PER_FILE single-stage cases
each (default 100 x 10 = 1000: a realistic suite keeps related cases together in one file),
records every cassette once against the loopback chat server with ``--toolbench-record``
(so the real cassette writer produced them), then times ``pytest DIR -q`` replaying them.

Baseline, measured in the same run: as many plain pytest functions in as many files, each
sending the same request body through one shared ``httpx.Client`` whose transport is
``httpx.MockTransport(router.handler)`` of a respx router answering with the same reply,
and checking the same things (finish reason, tool name, argument regex). A second
baseline, the plainest hand-written test of the same request: as many parametrized tests,
one ``@pytest.mark.parametrize`` test function a file, by default in as many files as
there are cases (1,000 files of one test each), posting through the same shared client
(``--parametrized-files 100`` puts them in as many files as the case files, ten a file;
``--no-parametrized`` leaves them out). ``--stream`` makes every side streamed.

Every side runs as ``python -m pytest DIR -q`` subprocesses, the sides taking turns run by
run; the figures are medians of --repeat runs, after one untimed run of each side that
fills its own cache, as any second run on a developer's machine or a CI runner that keeps
pytest's cache finds it: a Python baseline writes its test files' bytecode, the case side
its cassettes' parsed entries (``.pytest_cache/d/toolbench-cassettes``; the case files'
own, ``.pytest_cache/d/toolbench-parsed``, were written by the recording run). Target:
replay <= 1.2 x the respx baseline (<= 1.3 x streamed) and <= 1.5 x the parametrized one.
``--no-cache``: every side runs with ``-p no:cacheprovider``, so the case side parses and
validates every case file and parses every cassette each run, while the Python baselines
still read their bytecode (Python's own cache, which that flag does not turn off).
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

TARGET_RATIO = 1.2
TARGET_RATIO_STREAM = 1.3
TARGET_RATIO_PARAMETRIZED = 1.5
CACHED_ARGS = [".", "-q"]
UNCACHED_ARGS = [".", "-q", "-p", "no:cacheprovider"]

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


PARAMETRIZED_TEST = '''

@pytest.mark.tools
@pytest.mark.parametrize("city", {cities!r})
def test_weather(client, city):
    _ask(client, city, {stream!r})
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
    parser.add_argument("--no-cache", dest="cached", action="store_false",
                        help="run every side with -p no:cacheprovider: the case side parses"
                             " its case files and cassettes at every run (default: each"
                             " side with its own cache, pytest's or Python's bytecode)")
    parser.add_argument("--no-parametrized", dest="parametrized", action="store_false",
                        help="leave out the baseline of parametrized tests")
    parser.add_argument("--parametrized-files", type=int, default=0, metavar="N",
                        help="the parametrized tests in N files (default: a file a case;"
                             " --files puts them in as many files as the case files)")
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
    head = _prepare_shared_client(root, args)
    index = 0
    for number in range(args.files):
        tests = []
        for _ in range(args.cases_per_file):
            tests.append(BASELINE_TEST.format(index=index, stream=args.stream))
            index += 1
        (root / f"test_suite_{number:04d}.py").write_text(head + "".join(tests))
    return index


def prepare_parametrized(root: Path, args: argparse.Namespace) -> int:
    """As many parametrized tests as cases, one test function a file over its share of the
    cities, in ``--parametrized-files`` files, through the same shared client."""
    head = _prepare_shared_client(root, args)
    count = args.files * args.cases_per_file
    files = min(args.parametrized_files or count, count)
    for number in range(files):
        cities = [f"City{index}" for index in range(number, count, files)]
        test = PARAMETRIZED_TEST.format(cities=cities, stream=args.stream)
        (root / f"test_weather_{number:05d}.py").write_text(head + test)
    return count


def _prepare_shared_client(root: Path, args: argparse.Namespace) -> str:
    """The directory, its replies and the conftest of the shared client; the head of its
    test files."""
    root.mkdir(parents=True, exist_ok=True)
    write_pytest_ini(root)
    cities = [f"City{index}" for index in range(args.files * args.cases_per_file)]
    replies = {city: _body(city, args.stream) for city in cities}
    (root / "replies.json").write_text(json.dumps(replies))
    content_type = "text/event-stream" if args.stream else "application/json"
    (root / "conftest.py").write_text(BASELINE_CONFTEST.format(content_type=content_type))
    return BASELINE_HEAD.format(model=MODEL, schema=TOOL_SCHEMA)


def _body(city: str, stream: bool) -> str:
    """The body the loopback server answers ``city`` with (see ``tool_call_handler``)."""
    if not stream:
        return json.dumps(weather_reply(city))
    events = "".join(f"data: {json.dumps(chunk)}\n\n" for chunk in weather_chunks(city))
    return events + "data: [DONE]\n\n"


def pytest_args(args: argparse.Namespace) -> list[str]:
    return CACHED_ARGS if args.cached else UNCACHED_ARGS


def time_sides(sides: list[Path], repeat: int, argv: list[str], cached: bool
               ) -> list[list[Timing]]:
    """``repeat`` timed runs of each side (the cases first), taking turns, after one untimed
    run of each side that has a cache to fill: every baseline (the bytecode of its Python
    test files, which every later run reads) and, ``cached``, the cases (their cassettes'
    entries). The case files were just recorded, so they are in the page cache already."""
    for root in sides if cached else sides[1:]:
        repeat_runs(lambda root=root: run_pytest(argv, root), 1)
    return alternating_runs([lambda root=root: run_pytest(argv, root) for root in sides],
                            repeat)


def targets(args: argparse.Namespace) -> list[float]:
    """Each baseline's target ratio, in the order of ``sides``."""
    found = [TARGET_RATIO_STREAM if args.stream else TARGET_RATIO]
    return found + [TARGET_RATIO_PARAMETRIZED] if args.parametrized else found


def report(count: int, timings: list[list[Timing]], names: list[str],
           limits: list[float], args: argparse.Namespace) -> None:
    cases, *baselines = timings
    ours = median([t.wall_s for t in cases])
    kind = "streamed" if args.stream else "JSON"
    caches = "each side with its cache" if args.cached else "-p no:cacheprovider"
    print(f"\nreplay of {count} single-stage cases ({kind} replies, {caches}),"
          f" median of {len(cases)}")
    rows = []
    for name, runs in zip(names, timings):
        wall = median([t.wall_s for t in runs])
        rows.append([name, wall, _walls(runs), 1000 * wall / count,
                     median([t.maxrss_mb for t in runs])])
    print_table(["run", "wall s (median)", "runs", "ms/case", "peak RSS MB"], rows)
    for name, runs, limit in zip(names[1:], baselines, limits):
        ratio = ours / median([t.wall_s for t in runs])
        verdict = "met" if ratio <= limit else "MISSED"
        print(f"wall ratio to {name}: {ratio:.2f}x (target <= {limit}x): {verdict}")


def report_instructions(sides: list[Path], names: list[str], limits: list[float],
                        argv: list[str]) -> None:
    """Each side's instruction count (the Python files' bytecode is cached by then)."""
    counts = [count_instructions(argv, root) for root in sides]
    if None in counts:
        print("instructions: valgrind is not installed")
        return
    ours = counts[0]
    print("instructions: " + ", ".join(f"{name} {count / 1e9:.2f} G"
                                       for name, count in zip(names, counts)))
    for name, count, limit in zip(names[1:], counts[1:], limits):
        ratio = ours / count
        verdict = "met" if ratio <= limit else "MISSED"
        print(f"instruction ratio to {name}: {ratio:.2f}x (target <= {limit}x): {verdict}")


def _walls(timings: list[Timing]) -> str:
    return " ".join(f"{t.wall_s:.2f}" for t in timings)


def profile(root: Path, top: int, argv: list[str]) -> None:
    """One replay run profiled in every thread (replayed cases run on pytest's own; live
    ones would run on the session's loop thread)."""
    script = Path(__file__).with_name("profile_threads.py")
    command = [sys.executable, str(script), "--top", str(top), "--", *argv]
    subprocess.run(command, cwd=root, env=clean_env(), check=False)


def run(base: Path, args: argparse.Namespace) -> None:
    count = prepare_cases(base / "cases", args)
    prepare_baseline(base / "baseline", args)
    sides = [base / "cases", base / "baseline"]
    names = ["toolbench replay", "respx baseline"]
    if args.parametrized:
        prepare_parametrized(base / "parametrized", args)
        sides.append(base / "parametrized")
        files = min(args.parametrized_files or count, count)
        names.append(f"parametrized, {files} files")
    argv = pytest_args(args)
    limits = targets(args)
    timings = time_sides(sides, args.repeat, argv, args.cached)
    report(count, timings, names, limits, args)
    if args.instructions:
        report_instructions(sides, names, limits, argv)
    if args.profile:
        profile(base / "cases", args.profile, argv)


def main() -> None:
    args = parse_args()
    if args.keep is not None:
        run(args.keep, args)
        return
    with tempfile.TemporaryDirectory(prefix="toolbench-replay-") as base:
        run(Path(base), args)


if __name__ == "__main__":
    main()
