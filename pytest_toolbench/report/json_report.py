"""Case records: what the session reports of each case, typed, built in one place.

``CaseRecord.of(result, nodeid, outcome)`` is the one place a case's result becomes its
record; the summary table and the ``--toolbench-report`` file read these typed fields
(``CaseResult.figures`` gives junit the same figures). A record crosses pytest-xdist, and waits
in the session, as JSON text (``to_text`` in the worker, ``from_text`` when the reports
are written), so the summary and the report are complete under ``-n``; when the session
reads no record (``-q`` and no report file), none is made. The report's shape is
documented in docs/report.md; field order here is the order of the keys there.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from functools import cache, lru_cache
from pathlib import Path
from typing import Any

from pydantic import TypeAdapter, ValidationError

from ..atomic import write_atomic
from ..records import (
    BackgroundTask,
    CaseResult,
    Failure,
    Judgement,
    Reply,
    RunResult,
    StageAttempt,
    ToolCall,
    ToolRun,
    Turn,
    round_ms,
    saved_ms,
)
from .failure import json_value

REPORT_VERSION = 1
"""The format's version. Keys are only ever added, each with a default, so reading a report
of an earlier version fills in what it lacks; a later version is refused."""


class ReportUnreadable(Exception):
    """The file is missing, not JSON, not a toolbench JSON report, of a newer format
    version, or holds a case no session could have written (the message says which)."""


@dataclass(frozen=True)
class ToolCallRecord:
    id: str | None
    name: str
    arguments: str
    """The arguments as the model sent them (JSON text, or whatever it sent)."""
    arguments_error: str | None
    completed_ms: float | None = None
    """Streamed replies: when the arguments' last piece arrived; null otherwise."""
    closed_ms: float | None = None
    """Streamed replies: when the API marked the arguments complete (what ``run_tools:
    progressive`` runs the call at); null when no mark came before the stream's end."""
    argument_events: int | None = None
    """Streamed replies: how many events carried a piece of the arguments."""

    @classmethod
    def of(cls, call: ToolCall) -> ToolCallRecord:
        return cls(call.id, call.name, call.arguments_raw, call.arguments_error,
                   round_ms(call.completed_ms), round_ms(call.closed_ms), call.argument_events)


@dataclass(frozen=True)
class StreamRecord:
    done: bool
    chunks: int
    usage: bool
    ended_ms: float | None = None
    """When the stream's last event arrived (a replayed stream: as recorded)."""


@dataclass(frozen=True)
class CallTimeRecord:
    """One call of a streamed turn on the stream's clock (ms after the request was sent)."""

    name: str
    closed_ms: float | None
    """When the API marked its arguments complete; null: no mark before the end."""
    started_ms: float | None
    """When its tool started (a replayed stream: the recorded moment that let it start,
    plus how long it took to start in this run)."""
    ended_ms: float | None


@dataclass(frozen=True)
class TimelineRecord:
    """A streamed turn whose calls ran: when each call closed and its tool ran, and when
    the stream ended."""

    stream_ended_ms: float | None
    calls: list[CallTimeRecord]
    progressive: bool = False
    """``run_tools: progressive``: each call ran as it closed, while the stream went on."""
    saved_ms: float | None = None
    """How much sooner the turn's tools were done than had they all started when the
    stream ended (``run_tools: progressive``); null otherwise."""

    @classmethod
    def of(cls, turn: Turn) -> TimelineRecord | None:
        reply = turn.reply
        if reply is None or reply.stream is None or not turn.tool_runs:
            return None
        ended = reply.stream.ended_ms
        calls = [CallTimeRecord(run.name, round_ms(call.closed_ms) if call else None,
                                run.started_ms, run.ended_ms)
                 for run, call in zip(turn.tool_runs, _calls_of(reply, turn.tool_runs))]
        saved = saved_ms(ended, turn.tool_runs) if turn.progressive else None
        return cls(round_ms(ended), calls, turn.progressive, saved)


def _calls_of(reply: Reply, runs: list[ToolRun]) -> list[ToolCall | None]:
    """Each run's call in the reply, by its id, else in order."""
    by_id = {call.id: call for call in reply.tool_calls if call.id}
    return [by_id.get(run.call_id or "") or (reply.tool_calls[index]
                                              if index < len(reply.tool_calls) else None)
            for index, run in enumerate(runs)]


@dataclass(frozen=True)
class ReplyRecord:
    status: int
    finish_reason: str | None
    text: str
    tool_calls: list[ToolCallRecord]
    usage: dict[str, Any] | None
    """The usage object as the server sent it (a number strict JSON cannot hold, which
    Python's JSON reader lets through, as its repr)."""
    error: str | None
    latency_ms: float
    ttft_ms: float | None
    stream: StreamRecord | None
    problems: list[str]
    api_finish_reason: str | None = None
    """Why the reply ended in its API's own words (``finish_reason`` is normalised)."""
    reasoning: str | None = None
    model: str | None = None
    """The model the server said answered; null when it named none."""

    @classmethod
    def of(cls, reply: Reply) -> ReplyRecord:
        stream = reply.stream
        return cls(
            reply.status, reply.finish_reason, reply.text,
            [ToolCallRecord.of(c) for c in reply.tool_calls],
            _jsonable(reply.usage), reply.error, round(reply.latency_ms, 1),
            round_ms(reply.ttft_ms),
            None if stream is None else StreamRecord(stream.done, stream.chunks, stream.usage,
                                                     round_ms(stream.ended_ms)),
            list(reply.problems), reply.api_finish_reason, reply.reasoning, reply.model)


@dataclass(frozen=True)
class ToolRunRecord:
    call_id: str | None
    name: str
    arguments: str
    content: str
    error: str | None
    duration_ms: float
    is_error: bool = False
    """The tool failed (its answer went back to the model as a failed tool's)."""
    server: str | None = None
    """The MCP server that ran the tool; null for the case's own tools."""
    started_ms: float | None = None
    """A streamed turn's run: when it started, on the stream's clock; null otherwise."""
    ended_ms: float | None = None
    task: str | None = None
    """A background tool's task (the run's ``background`` lists it); null otherwise."""

    @classmethod
    def of(cls, run: ToolRun) -> ToolRunRecord:
        return cls(run.call_id, run.name, run.arguments, run.content, run.error,
                   round(run.duration_ms, 1), run.failed, run.server, run.started_ms,
                   run.ended_ms, run.task)


@dataclass(frozen=True)
class BackgroundRecord:
    """One background tool's task: started by a call, never waited for by the model."""

    task: str
    name: str
    arguments: str
    status: str
    """``done``, ``failed`` (``error`` says why: what it raised, its time limit)."""
    started_ms: float
    """When it started, in ms after the run began."""
    ended_ms: float | None
    result: str | None
    error: str | None
    server: str | None = None

    @classmethod
    def of(cls, task: BackgroundTask) -> BackgroundRecord:
        return cls(task.task, task.name, task.arguments, task.status, task.started_ms,
                   task.ended_ms, task.result, task.error, task.server)


@dataclass(frozen=True)
class TurnRecord:
    streamed: bool
    stop_reason: str | None
    error: str | None
    retries: list[str]
    elapsed_ms: float
    reply: ReplyRecord | None
    tool_runs: list[ToolRunRecord]
    request: dict[str, Any] | None = None
    """The request body as sent (scrubbed of credentials like everything reported); null
    in reports written before it was kept."""
    role: str = "model"
    """Who was asked: ``model``, ``judge`` or ``simulator``."""
    timeline: TimelineRecord | None = None
    """A streamed turn whose calls ran: each call's close and its tool's run, and the
    stream's end, on the stream's clock; null otherwise."""
    fault: dict[str, Any] | None = None
    """The fault injected into this request (``injected: true``, its ``kind``, what it
    ``does``, its ``entry`` as written, its ``source`` and the stage's ``request`` it
    selected); null: the exchange was the service's own."""

    @classmethod
    def of(cls, turn: Turn) -> TurnRecord:
        return cls(turn.streamed, turn.stop_reason, turn.error, list(turn.retries),
                   round(turn.elapsed_ms, 1),
                   None if turn.reply is None else ReplyRecord.of(turn.reply),
                   # As sent: JSON already (the client sent json.dumps of it), and never
                   # changed after; to_json copies it into the report's data.
                   [ToolRunRecord.of(run) for run in turn.tool_runs], turn.request,
                   turn.role, TimelineRecord.of(turn), turn.fault)


@dataclass(frozen=True)
class JudgeSampleRecord:
    verdict: str | None
    """``pass`` or ``fail``; null when the judge gave no valid verdict (``error``)."""
    reasoning: str = ""
    error: str | None = None


@dataclass(frozen=True)
class JudgementRecord:
    """One ``expect.judge`` criterion as judged."""

    criterion: str
    passed: bool
    verdict: str
    """``pass``, ``fail`` or ``error``, with the split of several samples: ``pass (2 of 3
    pass)``."""
    model: str
    """The judge model."""
    template: str
    """The version of the judge's prompt template."""
    samples: list[JudgeSampleRecord] = field(default_factory=list)

    @classmethod
    def of(cls, judgement: Judgement) -> JudgementRecord:
        return cls(judgement.criterion, judgement.passed, judgement.verdict, judgement.model,
                   judgement.template,
                   [JudgeSampleRecord(s.verdict, s.reasoning, s.error)
                    for s in judgement.samples])


@dataclass(frozen=True)
class MessageRecord:
    """One message of a simulated conversation."""

    role: str
    """``user`` (the simulated user) or ``agent`` (what the user saw of the agent's turn)."""
    text: str


@dataclass(frozen=True)
class FailureRecord:
    message: str
    key_path: list[str | int]
    line: int | None
    expected: Any
    """JSON data; what JSON cannot hold is shown as its repr."""
    actual: Any

    @classmethod
    def of(cls, failure: Failure) -> FailureRecord:
        return cls(failure.message, list(failure.key_path), failure.line,
                   _jsonable(failure.expected), _jsonable(failure.actual))


@dataclass(frozen=True)
class AttemptRecord:
    number: int
    passed: bool
    trail: list[str]
    failures: list[FailureRecord]
    answered_first: list[ToolRunRecord]
    turns: list[TurnRecord]
    trajectory: list[ToolCallRecord] = field(default_factory=list)
    """Every call the agent loop made in the attempt, in order (the case-end's: every
    stage's)."""
    state: dict[str, Any] | None = None
    """The toolboxes' state afterwards, by toolbox name; null when the case has none."""
    probes: list[ToolRunRecord] = field(default_factory=list)
    """The calls of ``expect.probe``, made after the agent loop, and their answers."""
    judgements: list[JudgementRecord] = field(default_factory=list)
    """The ``expect.judge`` criteria as judged."""
    conversation: list[MessageRecord] = field(default_factory=list)
    """``simulate_user``: the conversation, message by message."""
    ended: str | None = None
    """``simulate_user``: ``stop`` or ``max_turns``; null when it broke off."""
    side_turns: list[TurnRecord] = field(default_factory=list)
    """The judge's and the simulated user's requests, in order (each ``role`` says whose)."""
    state_errors: dict[str, str] = field(default_factory=dict)
    """Why a toolbox's state could not be read, by toolbox name (not in ``state`` then)."""

    @classmethod
    def of(cls, attempt: StageAttempt) -> AttemptRecord:
        return cls(attempt.number, attempt.passed, list(attempt.trail),
                   [FailureRecord.of(failure) for failure in attempt.failures],
                   [ToolRunRecord.of(run) for run in attempt.answered_first],
                   [TurnRecord.of(turn) for turn in attempt.turns],
                   [ToolCallRecord(c.id, c.name, c.arguments_raw, c.arguments_error)
                    for c in attempt.trajectory],
                   attempt.state, [ToolRunRecord.of(run) for run in attempt.probes],
                   [JudgementRecord.of(judgement) for judgement in attempt.judgements],
                   [MessageRecord(m.role, m.text) for m in attempt.conversation],
                   attempt.ended, [TurnRecord.of(turn) for turn in attempt.side_turns],
                   dict(attempt.state_errors))


@dataclass(frozen=True)
class StageRecord:
    name: str
    passed: bool
    attempts: list[AttemptRecord]
    branch: bool = False
    """The stage failed and a route took the failure (``next: {fail: ...}``): a branch
    taken, not the run's failure."""
    next: str | None = None
    """Where the stage's route led: a stage's name or ``end``; null when the run stopped
    there."""

    @property
    def outcome(self) -> str:
        """``passed``, ``failed`` or ``branch taken``."""
        return "passed" if self.passed else "branch taken" if self.branch else "failed"


@dataclass(frozen=True)
class RunRecord:
    number: int
    passed: bool
    error: str | None
    stages: list[StageRecord]
    background: list[BackgroundRecord] = field(default_factory=list)
    """The background tools' tasks the run started, in order."""
    path: list[str] = field(default_factory=list)
    """The names of the stages the run went through, in order (one a loop ran again is
    there again)."""

    @classmethod
    def of(cls, run: RunResult) -> RunRecord:
        return cls(run.number, run.passed, run.error,
                   [StageRecord(stage.name, stage.passed,
                                [AttemptRecord.of(a) for a in stage.attempts],
                                stage.branch, stage.next)
                    for stage in run.stages],
                   [BackgroundRecord.of(task) for task in run.background], run.path)


@dataclass(frozen=True)
class CaseRecord:
    """One item: figures for the summary and junit, and every run, stage and attempt.

    A session writes every field; a reader takes a missing one as its default (``read``),
    so a report of any earlier version, or one a script wrote with the keys it needed,
    still loads. Only the node id, which names the case, is required."""

    nodeid: str
    case: str = ""
    model: str | None = None
    file: str = ""
    line: int = 0
    outcome: str = ""
    """pytest's outcome: passed, failed, skipped, xfailed or xpassed; interrupted for a case
    the session was stopped in (Ctrl-C, SIGTERM, SIGHUP)."""
    passes: int = 0
    runs_total: int = 0
    min_pass_rate: float = 1.0
    error: str | None = None
    stages: int = 0
    turns: int = 0
    tool_calls: int = 0
    total_tokens: int | None = None
    """None (null, shown ``-``) when no reply reported usage: never a made-up 0."""
    latency_ms: float | None = None
    """The run's own: a replay's is how long its cassette took to answer."""
    ttft_ms: float | None = None
    runs: list[RunRecord] = field(default_factory=list)
    api: str = "chat"
    """The wire API the case spoke: chat, responses or messages."""
    marks: list[str] = field(default_factory=list)
    """The names of the item's marks (the case's ``marks``, pytest's ``skip``...), read
    from its test report's keywords (``marks_from_keywords``) where the item ran."""
    judge_tokens: int | None = None
    """The tokens the judge used (null: none reported, or no judge)."""
    simulator_tokens: int | None = None
    """The tokens the simulated user used (null: none reported, or no simulated user)."""
    pass_hat_k: float | None = None
    """tau-bench's pass^k for k = the number of runs: the chance that k runs all pass;
    null for a single run."""
    notes: list[str] = field(default_factory=list)
    """What is worth knowing of the run that failed nothing (``CaseResult.notes``)."""
    recorded_latency_ms: float | None = None
    """A replayed case: the latency its cassette recorded (null: nothing was replayed)."""
    saved_ms: float | None = None
    """The time ``run_tools: progressive`` saved, over every run (each turn's
    ``timeline.saved_ms``); null when no turn ran its tools progressively."""
    routed: bool = False
    """The case has routes (``next``): each run's ``path`` is worth showing."""

    @classmethod
    def of(cls, result: CaseResult, nodeid: str, outcome: str,
           marks: list[str] | None = None) -> CaseRecord:
        return cls(
            nodeid=nodeid, case=result.case, model=result.model, file=result.file,
            line=result.line, outcome=outcome, passes=result.passes,
            runs_total=len(result.runs), min_pass_rate=result.min_pass_rate,
            error=result.error,
            stages=max((run.stages_run for run in result.runs), default=0),
            turns=result.turns, tool_calls=result.tool_calls,
            total_tokens=result.total_tokens, latency_ms=round_ms(result.latency_ms),
            ttft_ms=round_ms(result.ttft_ms), runs=[RunRecord.of(run) for run in result.runs],
            api=result.api, marks=list(marks or []),
            judge_tokens=result.side_tokens("judge"),
            simulator_tokens=result.side_tokens("simulator"), pass_hat_k=result.pass_hat_k,
            notes=list(result.notes), recorded_latency_ms=round_ms(result.recorded_latency_ms),
            saved_ms=_saved(result), routed=result.routed)

    def to_json(self) -> dict[str, Any]:
        """Plain JSON data: what the report file holds."""
        data: dict[str, Any] = _adapter(CaseRecord).dump_python(self, mode="json")
        return data

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> CaseRecord:
        record: CaseRecord = _adapter(CaseRecord).validate_python(data)
        return record

    def to_text(self) -> str:
        """The record as JSON text: what a test report carries, across pytest-xdist too.
        Text rather than data: until the session ends, each case costs it one string, not
        a tree of dicts and lists that every garbage collection walks."""
        return _adapter(CaseRecord).dump_json(self).decode()

    @classmethod
    def from_text(cls, text: str) -> CaseRecord:
        record: CaseRecord = _adapter(CaseRecord).validate_json(text)
        return record


def _saved(result: CaseResult) -> float | None:
    """What progressive execution saved over the case's runs; None: no turn used it."""
    saved = [saved_ms(turn.reply.stream.ended_ms, turn.tool_runs)
             for run in result.runs for turn in run.turns
             if turn.progressive and turn.tool_runs and turn.reply is not None
             and turn.reply.stream is not None]
    known = [value for value in saved if value is not None]
    return round(sum(known), 1) if known else None


@dataclass(frozen=True)
class RunInfo:
    """The session that wrote a report. Every key has a default: a report written before
    they were kept reads as one that says nothing of its run."""

    mode: str | None = None
    """``replay``, ``record``, ``missing`` or ``live``; null when the report does not say."""
    base_url: str | None = None
    """Where live answers came from (credentials masked; each API's when they differ);
    null in replay, where every answer came from a cassette."""
    started: str | None = None
    """When the session started: ISO 8601, UTC, to the second."""
    duration_s: float | None = None
    """The session's wall time, in seconds to 0.01."""
    revision: str | None = None
    """The git commit of the repository pytest ran in (``+dirty`` when tracked files were
    changed); null outside a git repository, or without git."""
    toolbench: str | None = None
    """The pytest-toolbench version that wrote the report."""

    @property
    def replayed(self) -> bool:
        """Every answer came from a cassette."""
        return self.mode == "replay"

    def described(self) -> str:
        """One line: ``replay, answers from cassettes; started 2026-11-27T17:00:00Z,
        3.21 s; revision 1a2b3c4d5e6f``."""
        where = "cassettes" if self.replayed else (self.base_url or "unknown")
        parts = [f"{self.mode or 'mode unknown'}, answers from {where}"]
        if self.started is not None:
            took = "" if self.duration_s is None else f", {self.duration_s:.2f} s"
            parts.append(f"started {self.started}{took}")
        if self.revision is not None:
            parts.append(f"revision {self.revision}")
        return "; ".join(parts)


BUILTIN_MARKS = frozenset({"skip", "skipif", "xfail"})


def marks_from_keywords(keywords: Iterable[str], registered: Sequence[str]) -> list[str]:
    """The mark names among a test report's keywords (which also hold node names).

    ``registered`` is the ini ``markers`` list (``"name(args): help"`` lines); a case's
    marks must be registered, so the registered names and pytest's own are the marks.
    """
    names = _registered_names(tuple(registered))
    return sorted(name for name in set(keywords)
                  if name in names or name in BUILTIN_MARKS)


@lru_cache(maxsize=8)
def _registered_names(registered: tuple[str, ...]) -> frozenset[str]:
    """The names of the ini ``markers`` lines: read once a session, not once a report."""
    return frozenset(line.split(":")[0].split("(")[0].strip() for line in registered)


@cache
def _adapter(kind: type[CaseRecord]) -> TypeAdapter[CaseRecord]:
    """Built once (it compiles a validator), on the first record that needs it."""
    return TypeAdapter(kind)


def _jsonable(value: Any) -> Any:
    """Round-trip through JSON: a tool call an expectation saw as the model made it (name
    and arguments, the shape the expectation gives), anything else JSON cannot hold as its
    repr, as the failure text shows them (``inf`` and ``nan`` too: strict JSON has none)."""
    return json.loads(json.dumps(value, default=json_value), parse_constant=_NON_FINITE.get)


_NON_FINITE = {"Infinity": "inf", "-Infinity": "-inf", "NaN": "nan"}
"""What ``json.dumps`` writes for floats strict JSON cannot hold -> their repr."""


def report_document(records: list[CaseRecord], run: RunInfo | None = None
                    ) -> dict[str, Any]:
    """The JSON report's document, which the HTML page is drawn from too: the format's
    version, how the session ran (when it is known), how many cases ended with each
    outcome, and each case's record as data."""
    described = {} if run is None else {"run": asdict(run)}
    return {"version": REPORT_VERSION, **described, "summary": outcome_counts(records),
            "cases": [record.to_json() for record in records]}


def outcome_counts(records: Sequence[CaseRecord]) -> dict[str, int]:
    """``{"cases": N, "failed": F, "passed": P...}``: the report's summary."""
    outcomes = [record.outcome for record in records]
    return {"cases": len(records), **{o: outcomes.count(o) for o in sorted(set(outcomes))}}


def write_report(path: Path, document: dict[str, Any]) -> None:
    """Write the report atomically: an interrupted run leaves the previous one whole."""
    write_atomic(path, json.dumps(document, indent=2, ensure_ascii=False))


# ---------------------------------------------------------------------------- reading


def read_report(path: Path) -> list[CaseRecord]:
    """The case records of a saved JSON report, of this format version or an earlier one;
    ReportUnreadable saying what is wrong otherwise (``toolbench html``, ``diff``,
    ``merge`` and ``conform`` all read reports here)."""
    return records_of(_document(path), path)


def read_report_run(path: Path) -> tuple[RunInfo, list[CaseRecord]]:
    """How the report's session ran (``RunInfo()`` when the report does not say), and its
    case records."""
    document = _document(path)
    records = records_of(document, path)
    return run_of(document, path), records


def _document(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ReportUnreadable(f"cannot read {path}: {exc.strerror or exc}") from None
    except ValueError as exc:
        raise ReportUnreadable(f"{path} is not JSON: {exc}") from None


def run_of(document: dict[str, Any], path: Path | str) -> RunInfo:
    """The report's ``run`` object; ``RunInfo()`` when it has none (written before runs
    were described); ReportUnreadable naming the key that is not one."""
    if "run" not in document:
        return RunInfo()
    try:
        run: RunInfo = TypeAdapter(RunInfo).validate_python(document["run"])
    except ValidationError as exc:
        error = exc.errors()[0]
        where = ".".join(str(part) for part in ("run", *error["loc"]))
        raise ReportUnreadable(f"{path}: {where}: {error['msg']}"
                               " (not the run of a toolbench JSON report)") from None
    return run


def records_of(document: Any, path: Path | str) -> list[CaseRecord]:
    """The case records of a report ``document`` (JSON data) read from ``path``."""
    if not isinstance(document, dict) or not isinstance(document.get("cases"), list) \
            or not all(isinstance(case, dict) and isinstance(case.get("nodeid"), str)
                       for case in document["cases"]):
        raise ReportUnreadable(f"{path} is not a toolbench JSON report (write one with "
                               "pytest --toolbench-report PATH)")
    _check_version(document.get("version", 1), path)  # the first reports may not have said
    return [_record(case, path) for case in document["cases"]]


def _check_version(version: Any, path: Path | str) -> None:
    if not isinstance(version, int) or isinstance(version, bool) or version < 1:
        raise ReportUnreadable(f"{path}: version {version!r} is no report format version")
    if version > REPORT_VERSION:
        raise ReportUnreadable(
            f"{path} is a report of format version {version}; this pytest-toolbench reads"
            f" versions up to {REPORT_VERSION}: upgrade it")


def _record(case: dict[str, Any], path: Path | str) -> CaseRecord:
    """One case as the record type a session writes, or ReportUnreadable naming the case
    and the first key that is not one."""
    try:
        return CaseRecord.from_json(case)
    except ValidationError as exc:
        error = exc.errors()[0]
        where = ".".join(str(part) for part in error["loc"])
        raise ReportUnreadable(f"{path}: case {case['nodeid']}: {where}: {error['msg']}"
                               " (not a case record of a toolbench JSON report)") from None
