"""One agent case's side of the proxy: its requests forwarded and recorded, or replayed.

A ``Tap`` is the ``ProxyHandler`` of one case while it runs. ``LiveTap`` forwards each
request once (no retries of the plugin's: the agent's own retry logic is under test) to
the API's real base URL and streams the response back chunk by chunk as it arrives;
``ReplayTap`` answers each request from the case's cassette, matched on its path and
canonical body (among identical requests, in recorded order), streams in their recorded
chunks, and refuses a request that matches nothing with a 400 in the API's error shape.

Either way every exchange goes into ``Tap.exchanges`` in the order it ended, its reply
read by the wire reader of the API its path names (``ReplyReader``), for the stage's
checks; and a recording keeps each one, scrubbed, in the cassette.
"""

from __future__ import annotations

import asyncio
import json
import re
import threading
import time
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from typing import Any, Final

import httpx2

from ..records import Interaction, Reply, StreamEvent
from ..scrubbing import Scrubber, is_credential
from ..wire import wire_api
from ..wire.base import JSON_ERRORS
from .cassette import Cassette
from .client import request_content
from .errors import UnsendableRequest
from .limits import BoundedDecoder, DecodingFailed
from .proxy import ProxyRequest, ProxyResponse, refused
from .replay import query_without_credentials, request_diff
from .sse import SSEDecoder, SSETooLarge

PLACEHOLDER_KEY: Final = "toolbench-placeholder-key"
"""The API key an agent case's SDKs are given when the environment holds none (SDK
clients refuse to be built without one). Forwarded upstream it is replaced by the case
endpoint's own key, or dropped; replay never sends it anywhere."""

_SETTLE_S = 5.0
"""How long a stage waits, once its agent has answered, for exchanges still being read
(an SDK may stop reading a stream at its last event, before the proxy saw its end)."""


@dataclass
class Exchange:
    """One request an agent sent through the proxy, and what came of it."""

    api: str | None
    """The wire API its path names; None: a path that is no model API."""
    method: str
    path: str
    request: dict[str, Any]
    """The JSON body as sent (scrubbed); ``{}`` for none."""
    reply: Reply | None = None
    """Read by the API's wire reader; None for a path that is no model API, or no answer."""
    interaction: Interaction | None = None
    """As a cassette keeps it; None when no answer came."""
    error: str | None = None
    """Why the agent got no real answer: upstream failed, or replay refused the request."""
    elapsed_ms: float = 0.0
    streamed: bool = False


class Tap:
    """What the two taps share: the log of exchanges and the stage's view of it."""

    def __init__(self, cassette: Cassette, scrubber: Scrubber) -> None:
        self.cassette = cassette
        self.scrubber = scrubber
        self.exchanges: list[Exchange] = []
        self._lock = threading.Condition()
        self._in_flight = 0
        self._closed = False
        self.connections: set[int] = set()
        """The proxy connections that carried this case's requests."""

    def owns(self, connection: int) -> bool:
        return not self._closed

    async def handle(self, request: ProxyRequest) -> ProxyResponse:
        """The response to one of the agent's requests (each tap its own way)."""
        raise NotImplementedError

    def close(self) -> None:
        """Refuse every later request (the case is over, or its agent was abandoned)."""
        with self._lock:
            self._closed = True

    def since(self, start: int) -> list[Exchange]:
        """The exchanges that ended since ``start`` (a length of ``exchanges``), once the
        requests still being read have ended (within a few seconds)."""
        deadline = time.monotonic() + _SETTLE_S
        with self._lock:
            while self._in_flight and (left := deadline - time.monotonic()) > 0:
                self._lock.wait(left)
            return list(self.exchanges[start:])

    def mark(self) -> int:
        with self._lock:
            return len(self.exchanges)

    def _begin(self, request: ProxyRequest) -> None:
        with self._lock:
            self._in_flight += 1
            self.connections.add(request.connection)

    def _end(self, exchange: Exchange) -> None:
        with self._lock:
            self._in_flight -= 1
            self.exchanges.append(exchange)
            self._lock.notify_all()

    def _request_body(self, request: ProxyRequest) -> dict[str, Any]:
        """The request's JSON object, scrubbed (``{"$text": ...}`` for a body that is no
        JSON object, ``{}`` for none)."""
        scrubber = self._scrubber_for(request)
        if not request.body:
            return {}
        try:
            value = json.loads(request.body)
        except JSON_ERRORS:
            value = None
        if not isinstance(value, dict):
            value = {"$text": request.body.decode("utf-8", "replace")}
        return scrubber.data(value)  # type: ignore[no-any-return]

    def _scrubber_for(self, request: ProxyRequest) -> Scrubber:
        """The case's scrubber, masking the keys this request's headers carry too."""
        sent = [value for name, value in request.headers if is_credential(name)]
        sent += [value.partition(" ")[2] for value in sent]
        extra = [value for value in sent if len(value) >= 8 and value not in (
            PLACEHOLDER_KEY, f"Bearer {PLACEHOLDER_KEY}")]
        if not extra:
            return self.scrubber
        return Scrubber((*self.scrubber.secrets, *extra))

    def _shown_path(self, request: ProxyRequest) -> str:
        path = request.path.partition("?")[0]
        if not request.query:
            return path
        return f"{path}?{query_without_credentials(httpx2.QueryParams(request.query))}"


class ReplyReader:
    """Reads one response as it passes through: its SSE events with their offsets, or its
    whole body; then the reply, by the API's wire reader."""

    def __init__(self, api: str | None, status: int, content_type: str, encoding: str,
                 started: float) -> None:
        self.api, self.status, self.content_type = api, status, content_type
        self.started = started
        self.streamed = 200 <= status < 300 and content_type.startswith("text/event-stream")
        self._decoder = BoundedDecoder(encoding)
        self._sse = SSEDecoder()
        self._events: list[StreamEvent] = []
        self._reader = wire_api(api).stream_reader() if api and self.streamed else None
        self._body: list[bytes] = []
        self.problem: str | None = None

    def feed(self, chunk: bytes) -> None:
        if self.problem is not None:
            return
        try:
            for piece in self._decoder.decode(chunk):
                self._take(piece)
        except (DecodingFailed, SSETooLarge) as error:
            self.problem = str(error)

    def _take(self, piece: bytes) -> None:
        if not self.streamed:
            self._body.append(piece)
            return
        offset = round((time.perf_counter() - self.started) * 1000, 1)
        for event in self._sse.feed(piece):
            self._events.append(StreamEvent(event.data, offset, event.event))
            if self._reader is not None:
                self._reader.add(event, offset)

    def finish(self) -> tuple[Reply | None, Interaction]:
        """The reply (None for a path that is no model API), and the exchange as a
        cassette keeps it (its request left empty for the tap to fill in)."""
        offset = round((time.perf_counter() - self.started) * 1000, 1)
        try:
            for piece in self._decoder.flush():
                self._take(piece)
        except (DecodingFailed, SSETooLarge) as error:
            self.problem = self.problem or str(error)
        if self.streamed:
            for event in self._sse.close():
                self._events.append(StreamEvent(event.data, offset, event.event))
                if self._reader is not None:
                    self._reader.add(event, offset)
        reply: Reply | None = None
        raw = b"".join(self._body)
        if self._reader is not None:
            reply = self._reader.finish(truncated=self._sse.truncated)
            reply.status = self.status
        elif self.api is not None:
            reply = wire_api(self.api).read_body(self.status, raw, self.content_type)
        if reply is not None:
            reply.latency_ms = offset
            if self.problem:
                reply.problems.append(self.problem)
        interaction = Interaction(
            request={}, status=self.status, content_type=self.content_type,
            body=None if self.streamed else _body_value(raw),
            events=self._events if self.streamed else None, elapsed_ms=offset, api=self.api)
        return reply, interaction


def _body_value(raw: bytes) -> Any:
    text = raw.decode("utf-8", errors="replace")
    try:
        return json.loads(text)
    except JSON_ERRORS:
        return text


# -- live -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Upstream:
    """Where one wire API's requests go when a case runs live."""

    base_url: str
    api_key: str | None
    """The endpoint's key: it replaces the placeholder key an SDK was given."""
    headers: tuple[tuple[str, str], ...] = ()
    timeout_s: float = 60.0


class LiveTap(Tap):
    """Forwards each request once to its API's real base URL; records when told to."""

    def __init__(self, cassette: Cassette, scrubber: Scrubber,
                 upstreams: Mapping[str, Upstream], recording: bool) -> None:
        super().__init__(cassette, scrubber)
        self.upstreams = upstreams
        self.recording = recording
        self._client: httpx2.AsyncClient | None = None

    async def handle(self, request: ProxyRequest) -> ProxyResponse:
        if self._closed:
            return refused(403, "pytest-toolbench: this agent's case is over (its stage ran"
                                " past its time limit)", request.family.error_shape)
        self._begin(request)
        upstream = self.upstreams[request.api or request.family.default_api]
        body = self._request_body(request)
        exchange = Exchange(request.api, request.method, self._shown_path(request), body)
        started = time.perf_counter()
        try:
            response = await self._send(request, upstream)
        except (httpx2.HTTPError, httpx2.InvalidURL, OSError, ValueError) as error:
            exchange.error = (f"the proxy's request to {_where(upstream.base_url)} failed:"
                              f" {str(error) or type(error).__name__}")
            exchange.elapsed_ms = (time.perf_counter() - started) * 1000
            self._end(exchange)
            return refused(502, f"pytest-toolbench: {exchange.error}",
                           request.family.error_shape)
        reader = ReplyReader(request.api, response.status_code,
                             response.headers.get("content-type", ""),
                             response.headers.get("content-encoding", ""), started)
        # Passed on as they came, compressed or not (identity was asked for; a server
        # that compresses anyway is inflated by the agent's own client); the proxy frames
        # the body itself.
        headers = [(name, value) for name, value in response.headers.multi_items()
                   if name.lower() != "content-length"]
        return ProxyResponse(response.status_code, headers,
                             self._relay(response, reader, exchange, request))

    async def _send(self, request: ProxyRequest, upstream: Upstream) -> httpx2.Response:
        if self._client is None:
            self._client = httpx2.AsyncClient(timeout=httpx2.Timeout(upstream.timeout_s))
        url = _upstream_url(upstream.base_url, request)
        sent = self._client.build_request(request.method, url,
                                          headers=_upstream_headers(request, upstream),
                                          content=request.body)
        return await self._client.send(sent, stream=True)

    async def _relay(self, response: httpx2.Response, reader: ReplyReader,
                     exchange: Exchange, request: ProxyRequest) -> AsyncIterator[bytes]:
        """The response's bytes as they arrive, each read on the way."""
        try:
            async for chunk in response.aiter_raw():
                reader.feed(chunk)
                yield chunk
        except httpx2.HTTPError as error:
            exchange.error = f"the upstream reply broke off: {str(error) or type(error).__name__}"
        finally:
            await response.aclose()
            self._settle(exchange, reader, request)

    def _settle(self, exchange: Exchange, reader: ReplyReader, request: ProxyRequest) -> None:
        reply, interaction = reader.finish()
        exchange.streamed = reader.streamed
        exchange.elapsed_ms = interaction.elapsed_ms
        scrubber = self._scrubber_for(request)
        exchange.reply = None if reply is None else scrubber.data(reply)
        interaction.request, interaction.path = exchange.request, exchange.path
        interaction.method = exchange.method
        interaction = scrubber.interaction(interaction)
        if exchange.error is None:
            exchange.interaction = interaction
            if self.recording:
                self.cassette.interactions.append(interaction)
        self._end(exchange)

    async def aclose(self) -> None:
        if self._client is not None:
            await self._client.aclose()


def _upstream_url(base_url: str, request: ProxyRequest) -> str:
    """The request's URL upstream: the path below the family's base URL, below the API's
    base URL; an SDK that adds its own API version (``/v1/messages``,
    ``/v1beta/models/...``) has it replaced by the base URL's."""
    below = request.below
    if not request.family.base_suffix:
        below = _VERSION.sub("", below, count=1)
    query = f"?{request.query}" if request.query else ""
    return base_url.rstrip("/") + below + query


_VERSION = re.compile(r"^/v\d[^/]*(?=/)")


def _upstream_headers(request: ProxyRequest, upstream: Upstream) -> list[tuple[str, str]]:
    """The agent's headers, but those of one hop; identity encoding, so each chunk can be
    passed on as it comes; the placeholder key replaced by the endpoint's, or dropped."""
    headers: list[tuple[str, str]] = []
    for name, value in request.headers:
        lowered = name.lower()
        if lowered in _NOT_FORWARDED:
            continue
        if PLACEHOLDER_KEY in value:  # in whichever header the SDK sends its key
            if upstream.api_key is None:
                continue
            value = value.replace(PLACEHOLDER_KEY, upstream.api_key)
        headers.append((name, value))
    headers += list(upstream.headers)
    headers.append(("accept-encoding", "identity"))
    return headers


_NOT_FORWARDED: Final = frozenset({
    "host", "content-length", "accept-encoding", "connection", "keep-alive", "te",
    "trailer", "transfer-encoding", "upgrade", "proxy-authorization"})


def _where(url: str) -> str:
    return url.partition("?")[0]


# -- replay -----------------------------------------------------------------------------


class ReplayTap(Tap):
    """Answers each request from the case's cassette; never the network."""

    def __init__(self, cassette: Cassette, scrubber: Scrubber, speed: float = 0.0) -> None:
        super().__init__(cassette, scrubber)
        self.speed = speed
        self._used: set[int] = set()
        self._recorded = [interaction for interaction in cassette.interactions
                           if interaction.role == "model"]
        """The agent's exchanges (the judge's and the simulated user's are answered apart)."""
        self._canonical = [_canonical(interaction.request) for interaction in self._recorded]
        self.refusals: list[str] = []
        """Why each refused request matched nothing, in order."""

    async def handle(self, request: ProxyRequest) -> ProxyResponse:
        shape = request.family.error_shape
        if self._closed:
            return refused(403, "pytest-toolbench: this agent's case is over (its stage ran"
                                " past its time limit)", shape)
        self._begin(request)
        body = self._request_body(request)
        exchange = Exchange(request.api, request.method, self._shown_path(request), body)
        found = self._match(exchange)
        if isinstance(found, str):
            exchange.error = found
            self.refusals.append(found)
            self._end(exchange)
            return refused(400, f"pytest-toolbench replay: {found}", shape)
        recorded = self._recorded[found]
        started = time.perf_counter()
        reader = ReplyReader(recorded.api, recorded.status, recorded.content_type, "", started)
        headers = [("content-type", recorded.content_type)] if recorded.content_type else []
        return ProxyResponse(recorded.status, headers,
                             self._replayed(recorded, reader, exchange))

    def _match(self, exchange: Exchange) -> int | str:
        """The first unused recorded exchange with the request's method, path and body;
        else why none is."""
        canonical = _canonical(exchange.request)
        with self._lock:
            for index, recorded in enumerate(self._recorded):
                if (index not in self._used and recorded.method == exchange.method
                        and recorded.path == exchange.path
                        and self._canonical[index] == canonical):
                    self._used.add(index)
                    return index
        return self._mismatch(exchange)

    def _mismatch(self, exchange: Exchange) -> str:
        cassette, recorded = self.cassette, self._recorded
        unused = [index for index in range(len(recorded)) if index not in self._used]
        hint = f"; re-record it with: {cassette.rerecord_hint}"
        request = f"{exchange.method} {exchange.path}"
        if not unused:
            return (f"the agent sent a request ({request}) that {cassette.shown} does not"
                    f" hold: its {len(recorded)} recorded requests were all"
                    f" answered{hint}")
        same_path = [index for index in unused if recorded[index].path == exchange.path]
        nearest = recorded[(same_path or unused)[0]]
        if not same_path:
            return (f"the agent sent {request}, which no unused request of {cassette.shown}"
                    f" matches; the next recorded one is {nearest.method} {nearest.path}{hint}")
        return (f"the agent's request {request} differs from the one recorded in"
                f" {cassette.shown}{hint}\n{request_diff(nearest.request, exchange.request)}")

    async def _replayed(self, recorded: Interaction, reader: ReplyReader,
                        exchange: Exchange) -> AsyncIterator[bytes]:
        try:
            for chunk in _recorded_chunks(recorded):
                if self.speed > 0 and chunk[0] > 0:
                    await asyncio.sleep(chunk[0] / 1000 / self.speed)
                reader.feed(chunk[1])
                yield chunk[1]
        finally:
            reply, _interaction = reader.finish()
            exchange.reply, exchange.streamed = reply, reader.streamed
            exchange.interaction = recorded
            exchange.elapsed_ms = recorded.elapsed_ms
            if reply is not None:
                reply.latency_ms = recorded.elapsed_ms
            self._end(exchange)

    def unused(self) -> str | None:
        """Why the case fails when recorded exchanges were left unplayed, or None."""
        cassette = self.cassette
        left = len(self._recorded) - len(self._used)
        if not left or self.refusals:
            return None
        sent = len(self._used)
        return (f"the agent sent {sent} request{'' if sent == 1 else 's'}, but"
                f" {cassette.shown} holds {len(self._recorded)}: the agent changed"
                f" since it was recorded; re-record it with: {cassette.rerecord_hint}")


def _recorded_chunks(recorded: Interaction) -> list[tuple[float, bytes]]:
    """(wait in ms since the previous chunk, bytes): each event a chunk of its own."""
    if recorded.events is not None:
        chunks, clock = [], 0.0
        for event in recorded.events:
            chunks.append((max(0.0, event.offset_ms - clock), _sse_bytes(event)))
            clock = max(clock, event.offset_ms)
        return chunks
    if recorded.body_json is not None:
        body = recorded.body_json
    elif isinstance(recorded.body, str):
        body = recorded.body
    else:
        body = json.dumps(recorded.body)
    return [(recorded.elapsed_ms, body.encode())]


def _sse_bytes(event: StreamEvent) -> bytes:
    lines = [f"event: {event.event}"] if event.event != "message" else []
    lines.extend(f"data: {line}" for line in event.data.split("\n"))
    return ("\n".join(lines) + "\n\n").encode()


def _canonical(body: dict[str, Any]) -> bytes | None:
    try:
        return request_content(body)
    except UnsendableRequest:
        return None

