"""The HTML report: how long a page of 1,000 cases takes to open in headless chromium.

The report is built with the record types the plugin itself fills (``CaseResult`` down to
each ``Turn``, made ``CaseRecord`` and JSON as a session does), so the page is the one a
session of that size writes: per case one stage of two turns (a streamed tool call with its
tool run, then a text answer, with reasoning on every third), each turn with its request
body (the whole conversation so far, tools included), two models, two APIs, marks, and one
case in ten failed with expected vs actual. ``render_html`` draws it.

Timed two ways, on the page and on the page of an empty report (the baseline), measured
alternately in the same run, median of --repeat runs each:

- wall: ``chromium --headless --dump-dom PAGE``, the whole command (browser start-up, read,
  parse, style, layout, the filter script run over every case, the DOM written out). The
  page's own cost is the difference from the baseline; on a shared machine it wanders.
- in page: a copy of each page carries one more script, last in the body and allowed by
  its hash, that forces style and layout (``document.body.offsetHeight``) after the
  report's own script and writes ``performance.now()``: milliseconds from the start of the
  navigation to a laid-out page with its filters applied. The dumped DOM holds the figure.

Each run is checked: the dumped DOM must show the script ran over every case
(``<span id="shown">N</span>``). Target: the page opens in < 2 s (its own wall cost, and
the in-page figure).
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import json
import random
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from _common import median, print_table

from pytest_toolbench.records import (
    CaseResult,
    Failure,
    Reply,
    RunResult,
    StageAttempt,
    StageResult,
    StreamStats,
    ToolCall,
    ToolRun,
    Turn,
)
from pytest_toolbench.report.html import render_html
from pytest_toolbench.report.json_report import CaseRecord, records_of

TARGET_S = 2.0
MODELS = ("gpt-4o-mini", "gemma-3-270m")
WORDS = ["the", "weather", "in", "Paris", "is", "sunny", "with", "a", "light", "breeze",
         "and", "high", "of", "twenty", "one", "degrees", "so", "jacket", "not", "needed"]
TOOLS = [{"type": "function", "function": {
    "name": "get_weather", "description": "Current weather for a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                   "required": ["city"]}}}]


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cases", type=int, default=1000, help="cases in the report (1000)")
    parser.add_argument("--repeat", type=int, default=5, help="chromium runs per page (5)")
    parser.add_argument("--keep", type=Path, default=None, metavar="DIR",
                        help="write the pages into DIR instead of a temporary folder")
    return parser.parse_args()


# ---------------------------------------------------------------------------- the report


def build_report(cases: int) -> dict[str, Any]:
    """A report document of ``cases`` cases, as a session writes it."""
    rng = random.Random(7)
    records = [case_record(index, rng) for index in range(cases)]
    outcomes = [record["outcome"] for record in records]
    summary = {"cases": cases, **{o: outcomes.count(o) for o in sorted(set(outcomes))}}
    return {"version": 1, "summary": summary, "cases": records}


def case_record(index: int, rng: random.Random) -> dict[str, Any]:
    failed = index % 10 == 0
    api = "messages" if index % 3 == 0 else "chat"
    result = CaseResult(case=f"weather_{index:04d}", model=MODELS[index % 2],
                        file=f"cases/suite_{index // 10:03d}.case.yaml", line=1 + index % 10 * 24,
                        runs=[RunResult(1, [StageResult("ask", [attempt(index, failed, rng)])])],
                        api=api)
    nodeid = f"{result.file}::{result.case}[{result.model}{'' if api == 'chat' else '-' + api}]"
    record = CaseRecord.of(result, nodeid, "failed" if failed else "passed").to_json()
    record["marks"] = ["tools", "weather"] if index % 2 else ["tools"]
    return record


def attempt(index: int, failed: bool, rng: random.Random) -> StageAttempt:
    city = "Lyon" if failed else "Paris"
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": "You answer questions about the weather."},
        {"role": "user", "content": f"What is the weather in Paris? (case {index})"}]
    call = ToolCall("get_weather", json.dumps({"city": city}), id=f"call_{index}",
                    arguments={"city": city}, completed_ms=rng.uniform(80, 200))
    first = Reply(tool_calls=[call], finish_reason="tool_calls", api_finish_reason="tool_calls",
                  usage={"prompt_tokens": 60, "completion_tokens": 12, "total_tokens": 72},
                  latency_ms=rng.uniform(200, 400), ttft_ms=rng.uniform(50, 80),
                  stream=StreamStats(done=True, chunks=9, usage=True))
    run = ToolRun(call.id, call.name, call.arguments_raw, '{"temp_c": 21, "sky": "sunny"}')
    ask = Turn(_request(messages), streamed=True, reply=first, tool_runs=[run],
               stop_reason="tool_use", elapsed_ms=first.latency_ms)
    messages += [first.to_message(), {"role": "tool", "tool_call_id": call.id,
                                      "content": run.content}]
    text = " ".join(rng.choice(WORDS) for _ in range(40))
    second = Reply(text=text, finish_reason="stop", api_finish_reason="stop",
                   reasoning="They asked about Paris; the tool said sunny." if index % 3 else None,
                   usage={"prompt_tokens": 90, "completion_tokens": 50, "total_tokens": 140},
                   latency_ms=rng.uniform(300, 900))
    answer = Turn(_request(messages), streamed=False, reply=second, stop_reason="end_turn",
                  elapsed_ms=second.latency_ms)
    failures = [Failure("expected call 0 get_weather(city='Paris'), got city='Lyon'",
                        ("stages", 0, "expect", "tool_calls", 0, "arguments", "city"), 12,
                        {"city": "Paris"}, {"city": "Lyon"})] if failed else []
    trail = ["idle", "sending", "receiving", "running_tools", "sending", "receiving",
             "checking", "failed" if failed else "passed"]
    return StageAttempt("ask", 1, trail, [ask, answer], failures)


def _request(messages: list[dict[str, Any]]) -> dict[str, Any]:
    return {"model": MODELS[0], "messages": list(messages), "tools": TOOLS, "temperature": 0}


# ---------------------------------------------------------------------------- timing

CLOCK = ('(function () { void document.body.offsetHeight; document.documentElement'
         '.setAttribute("data-opened-ms", performance.now().toFixed(1)); })();')
"""Forces style and layout once the report's script has run, then notes the time."""


def with_clock(page: str) -> str:
    """The page with CLOCK as a last script, its hash added to the page's policy."""
    digest = base64.b64encode(hashlib.sha256(CLOCK.encode()).digest()).decode()
    policy = re.sub(r"script-src ('sha256-[^']+')", rf"script-src \1 'sha256-{digest}'", page,
                    count=1)
    return policy.replace("</body></html>", f"<script>{CLOCK}</script>\n</body></html>")


def open_page(chromium: str, page: Path, cases: int) -> tuple[float, float]:
    """``chromium --headless --dump-dom PAGE``: its wall time, and the page's own figure
    (seconds to laid out); checks the report's script ran over every case."""
    started = time.perf_counter()
    done = subprocess.run([chromium, "--headless", "--no-sandbox", "--disable-gpu",
                           "--dump-dom", page.as_uri()],
                          capture_output=True, text=True, timeout=120, check=True)
    wall = time.perf_counter() - started
    opened = re.search(r'data-opened-ms="([\d.]+)"', done.stdout)
    if f'<span id="shown">{cases}</span>' not in done.stdout or opened is None:
        sys.exit(f"{page}: the dumped DOM does not show the scripts ran over {cases} cases")
    return wall, float(opened.group(1)) / 1000


def main() -> None:
    args = parse_args()
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        sys.exit("needs chromium on PATH (Debian: apt-get install -y chromium)")
    folder = args.keep or Path(tempfile.mkdtemp(prefix="bench_html_"))
    folder.mkdir(parents=True, exist_ok=True)
    document = build_report(args.cases)
    records = records_of(document, "bench")  # as toolbench html reads a saved report
    renders = []
    for _ in range(3):
        started = time.perf_counter()
        text = render_html(records)
        renders.append(time.perf_counter() - started)
    (folder / "report.html").write_text(text, encoding="utf-8")  # the page as written
    page, empty = folder / "report.clock.html", folder / "empty.clock.html"
    page.write_text(with_clock(text), encoding="utf-8")
    empty.write_text(with_clock(render_html([])), encoding="utf-8")
    open_page(chromium, empty, 0)  # untimed: the first start reads chromium from disk
    runs: dict[Path, list[tuple[float, float]]] = {page: [], empty: []}
    for _ in range(args.repeat):
        runs[empty].append(open_page(chromium, empty, 0))
        runs[page].append(open_page(chromium, page, args.cases))
    report(args, text, median(renders), *(
        (median([w for w, _ in runs[p]]), median([o for _, o in runs[p]])) for p in (empty, page)))


def report(args: argparse.Namespace, text: str, render_s: float, base: tuple[float, float],
           full: tuple[float, float]) -> None:
    print(f"{args.cases} cases: page {len(text.encode()) / 1e6:.1f} MB, rendered in "
          f"{render_s:.2f} s (median of 3); chromium --headless --dump-dom, median of "
          f"{args.repeat} runs each:")
    print_table(["page", "cases", "wall (s)", "own wall (s)", "in page: laid out (s)"],
                [["empty report (baseline)", 0, base[0], 0.0, base[1]],
                 ["report", args.cases, full[0], full[0] - base[0], full[1]]])
    worst = max(full[0] - base[0], full[1])
    print(f"target: opens in < {TARGET_S:g} s: {'met' if worst < TARGET_S else 'MISSED'}"
          f" ({worst:.2f} s)")


if __name__ == "__main__":
    main()
