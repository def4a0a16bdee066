"""What the session plugs into a case run for its MCP servers (``RunContext.mcp``).

``LiveMcp`` starts servers (fresh for the case, or the session's shared one for
``scope: session``) and, while recording, hands every exchange to the cassette.
``ReplayedMcp`` answers from the cassette and starts nothing.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ..casefile.load import LoadedCase
from ..casefile.schema import McpTools
from ..keypaths import KeyPath
from ..records import McpExchange
from ..run.toolset import Restore, ToolSourceFault
from ..scrubbing import Scrubber
from .connection import McpConnection, McpFault
from .servers import ResolvedServer, resolve
from .source import McpSource, RecordedCalls, kept_listing, kept_result

if TYPE_CHECKING:
    from ..run.runner import CaseRun

McpSink = Callable[[McpExchange], None]


def resolved(loaded: LoadedCase, index: int, entry: McpTools) -> ResolvedServer:
    """The server ``tools[index]`` names, as it starts for this case."""
    path: KeyPath = ("tools", index)
    return resolve(entry.mcp, loaded.mcp_servers[entry.mcp], loaded.file.parent, path)


def case_secrets(loaded: LoadedCase) -> tuple[str, ...]:
    """The credentials in the env and headers of the servers the case uses, to scrub."""
    found: list[str] = []
    for index, entry in enumerate(loaded.case.tools):
        if isinstance(entry, McpTools) and entry.mcp in loaded.mcp_servers:
            try:
                found += resolved(loaded, index, entry).secrets
            except ToolSourceFault:
                continue  # a variable that is not set: the run says so
    return tuple(found)


class SessionServers:
    """The ``scope: session`` servers: each started when a case first needs it, shared by
    every case whose definition resolves alike, stopped when the session ends. A server
    that stopped (died, broke the protocol) is started again for the next case that needs
    it, which is told so."""

    def __init__(self) -> None:
        self._servers: dict[ResolvedServer, tuple[McpConnection, dict[str, Any]]] = {}
        self._locks: dict[ResolvedServer, asyncio.Lock] = {}
        self._broken_in: dict[ResolvedServer, str] = {}
        """The case each stopped server broke in, as far as a case saw it break."""

    async def get(self, server: ResolvedServer
                  ) -> tuple[McpConnection, dict[str, Any], str | None]:
        """The running server, its ``tools/list`` result, and a note when it was started
        again because it stopped in an earlier case (a failed start is tried again by the
        next case that needs it)."""
        lock = self._locks.setdefault(server, asyncio.Lock())
        async with lock:
            note = None
            running = self._servers.get(server)
            if running is not None and not running[0].alive:
                del self._servers[server]
                await running[0].aclose()
                where = self._broken_in.pop(server, None)
                note = (f"MCP server {server.name!r} (scope: session) stopped in an earlier"
                        f" case{f' ({where})' if where else ''} and was started again")
            if server not in self._servers:
                connection = McpConnection(server)
                self._servers[server] = (connection, await connection.start())
            return (*self._servers[server], note)

    def broke(self, server: ResolvedServer, case: str) -> None:
        """``case`` saw ``server`` break (the first case to see it is named)."""
        self._broken_in.setdefault(server, case)

    async def aclose(self) -> None:
        servers, self._servers = list(self._servers.values()), {}
        for connection, _listing in servers:
            await connection.aclose()


class LiveMcp:
    """Live MCP servers for one case run, recorded when ``sink`` is given."""

    def __init__(self, shared: SessionServers, scrubber: Scrubber,
                 sink: McpSink | None = None) -> None:
        self._shared, self._scrubber, self._sink = shared, scrubber, sink
        self.notes: list[str] = []
        """What the case should know of its servers (one started again)."""

    async def source(self, case_run: CaseRun, index: int, entry: McpTools) -> McpSource:
        server = resolved(case_run.loaded, index, entry)
        path: KeyPath = ("tools", index)
        own: CaseServer | None = None
        connection: McpConnection | CaseServer
        try:
            if server.scope == "session":
                connection, listing, note = await self._shared.get(server)
                self.notes += [note] if note else []
            else:
                own = CaseServer(server, path, self._scrubber)
                connection, listing = own, await own.start()
        except McpFault as fault:
            raise ToolSourceFault(self._scrubber.text(str(fault)), path) from None
        self._keep(McpExchange(server.name, "tools/list", kept_listing(listing)))
        try:
            return McpSource(server.name, listing, entry, path,
                             self._caller(server, connection, path, case_run.label),
                             None if own is None else own.aclose,
                             # Only a server the plugin starts is its to start again.
                             None if own is None or server.command is None
                             else own.checkpoint, server.call_timeout_s)
        except BaseException:
            if own is not None:
                await own.aclose()
            raise

    def _caller(self, server: ResolvedServer, connection: McpConnection | CaseServer,
                path: KeyPath, case: str) -> Any:
        async def call(tool: str, arguments: dict[str, Any]) -> dict[str, Any]:
            started = time.perf_counter()
            try:
                result = await connection.call(tool, arguments)
            except McpFault as fault:
                if isinstance(connection, McpConnection) and not connection.alive:
                    self._shared.broke(server, case)
                raise ToolSourceFault(self._scrubber.text(str(fault)), path) from None
            self._keep(McpExchange(server.name, "tools/call", kept_result(result),
                                   {"name": tool, "arguments": arguments},
                                   (time.perf_counter() - started) * 1000))
            return result
        return call

    def _keep(self, exchange: McpExchange) -> None:
        if self._sink is not None:
            self._sink(self._scrubber.data(exchange))


class CaseServer:
    """A ``scope: case`` server: started for the case, and put back for a retried stage
    the way a toolbox is. Its state cannot be read or copied, so it is rebuilt: the server
    is started afresh and sent again, in order, every ``tools/call`` the case made of it
    before the stage (what a fresh run sends up to there). Those calls are not recorded:
    replay starts no server, and answers the retried stage's calls from the cassette."""

    def __init__(self, server: ResolvedServer, path: KeyPath, scrubber: Scrubber) -> None:
        self._server, self._path, self._scrubber = server, path, scrubber
        self._connection = McpConnection(server)
        self._calls: list[tuple[str, dict[str, Any]]] = []
        """Every call made of this server since it started: what rebuilds its state."""

    async def start(self) -> dict[str, Any]:
        return await self._connection.start()

    async def call(self, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
        self._calls.append((name, arguments))
        return await self._connection.call(name, arguments)

    async def checkpoint(self) -> Restore:
        """A function that puts the server back as it is now: started afresh and sent the
        calls made so far (``ToolSourceFault`` when it cannot start or answer again)."""
        made = list(self._calls)

        async def restore() -> None:
            await self._connection.aclose()
            self._connection, self._calls = McpConnection(self._server), []
            try:
                await self._connection.start()
                for name, arguments in made:
                    await self.call(name, arguments)
            except McpFault as fault:
                raise ToolSourceFault(
                    f"{self._scrubber.text(str(fault))} (restarting it for a retried stage)",
                    self._path) from None
        return restore

    async def aclose(self) -> None:
        await self._connection.aclose()


class ReplayedMcp:
    """MCP servers answered from the case's cassette: no process, no connection."""

    def __init__(self, recorded: RecordedCalls) -> None:
        self.recorded = recorded
        self.notes: list[str] = []

    async def source(self, case_run: CaseRun, index: int, entry: McpTools) -> McpSource:
        path: KeyPath = ("tools", index)
        return McpSource(entry.mcp, self.recorded.listing(entry.mcp, path), entry, path,
                         self.recorded.caller(entry.mcp, path))
