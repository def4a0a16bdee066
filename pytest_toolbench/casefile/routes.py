"""A case's routes: where each stage's verdict leads, and what is wrong with them.

``next:`` on a stage names the stage to run when it passes (or ``end``), or routes both
verdicts, ``{pass: X, fail: Y}``. Unrouted, a stage that passes goes on to the next stage
in the file (the last one to ``end``) and one that fails ends the run, failed: a straight
case is the route table every stage leaves unsaid. ``route_table`` reads it for the
executor's machine (``run/machine.py``) and the graph; ``route_problems`` finds, before
anything is sent, each target that is no stage, each stage no route reaches and each loop
with no way out, at its line; ``way_without`` shows ``placeholders.py`` a way to a stage
that skips a capture.
"""

from __future__ import annotations

import difflib
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..keypaths import KeyPath

if TYPE_CHECKING:
    from .schema import Case

END = "end"
"""The target that ends the run (passed, unless a stage failed on the way unrouted)."""
PASS, FAIL = "pass", "fail"
"""The verdicts a stage's routes act on: the machine's triggers."""


@dataclass(frozen=True)
class RouteTable:
    """Each stage's targets by verdict: a stage name or ``END``; a failure not routed is
    ``None`` (the run ends there, failed). Hashable: the machine of a table is built once."""

    stages: tuple[str, ...]
    on_pass: tuple[str, ...]
    on_fail: tuple[str | None, ...]
    routed: bool
    """Whether any stage says ``next``: else the case runs straight, as cases always did."""

    def edges(self, index: int) -> Iterator[tuple[str, str]]:
        """``(verdict, target)`` of each route out of stage ``index``."""
        yield PASS, self.on_pass[index]
        failed = self.on_fail[index]
        if failed is not None:
            yield FAIL, failed

    def index_of(self, name: str) -> int | None:
        """The stage ``name``'s position; None for ``END`` or a name that is no stage."""
        return self.stages.index(name) if name in self.stages else None


def route_table(case: Case) -> RouteTable:
    """The case's routes, every default spelled out."""
    names = tuple(stage.name for stage in case.stages)
    on_pass: list[str] = []
    on_fail: list[str | None] = []
    for index, stage in enumerate(case.stages):
        following = names[index + 1] if index + 1 < len(names) else END
        route = stage.next
        if route is None or isinstance(route, str):
            on_pass.append(route or following)
            on_fail.append(None)
        else:
            on_pass.append(route.pass_ or following)
            on_fail.append(route.fail)
    return RouteTable(names, tuple(on_pass), tuple(on_fail), is_routed(case))


def is_routed(case: Case) -> bool:
    """Whether any stage says ``next``: else the case runs straight, in the file's order."""
    return any(stage.next is not None for stage in case.stages)


def target_path(case: Case, index: int, verdict: str) -> KeyPath:
    """Where the route of stage ``index`` for ``verdict`` is written (its ``next``)."""
    route = case.stages[index].next
    return ("stages", index, "next") if route is None or isinstance(route, str) else (
        "stages", index, "next", verdict)


def route_problems(case: Case) -> Iterator[tuple[KeyPath, str]]:
    """Every route error: a target that is no stage (with the nearest name), a stage named
    ``end``, a stage no route reaches, a loop with no way out to ``end``, a route that may
    run a stage of a BFCL case again."""
    if not is_routed(case):
        return  # a straight case: its routes are the file's order
    table = route_table(case)
    for index, name in enumerate(table.stages):
        if name == END:
            yield ("stages", index, "name"), (
                f"a stage of a routed case cannot be named {END!r}: `next: {END}` ends the run")
    unknown = False
    for index in range(len(table.stages)):
        for verdict, target in table.edges(index):
            if target != END and table.index_of(target) is None:
                unknown = True
                yield target_path(case, index, verdict), _unknown_target(target, table)
    if unknown:
        return  # the rest reads the routes, and these lead nowhere
    reached = _reachable(table)
    for index, name in enumerate(table.stages):
        if index not in reached:
            yield ("stages", index, "name"), (
                f"stage {name!r} is reached by no route: no `next` names it and the stage"
                " before it does not go on to it (route to it, or remove it)")
    yield from _loops_without_exit(case, table, reached)
    if case.bfcl_tools:
        yield from _bfcl_reruns(case, table)


def _bfcl_reruns(case: Case, table: RouteTable) -> Iterator[tuple[KeyPath, str]]:
    """A route back to its own stage or an earlier one may run that stage again, which a
    BFCL record cannot do: its instances keep what the first run did (as with ``retry``
    and ``stream: both``, refused with a ``bfcl`` entry too)."""
    for index in range(len(table.stages)):
        for verdict, target in table.edges(index):
            following = table.index_of(target)
            if following is not None and following <= index:
                yield target_path(case, index, verdict), (
                    f"next: {target} may run stage {target!r} again, but BFCL's instances"
                    " keep what its first run did: with a bfcl entry, routes only go on to"
                    " a later stage or end")


def _unknown_target(target: str, table: RouteTable) -> str:
    known = [*table.stages, END]
    close = difflib.get_close_matches(target, known, n=1, cutoff=0.6)
    hint = f" (did you mean {close[0]!r}?)" if close else ""
    return (f"next names stage {target!r}, which the case lacks{hint}; a route goes to one"
            f" of: {', '.join(known)}")


def _reachable(table: RouteTable) -> set[int]:
    """The stages some route from the first one reaches."""
    seen, queue = {0}, deque([0])
    while queue:
        index = queue.popleft()
        for _, target in table.edges(index):
            following = table.index_of(target)
            if following is not None and following not in seen:
                seen.add(following)
                queue.append(following)
    return seen


def _loops_without_exit(case: Case, table: RouteTable, reached: set[int]
                        ) -> Iterator[tuple[KeyPath, str]]:
    """Stages from which no route leads to ``end``: only max_iterations or an unrouted
    failure could stop them, so a run there could never pass. Told once a loop, at the
    ``next`` of its first stage."""
    exits = _reaching_end(table)
    told: set[int] = set()
    for index in sorted(reached - exits):
        if index in told:
            continue
        followed, loop = _loop_from(table, index, exits)
        if told.intersection(loop):
            told.update(followed)
            continue
        told.update(followed)
        names = " → ".join(table.stages[at] for at in [*loop, loop[0]])
        yield target_path(case, loop[0], PASS), (
            f"a loop with no way out: {names} never reaches {END}; route a verdict of one of"
            f" its stages to {END} or to a stage that reaches it")


def _reaching_end(table: RouteTable) -> set[int]:
    """The stages from which some route leads to ``end``."""
    found: set[int] = set()
    grew = True
    while grew:
        grew = False
        for index in range(len(table.stages)):
            if index in found:
                continue
            targets = [target for _, target in table.edges(index)]
            if any(target == END or table.index_of(target) in found for target in targets):
                found.add(index)
                grew = True
    return found


def _loop_from(table: RouteTable, start: int, exits: set[int]
               ) -> tuple[list[int], list[int]]:
    """The stages followed from ``start`` and the cycle they end in, among the stages that
    never reach ``end``: every route out of one leads to another, so following one loops."""
    order: list[int] = []
    index = start
    while index not in order:
        order.append(index)
        index = next(following for _, target in table.edges(index)
                     if (following := table.index_of(target)) is not None
                     and following not in exits)
    return order, order[order.index(index):]


def way_without(table: RouteTable, goal: str, blocked: set[tuple[int, str]]
                ) -> list[str] | None:
    """A way from the first stage to ``goal`` (a stage's name, or ``END``) that takes no
    route in ``blocked`` (``(stage index, verdict)``): the names along it, ``goal`` last;
    None when every way takes one."""
    came_from: dict[str, str | None] = {table.stages[0]: None}
    queue = deque([table.stages[0]])
    while queue:
        name = queue.popleft()
        if name == goal:
            way = [name]
            while (before := came_from[way[-1]]) is not None:
                way.append(before)
            return way[::-1]
        index = table.index_of(name)
        if index is None:
            continue  # END, or a target that is no stage (told apart)
        for verdict, target in table.edges(index):
            if target not in came_from and (index, verdict) not in blocked:
                came_from[target] = name
                queue.append(target)
    return None
