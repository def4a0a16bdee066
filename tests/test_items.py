"""Case items as pytest sees them: their ids under ``--lf``, ``--ff``, ``--nf``, and marks.

pytest 9 keeps last failures as structured ids (path, names, parameters) and splits the
``[...]`` of a stored id into parameters; these runs show a case item's id compares equal
to the id pytest read back from its cache, on pytest 8 as on pytest 9.
"""

from __future__ import annotations

import textwrap

import pytest
from support.chat_server import ChatServer, RecordedRequest, Reply, completion, json_reply


def answer_with_model(request: RecordedRequest) -> Reply:
    """Reply with the requested model's name, so a case passes for one model only."""
    return json_reply(completion(request.json()["model"]))


def two_model_case(name: str, base_url: str, passing_model: str) -> str:
    """A case run against models ``ok`` and ``broken`` that passes for ``passing_model``."""
    return textwrap.dedent(f"""\
        name: {name}
        model: [ok, broken]
        endpoint: {{base_url: "{base_url}", retries: 0, timeout_s: 2}}
        stages:
          - name: ask
            user: which model are you?
            expect: {{text: {passing_model}}}
        """)


@pytest.fixture
def answering(chat_server: ChatServer) -> ChatServer:
    chat_server.set_handler(answer_with_model)
    return chat_server


@pytest.fixture
def failed_once(pytester: pytest.Pytester, answering: ChatServer) -> ChatServer:
    """A file whose ``greet[broken]`` fails and ``greet[ok]``, ``other[*]`` pass, run once."""
    url = answering.base_url
    pytester.makefile(".case.yaml", c="---\n".join(
        [two_model_case("greet", url, "ok"), two_model_case("other", url, "{$any: true}")]))
    pytester.runpytest("--toolbench-live").assert_outcomes(passed=3, failed=1)
    answering.requests.clear()
    return answering


def test_last_failed_reruns_only_the_failed_model(
    pytester: pytest.Pytester, failed_once: ChatServer
) -> None:
    result = pytester.runpytest("--toolbench-live", "--lf", "-v")

    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["run-last-failure: rerun previous 1 failure*",
                                 "c.case.yaml::greet?broken? FAILED*"])
    assert [r.json()["model"] for r in failed_once.requests] == ["broken"]


def test_failed_first_runs_the_failed_model_before_the_rest(
    pytester: pytest.Pytester, failed_once: ChatServer
) -> None:
    result = pytester.runpytest("--toolbench-live", "--ff", "-v")

    result.assert_outcomes(passed=3, failed=1)
    result.stdout.fnmatch_lines(["run-last-failure: rerun previous 1 failure first*",
                                 "c.case.yaml::greet?broken? FAILED*",
                                 "c.case.yaml::greet?ok? PASSED*"])


def test_new_first_runs_a_new_case_before_the_known_ones(
    pytester: pytest.Pytester, failed_once: ChatServer
) -> None:
    known = (pytester.path / "c.case.yaml").read_text()
    added = two_model_case("added", failed_once.base_url, "{$any: true}")
    (pytester.path / "c.case.yaml").write_text(f"{known}\n---\n{added}")

    result = pytester.runpytest("--toolbench-live", "--nf", "-v")

    result.assert_outcomes(passed=5, failed=1)
    result.stdout.fnmatch_lines(["c.case.yaml::added?ok? PASSED*",
                                 "c.case.yaml::added?broken? PASSED*",
                                 "c.case.yaml::greet?ok? PASSED*"])


def test_an_unknown_mark_is_reported_at_its_line_in_the_case_file(
    pytester: pytest.Pytester
) -> None:
    pytester.makefile(".case.yaml", c=textwrap.dedent("""\
        name: greet
        marks:
          - smoke
          - {unheard_of: {reason: big}}
        stages: [{name: ask, user: hi}]
        """))
    pytester.makeini("[pytest]\nmarkers =\n    smoke: quick checks\n")

    result = pytester.runpytest("--collect-only", "-q",
                                "-W", "always::pytest.PytestUnknownMarkWarning")

    result.stdout.fnmatch_lines([
        "c.case.yaml:4",
        "  *c.case.yaml:4: PytestUnknownMarkWarning: Unknown pytest.mark.unheard_of - is this a typo?*",
        "    - {unheard_of: {reason: big}}",
    ])
    assert "collect.py" not in result.stdout.str()


def test_every_case_with_an_unknown_mark_is_warned_at_its_own_line(
    pytester: pytest.Pytester
) -> None:
    """A registered mark is checked once a session; an unknown one at every use."""
    case = "name: {name}\nmarks: [smoke, unheard_of]\nstages: [{{name: ask, user: hi}}]\n"
    pytester.makefile(".case.yaml", c=case.format(name="one") + "---\n" + case.format(name="two"))
    pytester.makeini("[pytest]\nmarkers =\n    smoke: quick checks\n")

    result = pytester.runpytest("--collect-only", "-q", "-m", "smoke",
                                "-W", "always::pytest.PytestUnknownMarkWarning")

    result.stdout.fnmatch_lines([
        "c.case.yaml::one", "c.case.yaml::two",
        "  *c.case.yaml:2: PytestUnknownMarkWarning: Unknown pytest.mark.unheard_of*",
        "  *c.case.yaml:6: PytestUnknownMarkWarning: Unknown pytest.mark.unheard_of*",
    ])
    assert result.stdout.str().count("Unknown pytest.mark") == 2


@pytest.mark.parametrize("flags", [["--strict-markers"],
                                   ["-W", "error::pytest.PytestUnknownMarkWarning"]])
def test_a_refused_mark_is_a_collection_error_at_its_line(
    pytester: pytest.Pytester, flags: list[str]
) -> None:
    pytester.makefile(".case.yaml", c="name: greet\nmarks: [never_registered]\nstages: [{name: a, user: hi}]\n")

    result = pytester.runpytest("--collect-only", *flags)

    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(["*ERROR collecting c.case.yaml*", "c.case.yaml:2: *never_registered*"])
    assert "collect.py" not in result.stdout.str()
