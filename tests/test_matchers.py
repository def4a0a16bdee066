"""The matcher language: every operator passing and failing, compile errors, tool calls."""

from __future__ import annotations

import copy
import json
import pickle
import re
import time
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pytest_toolbench.matchers import (
    MISSING,
    MatcherError,
    MatchTimeout,
    Mismatch,
    compile_matcher,
    compile_tool_calls,
    time_limit,
)
from pytest_toolbench.matchers.limits import QUICK_SEARCH_STEPS, quick_search
from pytest_toolbench.matchers.regex_ways import ways
from pytest_toolbench.records import ToolCall

Path = tuple[str | int, ...]


def call(name: str, arguments: Any = None, raw: str | None = None) -> ToolCall:
    """A tool call as the transport makes it; ``raw`` alone gives unparseable arguments."""
    if raw is not None:
        return ToolCall(name=name, arguments_raw=raw, arguments_error="Expecting value")
    arguments = {} if arguments is None else arguments
    return ToolCall(name=name, arguments_raw=json.dumps(arguments), arguments=arguments)


def only(mismatches: list[Mismatch]) -> Mismatch:
    assert len(mismatches) == 1, mismatches
    return mismatches[0]


PASSING: list[tuple[Any, Any]] = [
    ("Paris", "Paris"),
    (21, 21.0),
    (21.0, 21),
    (None, None),
    (True, True),
    ({"city": "Paris"}, {"city": "Paris", "days": 3}),
    ({}, {"anything": 1}),
    ([1, "a"], [1.0, "a"]),
    ({"$eq": {"a": [1, 2]}}, {"a": [1.0, 2]}),
    ({"$ne": "Lyon"}, "Paris"),
    ({"$ne": 1}, True),
    ({"$regex": "(?i)^paris$"}, "PARIS"),
    ({"$regex": "ar"}, "Paris"),
    ({"$contains": "ari"}, "Paris"),
    ({"$contains": ["21", "°C"]}, "It is 21 °C"),
    ({"$contains": 2}, [1, 2, 3]),
    ({"$contains": [1, 3]}, [3, 2, 1]),
    ({"$icontains": "PAR"}, "paris"),
    ({"$icontains": ["A", "b"]}, ["a", "B"]),
    ({"$in": ["Paris", "paris"]}, "paris"),
    ({"$in": [1, 2]}, 2.0),
    ({"$loose": "new-york, ny"}, "New York NY"),
    ({"$loose": "it's"}, 'IT"S'),
    ({"$loose": "a b"}, "A\n_b*"),
    ({"$type": "string"}, "x"),
    ({"$type": "integer"}, 3),
    ({"$type": "number"}, 3),
    ({"$type": "number"}, 3.5),
    ({"$type": "boolean"}, False),
    ({"$type": "array"}, []),
    ({"$type": "object"}, {}),
    ({"$type": "null"}, None),
    ({"$gt": 1}, 2),
    ({"$gte": 1}, 1.0),
    ({"$lt": 1}, 0.5),
    ({"$lte": 1}, 1),
    ({"$gte": 1, "$lte": 5}, 3),
    ({"$approx": 3.14159}, 3.141592),
    ({"$approx": 100, "$tol": 0.01}, 100.9),
    ({"$approx": 0}, 0.0),
    ({"$len": 3}, "abc"),
    ({"$len": {"$gte": 1}}, [0]),
    ({"$len": 1}, {"a": 1}),
    ({"$any": True}, None),
    ({"$exact": {"a": 1}}, {"a": 1}),
    ({"$exact": {"a": 1, "b": {"$optional": 2}}}, {"a": 1}),
    ({"$exact": {"a": 1, "b": {"$optional": 2}}}, {"a": 1, "b": 2}),
    ({"$schema": {"type": "object", "required": ["a"]}}, {"a": 1}),
    ({"$json": {"a": 1}}, '{"a": 1, "b": 2}'),
    ({"$not": {"$regex": "Lyon"}}, "Paris"),
    ({"$all": [{"$type": "string"}, {"$len": 5}]}, "Paris"),
    ({"$anyof": ["Paris", {"$regex": "^Lyon"}]}, "Lyon 3e"),
    ({"$unordered": [1, {"$type": "string"}]}, ["x", 1]),
    ({"$includes": [{"$gt": 2}, 1]}, [1, 5, 0]),
    ({"$includes": []}, []),
    ({"city": {"$absent": True}}, {"town": "Paris"}),
    ({"city": {"$optional": {"$regex": "P"}}}, {}),
    ({"city": {"$optional": {"$regex": "P"}}}, {"city": "Paris"}),
    ({"city": {"$anyof": [{"$absent": True}, "Paris"]}}, {}),
]


@pytest.mark.parametrize(("spec", "actual"), PASSING, ids=[repr(p[0]) for p in PASSING])
def test_passes(spec: Any, actual: Any) -> None:
    assert compile_matcher(spec).match(actual) == []


FAILING: list[tuple[Any, Any, str, Path]] = [
    ("Paris", "Lyon", "expected 'Paris', got 'Lyon'", ()),
    (1, True, "expected 1, got True", ()),
    (True, 1, "expected True, got 1", ()),
    (21, "21", "expected 21, got '21'", ()),
    ({"city": "Paris"}, {"city": "Lyon"}, "expected 'Paris', got 'Lyon'", ("city",)),
    ({"city": "Paris"}, {}, "missing key 'city'", ("city",)),
    ({"city": "Paris"}, ["Paris"], "expected an object, got ['Paris']", ()),
    ([1, 2], [1], "expected 2 elements, got 1: 1", ()),
    ([1, 2], [1, 3], "expected 2, got 3", (1,)),
    ([1], "1", "expected a list, got '1'", ()),
    ({"$eq": [1]}, [True], "expected [1], got [True]", ()),
    ({"$ne": "Lyon"}, "Lyon", "expected anything but 'Lyon'", ()),
    ({"$regex": "(?i)^paris$"}, "Lyon", "'Lyon' does not match regex '(?i)^paris$'", ()),
    ({"$regex": "x"}, 12, "expected a string matching regex 'x', got 12", ()),
    ({"$contains": "x"}, "Paris", "'Paris' does not contain 'x'", ()),
    ({"$contains": ["a", "x", "y"]}, "Paris", "'Paris' does not contain 'x', 'y'", ()),
    ({"$contains": 4}, [1, 2], "[1, 2] does not contain 4", ()),
    ({"$contains": 21}, "21 °C", "cannot search the string '21 °C' for 21: quote it", ()),
    ({"$contains": "x"}, 5, "expected a string or list containing 'x', got 5", ()),
    ({"$icontains": "X"}, "paris", "'paris' does not contain 'X'", ()),
    ({"$in": ["Paris", "Lyon"]}, "Nice", "expected one of ['Paris', 'Lyon'], got 'Nice'", ()),
    ({"$in": [1]}, True, "expected one of [1], got True", ()),
    ({"$loose": "paris"}, "Lyon", "'Lyon' does not loosely equal 'paris'", ()),
    ({"$loose": "1"}, 1, "1 does not loosely equal '1'", ()),
    ({"$type": "integer"}, True, "expected type 'integer', got boolean True", ()),
    ({"$type": "number"}, False, "expected type 'number', got boolean False", ()),
    ({"$type": "integer"}, 1.5, "expected type 'integer', got number 1.5", ()),
    ({"$type": "object"}, [], "expected type 'object', got array []", ()),
    ({"$gt": 5}, 5, "expected > 5, got 5", ()),
    ({"$gte": 5}, 4.9, "expected >= 5, got 4.9", ()),
    ({"$lt": 5}, 5, "expected < 5, got 5", ()),
    ({"$lte": 5}, 6, "expected <= 5, got 6", ()),
    ({"$gt": 5}, "9", "expected a number > 5, got '9'", ()),
    ({"$gt": 0}, True, "expected a number > 0, got True", ()),
    ({"$approx": 3.14}, 3.15, "expected 3.14 within relative tolerance 1e-06, got 3.15", ()),
    ({"$approx": 100, "$tol": 0.01}, 102, "within relative tolerance 0.01, got 102", ()),
    ({"$approx": 1}, "1", "got '1'", ()),
    ({"$approx": 1.0}, 10**400, "expected 1.0 within relative tolerance", ()),
    ({"$len": {"$gte": 1}}, [], "length of []: expected >= 1, got 0", ()),
    ({"$len": 2}, 12, "expected a string, array or object to measure, got 12", ()),
    ({"$exact": {"a": 1}}, {"a": 1, "b": 2}, "unexpected key 'b'", ("b",)),
    ({"$exact": {"a": 1, "b": {"$optional": 2}}}, {"a": 1, "b": 3}, "expected 2, got 3", ("b",)),
    ({"$exact": {"a": 1}}, {}, "missing key 'a'", ("a",)),
    ({"$schema": {"type": "object", "properties": {"n": {"type": "integer"}}}}, {"n": "x"},
     "schema: 'x' is not of type 'integer'", ("n",)),
    ({"$json": {"a": 1}}, '{"a": 2}', "expected 1, got 2", ("a",)),
    ({"$json": {"a": 1}}, "{a: 1}", "not valid JSON (Expecting property name", ()),
    ({"$json": {"a": 1}}, {"a": 1}, "expected a string holding JSON, got {'a': 1}", ()),
    ({"$not": {"$regex": "P"}}, "Paris", "'Paris' should not match {'$regex': 'P'}", ()),
    ({"$all": [{"$type": "string"}, {"$len": 3}]}, "Paris", "length of 'Paris'", ()),
    ({"$anyof": ["a", "b"]}, "c", "matches none of 2 alternatives: expected 'a', got 'c' | ", ()),
    ({"$unordered": [1, 2]}, [2, 2], "expected element 0 1 found no partner; closest", ()),
    ({"$unordered": [1, 2]}, [1, 2, 3], "expected 2 elements, got 3", ()),
    ({"$includes": [1, 1]}, [1, 2], "elements [0] match it but are paired with other", ()),
    ({"$includes": [3]}, 3, "expected a list, got 3", ()),
    ({"$any": True}, MISSING, "expected a value, got <missing>", ()),
    ({"city": {"$absent": True}}, {"city": "Paris"}, "should be absent, got 'Paris'", ("city",)),
    ({"city": {"$optional": "Paris"}}, {"city": "Lyon"}, "expected 'Paris', got 'Lyon'", ("city",)),
    ({"city": {"$not": "Paris"}}, {}, "missing key 'city'", ("city",)),
]


@pytest.mark.parametrize(
    ("spec", "actual", "message", "path"), FAILING, ids=[repr(f[0]) for f in FAILING])
def test_fails(spec: Any, actual: Any, message: str, path: Path) -> None:
    mismatches = compile_matcher(spec).match(actual)
    assert mismatches, "expected a mismatch"
    assert message in mismatches[0].message
    assert mismatches[0].path == path


def test_nested_paths_point_into_the_actual_value() -> None:
    matcher = compile_matcher({"a": [{"b": {"c": {"$gt": 1}}}, {"$any": True}]})
    mismatch = only(matcher.match({"a": [{"b": {"c": 0}}, None]}, path=("usage",)))
    assert mismatch.path == ("usage", "a", 0, "b", "c")
    assert mismatch.expected == {"$gt": 1}
    assert mismatch.actual == 0


def test_every_operator_of_a_mapping_applies() -> None:
    mismatches = compile_matcher({"$gte": 10, "$lte": 5, "$type": "string"}).match(7)
    assert [m.expected for m in mismatches] == [{"$gte": 10}, {"$lte": 5}, {"$type": "string"}]


def test_missing_key_mismatch_carries_the_sentinel() -> None:
    mismatch = only(compile_matcher({"city": "Paris"}).match({}))
    assert mismatch.actual is MISSING
    assert mismatch.expected == "Paris"
    assert repr(MISSING) == str(MISSING) == "<missing>"


def test_missing_survives_copy_and_pickle() -> None:
    assert copy.deepcopy(MISSING) is MISSING
    assert pickle.loads(pickle.dumps(MISSING)) is MISSING


def test_schema_reports_every_error() -> None:
    schema = {"type": "object", "required": ["a", "b"]}
    assert len(compile_matcher({"$schema": schema}).match({})) == 2


def test_long_values_are_cut_in_messages() -> None:
    mismatch = only(compile_matcher({"$regex": "^x"}).match("y" * 1000))
    assert len(mismatch.message) < 150
    assert mismatch.actual == "y" * 1000


def test_spec_is_kept_for_reports() -> None:
    spec = {"city": {"$regex": "P"}}
    assert compile_matcher(spec).spec is spec
    assert compile_matcher({"$gte": 1}).spec == {"$gte": 1}


def test_unordered_matching_is_not_greedy() -> None:
    # Greedy would give [0] to {$type: integer} and leave nothing for 1.
    matcher = compile_matcher({"$unordered": [{"$type": "integer"}, 1]})
    assert matcher.match([1, 2]) == []
    assert matcher.match([2, 1]) == []


COMPILE_ERRORS: list[tuple[Any, str, Path]] = [
    ({"$regx": "a"}, "unknown operator '$regx'; did you mean '$regex'?", ("$regx",)),
    ({"a": {"$lenght": 1}}, "unknown operator '$lenght'; did you mean '$len'?", ("a", "$lenght")),
    ({"$foo": 1}, "unknown operator '$foo'; known operators: $absent, $all,", ("$foo",)),
    ({"arguments": {"city": {"$regex": "("}}}, "bad regex '('",
     ("arguments", "city", "$regex")),
    ({"$regex": 5}, "'$regex' takes a string, got 5", ("$regex",)),
    ({"$schema": {"type": "nope"}}, "invalid JSON Schema", ("$schema", "type")),
    ({"$schema": "object"}, "'$schema' takes a JSON Schema object", ("$schema",)),
    ({"city": "Paris", "$regex": "x"}, "cannot mix operators ($regex) with plain keys ('city')",
     ()),
    ({"$tol": 0.1}, "'$tol' is only valid beside '$approx'", ("$tol",)),
    ({"$gte": 1, "$tol": 0.1}, "'$tol' is only valid beside '$approx'", ("$tol",)),
    ({"$approx": 1, "$tol": -1}, "'$tol' takes a non-negative number", ("$tol",)),
    ({"$approx": "1"}, "'$approx' takes a number", ("$approx",)),
    ({"$gt": "5"}, "'$gt' takes a number, got '5'", ("$gt",)),
    ({"$lte": True}, "'$lte' takes a number, got True", ("$lte",)),
    ({"$len": "3"}, "'$len' takes a number or a matcher on one", ("$len",)),
    ({"$type": "strin"}, "unknown type 'strin'; did you mean 'string'?", ("$type",)),
    ({"$in": "abc"}, "'$in' takes a list", ("$in",)),
    ({"$loose": 3}, "'$loose' takes a string", ("$loose",)),
    ({"$any": False}, "'$any' takes true", ("$any",)),
    ({"a": {"$absent": False}}, "'$absent' takes true", ("a", "$absent")),
    ({"a": {"$absent": True, "$type": "string"}}, "'$absent' cannot be combined",
     ("a", "$absent")),
    ({"$optional": 1, "$eq": 1}, "'$optional' cannot be combined", ("$optional",)),
    ({"$exact": {"$eq": 1}}, "'$exact' takes an object of plain keys", ("$exact",)),
    ({"$exact": {"a": {"$regex": "["}}}, "bad regex", ("$exact", "a", "$regex")),
    ({"$all": {"a": 1}}, "'$all' takes a list of matchers", ("$all",)),
    ({"$anyof": []}, "'$anyof' takes a non-empty list", ("$anyof",)),
    ({"$unordered": [1, {"$bad": 1}]}, "unknown operator '$bad'", ("$unordered", 1, "$bad")),
    ({"$not": {"$len": {"$gt": "x"}}}, "'$gt' takes a number", ("$not", "$len", "$gt")),
    ([{"a": {"$json": {"$regex": ")"}}}], "bad regex", (0, "a", "$json", "$regex")),
]


@pytest.mark.parametrize(
    ("spec", "message", "path"), COMPILE_ERRORS, ids=[repr(c[0]) for c in COMPILE_ERRORS])
def test_invalid_specs_are_compile_errors(spec: Any, message: str, path: Path) -> None:
    with pytest.raises(MatcherError) as raised:
        compile_matcher(spec)
    assert message in raised.value.message
    assert raised.value.path == path
    assert isinstance(raised.value, ValueError)


def test_unknown_schema_dialect_does_not_warn() -> None:
    # filterwarnings=error would turn jsonschema's DeprecationWarning into a crash.
    spec = {"$schema": {"$schema": "https://example.invalid/schema", "type": "string"}}
    assert compile_matcher(spec).match("x") == []


JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=12,
)
EVERY_OPERATOR = compile_matcher({"$anyof": [
    {"a": {"$regex": "x", "$contains": "x", "$icontains": ["y"], "$loose": "z"}},
    {"$exact": {"b": {"$optional": {"$gt": 1, "$lt": 2, "$gte": 1, "$lte": 2}}}},
    {"$approx": 1.0, "$tol": 0.1}, {"$len": {"$in": [1, 2]}}, {"$json": {"$any": True}},
    {"$not": {"$type": "object"}}, {"$all": [{"$ne": 1}, {"$eq": [1]}]},
    {"$schema": {"type": "array"}}, {"$unordered": [1, "x"]}, {"$includes": [{"c": 1}]},
    [1, {"$absent": True}],
]})


class Hostile:
    def __repr__(self) -> str:
        raise RuntimeError("no repr")

    def __eq__(self, other: object) -> bool:
        raise RuntimeError("no eq")

    __hash__ = object.__hash__


@pytest.mark.parametrize(
    "actual", [Hostile(), [Hostile()], {"a": Hostile()}, 10**5000, MISSING],
    ids=["hostile", "hostile-in-list", "hostile-in-object", "unprintable-int", "missing"])
def test_matching_never_raises_on_odd_values(actual: Any) -> None:
    assert isinstance(EVERY_OPERATOR.match(actual), list)
    assert compile_matcher("x").match(actual)[0].message.startswith("expected 'x', got <")


@settings(max_examples=200, deadline=None)
@given(JSON)
def test_matching_never_raises(actual: Any) -> None:
    assert isinstance(EVERY_OPERATOR.match(actual), list)


# --- tool calls -------------------------------------------------------------------------------

LOOSE_THEN_STRICT = [{"name": "a"}, {"name": "a", "arguments": {"x": 1}}]


@pytest.mark.parametrize(
    "calls",
    [[call("a", {"x": 1}), call("a", {"x": 2})], [call("a", {"x": 2}), call("a", {"x": 1})]],
    ids=["strict-first", "strict-last"],
)
@pytest.mark.parametrize("spec", [LOOSE_THEN_STRICT, LOOSE_THEN_STRICT[::-1]],
                         ids=["loose-first", "strict-first"])
def test_plain_list_pairs_calls_in_any_order(spec: Any, calls: list[ToolCall]) -> None:
    assert compile_tool_calls(spec).match(calls) == []


def test_plain_list_names_the_expectation_without_partner_and_the_closest_call() -> None:
    spec = [{"name": "get_weather", "arguments": {"city": {"$regex": "(?i)^paris$"}}},
            {"name": "get_time"}]
    mismatch = only(compile_tool_calls(spec).match(
        [call("get_time"), call("get_weather", {"city": "Lyon"})]))
    assert mismatch.message.startswith("expected call 0 {'name': 'get_weather', ")
    assert "found no partner; closest is call 1 get_weather({\"city\": \"Lyon\"}): " \
           "arguments.city: 'Lyon' does not match regex '(?i)^paris$'" in mismatch.message
    assert mismatch.expected == spec[0]


def test_plain_list_needs_the_same_count() -> None:
    mismatches = compile_tool_calls([{"name": "a"}]).match([call("a"), call("b")])
    assert [m.message for m in mismatches] == ["expected 1 call, got 2: a({}), b({})",
                                               "unexpected call 1: b({})"]
    assert mismatches[1].path == (1,)


def test_plain_list_reports_missing_calls() -> None:
    mismatches = compile_tool_calls([{"name": "a"}, {"name": "b"}]).match([call("a")])
    assert [m.message for m in mismatches] == [
        "expected 2 calls, got 1: a({})",
        ("expected call 1 {'name': 'b'} found no partner; closest is call 0 a({}): "
         "name: expected 'b', got 'a'"),
    ]


def test_empty_list_means_no_calls() -> None:
    matcher = compile_tool_calls([])
    assert matcher.match([]) == []
    assert matcher.match([call("a")])[0].message == "expected no calls, got 1: a({})"


def test_ordered_checks_position() -> None:
    matcher = compile_tool_calls({"$ordered": [{"name": "a"}, {"name": "b"}]})
    assert matcher.match([call("a"), call("b")]) == []
    mismatches = matcher.match([call("b"), call("a")])
    assert [(m.path, m.message) for m in mismatches] == [
        ((0, "name"), "expected 'a', got 'b'"), ((1, "name"), "expected 'b', got 'a'")]
    assert "expected 2 calls, got 1" in only(matcher.match([call("a")])).message


def test_includes_allows_other_calls() -> None:
    matcher = compile_tool_calls({"$includes": [{"name": "a"}, {"name": "a"}]})
    assert matcher.match([call("b"), call("a"), call("a")]) == []
    mismatch = only(matcher.match([call("a"), call("b")]))
    assert "expected call 1 {'name': 'a'} found no partner: calls [0] match it" in mismatch.message


def test_includes_with_no_calls_says_so() -> None:
    mismatch = only(compile_tool_calls({"$includes": [{"name": "a"}]}).match([]))
    assert mismatch.message == "expected call 0 {'name': 'a'} found no partner: there are no calls"


@pytest.mark.parametrize(("spec", "count", "ok"), [
    ({"$len": {"$gte": 1}}, 1, True),
    ({"$len": {"$gte": 1}}, 0, False),
    ({"$len": 2}, 2, True),
    ({"$not": {"$includes": [{"name": "delete"}]}}, 0, True),
])
def test_other_operators_apply_to_the_list(spec: Any, count: int, ok: bool) -> None:
    calls = [call(f"tool{index}") for index in range(count)]
    assert (compile_tool_calls(spec).match(calls) == []) is ok


def test_general_operators_see_calls_as_objects() -> None:
    matcher = compile_tool_calls({"$not": {"$includes": [{"name": "delete"}]}})
    assert matcher.match([call("delete", {"id": 1})])[0].message.startswith(
        "[{'name': 'delete', 'arguments': {'id': 1}}] should not match")


def test_list_operators_combine_with_general_ones() -> None:
    matcher = compile_tool_calls({"$includes": [{"name": "a"}], "$len": {"$lte": 2}})
    assert matcher.match([call("a"), call("b")]) == []
    assert "length of" in only(matcher.match([call("a"), call("b"), call("c")])).message


@pytest.mark.parametrize("spec", [[{"arguments": {}}], {"$ordered": [{"arguments": {}}]}])
def test_invalid_json_arguments_fail_any_arguments_expectation(spec: Any) -> None:
    broken = call("a", raw='{"city": ')
    mismatch = only(compile_tool_calls(spec).match([broken]))
    assert "arguments are not valid JSON (Expecting value): '{\"city\": '" in mismatch.message


def test_invalid_json_arguments_pass_without_arguments_expectation() -> None:
    assert compile_tool_calls([{"name": "a"}]).match([call("a", raw="{")]) == []


def test_invalid_json_mismatch_points_at_the_arguments() -> None:
    spec = {"$ordered": [{"name": "a", "arguments": {"x": 1}}]}
    mismatch = only(compile_tool_calls(spec).match([call("a", raw="nope")]))
    assert mismatch.path == (0, "arguments")
    assert mismatch.actual == "nope"


def test_tool_calls_matching_never_raises_on_odd_values() -> None:
    matcher = compile_tool_calls([{"name": "a"}])
    assert "expected a list" in only(matcher.match(None)).message
    assert "expected a tool call, got 'a'" in only(matcher.match(["a"])).message


TOOL_CALL_ERRORS: list[tuple[Any, str, Path]] = [
    ([{"nme": "a"}], "unknown key 'nme' in an expected call; did you mean 'name'?", (0, "nme")),
    ([{"name": "a", "args": {}}], "unknown key 'args'", (0, "args")),
    (["a"], "an expected call is a mapping with 'name' and/or 'arguments'", (0,)),
    ({"$ordered": {"name": "a"}}, "'$ordered' takes a list of expected calls", ("$ordered",)),
    ({"$orderd": []}, "unknown operator '$orderd'; did you mean '$ordered'?", ("$orderd",)),
    ({"$includes": [{"arguments": {"x": {"$regex": "("}}}]}, "bad regex",
     ("$includes", 0, "arguments", "x", "$regex")),
    ({"name": "a"}, "tool_calls takes a list of expected calls", ()),
    ({"name": "a", "$len": 1}, "cannot mix operators", ()),
    ("a", "tool_calls takes a list", ()),
]


@pytest.mark.parametrize(
    ("spec", "message", "path"), TOOL_CALL_ERRORS, ids=[repr(e[0]) for e in TOOL_CALL_ERRORS])
def test_invalid_tool_call_specs(spec: Any, message: str, path: Path) -> None:
    with pytest.raises(MatcherError) as raised:
        compile_tool_calls(spec)
    assert message in raised.value.message
    assert raised.value.path == path


# -- $schema: references resolve inside the schema only ------------------------------------

STRING = {"type": "string"}
LOCAL_REFS: list[dict[str, Any]] = [
    {"definitions": {"name": STRING}, "properties": {"city": {"$ref": "#/definitions/name"}}},
    {"$defs": {"name": STRING}, "properties": {"city": {"$ref": "#/$defs/name"}}},
    {"$id": "https://example.invalid/root", "$defs": {"name": {"$id": "name", **STRING}},
     "properties": {"city": {"$ref": "name"}}},
    {"$schema": "http://json-schema.org/draft-07/schema#", "definitions": {"name": STRING},
     "properties": {"city": {"$ref": "#/definitions/name"}}},
]


@pytest.mark.parametrize("schema", LOCAL_REFS)
def test_schema_refs_inside_the_schema_resolve(schema: dict[str, Any]) -> None:
    matcher = compile_matcher({"$schema": schema})
    assert matcher.match({"city": "Paris"}) == []
    assert only(matcher.match({"city": 7})).message == "schema: 7 is not of type 'string'"


UNRESOLVABLE_REFS: list[tuple[dict[str, Any], str, Path]] = [
    ({"$ref": "https://example.invalid/s.json"},
     "$ref 'https://example.invalid/s.json' is not fetched: ", ("$schema", "$ref")),
    ({"properties": {"a": {"items": {"$ref": "http://127.0.0.1:9/x#/y"}}}},
     "$ref 'http://127.0.0.1:9/x#/y' is not fetched: ",
     ("$schema", "properties", "a", "items", "$ref")),
    ({"$id": "https://example.invalid/root", "properties": {"a": {"$ref": "other.json"}}},
     "$ref 'other.json' is not fetched: ", ("$schema", "properties", "a", "$ref")),
    ({"anyOf": [{"$ref": "#/$defs/missing"}]}, "$ref '#/$defs/missing' points at nothing",
     ("$schema", "anyOf", 0, "$ref")),
]


@pytest.mark.parametrize(("schema", "message", "path"), UNRESOLVABLE_REFS)
def test_schema_refs_that_would_need_a_fetch_are_compile_errors(
        schema: dict[str, Any], message: str, path: Path) -> None:
    with pytest.raises(MatcherError) as raised:
        compile_matcher({"$schema": schema})
    assert raised.value.message.startswith(message), raised.value.message
    assert raised.value.path == path


def test_schema_refs_to_the_meta_schemas_resolve_offline() -> None:
    matcher = compile_matcher({"$schema": {"$ref": "https://json-schema.org/draft/2020-12/schema"}})
    assert matcher.match({"type": "string"}) == []
    assert matcher.match({"type": 3})


# -- the time limit ------------------------------------------------------------------------

RUNAWAY = "a" * 40 + "b"


@pytest.mark.parametrize(("spec", "what"), [
    ({"$regex": "(a|aa)+$"}, "$regex '(a|aa)+$'"),
    ({"$not": {"$regex": "(a|aa)+$"}}, "$regex '(a|aa)+$'"),  # not a mismatch $not could flip
    ({"$anyof": [{"$regex": "(a|aa)+$"}, "x"]}, "$regex '(a|aa)+$'"),
    ({"$schema": {"pattern": "(a|aa)+$"}}, "$schema pattern '(a|aa)+$'"),
    ({"$schema": {"patternProperties": {"(a|aa)+$": {}}}}, "$schema pattern '(a|aa)+$'"),
])
def test_a_runaway_match_stops_at_the_time_limit(spec: Any, what: str) -> None:
    matcher = compile_matcher(spec)
    actual = {RUNAWAY: 1} if "patternProperties" in str(spec) else RUNAWAY
    started = time.monotonic()
    with pytest.raises(MatchTimeout) as raised, time_limit(0.2):
        matcher.match(actual)
    assert raised.value.what == what
    assert time.monotonic() - started < 2


def test_a_spent_time_limit_stops_schema_validation_and_pairing() -> None:
    for spec, what in [({"$schema": {"type": "array"}}, "$schema validation"),
                       ({"$unordered": [1, 2]}, "$unordered")]:
        with pytest.raises(MatchTimeout) as raised, time_limit(0):
            compile_matcher(spec).match([1, 2])
        assert raised.value.what == what


def test_nested_quantifiers_finish_at_once() -> None:
    """``re`` backtracks 2**40 times here; the regex package sees through it."""
    started = time.monotonic()
    with time_limit(5):
        mismatch = only(compile_matcher({"$regex": "(a+)+$"}).match(RUNAWAY))
    assert mismatch.message == f"{RUNAWAY!r} does not match regex '(a+)+$'"
    assert time.monotonic() - started < 1


def test_regex_syntax_is_re_s() -> None:
    """The regex package takes a repeated group name; re, whose syntax the SPEC names, not."""
    with pytest.raises(MatcherError, match="bad regex"):
        compile_matcher({"$regex": "(?P<x>a)(?P<x>b)"})


ALTERNATIVES = "(a|a)" * 30 + "c"
"""No repetition, yet 2**30 ways to try from each position: re would take minutes."""


def test_many_alternatives_stop_at_the_time_limit() -> None:
    started = time.monotonic()
    with pytest.raises(MatchTimeout) as raised, time_limit(0.2):
        compile_matcher({"$regex": ALTERNATIVES}).match(RUNAWAY)
    assert raised.value.what == f"$regex {ALTERNATIVES!r}"
    assert time.monotonic() - started < 2


def test_a_spent_time_limit_stops_a_plain_regex_too() -> None:
    with pytest.raises(MatchTimeout) as raised, time_limit(0):
        compile_matcher({"$regex": "^x"}).match("x")
    assert raised.value.what == "$regex '^x'"


@pytest.mark.parametrize(("pattern", "count"), [
    ("(?i)^paris$", 1),
    (r"^(Paris|Lyon)\b", 2),
    ("(a|b)(c|d|e)", 6),
    ("(?:a|b|c)(?:d|e)|f", 7),
    (r"(?<!x)y[0-9]\d(?=z)", 1),
    ("(?i:ab|c)d", 2),
    ("(?P<city>[A-Z]\\w)", 1),
    (r"[]a*]x[^]+]y[\]*]", 1),  # quantifier characters inside a class are members
    (r"\x41\u00e9\0", 1),
    ("a|", 2),
    ("", 1),
])
def test_a_pattern_without_repetition_has_its_ways_counted(pattern: str, count: int) -> None:
    re.compile(pattern)  # patterns reach the count only once re accepted them
    assert ways(pattern) == count


@pytest.mark.parametrize("pattern", [
    "a+", "a*", "a?", "x{2}", "(ab)+", "a{,3}",  # repetition
    r"(a)\1", "(?P<n>a)(?P=n)",  # back-references
    "(a)?(?(1)b|c)", "(a)(?(1)b|c)",  # conditionals
    "(?x)#[\n(a+)+b\n]",  # verbose: its comments could hide anything
    r"\N{DIGIT ONE}", "(?#a*)", "(?>a)",  # not read: left to the time limit
    ALTERNATIVES,  # too many ways
])
def test_a_pattern_that_could_run_away_has_no_ways_count(pattern: str) -> None:
    re.compile(pattern)
    assert ways(pattern) is None


@pytest.mark.parametrize(("pattern", "text", "found"), [
    ("(?i)^paris$", "PARIS", True),
    ("(?i)^paris$", "Paris 3e", False),
    (r"^(Paris|Lyon)\b", "Lyon 3e", True),
    (r"(?<!x)y[0-9]\d", "zy12", True),
])
def test_patterns_that_cannot_run_away_are_searched_with_re(pattern: str, text: str,
                                                           found: bool) -> None:
    assert quick_search(re.compile(pattern), text, "$regex") is found


@pytest.mark.parametrize(("pattern", "text"), [
    ("a+", "a"),
    (r"(a)\1", "aa"),
    (ALTERNATIVES, "a"),
    ("^paris$", "p" * QUICK_SEARCH_STEPS),  # too much text for the bound
])
def test_patterns_that_could_run_away_are_left_to_the_time_limit(pattern: str,
                                                                 text: str) -> None:
    assert quick_search(re.compile(pattern), text, "$regex") is None


_PIECES = ["a", "b", "B", ".", "^", "$", "[ab]", "[^a]", r"\d", r"\w", r"\b", "(a|b)",
           "(?:ab|a|)", "(?=a)", "(?<!b)", "(b|.)", "[]a]"]


@given(st.booleans(), st.lists(st.sampled_from(_PIECES), max_size=6),
       st.text(alphabet="aAbB1 ]", max_size=12))
@settings(max_examples=300, deadline=None)
def test_re_and_the_regex_package_agree_where_re_runs(fold: bool, pieces: list[str],
                                                     text: str) -> None:
    """A pattern searched with re finds what the regex package would have found."""
    import regex

    pattern = ("(?i)" if fold else "") + "".join(pieces)
    assert ways(pattern) is not None
    found = compile_matcher({"$regex": pattern}).match(text) == []
    assert found is (regex.search(pattern, text) is not None)
    assert found is (re.search(pattern, text) is not None)
