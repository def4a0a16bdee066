"""A BFCL multi-turn record's tools as a ``ToolSource``, and BFCL's check of each turn.

Each run holds two chains of BFCL's instances (``backend.Chain``), built afresh from the
record's initial config: the model's calls run on one, the ground truth on the other, and
both carry over from stage (turn) to stage. The tools offered are the involved classes'
function docs, in order, less the held-back ones until the stage that adds them (appended
then, as BFCL appends them). Any public method runs, offered or not, as in BFCL.

After a stage whose ``expect.bfcl`` gives ground-truth calls, the checks of BFCL's
``multi_turn_checker`` (bfcl-eval 2026.3.23) apply, the first that fails failing the stage:
the model made a call in the turn; every public attribute of each ground-truth instance
equals the model instance's (Python ``!=``, so the classes' own ``__eq__``); the turn's
ground-truth results are a sub-multiset of the model's results of this turn and every
earlier one. A turn without ground-truth calls is not checked.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass
from typing import Any

from ..bfcl.backend import Chain, function_docs, parse_call
from ..bfcl.types import json_schema
from ..casefile.schema import BfclToolbox, Stage, Tool
from ..keypaths import KeyPath
from ..records import ToolCall
from .toolset import ToolAnswer, ToolSourceFault


@dataclass(frozen=True)
class TurnFailure:
    """A turn BFCL's checker fails: what it says, where in the stage, and the values."""

    message: str
    path: KeyPath
    expected: Any = None
    actual: Any = None


class BfclSource:
    """The tools of one ``{bfcl: ...}`` entry (a ``ToolSource`` that knows its stages)."""

    server = None
    owner = "BFCL's classes"
    runs_unoffered = True
    """A call of a name no source offers comes here: BFCL runs any public method."""

    def __init__(self, spec: BfclToolbox, path: KeyPath) -> None:
        self._spec, self._path = spec, path
        try:
            docs = [doc for name in spec.involved_classes for doc in function_docs(name)]
            held = {name for names in spec.held_back.values() for name in names}
            by_name = {doc["name"]: _tool(doc) for doc in docs}
        except Exception as error:  # noqa: BLE001 - a broken install or doc file
            raise ToolSourceFault(f"BFCL's function docs cannot be read: {error}", path
                                  ) from None
        self._offered = [by_name[doc["name"]] for doc in docs if doc["name"] not in held]
        self._added = {stage: [by_name[name] for name in names]
                       for stage, names in spec.held_back.items()}
        self._tools = list(self._offered)

    @property
    def tools(self) -> list[Tool]:
        return self._tools

    async def begin_run(self) -> None:
        """Fresh chains and the first turn's tools: a run starts the record over."""
        spec = self._spec
        self.model = Chain(spec.involved_classes, spec.initial_config, spec.long_context)
        self.truth = Chain(spec.involved_classes, spec.initial_config, spec.long_context)
        self._tools = list(self._offered)
        self._results: list[str] = []
        """The model's result strings, every turn so far."""
        self._turn_calls = 0

    def begin_stage(self, stage: Stage) -> None:
        self._tools = [*self._tools, *self._added.get(stage.name, [])]
        self._turn_calls = 0

    async def call(self, call: ToolCall) -> ToolAnswer:
        if call.arguments_error is not None or not isinstance(call.arguments, dict):
            # BFCL cannot decode such a step: it neither runs nor counts it.
            return ToolAnswer.failed("arguments must be a JSON object, got"
                                     f" {call.arguments_raw[:200]}")
        content = self.model.call(call.name, (), call.arguments)
        self._turn_calls += 1
        self._results.append(content)
        return ToolAnswer(content)

    async def aclose(self) -> None:
        """Nothing to release: the instances live in this process."""

    def end_stage(self, stage: Stage) -> list[TurnFailure]:
        """BFCL's check of the stage as one turn: no failure, or the first one."""
        expect = stage.expect.bfcl
        if expect is None or not expect.ground_truth:
            return []
        truth = [self.truth.call(p.name, p.args, p.kwargs)
                 for p in map(parse_call, expect.ground_truth)]
        path: KeyPath = ("expect", "bfcl", "ground_truth")
        if not self._turn_calls:
            return [TurnFailure(
                f"the model made no tool call in this turn; the ground truth makes"
                f" {len(truth)}: {', '.join(expect.ground_truth)}", path)]
        for name, expected in self.truth.instances.items():
            differences = _differences(self.model.instances[name], expected)
            if differences:
                return [TurnFailure(
                    f"{name}'s state differs from the ground truth's after this turn in"
                    f" {', '.join(differences)}", path,
                    {key: _shown(value[0]) for key, value in differences.items()},
                    {key: _shown(value[1]) for key, value in differences.items()})]
        missing = list((Counter(truth) - Counter(self._results)).elements())
        if missing:
            return [TurnFailure(
                f"{len(missing)} of the ground truth's {len(truth)} results are not among the"
                f" model's results of this turn and the earlier ones: {_cut(missing[0])}",
                path, sorted(truth), sorted(self._results))]
        return []


def _differences(model: Any, truth: Any) -> dict[str, tuple[Any, Any]]:
    """Public attributes of the ground truth's instance whose model value differs:
    name -> (ground truth's, model's)."""
    return {name: (value, getattr(model, name)) for name, value in vars(truth).items()
            if not name.startswith("_") and getattr(model, name) != value}


def _tool(doc: dict[str, Any]) -> Tool:
    """A BFCL function doc as the tool every request offers."""
    parameters = json_schema(doc.get("parameters") or {"type": "dict", "properties": {}},
                             doc["name"])
    return Tool.model_construct({"name", "description", "parameters"}, name=doc["name"],
                                description=str(doc.get("description", "")),
                                parameters=parameters)


def _shown(value: Any) -> Any:
    """A state value as the failure's diff shows it: JSON, with sets sorted and objects
    by their public attributes."""
    try:
        return json.loads(json.dumps(value, default=_plain))
    except (TypeError, ValueError):  # keys JSON cannot hold (tuples), a cycle
        return repr(value)


def _plain(value: Any) -> Any:
    if isinstance(value, (set, frozenset)):
        return sorted(value, key=repr)
    if hasattr(value, "__dict__"):
        return {key: item for key, item in vars(value).items() if not key.startswith("_")}
    return repr(value)


def _cut(text: str, width: int = 160) -> str:
    return text if len(text) <= width else text[:width - 3] + "..."
