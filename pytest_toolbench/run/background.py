"""Background tools: the calls the model starts and never waits for.

A ``python`` tool with ``background: true``, a toolbox's ``background`` methods and an MCP
server's ``background`` tools are answered at once with ``{"status": "started", "task":
ID}``; the tool runs on its own, on the case's event loop, through its source as any call
does (its own time limit, whatever it raises an answer). A stage with ``await_background``
waits for every task started so far before its checks; the run's end waits for the rest,
each within its time limit, past which it is cancelled. Every task is reported (started,
ended, result or error); the errors of failed tasks are each judged once: by the first
stage that waited for them, else by the run's end.
"""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any, Protocol

from ..records import BackgroundTask, ToolCall
from .usercode import describe


class _Source(Protocol):
    """The side of a ``ToolSource`` a background task runs on."""

    @property
    def server(self) -> str | None: ...

    async def call(self, call: ToolCall) -> Any: ...

CANCEL_GRACE_S = 1.0
"""How long past its time limit a task may take to end before it is cancelled: the
source's own limit (``call_user``, an MCP call's) says so first, in its own words."""


def started_answer(task: str) -> str:
    """What the model is told of a background call: started, and the task's id."""
    return json.dumps({"status": "started", "task": task})


class BackgroundTasks:
    """The background tasks of one run of a case."""

    def __init__(self) -> None:
        self.records: list[BackgroundTask] = []
        self._running: dict[str, asyncio.Task[None]] = {}
        self._origin = time.perf_counter()
        self._judged_ids: set[str] = set()
        """The tasks whose failure a check has judged."""

    def begin_run(self) -> None:
        """A new run of the case: no tasks yet, times from now."""
        self.records, self._running, self._judged_ids = [], {}, set()
        self._origin = time.perf_counter()

    def start(self, call: ToolCall, source: _Source, timeout_s: float) -> str:
        """Start ``call`` on ``source`` on its own; its task's id."""
        task_id = f"task_{len(self.records) + 1}"
        record = BackgroundTask(task_id, call.name, call.arguments_raw, self._now(),
                                server=source.server)
        self.records.append(record)
        self._running[task_id] = asyncio.get_running_loop().create_task(
            self._run(record, source, call, timeout_s), name=f"toolbench-{task_id}")
        return task_id

    async def _run(self, record: BackgroundTask, source: _Source, call: ToolCall,
                   timeout_s: float) -> None:
        try:
            answer = await asyncio.wait_for(source.call(call), timeout_s + CANCEL_GRACE_S)
        except asyncio.TimeoutError:
            record.error = (f"{call.name} did not finish within {timeout_s:g} s: cancelled")
        except asyncio.CancelledError:
            record.error = f"{call.name} was cancelled: the run ended before it did"
            raise
        except Exception as error:  # noqa: BLE001 - a source that broke (ToolSourceFault)
            record.error = getattr(error, "message", None) or describe(error)
        else:
            record.result = answer.content
            record.error = answer.error
        finally:
            record.ended_ms = self._now()
            self._running.pop(record.task, None)

    async def wait(self) -> None:
        """Until every task started so far has ended (each within its time limit)."""
        while self._running:
            await asyncio.gather(*list(self._running.values()), return_exceptions=True)

    async def cancel(self) -> None:
        """Cancel what still runs (the case was broken off), and wait for it to stop."""
        tasks = list(self._running.values())
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.wait(tasks, timeout=CANCEL_GRACE_S)

    def unjudged_failures(self) -> list[BackgroundTask]:
        """The failed tasks no check has judged yet, now judged."""
        failed = [record for record in self.records if record.error is not None
                  and record.ended_ms is not None and record.task not in self._judged_ids]
        self._judged_ids.update(record.task for record in failed)
        return failed

    def _now(self) -> float:
        return round((time.perf_counter() - self._origin) * 1000, 1)


def task_error(record: BackgroundTask) -> str:
    """A failed task as ``expect.background_errors`` matches it: ``NAME: ERROR``."""
    return f"{record.name}: {record.error}"
