"""Live and record: an agent's requests forwarded upstream, each once, and recorded.

``LiveTap`` forwards each request once (no retries of the plugin's: the agent's own retry
logic is under test) to the API's real base URL and streams the response back chunk by
chunk as it arrives, reading it on the way; a recording keeps each exchange, scrubbed, in
the case's cassette. Each reply is held to the endpoint's ``ReplyLimits`` as the plugin's
own client holds it (``--toolbench-deadline``, ``--toolbench-max-reply-bytes``,
``--toolbench-max-stream-events``): past one, the agent's connection is cut, the exchange
fails naming the limit, and nothing of it is kept.

A reply a fault cut short (``agent_faults.py``) is still read to its end from the service,
off the agent's connection, and held: at the end of the recording it joins the cassette,
unless the agent sent its request again (its retry's exchange then stands for it). So a
replay with the same fault cuts it again where the agent gave up, and answers a retry from
the exchange that answered it.
"""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Coroutine, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final
from urllib.parse import quote

import httpx2

from ..faults import ANSWERED
from ..records import Interaction
from ..scrubbing import Scrubber
from .agent_faults import faulted
from .agent_tap import PLACEHOLDER_KEY, Exchange, ReplyReader, Tap
from .cassette import Cassette
from .client import _within
from .errors import TransportError
from .limits import ReplyLimits, deadline_exceeded
from .proxy import ProxyRequest, ProxyResponse, refused
from .ratelimit import RequestPacer
from .tls import shared_ssl_context


@dataclass(frozen=True)
class Upstream:
    """Where one wire API's requests go when a case runs live."""

    base_url: str
    api_key: str | None
    """The endpoint's key: it replaces the placeholder key an SDK was given."""
    headers: tuple[tuple[str, str], ...] = ()
    timeout_s: float = 60.0
    limits: ReplyLimits = field(default_factory=ReplyLimits)
    """Each reply's deadline (from the request forwarded to the reply's last byte), size
    and number of stream events."""
    pacer: RequestPacer | None = field(default=None, compare=False)
    """The endpoint's rate limits (``--toolbench-rpm``, ``--toolbench-tpm``), shared with
    every other live request to it: a request waits its turn before it is forwarded."""


_REST_S: Final = 3.0
"""How long the rest of a reply a fault kept from the agent is read, at most: the exchange
ends then (a stage waits a few seconds for its exchanges, ``Tap.since``), and what did not
come in time is not kept."""


@dataclass
class _Reading:
    """How far the proxy read one upstream reply."""

    whole: bool = False
    """Read to its end (the service sent all of it, within its limits)."""
    rest: asyncio.Task[None] | None = None
    """The reading of what a fault kept from the agent, while it lasts."""


class LiveTap(Tap):
    """Forwards each request once to its API's real base URL; records when told to."""

    def __init__(self, cassette: Cassette, scrubber: Scrubber,
                 upstreams: Mapping[str, Upstream], recording: bool,
                 scrubber_of: Callable[[Iterable[str]], Scrubber] = Scrubber) -> None:
        super().__init__(cassette, scrubber, scrubber_of)
        self.upstreams = upstreams
        self.recording = recording
        self._client: httpx2.AsyncClient | None = None
        self._held: list[tuple[int, Interaction]] = []
        """Replies the agent did not get whole, each with its place in the cassette."""
        self._tasks: set[asyncio.Task[None]] = set()

    async def handle(self, request: ProxyRequest) -> ProxyResponse:
        if self._closed:
            return refused(403, "pytest-toolbench: this agent's case is over (its stage ran"
                                " past its time limit)", request.family.error_shape)
        self._begin(request)
        injection = self._decide(request)
        if injection is not None and injection.fault.kind in ANSWERED:
            return self._answer_fault(request, injection)  # the service never sees it
        upstream = self._upstream(request)
        if upstream.pacer is not None:
            await upstream.pacer.before_request()
        # Sent upstream first: what the exchange keeps of the request is read from it
        # once the reply is over, off the agent's wait.
        exchange = Exchange(request.api, request.method, "", {})
        started = time.perf_counter()
        where = _where(str(_upstream_url(upstream.base_url, request)))
        try:
            response = await _within(self._send(request, upstream), upstream.limits.deadline_s)
        except (httpx2.HTTPError, httpx2.InvalidURL, OSError, ValueError,
                asyncio.TimeoutError) as error:
            self._note_request(exchange, request)
            exchange.error = (str(deadline_exceeded(upstream.limits.deadline_s, where))
                              if isinstance(error, asyncio.TimeoutError) else
                              f"the proxy's request to {_where(upstream.base_url)} failed:"
                              f" {str(error) or type(error).__name__}")
            exchange.elapsed_ms = (time.perf_counter() - started) * 1000
            self._end(exchange)
            return refused(502, f"pytest-toolbench: {exchange.error}",
                           request.family.error_shape)
        if upstream.pacer is not None:
            upstream.pacer.after_headers(response.status_code, response.headers)
        reader = ReplyReader(request.api, response.status_code,
                             response.headers.get("content-type", ""),
                             response.headers.get("content-encoding", ""), started,
                             upstream.limits, where)
        # Passed on as they came, compressed or not (identity was asked for; a server
        # that compresses anyway is inflated by the agent's own client); the proxy frames
        # the body itself.
        headers = [(name, value) for name, value in response.headers.multi_items()
                   if name.lower() != "content-length"]
        reading = _Reading()
        relayed = ProxyResponse(response.status_code, headers,
                                self._relay(response, reader, exchange, reading),
                                lambda: self._settle(exchange, reader, request, response,
                                                     reading))
        if injection is None:
            return relayed
        return await faulted(relayed, injection, exchange, request.api)

    def _upstream(self, request: ProxyRequest) -> Upstream:
        return self.upstreams[request.api or request.family.default_api]

    async def _send(self, request: ProxyRequest, upstream: Upstream) -> httpx2.Response:
        if self._client is None:
            self._client = httpx2.AsyncClient(timeout=httpx2.Timeout(upstream.timeout_s),
                                              verify=shared_ssl_context())
        url = _upstream_url(upstream.base_url, request)
        sent = self._client.build_request(request.method, url,
                                          headers=_upstream_headers(request, upstream),
                                          content=request.body)
        return await self._client.send(sent, stream=True)

    async def _relay(self, response: httpx2.Response, reader: ReplyReader,
                     exchange: Exchange, reading: _Reading) -> AsyncIterator[bytes]:
        """The response's bytes as they arrive, each read on the way (the reply is read
        whole and recorded by ``_settle`` once its end has been sent to the agent), within
        the reply's limits: past one, the agent's connection is cut (``_LimitReached``).
        A recording reads the rest of a reply a fault kept from the agent all the same."""
        limits = reader.limits
        chunks = response.aiter_raw()
        closes = True
        try:
            while True:
                left = limits.deadline_s - (time.perf_counter() - reader.started)
                try:
                    chunk = await _within(chunks.__anext__(), left)
                except StopAsyncIteration:
                    reading.whole = True
                    break
                except asyncio.TimeoutError:
                    exchange.error = str(deadline_exceeded(limits.deadline_s, reader.where))
                    raise _LimitReached(exchange.error) from None
                try:
                    yield chunk
                finally:  # read once it is on its way to the agent
                    reader.feed(chunk)
                if reader.exceeded is not None:
                    exchange.error = str(reader.exceeded)
                    raise _LimitReached(exchange.error)
        except httpx2.HTTPError as error:
            exchange.error = f"the upstream reply broke off: {str(error) or type(error).__name__}"
        except GeneratorExit:  # the agent reads no more of it: a fault cut it, or it left
            if self.recording and exchange.injection is not None:
                closes = False
                reading.rest = self._spawn(self._read_rest(chunks, response, reader, reading))
            raise
        finally:
            if closes:
                await response.aclose()

    async def _read_rest(self, chunks: AsyncGenerator[bytes, None], response: httpx2.Response,
                         reader: ReplyReader, reading: _Reading) -> None:
        """The rest of a reply the agent no longer reads, read as it comes, within the
        reply's limits and ``_REST_S``; ``reading.whole`` once its end came."""
        until = time.perf_counter() + _REST_S
        try:
            while reader.exceeded is None:
                left = min(reader.limits.deadline_s - (time.perf_counter() - reader.started),
                           until - time.perf_counter())
                try:
                    chunk = await _within(chunks.__anext__(), left)
                except StopAsyncIteration:
                    reading.whole = True
                    return
                reader.feed(chunk)
        except (httpx2.HTTPError, OSError, asyncio.TimeoutError):
            pass  # not read whole: not kept (the agent got no whole reply either)
        finally:
            await response.aclose()

    def _spawn(self, work: Coroutine[Any, Any, None]) -> asyncio.Task[None]:
        task = asyncio.ensure_future(work)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    def _note_request(self, exchange: Exchange, request: ProxyRequest) -> None:
        exchange.path = self._shown_path(request)
        exchange.request = self._request_body(request)

    def _settle(self, exchange: Exchange, reader: ReplyReader, request: ProxyRequest,
                response: httpx2.Response, reading: _Reading) -> None:
        rest = reading.rest
        if rest is not None and not rest.done():  # settled once the rest is read
            rest.add_done_callback(
                lambda _: self._settle(exchange, reader, request, response, reading))
            return
        if not response.is_closed:  # the agent left before any of it was sent
            self._spawn(response.aclose())
        self._note_request(exchange, request)
        reply, interaction = reader.finish()
        if reader.exceeded is not None:
            exchange.error = exchange.error or str(reader.exceeded)
        exchange.streamed = reader.streamed
        exchange.elapsed_ms = interaction.elapsed_ms
        scrubber = self._scrubber_for(request)
        exchange.reply = None if reply is None else scrubber.data(reply)
        pacer = self._upstream(request).pacer
        if pacer is not None and reply is not None:
            pacer.after_reply(reply)  # its tokens, for --toolbench-tpm
        interaction.request, interaction.path = exchange.request, exchange.path
        interaction.method = exchange.method
        interaction = scrubber.interaction(interaction)
        if exchange.error is None:
            exchange.interaction = interaction
            if self.recording:
                self._keep(interaction, exchange.delivered, reading.whole)
        self._end(exchange)

    def _keep(self, interaction: Interaction, delivered: bool, whole: bool) -> None:
        """Record the exchange: in the cassette if the agent got its reply whole; held
        (``keep_held``) if a fault kept part of it from the agent but the service sent it
        whole; else not at all."""
        with self._lock:
            if delivered:
                self.cassette.interactions.append(interaction)
            elif whole:
                self._held.append((len(self.cassette.interactions), interaction))

    def keep_held(self) -> None:
        """Put in the cassette, where each came, the replies a fault kept from the agent
        whose request it never sent again (it gave up on them), one for each request: a
        replay answers it from them and applies the fault again. One it retried is left
        out: its retry's exchange stands for it, and a replay cuts that one first."""
        with self._lock:
            kept = self.cassette.interactions
            for index, interaction in reversed(self._held):
                if not any(_same_request(interaction, other) for other in kept):
                    kept.insert(index, interaction)
            self._held.clear()

    async def aclose(self) -> None:
        if self._client is not None:
            await self._client.aclose()


def _same_request(one: Interaction, other: Interaction) -> bool:
    return (one.method, one.path, one.request) == (other.method, other.path, other.request)


class _LimitReached(TransportError):
    """A reply went past one of its limits: the proxy cuts the agent's connection."""


def _upstream_url(base_url: str, request: ProxyRequest) -> httpx2.URL:
    """The request's URL upstream: the path below the family's base URL, below the API's
    base URL; an SDK that adds its own API version (``/v1/messages``,
    ``/v1beta/models/...``) has it replaced by the base URL's. Only the path is the
    request's: whatever it holds (``@host``, ``//user@host``), the scheme, host and port
    are the base URL's."""
    below = request.below
    if not request.family.base_suffix:
        below = _VERSION.sub("", below, count=1)
    base = httpx2.URL(base_url)
    tail = below if not below or below.startswith("/") else f"/{below}"
    base_path, _, base_query = base.raw_path.partition(b"?")
    query = b"&".join(part for part in (base_query, _quoted(request.query)) if part)
    return base.copy_with(raw_path=base_path.rstrip(b"/") + _quoted(tail)
                          + (b"?" + query if query else b""))


def _quoted(text: str) -> bytes:
    """``text`` as the bytes of a URL's path or query: what is not ASCII percent-encoded,
    the rest (escapes included) as it came."""
    return quote(text, safe="".join(map(chr, range(33, 127)))).encode("ascii")


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
