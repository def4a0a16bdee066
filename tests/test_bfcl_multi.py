"""BFCL's multi-turn categories imported and run: the real records of the bfcl-eval wheel,
a loopback server that plays their ground truth (or perturbations of it), and BFCL's own
checker run on the same calls to agree with, record by record."""

from __future__ import annotations

import contextlib
import json
import sys
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from support.bfcl_model import Calls, Player, read_jsonl, steps_of, truth_turns, truths
from support.bfcl_package import IndexUnreachable, data_dir, ensure_installed
from support.chat_server import ChatServer, completion, json_reply

from pytest_toolbench.commands.bfcl import main

CATEGORIES = ("multi_turn_base", "multi_turn_miss_func", "multi_turn_miss_param",
              "multi_turn_long_context")
PER_CATEGORY = 2
"""Records of each category in a sample: the unit tests run a few; the benchmark all."""
CASE_HEADER = "# a case written for the test\n"
GFS = {"GorillaFileSystem": {"root": {"home": {"type": "directory", "contents": {}}}}}


@pytest.fixture(scope="session")
def bfcl_data() -> Path:
    """BFCL's data folder, bfcl-eval installed with --no-deps for the tests (cached)."""
    try:
        ensure_installed()
    except IndexUnreachable as unreachable:
        pytest.skip(str(unreachable))
    # Imported here, outside any pytester run, so they stay imported between runs: a module
    # first imported inside one is dropped when it ends, and imported again later as a new
    # module with new classes, while the backend keeps the classes it met first (an
    # instance of the one then never equals an instance of the other).
    import bfcl_eval.eval_checker.multi_turn_eval.multi_turn_checker  # noqa: F401

    from pytest_toolbench.bfcl.backend import BfclMissing, backend, backend_class

    for name in backend().modules:
        with contextlib.suppress(BfclMissing):  # a class of other categories (web search)
            backend_class(name)
    return data_dir()


@pytest.fixture
def server(chat_server: ChatServer) -> ChatServer:
    return chat_server


# ---------------------------------------------------------------------------- records


def sample(data: Path, category: str, count: int = PER_CATEGORY) -> list[dict[str, Any]]:
    """``count`` records of the category, each adding a backend class the others lack;
    the categories start at different records, so no two share their questions."""
    records = read_jsonl(data / f"BFCL_v4_{category}.json")
    start = CATEGORIES.index(category) * 50
    chosen: list[dict[str, Any]] = []
    seen: set[str] = set()
    for record in records[start:] + records[:start]:
        if len(chosen) == count:
            break
        if set(record["involved_classes"]) - seen and "${" not in json.dumps(record["question"]):
            chosen.append(record)
            seen.update(record["involved_classes"])
    return chosen


def import_sample(data: Path, out: Path, records: list[dict[str, Any]]) -> None:
    """Write the records in BFCL's layout (questions, possible_answer) and import them."""
    by_category: dict[str, list[dict[str, Any]]] = {}
    for record in records:
        by_category.setdefault(record["id"].rsplit("_", 1)[0], []).append(record)
    for category, chosen in by_category.items():
        answers = truths(data, category)
        questions = out / "data" / f"BFCL_v4_{category}.json"
        possible = out / "data" / "possible_answer" / questions.name
        possible.parent.mkdir(parents=True, exist_ok=True)
        questions.write_text("".join(json.dumps(r) + "\n" for r in chosen), encoding="utf-8")
        possible.write_text("".join(json.dumps({"id": r["id"], "ground_truth": answers[r["id"]]})
                                    + "\n" for r in chosen), encoding="utf-8")
        assert main([str(questions), str(possible), str(out / "suite")]) == 0


# ---------------------------------------------------------------------------- model scripts

def bfcl_verdict(record: dict[str, Any], truth: list[list[str]], turns: list[Calls],
                 one_a_step: bool) -> tuple[int | None, str | None]:
    """BFCL's own checker on the same calls, decoded as its OpenAI handler decodes them:
    the turn it fails and the type of its error, or ``(None, None)`` when it passes.

    Its message does not always name the turn, so the turn is the shortest run of turns
    the checker fails (it checks turn by turn, stopping at the first that fails).
    """
    from bfcl_eval.eval_checker.multi_turn_eval.multi_turn_checker import multi_turn_checker

    decoded = [[[_as_string(call) for call in step] for step in steps_of(calls, one_a_step)]
               for calls in turns]
    entry = {key: record[key] for key in ("id", "initial_config", "involved_classes")}
    for end in range(1, len(turns) + 1):
        # Its instances live in a module global keyed by the model's name: fresh names.
        verdict = multi_turn_checker(decoded[:end], truth[:end], entry,
                                     record["id"].rsplit("_", 1)[0], f"agree_{uuid.uuid4().hex}")
        if not verdict["valid"]:
            return end - 1, str(verdict["error_type"])
    return None, None


def _as_string(call: dict[str, Any]) -> str:
    arguments = json.loads(json.dumps(call["arguments"]))  # what the model's JSON says
    return f"{call['name']}({','.join(f'{k}={v!r}' for k, v in arguments.items())})"


# ---------------------------------------------------------------------------- perturbations


def _first_turn(turns: list[Calls]) -> int:
    return next(index for index, calls in enumerate(turns) if calls)


def changed_argument(record: dict[str, Any], turns: list[Calls]) -> list[Calls] | None:
    """The first argument of the first call with a text or number argument, changed."""
    for index, calls in enumerate(turns):
        for position, call in enumerate(calls):
            for key, value in call["arguments"].items():
                if isinstance(value, (str, int, float)) and not isinstance(value, bool):
                    new = value + "_x" if isinstance(value, str) else value + 1
                    changed = {**call, "arguments": {**call["arguments"], key: new}}
                    return [*turns[:index], [*calls[:position], changed, *calls[position + 1:]],
                            *turns[index + 1:]]
    return None


def dropped_call(record: dict[str, Any], turns: list[Calls]) -> list[Calls] | None:
    """The last call of the first turn that makes calls, left out."""
    index = _first_turn(turns)
    return [*turns[:index], turns[index][:-1], *turns[index + 1:]]


def added_call(record: dict[str, Any], turns: list[Calls]) -> list[Calls] | None:
    """The first call of a later turn, made in the first turn too."""
    index = _first_turn(turns)
    later = next((calls[0] for calls in turns[index + 1:] if calls), None)
    if later is None:
        return None
    return [*turns[:index], [*turns[index], later], *turns[index + 1:]]


def early_calls(record: dict[str, Any], turns: list[Calls]) -> list[Calls] | None:
    """The calls of the turn that adds held-back functions, made a turn early instead."""
    held = [int(turn) for turn in record.get("missed_function", {})]
    if not held or not turns[held[0]]:
        return None
    index = held[0]
    return [*turns[:index - 1], turns[index - 1] + turns[index], [], *turns[index + 1:]]


PERTURBATIONS: dict[str, Callable[[dict[str, Any], list[Calls]], list[Calls] | None]] = {
    "changed_argument": changed_argument, "dropped_call": dropped_call,
    "added_call": added_call, "early_calls": early_calls}


# ---------------------------------------------------------------------------- runs


def run_suite(pytester: pytest.Pytester, server: ChatServer, *args: str
              ) -> tuple[pytest.RunResult, dict[str, dict[str, Any]]]:
    report = pytester.path / "report.json"
    result = pytester.runpytest("suite", "--toolbench-live", "--toolbench-base-url",
                                server.base_url, "--toolbench-report", str(report), *args)
    cases = json.loads(report.read_text(encoding="utf-8"))["cases"]
    return result, {case["case"]: case for case in cases}


def last_stage(case: dict[str, Any]) -> tuple[str, list[str]]:
    stage = case["runs"][0]["stages"][-1]
    return stage["name"], [failure["message"] for failure in stage["attempts"][-1]["failures"]]


@pytest.mark.parametrize("one_a_step", [True, False], ids=["one call a step", "all at once"])
def test_a_model_that_replays_the_ground_truth_passes_every_case(
        pytester: pytest.Pytester, server: ChatServer, bfcl_data: Path, one_a_step: bool
) -> None:
    records = [r for category in CATEGORIES for r in sample(bfcl_data, category)]
    import_sample(bfcl_data, pytester.path, records)
    player = Player(one_a_step)
    for record in records:
        category = record["id"].rsplit("_", 1)[0]
        player.add(record, truth_turns(record, truths(bfcl_data, category)[record["id"]]))
    server.set_handler(player)

    result, cases = run_suite(pytester, server)

    result.assert_outcomes(passed=len(records))
    assert sorted(cases) == sorted(record["id"] for record in records)
    assert not server.errors


def test_a_record_whose_text_holds_a_placeholder_sign_is_sent_as_bfcl_wrote_it(
        pytester: pytest.Pytester, server: ChatServer, bfcl_data: Path) -> None:
    """A ``${`` in BFCL's text is text: imported escaped, sent as written (the loopback model
    knows its record by the user texts, so a changed text finds no script and fails)."""
    records = [r for r in read_jsonl(bfcl_data / "BFCL_v4_multi_turn_base.json")
               if "${" in json.dumps(r["question"])]
    assert records  # multi_turn_base_147 in bfcl-eval 2026.3.23
    import_sample(bfcl_data, pytester.path, records)
    player = Player(one_a_step=False)
    for record in records:
        category = record["id"].rsplit("_", 1)[0]
        player.add(record, truth_turns(record, truths(bfcl_data, category)[record["id"]]))
    server.set_handler(player)

    result, cases = run_suite(pytester, server)

    result.assert_outcomes(passed=len(records))
    assert sorted(cases) == sorted(record["id"] for record in records)
    sent = [message["content"] for request in server.requests
            for message in request.json()["messages"] if message["role"] == "user"]
    assert any("${" in text for text in sent)
    assert not server.errors


LONG_TURN = "multi_turn_long_context_38"
"""A record whose first turn makes 34 calls: more than one request a call would allow."""


def test_a_turn_of_34_calls_passes_in_at_most_20_steps(
        pytester: pytest.Pytester, server: ChatServer, bfcl_data: Path) -> None:
    records = read_jsonl(bfcl_data / "BFCL_v4_multi_turn_long_context.json")
    record = next(r for r in records if r["id"] == LONG_TURN)
    import_sample(bfcl_data, pytester.path, [record])
    player = Player(one_a_step=True)
    turns = truth_turns(record, truths(bfcl_data, "multi_turn_long_context")[LONG_TURN])
    assert len(turns[0]) == 34
    player.add(record, turns)
    server.set_handler(player)

    result, cases = run_suite(pytester, server)

    result.assert_outcomes(passed=1)
    first = cases[LONG_TURN]["runs"][0]["stages"][0]["attempts"][0]
    assert len(first["turns"]) == 21  # 20 tool-calling steps, then the answer


@pytest.mark.parametrize("kind", sorted(PERTURBATIONS))
def test_a_perturbed_model_fails_where_bfcl_fails_it(
        pytester: pytest.Pytester, server: ChatServer, bfcl_data: Path, kind: str) -> None:
    perturb = PERTURBATIONS[kind]
    categories = ("multi_turn_miss_func",) if kind == "early_calls" else CATEGORIES
    player = Player(one_a_step=False)
    expected: dict[str, tuple[int | None, str | None]] = {}
    chosen = []
    for category in categories:
        answers = truths(bfcl_data, category)
        for record in sample(bfcl_data, category, 4 if kind == "early_calls" else 2):
            turns = perturb(record, truth_turns(record, answers[record["id"]]))
            if turns is None:
                continue
            expected[record["id"]] = bfcl_verdict(record, answers[record["id"]], turns, False)
            player.add(record, turns)
            chosen.append(record)
    assert any(turn is not None for turn, _ in expected.values()), "nothing BFCL fails"
    import_sample(bfcl_data, pytester.path, chosen)
    server.set_handler(player)

    result, cases = run_suite(pytester, server)

    for record_id, (turn, error_type) in expected.items():
        case = cases[record_id]
        assert (case["outcome"] == "passed") == (turn is None), (record_id, turn, error_type)
        if error_type is not None:
            stage, messages = last_stage(case)
            assert stage == f"turn_{turn}", (record_id, error_type)
            assert _said(error_type) in messages[0], (record_id, messages)
    failed = [record_id for record_id, (turn, _) in expected.items() if turn is not None]
    turn, error_type = expected[failed[0]]
    assert error_type is not None
    where = f"stages[[]{turn}].expect.bfcl.ground_truth"
    result.stdout.fnmatch_lines([f"suite/*.case.yaml:*: {failed[0]}: {where}: *{_said(error_type)}*"])


def _said(error_type: str) -> str:
    """What the case's failure says for each kind of BFCL failure."""
    return {"multi_turn:empty_turn_model_response": "the model made no tool call in this turn",
            "multi_turn:instance_state_mismatch": "state differs from the ground truth's",
            "multi_turn:execution_response_mismatch": "results are not among the model's",
            }[error_type]


# ---------------------------------------------------------------------------- written cases

FILES_CASE = """\
name: files
tools:
  - bfcl:
      involved_classes: [GorillaFileSystem, MathAPI]
      initial_config: {GorillaFileSystem: {root: {home: {type: directory, contents: {}}}}}
      held_back: {more: [mean]}
stages:
  - name: make
    user: Make a folder called notes.
    run_tools: true
    max_turns: 21
    expect:
      bfcl: {ground_truth: ["mkdir(dir_name='notes')"]}
  - name: more
    user: I have updated some more functions you can choose from. What about now?
    run_tools: true
    max_turns: 21
    expect:
      bfcl: {ground_truth: ["mean([1, 2, 3])"]}
"""


def scripted(turns: dict[str, list[Calls]]) -> Callable[[Any], Any]:
    """A model that plays, for the stage whose user text starts with a key, these steps."""
    def answer(request: Any) -> Any:
        messages = request.json()["messages"]
        users = [i for i, message in enumerate(messages) if message["role"] == "user"]
        steps = next(steps for start, steps in turns.items()
                     if messages[users[-1]]["content"].startswith(start))
        done = sum(1 for message in messages[users[-1]:] if message["role"] == "assistant")
        if done >= len(steps):
            return json_reply(completion("Done."))
        return json_reply(completion(tool_calls=[(call["name"], call["arguments"])
                                                 for call in steps[done]]))
    return answer


def call(name: str, **arguments: Any) -> dict[str, Any]:
    return {"name": name, "arguments": arguments}


def test_held_back_functions_are_offered_from_their_stage_and_any_method_runs(
        pytester: pytest.Pytester, server: ChatServer, bfcl_data: Path) -> None:
    pytester.makefile(".case.yaml", files=FILES_CASE)
    server.set_handler(scripted({
        "Make": [[call("nope"), call("mean", numbers=[5])], [call("mkdir", dir_name="notes")]],
        "I have": [[call("mean", numbers=[1, 2, 3])]]}))

    result = pytester.runpytest("--toolbench-live", "--toolbench-base-url", server.base_url)

    result.assert_outcomes(passed=1)
    offered = [[tool["function"]["name"] for tool in request.json()["tools"]]
               for request in server.requests]
    from pytest_toolbench.bfcl.backend import function_docs

    files, maths = ([doc["name"] for doc in function_docs(name)]
                    for name in ("GorillaFileSystem", "MathAPI"))
    # Every doc of each class, in order, the held-back one left out until its stage...
    assert offered[0] == files + [name for name in maths if name != "mean"]
    assert offered[-1] == [*offered[0], "mean"]  # ...which adds it at the end
    answers = [message["content"] for message in server.requests[1].json()["messages"]
               if message["role"] == "tool"]
    # An unknown name fails as BFCL's eval does; a held-back method runs before its turn.
    assert answers == ["Error during execution: name 'nope' is not defined",
                       '{"result": 5.0}']


@pytest.mark.parametrize(("steps", "passes"), [(20, True), (21, False)])
def test_a_turn_allows_20_tool_calling_steps(pytester: pytest.Pytester, server: ChatServer,
                                             bfcl_data: Path, steps: int, passes: bool) -> None:
    pytester.makefile(".case.yaml", files=FILES_CASE)
    looking = [[call("pwd")] for _ in range(steps - 1)]
    server.set_handler(scripted({"Make": [[call("mkdir", dir_name="notes")], *looking],
                                 "I have": [[call("mean", numbers=[1, 2, 3])]]}))

    result = pytester.runpytest("--toolbench-live", "--toolbench-base-url", server.base_url)

    if passes:
        result.assert_outcomes(passed=1)
    else:
        result.assert_outcomes(failed=1)
        result.stdout.fnmatch_lines([("files.case.yaml:11: files: stages[[]0].max_turns:"
                                     " max_turns (21) reached and the model still calls tools:"
                                     " pwd")])


def test_the_first_check_that_fails_is_reported_with_its_values(
        pytester: pytest.Pytester, server: ChatServer, bfcl_data: Path) -> None:
    pytester.makefile(".case.yaml", files=FILES_CASE)
    server.set_handler(scripted({"Make": [[call("mkdir", dir_name="nodes")]]}))

    result = pytester.runpytest("--toolbench-live", "--toolbench-base-url", server.base_url)

    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines([
        ("files.case.yaml:13: files: stages[[]0].expect.bfcl.ground_truth: GorillaFileSystem's"
        " state differs from the ground truth's after this turn in root"), "*",
        "*nodes*", "*notes*"])


CAPTURED_CASE = """\
name: copies
tools:
  - bfcl:
      involved_classes: [GorillaFileSystem]
      initial_config: {GorillaFileSystem: {root: {home: {type: directory, contents: {}}}}}
stages:
  - name: make
    user: Make a folder called notes.
    run_tools: true
    capture: {folder: tool_calls.0.arguments.dir_name}
    expect:
      bfcl: {ground_truth: ["mkdir(dir_name='notes')"]}
  - name: copy
    user: Another one, named after it with _copy.
    run_tools: true
    expect:
      bfcl: {ground_truth: ["mkdir(dir_name='${folder}_copy')"]}
"""


@pytest.mark.parametrize(("made", "passes"), [("notes_copy", True), ("notes_other", False)])
def test_captured_values_fill_the_ground_truth(pytester: pytest.Pytester, server: ChatServer,
                                               bfcl_data: Path, made: str,
                                               passes: bool) -> None:
    pytester.makefile(".case.yaml", files=CAPTURED_CASE)
    server.set_handler(scripted({"Make": [[call("mkdir", dir_name="notes")]],
                                 "Another": [[call("mkdir", dir_name=made)]]}))

    result = pytester.runpytest("--toolbench-live", "--toolbench-base-url", server.base_url)

    if passes:
        result.assert_outcomes(passed=1)
    else:
        result.assert_outcomes(failed=1)
        result.stdout.fnmatch_lines([("files.case.yaml:17: copies: stages[[]1].expect.bfcl"
                                      ".ground_truth: GorillaFileSystem's state differs*")])


BROKEN = {
    "unknown class": ("      involved_classes: [GorillaFileSystem, NoSuchAPI]\n",
                      ("*files.case.yaml:4: tools[[]0[]].bfcl.involved_classes[[]1]:"
                      " bfcl-eval has no backend class 'NoSuchAPI'*")),
    "held-back function": ("      held_back: {more: [median_of_all]}\n",
                           ("*files.case.yaml:6: tools[[]0[]].bfcl.held_back.more[[]0]: held-back"
                           " function 'median_of_all' is not one of*")),
    "held-back stage": ("      held_back: {later: [mean]}\n",
                        ("*files.case.yaml:6: tools[[]0[]].bfcl.held_back.later: held_back names"
                        " stage 'later', which the case lacks")),
    "ground truth": ("      bfcl: {ground_truth: [\"mkdir(dir_name='notes'\"]}\n",
                     ("*files.case.yaml:13: stages[[]0].expect.bfcl.ground_truth[[]0]: not a Python"
                     " call: *")),
}


@pytest.mark.parametrize("kind", list(BROKEN))
def test_a_broken_bfcl_case_is_a_collection_error_at_its_line(
        pytester: pytest.Pytester, bfcl_data: Path, kind: str) -> None:
    line, expected = BROKEN[kind]
    key = line.split(":")[0]
    broken = "".join(line if current.split(":")[0] == key else current
                     for current in FILES_CASE.splitlines(keepends=True))
    assert broken != FILES_CASE
    pytester.makefile(".case.yaml", files=broken)

    result = pytester.runpytest("--collect-only")

    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines([expected])


def test_without_bfcl_eval_the_cases_fail_to_collect_naming_the_install(
        pytester: pytest.Pytester, bfcl_data: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from pytest_toolbench.bfcl import backend

    for name in [name for name in sys.modules if name.split(".")[0] == "bfcl_eval"] + [
            "bfcl_eval"]:
        monkeypatch.setitem(sys.modules, name, None)  # importing it raises ImportError
    caches = (backend.backend, backend.backend_class, backend.function_docs)
    for cache in caches:
        cache.cache_clear()
    pytester.makefile(".case.yaml", files=FILES_CASE)
    try:
        result = pytester.runpytest("--collect-only")
    finally:
        for cache in caches:
            cache.cache_clear()

    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines([("*files.case.yaml:4: tools[[]0[]].bfcl.involved_classes[[]0]:"
                                 " BFCL's backend classes come from the bfcl-eval package,"
                                 " which cannot be imported *; install it with:"
                                 " pip install --no-deps bfcl-eval mpmath")])


def test_the_ground_truth_runs_as_bfcl_runs_it(bfcl_data: Path) -> None:
    """Results and states of the ground-truth chain, turn by turn, equal those of BFCL's own
    executor (which ``eval``s the call strings) on a sample of every category."""
    from bfcl_eval.eval_checker.multi_turn_eval.multi_turn_utils import (
        execute_multi_turn_func_call,
    )

    from pytest_toolbench.bfcl.backend import Chain, parse_call

    for category in CATEGORIES:
        answers = truths(bfcl_data, category)
        for record in sample(bfcl_data, category, 6):
            long_context = "long_context" in category
            chain = Chain(record["involved_classes"], record["initial_config"], long_context)
            name = f"agree_{uuid.uuid4().hex}"
            for turn in answers[record["id"]]:
                ours = [chain.call(p.name, p.args, p.kwargs) for p in map(parse_call, turn)]
                theirs, instances = execute_multi_turn_func_call(
                    turn, record["initial_config"], record["involved_classes"], name,
                    record["id"], long_context=long_context, is_evaL_run=True)
                assert ours == theirs, record["id"]
                for class_name, instance in instances.items():
                    public = {k: v for k, v in vars(instance).items() if not k.startswith("_")}
                    mine = {k: getattr(chain.instances[class_name], k) for k in public}
                    assert mine == public, (record["id"], class_name)


def test_a_bfcl_case_refuses_what_would_run_a_stage_again(pytester: pytest.Pytester,
                                                          bfcl_data: Path) -> None:
    """Its instances keep what a stage's first run did: a route back, a retry and
    ``stream: both`` are each a collection error at its line."""
    pytester.makefile(".case.yaml", files=FILES_CASE.replace(
        "  - name: more\n", "    next: {pass: more, fail: make}\n  - name: more\n"
    ) + "---\n" + FILES_CASE.replace("name: files", "name: retried").replace(
        "    max_turns: 21\n    expect:\n      bfcl: {ground_truth: [\"mean",
        "    max_turns: 21\n    retry: {attempts: 2}\n    expect:\n      bfcl: {ground_truth: [\"mean"))
    result = pytester.runpytest("-p", "no:cacheprovider", "--collect-only")
    result.stdout.fnmatch_lines([
        ("*files.case.yaml:14: stages[[]0[]].next.fail: next: make may run stage 'make' again,"
         " but BFCL's instances keep what its first run did*"),
        "*files.case.yaml:39: stages[[]1[]].retry: retry runs a stage twice*"])
    assert "next.pass" not in result.stdout.str()  # on to a later stage: runs it once
