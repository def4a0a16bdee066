"""Faults on cue: what a replayed case with faults costs against the same case without.

Two suites, each recorded once without faults against the loopback chat server and
replayed with the server stopped, three ways in turns (after one untimed run each, each
side's cache filled); ``--part`` picks one, both by default:

- agent cases: the suite of ``bench_agent.py``, COUNT agent cases of one openai-SDK agent
  (chat completions, a tool, two requests a case) in FILES files; the faults act in the
  plugin's proxy, toward the agent;
- model cases: the suite of ``bench_mcp.py`` with its canned tool, COUNT cases of the
  plugin's own tool loop in FILES files, each a streamed stage whose model calls the tool
  once and then answers (two requests a case); the faults act in the plugin's own client
  (``transport/client.py``), which reshapes the replayed reply or answers itself.

The three ways:

- clean: no fault;
- faulted: ``--toolbench-fault delay=0`` (every request selected and its reply passed
  through the fault's reshaping: the plan's decision, the event splitting, the delivery
  account), which changes nothing the case sees, so the two sides do the same work but
  the faults';
- rate limited: a 429 on each case's first request, answered by the plugin (agent cases:
  ``retry_after_s=0.001``, retried by the SDK; model cases: ``retry_after_s=0``, retried by
  the plugin's client): a request more a case, shown for scale.

Target, each part: the faulted side <= 1.05 x the clean one (wall time, median of REPEAT;
the CPU time, user + system, is shown beside it: on a busy machine, where the wall time
includes waiting for a core, it wanders less).
``--instructions`` also counts each side's instructions once under valgrind: a ratio the
machine's load does not move (about 30 times slower than a run: the agent part's 200 cases
take several minutes a side).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

from _common import (
    alternating_runs,
    count_instructions,
    median,
    print_table,
    repeat_runs,
    run_pytest,
    start_chat_server,
    write_pytest_ini,
)
from bench_agent import ARGS, CASE, _check, bench_env, refund_handler
from bench_mcp import model_calling, write_suite

TARGET_RATIO = 1.05
DELAY = ("faulted: delay=0 on every request", ["--toolbench-fault", "delay=0"])
AGENT_SIDES = (("clean", []), DELAY,
               ("rate limited: a 429 on each case's first request",
                ["--toolbench-fault", "status=429,retry_after_s=0.001@1"]))
MODEL_SIDES = (("clean", []), DELAY,
               ("rate limited: a 429 on each case's first request",
                ["--toolbench-fault", "status=429,retry_after_s=0@1"]))


def prepare_agent(base: Path, count: int, files: int) -> Path:
    """``bench_agent.py``'s agent cases, written and recorded against the loopback server."""
    cases = base / "agent"
    cases.mkdir(parents=True)
    write_pytest_ini(cases)
    per_file = -(-count // files)
    for number in range(files):
        indexes = range(number * per_file, min(count, (number + 1) * per_file))
        (cases / f"refunds_{number:03d}.case.yaml").write_text(
            "---\n".join(CASE.format(index=index) for index in indexes))
    with start_chat_server() as server:
        server.set_handler(refund_handler)
        live = bench_env(TOOLBENCH_BASE_URL=server.base_url, OPENAI_BASE_URL=server.base_url,
                         OPENAI_API_KEY="sk-bench")
        _check(run_pytest([*ARGS, "--toolbench-record"], cases, live), "recording the agent cases")
    return cases


def prepare_model(base: Path, count: int, files: int) -> Path:
    """``bench_mcp.py``'s canned-tool cases, streamed, one call a case (two requests),
    written and recorded against the loopback server."""
    cases = base / "model"
    per_file = -(-count // files)
    written = write_suite(cases, False, files, per_file, 1, "session", stream=True)
    if written != count:
        sys.exit(f"--count {count} is not a multiple of --files {files}")
    with start_chat_server() as server:
        server.set_handler(model_calling(1))
        _check(run_pytest([*ARGS, "--toolbench-record", f"--toolbench-base-url={server.base_url}"],
                          cases, bench_env()), "recording the model cases")
    return cases


def compare(what: str, cases: Path, env: dict[str, str],
            sides: Sequence[tuple[str, list[str]]], repeat: int, instructions: bool) -> float:
    """The sides replayed in turns, their medians side by side; the faulted / clean ratio."""
    runs = [lambda extra=extra: run_pytest([*ARGS, *extra], cases, env) for _, extra in sides]
    for run in runs:  # every side passes, or the script stops with its output
        repeat_runs(run, 1)
    timings = alternating_runs(runs, repeat)
    walls = [median([timing.wall_s for timing in side]) for side in timings]
    cpus = [median([timing.cpu_s for timing in side]) for side in timings]
    rows = [[name, wall, " ".join(f"{t.wall_s:.2f}" for t in side), wall / walls[0],
             cpu, cpu / cpus[0]]
            for (name, _), wall, cpu, side in zip(sides, walls, cpus, timings)]
    print(f"\nreplay of {what}, median of {repeat}")
    print_table(["run", "wall s (median)", "runs", "x clean", "CPU s (median)", "x clean"],
                rows)
    ratio = walls[1] / walls[0]
    verdict = "met" if ratio <= TARGET_RATIO else "MISSED"
    print(f"faulted / clean: {ratio:.3f}x wall (target <= {TARGET_RATIO}x): {verdict};"
          f" {cpus[1] / cpus[0]:.3f}x CPU (user + system)")
    if instructions:
        counted = [count_instructions([*ARGS, *extra], cases, env) for _, extra in sides]
        if None in counted:
            print("instructions: valgrind is not installed")
        else:
            clean = counted[0]
            assert clean is not None
            print("instructions: " + ", ".join(
                f"{name.split(':')[0]} {n / 1e9:.3f} G ({n / clean:.3f}x)"
                for (name, _), n in zip(sides, counted) if n is not None))
    return ratio


def bench(base: Path, args: argparse.Namespace) -> None:
    if args.part in ("agent", "both"):
        cases = prepare_agent(base, args.count, args.files)
        compare(f"{args.count} agent cases (2 requests each)", cases, bench_env(),
                AGENT_SIDES, args.repeat, args.instructions)
    if args.part in ("model", "both"):
        cases = prepare_model(base, args.count, args.files)
        compare(f"{args.count} model cases (a streamed tool loop, 2 requests each)", cases,
                bench_env(), MODEL_SIDES, args.repeat, args.instructions)


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--part", choices=("agent", "model", "both"), default="both",
                        help="which suite: agent cases, model cases or both (default)")
    parser.add_argument("--count", type=int, default=200, help="cases a suite (default 200)")
    parser.add_argument("--files", type=int, default=20, help="files a suite (default 20)")
    parser.add_argument("--repeat", type=int, default=5, help="timed runs a side (default 5)")
    parser.add_argument("--instructions", action="store_true",
                        help="also count each side's instructions once under valgrind")
    parser.add_argument("--keep", type=Path, help="build in this directory and keep it")
    return parser.parse_args()


def main() -> None:
    args = parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-faults-") as temporary:
        bench(args.keep or Path(temporary), args)


if __name__ == "__main__":
    main()
