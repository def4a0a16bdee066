"""A real loopback HTTP/1.1 server that plays scripted chat-completions replies and faults.

The server runs an asyncio event loop in a daemon thread and speaks raw HTTP/1.1 on
``127.0.0.1`` (OS-chosen port), because the faults it plays (a reset after N bytes, a
multi-byte character split across reads, a stall before the first byte) need byte-level
control that ``http.server`` hides. It is for tests only and uses the standard library.

    with start_chat_server() as server:
        server.enqueue(json_reply(completion("hi")), sse_reply(chunks_for("hello")))
        httpx2.post(f"{server.base_url}/chat/completions", json={...})

Each ``POST`` to a wire API's route (``/v1/chat/completions``, ``/v1/responses``,
``/v1/messages``) takes its reply from the handler if one is set, else the next queued
reply, else the default (a 500 "no scripted reply" when none is set). A Responses request
the real service refuses before any model runs (a reasoning item sent back without the item
that followed it) gets that service's 400 instead. Any other path gets
a 404. Every request is recorded in ``server.requests``.
"""

from __future__ import annotations

import asyncio
import collections
import http
import itertools
import json
import socket
import struct
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType, TracebackType
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from typing_extensions import Self  # typing.Self needs 3.11; the project supports 3.10

__all__ = [
    "ChatServer",
    "HugeReply",
    "JsonReply",
    "RecordedRequest",
    "Reply",
    "ResetReply",
    "SSEPause",
    "SSEReply",
    "StallReply",
    "TextReply",
    "chunks_for",
    "completion",
    "huge_reply",
    "json_reply",
    "named_event",
    "reset_reply",
    "sse_reply",
    "stall_reply",
    "start_chat_server",
    "text_reply",
]

CHAT_PATH = "/v1/chat/completions"
API_PATHS = (CHAT_PATH, "/v1/responses", "/v1/messages")
"""The routes served: each wire API's own. Tests read ``request.path`` for which one."""
# An idle keep-alive connection is dropped after this long, so no handler waits forever
# even if close() is never called.
IDLE_TIMEOUT_S = 30.0
# After sending a partial response, wait this long before the RST so the client has read
# the bytes: a reset may discard data still sitting in the client's receive queue.
RESET_GRACE_S = 0.05
DEFAULT_USAGE: Mapping[str, int] = MappingProxyType(
    {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}
)


# ---------------------------------------------------------------------------- recording


@dataclass(frozen=True)
class RecordedRequest:
    """One request as the server read it off the wire."""

    method: str
    path: str
    headers: dict[str, str]
    """Header names in lower case; a repeated header keeps its last value."""
    body: bytes
    connection_id: int
    """The same number for requests that arrived on the same (kept-alive) connection."""

    def json(self) -> Any:
        """The body parsed as JSON."""
        return json.loads(self.body)


# ---------------------------------------------------------------------------- replies


@dataclass(frozen=True)
class SSEPause:
    """A stall of ``seconds`` in the middle of an SSE stream."""

    seconds: float


@dataclass(frozen=True)
class JsonReply:
    """A JSON response with a Content-Length."""

    body: Any
    status: int = 200
    headers: Mapping[str, str] = field(default_factory=dict)
    delay_s: float = 0.0

    def render(self) -> bytes:
        payload = json.dumps(self.body).encode()
        return _response("application/json", self.status, self.headers, payload)

    async def send(self, writer: asyncio.StreamWriter) -> bool:
        await _write(writer, self.render())
        return True


@dataclass(frozen=True)
class TextReply:
    """A non-JSON response, e.g. a proxy's HTML error page or a plain-text error."""

    text: str
    status: int = 200
    content_type: str = "text/plain"
    headers: Mapping[str, str] = field(default_factory=dict)
    delay_s: float = 0.0

    def render(self) -> bytes:
        payload = self.text.encode()
        return _response(self.content_type, self.status, self.headers, payload)

    async def send(self, writer: asyncio.StreamWriter) -> bool:
        await _write(writer, self.render())
        return True


@dataclass(frozen=True)
class SSEReply:
    """A ``text/event-stream`` response sent with chunked encoding, one chunk per piece."""

    events: Sequence[str | bytes | Mapping[str, Any] | SSEPause]
    status: int = 200
    done: bool = True
    split_bytes: int | None = None
    headers: Mapping[str, str] = field(default_factory=dict)
    delay_s: float = 0.0

    def pieces(self) -> list[bytes | SSEPause]:
        """The body as written: byte pieces (one chunk and one flush each) and pauses."""
        encoded = [e if isinstance(e, SSEPause) else _sse_bytes(e) for e in self.events]
        if self.done:
            encoded.append(b"data: [DONE]\n\n")
        if self.split_bytes:
            encoded = _resplit(encoded, self.split_bytes)
        # An empty chunk would end the chunked body early.
        return [p for p in encoded if p != b""]

    def head(self) -> bytes:
        defaults = {"content-type": "text/event-stream", "cache-control": "no-cache"}
        framing = {"transfer-encoding": "chunked"}
        return _head(self.status, {**defaults, **self.headers, **framing})

    def render(self) -> bytes:
        chunks = [_chunk(p) for p in self.pieces() if isinstance(p, bytes)]
        return self.head() + b"".join(chunks) + b"0\r\n\r\n"

    async def send(self, writer: asyncio.StreamWriter) -> bool:
        await _write(writer, self.head())
        for piece in self.pieces():
            if isinstance(piece, SSEPause):
                await asyncio.sleep(piece.seconds)
            else:
                await _write(writer, _chunk(piece))
        await _write(writer, b"0\r\n\r\n")
        return True


@dataclass(frozen=True)
class ResetReply:
    """Send ``after_bytes`` of a normal response, then reset the connection (RST)."""

    after_bytes: int = 0
    of: JsonReply | TextReply | SSEReply | None = None
    """The response to cut short; a small completion when None."""
    delay_s: float = 0.0

    async def send(self, writer: asyncio.StreamWriter) -> bool:
        whole = (self.of or json_reply(completion("Hello there"))).render()
        if self.after_bytes > 0:
            await _write(writer, whole[: self.after_bytes])
            await asyncio.sleep(RESET_GRACE_S)
        _abort_with_rst(writer)
        return False


@dataclass(frozen=True)
class StallReply:
    """Read the request, send nothing for ``seconds``, then close the connection."""

    seconds: float
    delay_s: float = 0.0

    async def send(self, writer: asyncio.StreamWriter) -> bool:
        await asyncio.sleep(self.seconds)
        return False


@dataclass(frozen=True)
class HugeReply:
    """A valid chat.completion JSON body of exactly ``size_bytes``, written in pieces."""

    size_bytes: int
    status: int = 200
    piece_bytes: int = 64 * 1024
    headers: Mapping[str, str] = field(default_factory=dict)
    delay_s: float = 0.0

    async def send(self, writer: asyncio.StreamWriter) -> bool:
        prefix, suffix = json.dumps(completion("\x00")).encode().split(b"\\u0000")
        filler = max(0, self.size_bytes - len(prefix) - len(suffix))
        headers = {**self.headers, "content-length": str(len(prefix) + filler + len(suffix))}
        await _write(writer, _head(self.status, {"content-type": "application/json", **headers}))
        await _write(writer, prefix)
        for size in _piece_sizes(filler, self.piece_bytes):
            await _write(writer, b"x" * size)
        await _write(writer, suffix)
        return True


class Reply(Protocol):
    """What the server plays for one request: the kinds above, or any other that has these
    (``support.hostile_server`` adds misbehaving ones)."""

    @property
    def delay_s(self) -> float:
        """Seconds to wait before sending anything."""

    async def send(self, writer: asyncio.StreamWriter) -> bool:
        """Write the response; False closes the connection afterwards."""


def json_reply(
    body: Any, status: int = 200, headers: Mapping[str, str] | None = None, delay_s: float = 0.0
) -> JsonReply:
    """A JSON response; ``delay_s`` stalls before the status line."""
    return JsonReply(body, status, dict(headers or {}), delay_s)


def text_reply(
    text: str,
    status: int = 200,
    content_type: str = "text/plain",
    headers: Mapping[str, str] | None = None,
    delay_s: float = 0.0,
) -> TextReply:
    """A response with a text body of any content type (HTML error pages, plain errors)."""
    return TextReply(text, status, content_type, dict(headers or {}), delay_s)


def sse_reply(
    events: Iterable[str | bytes | Mapping[str, Any] | SSEPause],
    status: int = 200,
    done: bool = True,
    delay_s: float = 0.0,
    split_bytes: int | None = None,
    headers: Mapping[str, str] | None = None,
) -> SSEReply:
    """An SSE stream: a str is sent as ``data: <str>\\n\\n``, a mapping as ``data: <json>``,
    bytes raw; ``done`` appends ``data: [DONE]``; ``split_bytes`` re-cuts the body (across
    events and inside characters) into pieces of that size, each its own read."""
    return SSEReply(tuple(events), status, done, split_bytes, dict(headers or {}), delay_s)


def reset_reply(
    after_bytes: int = 0,
    of: JsonReply | TextReply | SSEReply | None = None,
    delay_s: float = 0.0,
) -> ResetReply:
    """Reset the connection after ``after_bytes`` of ``of`` (0: before any header)."""
    return ResetReply(after_bytes, of, delay_s)


def stall_reply(seconds: float) -> StallReply:
    """Say nothing for ``seconds``, then close; bound it below the test's own timeout."""
    return StallReply(seconds)


def huge_reply(
    size_bytes: int, status: int = 200, piece_bytes: int = 64 * 1024, delay_s: float = 0.0
) -> HugeReply:
    """A valid completion body of ``size_bytes``, streamed out ``piece_bytes`` at a time."""
    return HugeReply(size_bytes, status, piece_bytes, {}, delay_s)


# ---------------------------------------------------------------------------- wire helpers


def _head(status: int, headers: Mapping[str, str]) -> bytes:
    try:
        reason = http.HTTPStatus(status).phrase
    except ValueError:
        reason = "Unknown"
    lines = [f"HTTP/1.1 {status} {reason}"] + [f"{k}: {v}" for k, v in headers.items()]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


def _response(content_type: str, status: int, extra: Mapping[str, str], body: bytes) -> bytes:
    headers = {"content-type": content_type, **extra, "content-length": str(len(body))}
    return _head(status, headers) + body


def _chunk(piece: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(piece), piece)


def _sse_bytes(event: str | bytes | Mapping[str, Any]) -> bytes:
    if isinstance(event, bytes):
        return event
    payload = event if isinstance(event, str) else json.dumps(event)
    return b"data: " + payload.encode() + b"\n\n"


def named_event(name: str, data: Mapping[str, Any]) -> bytes:
    """One SSE event with an ``event:`` line, as the Responses and Messages APIs send them
    (for ``sse_reply(..., done=False)``: those streams end with an event, not ``[DONE]``)."""
    return f"event: {name}\ndata: {json.dumps(data)}\n\n".encode()


def _resplit(parts: list[bytes | SSEPause], size: int) -> list[bytes | SSEPause]:
    """Join the bytes between pauses and cut them into ``size``-byte pieces."""
    out: list[bytes | SSEPause] = []
    for is_pause, group in itertools.groupby(parts, key=lambda p: isinstance(p, SSEPause)):
        if is_pause:
            out.extend(group)
            continue
        joined = b"".join(p for p in group if isinstance(p, bytes))
        out.extend(joined[i : i + size] for i in range(0, len(joined), size))
    return out


def _piece_sizes(total: int, piece: int) -> Iterator[int]:
    for start in range(0, total, piece):
        yield min(piece, total - start)


async def _write(writer: asyncio.StreamWriter, data: bytes) -> None:
    writer.write(data)
    # The write buffer limit is 0, so this returns once the kernel has the bytes: each
    # piece leaves as its own segment (asyncio sets TCP_NODELAY) instead of being coalesced.
    await writer.drain()


def _abort_with_rst(writer: asyncio.StreamWriter) -> None:
    sock = writer.get_extra_info("socket")
    # Linger on with a zero timeout makes close() send RST instead of FIN.
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    writer.transport.abort()


def _error_body(message: str, kind: str) -> dict[str, Any]:
    return {"error": {"message": message, "type": kind, "param": None, "code": None}}


# ---------------------------------------------------------------------------- request parsing


async def _read_request(reader: asyncio.StreamReader, connection_id: int) -> RecordedRequest | None:
    """Read one request, or None when the client closed the connection between requests."""
    try:
        head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), IDLE_TIMEOUT_S)
    except (asyncio.IncompleteReadError, asyncio.TimeoutError):
        return None
    request_line, *header_lines = head.decode("latin-1").split("\r\n")
    method, path, _version = request_line.split(" ", 2)
    headers = dict(_parse_header(line) for line in header_lines if line)
    body = await asyncio.wait_for(_read_body(reader, headers), IDLE_TIMEOUT_S)
    return RecordedRequest(method, path, headers, body, connection_id)


def _parse_header(line: str) -> tuple[str, str]:
    name, _, value = line.partition(":")
    return name.strip().lower(), value.strip()


async def _read_body(reader: asyncio.StreamReader, headers: Mapping[str, str]) -> bytes:
    if "chunked" in headers.get("transfer-encoding", "").lower():
        return await _read_chunked(reader)
    length = int(headers.get("content-length", "0"))
    return await reader.readexactly(length) if length else b""


async def _read_chunked(reader: asyncio.StreamReader) -> bytes:
    parts: list[bytes] = []
    while size := int((await reader.readuntil(b"\r\n")).split(b";")[0], 16):
        parts.append(await reader.readexactly(size))
        await reader.readexactly(2)
    await reader.readuntil(b"\r\n")  # no trailers expected: just the final CRLF
    return b"".join(parts)


def _keeps_alive(request: RecordedRequest) -> bool:
    return request.headers.get("connection", "").lower() != "close"


# ---------------------------------------------------------------------------- the server


class ChatServer:
    """A scripted OpenAI-compatible chat-completions server on loopback, in its own thread.

    Thread-safe: script it from the test thread while the server thread serves. Use
    ``start_chat_server()`` or ``with ChatServer() as server:`` to start it.
    """

    def __init__(self) -> None:
        self.requests: list[RecordedRequest] = []
        """Every request received, in arrival order."""
        self.errors: list[BaseException] = []
        """Exceptions raised by the handler or while serving; a clean run leaves it empty."""
        self.base_url = ""
        """``http://127.0.0.1:PORT/v1``, set by ``start()``."""
        self._lock = threading.Lock()
        self._queue: collections.deque[Reply] = collections.deque()
        self._default: Reply | None = None
        self._handler: Callable[[RecordedRequest], Reply] | None = None
        self._connection_ids = itertools.count(1)
        self._connections: set[asyncio.Task[None]] = set()
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stopping: asyncio.Event | None = None

    # -- scripting (any thread)

    def enqueue(self, *replies: Reply) -> None:
        """Queue replies; each chat-completions request consumes the oldest one."""
        with self._lock:
            self._queue.extend(replies)

    def set_default(self, reply: Reply | None) -> None:
        """The reply used when the queue is empty; None restores the 500 "no scripted reply"."""
        with self._lock:
            self._default = reply

    def set_handler(self, fn: Callable[[RecordedRequest], Reply] | None) -> None:
        """Compute each chat-completions reply from its request; wins over the queue.

        ``fn`` runs on the server's event loop, so it must not block.
        """
        with self._lock:
            self._handler = fn

    @property
    def pending(self) -> int:
        """How many queued replies have not been consumed yet."""
        with self._lock:
            return len(self._queue)

    # -- lifecycle

    def start(self) -> Self:
        """Bind 127.0.0.1 on a free port and serve from a daemon thread."""
        if self._thread is not None:
            raise RuntimeError("ChatServer is already started")
        ready = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(ready,), daemon=True)
        self._thread.name = "chat-server"
        self._thread.start()
        if not ready.wait(5.0) or not self.base_url:
            self.close()
            raise RuntimeError(f"ChatServer failed to start: {self.errors!r}")
        return self

    def close(self) -> None:
        """Stop serving: cancel every connection (stalled ones too) and join the thread."""
        thread, loop, stopping = self._thread, self._loop, self._stopping
        self._thread = None
        if thread is None:
            return
        if loop is not None and stopping is not None and not loop.is_closed():
            loop.call_soon_threadsafe(stopping.set)
        thread.join(timeout=5.0)
        if thread.is_alive():
            raise RuntimeError("ChatServer thread did not stop within 5 s")

    def __enter__(self) -> Self:
        return self if self._thread is not None else self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    # -- server thread

    def _run(self, ready: threading.Event) -> None:
        try:
            asyncio.run(self._main(ready))
        except BaseException as exc:  # noqa: BLE001 - surfaced by start() via self.errors
            self.errors.append(exc)
        finally:
            ready.set()

    async def _main(self, ready: threading.Event) -> None:
        self._loop = asyncio.get_running_loop()
        self._stopping = asyncio.Event()
        server = await asyncio.start_server(self._serve_connection, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        self.base_url = f"http://127.0.0.1:{port}/v1"
        ready.set()
        async with server:
            await self._stopping.wait()
            server.close()
            await self._cancel_connections()

    async def _cancel_connections(self) -> None:
        tasks = list(self._connections)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    async def _serve_connection(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._connections.add(task)
        writer.transport.set_write_buffer_limits(high=0)
        try:
            await self._serve_requests(reader, writer, next(self._connection_ids))
        except (ConnectionError, asyncio.IncompleteReadError, asyncio.CancelledError):
            pass  # the client went away, or close() is cancelling us
        except Exception as exc:  # noqa: BLE001 - keep serving other connections; tests can look
            self.errors.append(exc)
        finally:
            self._connections.discard(task)
            writer.transport.abort()

    async def _serve_requests(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, connection_id: int
    ) -> None:
        while request := await _read_request(reader, connection_id):
            with self._lock:
                self.requests.append(request)
            reply = self._reply_for(request)
            if reply.delay_s > 0:
                await asyncio.sleep(reply.delay_s)
            if not await reply.send(writer) or not _keeps_alive(request):
                return

    def _reply_for(self, request: RecordedRequest) -> Reply:
        if request.method != "POST" or request.path.split("?")[0] not in API_PATHS:
            message = (f"no route for {request.method} {request.path}; only POST"
                       f" {', '.join(API_PATHS)}")
            return json_reply(_error_body(message, "not_found"), status=404)
        refusal = _responses_refusal(request)
        if refusal is not None:
            return refusal
        with self._lock:
            handler, default = self._handler, self._default
            if handler is None and self._queue:
                return self._queue.popleft()
        if handler is not None:
            return self._call_handler(handler, request)
        return default or json_reply(_error_body("no scripted reply", "server_error"), 500)

    def _call_handler(
        self, handler: Callable[[RecordedRequest], Reply], request: RecordedRequest
    ) -> Reply:
        try:
            return handler(request)
        except Exception as exc:  # noqa: BLE001 - a broken handler becomes a visible 500
            self.errors.append(exc)
            return json_reply(_error_body(f"handler raised {exc!r}", "server_error"), 500)


RESPONSES_PATH = "/v1/responses"
_FOLLOWING_ITEMS = frozenset({"message", "function_call"})
"""What may follow a reasoning item in ``input``: the output item the model wrote after it."""


def _responses_refusal(request: RecordedRequest) -> JsonReply | None:
    """The 400 the Responses API answers a request with, for what it refuses before any
    model runs: a ``reasoning`` item sent back without the item that followed it (a reply
    cut off while thinking holds a reasoning item alone). None: the request is taken."""
    if request.path.split("?")[0] != RESPONSES_PATH:
        return None
    try:
        items = request.json().get("input")
    except (ValueError, AttributeError):
        return None
    if not isinstance(items, list):
        return None
    for position, item in enumerate(items):
        if not isinstance(item, dict) or item.get("type") != "reasoning":
            continue
        following = next((later for later in items[position + 1:]
                          if not (isinstance(later, dict) and later.get("type") == "reasoning")),
                         None)
        if not (isinstance(following, dict) and following.get("type") in _FOLLOWING_ITEMS
                and following.get("role", "assistant") == "assistant"):
            message = (f"Item '{item.get('id')}' of type 'reasoning' was provided without its"
                       " required following item.")
            body = {"error": {"message": message, "type": "invalid_request_error",
                              "param": "input", "code": None}}
            return json_reply(body, status=400)
    return None


def start_chat_server() -> ChatServer:
    """A started ChatServer; the caller must ``close()`` it (or use it as a context manager)."""
    return ChatServer().start()


# ---------------------------------------------------------------------------- payload builders


def completion(
    text: str | None = None,
    tool_calls: Sequence[Any] | None = None,
    finish_reason: str | None = None,
    usage: Mapping[str, int] | None = DEFAULT_USAGE,
    model: str = "test-model",
) -> dict[str, Any]:
    """A ``chat.completion`` body; ``tool_calls`` as ``[(name, args), ...]`` or OpenAI dicts.

    ``args`` may be a mapping (JSON-encoded) or a string sent as is (e.g. invalid JSON).
    The finish reason defaults to ``tool_calls`` when there are calls, else ``stop``.
    """
    calls = _tool_call_dicts(tool_calls)
    message: dict[str, Any] = {"role": "assistant", "content": text}
    if calls:
        message["tool_calls"] = calls
    choice = {
        "index": 0,
        "message": message,
        "logprobs": None,
        "finish_reason": finish_reason or ("tool_calls" if calls else "stop"),
    }
    body = {**_envelope("chat.completion", model), "choices": [choice]}
    if usage is not None:
        body["usage"] = dict(usage)
    return body


def chunks_for(
    text: str | None = None,
    tool_calls: Sequence[Any] | None = None,
    finish_reason: str | None = None,
    usage: Mapping[str, int] | None = DEFAULT_USAGE,
    split: int = 8,
    model: str = "test-model",
) -> list[dict[str, Any]]:
    """The ``chat.completion.chunk`` objects of a streamed reply, as OpenAI sends them.

    A role chunk, content deltas of ``split`` characters, per tool call a header chunk
    (id, name, empty arguments) then argument fragments of ``split`` characters, a finish
    chunk, and a usage chunk with ``choices: []`` (what ``include_usage`` adds).
    """
    calls = _tool_call_dicts(tool_calls)
    deltas: list[dict[str, Any]] = [{"role": "assistant", "content": "" if text else None}]
    deltas += [{"content": piece} for piece in _cut(text or "", split)]
    for index, call in enumerate(calls):
        deltas += _tool_call_deltas(index, call, split)
    chunks = [_chunk_obj(model, delta, None) for delta in deltas]
    finish = finish_reason or ("tool_calls" if calls else "stop")
    chunks.append(_chunk_obj(model, {}, finish))
    if usage is not None:
        chunks.append(
            {**_envelope("chat.completion.chunk", model), "choices": [], "usage": dict(usage)}
        )
    return chunks


def _envelope(kind: str, model: str) -> dict[str, Any]:
    return {"id": "chatcmpl-test", "object": kind, "created": 1700000000, "model": model}


def _chunk_obj(model: str, delta: dict[str, Any], finish: str | None) -> dict[str, Any]:
    choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}
    return {**_envelope("chat.completion.chunk", model), "choices": [choice]}


def _tool_call_deltas(index: int, call: Mapping[str, Any], split: int) -> list[dict[str, Any]]:
    function = call["function"]
    header = {
        "index": index,
        "id": call["id"],
        "type": "function",
        "function": {"name": function["name"], "arguments": ""},
    }
    fragments = [
        {"index": index, "function": {"arguments": piece}}
        for piece in _cut(function["arguments"], split)
    ]
    return [{"tool_calls": [part]} for part in [header, *fragments]]


def _tool_call_dicts(specs: Sequence[Any] | None) -> list[dict[str, Any]]:
    return [_tool_call_dict(i, spec) for i, spec in enumerate(specs or ())]


def _tool_call_dict(index: int, spec: Any) -> dict[str, Any]:
    if isinstance(spec, Mapping):
        return dict(spec)
    name, args = spec
    arguments = args if isinstance(args, str) else json.dumps(args)
    return {
        "id": f"call_{index}",
        "type": "function",
        "function": {"name": name, "arguments": arguments},
    }


def _cut(text: str, size: int) -> list[str]:
    return [text[i : i + size] for i in range(0, len(text), max(1, size))]
