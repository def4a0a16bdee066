"""Shared pieces of the benchmarks: generated suites, timed pytest runs, the loopback server.

Not a test module and not collected: pytest's ``testpaths`` is ``tests`` and nothing here
is named ``test_*``.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
MODEL = "gpt-4o-mini"
SERVER_ENV_VARS = ("TOOLBENCH_", "OPENAI_")

# The loopback scripted server of the project's tests (standard library only).
sys.path.insert(0, str(REPO / "tests"))
from support.chat_server import (
    ChatServer,
    RecordedRequest,
    Reply,
    chunks_for,
    completion,
    json_reply,
    sse_reply,
    start_chat_server,
)

__all__ = [
    "ChatServer",
    "Timing",
    "case_text",
    "city_of",
    "clean_env",
    "count_instructions",
    "count_python_instructions",
    "median",
    "print_table",
    "run_pytest",
    "start_chat_server",
    "tool_call_handler",
    "weather_chunks",
    "weather_reply",
    "write_case_suite",
    "write_pytest_ini",
]

PYTEST_INI = """[pytest]
markers =
    tools: generated benchmark cases
"""

TOOL_SCHEMA = {
    "type": "object",
    "properties": {
        "city": {"type": "string"},
        "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
    },
    "required": ["city"],
}

CASE_TEMPLATE = """\
name: weather_{index:05d}
description: the weather tool is chosen for city {index}
marks: [tools]
model: {model}
params: {{temperature: 0, seed: 7}}
tools:
  - name: get_weather
    description: Current weather for a city
    parameters:
      type: object
      properties:
        city: {{type: string}}
        unit: {{type: string, enum: [celsius, fahrenheit]}}
      required: [city]
stages:
  - name: ask
    user: What's the weather in City{index}?
    stream: {stream}
    expect:
      finish_reason: tool_calls
      tool_calls:
        - name: get_weather
          arguments: {{city: {{$regex: "(?i)^city{index}$"}}}}
"""


# ---------------------------------------------------------------------------- timing


@dataclass(frozen=True)
class Timing:
    """One finished child process: wall time, peak memory, exit code, output, CPU time."""

    wall_s: float
    maxrss_mb: float
    returncode: int
    output: str
    cpu_s: float = 0.0
    """User + system CPU seconds of the child: steadier than wall time on a busy machine,
    where the wall time includes waiting for a core."""


def run_pytest(args: Sequence[str], cwd: Path, env: dict[str, str] | None = None) -> Timing:
    """Run ``python -m pytest ARGS`` in ``cwd``; time it and read its own peak RSS.

    ``os.wait4`` returns the resource usage of exactly this child (RUSAGE_CHILDREN would
    be the maximum over every child this process ever waited for).
    """
    command = [sys.executable, "-m", "pytest", *args]
    with tempfile.TemporaryFile("w+") as out:
        started = time.perf_counter()
        process = subprocess.Popen(command, cwd=cwd, env=env or clean_env(),
                                   stdout=out, stderr=subprocess.STDOUT)
        _pid, status, usage = os.wait4(process.pid, 0)
        wall = time.perf_counter() - started
        process.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        text = out.read()
    # Linux reports ru_maxrss in KiB.
    return Timing(wall, usage.ru_maxrss / 1024, process.returncode, text,
                  usage.ru_utime + usage.ru_stime)


def count_instructions(args: Sequence[str], cwd: Path,
                       env: dict[str, str] | None = None) -> int | None:
    """The instructions ``python -m pytest ARGS`` executes, counted by valgrind's cachegrind
    (``I refs``): a figure the load of a shared machine does not move, unlike wall time.
    None when valgrind is not installed. About 30 times slower than a plain run."""
    return count_python_instructions(["-m", "pytest", *args], cwd, env)


def count_python_instructions(args: Sequence[str], cwd: Path,
                              env: dict[str, str] | None = None) -> int | None:
    """The instructions ``python ARGS`` executes under cachegrind (see count_instructions)."""
    valgrind = shutil.which("valgrind")
    if valgrind is None:
        return None
    command = [valgrind, "--tool=cachegrind", "--cache-sim=no", "--cachegrind-out-file=/dev/null",
               sys.executable, *args]
    done = subprocess.run(command, cwd=cwd, env=env or clean_env(), capture_output=True,
                          text=True, check=False)
    if done.returncode != 0:
        sys.exit(f"python {' '.join(args)} under valgrind exited with {done.returncode}:\n"
                 f"{done.stdout[-3000:]}{done.stderr[-3000:]}")
    counted = re.search(r"I\s+refs:\s+([\d,]+)", done.stderr)
    if counted is None:
        sys.exit(f"valgrind printed no instruction count:\n{done.stderr[-3000:]}")
    return int(counted.group(1).replace(",", ""))


def clean_env() -> dict[str, str]:
    """The environment without endpoint or key variables that would change the runs."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(SERVER_ENV_VARS)}
    env.pop("PYTEST_ADDOPTS", None)
    env.pop("PYTHONDONTWRITEBYTECODE", None)  # both sides may cache their bytecode alike
    return env


def repeat_runs(run: Callable[[], Timing], times: int, expect: int = 0) -> list[Timing]:
    """``times`` runs of ``run``; stop with its output if one exits with another code."""
    timings = []
    for _ in range(times):
        timing = run()
        if timing.returncode != expect:
            sys.exit(f"pytest exited with {timing.returncode} (expected {expect}):\n"
                     f"{timing.output[-3000:]}")
        timings.append(timing)
    return timings


def alternating_runs(sides: Sequence[Callable[[], Timing]], times: int,
                     expect: int = 0) -> list[list[Timing]]:
    """``times`` rounds that each run every side once, in turn: a shared machine's drift
    in speed (other jobs, clock changes) falls on every side alike, which all of one side's
    runs and then all of the other's do not promise."""
    timings: list[list[Timing]] = [[] for _ in sides]
    for _ in range(times):
        for runs, run in zip(timings, sides):
            runs.extend(repeat_runs(run, 1, expect))
    return timings


def median(values: Sequence[float]) -> float:
    return statistics.median(values)


def print_table(header: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
    """A plain aligned table on stdout."""
    cells = [list(map(str, header))] + [[_cell(v) for v in row] for row in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(header))]
    for number, row in enumerate(cells):
        print("  ".join(cell.ljust(width) for cell, width in zip(row, widths)).rstrip())
        if number == 0:
            print("  ".join("-" * width for width in widths))


def _cell(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.2f}"
    return str(value)


# ---------------------------------------------------------------------------- suites


def case_text(index: int, stream: bool = False) -> str:
    """One single-stage case: a tool offered, a tool call expected with a regex matcher."""
    return CASE_TEMPLATE.format(index=index, model=MODEL, stream=str(stream).lower())


def write_case_suite(root: Path, files: int, per_file: int, stream: bool = False) -> int:
    """``files`` case files of ``per_file`` cases each, in ``root``; returns the case count."""
    root.mkdir(parents=True, exist_ok=True)
    write_pytest_ini(root)
    index = 0
    for number in range(files):
        documents = []
        for _ in range(per_file):
            documents.append(case_text(index, stream))
            index += 1
        (root / f"suite_{number:04d}.case.yaml").write_text("---\n".join(documents))
    return index


def write_pytest_ini(root: Path) -> None:
    """Pin the rootdir (so the repo's own pytest config is not picked up) and the marker."""
    (root / "pytest.ini").write_text(PYTEST_INI)


# ---------------------------------------------------------------------------- replies


def city_of(body: dict[str, Any]) -> str:
    """The city named in the request's last user message ("... in City12?")."""
    text = str([m for m in body["messages"] if m.get("role") == "user"][-1]["content"])
    return text.rsplit(" ", 1)[-1].rstrip("?")


def weather_reply(city: str) -> dict[str, Any]:
    """The chat.completion body that calls ``get_weather`` for ``city``."""
    return completion(tool_calls=[("get_weather", {"city": city})], model=MODEL)


def weather_chunks(city: str) -> list[dict[str, Any]]:
    """The same reply as ``weather_reply``, as the chunks of a stream."""
    return chunks_for(tool_calls=[("get_weather", {"city": city})], model=MODEL)


def tool_call_handler(delay_s: float = 0.0) -> Callable[[RecordedRequest], Reply]:
    """A chat-server handler answering every request with the tool call it asks for."""
    def handle(request: RecordedRequest) -> Reply:
        body = request.json()
        city = city_of(body)
        if body.get("stream"):
            return sse_reply(weather_chunks(city), delay_s=delay_s)
        return json_reply(weather_reply(city), delay_s=delay_s)
    return handle


def dumps(value: Any) -> str:
    return json.dumps(value, sort_keys=True)
