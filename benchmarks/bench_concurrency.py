"""Live concurrency: CASES single-stage cases against a loopback server that answers each
request after DELAY seconds, run with ``--toolbench-live --toolbench-concurrency N``.

Two layouts, each timed:

- the project's scripted test server (``tests/support/chat_server.py``: one asyncio task
  per connection), the cases in files of 10;
- a plain ``http.server.ThreadingHTTPServer`` (HTTP/1.1 keep-alive, a thread per
  connection, the standard library's listen backlog of 5), the cases in two files.

A pre-flight check sends N requests at once to each server and shows they are answered
together. Each server logs when each request arrived and over which connection: the table
shows the time from the first request of a run to the last (ideal: the waves of N, less
the last one's DELAY) and how many connections carried them.

Baseline, measured in the same run: the first layout at ``--toolbench-concurrency 1``
(sequential: CASES x DELAY, about 40 s by default). ``--quick`` runs the sequential
baseline on fewer cases and extrapolates; the table says which figure was measured.
Also measured: pytest's start-up (an empty run) and a one-case live run of each layout.
Target: wall <= 1.3 x (ideal + start-up), where ideal = CASES x DELAY / N; the table
also shows the limit with the one-case run in place of the empty one.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import contextlib
import http.server
import json
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx2
from _common import (
    Timing,
    city_of,
    median,
    print_table,
    repeat_runs,
    run_pytest,
    start_chat_server,
    tool_call_handler,
    weather_reply,
    write_case_suite,
    write_pytest_ini,
)
from support.chat_server import RecordedRequest, Reply

TARGET_FACTOR = 1.3
CASES_PER_FILE = 10
PLAIN_SERVER_FILES = 2
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


class Arrivals:
    """When each request reached a server, and over which connection (client port)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._times: list[float] = []
        self._connections: set[object] = set()

    def record(self, connection: object = None) -> None:
        with self._lock:
            self._times.append(time.perf_counter())
            self._connections.add(connection)

    def take(self) -> tuple[float, int]:
        """The first to the last arrival since the last call, in seconds, and the
        connections they came over (1 when the server cannot tell them apart)."""
        with self._lock:
            times, connections = self._times, self._connections
            self._times, self._connections = [], set()
        return (max(times) - min(times) if times else 0.0), len(connections)


@dataclass(frozen=True)
class Layout:
    """A server and how the cases are spread over files."""

    name: str
    base_url: str
    files: int
    arrivals: Arrivals


class _DelayedToolCall(http.server.BaseHTTPRequestHandler):
    """Answers every chat request, after the server's delay, with the tool call it asks
    for; HTTP/1.1, so the client keeps its connections open between requests."""

    protocol_version = "HTTP/1.1"
    delay_s = 0.0
    arrivals = Arrivals()

    def do_POST(self) -> None:
        self.arrivals.record(self.client_address)
        body = json.loads(self.rfile.read(int(self.headers["content-length"])))
        time.sleep(self.delay_s)
        data = json.dumps(weather_reply(city_of(body))).encode()
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, format: str, *args: object) -> None:
        """Quiet: one line a request would swamp the figures."""


@contextlib.contextmanager
def plain_server(delay_s: float, arrivals: Arrivals) -> Iterator[str]:
    """A ``ThreadingHTTPServer`` on loopback in a thread of this process; its base URL."""
    handler = type("Handler", (_DelayedToolCall,), {"delay_s": delay_s,
                                                    "arrivals": arrivals})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/v1"
    finally:
        server.shutdown()
        server.server_close()


def preflight(base_url: str, concurrency: int, delay: float) -> float:
    """Send ``concurrency`` requests at once; return the wall time they all took."""
    body = {"model": "m", "messages": [{"role": "user", "content": "in City0?"}]}
    url = f"{base_url}/chat/completions"

    limits = httpx2.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    with httpx2.Client(timeout=30, limits=limits) as client, \
            concurrent.futures.ThreadPoolExecutor(concurrency) as pool:
        def one(_: int) -> int:
            return client.post(url, json=body).status_code

        list(pool.map(lambda _: None, range(concurrency)))  # threads up before the clock
        started = time.perf_counter()
        statuses = list(pool.map(one, range(concurrency)))
        wall = time.perf_counter() - started
    if statuses != [200] * concurrency:
        raise SystemExit(f"pre-flight: the server answered {statuses}")
    print(f"pre-flight {base_url}: {concurrency} simultaneous requests answered in {wall:.2f} s "
          f"(one after another: {concurrency * delay:.1f} s)")
    if wall > concurrency * delay / 2:
        raise SystemExit("the server does not answer concurrent requests concurrently")
    return wall


def suite(root: Path, cases: int, files: int | None = None) -> Path:
    """``cases`` cases in files of CASES_PER_FILE, or in ``files`` files."""
    files = files or cases // CASES_PER_FILE
    per_file, rest = divmod(cases, files)
    if rest or not per_file:
        raise SystemExit(f"--cases must be a multiple of {CASES_PER_FILE * PLAIN_SERVER_FILES}")
    write_case_suite(root, files, per_file)
    return root


def live_run(root: Path, base_url: str, concurrency: int) -> Timing:
    return run_pytest([*PYTEST_ARGS, "--toolbench-live", f"--toolbench-base-url={base_url}",
                       f"--toolbench-concurrency={concurrency}"], root)


def startup(root: Path, repeat: int) -> float:
    """Wall time of ``pytest`` on an empty directory: interpreter, pytest, plugins."""
    root.mkdir(parents=True, exist_ok=True)
    write_pytest_ini(root)
    return median([t.wall_s for t in repeat_runs(lambda: run_pytest(PYTEST_ARGS, root),
                                                 repeat, expect=5)])


@dataclass(frozen=True)
class Measured:
    layout: Layout
    runs: list[Timing]
    one_case_s: float
    spans: list[tuple[float, int]]
    """Per run: first to last request at the server, and the connections that carried them."""


def report(args: argparse.Namespace, measured: list[Measured], sequential: Timing,
           sequential_cases: int, start_s: float) -> None:
    seq_wall = sequential.wall_s
    if sequential_cases != args.cases:
        # Start-up is paid once; only the per-case part scales with the number of cases.
        seq_wall = start_s + (sequential.wall_s - start_s) * args.cases / sequential_cases
    seq_label = ("measured" if sequential_cases == args.cases else
                 f"extrapolated from {sequential_cases} cases ({sequential.wall_s:.2f} s)")
    ideal = args.cases * args.delay / args.concurrency
    waves = -(-args.cases // args.concurrency)
    print(f"\n{args.cases} live cases, server delay {args.delay:g} s per request")
    rows: list[list[object]] = []
    for item in measured:
        wall = median([t.wall_s for t in item.runs])
        rows.append([f"{item.layout.name}: --toolbench-concurrency {args.concurrency}", wall,
                     f"measured, median of {len(item.runs)}: "
                     + " ".join(f"{t.wall_s:.2f}" for t in item.runs), args.cases / wall])
        rows.append([f"{item.layout.name}: one case", item.one_case_s, "measured, median",
                     "-"])
        rows.append([f"{item.layout.name}: first to last request", median(
            [span for span, _ in item.spans]), "at the server, each run: " + " ".join(
            f"{span:.2f}" + (f" ({n} conn.)" if n > 1 else "") for span, n in item.spans), "-"])
    rows += [
        [f"{measured[0].layout.name}: --toolbench-concurrency 1", seq_wall, seq_label,
         args.cases / seq_wall],
        ["pytest start-up (empty run)", start_s, "measured, median", "-"],
        [f"ideal: {args.cases} x {args.delay:g} s / {args.concurrency}", ideal, "computed", "-"],
        [f"ideal first to last request: {waves - 1} waves x {args.delay:g} s",
         (waves - 1) * args.delay, "computed", "-"],
    ]
    print_table(["run", "wall s", "how", "cases/s"], rows)
    for item in measured:
        wall = median([t.wall_s for t in item.runs])
        limit = TARGET_FACTOR * (ideal + start_s)
        verdict = "met" if wall <= limit else "MISSED"
        print(f"{item.layout.name}: speed-up {seq_wall / wall:.1f}x; {wall / ideal:.2f} x ideal;"
              f" target wall <= {TARGET_FACTOR} x ({ideal:.2f} + {start_s:.2f}) = {limit:.2f} s:"
              f" {verdict} ({wall:.2f} s); ideal + the one-case run: {ideal + item.one_case_s:.2f}"
              f" s, wall / that {wall / (ideal + item.one_case_s):.2f} x")


def measure(layout: Layout, base: Path, args: argparse.Namespace) -> Measured:
    root = suite(base / f"{layout.name}-cases", args.cases, layout.files)
    one = suite(base / f"{layout.name}-one", 1, 1)
    one_case = median([t.wall_s for t in repeat_runs(
        lambda: live_run(one, layout.base_url, args.concurrency), args.repeat)])
    spans: list[tuple[float, int]] = []

    def run() -> Timing:
        layout.arrivals.take()
        timing = live_run(root, layout.base_url, args.concurrency)
        spans.append(layout.arrivals.take())
        return timing

    runs = repeat_runs(run, args.repeat)
    return Measured(layout, runs, one_case, spans)


def main() -> None:
    args = parse_args()
    chat_arrivals, plain_arrivals = Arrivals(), Arrivals()
    with tempfile.TemporaryDirectory(prefix="toolbench-live-") as base_dir, \
            start_chat_server() as server, plain_server(args.delay, plain_arrivals) as plain_url:
        base = Path(base_dir)
        answer = tool_call_handler(delay_s=args.delay)

        def logged(request: RecordedRequest) -> Reply:
            chat_arrivals.record()
            return answer(request)

        server.set_handler(logged)
        layouts = [
            Layout("chat_server, files of 10", server.base_url,
                   args.cases // CASES_PER_FILE, chat_arrivals),
            Layout(f"ThreadingHTTPServer, {PLAIN_SERVER_FILES} files", plain_url,
                   PLAIN_SERVER_FILES, plain_arrivals),
        ]
        for layout in layouts:
            preflight(layout.base_url, args.concurrency, args.delay)
        start_s = startup(base / "empty", args.repeat)
        measured = [measure(layout, base, args) for layout in layouts]
        sequential_cases = QUICK_SEQUENTIAL_CASES if args.quick else args.cases
        small = suite(base / "sequential", sequential_cases)
        sequential = repeat_runs(lambda: live_run(small, server.base_url, 1), 1)[0]
        report(args, measured, sequential, sequential_cases, start_s)


if __name__ == "__main__":
    main()
