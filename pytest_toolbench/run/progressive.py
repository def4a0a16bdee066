"""``run_tools: progressive``: each call of a streamed reply run the moment its arguments
are complete in the stream, while the stream goes on.

The stream reader tells ``start`` of each call as its API marks it complete (Responses'
``function_call_arguments.done``, a Messages ``content_block_stop``, chat's next call index
or finish reason, a Gemini part); ``start`` runs it through the toolset at once, as a task
on the case's event loop. Once the reply is whole, ``runs`` gives each of its calls' runs
in order: the one started early when the call is the same, else a run started now (a call
no mark closed before the stream ended).
"""

from __future__ import annotations

import asyncio
import time

from ..records import ToolCall, ToolRun
from .toolset import Anchor, Toolset


class ProgressiveRuns:
    """The tool runs one streamed reply started as its calls closed."""

    def __init__(self, toolset: Toolset) -> None:
        self.toolset = toolset
        self.started: list[tuple[ToolCall, asyncio.Task[ToolRun]]] = []

    def start(self, call: ToolCall) -> None:
        """The stream closed ``call``: run it now (the stream reader's hook)."""
        anchor = Anchor(call.closed_ms or 0.0, time.perf_counter())
        task = asyncio.get_running_loop().create_task(self.toolset.run_one(call, anchor))
        self.started.append((call, task))

    async def runs(self, calls: list[ToolCall], anchor: Anchor) -> list[ToolRun]:
        """The runs of the reply's ``calls``, in order: each started one awaited, the rest
        (closed by no mark before the stream's end) run now, from ``anchor``."""
        waiting = list(self.started)
        pending: list[asyncio.Future[ToolRun] | asyncio.Task[ToolRun]] = []
        for call in calls:
            match = next((entry for entry in waiting if _same(entry[0], call)), None)
            if match is not None:
                waiting.remove(match)
                pending.append(match[1])
            else:
                pending.append(asyncio.ensure_future(self.toolset.run_one(call, anchor)))
        await self.drop(waiting)
        return list(await asyncio.gather(*pending))

    async def drop(self, entries: list[tuple[ToolCall, asyncio.Task[ToolRun]]] | None = None
                   ) -> None:
        """Wait for runs whose answers will not be sent (the reply broke off, or its final
        calls differ): a tool already started is let finish."""
        tasks = [task for _call, task in (self.started if entries is None else entries)]
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)


def _same(early: ToolCall, final: ToolCall) -> bool:
    """Whether the call started early is the reply's call as finally read."""
    return (early.id, early.name, early.arguments_raw) == (final.id, final.name,
                                                           final.arguments_raw)
