"""Replay: one case's requests answered from its cassette, never from the network.

Each replayed case gets a ``Replayer`` over its own cassette and a client of its own whose
transport is ``httpx2.MockTransport(replayer.handle)``: below that, the client, the SSE
decoder and the executor run exactly as they do live. Nothing is shared between cases, so
concurrent cases cannot answer each other's requests.
"""

from __future__ import annotations

import asyncio
import difflib
import json
from collections.abc import AsyncIterator
from typing import Any

import httpx2

from ..cuts import cut
from ..defaults import DIFF_LINE_CHARS
from ..records import Interaction, StreamEvent
from ..scrubbing import Scrubber, mask_urls
from .cassette import Cassette
from .client import RECORDED_LATENCY, RECORDED_TIMES, request_content
from .errors import ReplayError, UnsendableRequest

_WHY_DIFFERENT = {
    "judge": "the recorded verdict was for another answer (the conversation or the criterion"
             " changed since)",
    "simulator": "the recorded simulated user answered another conversation (the agent"
                 " said something else)",
}
"""What a request of a second model that differs from its recording means."""


class Replayer:
    """Answers the requests of one case from one cassette, in the order they were recorded:
    those of one ``role`` (the model's, the judge's or the simulator's exchanges), each role
    answered by a replayer of its own over the same cassette."""

    def __init__(self, cassette: Cassette, scrubber: Scrubber | None = None,
                 speed: float = 0.0, role: str = "model") -> None:
        self.cassette = cassette
        self.role = role
        self.interactions = [interaction for interaction in cassette.interactions
                             if interaction.role == role]
        """The recorded exchanges this replayer answers with, in order."""
        self.what = "request" if role == "model" else f"{role} request"
        self.scrubber = scrubber or Scrubber()
        """The endpoint's credentials, masked in sent requests before they are compared."""
        self.speed = speed
        """0: answer at once; 1: with the recorded timing (2: twice as fast...)."""
        self.replayed = 0
        """How many recorded answers were handed out."""
        self.refused = False
        """A request was refused (different, or one too many): the case already fails."""
        self.passed_over = 0
        """Recorded exchanges skipped to answer a request from a later one (``handle``)."""

    def transport(self) -> httpx2.MockTransport:
        return httpx2.MockTransport(self.handle)

    async def handle(self, request: httpx2.Request) -> httpx2.Response:
        """The recorded answer to ``request``, re-sent as the server sent it: the next
        recorded exchange's, or a later one's that the request is exactly (a run a fault
        ended early left the exchanges after it unplayed: the next run's requests are
        answered from its own); the exchanges passed over count as unplayed."""
        recorded = self._next()
        later = None if self._is(recorded, request) else self._later(request)
        if later is not None:
            self.passed_over += later - self.replayed
            self.replayed, recorded = later, self.interactions[later]
        else:
            self._check_route(recorded, request)
            self._check_request(recorded, request.content)
        self.replayed += 1
        return self._response(recorded)

    def _is(self, recorded: Interaction, request: httpx2.Request) -> bool:
        """Whether ``request`` is ``recorded``'s: its route and its body."""
        return _same_route(recorded, request) and self._same_body(recorded, request.content)

    def _same_body(self, recorded: Interaction, content: bytes) -> bool:
        """Whether the request ``content`` is ``recorded``'s body, as JSON values (the
        recording may order its keys and lay its JSON out any way).

        Both are compared as the client spells a body (``request_content``); the client
        sent exactly that, so a request spelled as the recorded one needs no reading."""
        expected = _content_of(recorded.request)
        if content == expected:
            return True
        sent = self._sent(content)
        return sent is not _NOT_JSON and _content_of(sent) == expected

    def _sent(self, content: bytes) -> Any:
        """The sent body read, its credentials masked as the recording holds them (and so
        a mismatch's diff shows none); ``_NOT_JSON`` when it is not JSON."""
        try:
            return self.scrubber.data(json.loads(content))
        except ValueError:
            return _NOT_JSON

    def _later(self, request: httpx2.Request) -> int | None:
        """The first recorded exchange after the next one that ``request`` is."""
        return next((index for index in range(self.replayed + 1, len(self.interactions))
                     if self._is(self.interactions[index], request)), None)

    def _next(self) -> Interaction:
        """The next recorded exchange; a request past the last one is refused."""
        cassette = self.cassette
        if self.replayed >= len(self.interactions):
            raise self._refuse(
                f"the case sent {self.what} {self.replayed + 1}, but {cassette.shown} holds"
                f" only {len(self.interactions)}; re-record with: {cassette.rerecord_hint}")
        return self.interactions[self.replayed]

    def _check_route(self, recorded: Interaction, request: httpx2.Request) -> None:
        """Refuse a request that goes elsewhere than the recorded one: another method, or a
        path (below the base URL) and query the recording does not end with; an API whose
        path holds the model or the streaming choice (Gemini's) is matched on them too."""
        if _same_route(recorded, request):
            return
        sent = httpx2.QueryParams(request.url.query)
        shown = request.url.copy_with(query=None).path + (
            f"?{query_without_credentials(sent)}" if sent else "")
        raise self._refuse(f"{self.cassette.shown} holds the {recorded.api or self.cassette.api}"
                           f" API's {self.what} {self.replayed + 1} to {recorded.method} ...{recorded.path},"
                           f" not {request.method} {shown}; re-record with:"
                           f" {self.cassette.rerecord_hint}")

    def _check_request(self, recorded: Interaction, content: bytes) -> None:
        """Refuse the request ``content`` unless its body is ``recorded``'s
        (``_same_body``), showing how it differs."""
        if self._same_body(recorded, content):
            return
        sent = self._sent(content)
        if sent is _NOT_JSON:
            raise self._refuse("the request body is not JSON")
        cassette = self.cassette
        why = f": {_WHY_DIFFERENT[self.role]}" if self.role in _WHY_DIFFERENT else ""
        raise self._refuse(
            f"{self.what} {self.replayed + 1} differs from the one recorded in"
            f" {cassette.shown}{why}; re-record with: {cassette.rerecord_hint}\n"
            f"{request_diff(recorded.request, sent)}")

    def unused(self) -> str | None:
        """Why the case fails when it is over with recorded answers left unused (it changed
        since it was recorded), or None. A refused request already said what went wrong."""
        cassette = self.cassette
        played = self.replayed - self.passed_over
        if self.refused or played >= len(self.interactions):
            return None
        sent = f"{played} {self.what}{'' if played == 1 else 's'}"
        return (f"the case sent {sent}, but {cassette.shown} holds"
                f" {len(self.interactions)}: the case changed since it was recorded;"
                f" re-record it with: {cassette.rerecord_hint}")

    def _refuse(self, message: str) -> ReplayError:
        self.refused = True
        return ReplayError(message)

    def _response(self, recorded: Interaction) -> httpx2.Response:
        headers = {"content-type": recorded.content_type} if recorded.content_type else {}
        extensions: dict[str, Any] = {RECORDED_LATENCY: recorded.elapsed_ms}
        if recorded.events is not None:
            extensions[RECORDED_TIMES] = [event.offset_ms for event in recorded.events]
            return httpx2.Response(recorded.status, headers=headers, extensions=extensions,
                                  stream=_EventStream(recorded.events, self.speed))
        if recorded.body_json is not None:
            content = recorded.body_json.encode()
        else:
            content = (recorded.body if isinstance(recorded.body, str)
                       else json.dumps(recorded.body)).encode()
        return httpx2.Response(recorded.status, headers=headers, extensions=extensions,
                              stream=_EventStream([], self.speed, content, recorded.elapsed_ms))


class _EventStream(httpx2.AsyncByteStream):
    """Re-sends recorded SSE events one network chunk each with their timing, or, replayed
    instantly, all in one chunk: they are all there at once, as a fast server's are."""

    def __init__(self, events: list[StreamEvent], speed: float, body: bytes = b"",
                 elapsed_ms: float = 0.0) -> None:
        self.events, self.speed, self.body, self.elapsed_ms = events, speed, body, elapsed_ms

    async def __aiter__(self) -> AsyncIterator[bytes]:
        if self.speed <= 0:
            whole = b"".join(sse_bytes(event) for event in self.events) + self.body
            if whole:
                yield whole
            return
        clock = 0.0
        for event in self.events:
            clock = await self._wait_until(clock, event.offset_ms)
            yield sse_bytes(event)
        if self.body:
            await self._wait_until(0.0, self.elapsed_ms)
            yield self.body

    async def _wait_until(self, clock: float, offset_ms: float) -> float:
        if self.speed > 0 and offset_ms > clock:
            await asyncio.sleep((offset_ms - clock) / 1000 / self.speed)
        return max(clock, offset_ms)


_NOT_JSON = object()
"""What ``Replayer._sent`` reads from a body that is not JSON."""


def _same_route(recorded: Interaction, request: httpx2.Request) -> bool:
    """Whether ``request`` goes where ``recorded`` went: its method, and a path (below the
    base URL) and query the recording ends with."""
    path, _, query = recorded.path.partition("?")
    return (request.method == recorded.method and request.url.path.endswith(path)
            and (not query or _has_query(request, query)))


def _has_query(request: httpx2.Request, query: str) -> bool:
    """Whether ``request`` sends every parameter of the recorded ``query`` as recorded (a
    recording without a query, as most are, needs neither parsed)."""
    sent = httpx2.QueryParams(request.url.query)
    return all(sent.get(key) == value for key, value in httpx2.QueryParams(query).items())


def sse_bytes(event: StreamEvent) -> bytes:
    """A recorded event as a server sends it; one the stream ended inside as it came, with
    no blank line after it."""
    if event.cut:
        return event.data.encode()
    lines = [f"event: {event.event}"] if event.event != "message" else []
    lines.extend(f"data: {line}" for line in event.data.split("\n"))
    return ("\n".join(lines) + "\n\n").encode()


def query_without_credentials(query: httpx2.QueryParams) -> str:
    """A query string for messages, its credential values masked (``?key=`` is one way
    to send Gemini's key)."""
    return mask_urls(f"?{query}")[1:]


def request_diff(recorded: dict[str, Any], sent: dict[str, Any]) -> str:
    """A unified diff of two request bodies, keys sorted, for replay mismatches; a line
    past ``DIFF_LINE_CHARS`` is cut (a recorded tool result may be megabytes on one line)."""
    before = json.dumps(recorded, indent=2, sort_keys=True).splitlines()
    after = json.dumps(sent, indent=2, sort_keys=True).splitlines()
    return "\n".join(cut(line, DIFF_LINE_CHARS) for line in difflib.unified_diff(
        before, after, "recorded request", "sent request", lineterm=""))


def _content_of(body: Any) -> bytes | None:
    """The bytes the client sends for ``body`` (None: it would send none, as it holds NaN;
    what the client sent never does)."""
    try:
        return request_content(body)
    except UnsendableRequest:
        return None
