"""Agent cases: replay against pytest-recording, and what the loopback proxy adds live.

1. Replay. The same openai-SDK agent (``tests/support/agents/openai_chat.py``: chat
   completions, a tool, its own loop) under test COUNT times (default 200), each time asked
   to refund another order: it calls ``lookup_order``, gets the result back, answers. As
   agent cases (FILES files of COUNT/FILES cases), recorded once with ``--toolbench-record``
   against the loopback chat server, then replayed; and as plain pytest tests marked
   ``@pytest.mark.vcr`` (pytest-recording, on vcrpy, which patches httpx2), recorded once
   with ``--record-mode=once`` against the same server, then replayed with
   ``--record-mode=none``. Both check the same things (the call, its argument, the answer)
   and replay with the server stopped. Every side runs as ``python -m pytest DIR -q``,
   taking turns, after one untimed run each (each side's cache filled). Target: agent-case
   replay <= 1.0 x the pytest-recording wall time.

2. Live. An agent case run ``--toolbench-live`` whose agent sends ROUNDS streamed chat
   requests through the plugin's proxy and as many straight to the loopback server, in
   turns, each side on an openai SDK client of its own (sync, as the replay's agent), and
   times each: the whole request, and the time to the first chunk (the first token). The
   server answers each with a stream of 12 chunks, the first at once and the rest after
   PAUSE ms. The figures are the medians of the pairs' differences. Target: <= 2 ms added
   at the median, and nothing measurable to the time to first token. The proxy keeps the
   sync client's connection alive (``transport/proxy.py``: an async client's reply closes
   its connection, a loopback connect more a request).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

from _common import (
    REPO,
    RecordedRequest,
    Reply,
    Timing,
    alternating_runs,
    chunks_for,
    clean_env,
    completion,
    json_reply,
    median,
    print_table,
    repeat_runs,
    run_pytest,
    sse_reply,
    start_chat_server,
    write_pytest_ini,
)
from support.chat_server import SSEPause

TARGET_RATIO = 1.0
TARGET_ADDED_MS = 2.0
ARGS = [".", "-q"]

CASE = """\
name: refund_{index:04d}
agent: {{python: "support.agents.openai_chat:make_agent"}}
model: test-model
stages:
  - name: ask
    user: Refund order {index}
    expect:
      tool_calls: [{{name: lookup_order, arguments: {{order_id: "{index}"}}}}]
      text: {{$contains: "order {index} "}}
"""

VCR_HEAD = """\
import json

import pytest
from support.agents.openai_chat import make_agent


def calls_of(agent):
    return [(call["function"]["name"], json.loads(call["function"]["arguments"]))
            for message in agent.messages for call in message.get("tool_calls", ())]
"""

VCR_TEST = """

@pytest.mark.vcr
def test_refund_{index:04d}():
    agent = make_agent()
    answer = agent("Refund order {index}")
    agent.close()
    assert calls_of(agent) == [("lookup_order", {{"order_id": "{index}"}})]
    assert "order {index} " in answer
"""

VCR_CONFTEST = """\
import pytest


@pytest.fixture(scope="module")
def vcr_config():
    return {"filter_headers": ["authorization"]}
"""

PROBE = '''\
"""An agent that times streamed requests through the proxy and straight to the server."""

import json
import time

import openai

MESSAGES = [{"role": "user", "content": "Say hello."}]


def timed(client):
    started = time.perf_counter()
    first = None
    with client.chat.completions.create(model="test-model", messages=MESSAGES,
                                        stream=True) as stream:
        for _chunk in stream:
            if first is None:
                first = time.perf_counter() - started
    return 1000 * (time.perf_counter() - started), 1000 * first


class Probe:
    def __init__(self, direct_url, rounds, out):
        self.direct_url, self.rounds, self.out = direct_url, rounds, out

    def __call__(self, text):
        sides = {"proxy": openai.OpenAI(max_retries=0),  # OPENAI_BASE_URL: the proxy
                 "direct": openai.OpenAI(base_url=self.direct_url, api_key="sk-bench",
                                         max_retries=0)}
        times = {side: [] for side in sides}
        for client in sides.values():  # warm both paths
            timed(client)
        for _ in range(self.rounds):
            for side, client in sides.items():
                times[side].append(timed(client))
        for client in sides.values():
            client.close()
        with open(self.out, "w") as file:
            json.dump(times, file)
        return "timed"


def make_agent(direct_url, rounds, out):
    return Probe(direct_url, rounds, out)
'''

PROBE_CASE = """\
name: latency
agent:
  python: probe:make_agent
  init: {{direct_url: "{direct}", rounds: {rounds}, out: "{out}"}}
endpoint: {{base_url: "{direct}"}}
stages:
  - name: time
    user: go
    expect: {{text: timed}}
"""


def order_of(body: dict[str, Any]) -> str:
    user = [m for m in body["messages"] if m.get("role") == "user"][-1]["content"]
    return str(user).rsplit(" ", 1)[-1]


def refund_handler(request: RecordedRequest) -> Reply:
    """A call of lookup_order for the order asked about; after its result, the answer."""
    body = request.json()
    order = order_of(body)
    if body["messages"][-1].get("role") == "tool":
        return json_reply(completion(f"I looked up order {order} for you."))
    return json_reply(completion(tool_calls=[("lookup_order", {"order_id": order})]))


def bench_env(**extra: str) -> dict[str, str]:
    """The plugin from this checkout and the support agents importable; no endpoint."""
    env = clean_env()
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), str(REPO / "tests")])
    env["OPENAI_AGENTS_DISABLE_TRACING"] = "1"
    return {**env, **extra}


def prepare(base: Path, count: int, files: int, base_url: str) -> tuple[Path, Path]:
    """Both suites written and recorded against the server at ``base_url``."""
    cases, vcr = base / "cases", base / "vcr"
    for root in (cases, vcr):
        root.mkdir(parents=True)
        write_pytest_ini(root)
    per_file = -(-count // files)
    (vcr / "conftest.py").write_text(VCR_CONFTEST)
    for number in range(files):
        indexes = range(number * per_file, min(count, (number + 1) * per_file))
        (cases / f"refunds_{number:03d}.case.yaml").write_text(
            "---\n".join(CASE.format(index=index) for index in indexes))
        (vcr / f"test_refunds_{number:03d}.py").write_text(
            VCR_HEAD + "".join(VCR_TEST.format(index=index) for index in indexes))
    live = bench_env(TOOLBENCH_BASE_URL=base_url, OPENAI_BASE_URL=base_url,
                     OPENAI_API_KEY="sk-bench")
    _check(run_pytest([*ARGS, "--toolbench-record"], cases, live), "recording the cases")
    _check(run_pytest([*ARGS, "--record-mode=once"], vcr, live), "recording the vcr tests")
    return cases, vcr


def _check(timing: Timing, what: str) -> None:
    if timing.returncode != 0:
        sys.exit(f"{what} failed ({timing.returncode}):\n{timing.output[-3000:]}")


def bench_replay(base: Path, args: argparse.Namespace) -> None:
    with start_chat_server() as server:
        server.set_handler(refund_handler)
        cases, vcr = prepare(base, args.count, args.files, server.base_url)
        dead_url = server.base_url
    # The server is stopped: the vcr side keeps the URL it recorded (vcrpy matches on it).
    env_cases = bench_env()
    env_vcr = bench_env(OPENAI_BASE_URL=dead_url, OPENAI_API_KEY="sk-bench")
    sides = [lambda: run_pytest(ARGS, cases, env_cases),
             lambda: run_pytest([*ARGS, "--record-mode=none"], vcr, env_vcr)]
    for side in sides:
        repeat_runs(side, 1)
    timings = alternating_runs(sides, args.repeat)
    names = ["agent cases, replayed", "pytest-recording (vcrpy)"]
    rows = [[name, median([t.wall_s for t in runs]),
             " ".join(f"{t.wall_s:.2f}" for t in runs),
             1000 * median([t.wall_s for t in runs]) / args.count,
             median([t.maxrss_mb for t in runs])] for name, runs in zip(names, timings)]
    print(f"\nreplay of {args.count} tests of one openai-SDK agent (2 requests each),"
          f" median of {args.repeat}")
    print_table(["run", "wall s (median)", "runs", "ms/test", "peak RSS MB"], rows)
    ratio = rows[0][1] / rows[1][1]
    verdict = "met" if ratio <= TARGET_RATIO else "MISSED"
    print(f"wall ratio to pytest-recording: {ratio:.2f}x (target <= {TARGET_RATIO}x): {verdict}")


def stream_handler(pause_ms: float) -> Any:
    chunks: list[Any] = chunks_for("Hello there, how can I help you today?", split=4)
    events = [chunks[0], SSEPause(pause_ms / 1000), *chunks[1:]]

    def handle(request: RecordedRequest) -> Reply:
        return sse_reply(events)
    return handle


def bench_live(base: Path, args: argparse.Namespace) -> None:
    root = base / "live"
    root.mkdir(parents=True)
    write_pytest_ini(root)
    (root / "probe.py").write_text(PROBE)
    out = root / "times.json"
    with start_chat_server() as server:
        server.set_handler(stream_handler(args.pause_ms))
        (root / "latency.case.yaml").write_text(PROBE_CASE.format(
            direct=server.base_url, rounds=args.rounds, out=out))
        env = bench_env()
        env["PYTHONPATH"] += os.pathsep + str(root)
        _check(run_pytest([*ARGS, "--toolbench-live", "--toolbench-timeout", "300"], root,
                          env), "the live probe")
    times = json.loads(out.read_text())
    proxy, direct = times["proxy"], times["direct"]
    added = [p[0] - d[0] for p, d in zip(proxy, direct)]
    added_first = [p[1] - d[1] for p, d in zip(proxy, direct)]
    print(f"\nlive: {args.rounds} streamed requests each way, in turns (the server pauses"
          f" {args.pause_ms:g} ms after the first chunk)")
    rows = [[name, statistics.median(t[0] for t in side),
             statistics.median(t[1] for t in side)]
            for name, side in (("through the proxy", proxy), ("direct", direct))]
    print_table(["path", "request ms (median)", "first chunk ms (median)"], rows)
    added_ms = statistics.median(added)
    verdict = "met" if added_ms <= TARGET_ADDED_MS else "MISSED"
    print(f"added by the proxy, median of the pairs: {added_ms:.2f} ms a request"
          f" (target <= {TARGET_ADDED_MS} ms): {verdict};"
          f" to the first chunk: {statistics.median(added_first):.2f} ms")


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--count", type=int, default=200, help="tests a side (default 200)")
    parser.add_argument("--files", type=int, default=20, help="files a side (default 20)")
    parser.add_argument("--repeat", type=int, default=5, help="timed runs a side (default 5)")
    parser.add_argument("--rounds", type=int, default=200,
                        help="live requests each way (default 200)")
    parser.add_argument("--pause-ms", type=float, default=20.0,
                        help="the server's pause after the first chunk (default 20)")
    parser.add_argument("--only", choices=["replay", "live"], help="one half only")
    parser.add_argument("--keep", type=Path, help="build in this directory and keep it")
    return parser.parse_args()


def main() -> None:
    args = parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-agent-") as temporary:
        base = args.keep or Path(temporary)
        if args.only != "live":
            bench_replay(base, args)
        if args.only != "replay":
            bench_live(base, args)


if __name__ == "__main__":
    main()
