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
    SIMULATING = "simulating"  # the simulated user writes its next message (simulate_user)
    CHECKING = "checking"  # matching the expectations against the reply
    PASSED = "passed"  # every expectation held
    FAILED = "failed"  # an expectation failed, or no reply could be had


S = StageState

# trigger, sources, destination, what it means (the graph prints the trigger names).
TRANSITIONS: list[dict[str, Any]] = [
    {"trigger": "send", "source": [S.IDLE, S.RUNNING_TOOLS, S.SIMULATING], "dest": S.SENDING},
    {"trigger": "simulate", "source": S.IDLE, "dest": S.SIMULATING},
    {"trigger": "answer_pending", "source": S.IDLE, "dest": S.RUNNING_TOOLS},
    {"trigger": "headers", "source": S.SENDING, "dest": S.RECEIVING},
    {"trigger": "tool_use", "source": S.RECEIVING, "dest": S.RUNNING_TOOLS},
    {"trigger": "end_turn", "source": S.RECEIVING, "dest": S.CHECKING},
    {"trigger": "user_turn", "source": S.RECEIVING, "dest": S.SIMULATING},
    {"trigger": "conversation_over", "source": S.SIMULATING, "dest": S.CHECKING},
    {"trigger": "simulator_error", "source": S.SIMULATING, "dest": S.FAILED},
    {"trigger": "max_turns", "source": S.RECEIVING, "dest": S.FAILED},
    {"trigger": "transport_error", "source": [S.SENDING, S.RECEIVING], "dest": S.FAILED},
    {"trigger": "other_variant", "source": S.CHECKING, "dest": S.IDLE},
    {"trigger": "all_hold", "source": S.CHECKING, "dest": S.PASSED},
    {"trigger": "mismatch", "source": S.CHECKING, "dest": S.FAILED},
    {"trigger": "retry", "source": S.FAILED, "dest": S.IDLE},
]
"""``other_variant`` runs the second half of ``stream: both``; ``retry`` needs ``retry:``;
``simulate``, ``user_turn``, ``conversation_over`` and ``simulator_error`` are a
``simulate_user`` stage's: the agent's turn goes to the simulated user, not to checking."""


def build_machine() -> Machine:
    """The machine of ``TRANSITIONS``: case runs are its models, moved by its events."""
    return Machine(
        model=None,
        states=StageState,
        transitions=TRANSITIONS,
        auto_transitions=False,
    )


MACHINE = build_machine()
"""Built once: building a machine costs 0.5 ms, more than a whole replayed stage. It holds
no model: each run is one without joining it (below), so it never holds a finished run."""


@final
class StageMachine:
    """What one case run drives through ``TRANSITIONS``, stage by stage, keeping the trail.

    A model of ``machine`` (``MACHINE``) moved by the machine's own events: ``fire`` calls
    ``Event.trigger(model)``, the very call a joined model's trigger method makes, so the
    table's checks, callbacks and conditions, transitions' logging and its ``MachineError``
    for a trigger the table forbids from the current state are all the library's. The run
    does not join the machine (``Machine.add_model`` binds every trigger and state test to
    the model, about 30 methods, which cost more than all of a replayed stage's
    transitions), so the machine keeps nothing of a run: a ``with`` block is the run, with
    nothing to release.
    """

    state: StageState

    def __init__(self, machine: Machine = MACHINE) -> None:
        self.machine = machine
        self.trail: list[str] = [StageState.IDLE.value]
        machine.set_state(StageState.IDLE, model=self)

    def __enter__(self) -> StageMachine:
        return self

    def __exit__(self, *exc_info: object) -> None:
        pass

    def begin_stage(self) -> None:
        """A new stage starts from idle with a trail of its own (the table has no way back
        from passed: a stage ends there)."""
        self.machine.set_state(StageState.IDLE, model=self)
        self.trail = [StageState.IDLE.value]

    def fire(self, trigger: str) -> None:
        """Take the transition named ``trigger``; MachineError if the table forbids it."""
        if self.machine.events[trigger].trigger(self):
            self.trail.append(self.state.value)
