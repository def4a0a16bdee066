"""Progressive execution: how soon a ``run_tools: progressive`` stage's tools start after
their call's arguments close in the stream.

A suite of CASES live cases (``--toolbench-live``, concurrency 1), each one streamed stage
with ``run_tools: progressive`` and a ``python`` tool, runs against the project's loopback
chat server, whose scripted model streams CALLS calls a reply, each call's arguments in
several events, PAUSE ms between events (as a model writes them), then answers the tools'
results with text. From the JSON report, each turn's timeline gives, per call, when the
API marked its arguments complete (``closed_ms``) and when its tool started
(``started_ms``), on the stream's clock: the delay between them is the figure. Target: the
median and the 95th percentile within 5 ms (the maximum is shown; on a shared machine a
run descheduled for longer than that is the machine's, not the plugin's).

Baseline, same run: the same suite with ``run_tools: true``, whose tools start once the
stream has ended: the same delay, which progressive execution takes out, and the time the
summary says it saved.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
from pathlib import Path
from typing import Any

from _common import (
    ChatServer,
    RecordedRequest,
    Reply,
    chunks_for,
    print_table,
    run_pytest,
    sse_reply,
    start_chat_server,
    write_pytest_ini,
)
from support.chat_server import SSEPause

TARGET_MS = 5.0

CASE = """name: progressive_{index}
model: m
endpoint: {{base_url: '{url}'}}
tools:
  - name: lookup
    parameters: {{type: object, properties: {{city: {{type: string}}}}, required: [city]}}
    python: bench_tools:lookup
stages:
  - name: plan
    user: Weather in {cities}?
    stream: true
    run_tools: {run_tools}
    expect:
      text: {{$contains: sunny}}
"""

TOOLS = '''def lookup(city):
    return {"city": city, "temp_c": 21}
'''


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cases", type=int, default=40, help="cases a side (default 40)")
    parser.add_argument("--calls", type=int, default=3, help="calls a reply (default 3)")
    parser.add_argument("--pause", type=float, default=15.0,
                        help="ms between two events of a stream (default 15)")
    return parser.parse_args()


def model(calls: int, pause_s: float) -> Any:
    """Calls first (their events ``pause_s`` apart), then text once the results are in."""
    def answer(request: RecordedRequest) -> Reply:
        body = request.json()
        if body["messages"][-1]["role"] == "tool":
            return sse_reply(chunks_for("All sunny."))
        cities = [f"City{n}" for n in range(calls)]
        chunks = chunks_for(tool_calls=[("lookup", {"city": city}) for city in cities], split=4)
        return sse_reply([piece for chunk in chunks for piece in (SSEPause(pause_s), chunk)])
    return answer


def write_suite(root: Path, server: ChatServer, cases: int, calls: int, run_tools: str) -> None:
    root.mkdir()
    write_pytest_ini(root)
    (root / "conftest.py").write_text("import sys, os\nsys.path.insert(0, os.path.dirname("
                                      "__file__))\n")
    (root / "bench_tools.py").write_text(TOOLS)
    cities = " and ".join(f"City{n}" for n in range(calls))
    text = "---\n".join(CASE.format(index=index, url=server.base_url, cities=cities,
                                    run_tools=run_tools) for index in range(cases))
    (root / "suite.case.yaml").write_text(text)


def delays(report: Path) -> tuple[list[float], list[float]]:
    """Each call's delay from its close to its tool's start, and each turn's saved ms."""
    data = json.loads(report.read_text(encoding="utf-8"))
    found, saved = [], []
    for case in data["cases"]:
        for run in case["runs"]:
            for stage in run["stages"]:
                for attempt in stage["attempts"]:
                    for turn in attempt["turns"]:
                        timeline = turn.get("timeline")
                        if not timeline:
                            continue
                        found += [call["started_ms"] - call["closed_ms"]
                                  for call in timeline["calls"]
                                  if call["closed_ms"] is not None]
                        if timeline["saved_ms"] is not None:
                            saved.append(timeline["saved_ms"])
    return found, saved


def side(root: Path) -> tuple[list[float], list[float], float]:
    report = root / "report.json"
    timing = run_pytest(["-q", "-p", "no:cacheprovider", "--toolbench-live",
                         "--toolbench-concurrency", "1", f"--toolbench-report={report}"], root)
    if timing.returncode != 0:
        raise SystemExit(f"pytest exited with {timing.returncode}:\n{timing.output[-3000:]}")
    found, saved = delays(report)
    return found, saved, timing.wall_s


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def main() -> None:
    args = parse_args()
    with start_chat_server() as server, tempfile.TemporaryDirectory() as folder:
        server.set_handler(model(args.calls, args.pause / 1000))
        rows = []
        for run_tools in ("progressive", "true"):
            root = Path(folder) / run_tools
            write_suite(root, server, args.cases, args.calls, run_tools)
            found, saved, wall = side(root)
            rows.append([f"run_tools: {run_tools}", len(found), statistics.median(found),
                         percentile(found, 0.95), max(found),
                         statistics.median(saved) if saved else "-", wall])
    print(f"{args.cases} cases, {args.calls} calls a reply, {args.pause:g} ms between events")
    print_table(["side", "calls", "close->start median ms", "p95 ms", "max ms",
                 "saved a turn, median ms", "wall s"], rows)
    median, p95 = rows[0][2], rows[0][3]
    met = median <= TARGET_MS and p95 <= TARGET_MS
    print(f"progressive: median {median:.2f} ms, p95 {p95:.2f} ms, target {TARGET_MS:g} ms:"
          f" {'met' if met else 'missed'}")


if __name__ == "__main__":
    main()
