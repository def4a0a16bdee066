"""Hostile files: case files built to exhaust memory or time, cassettes that are broken,
cut short or built to crash the reader, names that point outside the cassette folder, and
what the files written (cassettes, the JSON report) look like on disk afterwards.

Every broken file ends as a message naming it, for one case or one file, never as a
traceback, a hang or a crash of the session.
"""

from __future__ import annotations

import json
import os
import textwrap
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from support.chat_server import (
    ChatServer,
    RecordedRequest,
    Reply,
    chunks_for,
    completion,
    json_reply,
    sse_reply,
)

from pytest_toolbench.casefile.load import CaseFileErrors, load_case_file


def echo(request: RecordedRequest) -> Reply:
    """The last user message back, streamed when asked."""
    body = request.json()
    text = body["messages"][-1]["content"]
    return sse_reply(chunks_for(text)) if body.get("stream") else json_reply(completion(text))


@pytest.fixture
def echoing(chat_server: ChatServer) -> ChatServer:
    chat_server.set_handler(echo)
    return chat_server


def endpoint(server: ChatServer, retries: int = 0) -> str:
    return f'endpoint: {{base_url: "{server.base_url}", retries: {retries}, timeout_s: 2}}'


def returns_within(seconds: float, call: Callable[[], Any]) -> Any:
    """``call()``'s result or exception; fails, rather than hanging the run, past ``seconds``."""
    outcome: list[tuple[bool, Any]] = []

    def run() -> None:
        try:
            outcome.append((True, call()))
        except BaseException as error:  # noqa: BLE001 - handed to the test's thread
            outcome.append((False, error))

    worker = threading.Thread(target=run, daemon=True)
    worker.start()
    worker.join(seconds)
    assert outcome, f"did not return within {seconds} s"
    succeeded, value = outcome[0]
    if not succeeded:
        raise value
    return value


def assert_no_traceback(result: pytest.RunResult) -> None:
    output = result.stdout.str() + result.stderr.str()
    for sign in ("Traceback", "INTERNALERROR", "RecursionError", "pytest_toolbench/"):
        assert sign not in output, sign


# -- 1. case files past the limits ------------------------------------------------------

def laughs(indent: str) -> str:
    """Eleven levels of nine aliases each: 9**11 (31 billion) values once expanded."""
    levels = [f"{indent}l0: &l0 [lol]"]
    levels += [f"{indent}l{n}: &l{n} [{', '.join([f'*l{n - 1}'] * 9)}]" for n in range(1, 12)]
    return "\n".join(levels)


BOMBS = {
    "params": f"name: a\nparams:\n{laughs('  ')}\nstages: [{{name: s, user: hi}}]\n",
    "result": ("name: a\ntools:\n  - name: t\n    result:\n"
               f"{laughs('      ')}\nstages: [{{name: s, user: hi}}]\n"),
    "expect": ("name: a\nstages:\n  - name: s\n    user: hi\n    expect:\n      usage:\n"
               f"{laughs('        ')}\n"),
}


@pytest.mark.parametrize("place", list(BOMBS))
def test_alias_bomb_is_refused_at_its_line_in_well_under_a_second(
        pytester: pytest.Pytester, place: str) -> None:
    text = BOMBS[place]
    path = pytester.makefile(".case.yaml", bomb=text)
    # 9**6 values is the first level past the limit of 200,000.
    line = next(n for n, row in enumerate(text.splitlines(), 1) if "l6:" in row)

    # Processor time, which a loaded machine does not stretch as it does the wall clock's
    # (the wait bounds a hang); expanding the bomb would take far more of either.
    started = time.process_time()
    with pytest.raises(CaseFileErrors, match=f"bomb.case.yaml:{line}: .*l6: the file passes"):
        returns_within(60.0, lambda: load_case_file(path))
    assert time.process_time() - started < 0.5

    result = pytester.runpytest("--collect-only")
    result.stdout.fnmatch_lines([
        "*ERROR collecting bomb.case.yaml*",
        (f"*bomb.case.yaml:{line}: *l6: the file passes 200,000 values (keys, items and"
         " scalars, aliases expanded) here; a case file may hold at most that many*")])
    assert_no_traceback(result)


def test_a_100_mb_case_file_is_refused_by_its_size_before_it_is_read(
        pytester: pytest.Pytester) -> None:
    path = pytester.path / "huge.case.yaml"
    with path.open("wb") as handle:  # sparse: no time or disk spent on the 100 MB
        handle.write(b"name: a\nstages: [{name: s, user: hi}]\n")
        handle.truncate(100 * 1024 * 1024)

    with pytest.raises(CaseFileErrors, match="the file is 100.0 MB; a case file may be at"
                                             " most 10 MB"):
        returns_within(0.5, lambda: load_case_file(path))

    result = pytester.runpytest("--collect-only")
    result.stdout.fnmatch_lines(["*huge.case.yaml: the file is 100.0 MB; *"])
    assert_no_traceback(result)


def test_a_case_file_that_never_ends_is_refused_once_10_mb_are_read(tmp_path: Path) -> None:
    path = tmp_path / "zero.case.yaml"
    path.symlink_to("/dev/zero")  # its size says 0; reading it never ends

    with pytest.raises(CaseFileErrors, match="the file is larger than 10 MB, the most a case"
                                             " file may be"):
        returns_within(2.0, lambda: load_case_file(path))


def test_three_million_keys_are_refused_by_size(tmp_path: Path) -> None:
    path = tmp_path / "keys.case.yaml"
    path.write_text("name: a\nstages: [{name: s}]\nparams:\n"
                    + "".join(f" k{n}: 0\n" for n in range(3_000_000)))

    with pytest.raises(CaseFileErrors, match=r"the file is 3\d\.\d MB"):
        returns_within(0.5, lambda: load_case_file(path))


def test_more_values_than_the_limit_are_refused_where_the_limit_is_passed(
        tmp_path: Path) -> None:
    """A file below the size limit with 300,000 keys: refused on the event stream, before
    the whole of it is composed, at the line of the 200,001st value."""
    path = tmp_path / "keys.case.yaml"
    path.write_text("name: a\nstages: [{name: s}]\nparams:\n"
                    + "".join(f" k{n}: 0\n" for n in range(300_000)))
    # 5 values above (the mapping, 2 keys, the list...), then 2 a line from line 4 on.
    with pytest.raises(CaseFileErrors) as raised:
        returns_within(2.0, lambda: load_case_file(path))
    (error,) = raised.value.errors
    assert "the file passes 200,000 values (keys, items and scalars) here" in error.message
    assert error.line is not None and 99_000 < error.line < 101_000


@pytest.mark.parametrize("levels", [150, 3_000, 100_000])
def test_a_case_file_nested_too_deep_is_refused_in_the_products_words_at_its_line(
        pytester: pytest.Pytester, levels: int) -> None:
    """However deep: PyYAML may stop the deepest itself, in words of its own."""
    pytester.makefile(".case.yaml", deep=f"name: a\nparams: {{x: {'[' * levels}"
                                         f"{']' * levels}}}\nstages: [{{name: s}}]\n")

    result = pytester.runpytest("--collect-only")

    result.stdout.fnmatch_lines(["*ERROR collecting deep.case.yaml*",
                                 "*deep.case.yaml:2: *nested deeper than 100 levels"])
    assert "YAML syntax error" not in result.stdout.str()
    assert_no_traceback(result)


def test_a_file_ending_in_an_empty_document_is_fine(pytester: pytest.Pytester) -> None:
    pytester.makefile(".case.yaml", ends="name: a\nstages: [{name: s, user: hi}]\n---\n",
                      middle="name: b\nstages: [{name: s}]\n---\n---\nname: c\n"
                             "stages: [{name: s}]\n")

    result = pytester.runpytest("--collect-only", "-q")

    result.stdout.fnmatch_lines(["ends.case.yaml::a", "middle.case.yaml::b",
                                 "middle.case.yaml::c", "3 tests collected*"])


@pytest.mark.parametrize(("body", "shown"), [
    ("import sys\nsys.exit(3)\n", "SystemExit(3)"),
    ("class Stop(BaseException):\n    pass\nraise Stop('no')\n", "Stop('no')"),
])
def test_a_python_tool_that_exits_on_import_is_a_collection_error_at_its_line(
        pytester: pytest.Pytester, echoing: ChatServer, body: str, shown: str) -> None:
    pytester.makepyfile(exits_on_import=body)
    pytester.syspathinsert()
    pytester.makefile(".case.yaml", tool=textwrap.dedent("""\
        name: a
        tools:
          - name: t
            python: exits_on_import:run
        stages: [{name: s, user: hi}]
        """), other=f"name: b\n{endpoint(echoing)}\nstages: [{{name: s, user: hi}}]\n")

    result = pytester.runpytest("--toolbench-live", "--continue-on-collection-errors")

    result.stdout.fnmatch_lines([
        "*ERROR collecting tool.case.yaml*",
        (f"*tool.case.yaml:4: tools[[]0[]].python: cannot import 'exits_on_import':"
         f" importing it raised {shown}")])
    result.assert_outcomes(errors=1, passed=1)  # the session went on to the other file
    assert_no_traceback(result)


# -- 2. cassettes as untrusted input ------------------------------------------------------

def _cassette(path: Path) -> dict[str, Any]:
    return yaml.safe_load(path.read_text())  # type: ignore[no-any-return]


def _rewrite(change: Callable[[dict[str, Any]], object]) -> Callable[[Path], None]:
    def apply(path: Path) -> None:
        data = _cassette(path)
        change(data)
        path.write_text(yaml.safe_dump(data, width=1 << 30))
    return apply


def _response(data: dict[str, Any]) -> dict[str, Any]:
    return data["interactions"][0]["response"]  # type: ignore[no-any-return]


def _streamed_data(data: dict[str, Any]) -> None:
    _response(data)["events"][0]["data"] = 5


CORRUPTIONS: dict[str, tuple[Callable[[Path], object], str]] = {
    # case name: (what is done to its cassette, what the failure says after the path)
    "deep_json": (_rewrite(lambda d: _response(d).update(json="[" * 100_000 + "]" * 100_000)),
                  "interactions[[]0[]].response.json: JSON nested deeper than 200 levels"),
    "deepish_json": (_rewrite(lambda d: _response(d).update(json="[" * 500 + "]" * 500)),
                     "interactions[[]0[]].response.json: JSON nested deeper than 200 levels"),
    # Some builds of PyYAML stop deep YAML themselves, in their own words, before the
    # product's check does; the message is the product's either way.
    "deep_yaml": (lambda p: p.write_text("version: 2\ninteractions: "
                                         + "[" * 100_000 + "]" * 100_000 + "\n"),
                  "line 2: nested deeper than 100 levels"),
    "deep_short_yaml": (lambda p: p.write_text("version: 2\ninteractions: "
                                               + "[" * 3_000 + "]" * 3_000 + "\n"),
                        "line 2: nested deeper than 100 levels"),
    "truncated": (lambda p: p.write_bytes(p.read_bytes()[:300]), "*"),
    "empty": (lambda p: p.write_text(""), "the file: expected a mapping, got nothing (null)"),
    "not_a_list": (_rewrite(lambda d: d.update(interactions={"a": 1})),
                   "interactions: expected a list, got a mapping {'a': 1}"),
    "status_text": (_rewrite(lambda d: _response(d).update(status="ok")),
                    "interactions[[]0[]].response.status: expected an integer, got a string 'ok'"),
    "events_mapping": (_rewrite(lambda d: _response(d).update(events={"data": "x"})),
                       "interactions[[]0[]].response.events: expected a list, got a mapping *"),
    "request_not_json": (_rewrite(lambda d: d["interactions"][0]["request"].update(
                             json="{not json")),
                         "interactions[[]0[]].request.json: not JSON (Expecting property name*"),
    "huge_elapsed": (_rewrite(lambda d: _response(d).update(elapsed_ms=10**400)),
                     ("interactions[[]0[]].response.elapsed_ms: expected a finite number,"
                      " got an integer 1000000000*")),
    "event_data_number": (_rewrite(_streamed_data),
                          ("interactions[[]0[]].response.events[[]0[]].data: expected a"
                           " string, got an integer 5")),
}


def test_a_broken_cassette_fails_its_case_saying_what_is_wrong_and_where(
        pytester: pytest.Pytester, echoing: ChatServer) -> None:
    cases = [f"name: {name}\n{endpoint(echoing)}\nstages:\n  - name: s\n    user: {name}\n"
             f"    stream: {str(name.startswith('event')).lower()}\n"
             for name in CORRUPTIONS]
    pytester.makefile(".case.yaml", s="---\n".join(cases))
    pytester.runpytest("--toolbench-record").assert_outcomes(passed=len(CORRUPTIONS))
    replayed = pytester.runpytest_subprocess()  # as recorded: all pass
    replayed.assert_outcomes(passed=len(CORRUPTIONS))
    for name, (corrupt, _) in CORRUPTIONS.items():
        corrupt(pytester.path / "__cassettes__" / "s" / f"{name}.yaml")

    # A subprocess: if libyaml crashed on the deep YAML, this test would see it and go on.
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider")

    result.assert_outcomes(failed=len(CORRUPTIONS))
    result.stdout.fnmatch_lines_random([
        f"*s.case.yaml:*: {name}: *cassette unreadable: *{name}.yaml: {says}; re-record it with:"
        f" pytest 's.case.yaml::{name}' --toolbench-record"
        for name, (_, says) in CORRUPTIONS.items()])
    assert_no_traceback(result)


# -- 3. names that point outside the cassette folder; internal errors in the reports ------

def files_below(root: Path) -> set[str]:
    return {str(path.relative_to(root)) for path in root.rglob("*")
            if path.is_file() and ".pytest_cache" not in path.parts}


def test_model_names_cannot_write_outside_the_cassette_folder(
        pytester: pytest.Pytester, echoing: ChatServer) -> None:
    pytester.makefile(".case.yaml", s=f"""\
name: up
model: "/../../../x"
{endpoint(echoing)}
stages: [{{name: s, user: hi}}]
---
name: nul
model: "a\\0b"
{endpoint(echoing)}
stages: [{{name: s, user: hi}}]
""")
    pytester.runpytest("--toolbench-record").assert_outcomes(passed=2)
    pytester.runpytest("--toolbench-record", "--toolbench-model", "../y").assert_outcomes(
        passed=2)

    assert files_below(pytester.path) == {
        "s.case.yaml",
        "__cassettes__/s/up[%2F..%2F..%2F..%2Fx].yaml", "__cassettes__/s/nul[a%00b].yaml",
        "__cassettes__/s/up[..%2Fy].yaml", "__cassettes__/s/nul[..%2Fy].yaml"}
    echoing.close()  # replay reads them back from the same names
    pytester.runpytest().assert_outcomes(passed=2)
    pytester.runpytest("--toolbench-model", "../y").assert_outcomes(passed=2)


BREAK_THE_ENGINE = """\
import pytest_toolbench.session as session

original = session.run_case


async def broken(case_run, ctx):
    if case_run.loaded.case.name == "broken":
        raise RuntimeError("the plugin broke")
    return await original(case_run, ctx)


def pytest_configure(config):
    session.run_case = broken


def pytest_unconfigure(config):
    session.run_case = original
"""


def test_a_case_the_plugin_breaks_off_is_failed_in_the_report_and_the_summary(
        pytester: pytest.Pytester, echoing: ChatServer) -> None:
    pytester.makeconftest(BREAK_THE_ENGINE)
    pytester.makefile(".case.yaml", s="---\n".join(
        f"name: {name}\n{endpoint(echoing)}\nstages: [{{name: s, user: hi}}]\n"
        for name in ("broken", "fine")))
    report = pytester.path / "report.json"

    result = pytester.runpytest("--toolbench-live", f"--toolbench-report={report}")

    result.assert_outcomes(failed=1, passed=1)
    document = json.loads(report.read_text())
    assert document["summary"] == {"cases": 2, "failed": 1, "passed": 1}
    broken = next(case for case in document["cases"] if case["case"] == "broken")
    assert broken["outcome"] == "failed"
    assert broken["runs"][0]["error"] == "internal error: RuntimeError: the plugin broke"
    result.stdout.fnmatch_lines(["*toolbench summary*", "*broken*failed*", "*fine*passed*"])


@pytest.mark.parametrize("model", ["m[/]", "[bold red]loud"])
def test_model_names_are_shown_as_written_never_read_as_markup(
        pytester: pytest.Pytester, echoing: ChatServer, model: str) -> None:
    """The summary is drawn with rich, whose markup uses square brackets: a model named
    ``m[/]`` once stopped the session with an internal error at its very end."""
    pytester.makefile(".case.yaml", s=f"name: c\n{endpoint(echoing)}\n"
                                      "stages: [{name: s, user: hi, expect: {text: hi}}]\n")

    result = pytester.runpytest("--toolbench-live", "--toolbench-model", model, "-rN")

    result.assert_outcomes(passed=1)
    assert "INTERNALERROR" not in result.stdout.str()
    result.stdout.fnmatch_lines(["*toolbench summary*",
                                 f"toolbench (model: {model.replace('[', '[[]')})*"])


# -- 4. what re-recording leaves on disk --------------------------------------------------

def test_a_5xx_while_re_recording_keeps_the_previous_cassette(
        pytester: pytest.Pytester, echoing: ChatServer) -> None:
    pytester.makefile(".case.yaml", s="---\n".join([
        f"name: kept\n{endpoint(echoing, retries=1)}\nstages: [{{name: s, user: hi}}]\n",
        (f"name: wants_500\n{endpoint(echoing, retries=1)}\n"
         "stages: [{name: s, user: hi, expect: {status: 500}}]\n")]))
    pytester.runpytest("--toolbench-record").assert_outcomes(passed=1, failed=1)
    kept = pytester.path / "__cassettes__/s/kept.yaml"
    before = kept.read_bytes()
    echoing.set_handler(lambda request: json_reply(
        {"error": {"message": "overloaded", "type": "server_error"}}, 500,
        headers={"Retry-After": "0"}))
    sent = len(echoing.requests)

    result = pytester.runpytest("--toolbench-record", "--toolbench-breaker-threshold", "0")

    result.assert_outcomes(passed=1, failed=1)
    assert len(echoing.requests) == sent + 4  # each case: the request and its retry
    assert kept.read_bytes() == before
    # A case that expects the 500 and passes records it.
    wants_500 = _cassette(pytester.path / "__cassettes__/s/wants_500.yaml")
    assert _response(wants_500)["status"] == 500


@pytest.fixture
def umask_027() -> Iterator[None]:
    previous = os.umask(0o027)
    try:
        yield
    finally:
        os.umask(previous)


def test_written_files_keep_their_mode_new_ones_follow_the_umask_stray_temps_go(
        pytester: pytest.Pytester, echoing: ChatServer, umask_027: None) -> None:
    pytester.makefile(".case.yaml", s=f"name: a\n{endpoint(echoing)}\n"
                                      "stages: [{name: s, user: hi}]\n")
    cassette = pytester.path / "__cassettes__/s/a.yaml"
    report = pytester.path / "report.json"
    pytester.runpytest("--toolbench-record", f"--toolbench-report={report}")
    assert oct(cassette.stat().st_mode & 0o777) == oct(0o640)  # 0666 less the umask
    assert oct(report.stat().st_mode & 0o777) == oct(0o640)
    cassette.chmod(0o644)
    report.chmod(0o604)
    stray = cassette.with_name(".a.yaml.k3x9_q2z.tmp")  # left by a run killed mid-write
    stray.write_text("half a cassette")
    other = cassette.with_name(".a.yaml.b.yaml.k3x9_q2z.tmp")  # another file's: not ours
    other.write_text("")

    pytester.runpytest("--toolbench-record", f"--toolbench-report={report}")

    assert oct(cassette.stat().st_mode & 0o777) == oct(0o644)
    assert oct(report.stat().st_mode & 0o777) == oct(0o604)
    assert not stray.exists()
    assert other.exists()


def test_an_infinite_timeout_in_a_case_file_is_refused_at_its_line(
    pytester: pytest.Pytester
) -> None:
    pytester.makefile(".case.yaml", c=textwrap.dedent("""\
        name: forever
        endpoint:
          timeout_s: .inf
        stages: [{name: ask, user: hi}]
        """))

    result = pytester.runpytest("--collect-only")

    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(["  c.case.yaml:3: endpoint.timeout_s: *finite number"])
