"""Live concurrency: CASES single-stage cases against a loopback server that answers each
request after DELAY seconds, run with ``--toolbench-live --toolbench-concurrency N``.

The server is the project's scripted test server (``tests/support/chat_server.py``): one
asyncio task per connection, so a delayed reply holds up only its own connection; a
pre-flight check sends N requests at once and shows they are answered together.

Baseline, measured in the same run: the same suite at ``--toolbench-concurrency 1``
(sequential: CASES x DELAY, about 40 s by default). ``--quick`` runs the sequential
baseline on fewer cases and extrapolates; the table says which figure was measured.
Also measured: pytest's start-up (an empty run). Target: wall <= 1.3 x (ideal + start-up),
where ideal = CASES x DELAY / N.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import tempfile
import time
from pathlib import Path

import httpx
from _common import (
    ChatServer,
    Timing,
    median,
    print_table,
    repeat_runs,
    run_pytest,
    start_chat_server,
    tool_call_handler,
    write_case_suite,
    write_pytest_ini,
)

TARGET_FACTOR = 1.3
CASES_PER_FILE = 10
QUICK_SEQUENTIAL_CASES = 40
PYTEST_ARGS = [".", "-q", "-p", "no:cacheprovider"]


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cases", type=int, default=200, help="cases (default 200)")
    parser.add_argument("--delay", type=float, default=0.2,
                        help="seconds before the server answers each request (default 0.2)")
    parser.add_argument("--concurrency", type=int, default=16, help="N (default 16)")
    parser.add_argument("--repeat", type=int, default=3,
                        help="timed concurrent runs (median); the sequential one runs once")
    parser.add_argument("--quick", action="store_true",
                        help=f"sequential baseline on {QUICK_SEQUENTIAL_CASES} cases, "
                             "extrapolated")
    return parser.parse_args()


def preflight(server: ChatServer, concurrency: int, delay: float) -> float:
    """Send ``concurrency`` requests at once; return the wall time they all took."""
    body = {"model": "m", "messages": [{"role": "user", "content": "in City0?"}]}
    url = f"{server.base_url}/chat/completions"

    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    with httpx.Client(timeout=30, limits=limits) as client, \
            concurrent.futures.ThreadPoolExecutor(concurrency) as pool:
        def one(_: int) -> int:
            return client.post(url, json=body).status_code

        list(pool.map(lambda _: None, range(concurrency)))  # threads up before the clock
        started = time.perf_counter()
        statuses = list(pool.map(one, range(concurrency)))
        wall = time.perf_counter() - started
    if statuses != [200] * concurrency:
        raise SystemExit(f"pre-flight: the server answered {statuses}")
    print(f"pre-flight: {concurrency} simultaneous requests answered in {wall:.2f} s "
          f"(one after another: {concurrency * delay:.1f} s)")
    if wall > concurrency * delay / 2:
        raise SystemExit("the server does not answer concurrent requests concurrently")
    return wall


def suite(root: Path, cases: int) -> Path:
    files, rest = divmod(cases, CASES_PER_FILE)
    if rest:
        raise SystemExit(f"--cases must be a multiple of {CASES_PER_FILE}")
    write_case_suite(root, files, CASES_PER_FILE)
    return root


def live_run(root: Path, server: ChatServer, concurrency: int) -> Timing:
    return run_pytest([*PYTEST_ARGS, "--toolbench-live", f"--toolbench-base-url={server.base_url}",
                       f"--toolbench-concurrency={concurrency}"], root)


def startup(root: Path, repeat: int) -> float:
    """Wall time of ``pytest`` on an empty directory: interpreter, pytest, plugins."""
    root.mkdir(parents=True, exist_ok=True)
    write_pytest_ini(root)
    return median([t.wall_s for t in repeat_runs(lambda: run_pytest(PYTEST_ARGS, root),
                                                 repeat, expect=5)])


def report(args: argparse.Namespace, concurrent_runs: list[Timing], sequential: Timing,
           sequential_cases: int, start_s: float) -> None:
    wall = median([t.wall_s for t in concurrent_runs])
    seq_wall = sequential.wall_s
    if sequential_cases != args.cases:
        # Start-up is paid once; only the per-case part scales with the number of cases.
        seq_wall = start_s + (sequential.wall_s - start_s) * args.cases / sequential_cases
    seq_label = ("measured" if sequential_cases == args.cases else
                 f"extrapolated from {sequential_cases} cases ({sequential.wall_s:.2f} s)")
    ideal = args.cases * args.delay / args.concurrency
    print(f"\n{args.cases} live cases, server delay {args.delay:g} s per request")
    print_table(
        ["run", "wall s", "how", "cases/s"],
        [
            [f"toolbench --toolbench-concurrency {args.concurrency}", wall,
             f"measured, median of {len(concurrent_runs)}: "
             + " ".join(f"{t.wall_s:.2f}" for t in concurrent_runs), args.cases / wall],
            ["baseline: --toolbench-concurrency 1", seq_wall, seq_label, args.cases / seq_wall],
            ["pytest start-up (empty run)", start_s, "measured, median", "-"],
            [f"ideal: {args.cases} x {args.delay:g} s / {args.concurrency}", ideal,
             "computed", "-"],
        ],
    )
    limit = TARGET_FACTOR * (ideal + start_s)
    verdict = "met" if wall <= limit else "MISSED"
    print(f"speed-up {seq_wall / wall:.1f}x; target wall <= {TARGET_FACTOR} x ({ideal:.2f} + "
          f"{start_s:.2f}) = {limit:.2f} s: {verdict} ({wall:.2f} s)")


def main() -> None:
    args = parse_args()
    with tempfile.TemporaryDirectory(prefix="toolbench-live-") as base, \
            start_chat_server() as server:
        server.set_handler(tool_call_handler(delay_s=args.delay))
        preflight(server, args.concurrency, args.delay)
        root = suite(Path(base) / "cases", args.cases)
        start_s = startup(Path(base) / "empty", args.repeat)
        concurrent_runs = repeat_runs(lambda: live_run(root, server, args.concurrency),
                                      args.repeat)
        sequential_cases = QUICK_SEQUENTIAL_CASES if args.quick else args.cases
        small = root if sequential_cases == args.cases else suite(
            Path(base) / "sequential", sequential_cases)
        sequential = repeat_runs(lambda: live_run(small, server, 1), 1)[0]
        report(args, concurrent_runs, sequential, sequential_cases, start_s)


if __name__ == "__main__":
    main()
