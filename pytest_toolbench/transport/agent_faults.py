"""Faults injected into an agent's exchanges, at the proxy: the one place its requests are
answered.

A tap asks the stage's ``FaultPlan`` about each request before it forwards or replays it.
A ``status`` or ``disconnect`` fault the tap answers itself (``Tap._answer_fault``): the
request reaches neither the service nor the cassette. Any other fault wraps the real
reply, live or replayed (``faulted``): held back, slowed, cut, or changed in its API's
own shape (``reshape.py``, shared with the plugin's own client).

A reply the agent did not get whole (cut, or abandoned during a stall) uses up no recorded
exchange in replay, so a case recorded without faults replays with them: the agent's retry
sends the same body again and is answered from it. A recording keeps such a reply whole
only when the agent never asks again (``agent_forward.py``): its retry's exchange stands
for it otherwise. Both depend on ``_chunks`` closing its source when the cut comes and on
``faulted`` holding the reply back before it returns.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import AsyncIterator

from ..faults import Injection
from .agent_tap import Exchange
from .proxy import HangUp, ProxyResponse
from .reshape import CutShort, changes_length, held_s, reshaped


async def faulted(response: ProxyResponse, injection: Injection, exchange: Exchange,
                  api: str | None) -> ProxyResponse:
    """``response`` (the real reply, live or replayed) as the fault has the agent get it:
    after its stall or first-byte delay, then its chunks slowed, cut or changed."""
    fault = injection.fault
    exchange.injection, exchange.delivered = injection, False
    wait_s = held_s(fault)
    if wait_s:
        await asyncio.sleep(wait_s)
    content_type = next((value for name, value in response.headers
                         if name.lower() == "content-type"), "")
    streamed = content_type.startswith("text/event-stream")
    chunks = _chunks(response.chunks, injection, exchange, streamed, api)
    headers = response.headers
    if changes_length(fault):
        headers = [(name, value) for name, value in headers
                   if name.lower() not in ("content-length", "content-encoding")]
    return dataclasses.replace(response, headers=headers, chunks=chunks)


async def _chunks(source: AsyncIterator[bytes] | bytes, injection: Injection,
                  exchange: Exchange, streamed: bool, api: str | None) -> AsyncIterator[bytes]:
    try:
        async for piece in reshaped(_whole(source), injection.fault, streamed, api):
            yield piece
        exchange.delivered = True
    except CutShort:
        raise HangUp from None
    finally:
        if not isinstance(source, bytes):
            await source.aclose()  # type: ignore[attr-defined]


async def _whole(source: AsyncIterator[bytes] | bytes) -> AsyncIterator[bytes]:
    if isinstance(source, bytes):
        yield source
        return
    async for chunk in source:
        yield chunk
