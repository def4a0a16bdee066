"""Replay: an agent's requests answered from its case's cassette, never the network.

``ReplayTap`` matches each request on its method, path and canonical body, among
identical requests in recorded order (so concurrent requests replay whatever order they
come in), serves streams in their recorded events, and refuses a request that matches
nothing with a 400 in the API's error shape, naming the difference from the nearest
recorded request.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import time
from collections.abc import AsyncIterator, Callable, Iterable
from typing import Any

from ..faults import ANSWERED
from ..keypaths import format_key_path
from ..records import Interaction
from ..scrubbing import Scrubber
from .agent_faults import faulted
from .agent_tap import Exchange, ReplyReader, Tap
from .cassette import Cassette
from .client import request_content
from .errors import UnsendableRequest
from .limits import ReplyLimits
from .proxy import ProxyRequest, ProxyResponse, refused
from .replay import request_diff, sse_bytes
from .reshape import held_s


class ReplayTap(Tap):
    """Answers each request from the case's cassette; never the network."""

    def __init__(self, cassette: Cassette, scrubber: Scrubber, speed: float = 0.0,
                 scrubber_of: Callable[[Iterable[str]], Scrubber] = Scrubber,
                 limits: ReplyLimits | None = None) -> None:
        super().__init__(cassette, scrubber, scrubber_of)
        self.speed = speed
        self.limits = limits or ReplyLimits()
        """Each replayed reply's size and events are held to them, as when it was
        recorded (a cassette recorded under a larger limit, or edited by hand)."""
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
        injection = self._decide(request)
        if injection is not None and injection.fault.kind in ANSWERED:
            return self._answer_fault(request, injection)  # no recorded exchange used
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
        reader = ReplyReader(recorded.api, recorded.status, recorded.content_type, "", started,
                             self.limits, f"{recorded.path} in {self.cassette.shown}")
        headers = [("content-type", recorded.content_type)] if recorded.content_type else []
        chunks = _recorded_chunks(recorded)
        payload: AsyncIterator[bytes] | bytes
        if recorded.events is None and self.speed <= 0:  # whole, at once: one write
            payload = chunks[0][1]
            reader.feed(payload)
            if reader.exceeded is not None:
                exchange.error = str(reader.exceeded)
                self._end(exchange)
                return refused(502, f"pytest-toolbench replay: {exchange.error}", shape)
        else:
            payload = self._replayed(chunks, reader)
        response = ProxyResponse(recorded.status, headers, payload,
                                 lambda: self._settle(found, reader, exchange))
        if injection is None:
            return response
        held = held_s(injection.fault) > 0
        if held:  # the agent may give up meanwhile: its retry is answered from it
            with self._lock:
                self._used.discard(found)
        response = await faulted(response, injection, exchange, recorded.api)
        if held:
            with self._lock:
                retried = found in self._used
                self._used.add(found)
            if retried:  # the retry has it: sent here too (to no one, mostly), kept used
                response = dataclasses.replace(
                    response, after=lambda: self._settle(found, reader, exchange, False))
        return response

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
        said = self._unmatched(exchange)
        injected = self.injected
        if injected is None:
            return said
        return f"{said}\n{injected.before()}"

    def _unmatched(self, exchange: Exchange) -> str:
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
        where = first_difference(nearest.request, exchange.request)
        return (f"the agent's request {request} differs from the one recorded in"
                f" {cassette.shown}, first at {where}{hint}\n"
                f"{request_diff(nearest.request, exchange.request)}")

    async def _replayed(self, chunks: list[tuple[float, bytes]], reader: ReplyReader
                        ) -> AsyncIterator[bytes]:
        for chunk in chunks:
            if self.speed > 0 and chunk[0] > 0:
                await asyncio.sleep(chunk[0] / 1000 / self.speed)
            try:
                yield chunk[1]
            finally:  # read once it is on its way to the agent
                reader.feed(chunk[1])
            if reader.exceeded is not None:  # the agent's connection is cut here
                raise reader.exceeded

    def _settle(self, found: int, reader: ReplyReader, exchange: Exchange,
                release: bool = True) -> None:
        """The reply read whole, once its end has been sent to the agent; a reply the
        agent did not get whole (a fault cut it) leaves its recorded exchange unused, for
        the agent's retry (``release``: unless a retry was answered from it already)."""
        recorded = self._recorded[found]
        if not exchange.delivered and release:
            with self._lock:
                self._used.discard(found)
        reply, replayed = reader.finish()
        if reader.exceeded is not None:
            exchange.error = str(reader.exceeded)
        # Masked as the live reply was: this machine's environment may know more secrets
        # than the recording's did (as a replayed case of the plugin's loop masks them).
        exchange.reply = None if reply is None else self.scrubber.data(reply)
        exchange.streamed = reader.streamed
        exchange.interaction = recorded
        # The replay's own latency, as a replayed case of the plugin's loop shows its own.
        exchange.elapsed_ms = replayed.elapsed_ms
        if reply is not None:
            reply.recorded_latency_ms = recorded.elapsed_ms
        self._end(exchange)

    def unused(self) -> str | None:
        """Why the case fails when recorded exchanges were left unplayed, or None."""
        cassette = self.cassette
        left = len(self._recorded) - len(self._used)
        if not left or self.refusals or self.injected is not None:
            return None  # a faulted run's agent may give up before the recording's end
        sent = len(self._used)
        return (f"the agent sent {sent} request{'' if sent == 1 else 's'}, but"
                f" {cassette.shown} holds {len(self._recorded)}: the agent changed"
                f" since it was recorded; re-record it with: {cassette.rerecord_hint}")


def first_difference(recorded: Any, sent: Any, path: tuple[str | int, ...] = ()) -> str:
    """Where two request bodies first differ, as a key path (``messages[0].content``), with
    the two values when they are short."""
    if isinstance(recorded, dict) and isinstance(sent, dict):
        for key in sorted(set(recorded) | set(sent)):
            if key not in recorded or key not in sent:
                said = "only in the recorded one" if key in recorded else "only in the sent one"
                return f"{format_key_path((*path, key))} ({said})"
            if recorded[key] != sent[key]:
                return first_difference(recorded[key], sent[key], (*path, key))
    elif isinstance(recorded, list) and isinstance(sent, list):
        for index, (before, after) in enumerate(zip(recorded, sent)):
            if before != after:
                return first_difference(before, after, (*path, index))
        if len(recorded) != len(sent):
            return (f"{format_key_path(path) or 'the body'} ({len(recorded)} items recorded,"
                    f" {len(sent)} sent)")
    shown = (json.dumps(recorded, ensure_ascii=False), json.dumps(sent, ensure_ascii=False))
    values = f": recorded {shown[0]}, sent {shown[1]}" if max(map(len, shown)) <= 80 else ""
    return f"{format_key_path(path) or 'the body'}{values}"


def _recorded_chunks(recorded: Interaction) -> list[tuple[float, bytes]]:
    """(wait in ms since the previous chunk, bytes): each event a chunk of its own."""
    if recorded.events is not None:
        chunks, clock = [], 0.0
        for event in recorded.events:
            chunks.append((max(0.0, event.offset_ms - clock), sse_bytes(event)))
            clock = max(clock, event.offset_ms)
        return chunks
    if recorded.body_json is not None:
        body = recorded.body_json
    elif isinstance(recorded.body, str):
        body = recorded.body
    else:
        body = json.dumps(recorded.body)
    return [(recorded.elapsed_ms, body.encode())]


def _canonical(body: dict[str, Any]) -> bytes | None:
    try:
        return request_content(body)
    except UnsendableRequest:
        return None
