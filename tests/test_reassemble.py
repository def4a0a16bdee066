"""StreamAssembler and parse_completion on the shapes real servers send (SPEC section 6)."""

from __future__ import annotations

import json
import textwrap
from typing import Any

import pytest
from support.chat_server import ChatServer, RecordedRequest, sse_reply
from support.chat_server import Reply as ServerReply

from pytest_toolbench.records import Reply, StreamStats
from pytest_toolbench.transport.sse import SSEDecoder, SSEEvent
from pytest_toolbench.wire.chat_reader import StreamAssembler, parse_completion

Chunk = dict[str, Any] | str | SSEEvent


def chunk(delta: dict[str, Any] | None = None, finish: str | None = None, **extra: Any) -> Chunk:
    """A chat.completion.chunk with one choice."""
    choice = {"index": 0, "delta": delta or {}, "finish_reason": finish}
    return {"object": "chat.completion.chunk", "choices": [choice], **extra}


def call(
    index: int | None = None,
    id: Any = None,
    name: str | None = None,
    arguments: Any = None,
) -> dict[str, Any]:
    """A tool-call delta item; ``None`` fields are left out."""
    item: dict[str, Any] = {}
    if index is not None:
        item["index"] = index
    if id is not None:
        item.update(id=id, type="function")
    function = {"name": name, "arguments": arguments}
    item["function"] = {key: value for key, value in function.items() if value is not None}
    return item


def calls(*items: dict[str, Any]) -> Chunk:
    return chunk({"tool_calls": list(items)})


def assemble(*chunks: Chunk, done: bool = True, truncated: bool = False) -> Reply:
    """Feed the chunks (dicts become JSON data events) at offsets 10, 20, ... ms."""
    assembler = StreamAssembler()
    for number, item in enumerate(chunks, start=1):
        if isinstance(item, dict):
            item = SSEEvent(json.dumps(item))
        elif isinstance(item, str):
            item = SSEEvent(item)
        assembler.add(item, offset_ms=10.0 * number)
    if done:
        assembler.add(SSEEvent("[DONE]"), offset_ms=1000.0)
    return assembler.finish(truncated=truncated)


def summary(reply: Reply) -> list[tuple[str | None, str, Any]]:
    return [(c.id, c.name, c.arguments) for c in reply.tool_calls]


USAGE = {"prompt_tokens": 5, "completion_tokens": 3, "total_tokens": 8}


def test_text_stream_with_usage_chunk() -> None:
    reply = assemble(
        chunk({"role": "assistant", "content": ""}),
        chunk({"content": "Hel"}),
        chunk({"content": "lo"}),
        chunk({}, finish="stop"),
        {"choices": [], "usage": USAGE},
    )
    assert (reply.text, reply.finish_reason, reply.usage) == ("Hello", "stop", USAGE)
    assert reply.stream == StreamStats(done=True, chunks=5, usage=True)
    assert reply.ttft_ms == 20.0  # the empty content of chunk 1 is not a first token
    assert reply.problems == [] and reply.error is None and reply.tool_calls == []


def test_arguments_fragments_split_json_tokens() -> None:
    reply = assemble(
        calls(call(0, "call_1", "get_weather", "")),
        calls(call(0, arguments='{"ci')),
        calls(call(0, arguments='ty": "Pa')),
        calls(call(0, arguments='ris"}')),
        chunk(finish="tool_calls"),
    )
    assert summary(reply) == [("call_1", "get_weather", {"city": "Paris"})]
    assert reply.tool_calls[0].arguments_raw == '{"city": "Paris"}'
    assert reply.finish_reason == "tool_calls"
    assert reply.ttft_ms == 10.0 and reply.problems == []


def test_parallel_calls_interleaved_by_index() -> None:
    reply = assemble(
        calls(call(0, "a", "f", ""), call(1, "b", "g", "")),
        calls(call(1, arguments='{"y"')),
        calls(call(0, arguments='{"x": 1}')),
        calls(call(1, arguments=": 2}")),
    )
    assert summary(reply) == [("a", "f", {"x": 1}), ("b", "g", {"y": 2})]
    assert reply.problems == []


def test_usage_in_finish_chunk() -> None:
    reply = assemble(chunk({"content": "hi"}), chunk(finish="stop", usage=USAGE))
    assert reply.usage == USAGE and reply.stream is not None and reply.stream.usage


def test_usage_null_on_every_chunk_is_ignored() -> None:
    reply = assemble(
        chunk({"content": "hi"}, usage=None),
        {"choices": [], "usage": USAGE},
        chunk(finish="stop", usage=None),
    )
    assert reply.usage == USAGE


def test_no_usage_chunk() -> None:
    reply = assemble(chunk({"content": "hi"}, finish="stop"))
    assert reply.usage is None and reply.stream == StreamStats(done=True, chunks=1, usage=False)


def test_no_done_marker() -> None:
    reply = assemble(chunk({"content": "hi"}, finish="stop"), done=False)
    assert reply.stream is not None and not reply.stream.done and reply.problems == []


def test_llamacpp_null_first_delta_repeated_header_and_padded_arguments() -> None:
    nulls = {"role": "assistant", "content": None, "function_call": None, "tool_calls": None}
    header = {"index": 0, "id": "call_0", "type": "function"}
    fragments = ["{", ' "', "city", '":', ' "', "Paris", '"', " }", " ", ""]
    reply = assemble(
        chunk(nulls),
        *(
            chunk(
                {
                    "content": None,
                    "function_call": {"name": "get_weather", "arguments": piece},
                    "tool_calls": [
                        {**header, "function": {"name": "get_weather", "arguments": piece}}
                    ],
                }
            )
            for piece in fragments
        ),
        chunk({"function_call": None, "tool_calls": None}, finish="tool_calls"),
    )
    assert summary(reply) == [("call_0", "get_weather", {"city": "Paris"})]
    assert reply.tool_calls[0].arguments_raw == '{ "city": "Paris" } '
    assert reply.ttft_ms == 20.0
    assert reply.problems == []


def test_ollama_whole_calls_without_index() -> None:
    reply = assemble(
        chunk(
            {
                "content": "",
                "tool_calls": [
                    call(id="call_a", name="get_weather", arguments='{"city": "Paris"}'),
                    call(id="call_b", name="get_weather", arguments='{"city": "Rome"}'),
                ],
            }
        ),
        chunk({"content": ""}, finish="stop"),
    )
    assert summary(reply) == [
        ("call_a", "get_weather", {"city": "Paris"}),
        ("call_b", "get_weather", {"city": "Rome"}),
    ]
    assert reply.finish_reason == "stop" and reply.problems == []


def test_index_less_fragments_continue_the_single_open_call() -> None:
    reply = assemble(
        calls(call(id="c1", name="f", arguments="")),
        calls(call(arguments='{"a"')),
        calls(call(arguments=": 1}")),
    )
    assert summary(reply) == [("c1", "f", {"a": 1})] and reply.problems == []


def test_index_less_repeated_id_continues_that_call() -> None:
    reply = assemble(
        calls(call(id="c1", name="f", arguments='{"a"')),
        calls(call(id="c1", name="f", arguments=": 1}")),
    )
    assert summary(reply) == [("c1", "f", {"a": 1})] and reply.problems == []


def test_index_less_fragment_with_two_open_calls_is_ambiguous() -> None:
    reply = assemble(
        calls(call(id="c1", name="f", arguments="{}")),
        calls(call(id="c2", name="g", arguments="{")),
        calls(call(arguments="}")),
    )
    assert summary(reply) == [("c1", "f", {}), ("c2", "g", {})]
    assert reply.problems == [
        ("chat stream: event 3: tool-call delta has no index while 2 calls are open; appended to"
         " the last one")
    ]


def test_repeated_header_does_not_duplicate_name() -> None:
    reply = assemble(
        calls(call(0, "c1", "get_weather", "")),
        calls(call(0, "c1", "get_weather", '{"city":')),
        calls(call(0, "c1", "get_weather", '"Oslo"}')),
    )
    assert summary(reply) == [("c1", "get_weather", {"city": "Oslo"})]


def test_header_renaming_a_call_is_a_problem() -> None:
    reply = assemble(calls(call(0, "c1", "f", "{}")), calls(call(0, name="g")))
    assert summary(reply) == [("c1", "f", {})]
    assert reply.problems == ["chat stream: tool call 0 renamed from 'f' to 'g'; kept 'f'"]


def test_arguments_as_object_and_integer_id() -> None:
    reply = assemble(calls(call(0, 7, "f", {"city": "Paris", "n": [1, 2]})))
    assert summary(reply) == [("7", "f", {"city": "Paris", "n": [1, 2]})]
    assert json.loads(reply.tool_calls[0].arguments_raw) == {"city": "Paris", "n": [1, 2]}


def test_legacy_function_call_only() -> None:
    reply = assemble(
        chunk({"function_call": {"name": "f", "arguments": '{"a"'}}),
        chunk({"function_call": {"arguments": ": 1}"}}),
        chunk(finish="function_call"),
    )
    assert summary(reply) == [(None, "f", {"a": 1})]
    assert reply.finish_reason == "tool_calls"  # normalised
    assert reply.api_finish_reason == "function_call"  # as the server said


def test_legacy_function_call_ignored_beside_tool_calls() -> None:
    reply = assemble(
        chunk(
            {
                "function_call": {"name": "f", "arguments": "{}"},
                "tool_calls": [call(0, "c1", "f", "{}")],
            }
        )
    )
    assert summary(reply) == [("c1", "f", {})]


def test_finish_reason_kept_as_is() -> None:
    assert assemble(chunk({"content": "x"}, finish="eos_token")).finish_reason == "eos_token"


def test_non_json_chunk_is_a_problem() -> None:
    reply = assemble(chunk({"content": "a"}), "not json", chunk({"content": "b"}))
    assert reply.text == "ab"
    assert len(reply.problems) == 1
    assert reply.problems[0].startswith("chat stream: JSON: event 2 is not JSON: Expecting value")


def test_invalid_arguments_are_kept_on_the_call_not_raised() -> None:
    reply = assemble(calls(call(0, "c1", "f", '{"city": "Par')))
    [tool_call] = reply.tool_calls
    assert tool_call.arguments is None
    assert tool_call.arguments_error is not None
    assert tool_call.arguments_error.startswith("Unterminated string")
    assert tool_call.arguments_raw == '{"city": "Par'
    assert reply.problems == []  # the check decides (always for streams), not the parser


def test_call_without_name_is_a_problem() -> None:
    reply = assemble(calls(call(0, arguments="{}")))
    assert reply.problems == ["chat stream: tool call 0 has no name"]


def test_error_event_sets_error() -> None:
    reply = assemble(
        chunk({"content": "a"}),
        SSEEvent('{"error": {"message": "model overloaded", "code": 503}}', event="error"),
    )
    assert reply.error == "model overloaded" and reply.text == "a"
    assert reply.problems == [("chat stream: error event 503 (transient: the service was"
                              " overloaded; retry later): model overloaded")]


def test_error_event_with_plain_text() -> None:
    assert assemble(SSEEvent("upstream died", event="error")).error == "upstream died"


# An error object with a code and no message says so, as llama-cpp-python's bare 500 needs.
EMPTY_500 = "500, with an empty message (no reason given; the server's log may say why)"


@pytest.mark.parametrize(
    ("error", "message", "problem"),
    [
        (
            {"message": "context too long", "type": "invalid_request", "code": 400},
            "context too long",
            "chat stream: error chunk invalid_request: context too long",
        ),
        ("boom", "boom", "chat stream: error chunk: boom"),
        ({"code": 500}, EMPTY_500, ("chat stream: error chunk 500 (transient: the service"
         f" failed on its side; retry later): {EMPTY_500}")),
        ({"message": "Overloaded", "type": "overloaded_error"}, "Overloaded",
         ("chat stream: error chunk overloaded_error (transient: the service was overloaded;"
         " retry later): Overloaded")),
    ],
)
def test_error_object_inside_200_stream(error: Any, message: str, problem: str) -> None:
    reply = assemble(chunk({"content": "a"}), {"error": error})
    assert reply.error == message
    assert reply.problems == [problem]


def test_truncated_stream_is_a_problem() -> None:
    reply = assemble(chunk({"content": "a"}), done=False, truncated=True)
    assert reply.problems == [
        "chat stream: cut: the stream ended inside an event (no blank line after its last data line)"
    ]


def test_chunk_after_done_is_a_problem() -> None:
    assembler = StreamAssembler()
    assembler.add(SSEEvent("[DONE]"), 1.0)
    assembler.add(SSEEvent(json.dumps(chunk({"content": "late"}))), 2.0)
    assert assembler.finish().problems == ["chat stream: terminal event: event 1 arrived after [DONE]"]


def test_non_object_chunk_is_a_problem() -> None:
    assert assemble("[1, 2]").problems == ["chat stream: JSON: event 1 is not a JSON object: '[1, 2]'"]


# -- shapes of particular servers and relays ------------------------------------------


def tgi_call(arguments: str, name: str | None = None) -> Chunk:
    """A TGI tool-call chunk: ``tool_calls`` is one object, ``id`` empty, ``name`` null."""
    item = {"index": 0, "id": "", "type": "function",
            "function": {"name": name, "arguments": arguments}}
    return chunk({"role": "assistant", "tool_calls": item}, usage=None)


def test_tgi_tool_calls_as_an_object_are_read() -> None:
    reply = assemble(
        tgi_call('{"', "get_weather"),
        *(tgi_call(piece) for piece in ['city', '": "', "Paris", '"}']),
        chunk({}, finish="tool_calls"),
    )
    assert summary(reply) == [(None, "get_weather", {"city": "Paris"})]
    assert reply.tool_calls[0].arguments_raw == '{"city": "Paris"}'
    assert reply.ttft_ms == 10.0 and reply.problems == []


@pytest.mark.parametrize("token", ["</s>", "<|eot_id|>", "<|im_end|>"])
def test_tgi_end_of_sequence_token_in_a_last_nameless_delta(token: str) -> None:
    reply = assemble(
        tgi_call('{"city": ', "get_weather"),
        tgi_call('"Paris"}'),
        chunk({"tool_calls": {"index": 0, "function": {"name": None, "arguments": token}}},
              finish="eos_token"),
    )
    assert summary(reply) == [(None, "get_weather", {"city": "Paris"})]
    assert reply.tool_calls[0].arguments_error is None
    assert reply.tool_calls[0].arguments_raw == '{"city": "Paris"}'  # sent back without it
    assert reply.problems == [
        (f"chat stream: tool call 0 (get_weather): its arguments end in the end-of-sequence"
         f" token {token!r},"
         " which is not JSON; read without it")
    ]


def test_an_end_of_sequence_token_inside_valid_arguments_is_an_argument() -> None:
    reply = assemble(calls(call(0, "c1", "tag", '{"close": "</s>"}')))
    assert summary(reply) == [("c1", "tag", {"close": "</s>"})] and reply.problems == []


def test_arguments_invalid_apart_from_the_token_stay_invalid() -> None:
    [tool_call] = assemble(calls(call(0, "c1", "f", '{"city": "Par</s>'))).tool_calls
    assert tool_call.arguments_error is not None
    assert tool_call.arguments_raw == '{"city": "Par</s>'


@pytest.mark.parametrize("member", ["get_weather", 3, True], ids=repr)
def test_tool_calls_of_another_type_are_a_problem_not_a_silent_loss(member: Any) -> None:
    reply = assemble(chunk({"tool_calls": member}))
    assert reply.tool_calls == []
    assert reply.problems == [
        f"chat stream: event 1: tool_calls is neither a list nor an object: {json.dumps(member)!r}"
    ]


def test_a_lone_choice_with_another_index_is_the_reply() -> None:
    def relayed(delta: dict[str, Any], finish: str | None = None) -> Chunk:
        return {"choices": [{"index": 1, "delta": delta, "finish_reason": finish}]}

    reply = assemble(
        relayed({"content": "Hi"}),
        relayed({"tool_calls": [call(0, "c1", "f", "{}")]}),
        relayed({}, "tool_calls"),
    )
    assert (reply.text, summary(reply), reply.finish_reason) == ("Hi", [("c1", "f", {})],
                                                                 "tool_calls")
    assert reply.problems == []


def test_choice_zero_is_read_among_several() -> None:
    other = {"index": 1, "delta": {"content": "other"}, "finish_reason": None}
    mine = {"index": 0, "delta": {"content": "mine"}, "finish_reason": None}
    assert assemble({"choices": [other, mine]}).text == "mine"


def test_several_choices_without_choice_zero_are_a_problem() -> None:
    choices = [{"index": i, "delta": {"content": str(i)}, "finish_reason": None} for i in (1, 2)]
    reply = assemble({"choices": choices})
    assert reply.text == ""
    assert reply.problems == [
        ("chat stream: choice: event 1 has 2 choices (index 1, 2) and none with index 0, so"
         " none was read")
    ]


def test_an_empty_finish_reason_does_not_hide_the_real_one() -> None:
    reply = assemble(
        chunk({"content": "hi"}, finish=""),
        chunk({}, finish="stop"),
        {"choices": [{"index": 0, "delta": {}, "finish_reason": ""}], "usage": USAGE},
    )
    assert (reply.finish_reason, reply.usage) == ("stop", USAGE)


def test_only_empty_finish_reasons_are_none() -> None:
    assert assemble(chunk({"content": "hi"}, finish="")).finish_reason is None


def test_streamed_content_as_text_parts() -> None:
    reply = assemble(
        chunk({"content": [{"type": "text", "text": "Hel"}]}),
        chunk({"content": [{"type": "text", "text": "lo"}, {"type": "text", "text": "!"}]}),
        chunk({"content": []}, finish="stop"),
    )
    assert (reply.text, reply.ttft_ms, reply.problems) == ("Hello!", 10.0, [])


def test_usage_only_in_x_groq() -> None:
    reply = assemble(chunk({"content": "hi"}),
                     chunk({}, finish="stop", x_groq={"id": "req_1", "usage": USAGE}))
    assert reply.usage == USAGE
    assert reply.stream is not None and reply.stream.usage


def test_top_level_usage_wins_over_x_groq() -> None:
    other = {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}
    reply = assemble(chunk({}, finish="stop", usage=USAGE, x_groq={"usage": other}))
    assert reply.usage == USAGE


def read_bytes(body: bytes) -> Reply:
    """``body`` through the SSE decoder and the assembler, as the client reads a stream."""
    decoder, assembler = SSEDecoder(), StreamAssembler()
    events = decoder.feed(body) + decoder.close()
    for number, event in enumerate(events, start=1):
        assembler.add(event, offset_ms=float(number))
    return assembler.finish(truncated=decoder.truncated)


@pytest.mark.parametrize("end", [b"data: [DONE]\n", b"data: [DONE]", b"data:[DONE]\r\n"],
                         ids=repr)
def test_done_without_its_closing_blank_line_ends_the_stream(end: bytes) -> None:
    body = f"data: {json.dumps(chunk({'content': 'hi'}, finish='stop'))}\n\n".encode() + end
    reply = read_bytes(body)
    assert reply.stream == StreamStats(done=True, chunks=1, usage=False)
    assert (reply.text, reply.problems) == ("hi", [])


def test_a_last_chunk_without_its_blank_line_is_still_cut_short() -> None:
    body = f"data: {json.dumps(chunk({'content': 'hi'}, finish='stop'))}\n".encode()
    reply = read_bytes(body)
    assert reply.stream is not None and not reply.stream.done
    assert reply.problems == [
        "chat stream: cut: the stream ended inside an event (no blank line after its last data line)"
    ]


# -- through the plugin, over a real loopback server ------------------------------------


TGI_CASE = """\
name: {name}
model: tgi
endpoint: {{base_url: "{url}", retries: 0, timeout_s: 2}}
tools:
  - name: get_weather
    parameters: {{type: object, properties: {{city: {{type: string}}}}}}
    result: {{temp_c: 21}}
stages:
  - name: ask
    user: {name}
    stream: true
    expect:
      tool_calls: [{{name: get_weather, arguments: {{city: Paris}}}}]
"""


def tgi_reply(request: RecordedRequest) -> ServerReply:
    """TGI's stream of a Paris weather call; with the end-of-sequence token when asked."""
    chunks = [tgi_call('{"city": ', "get_weather"), tgi_call('"Paris"}')]
    if request.json()["messages"][-1]["content"] == "with_eos_token":
        chunks.append(chunk({"tool_calls": {"index": 0, "id": "", "type": "function",
                                            "function": {"name": None,
                                                         "arguments": "<|eot_id|>"}}},
                            finish="eos_token"))
    else:
        chunks.append(chunk({}, finish="tool_calls"))
    return sse_reply(chunks)


def test_a_tgi_stream_through_the_plugin(pytester: pytest.Pytester,
                                         chat_server: ChatServer) -> None:
    chat_server.set_handler(tgi_reply)
    pytester.makefile(".case.yaml", tgi="---\n".join(
        TGI_CASE.format(name=name, url=chat_server.base_url)
        for name in ("tool_calls_object", "with_eos_token")))

    result = pytester.runpytest("--toolbench-live", "-v")

    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines([
        "tgi.case.yaml::tool_calls_object?tgi? PASSED*",
        "tgi.case.yaml::with_eos_token?tgi? FAILED*",
        ("*tool call 0 (get_weather): its arguments end in the end-of-sequence token"
         " '<|eot_id|>', which is not JSON; read without it*"),
    ])
    assert "not valid JSON" not in result.stdout.str()  # the call itself was read right


def test_a_stream_ending_without_the_blank_line_is_done_live_and_replayed(
        pytester: pytest.Pytester, chat_server: ChatServer) -> None:
    text = json.dumps(chunk({"content": "hi"}, finish="stop"))
    chat_server.set_handler(lambda request: sse_reply(
        [f"data: {text}\n\n".encode(), b"data: [DONE]\n"], done=False))
    pytester.makefile(".case.yaml", ends=textwrap.dedent(f"""\
        name: ends
        endpoint: {{base_url: "{chat_server.base_url}", retries: 0, timeout_s: 2}}
        stages:
          - {{name: ask, user: hi, stream: true, expect: {{text: hi, stream: {{done: true}}}}}}
        """))

    pytester.runpytest("--toolbench-record").assert_outcomes(passed=1)
    pytester.runpytest().assert_outcomes(passed=1)  # the cassette holds the [DONE] too
    assert len(chat_server.requests) == 1


CUT_AGENT = '''
import os

import httpx2


def make():
    def agent(user):
        body = {"model": "m", "stream": True, "messages": [{"role": "user", "content": user}]}
        with httpx2.Client(timeout=30) as client:
            reply = client.post(os.environ["OPENAI_BASE_URL"] + "/chat/completions", json=body)
        return str(len(reply.content))
    return agent
'''


@pytest.mark.parametrize("kind", ["loop", "agent"])
def test_a_stream_cut_inside_an_event_replays_the_same_cut(
        pytester: pytest.Pytester, chat_server: ChatServer, kind: str) -> None:
    """The half-received event is kept in the cassette (``cut: true``) and replayed as it
    came, without its blank line: replay names the cut the recording saw."""
    whole = json.dumps(chunk({"content": "hel"}))
    cut_short = b'data: {"choices": [{"index": 0, "delta": {"content": "lo wor'
    chat_server.set_handler(lambda request: sse_reply([f"data: {whole}\n\n".encode(),
                                                       cut_short], done=False))
    if kind == "loop":
        stage = "{name: ask, user: hi, stream: true, expect: {text: hello}}"
        pytester.makefile(".case.yaml", cut=textwrap.dedent(f"""\
            name: cut
            endpoint: {{base_url: "{chat_server.base_url}", retries: 0, timeout_s: 5}}
            stages: [{stage}]
            """))
    else:
        pytester.makepyfile(cut_agent=CUT_AGENT)
        pytester.syspathinsert()
        pytester.makefile(".case.yaml", cut=textwrap.dedent(f"""\
            name: cut
            agent: {{python: "cut_agent:make"}}
            endpoint: {{base_url: "{chat_server.base_url}"}}
            stages: [{{name: ask, user: hi}}]
            """))
    said = ["*cut: the stream ended inside an event (no blank line after its last data line)*"]

    recorded = pytester.runpytest("-p", "no:cacheprovider", "--toolbench-record")
    cassette = (pytester.path / "__cassettes__" / "cut" / "cut.yaml").read_text()
    replayed = pytester.runpytest("-p", "no:cacheprovider")

    for result in (recorded, replayed):
        result.assert_outcomes(failed=1)
        result.stdout.fnmatch_lines(said)
    assert "cut: true" in cassette and "lo wor" in cassette
    assert len(chat_server.requests) == 1


# -- parse_completion -----------------------------------------------------------------


def completion(message: dict[str, Any], finish: str = "stop", **extra: Any) -> str:
    choice = {"index": 0, "message": {"role": "assistant", **message}, "finish_reason": finish}
    return json.dumps({"object": "chat.completion", "choices": [choice], **extra})


def test_completion_text_and_usage() -> None:
    reply = parse_completion(200, completion({"content": "hi"}, usage=USAGE).encode())
    assert (reply.status, reply.text, reply.finish_reason, reply.usage) == (
        200,
        "hi",
        "stop",
        USAGE,
    )
    assert reply.stream is None and reply.problems == [] and reply.error is None


def test_a_refusal_is_the_text_whole_or_streamed() -> None:
    """OpenAI sends a refusal in its own field, content null: it is the answer the model
    gave instead, read as the text (as over the Responses API)."""
    refused = "I can't help with that."
    body = completion({"content": None, "refusal": refused}).encode()
    assert parse_completion(200, body).text == refused
    reply = assemble(chunk({"role": "assistant", "content": None, "refusal": ""}),
                     chunk({"refusal": "I can't "}), chunk({"refusal": "help with that."}),
                     chunk({}, finish="stop"))
    assert (reply.text, reply.ttft_ms, reply.problems) == (refused, 20.0, [])
    both = completion({"content": "Here it is.", "refusal": "unused"}).encode()
    assert parse_completion(200, both).text == "Here it is."  # content, when there is some


def test_completion_tool_calls_with_padding_object_arguments_and_legacy() -> None:
    body = completion(
        {
            "content": None,
            "tool_calls": [
                {
                    "id": "c1",
                    "type": "function",
                    "function": {"name": "f", "arguments": '{ "a": 1 } '},
                },
                {"id": 2, "type": "function", "function": {"name": "g", "arguments": {"b": 2}}},
            ],
            "function_call": {"name": "f", "arguments": '{ "a": 1 } '},
        },
        finish="tool_calls",
    )
    reply = parse_completion(200, body)
    assert summary(reply) == [("c1", "f", {"a": 1}), ("2", "g", {"b": 2})]
    assert reply.text == "" and reply.finish_reason == "tool_calls"


def test_completion_legacy_function_call_only() -> None:
    body = completion({"function_call": {"name": "f", "arguments": "{}"}}, "function_call")
    assert summary(parse_completion(200, body)) == [(None, "f", {})]


def test_completion_calls_with_same_id_stay_separate() -> None:
    item = {"id": "x", "function": {"name": "f", "arguments": "{}"}}
    assert len(parse_completion(200, completion({"tool_calls": [item, item]})).tool_calls) == 2


@pytest.mark.parametrize(
    ("status", "body", "content_type", "error"),
    [
        (400, '{"error": {"message": "bad tools", "code": 400}}', "application/json", "bad tools"),
        (500, '{"error": "internal"}', "application/json", "internal"),
        (422, '{"detail": "field required"}', "application/json", "field required"),
        (503, "Service Unavailable\n", "text/plain", "Service Unavailable"),
        (
            502,
            "<html><h1>Bad Gateway</h1></html>",
            "text/html",
            "<html><h1>Bad Gateway</h1></html>",
        ),
        (500, "", "text/plain", "HTTP 500 with an empty body"),
    ],
)
def test_completion_error_statuses(status: int, body: str, content_type: str, error: str) -> None:
    reply = parse_completion(status, body.encode(), content_type)
    assert (reply.status, reply.error, reply.problems) == (status, error, [])


def test_completion_2xx_not_json_is_a_problem() -> None:
    reply = parse_completion(200, b"<html>hi</html>", "text/html")
    assert reply.error is None
    assert len(reply.problems) == 1
    assert reply.problems[0].startswith(
        "chat body: JSON: the response body (text/html) is not JSON: Expecting value")


def test_completion_2xx_json_but_not_a_completion_is_a_problem() -> None:
    reply = parse_completion(200, '{"object": "list", "data": []}')
    assert reply.problems == [
        ('chat body: completion shape: the response is not a chat completion:'
         ' \'{"object": "list", "data": []}\'')
    ]


def test_completion_2xx_with_error_object() -> None:
    assert parse_completion(200, '{"error": {"message": "nope"}}').error == "nope"


def test_completion_bom_and_bytes() -> None:
    reply = parse_completion(200, b"\xef\xbb\xbf" + completion({"content": "\u00e9"}).encode())
    assert reply.text == "\u00e9"


def test_completion_with_a_lone_choice_of_another_index() -> None:
    body = json.dumps({"choices": [{"index": 2, "message": {"content": "hi"},
                                    "finish_reason": "stop"}]})
    reply = parse_completion(200, body)
    assert (reply.text, reply.finish_reason, reply.problems) == ("hi", "stop", [])


def test_completion_with_several_choices_and_none_zero_is_a_problem() -> None:
    choice = {"message": {"content": "hi"}, "finish_reason": "stop"}
    body = json.dumps({"choices": [{"index": 1, **choice}, {"index": 2, **choice}]})
    assert parse_completion(200, body).problems == [
        ("chat body: choice: the response has 2 choices (index 1, 2) and none with index 0, so"
         " none was read")
    ]


def test_completion_tool_calls_as_one_object() -> None:
    item = {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
    reply = parse_completion(200, completion({"tool_calls": item}, "tool_calls"))
    assert summary(reply) == [("c1", "f", {})] and reply.problems == []


def test_completion_empty_finish_reason_is_none() -> None:
    assert parse_completion(200, completion({"content": "hi"}, finish="")).finish_reason is None


def test_each_call_completes_at_the_last_delta_that_carried_its_arguments() -> None:
    """Interleaved calls: each one's arguments complete at its own last fragment (chunk
    offsets 10, 20, ... ms); a call whose arguments all came with its header completes
    there, and a call that never sent any completes where it opened."""
    reply = assemble(
        calls(call(0, "a", "first", "")),
        calls(call(1, "b", "second", '{"x": ')),
        calls(call(0, arguments='{"y": 1}')),
        calls(call(1, arguments="2}")),
        calls(call(1, arguments="")),          # an empty fragment changes nothing
        calls(call(2, "c", "whole", "{}")),
        calls(call(3, "d", "bare")),
        chunk({}, finish="tool_calls"),
    )
    assert [(c.name, c.completed_ms) for c in reply.tool_calls] == [
        ("first", 30.0), ("second", 40.0), ("whole", 60.0), ("bare", 70.0)]


def test_a_legacy_function_call_completes_too_and_whole_bodies_say_nothing() -> None:
    reply = assemble(chunk({"function_call": {"name": "f", "arguments": "{}"}}),
                     chunk({"function_call": {"arguments": ""}}), chunk({}, finish="stop"))
    assert [(c.name, c.completed_ms) for c in reply.tool_calls] == [("f", 10.0)]
    body = {"choices": [{"index": 0, "finish_reason": "tool_calls", "message": {
        "role": "assistant", "tool_calls": [
            {"id": "a", "type": "function", "function": {"name": "f", "arguments": "{}"}}]}}]}
    assert parse_completion(200, json.dumps(body)).tool_calls[0].completed_ms is None
