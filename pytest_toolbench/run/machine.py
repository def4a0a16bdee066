"""The executor's state machines: the states of a stage and the table of its transitions;
the stages of a case and its routes.

The tables are data, and the whole truth (``auto_transitions=False``): the executor fires
only these triggers, and ``toolbench graph`` draws the same tables, so they cannot drift.
"""

from __future__ import annotations

import enum
import functools
from typing import TYPE_CHECKING, Any, final

from transitions import Machine, MachineError

from ..casefile.routes import END, FAIL, PASS, RouteTable, route_table
from ..records import StageResult

if TYPE_CHECKING:
    from ..casefile.schema import Case


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
    {"trigger": "expected_error", "source": [S.SENDING, S.RECEIVING], "dest": S.CHECKING},
    {"trigger": "other_variant", "source": S.CHECKING, "dest": S.IDLE},
    {"trigger": "all_hold", "source": S.CHECKING, "dest": S.PASSED},
    {"trigger": "mismatch", "source": S.CHECKING, "dest": S.FAILED},
    {"trigger": "retry", "source": S.FAILED, "dest": S.IDLE},
]
"""``other_variant`` runs the second half of ``stream: both``; ``retry`` needs ``retry:``;
``simulate``, ``user_turn``, ``conversation_over`` and ``simulator_error`` are a
``simulate_user`` stage's: the agent's turn goes to the simulated user, not to checking;
``expected_error`` is a transport failure that the stage's ``expect.error`` checks."""


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


# -- the case's machine: its stages are the states, its routes the transitions ------------

RUN_ENDED = "(end)"
"""Where ``end`` leads: the run is over (a state no stage can be named: names have no
brackets)."""
RUN_FAILED = "(failed)"
"""Where a failure no route takes leads: the run is over, failed."""


@functools.lru_cache(maxsize=256)
def route_machine(table: RouteTable) -> Machine:
    """The machine of a case's routes: a state per stage and the two ends, a ``pass`` and
    a ``fail`` trigger out of each stage. Built once per route table (every straight case
    with the same stage names shares one), as ``MACHINE`` is."""
    transitions = []
    for index, name in enumerate(table.stages):
        failed = table.on_fail[index]
        transitions += [
            {"trigger": PASS, "source": name, "dest": _state(table.on_pass[index])},
            {"trigger": FAIL, "source": name,
             "dest": RUN_FAILED if failed is None else _state(failed)}]
    return Machine(model=None, states=[*table.stages, RUN_ENDED, RUN_FAILED],
                   transitions=transitions, initial=table.stages[0], auto_transitions=False)


def _state(target: str) -> str:
    return RUN_ENDED if target == END else target


@final
class CaseRoute:
    """One run's way through its case's machine, stage by stage; it counts the stage runs
    (``max_iterations``) and keeps the path. A model of ``route_machine(table)``, moved
    along the machine's own transitions (``took``)."""

    state: str

    def __init__(self, case: Case) -> None:
        self.table = table = route_table(case)
        self.max_iterations = case.max_iterations
        self.machine = route_machine(table)
        self.path: list[str] = []
        """The stages run so far, in order: a stage a loop ran again is there again."""
        self.exhausted = False
        """The run stopped at ``max_iterations`` with a stage still to run."""
        self.machine.set_state(table.stages[0], model=self)

    def next_stage(self) -> int | None:
        """The index of the stage to run now, counted as run; None once the run is over
        (``end``, an unrouted failure, or ``max_iterations`` runs)."""
        if self.state in (RUN_ENDED, RUN_FAILED):
            return None
        if len(self.path) >= self.max_iterations:
            self.exhausted = True
            return None
        self.path.append(self.state)
        return self.table.stages.index(self.state)

    def took(self, result: StageResult) -> None:
        """The stage's whole verdict moves the machine; a failure a route takes is a branch
        (``result.branch``), not the run's failure; ``result.next`` is where it led.

        The run takes the transition the machine's table holds for its state and the
        verdict, and the machine sets the state. Not ``Event.trigger``: the routes have no
        conditions or callbacks for it to run, and it costs 89,000 instructions a call, 85 %
        of what routing added to a straight case (benchmarks/bench_routes.py)."""
        verdict = PASS if result.passed else FAIL
        taken = self.machine.events[verdict].transitions.get(self.state)
        if not taken:
            raise MachineError(f"no {verdict} route out of {self.state!r}")
        self.machine.set_state(str(taken[0].dest), model=self)
        if self.state != RUN_FAILED:
            result.next = END if self.state == RUN_ENDED else self.state
            result.branch = not result.passed

    def exhausted_message(self) -> str:
        """``max_iterations (6) reached: ask → clarify → clarify → …``"""
        return (f"max_iterations ({self.max_iterations}) reached: "
                f"{' → '.join([*self.path, '…'])}")
