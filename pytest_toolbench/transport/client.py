"""The HTTP client of every wire API: one shared ``httpx2.AsyncClient`` per endpoint.

It sends the body a ``WireApi`` built to that API's path and has the same ``WireApi`` read
the reply; it knows HTTP (retries, timeouts, limits, encodings), not what the bodies mean.

A request goes out in two steps so the executor can follow it: ``open`` sends and returns
once the status line and headers are in (retrying transient failures), then
``PendingReply.read`` reads the body or the stream and returns the Reply. The transport
underneath is the live network, or a cassette replay; this module cannot tell them apart.
"""

from __future__ import annotations

import asyncio
import email.utils
import functools
import json
import math
import random
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any, TypeVar

import httpx2

from ..faults import ANSWERED, INJECTED, FaultPlan, Injection
from ..records import Interaction, Reply, StreamEvent, ToolCall
from ..wire import WireApi
from ..wire.base import JSON_ERRORS
from .breaker import CircuitBreaker
from .errors import (
    ConnectFailed,
    ConnectionLost,
    DeadlineExceeded,
    ProtocolViolation,
    ReadTimedOut,
    ReplayError,
    ReplyTooLarge,
    TransportError,
    UnsendableRequest,
)
from .limits import (
    ACCEPT_ENCODING,
    BoundedDecoder,
    DecodingFailed,
    ReplyLimits,
    deadline_exceeded,
    too_large,
    too_many_events,
)
from .ramp import ramped_transport
from .ratelimit import RequestPacer
from .reshape import CutShort, held_s, reshaped
from .sse import DEFAULT_MAX_EVENT_CHARS, SSEDecoder, SSETooLarge
from .tls import shared_ssl_context

BACKOFF_BASE_S = 0.5
BACKOFF_CAP_S = 8.0
POOL_LIMITS = httpx2.Limits(max_connections=100, max_keepalive_connections=32)

InteractionSink = Callable[[Interaction], None]
RECORDED_TIMES = "toolbench.recorded_times"
"""A replayed response's extension: when each of its stream's events arrived, as recorded."""
Sleep = Callable[[float], Awaitable[None]]

RECORDED_LATENCY = "toolbench_recorded_latency_ms"
"""The response extension in which a transport that answers from a recording (a replay)
gives the latency recorded with the answer: the reply keeps it as ``recorded_latency_ms``,
beside its own."""


@dataclass(frozen=True)
class ClientConfig:
    base_url: str
    headers: tuple[tuple[str, str], ...] = ()
    timeout_s: float = 60.0
    """Connect timeout, and the longest silence while waiting for bytes."""
    retries: int = 2
    limits: ReplyLimits = field(default_factory=ReplyLimits)
    """Each reply's total deadline and size."""


@dataclass
class PendingReply:
    """A response whose headers have arrived; ``read`` consumes the rest."""

    response: httpx2.Response
    body: dict[str, Any]
    wire: WireApi
    """The API whose reply this is: it reads the body or the stream."""
    path: str
    """Where the request went, below the base URL (the cassette keeps it)."""
    stream: bool
    started: float
    sink: InteractionSink | None
    config: ClientConfig
    retries: list[str] = field(default_factory=list)
    """One line per retried attempt: what failed and how long the client waited."""
    pacer: RequestPacer | None = None
    """Told of the reply once read (its tokens), when the endpoint is rate limited."""
    injection: Injection | None = None
    """The fault injected into this reply (its ``status`` stood in for it, or it is slowed,
    cut or changed on its way in); None: none."""
    held_ms: float = 0.0
    """How long the fault has held the reply back so far (its first byte, its chunks):
    a recording keeps the real reply's timing, without it."""
    _size: int = field(default=0, init=False)
    """Bytes of the body read so far, after ``Content-Encoding`` is undone."""
    _real: list[tuple[bytes, float]] | None = field(default=None, init=False)
    """While recording a reply a fault reshapes: its own bytes as they came, each with
    its offset in ms, so the cassette keeps the real exchange."""

    async def read(self, on_call: Callable[[ToolCall], None] | None = None) -> Reply:
        """Read the body or stream whole, within what is left of the total deadline;
        ``on_call`` hears of each streamed tool call the moment its API marks it complete,
        while the stream goes on (``run_tools: progressive``)."""
        deadline_s = self.config.limits.deadline_s
        remaining = deadline_s - (time.perf_counter() - self.started)
        try:
            reply = await _within(self._read(on_call), remaining)
        except asyncio.TimeoutError:
            raise _deadline_exceeded(deadline_s, self.response.request.url) from None
        finally:
            await self.response.aclose()
        reply.latency_ms = _ms_since(self.started)
        reply.recorded_latency_ms = self.response.extensions.get(RECORDED_LATENCY)
        if self.pacer is not None:
            self.pacer.after_reply(reply)
        if reply.interaction is not None:
            self._keep(reply.interaction)
        return reply

    def _keep(self, interaction: Interaction) -> None:
        """Hand the exchange to the recording, its time the service's own (without what a
        fault held it back)."""
        assert self.sink is not None
        interaction.elapsed_ms = round(_ms_since(self.started) - self.held_ms, 1)
        self.sink(interaction)

    async def _read(self, on_call: Callable[[ToolCall], None] | None) -> Reply:
        streaming = self.stream and _is_event_stream(self.response)
        try:
            return await (self._read_stream(on_call) if streaming else self._read_body())
        except httpx2.TimeoutException:
            raise ReadTimedOut(
                f"no more data within {self.config.timeout_s:g} s (timeout) while reading the"
                f" body from {_where(self.response.request.url)}") from None
        except (httpx2.RemoteProtocolError, httpx2.ReadError, httpx2.StreamError) as exc:
            raise ConnectionLost(f"while reading the body: {_detail(exc)}") from None
        except DecodingFailed as exc:
            raise ProtocolViolation(f"{exc}, from {_where(self.response.request.url)}") from None

    async def _read_body(self) -> Reply:
        raw = b"".join([chunk async for chunk in self._decoded("body")])
        content_type = self.response.headers.get("content-type", "")
        reply = self.wire.read_body(self.response.status_code, raw, content_type)
        if self.stream and 200 <= reply.status < 300:
            reply.problems.append(f"asked for a stream, got {content_type or 'no content type'}")
        if self._real is not None:
            reply.interaction = self._real_interaction(streamed=False)
        elif self.sink is not None:  # only a recording keeps the exchange (the body parsed anew)
            reply.interaction = Interaction(
                request=self.body,
                path=f"/{self.path}",
                status=reply.status,
                content_type=content_type,
                body=_body_for_cassette(raw),
            )
        return reply

    def _real_interaction(self, streamed: bool) -> Interaction:
        """The exchange as the service sent it, before a fault reshaped it: what a
        recording keeps, so a replay with the same fault reshapes it the same way."""
        assert self._real is not None
        interaction = Interaction(request=self.body, path=f"/{self.path}",
                                  status=self.response.status_code,
                                  content_type=self.response.headers.get("content-type", ""))
        if streamed:
            interaction.events = _events_of(self._real, self._max_event_chars)
        else:
            interaction.body = _body_for_cassette(b"".join(piece for piece, _ in self._real))
        return interaction

    @property
    def _max_event_chars(self) -> int:
        return min(self.config.limits.max_bytes, DEFAULT_MAX_EVENT_CHARS)

    async def _read_stream(self, on_call: Callable[[ToolCall], None] | None) -> Reply:
        decoder = SSEDecoder(max_event_chars=self._max_event_chars)
        assembler = self.wire.stream_reader()
        assembler.on_call = on_call
        # Only a recording keeps the events as they came (the real reply's, when a fault
        # reshapes it: ``_real``); a replay or live run counts them.
        events: list[StreamEvent] | None = (
            [] if self.sink is not None and self._real is None else None)
        # A replayed stream's events carry the times they were recorded at: each call's
        # arguments and its end are the recording's; its first token, the replay's (a
        # changed reply's events are not the recorded ones).
        recorded: list[float] | None = (
            None if self.injection is not None and self.injection.fault.mutate is not None
            else self.response.extensions.get(RECORDED_TIMES))
        count = 0
        try:
            async for chunk in self._decoded("stream"):
                offset = _ms_since(self.started)
                for event in decoder.feed(chunk):
                    if recorded is not None and count < len(recorded):
                        assembler.add(event, recorded[count], offset)
                    else:
                        assembler.add(event, offset)
                    count += 1
                    if events is not None:
                        events.append(StreamEvent(event.data, round(offset, 1), event.event))
                self._check_events(count)
            offset = _ms_since(self.started)
            for event in decoder.close():  # a last [DONE] without its blank line: recorded
                if recorded is not None and count < len(recorded):
                    assembler.add(event, recorded[count], offset)
                else:
                    assembler.add(event, offset)
                if events is not None:
                    events.append(StreamEvent(event.data, round(offset, 1), event.event))
            if events is not None and decoder.cut is not None:  # kept, to replay the cut
                events.append(StreamEvent(decoder.cut, round(offset, 1), cut=True))
        except SSETooLarge as exc:
            raise ReplyTooLarge(f"{exc} from {_where(self.response.request.url)}") from None
        reply = assembler.finish(truncated=decoder.truncated)
        reply.status = self.response.status_code
        if self._real is not None:
            reply.interaction = self._real_interaction(streamed=True)
        elif events is not None:  # only a recording keeps the exchange
            reply.interaction = Interaction(
                request=self.body,
                path=f"/{self.path}",
                status=reply.status,
                content_type=self.response.headers.get("content-type", ""),
                events=events,
            )
        return reply

    async def _decoded(self, what: str) -> AsyncIterator[bytes]:
        """The body as sent, ``Content-Encoding`` undone, counted against the size limit.

        httpx2 would inflate each network read at once (64 KiB of gzip can be 64 MiB);
        reading raw and inflating in bounded pieces stops a compression bomb at the limit.
        """
        pieces = self._inflated(what)
        fault = self.injection.fault if self.injection is not None else None
        if fault is None or fault.kind in ANSWERED:
            async for piece in pieces:
                yield piece
            return
        if self.sink is not None:  # the cassette keeps the real reply, whatever the fault
            self._real = []
            pieces = self._kept(pieces, self._real)
        try:
            async for piece in reshaped(pieces, fault, what == "stream", self.wire.name,
                                        self._hold):
                yield piece
        except CutShort as cut:
            if self._real is not None:  # the rest of it too: a replay cuts it again
                async for _piece in pieces:
                    pass
                self._keep(self._real_interaction(what == "stream"))
            raise _by_fault(ConnectionLost(f"{cut.describe()} ({INJECTED}:"
                                           f" {fault.describe()})")) from None

    async def _inflated(self, what: str) -> AsyncIterator[bytes]:
        encoding = self.response.headers.get("content-encoding", "")
        decoder = BoundedDecoder(encoding)
        async for raw in self.response.aiter_raw():
            for piece in decoder.decode(raw):
                yield self._counted(piece, what, encoding)
        for piece in decoder.flush():
            yield self._counted(piece, what, encoding)

    async def _kept(self, pieces: AsyncIterator[bytes], real: list[tuple[bytes, float]]
                    ) -> AsyncIterator[bytes]:
        async for piece in pieces:
            real.append((piece, _ms_since(self.started) - self.held_ms))
            yield piece

    async def _hold(self, seconds: float) -> None:
        self.held_ms += seconds * 1000
        await asyncio.sleep(seconds)

    def _counted(self, piece: bytes, what: str, encoding: str) -> bytes:
        self._size += len(piece)
        limit = self.config.limits.max_bytes
        if self._size > limit:
            raise too_large(what, limit, _where(self.response.request.url), encoding)
        return piece

    def _check_events(self, count: int) -> None:
        limit = self.config.limits.max_events
        if count > limit:
            raise too_many_events(limit, _where(self.response.request.url))


class ApiClient:
    """Sends requests of any wire API to one endpoint over one shared connection pool."""

    def __init__(
        self,
        config: ClientConfig,
        *,
        transport: httpx2.AsyncBaseTransport | None = None,
        breaker: CircuitBreaker | None = None,
        sleep: Sleep = asyncio.sleep,
        jitter: bool = True,
        pacer: RequestPacer | None = None,
    ) -> None:
        self.config = config
        self.pacer = pacer
        """Rate limits (``transport.ratelimit``): asked before each attempt, told after."""
        self._jitter = jitter
        self.breaker = breaker or CircuitBreaker()
        self._sleep = sleep
        base_url, query = _split_base_url(config.base_url)
        self._client = httpx2.AsyncClient(
            base_url=base_url,
            params=query,
            # Only the codings the client inflates in bounded pieces; a body in another is
            # read as it came. A case's own headers may still ask for others.
            headers={"Accept-Encoding": ACCEPT_ENCODING, **dict(config.headers)},
            timeout=httpx2.Timeout(config.timeout_s),
            # The network's new connections a few ms apart (a short listen backlog drops
            # a burst); a replay's transport is its own.
            transport=transport or ramped_transport(POOL_LIMITS),
            # A replay transport must never pick up proxies from the environment.
            trust_env=transport is None,
            limits=POOL_LIMITS,  # for the transports of proxies from the environment
            verify=shared_ssl_context(),  # theirs too: building one costs ~25 ms (tls.py)
        )

    async def aclose(self) -> None:
        await self._client.aclose()

    async def open(
        self,
        body: dict[str, Any],
        *,
        wire: WireApi,
        stream: bool,
        model: str | None = None,
        api_key: str | None = None,
        sink: InteractionSink | None = None,
        faults: FaultPlan | None = None,
    ) -> PendingReply:
        """Send ``body`` to ``wire``'s path for ``model`` and ``stream``; return once the
        headers are in. Retries connect errors, 429 and 5xx. ``faults``: asked before each
        attempt; an injected ``status`` or ``disconnect`` stands in for the endpoint, the
        other kinds hold back, slow, cut or change its reply."""
        path = wire.url_path(model, stream)
        content = request_content(body)
        self.breaker.check()
        retries: list[str] = []
        for attempt in range(self.config.retries + 1):
            last = attempt == self.config.retries
            injection = faults.decide(wire.name) if faults is not None else None
            try:
                if injection is not None and injection.fault.kind in ANSWERED:
                    pending = self._injected(injection, body, wire, path, stream)
                else:
                    pending = await self._send_once(content, body, wire, path, stream,
                                                    api_key, sink, injection)
            except (ConnectFailed, ConnectionLost) as error:
                if last:
                    self.breaker.record_failure(str(error))
                    error.retries = retries  # the attempts before this one still show
                    raise
                retries.append(await self._back_off(attempt, str(error), None))
                continue
            except TransportError as error:
                if not isinstance(error, ReplayError):
                    self.breaker.record_failure(str(error))
                error.retries = retries
                raise
            status = pending.response.status_code
            if not retryable(status) or last:
                if retryable(status) and status != 429:  # 5xx to the end: it is down
                    self.breaker.record_failure(f"HTTP {status}")
                else:
                    self.breaker.record_success()
                pending.retries = retries
                return pending
            reply = await pending.read()  # keep the failed exchange in the cassette too
            reason = f"HTTP {status}" + (f": {reply.error}" if reply.error else "")
            retries.append(await self._back_off(attempt, reason, pending.response,
                                                reply.retry_after_s))
        raise AssertionError("unreachable: the last attempt returns or raises")

    def _injected(self, injection: Injection, body: dict[str, Any], wire: WireApi, path: str,
                  stream: bool) -> PendingReply:
        """An injected fault's answer, the endpoint never asked (nor a cassette): the API's
        own error for a ``status``; ConnectionLost for a ``disconnect``. Nothing of it is
        recorded."""
        url = _endpoint_url(self.config.base_url, path)
        fault = injection.fault
        if fault.status is None:
            raise _by_fault(ConnectionLost(f"{_where(url)}: the connection was closed with no"
                                           f" reply ({INJECTED})"))
        error, headers = wire.fault_error(fault.status, fault.retry_after_s)
        # A stream, as the network's: read by PendingReply.read like any other body.
        response = httpx2.Response(fault.status, headers=headers,
                                   stream=httpx2.ByteStream(json.dumps(error).encode()),
                                   request=self._client.build_request("POST", url))
        return PendingReply(response, body, wire, path, stream, time.perf_counter(), None,
                            self.config, injection=injection)

    async def _send_once(self, content: bytes, body: dict[str, Any], wire: WireApi, path: str,
                         stream: bool, api_key: str | None, sink: InteractionSink | None,
                         injection: Injection | None = None) -> PendingReply:
        headers = wire.headers(api_key)
        if stream:
            headers["Accept"] = "text/event-stream"
        request = self._client.build_request(
            "POST",
            _endpoint_url(self.config.base_url, path),
            content=content,
            headers={"Content-Type": "application/json", **headers},
        )
        if self.pacer is not None:
            await self.pacer.before_request()
        hold_s = held_s(injection.fault) if injection is not None else 0.0
        if hold_s and hold_s >= self.config.timeout_s:
            raise await self._held_past_timeout(request.url, hold_s)
        started = time.perf_counter()
        response = await self._send_within_deadline(request, hold_s)
        if self.pacer is not None:
            self.pacer.after_headers(response.status_code, response.headers)
        return PendingReply(response, body, wire, path, stream, started, sink, self.config,
                            pacer=self.pacer, injection=injection, held_ms=hold_s * 1000)

    async def _send_within_deadline(self, request: httpx2.Request, hold_s: float = 0.0
                                    ) -> httpx2.Response:
        """Send; return once the headers are in. The timeout bounds each wait (connect,
        each read); the total deadline bounds them all, e.g. headers trickled a byte a time.
        ``hold_s``: an injected fault holds the reply back that long before its first byte.
        """
        timeout_s, deadline_s = self.config.timeout_s, self.config.limits.deadline_s
        try:
            return await _within(self._sent(request, hold_s), deadline_s)
        except asyncio.TimeoutError:
            raise _deadline_exceeded(deadline_s, request.url) from None
        except httpx2.ConnectTimeout:
            raise ConnectFailed(f"no connection within {timeout_s:g} s (timeout) to"
                                f" {_where(request.url)}") from None
        except httpx2.ConnectError as exc:
            raise ConnectFailed(f"{_where(request.url)}: {_detail(exc)}") from None
        except httpx2.TimeoutException:
            raise ReadTimedOut(f"no response within {timeout_s:g} s (timeout) from"
                               f" {_where(request.url)}") from None
        except (httpx2.RemoteProtocolError, httpx2.ReadError, httpx2.WriteError) as exc:
            raise ConnectionLost(f"{_where(request.url)}: {_detail(exc)}") from None

    async def _sent(self, request: httpx2.Request, hold_s: float) -> httpx2.Response:
        response = await self._client.send(request, stream=True)
        if hold_s:
            try:
                await asyncio.sleep(hold_s)
            except BaseException:
                await response.aclose()
                raise
        return response

    async def _held_past_timeout(self, url: httpx2.URL, hold_s: float) -> ReadTimedOut:
        """A reply held back longer than the client waits: it gives up after its timeout,
        as with a silent server, and never sees the reply (nor does a recording), so the
        request is not sent at all."""
        timeout_s, deadline_s = self.config.timeout_s, self.config.limits.deadline_s
        try:
            await _within(asyncio.sleep(timeout_s), deadline_s)
        except asyncio.TimeoutError:
            return _by_fault(_deadline_exceeded(deadline_s, url))
        return _by_fault(ReadTimedOut(f"no response within {timeout_s:g} s (timeout) from"
                                      f" {_where(url)} ({INJECTED}: held back {hold_s:g} s)"))

    async def _back_off(self, attempt: int, reason: str, response: httpx2.Response | None,
                        asked_s: float | None = None) -> str:
        """Sleep before the next attempt (as long as a ``Retry-After`` header, else the
        reply's body, asked); return the transcript line that says so."""
        delay = _retry_after(response) if response is not None else None
        delay = asked_s if delay is None else delay
        if delay is None:
            delay = min(BACKOFF_CAP_S, BACKOFF_BASE_S * 2**attempt)
            if self._jitter:  # spreads out clients retrying together; replay stays repeatable
                delay *= random.uniform(0.5, 1.0)
        delay = min(delay, self.config.timeout_s)
        await self._sleep(delay)
        return f"attempt {attempt + 1} failed ({reason}); retried after {delay:.2f} s"


Failure = TypeVar("Failure", bound=TransportError)


def _by_fault(error: Failure) -> Failure:
    """``error``, marked as what an injected fault did."""
    error.injected = True
    return error


def retryable(status: int) -> bool:
    """A status that says "try again": 429, and every 5xx (Anthropic's 529 overloaded, a
    gateway's 502 and 504, a model still loading's 503...)."""
    return status == 429 or 500 <= status <= 599


def request_content(body: dict[str, Any]) -> bytes:
    """``body`` as the client sends it: strict JSON (nothing that is not JSON is sent:
    UnsendableRequest), keys sorted, so equal bodies are equal bytes (the order of an
    object's members means nothing in JSON)."""
    try:
        return json.dumps(body, allow_nan=False, sort_keys=True).encode()
    except ValueError:
        raise UnsendableRequest(
            "it holds NaN or Infinity, which JSON has no word for; the server put them in"
            " its earlier reply, which the request sends back as it came") from None


@functools.lru_cache(maxsize=64)
def _split_base_url(base_url: str) -> tuple[httpx2.URL, httpx2.QueryParams]:
    """The base URL as a directory, and its query string apart.

    Azure-style URLs carry a query (``.../v1?api-version=X``); joined as they are, the
    request would go to ``.../v1?api-version=X/chat/completions``. The query goes on every
    request instead: ``.../v1/chat/completions?api-version=X``. Parsed once per base URL
    (httpx2's URLs and query parameters are immutable): every replayed case builds a client.
    """
    url = httpx2.URL(base_url)
    directory = url.copy_with(path=url.path.rstrip("/") + "/", query=None, fragment=None)
    return directory, url.params


@functools.lru_cache(maxsize=256)
def _endpoint_url(base_url: str, path: str) -> httpx2.URL:
    """``path`` below the base URL's directory, joined as httpx2 joins a relative URL to a
    client's base URL (the client adds the base URL's query), once per base URL and path
    instead of once per request."""
    directory, _query = _split_base_url(base_url)
    return directory.copy_with(raw_path=directory.raw_path + path.lstrip("/").encode("ascii"))


T = TypeVar("T")

if sys.version_info >= (3, 11):
    async def _within(awaitable: Coroutine[Any, Any, T], seconds: float) -> T:
        """``awaitable`` within ``seconds`` (TimeoutError past them), run in this task:
        ``asyncio.wait_for`` would start a task for each wait, two a request. Infinite
        seconds (instant replay) need no timer."""
        if seconds <= 0:  # as wait_for: out of time before it starts, whatever it is
            awaitable.close()
            raise asyncio.TimeoutError
        if seconds == math.inf:
            return await awaitable
        async with asyncio.timeout(seconds):
            return await awaitable
else:  # pragma: no cover - asyncio.timeout is new in 3.11
    async def _within(awaitable: Coroutine[Any, Any, T], seconds: float) -> T:
        return await asyncio.wait_for(awaitable, max(seconds, 0.0))


def _retry_after(response: httpx2.Response) -> float | None:
    """Seconds from a ``Retry-After`` header (delta seconds or an HTTP date)."""
    value = response.headers.get("retry-after")
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        try:
            moment = email.utils.parsedate_to_datetime(value)
        except (TypeError, ValueError):
            return None
        return max(0.0, moment.timestamp() - time.time())


def _is_event_stream(response: httpx2.Response) -> bool:
    content_type = response.headers.get("content-type", "")
    return response.is_success and (
        content_type.startswith("text/event-stream") or not content_type
    )


def _events_of(real: list[tuple[bytes, float]], max_event_chars: int) -> list[StreamEvent]:
    """A stream's own events, as they came before a fault reshaped them: what a recording
    keeps."""
    decoder = SSEDecoder(max_event_chars=max_event_chars)
    events: list[StreamEvent] = []
    offset = 0.0
    for chunk, offset in real:
        events += [StreamEvent(event.data, round(offset, 1), event.event)
                   for event in decoder.feed(chunk)]
    events += [StreamEvent(event.data, round(offset, 1), event.event)
               for event in decoder.close()]
    if decoder.cut is not None:
        events.append(StreamEvent(decoder.cut, round(offset, 1), cut=True))
    return events


def _body_for_cassette(raw: bytes) -> Any:
    """The body as the cassette keeps it: its JSON, or the text it was (not JSON, or nested
    deeper than the JSON reader goes)."""
    text = raw.decode("utf-8", errors="replace")
    try:
        return json.loads(text)
    except JSON_ERRORS:
        return text


def _deadline_exceeded(deadline_s: float, url: httpx2.URL) -> DeadlineExceeded:
    return deadline_exceeded(deadline_s, _where(url))


def _where(url: httpx2.URL) -> str:
    """The URL for messages: without its query, which some APIs use for a key."""
    return str(url.copy_with(query=None))


def _detail(exc: Exception) -> str:
    """An httpx2 error's message; many are empty (a reset), so then its class name."""
    return str(exc) or type(exc).__name__


def _ms_since(started: float) -> float:
    return (time.perf_counter() - started) * 1000
