"""The loopback chat server itself, driven by plain httpx2 (sync and async)."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from typing import Any

import httpx2
import pytest
from support.chat_server import (
    ChatServer,
    RecordedRequest,
    SSEPause,
    chunks_for,
    completion,
    huge_reply,
    json_reply,
    reset_reply,
    sse_reply,
    stall_reply,
    start_chat_server,
    text_reply,
)

# Every client gets a small timeout so a server bug fails the test instead of hanging it.
TIMEOUT = httpx2.Timeout(2.0)
BODY = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}


def client_for(server: ChatServer, **kwargs: Any) -> httpx2.Client:
    return httpx2.Client(base_url=server.base_url, timeout=kwargs.pop("timeout", TIMEOUT), **kwargs)


def post(server: ChatServer, **kwargs: Any) -> httpx2.Response:
    with client_for(server, **kwargs) as client:
        return client.post("/chat/completions", json=BODY)


def stream_pieces(server: ChatServer) -> list[bytes]:
    """The raw body reads of one streamed request, as the client saw them."""
    with client_for(server) as client, client.stream("POST", "/chat/completions", json=BODY) as r:
        assert r.status_code == 200
        return list(r.iter_raw())


def test_base_url_is_loopback_with_a_port(chat_server: ChatServer) -> None:
    assert chat_server.base_url.startswith("http://127.0.0.1:")
    assert chat_server.base_url.endswith("/v1")
    assert int(chat_server.base_url.split(":")[2].split("/")[0]) > 0


def test_json_reply(chat_server: ChatServer) -> None:
    chat_server.enqueue(json_reply(completion("hello"), headers={"x-request-id": "r1"}))
    response = post(chat_server)
    assert response.status_code == 200
    assert response.headers["x-request-id"] == "r1"
    assert response.json()["choices"][0]["message"] == {"role": "assistant", "content": "hello"}


def test_queue_is_fifo_then_default_then_no_scripted_reply(chat_server: ChatServer) -> None:
    chat_server.enqueue(json_reply({"n": 1}), json_reply({"n": 2}, status=201))
    with client_for(chat_server) as client:
        first = client.post("/chat/completions", json=BODY)
        second = client.post("/chat/completions", json=BODY)
        unscripted = client.post("/chat/completions", json=BODY)
        chat_server.set_default(json_reply({"n": "default"}))
        defaulted = client.post("/chat/completions", json=BODY)
    assert [first.json(), second.json(), defaulted.json()] == [{"n": 1}, {"n": 2}, {"n": "default"}]
    assert second.status_code == 201
    assert unscripted.status_code == 500
    assert unscripted.json()["error"]["message"] == "no scripted reply"
    assert chat_server.pending == 0


def test_handler_computes_reply_and_wins_over_queue(chat_server: ChatServer) -> None:
    chat_server.enqueue(json_reply({"from": "queue"}))
    chat_server.set_handler(lambda request: json_reply({"model": request.json()["model"]}))
    assert post(chat_server).json() == {"model": "m"}
    chat_server.set_handler(None)
    assert post(chat_server).json() == {"from": "queue"}


def test_failing_handler_is_a_500_and_recorded(chat_server: ChatServer) -> None:
    def broken(request: RecordedRequest) -> Any:
        raise ValueError("boom")

    chat_server.set_handler(broken)
    response = post(chat_server)
    assert response.status_code == 500
    assert "boom" in response.json()["error"]["message"]
    assert [type(e) for e in chat_server.errors] == [ValueError]


def test_other_paths_are_404(chat_server: ChatServer) -> None:
    with client_for(chat_server) as client:
        response = client.get("/models")
    assert response.status_code == 404
    assert "GET /v1/models" in response.json()["error"]["message"]


def test_text_reply_with_its_content_type(chat_server: ChatServer) -> None:
    chat_server.enqueue(text_reply("<h1>Bad Gateway</h1>", 502, content_type="text/html"))
    response = post(chat_server)
    assert (response.status_code, response.text) == (502, "<h1>Bad Gateway</h1>")
    assert response.headers["content-type"] == "text/html"


def test_requests_are_recorded_with_headers_and_json_body(chat_server: ChatServer) -> None:
    chat_server.set_default(json_reply(completion("ok")))
    post(chat_server, headers={"Authorization": "Bearer sk-test", "X-Team": "search"})
    [request] = chat_server.requests
    assert (request.method, request.path) == ("POST", "/v1/chat/completions")
    assert request.headers["authorization"] == "Bearer sk-test"
    assert request.headers["x-team"] == "search"
    assert request.json() == BODY


def test_keep_alive_reuses_one_connection(chat_server: ChatServer) -> None:
    chat_server.set_default(json_reply(completion("ok")))
    with client_for(chat_server) as client:
        for _ in range(2):
            assert client.post("/chat/completions", json=BODY).status_code == 200
    post(chat_server)  # a new client opens a new connection
    ids = [request.connection_id for request in chat_server.requests]
    assert ids[0] == ids[1] != ids[2]


def test_sse_events_arrive_as_separate_reads(chat_server: ChatServer) -> None:
    chat_server.enqueue(sse_reply(["a", {"b": 1}, b": keep-alive\n\n"]))
    assert stream_pieces(chat_server) == [
        b"data: a\n\n",
        b'data: {"b": 1}\n\n',
        b": keep-alive\n\n",
        b"data: [DONE]\n\n",
    ]
    assert chat_server.requests[0].json() == BODY


def test_sse_pause_stalls_mid_stream(chat_server: ChatServer) -> None:
    chat_server.enqueue(sse_reply(["first", SSEPause(0.3), "second"], done=False))
    arrivals: list[float] = []
    with (
        client_for(chat_server) as client,
        client.stream("POST", "/chat/completions", json=BODY) as response,
    ):
        for _ in response.iter_raw():
            arrivals.append(time.monotonic())
    assert len(arrivals) == 2
    assert arrivals[1] - arrivals[0] >= 0.25


def test_split_bytes_splits_a_multibyte_character(chat_server: ChatServer) -> None:
    chat_server.enqueue(sse_reply(["é"], done=False, split_bytes=7))
    # b"data: \xc3\xa9\n\n" in 7-byte pieces cuts the two bytes of "é" apart.
    assert stream_pieces(chat_server) == [b"data: \xc3", b"\xa9\n\n"]


def test_split_bytes_cuts_across_events(chat_server: ChatServer) -> None:
    chat_server.enqueue(sse_reply(["ab", "cd"], split_bytes=5))
    pieces = stream_pieces(chat_server)
    assert b"".join(pieces) == b"data: ab\n\ndata: cd\n\ndata: [DONE]\n\n"
    assert {len(piece) for piece in pieces[:-1]} == {5}


def test_streamed_chunks_reassemble(chat_server: ChatServer) -> None:
    calls = [("get_weather", {"city": "Paris"})]
    chat_server.enqueue(sse_reply(chunks_for("Hi!", tool_calls=calls, split=4)))
    with (
        client_for(chat_server) as client,
        client.stream("POST", "/chat/completions", json=BODY) as response,
    ):
        lines = [line for line in response.iter_lines() if line.startswith("data: {")]
    chunks = [json.loads(line.removeprefix("data: ")) for line in lines]
    deltas = [c["choices"][0]["delta"] for c in chunks if c["choices"]]
    text = "".join(d.get("content") or "" for d in deltas)
    arguments = "".join(
        d["tool_calls"][0]["function"].get("arguments", "") for d in deltas if "tool_calls" in d
    )
    assert (text, json.loads(arguments)) == ("Hi!", {"city": "Paris"})
    assert chunks[-2]["choices"][0]["finish_reason"] == "tool_calls"
    assert chunks[-1]["choices"] == [] and chunks[-1]["usage"]["total_tokens"] == 15


def test_completion_shape_with_tool_calls() -> None:
    body = completion(tool_calls=[("f", {"x": 1}), ("g", "{not json")], usage=None)
    choice = body["choices"][0]
    assert choice["finish_reason"] == "tool_calls"
    assert [c["function"] for c in choice["message"]["tool_calls"]] == [
        {"name": "f", "arguments": '{"x": 1}'},
        {"name": "g", "arguments": "{not json"},
    ]
    assert "usage" not in body


def test_reset_before_headers(chat_server: ChatServer) -> None:
    chat_server.enqueue(reset_reply())
    with pytest.raises((httpx2.RemoteProtocolError, httpx2.ReadError)):
        post(chat_server)


def test_reset_mid_body(chat_server: ChatServer) -> None:
    chat_server.enqueue(reset_reply(after_bytes=120))
    with pytest.raises((httpx2.RemoteProtocolError, httpx2.ReadError)):
        post(chat_server)


def test_reset_mid_stream_after_some_events(chat_server: ChatServer) -> None:
    stream = sse_reply(["one", "two"])
    head_and_first_event = stream.render().index(b"data: two")
    chat_server.enqueue(reset_reply(after_bytes=head_and_first_event, of=stream))
    received: list[bytes] = []
    with (
        pytest.raises((httpx2.RemoteProtocolError, httpx2.ReadError)),
        client_for(chat_server) as client,
        client.stream("POST", "/chat/completions", json=BODY) as response,
    ):
        received.extend(response.iter_raw())
    assert received == [b"data: one\n\n"]


def test_stall_beyond_read_timeout_is_a_quick_read_timeout(chat_server: ChatServer) -> None:
    chat_server.enqueue(stall_reply(5.0))
    started = time.monotonic()
    with pytest.raises(httpx2.ReadTimeout):
        post(chat_server, timeout=httpx2.Timeout(2.0, read=0.2))
    assert time.monotonic() - started < 1.5


def test_delay_before_first_byte(chat_server: ChatServer) -> None:
    chat_server.enqueue(json_reply({"late": True}, delay_s=0.3))
    started = time.monotonic()
    assert post(chat_server).json() == {"late": True}
    assert 0.25 <= time.monotonic() - started < 1.5


def test_huge_reply_is_valid_json_of_the_size(chat_server: ChatServer) -> None:
    size = 5 * 1024 * 1024
    chat_server.enqueue(huge_reply(size))
    with (
        client_for(chat_server, timeout=httpx2.Timeout(5.0)) as client,
        client.stream("POST", "/chat/completions", json=BODY) as response,
    ):
        pieces = list(response.iter_raw())
    body = b"".join(pieces)
    assert len(body) == size == int(response.headers["content-length"])
    assert len(pieces) > 1
    assert json.loads(body)["object"] == "chat.completion"


def test_close_with_a_stalled_connection_returns_quickly() -> None:
    server = start_chat_server()
    server.enqueue(stall_reply(30.0))
    outcome: list[BaseException] = []

    def call() -> None:
        try:
            post(server, timeout=httpx2.Timeout(10.0))
        except httpx2.HTTPError as exc:
            outcome.append(exc)

    caller = threading.Thread(target=call)
    caller.start()
    deadline = time.monotonic() + 2.0
    while not server.requests and time.monotonic() < deadline:
        time.sleep(0.01)
    started = time.monotonic()
    server.close()
    assert time.monotonic() - started < 1.0
    caller.join(timeout=2.0)
    assert not caller.is_alive()
    assert [type(e) for e in outcome] == [httpx2.RemoteProtocolError]


def test_close_is_idempotent_and_context_manager_closes() -> None:
    with ChatServer() as server:
        url = server.base_url
    server.close()
    with pytest.raises(httpx2.ConnectError):
        httpx2.post(f"{url}/chat/completions", json=BODY, timeout=TIMEOUT)


def test_async_client_json_and_stream(chat_server: ChatServer) -> None:
    chat_server.enqueue(json_reply(completion("one")), sse_reply(["x", "y"], done=False))

    async def talk() -> tuple[Any, list[bytes]]:
        async with httpx2.AsyncClient(base_url=chat_server.base_url, timeout=TIMEOUT) as client:
            first = await client.post("/chat/completions", json=BODY)
            async with client.stream("POST", "/chat/completions", json=BODY) as response:
                pieces = [piece async for piece in response.aiter_raw()]
            return first.json(), pieces

    body, pieces = asyncio.run(talk())
    assert body["choices"][0]["message"]["content"] == "one"
    assert pieces == [b"data: x\n\n", b"data: y\n\n"]
    assert len({request.connection_id for request in chat_server.requests}) == 1


def test_async_client_read_timeout_on_stall(chat_server: ChatServer) -> None:
    chat_server.enqueue(stall_reply(5.0))

    async def talk() -> None:
        timeout = httpx2.Timeout(2.0, read=0.2)
        async with httpx2.AsyncClient(base_url=chat_server.base_url, timeout=timeout) as client:
            await client.post("/chat/completions", json=BODY)

    with pytest.raises(httpx2.ReadTimeout):
        asyncio.run(talk())


def test_serves_an_in_process_pytester_run(
    chat_server: ChatServer, pytester: pytest.Pytester
) -> None:
    chat_server.set_default(json_reply(completion("from the outer server")))
    pytester.makepyfile(
        f"""
        import httpx2

        def test_inner():
            r = httpx2.post("{chat_server.base_url}/chat/completions", json={{}}, timeout=2)
            assert r.json()["choices"][0]["message"]["content"] == "from the outer server"
        """
    )
    # Under xdist, pytest-benchmark warns at configure time in the inner run (it reads
    # PYTEST_XDIST_WORKER), and the outer filterwarnings=error turns that into an INTERNALERROR.
    pytester.runpytest("-p", "no:benchmark").assert_outcomes(passed=1)
    assert len(chat_server.requests) == 1
