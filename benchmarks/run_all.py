"""Run every benchmark one after another with its default sizes (about 10 minutes on two
cores; --quick: about 8, with the sequential live baseline extrapolated)."""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
BENCHMARKS = ["bench_stream.py", "bench_replay.py", "bench_concurrency.py",
              "bench_collection.py", "bench_startup.py", "bench_html.py",
              "bench_bfcl_multi.py", "bench_mcp.py", "bench_agent.py",
              "bench_progressive.py", "bench_faults.py"]


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true",
                        help="pass --quick to bench_concurrency.py")
    parser.add_argument("only", nargs="*", metavar="SCRIPT",
                        help=f"run only these, of: {', '.join(BENCHMARKS)}")
    args = parser.parse_args()
    unknown = sorted(set(args.only) - set(BENCHMARKS))
    if unknown:
        parser.error(f"unknown script {', '.join(unknown)}; choose from {', '.join(BENCHMARKS)}")
    return args


def run(script: str, quick: bool) -> int:
    extra = ["--quick"] if quick and script == "bench_concurrency.py" else []
    print(f"\n##### {script} {' '.join(extra)}".rstrip(), flush=True)
    started = time.perf_counter()
    code = subprocess.call([sys.executable, str(HERE / script), *extra], cwd=HERE)
    print(f"##### {script}: exit {code}, {time.perf_counter() - started:.0f} s", flush=True)
    return code


def main() -> None:
    args = parse_args()
    codes = [run(script, args.quick) for script in args.only or BENCHMARKS]
    sys.exit(max(codes))


if __name__ == "__main__":
    main()
