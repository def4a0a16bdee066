"""The Messages API adapter: requests built from a chat-shaped conversation, message bodies
and event streams read into one Reply, each protocol slip named; then whole cases run with
``--toolbench-api=messages`` against the loopback server's ``/v1/messages``."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import pytest
from support.anthropic_rules import refusal
from support.chat_server import (
    ChatServer,
    RecordedRequest,
    completion,
    json_reply,
    named_event,
    sse_reply,
)

from pytest_toolbench.casefile.schema import Case, Tool, ToolChoiceFunction
from pytest_toolbench.records import Reply, StreamEvent
from pytest_toolbench.wire import wire_api
from pytest_toolbench.wire.base import RequestParts
from pytest_toolbench.wire.messages import DEFAULT_MAX_TOKENS, MESSAGES

# --- what an Anthropic server sends -------------------------------------------------------


def text_block(text: str) -> dict[str, Any]:
    return {"type": "text", "text": text}


def tool_use(id: str | None, name: str, input: Any) -> dict[str, Any]:
    block = {"type": "tool_use", "name": name, "input": input}
    if id is not None:
        block["id"] = id
    return block


def message(*blocks: dict[str, Any], stop_reason: str = "end_turn",
            usage: dict[str, Any] | None = None) -> dict[str, Any]:
    """A whole ``message`` body."""
    return {"id": "msg_1", "type": "message", "role": "assistant", "model": "claude-test",
            "content": list(blocks), "stop_reason": stop_reason, "stop_sequence": None,
            "usage": usage or {"input_tokens": 12, "output_tokens": 6}}


def started(usage: dict[str, Any] | None = None) -> dict[str, Any]:
    return {"type": "message_start", "message": {
        "id": "msg_1", "type": "message", "role": "assistant", "content": [],
        "model": "claude-test", "stop_reason": None,
        "usage": usage or {"input_tokens": 12, "output_tokens": 1}}}


def block_start(index: int, block: dict[str, Any]) -> dict[str, Any]:
    return {"type": "content_block_start", "index": index, "content_block": block}


def delta(index: int, kind: str, **fields: Any) -> dict[str, Any]:
    return {"type": "content_block_delta", "index": index, "delta": {"type": kind, **fields}}


def text_delta(index: int, text: str) -> dict[str, Any]:
    return delta(index, "text_delta", text=text)


def json_delta(index: int, partial: str) -> dict[str, Any]:
    return delta(index, "input_json_delta", partial_json=partial)


def block_stop(index: int) -> dict[str, Any]:
    return {"type": "content_block_stop", "index": index}


def message_delta(stop_reason: str | None, output_tokens: int | None = 6) -> dict[str, Any]:
    return {"type": "message_delta", "delta": {"stop_reason": stop_reason, "stop_sequence": None},
            "usage": {"output_tokens": output_tokens}}


STOP = {"type": "message_stop"}


def text_events(text: str, index: int = 0, size: int = 4) -> list[dict[str, Any]]:
    """A text block streamed ``size`` characters a delta."""
    pieces = [text[i:i + size] for i in range(0, len(text), size)]
    return [block_start(index, text_block("")), *(text_delta(index, p) for p in pieces),
            block_stop(index)]


def call_events(index: int, id: str, name: str, arguments: str,
                size: int = 3) -> list[dict[str, Any]]:
    """A tool_use block whose arguments come ``size`` characters a delta."""
    pieces = [arguments[i:i + size] for i in range(0, len(arguments), size)]
    return [block_start(index, tool_use(id, name, {})), *(json_delta(index, p) for p in pieces),
            block_stop(index)]


def whole_stream(*blocks: list[dict[str, Any]], stop_reason: str = "end_turn"
                 ) -> list[dict[str, Any]]:
    """message_start, the blocks' events, message_delta and message_stop, as Anthropic sends."""
    return [started(), *(event for block in blocks for event in block),
            message_delta(stop_reason), STOP]


def read_stream(events: Sequence[dict[str, Any] | StreamEvent], truncated: bool = False) -> Reply:
    """Feed the events (named after their type, as the API sends them) at 10, 20... ms."""
    reader = MESSAGES.stream_reader()
    for number, event in enumerate(events, start=1):
        if isinstance(event, dict):
            event = StreamEvent(json.dumps(event), 10.0 * number, str(event.get("type")))
        reader.add(event, event.offset_ms if event.offset_ms else 10.0 * number)
    return reader.finish(truncated=truncated)


def read_body(body: Any, status: int = 200) -> Reply:
    raw = body if isinstance(body, (str, bytes)) else json.dumps(body)
    return MESSAGES.read_body(status, raw, "application/json")


def named(problems: list[str], check: str) -> list[str]:
    """The problems of one check, by the name they start with."""
    return [problem for problem in problems if problem.startswith(check + ":")]


# --- the request ----------------------------------------------------------------------------

WEATHER = Tool(name="get_weather", description="Weather in a city",
               parameters={"type": "object", "properties": {"city": {"type": "string"}}},
               result={"temp_c": 21})


def build(messages: list[dict[str, Any]], **parts: Any) -> dict[str, Any]:
    return MESSAGES.request(RequestParts(model="claude-test", messages=messages, **parts))


def assistant_calls(*calls: tuple[str, str, str], text: str = "") -> dict[str, Any]:
    return {"role": "assistant", "content": text, "tool_calls": [
        {"id": id, "type": "function", "function": {"name": name, "arguments": arguments}}
        for id, name, arguments in calls]}


def test_agent_loop_conversation_as_content_blocks() -> None:
    body = build([
        {"role": "system", "content": "You answer briefly."},
        {"role": "system", "content": [{"type": "text", "text": "Use metric units."}]},
        {"role": "user", "content": "Weather in Paris and Lyon?"},
        assistant_calls(("toolu_1", "get_weather", '{"city": "Paris"}'),
                        ("toolu_2", "get_weather", '{"city":"Lyon"}'), text="Checking."),
        {"role": "tool", "tool_call_id": "toolu_1", "content": '{"temp_c": 21}'},
        {"role": "tool", "tool_call_id": "toolu_2", "content": '{"temp_c": 19}'},
        {"role": "user", "content": "And in Fahrenheit?"},
    ], tools=[WEATHER], params={"temperature": 0}, stream=True)
    assert body == {
        "model": "claude-test",
        "system": "You answer briefly.\n\nUse metric units.",
        "messages": [
            {"role": "user", "content": "Weather in Paris and Lyon?"},
            {"role": "assistant", "content": [
                {"type": "text", "text": "Checking."},
                {"type": "tool_use", "id": "toolu_1", "name": "get_weather",
                 "input": {"city": "Paris"}},
                {"type": "tool_use", "id": "toolu_2", "name": "get_weather",
                 "input": {"city": "Lyon"}}]},
            {"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": "toolu_1", "content": '{"temp_c": 21}'},
                {"type": "tool_result", "tool_use_id": "toolu_2", "content": '{"temp_c": 19}'},
                {"type": "text", "text": "And in Fahrenheit?"}]},
        ],
        "tools": [{"name": "get_weather", "description": "Weather in a city",
                   "input_schema": {"type": "object",
                                    "properties": {"city": {"type": "string"}}}}],
        "max_tokens": DEFAULT_MAX_TOKENS,
        "temperature": 0,
        "stream": True,
    }


def test_headers_carry_the_key_as_x_api_key_and_always_the_version() -> None:
    assert MESSAGES.headers("sk-ant-1") == {"x-api-key": "sk-ant-1",
                                             "anthropic-version": "2023-06-01"}
    assert MESSAGES.headers(None) == {"anthropic-version": "2023-06-01"}
    assert (MESSAGES.name, MESSAGES.path, MESSAGES.key_env, MESSAGES.title) == (
        "messages", "messages", "ANTHROPIC_API_KEY", "Messages API")
    assert wire_api("messages") is MESSAGES


@pytest.mark.parametrize(("choice", "params", "sent"), [
    ("auto", {}, {"type": "auto"}),
    ("required", {}, {"type": "any"}),
    ("none", {}, {"type": "none"}),
    (ToolChoiceFunction(name="get_weather"), {}, {"type": "tool", "name": "get_weather"}),
    (None, {}, None),
    (None, {"parallel_tool_calls": True}, None),
    (None, {"parallel_tool_calls": False}, {"type": "auto", "disable_parallel_tool_use": True}),
    ("required", {"parallel_tool_calls": False}, {"type": "any",
                                                  "disable_parallel_tool_use": True}),
    (ToolChoiceFunction(name="get_weather"), {"parallel_tool_calls": False},
     {"type": "tool", "name": "get_weather", "disable_parallel_tool_use": True}),
    ("none", {"parallel_tool_calls": False}, {"type": "none"}),
])
def test_tool_choice_and_parallel_tool_calls(choice: Any, params: dict[str, Any],
                                             sent: dict[str, Any] | None) -> None:
    body = build([{"role": "user", "content": "hi"}], tools=[WEATHER], tool_choice=choice,
                 params=params)
    assert body.get("tool_choice") == sent
    assert "parallel_tool_calls" not in body


def test_parallel_tool_calls_false_without_tools_sends_no_tool_choice() -> None:
    body = build([{"role": "user", "content": "hi"}], params={"parallel_tool_calls": False})
    assert "tool_choice" not in body and "parallel_tool_calls" not in body


@pytest.mark.parametrize("key", ["max_tokens", "max_completion_tokens", "max_output_tokens"])
def test_the_token_limit_is_max_tokens_whatever_the_case_calls_it(key: str) -> None:
    body = build([{"role": "user", "content": "hi"}], params={key: 77})
    assert body["max_tokens"] == 77
    assert [k for k in ("max_completion_tokens", "max_output_tokens") if k in body] == []


def test_strict_tools_say_so_and_others_do_not() -> None:
    schema = {"type": "object", "additionalProperties": False}
    strict = Tool(name="exact", parameters=schema, result=1, strict=True)
    loose = Tool(name="loose", result=1, strict=False)
    tools = build([{"role": "user", "content": "hi"}], tools=[strict, loose])["tools"]
    assert tools == [{"name": "exact", "input_schema": schema, "strict": True},
                     {"name": "loose", "input_schema": {"type": "object", "properties": {}}}]


def test_arguments_that_are_no_json_object_go_as_an_empty_input() -> None:
    body = build([{"role": "user", "content": "hi"},
                  assistant_calls(("t1", "a", '{"city": '), ("t2", "b", "[1, 2]"),
                                  ("t3", "c", "")),
                  {"role": "tool", "tool_call_id": "t1", "content": "arguments are not JSON"},
                  {"role": "tool", "tool_call_id": "t2", "content": "not an object"},
                  {"role": "tool", "tool_call_id": "t3", "content": "ok"}])
    assert [block["input"] for block in body["messages"][1]["content"]] == [{}, {}, {}]


def test_user_parts_empty_assistant_turns_and_alternation() -> None:
    body = build([
        {"role": "developer", "content": "Be kind."},
        {"role": "user", "content": [
            {"type": "text", "text": "What is this?"},
            {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0K"}},
            {"type": "image_url", "image_url": {"url": "https://example.test/cat.png"}}]},
        {"role": "assistant", "content": ""},
        {"role": "user", "content": "Well?"},
    ])
    assert body["system"] == "Be kind."
    assert body["messages"] == [{"role": "user", "content": [
        {"type": "text", "text": "What is this?"},
        {"type": "image", "source": {"type": "base64", "media_type": "image/png",
                                     "data": "iVBORw0K"}},
        {"type": "image", "source": {"type": "url", "url": "https://example.test/cat.png"}},
        {"type": "text", "text": "Well?"}]}]


def test_an_assistant_turn_from_a_reply_goes_back_as_its_blocks() -> None:
    thinking = {"type": "thinking", "thinking": "Look it up.", "signature": "EqQBCgIYAh"}
    call = {"type": "tool_use", "id": "t1", "name": "get_weather", "input": {"city": "Paris"}}
    body = build([{"role": "user", "content": "Weather?"},
                  assistant_calls(("t1", "get_weather", '{"city": "Paris"}')),
                  {"role": "tool", "tool_call_id": "t1", "content": "21 C"},
                  assistant_calls(("t2", "get_weather", '{"city": "Lyon"}'), text="And Lyon."),
                  {"role": "tool", "tool_call_id": "t2", "content": "19 C"}],
                 native={1: [thinking, {"type": "text", "text": ""}, call]})
    assert [turn["content"] for turn in body["messages"][1::2]] == [
        [thinking, call],  # as the reply sent them, but the empty text the API refuses
        [{"type": "text", "text": "And Lyon."},  # no native turn: translated
         {"type": "tool_use", "id": "t2", "name": "get_weather", "input": {"city": "Lyon"}}]]


def case_of(stage: dict[str, Any]) -> Case:
    return Case.model_validate({"name": "c", "tools": [{"name": "get_weather", "result": 1}],
                                "stages": [{"name": "s0", "user": "hi"},
                                           {"name": "s1", **stage}]})


def test_allowed_tools_cannot_be_said() -> None:
    case = case_of({"tool_choice": {"allowed_tools": {"mode": "auto",
                                                      "tools": ["get_weather"]}}})
    [problem] = MESSAGES.unsupported(case)
    assert problem.message.startswith(
        "the messages API (Anthropic Messages) has no allowed_tools tool_choice; ")
    assert problem.path == ("stages", 1, "tool_choice")


def test_roles_parts_and_unpaired_tool_results_it_cannot_say() -> None:
    case = case_of({"messages": [
        {"role": "function", "name": "f", "content": "x"},
        {"role": "user", "content": [{"type": "text", "text": "hi"},
                                     {"type": "input_audio", "input_audio": {}}]},
        {"role": "tool", "content": "no id"},
        {"role": "tool", "tool_call_id": "t1", "content": "fine"},
    ]})
    problems = {problem.path: problem.message for problem in MESSAGES.unsupported(case)}
    assert problems == {
        ("stages", 1, "messages", 0, "role"):
            "the messages API (Anthropic Messages) has no 'function' role; use system, user,"
            " assistant or tool",
        ("stages", 1, "messages", 1, "content", 1):
            "the messages API (Anthropic Messages) takes text and image_url parts here, not"
            " 'input_audio'",
        ("stages", 1, "messages", 2):
            "the messages API (Anthropic Messages) pairs each tool result with its call by id;"
            " give this tool message a tool_call_id",
    }
    assert MESSAGES.unsupported(case_of({"tool_choice": "required"})) == []


# --- whole bodies -----------------------------------------------------------------------------


def test_body_text_and_usage() -> None:
    reply = read_body(message(text_block("Sunny, "), text_block("21 C."), usage={
        "input_tokens": 10, "output_tokens": 4, "cache_read_input_tokens": 90,
        "cache_creation_input_tokens": 0}))
    assert (reply.text, reply.finish_reason, reply.api_finish_reason) == (
        "Sunny, 21 C.", "stop", "end_turn")
    assert reply.usage == {"input_tokens": 10, "output_tokens": 4, "cache_read_input_tokens": 90,
                           "cache_creation_input_tokens": 0, "prompt_tokens": 100,
                           "completion_tokens": 4, "total_tokens": 104}
    assert reply.tool_calls == [] and reply.reasoning is None and reply.problems == []


def test_body_parallel_tool_calls() -> None:
    reply = read_body(message(text_block("Checking both."),
                              tool_use("toolu_1", "get_weather", {"city": "Paris"}),
                              tool_use("toolu_2", "get_weather", {"city": "Lyon"}),
                              stop_reason="tool_use"))
    assert [(c.id, c.name, c.arguments, c.arguments_raw) for c in reply.tool_calls] == [
        ("toolu_1", "get_weather", {"city": "Paris"}, '{"city": "Paris"}'),
        ("toolu_2", "get_weather", {"city": "Lyon"}, '{"city": "Lyon"}')]
    assert (reply.text, reply.finish_reason, reply.problems) == ("Checking both.",
                                                                 "tool_calls", [])


def test_body_thinking_and_redacted_thinking_are_reasoning() -> None:
    reply = read_body(message({"type": "thinking", "thinking": "Paris is in France.",
                               "signature": "sig"},
                              {"type": "redacted_thinking", "data": "opaque"},
                              text_block("21 C.")))
    assert reply.text == "21 C."
    assert reply.reasoning == "Paris is in France.\n\n[redacted reasoning]"


@pytest.mark.parametrize(("stop_reason", "finish_reason"), [
    ("end_turn", "stop"), ("stop_sequence", "stop"), ("max_tokens", "length"),
    ("model_context_window_exceeded", "length"), ("refusal", "content_filter"),
    ("pause_turn", "pause_turn"),
])
def test_body_stop_reasons(stop_reason: str, finish_reason: str) -> None:
    reply = read_body(message(text_block("It is"), stop_reason=stop_reason))
    assert (reply.finish_reason, reply.api_finish_reason) == (finish_reason, stop_reason)


@pytest.mark.parametrize(("status", "body", "error"), [
    (400, {"type": "error", "error": {"type": "invalid_request_error",
                                      "message": "max_tokens: Field required"}},
     "max_tokens: Field required"),
    (529, {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}},
     "Overloaded"),
    (400, {"error": {"code": 400, "message": "tools are not supported",  # llama-server
                     "type": "invalid_request_error"}}, "tools are not supported"),
    (502, "<html>Bad Gateway</html>", "<html>Bad Gateway</html>"),
])
def test_error_bodies_give_the_apis_message(status: int, body: Any, error: str) -> None:
    reply = read_body(body, status)
    assert (reply.status, reply.error, reply.problems) == (status, error, [])


def test_an_error_in_a_200_body_is_the_replys_error() -> None:
    reply = read_body({"type": "error", "error": {"type": "api_error", "message": "Internal"}})
    assert reply.error == "Internal"


def test_body_that_is_no_message() -> None:
    assert named(read_body("{not json").problems, "messages body: JSON")
    [problem] = read_body({"choices": []}).problems
    assert problem.startswith("messages body: message shape: the response is not a message")


def test_body_tool_use_checks() -> None:
    reply = read_body(message(tool_use("toolu_1", "a", '{"x": 1}'), tool_use(None, "b", {}),
                              tool_use("toolu_1", "c", {}), stop_reason="tool_use"))
    assert named(reply.problems, "messages body: tool_use input") == [
        ("messages body: tool_use input: block 0 (tool_use a) has its input as a string, not an"
         " object: '{\"x\": 1}'")]
    assert named(reply.problems, "messages body: tool_use ids") == [
        ("messages body: tool_use ids: block 1 (tool_use b) has no id, so no tool result can"
         " pair with it"),
        ("messages body: tool_use ids: block 2 (tool_use c) repeats id 'toolu_1' of an earlier"
         " call")]
    assert reply.tool_calls[0].arguments == {"x": 1}


def test_body_stop_reason_that_does_not_fit_the_blocks() -> None:
    reply = read_body(message(text_block("I will call it."), stop_reason="tool_use"))
    assert named(reply.problems, "messages body: stop_reason fits the blocks") == [
        ("messages body: stop_reason fits the blocks: stop_reason is tool_use but no tool_use"
         " block came")]


# --- streams ----------------------------------------------------------------------------------


def test_stream_text_deltas_usage_and_ttft() -> None:
    events = [started(), {"type": "ping"}, *text_events("The weather is sunny.", size=3),
              message_delta("end_turn", output_tokens=9), STOP]
    reply = read_stream(events)
    assert (reply.text, reply.finish_reason, reply.api_finish_reason) == (
        "The weather is sunny.", "stop", "end_turn")
    assert reply.ttft_ms == 40.0  # message_start, ping, block start, then the first text
    assert reply.usage == {"input_tokens": 12, "output_tokens": 9, "prompt_tokens": 12,
                           "completion_tokens": 9, "total_tokens": 21}
    assert reply.stream is not None
    assert (reply.stream.done, reply.stream.end, reply.stream.usage,
            reply.stream.chunks) == (True, "message_stop", True, len(events))
    assert reply.problems == []


def test_stream_tool_call_split_across_many_deltas() -> None:
    arguments = '{"city": "Paris", "units": "metric", "days": [1, 2, 3]}'
    reply = read_stream(whole_stream(call_events(0, "toolu_1", "get_weather", arguments,
                                                 size=2), stop_reason="tool_use"))
    [call] = reply.tool_calls
    assert (call.id, call.name, call.arguments_raw) == ("toolu_1", "get_weather", arguments)
    assert call.arguments == {"city": "Paris", "units": "metric", "days": [1, 2, 3]}
    assert reply.ttft_ms == 20.0  # the call's opening
    assert (reply.finish_reason, reply.problems) == ("tool_calls", [])


def test_stream_two_parallel_calls_interleaved() -> None:
    """llama-server keeps blocks open side by side and stops them all at the end."""
    events = [started(), block_start(0, text_block("")), text_delta(0, "Both."),
              block_start(1, {"type": "tool_use", "id": "call_a", "name": "get_weather"}),
              block_start(2, {"type": "tool_use", "id": "call_b", "name": "get_weather"}),
              json_delta(1, '{"ci'), json_delta(2, '{"city"'), json_delta(1, 'ty": "Paris"}'),
              json_delta(2, ': "Lyon"}'), block_stop(0), block_stop(1), block_stop(2),
              message_delta("tool_use"), STOP]
    reply = read_stream(events)
    assert [(c.id, c.arguments) for c in reply.tool_calls] == [
        ("call_a", {"city": "Paris"}), ("call_b", {"city": "Lyon"})]
    assert (reply.text, reply.problems) == ("Both.", [])


def test_stream_tool_without_arguments() -> None:
    """Anthropic streams ``""`` for a tool without arguments; llama-server streams nothing and
    opens the block without ``input``."""
    anthropic = read_stream(whole_stream(
        [block_start(0, tool_use("toolu_1", "now", {})), json_delta(0, ""), block_stop(0)],
        stop_reason="tool_use"))
    llama = read_stream(whole_stream(
        [block_start(0, {"type": "tool_use", "id": "call_1", "name": "now"}), block_stop(0)],
        stop_reason="tool_use"))
    for reply in (anthropic, llama):
        [call] = reply.tool_calls
        assert (call.arguments, call.arguments_raw, reply.problems) == ({}, "{}", [])


def test_stream_thinking_deltas_are_reasoning() -> None:
    events = whole_stream([block_start(0, {"type": "thinking", "thinking": ""}),
                           delta(0, "thinking_delta", thinking="Paris is "),
                           delta(0, "thinking_delta", thinking="in France."),
                           delta(0, "signature_delta", signature="EqQBCgIYAh"), block_stop(0)],
                          [block_start(1, {"type": "redacted_thinking", "data": "x"}),
                           block_stop(1)],
                          text_events("21 C.", index=2))
    reply = read_stream(events)
    assert (reply.text, reply.reasoning) == ("21 C.", "Paris is in France.\n\n[redacted reasoning]")
    assert reply.ttft_ms == 100.0  # event 10, the first text delta, not the thinking
    assert reply.problems == []


def test_body_native_turn_is_the_content_as_sent() -> None:
    content = [{"type": "thinking", "thinking": "Hm.", "signature": "EqQBCgIYAh"},
               {"type": "redacted_thinking", "data": "EmwKAhgB"},
               {"type": "text", "text": "On it.", "citations": None},
               tool_use("toolu_1", "get_weather", {"city": "Paris"})]
    assert read_body(message(*content, stop_reason="tool_use")).native_turn == content


def test_stream_native_turn_rebuilds_the_blocks_from_the_events() -> None:
    citation = {"type": "char_location", "cited_text": "21 C", "document_index": 0,
                "start_char_index": 0, "end_char_index": 4}
    reply = read_stream(whole_stream(
        [block_start(0, {"type": "thinking", "thinking": ""}),
         delta(0, "thinking_delta", thinking="Paris is "),
         delta(0, "thinking_delta", thinking="in France."),
         delta(0, "signature_delta", signature="EqQBCgIYAh"), block_stop(0)],
        [block_start(1, {"type": "redacted_thinking", "data": "EmwKAhgB"}), block_stop(1)],
        [*text_events("It is 21 C.", index=2)[:-1],
         delta(2, "citations_delta", citation=citation), block_stop(2)],
        call_events(3, "toolu_1", "get_weather", '{"city": "Paris"}'),
        stop_reason="tool_use"))
    assert reply.problems == []
    assert reply.native_turn == [
        {"type": "thinking", "thinking": "Paris is in France.", "signature": "EqQBCgIYAh"},
        {"type": "redacted_thinking", "data": "EmwKAhgB"},
        {"type": "text", "text": "It is 21 C.", "citations": [citation]},
        {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {"city": "Paris"}}]


def test_stream_error_event_ends_it_in_band() -> None:
    reply = read_stream([started(), *text_events("Par"),
                         {"type": "error", "error": {"type": "overloaded_error",
                                                     "message": "Overloaded"}}])
    assert reply.error == "Overloaded"
    assert reply.stream is not None and reply.stream.done
    assert reply.problems == [("messages stream: error event overloaded_error (transient: the"
                              " service was overloaded; retry later): Overloaded")]


def test_stream_error_as_llama_server_sends_it() -> None:
    untyped = read_stream([started(), StreamEvent(
        json.dumps({"error": {"code": 500, "message": "slot unavailable"}}), 20.0)])
    plain = read_stream([started(), StreamEvent("context exceeded", 20.0, "error")])
    assert (untyped.error, plain.error) == ("slot unavailable", "context exceeded")
    assert untyped.problems == [("messages stream: error event 500 (transient: the service"
                                " failed on its side; retry later): slot unavailable")]
    assert plain.problems == ["messages stream: error event: context exceeded"]


def test_stream_error_event_without_data_still_says_so() -> None:
    """An empty error event fails the stage with a reason, as over the Responses API."""
    reply = read_stream([started(), StreamEvent("", 20.0, "error")])
    assert reply.error == "an error event with no data"


def test_stream_cut_before_message_stop() -> None:
    """Seen by ``stream.done`` (which ``expect.stream.done`` checks), not as a problem: a
    case may turn that check off; nor are the open block and the missing stop_reason."""
    reply = read_stream([started(), *text_events("Half an ans")[:-1]], truncated=True)
    assert reply.text == "Half an ans"
    assert reply.stream is not None and not reply.stream.done
    assert reply.stream.end == "message_stop"
    assert reply.problems == [
        ("messages stream: cut: the stream ended inside an event (no blank line after its last"
         " data line)")]


def test_stream_delta_for_a_block_never_started() -> None:
    reply = read_stream(whole_stream(text_events("Hi"), [json_delta(3, '{"a": 1}')]))
    assert named(reply.problems, "messages stream: delta for a block never started") == [
        ("messages stream: delta for a block never started: event 5 is a content_block_delta"
         " for block 3, which no content_block_start opened")]
    assert reply.tool_calls == []


def test_stream_delta_type_that_does_not_fit_the_block() -> None:
    reply = read_stream(whole_stream([block_start(0, text_block("")), text_delta(0, "Hi"),
                                      json_delta(0, '{"city": "Paris"}'), block_stop(0)]))
    assert named(reply.problems, "messages stream: delta type does not fit the block") == [
        ("messages stream: delta type does not fit the block: event 4 sends input_json_delta"
         " into block 0 (text); it belongs in a tool_use block")]
    assert reply.text == "Hi"


def test_stream_blocks_stopped_twice_never_stopped_or_never_started() -> None:
    reply = read_stream(whole_stream(
        [block_start(0, text_block("")), text_delta(0, "Hi"), block_stop(0), block_stop(0)],
        [block_start(1, text_block("")), text_delta(1, "!")], [block_stop(7)]))
    assert named(reply.problems, "messages stream: block stopped twice") == [
        "messages stream: block stopped twice: event 5 stops block 0 (text) again"]
    assert named(reply.problems, "messages stream: block never stopped") == [
        ("messages stream: block never stopped: block 1 (text) had no content_block_stop before"
         " message_stop")]
    assert named(reply.problems, "messages stream: stop for a block never started")


def test_stream_delta_after_its_block_stopped() -> None:
    reply = read_stream(whole_stream([*text_events("Hi"), text_delta(0, "!")]))
    assert named(reply.problems, "messages stream: delta after its block stopped")


def test_stream_block_started_twice() -> None:
    """Opened again as another block: a slip. Opened again as itself while open (llama-server
    re-announces a call whose last arguments come with the final result): the same block."""
    other = read_stream(whole_stream([block_start(0, text_block("")), text_delta(0, "Hi"),
                                      block_start(0, tool_use("toolu_1", "a", {})),
                                      block_stop(0)]))
    assert named(other.problems, "messages stream: block started twice") == [
        ("messages stream: block started twice: event 4 starts block 0 (tool_use) again while"
         " block 0 (text) is open; kept the first")]
    opening = {"type": "tool_use", "id": "call_1", "name": "get_weather"}
    same = read_stream(whole_stream([block_start(0, opening), json_delta(0, '{"city"'),
                                     block_start(0, opening), json_delta(0, ': "Paris"}'),
                                     block_stop(0)], stop_reason="tool_use"))
    assert same.problems == []
    assert [call.arguments for call in same.tool_calls] == [{"city": "Paris"}]


def test_stream_tool_use_ids_missing_or_repeated() -> None:
    reply = read_stream(whole_stream(call_events(0, "toolu_1", "a", "{}"),
                                     [block_start(1, {"type": "tool_use", "name": "b",
                                                      "input": {}}), block_stop(1)],
                                     call_events(2, "toolu_1", "c", "{}"),
                                     stop_reason="tool_use"))
    assert named(reply.problems, "messages stream: tool_use ids") == [
        ("messages stream: tool_use ids: block 1 (tool_use b) has no id, so no tool result can"
         " pair with it"),
        ("messages stream: tool_use ids: block 2 (tool_use c) repeats id 'toolu_1' of an earlier"
         " call")]


def test_stream_arguments_that_do_not_join_into_json() -> None:
    reply = read_stream(whole_stream(call_events(0, "toolu_1", "get_weather", '{"city": "Par'),
                                     stop_reason="tool_use"))
    [call] = reply.tool_calls
    assert call.arguments is None and call.arguments_raw == '{"city": "Par'
    assert call.arguments_error is not None and "Unterminated string" in call.arguments_error


def test_stream_tool_use_input_given_twice_or_not_an_object() -> None:
    reply = read_stream(whole_stream(
        [block_start(0, tool_use("toolu_1", "a", {"city": "Lyon"})),
         json_delta(0, '{"city": "Paris"}'), block_stop(0)],
        call_events(1, "toolu_2", "b", "[1, 2]"), stop_reason="tool_use"))
    assert named(reply.problems, "messages stream: tool_use input") == [
        ("messages stream: tool_use input: block 0 (tool_use a) opened with input"
         " '{\"city\": \"Lyon\"}' and streamed partial_json too; read the partial_json"),
        ("messages stream: tool_use input: block 1 (tool_use b): the input is JSON but not an"
         " object: '[1, 2]'")]
    assert reply.tool_calls[0].arguments == {"city": "Paris"}


def test_stream_whole_input_in_the_opening_block() -> None:
    """A proxy that sends the whole input in content_block_start and no deltas."""
    reply = read_stream(whole_stream([block_start(0, tool_use("toolu_1", "a", {"n": 1})),
                                      block_stop(0)], stop_reason="tool_use"))
    assert (reply.tool_calls[0].arguments, reply.problems) == ({"n": 1}, [])


def test_stream_message_start_first_and_once() -> None:
    late = read_stream([*text_events("Hi"), started(), message_delta("end_turn"), STOP])
    assert named(late.problems, "messages stream: message_start first") == [
        ("messages stream: message_start first: event 1 (content_block_start) came before any"
         " message_start")]
    twice = read_stream([started(), *text_events("Hi"), started(), message_delta("end_turn"),
                         STOP])
    assert named(twice.problems, "messages stream: message_start first") == [
        "messages stream: message_start first: event 5 is a second message_start"]


def test_stream_stop_reason_missing_or_not_fitting_the_blocks() -> None:
    missing = read_stream([started(), *text_events("Hi"), STOP])
    assert named(missing.problems, "messages stream: stop_reason") == [
        ("messages stream: stop_reason: message_stop came, but no message_delta gave a"
         " stop_reason")]
    calls = read_stream(whole_stream(call_events(0, "toolu_1", "get_weather", "{}"),
                                     stop_reason="end_turn"))
    assert named(calls.problems, "messages stream: stop_reason fits the blocks") == [
        ("messages stream: stop_reason fits the blocks: stop_reason is end_turn but the reply"
         " calls get_weather; a reply with tool_use blocks stops with tool_use")]


def test_stream_events_that_are_not_json_misnamed_or_late() -> None:
    reply = read_stream([started(), StreamEvent("{oops", 20.0, "content_block_delta"),
                         StreamEvent(json.dumps(block_start(0, text_block(""))), 30.0,
                                     "content_block_delta"),
                         text_delta(0, "Hi"), block_stop(0), message_delta("end_turn"), STOP,
                         text_delta(0, "late")])
    assert named(reply.problems, "messages stream: JSON")
    assert named(reply.problems, "messages stream: event type") == [
        ("messages stream: event type: event 3 is named 'content_block_delta' but its data says"
         " type 'content_block_start'")]
    assert named(reply.problems, "messages stream: terminal event") == [
        ("messages stream: terminal event: event 8 (content_block_delta) arrived after the"
         " stream's end")]


def test_stream_unknown_events_and_deltas_pass() -> None:
    """New event and delta types may come; the API asks clients to let them by."""
    reply = read_stream(whole_stream([block_start(0, text_block("")), text_delta(0, "Hi"),
                                      delta(0, "citations_delta", citation={"x": 1}),
                                      delta(0, "brand_new_delta", stuff=1), block_stop(0)],
                                     [{"type": "brand_new_event"}]))
    assert (reply.text, reply.problems) == ("Hi", [])


def test_stream_delta_shape() -> None:
    reply = read_stream(whole_stream([block_start(0, text_block("")),
                                      delta(0, "text_delta", text=5), block_stop(0)]))
    assert named(reply.problems, "messages stream: delta shape") == [
        ("messages stream: delta shape: event 3: text_delta without a string text:"
         " '{\"type\": \"text_delta\", \"text\": 5}'")]


def test_stream_block_shape() -> None:
    reply = read_stream(whole_stream([{"type": "content_block_start", "index": "0"}]))
    assert named(reply.problems, "messages stream: block shape")


def test_stream_usage_null_does_not_wipe_message_start_numbers() -> None:
    reply = read_stream([started({"input_tokens": 30, "output_tokens": 0,
                                  "cache_read_input_tokens": 0}), *text_events("Hi"),
                         {"type": "message_delta", "delta": {"stop_reason": "end_turn"},
                          "usage": {"input_tokens": None, "output_tokens": 2}}, STOP])
    assert reply.usage is not None
    assert (reply.usage["input_tokens"], reply.usage["output_tokens"],
            reply.usage["total_tokens"]) == (30, 2, 32)


def test_stream_think_tags_in_text_are_reasoning() -> None:
    reply = read_stream(whole_stream(text_events("<think>hmm</think>Paris.")))
    assert (reply.text, reply.reasoning) == ("Paris.", "hmm")


# --- whole cases over the Messages API ------------------------------------------------------

KEY = "sk-ant-test-0123456789"
TOOLS = """
tools:
  - name: get_weather
    description: Weather in a city
    parameters: {type: object, properties: {city: {type: string}}, required: [city]}
    result: {temp_c: 21, sky: sunny}
"""


@pytest.fixture
def anthropic_key(monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setenv("ANTHROPIC_API_KEY", KEY)
    return KEY


def write_case(pytester: pytest.Pytester, server: ChatServer, body: str) -> None:
    pytester.makefile(".case.yaml", messages=f"endpoint: {{base_url: '{server.base_url}'}}\n"
                      "model: claude-test\n" + body)


def run_messages(pytester: pytest.Pytester, server: ChatServer, *args: str) -> pytest.RunResult:
    return pytester.runpytest("-p", "no:cacheprovider", "--toolbench-mode=live",
                              f"--toolbench-base-url={server.base_url}",
                              "--toolbench-api=messages", *args)


def sse(events: list[dict[str, Any]]) -> Any:
    return sse_reply([named_event(str(event["type"]), event) for event in events], done=False)


def tool_results(request: RecordedRequest) -> list[dict[str, Any]]:
    return [block for turn in request.json()["messages"] if isinstance(turn["content"], list)
            for block in turn["content"] if block["type"] == "tool_result"]


def test_case_not_streamed(pytester: pytest.Pytester, chat_server: ChatServer,
                           anthropic_key: str) -> None:
    chat_server.enqueue(json_reply(message(text_block("Sunny and 21 C in Paris."))))
    write_case(pytester, chat_server, """name: weather
system: You answer briefly.
params: {max_tokens: 200, temperature: 0}
stages:
  - name: ask
    user: Weather in Paris?
    expect:
      text: {$contains: "21 C"}
      finish_reason: stop
      api_finish_reason: end_turn
      usage: {total_tokens: 18, input_tokens: 12}
""")
    result = run_messages(pytester, chat_server, "-v")
    result.assert_outcomes(passed=1)
    [request] = chat_server.requests
    assert request.path == "/v1/messages"
    assert request.headers["x-api-key"] == anthropic_key
    assert request.headers["anthropic-version"] == "2023-06-01"
    assert "authorization" not in request.headers
    assert request.json() == {"model": "claude-test", "system": "You answer briefly.",
                              "messages": [{"role": "user", "content": "Weather in Paris?"}],
                              "max_tokens": 200, "temperature": 0}


def test_streamed_tool_call_split_across_deltas_with_run_tools(
        pytester: pytest.Pytester, chat_server: ChatServer, anthropic_key: str) -> None:
    def answer(request: RecordedRequest) -> Any:
        if not tool_results(request):
            return sse(whole_stream(text_events("Let me look."),
                                    call_events(1, "toolu_01A", "get_weather",
                                                '{"city": "Paris"}', size=2),
                                    stop_reason="tool_use"))
        return sse(whole_stream(text_events("Sunny, 21 C.")))

    chat_server.set_handler(answer)
    write_case(pytester, chat_server, "name: weather\n" + TOOLS + """stages:
  - name: ask
    user: Weather in Paris?
    stream: true
    run_tools: true
    expect:
      text: "Sunny, 21 C."
      tool_calls: [{name: get_weather, arguments: {city: Paris}}]
      stream: {done: true, usage: true}
""")
    result = run_messages(pytester, chat_server, "-v")
    result.assert_outcomes(passed=1)
    first, second = (request.json() for request in chat_server.requests)
    assert first["stream"] is True and first["max_tokens"] == DEFAULT_MAX_TOKENS
    assert second["messages"][1:] == [
        {"role": "assistant", "content": [
            {"type": "text", "text": "Let me look."},
            {"type": "tool_use", "id": "toolu_01A", "name": "get_weather",
             "input": {"city": "Paris"}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_01A",
                                      "content": '{"temp_c": 21, "sky": "sunny"}'}]}]


def test_parallel_calls_not_streamed(pytester: pytest.Pytester, chat_server: ChatServer,
                                     anthropic_key: str) -> None:
    def answer(request: RecordedRequest) -> Any:
        if not tool_results(request):
            return json_reply(message(tool_use("toolu_1", "get_weather", {"city": "Paris"}),
                                      tool_use("toolu_2", "get_weather", {"city": "Lyon"}),
                                      stop_reason="tool_use"))
        return json_reply(message(text_block("Both sunny.")))

    chat_server.set_handler(answer)
    write_case(pytester, chat_server, "name: weather\n" + TOOLS + """stages:
  - name: ask
    user: Paris and Lyon?
    run_tools: true
    expect:
      text: Both sunny.
      tool_calls:
        - {name: get_weather, arguments: {city: Lyon}}
        - {name: get_weather, arguments: {city: Paris}}
""")
    run_messages(pytester, chat_server).assert_outcomes(passed=1)
    assert [block["tool_use_id"] for block in tool_results(chat_server.requests[1])] == [
        "toolu_1", "toolu_2"]


def test_parallel_tool_calls_false_asks_for_one_call(
        pytester: pytest.Pytester, chat_server: ChatServer, anthropic_key: str) -> None:
    chat_server.enqueue(json_reply(message(
        tool_use("toolu_1", "get_weather", {"city": "Paris"}),
        tool_use("toolu_2", "get_weather", {"city": "Lyon"}), stop_reason="tool_use")))
    write_case(pytester, chat_server, "name: weather\n" + TOOLS + """stages:
  - name: ask
    user: Paris and Lyon?
    tool_choice: required
    params: {parallel_tool_calls: false}
""")
    result = run_messages(pytester, chat_server)
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*parallel_tool_calls is false, yet one reply made 2 tool calls*"])
    sent = chat_server.requests[0].json()
    assert sent["tool_choice"] == {"type": "any", "disable_parallel_tool_use": True}
    assert "parallel_tool_calls" not in sent


def test_error_event_fails_the_stage_naming_its_type_and_that_it_is_transient(
        pytester: pytest.Pytester, chat_server: ChatServer, anthropic_key: str) -> None:
    chat_server.enqueue(sse([started(), *text_events("Sun"),
                             {"type": "error", "error": {"type": "overloaded_error",
                                                         "message": "Overloaded"}}]))
    write_case(pytester, chat_server, """name: busy
stages:
  - name: ask
    user: Weather?
    stream: true
""")
    result = run_messages(pytester, chat_server)
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines([
        ("messages.case.yaml:*: busy*: messages stream: error event overloaded_error (transient:"
        " the service was overloaded; retry later): Overloaded")])
    assert "stream ended without" not in result.stdout.str()
    assert "error inside the stream" not in result.stdout.str()  # said once, by the reader


def test_cut_stream_fails_naming_message_stop(
        pytester: pytest.Pytester, chat_server: ChatServer, anthropic_key: str) -> None:
    chat_server.enqueue(sse([started(), *text_events("Sunny, 21")]))
    write_case(pytester, chat_server, """name: cut
stages:
  - name: ask
    user: Weather?
    stream: true
""")
    result = run_messages(pytester, chat_server)
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines([("messages.case.yaml:5: cut[[]claude-test-messages[]]:"
                                  " stages[[]0[]].expect.stream.done: stream ended without"
                                  " message_stop")])


def test_cut_stream_passes_when_the_case_turns_the_check_off(
        pytester: pytest.Pytester, chat_server: ChatServer, anthropic_key: str) -> None:
    chat_server.enqueue(sse([started(), *text_events("Sunny, 21")]))
    write_case(pytester, chat_server, """name: cut
stages:
  - name: ask
    user: Weather?
    stream: true
    expect: {text: "Sunny, 21", stream: {done: false}}
""")
    run_messages(pytester, chat_server).assert_outcomes(passed=1)


def test_protocol_slip_fails_the_stage_by_its_check(
        pytester: pytest.Pytester, chat_server: ChatServer, anthropic_key: str) -> None:
    chat_server.enqueue(sse(whole_stream([block_start(0, text_block("")), text_delta(0, "Hi"),
                                          json_delta(0, '{"x": 1}'), block_stop(0)])))
    write_case(pytester, chat_server, """name: slip
stages:
  - name: ask
    user: Hi?
    stream: true
    expect: {text: Hi}
""")
    result = run_messages(pytester, chat_server)
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines([("*messages stream: delta type does not fit the block: event 4"
                                  " sends input_json_delta into block 0 (text)*")])


def test_streamed_arguments_that_are_not_json_fail_the_stage(
        pytester: pytest.Pytester, chat_server: ChatServer, anthropic_key: str) -> None:
    chat_server.enqueue(sse(whole_stream(call_events(0, "toolu_1", "get_weather",
                                                     '{"city": "Par'), stop_reason="tool_use")))
    write_case(pytester, chat_server, "name: weather\n" + TOOLS + """stages:
  - name: ask
    user: Weather?
    stream: true
""")
    result = run_messages(pytester, chat_server)
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines([("*streamed tool call get_weather: arguments are not valid"
                                  " JSON: Unterminated string*")])


def test_reasoning_expectation(pytester: pytest.Pytester, chat_server: ChatServer,
                               anthropic_key: str) -> None:
    chat_server.enqueue(sse(whole_stream(
        [block_start(0, {"type": "thinking", "thinking": ""}),
         delta(0, "thinking_delta", thinking="Paris is in France; "),
         delta(0, "thinking_delta", thinking="look it up."),
         delta(0, "signature_delta", signature="sig"), block_stop(0)],
        text_events("Sunny.", index=1))))
    write_case(pytester, chat_server, """name: thinks
params: {thinking: {type: enabled, budget_tokens: 1024}, max_tokens: 2048}
stages:
  - name: ask
    user: Weather?
    stream: true
    expect:
      text: Sunny.
      reasoning: {$regex: "look it (up|down)"}
""")
    run_messages(pytester, chat_server).assert_outcomes(passed=1)
    sent = chat_server.requests[0].json()
    assert (sent["thinking"], sent["max_tokens"]) == ({"type": "enabled",
                                                       "budget_tokens": 1024}, 2048)


def test_reasoning_expectation_fails_when_none_came(
        pytester: pytest.Pytester, chat_server: ChatServer, anthropic_key: str) -> None:
    chat_server.enqueue(json_reply(message(text_block("Sunny."))))
    write_case(pytester, chat_server, """name: thinks
stages:
  - name: ask
    user: Weather?
    expect: {reasoning: {$any: true}}
""")
    run_messages(pytester, chat_server).assert_outcomes(failed=1)


SIGNATURE = "EqQBCkgIARABGAIiQL2mC5d0q1N2nXr/7QpzYW1wbGU="
THINKING_BLOCKS = {
    "thinking": {"type": "thinking", "thinking": "Paris is in France; look it up.",
                 "signature": SIGNATURE},
    "redacted_thinking": {"type": "redacted_thinking", "data": "EmwKAhgBEgy3va3pzix/LafPsn4a"},
}


def thinking_events(index: int, block: dict[str, Any]) -> list[dict[str, Any]]:
    """A thinking block streamed as the API does: its thinking in deltas, then its
    signature in a signature_delta; a redacted one whole in its start."""
    if block["type"] == "redacted_thinking":
        return [block_start(index, block), block_stop(index)]
    text = block["thinking"]
    return [block_start(index, {"type": "thinking", "thinking": ""}),
            *(delta(index, "thinking_delta", thinking=text[i:i + 8])
              for i in range(0, len(text), 8)),
            delta(index, "signature_delta", signature=block["signature"]), block_stop(index)]


def thinking_server(block: dict[str, Any]) -> Any:
    """Answers as the API does with extended thinking: a thinking block and a tool_use, then
    (a 400 unless the tool result's request gives that assistant turn back opening with
    the thinking block, unchanged) the answer."""
    call = tool_use("toolu_1", "get_weather", {"city": "Paris"})

    def answer(request: RecordedRequest) -> Any:
        body = request.json()
        if not tool_results(request):
            if body.get("stream"):
                return sse(whole_stream(thinking_events(0, block),
                                        call_events(1, "toolu_1", "get_weather",
                                                    '{"city": "Paris"}'),
                                        stop_reason="tool_use"))
            return json_reply(message(block, call, stop_reason="tool_use"))
        if body["messages"][1]["content"][:1] != [block]:
            return json_reply({"type": "error", "error": {
                "type": "invalid_request_error", "message": "messages.1.content.0.type:"
                " Expected `thinking` or `redacted_thinking`, but found `tool_use`. When"
                " `thinking` is enabled, a final `assistant` message must start with a"
                " thinking block"}}, status=400)
        return (sse(whole_stream(text_events("Sunny, 21 C."))) if body.get("stream")
                else json_reply(message(text_block("Sunny, 21 C."))))

    return answer


@pytest.mark.parametrize("kind", ["thinking", "redacted_thinking"])
@pytest.mark.parametrize("stream", [True, False])
def test_thinking_goes_back_unchanged_before_the_tool_use(
        pytester: pytest.Pytester, chat_server: ChatServer, anthropic_key: str,
        kind: str, stream: bool) -> None:
    block = THINKING_BLOCKS[kind]
    chat_server.set_handler(thinking_server(block))
    write_case(pytester, chat_server, "name: weather\n" + TOOLS + f"""
params: {{thinking: {{type: enabled, budget_tokens: 1024}}, max_tokens: 2048}}
stages:
  - name: ask
    user: Weather in Paris?
    stream: {str(stream).lower()}
    run_tools: true
    expect:
      text: "Sunny, 21 C."
      tool_calls: [{{name: get_weather, arguments: {{city: Paris}}}}]
""")
    run_messages(pytester, chat_server).assert_outcomes(passed=1)
    second = chat_server.requests[1].json()
    assert second["messages"][1:] == [
        {"role": "assistant", "content": [
            block, {"type": "tool_use", "id": "toolu_1", "name": "get_weather",
                    "input": {"city": "Paris"}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1",
                                      "content": '{"temp_c": 21, "sky": "sunny"}'}]}]


def test_recorded_thinking_turn_replays_without_the_server(
        pytester: pytest.Pytester, chat_server: ChatServer, anthropic_key: str) -> None:
    chat_server.set_handler(thinking_server(THINKING_BLOCKS["thinking"]))
    write_case(pytester, chat_server, "name: weather\n" + TOOLS + """
params: {thinking: {type: enabled, budget_tokens: 1024}, max_tokens: 2048}
stages:
  - name: ask
    user: Weather in Paris?
    stream: true
    run_tools: true
    expect: {text: "Sunny, 21 C."}
""")
    pytester.runpytest("-p", "no:cacheprovider", "--toolbench-record",
                       "--toolbench-api=messages").assert_outcomes(passed=1)
    cassette = next((pytester.path / "__cassettes__").rglob("*.yaml")).read_text()
    assert cassette.count(SIGNATURE) == 2  # the signature_delta, and the request giving it back
    chat_server.close()  # replay must not need it
    result = pytester.runpytest("-p", "no:cacheprovider", "--toolbench-api=messages")
    result.assert_outcomes(passed=1)


def test_a_key_echoed_in_a_thinking_block_goes_back_masked(
        pytester: pytest.Pytester, chat_server: ChatServer, anthropic_key: str) -> None:
    def answer(request: RecordedRequest) -> Any:
        if tool_results(request):
            return json_reply(message(text_block("Sunny.")))
        echoed = {"type": "thinking", "signature": SIGNATURE,
                  "thinking": f"The key is {request.headers['x-api-key']}."}
        return json_reply(message(echoed, tool_use("toolu_1", "get_weather", {"city": "Paris"}),
                                  stop_reason="tool_use"))

    chat_server.set_handler(answer)
    write_case(pytester, chat_server, "name: weather\n" + TOOLS + """stages:
  - name: ask
    user: Weather in Paris?
    run_tools: true
""")
    run_messages(pytester, chat_server).assert_outcomes(passed=1)
    second = chat_server.requests[1]
    assert anthropic_key not in second.body.decode()
    assert second.json()["messages"][1]["content"][0]["thinking"] == "The key is <scrubbed>."


def test_stream_both_reads_the_same_reply_twice(
        pytester: pytest.Pytester, chat_server: ChatServer, anthropic_key: str) -> None:
    def answer(request: RecordedRequest) -> Any:
        call = tool_use("toolu_1", "get_weather", {"city": "Paris"})
        if request.json().get("stream"):
            return sse(whole_stream(text_events("On it."),
                                    call_events(1, "toolu_1", "get_weather",
                                                '{"city":"Paris"}'), stop_reason="tool_use"))
        return json_reply(message(text_block("On it."), call, stop_reason="tool_use"))

    chat_server.set_handler(answer)
    write_case(pytester, chat_server, "name: weather\n" + TOOLS + """stages:
  - name: ask
    user: Weather in Paris?
    stream: both
    expect:
      finish_reason: tool_calls
      tool_calls: [{name: get_weather, arguments: {city: Paris}}]
""")
    run_messages(pytester, chat_server).assert_outcomes(passed=1)
    assert [request.json().get("stream") for request in chat_server.requests] == [True, None]


def test_stream_both_fails_when_the_stream_says_otherwise(
        pytester: pytest.Pytester, chat_server: ChatServer, anthropic_key: str) -> None:
    def answer(request: RecordedRequest) -> Any:
        if request.json().get("stream"):
            return sse(whole_stream(text_events("Rainy.")))
        return json_reply(message(text_block("Sunny.")))

    chat_server.set_handler(answer)
    write_case(pytester, chat_server, """name: differs
stages:
  - name: ask
    user: Weather?
    stream: both
""")
    result = run_messages(pytester, chat_server)
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*streamed and non-streamed replies differ in text*"])


def test_error_status_shows_the_apis_message(
        pytester: pytest.Pytester, chat_server: ChatServer, anthropic_key: str) -> None:
    chat_server.enqueue(json_reply({"type": "error", "error": {
        "type": "invalid_request_error", "message": "messages: roles must alternate"}},
        status=400))
    write_case(pytester, chat_server, """name: refused
stages:
  - name: ask
    user: Hi
""")
    result = run_messages(pytester, chat_server)
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*the server said: messages: roles must alternate*"])


def test_allowed_tools_fails_the_messages_item_alone(pytester: pytest.Pytester,
                                                    chat_server: ChatServer) -> None:
    """Messages cannot say it: its item fails at the line, sending nothing; chat's runs."""
    chat_server.enqueue(json_reply(completion("Hi there")))
    write_case(pytester, chat_server, "name: weather\n" + TOOLS + """stages:
  - name: ask
    user: Hi
    tool_choice: {allowed_tools: {mode: auto, tools: [get_weather]}}
""")
    result = pytester.runpytest("-p", "no:cacheprovider", "--toolbench-live",
                                "--toolbench-api=chat,messages", "-rA")
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines([
        "PASSED messages.case.yaml::weather[[]claude-test[]]",
        "FAILED messages.case.yaml::weather[[]claude-test-messages[]]*"])
    result.stdout.fnmatch_lines([("messages.case.yaml:13: case 'weather': the messages API"
                                  " (Anthropic Messages) has no allowed_tools tool_choice;*")])
    assert [request.path for request in chat_server.requests] == ["/v1/chat/completions"]


def test_streamed_calls_complete_when_their_block_stops() -> None:
    events = whole_stream(call_events(0, "toolu_a", "f", '{"x": 1}'),
                          call_events(1, "toolu_b", "g", "{}"), stop_reason="tool_use")
    stops = [number for number, event in enumerate(events, start=1)
             if event["type"] == "content_block_stop"]
    assert [call.completed_ms for call in read_stream(events).tool_calls] == [
        10.0 * stop for stop in stops]


# --- follow-up requests as the service takes them ------------------------------------------


def anthropic_stand_in(first: Any, then: Any) -> Any:
    """A handler that refuses what the service refuses, answers ``first`` to the first
    request and ``then`` to the ones with tool results."""
    def answer(request: RecordedRequest) -> Any:
        refused = refusal(request.json())
        if refused is not None:
            return refused
        return then if tool_results(request) else first
    return answer


@pytest.mark.parametrize("stream", [True, False])
def test_whitespace_text_of_a_reply_never_goes_back(
        pytester: pytest.Pytester, chat_server: ChatServer, anthropic_key: str,
        stream: bool) -> None:
    call = tool_use("toolu_1", "get_weather", {"city": "Paris"})
    first = (sse(whole_stream(text_events("\n\n"), call_events(1, "toolu_1", "get_weather",
                                                               '{"city": "Paris"}'),
                              stop_reason="tool_use")) if stream
             else json_reply(message(text_block("\n\n"), call, stop_reason="tool_use")))
    then = (sse(whole_stream(text_events("Sunny."))) if stream
            else json_reply(message(text_block("Sunny."))))
    chat_server.set_handler(anthropic_stand_in(first, then))
    write_case(pytester, chat_server, "name: weather\n" + TOOLS + f"""stages:
  - name: ask
    user: Weather in Paris?
    stream: {str(stream).lower()}
    run_tools: true
    expect: {{text: Sunny.}}
  - name: again
    messages:
      - {{role: assistant, content: " ", tool_calls: [{{id: toolu_9, type: function,
          function: {{name: get_weather, arguments: '{{"city": "Lyon"}}'}}}}]}}
      - {{role: tool, tool_call_id: toolu_9, content: '{{"temp_c": 18}}'}}
      - {{role: user, content: And now?}}
    stream: {str(stream).lower()}
    expect: {{text: Sunny.}}
""")
    run_messages(pytester, chat_server).assert_outcomes(passed=1)
    last = chat_server.requests[-1].json()["messages"]
    assert last[1]["content"] == [call]
    assert last[3]["content"] == [  # the first stage's answer, then the stage's own turn
        text_block("Sunny."),
        {"type": "tool_use", "id": "toolu_9", "name": "get_weather", "input": {"city": "Lyon"}}]


FAILING_TOOLS = '''
def explode(**arguments):
    raise RuntimeError("the weather station is on fire")
'''


@pytest.mark.parametrize("stream", [True, False])
def test_a_failed_tool_run_goes_back_as_an_error_result(
        pytester: pytest.Pytester, chat_server: ChatServer, anthropic_key: str,
        stream: bool) -> None:
    calls = [("toolu_ok", "get_weather"), ("toolu_down", "forecast"),
             ("toolu_gone", "no_such_tool"), ("toolu_fire", "explode")]
    first = (sse(whole_stream(*(call_events(index, id, name, '{"city": "Paris"}')
                                for index, (id, name) in enumerate(calls)),
                              stop_reason="tool_use")) if stream
             else json_reply(message(*(tool_use(id, name, {"city": "Paris"})
                                       for id, name in calls), stop_reason="tool_use")))
    then = (sse(whole_stream(text_events("Paris: 21 C."))) if stream
            else json_reply(message(text_block("Paris: 21 C."))))
    chat_server.set_handler(anthropic_stand_in(first, then))
    pytester.makepyfile(failing_tools=FAILING_TOOLS)
    pytester.syspathinsert()
    write_case(pytester, chat_server, "name: weather\n" + TOOLS + """  - name: forecast
    parameters: {type: object}
    error: the forecast service is down
  - name: explode
    parameters: {type: object}
    python: failing_tools:explode
""" + f"""stages:
  - name: ask
    user: Weather in Paris?
    stream: {str(stream).lower()}
    run_tools: true
    expect: {{text: "Paris: 21 C."}}
""")
    run_messages(pytester, chat_server).assert_outcomes(passed=1)
    results = {block["tool_use_id"]: block for block in tool_results(chat_server.requests[1])}
    assert "is_error" not in results["toolu_ok"]
    for failed in ("toolu_down", "toolu_gone", "toolu_fire"):
        assert results[failed]["is_error"] is True
    assert "the forecast service is down" in results["toolu_down"]["content"]
    assert "no_such_tool" in results["toolu_gone"]["content"]
    assert "RuntimeError" in results["toolu_fire"]["content"]


OVERLOADED = {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}


def test_overloaded_529_is_retried_like_503(pytester: pytest.Pytester, chat_server: ChatServer,
                                            anthropic_key: str) -> None:
    chat_server.enqueue(json_reply(OVERLOADED, status=529),
                        json_reply(message(text_block("Sunny."))))
    write_case(pytester, chat_server, """name: busy
stages:
  - name: ask
    user: Weather?
    expect: {text: Sunny.}
""")
    result = run_messages(pytester, chat_server,
                          "--toolbench-report=report.json")
    result.assert_outcomes(passed=1)
    report = json.loads((pytester.path / "report.json").read_text())
    (turn,) = report["cases"][0]["runs"][0]["stages"][0]["attempts"][0]["turns"]
    assert [line.split(";")[0] for line in turn["retries"]] == [
        "attempt 1 failed (HTTP 529: Overloaded)"]


# --- server tools: the service runs them, the reply reports them ---------------------------

SEARCH_ID = "srvtoolu_01WYG3ziw53XMcoyKL4XcZmE"
SEARCH_RESULT = {"type": "web_search_tool_result", "tool_use_id": SEARCH_ID, "content": [
    {"type": "web_search_result", "url": "https://en.wikipedia.org/wiki/Paris",
     "title": "Paris - Wikipedia", "encrypted_content": "EqgfCioIARgBIiQ3YTAwMjY1Mi1mZjM5",
     "page_age": "April 30, 2025"}]}
CITED = {"type": "text", "text": "Paris has 2.1 million people.", "citations": [
    {"type": "web_search_result_location", "url": "https://en.wikipedia.org/wiki/Paris",
     "title": "Paris - Wikipedia", "encrypted_index": "Eo8BCioIAhgBIiQyYjQ0OWJmZi1lNm..",
     "cited_text": "Paris ... population of 2,102,650 residents"}]}


def searched_then_called(stream: bool) -> Any:
    """A reply that searched the web on the service's side (a server_tool_use block, its
    input streamed as input_json_delta, then its web_search_tool_result), then calls a
    client tool: Anthropic's documented shapes."""
    if not stream:
        return json_reply(message(
            text_block("I'll search for that."),
            {"type": "server_tool_use", "id": SEARCH_ID, "name": "web_search",
             "input": {"query": "paris population"}},
            SEARCH_RESULT, CITED, tool_use("toolu_1", "get_weather", {"city": "Paris"}),
            stop_reason="tool_use",
            usage={"input_tokens": 6039, "output_tokens": 931,
                   "server_tool_use": {"web_search_requests": 1}}))
    return sse(whole_stream(
        text_events("I'll search for that."),
        [block_start(1, {"type": "server_tool_use", "id": SEARCH_ID, "name": "web_search",
                         "input": {}}),
         json_delta(1, '{"query": "par'), json_delta(1, 'is population"}'), block_stop(1)],
        [block_start(2, SEARCH_RESULT), block_stop(2)],
        [block_start(3, {"type": "text", "text": ""}),
         delta(3, "citations_delta", citation=CITED["citations"][0]),
         text_delta(3, CITED["text"]), block_stop(3)],
        call_events(4, "toolu_1", "get_weather", '{"city": "Paris"}'),
        stop_reason="tool_use"))


@pytest.mark.parametrize("stream", [True, False])
def test_server_tool_blocks_are_the_services_and_go_back_as_they_came(
        pytester: pytest.Pytester, chat_server: ChatServer, anthropic_key: str,
        stream: bool) -> None:
    then = (sse(whole_stream(text_events("Sunny, 21 C."))) if stream
            else json_reply(message(text_block("Sunny, 21 C."))))
    chat_server.set_handler(anthropic_stand_in(searched_then_called(stream), then))
    write_case(pytester, chat_server, "name: weather\n" + TOOLS + f"""stages:
  - name: ask
    user: How many people live in Paris, and what is the weather?
    stream: {str(stream).lower()}
    run_tools: true
    expect:
      text: "Sunny, 21 C."
      tool_calls: [{{name: get_weather, arguments: {{city: Paris}}}}]
""")
    run_messages(pytester, chat_server).assert_outcomes(passed=1)
    assistant = chat_server.requests[1].json()["messages"][1]
    assert assistant["content"] == [
        text_block("I'll search for that."),
        {"type": "server_tool_use", "id": SEARCH_ID, "name": "web_search",
         "input": {"query": "paris population"}},
        SEARCH_RESULT, CITED,
        {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {"city": "Paris"}}]
    assert [block["tool_use_id"] for block in tool_results(chat_server.requests[1])] == [
        "toolu_1"]


def test_server_tool_result_blocks_of_any_kind_are_kept_not_called() -> None:
    fetch = {"type": "server_tool_use", "id": "srvtoolu_2", "name": "web_fetch", "input": {}}
    fetched = {"type": "web_fetch_tool_result", "tool_use_id": "srvtoolu_2",
               "content": {"type": "web_fetch_result", "url": "https://example.com"}}
    reply = read_stream(whole_stream(
        [block_start(0, fetch), json_delta(0, '{"url": "https://example.com"}'), block_stop(0)],
        [block_start(1, fetched), block_stop(1)], text_events("Fetched.", index=2)))
    assert (reply.problems, reply.tool_calls, reply.text) == ([], [], "Fetched.")
    assert reply.native_turn == [{**fetch, "input": {"url": "https://example.com"}}, fetched,
                                 text_block("Fetched.")]



def test_redacted_thinking_alone_reads_as_redacted_reasoning_over_a_run(
        pytester: pytest.Pytester, chat_server: ChatServer, anthropic_key: str) -> None:
    """One rule over every API: reasoning sent only encrypted is present, and says so."""
    redacted = THINKING_BLOCKS["redacted_thinking"]
    chat_server.enqueue(json_reply(message(redacted, text_block("Paris."))),
                        sse(whole_stream(thinking_events(0, redacted),
                                         text_events("Paris.", index=1))))
    write_case(pytester, chat_server, """name: capital
stages:
  - name: ask
    user: Capital of France?
    expect: {text: Paris., reasoning: "[redacted reasoning]"}
  - name: again
    user: Sure?
    stream: true
    expect: {reasoning: {$absent: true}}
""")
    result = run_messages(pytester, chat_server)
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*stages[[]1[]].expect.reasoning*[[]redacted reasoning[]]*"])
