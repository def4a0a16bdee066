"""Expectations of a stage -> failures, each pointing at its line in the case file."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..matchers import MISSING, Matcher, Mismatch
from ..models.case import Expect, StreamExpect
from ..models.records import Failure, Reply, ToolCall

LineOf = Callable[[tuple[str | int, ...]], int]


@dataclass(frozen=True)
class Outcome:
    """What a stage's expectations are checked against (one variant of it)."""

    reply: Reply
    tool_calls: list[ToolCall]
    """All calls the model made during the stage, in order."""
    latency_ms: float


def check(expect: Expect, outcome: Outcome, base: tuple[str | int, ...],
          line_of: LineOf) -> list[Failure]:
    """Every given expectation that does not hold, as failures at their lines."""
    failures: list[Failure] = []
    reply = outcome.reply
    for key, actual in _actuals(expect, outcome):
        matcher: Matcher = getattr(expect, key)
        path = (*base, key)
        failures.extend(_failure(path, m, line_of) for m in matcher.match(actual, (key,)))
    if reply.stream is not None:  # ``done`` defaults to true: a cut stream fails unasked
        failures.extend(_check_stream(expect, reply, (*base, "stream"), line_of))
    failures.extend(_protocol_failures(reply, base, line_of))
    return failures


def _actuals(expect: Expect, outcome: Outcome) -> list[tuple[str, Any]]:
    reply = outcome.reply
    given = expect.model_fields_set | {"status"}  # status is always checked (default 200)
    values: dict[str, Any] = {
        "status": reply.status,
        "error": reply.error if reply.error is not None else MISSING,
        "finish_reason": reply.finish_reason,
        "text": reply.text,
        "tool_calls": outcome.tool_calls,
        "usage": reply.usage if reply.usage is not None else MISSING,
        "latency_ms": outcome.latency_ms,
    }
    return [(key, values[key]) for key in values if key in given]


def _check_stream(expect: Expect, reply: Reply, path: tuple[str | int, ...],
                  line_of: LineOf) -> list[Failure]:
    assert reply.stream is not None
    spec, stats = expect.stream or StreamExpect(), reply.stream
    failures = []
    if spec.done and not stats.done:
        failures.append(_plain("stream ended without data: [DONE]", (*path, "done"), line_of))
    if spec.usage is not None and spec.usage != stats.usage:
        said = "no usage object arrived" if spec.usage else "a usage object arrived"
        failures.append(_plain(said, (*path, "usage"), line_of))
    for key, actual in (("chunks", stats.chunks), ("ttft_ms", reply.ttft_ms)):
        if key in spec.model_fields_set:
            matcher: Matcher = getattr(spec, key)
            failures.extend(_failure((*path, key), m, line_of)
                            for m in matcher.match(actual, (f"stream.{key}",)))
    return failures


def _protocol_failures(reply: Reply, base: tuple[str | int, ...],
                       line_of: LineOf) -> list[Failure]:
    """Problems always checked in stream mode (SPEC section 6), and in-band errors."""
    failures = [_plain(problem, base, line_of) for problem in reply.problems]
    if reply.stream is not None and reply.error is not None and reply.status < 400:
        failures.append(_plain(f"error inside the stream: {reply.error}", base, line_of))
    return failures


def _failure(path: tuple[str | int, ...], mismatch: Mismatch, line_of: LineOf) -> Failure:
    return Failure(mismatch.message, path, line_of(path), mismatch.expected, mismatch.actual)


def _plain(message: str, path: tuple[str | int, ...], line_of: LineOf) -> Failure:
    return Failure(message, path, line_of(path))
