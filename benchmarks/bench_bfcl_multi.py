"""BFCL's multi-turn categories: import all 800 records, record them against a loopback
model that replays their ground truth, and time the replay.

1. ``toolbench import-bfcl`` on the four multi-turn files of the bfcl-eval wheel (installed
   with ``pip --no-deps`` into the tests' cached folder): wall time of the four imports,
   each a ``toolbench`` subprocess. Target < 30 s.
2. Record every case once (``--toolbench-record``) against the loopback server, whose model
   plays each turn's ground-truth calls one a step (at most 20 steps a turn): every case
   must pass. One run a category (the categories share question texts, which the loopback
   model reads to know its record).
3. Replay the whole suite (``pytest DIR -q``, 800 cases), median of --repeat runs; all
   must pass. Target < 60 s
   on two cores (``-n`` workers: --workers, default none).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _common import REPO, clean_env, median, print_table, run_pytest, start_chat_server
from support.bfcl_model import Player, read_jsonl, truth_turns, truths
from support.bfcl_package import data_dir, ensure_installed, install_dir

CATEGORIES = ("multi_turn_base", "multi_turn_miss_func", "multi_turn_miss_param",
              "multi_turn_long_context")
IMPORT_TARGET_S = 30.0
REPLAY_TARGET_S = 60.0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=3, help="replay runs (default 3)")
    parser.add_argument("--workers", type=int, default=0, help="pytest-xdist workers")
    args = parser.parse_args()
    ensure_installed()
    data = data_dir()
    env = {**clean_env(), "PYTHONPATH": os.pathsep.join(
        [str(install_dir()), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep)}
    with tempfile.TemporaryDirectory(prefix="bench-bfcl-multi-") as tmp:
        suite = Path(tmp)
        imported = _import(data, suite, env)
        cases = _record(data, suite, env)
        extra = ["-n", str(args.workers)] if args.workers else []
        runs = [run_pytest([".", "-q", "-p", "no:cacheprovider", *extra], suite, env)
                for _ in range(args.repeat)]
        for run in runs:
            if run.returncode != 0 or f"{cases} passed" not in run.output:
                print(run.output[-3000:])
                return 1
    replay = median([run.wall_s for run in runs])
    print_table(["step", "cases", "wall s", "target s"], [
        ["import (4 files)", cases, f"{imported:.1f}", f"< {IMPORT_TARGET_S:g}"],
        [f"replay (median of {args.repeat})", cases, f"{replay:.1f}", f"< {REPLAY_TARGET_S:g}"],
    ])
    return 0 if imported < IMPORT_TARGET_S and replay < REPLAY_TARGET_S else 1


def _import(data: Path, suite: Path, env: dict[str, str]) -> float:
    started = time.perf_counter()
    for category in CATEGORIES:
        questions = data / f"BFCL_v4_{category}.json"
        subprocess.run([sys.executable, "-m", "pytest_toolbench.commands.cli", "import-bfcl",
                        str(questions), str(data / "possible_answer" / questions.name),
                        str(suite / category)], env=env, check=True, cwd=REPO)
    return time.perf_counter() - started


def _record(data: Path, suite: Path, env: dict[str, str]) -> int:
    """Record each category against a model that replays its ground truth; the cases."""
    total = 0
    for category in CATEGORIES:
        answers = truths(data, category)
        written = {line.split(": ", 1)[1] for path in (suite / category).glob("*.case.yaml")
                   for line in path.read_text(encoding="utf-8").splitlines()
                   if line.startswith("name: ")}
        player = Player(one_a_step=True)
        for record in read_jsonl(data / f"BFCL_v4_{category}.json"):
            if record["id"] in written:
                player.add(record, truth_turns(record, answers[record["id"]]))
        with start_chat_server() as server:
            server.set_handler(player)
            run = run_pytest([".", "-q", "-p", "no:cacheprovider", "--toolbench-record",
                              "--toolbench-base-url", server.base_url], suite / category, env)
        if run.returncode != 0 or f"{len(written)} passed" not in run.output:
            print(run.output[-3000:])
            raise SystemExit(f"recording {category} failed")
        total += len(written)
    return total


if __name__ == "__main__":
    sys.exit(main())
