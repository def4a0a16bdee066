"""``toolbench conform`` against scripted loopback servers that each break one rule.

Chat, Responses and Messages share one loopback server (each API on its own route); Gemini
has its own (``support/gemini_server.py``: the service's routes, stream shape and refusals).

The faithful server answers every probe as the chat-completions API says; each fault
changes one thing, and the probe for that rule must catch it as a protocol failure. The
command runs in this process, as a user runs it, and its matrix is read from ``--report``.
"""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from support.chat_server import (
    ChatServer,
    RecordedRequest,
    Reply,
    SSEPause,
    SSEReply,
    chunks_for,
    completion,
    json_reply,
    named_event,
    sse_reply,
    text_reply,
)
from support.gemini_server import (
    GeminiServer,
    gemini_error,
    gemini_sse,
    response,
    text,
)
from support.gemini_server import call as function_call

from pytest_toolbench.commands.cli import main as toolbench
from pytest_toolbench.commands.conform import probe_files
from pytest_toolbench.commands.conform_matrix import PROBES

Fault = Callable[[dict[str, Any], dict[str, Any]], Reply | None]
"""Given the request body and the faithful reply's parts, a faulty reply (None: faithful)."""


def _faithful_parts(body: dict[str, Any]) -> dict[str, Any]:
    """What a correct server with a cooperative model answers: text, or the calls asked for."""
    messages = body["messages"]
    choice = body.get("tool_choice", "auto")
    if not body.get("tools") or choice == "none" or messages[-1]["role"] == "tool":
        return {"text": "It is 21 C and sunny." if messages[-1]["role"] == "tool" else "Hello."}
    cities = ["Paris", "London"] if "London" in messages[-1]["content"] else ["Paris"]
    return {"tool_calls": [("get_weather", {"city": city}) for city in cities]}


def _faithful(body: dict[str, Any], parts: dict[str, Any]) -> Reply:
    if not isinstance(body.get("temperature", 0), (int, float)):
        error = {"message": "temperature must be a number", "type": "invalid_request_error"}
        return json_reply({"error": error}, status=400)
    if body.get("stream"):
        usage = body.get("stream_options", {}).get("include_usage")
        chunks = chunks_for(**parts, usage={"prompt_tokens": 5, "completion_tokens": 2,
                                            "total_tokens": 7} if usage else None)
        return sse_reply(paced(chunks) if "tool_calls" in parts else chunks)
    return json_reply(completion(**parts))


PACE_S = 0.01
"""Between the events of a streamed call: a model writes its arguments over time."""


def paced(events: list[Any]) -> list[Any]:
    """``events`` a pause apart, as a server streams what its model writes."""
    return [piece for event in events for piece in (SSEPause(PACE_S), event)]


def _faithful_message(body: dict[str, Any]) -> Reply:
    """A correct Messages API server with a cooperative model (the same answers as chat's)."""
    if not isinstance(body.get("temperature", 0), (int, float)):
        error = {"type": "invalid_request_error", "message": "temperature: not a number"}
        return json_reply({"type": "error", "error": error}, status=400)
    last = body["messages"][-1]["content"]
    answered = isinstance(last, list) and last[-1].get("type") == "tool_result"
    choice = body.get("tool_choice", {"type": "auto"})["type"]
    blocks: list[dict[str, Any]]
    if answered or not body.get("tools") or choice == "none":
        blocks = [{"type": "text", "text": "It is 21 C and sunny." if answered else "Hello."}]
    else:
        cities = ["Paris", "London"] if "London" in str(last) else ["Paris"]
        blocks = [{"type": "tool_use", "id": f"toolu_{n}", "name": "get_weather",
                   "input": {"city": city}} for n, city in enumerate(cities)]
    stop = "tool_use" if blocks[0]["type"] == "tool_use" else "end_turn"
    if not body.get("stream"):
        return json_reply({"id": "msg_1", "type": "message", "role": "assistant",
                           "model": "m", "content": blocks, "stop_reason": stop,
                           "usage": {"input_tokens": 5, "output_tokens": 2}})
    events = [named_event("message_start", {"type": "message_start", "message": {
        "id": "msg_1", "type": "message", "role": "assistant", "content": [],
        "usage": {"input_tokens": 5, "output_tokens": 0}}})]
    for index, block in enumerate(blocks):
        opened = {**block, "input": {}} if block["type"] == "tool_use" else {**block, "text": ""}
        said = json.dumps(block["input"]) if block["type"] == "tool_use" else ""
        deltas = ([{"type": "input_json_delta", "partial_json": said[at:at + 6]}
                   for at in range(0, len(said), 6)]
                  if block["type"] == "tool_use" else [{"type": "text_delta",
                                                        "text": block["text"]}])
        events += [
            named_event("content_block_start", {"type": "content_block_start", "index": index,
                                                "content_block": opened}),
            *(named_event("content_block_delta", {"type": "content_block_delta",
                                                  "index": index, "delta": delta})
              for delta in deltas),
            named_event("content_block_stop", {"type": "content_block_stop", "index": index})]
    events += [named_event("message_delta", {"type": "message_delta", "delta": {
        "stop_reason": stop}, "usage": {"output_tokens": 2}}),
        named_event("message_stop", {"type": "message_stop"})]
    return sse_reply(paced(events) if stop == "tool_use" else events, done=False)


def serve(server: ChatServer, fault: Fault | None = None,
          message_fault: Callable[[dict[str, Any]], Reply | None] | None = None) -> None:
    def handle(request: RecordedRequest) -> Reply:
        body = request.json()
        if request.path.endswith("/messages"):
            return (message_fault(body) if message_fault else None) or _faithful_message(body)
        parts = _faithful_parts(body)
        return (fault(body, parts) if fault else None) or _faithful(body, parts)
    server.set_handler(handle)


def conform(server: ChatServer, tmp_path: Path, *extra: str) -> tuple[int, dict[str, Any]]:
    report = tmp_path / "matrix.json"
    code = toolbench(["conform", "--base-url", server.base_url, "--report", str(report),
                      "--timeout", "5", *extra])
    return code, json.loads(report.read_text(encoding="utf-8"))


def cells(matrix: dict[str, Any], api: str = "chat") -> dict[str, dict[str, Any]]:
    return {probe["name"]: probe["cells"][api] for probe in matrix["probes"]}


# ---------------------------------------------------------------------------- the faults


def finish_stop(body: dict[str, Any], parts: dict[str, Any]) -> Reply | None:
    if "tool_calls" in parts and not body.get("stream"):
        return json_reply(completion(**parts, finish_reason="stop"))
    return None


def required_ignored(body: dict[str, Any], parts: dict[str, Any]) -> Reply | None:
    if body.get("tool_choice") == "required":
        return json_reply(completion("I would rather chat."))
    return None


def merged_index(body: dict[str, Any], parts: dict[str, Any]) -> Reply | None:
    if not body.get("stream") or len(parts.get("tool_calls", ())) < 2:
        return None
    chunks = chunks_for(**parts)
    for chunk in chunks:
        for choice in chunk["choices"]:
            for call in choice["delta"].get("tool_calls", ()):
                call["index"] = 0
    return sse_reply(chunks)


def no_done(body: dict[str, Any], parts: dict[str, Any]) -> Reply | None:
    return sse_reply(chunks_for(**parts), done=False) if body.get("stream") else None


def stream_differs(body: dict[str, Any], parts: dict[str, Any]) -> Reply | None:
    if body.get("stream") and "tool_calls" in parts:
        return sse_reply(chunks_for(tool_calls=[("get_weather", {"city": "Lyon"})]))
    return None


def usage_missing(body: dict[str, Any], parts: dict[str, Any]) -> Reply | None:
    return sse_reply(chunks_for(**parts, usage=None)) if body.get("stream") else None


def strict_ignored(body: dict[str, Any], parts: dict[str, Any]) -> Reply | None:
    """A server that takes ``strict`` and does not hold the model to the schema."""
    if any(tool["function"].get("strict") for tool in body.get("tools", ())):
        return json_reply(completion(tool_calls=[("get_weather", {"city": "Paris",
                                                                  "country": "FR"})]))
    return None


def html_error(body: dict[str, Any], parts: dict[str, Any]) -> Reply | None:
    if isinstance(body.get("temperature", 0), str):
        return text_reply("<html><body>Bad request</body></html>", content_type="text/html")
    return None


def all_at_once(body: dict[str, Any], parts: dict[str, Any]) -> Reply | None:
    """The calls held back and sent whole with the rest at the end, in one write."""
    if not body.get("stream") or "tool_calls" not in parts:
        return None
    whole = sse_reply(chunks_for(**parts, split=1000))
    return sse_reply([b"".join(piece for piece in whole.pieces() if isinstance(piece, bytes))],
                     done=False)


def call_in_content(body: dict[str, Any], parts: dict[str, Any]) -> Reply | None:
    if isinstance(body.get("tool_choice"), dict):
        text = json.dumps({"name": "get_weather", "arguments": {"city": "Paris"}})
        return json_reply(completion(text))
    return None


@pytest.mark.parametrize(("fault", "probe", "reason"), [
    (finish_stop, "finish_reason", "expected 'tool_calls', got 'stop'"),
    (required_ignored, "required", "length of []"),
    (merged_index, "parallel_calls", "share index 0"),
    (no_done, "stream_done", "without data: [DONE]"),
    (stream_differs, "stream_agreement", "differ in tool_calls"),
    (usage_missing, "stream_usage", "no usage object arrived"),
    (html_error, "error_shape", "expected 400, got 200"),
    (strict_ignored, "strict_schema", "Additional properties are not allowed"),
    (call_in_content, "no_call_in_content", "get_weather"),
    (all_at_once, "stream_progressive", "get_weather's arguments came whole, in 1 event"),
])
def test_each_broken_rule_is_caught_by_its_probe(
        chat_server: ChatServer, tmp_path: Path, capsys: pytest.CaptureFixture[str],
        fault: Fault, probe: str, reason: str) -> None:
    serve(chat_server, fault)
    code, matrix = conform(chat_server, tmp_path)
    cell = cells(matrix)[probe]
    assert code == 1
    assert (cell["verdict"], cell["cause"]) == ("fail", "protocol"), cell
    assert reason in cell["reason"]
    assert f"{probe} " in capsys.readouterr().out


def test_a_faithful_server_passes_every_probe(
        chat_server: ChatServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    serve(chat_server)
    code, matrix = conform(chat_server, tmp_path, "--model", "m1")
    verdicts = {name: cell["verdict"] for name, cell in cells(matrix).items()}
    assert verdicts == {**{name: "pass" for name in PROBES},
                        "reasoning_separate": "not supported"}
    assert code == 0
    assert matrix["summary"] == {"pass": 16, "fail": 0, "not supported": 1}
    assert all(request.json()["model"] == "m1" for request in chat_server.requests)
    out = capsys.readouterr().out
    assert "16 passed, 0 failed, 1 not supported" in out


def test_a_model_that_does_not_call_is_named_as_the_cause(
        chat_server: ChatServer, tmp_path: Path) -> None:
    """auto without a call, one call where two were asked: the model's, not the server's."""
    def one_call_or_none(body: dict[str, Any], parts: dict[str, Any]) -> Reply | None:
        if body.get("tool_choice") == "auto":
            talk = "Paris is nice." if "London" not in str(body) else None
            calls = None if talk else [("get_weather", {"city": "Paris"})]
            return (sse_reply(chunks_for(talk, calls)) if body.get("stream")
                    else json_reply(completion(talk, calls)))
        return None
    serve(chat_server, one_call_or_none)
    code, matrix = conform(chat_server, tmp_path)
    auto, parallel = cells(matrix)["auto"], cells(matrix)["parallel_calls"]
    assert (auto["verdict"], auto["cause"]) == ("fail", "model")
    assert auto["reason"].startswith("model: ")
    assert parallel["verdict"] == "not supported"
    assert "model: " in parallel["reason"] and "expected 2, got 1" in parallel["reason"]
    assert code == 1


def test_reasoning_kept_apart_passes_and_repeated_in_content_fails(
        chat_server: ChatServer, tmp_path: Path) -> None:
    thought = "Seventeen has no divisor but one and itself, so it is prime."

    def reasoning(content: str) -> Fault:
        def reply(body: dict[str, Any], parts: dict[str, Any]) -> Reply | None:
            if "prime" not in str(body["messages"]):
                return None
            answer = completion(content)
            answer["choices"][0]["message"]["reasoning_content"] = thought
            return json_reply(answer)
        return reply
    serve(chat_server, reasoning("Yes."))
    _code, matrix = conform(chat_server, tmp_path)
    assert cells(matrix)["reasoning_separate"]["verdict"] == "pass"
    serve(chat_server, reasoning(f"{thought} Yes."))
    _code, matrix = conform(chat_server, tmp_path)
    assert cells(matrix)["reasoning_separate"]["cause"] == "protocol"


def test_repeat_takes_the_majority_and_markdown_prints_a_table(
        chat_server: ChatServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """One of three runs gets finish reason "stop" on its call: 2/3 runs pass."""
    seen = {"finish": 0}

    def flaky(body: dict[str, Any], parts: dict[str, Any]) -> Reply | None:
        if "tool_calls" not in parts or body.get("stream"):
            return None
        # Each run of a tool-call probe sends one such request, and a probe's runs are
        # consecutive: the first of every three fails its finish reason.
        seen["finish"] += 1
        return finish_stop(body, parts) if seen["finish"] % 3 == 1 else None
    serve(chat_server, flaky)
    code, matrix = conform(chat_server, tmp_path, "--repeat", "3", "--format", "markdown")
    finish = cells(matrix)["finish_reason"]
    assert finish["runs"] == 3 and finish["verdict"] == "pass"
    out = capsys.readouterr().out
    assert out.startswith("| probe | checks | chat |\n|---|---|---|\n")
    assert "| `finish_reason` | finish_reason tool_calls on a tool call | pass |" in out
    assert code == 0


def test_markdown_cells_say_the_short_reason_and_the_report_the_whole(
        chat_server: ChatServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A long error body and a model that makes one call of two: each cell says what
    happened in a few words, cut nowhere; the JSON report keeps every word."""
    said = "1 validation error: " + ", ".join(f"field {n} should be a number" for n in range(20))

    def long_error_one_call(body: dict[str, Any], parts: dict[str, Any]) -> Reply | None:
        if isinstance(body.get("temperature", 0), str):
            return json_reply({"error": {"message": said, "type": "server_error"}}, 500)
        if len(parts.get("tool_calls", ())) == 2:  # the parallel probe: one call, both ways
            one = {"tool_calls": parts["tool_calls"][:1]}
            return sse_reply(chunks_for(**one)) if body.get("stream") else json_reply(
                completion(**one))
        return None
    serve(chat_server, long_error_one_call)

    _code, matrix = conform(chat_server, tmp_path, "--format", "markdown")

    out = capsys.readouterr().out
    assert "| `error_shape` | invalid request: HTTP 400 with an error object |" \
           " **fail (protocol): expected 400, got 500** |" in out
    assert "| `parallel_calls` | parallel calls: distinct indices and ids |" \
           " not supported: the model did not make the calls |" in out
    assert "..." not in out
    assert said in cells(matrix)["error_shape"]["reason"]
    assert "expected 2, got 1" in cells(matrix)["parallel_calls"]["reason"]


def test_the_probes_are_case_files_pytest_collects_and_the_matrix_knows(
        capsys: pytest.CaptureFixture[str]) -> None:
    files = probe_files()
    assert all(file.is_file() for file in files)
    assert sorted(path.name for path in files[0].parent.glob("*.case.yaml")) == \
        sorted(file.name for file in files)
    assert toolbench(["validate", *map(str, files)]) == 0
    assert f"{len(files)} files, {len(files)} cases: ok" in capsys.readouterr().out


def test_a_probe_answered_with_5xx_does_not_fail_the_others(
        chat_server: ChatServer, tmp_path: Path) -> None:
    """Three 500s in a row would open the endpoint's circuit in a test run; not here."""
    def required_500(body: dict[str, Any], parts: dict[str, Any]) -> Reply | None:
        if body.get("tool_choice") == "required":
            return json_reply({"error": {"message": "", "type": "internal_server_error"}}, 500)
        return None
    serve(chat_server, required_500)
    code, matrix = conform(chat_server, tmp_path, "--repeat", "3")
    verdicts = {name: cell["verdict"] for name, cell in cells(matrix).items()}
    assert verdicts["required"] == "fail"
    assert "got 500" in cells(matrix)["required"]["reason"]
    assert [name for name, verdict in verdicts.items() if verdict == "fail"] == ["required"]
    assert code == 1


def test_an_unreachable_server_is_said_at_once(tmp_path: Path,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    """No probe is sent to a port nobody listens on: one line, exit 2, no fifteen waits."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]  # closed again before conform connects: refused
    started = time.perf_counter()
    code = toolbench(["conform", "--base-url", f"http://127.0.0.1:{port}/v1"])
    assert code == 2
    assert time.perf_counter() - started < 5
    err = capsys.readouterr().err
    assert f"toolbench conform: error: cannot connect to 127.0.0.1:{port} (" in err
    assert "is the server running?" in err


def test_one_column_per_api_each_judged_by_its_own_protocol(
        chat_server: ChatServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Messages streams cut before message_stop fail that column's streamed probes only."""
    def no_message_stop(body: dict[str, Any]) -> Reply | None:
        if not body.get("stream"):
            return None
        whole = _faithful_message(body)
        assert isinstance(whole, SSEReply)
        return sse_reply(list(whole.events)[:-1], done=False)
    serve(chat_server, message_fault=no_message_stop)
    page = tmp_path / "matrix.html"
    code, matrix = conform(chat_server, tmp_path, "--api", "chat,messages", "--html", str(page))
    assert matrix["apis"] == ["chat", "messages"]
    chat, messages = cells(matrix), cells(matrix, "messages")
    assert {name for name, cell in chat.items() if cell["verdict"] == "fail"} == set()
    assert {name for name, cell in messages.items() if cell["verdict"] == "fail"} == {
        "stream_done", "parallel_calls", "stream_agreement", "stream_progressive"}
    assert "without message_stop" in messages["stream_done"]["reason"]
    assert code == 1
    header = capsys.readouterr().out.splitlines()[0]
    assert header.split() == ["probe", "chat", "messages"]
    shown = page.read_text(encoding="utf-8")
    assert "<th>messages</th>" in shown and "without message_stop" in shown
    assert "http://" not in shown.replace(chat_server.base_url, "")  # loads nothing


def test_an_unknown_api_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    assert toolbench(["conform", "--base-url", "http://127.0.0.1:9/v1", "--api", "soap"]) == 2
    assert "unknown API 'soap'; choose from chat, responses, messages" in capsys.readouterr().err


# ---------------------------------------------------------------------------- Gemini


def _faithful_gemini(server: GeminiServer, request: RecordedRequest) -> Reply:
    """A correct Gemini server with a cooperative model (the same answers as chat's): each
    call carries a thought signature, which the next request must send back (the server
    refuses it otherwise, as the service does)."""
    body = request.json()
    if not isinstance(body.get("generationConfig", {}).get("temperature", 0), (int, float)):
        return gemini_error(400, "Invalid value at 'generation_config.temperature'"
                                 " (TYPE_FLOAT)", "INVALID_ARGUMENT")
    last = body["contents"][-1]
    answered = any("functionResponse" in part for part in last["parts"])
    mode = body.get("toolConfig", {}).get("functionCallingConfig", {}).get("mode", "AUTO")
    if answered or not body.get("tools") or mode == "NONE":
        parts = [text("It is 21 C and sunny." if answered else "Hello.")]
    else:
        cities = ["Paris", "London"] if "London" in json.dumps(last) else ["Paris"]
        parts = [function_call("get_weather", {"city": city}) for city in cities]
        parts[0]["thoughtSignature"] = "c2lnLTE="  # only the first of parallel calls has one
        server.remember("get_weather", {"city": cities[0]}, "c2lnLTE=")
    if ":streamGenerateContent" not in request.path:
        return json_reply(response(*parts))
    # As the service streams: the parts, then a last event whose only part is empty text.
    return gemini_sse([response(*parts, finish=None),
                       response(text(""), finish="STOP")])


def serve_gemini(server: GeminiServer,
                 fault: Callable[[RecordedRequest, Reply], Reply] | None = None) -> None:
    def handle(request: RecordedRequest) -> Reply:
        faithful = _faithful_gemini(server, request)
        return fault(request, faithful) if fault else faithful
    server.set_handler(handle)


@pytest.fixture
def gemini_server() -> Any:
    with GeminiServer().start() as server:
        yield server


def test_the_gemini_column_runs_every_probe_on_the_gemini_routes(
        gemini_server: GeminiServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    serve_gemini(gemini_server)
    code, matrix = conform(gemini_server, tmp_path, "--api", "gemini", "--model", "m1")
    assert matrix["apis"] == ["gemini"]
    verdicts = {name: cell["verdict"] for name, cell in cells(matrix, "gemini").items()}
    # Gemini sends each call whole, in one part: its calls cannot stream in pieces.
    assert verdicts == {**{name: "pass" for name in PROBES},
                        "reasoning_separate": "not supported",
                        "stream_progressive": "not supported"}, cells(matrix, "gemini")
    assert code == 0
    paths = {request.path.split("?")[0] for request in gemini_server.requests}
    assert paths == {"/v1beta/models/m1:generateContent",
                     "/v1beta/models/m1:streamGenerateContent"}
    round_trip = [request.json() for request in gemini_server.requests
                  if any("functionResponse" in part
                         for part in request.json()["contents"][-1]["parts"])]
    assert round_trip, "no probe sent a function result back"
    out = capsys.readouterr().out
    assert out.splitlines()[0].split() == ["probe", "gemini"]
    assert "15 passed, 0 failed, 2 not supported" in out


def test_the_gemini_column_judges_by_gemini_rules(
        gemini_server: GeminiServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A stream that closes before any event gave a finishReason is not done, by Gemini's
    rule (it has no end marker); the streamed probes say so and the rest pass."""
    def no_finish(request: RecordedRequest, faithful: Reply) -> Reply:
        if ":streamGenerateContent" not in request.path:
            return faithful
        assert isinstance(faithful, SSEReply)
        return sse_reply(list(faithful.events)[:-1], done=False)
    serve_gemini(gemini_server, no_finish)
    code, matrix = conform(gemini_server, tmp_path, "--api", "gemini", "--model", "m1")
    gemini = cells(matrix, "gemini")
    failed = {name for name, cell in gemini.items() if cell["verdict"] == "fail"}
    assert failed == {"stream_done", "parallel_calls", "stream_agreement",
                      "stream_progressive"}, gemini
    assert gemini["stream_done"]["cause"] == "protocol"
    assert "stream ended without an event with a finishReason" in gemini["stream_done"]["reason"]
    assert gemini["plain_text"]["verdict"] == gemini["tool_round_trip"]["verdict"] == "pass"
    assert code == 1
    assert "stream_done" in capsys.readouterr().out


# ---------------------------------------------------------------------------- base URLs


def test_each_api_may_answer_at_a_base_url_of_its_own(
        chat_server: ChatServer, gemini_server: GeminiServer, tmp_path: Path) -> None:
    """A chat server at one URL, a Gemini one at another given as a bare host: Gemini's
    requests go to its own version path, /v1beta."""
    serve(chat_server)
    serve_gemini(gemini_server)
    host = gemini_server.base_url.removesuffix("/v1beta")
    report = tmp_path / "matrix.json"
    code = toolbench(["conform", "--base-url", chat_server.base_url, "--base-url",
                      f"gemini={host}", "--api", "chat,gemini", "--model", "m1",
                      "--report", str(report), "--timeout", "5"])
    matrix = json.loads(report.read_text(encoding="utf-8"))
    assert code == 0
    assert matrix["base_urls"] == {"chat": chat_server.base_url,
                                   "gemini": gemini_server.base_url}
    assert matrix["base_url"] == (f"{chat_server.base_url} (chat);"
                                  f" {gemini_server.base_url} (gemini)")
    for api in ("chat", "gemini"):
        assert cells(matrix, api)["forced_call"]["verdict"] == "pass", cells(matrix, api)
    assert {request.path.split("?")[0] for request in gemini_server.requests} == {
        "/v1beta/models/m1:generateContent", "/v1beta/models/m1:streamGenerateContent"}
    assert all(request.path.startswith("/v1/chat/") for request in chat_server.requests)


@pytest.mark.parametrize(("argv", "said"), [
    (["--base-url", "soap=http://127.0.0.1:9/v1"], "unknown API 'soap'"),
    (["--base-url", "gemini=http://127.0.0.1:9", "--api", "chat,gemini"],
     "no base URL for chat: give --base-url URL, or --base-url chat=URL"),
    (["--base-url", "http://127.0.0.1:9/v1", "--base-url", "gemini=http://127.0.0.1:9"],
     "--base-url gemini=... names an API not probed; add it to --api (now chat)"),
    (["--base-url", "http://127.0.0.1:9/v1", "--base-url", "http://127.0.0.1:8/v1"],
     "--base-url gives more than one URL for every API"),
])
def test_base_urls_that_cannot_be_used_are_refused(
        argv: list[str], said: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert toolbench(["conform", *argv]) == 2
    assert said in capsys.readouterr().err
