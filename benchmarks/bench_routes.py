"""Routing's cost to a straight case: the same replayed suite before routes and after.

Writes (in a temporary directory) FILES case files of CASES_PER_FILE two-stage cases each
(default 100 x 10 = 1000), records their cassettes once against the loopback chat server
with ``--toolbench-record``, then times ``pytest DIR -q`` replaying them three ways, the
sides taking turns run by run, each in a copy of the suite with its own pytest cache:

- ``before routes``: the straight suite, replayed by the plugin as it was before routes
  (the package of ``--baseline REV``, by default the commit before the one that added
  ``casefile/routes.py``);
- ``straight``: the same suite replayed by the package of ``--after REV`` (default
  ``HEAD``), where every case runs through its route machine (``run/machine.py``) whether
  it says ``next`` or not;
- ``routed``: the same cases with their routes spelled out (``next: again`` on the first
  stage, ``next: end`` on the second), replayed by the same package.

Each package is exported from git (``git archive``) into the temporary directory and put
on ``PYTHONPATH``, so an edit of the working tree during the run changes neither side.

Target: straight <= 1.02 x before routes (routing adds nothing measurable to a straight
case). ``--instructions`` also counts each side's instructions once under valgrind: a
ratio the machine's load does not move.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

from _common import (
    MODEL,
    REPO,
    Timing,
    alternating_runs,
    clean_env,
    count_instructions,
    median,
    print_table,
    run_pytest,
    start_chat_server,
    tool_call_handler,
    write_pytest_ini,
)

TARGET_RATIO = 1.02
ARGS = [".", "-q"]

CASE = """\
name: weather_{index:05d}
marks: [tools]
model: {model}
params: {{temperature: 0, seed: 7}}
tools:
  - name: get_weather
    description: Current weather for a city
    parameters:
      type: object
      properties: {{city: {{type: string}}}}
      required: [city]
    result: {{temp_c: 21}}
stages:
  - name: ask
    user: What's the weather in City{index}?
    expect:
      finish_reason: tool_calls
      tool_calls: [{{name: get_weather, arguments: {{city: {{$regex: "(?i)^city{index}$"}}}}}}]
{ask_route}  - name: again
    user: And tomorrow in City{index}?
    expect:
      tool_calls: [{{name: get_weather}}]
{again_route}"""
ROUTES = {"ask_route": "    next: again\n", "again_route": "    next: end\n"}


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--files", type=int, default=100, help="case files (default 100)")
    parser.add_argument("--cases-per-file", type=int, default=10,
                        help="cases per file (default 10: 1000 cases in all)")
    parser.add_argument("--repeat", type=int, default=3,
                        help="timed runs per side (median; default 3)")
    parser.add_argument("--baseline", default=None, metavar="REV",
                        help="the revision whose package is the 'before routes' side"
                             " (default: the parent of the commit that added routes)")
    parser.add_argument("--after", default="HEAD", metavar="REV",
                        help="the revision whose package is the routed side (default HEAD)")
    parser.add_argument("--instructions", action="store_true",
                        help="also count each side's instructions once under valgrind")
    return parser.parse_args()


def baseline_revision() -> str:
    """The commit before routes came: the parent of the one that added ``routes.py``."""
    added = subprocess.run(
        ["git", "log", "--diff-filter=A", "--format=%H", "--",
         "pytest_toolbench/casefile/routes.py"],
        cwd=REPO, capture_output=True, text=True, check=True).stdout.split()
    if not added:
        sys.exit("no commit adds pytest_toolbench/casefile/routes.py: give --baseline REV")
    return f"{added[-1]}^"


def export_package(revision: str, into: Path) -> None:
    """The package as it was at ``revision``, in ``into`` (for ``PYTHONPATH``)."""
    into.mkdir()
    archive = subprocess.run(["git", "archive", revision, "pytest_toolbench"], cwd=REPO,
                             capture_output=True, check=True).stdout
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive, check=True)


def write_suite(root: Path, files: int, per_file: int, routed: bool) -> int:
    root.mkdir(parents=True)
    write_pytest_ini(root)
    routes = ROUTES if routed else dict.fromkeys(ROUTES, "")
    index = 0
    for number in range(files):
        cases = []
        for _ in range(per_file):
            cases.append(CASE.format(index=index, model=MODEL, **routes))
            index += 1
        (root / f"suite_{number:04d}.case.yaml").write_text("---\n".join(cases))
    return index


def record(root: Path, env: dict[str, str]) -> None:
    with start_chat_server() as server:
        server.set_handler(tool_call_handler())
        recorded = run_pytest([*ARGS, "--toolbench-record",
                               f"--toolbench-base-url={server.base_url}"], root, env)
    if recorded.returncode != 0:
        sys.exit(f"recording failed:\n{recorded.output[-3000:]}")


def side(root: Path, env: dict[str, str]) -> Callable[[], Timing]:
    return lambda: run_pytest(ARGS, root, env)


def main() -> None:
    args = parse_args()
    revision = args.baseline or baseline_revision()
    with tempfile.TemporaryDirectory(prefix="toolbench-routes-") as tmp:
        work = Path(tmp)
        export_package(revision, work / "before")
        export_package(args.after, work / "after")
        here = {**clean_env(), "PYTHONPATH": str(work / "after")}
        before = {**clean_env(), "PYTHONPATH": str(work / "before")}
        count = write_suite(work / "straight", args.files, args.cases_per_file, routed=False)
        write_suite(work / "routed", args.files, args.cases_per_file, routed=True)
        record(work / "straight", here)
        record(work / "routed", here)
        shutil.copytree(work / "straight", work / "baseline")  # a cache of its own
        sides = {"before routes": (work / "baseline", before),
                 "straight": (work / "straight", here), "routed": (work / "routed", here)}
        for root, env in sides.values():  # each fills its own cache first, untimed
            run_pytest(ARGS, root, env)
        runs = alternating_runs([side(root, env) for root, env in sides.values()],
                                args.repeat)
        walls = {name: median([run.wall_s for run in timings])
                 for name, timings in zip(sides, runs)}
        print(f"{count} two-stage cases replayed; before routes = {revision},"
              f" after = {args.after}")
        rows = [[name, f"{wall:.2f} s", f"{wall / walls['before routes']:.3f} x"]
                for name, wall in walls.items()]
        print_table(["side", f"wall (median of {args.repeat})", "vs before routes"], rows)
        if args.instructions:
            counts = {name: count_instructions(ARGS, root, env)
                      for name, (root, env) in sides.items()}
            base = counts["before routes"]
            print_table(["side", "instructions", "vs before routes"],
                        [[name, f"{n:,}" if n else "-",
                          f"{n / base:.3f} x" if n and base else "-"]
                         for name, n in counts.items()])
        print(f"target: straight <= {TARGET_RATIO} x before routes")


if __name__ == "__main__":
    main()
