"""The Gemini adapter: requests built from a chat-shaped conversation, replies and SSE
streams of the real service's shape read into one Reply; then whole cases run with
``endpoint.api: gemini`` against a loopback server on Gemini's routes."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Sequence
from typing import Any

import pytest
from support.chat_server import RecordedRequest, Reply, json_reply
from support.gemini_server import (
    GeminiServer,
    call,
    gemini_error,
    gemini_sse,
    response,
    retry_info,
    text,
)

from pytest_toolbench.casefile.schema import Tool, ToolChoiceFunction
from pytest_toolbench.commands.cli import main
from pytest_toolbench.records import Reply as WireReply
from pytest_toolbench.records import StreamEvent
from pytest_toolbench.wire import wire_api
from pytest_toolbench.wire.base import RequestParts

GEMINI = wire_api("gemini")
WEATHER = Tool(name="get_weather", description="Weather",
               parameters={"type": "object", "properties": {"city": {"type": "string"}}})


@pytest.fixture
def gemini_server() -> Iterator[GeminiServer]:
    with GeminiServer().start() as server:
        yield server


def read_stream(events: Sequence[dict[str, Any]]) -> WireReply:
    reader = GEMINI.stream_reader()
    for number, event in enumerate(events, start=1):
        reader.add(StreamEvent(json.dumps(event), 10.0 * number), 10.0 * number)
    return reader.finish()


def read_body(body: Any, status: int = 200) -> WireReply:
    return GEMINI.read_body(status, json.dumps(body), "application/json")


def build(messages: list[dict[str, Any]], **given: Any) -> dict[str, Any]:
    return GEMINI.request(RequestParts(model="gemini-2.5-flash", messages=messages, **given))


# --- the seam -------------------------------------------------------------------------------


def test_path_carries_the_model_and_the_streaming_choice_and_the_key_its_header() -> None:
    assert GEMINI.url_path("gemini-2.5-flash", False) == "models/gemini-2.5-flash:generateContent"
    assert GEMINI.url_path("models/gemini-3-pro", True) == \
        "models/gemini-3-pro:streamGenerateContent?alt=sse"
    assert GEMINI.headers("AIza-key-123") == {"x-goog-api-key": "AIza-key-123"}
    assert GEMINI.headers(None) == {}
    assert GEMINI.row.key_envs == ("GEMINI_API_KEY", "GOOGLE_API_KEY")
    assert GEMINI.row.base_url == "https://generativelanguage.googleapis.com/v1beta"


# --- the request ------------------------------------------------------------------------------


def test_conversation_as_contents_with_system_instruction_and_function_responses() -> None:
    body = build([
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Weather in Paris and Rome?"},
        {"role": "assistant", "content": "", "tool_calls": [
            {"id": "c1", "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}},
            {"id": "c2", "function": {"name": "get_weather", "arguments": "not json"}}]},
        {"role": "tool", "tool_call_id": "c1", "content": '{"temp_c": 21}'},
        {"role": "tool", "tool_call_id": "c2", "content": "arguments are not valid JSON"},
    ], failed_results=frozenset({4}), tools=[WEATHER], tool_choice="required",
        params={"max_tokens": 64, "temperature": 0, "top_p": 0.5, "stop": ["END"]})
    assert body["systemInstruction"] == {"parts": [{"text": "Be brief."}]}
    assert body["contents"] == [
        {"role": "user", "parts": [{"text": "Weather in Paris and Rome?"}]},
        {"role": "model", "parts": [
            {"functionCall": {"name": "get_weather", "args": {"city": "Paris"}}},
            {"functionCall": {"name": "get_weather", "args": {}}}]},
        {"role": "user", "parts": [
            {"functionResponse": {"name": "get_weather", "response": {"output": {"temp_c": 21}}}},
            {"functionResponse": {"name": "get_weather",
                                  "response": {"error": "arguments are not valid JSON"}}}]},
    ]
    assert body["tools"] == [{"functionDeclarations": [{
        "name": "get_weather", "description": "Weather",
        "parametersJsonSchema": WEATHER.parameters}]}]
    assert body["toolConfig"] == {"functionCallingConfig": {"mode": "ANY"}}
    assert body["generationConfig"] == {"maxOutputTokens": 64, "temperature": 0, "topP": 0.5,
                                        "stopSequences": ["END"]}
    assert "model" not in body and "stream" not in body


@pytest.mark.parametrize(("choice", "config"), [
    ("auto", {"mode": "AUTO"}),
    ("none", {"mode": "NONE"}),
    ("required", {"mode": "ANY"}),
    (ToolChoiceFunction(name="get_weather"),
     {"mode": "ANY", "allowedFunctionNames": ["get_weather"]}),
])
def test_tool_choice_as_function_calling_config(choice: Any, config: dict[str, Any]) -> None:
    body = build([{"role": "user", "content": "hi"}], tools=[WEATHER], tool_choice=choice)
    assert body["toolConfig"] == {"functionCallingConfig": config}


def test_reasoning_settings_go_into_thinking_config() -> None:
    body = build([{"role": "user", "content": "hi"}],
                 params={"thinking_budget": 512, "include_thoughts": True, "seed": 3})
    assert body["generationConfig"] == {
        "seed": 3, "thinkingConfig": {"thinkingBudget": 512, "includeThoughts": True}}


def test_a_native_turn_goes_back_part_for_part_and_google_ids_with_the_results() -> None:
    native = [text("", thought=True, thoughtSignature="sig-text"),
              call("get_weather", {"city": "Paris"}, thoughtSignature="sig-1") |
              {"functionCall": {"name": "get_weather", "args": {"city": "Paris"}, "id": "g-1"}}]
    body = build([
        {"role": "user", "content": "Weather?"},
        {"role": "assistant", "content": "", "tool_calls": [
            {"id": "g-1", "function": {"name": "get_weather", "arguments": '{"city":"Paris"}'}}]},
        {"role": "tool", "tool_call_id": "g-1", "content": "sunny"},
    ], native={1: native})
    assert body["contents"][1] == {"role": "model", "parts": native}
    assert body["contents"][2]["parts"] == [{"functionResponse": {
        "name": "get_weather", "response": {"output": "sunny"}, "id": "g-1"}}]


# --- replies ------------------------------------------------------------------------------------


@pytest.mark.parametrize(("api", "normalised"), [
    ("STOP", "stop"), ("MAX_TOKENS", "length"), ("SAFETY", "content_filter"),
    ("RECITATION", "content_filter"), ("BLOCKLIST", "content_filter"),
    ("PROHIBITED_CONTENT", "content_filter"), ("SPII", "content_filter"),
    ("OTHER", "OTHER"), ("MALFORMED_FUNCTION_CALL", "MALFORMED_FUNCTION_CALL"),
    ("UNEXPECTED_TOOL_CALL", "UNEXPECTED_TOOL_CALL"),
    # further values of the official SDK's FinishReason (google-genai types)
    ("IMAGE_PROHIBITED_CONTENT", "content_filter"), ("MODEL_ARMOR", "content_filter"),
    ("TOO_MANY_TOOL_CALLS", "TOO_MANY_TOOL_CALLS"),
    ("MISSING_THOUGHT_SIGNATURE", "MISSING_THOUGHT_SIGNATURE"),
])
def test_each_finish_reason(api: str, normalised: str) -> None:
    reply = read_body(response(text("x"), finish=api, finishMessage="Malformed function call:"
                               " print(default_api.get_weather(city=Paris)"))
    assert (reply.finish_reason, reply.api_finish_reason) == (normalised, api)
    named = [p for p in reply.problems if p.startswith("gemini body: finish reason:")]
    if api in ("MALFORMED_FUNCTION_CALL", "UNEXPECTED_TOOL_CALL", "TOO_MANY_TOOL_CALLS",
               "MISSING_THOUGHT_SIGNATURE"):
        assert named and api in named[0]
        assert "print(default_api.get_weather" in named[0] or api != "MALFORMED_FUNCTION_CALL"
    else:
        assert reply.problems == []


def test_a_call_ends_stop_and_reads_as_tool_calls_with_own_unique_ids() -> None:
    reply = read_body(response(call("get_weather", {"city": "Paris"}, thoughtSignature="s"),
                               call("get_weather", {"city": "Paris"})))
    assert reply.finish_reason == "tool_calls"
    assert [(c.name, c.arguments) for c in reply.tool_calls] == [
        ("get_weather", {"city": "Paris"})] * 2
    ids = [c.id for c in reply.tool_calls]
    assert all(ids) and len(set(ids)) == 2


def test_a_blocked_prompt_is_refused_and_thinking_without_parts_is_no_problem() -> None:
    blocked = read_body({"promptFeedback": {"blockReason": "PROHIBITED_CONTENT"},
                         "usageMetadata": {"promptTokenCount": 8, "totalTokenCount": 8}})
    assert (blocked.finish_reason, blocked.api_finish_reason) == (
        "content_filter", "PROHIBITED_CONTENT")
    assert blocked.problems == []
    spent = read_body({"candidates": [{"content": {"role": "model"}, "finishReason": "MAX_TOKENS"}],
                       "usageMetadata": {"promptTokenCount": 8, "thoughtsTokenCount": 60,
                                         "totalTokenCount": 68}})
    assert (spent.text, spent.finish_reason, spent.problems) == ("", "length", [])
    assert spent.usage is not None and spent.usage["completion_tokens"] == 60


def test_error_body_message_and_retry_delay() -> None:
    reply = GEMINI.read_body(429, json.dumps({"error": {
        "code": 429, "message": "Quota exceeded", "status": "RESOURCE_EXHAUSTED",
        "details": [retry_info("34.4s")]}}), "application/json")
    assert (reply.error, reply.retry_after_s) == ("Quota exceeded", 34.4)


# --- streams ----------------------------------------------------------------------------------


def test_stream_of_fragments_keeps_the_final_empty_part_and_its_signature() -> None:
    reply = read_stream([
        response(text("Sunny "), finish=None, usage={"promptTokenCount": 9, "totalTokenCount": 9}),
        response(text("in Paris."), finish=None,
                 usage={"promptTokenCount": 9, "candidatesTokenCount": 4, "totalTokenCount": 13}),
        response(text("", thoughtSignature="c2lnbmF0dXJl"),
                 usage={"promptTokenCount": 9, "candidatesTokenCount": 3, "totalTokenCount": 12}),
    ])
    assert (reply.text, reply.finish_reason, reply.problems) == ("Sunny in Paris.", "stop", [])
    assert reply.native_turn == [text("Sunny "), text("in Paris."),
                                 text("", thoughtSignature="c2lnbmF0dXJl")]
    assert reply.usage is not None and reply.usage["total_tokens"] == 12  # restated, not summed
    assert reply.stream is not None and (reply.stream.done, reply.stream.chunks) == (True, 3)
    assert reply.ttft_ms == 10.0


def test_stream_without_a_finish_reason_is_not_done_and_late_content_is_a_problem() -> None:
    open_ended = read_stream([response(text("Hi"), finish=None)])
    assert open_ended.stream is not None and open_ended.stream.done is False
    late = read_stream([response(text("Hi")), response(text(" again"), finish=None)])
    assert [p.split(":")[1].strip() for p in late.problems] == ["terminal event"]


def test_a_broken_function_call_part_is_named() -> None:
    reply = read_stream([response(call("get_weather", None), {"functionCall": {"args": {}}})])
    assert len(reply.problems) == 2
    assert all(p.startswith("gemini stream: function call: event 1:") for p in reply.problems)


def test_thought_parts_are_reasoning() -> None:
    reply = read_stream([response(text("**Planning**", thought=True), finish=None),
                         response(text("Done."))])
    assert (reply.reasoning, reply.text) == ("**Planning**", "Done.")


# --- through the plugin -----------------------------------------------------------------------


AGENT_CASE = """
name: weather
model: gemini-3-pro-preview
endpoint: {{api: gemini, base_url: '{url}'}}
params: {{include_thoughts: true}}
tools:
  - name: get_weather
    parameters: {{type: object, properties: {{city: {{type: string}}}}}}
    result: {{temp_c: 21}}
stages:
  - name: ask
    user: Weather in Paris, then in Rome?
    run_tools: true
    stream: {stream}
    expect:
      text: {{$contains: mild}}
      tool_calls: [{{name: get_weather}}, {{name: get_weather}}]
      finish_reason: stop
      api_finish_reason: STOP
      usage: {{total_tokens: 30}}
"""


def agent_handler(server: GeminiServer, stream: bool) -> Any:
    """Two tool rounds, each call with a signature that must come back, then an answer."""
    rounds = [
        [response(text("Let me look.", thought=True), finish=None),
         response(call("get_weather", {"city": "Paris"}, thoughtSignature="sig-paris"))],
        [response(call("get_weather", {"city": "Rome"}, thoughtSignature="sig-rome"),
                  usage={"promptTokenCount": 20, "candidatesTokenCount": 5,
                         "totalTokenCount": 25})],
        [response(text("Both mild, "), finish=None),
         response(text("21 degrees."), finish=None),
         response(text("", thoughtSignature="sig-end"),
                  usage={"promptTokenCount": 24, "candidatesTokenCount": 6,
                         "totalTokenCount": 30})],
    ]
    server.remember("get_weather", {"city": "Paris"}, "sig-paris")
    server.remember("get_weather", {"city": "Rome"}, "sig-rome")

    def handle(request: RecordedRequest) -> Reply:
        turn = sum(1 for content in request.json()["contents"] if content["role"] == "model")
        events = rounds[turn]
        if stream:
            return gemini_sse(events, split_bytes=7)
        merged = [part for event in events for part in event["candidates"][0]["content"]["parts"]]
        return json_reply(response(*merged, usage=events[-1]["usageMetadata"]))
    return handle


@pytest.mark.parametrize("stream", ["true", "false"])
def test_the_agent_loop_sends_every_part_back_with_its_signature(
        pytester: pytest.Pytester, gemini_server: GeminiServer, stream: str) -> None:
    gemini_server.set_handler(agent_handler(gemini_server, stream == "true"))
    pytester.makefile(".case.yaml", g=AGENT_CASE.format(url=gemini_server.base_url,
                                                         stream=stream))
    result = pytester.runpytest("--toolbench-live", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=1)
    paths = [request.path for request in gemini_server.requests]
    suffix = ":streamGenerateContent?alt=sse" if stream == "true" else ":generateContent"
    assert paths == [f"/v1beta/models/gemini-3-pro-preview{suffix}"] * 3
    last = gemini_server.requests[-1].json()["contents"]
    assert [turn["role"] for turn in last] == ["user", "model", "user", "model", "user"]
    signed = [part.get("thoughtSignature") for turn in last if turn["role"] == "model"
              for part in turn["parts"] if "functionCall" in part]
    assert signed == ["sig-paris", "sig-rome"]
    if stream == "true":  # every part exactly as received, the thought part included
        assert last[1]["parts"][0] == text("Let me look.", thought=True)
    assert last[2]["parts"] == [{"functionResponse": {
        "name": "get_weather", "response": {"output": {"temp_c": 21}}}}]


def test_a_lost_signature_is_refused_as_the_service_refuses_it(
        gemini_server: GeminiServer) -> None:
    gemini_server.remember("get_weather", {}, "sig")
    refusal = gemini_server.refusal({"contents": [
        {"role": "model", "parts": [call("get_weather", {})]}]})
    assert refusal is not None and refusal.status == 400


BOTH_CASE = """
name: both
model: gemini-2.5-flash
endpoint: {{api: gemini, base_url: '{url}'}}
tools:
  - name: get_weather
    parameters: {{type: object, properties: {{city: {{type: string}}}}}}
stages:
  - name: ask
    user: Weather in Paris?
    stream: both
    expect:
      tool_calls: [{{name: get_weather, arguments: {{city: Paris}}}}]
      finish_reason: tool_calls
"""


def test_stream_both_agrees_and_records_and_replays_and_diffs(
        pytester: pytest.Pytester, gemini_server: GeminiServer,
        capsys: pytest.CaptureFixture[str]) -> None:
    def handle(request: RecordedRequest) -> Reply:
        answer = response(call("get_weather", {"city": "Paris"}))
        return gemini_sse([answer]) if "alt=sse" in request.path else json_reply(answer)

    gemini_server.set_handler(handle)
    pytester.makefile(".case.yaml", g=BOTH_CASE.format(url=gemini_server.base_url))
    pytester.runpytest("--toolbench-record", "-p", "no:cacheprovider").assert_outcomes(passed=1)
    cassette = next((pytester.path / "__cassettes__").rglob("*.yaml")).read_text()
    assert "api: gemini" in cassette
    assert "path: /models/gemini-2.5-flash:streamGenerateContent?alt=sse" in cassette
    assert "path: /models/gemini-2.5-flash:generateContent" in cassette
    gemini_server.close()
    replayed = pytester.runpytest("-p", "no:cacheprovider")
    replayed.assert_outcomes(passed=1)
    old = pytester.path / "__cassettes__"
    new = pytester.path / "new_cassettes"
    new.mkdir()
    for path in old.rglob("*.yaml"):
        changed = path.read_text().replace('"city": "Paris"', '"city": "Rome"')
        (new / path.relative_to(old)).parent.mkdir(parents=True, exist_ok=True)
        (new / path.relative_to(old)).write_text(changed)
    capsys.readouterr()
    main(["diff", str(old), str(new)])
    said = capsys.readouterr().out
    assert 'exchange 1: get_weather city: "Paris" -> "Rome"' in said  # the stream's
    assert 'exchange 2: get_weather city: "Paris" -> "Rome"' in said  # the whole body's


def test_overloaded_is_retried_and_a_retry_delay_is_honoured(
        pytester: pytest.Pytester, gemini_server: GeminiServer) -> None:
    gemini_server.enqueue(
        gemini_error(503, "The model is overloaded. Please try again later.", "UNAVAILABLE"),
        gemini_error(429, "Quota exceeded", "RESOURCE_EXHAUSTED", [retry_info("0.3s")]),
        json_reply(response(text("hi there"))))
    pytester.makefile(".case.yaml", g=f"""
name: retried
model: gemini-2.5-flash
endpoint: {{api: gemini, base_url: '{gemini_server.base_url}', retries: 2}}
stages:
  - name: ask
    user: Say hi
    expect: {{text: {{$contains: hi}}}}
""")
    report = pytester.path / "report.json"
    result = pytester.runpytest("--toolbench-live", "-p", "no:cacheprovider",
                                f"--toolbench-report={report}")
    result.assert_outcomes(passed=1)
    stage = json.loads(report.read_text())["cases"][0]["runs"][0]["stages"][0]
    retries = stage["attempts"][0]["turns"][0]["retries"]
    assert "HTTP 503: The model is overloaded" in retries[0]
    assert re.search(r"HTTP 429: Quota exceeded\); retried after 0\.30 s", retries[1])


def test_the_key_is_sent_as_x_goog_api_key_and_scrubbed_with_a_key_query(
        pytester: pytest.Pytester, gemini_server: GeminiServer,
        monkeypatch: pytest.MonkeyPatch) -> None:
    key, query_key = "AIzaSyFAKE-header-key-0001", "AIzaSyFAKE-query-key-0002"
    monkeypatch.delenv("GEMINI_API_KEY", raising=False)
    monkeypatch.setenv("GOOGLE_API_KEY", key)
    gemini_server.set_handler(lambda request: json_reply(response(text(
        f"echo {request.headers.get('x-goog-api-key')} {query_key}"))))
    pytester.makefile(".case.yaml", g=f"""
name: keyed
model: gemini-2.5-flash
endpoint: {{api: gemini, base_url: '{gemini_server.base_url}?key={query_key}'}}
stages:
  - name: ask
    user: Say hi
    expect: {{text: {{$contains: nothing}}}}
""")
    result = pytester.runpytest("--toolbench-record", "-p", "no:cacheprovider")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*> request 1: 1 message, last user: Say hi"])
    request = gemini_server.requests[0]
    assert request.headers["x-goog-api-key"] == key
    assert f"key={query_key}" in request.path
    cassette = next((pytester.path / "__cassettes__").rglob("*.yaml")).read_text()
    shown = result.stdout.str()
    for secret in (key, query_key):
        assert secret not in cassette and secret not in shown
    assert "<scrubbed>" in cassette


@pytest.mark.parametrize(("params", "model", "says"), [
    ("{thinkingConfig: {thinkingBudget: 100, thinkingLevel: low}}", "gemini-3-pro",
     "thinkingBudget together with thinkingLevel"),
    ("{presence_penalty: 0.5}", "gemini-2.5-flash", "presencePenalty on gemini-2.5-flash"),
])
def test_requests_the_service_refuses_fail_their_item_unsent(
        pytester: pytest.Pytester, params: str, model: str, says: str) -> None:
    pytester.makefile(".case.yaml", g=f"""
name: refused
model: {model}
endpoint: {{api: gemini}}
params: {params}
stages:
  - name: ask
    user: hi
""")
    result = pytester.runpytest("-p", "no:cacheprovider", "--toolbench-live",
                                "--toolbench-base-url", "http://127.0.0.1:9/v1")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines([f"g.case.yaml:4: case 'refused': *{says}*"])
    assert "ConnectError" not in result.stdout.str()  # nothing was sent


def test_the_command_lines_model_is_the_one_collection_checks(pytester: pytest.Pytester) -> None:
    """A case without a model runs over Gemini with --toolbench-model's, and the service's
    refusals are judged for that model."""
    pytester.makefile(".case.yaml", g="""
name: penalised
endpoint: {api: gemini}
params: {presence_penalty: 0.5}
stages:
  - name: ask
    user: hi
""")
    without = pytester.runpytest("-p", "no:cacheprovider")
    without.assert_outcomes(failed=1)
    without.stdout.fnmatch_lines(["g.case.yaml:1: case 'penalised': *give the case a model*"])
    newer = pytester.runpytest("-p", "no:cacheprovider", "--toolbench-model", "gemini-3-pro")
    newer.assert_outcomes(failed=1)
    newer.stdout.fnmatch_lines(["*penalised?gemini-3-pro-gemini?: no cassette*"])
    older = pytester.runpytest("-p", "no:cacheprovider", "--toolbench-model", "gemini-2.5-flash")
    older.assert_outcomes(failed=1)
    older.stdout.fnmatch_lines(
        ["g.case.yaml:3: case 'penalised': *presencePenalty on gemini-2.5-flash*"])
