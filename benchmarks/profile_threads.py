"""Profile a pytest run in every thread, not only the main one.

``python -m cProfile -m pytest`` sees the main thread alone. Replayed cases run there, but
live and record cases run on toolbench's event-loop thread, where the main thread only
shows waiting (``lock.acquire``) and GIL hand-overs (``socket.send`` of
``call_soon_threadsafe``). This wraps every thread's ``run`` in its own profiler and
merges the stats.

    python benchmarks/profile_threads.py --top 30 -- DIR -q -p no:cacheprovider
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import threading
from typing import Any

import pytest


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--top", type=int, default=30, help="rows per listing (default 30)")
    parser.add_argument("--out", default=None, help="also write the merged stats here")
    parser.add_argument("pytest_args", nargs=argparse.REMAINDER,
                        help="arguments for pytest, after --")
    return parser.parse_args()


def profile_threads(pytest_args: list[str]) -> list[cProfile.Profile]:
    """Run pytest in this process with a profiler in every thread it starts."""
    profiles: list[cProfile.Profile] = []
    original = threading.Thread.run

    def run(self: threading.Thread) -> None:
        profiler = cProfile.Profile()
        profiles.append(profiler)
        profiler.runcall(original, self)

    threading.Thread.run = run  # type: ignore[method-assign]  # this process is ours alone
    main = cProfile.Profile()
    profiles.append(main)
    try:
        main.runcall(pytest.main, pytest_args)
    finally:
        threading.Thread.run = original  # type: ignore[method-assign]
    return profiles


def merged(profiles: list[cProfile.Profile]) -> Any:
    stats = pstats.Stats(profiles[0])
    for profiler in profiles[1:]:
        profiler.create_stats()
        if profiler.stats:
            stats.add(profiler)
    return stats


def main() -> None:
    args = parse_args()
    pytest_args = [a for a in args.pytest_args if a != "--"] or ["."]
    stats = merged(profile_threads(pytest_args))
    if args.out:
        stats.dump_stats(args.out)
    print("\n=== own time, all threads (waiting shows as acquire/poll) ===")
    stats.sort_stats("tottime").print_stats(args.top)
    print("\n=== cumulative, toolbench, httpx, respx, yaml, transitions ===")
    stats.sort_stats("cumulative").print_stats(
        "pytest_toolbench|httpx|respx|yaml|transitions", args.top)


if __name__ == "__main__":
    main()
