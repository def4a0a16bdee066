"""``toolbench import-bfcl``: BFCL records -> case files whose matchers apply BFCL's checker.

The real leaderboard data in ``../shared/bfcl`` is the fixture: every record is imported,
every file is loaded as collection loads it, and every ground-truth answer (and a variant
using other acceptable values) is played against its case's compiled ``tool_calls``
matcher. Mutated answers must fail. One pytester run serves the answers from the loopback
chat server and checks what a user sees.
"""

from __future__ import annotations

import json
import random
import shutil
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from support.chat_server import ChatServer, RecordedRequest, Reply, completion, json_reply

from pytest_toolbench.casefile.load import LoadedCase, load_case_file
from pytest_toolbench.commands.bfcl import ImportSummary, import_bfcl, json_schema, main
from pytest_toolbench.matchers import Matcher
from pytest_toolbench.records import ToolCall

BFCL_DIR = Path(__file__).resolve().parents[1].parent / "shared" / "bfcl"
CATEGORIES = ("simple_python", "multiple", "parallel", "parallel_multiple", "irrelevance")
NO_ANSWERS = ("irrelevance",)
SEED = 20240605
SAMPLE = 40  # records per category for each mutation

pytestmark = pytest.mark.skipif(
    not (BFCL_DIR / "BFCL_v4_simple_python.json").is_file(),
    reason=f"the BFCL data is not at {BFCL_DIR} (see shared/bfcl/README.md)",
)

Args = dict[str, Any]
Calls = list[tuple[str, Args]]


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()
            if line.strip()]


def question_file(category: str) -> Path:
    return BFCL_DIR / f"BFCL_v4_{category}.json"


def answer_file(category: str) -> Path | None:
    return None if category in NO_ANSWERS else BFCL_DIR / "possible_answer" / question_file(
        category).name


@dataclass
class Record:
    """One BFCL question, its ground truth (``None``: no call is right) and its case."""

    category: str
    question: dict[str, Any]
    truth: list[dict[str, Any]] | None
    case: LoadedCase

    @property
    def id(self) -> str:
        return str(self.question["id"])

    @property
    def expected(self) -> Matcher:
        matcher: Matcher = self.case.case.stages[0].expect.tool_calls
        return matcher

    def function(self, name: str) -> dict[str, Any]:
        return next(f for f in self.question["function"] if f["name"] == name)

    def check(self, calls: Calls) -> list[str]:
        """The case's mismatches for these calls, as messages."""
        return [m.message for m in self.expected.match([tool_call(*call) for call in calls])]


def tool_call(name: str, arguments: Args) -> ToolCall:
    raw = json.dumps(arguments)
    return ToolCall(name=name, arguments_raw=raw, arguments=json.loads(raw))


@pytest.fixture(scope="module")
def imported(tmp_path_factory: pytest.TempPathFactory) -> dict[str, ImportSummary]:
    out_dir = tmp_path_factory.mktemp("bfcl")
    return {category: import_bfcl(question_file(category), answer_file(category), out_dir)
            for category in CATEGORIES}


@pytest.fixture(scope="module")
def records(imported: dict[str, ImportSummary]) -> list[Record]:
    cases = {loaded.case.name: loaded for summary in imported.values()
             for file in summary.files for loaded in load_case_file(file)}
    found = []
    for category in CATEGORIES:
        path = answer_file(category)
        truths = {a["id"]: a["ground_truth"] for a in read_jsonl(path)} if path else {}
        for question in read_jsonl(question_file(category)):
            truth = truths[question["id"]] if path else None
            found.append(Record(category, question, truth, cases[question["id"]]))
    return found


def by_category(records: list[Record], category: str) -> list[Record]:
    return [record for record in records if record.category == category]


def sample(records: list[Record], accept: Callable[[Record], bool] = lambda r: True
           ) -> Iterator[Record]:
    """Up to SAMPLE answered records per category, the same ones on every run."""
    rng = random.Random(SEED)
    for category in CATEGORIES:
        if category in NO_ANSWERS:
            continue
        chosen = [r for r in by_category(records, category) if accept(r)]
        yield from rng.sample(chosen, min(SAMPLE, len(chosen)))


# ---------------------------------------------------------------------------- answers as calls

OMIT = object()


def sent_name(name: str) -> str:
    return name.replace(".", "_")


def answer_calls(record: Record, choose: Callable[[list[Any]], Any],
                 loosen: bool = False) -> Calls:
    """The ground truth as a model's calls, picking one acceptable value per parameter.

    BFCL's checker rules decide what may be picked: a parameter outside the function's
    schema must be left out, a required one must be given whatever its answer says.
    """
    assert record.truth is not None
    calls = []
    for call in record.truth:
        ((name, params),) = call.items()
        parameters = record.function(name)["parameters"]
        arguments = {}
        for key, values in params.items():
            schema = parameters["properties"].get(key)
            if schema is None:
                continue
            given = [v for v in values if v != ""] if key in parameters["required"] else values
            value = concrete(choose(given), choose)
            if value is not OMIT:
                arguments[key] = loosened(value, schema) if loosen else value
        calls.append((sent_name(name), arguments))
    return calls


def concrete(value: Any, choose: Callable[[list[Any]], Any]) -> Any:
    """A dict answer holds acceptable values per key: pick one for each, recursively."""
    if isinstance(value, str) and value == "":
        return OMIT
    if isinstance(value, list):
        return [concrete(item, choose) for item in value]
    if isinstance(value, dict):
        picked = {key: concrete(choose(values), choose) for key, values in value.items()}
        return {key: item for key, item in picked.items() if item is not OMIT}
    return value


def first(values: list[Any]) -> Any:
    return values[0]


def last(values: list[Any]) -> Any:
    return values[-1]


def loosened(value: Any, schema: dict[str, Any]) -> Any:
    """A value BFCL accepts as the same: other case, ``_`` for spaces; an int for a float."""
    kind = schema.get("type")
    if isinstance(value, str) and kind in ("string", "any") and value.isascii():
        return value.swapcase().replace(" ", "_")
    if isinstance(value, float) and kind == "float" and value.is_integer():
        return int(value)
    if isinstance(value, list) and kind in ("array", "tuple"):
        return [loosened(item, schema.get("items", {})) for item in value]
    return value


# ---------------------------------------------------------------------------- import and load


def test_every_record_converts_and_every_file_loads(
        imported: dict[str, ImportSummary], records: list[Record]) -> None:
    for category, summary in imported.items():
        assert summary.skipped == [], category
        assert summary.categories == {category: len(read_jsonl(question_file(category)))}
        assert summary.files and all(f.name.endswith(".case.yaml") for f in summary.files)
    assert len(records) == sum(summary.cases for summary in imported.values()) == 1240
    for record in records:  # long and multi-line questions survive YAML's line folding
        assert record.case.case.stages[0].messages == record.question["question"][0], record.id


def test_cases_carry_tools_messages_marks_and_no_model(records: list[Record]) -> None:
    record = next(r for r in records if r.id == "simple_python_1")
    case = record.case.case
    assert case.model is None
    assert case.description == "BFCL simple_python_1 (category simple_python)"
    assert case.marks == ["bfcl", "bfcl_simple_python"]
    assert [tool.name for tool in case.tools] == ["math_factorial"]
    assert not case.tools[0].has_implementation
    (stage,) = case.stages
    assert stage.messages == record.question["question"][0]
    assert stage.tool_choice == "auto" and stage.run_tools is False
    assert case.tools[0].parameters["type"] == "object"


def test_schemas_are_translated_to_json_schema() -> None:
    schema = {"type": "dict", "properties": {
        "point": {"type": "tuple", "items": {"type": "float"}},
        "data": {"type": "any", "description": "anything"},
        "rows": {"type": "array", "items": {"type": "dict", "properties": {
            "n": {"type": "integer"}}}},
    }, "required": ["point"]}
    assert json_schema(schema, "f") == {"type": "object", "properties": {
        "point": {"type": "array", "items": {"type": "number"}},
        "data": {"description": "anything"},
        "rows": {"type": "array", "items": {"type": "object", "properties": {
            "n": {"type": "integer"}}}},
    }, "required": ["point"]}


# ---------------------------------------------------------------------------- ground truth passes


VARIANTS: dict[str, Callable[[Record], Calls]] = {
    "first": lambda record: answer_calls(record, first),
    "last": lambda record: answer_calls(record, last),
    "loosened": lambda record: answer_calls(record, last, loosen=True),
    "reversed": lambda record: answer_calls(record, first)[::-1],  # parallel calls, any order
}


def test_every_ground_truth_answer_passes(records: list[Record]) -> None:
    failures = {}
    for record in records:
        if record.truth is None:
            continue
        for variant, build in VARIANTS.items():
            problems = record.check(build(record))
            if problems:
                failures[f"{record.id} ({variant})"] = problems
    assert failures == {}


def test_variants_exercise_the_rules(records: list[Record]) -> None:
    """The variants above differ from the first answer often enough to test something."""
    answered = [r for r in records if r.truth is not None]
    differ = sum(answer_calls(r, first) != answer_calls(r, last) for r in answered)
    loosen = sum(answer_calls(r, last) != answer_calls(r, last, loosen=True) for r in answered)
    assert differ > 100 and loosen > 500


# ---------------------------------------------------------------------------- mutations fail


def scalar_params(calls: Calls) -> Iterator[tuple[int, str, Any]]:
    for index, (_, arguments) in enumerate(calls):
        for key, value in arguments.items():
            if isinstance(value, (str, int, float)):
                yield index, key, value


def changed(value: Any) -> Any:
    if isinstance(value, bool):
        return not value
    if isinstance(value, (int, float)):
        return value + 7919
    return f"zz{value}zz"


def acceptable(record: Record, index: int, key: str) -> list[Any]:
    ((_, params),) = record.truth[index].items()  # type: ignore[index]
    return list(params[key])


def replaced(calls: Calls, index: int, key: str, value: Any) -> Calls:
    name, arguments = calls[index]
    return [*calls[:index], (name, {**arguments, key: value}), *calls[index + 1:]]


def test_a_changed_value_fails(records: list[Record]) -> None:
    checked = 0
    for record in sample(records):
        calls = answer_calls(record, first)
        for index, key, value in scalar_params(calls):
            if changed(value) in acceptable(record, index, key):
                continue
            assert record.check(replaced(calls, index, key, changed(value))), (record.id, key)
            checked += 1
            break
    assert checked >= 3 * SAMPLE


def test_a_wrong_type_fails(records: list[Record]) -> None:
    """An integer sent as a float, or any number as a boolean, is a type error in BFCL."""
    checked = 0
    for record in sample(records):
        calls = answer_calls(record, first)
        for index, key, value in scalar_params(calls):
            if isinstance(value, int) and not isinstance(value, bool):
                wrong_types = [True] + ([float(value)] if _is_integer_param(record, index, key)
                                        else [])
                for wrong in wrong_types:
                    assert record.check(replaced(calls, index, key, wrong)), (record.id, key, wrong)
                    checked += 1
    assert checked >= 100


def _is_integer_param(record: Record, index: int, key: str) -> bool:
    ((name, _),) = record.truth[index].items()  # type: ignore[index]
    return bool(record.function(name)["parameters"]["properties"][key]["type"] == "integer")


def test_a_missing_required_parameter_fails(records: list[Record]) -> None:
    checked = 0
    for record in sample(records):
        calls = answer_calls(record, first)
        for index, (name, arguments) in enumerate(calls):
            required = record.function(_bfcl_name(record, index))["parameters"]["required"]
            if required:
                dropped = {k: v for k, v in arguments.items() if k != required[0]}
                assert record.check([*calls[:index], (name, dropped), *calls[index + 1:]])
                checked += 1
                break
    assert checked >= 3 * SAMPLE


def _bfcl_name(record: Record, index: int) -> str:
    assert record.truth is not None
    return next(iter(record.truth[index]))


def test_an_extra_parameter_fails(records: list[Record]) -> None:
    for record in sample(records):
        name, arguments = answer_calls(record, first)[0]
        assert record.check([(name, {**arguments, "bfcl_extra": 1})]), record.id


def test_a_parameter_the_answer_only_allows_to_omit_fails(records: list[Record]) -> None:
    """BFCL rejects a schema parameter given when its only acceptable value is ``""``."""
    checked = 0
    for record in records:
        for index, call in enumerate(record.truth or ()):
            ((bfcl_name, params),) = call.items()
            for key, values in params.items():
                if values == [""]:
                    calls = answer_calls(record, first)
                    schema = record.function(bfcl_name)["parameters"]["properties"][key]
                    assert record.check(replaced(calls, index, key, example(schema))), record.id
                    checked += 1
    assert checked >= 50


def example(schema: dict[str, Any]) -> Any:
    """A value of the schema's type."""
    return {"string": "x", "integer": 1, "float": 1.5, "boolean": True, "array": [],
            "tuple": [], "dict": {}, "any": "x"}[schema["type"]]


def test_a_wrong_function_name_fails(records: list[Record]) -> None:
    for record in sample(records):
        calls = answer_calls(record, first)
        name, arguments = calls[0]
        others = [sent_name(f["name"]) for f in record.question["function"]
                  if sent_name(f["name"]) != name]
        wrong = others[0] if others else f"{name}_v2"
        assert record.check([(wrong, arguments), *calls[1:]]), record.id
        if "." in _bfcl_name(record, 0):  # the name as BFCL spells it is not the name sent
            assert record.check([(_bfcl_name(record, 0), arguments), *calls[1:]]), record.id


def test_a_missing_or_extra_parallel_call_fails(records: list[Record]) -> None:
    for record in sample(records, lambda r: len(r.truth or ()) > 1):
        calls = answer_calls(record, first)
        assert record.check(calls[:-1]), record.id
        assert record.check([*calls, calls[0]]), record.id


# ---------------------------------------------------------------------------- irrelevance


def test_irrelevance_passes_without_a_call_and_fails_with_any(records: list[Record]) -> None:
    for record in by_category(records, "irrelevance"):
        assert record.check([]) == [], record.id
        tool = record.case.case.tools[0]
        assert record.check([(tool.name, {})]), record.id


# ---------------------------------------------------------------------------- details


def write_jsonl(path: Path, rows: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    return path


def one_record(tmp_path: Path, question: dict[str, Any], truth: list[Any] | None
               ) -> tuple[ImportSummary, list[LoadedCase]]:
    questions = write_jsonl(tmp_path / "BFCL_v4_demo.json", [question])
    answers = None
    if truth is not None:
        answers = write_jsonl(tmp_path / "answers.json", [{"id": question["id"],
                                                           "ground_truth": truth}])
    summary = import_bfcl(questions, answers, tmp_path / "out")
    return summary, [c for f in summary.files for c in load_case_file(f)]


FUNCTION = {"name": "geo.distance", "description": "Distance between two points.",
            "parameters": {"type": "dict", "properties": {
                "points": {"type": "array", "items": {"type": "tuple", "items": {"type": "float"}}},
                "unit": {"type": "string"}, "exact": {"type": "boolean"},
                "limit": {"type": "integer"}, "data": {"type": "any"}},
                "required": ["points"]}}


def test_a_system_turn_is_kept_and_multi_line_text_reads_as_a_block(tmp_path: Path) -> None:
    question = {"id": "demo_0", "function": [FUNCTION], "question": [[
        {"role": "system", "content": "You measure maps.\nAnswer in km."},
        {"role": "user", "content": "How far is it from (1, 2) to (3, 4)?"}]]}
    summary, (loaded,) = one_record(tmp_path, question, [{"geo.distance": {
        "points": [[[1.0, 2.0], [3.0, 4.0]]], "unit": ["km", ""]}}])
    assert [m["role"] for m in loaded.case.stages[0].messages] == ["system", "user"]
    text = summary.files[0].read_text()
    assert "content: |-\n      You measure maps.\n      Answer in km." in text


def test_matchers_follow_the_checker_types(tmp_path: Path) -> None:
    _, (loaded,) = one_record(tmp_path, {"id": "demo_1", "function": [FUNCTION], "question": [[
        {"role": "user", "content": "?"}]]}, [{"geo.distance": {
            "points": [[[1.0, 2.0]]], "unit": ["km", "kilometres", ""], "exact": [True],
            "limit": [3, ""], "data": ["table one"]}}])
    matcher: Matcher = loaded.case.stages[0].expect.tool_calls

    def check(**changes: Any) -> list[str]:
        arguments = {"points": [[1, 2]], "exact": True, "data": "Table-One", **changes}
        arguments = {key: value for key, value in arguments.items() if value is not OMIT}
        return [m.message for m in matcher.match([tool_call("geo_distance", arguments)])]

    assert check() == []
    assert check(unit="KiloMetres", limit=3) == []
    assert check(unit="miles") and check(limit=3.0) and check(limit=True)
    assert check(exact=1) and check(points=[[1, 2, 3]]) and check(points=[[2, 1]])
    assert check(points=[[True, 2]]) and check(data=1) and check(data=OMIT)
    assert check(unit="") and check(extra=1)


def test_records_that_cannot_be_mapped_are_skipped_with_a_reason(tmp_path: Path) -> None:
    bad_name = {"id": "demo_2", "question": [[{"role": "user", "content": "?"}]],
                "function": [{"name": "a b", "parameters": {"type": "dict", "properties": {}}}]}
    java = {"id": "demo_3", "question": [[{"role": "user", "content": "?"}]],
            "function": [{"name": "f", "parameters": {"type": "dict", "properties": {
                "m": {"type": "HashMap"}}}}]}
    turns = {"id": "demo_4", "question": [[{"role": "user", "content": "?"}]] * 2,
             "function": []}
    fine = {"id": "demo_5", "question": [[{"role": "user", "content": "?"}]], "function": []}
    questions = write_jsonl(tmp_path / "q.json", [bad_name, java, turns, fine])
    summary = import_bfcl(questions, None, tmp_path / "out")
    reasons = {record.id: record.reason for record in summary.skipped}
    assert "cannot be sent as an OpenAI function name" in reasons["demo_2"]
    assert "'HashMap', which has no JSON Schema equivalent" in reasons["demo_3"]
    assert "multi-turn" in reasons["demo_4"]
    assert summary.cases == 1 and len(summary.files) == 1


def test_an_answer_outside_the_schema_must_be_left_out(tmp_path: Path) -> None:
    question = {"id": "demo_6", "function": [FUNCTION], "question": [[
        {"role": "user", "content": "?"}]]}
    _, (loaded,) = one_record(tmp_path, question, [{"geo.distance": {
        "points": [[[1.0, 2.0]]], "speed": [3, ""]}}])
    matcher: Matcher = loaded.case.stages[0].expect.tool_calls
    assert matcher.match([tool_call("geo_distance", {"points": [[1, 2]]})]) == []
    assert matcher.match([tool_call("geo_distance", {"points": [[1, 2]], "speed": 3})])
    summary, _ = one_record(tmp_path, question, [{"geo.distance": {
        "points": [[[1.0, 2.0]]], "speed": [3]}}])
    assert "not in the function's schema" in summary.skipped[0].reason


# ---------------------------------------------------------------------------- command line


def test_main_writes_cases_and_prints_the_counts(tmp_path: Path,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    out_dir = tmp_path / "cases"
    code = main([str(question_file("parallel")), str(answer_file("parallel")), str(out_dir),
                 "--chunk-size", "150"])
    assert code == 0
    assert capsys.readouterr().out == (
        f"wrote 200 cases in 2 files to {out_dir} (parallel: 200)\n")
    assert sorted(p.name for p in out_dir.iterdir()) == [
        "parallel_000-149.case.yaml", "parallel_150-199.case.yaml"]
    assert len(load_case_file(out_dir / "parallel_150-199.case.yaml")) == 50


def test_main_takes_a_dash_for_no_answers(tmp_path: Path,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    assert main([str(question_file("irrelevance")), "-", str(tmp_path)]) == 0
    assert "wrote 240 cases in 3 files" in capsys.readouterr().out
    documents = list(yaml.safe_load_all((tmp_path / "irrelevance_000-099.case.yaml").read_text()))
    assert documents[0]["stages"][0]["expect"] == {"tool_calls": []}


def test_main_reports_bad_input_without_a_traceback(tmp_path: Path,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    assert main([str(tmp_path / "missing.json"), "-", str(tmp_path)]) == 2
    assert capsys.readouterr().err == (
        f"toolbench import-bfcl: error: no such file: {tmp_path / 'missing.json'}\n")
    broken = tmp_path / "broken.json"
    broken.write_text('{"id": "x"}\n{not json\n')
    assert main([str(broken), "-", str(tmp_path)]) == 1
    assert f"error: {broken}:2: not a JSON line" in capsys.readouterr().err
    answers = question_file("simple_python")
    assert main([str(answers), str(answers), str(tmp_path)]) == 1
    assert "holds no answer records" in capsys.readouterr().err


def test_main_help_names_the_arguments(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--help"]) == 0
    text = capsys.readouterr().out
    assert " ".join(text.split()).startswith(
        "usage: toolbench import-bfcl [-h] [--chunk-size N] [--limit N] QUESTIONS ANSWERS "
        "OUT_DIR")
    assert "'-' (or an empty file) for a category without one" in " ".join(text.split())


def test_main_help_says_where_the_files_are_and_how_to_import_offline(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr("sys.path", [p for p in __import__("sys").path
                                     if not (Path(p) / "bfcl_eval").is_dir()])
    assert main(["--help"]) == 0
    text = " ".join(capsys.readouterr().out.split())
    assert "ship inside the bfcl-eval wheel, in its folder bfcl_eval/data/" in text
    assert "bfcl-eval is not installed in this environment" in text
    assert "pip download --no-deps bfcl-eval mpmath -d wheels/" in text
    assert "pip install --no-deps wheels/*.whl" in text
    package = tmp_path / "site" / "bfcl_eval"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("raise ImportError('the help must not import it')\n")
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    assert main(["--help"]) == 0
    text = " ".join(capsys.readouterr().out.split())
    assert f"installed here: {package / 'data'}." in text


def test_limit_imports_the_first_records(tmp_path: Path,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    code = main([str(question_file("parallel")), str(answer_file("parallel")), str(tmp_path),
                 "--limit", "3"])
    assert code == 0
    assert capsys.readouterr().out == f"wrote 3 cases in 1 file to {tmp_path} (parallel: 3)\n"
    cases = load_case_file(tmp_path / "parallel_000-002.case.yaml")
    first = read_jsonl(question_file("parallel"))[:3]
    assert [case.case.name for case in cases] == [record["id"] for record in first]
    assert main([str(question_file("parallel")), "-", str(tmp_path), "--limit", "0"]) == 2
    assert "--limit" in capsys.readouterr().err


# ---------------------------------------------------------------------------- end to end

E2E_PER_CATEGORY = 2


def e2e_records(records: list[Record]) -> list[Record]:
    return [r for category in CATEGORIES for r in by_category(records, category)[
        :E2E_PER_CATEGORY]]


def write_e2e_cases(records: list[Record], tmp_path: Path, pytester: pytest.Pytester) -> None:
    """A few records of each category as case files in the pytester directory."""
    for category in CATEGORIES:
        chosen = [r for r in records if r.category == category]
        questions = write_jsonl(tmp_path / question_file(category).name,
                                [r.question for r in chosen])
        answers = None if category in NO_ANSWERS else write_jsonl(
            tmp_path / f"answers_{category}.json",
            [{"id": r.id, "ground_truth": r.truth} for r in chosen])
        import_bfcl(questions, answers, tmp_path / "out")
    shutil.copytree(tmp_path / "out", pytester.path / "bfcl")


def answering(records: list[Record], wrong: bool = False) -> Callable[[RecordedRequest], Reply]:
    """Reply to each case's question with its ground truth (or a wrong value, or a call)."""
    by_question = {r.question["question"][0][-1]["content"]: r for r in records}

    def reply(request: RecordedRequest) -> Reply:
        record = by_question[request.json()["messages"][-1]["content"]]
        if record.truth is None:
            calls: Calls = [(record.case.case.tools[0].name, {})] if wrong else []
        else:
            calls = answer_calls(record, first)
            if wrong:
                index, key, value = next(scalar_params(calls))
                calls = replaced(calls, index, key, changed(value))
        if not calls:
            return json_reply(completion("I cannot help with that."))
        return json_reply(completion(tool_calls=calls, finish_reason="tool_calls"))

    return reply


def test_generated_cases_run_against_a_server(records: list[Record], tmp_path: Path,
                                              pytester: pytest.Pytester,
                                              chat_server: ChatServer) -> None:
    chosen = e2e_records(records)
    write_e2e_cases(chosen, tmp_path, pytester)
    flags = ("--toolbench-live", f"--toolbench-base-url={chat_server.base_url}",
             "--toolbench-model=m", "-p", "no:cacheprovider", "--strict-markers")

    chat_server.set_handler(answering(chosen))
    result = pytester.runpytest(*flags)
    result.assert_outcomes(passed=len(chosen))

    chat_server.set_handler(answering(chosen, wrong=True))
    result = pytester.runpytest(*flags, "-m", "bfcl_simple_python or bfcl_irrelevance")
    result.assert_outcomes(failed=2 * E2E_PER_CATEGORY, deselected=3 * E2E_PER_CATEGORY)
    where = "stages[[]0].expect.tool_calls"
    no_call = (f"*/irrelevance_000-001.case.yaml:*: irrelevance_0[[]m]: {where}: "
               "expected no calls, got 1: determine_body_mass_index({})")
    wrong_value = (f"*/simple_python_000-001.case.yaml:*: simple_python_0[[]m]: {where}: "
                   "expected call 0 * found no partner; closest is call 0 "
                   "calculate_triangle_area(*): arguments.base: expected 10, got 7929")
    result.stdout.fnmatch_lines([no_call, wrong_value])
    assert chat_server.errors == []
    assert len(chat_server.requests) == len(chosen) + 2 * E2E_PER_CATEGORY
