"""The socket guard: while agent code runs, it connects to the plugin's proxy or nowhere.

An agent case's code and a test with the ``toolbench_agent`` fixture find the model APIs
through the environment, which points every SDK at the proxy. A client that does not read
it (built at import time, before the variables were set; given a ``base_url`` of its own;
reading a variable no SDK of the plugin's reads, ``OPENAI_API_BASE``) would go to the
network: live in a replay, with a real key, and unrecorded in a recording. The guard
refuses such a connection at connect, and the case fails naming the host and what to
change.

How (the way pytest-socket guards a test): ``socket.socket.connect`` and ``connect_ex``
and ``socket.getaddrinfo`` are wrapped, once for the process, with the first guard armed.
``socket.create_connection``, ``ssl``'s sockets and asyncio's ``sock_connect`` (so
``loop.create_connection``, anyio, httpx2 and every SDK on them) all connect through
``socket.socket.connect``. A wrapper checks only when the context it runs in holds an
armed ``Guard``: the plugin arms one around each call into agent code, which runs in a
copy of the caller's context (a plain agent on its thread, an async one on its user
loop, its tasks in turn), and a thread started from a guarded context inherits the guard
(``threading.Thread.start`` is wrapped too). The plugin's own connections (the proxy
forwarding upstream while recording, the judge, the simulated user, MCP servers) run in
contexts of their own, never armed.

Allowed: the proxy (127.0.0.1 and its port), UNIX sockets, other address families, and the
hosts a user allows (``--toolbench-allow-connect``). Everything else, loopback included, is
refused: an ``Escaped`` error (a ``ConnectionRefusedError``) in the agent, and a line in
the guard's ``escapes``. A lookup of a name that is neither loopback nor allowed is
refused the same way, before any DNS query leaves (an address needs none: its connection
is checked).

The guard is per process: a subprocess the agent starts is not guarded.
"""

from __future__ import annotations

import contextvars
import errno
import ipaddress
import socket
import threading
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

_ARMED: contextvars.ContextVar[Guard | None] = contextvars.ContextVar(
    "toolbench_netguard", default=None)

ALLOW_FLAG = "--toolbench-allow-connect"


class Escaped(ConnectionRefusedError):
    """A connection (or name lookup) agent code tried that the guard refused."""


@dataclass(frozen=True)
class Allowed:
    """A host agent code may connect to besides the proxy: ``host`` or ``host:port``."""

    host: str
    port: int | None = None

    @classmethod
    def parse(cls, text: str) -> Allowed:
        """``host``, ``host:port``, ``[v6]:port`` or ``v6``; ValueError says why not."""
        text = text.strip()
        host, port = text, None
        if text.startswith("["):
            host, _, rest = text[1:].partition("]")
            if rest:
                port = _port(rest.removeprefix(":"), text)
        elif text.count(":") == 1:
            host, _, given = text.partition(":")
            port = _port(given, text)
        if not host:
            raise ValueError(f"{text!r} names no host (HOST or HOST:PORT)")
        return cls(host.lower(), port)

    def admits(self, host: str, port: int | None) -> bool:
        return _same_host(self.host, host) and (self.port is None or port is None
                                                or self.port == port)

    def __str__(self) -> str:
        return _shown(self.host, self.port)


def _port(text: str, whole: str) -> int:
    if not text.isdigit() or not 0 < int(text) < 65536:
        raise ValueError(f"{whole!r}: the port is not a number from 1 to 65535")
    return int(text)


@dataclass
class Guard:
    """What one agent case (or one fixture test) may connect to, and what it tried."""

    proxy_port: int
    allowed: tuple[Allowed, ...] = ()
    who: str = "the agent"
    """Whose code it guards, as the failure names it."""
    remedy: str = ""
    """What to change, as the failure says it (the case's and the fixture's differ)."""
    escapes: list[str] = field(default_factory=list)
    """Each host (``host:port``) refused, once, in the order first tried."""
    _taken: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock)

    @contextmanager
    def armed(self) -> Iterator[None]:
        """Guard the connections of the code run in this context (and of the code it
        starts: threads, tasks, the thread or loop a call is handed to) while the block
        runs."""
        _install()
        token = _ARMED.set(self)
        try:
            yield
        finally:
            _ARMED.reset(token)

    def take(self) -> str | None:
        """The failure for hosts refused since the last ``take``, or None."""
        with self._lock:
            new, self._taken = self.escapes[self._taken:], len(self.escapes)
        return self.failure(new) if new else None

    def failure(self, hosts: list[str] | None = None) -> str:
        """What a case says of ``hosts`` (every host refused, by default)."""
        hosts = self.escapes if hosts is None else hosts
        return (f"{self.who} connected to {', '.join(hosts)}, not to the plugin's proxy:"
                " refused (in"
                " a replay nothing may leave the process; in a recording the traffic would"
                f" go unrecorded). {self.remedy}")

    def check(self, family: int, address: Any) -> None:
        """Raise ``Escaped`` (and note the host) unless ``address`` is allowed."""
        if family not in _GUARDED_FAMILIES or not isinstance(address, tuple) \
                or len(address) < 2:
            return
        host, port = str(address[0]), address[1]
        if port == self.proxy_port and _is_proxy_host(family, host):
            return
        if any(allowed.admits(host, port) for allowed in self.allowed):
            return
        self._refuse(_shown(host, port))

    def check_lookup(self, host: Any, port: Any) -> None:
        """Raise ``Escaped`` for a lookup of a name that is neither loopback nor allowed
        (an address needs no lookup: its connection is checked)."""
        if host is None:
            return
        name = host.decode("idna", "replace") if isinstance(host, bytes) else str(host)
        if not name or _is_address(name) or _is_loopback(name) \
                or any(allowed.admits(name, None) for allowed in self.allowed):
            return
        self._refuse(_shown(name, port if isinstance(port, int) else None))

    def _refuse(self, host: str) -> None:
        with self._lock:
            if host not in self.escapes:
                self.escapes.append(host)
        raise Escaped(errno.ECONNREFUSED, f"pytest-toolbench refused the connection to"
                      f" {host}: {self.who} may connect only to the plugin's proxy (the"
                      " failure says what to change)")


_GUARDED_FAMILIES = frozenset({socket.AF_INET, socket.AF_INET6})


@contextmanager
def unguarded() -> Iterator[None]:
    """The plugin's own code, called from guarded code (the fixture's judge, asked from
    within the test): its connections, and the threads and tasks it starts, unchecked."""
    token = _ARMED.set(None)
    try:
        yield
    finally:
        _ARMED.reset(token)


def remedy(given: str) -> str:
    """What to change, as a failure says it; ``given``: where the proxy's URL comes from."""
    return ("Send the agent's requests through the proxy: build its client while the case"
            " runs, with no base URL of its own (the SDKs read OPENAI_BASE_URL,"
            " ANTHROPIC_BASE_URL and GOOGLE_GEMINI_BASE_URL, which the plugin points at the"
            f" proxy; OPENAI_API_BASE is none of them), or give it {given}; a host the agent"
            f" must reach itself (a tool's own service) may be allowed with {ALLOW_FLAG}"
            " HOST:PORT")


def guard_for(proxy_port: int, allowed: Iterable[str], who: str, remedy: str) -> Guard:
    """A guard letting ``who``'s code connect to the proxy at ``proxy_port`` and to
    ``allowed`` (``host`` or ``host:port`` each, as ``--toolbench-allow-connect`` takes
    them)."""
    return Guard(proxy_port, tuple(Allowed.parse(entry) for entry in allowed), who, remedy)


def _shown(host: str, port: int | None) -> str:
    if port is None:
        return host
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def _is_proxy_host(family: int, host: str) -> bool:
    """Whether ``host`` is where the proxy listens, 127.0.0.1 (another loopback address,
    or ``::1``, may be another server's on the same port)."""
    lowered = host.lower()
    return (lowered in ("127.0.0.1", "::ffff:127.0.0.1")
            or (family == socket.AF_INET and lowered == "localhost"))


def _is_loopback(host: str) -> bool:
    if host.lower() in ("localhost", "localhost.", "ip6-localhost"):
        return True
    try:
        return ipaddress.ip_address(host.split("%", 1)[0]).is_loopback
    except ValueError:
        return False


def _is_address(host: str) -> bool:
    try:
        ipaddress.ip_address(host.split("%", 1)[0])
    except ValueError:
        return False
    return True


def _same_host(allowed: str, host: str) -> bool:
    host = host.lower().rstrip(".")
    if allowed.rstrip(".") == host:
        return True
    try:  # one address written two ways (::1, 0:0::1)
        return ipaddress.ip_address(allowed) == ipaddress.ip_address(host.split("%", 1)[0])
    except ValueError:
        return False


# -- the wrappers, installed once ------------------------------------------------------------

_installed = False
_install_lock = threading.Lock()


def _install() -> None:
    """Wrap the socket functions and ``Thread.start``, once for the process. Unarmed, a
    wrapper costs one context-variable read."""
    global _installed
    with _install_lock:
        if _installed:
            return
        true_connect = socket.socket.connect
        true_connect_ex = socket.socket.connect_ex
        true_getaddrinfo = socket.getaddrinfo
        true_start = threading.Thread.start

        def connect(self: socket.socket, address: Any) -> None:
            guard = _ARMED.get()
            if guard is not None:
                guard.check(self.family, address)
            return true_connect(self, address)

        def connect_ex(self: socket.socket, address: Any) -> int:
            guard = _ARMED.get()
            if guard is not None:
                try:
                    guard.check(self.family, address)
                except Escaped:
                    return errno.ECONNREFUSED
            return true_connect_ex(self, address)

        def getaddrinfo(host: Any, port: Any, *args: Any, **kwargs: Any) -> Any:
            guard = _ARMED.get()
            if guard is not None:
                guard.check_lookup(host, port)
            return true_getaddrinfo(host, port, *args, **kwargs)

        def start(self: threading.Thread) -> None:
            guard = _ARMED.get()
            if guard is not None:
                self.run = _guarded_run(guard, self.run)  # type: ignore[method-assign]
            true_start(self)

        socket.socket.connect = connect  # type: ignore[method-assign,assignment]
        socket.socket.connect_ex = connect_ex  # type: ignore[method-assign,assignment]
        socket.getaddrinfo = getaddrinfo
        threading.Thread.start = start  # type: ignore[method-assign]
        _installed = True


def _guarded_run(guard: Guard, run: Callable[[], None]) -> Callable[[], None]:
    """``run`` under ``guard``, in the new thread's own context."""
    def guarded() -> None:
        _ARMED.set(guard)
        run()
    return guarded
