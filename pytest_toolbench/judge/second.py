"""A second model: the judge or the simulated user, asked by the plugin itself.

It goes through the same client as the model under test (a live endpoint's, with its rate
limits and breaker, or a replay of the case's cassette) and its request is built by its own
API's adapter. Recording, each exchange goes into the case's cassette marked as its
``role``'s, with its API when that is not the cassette's.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace

from ..records import CaseResult, Interaction, Turn
from ..scrubbing import Scrubber
from ..transport.cassette import Cassette
from ..transport.client import ApiClient, InteractionSink
from ..transport.errors import TransportError
from ..wire import RequestParts, WireApi


@dataclass
class SecondModel:
    """Where the requests of one role (``judge``, ``simulator``) of one case go."""

    role: str
    model: str
    wire: WireApi
    client: ApiClient
    cassette_api: str
    """The API the case's cassette holds: an exchange of another is marked with its own."""
    api_key: str | None = None
    sink: InteractionSink | None = None
    """Recording: where its exchanges go (the case's cassette)."""
    scrubber: Scrubber = field(default_factory=Scrubber)

    def parts(self, messages: list[dict[str, str]], params: dict[str, object]) -> RequestParts:
        """A request of this model's, its settings kept to what its API has fields for."""
        return RequestParts(model=self.model, messages=messages,
                            params=self.wire.sampling(params))

    async def ask(self, parts: RequestParts) -> Turn:
        """Send ``parts`` (never streamed); the turn holds the reply or why none came.

        A request past the reply limit (``--toolbench-max-reply-bytes``) is not sent: the
        conversation it carries (the agent's answers, the simulated user's messages) has
        outgrown what any one reply may be, and each later request would resend it."""
        body = self.wire.request(parts)
        size, limit = len(json.dumps(body)), self.client.config.limits.max_bytes
        if size > limit:
            return Turn(request={}, streamed=False, role=self.role, error=(
                f"its request, the conversation so far, is {size:,} bytes, past the reply"
                f" limit of {limit:,} bytes (--toolbench-max-reply-bytes): not sent"))
        turn = Turn(request=body, streamed=False, role=self.role)
        started = time.perf_counter()
        try:
            pending = await self.client.open(
                body, wire=self.wire, stream=False, model=self.model, api_key=self.api_key,
                sink=self._keep if self.sink is not None else None)
            turn.retries = pending.retries
            turn.reply = await pending.read()
        except TransportError as error:
            turn.error = str(error)
            turn.retries = turn.retries or list(error.retries)
        finally:
            turn.elapsed_ms = (time.perf_counter() - started) * 1000
        return self.scrubber.turn(turn)

    def _keep(self, interaction: Interaction) -> None:
        assert self.sink is not None
        api = None if self.wire.name == self.cassette_api else self.wire.name
        self.sink(self.scrubber.interaction(replace(interaction, role=self.role, api=api)))


@dataclass
class RoleModels:
    """A case's second models by role, each on a client of its own when it replays (or
    runs where the shared live clients cannot go), and what their replayers find unused."""

    models: dict[str, SecondModel] = field(default_factory=dict)
    verdicts: list[Callable[[], str | None]] = field(default_factory=list)
    """What each role's replayer finds left unused when the case is over."""
    clients: list[ApiClient] = field(default_factory=list)
    """The clients of their own, closed when the case ends (``aclose``)."""
    rejudged: list[Interaction] | None = None
    """``--toolbench-rejudge --toolbench-record``: the judge's new exchanges, to write into
    the replayed cassette in place of the old ones (``write_verdicts``); None: nothing is
    written."""

    def write_verdicts(self, cassette: Cassette, result: CaseResult) -> None:
        """The judge's new exchanges into ``cassette`` in place of the old, every other
        exchange kept as it was, unless a request of the case found its endpoint failing
        (the old cassette stays, as a recording's does)."""
        if self.rejudged is not None and not result.endpoint_failed:
            cassette.replace_role("judge", self.rejudged)
            cassette.save()

    async def aclose(self) -> None:
        for client in self.clients:
            await client.aclose()
