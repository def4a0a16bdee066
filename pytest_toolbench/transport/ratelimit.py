"""Live requests within a service's rate limits: ``--toolbench-rpm`` / ``--toolbench-tpm``.

One ``RateLimiter`` per endpoint, shared by everything that reaches it live: the cases of
``--toolbench-concurrency`` on their event loop, an agent case's requests on the proxy's
and its judge's on pytest's own (each loop's requests wait in order; the times they
reserve are one account, kept under a thread lock). It paces
requests evenly: with a limit of R requests a minute, each request starts at least 60 / R
s after the one before, so no minute holds more than R. With T tokens a minute, each
request is charged, as it goes, the mean tokens of the replies so far (``usage.
total_tokens``), corrected when its own reply says, and the charge holds the next request
back by tokens x 60 / T s. A reply's tokens are known only once it has come, so the
requests sent before the first reply (up to ``--toolbench-concurrency`` of them) are not
held by tokens. Beyond the limits it was given, it adapts to what the server says:

- a 429's ``retry-after-ms`` or ``retry-after`` (seconds or an HTTP date) holds every
  request to the endpoint until then, not only the one that is retried;
- OpenAI's ``x-ratelimit-remaining-requests`` / ``-tokens`` at 0 hold them until
  ``x-ratelimit-reset-requests`` / ``-tokens`` (``1s``, ``6m0s``, ``20ms``) has passed;
- Anthropic's ``anthropic-ratelimit-{requests,tokens,input-tokens,output-tokens}-remaining``
  at 0 hold them until the matching ``-reset`` (an RFC 3339 time).

``ApiClient`` calls the three methods of ``RequestPacer`` (this module's only seam with
it); the limiter counts requests, tokens and the time requests waited, for the summary.
"""

from __future__ import annotations

import asyncio
import datetime
import email.utils
import math
import re
import threading
import time
import weakref
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Protocol

from ..records import Reply, total_tokens

MAX_PAUSE_S = 120.0
"""The longest a server's header may hold requests (a reset hours away is not waited for:
the request goes, and the server's answer says what it says)."""


class RequestPacer(Protocol):
    """What ``ApiClient`` tells a pacer about each request of its endpoint."""

    async def before_request(self) -> None:
        """Wait until a request may be sent."""

    def after_headers(self, status: int, headers: Mapping[str, str]) -> None:
        """A response's status and headers have arrived."""

    def after_reply(self, reply: Reply) -> None:
        """A reply has been read whole (its usage is known)."""


@dataclass
class LimiterStats:
    requests: int = 0
    tokens: int = 0
    waited_s: float = 0.0

    def add(self, other: LimiterStats) -> None:
        self.requests += other.requests
        self.tokens += other.tokens
        self.waited_s += other.waited_s


class RateLimiter:
    """Keeps one endpoint's requests and tokens a minute under ``rpm`` and ``tpm``."""

    def __init__(self, rpm: float | None, tpm: float | None, *,
                 clock: Callable[[], float] = time.monotonic,
                 sleep: Callable[[float], Awaitable[None]] = asyncio.sleep) -> None:
        self.rpm = rpm
        self.tpm = tpm
        self._clock = clock
        self._sleep = sleep
        self._next_request = 0.0
        """The earliest time the next request may start (by ``rpm``)."""
        self._tokens_free = 0.0
        """The time the tokens already used fit under ``tpm`` again."""
        self._paused_until = 0.0
        """Held by the server's word: a 429's retry-after, a remaining count of 0."""
        self._replies = 0
        """Replies read, whose tokens make the estimate of the next request's."""
        self._queues: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Lock] = (
            weakref.WeakKeyDictionary())
        """Each event loop's requests wait their turn in the order they asked."""
        self._account = threading.Lock()
        """Held while a request reads and reserves the times: loops on other threads."""
        self.stats = LimiterStats()
        self._taken = LimiterStats()

    async def before_request(self) -> None:
        loop = asyncio.get_running_loop()
        queue = self._queues.get(loop)
        if queue is None:
            queue = self._queues[loop] = asyncio.Lock()
        async with queue:
            # Again after each wait: a 429, a header or another loop's request may have
            # moved the time on meanwhile.
            while (wait := self._reserve()) > 0:
                await self._sleep(wait)

    def _reserve(self) -> float:
        """Take the next request's turn if it has come (0), else how long to wait."""
        with self._account:
            now = self._clock()
            wait = self._ready_at() - now
            if wait > 0:
                self.stats.waited_s += wait
                return wait
            if self.rpm:
                self._next_request = now + 60.0 / self.rpm
            self._charge(self._estimate())
            self.stats.requests += 1
            return 0.0

    def _ready_at(self) -> float:
        return max(self._next_request, self._tokens_free, self._paused_until)

    def after_headers(self, status: int, headers: Mapping[str, str]) -> None:
        pauses = [_retry_after(headers) if status == 429 else None,
                  *(_reset_s(headers, name) for name in _exhausted(headers))]
        known = [pause for pause in pauses if pause is not None]
        if known:
            with self._account:
                until = self._clock() + min(max(known), MAX_PAUSE_S)
                self._paused_until = max(self._paused_until, until)

    def after_reply(self, reply: Reply) -> None:
        tokens = total_tokens([reply]) or 0
        with self._account:
            self._charge(tokens - self._estimate())  # its request's charge, corrected
            self.stats.tokens += tokens
            self._replies += 1

    def _estimate(self) -> float:
        """The tokens a request is expected to use: the mean of the replies so far."""
        return self.stats.tokens / self._replies if self._replies else 0.0

    def _charge(self, tokens: float) -> None:
        if self.tpm:
            self._tokens_free = max(self._tokens_free, self._clock()) + tokens * 60.0 / self.tpm

    def take_stats(self) -> LimiterStats:
        """What happened since the last call (each case report carries its part)."""
        with self._account:
            now = LimiterStats(self.stats.requests, self.stats.tokens, self.stats.waited_s)
        delta = LimiterStats(now.requests - self._taken.requests,
                             now.tokens - self._taken.tokens,
                             now.waited_s - self._taken.waited_s)
        self._taken = LimiterStats(now.requests, now.tokens, now.waited_s)
        return delta


# -------------------------------------------------------------------- reading the headers

_OPENAI = ("x-ratelimit-remaining-{}", "x-ratelimit-reset-{}", ("requests", "tokens"))
_ANTHROPIC = ("anthropic-ratelimit-{}-remaining", "anthropic-ratelimit-{}-reset",
              ("requests", "tokens", "input-tokens", "output-tokens"))


def _exhausted(headers: Mapping[str, str]) -> list[str]:
    """The reset headers of every limit whose remaining count is 0."""
    resets = []
    for remaining, reset, kinds in (_OPENAI, _ANTHROPIC):
        for kind in kinds:
            if _number(headers.get(remaining.format(kind))) == 0:
                resets.append(reset.format(kind))
    return resets


def _reset_s(headers: Mapping[str, str], name: str) -> float | None:
    """Seconds until the time a reset header names: a duration (OpenAI: ``1s``,
    ``6m0s``, ``20ms``) or an RFC 3339 time (Anthropic)."""
    value = (headers.get(name) or "").strip()
    if not value:
        return None
    if _DURATION.fullmatch(value):
        return sum(float(amount) * _UNIT_S[unit] for amount, unit in _PART.findall(value))
    try:
        when = datetime.datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=datetime.timezone.utc)
    return max(0.0, (when - datetime.datetime.now(datetime.timezone.utc)).total_seconds())


_PART = re.compile(r"(\d+(?:\.\d+)?)(ms|h|m|s)")
_DURATION = re.compile(r"(?:\d+(?:\.\d+)?(?:ms|h|m|s))+")
_UNIT_S = {"h": 3600.0, "m": 60.0, "s": 1.0, "ms": 0.001}


def _retry_after(headers: Mapping[str, str]) -> float | None:
    """A 429's wait: ``retry-after-ms``, else ``retry-after`` (seconds or an HTTP date)."""
    milliseconds = _number(headers.get("retry-after-ms"))
    if milliseconds is not None:
        return max(0.0, milliseconds / 1000)
    value = headers.get("retry-after")
    seconds = _number(value)
    if seconds is not None:
        return max(0.0, seconds)
    try:
        when = email.utils.parsedate_to_datetime(value or "")
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())


def _number(value: str | None) -> float | None:
    """A header's number; None when absent or not a finite number."""
    try:
        number = float(value) if value is not None else None
    except ValueError:
        return None
    return number if number is not None and math.isfinite(number) else None
