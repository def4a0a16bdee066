"""The chat-completions client: one shared ``httpx.AsyncClient`` per endpoint.

A request goes out in two steps so the executor can follow it: ``open`` sends and returns
once the status line and headers are in (retrying transient failures), then
``PendingReply.read`` reads the body or the stream and returns the Reply. The transport
underneath is the live network, or a cassette replay; this module cannot tell them apart.
"""

from __future__ import annotations

import asyncio
import email.utils
import json
import random
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import httpx

from ..models.records import Interaction, Reply, StreamEvent
from .breaker import CircuitBreaker
from .errors import (
    ConnectFailed,
    ConnectionLost,
    ProtocolViolation,
    ReadTimedOut,
    ReplayError,
    TransportError,
)
from .reassemble import StreamAssembler, parse_completion
from .sse import SSEDecoder

MAX_BODY_BYTES = 64 * 1024 * 1024
"""A larger non-streamed body is refused rather than held in memory."""
RETRYABLE_STATUS = frozenset({429, 500, 502, 503, 504})
BACKOFF_BASE_S = 0.5
BACKOFF_CAP_S = 8.0

InteractionSink = Callable[[Interaction], None]
Sleep = Callable[[float], Awaitable[None]]


@dataclass(frozen=True)
class ClientConfig:
    base_url: str
    headers: tuple[tuple[str, str], ...] = ()
    timeout_s: float = 60.0
    retries: int = 2


@dataclass
class PendingReply:
    """A response whose headers have arrived; ``read`` consumes the rest."""

    response: httpx.Response
    body: dict[str, Any]
    stream: bool
    started: float
    sink: InteractionSink | None
    retries: list[str] = field(default_factory=list)
    """One line per retried attempt: what failed and how long the client waited."""

    async def read(self) -> Reply:
        try:
            if self.stream and _is_event_stream(self.response):
                reply = await self._read_stream()
            else:
                reply = await self._read_body()
        except httpx.TimeoutException as exc:
            raise ReadTimedOut(
                f"no data for the read timeout while reading the body ({_detail(exc)})"
            ) from None
        except (httpx.RemoteProtocolError, httpx.ReadError, httpx.StreamError) as exc:
            raise ConnectionLost(f"while reading the body: {_detail(exc)}") from None
        finally:
            await self.response.aclose()
        reply.latency_ms = _ms_since(self.started)
        if reply.interaction is not None:
            reply.interaction.elapsed_ms = round(reply.latency_ms, 1)
        if self.sink is not None and reply.interaction is not None:
            self.sink(reply.interaction)
        return reply

    async def _read_body(self) -> Reply:
        chunks, size = [], 0
        async for chunk in self.response.aiter_bytes():
            size += len(chunk)
            if size > MAX_BODY_BYTES:
                raise ProtocolViolation(f"response body larger than {MAX_BODY_BYTES} bytes")
            chunks.append(chunk)
        raw = b"".join(chunks)
        content_type = self.response.headers.get("content-type", "")
        reply = parse_completion(self.response.status_code, raw, content_type)
        if self.stream and 200 <= reply.status < 300:
            reply.problems.append(f"asked for a stream, got {content_type or 'no content type'}")
        reply.interaction = Interaction(
            request=self.body,
            status=reply.status,
            content_type=content_type,
            body=_body_for_cassette(raw),
        )
        return reply

    async def _read_stream(self) -> Reply:
        decoder, assembler, events = SSEDecoder(), StreamAssembler(), []
        async for chunk in self.response.aiter_bytes():
            offset = _ms_since(self.started)
            for event in decoder.feed(chunk):
                assembler.add(event, offset)
                events.append(StreamEvent(event.data, round(offset, 1), event.event))
        offset = _ms_since(self.started)
        for event in decoder.close():  # a last [DONE] without its blank line: recorded
            assembler.add(event, offset)
            events.append(StreamEvent(event.data, round(offset, 1), event.event))
        reply = assembler.finish(truncated=decoder.truncated)
        reply.status = self.response.status_code
        reply.interaction = Interaction(
            request=self.body,
            status=reply.status,
            content_type=self.response.headers.get("content-type", ""),
            events=events,
        )
        return reply


class ChatClient:
    """Sends chat-completions requests to one endpoint over one shared connection pool."""

    def __init__(
        self,
        config: ClientConfig,
        *,
        transport: httpx.AsyncBaseTransport | None = None,
        breaker: CircuitBreaker | None = None,
        sleep: Sleep = asyncio.sleep,
        jitter: bool = True,
    ) -> None:
        self.config = config
        self._jitter = jitter
        self.breaker = breaker or CircuitBreaker()
        self._sleep = sleep
        base_url, query = _split_base_url(config.base_url)
        self._client = httpx.AsyncClient(
            base_url=base_url,
            params=query,
            headers=dict(config.headers),
            timeout=httpx.Timeout(config.timeout_s),
            transport=transport,
            # A replay transport must never pick up proxies from the environment.
            trust_env=transport is None,
            limits=httpx.Limits(max_connections=100, max_keepalive_connections=32),
        )

    async def aclose(self) -> None:
        await self._client.aclose()

    async def open(
        self,
        body: dict[str, Any],
        *,
        stream: bool,
        api_key: str | None = None,
        sink: InteractionSink | None = None,
    ) -> PendingReply:
        """Send ``body``; return once the headers are in. Retries connect errors, 429, 5xx."""
        self.breaker.check()
        retries: list[str] = []
        for attempt in range(self.config.retries + 1):
            last = attempt == self.config.retries
            try:
                pending = await self._send_once(body, stream, api_key, sink)
            except (ConnectFailed, ConnectionLost) as error:
                if last:
                    self.breaker.record_failure(str(error))
                    raise
                retries.append(await self._back_off(attempt, str(error), None))
                continue
            except TransportError as error:
                if not isinstance(error, ReplayError):
                    self.breaker.record_failure(str(error))
                raise
            status = pending.response.status_code
            if status not in RETRYABLE_STATUS or last:
                if status in RETRYABLE_STATUS and status != 429:  # 5xx to the end: it is down
                    self.breaker.record_failure(f"HTTP {status}")
                else:
                    self.breaker.record_success()
                pending.retries = retries
                return pending
            reply = await pending.read()  # keep the failed exchange in the cassette too
            reason = f"HTTP {status}" + (f": {reply.error}" if reply.error else "")
            retries.append(await self._back_off(attempt, reason, pending.response))
        raise AssertionError("unreachable: the last attempt returns or raises")

    async def _send_once(
        self, body: dict[str, Any], stream: bool, api_key: str | None, sink: InteractionSink | None
    ) -> PendingReply:
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        if stream:
            headers["Accept"] = "text/event-stream"
        request = self._client.build_request(
            "POST",
            "chat/completions",
            content=json.dumps(body).encode(),
            headers={"Content-Type": "application/json", **headers},
        )
        started = time.perf_counter()
        try:
            response = await self._client.send(request, stream=True)
        except httpx.ConnectTimeout as exc:
            raise ConnectFailed(f"{request.url}: connect timed out ({_detail(exc)})") from None
        except httpx.ConnectError as exc:
            raise ConnectFailed(f"{request.url}: {_detail(exc)}") from None
        except httpx.TimeoutException:
            raise ReadTimedOut(
                f"{request.url}: no response within {self.config.timeout_s:g} s"
            ) from None
        except (httpx.RemoteProtocolError, httpx.ReadError, httpx.WriteError) as exc:
            raise ConnectionLost(f"{request.url}: {_detail(exc)}") from None
        return PendingReply(response, body, stream, started, sink)

    async def _back_off(self, attempt: int, reason: str, response: httpx.Response | None) -> str:
        """Sleep before the next attempt; return the transcript line that says so."""
        delay = _retry_after(response) if response is not None else None
        if delay is None:
            delay = min(BACKOFF_CAP_S, BACKOFF_BASE_S * 2**attempt)
            if self._jitter:  # spreads out clients retrying together; replay stays repeatable
                delay *= random.uniform(0.5, 1.0)
        delay = min(delay, self.config.timeout_s)
        await self._sleep(delay)
        return f"attempt {attempt + 1} failed ({reason}); retried after {delay:.2f} s"


def _split_base_url(base_url: str) -> tuple[httpx.URL, httpx.QueryParams]:
    """The base URL as a directory, and its query string apart.

    Azure-style URLs carry a query (``.../v1?api-version=X``); joined as they are, the
    request would go to ``.../v1?api-version=X/chat/completions``. The query goes on every
    request instead: ``.../v1/chat/completions?api-version=X``.
    """
    url = httpx.URL(base_url)
    directory = url.copy_with(path=url.path.rstrip("/") + "/", query=None, fragment=None)
    return directory, url.params


def _retry_after(response: httpx.Response) -> float | None:
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


def _is_event_stream(response: httpx.Response) -> bool:
    content_type = response.headers.get("content-type", "")
    return response.is_success and (
        content_type.startswith("text/event-stream") or not content_type
    )


def _body_for_cassette(raw: bytes) -> Any:
    text = raw.decode("utf-8", errors="replace")
    try:
        return json.loads(text)
    except ValueError:
        return text


def _detail(exc: Exception) -> str:
    """An httpx error's message; many are empty (a reset), so then its class name."""
    return str(exc) or type(exc).__name__


def _ms_since(started: float) -> float:
    return (time.perf_counter() - started) * 1000
