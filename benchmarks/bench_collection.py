"""Collection: ``pytest --collect-only -q`` over a large suite of case files.

Writes (in a temporary directory) FILES case files of CASES_PER_FILE cases each (default
1,000 x 10 = 10,000 cases; each case offers a tool and expects a tool call with a regex
matcher, so schema validation and matcher compilation are part of the figure), then
times ``python -m pytest DIR --collect-only -q`` and reads the child's peak RSS
(``os.wait4``), two ways:

- cached: with pytest's cache, after a run that filled it, so the case files are read
  back parsed, with their cases' outlines (``.pytest_cache/d/toolbench-parsed``), as on a
  developer's second run: the items are made from the outlines, nothing is validated;
- parsed: with ``-p no:cacheprovider``, every file parsed, as on a first run or in a CI
  job that keeps no cache.

Baseline, measured in the same run: the same number of trivial Python test functions in
the same number of ``test_*.py`` files. Figures are medians of --repeat runs, the sides
taking turns (each after one untimed run: the baseline's writes its bytecode, the cached
side's fills its cache). Targets: the cached run at most 0.8 x the baseline; under 250 MB.
``--instructions`` also counts each side's instructions once under valgrind.
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

from _common import (
    Timing,
    alternating_runs,
    count_instructions,
    median,
    print_table,
    repeat_runs,
    run_pytest,
    write_case_suite,
    write_pytest_ini,
)

TARGET_RATIO = 0.8
TARGET_MB = 250.0
PYTEST_ARGS = [".", "--collect-only", "-q"]
NO_CACHE = [*PYTEST_ARGS, "-p", "no:cacheprovider"]

TRIVIAL_TEST = '''

@pytest.mark.tools
def test_case_{index:05d}():
    assert {index} >= 0
'''


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--files", type=int, default=1000, help="files (default 1000)")
    parser.add_argument("--cases-per-file", type=int, default=10,
                        help="cases per file (default 10: 10,000 in all)")
    parser.add_argument("--repeat", type=int, default=3,
                        help="timed runs per side (median; default 3)")
    parser.add_argument("--instructions", action="store_true",
                        help="also count each side's instructions once under valgrind"
                             " (about 30 times slower than a run)")
    return parser.parse_args()


def write_baseline(root: Path, files: int, per_file: int) -> int:
    root.mkdir(parents=True, exist_ok=True)
    write_pytest_ini(root)
    index = 0
    for number in range(files):
        tests = []
        for _ in range(per_file):
            tests.append(TRIVIAL_TEST.format(index=index))
            index += 1
        (root / f"test_suite_{number:04d}.py").write_text("import pytest\n" + "".join(tests))
    return index


SIDES = [("toolbench, cached: *.case.yaml", "cases", PYTEST_ARGS),
         ("toolbench, parsed (-p no:cacheprovider)", "cases", NO_CACHE),
         ("baseline: trivial test_*.py", "baseline", PYTEST_ARGS)]


def time_sides(base: Path, repeat: int) -> list[list[Timing]]:
    """``repeat`` timed runs of each side, taking turns, after one untimed run of each
    (it writes the bytecode of the Python test files, which every later run reads, fills
    the cached side's cache, and reads the files into the page cache)."""
    for _label, folder, args in SIDES:
        repeat_runs(lambda folder=folder, args=args: run_pytest(args, base / folder), 1)
    return alternating_runs([lambda folder=folder, args=args: run_pytest(args, base / folder)
                             for _label, folder, args in SIDES], repeat)


def check_count(timing: Timing, expected: int) -> None:
    """Every side must collect every item: a silent collection error would flatter a figure."""
    if f"{expected} tests collected" not in timing.output:
        raise SystemExit(f"expected {expected} items, pytest said:\n{timing.output[-2000:]}")


def report(count: int, files: int, timings: list[list[Timing]]) -> None:
    print(f"\ncollection of {count} items in {files} files, median of {len(timings[0])}")
    baseline = median([t.wall_s for t in timings[-1]])
    rows = []
    for (label, _folder, _args), runs in zip(SIDES, timings):
        wall = median([t.wall_s for t in runs])
        rows.append([label, wall, _walls(runs), median([t.maxrss_mb for t in runs]),
                     1000 * wall / count, wall / baseline])
    print_table(["run", "wall s (median)", "runs", "peak RSS MB", "ms/item", "x baseline"],
                rows)
    cached, rss = rows[0][5], max(row[3] for row in rows[:2])
    ok = cached <= TARGET_RATIO and rss < TARGET_MB
    print(f"target: cached <= {TARGET_RATIO:g} x baseline and < {TARGET_MB:g} MB:"
          f" {'met' if ok else 'MISSED'} ({cached:.2f} x, {rss:.0f} MB)")


def report_instructions(base: Path) -> None:
    counts = []
    for label, folder, args in SIDES:
        counted = count_instructions(args, base / folder)
        if counted is None:
            print("instructions: valgrind is not installed")
            return
        counts.append((label, counted))
    for label, counted in counts:
        print(f"instructions: {label}: {counted / 1e9:.2f} G,"
              f" {counted / counts[-1][1]:.2f} x baseline")


def _walls(timings: list[Timing]) -> str:
    return " ".join(f"{t.wall_s:.2f}" for t in timings)


def main() -> None:
    args = parse_args()
    with tempfile.TemporaryDirectory(prefix="toolbench-collect-") as base_dir:
        base = Path(base_dir)
        count = write_case_suite(base / "cases", args.files, args.cases_per_file)
        write_baseline(base / "baseline", args.files, args.cases_per_file)
        timings = time_sides(base, args.repeat)
        for runs in timings:
            check_count(runs[0], count)
        report(count, args.files, timings)
        if args.instructions:
            report_instructions(base)


if __name__ == "__main__":
    main()
