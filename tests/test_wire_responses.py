"""OpenAI's Responses API adapter: the request it builds, the bodies and streams it reads,
each protocol check by its name, and whole runs of the plugin over ``--toolbench-api
responses`` against the loopback server.

Streams are written as the API sends them (``event:`` line and data ``type``, items with
``id``, ``call_id`` and ``output_index``); a few are written as llama.cpp's server sends
them (no ``output_index``, function calls without ``id``), which must read clean too.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from support.chat_server import ChatServer, RecordedRequest, json_reply, named_event, sse_reply

from pytest_toolbench.casefile.schema import (
    AllowedTools,
    AllowedToolsChoice,
    Tool,
    ToolChoiceFunction,
)
from pytest_toolbench.records import Reply, StreamEvent
from pytest_toolbench.wire import RequestParts, wire_api
from pytest_toolbench.wire.responses import RESPONSES
from pytest_toolbench.wire.responses_reader import END

USAGE = {"input_tokens": 12, "output_tokens": 7, "total_tokens": 19}
Events = list[dict[str, Any]]


# -- what the API sends, written once ---------------------------------------------------


def message_item(text: str, item_id: str = "msg_1") -> dict[str, Any]:
    return {"type": "message", "id": item_id, "role": "assistant", "status": "completed",
            "content": [{"type": "output_text", "text": text, "annotations": []}]}


def call_item(call_id: str, name: str, arguments: str) -> dict[str, Any]:
    return {"type": "function_call", "id": f"fc_{call_id}", "call_id": call_id, "name": name,
            "arguments": arguments, "status": "completed"}


def reasoning_item(summary: list[str], content: list[str] | None = None,
                   item_id: str = "rs_1") -> dict[str, Any]:
    item: dict[str, Any] = {"type": "reasoning", "id": item_id, "summary": [
        {"type": "summary_text", "text": text} for text in summary]}
    if content is not None:
        item["content"] = [{"type": "reasoning_text", "text": text} for text in content]
    return item


def response(output: list[dict[str, Any]], status: str = "completed",
             **extra: Any) -> dict[str, Any]:
    return {"id": "resp_1", "object": "response", "status": status, "output": output,
            "usage": USAGE, "error": None, "incomplete_details": None, **extra}


def text_events(text: str, pieces: int = 3, index: int = 0, item_id: str = "msg_1") -> Events:
    """A message item streamed as the API does: opened, ``pieces`` deltas, closed."""
    size = max(1, -(-len(text) // pieces))
    where = {"item_id": item_id, "output_index": index, "content_index": 0}
    return [
        {"type": "response.output_item.added", "output_index": index,
         "item": {**message_item("", item_id), "content": [], "status": "in_progress"}},
        {"type": "response.content_part.added", **where,
         "part": {"type": "output_text", "text": "", "annotations": []}},
        *({"type": "response.output_text.delta", **where, "delta": text[i:i + size]}
          for i in range(0, len(text), size)),
        {"type": "response.output_text.done", **where, "text": text},
        {"type": "response.content_part.done", **where,
         "part": {"type": "output_text", "text": text, "annotations": []}},
        {"type": "response.output_item.done", "output_index": index,
         "item": message_item(text, item_id)},
    ]


def call_events(call_id: str, name: str, arguments: str, index: int = 0,
                size: int = 1) -> Events:
    """A function call streamed as the API does, its arguments ``size`` characters a delta."""
    where = {"item_id": f"fc_{call_id}", "output_index": index}
    return [
        {"type": "response.output_item.added", "output_index": index,
         "item": {**call_item(call_id, name, ""), "status": "in_progress"}},
        *({"type": "response.function_call_arguments.delta", **where,
           "delta": arguments[i:i + size]} for i in range(0, len(arguments), size)),
        {"type": "response.function_call_arguments.done", **where, "arguments": arguments},
        {"type": "response.output_item.done", "output_index": index,
         "item": call_item(call_id, name, arguments)},
    ]


def reasoning_events(summary: str, index: int = 0, item_id: str = "rs_1") -> Events:
    where = {"item_id": item_id, "output_index": index, "summary_index": 0}
    half = len(summary) // 2
    return [
        {"type": "response.output_item.added", "output_index": index,
         "item": reasoning_item([], item_id=item_id)},
        {"type": "response.reasoning_summary_part.added", **where,
         "part": {"type": "summary_text", "text": ""}},
        {"type": "response.reasoning_summary_text.delta", **where, "delta": summary[:half]},
        {"type": "response.reasoning_summary_text.delta", **where, "delta": summary[half:]},
        {"type": "response.reasoning_summary_text.done", **where, "text": summary},
        {"type": "response.reasoning_summary_part.done", **where,
         "part": {"type": "summary_text", "text": summary}},
        {"type": "response.output_item.done", "output_index": index,
         "item": reasoning_item([summary], item_id=item_id)},
    ]


def stream(*groups: Events, output: list[dict[str, Any]], status: str = "completed",
           **extra: Any) -> Events:
    """created, in_progress, the groups' events, and the terminal event for ``status``."""
    opening = {"id": "resp_1", "object": "response", "status": "in_progress", "output": []}
    terminal = {"completed": "response.completed", "failed": "response.failed",
                "incomplete": "response.incomplete"}[status]
    return [{"type": "response.created", "response": opening},
            {"type": "response.in_progress", "response": opening},
            *(event for group in groups for event in group),
            {"type": terminal, "response": response(output, status, **extra)}]


def read(events: Events, truncated: bool = False) -> Reply:
    """The reply the adapter reads from ``events``, each named on its event line as the API
    does, the n-th arriving at n * 10 ms."""
    reader = RESPONSES.stream_reader()
    for number, data in enumerate(events):
        reader.add(StreamEvent(json.dumps(data), 10.0 * number, data["type"]), 10.0 * number)
    return reader.finish(truncated=truncated)


def read_raw(*events: tuple[str, str]) -> Reply:
    """Events given as (event line, data text), for what :func:`read` cannot send."""
    reader = RESPONSES.stream_reader()
    for number, (name, data) in enumerate(events):
        reader.add(StreamEvent(data, 10.0 * number, name), 10.0 * number)
    return reader.finish()


def body_reply(payload: Any, status: int = 200,
               content_type: str = "application/json") -> Reply:
    raw = payload if isinstance(payload, str) else json.dumps(payload)
    return RESPONSES.read_body(status, raw.encode(), content_type)


def calls_of(reply: Reply) -> list[tuple[str | None, str, Any]]:
    return [(call.id, call.name, call.arguments) for call in reply.tool_calls]


def problems_named(reply: Reply, check: str) -> list[str]:
    return [problem for problem in reply.problems if problem.startswith(check + ": ")]


# -- the adapter -------------------------------------------------------------------------


def test_the_adapter_is_found_by_its_name() -> None:
    api = wire_api("responses")
    assert api is RESPONSES
    assert (api.name, api.path, api.key_env, api.title) == (
        "responses", "responses", "OPENAI_API_KEY", "Responses API")
    assert api.headers("sk-test") == {"Authorization": "Bearer sk-test"}
    assert api.headers(None) == {}


# -- the request -------------------------------------------------------------------------

AGENT_LOOP = [
    {"role": "system", "content": "You are terse."},
    {"role": "system", "content": "Use tools."},
    {"role": "user", "content": "Weather in Paris and Lyon?"},
    {"role": "assistant", "content": "", "tool_calls": [
        {"id": "call_a", "type": "function",
         "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}},
        {"id": "call_b", "type": "function",
         "function": {"name": "get_weather", "arguments": '{"city": "Lyon"}'}}]},
    {"role": "tool", "tool_call_id": "call_a", "content": '{"temp_c": 21}'},
    {"role": "tool", "tool_call_id": "call_b", "content": '{"temp_c": 19}'},
    {"role": "assistant", "content": "Paris 21, Lyon 19."},
    {"role": "system", "content": "Now answer in French."},
    {"role": "user", "content": "Et demain ?"},
]


def test_a_whole_agent_loop_becomes_instructions_and_input_items() -> None:
    city = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"],
            "additionalProperties": False}
    tools = [Tool(name="get_weather", description="Weather now", parameters=city, strict=True),
             Tool(name="noop")]
    body = RESPONSES.request(RequestParts(
        model="gpt-x", messages=AGENT_LOOP, tools=tools, tool_choice="required",
        params={"temperature": 0, "max_tokens": 64, "parallel_tool_calls": True}))
    assert body == {
        "model": "gpt-x",
        "instructions": "You are terse.\n\nUse tools.",
        "input": [
            {"role": "user", "content": "Weather in Paris and Lyon?"},
            {"type": "function_call", "call_id": "call_a", "name": "get_weather",
             "arguments": '{"city": "Paris"}'},
            {"type": "function_call", "call_id": "call_b", "name": "get_weather",
             "arguments": '{"city": "Lyon"}'},
            {"type": "function_call_output", "call_id": "call_a", "output": '{"temp_c": 21}'},
            {"type": "function_call_output", "call_id": "call_b", "output": '{"temp_c": 19}'},
            {"type": "message", "role": "assistant", "content": [
                {"type": "output_text", "text": "Paris 21, Lyon 19.", "annotations": []}]},
            {"role": "system", "content": "Now answer in French."},
            {"role": "user", "content": "Et demain ?"},
        ],
        "tools": [
            {"type": "function", "name": "get_weather", "description": "Weather now",
             "parameters": city, "strict": True},
            {"type": "function", "name": "noop",  # the API's default is strict: said not
             "parameters": {"type": "object", "properties": {}}, "strict": False},
        ],
        "tool_choice": "required",
        "temperature": 0,
        "max_output_tokens": 64,
        "parallel_tool_calls": True,
    }


def test_an_assistant_turn_with_text_and_a_call_gives_both_items_in_order() -> None:
    messages = [{"role": "user", "content": "hi"},
                {"role": "assistant", "content": "Let me look.", "tool_calls": [
                    {"id": "c1", "type": "function",
                     "function": {"name": "f", "arguments": {"x": 1}}}]}]
    body = RESPONSES.request(RequestParts(model=None, messages=messages, stream=True))
    assert "model" not in body and "instructions" not in body
    assert body["input"][1:] == [
        {"type": "message", "role": "assistant", "content": [
            {"type": "output_text", "text": "Let me look.", "annotations": []}]},
        {"type": "function_call", "call_id": "c1", "name": "f", "arguments": '{"x": 1}'}]
    assert body["stream"] is True
    assert "store" not in body and "stream_options" not in body


def test_an_assistant_turn_from_a_reply_goes_back_as_its_output_items() -> None:
    output = [{**reasoning_item(["Two cities."]), "encrypted_content": "gAAAAABo-opaque"},
              call_item("call_a", "get_weather", '{"city": "Paris"}'),
              call_item("call_b", "get_weather", '{"city": "Lyon"}')]
    body = RESPONSES.request(RequestParts(model="gpt-x", messages=AGENT_LOOP,
                                          native={3: output}))  # index 3 of the messages
    assert body["instructions"] == "You are terse.\n\nUse tools."
    assert body["input"][:6] == [
        {"role": "user", "content": "Weather in Paris and Lyon?"}, *output,
        {"type": "function_call_output", "call_id": "call_a", "output": '{"temp_c": 21}'},
        {"type": "function_call_output", "call_id": "call_b", "output": '{"temp_c": 19}'}]
    assert body["input"][6] == {"type": "message", "role": "assistant", "content": [
        {"type": "output_text", "text": "Paris 21, Lyon 19.", "annotations": []}]}


def test_reasoning_that_ends_a_reply_is_not_sent_back() -> None:
    """The API refuses a reasoning item without the item that followed it."""
    messages = [{"role": "user", "content": "Weather?"},
                {"role": "assistant", "content": ""},
                {"role": "user", "content": "Again, briefly."}]
    thought = reasoning_item(["Thinking..."])
    alone = RESPONSES.request(RequestParts(model="m", messages=messages, native={1: [thought]}))
    assert alone["input"] == [messages[0], messages[2]]
    call = call_item("c1", "f", "{}")
    later = reasoning_item(["More."], item_id="rs_2")
    kept = RESPONSES.request(RequestParts(model="m", messages=messages,
                                          native={1: [thought, call, later]}))
    assert kept["input"][1:3] == [thought, call]


def test_content_parts_become_input_parts() -> None:
    messages = [{"role": "user", "content": [
        {"type": "text", "text": "What is this?"},
        {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAA", "detail": "low"}},
        {"type": "input_file", "file_id": "file-1"}]},
        {"role": "tool", "tool_call_id": "c1", "content": [{"type": "text", "text": "42"}]}]
    body = RESPONSES.request(RequestParts(model="m", messages=messages))
    assert body["input"] == [
        {"role": "user", "content": [
            {"type": "input_text", "text": "What is this?"},
            {"type": "input_image", "image_url": "data:image/png;base64,AAA", "detail": "low"},
            {"type": "input_file", "file_id": "file-1"}]},
        {"type": "function_call_output", "call_id": "c1",
         "output": [{"type": "input_text", "text": "42"}]}]


@pytest.mark.parametrize(("choice", "sent"), [
    ("auto", "auto"),
    ("none", "none"),
    (ToolChoiceFunction(name="f"), {"type": "function", "name": "f"}),
    (AllowedTools(allowed_tools=AllowedToolsChoice(mode="required", tools=["f", "g"])),
     {"type": "allowed_tools", "mode": "required",
      "tools": [{"type": "function", "name": "f"}, {"type": "function", "name": "g"}]}),
])
def test_tool_choice(choice: Any, sent: Any) -> None:
    body = RESPONSES.request(RequestParts(model="m", messages=[], tool_choice=choice))
    assert body["tool_choice"] == sent


@pytest.mark.parametrize("key", ["max_tokens", "max_completion_tokens", "max_output_tokens"])
def test_the_token_limit_in_any_name_is_max_output_tokens(key: str) -> None:
    body = RESPONSES.request(RequestParts(model="m", messages=[], params={key: 9, "top_p": 1}))
    assert body["max_output_tokens"] == 9
    assert {"max_tokens", "max_completion_tokens"}.isdisjoint(body)
    assert body["top_p"] == 1


# -- whole bodies ------------------------------------------------------------------------


def test_body_text_usage_and_finish() -> None:
    reply = body_reply(response([message_item("Hello "), message_item("there", "msg_2")]))
    assert (reply.text, reply.finish_reason, reply.api_finish_reason) == (
        "Hello there", "stop", "completed")
    assert reply.usage == {**USAGE, "prompt_tokens": 12, "completion_tokens": 7}
    assert reply.problems == [] and reply.error is None and reply.stream is None


def test_body_usage_without_total_gets_the_chat_names() -> None:
    payload = response([message_item("hi")])
    payload["usage"] = {"input_tokens": 3, "output_tokens": 4}
    assert body_reply(payload).usage == {"input_tokens": 3, "output_tokens": 4,
                                         "prompt_tokens": 3, "completion_tokens": 4,
                                         "total_tokens": 7}


def test_body_parallel_calls_keep_their_call_ids() -> None:
    reply = body_reply(response([message_item("Checking."),
                                 call_item("call_1", "get_weather", '{"city": "Paris"}'),
                                 call_item("call_2", "get_weather", '{"city": "Lyon"}')]))
    assert calls_of(reply) == [("call_1", "get_weather", {"city": "Paris"}),
                               ("call_2", "get_weather", {"city": "Lyon"})]
    assert reply.text == "Checking."
    assert (reply.finish_reason, reply.api_finish_reason) == ("tool_calls", "completed")
    assert reply.problems == []


def test_body_as_llama_cpp_sends_it() -> None:
    """llama.cpp's function calls have no ``id``; ``call_id`` is what pairs."""
    payload = response([{"type": "function_call", "status": "completed",
                         "arguments": '{"q": 1}', "call_id": "fc_abc", "name": "f"}])
    reply = body_reply(payload)
    assert calls_of(reply) == [("fc_abc", "f", {"q": 1})]
    assert reply.problems == []


def test_body_reasoning_is_kept_apart_from_the_text() -> None:
    reply = body_reply(response([
        reasoning_item(["17 has no divisors", "so it is prime"], content=["raw thought"]),
        message_item("yes")]))
    assert reply.text == "yes"
    assert reply.reasoning == "17 has no divisors\n\nso it is prime\n\nraw thought"


def test_body_think_block_is_reasoning() -> None:
    reply = body_reply(response([message_item("<think>hmm</think>\n\nyes")]))
    assert (reply.text, reply.reasoning) == ("yes", "hmm")


def test_body_refusal_reads_as_the_text() -> None:
    payload = response([{"type": "message", "id": "msg_1", "role": "assistant", "content": [
        {"type": "refusal", "refusal": "I can't help with that."}]}])
    reply = body_reply(payload)
    assert (reply.text, reply.finish_reason, reply.problems) == (
        "I can't help with that.", "stop", [])


@pytest.mark.parametrize(("reason", "finish"), [("max_output_tokens", "length"),
                                                ("content_filter", "content_filter")])
def test_body_incomplete(reason: str, finish: str) -> None:
    reply = body_reply(response([message_item("The answer is")], status="incomplete",
                                incomplete_details={"reason": reason}))
    assert (reply.text, reply.finish_reason, reply.api_finish_reason) == (
        "The answer is", finish, reason)


def test_body_cut_off_inside_a_function_call_reads_length() -> None:
    """Cut by the token limit while writing a call: ``length``, as chat and Messages say."""
    cut = {**call_item("call_1", "get_weather", '{"ci'), "status": "incomplete"}
    reply = body_reply(response([reasoning_item(["Look it up."]), cut], status="incomplete",
                                incomplete_details={"reason": "max_output_tokens"}))
    assert (reply.finish_reason, reply.api_finish_reason) == ("length", "max_output_tokens")
    assert [call.name for call in reply.tool_calls] == ["get_weather"]


def test_body_incomplete_without_a_reason_keeps_the_status() -> None:
    reply = body_reply(response([], status="incomplete"))
    assert (reply.finish_reason, reply.api_finish_reason) == ("incomplete", "incomplete")


def test_body_failed_response_is_an_error() -> None:
    reply = body_reply(response([], status="failed",
                                error={"code": "server_error", "message": "model crashed"}))
    assert (reply.error, reply.finish_reason, reply.api_finish_reason) == (
        "model crashed", None, "failed")


@pytest.mark.parametrize(("status", "raw", "content_type", "error"), [
    (400, '{"error": {"message": "Unknown parameter: \'foo\'.", "type": "invalid_request_error"}}',
     "application/json", "Unknown parameter: 'foo'."),
    (422, '{"detail": "input is required"}', "application/json", "input is required"),
    (500, '{"error": "boom"}', "application/json", "boom"),
    (503, "Service Unavailable", "text/plain", "Service Unavailable"),
    (502, "", "text/html", "HTTP 502 with an empty body"),
])
def test_error_status_bodies_give_the_apis_message(status: int, raw: str, content_type: str,
                                                   error: str) -> None:
    reply = body_reply(raw, status, content_type)
    assert (reply.status, reply.error, reply.problems) == (status, error, [])


def test_body_not_json_is_a_named_problem() -> None:
    reply = body_reply("<html>hi</html>", content_type="text/html")
    assert problems_named(reply, "responses body: JSON") == [
        ("responses body: JSON: the body (text/html) is not JSON: Expecting value: line 1"
        " column 1 (char 0): '<html>hi</html>'")]


def test_body_without_output_is_a_named_problem() -> None:
    reply = body_reply({"choices": [{"message": {"content": "hi"}}]})
    assert len(problems_named(reply, "responses body: response object")) == 1
    assert "no output list" in reply.problems[0]


def test_body_error_object_in_a_200() -> None:
    reply = body_reply({"error": {"message": "quota exceeded"}})
    assert (reply.error, reply.problems) == ("quota exceeded", [])


def test_body_item_that_is_no_object_is_a_named_problem() -> None:
    reply = body_reply(response([message_item("hi"), "oops"]))
    assert problems_named(reply, "responses body: item") == [
        "responses body: item: output[1] is not an object: '\"oops\"'"]
    assert reply.text == "hi"


def test_body_call_ids_missing_or_shared_are_named_problems() -> None:
    missing = {**call_item("x", "f", "{}")}
    del missing["call_id"]
    reply = body_reply(response([missing, call_item("dup", "g", "{}"),
                                 call_item("dup", "h", "{}")]))
    assert problems_named(reply, "responses body: call_id") == [
        ("responses body: call_id: function call 0 (f) has no call_id, so no"
        " function_call_output can pair with it"),
        ("responses body: call_id: 2 function calls share call_id 'dup' (g, h), so their"
        " results cannot be told apart")]


def test_body_arguments_that_are_not_json() -> None:
    reply = body_reply(response([call_item("c", "f", '{"city": ')]))
    call = reply.tool_calls[0]
    assert call.arguments is None and call.arguments_raw == '{"city": '
    assert call.arguments_error is not None and "Expecting value" in call.arguments_error


# -- streams -----------------------------------------------------------------------------


def test_stream_text_deltas() -> None:
    events = stream(text_events("Hello there", pieces=4), output=[message_item("Hello there")])
    reply = read(events)
    assert (reply.text, reply.finish_reason, reply.api_finish_reason) == (
        "Hello there", "stop", "completed")
    assert reply.problems == [] and reply.error is None
    assert reply.ttft_ms == 40.0  # event 4: created, in_progress, added, part.added, delta
    assert reply.usage is not None and reply.usage["total_tokens"] == 19
    assert reply.stream is not None
    assert (reply.stream.done, reply.stream.chunks, reply.stream.usage, reply.stream.end) == (
        True, len(events), True, END)


def test_stream_arguments_split_across_many_deltas() -> None:
    arguments = json.dumps({"city": "Paris", "units": "celsius", "days": [1, 2, 3]})
    events = stream(call_events("call_1", "get_weather", arguments, size=1),
                    output=[call_item("call_1", "get_weather", arguments)])
    assert sum(e["type"] == "response.function_call_arguments.delta" for e in events) > 40
    reply = read(events)
    assert calls_of(reply) == [("call_1", "get_weather", json.loads(arguments))]
    assert reply.tool_calls[0].arguments_raw == arguments
    assert (reply.finish_reason, reply.problems) == ("tool_calls", [])
    assert reply.ttft_ms == 20.0  # the call's opening


def test_stream_two_parallel_calls_interleaved() -> None:
    first = call_events("call_1", "get_weather", '{"city": "Paris"}', index=0, size=3)
    second = call_events("call_2", "get_weather", '{"city": "Lyon"}', index=1, size=3)
    opened, interleaved = [first[0], second[0]], []
    for pair in zip(first[1:-2], second[1:-2]):
        interleaved.extend(pair)
    interleaved += first[len(second) - 2:-2] + second[len(first) - 2:-2]  # the longer's rest
    events = stream(opened, interleaved, first[-2:], second[-2:], output=[
        call_item("call_1", "get_weather", '{"city": "Paris"}'),
        call_item("call_2", "get_weather", '{"city": "Lyon"}')])
    reply = read(events)
    assert reply.problems == []
    assert calls_of(reply) == [("call_1", "get_weather", {"city": "Paris"}),
                               ("call_2", "get_weather", {"city": "Lyon"})]


def test_stream_as_llama_cpp_sends_it() -> None:
    """No output_index; a function call opened without ``id``, its deltas naming its
    ``call_id``; no arguments .done; output_item.done items without ``id``."""
    call = {"type": "function_call", "status": "completed", "arguments": '{"q": 1}',
            "call_id": "fc_abc", "name": "f"}
    events: Events = [
        {"type": "response.created", "response": {"id": "resp_1", "status": "in_progress"}},
        {"type": "response.in_progress", "response": {"id": "resp_1", "status": "in_progress"}},
        {"type": "response.output_item.added", "item": {
            "id": "rs_1", "summary": [], "type": "reasoning", "content": [],
            "encrypted_content": "", "status": "in_progress"}},
        {"type": "response.reasoning_text.delta", "delta": "think", "item_id": "rs_1"},
        {"type": "response.output_item.added", "item": {
            "content": [], "id": "msg_1", "role": "assistant", "status": "in_progress",
            "type": "message"}},
        {"type": "response.content_part.added", "item_id": "msg_1",
         "part": {"type": "output_text", "text": ""}},
        {"type": "response.output_text.delta", "item_id": "msg_1", "delta": "Sure"},
        {"type": "response.output_item.added", "item": {**call, "arguments": "",
                                                         "status": "in_progress"}},
        {"type": "response.function_call_arguments.delta", "delta": '{"q"', "item_id": "fc_abc"},
        {"type": "response.function_call_arguments.delta", "delta": ": 1}", "item_id": "fc_abc"},
        {"type": "response.output_item.done", "item": {
            "id": "rs_1", "summary": [], "type": "reasoning", "encrypted_content": "",
            "content": [{"text": "think", "type": "reasoning_text"}]}},
        {"type": "response.output_text.done", "item_id": "msg_1", "text": "Sure"},
        {"type": "response.content_part.done", "item_id": "msg_1",
         "part": {"type": "output_text", "annotations": [], "text": "Sure"}},
        {"type": "response.output_item.done", "item": {**message_item("Sure")}},
        {"type": "response.output_item.done", "item": call},
        {"type": "response.completed", "response": {
            "id": "resp_1", "object": "response", "status": "completed",
            "output": [reasoning_item([], ["think"]), message_item("Sure"), call],
            "usage": USAGE}},
    ]
    reply = read(events)
    assert reply.problems == []
    assert (reply.text, reply.reasoning) == ("Sure", "think")
    assert calls_of(reply) == [("fc_abc", "f", {"q": 1})]


def test_stream_reasoning_deltas() -> None:
    events = stream(reasoning_events("no divisors but 1 and 17"), text_events("yes", index=1),
                    output=[reasoning_item(["no divisors but 1 and 17"]), message_item("yes")])
    reply = read(events)
    assert (reply.text, reply.reasoning, reply.problems) == (
        "yes", "no divisors but 1 and 17", [])
    assert reply.ttft_ms is not None and reply.ttft_ms > 0  # reasoning is no first token


def test_stream_refusal_deltas_read_as_the_text() -> None:
    where = {"item_id": "msg_1", "output_index": 0, "content_index": 0}
    events = stream([
        {"type": "response.output_item.added", "output_index": 0,
         "item": {**message_item(""), "content": []}},
        {"type": "response.refusal.delta", **where, "delta": "I can't "},
        {"type": "response.refusal.delta", **where, "delta": "help."},
        {"type": "response.refusal.done", **where, "refusal": "I can't help."},
    ], output=[])
    reply = read(events)
    assert (reply.text, reply.problems) == ("I can't help.", [])


def test_stream_error_event_is_the_replys_error() -> None:
    events = stream(text_events("Hel"), output=[])[:-1] + [
        {"type": "error", "code": "server_error", "message": "The model crashed.",
         "param": None, "sequence_number": 9}]
    reply = read(events)
    assert reply.error == "The model crashed."
    assert reply.stream is not None and not reply.stream.done
    assert reply.problems == [("responses stream: error event server_error (transient: the"
                              " service failed on its side; retry later): The model crashed.")]


def test_stream_error_event_in_plain_text_or_nested() -> None:
    assert read_raw(("error", "upstream timed out")).error == "upstream timed out"
    nested = json.dumps({"type": "error", "error": {"message": "rate limited"}})
    assert read_raw(("error", nested)).error == "rate limited"
    untyped = read_raw(("error", json.dumps({"error": {"message": "overloaded"}})))
    assert (untyped.error, untyped.problems) == (
        "overloaded", ["responses stream: error event: overloaded"])


def test_stream_failed_and_incomplete_terminal_events() -> None:
    failed = read(stream(text_events("Hel"), output=[], status="failed",
                         error={"code": "server_error", "message": "ran out of memory"}))
    assert (failed.error, failed.finish_reason, failed.api_finish_reason) == (
        "ran out of memory", None, "failed")
    assert failed.stream is not None and failed.stream.done
    assert failed.problems == [("responses stream: response.failed server_error (transient: the"
                               " service failed on its side; retry later): ran out of memory")]
    cut = read(stream(text_events("The answer is"), output=[message_item("The answer is")],
                      status="incomplete", incomplete_details={"reason": "max_output_tokens"}))
    assert (cut.finish_reason, cut.api_finish_reason, cut.problems) == (
        "length", "max_output_tokens", [])


def test_stream_cut_off_inside_a_function_call_reads_length() -> None:
    events = call_events("call_1", "get_weather", '{"ci')
    reply = read(stream(events, output=[call_item("call_1", "get_weather", '{"ci')],
                        status="incomplete", incomplete_details={"reason": "max_output_tokens"}))
    assert (reply.finish_reason, reply.api_finish_reason) == ("length", "max_output_tokens")


def test_stream_cut_before_its_terminal_event() -> None:
    reply = read(stream(text_events("Hello"), output=[])[:-1])
    assert reply.stream is not None
    assert (reply.stream.done, reply.stream.end) == (
        False, "response.completed, response.failed or response.incomplete")
    assert reply.text == "Hello" and reply.usage is None and not reply.stream.usage
    assert (reply.finish_reason, reply.problems) == (None, [])  # expect.stream.done says it


def test_stream_cut_inside_an_event_is_a_named_problem() -> None:
    reply = read(stream(text_events("Hello"), output=[]), truncated=True)
    assert problems_named(reply, "responses stream: cut") == [
        ("responses stream: cut: the stream ended inside an event (no blank line after its"
        " last data line)")]


def test_delta_for_an_item_never_opened_is_a_named_problem() -> None:
    where = {"item_id": "msg_9", "output_index": 0, "content_index": 0}
    events = stream([{"type": "response.output_text.delta", **where, "delta": "Hel"},
                     {"type": "response.output_text.delta", **where, "delta": "lo"}],
                    output=[message_item("Hello", "msg_9")])
    reply = read(events)
    assert reply.problems == [
        ("responses stream: delta for an item never opened: response.output_text.delta (event 3)"
        " is for item 'msg_9', which no response.output_item.added opened")]
    assert reply.text == "Hello"  # read all the same


def test_item_done_for_an_item_never_opened_is_a_named_problem() -> None:
    events = stream([{"type": "response.output_item.done", "output_index": 0,
                      "item": call_item("c1", "f", "{}")}], output=[call_item("c1", "f", "{}")])
    reply = read(events)
    assert problems_named(reply, "responses stream: delta for an item never opened") == [
        ("responses stream: delta for an item never opened: response.output_item.done (event 3)"
        " is for item 'fc_c1', which no response.output_item.added opened")]
    assert calls_of(reply) == [("c1", "f", {})]


def test_an_item_closed_without_its_id_is_found_by_its_call_id() -> None:
    events = call_events("c1", "f", '{"a": 1}', size=3)
    del events[-1]["item"]["id"]
    del events[-1]["output_index"]
    reply = read(stream(events, output=[call_item("c1", "f", '{"a": 1}')]))
    assert (calls_of(reply), reply.problems) == ([("c1", "f", {"a": 1})], [])


def test_call_ids_that_do_not_pair_are_named_problems() -> None:
    no_id = call_events("x", "f", "{}", index=0)
    for event in no_id:
        if "item" in event:
            del event["item"]["call_id"]
    events = stream(no_id, call_events("dup", "g", "{}", index=1),
                    call_events("dup", "h", "{}", index=2)[1:],  # same id: the same item
                    output=[])
    events[-1]["response"]["output"] = None  # leave the terminal comparison out of it
    reply = read(events)
    assert problems_named(reply, "responses stream: call_id") == [
        ("responses stream: call_id: function call 0 (f) has no call_id, so no"
        " function_call_output can pair with it")]
    # The third call's events name the second's item: its arguments are the same item's.
    assert len(reply.tool_calls) == 2


def test_two_calls_sharing_a_call_id_are_a_named_problem() -> None:
    first, second = call_events("dup", "g", "{}", index=0), call_events("dup", "h", "{}", 1)
    for event in second:  # its own item id, the same call_id
        if "item" in event:
            event["item"]["id"] = "fc_other"
        if "item_id" in event:
            event["item_id"] = "fc_other"
    reply = read(stream(first, second, output=[call_item("dup", "g", "{}"),
                                               {**call_item("dup", "h", "{}"), "id": "fc_other"}]))
    assert reply.problems == [
        ("responses stream: call_id: 2 function calls share call_id 'dup' (g, h), so their"
        " results cannot be told apart")]


def test_output_text_done_that_disagrees_is_a_named_problem_and_wins() -> None:
    events = text_events("Hello")
    events[-3]["text"] = "Hello!"  # output_text.done
    events[-2]["part"]["text"] = "Hello!"  # content_part.done agrees with it
    events[-1]["item"] = message_item("Hello!")
    reply = read(stream(events, output=[message_item("Hello!")]))
    assert reply.problems == [
        ("responses stream: .done disagrees with deltas: response.output_text.done (event 8) of"
        " item 'msg_1' says 'Hello!'; the stream before it said 'Hello'")]
    assert reply.text == "Hello!"


def test_arguments_done_that_disagrees_is_a_named_problem() -> None:
    events = call_events("c1", "f", '{"a": 1}', size=4)
    events[-2]["arguments"] = '{"a": 2}'
    reply = read(stream(events, output=[call_item("c1", "f", '{"a": 1}')]))
    assert reply.problems[0] == (
        "responses stream: .done disagrees with deltas: response.function_call_arguments.done"
        """ (event 6) of item 'fc_c1' says '{"a": 2}'; the stream before it said '{"a": 1}'""")
    # output_item.done says {"a": 1} again: it disagrees with the .done before it, and wins.
    assert len(reply.problems) == 2
    assert calls_of(reply) == [("c1", "f", {"a": 1})]


def test_item_done_that_disagrees_names_both() -> None:
    events = call_events("c1", "f", '{"a": 1}', size=4)
    del events[-2]  # no arguments .done: the item's .done is the first word on it
    events[-1]["item"] = call_item("c1", "g", '{"a": 1, "b": 2}')
    reply = read(stream(events, output=[call_item("c1", "g", '{"a": 1, "b": 2}')]))
    assert reply.problems == [
        ("responses stream: .done disagrees with deltas: response.output_item.done (event 6) of"
        " item 'fc_c1' says its name 'g'; the stream before it said 'f'"),
        ("responses stream: .done disagrees with deltas: response.output_item.done (event 6) of"
        """ item 'fc_c1' says '{"a": 1, "b": 2}'; the stream before it said '{"a": 1}'""")]
    assert calls_of(reply) == [("c1", "g", {"a": 1, "b": 2})]


def test_a_done_without_deltas_before_it_is_no_disagreement() -> None:
    where = {"item_id": "msg_1", "output_index": 0, "content_index": 0}
    events = stream([
        {"type": "response.output_item.added", "output_index": 0,
         "item": {**message_item(""), "content": []}},
        {"type": "response.output_text.done", **where, "text": "Hi"},
        {"type": "response.output_item.done", "output_index": 0, "item": message_item("Hi")},
    ], output=[message_item("Hi")])
    reply = read(events)
    assert (reply.text, reply.problems) == ("Hi", [])


def test_streamed_arguments_that_are_not_json() -> None:
    bad = '{"city": "Par'
    reply = read(stream(call_events("c1", "f", bad, size=2), output=[call_item("c1", "f", bad)]))
    call = reply.tool_calls[0]
    assert (call.arguments, call.arguments_raw) == (None, bad)
    assert call.arguments_error is not None and "Unterminated string" in call.arguments_error
    assert reply.problems == []  # the stage fails on arguments_error, not twice


def test_terminal_output_with_other_calls_is_a_named_problem() -> None:
    events = stream(call_events("c1", "f", "{}"), output=[call_item("c1", "f", "{}"),
                                                          call_item("c2", "g", '{"x": 1}')])
    reply = read(events)
    assert reply.problems == [
        ("responses stream: terminal output disagrees with the stream: response.completed's"
        ' output holds f({}) [c1], g({"x": 1}) [c2]; the stream made f({}) [c1]')]


@pytest.mark.parametrize("terminal_holds", ["call_1", "call_2"])
def test_a_call_id_that_changes_is_said_once(terminal_holds: str) -> None:
    events = call_events("call_1", "f", '{"a": 1}')
    events[-1]["item"]["call_id"] = "call_2"
    reply = read(stream(events, output=[call_item(terminal_holds, "f", '{"a": 1}')]))
    assert reply.problems == [
        ("responses stream: .done disagrees with deltas: response.output_item.done (event 13)"
         " of item 'fc_call_1' says its call_id 'call_2'; the stream before it said 'call_1'")]


def numbered(events: Events, first: int = 0) -> Events:
    """The events with the ``sequence_number`` the API gives each."""
    return [{**event, "sequence_number": first + n} for n, event in enumerate(events)]


def test_rising_sequence_numbers_read_clean() -> None:
    reply = read(numbered(stream(text_events("Hello"), output=[message_item("Hello")]), 1))
    assert (reply.text, reply.problems) == ("Hello", [])


def test_an_event_out_of_sequence_is_named_first_at_that_event() -> None:
    events = numbered(stream(call_events("c1", "f", '{"a": 1}', size=4),
                             output=[call_item("c1", "f", '{"a": 1}')]))
    events[2], events[3] = events[3], events[2]  # a delta overtakes the item's opening
    reply = read(events)
    assert reply.problems[0] == (
        "responses stream: sequence_number: event 4 (response.output_item.added) has"
        " sequence_number 2, not after event 3's 3: the server sent its events out of order"
        " or twice")
    assert len(problems_named(reply, "responses stream: sequence_number")) == 1


def test_an_event_sent_twice_is_out_of_sequence() -> None:
    events = numbered(stream(text_events("Hi"), output=[message_item("Hi")]))
    events.insert(4, events[3])
    assert problems_named(read(events), "responses stream: sequence_number") == [
        ("responses stream: sequence_number: event 5 (response.content_part.added) has"
         " sequence_number 3, not after event 4's 3: the server sent its events out of order"
         " or twice")]


def test_done_marker_after_the_terminal_event_ends_the_stream() -> None:
    """OpenRouter ends a Responses stream with chat's ``data: [DONE]`` too."""
    events = stream(text_events("Hi"), output=[message_item("Hi")])
    reader = RESPONSES.stream_reader()
    for number, data in enumerate(events):
        reader.add(StreamEvent(json.dumps(data), 10.0 * number, data["type"]), 10.0 * number)
    reader.add(StreamEvent("[DONE]", 99.0, "message"), 99.0)
    reply = reader.finish()
    assert (reply.text, reply.problems) == ("Hi", [])
    assert reply.stream is not None and reply.stream.done
    assert reply.stream.chunks == len(events)


def test_an_event_after_the_done_marker_is_a_named_problem() -> None:
    reply = read_raw(("message", "[DONE]"),
                     ("response.created", json.dumps({"type": "response.created",
                                                      "response": {"status": "in_progress"}})))
    assert reply.problems == [("responses stream: terminal event: event 1 (response.created)"
                               " arrived after data: [DONE]")]


def test_terminal_event_without_a_response_or_followed_by_more() -> None:
    events = stream(text_events("Hi"), output=[message_item("Hi")])
    del events[-1]["response"]
    events.append({"type": "response.output_text.delta", "item_id": "msg_1",
                   "output_index": 0, "content_index": 0, "delta": "!"})
    reply = read(events)
    assert problems_named(reply, "responses stream: terminal event") == [
        (f"responses stream: terminal event: response.completed (event {len(events) - 1})"
        " carries no response object"),
        (f"responses stream: terminal event: event {len(events)} (response.output_text.delta)"
        " arrived after response.completed")]
    assert reply.stream is not None and reply.stream.done
    assert reply.api_finish_reason == "completed"  # from the event's own name


def test_event_line_and_data_type_that_differ() -> None:
    data = json.dumps({"type": "response.completed", "response": response([])})
    reply = read_raw(("response.done", data))
    assert reply.problems == [
        ("responses stream: event type: event 1 is 'response.done' on its event line and"
        " 'response.completed' in its data; read as 'response.completed'")]
    assert reply.stream is not None and reply.stream.done


def test_data_without_type_is_read_by_its_event_line() -> None:
    reply = read_raw(("response.completed", json.dumps({"response": response([])})))
    assert reply.problems == [
        ("responses stream: event type: event 1 has no type in its data; read as"
        " 'response.completed', from its event line")]
    assert reply.stream is not None and reply.stream.done
    nameless = read_raw(("message", "{}"))
    assert nameless.problems == [
        ("responses stream: event type: event 1 has no type, in its data or on an event line;"
        " ignored")]


def test_data_that_is_not_a_json_object() -> None:
    reply = read_raw(("response.output_text.delta", "{oops"), ("message", "[1]"))
    assert reply.problems == [
        ("responses stream: JSON: event 1 is not JSON: Expecting property name enclosed in"
        " double quotes: line 1 column 2 (char 1): '{oops'"),
        "responses stream: JSON: event 2 is not a JSON object: '[1]'"]


def test_unknown_events_are_counted_and_ignored() -> None:
    events = stream(text_events("Hi"), output=[message_item("Hi")])
    events.insert(3, {"type": "response.output_text.annotation.added", "item_id": "msg_1",
                      "annotation": {"type": "url_citation"}})
    events.insert(4, {"type": "response.some_future_event", "sequence_number": 4})
    reply = read(events)
    assert (reply.text, reply.problems) == ("Hi", [])
    assert reply.stream is not None and reply.stream.chunks == len(events)


def test_item_id_and_output_index_naming_different_items() -> None:
    events = stream(call_events("c1", "f", "{}", index=1),
                    text_events("Hi", item_id="msg_1", index=0), output=[])
    events[-1]["response"]["output"] = None
    delta = next(e for e in events if e["type"] == "response.output_text.delta")
    delta["output_index"] = 1
    reply = read(events)
    assert problems_named(reply, "responses stream: output_index") == [
        ("responses stream: output_index: response.output_text.delta (event 10) names item"
        " 'msg_1' and output_index 1, which is item 'fc_c1'; read as 'msg_1'")]
    assert reply.text == "Hi"


def test_an_item_opened_twice_or_without_an_object() -> None:
    events = stream(text_events("Hi"), output=[message_item("Hi")])
    events.insert(3, dict(events[2]))
    events.insert(4, {"type": "response.output_item.added", "output_index": 1, "item": None})
    reply = read(events)
    assert problems_named(reply, "responses stream: item") == [
        "responses stream: item: item 'msg_1' opened twice (event 4)",
        ("responses stream: item: response.output_item.added (event 5) carries no item object:"
        " 'null'")]
    assert reply.text == "Hi"


def test_a_function_call_without_a_name() -> None:
    events = call_events("c1", "", "{}")
    reply = read(stream(events, output=[call_item("c1", "", "{}")]))
    assert reply.problems == ["responses stream: item: function call 0 (c1) has no name"]


def test_a_stream_and_a_body_of_one_answer_read_the_same() -> None:
    output = [reasoning_item(["think"]), message_item("Paris, then Lyon."),
              call_item("c1", "get_weather", '{"city": "Paris"}'),
              call_item("c2", "get_weather", '{"city": "Lyon"}')]
    streamed = read(stream(reasoning_events("think"),
                           text_events("Paris, then Lyon.", index=1),
                           call_events("c1", "get_weather", '{"city": "Paris"}', index=2),
                           call_events("c2", "get_weather", '{"city": "Lyon"}', index=3),
                           output=output))
    whole = body_reply(response(output))
    for reply in (streamed, whole):
        assert reply.problems == []
    for field in ("text", "reasoning", "finish_reason", "api_finish_reason", "usage"):
        assert getattr(streamed, field) == getattr(whole, field), field
    assert calls_of(streamed) == calls_of(whole)
    assert streamed.native_turn == whole.native_turn == output


def test_a_stream_without_item_done_events_rebuilds_its_items() -> None:
    """llama.cpp-like: items opened, their deltas, no output_item.done."""
    events: Events = [
        {"type": "response.output_item.added", "item": {
            "id": "rs_1", "type": "reasoning", "summary": [], "encrypted_content": "e1"}},
        {"type": "response.reasoning_summary_text.delta", "item_id": "rs_1", "delta": "Hm"},
        {"type": "response.output_item.added", "item": {
            "id": "msg_1", "type": "message", "role": "assistant", "content": []}},
        {"type": "response.output_text.delta", "item_id": "msg_1", "delta": "On it."},
        {"type": "response.output_item.added", "item": {
            "type": "function_call", "call_id": "c1", "name": "f", "arguments": ""}},
        {"type": "response.function_call_arguments.delta", "item_id": "c1", "delta": "{}"},
        {"type": "response.completed", "response": response([])},
    ]
    assert read(events).native_turn == [
        {"id": "rs_1", "type": "reasoning", "encrypted_content": "e1",
         "summary": [{"type": "summary_text", "text": "Hm"}]},
        {"id": "msg_1", "type": "message", "role": "assistant",
         "content": [{"type": "output_text", "text": "On it.", "annotations": []}]},
        {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}"}]


# -- whole runs of the plugin ------------------------------------------------------------


def sse(events: Events) -> Any:
    """A Responses API stream as the server sends it: named events, no ``[DONE]``."""
    return sse_reply([named_event(event["type"], event) for event in events], done=False)


def input_items(request: RecordedRequest, kind: str) -> list[dict[str, Any]]:
    return [item for item in request.json()["input"] if item.get("type") == kind]


def write_case(pytester: pytest.Pytester, server: ChatServer, body: str) -> Path:
    endpoint = f"endpoint: {{base_url: '{server.base_url}'}}\n"
    return pytester.makefile(".case.yaml", resp=endpoint + body)


def run_live(pytester: pytest.Pytester, *args: str) -> pytest.RunResult:
    return pytester.runpytest("-p", "no:cacheprovider", "--toolbench-mode=live",
                              "--toolbench-api=responses", *args)


WEATHER = """
system: Be brief.
tools:
  - name: get_weather
    description: Weather now in a city
    parameters: {type: object, properties: {city: {type: string}}, required: [city]}
    result: {temp_c: 21}
"""


def test_run_not_streamed(pytester: pytest.Pytester, chat_server: ChatServer) -> None:
    chat_server.enqueue(json_reply(response([message_item("Hello from Responses")])))
    write_case(pytester, chat_server, WEATHER + """name: hello
model: gpt-x
params: {max_tokens: 50}
stages:
  - name: greet
    user: Say hello
    expect:
      text: {$contains: Responses}
      finish_reason: stop
      api_finish_reason: completed
      usage: {total_tokens: 19, prompt_tokens: 12}
""")
    run_live(pytester).assert_outcomes(passed=1)
    sent = chat_server.requests[0]
    assert sent.path == "/v1/responses"
    assert sent.json() == {
        "model": "gpt-x", "instructions": "Be brief.",
        "input": [{"role": "user", "content": "Say hello"}],
        "tools": [{"type": "function", "name": "get_weather",
                   "description": "Weather now in a city",
                   "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                                  "required": ["city"]},
                   "strict": False}],
        "max_output_tokens": 50}


def test_run_tools_are_strict_only_when_the_case_says_so(pytester: pytest.Pytester,
                                                          chat_server: ChatServer) -> None:
    """The API takes a function without ``strict`` for a strict one and makes its optional
    arguments required: the case's meaning is kept by saying ``strict: false``."""
    chat_server.enqueue(json_reply(response([message_item("ok")])))
    write_case(pytester, chat_server, """name: tools
tools:
  - name: get_weather
    parameters: {type: object, properties: {city: {type: string}, unit: {type: string}},
                 required: [city]}
  - name: get_time
    strict: false
  - name: get_date
    strict: true
    parameters: {type: object, properties: {}, additionalProperties: false}
stages: [{name: ask, user: Weather in Paris?}]
""")
    run_live(pytester).assert_outcomes(passed=1)
    sent = chat_server.requests[0].json()["tools"]
    assert [(tool["name"], tool["strict"]) for tool in sent] == [
        ("get_weather", False), ("get_time", False), ("get_date", True)]


def test_run_streamed_call_split_across_deltas_with_run_tools(
        pytester: pytest.Pytester, chat_server: ChatServer) -> None:
    arguments = '{"city": "Paris"}'

    def answer(request: RecordedRequest) -> Any:
        if not input_items(request, "function_call_output"):
            return sse(stream(call_events("call_7", "get_weather", arguments, size=2),
                              output=[call_item("call_7", "get_weather", arguments)]))
        return sse(stream(text_events("It is 21 C in Paris."),
                          output=[message_item("It is 21 C in Paris.")]))

    chat_server.set_handler(answer)
    write_case(pytester, chat_server, WEATHER + """name: loop
stages:
  - name: ask
    user: Weather in Paris?
    stream: true
    run_tools: true
    expect:
      text: {$contains: "21 C"}
      tool_calls: [{name: get_weather, arguments: {city: Paris}}]
""")
    run_live(pytester).assert_outcomes(passed=1)
    second = chat_server.requests[1].json()
    assert second["stream"] is True
    assert second["input"][1:] == [
        call_item("call_7", "get_weather", arguments),  # as the server sent it, id included
        {"type": "function_call_output", "call_id": "call_7", "output": '{"temp_c": 21}'}]


def reasoning_server(reasoning: dict[str, Any], call: dict[str, Any]) -> Any:
    """Answers as a reasoning model does: a reasoning item and a function call, then (a 400
    unless the function call goes back after its reasoning item, both as sent) the answer."""
    def answer(request: RecordedRequest) -> Any:
        body = request.json()
        if not input_items(request, "function_call_output"):
            if body.get("stream"):
                summary = reasoning["summary"][0]["text"]
                events = reasoning_events(summary, item_id=reasoning["id"])
                events[-1]["item"] = reasoning  # the whole item comes with its .done
                return sse(stream(events, call_events(call["call_id"], call["name"],
                                                      call["arguments"], index=1, size=4),
                                  output=[reasoning, call]))
            return json_reply(response([reasoning, call]))
        if body["input"][1:3] != [reasoning, call]:
            return json_reply({"error": {
                "message": f"Item '{call['id']}' of type 'function_call' was provided without"
                           f" its required 'reasoning' item: '{reasoning['id']}'.",
                "type": "invalid_request_error", "param": "input", "code": None}}, status=400)
        answer_item = message_item("It is 21 C in Paris.")
        if body.get("stream"):
            return sse(stream(text_events("It is 21 C in Paris."), output=[answer_item]))
        return json_reply(response([answer_item]))

    return answer


@pytest.mark.parametrize("streamed", [True, False])
def test_run_reasoning_and_call_go_back_as_sent(
        pytester: pytest.Pytester, chat_server: ChatServer, streamed: bool) -> None:
    reasoning = {**reasoning_item(["Paris: look up the weather."], item_id="rs_68ab"),
                 "encrypted_content": "gAAAAABo3xQ-opaque-state=="}
    call = call_item("call_7", "get_weather", '{"city": "Paris"}')
    chat_server.set_handler(reasoning_server(reasoning, call))
    write_case(pytester, chat_server, WEATHER + f"""name: loop
params: {{include: [reasoning.encrypted_content], store: false, reasoning: {{effort: low}}}}
stages:
  - name: ask
    user: Weather in Paris?
    stream: {str(streamed).lower()}
    run_tools: true
    expect:
      text: {{$contains: "21 C"}}
      tool_calls: [{{name: get_weather, arguments: {{city: Paris}}}}]
""")
    run_live(pytester).assert_outcomes(passed=1)
    second = chat_server.requests[1].json()
    assert second["input"] == [
        {"role": "user", "content": "Weather in Paris?"}, reasoning, call,
        {"type": "function_call_output", "call_id": "call_7", "output": '{"temp_c": 21}'}]


def test_run_reply_cut_off_while_thinking_does_not_break_what_follows(
        pytester: pytest.Pytester, chat_server: ChatServer) -> None:
    """A reasoning model out of tokens while thinking returns a reasoning item alone; the
    service answers 400 to a request that sends it back alone (the loopback server too)."""
    first = {**reasoning_item(["Paris: look up the weather."]), "encrypted_content": "gAAA=="}
    call = call_item("call_7", "get_weather", '{"city": "Paris"}')
    cut_short = reasoning_item(["Now, 21 C means"], item_id="rs_2")

    def answer(request: RecordedRequest) -> Any:
        sent = request.json()["input"]
        if len(sent) == 1:
            return json_reply(response([first, call]))
        if sent[-1].get("type") == "function_call_output":
            return json_reply(response([cut_short], status="incomplete",
                                       incomplete_details={"reason": "max_output_tokens"}))
        return json_reply(response([message_item("It is 21 C in Paris.")]))

    chat_server.set_handler(answer)
    write_case(pytester, chat_server, WEATHER + """name: thinking
params: {max_tokens: 64, reasoning: {effort: high}}
stages:
  - name: ask
    user: Weather in Paris?
    run_tools: true
    expect: {finish_reason: length}
  - name: again
    user: Just the temperature, please.
    expect: {text: {$contains: "21 C"}}
""")
    run_live(pytester).assert_outcomes(passed=1)
    last = chat_server.requests[-1].json()["input"]
    assert [item.get("id") for item in last if item.get("type") == "reasoning"] == ["rs_1"]
    assert last[-1] == {"role": "user", "content": "Just the temperature, please."}


def test_run_infinity_in_an_item_sent_back_fails_the_case_without_sending(
        pytester: pytest.Pytester, chat_server: ChatServer) -> None:
    """Output items go back as they came; one holding Infinity (which Python's JSON reader
    accepts) cannot be sent as JSON: the case fails saying so, and nothing is sent."""
    reasoning = {**reasoning_item(["Look it up."]), "confidence": float("inf")}
    call = call_item("call_7", "get_weather", '{"city": "Paris"}')
    chat_server.set_handler(lambda request: json_reply(response([reasoning, call])))
    write_case(pytester, chat_server, WEATHER + """name: loop
stages:
  - {name: ask, user: Weather in Paris?, run_tools: true}
""")

    result = run_live(pytester)

    result.assert_outcomes(failed=1)
    assert "INTERNALERROR" not in result.stdout.str() and "Traceback" not in result.stdout.str()
    result.stdout.fnmatch_lines(
        ["*request not sendable: it holds NaN or Infinity*the server put them in its earlier*"])
    assert len(chat_server.requests) == 1


def test_run_parallel_calls_streamed(pytester: pytest.Pytester,
                                     chat_server: ChatServer) -> None:
    paris, lyon = '{"city": "Paris"}', '{"city": "Lyon"}'

    def answer(request: RecordedRequest) -> Any:
        if not input_items(request, "function_call_output"):
            first = call_events("call_p", "get_weather", paris, index=0, size=4)
            second = call_events("call_l", "get_weather", lyon, index=1, size=4)
            mixed = [event for pair in zip(first, second) for event in pair]
            return sse(stream(mixed, first[len(second):], output=[
                call_item("call_p", "get_weather", paris),
                call_item("call_l", "get_weather", lyon)]))
        return sse(stream(text_events("Both 21 C."), output=[message_item("Both 21 C.")]))

    chat_server.set_handler(answer)
    write_case(pytester, chat_server, WEATHER + """name: both
stages:
  - name: ask
    user: Weather in Paris and Lyon?
    stream: true
    run_tools: true
    params: {parallel_tool_calls: true}
    expect:
      tool_calls:
        - {name: get_weather, arguments: {city: Paris}}
        - {name: get_weather, arguments: {city: Lyon}}
""")
    run_live(pytester).assert_outcomes(passed=1)
    first_sent, second = chat_server.requests[0].json(), chat_server.requests[1]
    assert first_sent["parallel_tool_calls"] is True
    assert [(item["call_id"]) for item in input_items(second, "function_call_output")] == [
        "call_p", "call_l"]


def test_run_reply_cut_off_in_a_call_reads_length_as_over_chat(
        pytester: pytest.Pytester, chat_server: ChatServer) -> None:
    cut = {**call_item("call_1", "get_weather", '{"city": "Pa'), "status": "incomplete"}
    chat_server.enqueue(json_reply(response([cut], status="incomplete",
                                            incomplete_details={"reason": "max_output_tokens"})))
    write_case(pytester, chat_server, WEATHER + """name: cut
params: {max_tokens: 16}
stages:
  - name: ask
    user: Weather in Paris?
    expect:
      finish_reason: length
      api_finish_reason: max_output_tokens
""")
    run_live(pytester).assert_outcomes(passed=1)


def test_run_stream_ending_with_a_done_marker_as_openrouter_sends_it(
        pytester: pytest.Pytester, chat_server: ChatServer) -> None:
    events = numbered(stream(text_events("Hello there"), output=[message_item("Hello there")]))
    chat_server.enqueue(sse_reply([named_event(event["type"], event) for event in events],
                                  done=True))
    write_case(pytester, chat_server, """name: relayed
stages:
  - name: ask
    user: Hi
    stream: true
    expect: {text: Hello there, stream: {done: true}}
""")
    run_live(pytester).assert_outcomes(passed=1)


def test_run_event_out_of_sequence_fails_naming_it(pytester: pytest.Pytester,
                                                   chat_server: ChatServer) -> None:
    events = numbered(stream(text_events("Hello"), output=[message_item("Hello")]))
    events[3], events[4] = events[4], events[3]  # the part's opening after its first delta
    chat_server.enqueue(sse(events))
    write_case(pytester, chat_server, """name: shuffled
stages:
  - name: ask
    user: Hi
    stream: true
""")
    result = run_live(pytester)
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines([("*responses stream: sequence_number: event 5"
                                  " (response.content_part.added) has sequence_number 3, not"
                                  " after event 4's 4*")])


def test_run_error_event_fails_naming_its_code_and_that_it_is_transient(
        pytester: pytest.Pytester, chat_server: ChatServer) -> None:
    events = stream(text_events("Hel"), output=[])[:-1] + [
        {"type": "error", "code": "server_error", "message": "The model crashed mid-reply.",
         "param": None}]
    chat_server.enqueue(sse(events))
    write_case(pytester, chat_server, """name: crash
stages:
  - name: ask
    user: Hi
    stream: true
""")
    result = run_live(pytester)
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines([
        ("*stages[[]0[]].expect: responses stream: error event server_error (transient: the"
        " service failed on its side; retry later): The model crashed mid-reply.")])


def test_response_failed_in_a_stream_names_its_code(pytester: pytest.Pytester,
                                                     chat_server: ChatServer) -> None:
    error = {"code": "server_error", "message": "The server had an error processing your"
             " request."}
    chat_server.enqueue(sse(stream(text_events("Hel"), output=[], status="failed",
                                   error=error)))
    write_case(pytester, chat_server, """name: crash
stages:
  - name: ask
    user: Hi
    stream: true
""")
    result = run_live(pytester)
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines([
        ("*: responses stream: response.failed server_error (transient: the service"
        " failed on its side; retry later): The server had an error processing your request.")])


def test_run_cut_stream_fails_naming_the_terminal_event(pytester: pytest.Pytester,
                                                        chat_server: ChatServer) -> None:
    chat_server.enqueue(sse(stream(text_events("Hello"), output=[])[:-1]))
    write_case(pytester, chat_server, """name: cut
stages:
  - name: ask
    user: Hi
    stream: true
    expect: {text: Hello}
""")
    result = run_live(pytester)
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines([
        "*stream ended without response.completed, response.failed or response.incomplete*"])


def test_run_protocol_slip_fails_naming_its_check(pytester: pytest.Pytester,
                                                  chat_server: ChatServer) -> None:
    events = text_events("Hello")
    events[-3]["text"] = "Goodbye"
    chat_server.enqueue(sse(stream(events, output=[message_item("Hello")])))
    write_case(pytester, chat_server, """name: slip
stages:
  - name: ask
    user: Hi
    stream: true
""")
    result = run_live(pytester)
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines([
        ("*responses stream: .done disagrees with deltas: response.output_text.done (event 8)"
        " of item 'msg_1' says 'Goodbye'; the stream before it said 'Hello'*")])


def test_run_reasoning_expectation(pytester: pytest.Pytester, chat_server: ChatServer) -> None:
    chat_server.enqueue(sse(stream(
        reasoning_events("17 has no divisors"), text_events("yes", index=1),
        output=[reasoning_item(["17 has no divisors"]), message_item("yes")])))
    write_case(pytester, chat_server, """name: think
stages:
  - name: ask
    user: Is 17 prime?
    stream: true
    expect:
      text: "yes"
      reasoning: {$contains: divisors}
""")
    run_live(pytester).assert_outcomes(passed=1)


def test_run_stream_both(pytester: pytest.Pytester, chat_server: ChatServer) -> None:
    def answer(request: RecordedRequest) -> Any:
        if request.json().get("stream"):
            return sse(stream(text_events("Paris is sunny", pieces=5),
                              output=[message_item("Paris is sunny")]))
        return json_reply(response([message_item("Paris is sunny today")]))

    chat_server.set_handler(answer)
    write_case(pytester, chat_server, """name: both
stages:
  - name: ask
    user: Weather?
    stream: both
    expect: {text: {$contains: sunny}}
""")
    result = run_live(pytester)
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines([
        "*streamed and non-streamed replies differ in text*",
        '*- expected: "Paris is sunny today"',
        '*+ actual:   "Paris is sunny"',
    ])
    assert [r.json().get("stream", False) for r in chat_server.requests] == [True, False]
    assert all(r.path == "/v1/responses" for r in chat_server.requests)


def test_run_error_status_shows_the_apis_message(pytester: pytest.Pytester,
                                                 chat_server: ChatServer) -> None:
    chat_server.enqueue(json_reply({"error": {
        "message": "Invalid 'temperature': decimal above maximum value. Expected a value <= 2,"
                   " but got 9 instead.", "type": "invalid_request_error"}}, status=400))
    write_case(pytester, chat_server, """name: refused
params: {temperature: 9}
stages:
  - name: ask
    user: Hi
""")
    result = run_live(pytester)
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*the server said: Invalid 'temperature': decimal above*"])
    assert chat_server.requests[0].json()["temperature"] == 9


def test_run_recorded_stream_replays_without_the_server(
        pytester: pytest.Pytester, chat_server: ChatServer) -> None:
    arguments = '{"city": "Paris"}'
    chat_server.enqueue(sse(stream(call_events("call_1", "get_weather", arguments, size=5),
                                   output=[call_item("call_1", "get_weather", arguments)])))
    write_case(pytester, chat_server, WEATHER + """name: recorded
stages:
  - name: ask
    user: Weather in Paris?
    stream: true
    expect:
      tool_calls: [{name: get_weather, arguments: {city: Paris}}]
      stream: {done: true, usage: true}
""")
    pytester.runpytest("-p", "no:cacheprovider", "--toolbench-record",
                       "--toolbench-api=responses").assert_outcomes(passed=1)
    cassette = next((pytester.path / "__cassettes__").rglob("*.yaml")).read_text()
    assert "api: responses" in cassette and "response.function_call_arguments.delta" in cassette
    chat_server.close()  # replay must not need it
    result = pytester.runpytest("-p", "no:cacheprovider", "--toolbench-api=responses")
    result.assert_outcomes(passed=1)


def test_streamed_calls_say_when_their_arguments_completed() -> None:
    """Each call's last arguments delta; a call sent whole, its closing event."""
    events = stream(call_events("call_a", "f", '{"x": 1}', index=0, size=4),
                    output=[call_item("call_a", "f", '{"x": 1}')])
    last_delta = max(number for number, event in enumerate(events)
                     if event["type"] == "response.function_call_arguments.delta")
    assert [call.completed_ms for call in read(events).tool_calls] == [10.0 * last_delta]
    whole = [event for event in events if not event["type"].startswith(
        "response.function_call_arguments")]
    done_at = next(number for number, event in enumerate(whole)
                   if event["type"] == "response.output_item.done")
    assert [call.completed_ms for call in read(whole).tool_calls] == [10.0 * done_at]


# -- reasoning sent only encrypted -------------------------------------------------------

ENCRYPTED = {"type": "reasoning", "id": "rs_1", "summary": [],
             "encrypted_content": "gAAAAABo0f8kZ1x2"}


def test_reasoning_sent_only_encrypted_reads_as_redacted_in_a_body_and_a_stream() -> None:
    output = [ENCRYPTED, message_item("Paris.")]
    streamed = read(stream([{"type": "response.output_item.added", "output_index": 0,
                             "item": {**ENCRYPTED, "encrypted_content": None}},
                            {"type": "response.output_item.done", "output_index": 0,
                             "item": ENCRYPTED}],
                           text_events("Paris.", index=1), output=output))
    whole = body_reply(response(output))
    for reply in (streamed, whole):
        assert (reply.text, reply.reasoning, reply.problems) == (
            "Paris.", "[redacted reasoning]", [])


def test_readable_reasoning_comes_first_and_an_empty_item_without_ciphertext_is_none() -> None:
    both = body_reply(response([reasoning_item(["Look it up."], item_id="rs_0"),
                                {**ENCRYPTED, "id": "rs_2"}, message_item("Paris.")]))
    assert both.reasoning == "Look it up.\n\n[redacted reasoning]"
    empty = body_reply(response([{"type": "reasoning", "id": "rs_1", "summary": []},
                                 message_item("Paris.")]))
    assert empty.reasoning is None
