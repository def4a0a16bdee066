"""--toolbench-concurrency: live cases run at once, pytest reports them in order (SPEC 8)."""

from __future__ import annotations

import threading
import time

import pytest
from support.chat_server import ChatServer, JsonReply, RecordedRequest, completion, json_reply

REPLY_DELAY_S = 0.5


class InFlight:
    """Counts the requests the server is answering at once: the server holds each reply for
    REPLY_DELAY_S, so requests whose arrivals lie closer than that overlapped."""

    def __init__(self, server: ChatServer) -> None:
        self.arrivals: list[float] = []
        self._lock = threading.Lock()
        server.set_handler(self.answer)

    def answer(self, request: RecordedRequest) -> JsonReply:
        with self._lock:
            self.arrivals.append(time.monotonic())
        return json_reply(completion(text="yes"), delay_s=REPLY_DELAY_S)

    @property
    def most(self) -> int:
        return max((sum(1 for other in self.arrivals if 0 <= other - start < REPLY_DELAY_S)
                    for start in self.arrivals), default=0)


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
    server.set_default(json_reply(completion(text="yes"), delay_s=REPLY_DELAY_S))


def test_cases_run_at_once_and_are_reported_in_order(
    pytester: pytest.Pytester, chat_server: ChatServer
) -> None:
    slow_cases(pytester, chat_server, 12)
    in_flight = InFlight(chat_server)
    result = pytester.runpytest("--toolbench-live", "--toolbench-concurrency=12", "-v",
                                "-p", "no:cacheprovider")
    result.assert_outcomes(passed=12)
    result.stdout.fnmatch_lines([f"*slow.case.yaml::case{n} PASSED*" for n in range(12)])
    assert in_flight.most >= 6, f"at most {in_flight.most} requests were in flight at once"


def test_concurrency_one_runs_one_case_at_a_time(
    pytester: pytest.Pytester, chat_server: ChatServer
) -> None:
    slow_cases(pytester, chat_server, 3)
    in_flight = InFlight(chat_server)
    result = pytester.runpytest("--toolbench-live", "--toolbench-concurrency=1",
                                "-p", "no:cacheprovider")
    result.assert_outcomes(passed=3)
    assert len(in_flight.arrivals) == 3
    assert in_flight.most == 1


def test_exitfirst_stops_and_cancels_cases_started_ahead(
    pytester: pytest.Pytester, chat_server: ChatServer
) -> None:
    slow_cases(pytester, chat_server, 12, failing=1)
    started = time.monotonic()
    result = pytester.runpytest("--toolbench-live", "--toolbench-concurrency=4", "-x",
                                "-p", "no:cacheprovider")
    result.assert_outcomes(passed=1, failed=1)
    assert time.monotonic() - started < 4.0
    # Only the cases inside the window were ever sent, not the whole file: the four under
    # way, and at most one more for each that ended while the first was awaited.
    assert len(chat_server.requests) <= 2 * 4


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


def test_xdist_workers_run_at_once_each_one_case_at_a_time(
    pytester: pytest.Pytester, chat_server: ChatServer
) -> None:
    """A worker cannot see which items it runs next without reading xdist's internals, so
    there the workers are the concurrency: two workers, two requests in flight."""
    slow_cases(pytester, chat_server, 8)
    in_flight = InFlight(chat_server)
    result = pytester.runpytest_subprocess("--toolbench-live", "--toolbench-concurrency=4",
                                           "-n", "2", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=8)
    result.stdout.fnmatch_lines(["*toolbench summary*"])
    assert in_flight.most == 2, f"{in_flight.most} requests were in flight at once"


def test_a_slow_case_holds_one_place_not_the_cases_behind_it(
    pytester: pytest.Pytester, chat_server: ChatServer
) -> None:
    """The first case's server takes 3 s; the other eleven take 0.2 s each and run, three
    at a time, while it waits, instead of waiting behind it in pytest's order."""
    slow_cases(pytester, chat_server, 12)
    arrivals: dict[str, float] = {}

    def answer(request: RecordedRequest) -> JsonReply:
        number = request.json()["messages"][0]["content"]
        arrivals[number] = time.monotonic()
        return json_reply(completion(text="yes"), delay_s=3.0 if number == "0" else 0.2)

    chat_server.set_handler(answer)
    result = pytester.runpytest("--toolbench-live", "--toolbench-concurrency=4", "-v",
                                "-p", "no:cacheprovider")
    result.assert_outcomes(passed=12)
    result.stdout.fnmatch_lines([f"*slow.case.yaml::case{n} PASSED*" for n in range(12)])
    first_answered = arrivals["0"] + 3.0
    late = sorted(number for number, at in arrivals.items() if at >= first_answered)
    assert not late, f"cases {late} were sent only once the slow first case was answered"
