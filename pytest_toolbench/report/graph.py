"""A case's flow as a Mermaid state diagram, drawn from the executor's own ``TRANSITIONS``.

Each stage becomes a composite state holding the states of ``StageState`` it can reach, and
only the transitions its settings allow (no tool loop, no retry...); the case's routes
(``pass``, ``fail``) link the stages and ``end``, so the picture cannot drift from what
runs. ``toolbench graph`` prints it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from transitions.extensions.diagrams import HierarchicalGraphMachine
from transitions.extensions.nesting import NestedState

from ..casefile.routes import END, FAIL, PASS, route_table
from ..casefile.schema import Case, Stage
from ..run.machine import RUN_ENDED, RUN_FAILED, TRANSITIONS, StageState, route_machine

# Where a stage's run ends; FAILED also leads back to IDLE while retry attempts remain.
FINAL_STATES = (StageState.PASSED, StageState.FAILED)


@dataclass(frozen=True)
class StageFlow:
    """One stage and what its configuration lets happen, which decides its triggers."""

    stage: Stage
    answers_pending: bool
    """The stage can start with tool calls left unanswered by the stage before it."""

    def can_fire(self, trigger: str) -> bool:
        """Whether ``trigger`` can occur in this stage; triggers not named here always can."""
        stage = self.stage
        conditional = {
            "answer_pending": self.answers_pending,
            "tool_use": bool(stage.run_tools),
            # ``once`` sends two requests at most: max_turns 1 alone stops it earlier.
            "max_turns": stage.run_tools is True or (bool(stage.run_tools)
                                                     and stage.max_turns < 2),
            "other_variant": stage.stream == "both",
            "retry": stage.retry is not None and stage.retry.attempts > 1,
            "expected_error": "error" in stage.expect.model_fields_set,
        }
        return conditional.get(trigger, True)

    def label(self, trigger: str) -> str:
        stage = self.stage
        labels = {
            "tool_use": ("tool_use (once)" if stage.run_tools == "once"
                         else f"tool_use (max {stage.max_turns} turns)"),
            "max_turns": f"max_turns ({stage.max_turns} sent)",
            "other_variant": "other_variant (now not streamed)",
            "retry": f"retry (up to {stage.retry.attempts} attempts)" if stage.retry else "retry",
        }
        return labels.get(trigger, trigger)


def stage_flows(case: Case) -> list[StageFlow]:
    """Each stage with its flow; pending tool calls come from a stage without the loop
    that a route leads from."""
    routes = route_table(case)
    flows = []
    for index, stage in enumerate(case.stages):
        before = [case.stages[at] for at in range(len(case.stages))
                  if any(target == stage.name for _, target in routes.edges(at))]
        sends_tool_messages = any(message.get("role") == "tool" for message in stage.messages)
        # Only the full loop never leaves calls open: ``once`` stops at the reply to the
        # results, whatever it asks.
        pending = (any(previous.run_tools is not True for previous in before)
                   and not sends_tool_messages)
        flows.append(StageFlow(stage, pending))
    return flows


Edge = tuple[str, StageState, StageState]


def stage_edges(flow: StageFlow) -> list[Edge]:
    """The table's transitions this stage can take, from states it can reach."""
    possible = [edge for edge in _table_edges() if flow.can_fire(edge[0])]
    reachable = {StageState.IDLE}
    grew = True
    while grew:
        before = len(reachable)
        reachable |= {dest for _, source, dest in possible if source in reachable}
        grew = len(reachable) > before
    return [edge for edge in possible if edge[1] in reachable]


def _table_edges() -> list[Edge]:
    edges: list[Edge] = []
    for row in TRANSITIONS:
        sources = row["source"] if isinstance(row["source"], list) else [row["source"]]
        edges.extend((row["trigger"], source, row["dest"]) for source in sources)
    return edges


class _GraphState(NestedState):
    """A state with a display label; ``__`` joins names, as state values contain ``_``."""

    separator = "__"

    def __init__(self, *args: Any, label: str | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if label is not None:
            self.label = label  # read by transitions' markup, shown instead of the id


class _CaseGraphMachine(HierarchicalGraphMachine):
    state_cls = _GraphState


def case_graph(case: Case) -> str:
    """The case's flow as Mermaid: one composite state per stage, linked in order."""
    states: list[dict[str, Any]] = []
    transitions: list[dict[str, Any]] = []
    for index, flow in enumerate(stage_flows(case)):
        stage_id = f"stage{index}"
        edges = stage_edges(flow)
        states.append(_stage_state(stage_id, flow.stage, edges))
        transitions.extend(_stage_transition(stage_id, flow, edge) for edge in edges)
    routes = route_transitions(case)
    if any(route["dest"] == ENDED for route in routes):
        states.append({"name": ENDED, "label": END, "final": True})
    transitions += routes
    machine = _CaseGraphMachine(
        states=states, transitions=transitions, initial="stage0", auto_transitions=False,
        graph_engine="mermaid",
    )
    # transitions writes the title line verbatim into Mermaid's YAML front matter.
    title = f"title: {json.dumps(case.name)}"
    source: str = machine.get_graph(title=title).draw(None)
    return source.rstrip("\n") + "\n"


ENDED = "ended"
"""The id of ``end`` in the drawing (``end`` itself is a word of Mermaid's)."""


def route_transitions(case: Case) -> list[dict[str, Any]]:
    """The case's machine (``run/machine.py``'s ``route_machine``) between the stages'
    states: a ``pass`` and a routed ``fail`` out of each, to a stage or to ``end``. A
    failure no route takes ends the run in the stage's own ``failed``."""
    routes = route_table(case)
    machine = route_machine(routes)
    ids: dict[str | None, str] = {name: f"stage{index}"
                                  for index, name in enumerate(routes.stages)}
    ids[RUN_ENDED] = ENDED
    return [{"trigger": verdict, "source": ids[name], "dest": ids[transition.dest],
             "label": verdict}
            for name in routes.stages for verdict in (PASS, FAIL)
            for transition in machine.events[verdict].transitions.get(name, [])
            if transition.dest != RUN_FAILED]


def _stage_state(stage_id: str, stage: Stage, edges: list[Edge]) -> dict[str, Any]:
    used = {StageState.IDLE} | {edge[2] for edge in edges}
    children = [{"name": state.value, "final": state in FINAL_STATES}
                for state in StageState if state in used]
    return {"name": stage_id, "label": stage.name, "initial": StageState.IDLE.value,
            "children": children}


def _stage_transition(stage_id: str, flow: StageFlow, edge: Edge) -> dict[str, Any]:
    trigger, source, dest = edge
    join = _GraphState.separator
    return {"trigger": trigger, "source": f"{stage_id}{join}{source.value}",
            "dest": f"{stage_id}{join}{dest.value}", "label": flow.label(trigger)}
