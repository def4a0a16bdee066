"""Expectations of a stage -> failures, each pointing at its line in the case file.

Matching runs on the event loop under a time limit (``--toolbench-match-timeout``): every
step that could run away (a regex search, a JSON Schema keyword, one-to-one pairing) stops
at the deadline, so a catastrophic regex or a huge JSON Schema check fails the stage naming
the matcher and the limit, and holds the loop no longer than the limit.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ..casefile.schema import AgentExpect, CaseExpect, Expect, Probe, StreamExpect
from ..defaults import PROGRESSIVE_LEAD_MS
from ..keypaths import KeyPath
from ..matchers import MISSING, Matcher, MatchTimeout, Mismatch, time_limit
from ..matchers.limits import DEFAULT_LIMIT_S
from ..records import Failure, Reply, ToolCall, ToolRun
from .toolset import WorldState

LineOf = Callable[[KeyPath], int]


@dataclass(frozen=True)
class Outcome:
    """What a stage's expectations are checked against (one variant of it)."""

    replies: list[Reply]
    """Every reply of the stage's agent loop, in order; the last one ended it."""
    tool_calls: list[ToolCall]
    """All calls the model made during the stage, in order."""
    world: WorldState = field(default_factory=WorldState)
    """The toolboxes' state once the agent loop was done."""
    probes: list[ToolRun] = field(default_factory=list)
    """The runs of ``expect.probe``'s calls, in order."""
    answer: str | None = None
    """An agent case's stage: the text its agent returned. Then ``text`` is this answer,
    ``usage`` the sum of every reply's, and ``expect.stream`` reads the last streamed
    reply; None: the plugin's own loop, whose last reply says all of them."""
    ended: str | None = None
    """``simulate_user``: how the conversation ended (``stop``, ``max_turns``)."""
    requests: int | None = None
    """How many model requests the stage sent, when not one a reply (an agent case: its
    injected faults count, their replies apart)."""
    raised: str | None = None
    """An agent case: what its agent raised (``ExceptionType: message``), when the stage
    expects it to (``expect.error``)."""

    @property
    def reply(self) -> Reply:
        """The last reply (an agent that sent no request: an empty one)."""
        return self.replies[-1] if self.replies else _NO_REPLY

    @property
    def text(self) -> str:
        return self.reply.text if self.answer is None else self.answer

    @property
    def usage(self) -> dict[str, Any] | None:
        if self.answer is None:
            return self.reply.usage
        usages = [reply.usage for reply in self.replies if reply.usage is not None]
        return summed(usages) if usages else None

    @property
    def streamed(self) -> Reply | None:
        """The reply ``expect.stream`` reads: the last one, or an agent's last streamed."""
        if self.answer is None:
            return self.reply if self.reply.stream is not None else None
        return next((reply for reply in reversed(self.replies) if reply.stream is not None),
                    None)

    @property
    def latency_ms(self) -> float:
        return sum(reply.latency_ms for reply in self.replies)


_NO_REPLY = Reply()


def summed(usages: list[dict[str, Any]]) -> dict[str, Any]:
    """Usage objects added up key by key (nested ones too); a count in one of them only
    is kept as it is."""
    total: dict[str, Any] = {}
    for usage in usages:
        for key, value in usage.items():
            before = total.get(key)
            if isinstance(value, dict) and isinstance(before, dict):
                total[key] = summed([before, value])
            elif _count(value) and _count(before):
                total[key] = before + value
            elif key not in total:
                total[key] = value
    return total


def _count(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


@dataclass
class _Progress:
    """Which expectation is being matched, for the message if time runs out."""

    path: KeyPath


def check(expect: Expect, outcome: Outcome, base: KeyPath, line_of: LineOf,
          limit_s: float = DEFAULT_LIMIT_S) -> list[Failure]:
    """Every given expectation that does not hold, as failures at their lines; matching
    that runs past ``limit_s`` seconds is one failure, at the expectation it was on."""
    progress = _Progress(base)
    try:
        with time_limit(limit_s):
            return _check(expect, outcome, base, line_of, progress)
    except MatchTimeout as timeout:
        return [_plain(_too_slow(timeout.what, limit_s), progress.path, line_of)]


def check_agent(expect: AgentExpect, calls: list[ToolCall], world: WorldState,
                probes: list[ToolRun], base: KeyPath, line_of: LineOf,
                limit_s: float = DEFAULT_LIMIT_S, path: list[str] | None = None
                ) -> list[Failure]:
    """The case-end expectations (``expect`` of the case) against every call of the run,
    the state, the probes' runs and the ``path`` of stages it took, as ``check`` does a
    stage's."""
    progress = _Progress(base)
    try:
        with time_limit(limit_s):
            failures = _check_agent(expect, calls, world, probes, base, line_of, progress)
            if isinstance(expect, CaseExpect) and "path" in expect.model_fields_set:
                progress.path = (*base, "path")
                failures += _matched(expect.path, path or [], "path", base, line_of)
            return failures
    except MatchTimeout as timeout:
        return [_plain(_too_slow(timeout.what, limit_s), progress.path, line_of)]


def _check_agent(expect: AgentExpect, calls: list[ToolCall], world: WorldState,
                 probes: list[ToolRun], base: KeyPath, line_of: LineOf,
                 progress: _Progress) -> list[Failure]:
    failures: list[Failure] = []
    given = expect.model_fields_set
    if "state" in given:
        progress.path = (*base, "state")
        failures += [_plain(f"no state to check: {error}", progress.path, line_of)
                     for error in world.errors.values()]
        if not world.errors:
            failures += _matched(expect.state, world.states, "state", base, line_of)
    if "trajectory" in given:
        progress.path = (*base, "trajectory")
        failures += _matched(expect.trajectory, calls, "trajectory", base, line_of)
    for index, (probe, run) in enumerate(zip(expect.probe or [], probes)):
        progress.path = (*base, "probe", index)
        failures += _probe_failures(probe, run, progress.path, line_of)
    return failures


def _matched(matcher: Matcher, actual: Any, key: str, base: KeyPath,
             line_of: LineOf) -> list[Failure]:
    return [_failure(base, mismatch, line_of) for mismatch in matcher.match(actual, (key,))]


def _probe_failures(probe: Probe, run: ToolRun, path: KeyPath,
                    line_of: LineOf) -> list[Failure]:
    """A probe's answer against its ``result`` or ``error``; a failed call fails unless
    ``error`` says it must."""
    shown = f"probe {run.name}({run.arguments})"
    if "error" in probe.model_fields_set:
        if not run.failed:
            return [_plain(f"{shown} was expected to fail, and answered: {run.content}",
                           (*path, "error"), line_of)]
        return _prefixed(shown, probe.error.match(run.error, ()), (*path, "error"), line_of)
    if run.failed:
        return [_plain(f"{shown} failed: {run.error}", (*path, "call"), line_of)]
    if "result" not in probe.model_fields_set:
        return []
    return _prefixed(shown, probe.result.match(_answer_value(run.content), ()),
                     (*path, "result"), line_of)


def _prefixed(shown: str, mismatches: list[Mismatch], path: KeyPath,
              line_of: LineOf) -> list[Failure]:
    return [Failure(f"{shown}: {m.message}", (*path, *m.path), line_of((*path, *m.path)),
                    m.expected, m.actual) for m in mismatches]


def _answer_value(content: str) -> Any:
    """A tool's answer as the matchers see it: its JSON when it is JSON, else its text."""
    try:
        return json.loads(content)
    except ValueError:
        return content


def _too_slow(what: str, limit_s: float) -> str:
    return (f"{what} did not finish within the matching time limit of {limit_s:g} s"
            " (--toolbench-match-timeout)")


def _check(expect: Expect, outcome: Outcome, base: KeyPath, line_of: LineOf,
           progress: _Progress) -> list[Failure]:
    failures: list[Failure] = []
    for key, actual in _actuals(expect, outcome):
        matcher: Matcher = getattr(expect, key)
        progress.path = (*base, key)
        for mismatch in matcher.match(actual, (key,)):
            failure = _failure(base, mismatch, line_of)
            if key == "status" and outcome.reply.error:
                failure.message += f"; the server said: {outcome.reply.error}"
            failures.append(failure)
    failures += _check_agent(expect, outcome.tool_calls, outcome.world, outcome.probes, base,
                             line_of, progress)
    if expect.ended is not None and outcome.ended != expect.ended:
        failures.append(Failure(
            f"the simulated conversation ended by {outcome.ended}, expected {expect.ended}",
            (*base, "ended"), line_of((*base, "ended")), expect.ended, outcome.ended))
    stream = expect.stream or _STREAM_DEFAULTS  # ``done`` is true unless a case says not
    progress.path = (*base, "stream")
    streamed = outcome.streamed
    if streamed is not None:
        failures.extend(_check_stream(stream, streamed, (*base, "stream"), line_of))
    elif outcome.answer is not None and "stream" in expect.model_fields_set:
        # An agent chooses whether to stream: stream checks of one that did not fail.
        failures.append(_plain("no reply of the stage was streamed: the agent asked for none",
                               (*base, "stream"), line_of))
    if stream.progressive is not None:
        failures.extend(_check_progressive(stream.progressive, outcome.replies,
                                           (*base, "stream", "progressive"), line_of))
    for reply in outcome.replies:
        failures.extend(_protocol_failures(reply, base, line_of))
        if (reply is not streamed and stream.done and reply.stream is not None
                and not reply.stream.done):
            failures.append(_plain(f"an earlier stream of the stage ended without"
                                   f" {reply.stream.end}", (*base, "stream", "done"), line_of))
    return failures


_STREAM_DEFAULTS = StreamExpect()
"""The stream checks of a stage that gives none: a stream must end properly."""


def _actuals(expect: Expect, outcome: Outcome) -> list[tuple[str, Any]]:
    reply = outcome.reply
    # Status is checked (default 200) unless the stage expects an error and names no status:
    # then an error must have come, and ``error`` says which.
    given = expect.model_fields_set | (
        set() if "error" in expect.model_fields_set else {"status"})
    values: dict[str, Any] = {
        "status": reply.status,
        "error": (outcome.raised if outcome.raised is not None
                  else reply.error if reply.error is not None else MISSING),
        "finish_reason": reply.finish_reason,
        "api_finish_reason": reply.api_finish_reason,
        "text": outcome.text,
        "reasoning": reply.reasoning if reply.reasoning is not None else MISSING,
        "tool_calls": outcome.tool_calls,
        "usage": outcome.usage if outcome.usage is not None else MISSING,
        "latency_ms": outcome.latency_ms,
        "requests": len(outcome.replies) if outcome.requests is None else outcome.requests,
    }
    return [(key, values[key]) for key in values if key in given]


def _check_stream(spec: StreamExpect, reply: Reply, path: KeyPath,
                  line_of: LineOf) -> list[Failure]:
    assert reply.stream is not None
    stats = reply.stream
    failures = []
    if spec.done and not stats.done:
        failures.append(_plain(f"stream ended without {stats.end}", (*path, "done"), line_of))
    if spec.usage is not None and spec.usage != stats.usage:
        said = "no usage object arrived" if spec.usage else "a usage object arrived"
        failures.append(_plain(said, (*path, "usage"), line_of))
    for key, actual in (("chunks", stats.chunks), ("ttft_ms", reply.ttft_ms)):
        if key in spec.model_fields_set:
            matcher: Matcher = getattr(spec, key)
            failures.extend(_failure(path, m, line_of) for m in matcher.match(actual, (key,)))
    return failures


def _check_progressive(wanted: bool, replies: list[Reply], path: KeyPath,
                       line_of: LineOf) -> list[Failure]:
    """``stream.progressive``: every call of the stage's streamed replies streamed its
    arguments in more than one event, their last piece before the stream's end in time."""
    calls = [(call, reply.stream.ended_ms) for reply in replies if reply.stream is not None
             for call in reply.tool_calls]
    if not calls:
        return [_plain("stream.progressive reads the stage's streamed calls, and no streamed"
                       " reply of the stage called a tool", path, line_of)]
    late = [why for call, ended_ms in calls
            if (why := not_progressive(call, ended_ms)) is not None]
    if wanted and late:
        return [_plain(f"the stream did not send its calls as they were made: {'; '.join(late)}",
                       path, line_of)]
    if not wanted and not late:
        return [_plain("the stream sent every call as it was made (its arguments in pieces,"
                       " before the stream ended), expected it not to", path, line_of)]
    return []


def not_progressive(call: ToolCall, ended_ms: float | None) -> str | None:
    """Why a streamed call was not sent progressively, or None when it was: its arguments
    in more than one event, the last of them ``PROGRESSIVE_LEAD_MS`` before the stream's
    last event."""
    events = call.argument_events or 0
    if events <= 1:
        return f"{call.name or 'a call'}'s arguments came whole, in {events} event"
    said, ended = call.said_ms, ended_ms
    if said is None or ended is None or ended - said < PROGRESSIVE_LEAD_MS:
        return (f"{call.name}'s arguments came in {events} events, the last at"
                f" {_ms(said)} ms, and the stream ended at {_ms(ended)} ms: no sooner")
    return None


def _ms(value: float | None) -> str:
    return "?" if value is None else f"{value:.1f}"


def _protocol_failures(reply: Reply, base: KeyPath, line_of: LineOf) -> list[Failure]:
    """What every reply must get right, asked or not (SPEC section 6).

    Protocol problems (a chunk that is not JSON, a body that is no chat completion), an error
    object inside a successful response, and, in a stream, arguments that are not JSON.
    """
    failures = [_plain(problem, base, line_of) for problem in reply.problems]
    # A stream's reader says its in-band error as a problem: its API, what carried it, its
    # type and whether it is transient. A body's is said here.
    if reply.error is not None and reply.status < 400 and reply.stream is None:
        failures.append(_plain(f"error in an HTTP {reply.status}: {reply.error}", base, line_of))
    if reply.stream is not None:
        failures.extend(
            _plain(f"streamed tool call {call.name}: arguments are not valid JSON:"
                   f" {call.arguments_error}", base, line_of)
            for call in reply.tool_calls if call.arguments_error is not None)
    return failures


def _failure(base: KeyPath, mismatch: Mismatch, line_of: LineOf) -> Failure:
    """A mismatch at its own key path (``expect.usage.total_tokens``), on its nearest line."""
    path = (*base, *mismatch.path)
    return Failure(mismatch.message, path, line_of(path), mismatch.expected, mismatch.actual)


def _plain(message: str, path: KeyPath, line_of: LineOf) -> Failure:
    return Failure(message, path, line_of(path))
