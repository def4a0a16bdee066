"""``toolbench serve-local`` as a user runs it: a process that prints the URL and serves."""

from __future__ import annotations

import queue
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import IO

import httpx2
import pytest

from pytest_toolbench.commands.local_server import free_port

pytestmark = [pytest.mark.live_server, pytest.mark.xdist_group("model_servers")]

EXPORT_LINE = re.compile(r"^\s*export TOOLBENCH_BASE_URL=(?P<url>\S+)\s*$")
READY_TIMEOUT_S = 150.0


@dataclass
class Command:
    """The command running in a child process, and the lines it printed so far."""

    process: subprocess.Popen[str]
    port: int
    reader: threading.Thread | None = None
    lines: queue.Queue[str] = field(default_factory=queue.Queue)
    printed: list[str] = field(default_factory=list)

    @classmethod
    def start(cls, port: int, *options: str) -> Command:
        process = subprocess.Popen(
            [sys.executable, "-m", "pytest_toolbench.commands.local_server", "--port", str(port),
             *options],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            text=True)
        command = cls(process, port)
        # A thread reads the pipe so the test can wait for a line with a deadline.
        command.reader = threading.Thread(target=_pump, args=(process.stdout, command.lines),
                                          daemon=True)
        command.reader.start()
        return command

    def wait_for_url(self, timeout_s: float) -> str:
        deadline = time.monotonic() + timeout_s
        while (remaining := deadline - time.monotonic()) > 0:
            try:
                line = self.lines.get(timeout=remaining)
            except queue.Empty:
                break
            self.printed.append(line)
            if match := EXPORT_LINE.match(line):
                return match["url"]
        raise AssertionError(f"no export line within {timeout_s:g} s; printed:\n"
                             f"{''.join(self.printed)}")

    def stop(self) -> None:
        """SIGTERM first: killed outright, the command could not stop its own server."""
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=10)
        self.output()
        if self.process.stdout is not None:
            self.process.stdout.close()

    def output(self) -> str:
        """Everything printed; call it once the process has exited."""
        if self.reader is not None:
            self.reader.join(timeout=10)
        while not self.lines.empty():
            self.printed.append(self.lines.get_nowait())
        return "".join(self.printed)


@pytest.fixture
def serve_local(local_extra: None) -> Iterator[Command]:
    command = Command.start(free_port())
    try:
        yield command
    finally:
        command.stop()


@pytest.fixture
def serve_llama_server(llama_server_extra: None) -> Iterator[Command]:
    command = Command.start(free_port(), "--server", "llama-server")
    try:
        yield command
    finally:
        command.stop()


def _pump(stream: IO[str], lines: queue.Queue[str]) -> None:
    for line in stream:
        lines.put(line)


def test_serve_local_prints_the_url_serves_and_stops_on_sigterm(serve_local: Command) -> None:
    url = serve_local.wait_for_url(READY_TIMEOUT_S)

    assert url == f"http://127.0.0.1:{serve_local.port}/v1"
    with httpx2.Client(trust_env=False, timeout=10) as client:
        assert client.get(f"{url}/models").status_code == 200
        serve_local.process.send_signal(signal.SIGTERM)
        assert serve_local.process.wait(timeout=30) == 0
        # The command stopped its server too: nothing answers on the port any more.
        with pytest.raises(httpx2.ConnectError):
            client.get(f"{url}/models")
    assert "stopping the local model server" in serve_local.output()


def test_serve_local_llama_server_answers_three_apis_and_stops_on_sigterm(
        serve_llama_server: Command) -> None:
    url = serve_llama_server.wait_for_url(READY_TIMEOUT_S)

    assert url == f"http://127.0.0.1:{serve_llama_server.port}/v1"
    anthropic = {"x-api-key": "sk-test", "anthropic-version": "2023-06-01"}
    with httpx2.Client(trust_env=False, timeout=60) as client:
        assert client.get(f"{url.removesuffix('/v1')}/health").json() == {"status": "ok"}
        chat = client.post(f"{url}/chat/completions", json={
            "messages": [{"role": "user", "content": "Say hello."}], "max_tokens": 2})
        responses = client.post(f"{url}/responses", json={
            "input": "Say hello.", "max_output_tokens": 2})
        messages = client.post(f"{url}/messages", headers=anthropic, json={
            "model": "gemma-3-270m", "max_tokens": 2,
            "messages": [{"role": "user", "content": "Say hello."}]})
        assert chat.json()["object"] == "chat.completion"
        assert chat.json()["model"] == "gemma-3-270m"  # --alias, not the file's path
        assert responses.json()["object"] == "response"
        assert messages.json()["type"] == "message"
        serve_llama_server.process.send_signal(signal.SIGTERM)
        assert serve_llama_server.process.wait(timeout=30) == 0
        with pytest.raises(httpx2.ConnectError):
            client.get(f"{url}/models")
    output = serve_llama_server.output()
    assert "starting the local model server, llama-server" in output
    assert "--toolbench-api chat,responses,messages" in output
    assert "stopping the local model server" in output
