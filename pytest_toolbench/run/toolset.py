"""The tools of one case run, from wherever their answers come: the seam every tool source
plugs into.

A ``ToolSource`` offers some tools and answers their calls: the case's own tools (canned
results, ``python`` callables, errors; ``run/tools.py``), one MCP server's tools (``mcp/``),
a toolbox's methods (``run/toolbox.py``), or a BFCL record's backend classes
(``run/bfcl.py``). A ``Toolset`` puts a case's sources together for one run: the tools every
request offers, and each call routed to the source that offers its tool. A source is opened
before the case's first stage and closed when the case ends.

A source that is also ``Stateful`` (a toolbox) starts afresh for every run of the case,
shows its state after each stage, and can be put back as it was (a retried stage). A
source with a ``checkpoint`` but no state to show (an MCP server started for the case) is
put back too. A source
whose tools change from stage to stage, or that checks a stage itself, is a
``StagedSource``: the runner tells it when a run and each stage begin, and asks it, once a
stage's agent loop is over, what it finds wrong with the stage.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, cast, runtime_checkable

from ..cuts import cut
from ..defaults import TOOL_RESULT_CHARS
from ..keypaths import KeyPath
from ..records import ToolCall, ToolRun
from .background import BackgroundTasks, started_answer

if TYPE_CHECKING:
    from ..casefile.schema import Stage, Tool


Restore = Callable[[], Awaitable[None]]
"""Puts a state back as it was when the function was made."""


@dataclass(frozen=True)
class Anchor:
    """Where a streamed turn's tool runs sit on the stream's clock: the stream's moment
    (in ms after the request was sent) that let them start, and ``time.perf_counter()``
    then. A run's start and end are that moment plus the time since."""

    stream_ms: float
    perf: float

    def at(self, perf: float) -> float:
        return round(self.stream_ms + (perf - self.perf) * 1000, 1)


@dataclass(frozen=True)
class ToolAnswer:
    """What a source answered one call: the tool message's content, and whether the tool
    failed (``error`` is then its message)."""

    content: str
    error: str | None = None

    @classmethod
    def failed(cls, message: str, content: str | None = None) -> ToolAnswer:
        """A failed call; its content is ``{"error": MESSAGE}`` unless the tool gave one."""
        return cls(json.dumps({"error": message}) if content is None else content, message)


class ToolFailed(Exception):
    """The tool could not give a result; the message goes back to the model."""


class ToolSource(Protocol):
    """Tools offered to the model and the answers to their calls."""

    @property
    def server(self) -> str | None:
        """Who runs the tools, as reports show it (an MCP server's name); ``None`` for the
        case's own tools."""

    @property
    def owner(self) -> str:
        """Who offers the tools, as messages name it (``MCP server 'notes'``)."""

    @property
    def tools(self) -> list[Tool]:
        """The tools as every request offers them (name, description, parameters)."""

    async def call(self, call: ToolCall) -> ToolAnswer:
        """Answer one call of one of ``tools``. A tool's own failure is an answer; only a
        source that broke (a server that died) raises ``ToolSourceFault``."""

    async def aclose(self) -> None:
        """Release what the source holds (a server it started); safe to call twice."""


@runtime_checkable
class StagedSource(Protocol):
    """A source that follows the case's stages (BFCL's record: tools added at a turn, the
    turn checked against the ground truth)."""

    async def begin_run(self) -> None:
        """A run (of ``repeat``) starts: start from the source's initial state."""

    def begin_stage(self, stage: Stage) -> None:
        """``stage`` starts: the tools its requests offer may change here."""

    def end_stage(self, stage: Stage) -> list[Any]:
        """The stage's agent loop is over: what the source finds wrong with the stage, as
        items with ``message``, ``path`` (below the stage), ``expected`` and ``actual``."""


@runtime_checkable
class Stateful(Protocol):
    """A source whose calls change a state that expectations read (a toolbox)."""

    label: str
    """Its name in ``expect.state`` and the reports."""

    async def begin_run(self) -> None:
        """Start afresh for a run of the case; ``ToolSourceFault`` when it cannot."""

    async def snapshot(self) -> Any:
        """The state now, as JSON data; raise ``ToolFailed`` saying why there is none."""

    async def checkpoint(self) -> Restore:
        """A function that puts the state back as it is now. Either may raise
        ``ToolSourceFault`` (a state that cannot be copied)."""


@dataclass
class WorldState:
    """Every stateful source's state at one moment: by label, or why it could not be read."""

    states: dict[str, Any] = field(default_factory=dict)
    errors: dict[str, str] = field(default_factory=dict)


class ToolSourceFault(Exception):
    """A tool source broke: the case fails, naming it and what happened.

    ``path`` is the key path, in the case, of what declared the source (``tools[1]``)."""

    def __init__(self, message: str, path: KeyPath = ()) -> None:
        super().__init__(message)
        self.message = message
        self.path = path


class Toolset:
    """The tools of one case run: every source's, each name offered once."""

    def __init__(self, sources: list[ToolSource], paths: list[KeyPath]) -> None:
        """``paths``: where each source is declared in the case, for messages."""
        self.sources = sources
        restarting = [source for source in sources if _restarts(source)]
        self.staged = [source for source in restarting if isinstance(source, StagedSource)]
        # A call of a name no source offers: a source that runs such calls itself, else
        # the case's own tools, which answer "unknown tool".
        self._unoffered = next((source for source in sources
                                if getattr(source, "runs_unoffered", False)), sources[0])
        self._by_name: dict[str, ToolSource] = {}
        for source, path in zip(sources, paths):
            for tool in source.tools:
                other = self._by_name.get(tool.name)
                if other is not None:
                    raise ToolSourceFault(
                        f"tool name {tool.name!r} clash: {source.owner} and {other.owner}"
                        " both offer it; leave one out (MCP servers: `include`)", path)
                self._by_name[tool.name] = source
        self._background: dict[str, float] = {
            name: timeout_s for source in sources
            for name, timeout_s in getattr(source, "background", {}).items()}
        """The tools answered at once and run on their own, each with its time limit."""
        self.tasks = BackgroundTasks()
        """The run's background tasks."""
        self.stateful = [source for source in restarting if isinstance(source, Stateful)]
        self._rewinding: list[Callable[[], Awaitable[Restore]]] = [
            source.checkpoint for source in sources  # type: ignore[attr-defined]
            if source not in self.stateful and getattr(source, "checkpoint", None)]
        """The checkpoints of the sources that are put back but show no state (an MCP
        server started for the case)."""
        self._restarted = [cast("StagedSource | Stateful", source) for source in restarting
                           if source in self.staged or source in self.stateful]
        """What starts afresh for every run: the staged and the stateful sources."""

    @property
    def tools(self) -> list[Tool]:
        return [tool for source in self.sources for tool in source.tools]

    async def run(self, calls: list[ToolCall], anchor: Anchor | None = None) -> list[ToolRun]:
        """Run every call at once; the runs come back in the order of the calls.
        ``anchor``: a streamed turn's, to place each run on the stream's clock."""
        return list(await asyncio.gather(*(self.run_one(call, anchor) for call in calls)))

    async def run_one(self, call: ToolCall, anchor: Anchor | None = None) -> ToolRun:
        """Run one call (a background tool's: start it, and answer that it started)."""
        source = self._by_name.get(call.name) or self._unoffered
        started = time.perf_counter()
        task = None
        if call.name in self._background:
            task = self.tasks.start(call, source, self._background[call.name])
            answer = ToolAnswer(started_answer(task))
        else:
            answer = await source.call(call)
        ended = time.perf_counter()
        # Cut before the model is sent it: requests, cassettes and reports hold the same.
        error = None if answer.error is None else cut(answer.error, TOOL_RESULT_CHARS)
        return ToolRun(call.id, call.name, call.arguments_raw,
                       cut(answer.content, TOOL_RESULT_CHARS), error, (ended - started) * 1000,
                       failed=answer.error is not None, server=source.server,
                       started_ms=None if anchor is None else anchor.at(started),
                       ended_ms=None if anchor is None else anchor.at(ended), task=task)

    async def begin_run(self) -> None:
        self.tasks.begin_run()
        for source in self._restarted:
            await source.begin_run()

    def begin_stage(self, stage: Stage) -> None:
        for source in self.staged:
            source.begin_stage(stage)

    def end_stage(self, stage: Stage) -> list[Any]:
        return [failure for source in self.staged for failure in source.end_stage(stage)]

    async def snapshot(self) -> WorldState:
        world = WorldState()
        for source in self.stateful:
            try:
                world.states[source.label] = await source.snapshot()
            except ToolFailed as failure:
                world.errors[source.label] = str(failure)
        return world

    @property
    def rewinds(self) -> bool:
        """Whether a retried stage has anything to put back (a toolbox, an MCP server)."""
        return bool(self.stateful or self._rewinding)

    async def checkpoint(self) -> Restore:
        """A function that puts every stateful source, and every source started for the
        case, back as it is now."""
        restores = [await source.checkpoint() for source in self.stateful]
        restores += [await checkpoint() for checkpoint in self._rewinding]

        async def restore() -> None:
            for each in restores:
                await each()
        return restore

    async def aclose(self) -> None:
        for source in reversed(self.sources):
            await source.aclose()


def _restarts(source: object) -> bool:
    """Whether ``source`` may be a ``StagedSource`` or ``Stateful``: both protocols have
    ``begin_run``, so a source without it (the case's own tools, in every case) is neither.
    ``hasattr`` tells that at once, where typing's check of a runtime protocol walks the
    protocol's classes at every call (25 us each in Python 3.11): the sources' kinds are
    asked once a source, when the case's tools are put together."""
    return hasattr(source, "begin_run")
