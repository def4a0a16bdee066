"""Stream reading per wire API: MB/s of decoding a large SSE stream of each API's own
events and putting its tool calls back together, fed in network-sized chunks, beside the
floor (split on blank lines, ``json.loads`` each payload, join) and the official SDK.

Every API (``--api``, default all): chat (below), Responses (``output_item.added``,
``function_call_arguments.delta`` fragments, ``output_item.done``, ``response.completed``),
Messages (``event:`` lines, ``content_block_delta`` ``input_json_delta`` fragments) and
Gemini (CRLF-separated ``GenerateContentResponse`` events of text fragments, each call whole,
no end marker). SDK rows: openai's typed ``openai.Stream`` of ``ResponseStreamEvent``,
anthropic's ``accumulate_event``, google-genai's ``GenerateContentResponse`` per event,
each skipped when its package is missing. Figures are the best of --repeat runs. Target:
each reader >= 60 % of its floor.

``--instructions`` counts instead of timing (valgrind's cachegrind, about 50 times slower:
use ``--mb 1``): the instructions of the reader and of the floor on the same stream, each
one run in a process of its own, less those of a run that builds the stream and warms both
up. A figure a busy machine does not move, unlike MB/s.

The stream (built in memory, default 20 MB) is one OpenAI-shaped chat-completions reply
with CALLS parallel tool calls, sent as OpenAI sends them: a header delta per call (index,
id, name, empty arguments), then argument fragments of 1-12 characters cut anywhere (inside
keys, numbers, escapes and multi-byte characters; the payloads are UTF-8, not
``\\u``-escaped), a finish chunk, a usage chunk and ``data: [DONE]``. It is fed in CHUNK
byte pieces (default 16 KiB), which split lines, events and UTF-8 sequences.

Compared, on the same bytes, each checked to rebuild exactly the calls that were cut up:
- toolbench: ``SSEDecoder.feed`` + ``StreamAssembler.add`` / ``finish`` (the client's path);
- openai, the official package: its SSE decoder (``openai._streaming.SSEDecoder``, the
  one ``openai.Stream`` reads with) + ``json.loads`` + the same join, the least overhead
  its decoder can be used with; ``openai.Stream`` itself over a response of the SDK's own
  HTTP library (httpx2 in openai 3.x) made from the chunks (each chunk becomes a ``ChatCompletionChunk``), arguments joined per index
  as user code does; and, with --openai-state, its own reassembler
  ``ChatCompletionStreamState`` (slower still: it updates a snapshot every chunk);
- naive floor: split on blank lines, ``json.loads`` each payload, join arguments per index.
Target: toolbench >= 20 MB/s.
"""

from __future__ import annotations

import argparse
import inspect
import json
import random
import subprocess
import sys
import time
from collections.abc import Callable, Iterable
from typing import Any

from _common import REPO, clean_env, count_python_instructions, print_table

from pytest_toolbench.apis import API_NAMES, api_names
from pytest_toolbench.transport.sse import SSEDecoder
from pytest_toolbench.wire import wire_api
from pytest_toolbench.wire.chat_reader import StreamAssembler

TARGET_MB_S = 20.0
MB = 1_000_000
ENVELOPE = {"id": "chatcmpl-9xYzBenchStream0001", "object": "chat.completion.chunk",
            "created": 1732280000, "model": "gpt-4o-mini-2024-07-18",
            "system_fingerprint": "fp_0ba0d124f1"}
WORDS = ["Paris", "Zürich", "東京", "São Paulo", "naïve", "🙂 ok", 'say "hi"', "a\\b",
         "line\nbreak", "tab\there", "42", "-0.5e3", "null", "true"]

Calls = list[tuple[str, str]]
"""(name, arguments) per call, in index order."""


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mb", type=float, default=20.0, help="stream size in MB (default 20)")
    parser.add_argument("--calls", type=int, default=8, help="parallel tool calls (default 8)")
    parser.add_argument("--chunk", type=int, default=16 * 1024,
                        help="network chunk size in bytes (default 16384)")
    parser.add_argument("--repeat", type=int, default=5,
                        help="runs per decoder (the best counts; default 5)")
    parser.add_argument("--openai-repeat", type=int, default=1,
                        help="runs of the (slow) openai decoders (default 1)")
    parser.add_argument("--openai-state", action="store_true",
                        help="also time openai's ChatCompletionStreamState (slow)")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--api", default=",".join(API_NAMES),
                        help="the wire APIs to measure (default: all)")
    parser.add_argument("--instructions", action="store_true",
                        help="count the instructions of each reader and its floor (valgrind)"
                             " instead of timing them")
    parser.add_argument("--once", choices=("warm", "reader", "floor"),
                        help=argparse.SUPPRESS)  # one counted run of --instructions
    return parser.parse_args()


# ---------------------------------------------------------------------------- the stream


def event(delta: dict[str, Any], finish: str | None = None, **extra: Any) -> bytes:
    choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}
    chunk = {**ENVELOPE, "choices": [choice], **extra}
    return b"data: " + json.dumps(chunk, ensure_ascii=False).encode() + b"\n\n"


def arguments_text(rng: random.Random, size: int) -> str:
    """A JSON object of about ``size`` characters with strings that need escaping."""
    notes, length = [], 0
    while length < size:
        note = {"place": rng.choice(WORDS), "n": rng.randint(-999, 99999),
                "x": round(rng.uniform(-1e3, 1e3), 3), "ok": rng.random() < 0.5}
        notes.append(note)
        length += len(json.dumps(note, ensure_ascii=False)) + 2
    return json.dumps({"city": rng.choice(WORDS), "notes": notes}, ensure_ascii=False)


def fragments(rng: random.Random, text: str) -> Iterable[str]:
    start = 0
    while start < len(text):
        end = start + rng.randint(1, 12)
        yield text[start:end]
        start = end


def tool_call_stream(size: int, calls: int, seed: int) -> tuple[bytes, Calls]:
    """An SSE body of about ``size`` bytes and the calls it must reassemble to."""
    rng = random.Random(seed)
    per_event = len(event({"tool_calls": [{"index": 0, "function": {"arguments": "x" * 7}}]}))
    # Each event carries 6.5 characters of arguments on average.
    args_size = int(size / calls / per_event * 6.5)
    pieces = [event({"role": "assistant", "content": None})]
    expected: Calls = []
    for index in range(calls):
        name, args = f"tool_{index}", arguments_text(rng, args_size)
        expected.append((name, args))
        header = {"index": index, "id": f"call_{index:04d}bench", "type": "function",
                  "function": {"name": name, "arguments": ""}}
        pieces.append(event({"tool_calls": [header]}))
        pieces.extend(event({"tool_calls": [{"index": index, "function": {"arguments": part}}]})
                      for part in fragments(rng, args))
    pieces.append(event({}, "tool_calls"))
    usage = {"prompt_tokens": 120, "completion_tokens": 9000, "total_tokens": 9120}
    pieces.append(b"data: " + json.dumps({**ENVELOPE, "choices": [], "usage": usage}).encode()
                  + b"\n\n")
    pieces.append(b"data: [DONE]\n\n")
    return b"".join(pieces), expected


def network_chunks(body: bytes, size: int) -> list[bytes]:
    return [body[i:i + size] for i in range(0, len(body), size)]


# ---------------------------------------------------------------------------- decoders


def toolbench(chunks: list[bytes]) -> Calls:
    decoder, assembler = SSEDecoder(), StreamAssembler()
    for chunk in chunks:
        for sse in decoder.feed(chunk):
            assembler.add(sse, 0.0)
    for sse in decoder.close():
        assembler.add(sse, 0.0)
    reply = assembler.finish(truncated=decoder.truncated)
    if reply.problems:
        raise AssertionError(f"toolbench reported problems: {reply.problems[:3]}")
    return [(call.name, call.arguments_raw) for call in reply.tool_calls]


def naive_floor(chunks: list[bytes]) -> Calls:
    """Split on blank lines, ``json.loads`` each payload, join arguments per index."""
    buffer = b""
    names: dict[int, str] = {}
    parts: dict[int, list[str]] = {}
    for chunk in chunks:
        buffer += chunk
        *events, buffer = buffer.split(b"\n\n")
        for raw in events:
            data = raw[6:]
            if data == b"[DONE]":
                continue
            for choice in json.loads(data)["choices"]:
                for call in choice["delta"].get("tool_calls") or ():
                    _join(names, parts, call["index"], call["function"])
    return [(names[i], "".join(parts[i])) for i in sorted(parts)]


def _join(names: dict[int, str], parts: dict[int, list[str]], index: int,
          function: dict[str, Any]) -> None:
    if function.get("name"):
        names[index] = function["name"]
    parts.setdefault(index, []).append(function.get("arguments") or "")


def openai_stream(chunks: list[bytes]) -> Calls:
    """``openai.Stream`` as the SDK builds it, over a response whose body is ``chunks``."""
    names: dict[int, str] = {}
    parts: dict[int, list[str]] = {}
    for chunk in _openai_chunks(chunks):
        for choice in chunk.choices:
            for call in choice.delta.tool_calls or ():
                function = call.function
                _join(names, parts, call.index,
                      {"name": function.name, "arguments": function.arguments})
    return [(names[i], "".join(parts[i])) for i in sorted(parts)]


def openai_decoder(chunks: list[bytes]) -> Calls:
    """The SDK's SSE decoder alone (what ``openai.Stream`` reads events with), then
    ``json.loads`` and the join: its decoding without the per-chunk model objects."""
    from openai._streaming import SSEDecoder as OpenAIDecoder

    names: dict[int, str] = {}
    parts: dict[int, list[str]] = {}
    for sse in OpenAIDecoder().iter_bytes(iter(chunks)):
        if sse.data.startswith("[DONE]"):
            break
        for choice in json.loads(sse.data)["choices"]:
            for call in choice["delta"].get("tool_calls") or ():
                _join(names, parts, call["index"], call["function"])
    return [(names[i], "".join(parts[i])) for i in sorted(parts)]


def openai_state(chunks: list[bytes]) -> Calls:
    """The SDK's own reassembler, as ``client.chat.completions.stream`` uses it."""
    from openai.lib.streaming.chat import ChatCompletionStreamState

    state: Any = ChatCompletionStreamState()
    for chunk in _openai_chunks(chunks):
        state.handle_chunk(chunk)
    message = state.get_final_completion().choices[0].message
    return [(call.function.name, call.function.arguments) for call in message.tool_calls]


def _openai_chunks(chunks: list[bytes]) -> Any:
    import openai
    from openai.types.chat import ChatCompletionChunk

    httpx_module = _openai_httpx()
    request = httpx_module.Request("POST", "http://127.0.0.1/v1/chat/completions")
    response = httpx_module.Response(200, content=iter(chunks), request=request,
                                     headers={"content-type": "text/event-stream"})
    client = openai.OpenAI(api_key="bench", base_url="http://127.0.0.1/v1")
    return openai.Stream(cast_to=ChatCompletionChunk, response=response, client=client)


def _openai_httpx() -> Any:
    """The HTTP library the installed SDK is built on (``httpx``, or ``httpx2`` in 3.x)."""
    from openai import _streaming

    for name in ("httpx2", "httpx"):
        module = getattr(_streaming, name, None)
        if module is not None:
            return module
    import httpx
    return httpx


# ---------------------------------------------------------------------------- every API


def api_stream(api: str, size: int, calls: int, seed: int) -> tuple[bytes, Calls]:
    """A stream of about ``size`` bytes of ``api``'s own events: ``calls`` tool calls whose
    arguments come in fragments of 1-12 characters (Gemini: whole calls, after text parts
    of the same fragments, as the service streams), and the calls it must rebuild."""
    if api == "chat":
        return tool_call_stream(size, calls, seed)
    rng = random.Random(seed)
    expected: Calls = []
    pieces: list[bytes] = []
    sample = b"".join(_API_EVENTS[api](random.Random(0), 0, "tool_0", "{\"a\":1}", 0))
    per_event = len(sample) / max(1, sample.count(b"data: "))
    args_size = int(size / calls / per_event * 6.5)  # 6.5 characters an event on average
    for index in range(calls):
        name, args = f"tool_{index}", arguments_text(rng, args_size)
        expected.append((name, args))
        pieces.extend(_API_EVENTS[api](rng, index, name, args, 0))
    pieces.extend(_API_END[api](expected))
    return b"".join(pieces), expected


def _sse(data: dict[str, Any], name: str | None = None, crlf: bool = False) -> bytes:
    line = b"data: " + json.dumps(data, ensure_ascii=False).encode()
    head = f"event: {name}\n".encode() if name else b""
    return head + line + (b"\r\n\r\n" if crlf else b"\n\n")


def _responses_call(rng: random.Random, index: int, name: str, args: str,
                    size: int) -> Iterable[bytes]:
    item = {"type": "function_call", "id": f"fc_{index}", "call_id": f"call_{index}",
            "name": name, "arguments": "", "status": "in_progress"}
    yield _sse({"type": "response.output_item.added", "output_index": index, "item": item},
               "response.output_item.added")
    for part in fragments(rng, args):
        yield _sse({"type": "response.function_call_arguments.delta", "item_id": f"fc_{index}",
                    "output_index": index, "delta": part},
                   "response.function_call_arguments.delta")
    yield _sse({"type": "response.output_item.done", "output_index": index,
                "item": {**item, "arguments": args, "status": "completed"}},
               "response.output_item.done")


def _messages_call(rng: random.Random, index: int, name: str, args: str,
                   size: int) -> Iterable[bytes]:
    if index == 0:
        yield _sse({"type": "message_start", "message": {
            "id": "msg_1", "type": "message", "role": "assistant", "content": [],
            "model": "claude", "usage": {"input_tokens": 10, "output_tokens": 1}}},
            "message_start")
    yield _sse({"type": "content_block_start", "index": index, "content_block": {
        "type": "tool_use", "id": f"toolu_{index}", "name": name, "input": {}}},
        "content_block_start")
    for part in fragments(rng, args):
        yield _sse({"type": "content_block_delta", "index": index,
                    "delta": {"type": "input_json_delta", "partial_json": part}},
                   "content_block_delta")
    yield _sse({"type": "content_block_stop", "index": index}, "content_block_stop")


def _gemini_call(rng: random.Random, index: int, name: str, args: str,
                 size: int) -> Iterable[bytes]:
    usage = {"promptTokenCount": 10, "totalTokenCount": 10}
    for part in fragments(rng, args):  # the same text, streamed as the service streams text
        yield _sse({"candidates": [{"content": {"role": "model", "parts": [{"text": part}]},
                                    "index": 0}], "usageMetadata": usage}, crlf=True)
    call = {"functionCall": {"name": name, "args": json.loads(args)}}
    yield _sse({"candidates": [{"content": {"role": "model", "parts": [call]}, "index": 0}],
                "usageMetadata": usage}, crlf=True)


_API_EVENTS = {"responses": _responses_call, "messages": _messages_call,
               "gemini": _gemini_call}
_API_END: dict[str, Callable[[Calls], list[bytes]]] = {
    "responses": lambda calls: [_sse({"type": "response.completed", "response": {
        "status": "completed", "output": [
            {"type": "function_call", "call_id": f"call_{i}", "name": name, "arguments": args}
            for i, (name, args) in enumerate(calls)]}}, "response.completed")],
    "messages": lambda calls: [
        _sse({"type": "message_delta", "delta": {"stop_reason": "tool_use"},
              "usage": {"output_tokens": 9000}}, "message_delta"),
        _sse({"type": "message_stop"}, "message_stop")],
    "gemini": lambda calls: [_sse({"candidates": [{"content": {"role": "model", "parts": [
        {"text": "", "thoughtSignature": "c2ln"}]}, "finishReason": "STOP", "index": 0}],
        "usageMetadata": {"promptTokenCount": 10, "totalTokenCount": 9010}}, crlf=True)],
}


def reader_of(api: str) -> Callable[[list[bytes]], Calls]:
    """The client's path for ``api``: ``SSEDecoder.feed`` + the API's stream reader."""
    wire = wire_api(api)

    def read(chunks: list[bytes]) -> Calls:
        decoder, reader = SSEDecoder(), wire.stream_reader()
        for chunk in chunks:
            for sse in decoder.feed(chunk):
                reader.add(sse, 0.0)
        for sse in decoder.close():
            reader.add(sse, 0.0)
        reply = reader.finish(truncated=decoder.truncated)
        if reply.problems:
            raise AssertionError(f"{api} reader reported problems: {reply.problems[:3]}")
        return [(call.name, call.arguments_raw) for call in reply.tool_calls]

    read.__name__ = f"toolbench_{api}"
    return read


def floor_of(api: str) -> Callable[[list[bytes]], Calls]:
    """The least any reader does: split on blank lines, ``json.loads`` each data payload,
    join the arguments (Gemini: take the whole calls)."""
    take = _FLOOR_TAKE[api]

    def floor(chunks: list[bytes]) -> Calls:
        buffer, names, parts = b"", {}, {}
        separator = b"\r\n\r\n" if api == "gemini" else b"\n\n"
        for chunk in chunks:
            buffer += chunk
            *events, buffer = buffer.split(separator)
            for raw in events:
                take(json.loads(raw[raw.index(b"data: ") + 6:]), names, parts)
        return [(names[i], "".join(parts[i])) for i in sorted(parts)]

    floor.__name__ = f"floor_{api}"
    return floor


def _take_responses(event: Any, names: dict[int, str], parts: dict[int, list[str]]) -> None:
    if event["type"] == "response.output_item.added":
        names[event["output_index"]] = event["item"]["name"]
    elif event["type"] == "response.function_call_arguments.delta":
        parts.setdefault(event["output_index"], []).append(event["delta"])


def _take_messages(event: Any, names: dict[int, str], parts: dict[int, list[str]]) -> None:
    if event["type"] == "content_block_start":
        names[event["index"]] = event["content_block"]["name"]
    elif event["type"] == "content_block_delta":
        parts.setdefault(event["index"], []).append(event["delta"]["partial_json"])


def _take_gemini(event: Any, names: dict[int, str], parts: dict[int, list[str]]) -> None:
    for part in event["candidates"][0]["content"]["parts"]:
        if "functionCall" in part:
            index = len(names)
            names[index] = part["functionCall"]["name"]
            parts[index] = [json.dumps(part["functionCall"]["args"], ensure_ascii=False)]


_FLOOR_TAKE = {"responses": _take_responses, "messages": _take_messages,
               "gemini": _take_gemini}


# ---------------------------------------------------------------------------- timing


def timed(decode: Callable[[list[bytes]], Calls], chunks: list[bytes], expected: Calls,
          repeat: int) -> list[float]:
    seconds = []
    for _ in range(repeat):
        started = time.perf_counter()
        calls = decode(chunks)
        seconds.append(time.perf_counter() - started)
        if calls != expected:
            raise AssertionError(f"{decode.__name__} rebuilt different calls")
    return seconds


Decoder = tuple[str, Callable[[list[bytes]], Calls], int]
"""Label, function, runs."""


def decoders(args: argparse.Namespace) -> list[Decoder]:
    chosen: list[Decoder] = [("toolbench: SSEDecoder + StreamAssembler", toolbench,
                              args.repeat)]
    try:
        import openai
    except ImportError:
        print("openai is not installed (pip install -e '.[bench]'): its rows are skipped")
    else:
        version = openai.__version__
        chosen.append((f"openai {version}: its SSEDecoder + json.loads + join", openai_decoder,
                       args.repeat))
        chosen.append((f"openai {version}: openai.Stream + join", openai_stream,
                       args.openai_repeat))
        if args.openai_state:
            chosen.append((f"openai {version}: Stream + ChatCompletionStreamState",
                           openai_state, args.openai_repeat))
    chosen.append(("naive floor: split + json.loads + join", naive_floor, args.repeat))
    return chosen


def sdk_decoders(api: str, args: argparse.Namespace) -> list[Decoder]:
    """The official SDK's typed stream on the same bytes, where it is installed."""
    maker = _SDKS[api]
    try:
        return [maker(args)]
    except ImportError as missing:
        print(f"{missing.name} is not installed: the {api} SDK row is skipped")
        return []


def _openai_responses(args: argparse.Namespace) -> Decoder:
    import openai
    from openai.types.responses import ResponseStreamEvent

    def sdk(chunks: list[bytes]) -> Calls:
        httpx_module = _openai_httpx()
        request = httpx_module.Request("POST", "http://127.0.0.1/v1/responses")
        response = httpx_module.Response(200, content=iter(chunks), request=request,
                                         headers={"content-type": "text/event-stream"})
        client = openai.OpenAI(api_key="bench", base_url="http://127.0.0.1/v1")
        stream: Any = openai.Stream(cast_to=ResponseStreamEvent, response=response,
                                    client=client)
        names: dict[int, str] = {}
        parts: dict[int, list[str]] = {}
        for event in stream:
            _take_responses(event.model_dump(), names, parts)
        return [(names[i], "".join(parts[i])) for i in sorted(parts)]

    return (f"openai {openai.__version__}: openai.Stream of ResponseStreamEvent + join", sdk,
            args.openai_repeat)


def _anthropic_messages(args: argparse.Namespace) -> Decoder:
    import anthropic
    from anthropic._models import construct_type
    from anthropic.lib.streaming._messages import accumulate_event
    from anthropic.types import RawMessageStreamEvent

    accumulating = inspect.signature(accumulate_event).parameters

    def sdk(chunks: list[bytes]) -> Calls:
        from openai._streaming import SSEDecoder as Decoder_

        snapshot: Any = None
        # Newer releases keep the partial JSON of each block in json_bufs.
        extra: dict[str, Any] = {"json_bufs": {}} if "json_bufs" in accumulating else {}
        for sse in Decoder_().iter_bytes(iter(chunks)):
            event: Any = construct_type(type_=RawMessageStreamEvent, value=json.loads(sse.data))
            snapshot = accumulate_event(event=event, current_snapshot=snapshot, **extra)
        return [(block.name, json.dumps(block.input, ensure_ascii=False))
                for block in snapshot.content]

    return (f"anthropic {anthropic.__version__}: accumulate_event", sdk, args.openai_repeat)


def _genai(args: argparse.Namespace) -> Decoder:
    from google.genai import types

    def sdk(chunks: list[bytes]) -> Calls:
        from openai._streaming import SSEDecoder as Decoder_

        calls: Calls = []
        for sse in Decoder_().iter_bytes(iter(chunks)):
            reply = types.GenerateContentResponse.model_validate_json(sse.data)
            calls.extend((call.name or "", json.dumps(call.args, ensure_ascii=False))
                         for call in reply.function_calls or ())
        return calls

    return ("google-genai: GenerateContentResponse per event", sdk, args.openai_repeat)


_SDKS: dict[str, Callable[[argparse.Namespace], Decoder]] = {
    "responses": _openai_responses, "messages": _anthropic_messages, "gemini": _genai}


FLOOR_SHARE = 0.60
"""Each API's reader reaches at least this share of its floor's MB/s."""


def main() -> None:
    args = parse_args()
    for api in api_names(args.api):
        if args.once:
            run_once(api, args)
        elif args.instructions:
            count(api, args)
        else:
            measure(api, args)


def the_floor(api: str) -> Callable[[list[bytes]], Calls]:
    return naive_floor if api == "chat" else floor_of(api)


def run_once(api: str, args: argparse.Namespace) -> None:
    """Build the stream, warm the reader and the floor up on a small one, then run the
    ``--once`` side on the whole stream (nothing more for ``warm``)."""
    body, expected = api_stream(api, int(args.mb * MB), args.calls, args.seed)
    chunks = network_chunks(body, args.chunk)
    small, small_expected = api_stream(api, 50_000, 2, 1)
    sides = {"reader": reader_of(api), "floor": the_floor(api)}
    for decode in sides.values():
        timed(decode, network_chunks(small, args.chunk), small_expected, 1)
    if args.once in sides:
        timed(sides[args.once], chunks, expected, 1)


def count(api: str, args: argparse.Namespace) -> None:
    """Instructions of the reader and of the floor on one stream (see the docstring)."""
    once = [__file__, "--api", api, "--mb", str(args.mb), "--calls", str(args.calls),
            "--chunk", str(args.chunk), "--seed", str(args.seed), "--once"]
    # One run uncounted first: it writes the bytecode the counted ones then read alike.
    subprocess.run([sys.executable, *once, "warm"], cwd=REPO, env=clean_env(), check=True)
    counts = {}
    for side in ("warm", "reader", "floor"):
        counted = count_python_instructions([*once, side], REPO)
        if counted is None:
            raise SystemExit("valgrind is not installed: --instructions needs it")
        counts[side] = counted
    reader, floor = counts["reader"] - counts["warm"], counts["floor"] - counts["warm"]
    megabytes = len(api_stream(api, int(args.mb * MB), args.calls, args.seed)[0]) / MB
    print(f"{api}: {megabytes:.1f} MB; reader {reader / 1e6 / megabytes:.1f} M instructions"
          f" a MB, floor {floor / 1e6 / megabytes:.1f} M: {floor / reader:.0%} of the floor's"
          f" (target >= {FLOOR_SHARE:.0%})")


def measure(api: str, args: argparse.Namespace) -> None:
    """One API's stream: its reader beside its floor (and, for chat, the openai SDK)."""
    body, expected = api_stream(api, int(args.mb * MB), args.calls, args.seed)
    chunks = network_chunks(body, args.chunk)
    megabytes = len(body) / MB
    events = body.count(b"data: ")
    print(f"\n{api}: {megabytes:.1f} MB, {events} events, {args.calls} tool calls, "
          f"{len(chunks)} chunks of {args.chunk} bytes")
    chosen = api_decoders(api, args)
    small, small_expected = api_stream(api, 50_000, 2, 1)
    for _label, decode, _runs in chosen:  # imports and first calls off the clock
        timed(decode, network_chunks(small, args.chunk), small_expected, 1)
    rows, speeds = [], {}
    for label, decode, runs in chosen:
        # The best run, as timeit takes it: on a shared machine the others are the
        # same work slowed by other jobs, which would blur the share of the floor.
        seconds = min(timed(decode, chunks, expected, runs))
        speeds[label] = megabytes / seconds
        rows.append([label, seconds, speeds[label], 1e6 * seconds / events, runs])
    print_table(["decoder", "s (best)", "MB/s", "us/event", "runs"], rows)
    ours, floor = speeds[chosen[0][0]], speeds[chosen[-1][0]]
    share = ours / floor
    print(f"{api}: {share:.0%} of the floor (target >= {FLOOR_SHARE:.0%}):"
          f" {'met' if share >= FLOOR_SHARE else 'MISSED'}"
          + (f"; >= {TARGET_MB_S:g} MB/s: {'met' if ours >= TARGET_MB_S else 'MISSED'}"
             if api == "chat" else ""))


def api_decoders(api: str, args: argparse.Namespace) -> list[Decoder]:
    """The API's reader first, its floor last, the SDK rows between."""
    if api == "chat":
        return decoders(args)
    chosen: list[Decoder] = [(f"toolbench: SSEDecoder + {api} reader", reader_of(api),
                              args.repeat)]
    chosen += sdk_decoders(api, args)
    chosen.append((f"naive floor: split + json.loads + join ({api})", floor_of(api),
                   args.repeat))
    return chosen


if __name__ == "__main__":
    main()
