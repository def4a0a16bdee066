"""``toolbench conform`` against the real local model server (Gemma 3 270M).

The small model may fail the model-level probes; what is asserted is that the command
completes with a whole matrix, and the protocol verdicts the server has shown so far
(docs/conformance.md): forced calls and their finish reason hold, the streams end with
[DONE], and no usage arrives in a stream.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pytest_toolbench.commands.cli import main as toolbench
from pytest_toolbench.commands.conform_matrix import PROBES
from pytest_toolbench.commands.local_server import LocalServer

pytestmark = [pytest.mark.live_server, pytest.mark.xdist_group("model_servers")]


def test_conform_completes_with_a_matrix(local_server: LocalServer, tmp_path: Path,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    report = tmp_path / "matrix.json"
    code = toolbench(["conform", "--base-url", local_server.base_url, "--report", str(report),
                      "--format", "markdown"])
    matrix = json.loads(report.read_text(encoding="utf-8"))
    cells = {probe["name"]: probe["cells"]["chat"] for probe in matrix["probes"]}
    assert list(cells) == list(PROBES)
    assert all(cell["verdict"] in ("pass", "fail", "not supported") for cell in cells.values())
    assert code == (1 if any(cell["verdict"] == "fail" for cell in cells.values()) else 0)
    for probe in ("forced_call", "finish_reason", "stream_done", "no_call_in_content"):
        assert cells[probe]["verdict"] == "pass", (probe, cells[probe])
    assert cells["stream_usage"]["cause"] == "protocol"
    assert capsys.readouterr().out.startswith("| probe | checks | chat |")


def test_conform_over_three_apis_of_llama_server(llama_server: LocalServer, tmp_path: Path,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    """One column per API, each judged by its own protocol: what docs/conformance.md shows
    for llama-server, the Messages route's ignored ``tool_choice: none`` included."""
    report = tmp_path / "matrix.json"
    page = tmp_path / "matrix.html"
    code = toolbench(["conform", "--base-url", llama_server.base_url, "--model", "gemma-3-270m",
                      "--api", "chat,responses,messages", "--report", str(report),
                      "--html", str(page)])
    matrix = json.loads(report.read_text(encoding="utf-8"))
    assert matrix["apis"] == ["chat", "responses", "messages"]
    cells = {api: {probe["name"]: probe["cells"][api] for probe in matrix["probes"]}
             for api in matrix["apis"]}
    for api, column in cells.items():
        assert list(column) == list(PROBES)
        for probe in ("plain_text", "required", "finish_reason", "stream_done", "stream_usage",
                      "error_shape", "no_call_in_content"):
            assert column[probe]["verdict"] == "pass", (api, probe, column[probe])
    assert cells["chat"]["none"]["verdict"] == "pass"
    assert cells["messages"]["none"]["cause"] == "protocol"
    assert code == 1
    out = capsys.readouterr().out
    assert out.splitlines()[0].split() == ["probe", "chat", "responses", "messages"]
    assert "<th>responses</th>" in page.read_text(encoding="utf-8")
