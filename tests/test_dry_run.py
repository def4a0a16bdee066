"""``--toolbench-dry-run``: every case item's first request, built as a run builds it, and
what the item lacks; nothing reaches a server (a loopback server that counts connections
sees none), no key reaches the terminal, and the exit status says whether every item
could run."""

from __future__ import annotations

import json
import os
import shutil
import socket
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from pytest_toolbench.transport.cassette import Cassette

ROOT = Path(__file__).resolve().parent.parent
SECRETS = {"OPENAI_API_KEY": "sk-dry-openai-0123456789abcdef",
           "ANTHROPIC_API_KEY": "sk-ant-dry-0123456789abcdef",
           "GEMINI_API_KEY": "AIza-dry-gemini-0123456789"}


class CountingServer:
    """A loopback socket that accepts connections and counts them (and answers none)."""

    def __init__(self) -> None:
        self._socket = socket.socket()
        self._socket.bind(("127.0.0.1", 0))
        self._socket.listen(16)
        self._socket.settimeout(0.2)
        self.url = f"http://127.0.0.1:{self._socket.getsockname()[1]}"
        self.connections = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._accept, daemon=True)
        self._thread.start()

    def _accept(self) -> None:
        while not self._stop.is_set():
            try:
                connection, _ = self._socket.accept()
            except OSError:  # the timeout: look at the stop flag again
                continue
            self.connections += 1
            connection.close()

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        self._socket.close()


@pytest.fixture
def counting_server(monkeypatch: pytest.MonkeyPatch) -> Iterator[CountingServer]:
    """Every endpoint and proxy variable points at it: a request that slipped out, to the
    case's URL or to a service's through a proxy, would reach it."""
    server = CountingServer()
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY"):
        monkeypatch.setenv(name, server.url)
    try:
        yield server
    finally:
        server.close()


def example_suite(pytester: pytest.Pytester) -> list[str]:
    """The example suite copied in, and its item ids as pytest collects them."""
    shutil.copytree(ROOT / "cases", pytester.path / "cases",
                    ignore=shutil.ignore_patterns("__pycache__"))
    collected = pytester.runpytest("--collect-only", "-q", "cases")
    ids = [line for line in collected.outlines if "::" in line]
    assert len(ids) >= 20, collected.outlines
    return ids


def blocks(lines: list[str]) -> dict[str, list[str]]:
    """The dry run's output: each item's heading line and the lines under it, by item id."""
    found: dict[str, list[str]] = {}
    current: list[str] = []
    for line in lines:
        if line.startswith("cases/") and ": " in line:
            item, _, verdict = line.partition(": ")
            current = found.setdefault(item, [verdict])
        elif line.startswith("    "):
            current.append(line[4:])
        else:
            current = []
    return found


@pytest.mark.parametrize("mode", ["replay", "live"])
def test_the_example_suite_shows_each_first_request_with_no_key_and_sends_nothing(
        pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch,
        counting_server: CountingServer, mode: str) -> None:
    ids = example_suite(pytester)
    for name, value in SECRETS.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("TOOLBENCH_BASE_URL", f"{counting_server.url}/v1")
    # The MCP case's command is `python`: this interpreter, which has mcp-server-time.
    monkeypatch.setenv("PATH", f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}")

    result = pytester.runpytest("--toolbench-dry-run", "cases",
                                *(["--toolbench-live"] if mode == "live" else []))

    assert result.ret == 0, result.outlines
    shown = blocks(result.outlines)
    assert sorted(shown) == sorted(ids)
    for item, lines in shown.items():
        assert lines[0] == "ready", (item, lines)
        if any(line.startswith("note: an agent case") for line in lines):
            continue  # cases/support_agent: its agent sends its own requests as it runs
        request = next(line for line in lines if line.startswith("POST "))
        assert request.startswith(f"POST {counting_server.url}/v1/"), request
        body = json.loads(lines[-1])
        # The request a run sends first is the one the cassette recorded first.
        file, _, label = item.partition("::")
        stem = Path(file).name.split(".case.")[0]
        recorded = Cassette.load(pytester.path / "cases" / "__cassettes__" / stem
                                 / f"{label}.yaml", api=None)
        assert body == recorded.interactions[0].request, item
    output = result.stdout.str() + result.stderr.str()
    assert not any(secret in output for secret in SECRETS.values())
    if mode == "live":
        result.stdout.fnmatch_lines(["    authorization: Bearer <scrubbed>",
                                     "    x-api-key: <scrubbed>"])
    else:  # a replay sends no key at all
        assert "authorization:" not in output and "x-api-key:" not in output
    result.stdout.fnmatch_lines([f"toolbench dry run: {len(ids)} items ready; nothing was sent"])
    assert counting_server.connections == 0


LACKING = """\
mcp_servers:
  gone: {command: [no-such-program-for-dry-run]}
---
name: unrecorded
model: m
stages: [{name: ask, user: hi}]
---
name: from_the_environment
model: m
stages: [{name: ask, user: "weather in ${env.DRY_RUN_CITY}?"}]
---
name: server_not_installed
model: m
tools: [{mcp: gone}]
stages: [{name: ask, user: hi}]
---
name: local
model: m
endpoint:
  base_url: %(url)s/v1
  headers: {X-Team: search, X-Api-Token: tok-written-in-the-file-42}
stages: [{name: ask, user: hi}]
"""


def test_what_each_item_lacks_is_named_and_the_exit_status_says_so(
        pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch,
        counting_server: CountingServer) -> None:
    pytester.makefile(".case.yaml", lacking=LACKING % {"url": counting_server.url})
    monkeypatch.delenv("DRY_RUN_CITY", raising=False)

    replayed = pytester.runpytest("--toolbench-dry-run", "-q")
    live = pytester.runpytest("--toolbench-dry-run", "--toolbench-live", "-q")

    assert replayed.ret == 1 and live.ret == 1
    replayed.stdout.fnmatch_lines([
        ("lacking.case.yaml::unrecorded[[]m[]]: chat POST https://api.openai.com/v1/chat/"
        "completions: missing: *cassette*--toolbench-record*")])
    lines = [line for line in live.outlines if line.startswith("lacking.case.yaml::")]
    assert len(lines) == 4, live.outlines  # -q: one line an item
    live.stdout.fnmatch_lines([
        ("*::unrecorded[[]m[]]: chat POST https://api.openai.com/v1/chat/completions:"
        " missing: a key: set OPENAI_API_KEY"),
        "*::from_the_environment[[]m[]]: chat: missing: *DRY_RUN_CITY*",
        ("*::server_not_installed[[]m[]]: chat POST *: missing: a key: set OPENAI_API_KEY;"
        " MCP server 'gone': its command 'no-such-program-for-dry-run' is not found*"),
        f"*::local[[]m[]]: chat POST {counting_server.url}/v1/chat/completions: ready",
        "toolbench dry run: 1 item ready, 3 missing something; nothing was sent"])

    monkeypatch.setenv("OPENAI_API_KEY", SECRETS["OPENAI_API_KEY"])
    monkeypatch.setenv("DRY_RUN_CITY", "Paris")
    full = pytester.runpytest("--toolbench-dry-run", "--toolbench-live", "-k",
                              "environment or local")

    assert full.ret == 0, full.outlines
    full.stdout.fnmatch_lines(["*::from_the_environment[[]m[]]: ready",
                               '    {"messages": [[]{"content": "weather in Paris?"*',
                               "*::local[[]m[]]: ready",
                               "    x-api-token: <scrubbed>",
                               "    x-team: search",
                               "    authorization: Bearer <scrubbed>"])
    output = full.stdout.str() + full.stderr.str()
    assert "tok-written-in-the-file-42" not in output
    assert SECRETS["OPENAI_API_KEY"] not in output
    assert counting_server.connections == 0


def test_a_local_server_without_a_key_is_ready_and_verbose_indents_the_body(
        pytester: pytest.Pytester, counting_server: CountingServer) -> None:
    pytester.makefile(".case.yaml", local=f"""\
name: local
model: m
endpoint: {{base_url: {counting_server.url}/v1}}
stages: [{{name: ask, user: hi}}]
""")
    result = pytester.runpytest("--toolbench-dry-run", "--toolbench-live", "-v")

    assert result.ret == 0
    result.stdout.fnmatch_lines(["*::local[[]m[]]: ready",
                                 "    note: sent without a key (OPENAI_API_KEY not set)",
                                 '      "model": "m"'])
    assert counting_server.connections == 0


def test_the_dry_run_refuses_xdist(pytester: pytest.Pytester) -> None:
    pytester.makefile(".case.yaml", one="name: one\nstages: [{name: ask, user: hi}]\n")
    result = pytester.runpytest("--toolbench-dry-run", "-n", "2")

    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--toolbench-dry-run runs in one process: leave out -n*"])


def test_a_case_changed_since_its_recording_lacks_a_cassette_that_fits(
        pytester: pytest.Pytester, counting_server: CountingServer) -> None:
    example_suite(pytester)
    case = pytester.path / "cases" / "text.case.yaml"
    text = case.read_text(encoding="utf-8")
    assert text.count("Say hello.") == 2
    case.write_text(text.replace("Say hello.", "Say goodbye.", 1), encoding="utf-8")

    result = pytester.runpytest("--toolbench-dry-run", "-q", "cases/text.case.yaml")

    assert result.ret == 1
    result.stdout.fnmatch_lines([
        ("cases/text.case.yaml::plain_text[[]gemma-3-270m[]]: chat POST *: missing: *request 1"
        " differs from the one recorded in *plain_text*; re-record with: pytest *"),
        "cases/text.case.yaml::streamed_text[[]gemma-3-270m[]]: chat POST *: ready",
        "toolbench dry run: 2 items ready, 1 missing something; nothing was sent"])
    verbose = pytester.runpytest("--toolbench-dry-run", "cases/text.case.yaml::plain_text")
    verbose.stdout.fnmatch_lines(["*::plain_text[[]gemma-3-270m[]]: NOT READY",
                                  "    missing: *request 1 differs *",
                                  "*Say goodbye.*"])
    assert counting_server.connections == 0


def test_a_toolbox_that_does_not_import_is_a_collection_error_as_in_a_run(
        pytester: pytest.Pytester, counting_server: CountingServer) -> None:
    pytester.makefile(".case.yaml", box="""\
name: box
model: m
tools: [{toolbox: {python: "no_such_module_for_dry_run:Account"}}]
stages: [{name: ask, user: hi}]
""")
    result = pytester.runpytest("--toolbench-dry-run")

    assert result.ret == pytest.ExitCode.INTERRUPTED
    result.stdout.fnmatch_lines(["*box.case.yaml:3:*no_such_module_for_dry_run*"])
    assert "toolbench dry run" not in result.stdout.str()
    assert counting_server.connections == 0


SIMULATED = """\
name: simulated
model: agent-model
endpoint: {base_url: "%(model)s/v1"}
judge:
  model: judge-model
  endpoint: {base_url: "%(user)s/v1"}
stages:
  - name: talk
    simulate_user: {instructions: You are Ana and want a refund., max_turns: 2}
"""


def test_a_simulated_user_that_speaks_first_sends_the_first_request_to_its_endpoint(
        pytester: pytest.Pytester, counting_server: CountingServer) -> None:
    other = CountingServer()
    try:
        pytester.makefile(".case.yaml", simulated=SIMULATED % {
            "model": counting_server.url, "user": other.url})
        result = pytester.runpytest("--toolbench-dry-run", "--toolbench-live")
    finally:
        other.close()

    assert result.ret == 0, result.outlines
    result.stdout.fnmatch_lines(["*::simulated[[]agent-model[]]: ready",
                                 "    note: the first request is the simulator's",
                                 f"    POST {other.url}/v1/chat/completions  (chat)",
                                 '*You are Ana*"model": "judge-model"*'])
    assert counting_server.connections == 0 and other.connections == 0


AGENT_MODULE = "def make():\n    return lambda text: 'hello'\n"


def test_an_agent_case_says_its_agent_builds_its_requests_and_what_it_needs(
        pytester: pytest.Pytester, counting_server: CountingServer) -> None:
    pytester.makepyfile(dry_bot=AGENT_MODULE)
    pytester.makefile(".case.yaml", bot="name: bot\nagent: {python: 'dry_bot:make'}\n"
                                        "stages: [{name: ask, user: hi}]\n")
    pytester.syspathinsert()

    replayed = pytester.runpytest("--toolbench-dry-run")
    live = pytester.runpytest("--toolbench-dry-run", "--toolbench-live", "-q")

    assert replayed.ret == 1
    replayed.stdout.fnmatch_lines([
        "bot.case.yaml::bot: NOT READY",
        "    answers from the cassette __cassettes__/bot/bot.yaml",
        "    missing: *no cassette*record it with: pytest 'bot.case.yaml::bot' --toolbench-record",
        ("    note: an agent case: its agent builds its own requests, known once dry_bot:make"
        " runs (it imports)")])
    assert live.ret == 0
    live.stdout.fnmatch_lines(["bot.case.yaml::bot: agent: ready"])
    assert counting_server.connections == 0


def test_an_item_its_api_cannot_express_lacks_a_valid_case_the_others_are_planned(
        pytester: pytest.Pytester, counting_server: CountingServer) -> None:
    pytester.makefile(".case.yaml", seeded=f"""\
name: seeded
model: m
endpoint: {{base_url: {counting_server.url}/v1}}
params: {{temperature: 0, seed: 7}}
stages: [{{name: ask, user: hi}}]
""")
    result = pytester.runpytest("--toolbench-dry-run", "--toolbench-live", "-q",
                                "--toolbench-api=chat,responses")

    assert result.ret == 1
    result.stdout.fnmatch_lines([
        f"*::seeded[[]m[]]: chat POST {counting_server.url}/v1/chat/completions: ready",
        ("*::seeded[[]m-responses[]]: responses: missing: a valid case: seeded.case.yaml:4:"
         " case 'seeded': the Responses API's request has no field 'seed'*"),
        "toolbench dry run: 1 item ready, 1 missing something; nothing was sent"])
    assert counting_server.connections == 0


def test_a_dry_run_leaves_the_last_runs_reports_as_they_are(
        pytester: pytest.Pytester) -> None:
    pytester.makefile(".case.yaml", one="name: one\nstages: [{name: ask, user: hi}]\n")
    report, page = pytester.path / "report.json", pytester.path / "report.html"
    report.write_text("the last run's", encoding="utf-8")

    result = pytester.runpytest("--toolbench-dry-run", f"--toolbench-report={report}",
                                f"--toolbench-html={page}")

    assert result.ret == 1  # no cassette
    assert report.read_text(encoding="utf-8") == "the last run's"
    assert not page.exists()


RECORDED_BOT = """
import os

import httpx2


def make(tone="plain"):
    def ask(user):
        with httpx2.Client(timeout=30) as client:
            reply = client.post(os.environ["OPENAI_BASE_URL"] + "/chat/completions", json={
                "model": "m", "messages": [{"role": "user", "content": user}]})
        return reply.json()["choices"][0]["message"]["content"]
    return ask
"""


def test_a_recorded_agent_case_says_what_will_run(pytester: pytest.Pytester) -> None:
    from support.chat_server import completion, json_reply, start_chat_server

    pytester.makepyfile(dry_bot=RECORDED_BOT)
    pytester.syspathinsert()
    with start_chat_server() as server:
        server.set_handler(lambda request: json_reply(completion(text="hello")))
        pytester.makefile(".case.yaml", bot=(
            f"name: bot\nagent: {{python: 'dry_bot:make', init: {{tone: terse}}}}\n"
            f"endpoint: {{base_url: '{server.base_url}'}}\n"
            "stages: [{name: ask, user: hi}, {name: more, user: again}]\n"))
        pytester.runpytest_subprocess("--toolbench-record").assert_outcomes(passed=1)

    replayed = pytester.runpytest("--toolbench-dry-run")
    recording = pytester.runpytest("--toolbench-dry-run", "--toolbench-record")

    assert replayed.ret == 0
    replayed.stdout.fnmatch_lines([
        "bot.case.yaml::bot: ready",
        "    answers from the cassette __cassettes__/bot/bot.yaml",
        "    note: an agent case: *",
        ("    runs: the factory dry_bot:make(tone) makes the agent, once a run; each stage's"
         " user text is sent to it (2 stages: ask, more)"),
        ("    runs: its SDKs are pointed at the plugin's loopback proxy: OPENAI_BASE_URL,"
         " ANTHROPIC_BASE_URL, GOOGLE_GEMINI_BASE_URL (and toolbench.base_url(), for a"
         " factory that takes toolbench)"),
        ("    runs: the proxy answers from __cassettes__/bot/bot.yaml: 2 recorded exchanges,"
         " in order; nothing reaches the network"),
        "toolbench dry run: 1 item ready; nothing was sent"])
    assert "no request (see what is missing)" not in replayed.stdout.str()
    recording.stdout.fnmatch_lines([
        ("    runs: the proxy forwards each request to its API's service (the case's"
         " endpoint, if it names one) and records it in __cassettes__/bot/bot.yaml")])
