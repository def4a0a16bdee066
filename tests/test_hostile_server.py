"""Defences against hostile servers, and the limits that bound every reply.

A reply has a total deadline and a size limit besides the timeout between bytes: a server
that trickles, pings or streams forever, or sends a compression bomb, fails its case with
the limit named, in bounded time and memory. Limits are settings, checked at start-up.
"""

from __future__ import annotations

import textwrap

import pytest
from support.chat_server import ChatServer, completion, json_reply

# -- settings ------------------------------------------------------------------------------


@pytest.mark.parametrize("value", ["nan", "inf", "-inf", "-1", "0", "soon"])
def test_a_timeout_that_is_not_a_positive_finite_number_is_a_usage_error(
        pytester: pytest.Pytester, value: str) -> None:
    result = pytester.runpytest(f"--toolbench-timeout={value}")

    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([
        f"*--toolbench-timeout must be a finite number of seconds > 0; got '{value}'"])


def test_a_bad_ini_timeout_names_the_ini_key(pytester: pytest.Pytester) -> None:
    pytester.makeini("[pytest]\ntoolbench_timeout = nan\n")

    result = pytester.runpytest()

    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([
        "*ini toolbench_timeout must be a finite number of seconds > 0; got 'nan'"])


def test_a_good_timeout_runs(pytester: pytest.Pytester, chat_server: ChatServer) -> None:
    chat_server.set_default(json_reply(completion("fine")))
    pytester.makefile(".case.yaml", ok=textwrap.dedent(f"""\
        name: ok
        endpoint: {{base_url: "{chat_server.base_url}"}}
        stages: [{{name: ask, user: hi, expect: {{text: fine}}}}]
        """))

    result = pytester.runpytest("--toolbench-live", "--toolbench-timeout=0.5")

    result.assert_outcomes(passed=1)


@pytest.mark.parametrize(("flag", "value", "wanted"), [
    ("replay-speed", "inf", "a finite number >= 0"),
    ("breaker-cooldown", "nan", "a finite number >= 0"),
    ("concurrency", "1.5", "a whole number >= 1"),
])
def test_other_numbers_are_checked_the_same_way(pytester: pytest.Pytester, flag: str,
                                                value: str, wanted: str) -> None:
    result = pytester.runpytest(f"--toolbench-{flag}={value}")

    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([f"*--toolbench-{flag} must be {wanted}; got '{value}'"])


# -- base URL ------------------------------------------------------------------------------


@pytest.mark.parametrize("suffix", ["?api-version=2024-06-01", "/?api-version=2024-06-01"])
def test_a_query_in_the_base_url_goes_after_the_path(
        pytester: pytest.Pytester, chat_server: ChatServer, suffix: str) -> None:
    chat_server.set_default(json_reply(completion("fine")))
    pytester.makefile(".case.yaml", ok=textwrap.dedent(f"""\
        name: ok
        endpoint: {{base_url: "{chat_server.base_url}{suffix}"}}
        stages: [{{name: ask, user: hi, expect: {{text: fine}}}}]
        """))

    result = pytester.runpytest("--toolbench-live")

    result.assert_outcomes(passed=1)
    assert [r.path for r in chat_server.requests] == [
        "/v1/chat/completions?api-version=2024-06-01"]
