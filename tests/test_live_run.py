"""Live runs through pytester against the loopback chat server: expectations, failure text,
the summary table, what the server received, endpoint precedence and xdist.

The server answers by the last user message (``by_user``), so cases may run concurrently
(live cases start ahead) and still each get their own reply.
"""

from __future__ import annotations

import dataclasses
import textwrap
from collections.abc import Callable, Iterator, Mapping

import pytest
from support.chat_server import (
    ChatServer,
    RecordedRequest,
    Reply,
    chunks_for,
    completion,
    json_reply,
    sse_reply,
    start_chat_server,
)

WEATHER_AND_TIME = [("get_weather", {"city": "Paris"}), ("get_time", {"tz": "CET"})]


@pytest.fixture(autouse=True)
def clean_environment(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    """The key variable these tests name is not set from the developer's shell."""
    monkeypatch.delenv("MY_KEY", raising=False)


def by_user(replies: Mapping[str, Reply]) -> Callable[[RecordedRequest], Reply]:
    """A handler answering each request with the reply scripted for its last user message."""
    def handler(request: RecordedRequest) -> Reply:
        users = [m for m in request.json()["messages"] if m["role"] == "user"]
        return replies[users[-1]["content"]]
    return handler


def echo(request: RecordedRequest) -> Reply:
    text = request.json()["messages"][-1]["content"]
    return sse_reply(chunks_for(text)) if request.json().get("stream") else json_reply(
        completion(text))


def cases(base_url: str, *bodies: str) -> str:
    """Case documents, each given the endpoint ``base_url`` with no retries."""
    head = f'endpoint: {{base_url: "{base_url}", retries: 0, timeout_s: 2}}\n'
    return "---\n".join(head + textwrap.dedent(body) for body in bodies)


PASSING: dict[str, Reply] = {
    "text and figures": json_reply(completion("The weather in Paris is 21 C")),
    "two calls": json_reply(completion(tool_calls=WEATHER_AND_TIME)),
    "no calls": json_reply(completion("I cannot help with that")),
    "stream calls": sse_reply(chunks_for(tool_calls=WEATHER_AND_TIME, split=3)),
    "bad request": json_reply({"error": {"message": "tools are not supported by this model",
                                         "type": "invalid_request_error"}}, status=400),
}


def test_expectations_that_hold_pass(pytester: pytest.Pytester, chat_server: ChatServer) -> None:
    chat_server.set_handler(by_user(PASSING))
    pytester.makefile(".case.yaml", live=cases(chat_server.base_url, """\
        name: text_finish_usage_latency
        stages:
          - name: ask
            user: text and figures
            expect:
              text: {$contains: "21"}
              finish_reason: stop
              usage: {total_tokens: {$lte: 100}, prompt_tokens: 10}
              latency_ms: {$gt: 0, $lt: 5000}
        """, """\
        name: calls_in_any_order
        tools: [{name: get_weather}, {name: get_time}]
        stages:
          - name: ask
            user: two calls
            expect:
              finish_reason: tool_calls
              tool_calls:
                - {name: get_time, arguments: {tz: CET}}
                - {name: get_weather, arguments: {city: {$regex: "(?i)^paris$"}}}
        """, """\
        name: calls_in_order
        tools: [{name: get_weather}, {name: get_time}]
        stages:
          - name: ask
            user: two calls
            expect:
              tool_calls: {$ordered: [{name: get_weather}, {name: get_time}]}
        """, """\
        name: calls_include
        tools: [{name: get_weather}, {name: get_time}]
        stages:
          - name: ask
            user: two calls
            expect:
              tool_calls: {$includes: [{name: get_time, arguments: {$exact: {tz: CET}}}]}
        """, """\
        name: no_calls
        stages:
          - name: ask
            user: no calls
            expect: {tool_calls: [], text: {$icontains: "cannot"}}
        """, """\
        name: streamed_calls
        tools: [{name: get_weather}, {name: get_time}]
        stages:
          - name: ask
            user: stream calls
            stream: true
            expect:
              finish_reason: tool_calls
              tool_calls:
                - {name: get_weather, arguments: {$exact: {city: Paris}}}
                - {name: get_time, arguments: {tz: CET}}
              usage: {total_tokens: 15}
              stream: {done: true, chunks: {$gte: 8}, ttft_ms: {$lt: 5000}, usage: true}
        """, """\
        name: expected_error_status
        stages:
          - name: ask
            user: bad request
            expect:
              status: 400
              error: {$contains: "not supported"}
        """))

    result = pytester.runpytest("--toolbench-live", "-v")

    result.assert_outcomes(passed=7)
    result.stdout.fnmatch_lines(["toolbench: mode=live*", "*::streamed_calls PASSED*"])


def test_failing_expectations_name_their_line(pytester: pytest.Pytester,
                                              chat_server: ChatServer) -> None:
    chat_server.set_handler(by_user({
        **PASSING,
        "unknown model": json_reply({"error": {"message": "model 'nope' does not exist"}},
                                    status=404),
        "short stream": sse_reply(chunks_for("hi"), done=False),
    }))
    pytester.makefile(".case.yaml", bad=cases(chat_server.base_url, """\
        name: wrong_order
        tools: [{name: get_weather}, {name: get_time}]
        stages:
          - name: ask
            user: two calls
            expect:
              tool_calls: {$ordered: [{name: get_time}, {name: get_weather}]}
        """, """\
        name: called_but_should_not
        stages:
          - name: ask
            user: two calls
            expect:
              tool_calls: []
        """, """\
        name: missing_call
        tools: [{name: get_weather}, {name: get_time}]
        stages:
          - name: ask
            user: no calls
            expect:
              tool_calls: {$includes: [{name: get_weather}]}
        """, """\
        name: unexpected_status
        stages:
          - name: ask
            user: unknown model
        """, """\
        name: stream_checks
        stages:
          - name: ask
            user: short stream
            stream: true
            expect:
              stream: {chunks: {$gte: 50}}
        """))

    result = pytester.runpytest("--toolbench-live", "-q", "-rf")

    result.assert_outcomes(failed=5)
    # The verdict lines: file:line of the failing expectation, key path, then the reason.
    result.stdout.fnmatch_lines_random([
        ("*bad.case.yaml:8: wrong_order: stages[[]0[]].expect.tool_calls[[]0[]].name: expected"
         " 'get_time', got 'get_weather'"),
        "*bad.case.yaml:16: called_but_should_not: stages[[]0[]].expect.tool_calls: *",
        "*bad.case.yaml:25: missing_call: stages[[]0[]].expect.tool_calls: *",
        ("*bad.case.yaml:30: unexpected_status: stages[[]0[]].expect.status: expected 200,"
        " got 404; the server said: model 'nope' does not exist"),
        ("*bad.case.yaml:40: stream_checks: stages[[]0[]].expect.stream.done: stream ended"
        " without data: [[]DONE[]]"),
        "bad.case.yaml:40: stages[[]0[]].expect.stream.chunks: expected >= 50, got 4",
    ])
    result.stdout.fnmatch_lines(["  < 404 finish_reason=None (*)",
                                 "    error: model 'nope' does not exist"])


def test_failure_text_verdict_diff_transcript_and_trail(pytester: pytest.Pytester,
                                                        chat_server: ChatServer) -> None:
    chat_server.set_handler(by_user(PASSING))
    pytester.makefile(".case.yaml", story=cases(chat_server.base_url, """\
        name: paris_weather
        model: small
        tools:
          - name: get_weather
            result: {temp_c: 21}
          - name: get_time
            result: "12:00"
        stages:
          - name: ask
            user: two calls
            expect:
              finish_reason: tool_calls
          - name: answer
            user: text and figures
            expect:
              text: {$regex: "^Sunny"}
        """))

    result = pytester.runpytest("--toolbench-live")

    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines([
        "*_ case: paris_weather[[]small[]] _*",
        "*story.case.yaml:17: paris_weather[[]small[]]: stages[[]1[]].expect.text: *",
        "--- stage 'ask': passed ---",
        "transcript:",
        "  > request 1: 1 message, last user: two calls",
        "  < 200 finish_reason=tool_calls (*)",
        "    call get_weather({\"city\": \"Paris\"})",
        "states: idle -> sending -> receiving -> checking -> passed",
        "--- stage 'answer': failed ---",
        "transcript:",
        "  > request 1: 5 messages, last user: text and figures",
        "  < 200 finish_reason=stop (*15 tokens)",
        "    text: The weather in Paris is 21 C",
        "states: idle -> running_tools -> sending -> receiving -> checking -> failed",
    ])


def test_summary_table_at_the_end_and_not_with_q(pytester: pytest.Pytester,
                                                 chat_server: ChatServer) -> None:
    chat_server.set_handler(by_user(PASSING))
    pytester.makefile(".case.yaml", c=cases(chat_server.base_url, """\
        name: good_case
        model: [m1, m2]
        stages: [{name: ask, user: text and figures, expect: {text: {$contains: Paris}}}]
        """, """\
        name: bad_case
        model: m1
        stages: [{name: ask, user: no calls, expect: {text: {$contains: Paris}}}]
        """))

    loud = pytester.runpytest("--toolbench-live")
    quiet = pytester.runpytest("--toolbench-live", "-q")

    loud.assert_outcomes(passed=2, failed=1)
    lines = loud.stdout.lines
    start = lines.index(next(line for line in lines if "= toolbench summary =" in line))
    end = lines.index(next(line for line in lines if "short test summary info" in line))
    table = lines[start:end]
    header = next(line.split() for line in table if line.split()[:1] == ["case"])
    assert {"case", "model", "outcome", "stages", "turns", "tokens", "latency", "ttft"} <= set(
        header)
    rows = {(cells[0], cells[header.index("model")]): cells for cells in (
        line.split() for line in table) if cells[:1] in (["good_case"], ["bad_case"])}
    assert {key: cells[header.index("outcome")] for key, cells in rows.items()} == {
        ("good_case", "m1"): "passed", ("good_case", "m2"): "passed",
        ("bad_case", "m1"): "failed"}
    assert {cells[header.index("tokens")] for cells in rows.values()} == {"15"}
    quiet.assert_outcomes(passed=2, failed=1)
    assert "toolbench summary" not in quiet.stdout.str()
    assert "good_case" not in quiet.stdout.str()


def test_the_request_the_server_receives(pytester: pytest.Pytester,
                                         chat_server: ChatServer) -> None:
    chat_server.set_handler(echo)
    pytester.makefile(".case.yaml", req=cases(chat_server.base_url, """\
        name: request_shape
        model: gpt-test
        system: You are terse.
        params: {temperature: 0, seed: 7, max_tokens: 256}
        tools:
          - name: get_weather
            description: Current weather for a city
            parameters:
              type: object
              properties: {city: {type: string}}
              required: [city]
            result: {temp_c: 21}
        stages:
          - name: ask
            user: hello
            tool_choice: {name: get_weather}
            stream: true
            params: {max_tokens: 16}
            expect: {text: hello}
          - name: again
            user: bye
            tool_choice: none
            params: {stream_options: {include_usage: false}}
            stream: true
            expect: {text: bye}
        """))

    result = pytester.runpytest("--toolbench-live")

    result.assert_outcomes(passed=1)
    first, second = (request.json() for request in chat_server.requests)
    assert first == {
        "model": "gpt-test",
        "messages": [{"role": "system", "content": "You are terse."},
                     {"role": "user", "content": "hello"}],
        "tools": [{"type": "function", "function": {
            "name": "get_weather", "description": "Current weather for a city",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                           "required": ["city"]}}}],
        "tool_choice": {"type": "function", "function": {"name": "get_weather"}},
        "temperature": 0, "seed": 7, "max_tokens": 16,
        "stream": True, "stream_options": {"include_usage": True},
    }
    assert second["messages"][2:] == [{"role": "assistant", "content": "hello"},
                                      {"role": "user", "content": "bye"}]
    assert second["tool_choice"] == "none"
    assert second["max_tokens"] == 256  # the first stage's params do not leak into the next
    assert second["stream_options"] == {"include_usage": False}  # params say otherwise
    headers = chat_server.requests[0].headers
    assert headers["content-type"] == "application/json"
    assert headers["accept"] == "text/event-stream"
    assert all(request.path == "/v1/chat/completions" for request in chat_server.requests)


# -- endpoints ---------------------------------------------------------------------------

LEVELS = ["cli", "case", "ini", "TOOLBENCH_BASE_URL", "OPENAI_BASE_URL"]


@pytest.fixture
def five_servers() -> Iterator[dict[str, ChatServer]]:
    servers = {level: start_chat_server() for level in LEVELS}
    try:
        for server in servers.values():
            server.set_handler(echo)
        yield servers
    finally:
        for server in servers.values():
            server.close()


@pytest.mark.parametrize("highest", LEVELS)
def test_endpoint_precedence(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch,
                             five_servers: dict[str, ChatServer], highest: str) -> None:
    """Every level from ``highest`` down is set; the request must reach ``highest``."""
    given = LEVELS[LEVELS.index(highest):]
    url = {level: server.base_url for level, server in five_servers.items()}
    endpoint = f'endpoint: {{base_url: "{url["case"]}"}}\n' if "case" in given else ""
    pytester.makefile(".case.yaml", ep=endpoint + "name: where\nstages: [{name: ask, user: hi}]\n")
    pytester.makeini("[pytest]\n" + (f"toolbench_base_url = {url['ini']}\n"
                                     if "ini" in given else ""))
    for variable in ("TOOLBENCH_BASE_URL", "OPENAI_BASE_URL"):
        if variable in given:
            monkeypatch.setenv(variable, url[variable])
    args = [f"--toolbench-base-url={url['cli']}"] if "cli" in given else []

    result = pytester.runpytest("--toolbench-live", *args)

    result.assert_outcomes(passed=1)
    received = {level: len(server.requests) for level, server in five_servers.items()}
    assert received == {level: int(level == highest) for level in LEVELS}


HEADER = "toolbench: mode=live, answers from {} (unless a case sets endpoint.base_url)"


@pytest.mark.parametrize(("apis", "shown"), [
    ("messages", "https://api.anthropic.com/v1"),
    ("chat,messages,gemini", ("https://api.openai.com/v1 (chat),"
                             " https://api.anthropic.com/v1 (messages),"
                             " https://generativelanguage.googleapis.com/v1beta (gemini)")),
    ("chat,responses", "https://api.openai.com/v1"),
], ids=["messages", "three_services", "one_service"])
def test_each_api_answers_from_its_own_service_unless_a_base_url_is_given(
        pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, apis: str,
        shown: str) -> None:
    """OPENAI_BASE_URL is an OpenAI endpoint: Messages and Gemini go to their own services
    without a base URL; TOOLBENCH_BASE_URL (or any other setting) is every API's."""
    pytester.makefile(".case.yaml", c="name: c\nstages: [{name: ask, user: hi}]\n")
    monkeypatch.setenv("OPENAI_BASE_URL", "https://api.openai.com/v1")
    result = pytester.runpytest("--toolbench-live", f"--toolbench-api={apis}", "--collect-only")
    result.stdout.fnmatch_lines([HEADER.format(shown)])

    monkeypatch.setenv("TOOLBENCH_BASE_URL", "http://127.0.0.1:8080/v1")
    result = pytester.runpytest("--toolbench-live", f"--toolbench-api={apis}", "--collect-only")
    result.stdout.fnmatch_lines([HEADER.format("http://127.0.0.1:8080/v1")])


@pytest.mark.parametrize(("environment", "case_endpoint", "expected"), [
    ({}, "", None),
    ({"OPENAI_API_KEY": "sk-fake-123"}, "", "Bearer sk-fake-123"),
    ({"OPENAI_API_KEY": "sk-fake-123", "MY_KEY": "sk-mine-456"}, "api_key_env: MY_KEY",
     "Bearer sk-mine-456"),
    ({"OPENAI_API_KEY": "sk-fake-123"}, "api_key_env: MY_KEY", None),
], ids=["no_key", "openai_api_key", "api_key_env", "api_key_env_unset"])
def test_authorization_header_only_with_a_key(
        pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, chat_server: ChatServer,
        environment: dict[str, str], case_endpoint: str, expected: str | None) -> None:
    chat_server.set_handler(echo)
    for name, value in environment.items():
        monkeypatch.setenv(name, value)
    pytester.makefile(".case.yaml", auth=textwrap.dedent(f"""\
        name: auth
        endpoint: {{base_url: "{chat_server.base_url}", {case_endpoint}}}
        stages: [{{name: ask, user: hi}}]
        """))

    result = pytester.runpytest("--toolbench-live")

    result.assert_outcomes(passed=1)
    (request,) = chat_server.requests
    assert request.headers.get("authorization") == expected


KEY_VARIABLES = ("OPENAI_API_KEY", "ANTHROPIC_API_KEY", "GEMINI_API_KEY", "GOOGLE_API_KEY")


@pytest.fixture
def hosted_on_loopback(monkeypatch: pytest.MonkeyPatch, chat_server: ChatServer) -> ChatServer:
    """No key in the environment, and the loopback server in place of every API's own
    hosted service (the registry's default base URLs): what it receives is what would
    have gone to the service, and nothing leaves the machine whatever the code does."""
    from pytest_toolbench import apis

    for name in KEY_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    for name, row in apis.REGISTRY.items():
        monkeypatch.setitem(apis.REGISTRY, name,
                            dataclasses.replace(row, base_url=chat_server.base_url))
    return chat_server


def test_no_key_for_an_apis_own_service_stops_the_item_before_sending(
        pytester: pytest.Pytester, hosted_on_loopback: ChatServer) -> None:
    pytester.makefile(".case.yaml", c="name: c\nmodel: m\nstages: [{name: ask, user: hi}]\n")

    result = pytester.runpytest("--toolbench-live", "--toolbench-api=chat,messages,gemini")

    result.assert_outcomes(failed=3)
    for api, variables in (("chat", "OPENAI_API_KEY"), ("messages", "ANTHROPIC_API_KEY"),
                           ("gemini", "GEMINI_API_KEY or GOOGLE_API_KEY")):
        result.stdout.fnmatch_lines([(
            f"c.case.yaml:1: c[[]m*]: no API key for {hosted_on_loopback.base_url}, the {api}"
            f" API's own service, which refuses a request without one; nothing was sent: set"
            f" {variables}, or give the base URL of another server (--toolbench-base-url,"
            " TOOLBENCH_BASE_URL or the case's endpoint.base_url)")])
    assert hosted_on_loopback.requests == []


def test_a_named_key_variable_is_the_one_to_set_and_with_a_key_the_request_goes(
        pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch,
        hosted_on_loopback: ChatServer) -> None:
    hosted_on_loopback.set_handler(echo)
    pytester.makefile(".case.yaml", c=textwrap.dedent("""\
        name: c
        endpoint: {api_key_env: TEAM_OPENAI_KEY}
        stages: [{name: ask, user: hi}]
        """))
    monkeypatch.delenv("TEAM_OPENAI_KEY", raising=False)
    unset = pytester.runpytest("--toolbench-live")
    unset.assert_outcomes(failed=1)
    unset.stdout.fnmatch_lines(["*nothing was sent: set TEAM_OPENAI_KEY, or give*"])
    assert hosted_on_loopback.requests == []

    monkeypatch.setenv("TEAM_OPENAI_KEY", "sk-team-123456")
    pytester.runpytest("--toolbench-live").assert_outcomes(passed=1)
    (request,) = hosted_on_loopback.requests
    assert request.headers["authorization"] == "Bearer sk-team-123456"


def test_without_a_key_another_server_is_asked(pytester: pytest.Pytester,
                                                monkeypatch: pytest.MonkeyPatch,
                                                chat_server: ChatServer) -> None:
    """A local server takes no key: a base URL of its own is enough."""
    chat_server.set_handler(echo)
    for name in KEY_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("TOOLBENCH_BASE_URL", chat_server.base_url)
    pytester.makefile(".case.yaml", c="name: c\nstages: [{name: ask, user: hi}]\n")
    pytester.runpytest("--toolbench-live", "--toolbench-api=chat,messages").assert_outcomes(
        passed=1, failed=1)  # messages: the echo is a chat reply, but it was asked
    assert sorted(request.path for request in chat_server.requests) == [
        "/v1/chat/completions", "/v1/messages"]


def test_report_header_shows_the_mode(pytester: pytest.Pytester) -> None:
    pytester.makefile(".case.yaml", c="name: c\nstages: [{name: ask, user: hi}]\n")

    replay = pytester.runpytest("--collect-only")
    live = pytester.runpytest("--collect-only", "--toolbench-live",
                              "--toolbench-base-url=http://127.0.0.1:9/v1")

    replay.stdout.fnmatch_lines(["toolbench: mode=replay*cassettes*"])
    live.stdout.fnmatch_lines(["toolbench: mode=live*http://127.0.0.1:9/v1*"])


def test_xdist_summary_lists_every_case(pytester: pytest.Pytester,
                                        chat_server: ChatServer) -> None:
    chat_server.set_handler(echo)
    bodies = [f"name: case_{n}\nstages: [{{name: ask, user: hi {n}, expect: {{text: hi {n}}}}}]\n"
              for n in range(4)]
    pytester.makefile(".case.yaml", many=cases(chat_server.base_url, *bodies))

    result = pytester.runpytest_subprocess("--toolbench-live", "-n", "2", timeout=60)

    result.assert_outcomes(passed=4)
    result.stdout.fnmatch_lines(["*2 workers*", "*= toolbench summary =*"])
    result.stdout.fnmatch_lines_random([f"*case_{n} *passed*" for n in range(4)])
    assert sorted(r.json()["messages"][-1]["content"] for r in chat_server.requests) == [
        f"hi {n}" for n in range(4)]


# -- Mistral's Magistral: reasoning as thinking content parts ---------------------------

THINKING = [{"type": "text", "text": "Paris is the capital "}, {"type": "text", "text": "of France."}]


def magistral_reply(request: RecordedRequest) -> Reply:
    """Magistral's shapes: ``content`` as a list of a thinking part (its own list of text
    chunks) and a text part, whole; streamed, each delta's content such a list."""
    if not request.json().get("stream"):
        body = completion()
        body["choices"][0]["message"]["content"] = [
            {"type": "thinking", "thinking": THINKING}, {"type": "text", "text": "Paris."}]
        return json_reply(body)
    chunks = chunks_for("Paris.")
    thinking = [{**chunks[0], "choices": [{"index": 0, "finish_reason": None, "delta": {
        "role": "assistant", "content": [{"type": "thinking", "thinking": [part]}]}}]}
        for part in THINKING]
    for chunk in chunks:
        for choice in chunk["choices"]:
            if isinstance(choice["delta"].get("content"), str):
                choice["delta"]["content"] = [{"type": "text", "text": choice["delta"]["content"]}]
    return sse_reply([*thinking, *chunks])


def test_magistral_thinking_parts_are_reasoning(pytester: pytest.Pytester,
                                                chat_server: ChatServer) -> None:
    chat_server.set_handler(magistral_reply)
    pytester.makefile(".case.yaml", magistral=cases(chat_server.base_url, """\
        name: capital
        stages:
          - name: ask
            user: Capital of France?
            stream: both
            expect: {text: Paris., reasoning: Paris is the capital of France.}
        """))
    pytester.runpytest("-p", "no:cacheprovider", "--toolbench-mode=live").assert_outcomes(
        passed=1)
