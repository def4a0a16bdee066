"""Stream reassembly: MB/s of decoding a large SSE stream of tool-call deltas and putting
the calls back together, fed in network-sized chunks.

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
  its decoder can be used with; ``openai.Stream`` itself over an ``httpx`` response made
  from the chunks (each chunk becomes a ``ChatCompletionChunk``), arguments joined per index
  as user code does; and, with --openai-state, its own reassembler
  ``ChatCompletionStreamState`` (slower still: it updates a snapshot every chunk);
- naive floor: split on blank lines, ``json.loads`` each payload, join arguments per index.
Figures are the median of --repeat runs. Target: toolbench >= 20 MB/s.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import time
from collections.abc import Callable, Iterable
from typing import Any

from _common import print_table

from pytest_toolbench.transport.sse import SSEDecoder
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
    parser.add_argument("--repeat", type=int, default=3,
                        help="runs per decoder (median; default 3)")
    parser.add_argument("--openai-repeat", type=int, default=1,
                        help="runs of the (slow) openai decoders (default 1)")
    parser.add_argument("--openai-state", action="store_true",
                        help="also time openai's ChatCompletionStreamState (slow)")
    parser.add_argument("--seed", type=int, default=7)
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


def warm_up(chosen: list[Decoder], chunk: int) -> None:
    """One run of each on a small stream: imports and first-call set-up stay off the clock."""
    body, expected = tool_call_stream(50_000, 2, 1)
    for _label, decode, _runs in chosen:
        timed(decode, network_chunks(body, chunk), expected, 1)


def main() -> None:
    args = parse_args()
    body, expected = tool_call_stream(int(args.mb * MB), args.calls, args.seed)
    chunks = network_chunks(body, args.chunk)
    megabytes = len(body) / MB
    events = body.count(b"\n\ndata: ") + 1
    print(f"stream: {megabytes:.1f} MB, {events} events, {args.calls} parallel calls, "
          f"{len(chunks)} chunks of {args.chunk} bytes")
    chosen = decoders(args)
    warm_up(chosen, args.chunk)
    rows, speeds = [], []
    for label, decode, runs in chosen:
        seconds = statistics.median(timed(decode, chunks, expected, runs))
        speeds.append(megabytes / seconds)
        rows.append([label, seconds, speeds[-1], 1e6 * seconds / events, runs])
    print_table(["decoder", "s (median)", "MB/s", "us/event", "runs"], rows)
    ours = speeds[0]
    print(f"target >= {TARGET_MB_S:g} MB/s: {'met' if ours >= TARGET_MB_S else 'MISSED'}"
          f" ({ours:.1f} MB/s)")


if __name__ == "__main__":
    main()
