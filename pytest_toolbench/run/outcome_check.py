"""``expect.python``: a team's own check of a stage, called with what the stage did.

The function (``module:function``, plain or async) is called with a ``StageOutcome`` and
the agent of an agent case (None on the plugin's own loop), through ``run/usercode.py``
within the stage's time limit. An ``AssertionError`` fails the stage with its message;
anything else it raises fails it too, as an error of the check, with the user's frames.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ..keypaths import KeyPath
from ..records import Failure, Reply, ToolCall
from .check import Outcome
from .usercode import UserCodeFailed, UserLoop, call_user


@dataclass(frozen=True)
class StageOutcome:
    """What a stage did, as ``expect.python`` functions see it."""

    stage: str
    """The stage's name."""
    text: str
    """The reply's text: what an agent returned, or the plugin's loop's last reply's."""
    tool_calls: list[ToolCall]
    """Every tool call of every reply of the stage, in order: ``.name``, ``.arguments``
    (parsed JSON; None when it was not JSON, ``.arguments_raw`` as sent)."""
    requests: list[dict[str, Any]] = field(default_factory=list)
    """The request bodies sent to model APIs during the stage, in order."""
    replies: list[Reply] = field(default_factory=list)
    """Each model reply, as the wire readers read it."""
    usage: dict[str, Any] | None = None
    finish_reason: str | None = None


def stage_outcome(stage: str, outcome: Outcome, requests: list[dict[str, Any]]
                  ) -> StageOutcome:
    return StageOutcome(stage, outcome.text, list(outcome.tool_calls), requests,
                        list(outcome.replies), outcome.usage, outcome.reply.finish_reason)


async def python_check(python: str, record: StageOutcome, agent: Any, path: KeyPath,
                       line_of: Callable[[KeyPath], int], timeout_s: float,
                       loop: UserLoop | None) -> list[Failure]:
    """The failures of ``python``'s check of ``record`` (none when it returns)."""
    from ..casefile.schema import resolve_callable

    function = resolve_callable(python)
    try:
        await call_user(function, record, agent, timeout_s=timeout_s,
                        what=f"expect.python {python}", loop=loop)
    except UserCodeFailed as failed:
        assertion = failed.message.startswith("AssertionError")
        said = failed.message.partition(": ")[2] if assertion else failed.message
        if assertion:
            message = f"{python}: {said or 'assertion failed'}"
        else:
            frames = f"\n{failed.frames.rstrip()}" if failed.frames.strip() else ""
            message = f"{python} raised {said}{frames}"
        return [Failure(message, path, line_of(path))]
    return []
