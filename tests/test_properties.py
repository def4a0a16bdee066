"""Property tests: fed anything, the loader, the SSE decoder and assembler, and the matchers
answer with their own results or errors, never a crash or a hang.

Determinism: every property runs under ``PROPERTY`` settings. ``derandomize=True`` seeds
hypothesis from each test's own source, so CI and a laptop try the same examples in the
same order and a red run is red again on retry; ``database=None`` writes nothing under the
project and replays nothing from an earlier run. A failure prints its example: keep it as
an ``@example`` (or a plain test below) beside the fix. The example counts add up to some
thousands of case files and streams and keep this file under 30 s on a slow two-core box
under the ``thorough`` profile (CI); the ``quick`` profile, the default elsewhere, tries a
tenth of them (``tests/conftest.py`` registers both).
"""

from __future__ import annotations

import copy
import itertools
import json
import math
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any, TypeVar

import pytest
import yaml
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from hypothesis_profiles import THOROUGH_EXAMPLES

from pytest_toolbench.casefile.load import CaseFileErrors, describe_errors, load_case_file
from pytest_toolbench.casefile.loader import CaseFileError, load_documents
from pytest_toolbench.casefile.schema import Case
from pytest_toolbench.commands.bfcl import ImportSummary
from pytest_toolbench.commands.bfcl import _convert_all as bfcl_convert_all
from pytest_toolbench.commands.diff_compare import Limits, compare_cases
from pytest_toolbench.matchers import (
    MISSING,
    Matcher,
    MatcherError,
    Mismatch,
    compile_matcher,
    compile_tool_calls,
)
from pytest_toolbench.records import (
    CaseResult,
    Failure,
    Reply,
    RunResult,
    StageAttempt,
    StageResult,
    ToolCall,
    Turn,
)
from pytest_toolbench.report.failure import render_failure
from pytest_toolbench.report.html import render_html
from pytest_toolbench.report.json_report import CaseRecord, ReportUnreadable, records_of
from pytest_toolbench.report.summary import render_summary
from pytest_toolbench.transport.client import request_content
from pytest_toolbench.transport.errors import UnsendableRequest
from pytest_toolbench.transport.sse import SSEDecoder, SSEEvent
from pytest_toolbench.wire import wire_api
from pytest_toolbench.wire.chat_reader import StreamAssembler, parse_completion

# Reporting a failing example makes hypothesis import libcst, which warns as it imports
# (mypy_extensions.TypedDict); under filterwarnings=error that would hide the failure
# behind an INTERNALERROR.
pytestmark = pytest.mark.filterwarnings(
    "ignore:mypy_extensions.TypedDict is deprecated:DeprecationWarning")

PROPERTY = settings(
    derandomize=True,
    database=None,
    deadline=None,
    print_blob=False,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
# Streams are small: one taking half a second to decode is a bug (quadratic work or a hang).
STREAMING = settings(PROPERTY, deadline=timedelta(milliseconds=500))


def examples(thorough: int) -> int:
    """The example count for the loaded profile: ``thorough`` tries all, ``quick`` a tenth."""
    if settings.default.max_examples >= THOROUGH_EXAMPLES:
        return thorough
    return max(10, thorough // 10)

T = TypeVar("T")

# --- shared value strategies ----------------------------------------------------------------

HUGE = st.sampled_from([10**400, -(10**30), 2**63, 1e308, float("inf"), float("-inf"),
                        float("nan")])
SCALARS = (st.none() | st.booleans() | st.integers() | st.floats() | HUGE
           | st.text(max_size=8))
OPERATORS = [
    "$eq", "$ne", "$regex", "$contains", "$icontains", "$in", "$loose", "$type", "$gt",
    "$gte", "$lt", "$lte", "$approx", "$tol", "$len", "$any", "$absent", "$optional",
    "$exact", "$schema", "$json", "$not", "$all", "$anyof", "$unordered", "$includes",
    "$ordered",
]
FIELDS = [
    "name", "description", "marks", "model", "endpoint", "params", "system", "tools",
    "repeat", "stages", "user", "messages", "tool_choice", "stream", "run_tools", "max_turns",
    "expect", "capture", "retry", "status", "error", "finish_reason", "text", "tool_calls",
    "usage", "latency_ms", "done", "chunks", "ttft_ms", "base_url", "api_key_env", "headers",
    "timeout_s", "retries", "parameters", "result", "python", "runs", "min_pass_rate",
    "attempts", "arguments",
]
KEYS = (st.sampled_from([*FIELDS, *OPERATORS, "$nope", "$Regex", "nme", "stage", "<<", ""])
        | st.text(max_size=5) | st.integers(-3, 3))
JUNK = st.recursive(
    SCALARS,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(KEYS, inner, max_size=3),
    max_leaves=8,
)
"""Any YAML-representable value, with keys that look like fields and operators."""

TEXT = st.lists(
    st.sampled_from(["a", "Z", " ", "0", "é", "日本", "😀", "\u2028", "\n", "\r", '"', "\\",
                     ":", "#", "data: x", "[DONE]", "$x"]),
    max_size=5,
).map("".join)
"""Short text with the characters that break naive parsers."""

# --- matcher specs --------------------------------------------------------------------------

SCHEMAS = st.sampled_from([
    True, False, {"type": "string"}, {"type": ["integer", "null"]}, {"enum": [1, "a", None]},
    {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]},
    {"items": {"type": "number"}, "minItems": 1}, {"pattern": "^a"}, {"minimum": 0},
    {"$ref": "#/$defs/s", "$defs": {"s": {"type": "string"}}}, {"$ref": "#/nowhere"},
    {"$ref": "https://example.invalid/schema.json"}, {"format": "email"},
    {"$schema": "http://json-schema.org/draft-07/schema#", "type": "array"},
    {"not": {"anyOf": [{"type": "string"}, {"multipleOf": 3}]}},
])
BAD_SCHEMAS = st.sampled_from([
    {"type": 5}, {"minimum": "x"}, {"required": "a"}, {"properties": []}, "a schema", 5,
    {"type": "string", "pattern": "("}, {"$schema": "https://example.invalid/s", "type": 1},
])
REGEXES = st.sampled_from(["a", "(?i)^paris$", r"\d+", "^$", "é", "日本|😀"])
BAD_REGEXES = st.sampled_from(["(", "[", "*", "a{2,1}", "(?P<x>a)(?P<x>b)", "\\"])
TYPES = ["string", "integer", "number", "boolean", "array", "object", "null"]


def _operator(inner: st.SearchStrategy[Any]) -> st.SearchStrategy[dict[str, Any]]:
    """One operator with a value of the kind it takes (mostly)."""
    pairs: st.SearchStrategy[tuple[str, Any]] = st.one_of(
        st.tuples(st.sampled_from(["$eq", "$ne"]), SCALARS | inner),
        st.tuples(st.just("$regex"), REGEXES),
        st.tuples(st.sampled_from(["$contains", "$icontains"]),
                  st.sampled_from(["a", "A", "é"]) | st.lists(SCALARS, max_size=2)),
        st.tuples(st.just("$in"), st.lists(SCALARS, max_size=3)),
        st.tuples(st.just("$loose"), TEXT),
        st.tuples(st.just("$type"), st.sampled_from(TYPES)),
        st.tuples(st.sampled_from(["$gt", "$gte", "$lt", "$lte"]),
                  st.integers(-5, 5) | st.floats(-5, 5)),
        st.tuples(st.sampled_from(["$len", "$json", "$not", "$optional"]), inner),
        st.tuples(st.sampled_from(["$any", "$absent"]), st.just(True)),
        st.tuples(st.sampled_from(["$all", "$anyof", "$unordered", "$includes"]),
                  st.lists(inner, min_size=1, max_size=3)),
        st.tuples(st.just("$exact"), st.dictionaries(st.sampled_from(["a", "b"]), inner,
                                                     max_size=2)),
        st.tuples(st.just("$schema"), SCHEMAS),
    )
    return pairs.map(lambda pair: {pair[0]: pair[1]})


def _operators(inner: st.SearchStrategy[Any]) -> st.SearchStrategy[dict[str, Any]]:
    """One to three operators side by side, ``$approx`` with its ``$tol`` among them."""
    approx = st.fixed_dictionaries({"$approx": st.integers(-5, 5) | st.floats(-5, 5)},
                                   optional={"$tol": st.floats(0, 1)})
    parts = st.lists(_operator(inner) | approx, min_size=1, max_size=3)
    return parts.map(lambda dicts: {key: value for part in dicts for key, value in part.items()})


MATCHER_SPECS = st.recursive(
    SCALARS,
    lambda inner: _operators(inner)
    | st.dictionaries(st.sampled_from(["city", "a", "b", "temp_c"]), inner, max_size=3)
    | st.lists(inner, max_size=3),
    max_leaves=6,
)
"""Matcher specs that mostly compile."""

BAD_MATCHER_SPECS = st.one_of(
    st.builds(lambda regex: {"$regex": regex}, BAD_REGEXES),
    st.builds(lambda schema: {"$schema": schema}, BAD_SCHEMAS),
    st.sampled_from([
        {"$bogus": 1}, {"$Regex": "a"}, {"$regex": "a", "city": 1}, {"$absent": True, "$eq": 1},
        {"$absent": 1}, {"$any": 1}, {"$tol": 1}, {"$approx": "x"}, {"$approx": 1, "$tol": -1},
        {"$type": "strin"}, {"$type": [1]}, {"$type": {"a": 1}}, {"$in": 5}, {"$gt": "1"},
        {"$gt": True}, {"$loose": 1}, {"$exact": [1]}, {"$exact": {"$eq": 1}}, {"$all": 1},
        {"$anyof": []}, {"$unordered": "x"}, {"$len": {"$regex": "["}},
        {"$json": {"$nope": 1}}, {"$not": {"$regex": "*"}}, {"$optional": {"$regex": "("}},
        {"$optional": 1, "$eq": 1}, {"$schema": {"type": "integer"}, "$nope": 1},
    ]),
)
"""Matcher specs that must be compile errors: unknown operators, bad regexes and schemas."""

CALL_SPECS = st.fixed_dictionaries(
    {}, optional={"name": MATCHER_SPECS, "arguments": MATCHER_SPECS, "nme": SCALARS})
TOOL_CALL_SPECS = st.one_of(
    st.lists(CALL_SPECS, max_size=3),
    st.builds(lambda key, calls: {key: calls},
              st.sampled_from(["$ordered", "$unordered", "$includes"]),
              st.lists(CALL_SPECS, max_size=3)),
    _operators(MATCHER_SPECS),
    SCALARS,
)

# --- 1. case files --------------------------------------------------------------------------

# Case files start from valid cases and break them at random places: mutating a few
# rich cases explores far more per second than generating cases field by field, which is
# what lets this file load thousands of case files in seconds.
VALID_CASES: list[dict[str, Any]] = [
    {"name": "minimal", "stages": [{"name": "ask", "user": "hi"}]},
    {  # SPEC section 3's example
        "name": "paris_weather", "description": "the weather tool is chosen, its result used",
        "marks": ["smoke", {"xfail": "flaky"}], "model": ["small", "large"],
        "endpoint": {"base_url": "http://127.0.0.1:9/v1", "api_key_env": "KEY",
                     "headers": {"X-Team": "search"}, "timeout_s": 60, "retries": 0},
        "params": {"temperature": 0, "seed": 7}, "system": "You are a weather assistant.",
        "tools": [{"name": "get_weather", "description": "Current weather for a city",
                   "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                                  "required": ["city"]},
                   "result": {"temp_c": 21, "sky": "sunny"}, "timeout_s": 30}],
        "repeat": {"runs": 2, "min_pass_rate": 0.5},
        "stages": [
            {"name": "ask", "user": "What's the weather in Paris?", "tool_choice": "auto",
             "expect": {"finish_reason": "tool_calls", "tool_calls": [
                 {"name": "get_weather", "arguments": {"city": {"$regex": "(?i)^paris$"}}}]},
             "capture": {"city": "tool_calls.0.arguments.city"}},
            {"name": "answer", "run_tools": True, "stream": True, "max_turns": 3,
             "expect": {"text": {"$contains": ["21"]}, "usage": {"total_tokens": {"$lte": 500}},
                        "stream": {"done": True, "ttft_ms": {"$lte": 5000}}}},
        ],
    },
    {  # every kind of tool, the agent loop, retries, stream: both
        "name": "agent.loop-1",
        "tools": [{"name": "add", "python": "json:dumps"}, {"name": "fail", "error": "timeout"}],
        "stages": [
            {"name": "s", "messages": [{"role": "user", "content": "add 2 and 3"}],
             "run_tools": True, "tool_choice": {"name": "add"}, "retry": {"attempts": 2},
             "expect": {"status": {"$in": [200, 201]}, "latency_ms": {"$lt": 60000},
                        "tool_calls": {"$ordered": [{"name": "add", "arguments": {
                            "$exact": {"a": 2, "b": {"$optional": 3}}}}]}}},
            {"name": "t", "user": "${city}", "stream": "both", "params": {"max_tokens": 16},
             "expect": {"text": {"$anyof": [{"$loose": "5"}, {"$json": {"$type": "object"}}]},
                        "tool_calls": [], "finish_reason": {"$in": ["stop", "length"]}}},
        ],
    },
    {
        "name": "errors",
        "stages": [{"name": "bad", "user": "x", "expect": {
            "status": 400, "error": {"$icontains": "invalid"},
            "text": {"$schema": {"type": "string", "maxLength": 10}},
            "stream": {"chunks": {"$gte": 1}, "usage": False}}}],
    },
]
CASE_MATCHERS = st.sampled_from([
    "Paris", 21, None, True, [1, "a"], {"city": "Paris"}, {"$regex": "(?i)^paris$"},
    {"$gte": 1, "$lte": 5}, {"$approx": 21.5, "$tol": 0.1}, {"$contains": ["21", "sunny"]},
    {"$in": ["stop", "length"]}, {"$type": "string"}, {"$len": {"$gt": 0}},
    {"$schema": {"type": "object", "required": ["a"]}}, {"$json": {"a": {"$any": True}}},
    {"$not": {"$icontains": "sorry"}}, {"$anyof": [{"$loose": "21 C"}, {"$eq": 21}]},
    {"$exact": {"a": 1, "b": {"$optional": 2}}}, {"$includes": [1]}, {"c": {"$absent": True}},
    [], [{"name": "f", "arguments": {"city": {"$regex": "^P"}}}], {"$ordered": [{"name": "f"}]},
    {"$includes": [{"name": "f"}]}, [{"nme": "f"}], {"$ordered": [{"arguments": {"$regex": "("}}]},
])
"""Matchers and tool-call specs as a case holds them, valid or not."""
VALID_VALUES = CASE_MATCHERS | st.sampled_from([
    "ask", "", "a b", "x" * 65, 0, 1, -1, 0.5, "auto", "required", "both", {"name": "f"},
    ["smoke"], [{"skip": "why"}], [{"xfail": {"strict": True}}], "json:nope",
    "no_such_module_x:f", {"role": "user", "content": "hi"}, {"attempts": 0}, {"runs": 1},
])
"""Values that fit some field of a case (and so fail in the others)."""


def _deeply_nested(depth: int, leaf: Any) -> Any:
    for level in range(depth):
        leaf = [leaf] if level % 2 else {"k": leaf}
    return leaf


def _containers(data: Any) -> Iterator[dict[Any, Any] | list[Any]]:
    """Every mapping and list inside ``data``, ``data`` first."""
    if isinstance(data, (dict, list)):
        yield data
        for child in data.values() if isinstance(data, dict) else data:
            yield from _containers(child)


_MUTATIONS: dict[str, st.SearchStrategy[Any]] = {
    "replace": JUNK,
    "valid": VALID_VALUES,
    "matcher": BAD_MATCHER_SPECS,
    "deep": st.builds(_deeply_nested, st.integers(1, 130), JUNK),
    "huge": HUGE,
}


def _pick(draw: st.DrawFn, items: list[T]) -> T:
    """One of ``items``: an index draw, cheaper than a new sampled_from strategy each time."""
    return items[draw(st.integers(0, len(items) - 1))]


@st.composite
def mutated_cases(draw: st.DrawFn) -> Any:
    """A valid case dict with up to four random breakages at random places."""
    case = copy.deepcopy(draw(st.sampled_from(VALID_CASES)))
    for _ in range(draw(st.integers(0, 4))):
        node = _pick(draw, list(_containers(case)))
        keys = list(node) if isinstance(node, dict) else list(range(len(node)))
        action = draw(st.sampled_from(["add", "delete", "rename", *_MUTATIONS]))
        if action == "add" or not keys:
            if isinstance(node, dict):
                node[draw(KEYS)] = draw(JUNK)
            else:
                node.append(draw(JUNK))
            continue
        key = _pick(draw, keys)
        if action == "delete":
            del node[key]
        elif action == "rename" and isinstance(node, dict):  # a near miss: "did you mean"
            node[_pick(draw, [f"{key}s", str(key)[:-1], str(key).upper()])] = node.pop(key)
        else:
            # A copy: later mutations may edit it in place, and sampled values are shared.
            node[key] = copy.deepcopy(draw(_MUTATIONS.get(action, JUNK)))
    return case


def _nth(lines: list[str], index: int, test: Callable[[str], bool]) -> int | None:
    """The position of the ``index``-th line (cyclically) that passes ``test``."""
    chosen = [position for position, line in enumerate(lines) if test(line)]
    return chosen[index % len(chosen)] if chosen else None


def duplicate_line(text: str, index: int) -> str:
    lines = text.split("\n")
    position = index % len(lines)
    lines.insert(position, lines[position])
    return "\n".join(lines)


def indent_with_tab(text: str, index: int) -> str:
    lines = text.split("\n")
    position = _nth(lines, index, lambda line: line.startswith(" "))
    if position is not None:
        lines[position] = "\t" + lines[position][1:]
    return "\n".join(lines)


def anchor_and_alias(text: str, index: int) -> str:
    """Put an anchor on one value and an alias (sometimes a recursive one) on another."""
    lines = text.split("\n")
    first = _nth(lines, index, lambda line: ": " in line)
    second = _nth(lines, index // 3 + 1, lambda line: ": " in line)
    if first is None or second is None:
        return text
    key, _, value = lines[first].partition(": ")
    lines[first] = f"{key}: &x {'[*x]' if index % 4 == 0 else value}"
    key = lines[second].partition(": ")[0]
    lines[second] = f"{key}: *x"
    return "\n".join(lines)


def replace_value(text: str, index: int) -> str:
    """Swap one value for a number too big, a bad date, an explicit tag or deep nesting."""
    odd = ["9" * 5000, "0x" + "f" * 80, "1e999", "-.inf", "2024-02-30", "!!int x",
           "!!timestamp x", "!!bool maybe", "!!python/object:os.system x", "!!binary @@",
           "!!set {a, b}", "[" * 120 + "]" * 120, "{" * 40 + "}" * 40, "&y {}", "*undefined"]
    lines = text.split("\n")
    position = _nth(lines, index, lambda line: ": " in line)
    if position is None:
        return text
    key = lines[position].partition(": ")[0]
    lines[position] = f"{key}: {odd[index % len(odd)]}"
    return "\n".join(lines)


def insert_text(text: str, index: int) -> str:
    """A control, separator or BOM character, or a document marker, somewhere."""
    odd = ["\x00", "\x01", "\x7f", "\x85", "\u2028", "\ufeff", "\x1b", "\t", "\n---\n",
           "\n...\n", "%YAML 1.1\n---\n", "\n? [a]\n: b\n", "\n<<: *x\n", "\r"]
    position = index % (len(text) + 1)
    return text[:position] + odd[index % len(odd)] + text[position:]


def change_line_breaks(text: str, index: int) -> str:
    return text.replace("\n", ["\r\n", "\r", "\n\n"][index % 3])


def truncate(text: str, index: int) -> str:
    return text[: index % (len(text) + 1)]


TEXT_MUTATIONS = [duplicate_line, indent_with_tab, anchor_and_alias, replace_value, insert_text,
                  change_line_breaks, truncate]
_DUMPER = getattr(yaml, "CSafeDumper", yaml.SafeDumper)  # libyaml's: 5x faster
BAD_BYTES = [b"\xff", b"\xc3", b"\xed\xa0\x80", b"\xf4\x90\x80\x80", b"\xef\xbb", b"\x00"]


@st.composite
def case_file_bytes(draw: st.DrawFn) -> bytes:
    """One or two case documents, broken as data and then as text and bytes."""
    documents = draw(st.lists(st.one_of(mutated_cases(), mutated_cases(), JUNK),
                              min_size=1, max_size=2))
    flow = draw(st.sampled_from([False, None, True]))
    texts = [yaml.dump(document, Dumper=_DUMPER, default_flow_style=flow, sort_keys=False,
                       allow_unicode=draw(st.booleans()))
             for document in documents]
    text = draw(st.sampled_from(["---\n", "\n---\n", "---\n---\n"])).join(texts)
    for mutation in draw(st.lists(st.sampled_from(TEXT_MUTATIONS), max_size=3)):
        text = mutation(text, draw(st.integers(0, 10_000)))
    # Mostly UTF-8: a file that is not is rejected before anything else is looked at.
    data = text.encode(_pick(draw, ["utf-8"] * 8 + ["utf-16", "latin-1"]), errors="replace")
    if draw(st.integers(0, 7)) == 7:  # not 0: hypothesis draws its simplest value often
        position = draw(st.integers(0, len(data)))
        data = data[:position] + draw(st.sampled_from(BAD_BYTES)) + data[position:]
    return data


YAML_SOUP = st.lists(
    st.sampled_from(["name", "stages", "expect", "$regex", ": ", ":", " ", "  ", "\n", "\t",
                     "- ", "[", "]", "{", "}", ",", "&a ", "*a", "!!", "!!int ", "---\n",
                     "...\n", "'", '"', "#", "%YAML 1.1\n", "? ", "|", ">", "\x00", "é",
                     "\ufeff", "\r", "1e999", "2024-02-30", "<<", "~", "(", "x"]),
    max_size=60,
).map(lambda parts: "".join(parts).encode())
"""Text made of YAML's own punctuation and the case format's words."""


def _line_bound(data: bytes) -> int:
    """A line number no error may pass: every kind of YAML line break, plus one."""
    text = data.decode("utf-8", errors="replace")
    return 1 + sum(text.count(mark) for mark in ("\n", "\r", "\x85", "\u2028", "\u2029"))


def assert_loads_or_reports(path: Path, data: bytes) -> None:
    """``load_case_file`` gives valid cases, or CaseFileErrors naming the file (and line)."""
    path.write_bytes(data)
    try:
        loaded = load_case_file(path)
    except CaseFileErrors as raised:
        assert raised.errors
        for error in raised.errors:
            assert error.file == path
            assert str(error).startswith(str(path))
            assert error.line is None or 1 <= error.line <= _line_bound(data), str(error)
        assert describe_errors(raised).startswith(f"{len(raised.errors)} problem")
    else:
        for case in loaded:
            assert isinstance(case.case, Case)
            assert case.file == path
            assert case.line_of("name") >= 1


@pytest.fixture(scope="module")
def case_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One file that each example overwrites (module scope: hypothesis runs many per test)."""
    return tmp_path_factory.mktemp("properties") / "generated.case.yaml"


@settings(PROPERTY, max_examples=examples(1200))
@given(st.binary(max_size=300) | YAML_SOUP)
@example(b"name: a\x01b\nstages: [{name: s}]\n")  # ReaderError escaped
@example(b"name: a\nstages: &x [*x]\n")  # recursive alias: RecursionError
@example(b"name: a\nparams: " + b"[" * 3000 + b"]" * 3000 + b"\n")  # RecursionError
@example(b"name: a\nparams: " + b"[" * 100_000 + b"]" * 100_000 + b"\n")  # libyaml segfault
@example(b"name: a\nparams: {day: 2024-02-30}\nstages: [{name: s}]\n")  # ValueError escaped
@example(b"name: a\nparams: {x: " + b"9" * 5000 + b"}\nstages: [{name: s}]\n")  # ValueError
@example(b"name: a\nparams: {x: !!timestamp x}\nstages: [{name: s}]\n")  # AttributeError
@example(b"name: a\nparams: {x: !!bool maybe}\nstages: [{name: s}]\n")  # KeyError
@example(b"name: a\nstages: [{name: s, expect: {text: {$type: [1]}}}]\n")  # TypeError
def test_garbage_is_a_case_file_error(case_path: Path, data: bytes) -> None:
    assert_loads_or_reports(case_path, data)


@settings(PROPERTY, max_examples=examples(800))
@given(case_file_bytes())
def test_broken_case_files_are_case_file_errors(case_path: Path, data: bytes) -> None:
    assert_loads_or_reports(case_path, data)


def test_billion_laughs_is_refused_in_linear_time(tmp_path: Path) -> None:
    """Aliases of aliases: the line map visits each node once, not once per path to it, and
    stops at the first anchor that expands past the limit."""
    levels = "".join(f"l{level}: &l{level} [{', '.join([f'*l{level - 1}'] * 9)}]\n"
                     for level in range(1, 12))
    path = tmp_path / "laughs.case.yaml"
    path.write_text(f"name: a\nl0: &l0 [x]\n{levels}stages: [{{name: s}}]\n")
    with pytest.raises(CaseFileErrors, match=r"laughs.case.yaml:8: l6: the file passes"):
        _returns_within(5.0, lambda: load_case_file(path))


BROKEN_FILES: dict[str, bytes] = {
    # Minimal examples the properties found, each once a traceback or a crash.
    "control_char": b"name: a\x01b\nstages: [{name: s}]\n",
    "recursive_alias": b"name: a\nparams: &p {self: *p}\nstages: [{name: s}]\n",
    "too_deep": b"name: a\nparams: {x: " + b"[" * 150 + b"]" * 150 + b"}\nstages: [{name: s}]\n",
    "bad_date": b"name: a\nparams: {day: 2024-02-30}\nstages: [{name: s}]\n",
    "type_list": b"name: a\nstages: [{name: s, expect: {text: {$type: [1]}}}]\n",
    "mark_kwargs": b"name: a\nmarks: [{xfail: {1: 2}}]\nstages: [{name: s}]\n",
    "private_mark": b"name: a\nmarks: [_hidden]\nstages: [{name: s}]\n",
    "not_utf8": b"name: caf\xe9\nstages: [{name: s}]\n",
}
_VALID = yaml.safe_dump({"name": "ok", "stages": [{"name": "s", "user": "hi", "expect": {
    "text": {"$regex": "(?i)hi"}, "tool_calls": [{"name": "f", "arguments": {"a": 1}}]}}]},
    sort_keys=False)
# The same text mutations the property applies, at fixed places, on a valid case.
BROKEN_FILES.update({
    "duplicate_key": duplicate_line(_VALID, 0).encode(),
    "tab": indent_with_tab(_VALID, 0).encode(),
    "alias_loop": anchor_and_alias(_VALID, 0).encode(),
    "huge_int": replace_value(_VALID, 0).encode(),
    "nul": insert_text(_VALID, 14).encode(),
    "cut_short": truncate(_VALID, 30).encode(),
})


def test_broken_files_are_collection_errors_without_tracebacks(
    pytester: pytest.Pytester,
) -> None:
    for name, data in BROKEN_FILES.items():
        (pytester.path / f"{name}.case.yaml").write_bytes(data)

    result = pytester.runpytest("--collect-only", "-q")

    output = result.stdout.str() + result.stderr.str()
    for name in BROKEN_FILES:
        assert f"ERROR collecting {name}.case.yaml" in output, name
        assert f"{name}.case.yaml:" in output, name  # file:line, or file: for bad bytes
    assert "Traceback" not in output
    assert "pytest_toolbench/" not in output
    assert f"{len(BROKEN_FILES)} errors" in output



_ANCHOR = st.sampled_from(["", "", "&a ", "&b "])
FLOW_YAML = st.recursive(
    st.sampled_from(["x", "1", "2.5", "true", "null", "'q'", "*a", "*b", "[]", "{}", "yes", "~",
                     "0x1f", "1_000", ".inf", "-.5", "2024-01-01", "'1'", '"true"']),
    lambda inner: (
        st.tuples(_ANCHOR, st.lists(inner, max_size=4)).map(
            lambda parts: f"{parts[0]}[{', '.join(parts[1])}]")
        | st.tuples(_ANCHOR, st.lists(st.tuples(st.sampled_from("abc"), inner), max_size=4))
        .map(lambda parts: f"{parts[0]}{{{', '.join(f'{k}: {v}' for k, v in parts[1])}}}")),
    max_leaves=30)
"""Flow YAML with anchors and aliases (shared, recursive or undefined), repeated keys, and
scalars of every implicit type, plain and quoted."""


@settings(PROPERTY, max_examples=examples(600))
@given(FLOW_YAML, FLOW_YAML)
@example("&a [1, *a]", "x")  # an alias inside its anchor
@example("{a: 1, a: 2}", "x")  # a duplicate key
@example("&a [x, x]", "[*a, *a, {b: *a}]")  # shared: counted and mapped at each use
def test_case_files_load_as_pyyaml_reads_them_or_name_the_limit_passed(
        first: str, second: str) -> None:
    """Case files are built by a fast builder that keeps the limits (nesting, values,
    duplicate keys, recursive aliases) itself; lines are mapped only when a message needs
    them. What it loads is what PyYAML loads, and what it refuses is named at its line."""
    text = f"name: n\nv: {first}\nw: {second}\n"
    try:
        (document,) = load_documents(Path("f.case.yaml"), text)
    except CaseFileError as error:
        if not error.message.startswith("YAML syntax error"):  # an undefined alias
            assert error.message.startswith(("duplicate key", "an alias inside")), error
            assert error.line in (2, 3) and error.key_path[0] in ("v", "w"), error
        return
    assert document.data == yaml.load(text, Loader=yaml.CSafeLoader)
    assert document.line_of(("v",)) == 2 and document.line_of(("w",)) == 3
    assert all(1 <= line <= 3 for line in document.lines.values())

# --- 2. SSE decoding and reassembly ---------------------------------------------------------

BOM = b"\xef\xbb\xbf"


@dataclass
class Stream:
    """A valid SSE body, and what decoding and reassembling it must give."""

    body: bytes = b""
    datas: list[str] = field(default_factory=list)
    """The data of every event, in order."""
    spans: list[tuple[int, int, int]] = field(default_factory=list)
    """Per event, byte offsets: its first field line, its first data line, and just past
    the first byte of the blank line that dispatches it."""
    text: str = ""
    calls: list[tuple[str, str, Any]] = field(default_factory=list)
    """(id, name, parsed arguments) of every tool call, in index order."""
    finish_reason: str = "stop"
    usage: dict[str, Any] | None = None
    done: bool = True


def _chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
    return {"id": "c1", "object": "chat.completion.chunk",
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}


def _split(text: str, cuts: set[int]) -> list[str]:
    bounds = [0, *sorted(cut for cut in cuts if 0 < cut < len(text)), len(text)]
    return [text[start:end] for start, end in itertools.pairwise(bounds)]


@st.composite
def tool_call_chunks(draw: st.DrawFn, stream: Stream) -> list[dict[str, Any]]:
    """Header and argument deltas of 0-3 calls; calls interleave, headers in index order."""
    queues = []
    for index in range(draw(st.integers(0, 3))):
        name = draw(st.sampled_from(["get_weather", "add", "日本_lookup"]))
        arguments = draw(st.dictionaries(st.sampled_from(["city", "a", "é"]),
                                         st.integers(-99, 99) | TEXT, max_size=3))
        raw = json.dumps(arguments, ensure_ascii=draw(st.booleans()))
        stream.calls.append((f"call_{index}", name, arguments))
        header = {"index": index, "id": f"call_{index}", "type": "function",
                  "function": {"name": name, "arguments": ""}}
        pieces = _split(raw, draw(st.sets(st.integers(1, len(raw)), max_size=4)))
        queues.append([header, *({"index": index, "function": {"arguments": piece}}
                                 for piece in pieces)])
    chunks, started = [], [False] * len(queues)
    while any(queues):
        # A call starts only after the one before it: calls are first seen in index order.
        ready = [i for i, queue in enumerate(queues) if queue and (i == 0 or started[i - 1])]
        index = draw(st.sampled_from(ready))
        started[index] = True
        chunks.append(_chunk({"tool_calls": [queues[index].pop(0)]}))
    return chunks


class _Writer:
    """Writes SSE lines with randomly chosen line breaks, remembering byte offsets."""

    def __init__(self, draw: st.DrawFn, body: bytes) -> None:
        self.draw = draw
        self.body = bytearray(body)
        self.last_break = ""

    def line(self, text: str) -> None:
        self.body += text.encode()
        self.end_line(blank=False)

    def end_line(self, blank: bool) -> None:
        eol = self.draw(st.sampled_from(["\n", "\r", "\r\n"]))
        if blank and eol == "\n" and self.last_break == "\r":
            eol = "\r\n"  # "\r" then "\n" is one CRLF break, not a blank line
        self.body += eol.encode()
        self.last_break = eol


@st.composite
def streams(draw: st.DrawFn) -> Stream:
    """A chat-completions stream as a server sends it, with what it must decode to."""
    stream = Stream()
    texts = draw(st.lists(TEXT, max_size=4))
    stream.text = "".join(texts)
    payloads: list[Any] = [_chunk({"role": "assistant", "content": ""})]
    payloads += [_chunk({"content": text}) for text in texts]
    payloads += draw(tool_call_chunks(stream))
    stream.finish_reason = "tool_calls" if stream.calls else "stop"
    payloads.append(_chunk({}, stream.finish_reason))
    if draw(st.booleans()):
        stream.usage = {"prompt_tokens": 3, "completion_tokens": 5, "total_tokens": 8}
        payloads.append({"id": "c1", "choices": [], "usage": stream.usage})
    stream.done = draw(st.booleans())
    if stream.done:
        payloads.append("[DONE]")
    writer = _Writer(draw, BOM if draw(st.booleans()) else b"")
    for number, payload in enumerate(payloads):
        if draw(st.booleans()):
            writer.line(draw(st.sampled_from([": keep-alive", ":", ": ping é"])))
        start = len(writer.body)
        if draw(st.booleans()):
            writer.line(f"id: {number}")
        data_start = len(writer.body)
        data = payload if isinstance(payload, str) else json.dumps(
            payload, ensure_ascii=draw(st.booleans()), indent=draw(st.sampled_from([None, 1])))
        for line in data.split("\n"):
            space = " " if line.startswith(" ") or draw(st.booleans()) else ""
            writer.line(f"data:{space}{line}")
        stream.datas.append(data)
        stream.spans.append((start, data_start, len(writer.body) + 1))
        writer.end_line(blank=True)
    stream.body = bytes(writer.body)
    return stream


def pieces_of(data: st.DataObject, body: bytes) -> list[bytes]:
    """``body`` cut at random places (sometimes byte by byte)."""
    if data.draw(st.integers(0, 9), label="one byte at a time") == 9:
        return [body[i:i + 1] for i in range(len(body))]
    cuts = data.draw(st.sets(st.integers(0, len(body)), max_size=25), label="cuts")
    bounds = [0, *sorted(cuts), len(body)]
    return [body[start:end] for start, end in itertools.pairwise(bounds)]


@dataclass
class Decoded:
    events: list[SSEEvent]
    comments: int
    retry: int | None
    truncated: bool
    reply: Reply


def decode(pieces: list[bytes]) -> Decoded:
    """Feed the pieces as the client does; offsets count events, so runs compare equal."""
    decoder, assembler = SSEDecoder(), StreamAssembler()
    events = [event for piece in pieces for event in decoder.feed(piece)]
    events += decoder.close()
    for number, event in enumerate(events):
        assembler.add(event, offset_ms=float(number))
    reply = assembler.finish(truncated=decoder.truncated)
    return Decoded(events, decoder.comments, decoder.retry, decoder.truncated, reply)


def _returns_within(seconds: float, call: Callable[[], T]) -> T:
    """``call()``'s result; fails (rather than hanging the run) when it takes too long."""
    outcome: list[Any] = []

    def run() -> None:
        try:
            outcome.append((True, call()))
        except BaseException as error:  # noqa: BLE001 - re-raised below, in the test's thread
            outcome.append((False, error))

    worker = threading.Thread(target=run, daemon=True)
    worker.start()
    worker.join(seconds)
    assert outcome, f"did not return within {seconds} s"
    succeeded, value = outcome[0]
    if not succeeded:
        raise value
    return value  # type: ignore[no-any-return]


@settings(STREAMING, max_examples=examples(200))
@given(streams(), st.data())
def test_any_chunking_decodes_and_reassembles_like_the_whole_body(stream: Stream,
                                                                  data: st.DataObject) -> None:
    whole = decode([stream.body])
    assert [event.data for event in whole.events] == stream.datas
    assert not whole.truncated
    reply = whole.reply
    assert reply.problems == []
    assert reply.text == stream.text
    assert [(call.id, call.name, call.arguments) for call in reply.tool_calls] == stream.calls
    assert reply.finish_reason == stream.finish_reason
    assert reply.usage == stream.usage
    assert reply.stream is not None and reply.stream.done == stream.done

    assert decode(pieces_of(data, stream.body)) == whole


def _received_at(stream: Stream, index: int) -> int:
    """The shortest cut that keeps event ``index``: one past the start of its blank line, or
    for ``[DONE]`` the end of its data line (a stream may end there, and is done)."""
    _, data_start, dispatch = stream.spans[index]
    if stream.datas[index] != "[DONE]":
        return dispatch
    return data_start + len(stream.body[data_start:dispatch - 1].rstrip(b"\r\n"))


@settings(STREAMING, max_examples=examples(200))
@given(streams(), st.data())
def test_a_stream_cut_anywhere_reports_what_arrived(stream: Stream, data: st.DataObject) -> None:
    cut = data.draw(st.integers(0, len(stream.body)), label="cut")
    full = [event.data for event in decode([stream.body]).events]

    pieces = pieces_of(data, stream.body[:cut])
    cut_short = _returns_within(5.0, lambda: decode(pieces))

    events = [event.data for event in cut_short.events]
    assert events == full[: len(events)]
    inside = [i for i, (_, data_start, _) in enumerate(stream.spans)
              if data_start < cut < _received_at(stream, i)]
    if inside:  # the cut falls in an event's data lines: the event is lost, and says so
        assert len(events) == inside[0]
        assert cut_short.truncated
        assert any("stream ended inside an event" in p for p in cut_short.reply.problems)
    between = [i for i in range(len(stream.spans)) if _received_at(stream, i) <= cut and (
        i + 1 == len(stream.spans) or cut <= stream.spans[i + 1][0])]
    if between:  # the cut falls between events: nothing is lost
        assert len(events) == between[0] + 1
        assert not cut_short.truncated
    assert cut_short.reply.stream is not None
    assert cut_short.reply.stream.done == ("[DONE]" in events)


SSE_SOUP = st.lists(
    st.sampled_from(["data:", "data: ", "event: error", "event:", "id: 1", "id:\x00", "retry: 9",
                     "retry: x", ":", ": ping", "\n", "\r", "\r\n", "[DONE]", "{", "}", "[",
                     '{"choices": [', '{"choices": [{"delta": {"tool_calls": [',
                     '{"index": 0, "function": {"arguments": "', '{"error": {"message": "x"}}',
                     '"', "null", "é", "\ufeff", "\u2028", "\x00", "\udcff"]),
    max_size=60,
).map(lambda parts: "".join(parts).encode("utf-8", errors="surrogateescape"))
"""SSE fields, line breaks and JSON fragments in any order, with a stray bad byte."""


@settings(STREAMING, max_examples=examples(500))
@given(st.binary(max_size=400) | SSE_SOUP, st.data())
def test_garbage_bytes_never_raise_and_any_chunking_agrees(body: bytes,
                                                          data: st.DataObject) -> None:
    whole = decode([body])
    assert isinstance(whole.reply, Reply)
    assert decode(pieces_of(data, body)) == whole


CALL_ITEMS = st.fixed_dictionaries({}, optional={
    "index": st.none() | st.booleans() | st.integers(-1, 3) | st.floats(0, 2) | TEXT,
    "id": st.none() | st.sampled_from(["", "a", "b"]) | st.integers(0, 2) | JUNK,
    "type": st.just("function"),
    "function": JUNK | st.fixed_dictionaries({}, optional={
        "name": st.none() | st.sampled_from(["", "f", "g"]) | JUNK,
        "arguments": st.sampled_from(["", "{", '"a": 1}', "{}", " { } "]) | JUNK}),
}) | JUNK
ODD_CHUNKS = st.fixed_dictionaries({}, optional={
    "choices": JUNK | st.lists(st.fixed_dictionaries({}, optional={
        "index": JUNK,
        "finish_reason": JUNK,
        "delta": JUNK | st.fixed_dictionaries({}, optional={
            "content": JUNK, "tool_calls": JUNK | st.lists(CALL_ITEMS, max_size=3),
            "function_call": JUNK}),
        "message": JUNK,
    }), max_size=2),
    "usage": JUNK,
    "error": JUNK,
}) | JUNK
"""Chunks shaped like chat completions, with any value where a server might slip."""


@settings(STREAMING, max_examples=examples(300))
@given(st.lists(st.tuples(ODD_CHUNKS, st.sampled_from(["message", "error"])), max_size=6),
       st.booleans())
def test_assembler_reads_oddly_shaped_chunks_without_raising(
        chunks: list[tuple[Any, str]], truncated: bool) -> None:
    assembler = StreamAssembler()
    for number, (chunk, kind) in enumerate(chunks):
        assembler.add(SSEEvent(json.dumps(chunk), event=kind), offset_ms=float(number))
    reply = assembler.finish(truncated=truncated)
    assert reply.stream is not None and reply.stream.chunks == len(chunks)
    for call in reply.tool_calls:
        assert (call.arguments_error is None) or (call.arguments is None)
    body = json.dumps(chunks[0][0] if chunks else None).encode()
    for status in (200, 500):
        assert isinstance(parse_completion(status, body), Reply)


def _deepest_loadable_json() -> int:
    """How deep json.loads nests from here: the recursion limit, less the stack in use."""
    low, high = 1, 100_000
    while low < high:
        middle = (low + high + 1) // 2
        try:
            json.loads("[" * middle + "]" * middle)
        except RecursionError:
            high = middle - 1
        else:
            low = middle
    return low


JSON_IN_SLOTS = [
    '"X"', '{"error": "X"}', '{"error": {"x": "X"}}', '{"choices": "X"}',
    '{"choices": [{"delta": {"tool_calls": ["X"]}}]}',
    '{"choices": [{"delta": {"tool_calls": [{"index": 0, "function": {"arguments": "X"}}]}}]}',
    '{"choices": [{"delta": {"function_call": {"name": "f", "arguments": "X"}}}]}',
    '{"choices": [{"message": {"tool_calls": [{"function": {"arguments": "X"}}]}}]}',
]


@pytest.mark.parametrize("template", JSON_IN_SLOTS)
def test_json_nested_near_the_recursion_limit_is_a_problem_not_a_crash(template: str) -> None:
    # json reads a little less deep than the limit but writes (json.dumps in messages) from a
    # deeper stack: the depths that read and then fail to write sit just below the limit.
    deepest = _deepest_loadable_json()
    for depth in range(max(1, deepest - 40), deepest + 5):
        body = template.replace('"X"', "[" * depth + "]" * depth)
        for kind in ("message", "error"):
            assembler = StreamAssembler()
            assembler.add(SSEEvent(body, event=kind), offset_ms=0.0)
            assert isinstance(assembler.finish(), Reply)
        for status in (200, 500):
            assert isinstance(parse_completion(status, body), Reply)


# --- 3. matchers ----------------------------------------------------------------------------
# test_matchers.py runs one fixed matcher holding every operator against random values;
# these compile random specs, valid and not, and run them against random values.

JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | TEXT,
    lambda inner: st.lists(inner, max_size=3)
    | st.dictionaries(st.sampled_from(["city", "a", "b", "$eq", "temp_c"]) | TEXT, inner,
                      max_size=3),
    max_leaves=10,
)


def _compile_or_error(compile_spec: Callable[[Any], Matcher], spec: Any) -> Matcher | None:
    """The compiled spec, or None after checking the MatcherError is well formed."""
    try:
        return compile_spec(spec)
    except MatcherError as error:
        assert error.message and isinstance(error.message, str)
        assert isinstance(error.path, tuple)
        assert all(isinstance(part, (str, int)) for part in error.path)
        return None


def _assert_mismatches(found: Any) -> None:
    assert isinstance(found, list)
    for mismatch in found:
        assert isinstance(mismatch, Mismatch)
        assert isinstance(mismatch.path, tuple) and isinstance(mismatch.message, str)
        assert mismatch.message


@settings(PROPERTY, max_examples=examples(400))
@given(MATCHER_SPECS | BAD_MATCHER_SPECS | JUNK, st.lists(JSON_VALUES | HUGE, max_size=4))
@example({"$type": [1]}, [])  # TypeError (unhashable) escaped compile
@example({"$schema": {"$schema": {"type": 5}}}, [])  # TypeError inside jsonschema
@example({"$gt": 16**4000}, [1])  # repr of a 4,817-digit int raised while matching
@example({"$approx": 16**4000}, [1])
def test_random_matchers_compile_or_say_why_and_never_raise_matching(
        spec: Any, values: list[Any]) -> None:
    matcher = _compile_or_error(compile_matcher, spec)
    if matcher is None:
        return
    for value in [*values, MISSING]:
        _assert_mismatches(matcher.match(value))
        _assert_mismatches(matcher.match(value, ("x", 0)))


@settings(PROPERTY, max_examples=examples(100))
@given(BAD_MATCHER_SPECS)
def test_bad_specs_are_compile_errors(spec: Any) -> None:
    assert _compile_or_error(compile_matcher, spec) is None


def _no_operator_keys(value: Any) -> bool:
    if isinstance(value, dict):
        return all(not str(key).startswith("$") and _no_operator_keys(v)
                   for key, v in value.items())
    if isinstance(value, list):
        return all(map(_no_operator_keys, value))
    return not (isinstance(value, float) and math.isnan(value))


@settings(PROPERTY, max_examples=examples(200))
@given(JSON_VALUES.filter(_no_operator_keys))
def test_a_json_value_matches_itself(value: Any) -> None:
    assert compile_matcher(value).match(value) == []


TOOL_CALLS = st.lists(st.one_of(
    st.builds(lambda name, arguments: ToolCall(name, json.dumps(arguments), arguments=arguments),
              st.sampled_from(["f", "g", ""]), JSON_VALUES),
    st.builds(lambda name, raw: ToolCall(name, raw, arguments_error="Expecting value"),
              st.sampled_from(["f", "g"]), st.sampled_from(["{", "", "nope"])),
), max_size=4)


@settings(PROPERTY, max_examples=examples(250))
@given(TOOL_CALL_SPECS | BAD_MATCHER_SPECS, TOOL_CALLS | JSON_VALUES)
def test_random_tool_call_matchers_never_raise(spec: Any, calls: Any) -> None:
    matcher = _compile_or_error(compile_tool_calls, spec)
    if matcher is not None:
        _assert_mismatches(matcher.match(calls))


# --- a hostile reply, from its bytes to every report ----------------------------------------

SERVER_VALUES = JSON_VALUES | HUGE
"""What a server may put in any field: Python's JSON reader also lets NaN and Infinity in."""
USAGE_NAMES = ["prompt_tokens", "completion_tokens", "total_tokens", "input_tokens",
               "output_tokens", "cache_read_input_tokens", "cache_creation_input_tokens"]
SERVER_USAGE = st.dictionaries(st.sampled_from(USAGE_NAMES), SERVER_VALUES) | SERVER_VALUES
SERVER_FINISH = st.sampled_from(["stop", "tool_calls", "length", "completed", "incomplete",
                                 "end_turn", "tool_use", "max_tokens"]) | SERVER_VALUES


def _reply_body(api: str, text: Any, call: tuple[Any, Any, Any], finish: Any, usage: Any
                ) -> dict[str, Any]:
    """A reply of ``api`` with these values where a text, a tool call (id, name, arguments),
    a finish reason and a usage object belong."""
    call_id, name, arguments = call
    if api == "responses":
        return {"object": "response", "status": finish, "usage": usage, "output": [
            {"type": "message", "content": [{"type": "output_text", "text": text}]},
            {"type": "function_call", "call_id": call_id, "name": name,
             "arguments": arguments}]}
    if api == "messages":
        return {"type": "message", "role": "assistant", "stop_reason": finish, "usage": usage,
                "content": [{"type": "text", "text": text},
                            {"type": "tool_use", "id": call_id, "name": name,
                             "input": arguments}]}
    return {"usage": usage, "choices": [{"index": 0, "finish_reason": finish, "message": {
        "role": "assistant", "content": text, "tool_calls": [
            {"id": call_id, "type": "function",
             "function": {"name": name, "arguments": arguments}}]}}]}


def _strict(constant: str) -> None:
    raise AssertionError(f"not strict JSON: {constant}")


@settings(PROPERTY, max_examples=examples(300))
@given(st.sampled_from(["chat", "responses", "messages"]), SERVER_VALUES,
       st.tuples(SERVER_VALUES, st.just("get_weather") | SERVER_VALUES,
                 st.just('{"city": "Paris"}') | SERVER_VALUES),
       SERVER_FINISH, SERVER_USAGE)
def test_any_reply_body_is_read_reported_and_shown_without_raising(
        api: str, text: Any, call: tuple[Any, Any, Any], finish: Any, usage: Any) -> None:
    """Whatever a server puts in a reply's fields, the reply is read, the case's record
    made, carried as text and written as strict JSON, and its failure, the summary and the
    HTML page shown."""
    raw = json.dumps(_reply_body(api, text, call, finish, usage)).encode()
    _report_everywhere(api, wire_api(api).read_body(200, raw, "application/json"))


def _stream_events(api: str, kinds: list[str], data: st.DataObject) -> list[SSEEvent]:
    """Events of ``api``'s stream, of these kinds in this order, any value in their fields."""
    def value(strategy: st.SearchStrategy[Any] = SERVER_VALUES) -> Any:
        return data.draw(strategy)
    events: list[SSEEvent] = []
    for kind in kinds:
        if api == "chat":
            delta = {"text": {"content": value()},
                     "call": {"tool_calls": [{"index": value(st.integers(0, 2) | SERVER_VALUES),
                                              "id": value(), "function": {
                                                  "name": value(), "arguments": value()}}]},
                     "end": {}, "usage": {}}[kind]
            chunk: Any = {"choices": [{"index": 0, "delta": delta, "finish_reason": (
                value(SERVER_FINISH) if kind == "end" else None)}]}
            if kind == "usage":
                chunk = {"choices": [], "usage": value(SERVER_USAGE)}
            events.append(SSEEvent(json.dumps(chunk)))
            continue
        index = value(st.integers(0, 2) | SERVER_VALUES)
        if api == "responses":
            payload = {
                "text": {"type": "response.output_text.delta", "output_index": index,
                         "content_index": 0, "delta": value()},
                "call": {"type": "response.output_item.added", "output_index": index,
                         "item": {"type": "function_call", "call_id": value(),
                                  "name": value(), "arguments": ""}},
                "end": {"type": "response.function_call_arguments.delta",
                        "output_index": index, "delta": value()},
                "usage": {"type": "response.completed", "response": {
                    "status": value(SERVER_FINISH), "usage": value(SERVER_USAGE),
                    "output": value(st.lists(SERVER_VALUES, max_size=2))}},
            }[kind]
        else:
            payload = {
                "text": {"type": "content_block_delta", "index": index,
                         "delta": {"type": "text_delta", "text": value()}},
                "call": {"type": "content_block_start", "index": index, "content_block": {
                    "type": "tool_use", "id": value(), "name": value(), "input": {}}},
                "end": {"type": "content_block_delta", "index": index,
                        "delta": {"type": "input_json_delta", "partial_json": value()}},
                "usage": {"type": "message_delta", "usage": value(SERVER_USAGE),
                          "delta": {"stop_reason": value(SERVER_FINISH)}},
            }[kind]
        events.append(SSEEvent(json.dumps(payload), event=str(payload["type"])))
    return events


@settings(STREAMING, max_examples=examples(300))
@given(st.sampled_from(["chat", "responses", "messages"]),
       st.lists(st.sampled_from(["text", "call", "end", "usage"]), max_size=6), st.data())
def test_any_stream_is_read_reported_and_shown_without_raising(
        api: str, kinds: list[str], data: st.DataObject) -> None:
    """The same for streams: events of each API in any order, any value in their fields."""
    reader = wire_api(api).stream_reader()
    for number, event in enumerate(_stream_events(api, kinds, data)):
        reader.add(event, float(number))
    _report_everywhere(api, reader.finish(truncated=data.draw(st.booleans())))


def _report_everywhere(api: str, reply: Reply) -> None:
    """``reply`` through the next request, the record, its JSON text, the report file, the
    failure text, the summary and the HTML page: nothing may raise on the way."""
    # What the next request sends back of this reply is sent as strict JSON, or the case
    # fails saying why it cannot be: nothing else may come out of making it.
    try:
        request_content({"input": [reply.to_message(), reply.native_turn]})
    except UnsendableRequest as refused:
        assert "NaN or Infinity" in str(refused)
    failure = Failure("usage did not match", ("stages", 0, "expect", "usage"), 4,
                      expected={"$lt": 10}, actual=reply.usage)
    attempt = StageAttempt("ask", 1, turns=[Turn({"model": "m"}, False, reply)],
                           failures=[failure])
    result = CaseResult("hostile", "m", "t.case.yaml", 1, api=api,
                        runs=[RunResult(1, stages=[StageResult("ask", [attempt])])])

    record = CaseRecord.of(result, f"t.case.yaml::hostile[m-{api}]", "failed")
    text_form = record.to_text()
    json.loads(text_form, parse_constant=_strict)
    assert CaseRecord.from_text(text_form).to_json() == record.to_json()
    json.dumps(record.to_json(), allow_nan=False)  # the JSON report's file
    assert "usage did not match" in render_failure(result, "hostile")
    assert "hostile" in render_summary([record], 120, color=False)
    page = render_html(records_of({"version": 1, "cases": [record.to_json()]}, "r.json"))
    assert "hostile" in page


# --- toolbench diff on reports someone else wrote -------------------------------------------

REPORT_KEYS = ["outcome", "turns", "latency_ms", "ttft_ms", "total_tokens", "runs", "stages",
               "attempts", "name", "turns", "reply", "tool_calls", "arguments", "text",
               "error", "finish_reason"]
REPORT_VALUES = st.recursive(
    SERVER_VALUES,
    lambda inner: st.lists(inner, max_size=3)
    | st.dictionaries(st.sampled_from(REPORT_KEYS), inner, max_size=4),
    max_leaves=12,
)


@settings(PROPERTY, max_examples=examples(500))
@example({"total_tokens": 5, "latency_ms": 10.0},
         {"total_tokens": 10**400, "latency_ms": "fast"})
@example({"runs": [{"stages": [{"name": "s", "attempts": [3]}]}]}, {"runs": 7})
@given(st.dictionaries(st.sampled_from(REPORT_KEYS), REPORT_VALUES, max_size=6),
       st.dictionaries(st.sampled_from(REPORT_KEYS), REPORT_VALUES, max_size=6))
def test_diff_compares_any_two_case_records_without_raising(old: Any, new: Any) -> None:
    """Reports come from other runs, other versions, other hands: whatever two cases hold,
    the report loader refuses them with a message naming the case, or comparing the
    records it reads gives changes (texts), never an exception."""
    try:
        before, after = (records_of({"cases": [{**case, "nodeid": "a.case.yaml::a"}]},
                                    "r.json")[0] for case in (old, new))
    except ReportUnreadable as refused:
        assert "r.json: case a.case.yaml::a: " in str(refused)
        return
    changes = list(compare_cases("a.case.yaml::a", before, after, Limits(20.0, 100.0)))
    assert all(isinstance(change.detail, str) for change in changes)


def _base_record() -> dict[str, Any]:
    """A case record as a session writes it: a streamed call, a text, usage, a failure."""
    call = ToolCall(id="c1", name="get_weather", arguments_raw='{"city": "Paris"}',
                    arguments={"city": "Paris"}, completed_ms=12.5)
    reply = Reply(status=200, text="It is 21 C", tool_calls=[call], finish_reason="stop",
                  usage={"prompt_tokens": 5, "completion_tokens": 3, "total_tokens": 8},
                  latency_ms=40.0, ttft_ms=10.0)
    failure = Failure("text did not match", ("stages", 0, "expect", "text"), 4,
                      expected="hello", actual="It is 21 C")
    attempt = StageAttempt("ask", 1, trail=["idle", "sending", "failed"],
                           turns=[Turn({"model": "m", "messages": []}, True, reply)],
                           failures=[failure])
    result = CaseResult("weather", "m", "t.case.yaml", 1,
                        runs=[RunResult(1, stages=[StageResult("ask", [attempt])])])
    return CaseRecord.of(result, "t.case.yaml::weather[m]", "failed").to_json()


def _leaves(value: Any, path: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    if isinstance(value, dict):
        for key, item in value.items():
            yield from _leaves(item, (*path, key))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from _leaves(item, (*path, index))
    yield path


def _replaced(tree: Any, path: tuple[Any, ...], value: Any) -> Any:
    """``tree`` with ``value`` at ``path`` (unchanged if an earlier change removed it)."""
    if not path:
        return value
    key, rest = path[0], path[1:]
    if isinstance(tree, dict) and key in tree:
        return {**tree, key: _replaced(tree[key], rest, value)}
    if isinstance(tree, list) and isinstance(key, int) and key < len(tree):
        return [*tree[:key], _replaced(tree[key], rest, value), *tree[key + 1:]]
    return tree


BASE_RECORD = _base_record()
LEAVES = [path for path in _leaves(BASE_RECORD) if path]


@settings(PROPERTY, max_examples=examples(500))
@example([(("passes",), 10**400)])
@given(st.lists(st.tuples(st.sampled_from(LEAVES), HUGE | SERVER_VALUES), min_size=1,
                max_size=4))
def test_the_html_page_of_any_valid_report_renders_without_raising(
        changes: list[tuple[tuple[Any, ...], Any]]) -> None:
    """``toolbench html`` reads reports from other runs, versions and hands: it checks each
    case against the record type, and whatever values a valid case holds (any size, NaN,
    Infinity, text where it does not matter), the page is drawn, never an exception."""
    case = BASE_RECORD
    for path, value in changes:
        case = _replaced(case, path, value)
    document = {"version": 1, "summary": {"cases": 1, "failed": 1}, "cases": [case]}
    try:
        records = records_of(document, Path("r.json"))
    except ReportUnreadable as refused:
        assert "r.json: case t.case.yaml::weather[m]" in str(refused) or "r.json" in str(refused)
        return
    page = render_html(records)
    assert page.startswith("<!DOCTYPE html>") and "weather" in page


# --- BFCL records from a file someone else wrote --------------------------------------------

BFCL_KEYS = ["name", "description", "parameters", "type", "properties", "required", "items",
             "enum", "default", "role", "content"]
BFCL_VALUES = st.recursive(
    SERVER_VALUES | st.sampled_from(["dict", "integer", "float", "string", "array", "any",
                                     "boolean", "tuple", "f", "user"]),
    lambda inner: st.lists(inner, max_size=3)
    | st.dictionaries(st.sampled_from(BFCL_KEYS), inner, max_size=4),
    max_leaves=12,
)
BFCL_FUNCTION = st.fixed_dictionaries(
    {"name": st.sampled_from(["f", "g.h"]) | BFCL_VALUES},
    optional={"description": BFCL_VALUES, "parameters": st.fixed_dictionaries(
        {"type": st.just("dict") | BFCL_VALUES},
        optional={"properties": st.dictionaries(st.sampled_from(["a", "b"]), BFCL_VALUES,
                                                max_size=2) | BFCL_VALUES,
                  "required": BFCL_VALUES})})


_BFCL_QUESTION = [[{"role": "user", "content": "hi"}]]


@settings(PROPERTY, max_examples=examples(300))
@example({"id": "simple_0", "question": _BFCL_QUESTION, "function": [  # a list of types
    {"name": "f", "parameters": {"type": "dict", "properties": {"a": {"type": ["x"]}}}}]},
    [{"f": {"a": [1]}}])
@example({"id": "simple_0", "question": _BFCL_QUESTION, "function": [  # required: a number
    {"name": "f", "parameters": {"type": "dict", "properties": {}, "required": 3}}]},
    [{"f": {"a": [1]}}])
@given(st.fixed_dictionaries(
           {"id": st.just("simple_0") | BFCL_VALUES},
           optional={"question": st.just([[{"role": "user", "content": "hi"}]]) | BFCL_VALUES,
                     "function": st.lists(BFCL_FUNCTION, max_size=2) | BFCL_VALUES}),
       st.just([{"f": {"a": [1]}}]) | BFCL_VALUES)
def test_any_bfcl_record_converts_or_is_skipped_with_a_reason(record: Any, truth: Any) -> None:
    """``toolbench import-bfcl`` reads files from elsewhere: a record it cannot map is
    skipped with a reason, never an exception, and what it writes validates as a case."""
    summary = ImportSummary(Path("out"))
    cases = bfcl_convert_all([record], {"simple_0": truth}, "simple", summary)
    assert len(cases) + len(summary.skipped) == 1
    for case in cases:
        Case.model_validate(case)
