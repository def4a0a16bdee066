"""Hostile files: case files built to exhaust memory or time.

Every broken file ends as a message naming it, for one case or one file, never as a
traceback, a hang or a crash of the session.
"""

from __future__ import annotations

import textwrap
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from support.chat_server import (
    ChatServer,
    RecordedRequest,
    Reply,
    chunks_for,
    completion,
    json_reply,
    sse_reply,
)

from pytest_toolbench.casefile import CaseFileErrors, load_case_file


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

    started = time.monotonic()
    with pytest.raises(CaseFileErrors, match=f"bomb.case.yaml:{line}: .*l6: the file passes"):
        returns_within(5.0, lambda: load_case_file(path))
    assert time.monotonic() - started < 0.5

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
