"""Choosing the wire API, and what every API shares: items per API, cassettes that know
their API, reasoning, both finish reasons, strict and allowed tools, parallel_tool_calls.

Each adapter's own translation and stream checks are in tests/test_wire_<api>.py.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

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

TEXT_CASE = """
name: hello
stages:
  - name: ask
    user: Say hi
    expect: {text: {$contains: hi}}
"""


def write_case(pytester: pytest.Pytester, body: str, base_url: str = "",
               name: str = "wire") -> Path:
    endpoint = f"endpoint: {{base_url: '{base_url}'}}\n" if base_url else ""
    return pytester.makefile(".case.yaml", **{name: endpoint + body})


def run(pytester: pytest.Pytester, *args: str) -> pytest.RunResult:
    return pytester.runpytest("-p", "no:cacheprovider", *args)


# -- choosing the API -------------------------------------------------------------------


def test_api_flag_makes_one_item_per_api_with_readable_ids(pytester: pytest.Pytester) -> None:
    write_case(pytester, "model: [m1, m2]\n" + TEXT_CASE)
    result = run(pytester, "--collect-only", "-q", "--toolbench-api=chat,responses,messages")
    result.stdout.fnmatch_lines([
        "wire.case.yaml::hello[m1]",
        "wire.case.yaml::hello[m1-responses]",
        "wire.case.yaml::hello[m1-messages]",
        "wire.case.yaml::hello[m2]",
        "wire.case.yaml::hello[m2-responses]",
        "wire.case.yaml::hello[m2-messages]",
        "6 tests collected*",
    ])


def test_case_api_beats_ini_and_the_flag_beats_both(pytester: pytest.Pytester) -> None:
    write_case(pytester, TEXT_CASE, name="plain")
    write_case(pytester, "endpoint: {api: messages}\n"
               + TEXT_CASE.replace("name: hello", "name: anthropic"), name="own")
    pytester.makeini("[pytest]\ntoolbench_api = responses\n")
    result = run(pytester, "--collect-only", "-q")
    result.stdout.fnmatch_lines(["own.case.yaml::anthropic[[]messages[]]",
                                 "plain.case.yaml::hello[[]responses[]]"])
    result = run(pytester, "--collect-only", "-q", "--toolbench-api=chat")
    result.stdout.fnmatch_lines(["own.case.yaml::anthropic", "plain.case.yaml::hello"])


def test_unknown_api_is_a_usage_error(pytester: pytest.Pytester) -> None:
    write_case(pytester, TEXT_CASE)
    result = run(pytester, "--toolbench-api=chat,graphql")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([
        "*--toolbench-api: unknown API 'graphql'; choose from chat, responses, messages*"])


def test_unknown_api_in_a_case_is_a_collection_error_at_its_line(
        pytester: pytest.Pytester) -> None:
    write_case(pytester, "endpoint:\n  api: soap\n" + TEXT_CASE)
    result = run(pytester)
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(["*wire.case.yaml:2*api*chat*responses*messages*"])


# -- cassettes ----------------------------------------------------------------------------


def test_a_cassette_records_its_api_and_refuses_another(pytester: pytest.Pytester,
                                                         chat_server: ChatServer) -> None:
    chat_server.enqueue(json_reply(completion("hi there")))
    write_case(pytester, TEXT_CASE, chat_server.base_url)
    run(pytester, "--toolbench-record").assert_outcomes(passed=1)
    cassette = pytester.path / "__cassettes__" / "wire" / "hello.yaml"
    assert "\napi: chat\n" in cassette.read_text()
    assert "path: /chat/completions" in cassette.read_text()  # where the API posts

    # The same file now claims to hold the Responses API's exchanges: replaying it over
    # chat must say so rather than answer chat requests with it.
    cassette.write_text(cassette.read_text().replace("\napi: chat\n", "\napi: responses\n"))
    result = run(pytester)
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines([
        ("*__cassettes__/wire/hello.yaml holds the responses API's exchanges, and this case"
        " speaks the chat API*record this one with*")])


def test_a_cassette_without_api_is_chat(pytester: pytest.Pytester,
                                        chat_server: ChatServer) -> None:
    """Cassettes recorded before a case could speak another API replay as chat."""
    chat_server.enqueue(json_reply(completion("hi there")))
    write_case(pytester, TEXT_CASE, chat_server.base_url)
    run(pytester, "--toolbench-record").assert_outcomes(passed=1)
    cassette = pytester.path / "__cassettes__" / "wire" / "hello.yaml"
    cassette.write_text(cassette.read_text().replace("\napi: chat\n", "\n"))
    run(pytester).assert_outcomes(passed=1)


# -- what every API shares ---------------------------------------------------------------

REASONING_CASE = """
name: think
stages:
  - name: ask
    user: Is 17 prime?
    stream: {stream}
    expect:
      text: "yes"
      reasoning: {{$contains: divisors}}
"""


@pytest.mark.parametrize("where", ["reasoning_content", "reasoning", "think"])
def test_reasoning_is_kept_apart_from_the_text(pytester: pytest.Pytester,
                                               chat_server: ChatServer, where: str) -> None:
    body = completion("yes")
    message = body["choices"][0]["message"]
    if where == "think":
        message["content"] = "<think>no divisors but 1 and 17</think>\n\nyes"
    else:
        message[where] = "no divisors but 1 and 17"
    chat_server.enqueue(json_reply(body))
    write_case(pytester, REASONING_CASE.format(stream="false"), chat_server.base_url)
    run(pytester, "--toolbench-live").assert_outcomes(passed=1)


def test_streamed_reasoning_deltas_and_both_variants_compared(
        pytester: pytest.Pytester, chat_server: ChatServer) -> None:
    chunks = chunks_for("yes")
    chunks.insert(1, {**chunks[1], "choices": [
        {"index": 0, "delta": {"reasoning_content": "no divisors"}, "finish_reason": None}]})
    plain = completion("yes")
    plain["choices"][0]["message"]["reasoning_content"] = "other divisors"
    chat_server.enqueue(sse_reply(chunks), json_reply(plain))
    write_case(pytester, REASONING_CASE.format(stream="both"), chat_server.base_url)
    result = run(pytester, "--toolbench-live")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*streamed and non-streamed replies differ in reasoning*"])


def test_absent_reasoning_and_the_transcript_shows_it(pytester: pytest.Pytester,
                                                      chat_server: ChatServer) -> None:
    body = completion("yes")
    body["choices"][0]["message"]["reasoning"] = "17 has no divisors"
    chat_server.enqueue(json_reply(body))
    write_case(pytester, """
name: quiet
stages:
  - name: ask
    user: Is 17 prime?
    expect: {reasoning: {$absent: true}}
""", chat_server.base_url)
    result = run(pytester, "--toolbench-live")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*reasoning: 17 has no divisors*"])


def test_finish_reason_is_normalised_and_the_apis_own_is_kept(
        pytester: pytest.Pytester, chat_server: ChatServer) -> None:
    body = completion(tool_calls=[("f", {})], finish_reason="function_call")
    chat_server.enqueue(json_reply(body))
    write_case(pytester, """
name: legacy
tools: [{name: f}]
stages:
  - name: ask
    user: call f
    expect: {finish_reason: tool_calls, api_finish_reason: function_call}
""", chat_server.base_url)
    run(pytester, "--toolbench-live").assert_outcomes(passed=1)


def test_the_transcript_gives_the_stop_reason_in_the_apis_own_words(
        pytester: pytest.Pytester, chat_server: ChatServer) -> None:
    chat_server.enqueue(json_reply(anthropic_message("hello")))
    write_case(pytester, """
name: hello
stages:
  - name: ask
    user: Say hi
    expect: {text: bye}
""", chat_server.base_url)
    result = run(pytester, "--toolbench-live", "--toolbench-api=messages")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*< 200 finish_reason=stop (end_turn)*",
                                 "*stop reason: end_turn (the stage ends)"])


def test_strict_tools_and_allowed_tools_reach_the_request(pytester: pytest.Pytester,
                                                          chat_server: ChatServer) -> None:
    chat_server.enqueue(json_reply(completion(tool_calls=[("f", {})])))
    write_case(pytester, """
name: strict
tools:
  - {name: f, strict: true, parameters: {type: object, properties: {}, additionalProperties: false}}
  - {name: g}
stages:
  - name: ask
    user: call f
    tool_choice: {allowed_tools: {mode: required, tools: [f]}}
""", chat_server.base_url)
    run(pytester, "--toolbench-live").assert_outcomes(passed=1)
    sent = chat_server.requests[0].json()
    assert sent["tools"][0]["function"]["strict"] is True
    assert "strict" not in sent["tools"][1]["function"]
    assert sent["tool_choice"] == {"type": "allowed_tools", "allowed_tools": {
        "mode": "required", "tools": [{"type": "function", "function": {"name": "f"}}]}}


STRICT_GAPS = {
    "nested object": ("""
      type: object
      properties:
        address:
          type: object
          properties: {street: {type: string}, zip: {type: string}}
          required: [street]
          additionalProperties: false
      required: [address]
      additionalProperties: false
""", "parameters.properties.address.required lacks 'zip'"),
    "array items": ("""
      type: object
      properties:
        stops: {type: array, items: {type: object, properties: {city: {type: string}},
                                     required: [city]}}
      required: [stops]
      additionalProperties: false
""", "parameters.properties.stops.items needs additionalProperties: false"),
    "defs and anyOf": ("""
      type: object
      properties:
        place: {anyOf: [{$ref: "#/$defs/city"}, {type: object, properties: {lat: {type: number}},
                                                   additionalProperties: false}]}
      required: [place]
      additionalProperties: false
      $defs:
        city: {type: object, properties: {name: {type: string}}, required: [name]}
""", ("parameters.properties.place.anyOf[[]1[]].required lacks 'lat'; parameters.$defs.city"
      " needs additionalProperties: false")),
    "top level": ("""
      type: object
      properties: {city: {type: string}, unit: {type: string}}
      required: [city]
""", "parameters.required lacks 'unit'; parameters needs additionalProperties: false"),
}


@pytest.mark.parametrize("kind", list(STRICT_GAPS))
def test_strict_true_with_a_schema_the_services_refuse_fails_the_items_of_apis_with_strict_mode(
        pytester: pytest.Pytester, kind: str) -> None:
    """OpenAI's chat completions and Responses API refuse (400) a strict schema with an
    optional property or one open to others, at any depth, and so does Anthropic's: their
    items fail at the tool's line, sending nothing. Gemini has no strict mode (strict is
    not sent), so its item runs (here: to the missing cassette)."""
    schema, gaps = STRICT_GAPS[kind]
    write_case(pytester, f"""
name: strict
model: m
tools:
  - name: ok
  - name: route
    strict: true
    parameters:{schema}stages: [{{name: ask, user: hi}}]
""")
    result = run(pytester, "--toolbench-api=chat,responses,messages,gemini")
    result.assert_outcomes(failed=4)
    for api in ("m", "m-responses", "m-messages"):
        result.stdout.fnmatch_lines([
            f"*case: strict[[]{api}[]]*",
            f"wire.case.yaml:1: strict[[]{api}[]]: the * API cannot express the case;*",
            (f"wire.case.yaml:5: case 'strict': strict: true needs every property in required*"
             f"or the services refuse the schema: {gaps}")])
    result.stdout.fnmatch_lines(["wire.case.yaml:1: strict[[]m-gemini[]]: no cassette*"])


def test_a_strict_schema_the_services_take_collects(pytester: pytest.Pytester) -> None:
    write_case(pytester, """
name: strict
tools:
  - name: route
    strict: true
    parameters:
      type: object
      properties:
        city: {type: string}
        unit: {type: [string, "null"]}
        stops: {type: array, items: {type: object, properties: {x: {type: number}},
                                     required: [x], additionalProperties: false}}
      required: [city, unit, stops]
      additionalProperties: false
  - {name: loose, strict: false, parameters: {type: object, properties: {a: {type: string}}}}
stages: [{name: ask, user: hi}]
""")
    run(pytester, "--collect-only").assert_outcomes()


PARAMS_CASE = """
name: params
params: {temperature: 0, seed: 7, max_tokens: 48}
stages:
  - name: ask
    user: hi
    params:
      top_p: 1
      frequency_penalty: 0.5
"""


def answer_each_api(request: RecordedRequest) -> Reply:
    """A plain text reply in the words of the API the request was sent to."""
    if request.path.endswith("/messages"):
        return json_reply(anthropic_message("hi"))
    if request.path.endswith("/responses"):
        return json_reply({"id": "resp_1", "object": "response", "status": "completed",
                           "output": [{"type": "message", "id": "msg_1", "role": "assistant",
                                       "status": "completed", "content": [
                                           {"type": "output_text", "text": "hi",
                                            "annotations": []}]}],
                           "usage": {"input_tokens": 5, "output_tokens": 1, "total_tokens": 6}})
    return json_reply(completion("hi"))


@pytest.mark.parametrize("api", ["responses", "messages"])
def test_a_params_key_the_apis_request_lacks_fails_that_apis_item_alone_at_its_line(
        pytester: pytest.Pytester, chat_server: ChatServer, api: str) -> None:
    """The service answers 400 to a field it does not know (the Responses API: "Unknown
    parameter: 'seed'"): the case's item over that API fails at the key's line, sending
    nothing, while its item over chat runs."""
    chat_server.set_handler(answer_each_api)
    write_case(pytester, PARAMS_CASE, chat_server.base_url)
    result = run(pytester, "--toolbench-live", f"--toolbench-api=chat,{api}")
    result.assert_outcomes(passed=1, failed=1)
    title = {"responses": "Responses API", "messages": "Messages API"}[api]
    result.stdout.fnmatch_lines([
        (f"wire.case.yaml:1: params[[]{api}[]]: the {api} API cannot express the case; nothing"
         " was sent*"),
        (f"wire.case.yaml:4: case 'params': the {title}'s request has no field 'seed', and the"
         " service refuses a field it does not know: give it only to the APIs that take it"
         " (params: {chat: {seed: 7}}), or leave this API out (endpoint.apis)"),
        (f"wire.case.yaml:10: case 'params': the {title}'s request has no field"
         " 'frequency_penalty',*")])
    assert "'temperature'" not in result.stdout.str()
    assert "'top_p'" not in result.stdout.str()
    assert [request.path for request in chat_server.requests] == ["/v1/chat/completions"]


def test_unsupported_skip_skips_the_apis_item_with_the_reason(
        pytester: pytest.Pytester, chat_server: ChatServer) -> None:
    chat_server.set_handler(answer_each_api)
    write_case(pytester, f"endpoint: {{base_url: '{chat_server.base_url}', unsupported: skip}}\n"
               + PARAMS_CASE)
    result = run(pytester, "--toolbench-live", "--toolbench-api=chat,responses,messages", "-rs")
    result.assert_outcomes(passed=1, skipped=2)
    result.stdout.fnmatch_lines([(
        "SKIPPED [[]1[]] wire.case.yaml*: wire.case.yaml:4: case 'params': the Responses"
        " API's request has no field 'seed'*; wire.case.yaml:10: case 'params': the Responses"
        " API's request has no field 'frequency_penalty'*")])
    assert [request.path for request in chat_server.requests] == ["/v1/chat/completions"]


def test_unsupported_takes_fail_or_skip(pytester: pytest.Pytester) -> None:
    write_case(pytester, "endpoint: {unsupported: ignore}\n" + TEXT_CASE)
    result = run(pytester, "--collect-only")
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(["*wire.case.yaml:1: endpoint.unsupported: *'fail' or 'skip'*"])


NARROWED_CASE = """name: narrowed
stages:
  - name: ask
    user: Say hi
    expect: {text: {$contains: hi}}
"""


def test_endpoint_apis_gives_the_cases_apis(pytester: pytest.Pytester) -> None:
    write_case(pytester, "endpoint: {apis: [chat, messages]}\n" + NARROWED_CASE)
    pytester.makeini("[pytest]\ntoolbench_api = responses\n")  # the case's own win
    result = run(pytester, "--collect-only", "-q")
    result.stdout.fnmatch_lines(["wire.case.yaml::narrowed", "wire.case.yaml::narrowed[[]messages[]]",
                                 "2 tests collected*"])


def test_endpoint_apis_narrows_the_flags_apis(pytester: pytest.Pytester,
                                              chat_server: ChatServer) -> None:
    """Under --toolbench-api, the items of the flag's APIs the case leaves out are skipped,
    saying why; the others run."""
    chat_server.set_handler(answer_each_api)
    write_case(pytester, f"endpoint: {{apis: [chat, messages], base_url: '{chat_server.base_url}'}}\n"
               + NARROWED_CASE)
    result = run(pytester, "--toolbench-live", "--toolbench-api=chat,responses,messages", "-rs")
    result.assert_outcomes(passed=2, skipped=1)
    result.stdout.fnmatch_lines([(
        "SKIPPED [[]1[]] wire.case.yaml*: wire.case.yaml:1: case 'narrowed' runs over chat,"
        " messages only (endpoint.apis)")])
    assert sorted(request.path for request in chat_server.requests) == [
        "/v1/chat/completions", "/v1/messages"]


@pytest.mark.parametrize(("endpoint", "says"), [
    ("{api: chat, apis: [chat]}", "endpoint.apis: give api (*) or apis (*), not both"),
    ("{apis: [chat, chat]}", "endpoint.apis[[]1[]]: duplicate API name 'chat'"),
    ("{apis: []}", "endpoint.apis: *at least 1 item*"),
    ("{apis: [chat, grpc]}", "endpoint.apis[[]1[]]: *'chat'*"),
], ids=["both", "twice", "empty", "unknown"])
def test_endpoint_apis_is_checked_at_its_line(pytester: pytest.Pytester, endpoint: str,
                                              says: str) -> None:
    write_case(pytester, f"endpoint: {endpoint}\n" + TEXT_CASE)
    result = run(pytester, "--collect-only")
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines([f"*wire.case.yaml:1: {says}*"])


PER_API_CASE = """
name: per_api
params:
  temperature: 0
  chat: {seed: 7}
  responses: {max_output_tokens: 16, store: false}
  messages: {top_k: 3}
stages:
  - name: ask
    user: Say hi
    params:
      top_p: 1
      chat: {seed: 8}
    expect: {text: {$contains: hi}}
"""


def test_params_named_like_an_api_go_to_that_api_alone(pytester: pytest.Pytester,
                                                        chat_server: ChatServer) -> None:
    """Shared params, the case's for the API over them, the stage's shared over those, the
    stage's for the API last; another API's never."""
    chat_server.set_handler(answer_each_api)
    write_case(pytester, PER_API_CASE, chat_server.base_url)
    result = run(pytester, "--toolbench-live", "--toolbench-api=chat,responses,messages")
    result.assert_outcomes(passed=3)
    sent = {request.path.rsplit("/", 1)[1]: request.json() for request in chat_server.requests}
    settings = {api: {key: value for key, value in body.items()
                      if key not in ("messages", "input", "model")}
                for api, body in sent.items()}
    assert settings == {
        "completions": {"temperature": 0, "seed": 8, "top_p": 1},
        "responses": {"temperature": 0, "max_output_tokens": 16, "store": False, "top_p": 1},
        "messages": {"temperature": 0, "top_k": 3, "top_p": 1, "max_tokens": 1024}}


def test_a_params_key_in_an_apis_own_params_is_named_at_its_line(
        pytester: pytest.Pytester) -> None:
    write_case(pytester, PER_API_CASE.replace("{max_output_tokens: 16, store: false}",
                                              "{max_output_tokens: 16, seed: 7}"))
    result = run(pytester, "--toolbench-api=responses")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines([("wire.case.yaml:5: case 'per_api': the Responses API's"
                                  " request has no field 'seed', and the service refuses a field"
                                  " it does not know: leave it out of params.responses")])


def test_a_list_under_messages_still_replaces_chats_conversation(
        pytester: pytest.Pytester, chat_server: ChatServer) -> None:
    """Only a mapping named like an API is that API's params: ``params: {messages: [...]}``
    is chat's request field, as before."""
    chat_server.set_handler(answer_each_api)
    write_case(pytester, """
name: written
stages:
  - name: ask
    user: ignored
    params: {messages: [{role: user, content: Say hi}]}
    expect: {text: {$contains: hi}}
""", chat_server.base_url)
    run(pytester, "--toolbench-live").assert_outcomes(passed=1)
    assert chat_server.requests[0].json()["messages"] == [{"role": "user", "content": "Say hi"}]


def test_chat_passes_any_params_key_through(pytester: pytest.Pytester) -> None:
    """vLLM, llama-server and others take many extensions of their own over chat."""
    write_case(pytester, PARAMS_CASE)
    run(pytester, "--collect-only", "--toolbench-api=chat").assert_outcomes()


THINKING_CASE = """
name: thinking
params: {{thinking: {{type: enabled, budget_tokens: 1024}}{limit}}}
stages: [{{name: ask, user: Is 17 prime?}}]
"""


def test_messages_thinking_with_the_default_token_limit_fails_the_item(
        pytester: pytest.Pytester) -> None:
    """budget_tokens must be at least 1024 and below max_tokens, whose default over the
    Messages API is 1024: no budget fits."""
    write_case(pytester, THINKING_CASE.format(limit=""))
    result = run(pytester, "--toolbench-api=messages")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines([
        ("wire.case.yaml:2: case 'thinking': *needs thinking.budget_tokens of at least 1024 and"
         " below max_tokens; here budget_tokens is 1024 and max_tokens 1024 (the default*")])


def test_messages_thinking_given_to_messages_alone_is_judged_with_its_own_limit(
        pytester: pytest.Pytester) -> None:
    write_case(pytester, THINKING_CASE.format(limit=", max_tokens: 100, messages: {max_tokens: 4096}"))
    run(pytester, "--collect-only", "--toolbench-api=messages").assert_outcomes()
    result = run(pytester, "--toolbench-api=messages")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*no cassette*"])  # nothing refused


def test_messages_thinking_with_room_for_its_budget_collects(pytester: pytest.Pytester) -> None:
    write_case(pytester, THINKING_CASE.format(limit=", max_tokens: 4096"))
    run(pytester, "--collect-only", "--toolbench-api=messages").assert_outcomes()


def test_allowed_tools_must_name_the_cases_tools(pytester: pytest.Pytester) -> None:
    write_case(pytester, """
name: strict
tools: [{name: f}]
stages:
  - name: ask
    user: call f
    tool_choice:
      allowed_tools:
        tools: [f, nope]
""")
    result = run(pytester)
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines([("*wire.case.yaml:8: *allowed tool 'nope' is not one of the"
                                 " case's tools (f)*")])


@pytest.mark.parametrize(("where", "line"), [("case", 2), ("stage", 7)])
def test_parallel_tool_calls_false_fails_two_calls(pytester: pytest.Pytester,
                                                   chat_server: ChatServer, where: str,
                                                   line: int) -> None:
    chat_server.enqueue(json_reply(completion(tool_calls=[("f", {}), ("g", {})])))
    case_params = "params: {parallel_tool_calls: false}\n" if where == "case" else ""
    stage_params = "    params: {parallel_tool_calls: false}\n" if where == "stage" else ""
    write_case(pytester, case_params + """name: one_at_a_time
tools: [{name: f}, {name: g}]
stages:
  - name: ask
    user: call both
""" + stage_params, chat_server.base_url)
    result = run(pytester, "--toolbench-live")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines([(f"*wire.case.yaml:{line}: *parallel_tool_calls is false,"
                                 " yet one reply made 2 tool calls: f, g*")])
    assert chat_server.requests[0].json()["parallel_tool_calls"] is False


def anthropic_message(text: str) -> dict[str, object]:
    return {"id": "msg_1", "type": "message", "role": "assistant", "model": "m",
            "content": [{"type": "text", "text": text}], "stop_reason": "end_turn",
            "usage": {"input_tokens": 7, "output_tokens": 3}}


def by_api(chat: Reply, messages: Reply) -> Callable[[RecordedRequest], Reply]:
    """Each API's requests answered with its own reply: the cases of two APIs run at once
    (record and live cases start ahead), so the order they ask in is not fixed."""
    return lambda request: messages if request.path.endswith("/messages") else chat


def test_each_api_records_its_own_cassette_and_replays_it(pytester: pytest.Pytester,
                                                          chat_server: ChatServer) -> None:
    chat_server.set_handler(by_api(json_reply(completion("hi there")),
                                   json_reply(anthropic_message("hi from messages"))))
    write_case(pytester, TEXT_CASE, chat_server.base_url)
    run(pytester, "--toolbench-record", "--toolbench-api=chat,messages").assert_outcomes(
        passed=2)
    assert sorted(request.path for request in chat_server.requests) == [
        "/v1/chat/completions", "/v1/messages"]
    folder = pytester.path / "__cassettes__" / "wire"
    messages = (folder / "hello[messages].yaml").read_text()
    assert "\napi: messages\n" in messages and "path: /messages\n" in messages
    assert "path: /chat/completions\n" in (folder / "hello.yaml").read_text()
    result = run(pytester, "--toolbench-api=chat,messages", "-v")
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines(["*hello PASSED*", "*hello[[]messages[]] PASSED*"])


def test_summary_gives_a_pass_rate_per_api(pytester: pytest.Pytester,
                                           chat_server: ChatServer) -> None:
    chat_server.set_handler(by_api(json_reply(completion("hi there")),
                                   json_reply(anthropic_message("no greeting"))))
    write_case(pytester, TEXT_CASE, chat_server.base_url)
    report = pytester.path / "report.json"
    result = run(pytester, "--toolbench-live", "--toolbench-api=chat,messages",
                 f"--toolbench-report={report}")
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines([
        "*pass rate per API*", "*api*runs passed*pass rate*",
        "*chat*1/1*100%*", "*messages*0/1*0%*"])
    cases = json.loads(report.read_text())["cases"]
    assert sorted(case["api"] for case in cases) == ["chat", "messages"]


def test_the_record_command_names_the_forced_model_and_api(pytester: pytest.Pytester) -> None:
    """An item a flag made exists only with that flag: the command that records its
    cassette must give it again."""
    write_case(pytester, TEXT_CASE)
    result = run(pytester, "--toolbench-api=chat,responses", "--toolbench-model=m 1")
    result.assert_outcomes(failed=2)
    result.stdout.fnmatch_lines([
        ("*record it with: pytest 'wire.case.yaml::hello[[]m 1[]]' --toolbench-record"
         " --toolbench-model 'm 1' --toolbench-api chat"),
        ("*record it with: pytest 'wire.case.yaml::hello[[]m 1-responses[]]'"
         " --toolbench-record --toolbench-model 'm 1' --toolbench-api responses")])
