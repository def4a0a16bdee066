"""Real servers' recorded traffic (../shared/compat) read through the SSE decoder and reassembly.

The recordings are not part of the repository: they are read from ``shared/compat`` beside
the checkout, or from the folder ``TOOLBENCH_COMPAT_DIR`` names; without them these tests
skip, saying where to put them. Each file is a test id. Streamed bodies go through :class:`SSEDecoder` in small random-size
chunks (seeded, so a failure reproduces) and :class:`StreamAssembler`; non-streamed bodies
through :func:`parse_completion`. The expected values are read off the recordings.
"""

from __future__ import annotations

import json
import os
import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml

from pytest_toolbench.records import Reply
from pytest_toolbench.transport.sse import SSEDecoder
from pytest_toolbench.wire.chat_reader import StreamAssembler, parse_completion

COMPAT_ENV = "TOOLBENCH_COMPAT_DIR"
COMPAT = Path(__file__).resolve().parents[1].parent / "shared" / "compat"
"""Where the recordings sit in a development tree: ``shared/compat`` beside the checkout."""


@dataclass
class Expected:
    """What one interaction's response must reassemble to."""

    calls: list[tuple[str, Any]] = field(default_factory=list)
    text: str = ""
    finish_reason: str = "stop"
    usage: tuple[int, int, int] | None = None
    """(prompt_tokens, completion_tokens, total_tokens)."""
    chunks: int | None = None
    """Number of data events but ``[DONE]``, for streamed responses."""


SEATTLE_SF = [
    ("get_current_weather", {"location": "Seattle, WA"}),
    ("get_current_weather", {"location": "San Francisco, CA"}),
]
PARIS = [("get_weather", {"city": "Paris"})]

EXPECTED: dict[str, list[Expected]] = {
    "ollama_stream_tool_call.yaml": [
        # Ollama: index-less call, finish_reason "stop", no usage chunk though one was asked.
        Expected(calls=[("return_bool", {"value": True})], chunks=2),
    ],
    "openai_parallel_tool_calls.yaml": [
        Expected(calls=SEATTLE_SF, finish_reason="tool_calls", usage=(75, 51, 126)),
        Expected(
            text="Today, the weather in Seattle is 50 degrees and raining, while San Francisco"
            " is enjoying 70 degrees and sunny weather.",
            usage=(99, 25, 124),
        ),
    ],
    "openai_stream_parallel_tool_calls.yaml": [
        Expected(calls=SEATTLE_SF, finish_reason="tool_calls", usage=(75, 51, 126), chunks=18),
    ],
    "openai_stream_text_usage.yaml": [
        Expected(text='"This is a test."', usage=(12, 5, 17), chunks=8),
    ],
    "openai_stream_tool_call.yaml": [
        Expected(
            calls=[("multiply", {"a": 1231, "b": 2331})],
            finish_reason="tool_calls",
            usage=(54, 20, 74),
            chunks=14,  # header, 11 argument fragments, finish, usage
        ),
        Expected(
            text=r"The result of \( 1231 \times 2331 \) is \( 2,869,461 \).",
            usage=(87, 26, 113),
            chunks=27,
        ),
    ],
    "openai_stream_tool_call_2026.yaml": [
        Expected(
            calls=[("get_capital", {"country": "UK"})],
            finish_reason="tool_calls",
            usage=(53, 15, 68),
            chunks=8,
        ),
        Expected(text="The capital of the UK is London.", usage=(78, 9, 87), chunks=11),
    ],
    "llamacpp_tool_call": [
        Expected(calls=PARIS, finish_reason="tool_calls", usage=(37, 9, 46)),
    ],
    "llamacpp_stream_tool_call": [
        Expected(calls=PARIS, finish_reason="tool_calls", chunks=12),
    ],
}


@dataclass
class Recorded:
    """One recorded exchange: the request body sent and the response received."""

    request: dict[str, Any]
    status: int
    content_type: str
    body: bytes


def compat_dir() -> Path:
    """The folder of recordings; the test skips, saying how to provide it, when there is none."""
    directory = Path(os.environ.get(COMPAT_ENV) or COMPAT)
    if not directory.is_dir():
        pytest.skip(
            "recorded traffic of real servers is not part of the repository, and there is "
            f"none at {directory}: copy the compat recordings to ../shared/compat beside this "
            f"checkout, or set {COMPAT_ENV} to the folder that holds them"
        )
    return directory


def load_cassette(path: Path) -> list[Recorded]:
    """A vcrpy-style cassette; the request is a JSON string ``body`` or a ``parsed_body``."""
    recorded = []
    for interaction in yaml.safe_load(path.read_text(encoding="utf-8"))["interactions"]:
        request, response = interaction["request"], interaction["response"]
        body = request["parsed_body"] if "parsed_body" in request else json.loads(request["body"])
        headers = {key.lower(): value for key, value in response["headers"].items()}
        recorded.append(
            Recorded(
                request=body,
                status=response["status"]["code"],
                content_type=headers["content-type"][0],
                body=response["body"]["string"].encode("utf-8"),
            )
        )
    return recorded


def load_pair(directory: Path, stem: str) -> list[Recorded]:
    """A ``STEM.request.json`` with its ``STEM.response.json`` or ``STEM.response.sse``."""
    request = json.loads((directory / f"{stem}.request.json").read_text(encoding="utf-8"))
    suffix, content_type = (
        (".sse", "text/event-stream") if request.get("stream") else (".json", "application/json")
    )
    body = (directory / f"{stem}.response{suffix}").read_bytes()
    return [Recorded(request=request, status=200, content_type=content_type, body=body)]


def read_stream(body: bytes, rng: random.Random) -> Reply:
    """Decode ``body`` in random 1-64 byte chunks; event ``n`` arrives at ``n`` ms."""
    decoder, assembler = SSEDecoder(), StreamAssembler()
    position, number = 0, 0
    while position < len(body):
        size = rng.randint(1, 64)
        for event in decoder.feed(body[position : position + size]):
            number += 1
            assembler.add(event, float(number))
        position += size
    for event in decoder.close():
        number += 1
        assembler.add(event, float(number))
    return assembler.finish(truncated=decoder.truncated)


def read_response(recorded: Recorded, rng: random.Random) -> Reply:
    streamed = bool(recorded.request.get("stream"))
    assert recorded.content_type.startswith("text/event-stream" if streamed else "application/json")
    if streamed:
        return read_stream(recorded.body, rng)
    return parse_completion(recorded.status, recorded.body, recorded.content_type)


def check(reply: Reply, expected: Expected) -> None:
    assert (reply.problems, reply.error) == ([], None)
    assert [(call.name, call.arguments) for call in reply.tool_calls] == expected.calls
    assert all(call.arguments_error is None and call.id for call in reply.tool_calls)
    assert reply.text == expected.text
    assert reply.finish_reason == expected.finish_reason
    usage = reply.usage
    if expected.usage is None:
        assert usage is None
    else:
        assert usage is not None
        keys = ("prompt_tokens", "completion_tokens", "total_tokens")
        assert tuple(usage[key] for key in keys) == expected.usage
    if expected.chunks is None:
        assert reply.stream is None
    else:
        assert reply.stream is not None
        assert (reply.stream.done, reply.stream.chunks) == (True, expected.chunks)
        assert reply.stream.usage == (expected.usage is not None)
        assert reply.ttft_ms is not None


def check_sent_back(request: dict[str, Any], previous: Reply) -> None:
    """A later request that replays the assistant's tool calls must match what we rebuilt."""
    for message in request["messages"]:
        if message["role"] == "assistant" and message.get("tool_calls"):
            sent = [
                (c["id"], c["function"]["name"], json.loads(c["function"]["arguments"]))
                for c in message["tool_calls"]
            ]
            assert sent == [(c.id, c.name, c.arguments) for c in previous.tool_calls]


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_recorded_traffic(name: str) -> None:
    directory = compat_dir()
    path = directory / name
    recorded = load_cassette(path) if path.suffix == ".yaml" else load_pair(directory, name)
    expected = EXPECTED[name]
    assert len(recorded) == len(expected)
    rng = random.Random(f"{name}-1234")
    previous: Reply | None = None
    for exchange, want in zip(recorded, expected):
        if previous is not None:
            check_sent_back(exchange.request, previous)
        previous = read_response(exchange, rng)
        check(previous, want)


def test_every_recording_is_checked() -> None:
    """A file added to the compat folder without expectations fails here, not silently."""
    covered = set()
    for name in EXPECTED:
        if name.endswith(".yaml"):
            covered.add(name)
        else:
            covered.update(path.name for path in compat_dir().glob(f"{name}.*"))
    present = {path.name for path in compat_dir().iterdir() if path.name != "README.md"}
    assert present == covered


def test_without_the_recordings_every_test_skips_saying_where_to_put_them(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytester.makepyfile(test_compat_copy=Path(__file__).read_text(encoding="utf-8"))
    monkeypatch.setenv(COMPAT_ENV, str(pytester.path / "absent"))

    result = pytester.runpytest("-rs", "-k", "recorded_traffic or every_recording")

    result.assert_outcomes(skipped=len(EXPECTED) + 1)
    missing = pytester.path / "absent"
    reason = (f"recorded traffic of real servers is not part of the repository, and there is"
              f" none at {missing}: copy the compat recordings to ../shared/compat beside this"
              f" checkout, or set {COMPAT_ENV} to the folder that holds them")
    result.stdout.fnmatch_lines([f"SKIPPED [[]{len(EXPECTED) + 1}[]] *: {reason}"])
