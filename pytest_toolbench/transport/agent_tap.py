"""One agent case's side of the proxy: what its two kinds share.

A ``Tap`` is the ``ProxyHandler`` of one case while it runs: ``LiveTap``
(``agent_forward.py``) forwards each request upstream and records it, ``ReplayTap``
(``agent_replay.py``) answers it from the case's cassette. Either way every exchange goes
into ``Tap.exchanges`` in the order it ended, its reply read by the wire reader of the API
its path names (``ReplyReader``), for the stage's checks.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, Final

import httpx2

from ..faults import FaultPlan, Injection
from ..records import Interaction, Reply, StreamEvent, overloaded
from ..scrubbing import Scrubber, mask_urls, sent_secrets
from ..wire import wire_api
from ..wire.base import JSON_ERRORS
from .cassette import Cassette
from .errors import ReplyTooLarge
from .limits import BoundedDecoder, DecodingFailed, ReplyLimits, too_large, too_many_events
from .proxy import HangUp, ProxyRequest, ProxyResponse
from .replay import query_without_credentials
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
    injection: Injection | None = None
    """The fault injected into it (docs/case-format.md#faults), if any."""
    delivered: bool = True
    """Whether the agent got the whole reply (a cut one, or one it gave up waiting for:
    not), so a recording keeps it and a replay counts its recorded exchange as used."""


class Tap:
    """What the two taps share: the log of exchanges and the stage's view of it."""

    def __init__(self, cassette: Cassette, scrubber: Scrubber,
                 scrubber_of: Callable[[Iterable[str]], Scrubber] = Scrubber) -> None:
        self.cassette = cassette
        self.scrubber = scrubber
        """The case's scrubber; it grows by each credential the agent sends."""
        self._scrubber_of = scrubber_of
        """Makes the scrubber of given secrets (the session's, which the logs share)."""
        self.exchanges: list[Exchange] = []
        self._lock = threading.Condition()
        self._in_flight = 0
        self._closed = False
        self.connections: set[int] = set()
        """The proxy connections that carried this case's requests."""
        self.abandoned = False
        self.run: str | None = None
        """Its case run's id on the proxy, which the URLs its agent is given carry."""
        """Its agent was left running past its time limit: what it recorded is not whole."""
        self.plan: FaultPlan | None = None
        """The faults of the stage attempt under way; None: none."""
        self.injected: Injection | None = None
        """The last fault injected in this case, for a request that no longer matches."""

    def faults(self, plan: FaultPlan | None) -> None:
        """From now on, ``plan`` decides which of the agent's requests get a fault."""
        self.plan = plan

    def _decide(self, request: ProxyRequest) -> Injection | None:
        plan = self.plan
        injection = plan.decide(request.api) if plan is not None else None
        if injection is not None:
            self.injected = injection
        return injection

    def _answer_fault(self, request: ProxyRequest, injection: Injection) -> ProxyResponse:
        """The plugin's own answer to a request a ``status`` or ``disconnect`` fault
        selected (never sent upstream, never matched against the cassette): the API's
        error in its own shape and headers; HangUp: no answer at all."""
        assert request.api is not None  # only model API requests are counted
        exchange = Exchange(request.api, request.method, self._shown_path(request),
                            self._request_body(request), injection=injection)
        fault = injection.fault
        if fault.status is None:
            exchange.delivered = False
            self._end(exchange)
            raise HangUp
        api = wire_api(request.api)
        body, headers = api.fault_error(fault.status, fault.retry_after_s)
        raw = json.dumps(body).encode()
        exchange.reply = api.read_body(fault.status, raw, "application/json")
        self._end(exchange)
        return ProxyResponse(fault.status, headers, raw)

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

    def whole(self, failed: bool) -> bool:
        """Whether what the case recorded may replace its cassette, by the rule of the
        plugin's own loop (``CaseResult.endpoint_failed``): every request got its answer
        (none failed upstream, none was still under way at the end, the agent was not
        abandoned), and a case that ``failed`` met no overloaded or broken server."""
        with self._lock:
            return not (self.abandoned or self._in_flight or any(
                exchange.error is not None or (
                    failed and exchange.interaction is not None
                    and overloaded(exchange.interaction.status))
                for exchange in self.exchanges))

    def mark(self) -> int:
        with self._lock:
            return len(self.exchanges)

    def _begin(self, request: ProxyRequest) -> None:
        self._scrubber_for(request)  # its credentials are secrets before any reply comes
        with self._lock:
            self._in_flight += 1
            self.connections.add(request.connection)

    def _end(self, exchange: Exchange) -> None:
        if exchange.error is not None:  # an HTTP library's message may hold a URL's key
            exchange.error = mask_urls(self.scrubber.text(exchange.error))
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
        """The case's scrubber, from now on masking the credentials this request carries
        too: its credential headers' values and its credential query values (Gemini's
        ``?key=``), wherever they appear (an echo in a reply, the agent's state)."""
        return self.learn(value for value in sent_secrets(request.headers, request.query)
                          if PLACEHOLDER_KEY not in value)

    def learn(self, secrets: Iterable[str]) -> Scrubber:
        """The case's scrubber, from now on masking ``secrets`` too."""
        found = set(secrets)
        with self._lock:
            if not set(self.scrubber.secrets).issuperset(found):
                self.scrubber = self._scrubber_of((*self.scrubber.secrets, *found))
            return self.scrubber

    def _shown_path(self, request: ProxyRequest) -> str:
        """The path as an exchange keeps it: credential query values and secrets masked."""
        path = self.scrubber.text(request.path.partition("?")[0])
        if not request.query:
            return path
        query = query_without_credentials(httpx2.QueryParams(request.query))
        return f"{path}?{self.scrubber.text(query)}"


class ReplyReader:
    """Reads one response as it passes through: its SSE events with their offsets, or its
    whole body; then the reply, by the API's wire reader.

    It counts the reply against ``limits`` as the plugin's own client does (its size once
    ``Content-Encoding`` is undone, its events) and keeps nothing past them: ``exceeded``
    then says which, in the client's words, ``where`` naming the reply's source."""

    def __init__(self, api: str | None, status: int, content_type: str, encoding: str,
                 started: float, limits: ReplyLimits | None = None, where: str = "") -> None:
        self.api, self.status, self.content_type = api, status, content_type
        self.started = started
        self.streamed = 200 <= status < 300 and content_type.startswith("text/event-stream")
        self._encoding = encoding
        self._decoder = BoundedDecoder(encoding)
        self._sse = SSEDecoder()
        self._events: list[StreamEvent] = []
        self._reader = wire_api(api).stream_reader() if api and self.streamed else None
        self._body: list[bytes] = []
        self.problem: str | None = None
        self.limits, self.where = limits or ReplyLimits(), where
        self.exceeded: ReplyTooLarge | None = None
        """The limit the reply went past; nothing of it past the limit is kept."""
        self._size = 0

    def feed(self, chunk: bytes) -> None:
        if self.problem is not None or self.exceeded is not None:
            return
        try:
            for piece in self._decoder.decode(chunk):
                self._take(piece)
                if self.exceeded is not None:
                    return
        except (DecodingFailed, SSETooLarge) as error:
            self.problem = str(error)

    def _take(self, piece: bytes) -> None:
        self._size += len(piece)
        if self._size > self.limits.max_bytes:
            self.exceeded = too_large("stream" if self.streamed else "body",
                                      self.limits.max_bytes, self.where, self._encoding)
            return
        if not self.streamed:
            self._body.append(piece)
            return
        offset = round((time.perf_counter() - self.started) * 1000, 1)
        for event in self._sse.feed(piece):
            self._events.append(StreamEvent(event.data, offset, event.event))
            if self._reader is not None:
                self._reader.add(event, offset)
        if len(self._events) > self.limits.max_events:
            self.exceeded = too_many_events(self.limits.max_events, self.where)

    def finish(self) -> tuple[Reply | None, Interaction]:
        """The reply (None for a path that is no model API, or past a limit), and the
        exchange as a cassette keeps it (its request left empty for the tap to fill in)."""
        offset = round((time.perf_counter() - self.started) * 1000, 1)
        try:
            for piece in self._decoder.flush() if self.exceeded is None else ():
                self._take(piece)
        except (DecodingFailed, SSETooLarge) as error:
            self.problem = self.problem or str(error)
        if self.exceeded is not None:  # what was read of it is let go: the limit says why
            self._events, self._body = [], []
            return None, Interaction(request={}, status=self.status,
                                     content_type=self.content_type, elapsed_ms=offset,
                                     api=self.api)
        if self.streamed:
            for event in self._sse.close():
                self._events.append(StreamEvent(event.data, offset, event.event))
                if self._reader is not None:
                    self._reader.add(event, offset)
            if self._sse.cut is not None:  # kept, so a replay ends inside it too
                self._events.append(StreamEvent(self._sse.cut, offset, cut=True))
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
