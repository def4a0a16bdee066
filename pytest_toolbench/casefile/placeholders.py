"""``${name}`` placeholders in a case, checked when its file is loaded.

A ``${name}`` names a value an earlier stage captured. ``undefined_names`` finds each one no
earlier stage captures, so collection and ``toolbench validate`` report a typo at its line;
``run/interpolate.py`` fills the values in as the case runs.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

from ..keypaths import KeyPath
from .routes import END, PASS, is_routed, route_table, way_without

if TYPE_CHECKING:
    from .schema import Case, Stage

PLACEHOLDER = re.compile(r"\$\$(?=\{)|\$\{([^}]+)\}")
"""``${name}`` (group 1 the name), or ``$$`` before a ``{``: the escape of a literal ``${``."""


def placeholder_names(text: str) -> Iterator[str]:
    """The names of the placeholders in ``text``, escaped ``$${...}`` left out."""
    return (match.group(1).strip() for match in PLACEHOLDER.finditer(text)
            if match.group(1) is not None)


def fill_placeholders(text: str, value_of: Callable[[str], str]) -> str:
    """``text`` with each ``${name}`` replaced by ``value_of(name)`` and each ``$${`` by
    ``${``."""
    return PLACEHOLDER.sub(
        lambda match: "$" if match.group(1) is None else value_of(match.group(1).strip()), text)


def escape_placeholders(text: str) -> str:
    """``text`` written so that a case reads it back as it is: each ``${`` as ``$${``."""
    return text.replace("${", "$${")


def did_you_mean(name: str, known: Any) -> str:
    close = difflib.get_close_matches(name, list(known), n=1, cutoff=0.6)
    return f"; did you mean `{close[0]}`?" if close else ""


def undefined_names(case: Case) -> Iterator[tuple[KeyPath, str]]:
    """Each ``${name}`` that no earlier stage captures: its key path in the case, and why.

    A stage's own ``capture`` runs after its checks, so it serves later stages only; the
    names of ``parametrize`` serve every stage.
    ``${env.NAME}`` is read when the stage runs and is not checked here.
    """
    if is_routed(case):
        yield from _unrouted_names(case)
        return
    captured: list[str] = case.parametrize.names if case.parametrize else []
    yield from _undefined_in_init(case, captured)
    for index, stage in enumerate(case.stages):
        for path, value in _interpolated(stage):
            for where, name in _placeholders(value, ("stages", index, *path)):
                if name not in captured and not name.startswith("env."):
                    yield where, _undefined(name, captured, case, index)
        captured.extend(name for name in stage.capture if name not in captured)
    if case.expect is not None:  # checked once every stage has run: all they capture
        for where, name in _placeholders(case.expect.model_dump(exclude_unset=True),
                                         ("expect",)):
            if name not in captured and not name.startswith("env."):
                yield where, (f"${{{name}}} is not defined"
                              f"{did_you_mean(name, captured) or _captures(captured)}")


def _undefined_in_init(case: Case, table: list[str]) -> Iterator[tuple[KeyPath, str]]:
    """An agent's ``init`` is read when the factory is called, before the first stage."""
    if case.agent is None:
        return
    for where, name in _placeholders(case.agent.init, ("agent", "init")):
        if name not in table and not name.startswith("env."):
            yield where, (f"${{{name}}} is not defined{did_you_mean(name, table)}"
                          f" ({_before_stages(table)})")


def _unrouted_names(case: Case) -> Iterator[tuple[KeyPath, str]]:
    """A routed case: each ``${name}`` that some route reaches its stage (or ``end``, for
    the case's own expect) without capturing. A stage captures when it passes, so only
    its ``pass`` route carries what it captured; a name stays captured from then on."""
    table = case.parametrize.names if case.parametrize else []
    yield from _undefined_in_init(case, table)
    routes = route_table(case)
    everywhere = [name for stage in case.stages for name in stage.capture]
    uses: list[tuple[int | None, str, tuple[KeyPath, Any]]] = [
        (index, stage.name, (("stages", index, *path), value))
            for index, stage in enumerate(case.stages) for path, value in _interpolated(stage)]
    if case.expect is not None:
        uses.append((None, END, (("expect",), case.expect.model_dump(exclude_unset=True))))
    for index, goal, (path, value) in uses:
        for where, name in _placeholders(value, path):
            if name in table or name.startswith("env."):
                continue
            capturing = {(at, PASS) for at, stage in enumerate(case.stages)
                         if name in stage.capture and at != index}
            way = way_without(routes, goal, capturing)
            if way is not None or name not in everywhere:
                yield where, _not_on_every_route(name, way, index, case, everywhere)


def _not_on_every_route(name: str, way: list[str] | None, index: int | None, case: Case,
                        everywhere: list[str]) -> str:
    """Why ``${name}`` may be missing where it is read: no stage captures it, or ``way``
    (from the first stage) comes there without passing one that does."""
    capturers = [stage.name for stage in case.stages if name in stage.capture]
    if not capturers:
        return f"${{{name}}} is not defined{did_you_mean(name, everywhere) or _captures(everywhere)}"
    if index is not None and capturers == [case.stages[index].name]:
        return (f"${{{name}}} is captured by this stage, after its checks; only the stages"
                " its routes lead to can use it")
    where = "the end of the run" if index is None else "this stage"
    assert way is not None
    return (f"${{{name}}} is not captured on every route to {where}: {' → '.join(way)}"
            f" reaches it without a pass of {', '.join(map(repr, capturers))}, which"
            " captures it")


def _before_stages(table: list[str]) -> str:
    """What ``init`` may name: the factory is called before any stage captures."""
    names = f"the table's names: {', '.join(table)}; " if table else ""
    return f"{names}init is read before any stage, so it sees no captured value"


def _captures(captured: list[str]) -> str:
    return (f" (the stages capture: {', '.join(captured)})" if captured else
            " (no stage captures it: `capture: {NAME: PATH}` on one would)")


def _interpolated(stage: Stage) -> Iterator[tuple[KeyPath, Any]]:
    """The values of a stage that ``${...}`` is filled into: its messages, its params
    and every expectation (a matcher as the case spelled it)."""
    yield ("user",), stage.user
    yield ("messages",), stage.messages
    yield ("params",), stage.params
    yield ("expect",), stage.expect.model_dump(exclude_unset=True)


def _placeholders(value: Any, path: KeyPath) -> Iterator[tuple[KeyPath, str]]:
    if isinstance(value, str):
        yield from ((path, name) for name in placeholder_names(value))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from _placeholders(item, (*path, index))
    elif isinstance(value, dict):
        for key, item in value.items():
            yield from _placeholders(item, (*path, key))


def _undefined(name: str, captured: list[str], case: Case, index: int) -> str:
    own = case.stages[index]
    later = next((stage.name for stage in case.stages[index + 1:] if name in stage.capture), None)
    if name in own.capture:
        return (f"${{{name}}} is captured by this stage, after its checks;"
                " only later stages can use it")
    if later is not None:
        return (f"${{{name}}} is captured by stage {later!r}, which runs after this one;"
                " a stage sees only what earlier stages captured")
    table = case.parametrize.names if case.parametrize else []
    stages = [known for known in captured if known not in table]
    defined = ([f"the table's names: {', '.join(table)}"] if table else []) + (
        [f"earlier stages capture: {', '.join(stages)}"] if stages else [])
    hint = did_you_mean(name, captured) or (
        f" ({'; '.join(defined)})" if defined else
        f" (no earlier stage captures it: `capture: {{{name}: PATH}}` on one would)")
    return f"${{{name}}} is not defined{hint}"
