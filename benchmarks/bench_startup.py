"""What the plugin costs a project that has no case files: pytest's start-up with the
plugin installed, against the same run with it disabled (``-p no:toolbench``).

The project is 20 plain test functions in one file, nothing for toolbench to collect. Runs
alternate between the two sides so a busy machine slows both alike; the figure is the
median of ``--repeat`` runs each. Target: within 50 ms of the baseline, and none of the
heavy libraries imported (checked in the same run with ``-X importtime``).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from pathlib import Path

from _common import clean_env, count_instructions, median, print_table, run_pytest

TARGET_MS = 50.0
HEAVY = ("pydantic", "rich", "httpx2", "respx", "jsonschema", "transitions", "yaml")
PLAIN_TESTS = "\n".join(f"def test_{n}():\n    assert {n} + 1 > {n}\n" for n in range(20))


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeat", type=int, default=15, help="runs per side (default 15)")
    parser.add_argument("--instructions", action="store_true",
                        help="also count each side's instructions once under valgrind"
                             " (cachegrind): a difference the machine's load does not move")
    return parser.parse_args()


def heavy_imports(root: Path, extra: list[str]) -> list[str]:
    """Which heavy top-level packages a plain run imports, read from ``-X importtime``."""
    command = [sys.executable, "-X", "importtime", "-m", "pytest", "-q", "-p",
               "no:cacheprovider", *extra]
    done = subprocess.run(command, cwd=root, env=clean_env(), capture_output=True, text=True,
                          check=False)
    imported = {line.rsplit("|", 1)[-1].strip().split(".")[0]
                for line in done.stderr.splitlines() if line.startswith("import time:")}
    return [name for name in HEAVY if name in imported]


def main() -> None:
    args = parse_args()
    with tempfile.TemporaryDirectory() as directory:
        root = Path(directory)
        (root / "test_plain.py").write_text(PLAIN_TESTS)
        (root / "pytest.ini").write_text("[pytest]\n")
        base = ["-q", "-p", "no:cacheprovider"]
        with_plugin, without = [], []
        run_pytest(base, root)  # writes the bytecode of the test file: untimed
        for _ in range(args.repeat):
            with_plugin.append(run_pytest(base, root).wall_s * 1000)
            without.append(run_pytest([*base, "-p", "no:toolbench"], root).wall_s * 1000)
        # Other installed plugins may import some of them anyway (respx's pytest plugin
        # brings httpx): only what the plugin adds counts against it.
        baseline_heavy = heavy_imports(root, ["-p", "no:toolbench"])
        heavy = [name for name in heavy_imports(root, []) if name not in baseline_heavy]
        counts = ((count_instructions(base, root),
                   count_instructions([*base, "-p", "no:toolbench"], root))
                  if args.instructions else None)
    plugin_ms, plain_ms = median(with_plugin), median(without)
    cost = plugin_ms - plain_ms
    print_table(
        ["pytest on 20 plain tests", "median ms", "runs"],
        [["toolbench installed", f"{plugin_ms:.0f}", args.repeat],
         ["-p no:toolbench (baseline)", f"{plain_ms:.0f}", args.repeat]])
    print(f"\ncost of the installed plugin: {cost:+.0f} ms (target: <= {TARGET_MS:.0f} ms)"
          f" - {'met' if cost <= TARGET_MS else 'NOT met'}")
    print(f"heavy libraries the plugin imports without case files: {', '.join(heavy) or 'none'}"
          f" (imported by other plugins either way: {', '.join(baseline_heavy) or 'none'})")
    if counts is not None and None not in counts:
        ours, theirs = counts
        assert ours is not None and theirs is not None
        print(f"instructions: {ours / 1e9:.3f} G installed, {theirs / 1e9:.3f} G without:"
              f" +{(ours - theirs) / 1e6:.0f} M ({100 * (ours - theirs) / theirs:.1f} %)")
    elif counts is not None:
        print("instructions: valgrind is not installed")


if __name__ == "__main__":
    main()
