"""Berkeley Function Calling Leaderboard records -> case files (``toolbench import-bfcl``).

Each BFCL question record becomes one case: its functions become the case's tools, its
question one stage's ``messages``, and its ground truth an ``expect.tool_calls`` matcher
that applies the leaderboard's AST checker rules:

- the function name must match; a dot is sent as ``_`` (OpenAI names allow no dots), in the
  tool definition and in the expected name alike;
- no parameter outside the schema and the answer: the arguments are an ``$exact`` object
  of the answer's parameters;
- ``""`` among a parameter's acceptable values: it may be left out (``$optional``; a
  parameter whose only acceptable value is ``""``, or one the schema does not define,
  must be left out: ``$absent``); a required parameter must be given all the same;
- several acceptable values: ``$anyof``;
- strings compare after normalising (``$loose``); an integer must be an integer
  (``{$type: integer, $eq: N}``, as a literal ``5`` would accept ``5.0``); a float accepts an
  integer, and no number accepts a boolean (a literal, as the matcher language compares
  numbers by value and never equates booleans with numbers);
- lists compare element-wise, in order, each element by the same rules; a dict answer
  holds acceptable values per key, as parameters do (``$exact`` again);
- parallel calls are matched one-to-one in any order (the plain ``tool_calls`` list), and a
  record without answers (``irrelevance``) expects no call at all (``tool_calls: []``).

A string answer for a parameter that the schema types otherwise is what BFCL calls a
variable (``"data['sales']"`` for an array): the checker compares it exactly, so it stays a
literal. Records the case format cannot express are skipped, each with its reason.

Where the checker's code is laxer than these rules, the cases follow the rules: the code
also accepts ``""`` sent as the value of a string that may be left out, ``[]`` for a list
that may be left out, and a list of floats given as integers only when the answer has
integers; it compares values inside dict answers without type checks.

Records of the multi-turn categories (they name ``involved_classes``) become cases of
several stages, run on BFCL's own classes: ``bfcl_multi.py``.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import re
import sys
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import yaml
from pydantic import ValidationError

try:  # libyaml's emitter is several times faster than PyYAML's; the output is the same YAML
    from yaml import CSafeDumper as _SafeDumper
except ImportError:  # pragma: no cover - depends on how PyYAML was built
    from yaml import SafeDumper as _SafeDumper  # type: ignore[assignment]

from ..bfcl import types as bfcl_types
from ..casefile.schema import Case
from ..report.failure import plural
from .argtypes import positive_int
from .bfcl_multi import MultiTurnUnmappable, is_multi_turn, multi_turn_case

__all__ = ["BfclError", "ImportSummary", "SkippedRecord", "import_bfcl", "json_schema", "main"]

CHUNK_SIZE: Final = 100
"""Cases per file: small enough to review, large enough to keep the file count low."""
OPTIONAL: Final = ""
"""BFCL's acceptable value meaning "the parameter may be left out"."""

_TOOL_NAME: Final = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")  # what OpenAI-compatible APIs accept
_NOT_IN_CASE_NAME: Final = re.compile(r"[^A-Za-z0-9_.-]")
_NOT_IN_MARK: Final = re.compile(r"[^A-Za-z0-9_]")
_RECORD_CATEGORY: Final = re.compile(r"^(?P<category>.+?)_\d+(?:[-_]\d+)*$")  # live_simple_0-0-0
_FILE_PREFIX: Final = re.compile(r"^BFCL_v\d+_")
_STAGE: Final = "ask"
_INLINE_WIDTH: Final = 72  # a matcher longer than this is spread over lines


class BfclError(Exception):
    """A questions or answers file that cannot be read; printed without a traceback."""

    exit_code = 1


class BfclUsageError(BfclError):
    """A path on the command line that does not exist."""

    exit_code = 2


class _Unmappable(Exception):
    """A record the case format cannot express; it is skipped with this message."""


def json_schema(schema: Any, where: str) -> Any:
    """BFCL's parameter schema as JSON Schema (``bfcl.types.json_schema``); a type with no
    JSON Schema twin makes the record unmappable."""
    try:
        return bfcl_types.json_schema(schema, where)
    except bfcl_types.NoJsonType as error:
        raise _Unmappable(str(error)) from None


@dataclass(frozen=True)
class SkippedRecord:
    """A record that was not turned into a case, and why."""

    id: str
    reason: str


@dataclass
class ImportSummary:
    """What an import wrote and what it left out."""

    out_dir: Path
    files: list[Path] = field(default_factory=list)
    categories: Counter[str] = field(default_factory=Counter)
    """Cases written per BFCL category."""
    skipped: list[SkippedRecord] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    """What the user should know about how the input was read."""

    @property
    def cases(self) -> int:
        return sum(self.categories.values())

    def render(self) -> str:
        """The report ``main`` prints: counts first, then each skipped record."""
        by_category = ", ".join(f"{name}: {count}"
                                for name, count in sorted(self.categories.items()))
        lines = [f"wrote {plural(self.cases, 'case')} in {plural(len(self.files), 'file')} "
                 f"to {self.out_dir}" + (f" ({by_category})" if by_category else "")]
        lines += [f"note: {note}" for note in self.notes]
        if self.skipped:
            lines.append(f"skipped {plural(len(self.skipped), 'record')}:")
            lines += [f"  {record.id}: {record.reason}" for record in self.skipped]
        return "\n".join(lines)


# ---------------------------------------------------------------------------- import


def import_bfcl(questions: Path, answers: Path | None, out_dir: Path,
                chunk_size: int = CHUNK_SIZE, limit: int | None = None) -> ImportSummary:
    """Write the records of ``questions`` (its first ``limit``, when given) as case files
    under ``out_dir``.

    ``answers`` is the matching ``possible_answer`` file, or ``None`` (or an empty file) for
    a category whose right answer is no call at all (``irrelevance``). Files are named after
    the questions file's category and the positions of their cases:
    ``simple_python_000-099.case.yaml``.
    """
    records = _read_json_lines(questions)[:limit]
    truths = _ground_truths(answers) if answers is not None else None
    summary = ImportSummary(out_dir)
    if answers is not None and truths is None:
        summary.notes.append(f"{answers} is empty: every case expects no tool call, as with "
                             "'-' (irrelevance)")
    cases = _convert_all(records, truths, _file_category(questions), summary)
    out_dir.mkdir(parents=True, exist_ok=True)
    summary.files = _write_cases(cases, out_dir, _file_category(questions), questions.name,
                                 chunk_size)
    return summary


def _convert_all(records: list[dict[str, Any]], truths: dict[str, Any] | None,
                 default_category: str, summary: ImportSummary) -> list[dict[str, Any]]:
    cases: list[dict[str, Any]] = []
    names: set[str] = set()
    for record in records:
        record_id = str(record.get("id", ""))
        try:
            case = _case(record, truths, default_category)
            _validate(case)
            if case["name"] in names:  # ids that differ only in characters names cannot hold
                raise _Unmappable(f"its case name {case['name']!r} is already taken")
        except (_Unmappable, MultiTurnUnmappable) as reason:
            summary.skipped.append(SkippedRecord(record_id or "<no id>", str(reason)))
            continue
        names.add(case["name"])
        summary.categories[_record_category(record_id, default_category)] += 1
        cases.append(case)
    return cases


def _case(record: dict[str, Any], truths: dict[str, Any] | None,
          default_category: str) -> dict[str, Any]:
    """One record as case data, validated as ``load_case_file`` will validate it."""
    record_id = record.get("id")
    if not isinstance(record_id, str) or not record_id:
        raise _Unmappable("the record has no id")
    category = _record_category(record_id, default_category)
    if is_multi_turn(record):
        return multi_turn_case(record, _NOT_IN_CASE_NAME.sub("_", record_id), category, truths)
    functions = _functions(record)
    expect = {"tool_calls": _expected_calls(record_id, truths, functions)}
    case = {
        "name": _NOT_IN_CASE_NAME.sub("_", record_id),
        "description": f"BFCL {record_id} (category {category})",
        "marks": ["bfcl", f"bfcl_{_NOT_IN_MARK.sub('_', category)}"],
        "tools": [_tool(function) for function in functions.values()],
        "stages": [{"name": _STAGE, "messages": _messages(record), "tool_choice": "auto",
                    "expect": expect}],
    }
    _validate(case)
    return case


def _validate(case: dict[str, Any]) -> None:
    # Catches what the rules above missed, so no record can make a file fail collection.
    try:
        Case.model_validate(case)
    except ValidationError as error:
        _stop_if_bfcl_missing(error)
        first = error.errors()[0]
        where = ".".join(str(part) for part in first["loc"])
        raise _Unmappable(f"the case would not load: {where}: {first['msg']}") from None


def _stop_if_bfcl_missing(error: ValidationError) -> None:
    """Multi-turn cases load only with bfcl-eval installed: without it no record can be
    written, and the import stops saying how to install it."""
    from ..bfcl.backend import INSTALL_HINT

    message = str(error.errors()[0].get("msg", ""))
    if INSTALL_HINT in message:
        raise BfclError(message.removeprefix("Value error, "))


def _messages(record: dict[str, Any]) -> list[dict[str, Any]]:
    question = record.get("question")
    if not isinstance(question, list) or not question:
        raise _Unmappable("the record has no question (is this an answer file?)")
    if len(question) != 1:
        # Multi-turn records name the backend classes that answer their calls; this has none.
        raise _Unmappable(f"a multi-turn question ({len(question)} turns) without"
                          " involved_classes: no backend classes to run its calls on")
    turn = question[0]
    if not isinstance(turn, list) or not all(_is_message(message) for message in turn):
        raise _Unmappable("the question is not a list of {role, content} messages")
    return [dict(message) for message in turn]


def _is_message(message: Any) -> bool:
    return (isinstance(message, dict) and isinstance(message.get("role"), str)
            and "content" in message)


# ---------------------------------------------------------------------------- tools


def _functions(record: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The record's functions by their BFCL name, each checked to map to its own tool."""
    functions = record.get("function")
    if not isinstance(functions, list) or not all(isinstance(f, dict) for f in functions):
        raise _Unmappable("the record has no list of functions")
    by_name: dict[str, dict[str, Any]] = {}
    sent_as: dict[str, str] = {}
    for function in functions:
        name = function.get("name")
        if not isinstance(name, str):
            raise _Unmappable(f"a function has no name: {_short(function)}")
        tool_name = _tool_name(name)
        if tool_name in sent_as:
            raise _Unmappable(f"functions {sent_as[tool_name]!r} and {name!r} would both be "
                              f"sent as {tool_name!r}")
        sent_as[tool_name] = name
        by_name[name] = function
    return by_name


def _tool_name(name: str) -> str:
    """A BFCL function name as an OpenAI function name: dots become ``_``."""
    mapped = name.replace(".", "_")
    if not _TOOL_NAME.match(mapped):
        raise _Unmappable(f"function name {name!r} cannot be sent as an OpenAI function name "
                          f"(sent as {mapped!r}, which does not match {_TOOL_NAME.pattern})")
    return mapped


def _tool(function: dict[str, Any]) -> dict[str, Any]:
    tool: dict[str, Any] = {"name": _tool_name(function["name"])}
    if function.get("description"):
        tool["description"] = str(function["description"])
    tool["parameters"] = json_schema(_parameters(function), function["name"])
    return tool


def _parameters(function: dict[str, Any]) -> dict[str, Any]:
    parameters = function.get("parameters", {"type": "dict", "properties": {}})
    if not isinstance(parameters, dict) or not isinstance(parameters.get("properties", {}), dict):
        raise _Unmappable(f"function {function['name']!r} has no parameter properties")
    return parameters


# ---------------------------------------------------------------------------- expectations


def _expected_calls(record_id: str, truths: dict[str, Any] | None,
                    functions: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    if truths is None:
        return []  # irrelevance: the right answer is no call at all
    if record_id not in truths:
        raise _Unmappable("the answers file has no record with this id")
    ground_truth = truths[record_id]
    if not isinstance(ground_truth, list):
        raise _Unmappable("its ground_truth is not a list of calls")
    return [_expected_call(call, functions) for call in ground_truth]


def _expected_call(call: Any, functions: dict[str, dict[str, Any]]) -> dict[str, Any]:
    if not isinstance(call, dict) or len(call) != 1:
        raise _Unmappable(f"a ground-truth call is not a one-key mapping: {_short(call)}")
    ((name, answer),) = call.items()
    if name not in functions:
        raise _Unmappable(f"the answer calls {name!r}, which the record does not define")
    if not isinstance(answer, dict):
        raise _Unmappable(f"the answer for {name!r} is not a mapping of parameters")
    parameters = _parameters(functions[name])
    return {"name": _tool_name(name), "arguments": _arguments(answer, parameters, name)}


def _arguments(answer: dict[str, Any], parameters: dict[str, Any], where: str) -> dict[str, Any]:
    """The call's arguments: exactly the answer's parameters that the schema defines."""
    properties: dict[str, Any] = parameters.get("properties", {})
    required = parameters.get("required", [])
    if not isinstance(required, list) or not all(isinstance(name, str) for name in required):
        raise _Unmappable(f"{where}: 'required' is not a list of parameter names:"
                          f" {_short(required)}")
    unanswered = [name for name in required if name not in answer]
    if unanswered:
        raise _Unmappable(f"{where}: required parameter {unanswered[0]!r} has no answer")
    return _exact_object(answer, properties, required, where, schema_keys_only=True)


def _exact_object(answer: dict[str, Any], properties: dict[str, Any], required: Iterable[str],
                  where: str, schema_keys_only: bool) -> dict[str, Any]:
    """``{$exact: ...}`` over ``{key: [acceptable values...]}``.

    The checker rejects a call's parameter that the function's schema does not define;
    inside a dict value it only compares with the answer, so ``schema_keys_only`` is off.
    """
    fields: dict[str, Any] = {}
    for key, values in answer.items():
        path = f"{where}.{key}"
        if not isinstance(key, str) or key.startswith("$"):
            raise _Unmappable(f"{path}: a key starting with '$' would read as a matcher operator")
        if not isinstance(values, list):
            raise _Unmappable(f"{path}: the acceptable values are not a list: {_short(values)}")
        may_omit = OPTIONAL in values and key not in required
        if schema_keys_only and key not in properties:
            fields[key] = _presence([], may_omit, f"{path} (not in the function's schema)")
        else:
            fields[key] = _presence(_alternatives(values, properties.get(key), path), may_omit,
                                    path)
    return {"$exact": fields}


def _presence(alternatives: list[Any], may_omit: bool, path: str) -> Any:
    """One of ``alternatives``; or nothing at all, when the answer allows ``""``."""
    if not alternatives:  # only leaving the parameter out is accepted
        if not may_omit:
            raise _Unmappable(f"{path}: the answer accepts no value a call could give")
        return {"$absent": True}
    spec = alternatives[0] if len(alternatives) == 1 else {"$anyof": alternatives}
    return {"$optional": spec} if may_omit else spec


def _alternatives(values: list[Any], schema: Any, path: str) -> list[Any]:
    """A matcher per acceptable value but ``""``, without repeats."""
    unique: dict[str, Any] = {}
    for value in values:
        if value != OPTIONAL:
            spec = _value(value, schema, path)
            unique.setdefault(json.dumps(spec, sort_keys=True), spec)
    return list(unique.values())


def _value(value: Any, schema: Any, path: str) -> Any:
    """A matcher for one acceptable value, by the checker's rules for its type."""
    kind = _kind(schema)
    if isinstance(value, str):
        # A string where the schema wants another type is a BFCL "variable": exact.
        return {"$loose": value} if kind in (None, "string") else value
    if isinstance(value, bool) or value is None or isinstance(value, float):
        return value
    if isinstance(value, int):
        return value if kind == "number" else {"$type": "integer", "$eq": value}
    if isinstance(value, list):
        items = schema.get("items") if isinstance(schema, dict) else None
        return [_value(item, items, f"{path}[{index}]") for index, item in enumerate(value)]
    if isinstance(value, dict):
        properties = schema.get("properties") if isinstance(schema, dict) else None
        return _exact_object(value, properties if isinstance(properties, dict) else {}, (),
                             path, schema_keys_only=False)
    raise _Unmappable(f"{path}: unexpected value {_short(value)}")


def _kind(schema: Any) -> str | None:
    """The JSON Schema type of a BFCL schema; ``None`` for ``any`` or no schema."""
    kind = schema.get("type") if isinstance(schema, dict) else None
    return bfcl_types.TYPE_NAMES.get(kind, kind) if isinstance(kind, str) and kind != "any" else None


# ---------------------------------------------------------------------------- files


def _read_json_lines(path: Path) -> list[dict[str, Any]]:
    """Records of a BFCL file: JSON Lines, whatever its ``.json`` name says."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise BfclUsageError(f"no such file: {path}") from None
    except (OSError, UnicodeDecodeError) as error:
        raise BfclError(f"cannot read {path}: {error}") from None
    records = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except ValueError as error:
            raise BfclError(f"{path}:{number}: not a JSON line ({error}); BFCL files hold "
                            "one JSON record per line") from None
        if not isinstance(record, dict):
            raise BfclError(f"{path}:{number}: expected a JSON object, got {_short(record)}")
        records.append(record)
    return records


def _ground_truths(path: Path) -> dict[str, Any] | None:
    """Answer records by id: ``{"id": ..., "ground_truth": [...]}``; ``None`` for a file
    with no record at all, which is how some tools write a category without answers."""
    records = _read_json_lines(path)
    if not records:
        return None
    truths: dict[str, Any] = {}
    for record in records:
        if "id" in record and "ground_truth" in record:
            truths[str(record["id"])] = record["ground_truth"]
    if not truths:
        raise BfclError(f"{path} holds no answer records ({{id, ground_truth}}); "
                        "is it the questions file?")
    return truths


def _file_category(questions: Path) -> str:
    """``BFCL_v4_simple_python.json`` -> ``simple_python``."""
    stem = _FILE_PREFIX.sub("", questions.name.split(".")[0])
    return _NOT_IN_CASE_NAME.sub("_", stem) or "bfcl"


def _record_category(record_id: str, default: str) -> str:
    """``simple_python_12`` -> ``simple_python``; the file's category when the id says none."""
    found = _RECORD_CATEGORY.match(record_id)
    return found.group("category") if found else default


def _write_cases(cases: list[dict[str, Any]], out_dir: Path, category: str, source: str,
                 chunk_size: int) -> list[Path]:
    width = max(3, len(str(len(cases) - 1)))
    header = (f"# Generated by 'toolbench import-bfcl' from {source}, Berkeley Function Calling\n"
              "# Leaderboard data (Apache-2.0). Re-run the import rather than editing.\n")
    files = []
    for start in range(0, len(cases), chunk_size):
        chunk = cases[start:start + chunk_size]
        last = start + len(chunk) - 1
        path = out_dir / f"{category}_{start:0{width}d}-{last:0{width}d}.case.yaml"
        path.write_text(header + _dump(chunk), encoding="utf-8")
        files.append(path)
    return files


def _dump(cases: Sequence[dict[str, Any]]) -> str:
    return yaml.dump_all([_styled(case) for case in cases], Dumper=_CaseDumper,
                         explicit_start=True, sort_keys=False, allow_unicode=True,
                         default_flow_style=None, width=100)


class _Flow(dict[str, Any]):
    """A mapping dumped on one line: a parameter's matcher reads best inline."""


class _FlowList(list[Any]):
    """A list dumped on one line."""


class _Lines(list[Any]):
    """A list dumped one item a line."""


class _Block(dict[str, Any]):
    """A mapping dumped one key per line, even when all its values are scalars."""


class _Text(str):
    """A string dumped as a ``|`` block when it has line breaks and YAML allows it."""


class _CaseDumper(_SafeDumper):
    """The safe dumper, plus the styles above; PyYAML itself is left untouched."""


def _represent_flow(dumper: _SafeDumper, data: dict[str, Any]) -> yaml.Node:
    return dumper.represent_mapping("tag:yaml.org,2002:map", data, flow_style=True)


def _represent_flow_list(dumper: _SafeDumper, data: list[Any]) -> yaml.Node:
    return dumper.represent_sequence("tag:yaml.org,2002:seq", data, flow_style=True)


def _represent_lines(dumper: _SafeDumper, data: list[Any]) -> yaml.Node:
    return dumper.represent_sequence("tag:yaml.org,2002:seq", data, flow_style=False)


def _represent_block(dumper: _SafeDumper, data: dict[str, Any]) -> yaml.Node:
    return dumper.represent_mapping("tag:yaml.org,2002:map", data, flow_style=False)


def _represent_text(dumper: _SafeDumper, data: str) -> yaml.Node:
    style = "|" if "\n" in data else None
    # A plain str: libyaml's emitter refuses subclasses.
    return dumper.represent_scalar("tag:yaml.org,2002:str", str(data), style=style)


_CaseDumper.add_representer(_Flow, _represent_flow)
_CaseDumper.add_representer(_FlowList, _represent_flow_list)
_CaseDumper.add_representer(_Lines, _represent_lines)
_CaseDumper.add_representer(_Block, _represent_block)
_CaseDumper.add_representer(_Text, _represent_text)


def _styled(case: dict[str, Any]) -> dict[str, Any]:
    """The case with its layout chosen: a message or a parameter per line, matchers inline.

    PyYAML's leaf-flow default would put a long message on one wrapped line and a call's
    scalar-only arguments inline, but a nested matcher over several lines.
    """
    if "bfcl" in case["stages"][0]["expect"]:  # multi-turn: a ground-truth call a line
        return {**case, "stages": [
            {**stage, "expect": {"bfcl": {"ground_truth": _Lines(
                stage["expect"]["bfcl"]["ground_truth"])}}} for stage in case["stages"]]}
    stages = []
    for stage in case["stages"]:
        calls = [{**call, "arguments": _styled_arguments(call["arguments"])}
                 for call in stage["expect"]["tool_calls"]]
        stages.append({**stage, "messages": [_styled_message(m) for m in stage["messages"]],
                       "expect": {**stage["expect"], "tool_calls": calls}})
    return {**case, "stages": stages}


def _styled_message(message: dict[str, Any]) -> dict[str, Any]:
    content = message.get("content")
    return _Block({**message, "content": _Text(content)} if isinstance(content, str) else message)


def _styled_arguments(arguments: dict[str, Any]) -> dict[str, Any]:
    fields = {key: _inline(spec) for key, spec in arguments["$exact"].items()}
    return {"$exact": _Block(fields)}


def _inline(spec: Any) -> Any:
    """A matcher on one line when it fits; else its operators, keys or items one per line."""
    if len(json.dumps(spec, ensure_ascii=False)) <= _INLINE_WIDTH:
        if isinstance(spec, dict):
            return _Flow(spec)
        return _FlowList(spec) if isinstance(spec, list) else spec
    if isinstance(spec, dict):
        return _Block({key: _inline(value) for key, value in spec.items()})
    return [_inline(item) for item in spec] if isinstance(spec, list) else spec


def _short(value: Any) -> str:
    text = json.dumps(value, ensure_ascii=False, default=repr)
    return text if len(text) <= 80 else text[:77] + "..."


# ---------------------------------------------------------------------------- command line


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="toolbench import-bfcl",
        description="Turn Berkeley Function Calling Leaderboard (BFCL) records into toolbench\n"
        "case files, one case per record, written as <category>_<first>-<last>.case.yaml.\n"
        "Each case's expect.tool_calls applies the leaderboard's checker: the exact set of\n"
        "parameters, optional ones, normalised strings, exact types, parallel calls in any\n"
        "order, and no call at all for irrelevance. A multi-turn file (multi_turn_base,\n"
        "_miss_func, _miss_param, _long_context) gives cases of one stage a turn, run on\n"
        "BFCL's own backend classes and checked turn by turn as BFCL checks them; they\n"
        "need bfcl-eval installed: pip install --no-deps bfcl-eval mpmath.",
        epilog=_where_the_files_are() + "\n\nexample:\n"
        "  toolbench import-bfcl BFCL_v4_simple_python.json \\\n"
        "      possible_answer/BFCL_v4_simple_python.json cases/bfcl\n"
        "  toolbench import-bfcl BFCL_v4_irrelevance.json - cases/bfcl\n"
        "  toolbench import-bfcl BFCL_v4_multi_turn_base.json \\\n"
        "      possible_answer/BFCL_v4_multi_turn_base.json cases/bfcl\n"
        "  pytest cases/bfcl --toolbench-live --toolbench-model=MODEL -m bfcl_simple_python\n"
        "\n"
        "The cases leave 'model' unset: choose it with --toolbench-model. They are marked\n"
        "bfcl and bfcl_<category>, marks the plugin registers itself (no ini entry needed,\n"
        "--strict-markers accepts them). Records the case format cannot express (types with\n"
        "no JSON Schema equivalent such as Java's) are skipped and\n"
        "listed with their reason. Exit status: 0 when cases were written, 1 when none\n"
        "could be, 2 when an input file does not exist.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("questions", type=Path, metavar="QUESTIONS",
                        help="a BFCL question file (JSON Lines despite its .json name), "
                        "e.g. BFCL_v4_simple_python.json")
    parser.add_argument("answers", metavar="ANSWERS",
                        help="its possible_answer file, or '-' (or an empty file) for a "
                        "category without one (irrelevance): every case then expects no "
                        "tool call")
    parser.add_argument("out_dir", type=Path, metavar="OUT_DIR",
                        help="directory for the *.case.yaml files; created if missing, "
                        "files of the same name are replaced")
    parser.add_argument("--chunk-size", type=positive_int, default=CHUNK_SIZE, metavar="N",
                        help=f"cases per file (default {CHUNK_SIZE})")
    parser.add_argument("--limit", type=positive_int, default=None, metavar="N",
                        help="import only the first N records of QUESTIONS (a small suite to "
                        "try first)")
    return parser


def _where_the_files_are() -> str:
    """Where BFCL's question and answer files are: inside the bfcl-eval wheel, found
    without importing it (its package imports its inference stack)."""
    spec = importlib.util.find_spec("bfcl_eval")
    folders = list(spec.submodule_search_locations or []) if spec is not None else []
    here = (f"installed here: {Path(folders[0]) / 'data'}" if folders
            else "bfcl-eval is not installed in this environment")
    return (
        "where the files are:\n"
        "  BFCL's question files (BFCL_v4_<category>.json) and their answers\n"
        "  (possible_answer/BFCL_v4_<category>.json) ship inside the bfcl-eval wheel, in\n"
        f"  its folder bfcl_eval/data/; {here}.\n"
        "  Print the folder: python -c \"import importlib.util, pathlib;\n"
        "    print(pathlib.Path(importlib.util.find_spec('bfcl_eval').origin).parent / 'data')\"\n"
        "  Without internet: on a machine with it, pip download --no-deps bfcl-eval mpmath -d\n"
        "  wheels/; copy wheels/ over, then pip install --no-deps wheels/*.whl (or unzip the\n"
        "  bfcl_eval wheel: it is a zip, and its bfcl_eval/data/ holds the files). The import\n"
        "  itself reads local files only.")


def main(argv: list[str] | None = None) -> int:
    """Run ``toolbench import-bfcl`` with ``argv``; print the summary; return the exit code."""
    try:
        args = build_parser().parse_args(argv)
    except SystemExit as exit_:  # --help, or a usage error argparse has already printed
        return exit_.code if isinstance(exit_.code, int) else 2
    answers = None if args.answers == "-" else Path(args.answers)
    try:
        summary = import_bfcl(args.questions, answers, args.out_dir, args.chunk_size,
                              args.limit)
    except BfclError as error:
        print(f"toolbench import-bfcl: error: {error}", file=sys.stderr)
        return error.exit_code
    print(summary.render())
    return 0 if summary.cases else 1


if __name__ == "__main__":
    sys.exit(main())
