"""Faults on cue: what a replayed agent case with faults costs against the same case without.

The suite of ``bench_agent.py`` (COUNT agent cases of one openai-SDK agent, chat
completions, a tool, two requests a case, in FILES files), recorded once without faults
against the loopback chat server and replayed with the server stopped, three ways in turns
(after one untimed run each, each side's cache filled):

- clean: no fault;
- faulted: ``--toolbench-fault delay=0`` (every request selected, its reply passed through
  the fault's wrapper: the plan's decision, the event splitting, the delivery account),
  which changes nothing the agent sees, so the two sides do the same work but the faults';
- rate limited: ``--toolbench-fault status=429,retry_after_s=0.001@1``, the first request
  of each case answered 429 by the plugin and retried by the SDK after 1 ms: a request more
  a case, shown for scale.

Target: the faulted side <= 1.05 x the clean one (wall time, median of REPEAT).
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

from _common import (
    alternating_runs,
    median,
    print_table,
    repeat_runs,
    run_pytest,
    start_chat_server,
    write_pytest_ini,
)
from bench_agent import ARGS, CASE, _check, bench_env, refund_handler

TARGET_RATIO = 1.05
SIDES = (("clean", []),
         ("faulted: delay=0 on every request", ["--toolbench-fault", "delay=0"]),
         ("rate limited: a 429 on each case's first request",
          ["--toolbench-fault", "status=429,retry_after_s=0.001@1"]))


def prepare(base: Path, count: int, files: int, base_url: str) -> Path:
    """``bench_agent.py``'s agent cases, written and recorded against ``base_url``."""
    cases = base / "cases"
    cases.mkdir(parents=True)
    write_pytest_ini(cases)
    per_file = -(-count // files)
    for number in range(files):
        indexes = range(number * per_file, min(count, (number + 1) * per_file))
        (cases / f"refunds_{number:03d}.case.yaml").write_text(
            "---\n".join(CASE.format(index=index) for index in indexes))
    live = bench_env(TOOLBENCH_BASE_URL=base_url, OPENAI_BASE_URL=base_url,
                     OPENAI_API_KEY="sk-bench")
    _check(run_pytest([*ARGS, "--toolbench-record"], cases, live), "recording the cases")
    return cases


def bench(base: Path, args: argparse.Namespace) -> float:
    with start_chat_server() as server:
        server.set_handler(refund_handler)
        cases = prepare(base, args.count, args.files, server.base_url)
    env = bench_env()
    sides = [lambda extra=extra: run_pytest([*ARGS, *extra], cases, env) for _, extra in SIDES]
    for side in sides:  # every side passes, or the script stops with its output
        repeat_runs(side, 1)
    timings = alternating_runs(sides, args.repeat)
    walls = [median([timing.wall_s for timing in runs]) for runs in timings]
    rows = [[name, wall, " ".join(f"{t.wall_s:.2f}" for t in runs), wall / walls[0]]
            for (name, _), wall, runs in zip(SIDES, walls, timings)]
    print(f"\nreplay of {args.count} agent cases (2 requests each), median of {args.repeat}")
    print_table(["run", "wall s (median)", "runs", "x clean"], rows)
    ratio = walls[1] / walls[0]
    verdict = "met" if ratio <= TARGET_RATIO else "MISSED"
    print(f"faulted / clean: {ratio:.3f}x (target <= {TARGET_RATIO}x): {verdict}")
    return ratio


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--count", type=int, default=200, help="cases (default 200)")
    parser.add_argument("--files", type=int, default=20, help="files (default 20)")
    parser.add_argument("--repeat", type=int, default=5, help="timed runs a side (default 5)")
    parser.add_argument("--keep", type=Path, help="build in this directory and keep it")
    return parser.parse_args()


def main() -> None:
    args = parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-faults-") as temporary:
        bench(args.keep or Path(temporary), args)


if __name__ == "__main__":
    main()
