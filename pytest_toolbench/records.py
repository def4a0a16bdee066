"""Output records: what a request produced, independent of how it was obtained.

These are plain dataclasses shared by the transport (which fills them), the executor
(which appends them to transcripts) and reporting (which prints them). They know no pytest.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any


@dataclass
class ToolCall:
    """One tool call of an assistant reply, reassembled if it was streamed."""

    name: str
    arguments_raw: str
    """The arguments exactly as the server sent them (an object is re-serialised as JSON)."""
    id: str | None = None
    arguments: Any = None
    """The parsed JSON arguments; ``None`` when ``arguments_error`` is set."""
    arguments_error: str | None = None
    """Why ``arguments_raw`` is not valid JSON, or ``None`` when it is."""
    completed_ms: float | None = None
    """Streamed replies: when the last piece of the arguments arrived, in ms after the
    request was sent (the report's stream timeline marks it); ``None`` otherwise."""
    closed_ms: float | None = None
    """Streamed replies: when the API said the arguments were complete (Responses
    ``function_call_arguments.done``, Messages ``content_block_stop``, chat the next call's
    index or the finish reason, a Gemini part): the moment ``run_tools: progressive`` runs
    the call; ``None`` when the stream ended before any mark (or it was not streamed)."""
    argument_events: int | None = None
    """Streamed replies: how many events carried a piece of the arguments (a call sent
    whole is one)."""
    said_ms: float | None = None
    """Streamed replies: when the last event that carried a piece of the arguments
    arrived (``expect.stream.progressive`` compares it with the stream's end)."""

    def to_message(self) -> dict[str, Any]:
        """The call as it goes back into the conversation's assistant message."""
        return {
            "id": self.id or "",
            "type": "function",
            "function": {"name": self.name, "arguments": self.arguments_raw},
        }


@dataclass
class StreamStats:
    """Facts about a streamed reply that the ``expect.stream`` checks read."""

    done: bool = False
    """The stream ended as its API says it must (chat: ``data: [DONE]``; Responses: a
    ``response.completed``, ``failed`` or ``incomplete`` event; Messages: ``message_stop``)."""
    chunks: int = 0
    """Number of events, chat's ``[DONE]`` excluded."""
    end: str = "data: [DONE]"
    """What ends this API's stream properly, as messages name it."""
    usage: bool = False
    """A usage object arrived."""
    ended_ms: float | None = field(default=None, compare=False)
    """When the stream's last event arrived, in ms after the request was sent (a replayed
    stream's times are the recorded ones); a time, left out of comparisons."""


@dataclass
class StreamEvent:
    """One SSE ``data:`` payload and when it arrived, in ms after the request was sent."""

    data: str
    offset_ms: float
    event: str = "message"
    """The SSE event type; ``message`` unless the server named one (``error``...)."""
    cut: bool = False
    """The stream ended inside this event: ``data`` is what came of it, its lines as sent
    (``SSEDecoder.cut``), replayed as they came, without the blank line that never did."""


@dataclass
class Interaction:
    """One HTTP exchange as it is kept in a cassette: request body and response."""

    request: dict[str, Any]
    """The JSON body that was sent."""
    status: int
    content_type: str
    body: Any = None
    """The response body: parsed JSON, or text when it is not JSON; ``None`` for streams."""
    events: list[StreamEvent] | None = None
    """The SSE data payloads of a streamed response, in order."""
    elapsed_ms: float = 0.0
    """How long the whole response took; replay at speed 1 waits as long."""
    path: str = "/chat/completions"
    method: str = "POST"
    body_json: str | None = field(default=None, repr=False, compare=False)
    """A JSON ``body`` as its cassette spells it, when it was read from one: replay sends
    these characters instead of encoding ``body`` again."""
    api: str | None = None
    """The wire API of this exchange, in a cassette that mixes them (an agent case's, or a
    judge that speaks another API than the case): ``chat``, ``messages``...; None: the
    cassette's own API, or (an agent's request to a path that is no model API) none."""
    role: str = "model"
    """Whose exchange it is: ``model`` (the model under test), ``judge`` or ``simulator``
    (the second models of ``expect.judge`` and ``simulate_user``). Replay answers each
    role's exchanges in their own order."""


@dataclass
class Reply:
    """A response of any wire API reduced to what expectations check."""

    status: int = 200
    text: str = ""
    """The answer's text, reasoning apart (a leading ``<think>`` block included)."""
    tool_calls: list[ToolCall] = field(default_factory=list)
    finish_reason: str | None = None
    """Why the reply ended, in chat completions' words (``stop``, ``tool_calls``, ``length``,
    ``content_filter``) whatever the API; a word none of them maps stays as sent."""
    api_finish_reason: str | None = None
    """Why the reply ended in the API's own words: chat's ``finish_reason``, the Responses
    API's ``status`` (or ``incomplete_details.reason``), the Messages API's ``stop_reason``."""
    reasoning: str | None = None
    """The model's reasoning, when the server sent any: chat's ``reasoning_content`` or
    ``reasoning``, Responses reasoning items, Messages ``thinking`` blocks, or a ``<think>``
    block at the start of the text."""
    usage: dict[str, Any] | None = None
    model: str | None = None
    """The model the server says answered (chat's, the Responses and Messages APIs'
    ``model``, Gemini's ``modelVersion``); ``None`` when it named none."""
    error: str | None = None
    """The error message of a non-2xx response, or of an in-band stream error."""
    latency_ms: float = 0.0
    """From sending the request to the end of the reply, as this run took it (a replay's
    own, from its cassette)."""
    recorded_latency_ms: float | None = None
    """A replayed reply: the latency its cassette recorded; None for a live one."""
    ttft_ms: float | None = None
    """Time to the first content or tool-call delta; streamed replies only."""
    stream: StreamStats | None = None
    """Set for streamed replies."""
    problems: list[str] = field(default_factory=list)
    """Protocol problems found while reading (non-JSON data, no index, bad arguments...)."""
    retry_after_s: float | None = None
    """How long the service asked to wait before trying again, when its error body says so
    (Gemini's ``RetryInfo.retryDelay``); a ``Retry-After`` header says it for any API."""
    interaction: Interaction | None = None
    """The exchange that produced this reply, as a cassette keeps it; only while recording
    (None otherwise: nothing else reads it, and a session keeps every reply to its end)."""
    native_turn: list[dict[str, Any]] | None = None
    """The reply as its API sends an assistant turn back: the Messages API's content blocks
    or the Responses API's output items, exactly as the server sent them (for streams,
    rebuilt from the events, thinking signatures included); ``None`` for chat, which goes
    back as ``to_message`` says. Reports leave it out: each turn's request holds it."""

    def to_message(self) -> dict[str, Any]:
        """The reply as the assistant message appended to the conversation.

        ``content`` is ``""`` rather than ``None``: some servers (llama.cpp) reject null.
        """
        message: dict[str, Any] = {"role": "assistant", "content": self.text}
        if self.tool_calls:
            message["tool_calls"] = [call.to_message() for call in self.tool_calls]
        return message


@dataclass
class ToolRun:
    """One run of a tool for one call: what it was given and what it answered."""

    call_id: str | None
    name: str
    arguments: str
    content: str
    """The tool message's content as sent back to the model."""
    error: str | None = None
    """Why the run failed, as the plugin saw it (its ``content`` says so to the model)."""
    duration_ms: float = 0.0
    failed: bool = False
    """The run gave no result: an unknown tool, arguments that are not JSON, an exception, a
    timeout, an ``error:`` tool. Request builders read this, never the content: an API
    that can say so marks the result as an error (Messages: ``is_error: true``)."""
    server: str | None = None
    """The MCP server that ran it; ``None`` for the case's own tools."""
    started_ms: float | None = None
    """A streamed turn's tool run: when it started, in ms after the turn's request was
    sent, on the stream's clock (a replayed stream's is the recorded one): the moment
    that let it start (its call's mark, or the stream's end) plus how long it then took
    to start."""
    ended_ms: float | None = None
    """When it ended, on the same clock."""
    task: str | None = None
    """A background tool's task: the model was answered ``{"status": "started", "task":
    ID}`` and the tool ran on its own (``RunResult.background``)."""


@dataclass
class BackgroundTask:
    """One background tool's run: started by a call of the model, never waited for."""

    task: str
    name: str
    arguments: str
    started_ms: float
    """When it started, in ms after the run began."""
    ended_ms: float | None = None
    """When it ended; ``None``: it had not when the run ended (then it was cancelled)."""
    result: str | None = None
    """What the tool answered (nobody reads it but the report)."""
    error: str | None = None
    """Why it failed: what it raised, its time limit, or that the run ended first."""
    server: str | None = None
    """The MCP server that ran it; ``None`` for the case's own tools."""

    @property
    def status(self) -> str:
        """``running``, ``done``, ``failed``."""
        if self.ended_ms is None and self.error is None:
            return "running"
        return "failed" if self.error is not None else "done"


@dataclass
class McpExchange:
    """One request to an MCP server and its answer, as a cassette keeps it beside the
    model's exchanges: ``tools/list`` (``params`` empty) or ``tools/call``."""

    server: str
    method: str
    """``tools/list`` or ``tools/call``."""
    result: dict[str, Any]
    """The server's result, in MCP's own words (``tools``; ``content``, ``isError``...)."""
    params: dict[str, Any] = field(default_factory=dict)
    """``tools/call``: ``{name, arguments}``."""
    elapsed_ms: float = 0.0


@dataclass
class Turn:
    """One request of a stage and what came of it."""

    request: dict[str, Any]
    streamed: bool
    reply: Reply | None = None
    error: str | None = None
    """Why no reply arrived (connect failure, timeout, reset, replay mismatch...)."""
    retries: list[str] = field(default_factory=list)
    """One line per transport attempt that failed before the last: what failed, the wait."""
    tool_runs: list[ToolRun] = field(default_factory=list)
    stop_reason: str | None = None
    """``tool_use`` (the loop goes on), ``end_turn``, ``max_turns`` or ``error``."""
    elapsed_ms: float = 0.0
    """Wall time of the whole turn: every transport attempt and the waits between them."""
    role: str = "model"
    """Who was asked: ``model`` (the model under test), ``judge`` or ``simulator``."""
    progressive: bool = False
    """``run_tools: progressive``: each call of the streamed reply ran as it closed."""
    fault: dict[str, Any] | None = None
    """The fault injected into this request (``faults.Injection.record``): never the
    service's own doing."""
    error_injected: bool = False
    """``error`` is what the fault did (a cut, a hold past the timeout, a disconnect with no
    retry left), not the endpoint's failure."""

    @property
    def latency_ms(self) -> float:
        """The reply's latency; for a turn without one, how long it waited before failing."""
        return self.reply.latency_ms if self.reply is not None else self.elapsed_ms


LOOP_STOPS = {"end_turn": "the stage ends", "tool_use": "the tools run, then it sends again",
              "max_turns": "max_turns reached", "error": "no reply"}
"""What the agent loop did after a turn (``Turn.stop_reason``), in words."""


def stop_text(stop_reason: str | None, api_reason: str | None) -> str:
    """A turn's end as transcripts show it: why the reply ended in its API's own words
    (chat ``stop``, Messages ``end_turn``, Responses ``completed``, Gemini ``STOP``), then
    what the loop did: ``tool_calls (the tools run, then it sends again)``."""
    done = LOOP_STOPS.get(stop_reason or "", stop_reason or "")
    if api_reason is None:
        return done
    return f"{api_reason} ({done})" if done else api_reason


@dataclass
class Failure:
    """An expectation that did not hold, or another reason a stage failed."""

    message: str
    key_path: tuple[str | int, ...] = ()
    """Where in the case file the failing expectation is."""
    line: int | None = None
    expected: Any = None
    actual: Any = None


@dataclass
class JudgeSample:
    """One answer of the judge to one criterion: its verdict and why, or why it gave none."""

    verdict: str | None
    """``pass`` or ``fail``; ``None`` when the judge gave no valid verdict (``error``)."""
    reasoning: str = ""
    error: str | None = None
    """Why this sample has no verdict: an HTTP error, a refusal, a cut or garbled reply."""


@dataclass
class Judgement:
    """One ``expect.judge`` criterion, judged by the majority of its samples."""

    criterion: str
    model: str
    """The judge model."""
    template: str
    """The version of the judge's prompt template (``judge-v1``)."""
    samples: list[JudgeSample] = field(default_factory=list)

    @property
    def errors(self) -> list[str]:
        return [sample.error for sample in self.samples if sample.error is not None]

    @property
    def passes(self) -> int:
        return sum(sample.verdict == "pass" for sample in self.samples)

    @property
    def passed(self) -> bool:
        """Every sample gave a verdict and most of them say pass: a judge error never
        passes."""
        return not self.errors and self.passes * 2 > len(self.samples)

    @property
    def verdict(self) -> str:
        """``pass``, ``fail`` or ``error``, and the split when there are several samples."""
        word = "error" if self.errors else ("pass" if self.passed else "fail")
        total = len(self.samples)
        return word if total == 1 else f"{word} ({self.passes} of {total} pass)"


@dataclass
class SimulatedMessage:
    """One message of a simulated conversation as the report shows it."""

    role: str
    """``user`` (the simulated user) or ``agent`` (the user-visible text of the agent)."""
    text: str


@dataclass
class StageAttempt:
    """One attempt at a stage (a stage with ``retry`` may have several)."""

    stage: str
    number: int
    trail: list[str] = field(default_factory=list)
    """The executor states this attempt went through, in order."""
    turns: list[Turn] = field(default_factory=list)
    failures: list[Failure] = field(default_factory=list)
    answered_first: list[ToolRun] = field(default_factory=list)
    """Calls the previous stage left open, answered before this stage's first request."""
    trajectory: list[ToolCall] = field(default_factory=list)
    """Every call the agent loop made in the attempt, in order (``stream: both``: the
    streamed variant's, which the conversation goes on from)."""
    state: dict[str, Any] | None = None
    """The toolboxes' state after the attempt, by toolbox name, as JSON; ``None`` when the
    case has no toolbox."""
    state_errors: dict[str, str] = field(default_factory=dict)
    """Why a toolbox's state could not be read, by toolbox name (it is then not in
    ``state``)."""
    probes: list[ToolRun] = field(default_factory=list)
    """The runs of ``expect.probe``'s calls, made after the agent loop."""
    judgements: list[Judgement] = field(default_factory=list)
    """The ``expect.judge`` criteria, judged (once the other expectations held)."""
    conversation: list[SimulatedMessage] = field(default_factory=list)
    """``simulate_user``: the conversation, message by message."""
    ended: str | None = None
    """``simulate_user``: how the conversation ended, ``stop`` or ``max_turns``; ``None``
    when it broke off (a failure says why)."""
    side_turns: list[Turn] = field(default_factory=list)
    """The requests to the judge and the simulator (``Turn.role``), in order: apart from
    ``turns``, which are the model's."""

    @property
    def passed(self) -> bool:
        return not self.failures

    @property
    def replies(self) -> list[Reply]:
        return [turn.reply for turn in self.turns if turn.reply is not None]


CASE_END = "end of case"
"""The name the case-level ``expect`` is reported under, as if it were one more stage (no
stage can have it: a stage name has no spaces)."""


@dataclass
class StageResult:
    name: str
    attempts: list[StageAttempt] = field(default_factory=list)
    branch: bool = False
    """The stage failed and a route took its failure (``next: {fail: ...}``): a branch
    taken, not a failure of the run."""
    next: str | None = None
    """Where its route led: a stage's name or ``end``; None when the run stopped there
    (an unrouted failure, or the case-level checks)."""

    @property
    def is_stage(self) -> bool:
        """One of the case's stages, not the case-level checks' ``end of case``."""
        return self.name != CASE_END

    @property
    def passed(self) -> bool:
        return bool(self.attempts) and self.attempts[-1].passed


@dataclass
class RunResult:
    """One run of a whole case (a case with ``repeat`` has several)."""

    number: int
    stages: list[StageResult] = field(default_factory=list)
    error: str | None = None
    """A failure outside any stage (missing cassette, interpolation error...)."""
    background: list[BackgroundTask] = field(default_factory=list)
    """The background tools the run started, in the order they started."""

    @property
    def passed(self) -> bool:
        return self.error is None and all(stage.passed or stage.branch for stage in self.stages)

    @property
    def path(self) -> list[str]:
        """The names of the stages run, in order (a stage run again is there again)."""
        return [stage.name for stage in self.stages if stage.is_stage]

    @property
    def turns(self) -> list[Turn]:
        return [turn for stage in self.stages for attempt in stage.attempts
                for turn in attempt.turns]

    @property
    def stages_run(self) -> int:
        """How many of the case's stages ran (``end of case`` is not one)."""
        return sum(stage.is_stage for stage in self.stages)

    @property
    def side_turns(self) -> list[Turn]:
        """The judge's and the simulator's requests."""
        return [turn for stage in self.stages for attempt in stage.attempts
                for turn in attempt.side_turns]


@dataclass
class CaseResult:
    """Everything one item (a case against one model) did."""

    case: str
    model: str | None
    file: str
    line: int
    runs: list[RunResult] = field(default_factory=list)
    api: str = "chat"
    """The wire API the case spoke."""
    min_pass_rate: float = 1.0
    error: str | None = None
    """A failure of the whole case, whatever its runs did (replay left recorded answers
    unused: the case changed since it was recorded), so no pass rate can outvote it."""
    notes: list[str] = field(default_factory=list)
    """What is worth knowing of the run that failed nothing (a session-scoped MCP server
    that stopped in an earlier case was started again)."""
    routed: bool = False
    """The case has routes (``next`` on a stage): its runs may take different paths."""

    @property
    def passes(self) -> int:
        return sum(run.passed for run in self.runs)

    @property
    def passed(self) -> bool:
        return (self.error is None and bool(self.runs)
                and self.passes >= self.min_pass_rate * len(self.runs) - 1e-9)

    @property
    def replies(self) -> list[Reply]:
        return [turn.reply for run in self.runs for turn in run.turns if turn.reply is not None]

    @property
    def endpoint_failed(self) -> bool:
        """Whether a recording of it keeps the previous cassette: a request got no answer
        (connect error, timeout, reset; one a fault injected is none of the endpoint's), or a case that failed met an overloaded or broken
        server (429 or 5xx after the retries); a case that passes with such a status
        expects it (a status a fault injected is none of the endpoint's). Or a tool
        source (an MCP server) broke: its failures sit at
        ``tools[N]``, where the source is declared, and the recording is missing its
        exchanges."""
        return any(
            (turn.error and not turn.error_injected) or (not self.passed and turn.reply is not None and turn.fault is None
                           and overloaded(turn.reply.status))
            for run in self.runs for turn in (*run.turns, *run.side_turns)
        ) or any(failure.key_path[:1] == ("tools",)
                 for run in self.runs for stage in run.stages
                 for attempt in stage.attempts for failure in attempt.failures)

    @property
    def latency_ms(self) -> float | None:
        """Total request time; ``None`` when no request was sent (no cassette...)."""
        turns = [turn for run in self.runs for turn in run.turns]
        return sum(turn.latency_ms for turn in turns) if turns else None

    @property
    def recorded_latency_ms(self) -> float | None:
        """A replayed case: the total latency its cassette recorded (``latency_ms`` is the
        replay's own); None when no reply was replayed."""
        recorded = [reply.recorded_latency_ms for reply in self.replies
                    if reply.recorded_latency_ms is not None]
        return sum(recorded) if recorded else None

    @property
    def ttft_ms(self) -> float | None:
        return next((r.ttft_ms for r in self.replies if r.ttft_ms is not None), None)

    @property
    def total_tokens(self) -> int | None:
        return total_tokens(self.replies)

    def side_tokens(self, role: str) -> int | None:
        """The tokens the ``role`` (``judge``, ``simulator``) used; ``None`` when none of its
        replies reported usage."""
        return total_tokens([turn.reply for run in self.runs for turn in run.side_turns
                             if turn.role == role and turn.reply is not None])

    @property
    def spent_tokens(self) -> int | None:
        """Every token the case used: the model's, the judge's and the simulator's (what
        the token budget counts)."""
        counts = [count for count in (self.total_tokens, self.side_tokens("judge"),
                                      self.side_tokens("simulator")) if count is not None]
        return sum(counts) if counts else None

    @property
    def pass_hat_k(self) -> float | None:
        """tau-bench's pass^k with ``k`` the number of runs: the chance that ``k`` runs all
        pass (``pass_hat``); ``None`` for a single run."""
        k = len(self.runs)
        return pass_hat(self.passes, k, k) if k > 1 else None

    @property
    def tool_calls(self) -> int:
        return sum(len(reply.tool_calls) for reply in self.replies)

    @property
    def turns(self) -> int:
        return sum(len(run.turns) for run in self.runs)

    def figures(self) -> list[tuple[str, int | float]]:
        """The figures junitxml carries as properties, the known ones only, as the case
        record shows them (times to 0.1 ms)."""
        known = {"latency_ms": round_ms(self.latency_ms), "ttft_ms": round_ms(self.ttft_ms),
                 "total_tokens": self.total_tokens, "tool_calls": self.tool_calls,
                 "turns": self.turns, "faults_injected": self.faults_injected or None}
        return [(name, value) for name, value in known.items() if value is not None]

    @property
    def faults_injected(self) -> int:
        """How many of the case's requests got an injected fault."""
        return sum(turn.fault is not None for run in self.runs for turn in run.turns)


def overloaded(status: int) -> bool:
    """An overloaded or broken server's answer (429, 5xx): a recording that failed on it
    keeps the previous cassette."""
    return status == 429 or status >= 500


def pass_hat(passes: int, runs: int, k: int) -> float:
    """tau-bench's unbiased pass^k of ``runs`` trials of which ``passes`` passed:
    C(passes, k) / C(runs, k), the chance that ``k`` of the trials drawn at random all
    passed. Averaged over cases it is the suite's pass^k."""
    return math.comb(passes, k) / math.comb(runs, k) if 0 < k <= runs else 0.0


def round_ms(ms: float | None) -> float | None:
    """Milliseconds to 0.1, as records show them; unknown stays ``None`` (null), never 0."""
    return None if ms is None else round(ms, 1)


def total_tokens(replies: list[Reply]) -> int | None:
    """Sum of the replies' ``usage.total_tokens``; ``None`` when no reply reported it (a
    stream without a usage chunk): unknown, not zero."""
    counts = [(reply.usage or {}).get("total_tokens") for reply in replies]
    # What a server sent: a count, or anything (true, "12", Infinity), which is no count.
    known = [int(count) for count in counts
             if (isinstance(count, int) and not isinstance(count, bool))
             or (isinstance(count, float) and math.isfinite(count))]
    return sum(known) if known else None


def saved_ms(stream_ended_ms: float | None, runs: list[ToolRun]) -> float | None:
    """How much sooner a turn's tools were done than had they all started when its stream
    ended (each taking as long as it did): None when nothing can tell."""
    timed = [run for run in runs if run.started_ms is not None and run.ended_ms is not None]
    if stream_ended_ms is None or not timed:
        return None
    longest = max(run.duration_ms for run in timed)
    done = max(stream_ended_ms, max(run.ended_ms or 0.0 for run in timed))
    return round(max(0.0, stream_ended_ms + longest - done), 1)
