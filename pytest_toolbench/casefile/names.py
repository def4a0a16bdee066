"""Tool names a case refers to, checked against the tools it offers.

A name in ``tool_choice``, ``expect.tool_calls``, ``expect.trajectory`` or a probe that no
tool of the case offers is a typo that would cost requests (a forced unknown tool is a
server error, retried); it is reported at its line, with the nearest offered name. The
names of an MCP server's or BFCL's tools are known once the tools are opened: such a case
is checked by the run, before its first request (``unoffered``).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING, Any

from ..keypaths import KeyPath
from .placeholders import did_you_mean

if TYPE_CHECKING:
    from .schema import Case, Stage

_NOT_REFERENCES = frozenset({"$not", "$absent", "$any", "$type", "$len", "$regex",
                             "$contains", "$icontains", "$loose", "$schema", "$json"})
"""Operators whose operands are not names the model must call: ``$not: [{name: rm}]``
says a tool is never called, which an unoffered tool never is."""


Reference = tuple[KeyPath, str, str]
"""A tool name the case refers to: its key path, the name, and how the message says where
(a template with ``{name}``)."""

_CHOSEN = "tool_choice names {name}, which"
_ALLOWED = "allowed tool {name}"
_EXPECTED = "expects a call of {name}, which"
_PROBED = "probe calls {name}, which"


def referenced_tools(case: Case) -> Iterator[Reference]:
    """Each tool name the case refers to, with its key path in the case."""
    for index, stage in enumerate(case.stages):
        yield from _stage_references(stage, ("stages", index))
    if case.expect is not None:
        yield from _expect_references(case.expect, ("expect",))


def _stage_references(stage: Stage, base: KeyPath) -> Iterator[Reference]:
    from .schema import AllowedTools, ToolChoiceFunction

    choice = stage.tool_choice
    if isinstance(choice, ToolChoiceFunction):
        yield (*base, "tool_choice", "name"), choice.name, _CHOSEN
    elif isinstance(choice, AllowedTools):
        for position, name in enumerate(choice.allowed_tools.tools):
            yield (*base, "tool_choice", "allowed_tools", "tools", position), name, _ALLOWED
    if "tool_calls" in stage.expect.model_fields_set and stage.expect.tool_calls is not None:
        yield from _call_names(stage.expect.tool_calls.spec, (*base, "expect", "tool_calls"))
    yield from _expect_references(stage.expect, (*base, "expect"))


def _expect_references(expect: Any, base: KeyPath) -> Iterator[Reference]:
    """A ``trajectory``'s and the probes' names."""
    if "trajectory" in expect.model_fields_set and expect.trajectory is not None:
        yield from _call_names(expect.trajectory.spec, (*base, "trajectory"))
    for index, probe in enumerate(expect.probe or []):
        yield (*base, "probe", index, "call", "name"), probe.call.name, _PROBED


def _call_names(spec: Any, path: KeyPath) -> Iterator[Reference]:
    """The literal ``name`` of every call matcher in ``spec`` (a list of calls, or
    operators over one), and the names an ``$eq`` or ``$in`` on a name lists."""
    if isinstance(spec, list):
        for index, item in enumerate(spec):
            yield from _call_names(item, (*path, index))
    elif isinstance(spec, dict) and any(str(key).startswith("$") for key in spec):
        for key, value in spec.items():
            if key not in _NOT_REFERENCES and isinstance(value, (list, dict)):
                yield from _call_names(value, (*path, key))
    elif isinstance(spec, dict) and "name" in spec:
        yield from _names_matched(spec["name"], (*path, "name"))


def _names_matched(spec: Any, path: KeyPath) -> Iterator[Reference]:
    if isinstance(spec, str):
        yield path, spec, _EXPECTED
    elif isinstance(spec, dict) and isinstance(spec.get("$eq"), str):
        yield (*path, "$eq"), spec["$eq"], _EXPECTED
    elif isinstance(spec, dict) and isinstance(spec.get("$in"), list):
        for index, name in enumerate(spec["$in"]):
            if isinstance(name, str):
                yield (*path, "$in", index), name, _EXPECTED


def unoffered(case: Case, offered: Iterable[str]) -> Iterator[tuple[KeyPath, str]]:
    """Each name the case refers to that no tool of ``offered`` is, with why."""
    known = sorted(set(offered))
    for path, name, lead in referenced_tools(case):
        if name not in known and "${" not in name:  # a placeholder: known as the case runs
            hint = did_you_mean(name, known) or f" ({', '.join(known) or 'none'})"
            where = lead.format(name=repr(name))
            yield path, f"{where} is not one of the case's tools{hint}"


def names_known_at_load(case: Case) -> bool:
    """Whether every tool's name is known before the tools are opened: no MCP server's."""
    return not case.mcp_tools


def names_checked(case: Case) -> bool:
    """Whether the case's tool names are the case's to check: not an agent case's, whose
    agent offers its own tools in its own requests."""
    return case.agent is None


def offered_at_load(case: Case) -> list[str]:
    """The names of the tools known before any is opened: the case's own, each toolbox's
    methods, BFCL's functions (held back or not)."""
    names = [tool.name for tool in case.offered_tools]
    if case.bfcl_tools:
        from ..bfcl.backend import function_docs  # imported already: validation did

        names += [doc["name"] for entry in case.bfcl_tools
                  for cls in entry.bfcl.involved_classes for doc in function_docs(cls)]
    return names
