"""Collection: ``pytest --collect-only -q`` over a large suite of case files.

Writes (in a temporary directory) FILES case files of CASES_PER_FILE cases each (default
1,000 x 10 = 10,000 cases; each case offers a tool and expects a tool call with a regex
matcher, so schema validation and matcher compilation are part of the figure), then
times ``python -m pytest DIR --collect-only -q -p no:cacheprovider`` and reads the
child's peak RSS (``os.wait4``).

Baseline, measured in the same run: the same number of trivial Python test functions in
the same number of ``test_*.py`` files. Figures are medians of --repeat runs, the sides
taking turns (each after one untimed run: the baseline's writes its bytecode). Target:
under 10 s and under 500 MB.
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

from _common import (
    Timing,
    alternating_runs,
    median,
    print_table,
    repeat_runs,
    run_pytest,
    write_case_suite,
    write_pytest_ini,
)

TARGET_S = 10.0
TARGET_MB = 500.0
PYTEST_ARGS = [".", "--collect-only", "-q", "-p", "no:cacheprovider"]

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


def time_sides(cases: Path, baseline: Path, repeat: int) -> list[list[Timing]]:
    """``repeat`` timed runs of each side, taking turns, after one untimed run of each
    (it writes the bytecode of the Python test files, which every later run reads, and
    reads the case files into the page cache, as the baseline's run does its files)."""
    for root in (cases, baseline):
        repeat_runs(lambda root=root: run_pytest(PYTEST_ARGS, root), 1)
    return alternating_runs([lambda: run_pytest(PYTEST_ARGS, cases),
                             lambda: run_pytest(PYTEST_ARGS, baseline)], repeat)


def check_count(timing: Timing, expected: int) -> None:
    """Both sides must collect every item: a silent collection error would flatter a figure."""
    if f"{expected} tests collected" not in timing.output:
        raise SystemExit(f"expected {expected} items, pytest said:\n{timing.output[-2000:]}")


def report(count: int, files: int, cases: list[Timing], baseline: list[Timing]) -> None:
    wall, rss = median([t.wall_s for t in cases]), median([t.maxrss_mb for t in cases])
    print(f"\ncollection of {count} items in {files} files, median of {len(cases)}")
    print_table(
        ["run", "wall s (median)", "runs", "peak RSS MB", "ms/item"],
        [
            ["toolbench: *.case.yaml", wall, _walls(cases), rss, 1000 * wall / count],
            ["baseline: trivial test_*.py", median([t.wall_s for t in baseline]),
             _walls(baseline), median([t.maxrss_mb for t in baseline]),
             1000 * median([t.wall_s for t in baseline]) / count],
        ],
    )
    ok = wall < TARGET_S and rss < TARGET_MB
    print(f"target < {TARGET_S:g} s and < {TARGET_MB:g} MB: {'met' if ok else 'MISSED'}"
          f" ({wall:.2f} s, {rss:.0f} MB)")


def _walls(timings: list[Timing]) -> str:
    return " ".join(f"{t.wall_s:.2f}" for t in timings)


def main() -> None:
    args = parse_args()
    with tempfile.TemporaryDirectory(prefix="toolbench-collect-") as base:
        cases_dir, baseline_dir = Path(base) / "cases", Path(base) / "baseline"
        count = write_case_suite(cases_dir, args.files, args.cases_per_file)
        write_baseline(baseline_dir, args.files, args.cases_per_file)
        cases, baseline = time_sides(cases_dir, baseline_dir, args.repeat)
        check_count(cases[0], count)
        check_count(baseline[0], count)
        report(count, args.files, cases, baseline)


if __name__ == "__main__":
    main()
