"""A declared MCP server, resolved for one run: placeholders filled in from the
environment, paths made absolute, and the credentials it carries named for scrubbing."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from ..casefile.placeholders import fill_placeholders
from ..casefile.schema import McpServer
from ..keypaths import KeyPath
from ..run.toolset import ToolSourceFault
from ..scrubbing import MIN_SECRET_LENGTH, is_credential, url_secrets


@dataclass(frozen=True)
class ResolvedServer:
    """One MCP server as it is started: every value final. Hashable: session-scoped
    servers are shared by the cases whose definitions resolve alike."""

    name: str
    command: tuple[str, ...] | None
    env: tuple[tuple[str, str], ...]
    cwd: str | None
    url: str | None
    headers: tuple[tuple[str, str], ...]
    scope: str
    startup_timeout_s: float
    call_timeout_s: float

    @property
    def secrets(self) -> tuple[str, ...]:
        """Values to mask wherever they appear: those of credential-looking environment
        variables and headers (``*_TOKEN``, ``Authorization``...), long enough to matter."""
        values: list[str] = []
        for name, value in (*self.env, *self.headers):
            if is_credential(name):
                values += [value, value.partition(" ")[2]]  # "Bearer xyz": xyz alone too
        values += url_secrets(self.url or "")  # ?api_key=... of a streamable HTTP server
        return tuple(value for value in values if len(value) >= MIN_SECRET_LENGTH)


def resolve(name: str, server: McpServer, base: Path, path: KeyPath,
            environ: Mapping[str, str] | None = None) -> ResolvedServer:
    """``server`` as started for a case file in folder ``base``; ``${NAME}`` and
    ``${env.NAME}`` read ``environ`` (the process's). ``path``: where it is declared."""
    environ = os.environ if environ is None else environ

    def fill(text: str, key: str) -> str:
        def lookup(placeholder: str) -> str:
            variable = placeholder.removeprefix("env.")
            if variable not in environ:
                raise ToolSourceFault(f"MCP server {name!r}: {key}: environment variable"
                                      f" {variable!r} is not set", path)
            return environ[variable]
        return fill_placeholders(text, lookup)

    cwd = None if server.cwd is None else str(base / fill(server.cwd, "cwd"))
    return ResolvedServer(
        name=name,
        command=None if server.command is None else tuple(
            fill(part, "command") for part in server.command),
        env=tuple((key, fill(value, f"env.{key}")) for key, value in server.env.items()),
        cwd=cwd if server.command is not None else None,
        url=None if server.url is None else fill(server.url, "url"),
        headers=tuple((key, fill(value, f"headers.{key}"))
                      for key, value in server.headers.items()),
        scope=server.scope,
        startup_timeout_s=server.startup_timeout_s,
        call_timeout_s=server.call_timeout_s)
