"""One live MCP server, through the official ``mcp`` SDK: started, listed, called, closed.

The SDK's transports and sessions are anyio task groups, which must be left by the task
that entered them; so a task of the connection's own holds them open from start to close,
and calls are made from the case's tasks. Every fault becomes ``McpFault``, whose message
says what happened to which server, with the end of its stderr (stdio servers).
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
from collections.abc import AsyncIterator, Awaitable
from typing import TYPE_CHECKING, Any, TypeVar

from .processes import SERVER_PROCESSES
from .servers import ResolvedServer
from .stderr import StderrTail

if TYPE_CHECKING:
    from mcp import ClientSession

_T = TypeVar("_T")
_CLOSE_WAIT_S = 10.0
"""How long closing may take (the SDK gives a stdio server 2 s, then kills its tree)."""


class McpFault(Exception):
    """The server could not be started or broke while in use; the message says how."""


class McpConnection:
    """A running MCP server and the client session that talks to it."""

    def __init__(self, server: ResolvedServer) -> None:
        self.server = server
        self._session: ClientSession | None = None
        self._stderr: StderrTail | None = None
        self._ready: asyncio.Future[None] | None = None
        self._closing = asyncio.Event()
        self._broken: asyncio.Future[str] = asyncio.get_running_loop().create_future()
        """Set, with what went wrong, when the connection breaks while in use."""
        self._holder: asyncio.Task[None] | None = None
        self._http_error: str | None = None
        """Streamable HTTP: the last error status the server answered (``HTTP 401``)."""

    async def start(self) -> dict[str, Any]:
        """Start the server, initialise the session; return its ``tools/list`` result."""
        _import_sdk(self.server)  # before the clock: the plugin's cost, not the server's
        loop = asyncio.get_running_loop()
        self._ready = loop.create_future()
        self._holder = loop.create_task(self._hold(), name=f"toolbench-mcp-{self.server.name}")
        timeout = self.server.startup_timeout_s
        deadline = loop.time() + timeout
        # Garbage for initialize's answer breaks the connection at once; nothing answers it.
        starting: set[asyncio.Future[Any]] = {self._ready, self._broken}
        await asyncio.wait(starting, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
        if not self._ready.done():
            broken = self._broken.result() if self._broken.done() else None
            await self.aclose()  # stopped first: its stderr tail is read once it ended
            raise self._fault(f"did not start: {broken}" if broken else
                              f"did not start within {timeout:g} s (startup_timeout_s)",
                              stopped=True)
        if self._ready.exception() is not None:
            await self.aclose()
            raise self._ready.exception()  # type: ignore[misc]
        try:  # the listing's pages are part of starting: the same deadline ends them
            return await self._request("tools/list", self._listed(),
                                       max(deadline - loop.time(), 0),
                                       limit="startup_timeout_s", limit_s=timeout)
        except McpFault:
            await self.aclose()
            raise

    @property
    def alive(self) -> bool:
        """Whether the connection still works (a server that died, or broke the protocol,
        does not come back)."""
        return self._session is not None and not self._broken.done()

    async def call(self, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
        """``tools/call``: the server's result as sent (content, structuredContent, isError)."""
        if self._session is None or self._broken.done():  # a shared server that stopped
            said = self._broken.result() if self._broken.done() else "is not running"
            raise self._fault(f"{said} (before tools/call {name})", stopped=True)
        return await self._request(f"tools/call {name}", self._called(name, arguments),
                                   self.server.call_timeout_s)

    async def aclose(self) -> None:
        """Stop the server (stdio: close its stdin, then kill its process tree)."""
        self._closing.set()
        holder, self._holder = self._holder, None
        if holder is not None and not holder.done():
            if self._session is None:
                holder.cancel()  # still starting: nothing to wind down politely
            try:
                await asyncio.wait_for(asyncio.shield(holder), _CLOSE_WAIT_S)
            except asyncio.TimeoutError:
                holder.cancel()
            except asyncio.CancelledError:
                holder.cancel()
                raise
            finally:
                if not holder.done():
                    with contextlib.suppress(BaseException):
                        await asyncio.wait_for(holder, _CLOSE_WAIT_S)
        if self._ready is not None and self._ready.done() and not self._ready.cancelled():
            self._ready.exception()  # read: asyncio warns of a failure nobody read
        if self._stderr is not None:
            self._stderr.started()  # a server that never started: the pipe's end too

    # -- the holder task ----------------------------------------------------------------

    async def _hold(self) -> None:
        assert self._ready is not None
        try:
            async with self._connected() as session:
                self._session = session
                self._ready.set_result(None)
                await self._closing.wait()
        except BaseException as exc:  # every way the server fails is a fault
            what = _describe(exc)
            if not self._ready.done():
                said = ("closed the connection" if what.endswith("Connection closed")
                        else what)
                self._ready.set_exception(self._fault(f"did not start: {said}", stopped=True))
            self._break(f"the connection failed: {what}")
            if isinstance(exc, (KeyboardInterrupt, SystemExit)):
                raise
        finally:
            self._session = None
            self._break("closed the connection")

    @contextlib.asynccontextmanager
    async def _connected(self) -> AsyncIterator[ClientSession]:
        from mcp import ClientSession  # the [mcp] extra: imported when a case uses MCP

        async with contextlib.AsyncExitStack() as stack:
            streams = await stack.enter_async_context(self._transport())
            if self._stderr is not None:
                self._stderr.started()
            session = ClientSession(streams[0], streams[1], message_handler=self._on_message)
            await stack.enter_async_context(session)
            await session.initialize()
            yield session

    def _transport(self) -> contextlib.AbstractAsyncContextManager[Any]:
        server = self.server
        if server.command is not None:
            from mcp import StdioServerParameters, stdio_client

            self._stderr = StderrTail()
            parameters = StdioServerParameters(
                command=server.command[0], args=list(server.command[1:]),
                env=dict(server.env) or None, cwd=server.cwd)
            return SERVER_PROCESSES.watch(
                stdio_client(parameters, errlog=self._stderr.writer),  # type: ignore[arg-type]
                server.command)
        import httpx2
        from mcp.client.streamable_http import streamable_http_client

        client = httpx2.AsyncClient(headers=dict(server.headers),
                                    timeout=httpx2.Timeout(30, read=300),
                                    event_hooks={"response": [self._on_response]})
        return _closing_client(client, streamable_http_client(server.url or "",
                                                              http_client=client))

    async def _on_response(self, response: Any) -> None:
        """The SDK reports a refused request without its status (401, 403...): keep it."""
        if response.status_code >= 400:
            self._http_error = f"HTTP {response.status_code} {response.reason_phrase}".strip()

    async def _on_message(self, message: Any) -> None:
        """Anything the server sent that the session could not take: broken JSON-RPC."""
        if isinstance(message, Exception):
            errors = getattr(message, "errors", None)  # pydantic's: say the first one
            what = errors()[0]["msg"] if callable(errors) else _describe(message)
            self._break(f"sent a message that is not JSON-RPC ({what})")

    def _break(self, what: str) -> None:
        if not self._broken.done():
            self._broken.set_result(what)

    # -- requests -----------------------------------------------------------------------

    async def _listed(self) -> dict[str, Any]:
        assert self._session is not None
        tools: list[dict[str, Any]] = []
        cursor = None
        while True:  # every page
            from mcp.types import PaginatedRequestParams

            params = PaginatedRequestParams(cursor=cursor) if cursor else None
            page = await self._session.list_tools(params=params)
            tools += [_dump(tool) for tool in page.tools]
            cursor = page.next_cursor
            if not cursor:
                return {"tools": tools}

    async def _called(self, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
        assert self._session is not None
        return _dump(await self._session.call_tool(name, arguments))

    async def _request(self, what: str, request: Awaitable[_T], timeout: float,
                       limit: str = "call_timeout_s", limit_s: float | None = None) -> _T:
        """``request``, unless the connection breaks first or it takes past ``timeout``
        (what messages call the setting ``limit`` of ``limit_s`` seconds)."""
        task = asyncio.ensure_future(request)
        waited: set[asyncio.Future[Any]] = {task, self._broken}
        done, _ = await asyncio.wait(waited, timeout=timeout,
                                     return_when=asyncio.FIRST_COMPLETED)
        if task in done and task.exception() is None:
            return task.result()
        task.cancel()
        with contextlib.suppress(BaseException):
            await task
        if self._broken.done():
            said = self._broken.result()
            raise self._fault(f"{said} (during {what})", stopped="closed" in said)
        if task in done:
            failure = _describe(task.exception())
            if failure.endswith("Connection closed"):  # the holder may not know it yet
                self._break("closed the connection")
                raise self._fault(f"closed the connection (during {what})", stopped=True)
            raise self._fault(f"{what} failed: {failure}")
        limit_s = timeout if limit_s is None else limit_s
        raise self._fault(f"{what} got no answer within {limit_s:g} s ({limit})")

    def _fault(self, what: str, stopped: bool = False) -> McpFault:
        """``stopped``: the server is gone (or going), so its stderr's end is worth a wait."""
        tail = self._stderr.tail(wait=stopped) if self._stderr is not None else ""
        if self._http_error is not None:
            what = f"{what} (the server answered {self._http_error})"
        said = f"\n  its stderr ends:\n{tail}" if tail else ""
        return McpFault(f"MCP server {self.server.name!r} {what}{said}")


def _import_sdk(server: ResolvedServer) -> None:
    """Import what the connection uses of the SDK (the [mcp] extra, imported when a case
    uses MCP). The first import takes a good part of a second, several on a loaded
    machine: done before ``startup_timeout_s`` starts, it is not counted as the server's
    start, which would leave a server that starts at once too little of the time."""
    transport = ("mcp.client.stdio",) if server.command is not None else (
        "httpx2", "mcp.client.streamable_http")
    for module in ("mcp", "mcp.types", *transport):
        importlib.import_module(module)


@contextlib.asynccontextmanager
async def _closing_client(client: Any, transport: Any) -> AsyncIterator[Any]:
    async with client, transport as streams:
        yield streams


def _dump(result: Any) -> dict[str, Any]:
    """An SDK result in MCP's own words, as JSON data."""
    dumped: dict[str, Any] = result.model_dump(mode="json", by_alias=True, exclude_none=True)
    return dumped


def _describe(exc: BaseException | None) -> str:
    while getattr(exc, "exceptions", None):  # an exception group, from anyio's task groups
        exc = exc.exceptions[0]  # type: ignore[union-attr]
    if exc is None:
        return "unknown error"
    text = str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__
