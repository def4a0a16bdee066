"""``--toolbench-rpm`` / ``--toolbench-tpm``: live requests paced under a service's limits,
and slowed down by what its 429s and rate-limit headers say, against a loopback server
that enforces a limit and answers with OpenAI's and Anthropic's real headers.
"""

from __future__ import annotations

import datetime
import threading
import time
from collections.abc import Callable

import pytest
from support.chat_server import ChatServer, RecordedRequest, Reply, completion, json_reply
from support.second_models import verdict

GAP_S = 0.5
"""The server's limit: one request every half second (120 a minute)."""
SLACK = 0.7
"""How much closer than ``GAP_S`` two arrivals may come and still count as within the limit.
The client paces when it sends; on a busy machine one request can reach the server later
than the next by a good part of a second's tenth. Requests sent unpaced arrive within
milliseconds of each other, far below it."""


class EnforcingServer:
    """Answers 429 (with ``retry-after-ms`` and OpenAI's headers) to a request that comes
    sooner than ``GAP_S`` after the last one it accepted, and notes when each came."""

    def __init__(self, server: ChatServer, headers: Callable[[int], dict[str, str]]
                 | None = None, gap_s: float = GAP_S) -> None:
        self.gap_s = gap_s
        self.arrivals: list[float] = []
        self.refused = 0
        self._last = -GAP_S
        self._headers = headers or (lambda number: {})
        self._lock = threading.Lock()
        server.set_handler(self.answer)

    def answer(self, request: RecordedRequest) -> Reply:
        with self._lock:
            now = time.monotonic()
            self.arrivals.append(now)
            if now - self._last < self.gap_s * SLACK:
                self.refused += 1
                return json_reply({"error": {"message": "Rate limit reached", "type":
                                             "requests", "code": "rate_limit_exceeded"}},
                                  status=429, headers={
                                      "retry-after-ms": "500",
                                      "x-ratelimit-limit-requests": "120",
                                      "x-ratelimit-remaining-requests": "0",
                                      "x-ratelimit-reset-requests": "500ms"})
            self._last = now
            headers = {"x-ratelimit-limit-requests": "120",
                       "x-ratelimit-remaining-requests": "1",
                       "x-ratelimit-reset-requests": "500ms",
                       **self._headers(len(self.arrivals))}
            return json_reply(completion("hi there"), headers=headers)

    def gaps(self) -> list[float]:
        return [b - a for a, b in zip(self.arrivals, self.arrivals[1:])]


def write_cases(pytester: pytest.Pytester, base_url: str, count: int,
                api: str = "chat") -> None:
    cases = [f"""name: c{number}
endpoint: {{base_url: '{base_url}', api: {api}}}
stages:
  - name: ask
    user: Say hi {number}
""" for number in range(count)]
    pytester.makefile(".case.yaml", limited="---\n".join(cases))


def run(pytester: pytest.Pytester, *args: str) -> pytest.RunResult:
    return pytester.runpytest("-p", "no:cacheprovider", "--toolbench-live", *args)


def test_rpm_keeps_concurrent_cases_under_the_servers_limit(pytester: pytest.Pytester,
                                                            chat_server: ChatServer) -> None:
    server = EnforcingServer(chat_server)
    write_cases(pytester, chat_server.base_url, 4)
    result = run(pytester, "--toolbench-concurrency=8", "--toolbench-rpm=120")
    result.assert_outcomes(passed=4)
    assert server.refused == 0, server.gaps()
    assert min(server.gaps()) >= GAP_S * SLACK
    result.stdout.fnmatch_lines([
        "rate limits: 4 requests, 60 tokens, * s waited on limits (--toolbench-rpm 120)"])
    waited = float(result.stdout.str().split("tokens, ")[1].split(" s waited")[0])
    assert waited >= 3 * GAP_S * 0.9  # three requests held back, each about half a second


def test_without_a_limit_the_same_server_refuses(pytester: pytest.Pytester,
                                                 chat_server: ChatServer) -> None:
    """The server does enforce its limit: the test above would see 429s."""
    server = EnforcingServer(chat_server)
    write_cases(pytester, chat_server.base_url, 3)
    run(pytester, "--toolbench-concurrency=8")
    assert server.refused >= 1


def test_a_429s_retry_after_ms_holds_the_other_requests_too(pytester: pytest.Pytester,
                                                            chat_server: ChatServer) -> None:
    """One case's 429 holds every request to the endpoint until its retry-after-ms, not
    only the one retried: the case started beside it waits too."""
    arrivals: list[float] = []

    def answer(request: RecordedRequest) -> Reply:
        arrivals.append(time.monotonic())
        if len(arrivals) == 1:
            return json_reply({"error": {"message": "Rate limit reached"}}, status=429,
                              headers={"retry-after-ms": "2000"})
        return json_reply(completion("hi there"))

    chat_server.set_handler(answer)
    write_cases(pytester, chat_server.base_url, 2)
    # 120 a minute: the second case would go 0.5 s after the first, were it not held (the
    # 429 has those 0.5 s to come back, on however busy a machine).
    run(pytester, "--toolbench-concurrency=2", "--toolbench-rpm=120").assert_outcomes(
        passed=2)
    assert len(arrivals) == 3
    assert min(later - arrivals[0] for later in arrivals[1:]) >= 1.8


def test_openai_headers_at_zero_hold_the_next_request_until_the_reset(
        pytester: pytest.Pytester, chat_server: ChatServer) -> None:
    server = EnforcingServer(chat_server, lambda number: {
        "x-ratelimit-remaining-tokens": "0" if number == 1 else "5000",
        "x-ratelimit-reset-tokens": "1s" if number == 1 else "0s"}, gap_s=0)
    write_cases(pytester, chat_server.base_url, 3)
    run(pytester, "--toolbench-concurrency=1", "--toolbench-rpm=6000").assert_outcomes(
        passed=3)
    first, second = server.gaps()
    assert first >= 0.9 and second < 0.9 and server.refused == 0


def test_anthropic_headers_at_zero_hold_the_next_request_until_the_reset(
        pytester: pytest.Pytester, chat_server: ChatServer) -> None:
    def anthropic(number: int) -> dict[str, str]:
        reset = datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(seconds=1)
        return {"anthropic-ratelimit-requests-remaining": "0" if number == 1 else "50",
                "anthropic-ratelimit-requests-reset": reset.isoformat().replace("+00:00", "Z")}

    server = EnforcingServer(chat_server, anthropic, gap_s=0)
    write_cases(pytester, chat_server.base_url, 2)
    run(pytester, "--toolbench-concurrency=1", "--toolbench-rpm=6000").assert_outcomes(
        passed=2)
    assert server.gaps()[0] >= 0.85


def test_tpm_spaces_requests_by_the_tokens_each_reply_used(pytester: pytest.Pytester,
                                                            chat_server: ChatServer) -> None:
    server = EnforcingServer(chat_server)
    write_cases(pytester, chat_server.base_url, 3)
    pytester.makeini("[pytest]\ntoolbench_tpm = 1800\n")  # 15 tokens a reply: 0.5 s each
    result = run(pytester, "--toolbench-concurrency=1")
    result.assert_outcomes(passed=3)
    assert min(server.gaps()) >= GAP_S * SLACK and server.refused == 0
    result.stdout.fnmatch_lines(["rate limits: 3 requests, 45 tokens, *(--toolbench-tpm 1800)"])


@pytest.mark.parametrize(("flag", "value"), [("rpm", "0"), ("tpm", "-5"), ("rpm", "fast")])
def test_a_limit_that_is_no_positive_number_is_a_usage_error(pytester: pytest.Pytester,
                                                             flag: str, value: str) -> None:
    write_cases(pytester, "http://127.0.0.1:9", 1)
    result = run(pytester, f"--toolbench-{flag}={value}")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([(f"*--toolbench-{flag} must be a finite number > 0;"
                                  f" got '{value}'*")])


AGENT_CASE = """name: paced_agent
agent: {{python: "support.agents.openai_chat:make_agent"}}
model: agent-model
endpoint: {{base_url: '{base_url}'}}
judge: {{model: judge-model}}
stages:
  - {{name: one, user: Say hi}}
  - {{name: two, user: Say hi again}}
  - name: three
    user: And once more
    expect:
      judge: [Says hi]
"""


def test_rpm_paces_an_agent_cases_requests_and_its_judges(pytester: pytest.Pytester,
                                                          chat_server: ChatServer) -> None:
    """The agent's requests, forwarded by the proxy, and the judge's, sent from pytest's
    own thread, keep to the same limit as the plugin's own cases."""
    server = EnforcingServer(chat_server)
    said_hi = server.answer

    def answer(request: RecordedRequest) -> Reply:
        reply = said_hi(request)
        if reply.status == 200 and "response_format" in request.json():
            return verdict("chat", "pass", "The agent said hi.")
        return reply

    chat_server.set_handler(answer)
    pytester.makefile(".case.yaml", agent=AGENT_CASE.format(base_url=chat_server.base_url))
    result = run(pytester, "--toolbench-rpm=120", "-rA")
    result.assert_outcomes(passed=1)
    assert len(server.arrivals) == 4  # a request a stage, and the judge's
    assert server.refused == 0, server.gaps()
    result.stdout.fnmatch_lines(["rate limits: 4 requests, * tokens, * s waited on limits*"])
