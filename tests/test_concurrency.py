"""--toolbench-concurrency: live cases run at once, pytest reports them in order (SPEC 8)."""

from __future__ import annotations

import time

import pytest
from support.chat_server import ChatServer, JsonReply, RecordedRequest, completion, json_reply


def slow_cases(pytester: pytest.Pytester, server: ChatServer, count: int,
               failing: int | None = None) -> None:
    documents = []
    for number in range(count):
        text = "no" if number == failing else "yes"
        documents.append(f"""name: case{number}
endpoint: {{base_url: '{server.base_url}'}}
stages:
  - name: ask
    user: "{number}"
    expect: {{text: "{text}"}}
""")
    pytester.makefile(".case.yaml", slow="---\n".join(documents))
    server.set_default(json_reply(completion(text="yes"), delay_s=0.5))


def test_cases_run_at_once_and_are_reported_in_order(
    pytester: pytest.Pytester, chat_server: ChatServer
) -> None:
    slow_cases(pytester, chat_server, 12)
    started = time.monotonic()
    result = pytester.runpytest("--toolbench-live", "--toolbench-concurrency=12", "-v",
                                "-p", "no:cacheprovider")
    elapsed = time.monotonic() - started
    result.assert_outcomes(passed=12)
    result.stdout.fnmatch_lines([f"*slow.case.yaml::case{n} PASSED*" for n in range(12)])
    # One at a time would take 6 s; the bound leaves room for a loaded machine.
    assert elapsed < 4.0, f"12 cases of 0.5 s at concurrency 12 took {elapsed:.1f} s"


def test_concurrency_one_runs_one_case_at_a_time(
    pytester: pytest.Pytester, chat_server: ChatServer
) -> None:
    slow_cases(pytester, chat_server, 3)
    started = time.monotonic()
    result = pytester.runpytest("--toolbench-live", "--toolbench-concurrency=1",
                                "-p", "no:cacheprovider")
    result.assert_outcomes(passed=3)
    assert time.monotonic() - started >= 1.4


def test_exitfirst_stops_and_cancels_cases_started_ahead(
    pytester: pytest.Pytester, chat_server: ChatServer
) -> None:
    slow_cases(pytester, chat_server, 12, failing=1)
    started = time.monotonic()
    result = pytester.runpytest("--toolbench-live", "--toolbench-concurrency=4", "-x",
                                "-p", "no:cacheprovider")
    result.assert_outcomes(passed=1, failed=1)
    assert time.monotonic() - started < 4.0
    # Only the cases inside the window were ever sent, not the whole file.
    assert len(chat_server.requests) <= 6


def test_keyword_selection_starts_only_selected_cases(
    pytester: pytest.Pytester, chat_server: ChatServer
) -> None:
    slow_cases(pytester, chat_server, 6)
    result = pytester.runpytest("--toolbench-live", "--toolbench-concurrency=8",
                                "-k", "case2 or case4", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=2)
    assert sorted(r.json()["messages"][0]["content"] for r in chat_server.requests) == ["2", "4"]


def test_last_failed_reruns_only_the_failure(
    pytester: pytest.Pytester, chat_server: ChatServer
) -> None:
    slow_cases(pytester, chat_server, 4, failing=3)
    pytester.runpytest("--toolbench-live").assert_outcomes(passed=3, failed=1)
    chat_server.requests.clear()
    result = pytester.runpytest("--toolbench-live", "--lf", "-v")
    result.assert_outcomes(failed=1)
    assert [r.json()["messages"][0]["content"] for r in chat_server.requests] == ["3"]


def test_concurrency_inside_xdist_workers(
    pytester: pytest.Pytester, chat_server: ChatServer
) -> None:
    slow_cases(pytester, chat_server, 16)
    arrivals: list[float] = []

    def answer(request: RecordedRequest) -> JsonReply:
        arrivals.append(time.monotonic())
        return json_reply(completion(text="yes"), delay_s=0.5)

    chat_server.set_handler(answer)
    result = pytester.runpytest_subprocess("--toolbench-live", "--toolbench-concurrency=4",
                                           "-n", "2", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=16)
    result.stdout.fnmatch_lines(["*toolbench summary*"])
    # Two workers one case at a time would have at most 2 requests in flight at once.
    in_flight = max(sum(1 for other in arrivals if 0 <= other - start < 0.5)
                    for start in arrivals)
    assert in_flight > 2, f"at most {in_flight} requests were in flight at once"
