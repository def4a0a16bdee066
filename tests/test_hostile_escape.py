"""Nothing escapes an agent case: agent code that connects anywhere but the plugin's proxy
is refused at connect, and its case fails naming the host and what to change.

A second loopback server stands in for the real service an agent might reach past the
proxy: a client with a hard-coded ``base_url`` (the openai SDK, sync and async), one built
at import time before the proxy's variables were set, plain httpx2 reading
``OPENAI_API_BASE``, a thread the agent starts. Each case must fail in replay and in a
recording (which keeps the old cassette), and the stand-in must never hear a request.
"""

from __future__ import annotations

import socket
from collections.abc import Iterator

import pytest
from support.chat_server import ChatServer, completion, json_reply, start_chat_server

from pytest_toolbench.netguard import Escaped, guard_for

AGENTS = '''
import os
import threading

import httpx2
import openai

import early_client

REAL = os.environ["REAL_SERVICE_URL"]  # read at import, as a settings module would


def _text(reply):
    return reply.choices[0].message.content


def make_sync():
    client = openai.OpenAI(base_url=REAL, max_retries=0)  # a base URL of its own
    return lambda user: _text(client.chat.completions.create(
        model="m", messages=[{"role": "user", "content": user}]))


class AsyncAgent:
    def __init__(self):
        self.client = openai.AsyncOpenAI(base_url=REAL, max_retries=0)

    async def __call__(self, user):
        return _text(await self.client.chat.completions.create(
            model="m", messages=[{"role": "user", "content": user}]))

    async def aclose(self):
        await self.client.close()


def make_async():
    return AsyncAgent()


def make_early():
    return lambda user: _text(early_client.CLIENT.chat.completions.create(
        model="m", messages=[{"role": "user", "content": user}]))


def _post(user):
    with httpx2.Client(timeout=10) as client:  # OPENAI_API_BASE: no SDK here reads it
        reply = client.post(os.environ["OPENAI_API_BASE"] + "/chat/completions",
                            json={"model": "m", "messages": [{"role": "user", "content": user}]})
    return reply.json()["choices"][0]["message"]["content"]


def make_httpx2():
    return _post


def make_threaded():
    def agent(user):
        said = []

        def work():
            try:
                said.append(_post(user))
            except Exception as error:  # swallowed: the case fails all the same
                said.append(f"no answer: {error}")

        worker = threading.Thread(target=work)
        worker.start()
        worker.join(10)
        return said[0]
    return agent
'''

EARLY_CLIENT = '''
import openai

CLIENT = openai.OpenAI(max_retries=0)  # built when conftest.py is imported: before any case
'''

KINDS = ("sync", "async", "early", "httpx2", "threaded")


def cases(upstream: str) -> str:
    return "---\n".join(
        f"name: {kind}\nagent: {{python: 'escaping:make_{kind}'}}\n"
        f"endpoint: {{base_url: '{upstream}'}}\n"
        "stages:\n  - name: ask\n    user: hi\n    expect: {text: fine}\n"
        for kind in KINDS)


@pytest.fixture
def real(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> Iterator[ChatServer]:
    """The real service, on loopback, that no agent may reach past the proxy."""
    with start_chat_server() as server:
        server.set_handler(lambda request: json_reply(completion("fine")))
        monkeypatch.setenv("REAL_SERVICE_URL", server.base_url)
        monkeypatch.setenv("OPENAI_API_BASE", server.base_url)
        monkeypatch.setenv("OPENAI_BASE_URL", server.base_url)  # what early_client reads
        monkeypatch.setenv("OPENAI_API_KEY", "sk-a-real-key-0123456789")
        pytester.makepyfile(escaping=AGENTS, early_client=EARLY_CLIENT)
        pytester.makeconftest("import early_client\n")
        pytester.syspathinsert()
        yield server


def run(pytester: pytest.Pytester, *args: str) -> pytest.RunResult:
    return pytester.runpytest("-p", "no:cacheprovider", *args)


def escaped_lines(real: ChatServer, file: str = "escape.case.yaml") -> list[str]:
    where = real.base_url.removeprefix("http://").removesuffix("/v1")
    return [f"{file}:*: {kind}: stages[[]0]: the agent connected to {where}, not to the"
            " plugin's proxy: refused (in a replay nothing may leave the process; in a"
            " recording the traffic would go unrecorded). Send the agent's requests through"
            " the proxy: *toolbench.base_url(api)*--toolbench-allow-connect HOST:PORT"
            for kind in KINDS]


def test_in_replay_a_connection_past_the_proxy_fails_at_connect_naming_the_host(
        pytester: pytest.Pytester, real: ChatServer) -> None:
    pytester.makefile(".case.yaml", escape=cases("http://127.0.0.1:9/v1"))
    for kind in KINDS:
        pytester.makefile(".yaml", **{f"__cassettes__/escape/{kind}":
                                      "version: 2\napi: agent\ninteractions: []\n"})
    result = run(pytester)
    result.assert_outcomes(failed=len(KINDS))
    for line in escaped_lines(real):
        result.stdout.fnmatch_lines([line])
    assert real.requests == []


def test_a_recording_that_went_past_the_proxy_fails_and_keeps_the_old_cassette(
        pytester: pytest.Pytester, real: ChatServer) -> None:
    pytester.makefile(".case.yaml", escape=cases("UPSTREAM"))
    kept = "version: 2\napi: agent\ninteractions: []\n# the good recording\n"
    for kind in KINDS:
        pytester.makefile(".yaml", **{f"__cassettes__/escape/{kind}": kept})
    kept = (pytester.path / "__cassettes__" / "escape" / "sync.yaml").read_text()
    with start_chat_server() as upstream:
        upstream.set_handler(lambda request: json_reply(completion("fine")))
        case_file = pytester.path / "escape.case.yaml"
        case_file.write_text(case_file.read_text().replace("UPSTREAM", upstream.base_url))
        result = run(pytester, "--toolbench-record")
        assert upstream.requests == []
    result.assert_outcomes(failed=len(KINDS))
    for line in escaped_lines(real):
        result.stdout.fnmatch_lines([line])
    assert real.requests == []
    for kind in KINDS:
        assert (pytester.path / "__cassettes__" / "escape" / f"{kind}.yaml").read_text() == kept


def test_a_host_the_user_allows_may_be_reached(pytester: pytest.Pytester,
                                               real: ChatServer) -> None:
    pytester.makefile(".case.yaml", escape=cases("http://127.0.0.1:9/v1"))
    where = real.base_url.removeprefix("http://").removesuffix("/v1")
    run(pytester, "--toolbench-live", "--toolbench-allow-connect", where
        ).assert_outcomes(passed=len(KINDS))
    assert len(real.requests) == len(KINDS)


def test_a_bad_allowed_host_is_a_usage_error(pytester: pytest.Pytester) -> None:
    result = run(pytester, "--toolbench-allow-connect", "127.0.0.1:http")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([("*--toolbench-allow-connect: '127.0.0.1:http': the port is"
                                 " not a number from 1 to 65535*")])


FIXTURE_TEST = '''
import escaping


def test_asks(toolbench_agent):
    assert escaping.make_sync()("hi") == "fine"
'''


def test_a_fixture_test_that_connects_past_the_proxy_fails_naming_the_host(
        pytester: pytest.Pytester, real: ChatServer) -> None:
    pytester.makepyfile(test_asks=FIXTURE_TEST)
    pytester.makefile(".yaml", **{"__cassettes__/test_asks/test_asks":
                                  "version: 2\napi: agent\ninteractions: []\n"})
    result = run(pytester)
    result.assert_outcomes(failed=1, errors=1)  # the client's error, then the teardown's
    where = real.base_url.removeprefix("http://").removesuffix("/v1")
    result.stdout.fnmatch_lines([(f"*the test connected to {where}, not to the plugin's proxy:"
                                 " refused*toolbench_agent.base_url(api)*")])
    assert real.requests == []


def test_the_guard_refuses_a_lookup_before_it_leaves_and_tells_connect_ex_no() -> None:
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        proxy_port = listener.getsockname()[1]
        guard = guard_for(proxy_port, ["db.internal:5432"], "the agent", "Change it.")
        with guard.armed():
            with pytest.raises(Escaped, match="model-api.invalid:443"):
                socket.getaddrinfo("model-api.invalid", 443)
            socket.getaddrinfo("localhost", proxy_port)  # loopback names resolve
            socket.getaddrinfo("0.0.0.0", 0, flags=socket.AI_PASSIVE)  # an address: no DNS
            with pytest.raises(Escaped):
                socket.create_connection(("127.0.0.2", proxy_port), timeout=2)
            with socket.socket() as other:
                assert other.connect_ex(("127.0.0.1", proxy_port + 1)) != 0
            with socket.create_connection(("127.0.0.1", proxy_port), timeout=2):
                pass  # the proxy itself
        with socket.create_connection(("127.0.0.1", proxy_port), timeout=2):
            pass  # unarmed: no guard at all
    assert guard.escapes == ["model-api.invalid:443", f"127.0.0.2:{proxy_port}",
                             f"127.0.0.1:{proxy_port + 1}"]
    assert guard.take() is not None and guard.take() is None


def test_the_allowed_hosts_are_read_as_written() -> None:
    guard = guard_for(1, ["db.internal:5432", "[::1]:8080", "cache"], "x", "")
    assert [str(allowed) for allowed in guard.allowed] == ["db.internal:5432", "[::1]:8080",
                                                           "cache"]
    for host, port in (("db.internal", 5432), ("0:0::1", 8080), ("CACHE", 6379)):
        guard.check(socket.AF_INET6 if ":" in host else socket.AF_INET, (host, port))
    with pytest.raises(Escaped):
        guard.check(socket.AF_INET, ("db.internal", 5433))
    assert guard.escapes == ["db.internal:5433"]
