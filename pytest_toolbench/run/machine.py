"""The executor's state machine: the states of a stage and the table of its transitions.

The table is data, and the whole truth (``auto_transitions=False``): the executor fires
only these triggers, and ``toolbench graph`` draws the same table, so they cannot drift.
"""

from __future__ import annotations

import enum
from typing import Any, final

from transitions import Machine


class StageState(enum.Enum):
    IDLE = "idle"  # not started yet, or reset to the conversation before it for a retry
    SENDING = "sending"  # a request is on its way; waiting for the status line
    RECEIVING = "receiving"  # reading the reply's body or stream
    RUNNING_TOOLS = "running_tools"  # running the tools the reply (or the last stage) asked for
    CHECKING = "checking"  # matching the expectations against the reply
    PASSED = "passed"  # every expectation held
    FAILED = "failed"  # an expectation failed, or no reply could be had


S = StageState

# trigger, sources, destination, what it means (the graph prints the trigger names).
TRANSITIONS: list[dict[str, Any]] = [
    {"trigger": "send", "source": [S.IDLE, S.RUNNING_TOOLS], "dest": S.SENDING},
    {"trigger": "answer_pending", "source": S.IDLE, "dest": S.RUNNING_TOOLS},
    {"trigger": "headers", "source": S.SENDING, "dest": S.RECEIVING},
    {"trigger": "tool_use", "source": S.RECEIVING, "dest": S.RUNNING_TOOLS},
    {"trigger": "end_turn", "source": S.RECEIVING, "dest": S.CHECKING},
    {"trigger": "max_turns", "source": S.RECEIVING, "dest": S.FAILED},
    {"trigger": "transport_error", "source": [S.SENDING, S.RECEIVING], "dest": S.FAILED},
    {"trigger": "other_variant", "source": S.CHECKING, "dest": S.IDLE},
    {"trigger": "all_hold", "source": S.CHECKING, "dest": S.PASSED},
    {"trigger": "mismatch", "source": S.CHECKING, "dest": S.FAILED},
    {"trigger": "retry", "source": S.FAILED, "dest": S.IDLE},
]
"""``other_variant`` runs the second half of ``stream: both``; ``retry`` needs ``retry:``."""


def build_machine() -> Machine:
    """The machine of ``TRANSITIONS``: case runs are its models, moved by its events."""
    return Machine(
        model=None,
        states=StageState,
        transitions=TRANSITIONS,
        auto_transitions=False,
    )


def _has_callbacks(machine: Machine) -> bool:
    """Whether anything in the machine runs code on a transition: callbacks of the machine,
    of its states or of its transitions, conditions, internal transitions (which run
    callbacks without moving), or a queue of events."""
    hooks = (machine.prepare_event, machine.before_state_change, machine.after_state_change,
             machine.finalize_event, machine.on_exception, machine.on_final)
    moves = [move for event in machine.events.values()
             for moves in event.transitions.values() for move in moves]
    return (machine.has_queue or any(hooks)
            or any(state.on_enter or state.on_exit or state.final
                   for state in machine.states.values())
            or any(move.conditions or move.prepare or move.before or move.after
                   or move.dest is None for move in moves))


MACHINE = build_machine()
"""Built once: building a machine costs 0.5 ms, more than a whole replayed stage. It holds
no model: each run is one without joining it (below), so it never holds a finished run."""

if _has_callbacks(MACHINE):  # pragma: no cover - a guard for whoever extends the table
    raise RuntimeError("run/machine.py: the table now runs callbacks or conditions;"
                       " StageMachine.fire must go through Event.trigger for them to run")


@final
class StageMachine:
    """What one case run drives through ``TRANSITIONS``, stage by stage, keeping the trail.

    A model of ``MACHINE`` that never joins it: ``Machine.add_model`` binds every trigger
    and state test to the model as methods (about 30), which cost more than all of a
    replayed stage's transitions. A trigger moves the model along the machine's own
    table: the event's transitions from the current state (``Event.transitions``) give
    the destination, which ``Machine.set_state`` sets. ``Event.trigger`` would do the
    same through some 60 calls of callback and logging machinery a transition of this
    table never uses (it has no callbacks or conditions: checked when it is built), a
    seventh of a replayed case's work. A trigger the table forbids from the current state
    goes to ``Event.trigger``, which raises its ``MachineError``. A ``with`` block is the
    run; the machine keeps nothing of it to release.
    """

    state: StageState

    def __init__(self) -> None:
        self.trail: list[str] = [StageState.IDLE.value]
        MACHINE.set_state(StageState.IDLE, model=self)

    def __enter__(self) -> StageMachine:
        return self

    def __exit__(self, *exc_info: object) -> None:
        pass

    def begin_stage(self) -> None:
        """A new stage starts from idle with a trail of its own (the table has no way back
        from passed: a stage ends there)."""
        MACHINE.set_state(StageState.IDLE, model=self)
        self.trail = [StageState.IDLE.value]

    def fire(self, trigger: str) -> None:
        """Take the transition named ``trigger``; MachineError if the table forbids it."""
        event = MACHINE.events[trigger]
        moves = event.transitions.get(self.state.name)
        if not moves:
            event.trigger(self)  # raises the MachineError that names trigger and state
            return
        dest = moves[0].dest
        assert dest is not None  # no internal transitions in the table: checked when built
        MACHINE.set_state(dest, model=self)
        self.trail.append(self.state.value)
