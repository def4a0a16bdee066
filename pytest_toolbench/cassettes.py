"""Cassettes: one YAML file per case and model, recorded live and replayed offline.

Replay plugs in below the client as ``httpx.MockTransport(router.async_handler)`` with a
respx router, so the client, the SSE decoder and the executor run exactly as they do live.
The cassette a request belongs to is the one active in the running case's context
(a ``ContextVar``), which lets one shared client serve many concurrent cases.

Never stored: headers of any kind (so no Authorization, cookies or other credentials).
What a cassette holds was scrubbed of the endpoint's credentials when it was recorded
(``scrubbing.py``): saving writes it as it is.
"""

from __future__ import annotations

import asyncio
import contextvars
import difflib
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import respx
import yaml

from .atomic import write_atomic
from .cassette_reader import read_interactions
from .models.records import Interaction, StreamEvent
from .scrubbing import Scrubber
from .transport.errors import ReplayError

try:
    from yaml import CSafeDumper as _Dumper
except ImportError:  # pragma: no cover - depends on how PyYAML was built
    from yaml import SafeDumper as _Dumper  # type: ignore[assignment]

FORMAT_VERSION = 2
"""2: JSON bodies as pretty-printed JSON text in YAML block scalars (1: as YAML mappings)."""


class _JsonText(str):
    """JSON text written as a YAML block scalar: one line per JSON line, diffable, and one
    scalar to parse instead of one per value (YAML's scalar resolution is the slow part)."""


class _CassetteDumper(_Dumper):
    pass


def _represent_json_text(dumper: _CassetteDumper, text: _JsonText) -> yaml.Node:
    return dumper.represent_scalar("tag:yaml.org,2002:str", str(text), style="|")


_CassetteDumper.add_representer(_JsonText, _represent_json_text)


@dataclass
class Cassette:
    """The recorded interactions of one case against one model, in request order."""

    path: Path
    interactions: list[Interaction] = field(default_factory=list)
    replayed: int = 0
    """How many interactions replay has handed out so far."""
    rerecord_hint: str = ""
    """The command that records this cassette, for messages."""
    scrubber: Scrubber = field(default_factory=Scrubber)
    """The endpoint's credentials, masked in sent requests before they are compared."""
    shown: str = ""
    """The path as messages show it (relative to where pytest was started)."""

    def __post_init__(self) -> None:
        self.shown = self.shown or str(self.path)

    @classmethod
    def load(cls, path: Path, rerecord_hint: str = "", shown: str = "") -> Cassette:
        """Read the cassette at ``path``; raise ReplayError saying why it cannot be replayed."""
        try:
            interactions = read_interactions(path.read_text(encoding="utf-8"), FORMAT_VERSION)
        except OSError as exc:
            raise ReplayError(f"cassette unreadable: {shown or path}: {exc.strerror or exc};"
                              f" re-record it with: {rerecord_hint}") from None
        except ValueError as exc:  # CassetteUnreadable, or bytes that are not UTF-8
            raise ReplayError(f"cassette unreadable: {shown or path}: {exc}; re-record it with: "
                              f"{rerecord_hint}") from None
        return cls(path, interactions, rerecord_hint=rerecord_hint, shown=shown)

    def next_for(self, request: dict[str, Any]) -> Interaction:
        """The recorded answer to ``request``, which must be the one recorded next."""
        if self.replayed >= len(self.interactions):
            raise ReplayError(
                f"the case sent request {self.replayed + 1}, but {self.shown} holds only "
                f"{len(self.interactions)}; re-record with: {self.rerecord_hint}")
        recorded = self.interactions[self.replayed]
        # The recording holds the key scrubbed; so must the request it is compared to, and
        # the diff of a mismatch must not show the key either.
        request = self.scrubber.data(request)
        if _canonical(recorded.request) != _canonical(request):
            raise ReplayError(
                f"request {self.replayed + 1} differs from the one recorded in {self.shown}; "
                f"re-record with: {self.rerecord_hint}\n{request_diff(recorded.request, request)}")
        self.replayed += 1
        return recorded

    def save(self) -> None:
        """Write the cassette atomically (its interactions were scrubbed as recorded)."""
        document = {
            "version": FORMAT_VERSION,
            "interactions": [_plain(interaction) for interaction in self.interactions],
        }
        text = yaml.dump(document, Dumper=_CassetteDumper,
                         sort_keys=False, allow_unicode=True, width=1 << 20)
        header = f"# Recorded by pytest-toolbench. Re-record: {self.rerecord_hint}\n"
        write_atomic(self.path, header + text)


ACTIVE: contextvars.ContextVar[Cassette | None] = contextvars.ContextVar(
    "toolbench_cassette", default=None)


def replay_transport(speed: float = 0.0) -> httpx.MockTransport:
    """A transport that answers from the active cassette and never touches the network."""
    router = respx.Router(assert_all_called=False, assert_all_mocked=True)
    router.route(method="POST", path__regex=r"/chat/completions$").mock(
        side_effect=lambda request: _replay(request, speed))

    async def handle(request: httpx.Request) -> httpx.Response:
        try:
            return await router.async_handler(request)
        finally:
            # respx records every call (request and response) for assertions replay never
            # makes: a session would hold every reply it replayed until it ends.
            router.reset()

    return httpx.MockTransport(handle)


def _replay(request: httpx.Request, speed: float) -> httpx.Response:
    cassette = ACTIVE.get()
    if cassette is None:
        raise ReplayError("no cassette is active for this request")
    try:
        body = json.loads(request.content)
    except ValueError:
        raise ReplayError("the request body is not JSON") from None
    recorded = cassette.next_for(body)
    headers = {"content-type": recorded.content_type} if recorded.content_type else {}
    if recorded.events is not None:
        return httpx.Response(recorded.status, headers=headers,
                              stream=_EventStream(recorded.events, speed))
    content = (recorded.body if isinstance(recorded.body, str)
               else json.dumps(recorded.body)).encode()
    return httpx.Response(recorded.status, headers=headers,
                          stream=_EventStream([], speed, content, recorded.elapsed_ms))


class _EventStream(httpx.AsyncByteStream):
    """Re-sends recorded SSE events one network chunk each, optionally with their timing."""

    def __init__(self, events: list[StreamEvent], speed: float, body: bytes = b"",
                 elapsed_ms: float = 0.0) -> None:
        self.events, self.speed, self.body, self.elapsed_ms = events, speed, body, elapsed_ms

    async def __aiter__(self) -> AsyncIterator[bytes]:
        clock = 0.0
        for event in self.events:
            clock = await self._wait_until(clock, event.offset_ms)
            yield _sse_bytes(event)
        if self.body:
            await self._wait_until(0.0, self.elapsed_ms)
            yield self.body

    async def _wait_until(self, clock: float, offset_ms: float) -> float:
        if self.speed > 0 and offset_ms > clock:
            await asyncio.sleep((offset_ms - clock) / 1000 / self.speed)
        return max(clock, offset_ms)


def _sse_bytes(event: StreamEvent) -> bytes:
    lines = [f"event: {event.event}"] if event.event != "message" else []
    lines.extend(f"data: {line}" for line in event.data.split("\n"))
    return ("\n".join(lines) + "\n\n").encode()


def request_diff(recorded: dict[str, Any], sent: dict[str, Any]) -> str:
    """A unified diff of two request bodies, keys sorted, for replay mismatches."""
    before = json.dumps(recorded, indent=2, sort_keys=True).splitlines()
    after = json.dumps(sent, indent=2, sort_keys=True).splitlines()
    return "\n".join(difflib.unified_diff(before, after, "recorded request", "sent request",
                                          lineterm=""))


def _canonical(body: dict[str, Any]) -> str:
    return json.dumps(body, sort_keys=True)


def _plain(interaction: Interaction) -> dict[str, Any]:
    response: dict[str, Any] = {"status": interaction.status,
                                "content_type": interaction.content_type,
                                "elapsed_ms": interaction.elapsed_ms}
    if interaction.events is not None:
        response["events"] = [_plain_event(event) for event in interaction.events]
    elif isinstance(interaction.body, str):
        response["text"] = interaction.body
    else:
        response["json"] = _json_text(interaction.body)
    return {
        "request": {"method": interaction.method, "path": interaction.path,
                    "json": _json_text(interaction.request)},
        "response": response,
    }


def _json_text(value: Any) -> _JsonText:
    return _JsonText(json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False))


def _plain_event(event: StreamEvent) -> dict[str, Any]:
    plain: dict[str, Any] = {"at_ms": event.offset_ms, "data": event.data}
    if event.event != "message":
        plain["event"] = event.event
    return plain
