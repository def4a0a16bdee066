"""A case file's ``defaults:`` document through pytester: every case starts from its keys
(the requests the loopback chat server receives show it), a system prompt read from a file
beside the case, and the problems of a defaults document at their lines."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
from support.chat_server import ChatServer, RecordedRequest, Reply, completion, json_reply

from pytest_toolbench.casefile.cache import ParsedCache
from pytest_toolbench.casefile.load import load_case_file
from pytest_toolbench.commands.cli import main


def echo(request: RecordedRequest) -> Reply:
    return json_reply(completion(request.json()["messages"][-1]["content"]))


def suite(base_url: str) -> str:
    return textwrap.dedent(f"""\
        defaults:
          model: small
          endpoint: {{base_url: "{base_url}", retries: 0, headers: {{X-Team: support}}}}
          params: {{temperature: 0, max_tokens: 64}}
          system: {{file: prompts/support.md}}
          marks: [smoke]
          tools:
            - name: get_order_status
              result: {{status: shipped}}
            - name: cancel_order
              result: {{done: true}}
        ---
        name: status
        stages:
          - name: ask
            user: where is my order?
            tool_choice: {{name: get_order_status}}
        ---
        name: refund
        model: [large]
        params: {{seed: 7}}
        endpoint: {{timeout_s: 5}}
        marks: [slow]
        system: You handle refunds.
        tools:
          - name: cancel_order
            error: not allowed
          - name: refund
            result: {{ok: true}}
        stages:
          - name: ask
            user: refund me
            tool_choice: {{name: refund}}
        """)


def test_every_case_starts_from_the_files_defaults(pytester: pytest.Pytester,
                                                   chat_server: ChatServer) -> None:
    chat_server.set_handler(echo)
    pytester.makeini("[pytest]\nmarkers =\n    smoke\n    slow\n")
    (pytester.path / "prompts").mkdir()
    (pytester.path / "prompts" / "support.md").write_text("You are Shop's support desk.\n",
                                                           encoding="utf-8")
    pytester.makefile(".case.yaml", orders=suite(chat_server.base_url))

    result = pytester.runpytest("-p", "no:cacheprovider", "--toolbench-live", "-v")

    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines(["*orders.case.yaml::status?small? PASSED*",
                                 "*orders.case.yaml::refund?large? PASSED*"])
    status, refund = sorted(chat_server.requests, key=lambda r: r.json()["model"], reverse=True)
    body = status.json()
    assert body["model"] == "small"
    assert body["messages"][0] == {"role": "system",
                                   "content": "You are Shop's support desk.\n"}
    assert (body["temperature"], body["max_tokens"]) == (0, 64)
    assert [tool["function"]["name"] for tool in body["tools"]] == [
        "get_order_status", "cancel_order"]
    assert status.headers["x-team"] == "support"
    body = refund.json()
    assert body["messages"][0] == {"role": "system", "content": "You handle refunds."}
    assert (body["temperature"], body["max_tokens"], body["seed"]) == (0, 64, 7)
    assert [tool["function"]["name"] for tool in body["tools"]] == [
        "get_order_status", "cancel_order", "refund"]
    assert refund.headers["x-team"] == "support"
    both = pytester.runpytest("-p", "no:cacheprovider", "--collect-only", "-q", "-m", "smoke")
    both.stdout.fnmatch_lines(["*status?small?", "*refund?large?", "2 tests collected*"])
    one = pytester.runpytest("-p", "no:cacheprovider", "--collect-only", "-q", "-m", "slow")
    one.stdout.fnmatch_lines(["*refund?large?", "1/2 tests collected*"])


def test_a_changed_system_prompt_file_changes_the_request(pytester: pytest.Pytester,
                                                          chat_server: ChatServer) -> None:
    """The prompt is read when the case validates: a recording made with one prompt no
    longer replays once the file says another (a request diff), cache or not."""
    chat_server.set_handler(echo)
    (pytester.path / "prompt.md").write_text("Be brief.", encoding="utf-8")
    pytester.makefile(".case.yaml", brief=textwrap.dedent(f"""\
        name: brief
        endpoint: {{base_url: "{chat_server.base_url}", retries: 0}}
        system: {{file: prompt.md}}
        stages: [{{name: ask, user: hi, expect: {{text: hi}}}}]
        """))
    pytester.runpytest("--toolbench-record").assert_outcomes(passed=1)
    pytester.runpytest().assert_outcomes(passed=1)

    (pytester.path / "prompt.md").write_text("Be verbose.", encoding="utf-8")
    changed = pytester.runpytest()

    changed.assert_outcomes(failed=1)
    changed.stdout.fnmatch_lines(["*Be verbose.*"])


@pytest.mark.parametrize(("text", "expected"), [
    pytest.param("defaults:\n  model: m\n  stages: []\n---\nname: a\nstages: [{name: s}]\n",
                 "orders.case.yaml:3: defaults.stages: 'stages' cannot be a default (each case"
                 " has its own): defaults hold model, endpoint, system, tools, params",
                 id="case-key"),
    pytest.param("defaults:\n  modle: m\n---\nname: a\nstages: [{name: s}]\n",
                 "orders.case.yaml:2: defaults.modle: 'modle' cannot be a default (did you"
                 " mean 'model'?)", id="typo"),
    pytest.param("defaults:\n  tools:\n    - name: t\n      result: 1\n      error: e\n---\n"
                 "name: a\nstages: [{name: s}]\n---\nname: b\nstages: [{name: s}]\n",
                 "orders.case.yaml:3: defaults.tools[0]: give only one of result, python,"
                 " error (got result, error)", id="bad-default-once"),
    pytest.param("defaults:\n  tools: [{name: t}]\n---\nname: a\ntools:\n  - name: u\n"
                 "    resul: 1\nstages: [{name: s}]\n",
                 "orders.case.yaml:7: tools[0].resul: unknown key 'resul' (did you mean"
                 " 'result'?)", id="case-tool-after-defaults"),
    pytest.param("name: a\ndefaults: {model: m}\nstages: [{name: s}]\n",
                 "orders.case.yaml:2: defaults: unknown key 'defaults': a file's defaults are a"
                 " document of their own", id="inside-a-case"),
    pytest.param("defaults:\n  system: {file: nowhere.md}\n---\nname: a\nstages: [{name: s}]\n",
                 "orders.case.yaml:2: defaults.system.file: cannot read a system prompt"
                 " 'nowhere.md'", id="no-prompt-file"),
])
def test_problems_of_the_defaults_are_at_their_lines(pytester: pytest.Pytester,
                                                     capsys: pytest.CaptureFixture[str],
                                                     text: str, expected: str) -> None:
    pytester.makefile(".case.yaml", orders=text)
    pytester.chdir()

    assert main(["validate", "orders.case.yaml"]) == 1
    out = capsys.readouterr().out
    assert out.count(f"  {expected}") == 1, out
    result = pytester.runpytest("-p", "no:cacheprovider")
    result.assert_outcomes(errors=1)
    assert any(line.strip().startswith(expected) for line in result.outlines), result.outlines


def test_a_judge_default_merges_key_by_key(tmp_path: Path) -> None:
    """``judge`` merges as ``endpoint`` does: the case names its own judge model and keeps
    the default judge's endpoint."""
    path = tmp_path / "judged.case.yaml"
    path.write_text(textwrap.dedent("""\
        defaults:
          judge: {model: big-judge, endpoint: {base_url: "http://127.0.0.1:9/v1"}}
        ---
        name: own_model
        judge: {model: small-judge}
        stages: [{name: s, user: hi}]
        ---
        name: inherited
        stages: [{name: s, user: hi}]
        """), encoding="utf-8")

    own, inherited = load_case_file(path)

    assert own.case.judge is not None and inherited.case.judge is not None
    assert (own.case.judge.model, own.case.judge.endpoint.base_url) == (
        "small-judge", "http://127.0.0.1:9/v1")
    assert inherited.case.judge.model == "big-judge"


def test_a_second_defaults_document_is_refused(pytester: pytest.Pytester,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    pytester.makefile(".case.yaml", orders=textwrap.dedent("""\
        defaults: {model: a}
        ---
        name: one
        stages: [{name: s, user: hi}]
        ---
        defaults: {model: b}
        """))
    pytester.chdir()

    assert main(["validate", "orders.case.yaml"]) == 1
    assert ("  orders.case.yaml:6: defaults: a second defaults document: a file has one,"
            " which every case of it starts from (line 1)") in capsys.readouterr().out


def test_cases_read_back_outlined_stay_packed_beside_defaults(tmp_path: Path) -> None:
    """Collecting a file read back from the parsed-file cache unpacks its defaults document
    (the cases start from it, wherever it is) and none of its cases, which wait to be
    validated when run."""
    path = tmp_path / "orders.case.yaml"
    path.write_text("name: a\nstages: [{name: s, user: hi}]\n---\nname: b\nstages: [{name: s,"
                    " user: hi}]\n---\ndefaults: {model: m, marks: [smoke]}\n",
                    encoding="utf-8")
    kept = ParsedCache(tmp_path / "cache")
    first = load_case_file(path, kept)
    first.keep(kept)

    again = load_case_file(path, kept)

    assert kept.hits == 1
    assert [case.outline.models for case in again] == [("m",), ("m",)]
    assert [case.outline.marks for case in again] == [("smoke",), ("smoke",)]
    assert [case.document.data for case in again] == [None, None]
    assert again[1].line_of("marks", 0) == 7  # the mark's line: in the defaults
