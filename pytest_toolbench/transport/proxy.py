"""The loopback proxy an agent case's own code talks to, in place of the model APIs.

One per pytest process, started with the first agent case and stopped with the session:
HTTP/1.1 (``h11``, sans-IO) on ``127.0.0.1`` and a free port, served on an asyncio loop in
a daemon thread of its own. Every URL it serves starts with an unguessable token, then the
SDK family's prefix: ``http://127.0.0.1:PORT/TOKEN/openai/v1`` is what ``OPENAI_BASE_URL``
says while an agent case runs (``environment()``), ``.../TOKEN/anthropic`` and
``.../TOKEN/gemini`` the same for Anthropic's and Google's SDKs. The URLs stay the same for
the whole session, so a client an agent module built at import time keeps working.

The server only routes: a request without the token is refused (403), and so is one while
no agent case runs. Everything else goes to the ``ProxyHandler`` of the case under way
(``transport/agent_tap.py``): forwarded upstream and recorded, or answered from a cassette.
A reply keeps its connection open only for a client whose pool is bound to no event loop
(``_loop_free``), and only within a case: when the next case (or none) is attached, the
idle ones are closed.
Which wire API a request speaks is read from its path (``FAMILIES``); a path that is no
model API is still handled, its reply not read as one.
"""

from __future__ import annotations

import asyncio
import http
import json
import re
import secrets
import threading
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from http import HTTPStatus
from typing import Final, Protocol

import h11

MAX_REQUEST_BYTES = 64 * 1024 * 1024
"""The largest request body the proxy takes (an agent's request; an image or two): a
longer one announced is refused (413) on its head, before any of its body is read."""
MAX_BUFFERED_BYTES = 2 * MAX_REQUEST_BYTES
"""The most request body bytes the proxy holds at once, over all its connections: a
request whose announced length (or, chunked, whose bytes so far) would take the total past
it is refused (503) instead of read."""
MAX_CONNECTIONS = 64
"""The most connections the proxy serves at once; one more is answered 503 and closed."""
IDLE_TIMEOUT_S = 300.0
"""A keep-alive connection with no request for this long is closed."""
BODY_TIMEOUT_S = 30.0
"""A request body that stalls this long is given up, and its connection cut."""
LINGER_S = 2.0
"""After a refusal sent before the body was read, how long what the client still sends
is read and dropped (a client that writes its whole body before it reads then gets the
answer, not a reset)."""
RETRY_AFTER_S = 1
_LOOPBACK: Final = "127.0.0.1"


@dataclass(frozen=True)
class Family:
    """An SDK family: the prefix its base URL ends with, and its wire APIs by path."""

    name: str
    """The first path segment after the token: ``openai``, ``anthropic``, ``gemini``."""
    base_suffix: str
    """What its SDK's base URL variable holds after the family: ``/v1`` for OpenAI's
    (whose SDKs add no version), nothing for the others (whose SDKs add their own)."""
    env: tuple[str, ...]
    """The variables its SDKs read their base URL from."""
    routes: tuple[tuple[re.Pattern[str], str], ...]
    """(path pattern, wire API): the first that matches the path below the family names
    the request's API; none: a path that is no model API."""
    default_api: str
    """The wire API whose base URL its requests go to upstream (every API of a family
    resolves its base URL alike)."""
    error_shape: str
    """How its APIs say an error: ``openai``, ``anthropic`` or ``google`` (``error_body``)."""


FAMILIES: Final = {family.name: family for family in (
    Family("openai", "/v1", ("OPENAI_BASE_URL",),
           ((re.compile(r"/chat/completions$"), "chat"),
            (re.compile(r"/responses$"), "responses")), "chat", "openai"),
    Family("anthropic", "", ("ANTHROPIC_BASE_URL",),
           ((re.compile(r"/messages$"), "messages"),), "messages", "anthropic"),
    Family("gemini", "", ("GOOGLE_GEMINI_BASE_URL",),
           ((re.compile(r":(stream)?[gG]enerateContent$"), "gemini"),), "gemini", "google"),
)}
"""Every SDK family the proxy stands in for."""

_API_FAMILY: Final = {api: family for family in FAMILIES.values()
                      for _pattern, api in family.routes}


def family_of(api: str) -> Family:
    """The family whose SDKs speak wire API ``api``."""
    return _API_FAMILY[api]


def error_body(shape: str, message: str, status: int = 400) -> dict[str, object]:
    """An error as the family's APIs send one, so its SDK shows ``message``."""
    if shape == "anthropic":
        return {"type": "error", "error": {"type": "invalid_request_error", "message": message}}
    if shape == "google":
        return {"error": {"code": status, "message": message, "status": "INVALID_ARGUMENT"}}
    return {"error": {"message": message, "type": "invalid_request_error",
                      "code": "toolbench_proxy"}}


class HangUp(Exception):
    """Raised by a handler, or by its reply's chunks: the connection is closed there, with
    no reply or the rest of it unsent (an injected ``disconnect`` or ``cut``)."""


@dataclass
class ProxyRequest:
    """One request an agent sent, as the handler sees it."""

    method: str
    family: Family
    path: str
    """Below the token, query included: ``/openai/v1/chat/completions``; what a cassette
    keeps and replay matches."""
    below: str
    """Below the family's base URL: ``/chat/completions``, ``/v1/messages``."""
    query: str
    headers: list[tuple[str, str]]
    body: bytes
    api: str | None
    """The wire API the path names; None: a path that is no model API."""
    connection: int
    """Which of the proxy's connections carried it."""
    run: str | None = None
    """The case run whose URL it came on; None: the session's URL."""


@dataclass
class ProxyResponse:
    """What the handler answers: sent as the chunks come, each written as it arrives."""

    status: int
    headers: list[tuple[str, str]]
    chunks: AsyncIterator[bytes] | bytes
    """The body as it comes, each chunk passed on as it arrives; or, known whole, its
    bytes (sent with the head in one write, with its length)."""
    after: Callable[[], object] | None = None
    """Called once the reply is over (its end sent, or the agent gone mid-reply): the
    handler's reading and recording of it, kept off the agent's wait for the end."""


class ProxyHandler(Protocol):
    """The case under way: answers its agent's requests."""

    async def handle(self, request: ProxyRequest) -> ProxyResponse:
        """The response to ``request`` (forwarded upstream, or from a cassette)."""

    def owns(self, connection: int) -> bool:
        """Whether requests on ``connection`` may reach this handler (a connection first
        used by an earlier case's agent may not)."""


@dataclass
class _Run:
    """One case run's time on the proxy: its URLs carry its id, so a request is that run's
    whenever it comes."""

    name: str
    """Who the run is (a case's node id), as the refusals and the report say."""
    late: int = 0
    """Requests on its URLs refused since it ended."""
    reported: int = 0
    """Of those, how many ``late_requests`` already told."""


class ProxyServer:
    """The proxy of one pytest process."""

    def __init__(self) -> None:
        self.token = secrets.token_urlsafe(24)
        self.port = 0
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._server: asyncio.Server | None = None
        self._handler: ProxyHandler | None = None
        self._connections = 0
        self._writers: dict[int, asyncio.StreamWriter] = {}
        """The open connections, by number."""
        self._busy: dict[int, bool] = {}
        """Whether each open connection is serving a request (False: idle, kept alive)."""
        self._buffered = 0
        """Request body bytes held (or announced and being read) over every connection."""
        self._runs: dict[str, _Run] = {}
        """Every case run attached so far, by the id its URLs carry."""
        self._current: str | None = None
        """The run attached now; every other is over."""
        self._late: set[str] = set()
        """The runs with late requests not yet told (``late_requests``)."""
        self._lock = threading.Lock()
        """Guards the runs' late counts, read from pytest's thread."""

    # -- lifetime -------------------------------------------------------------------------

    def start(self) -> None:
        """Listen on loopback and a free port; return once it accepts connections."""
        if self._loop is not None:
            return
        ready = threading.Event()
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._run, args=(ready,),
                                        name="toolbench-proxy", daemon=True)
        self._thread.start()
        if not ready.wait(30) or self._server is None:
            raise RuntimeError("the agent proxy did not start")

    def _run(self, ready: threading.Event) -> None:
        assert self._loop is not None
        asyncio.set_event_loop(self._loop)

        async def listen() -> None:
            self._server = await asyncio.start_server(self._serve, _LOOPBACK, 0)
            self.port = self._server.sockets[0].getsockname()[1]

        try:
            self._loop.run_until_complete(listen())
        finally:
            ready.set()
        self._loop.run_forever()

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        assert self._loop is not None, "start() the proxy first"
        return self._loop

    def close(self) -> None:
        """Stop listening, drop every connection, stop the loop."""
        loop = self._loop
        if loop is None:
            return
        self._loop = None

        async def stop() -> None:
            if self._server is not None:
                self._server.close()
            for writer in list(self._writers.values()):
                writer.transport.abort()
            others = asyncio.all_tasks() - {asyncio.current_task()}
            for task in others:
                task.cancel()
            if others:
                await asyncio.wait(others, timeout=5)

        try:
            asyncio.run_coroutine_threadsafe(stop(), loop).result(timeout=10)
        except Exception:  # noqa: BLE001, S110 - the loop stops all the same
            pass
        loop.call_soon_threadsafe(loop.stop)
        if self._thread is not None:
            self._thread.join(timeout=10)
        if not loop.is_running():
            loop.close()

    # -- what agents are told -------------------------------------------------------------

    def base_url(self, api: str, run: str | None = None) -> str:
        """The URL an SDK of wire API ``api`` is given as its base URL: of case run
        ``run`` (its requests that one's, whenever they come), else the session's (the
        requests go to whichever case runs)."""
        family = family_of(api)
        return f"{self._root(run)}/{family.name}{family.base_suffix}"

    def environment(self, run: str | None = None) -> dict[str, str]:
        """The base URL variables of every SDK family, pointing at the proxy (at case run
        ``run``'s URLs, or the session's)."""
        return {name: f"{self._root(run)}/{family.name}{family.base_suffix}"
                for family in FAMILIES.values() for name in family.env}

    def _root(self, run: str | None) -> str:
        return f"http://{_LOOPBACK}:{self.port}/{self.token}" + (f"/{run}" if run else "")

    def attach(self, handler: ProxyHandler | None, name: str = "") -> str | None:
        """From now on ``handler`` answers (None: requests are refused), as a new case run
        named ``name``: its id (for ``base_url`` and ``environment``) is returned. The run
        attached before is over: what comes on its URLs from now on is refused and counted
        against it (``late_requests``). The connections kept alive for it, idle now, are
        closed first: a client that pooled one finds it closed and opens another, which the
        new case owns."""
        with self._lock:
            number = None
            if handler is not None:
                number = f"{_RUN_PREFIX}{len(self._runs) + 1}"
                self._runs[number] = _Run(name or number)
            self._current = number
        loop = self._loop
        if loop is None:
            self._handler = handler
            return number

        async def switch() -> None:  # on the loop: no reply ends between the two steps
            self._handler = handler  # a reply under way now closes its connection after
            for connection, busy in list(self._busy.items()):
                writer = self._writers.get(connection)
                if not busy and writer is not None:
                    writer.close()
        asyncio.run_coroutine_threadsafe(switch(), loop).result(timeout=10)
        return number

    def late_requests(self) -> dict[str, int]:
        """The requests refused since the last call because they came on the URLs of a case
        run that was over, by the run's name."""
        late: dict[str, int] = {}
        with self._lock:
            for run in map(self._runs.__getitem__, self._late):
                late[run.name] = late.get(run.name, 0) + run.late - run.reported
                run.reported = run.late
            self._late.clear()
        return late

    def drop(self, connections: set[int]) -> None:
        """Cut ``connections`` (an abandoned agent's): whatever it sends on them is lost."""
        loop = self._loop
        if loop is None:
            return

        def cut() -> None:
            for number in connections:
                writer = self._writers.get(number)
                if writer is not None:
                    writer.transport.abort()
        loop.call_soon_threadsafe(cut)

    # -- serving --------------------------------------------------------------------------

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._connections += 1
        if len(self._writers) >= MAX_CONNECTIONS:
            # Answered before its request is read: a client reads it once it has sent.
            await _refuse_at_once(reader, writer, busy(
                f"pytest-toolbench: the proxy already serves {MAX_CONNECTIONS} connections,"
                " the most it serves at once; try again once some have closed"))
            return
        connection = _Connection(self._connections, reader, writer)
        self._writers[connection.number] = writer
        self._busy[connection.number] = True
        ended = False
        try:
            while await self._one_request(connection):
                connection.state.start_next_cycle()
            ended = True
        except (ConnectionError, h11.ProtocolError, asyncio.TimeoutError,
                asyncio.IncompleteReadError):
            pass  # the agent went away, or spoke no HTTP: nothing to answer
        except Exception:  # noqa: BLE001, S110 - a fault of ours mid-reply: the agent sees it cut
            pass
        except asyncio.CancelledError:
            # The proxy is closing. Ended here rather than passed on: asyncio's stream
            # callback would log a cancelled connection task as an error.
            return
        finally:
            self._writers.pop(connection.number, None)
            self._busy.pop(connection.number, None)
            if not ended:
                writer.transport.abort()
        if ended and not connection.lingered:
            await _close(writer)  # after the last reply: what is still buffered goes first

    async def _one_request(self, connection: _Connection) -> bool:
        """Serve the next request on ``connection``; whether the connection stays open.

        Everything that can refuse a request is decided on its head, before its body is
        read: the token, the case run, the body's announced size, the room left in the
        proxy's bound on request bytes. A refused request's body is never read (only
        dropped, for ``LINGER_S``, so its client gets the answer)."""
        self._busy[connection.number] = False
        head = await connection.next_request()
        if head is None:
            return False
        self._busy[connection.number] = True
        request = self._request(head, connection.number)
        length = _announced_length(head)
        route = self._admit(request, connection.number, length)
        if isinstance(route, ProxyResponse):
            await connection.refuse(route, head)
            return False
        assert isinstance(request, ProxyRequest)
        shape = request.family.error_shape
        self._buffered += length
        try:
            body = await connection.read_body(None if length else (
                lambda size: self._take(connection, size, shape)))
        except BaseException:
            self._release(connection, length)
            raise
        if isinstance(body, ProxyResponse):  # chunked, past a bound as it came
            self._release(connection, length)
            await connection.refuse(body, head)
            return False
        try:
            request.body = body
            route = self._route(request, connection.number)  # the case may be over by now
            if isinstance(route, ProxyResponse):
                response = route
            else:
                try:
                    response = await route.handle(request)
                except HangUp:
                    raise  # the connection is closed, nothing answered (_serve)
                except Exception as error:  # noqa: BLE001 - said to the agent, not raised here
                    response = refused(502, f"pytest-toolbench: the proxy failed: {error!r}",
                                       shape)
            # Kept open for the case that sent it only: once another is attached, it closes.
            await connection.respond(response, keep_alive=_loop_free(head),
                                     head_only=head.method == b"HEAD")
        finally:
            self._release(connection, length)
        return (connection.state.our_state is h11.DONE and connection.state.their_state
                is h11.DONE and self._handler is route)

    def _admit(self, request: ProxyRequest | str, connection: int, length: int
               ) -> ProxyHandler | ProxyResponse:
        """The handler that answers the request whose head is ``request`` (its body of
        ``length`` bytes announced), or its refusal: all decided before the body is read."""
        if not isinstance(request, str):
            if length > MAX_REQUEST_BYTES:
                return too_large(request.family.error_shape)
            if self._buffered + length > MAX_BUFFERED_BYTES:
                return self._full(request.family.error_shape)
        return self._route(request, connection)

    def _release(self, connection: _Connection, length: int) -> None:
        """The request body on ``connection`` (``length`` announced) no longer held."""
        self._buffered -= length + connection.chunked
        connection.chunked = 0

    def _take(self, connection: _Connection, size: int, shape: str) -> ProxyResponse | None:
        """``size`` more bytes of a chunked body on ``connection`` counted in the proxy's
        bound; or the refusal, past the bound or the largest body."""
        if connection.chunked + size > MAX_REQUEST_BYTES:
            return too_large(shape)
        if self._buffered + size > MAX_BUFFERED_BYTES:
            return self._full(shape)
        self._buffered += size
        connection.chunked += size
        return None

    def _full(self, shape: str) -> ProxyResponse:
        return busy(f"pytest-toolbench: the proxy already holds {self._buffered} bytes of"
                    f" request bodies, and takes at most {MAX_BUFFERED_BYTES} at once;"
                    " try again once they are answered", shape)

    def _route(self, request: ProxyRequest | str, connection: int
               ) -> ProxyHandler | ProxyResponse:
        """The handler that answers ``request``, or the refusal."""
        if isinstance(request, str):
            return refused(403, request)
        shape = request.family.error_shape
        handler = self._handler
        if request.run is not None:
            with self._lock:
                run = self._runs.get(request.run)
                over = request.run != self._current
                if run is not None and over:
                    run.late += 1
                    self._late.add(request.run)
            if run is None:
                return refused(403, f"pytest-toolbench: no case run {request.run!r} in this"
                                    " session", shape)
            if over:
                return refused(403, f"pytest-toolbench: this request came on the URL of"
                                    f" {run.name}, which is over: refused, and reported"
                                    " against it (a thread or process its agent left"
                                    " running sent it)", shape)
        if handler is None or not handler.owns(connection):
            return refused(403, "pytest-toolbench: no agent case is running, so this"
                                " request has nowhere to go", shape)
        return handler

    def _request(self, head: h11.Request, number: int) -> ProxyRequest | str:
        """The request as the handler sees it (its body read later), or why it is
        refused."""
        target = head.target.decode("ascii", "replace")
        path, _, query = target.partition("?")
        parts = path.split("/", 4)  # "", token, [run,] family, rest
        if len(parts) < 3 or not secrets.compare_digest(parts[1], self.token):
            return "pytest-toolbench: this proxy answers only the URLs it gives agent cases"
        run = None
        if parts[2].startswith(_RUN_PREFIX) and len(parts) > 3:
            run = parts[2]
            parts = ["", parts[1], *"/".join(parts[3:]).split("/", 1)]
        else:
            parts = ["", parts[1], *"/".join(parts[2:]).split("/", 1)]
        family = FAMILIES.get(parts[2])
        if family is None:
            return f"pytest-toolbench: no SDK family {parts[2]!r} (one of {', '.join(FAMILIES)})"
        rest = "/" + (parts[3] if len(parts) > 3 else "")
        below = rest.removeprefix(family.base_suffix)
        api = next((api for pattern, api in family.routes if pattern.search(below)), None)
        shown = f"/{family.name}{rest}" + (f"?{query}" if query else "")
        headers = [(name.decode("latin-1"), value.decode("latin-1"))
                   for name, value in head.headers]
        return ProxyRequest(head.method.decode("ascii", "replace"), family, shown, below,
                            query, headers, b"", api, number, run)


_RUN_PREFIX: Final = "run-"
"""What the path segment naming a case run starts with (``/TOKEN/run-3/openai/v1``)."""


def _announced_length(head: h11.Request) -> int:
    """The body's length as its head says (0: none, or chunked)."""
    for name, value in head.headers:
        if name == b"content-length":
            return int(value)  # h11 checked it is a number
    return 0


@dataclass
class _Connection:
    """One agent connection: h11's state, and the stream it reads and writes."""

    number: int
    reader: asyncio.StreamReader
    writer: asyncio.StreamWriter
    state: h11.Connection = field(default_factory=lambda: h11.Connection(h11.SERVER))
    chunked: int = 0
    """Bytes of a chunked body counted in the proxy's bound so far."""
    lingered: bool = False
    """Closed after a refusal (``refuse``)."""

    async def _event(self, timeout_s: float = IDLE_TIMEOUT_S) -> object:
        while True:
            event = self.state.next_event()
            if event is not h11.NEED_DATA:
                return event
            data = await asyncio.wait_for(self.reader.read(65536), timeout_s)
            self.state.receive_data(data)

    async def next_request(self) -> h11.Request | None:
        event = await self._event()
        if isinstance(event, h11.Request):
            return event
        return None  # ConnectionClosed: the agent is done with it

    async def read_body(self, take: Callable[[int], ProxyResponse | None] | None
                        ) -> bytes | ProxyResponse:
        """The request's body; or, for a chunked one (``take`` counts each piece) that
        goes past a bound as it comes, the refusal (the rest is left unread)."""
        pieces: list[bytes] = []
        while True:
            event = await self._event(BODY_TIMEOUT_S)
            if isinstance(event, h11.Data):
                refusal = take(len(event.data)) if take is not None else None
                if refusal is not None:
                    return refusal
                pieces.append(bytes(event.data))
            elif isinstance(event, h11.EndOfMessage):
                return b"".join(pieces)
            else:
                raise h11.LocalProtocolError(f"unexpected {type(event).__name__}")

    async def refuse(self, response: ProxyResponse, head: h11.Request) -> None:
        """Answer ``response`` before the request's body is read, then close: what the
        client still sends is read and dropped meanwhile, for ``LINGER_S`` at most."""
        await self.respond(response, head_only=head.method == b"HEAD")
        self.lingered = True
        await _linger(self.reader, self.writer)

    async def respond(self, response: ProxyResponse, keep_alive: bool = False,
                      head_only: bool = False) -> None:
        """Send ``response`` (``head_only``: the answer to a HEAD request, its body left
        out); then close the connection, unless ``keep_alive``."""
        headers = [(name, value) for name, value in response.headers
                   if name.lower() not in _HOP_BY_HOP]
        if not keep_alive:
            headers.append(("connection", "close"))
        chunks = response.chunks
        try:
            if isinstance(chunks, bytes):
                headers.append(("content-length", str(len(chunks))))
                self.writer.write(b"".join((
                    self._bytes(h11.Response(status_code=response.status, headers=headers,
                                             reason=_reason(response.status))),
                    b"" if head_only else self._bytes(h11.Data(data=chunks)),
                    self._bytes(h11.EndOfMessage()))))
                await self.writer.drain()
                return
            self._send(h11.Response(status_code=response.status, headers=headers,
                                    reason=_reason(response.status)))
            await self.writer.drain()
            async for chunk in chunks:
                if chunk:
                    self._send(h11.Data(data=chunk))
                    await self.writer.drain()  # each chunk on its way as it came
            self._send(h11.EndOfMessage())
            await self.writer.drain()
        finally:  # the agent gone mid-reply: the reply's reading ends now, not when collected
            closing = getattr(chunks, "aclose", None)
            if closing is not None:
                await closing()
            if response.after is not None:
                response.after()

    def _send(self, event: h11.Event) -> None:
        data = self._bytes(event)
        if data:
            self.writer.write(data)

    def _bytes(self, event: h11.Event) -> bytes:
        return self.state.send(event) or b""


def _reason(status: int) -> bytes:
    """The status line's reason phrase, as services send it (``429 Too Many Requests``):
    an agent's HTTP library may quote it (httpx's ``raise_for_status``)."""
    try:
        return http.HTTPStatus(status).phrase.encode()
    except ValueError:  # a status of a service's own (Anthropic's 529)
        return b"Overloaded" if status == 529 else b""


def _loop_free(head: h11.Request) -> bool:
    """Whether the client says its connection pool is bound to no event loop, so a
    connection kept alive is safe to keep (the openai and anthropic SDKs' sync clients say
    ``X-Stainless-Async: false``).

    Any other reply closes its connection, so no pool keeps one past the event loop it was
    opened on. A shared async client (openai-agents' module-wide one, pydantic-ai's cached
    one) outlives the loop of an async agent's case, of an abandoned agent's thread and of
    a session; a connection it pooled there fails its next request on another loop ("bound
    to a different event loop", or "Event loop is closed"). Only the client can retire it:
    closing it from this side does not help, since the pool, finding it closed, aborts its
    transport through the loop that is gone (anyio does not read an idle connection, so
    even a loop still running never sees the close). A client that does not say pays a
    loopback connect a request (benchmarks/README.md, agent cases)."""
    return any(name == b"x-stainless-async" and value.strip().lower() == b"false"
               for name, value in head.headers)


_HOP_BY_HOP: Final = frozenset({
    "connection", "keep-alive", "proxy-authenticate", "proxy-authorization", "te",
    "trailer", "transfer-encoding", "upgrade", "content-length"})
"""Headers of one hop, never passed on (the proxy frames each body itself)."""


async def _close(writer: asyncio.StreamWriter) -> None:
    """Close the connection once its buffered bytes are sent (abort would drop them), within
    a bound: an agent that never reads them is cut off."""
    writer.close()
    try:
        await asyncio.wait_for(writer.wait_closed(), _CLOSE_WAIT_S)
    except (ConnectionError, asyncio.TimeoutError, asyncio.CancelledError):
        writer.transport.abort()  # cancelled: the proxy is closing


_CLOSE_WAIT_S = 10.0


def refused(status: int, message: str, shape: str = "openai") -> ProxyResponse:
    """A response saying ``message`` in the family's error shape."""
    body = json.dumps(error_body(shape, message, status)).encode()
    return ProxyResponse(status, [("content-type", "application/json")], body)


def too_large(shape: str) -> ProxyResponse:
    """The refusal of a request body past ``MAX_REQUEST_BYTES``."""
    return refused(413, f"pytest-toolbench: the request body is larger than"
                        f" {MAX_REQUEST_BYTES} bytes, the most the proxy takes", shape)


def busy(message: str, shape: str = "openai") -> ProxyResponse:
    """A 503 saying ``message``, with a ``retry-after`` the SDKs' own retries wait for."""
    response = refused(503, message, shape)
    response.headers.append(("retry-after", str(RETRY_AFTER_S)))
    return response


async def _refuse_at_once(reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                          response: ProxyResponse) -> None:
    """Answer ``response`` on a connection before reading anything of it, then close."""
    assert isinstance(response.chunks, bytes)
    # h11 answers only a request it has read: the status line and headers are written here.
    lines = [f"HTTP/1.1 {response.status} {HTTPStatus(response.status).phrase}",
             *(f"{name}: {value}" for name, value in response.headers),
             f"content-length: {len(response.chunks)}", "connection: close", "", ""]
    writer.write("\r\n".join(lines).encode("latin-1") + response.chunks)
    await _linger(reader, writer)


async def _linger(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """Close a connection whose request was answered unread: the answer is sent and the
    sending side shut, then what the client still sends is read and dropped, until it
    closes its side or ``LINGER_S`` passes (a client that writes its whole body before it
    reads would otherwise get a reset, and lose the answer)."""
    loop = asyncio.get_running_loop()
    try:
        await asyncio.wait_for(writer.drain(), LINGER_S)
        if writer.can_write_eof():
            writer.write_eof()
        until = loop.time() + LINGER_S
        while (left := until - loop.time()) > 0:
            if not await asyncio.wait_for(reader.read(1024 * 1024), left):
                break
        else:
            writer.transport.abort()
            return
    except (ConnectionError, OSError, asyncio.TimeoutError):
        writer.transport.abort()
        return
    writer.close()
