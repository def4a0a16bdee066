"""What an MCP server costs a case: replayed, what canned tools do; live, its start-up, once.

Replay: two suites of FILES x CASES_PER_FILE cases (default 20 x 10 = 200), alike but for
where the tool comes from: canned (``result:``) in one, the real ``mcp-server-time`` over
stdio (``tools: [{mcp: time}]``) in the other. Each case runs the agent loop: the loopback
model calls ``get_current_time`` CALLS times, one call a turn, then answers. Both suites are
recorded once (the MCP one against the real server, ``scope: session`` so recording starts
it once), then replayed, the sides taking turns run by run, medians of --repeat runs.
Target: the MCP suite replays in no more time than the canned one (replay starts no server
and does not import the ``mcp`` SDK).

Live: LIVE_CASES cases (default 10) at ``--toolbench-concurrency 1``, each with a fresh
stdio server (``scope: case``, the default), making 1 and then LIVE_CALLS calls, beside
the same cases with canned tools. The extra wall time over the canned side, divided by the
cases, is what one server costs a case: about the same with 1 call and with LIVE_CALLS, as
the start-up is paid once per case, not per call. Each call's own time is read from the
JSON report (a tool run's ``duration_ms``).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from _common import (
    RecordedRequest,
    Reply,
    Timing,
    alternating_runs,
    chunks_for,
    completion,
    count_instructions,
    json_reply,
    median,
    print_table,
    repeat_runs,
    run_pytest,
    sse_reply,
    start_chat_server,
    write_pytest_ini,
)

PYTEST_ARGS = [".", "-q", "-p", "no:cacheprovider"]
TIME_SERVER = [sys.executable, "-m", "mcp_server_time", "--local-timezone", "UTC"]
REPLY_TEXT = "It is noon in Paris."

CANNED_TOOL = """\
  - name: get_current_time
    description: Get current time in a specific timezone
    parameters:
      type: object
      title: get_current_timeArguments
      properties:
        timezone:
          type: string
          title: Timezone
          description: "IANA timezone name (e.g., 'America/New_York', 'Europe/London'). Use
            'UTC' as local timezone if no timezone provided by the user."
      required: [timezone]
    result: {timezone: Europe/Paris, datetime: "2026-11-24T12:00:00+01:00",
             day_of_week: Tuesday, is_dst: false}
"""
"""The tool as the server lists it, answering as the server does: the model's requests are
the same size on both sides."""
MCP_TOOL = """\
  - mcp: time
    include: [get_current_time]
"""
CASE = """\
name: clock_{index:05d}
marks: [tools]
model: gpt-4o-mini
tools:
{tools}stages:
  - name: ask
    user: What time is it in Paris? (case {index})
    stream: {stream}
    run_tools: true
    max_turns: {turns}
    expect:
      tool_calls: {{$len: {calls}}}
      text: {{$contains: noon}}
"""


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--files", type=int, default=20, help="replay: case files (default 20)")
    parser.add_argument("--cases-per-file", type=int, default=10,
                        help="replay: cases per file (default 10: 200 cases a suite)")
    parser.add_argument("--calls", type=int, default=2,
                        help="replay: tool calls a case makes (default 2)")
    parser.add_argument("--repeat", type=int, default=5,
                        help="timed runs per side (median; default 5)")
    parser.add_argument("--live-cases", type=int, default=10,
                        help="live: cases per run (default 10)")
    parser.add_argument("--live-calls", type=int, default=5,
                        help="live: tool calls a case makes in the second run (default 5)")
    parser.add_argument("--instructions", action="store_true",
                        help="also count each replay side's instructions once under valgrind")
    return parser.parse_args()


# ---------------------------------------------------------------------------- suites


def write_suite(root: Path, mcp: bool, files: int, per_file: int, calls: int,
                scope: str, stream: bool = False) -> int:
    """``files`` case files of ``per_file`` cases; MCP ones declare the server once a file.
    ``stream``: every request of the loop asks for a stream (``bench_faults.py``)."""
    root.mkdir(parents=True, exist_ok=True)
    write_pytest_ini(root)
    server = f"mcp_servers:\n  time: {{command: {json.dumps(TIME_SERVER)}, scope: {scope}}}\n"
    index = 0
    for number in range(files):
        documents = [server] if mcp else []
        for _ in range(per_file):
            documents.append(CASE.format(index=index, tools=MCP_TOOL if mcp else CANNED_TOOL,
                                         calls=calls, turns=calls + 1,
                                         stream=str(stream).lower()))
            index += 1
        (root / f"clock_{number:04d}.case.yaml").write_text("---\n".join(documents))
    return index


def model_calling(calls: int) -> Callable[[RecordedRequest], Reply]:
    """A loopback model that calls ``get_current_time`` once a turn, ``calls`` times, then
    answers; streamed when the request asks for a stream."""
    def answer(request: RecordedRequest) -> Reply:
        body = request.json()
        done = sum(1 for message in body["messages"] if message["role"] == "tool")
        reply: dict[str, Any] = {"text": REPLY_TEXT}
        if done < calls:
            reply = {"tool_calls": [{
                "id": f"call_{done}", "type": "function", "function": {
                    "name": "get_current_time", "arguments": '{"timezone": "Europe/Paris"}'}}]}
        if body.get("stream"):
            return sse_reply(chunks_for(**reply))
        return json_reply(completion(**reply))
    return answer


def against_model(root: Path, calls: int, *extra: str) -> Timing:
    """One run of the suite in ``root`` against the loopback model."""
    with start_chat_server() as server:
        server.set_handler(model_calling(calls))
        timing = run_pytest([*PYTEST_ARGS, f"--toolbench-base-url={server.base_url}", *extra],
                            root)
    if timing.returncode != 0:
        sys.exit(f"pytest {' '.join(extra)} failed in {root}:\n{timing.output[-3000:]}")
    return timing


# ---------------------------------------------------------------------------- replay


def replay(base: Path, args: argparse.Namespace) -> None:
    sides = {"canned tools": base / "canned", "MCP server (stdio)": base / "mcp"}
    count = 0
    for name, root in sides.items():
        count = write_suite(root, name != "canned tools", args.files, args.cases_per_file,
                            args.calls, "session")
        recorded = against_model(root, args.calls, "--toolbench-record")
        print(f"{name}: recorded {count} cases in {recorded.wall_s:.1f} s")
    runs = [lambda root=root: run_pytest(PYTEST_ARGS, root) for root in sides.values()]
    repeat_runs(runs[0], 1)  # untimed: the page cache and bytecode, for both alike
    canned, mcp = alternating_runs(runs, args.repeat)
    rows = [[name, median([t.wall_s for t in timings]), 1000 * median(
                [t.wall_s for t in timings]) / count, median([t.maxrss_mb for t in timings])]
            for name, timings in zip(sides, (canned, mcp))]
    print(f"\nreplay of {count} cases, {args.calls} tool calls each, median of {args.repeat}")
    print_table(["tools from", "wall s", "ms/case", "peak RSS MB"], rows)
    ratio = rows[1][1] / rows[0][1]
    print(f"MCP / canned: {ratio:.2f}x (target <= 1.0x, within the runs' noise):"
          f" {'met' if ratio <= 1.05 else 'MISSED'}")
    if args.instructions:
        counted = [count_instructions(PYTEST_ARGS, root) for root in sides.values()]
        if None in counted:
            print("instructions: valgrind is not installed")
        else:
            ours, theirs = counted[1], counted[0]
            assert ours is not None and theirs is not None
            print(f"instructions: canned {theirs / 1e9:.3f} G, MCP {ours / 1e9:.3f} G,"
                  f" ratio {ours / theirs:.3f}x")


# ---------------------------------------------------------------------------- live


def live(base: Path, args: argparse.Namespace) -> None:
    live_args = ("--toolbench-live", "--toolbench-concurrency", "1",
                 "--toolbench-report=report.json")
    rows, walls, call_ms = [], {}, []
    for calls in (1, args.live_calls):
        for mcp in (False, True):
            root = base / f"live_{'mcp' if mcp else 'canned'}_{calls}"
            write_suite(root, mcp, 1, args.live_cases, calls, "case")
            against_model(root, calls, *live_args)  # untimed: bytecode, page cache
            timings = []
            for _ in range(args.repeat):
                timings.append(against_model(root, calls, *live_args))
                if mcp:
                    call_ms += tool_run_ms(root / "report.json")
            walls[mcp, calls] = median([t.wall_s for t in timings])
            rows.append(["MCP server (stdio, scope: case)" if mcp else "canned tools",
                         calls, walls[mcp, calls], 1000 * walls[mcp, calls] / args.live_cases])
    print(f"\nlive: {args.live_cases} cases at concurrency 1, median of {args.repeat}")
    print_table(["tools from", "calls/case", "wall s", "ms/case"], rows)
    per_case = [1000 * (walls[True, calls] - walls[False, calls]) / args.live_cases
                for calls in (1, args.live_calls)]
    print(f"an MCP server costs a case {per_case[0]:.0f} ms with 1 call and {per_case[1]:.0f} ms"
          f" with {args.live_calls} (start, initialize, tools/list, stop: once a case)")
    print(f"tools/call as the report times it: median {median(call_ms):.1f} ms,"
          f" max {max(call_ms):.1f} ms ({len(call_ms)} calls)")


def tool_run_ms(report: Path) -> list[float]:
    """The duration of every tool run in a JSON report."""
    cases = json.loads(report.read_text(encoding="utf-8"))["cases"]
    return [run["duration_ms"] for case in cases for case_run in case["runs"]
            for stage in case_run["stages"] for attempt in stage["attempts"]
            for turn in attempt["turns"] for run in turn["tool_runs"]]


def main() -> None:
    args = parse_args()
    with tempfile.TemporaryDirectory(prefix="toolbench-mcp-") as base:
        replay(Path(base), args)
        live(Path(base), args)


if __name__ == "__main__":
    main()
