"""Cassettes: one YAML file per case, model and API, recorded live and replayed offline.

This module is the file format: what a cassette holds, reading it as untrusted input
(``cassette_reader.py``), writing it atomically, and where each case's cassette lives
(``CassettePaths``). Answering requests from one is ``transport/replay.py``.

Never stored: headers of any kind (so no Authorization, cookies or other credentials).
What a cassette holds was scrubbed of the endpoint's credentials when it was recorded
(``scrubbing.py``): saving writes it as it is.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from ..atomic import write_atomic
from ..casefile.cache import KeptParses
from ..defaults import CASSETTE_FOLDER
from ..records import Interaction, McpExchange, StreamEvent
from .cassette_reader import parse_cassette, read_cassette_data
from .errors import CassetteMissing, ReplayError

try:
    from yaml import CSafeDumper as _Dumper
except ImportError:  # pragma: no cover - depends on how PyYAML was built
    from yaml import SafeDumper as _Dumper  # type: ignore[assignment]

FORMAT_VERSION = 2
"""2: JSON bodies as pretty-printed JSON text in YAML block scalars (1: as YAML mappings)."""


class _JsonText(str):
    """JSON text written as a YAML block scalar: one line per JSON line, diffable, and one
    scalar to parse instead of one per value (YAML's scalar resolution is the slow part)."""


class _CassetteDumper(_Dumper):
    pass


def _represent_json_text(dumper: _CassetteDumper, text: _JsonText) -> yaml.Node:
    return dumper.represent_scalar("tag:yaml.org,2002:str", str(text), style="|")


_CassetteDumper.add_representer(_JsonText, _represent_json_text)


@dataclass
class Cassette:
    """The recorded interactions of one case against one model, in request order."""

    path: Path
    interactions: list[Interaction] = field(default_factory=list)
    rerecord_hint: str = ""
    """The command that records this cassette, for messages."""
    shown: str = ""
    """The path as messages show it (relative to where pytest was started)."""
    api: str = "chat"
    """The wire API it holds the exchanges of (``chat``, ``responses``, ``messages``)."""
    mcp: list[McpExchange] = field(default_factory=list)
    """The case's MCP exchanges (``tools/list``, ``tools/call``), in the order they ended."""

    def __post_init__(self) -> None:
        self.shown = self.shown or str(self.path)

    @classmethod
    def load(cls, path: Path, rerecord_hint: str = "", shown: str = "",
             api: str | None = "chat", kept: KeptParses | None = None) -> Cassette:
        """Read the cassette at ``path``, which must hold the exchanges of ``api`` (None:
        of whichever API it says it holds); raise ReplayError saying why it cannot be
        replayed (there is none, it is unreadable, it holds another API). ``kept``:
        cassettes parsed by earlier runs (``casefile/cache.py``), used for the same bytes."""
        def hint(words: str) -> str:
            return f"; {words}: {rerecord_hint}" if rerecord_hint else ""

        try:
            with open(path, "rb", buffering=0) as file:  # a third of read_text's cost
                content = file.read()
            data = _parsed(path, content, kept)
            recorded_api, interactions, mcp = read_cassette_data(data, FORMAT_VERSION)
        except (FileNotFoundError, NotADirectoryError):
            raise CassetteMissing(f"no cassette at {shown or path}{hint('record it with')}") \
                from None
        except OSError as exc:
            raise ReplayError(f"cassette unreadable: {shown or path}: {exc.strerror or exc}"
                              f"{hint('re-record it with')}") from None
        except ValueError as exc:  # CassetteUnreadable, or bytes that are not UTF-8
            raise ReplayError(f"cassette unreadable: {shown or path}: {exc}"
                              f"{hint('re-record it with')}") from None
        if api is not None and recorded_api != api:
            raise ReplayError(
                f"{shown or path} holds the {recorded_api} API's exchanges, and this case"
                f" speaks the {api} API: a cassette replays only the API it was recorded"
                f" with{hint('record this one with')}")
        return cls(path, interactions, rerecord_hint=rerecord_hint, shown=shown,
                   api=recorded_api, mcp=mcp)

    def replace_role(self, role: str, interactions: list[Interaction]) -> None:
        """``role``'s exchanges replaced by ``interactions``: in the places of the old ones,
        the ones beyond their number at the end; every other exchange kept as it is."""
        fresh = iter(interactions)
        kept = [next(fresh, None) if each.role == role else each for each in self.interactions]
        self.interactions = [each for each in kept if each is not None] + list(fresh)

    def save(self) -> None:
        """Write the cassette atomically (its interactions were scrubbed as recorded)."""
        document = {
            "version": FORMAT_VERSION,
            "api": self.api,
            "interactions": [_plain(interaction) for interaction in self.interactions],
        }
        if self.mcp:  # only then: a cassette of a case without MCP is as it always was
            document["mcp"] = [_plain_mcp(exchange) for exchange in self.mcp]
        text = yaml.dump(document, Dumper=_CassetteDumper,
                         sort_keys=False, allow_unicode=True, width=1 << 20)
        header = f"# Recorded by pytest-toolbench. Re-record: {self.rerecord_hint}\n"
        write_atomic(self.path, header + text)


def _parsed(path: Path, content: bytes, kept: KeptParses | None) -> Any:
    """The plain data of the cassette ``content`` (the bytes at ``path``): kept by an earlier
    run for these very bytes, else parsed (and kept when ``kept`` is given)."""
    entry = kept.data(path, content, _one_value) if kept is not None else None
    if entry is not None:
        return entry[0]
    data = parse_cassette(content.decode())
    if kept is not None:
        kept.keep(path, content, [data])
    return data


def _one_value(entry: list[Any]) -> bool:
    return len(entry) == 1


def _plain(interaction: Interaction) -> dict[str, Any]:
    response: dict[str, Any] = {"status": interaction.status,
                                "content_type": interaction.content_type,
                                "elapsed_ms": interaction.elapsed_ms}
    if interaction.events is not None:
        response["events"] = [_plain_event(event) for event in interaction.events]
    elif isinstance(interaction.body, str):
        response["text"] = interaction.body
    else:  # as a cassette it was read from spelled it, when it was: kept byte for byte
        response["json"] = (_JsonText(interaction.body_json) if interaction.body_json
                            is not None else _json_text(interaction.body))
    plain: dict[str, Any] = {}
    # Only when set: a cassette of the model alone is as it always was.
    if interaction.role != "model":
        plain["role"] = interaction.role
    if interaction.api is not None:
        plain["api"] = interaction.api
    plain["request"] = {"method": interaction.method, "path": interaction.path,
                        "json": _json_text(interaction.request)}
    plain["response"] = response
    return plain


def _plain_mcp(exchange: McpExchange) -> dict[str, Any]:
    plain: dict[str, Any] = {"server": exchange.server, "method": exchange.method}
    if exchange.params:
        plain["params"] = _json_text(exchange.params)
    plain["result"] = _json_text(exchange.result)
    plain["elapsed_ms"] = round(exchange.elapsed_ms, 1)
    return plain


def _json_text(value: Any) -> _JsonText:
    return _JsonText(json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False))


def _plain_event(event: StreamEvent) -> dict[str, Any]:
    plain: dict[str, Any] = {"at_ms": event.offset_ms, "data": event.data}
    if event.event != "message":
        plain["event"] = event.event
    if event.cut:
        plain["cut"] = True
    return plain


class CassettePaths:
    """Where each case's cassette lives: ``<cassette dir>/<file stem>/<case>[<model>].yaml``,
    always inside that folder. The cassette dir is ``--toolbench-cassette-dir``, else a
    ``__cassettes__`` folder beside the case file."""

    def __init__(self, cassette_dir: Path | None, start_dir: Path) -> None:
        self.cassette_dir = cassette_dir
        self.start_dir = start_dir
        """Where pytest was started: messages show paths relative to it, as the user typed."""
        self._folders: dict[Path, tuple[Path, str]] = {}
        """Case file -> the folder of its cassettes, and that folder as messages show it."""

    def locate(self, case_file: Path, label: str) -> tuple[Path, str]:
        """The cassette's path for the case ``label`` (``case[model]``) of ``case_file``, and
        the path as messages show it. The folder is worked out once per case file."""
        if case_file not in self._folders:
            directory = self.cassette_dir or (case_file.parent / CASSETTE_FOLDER)
            folder = directory / case_file.name.split(".case.")[0]
            self._folders[case_file] = (folder, self._show(folder))
        folder, shown = self._folders[case_file]
        name = f"{cassette_file_stem(label)}.yaml"
        return folder / name, os.path.join(shown, name)

    def _show(self, path: Path) -> str:
        try:
            return str(path.relative_to(self.start_dir))
        except ValueError:
            return str(path)


_UNSAFE_IN_FILE_NAMES = frozenset("/\\%") | frozenset(map(chr, [*range(32), 127]))
_MAX_STEM_BYTES = 200
"""File systems refuse names past 255 bytes; this leaves room for ``.yaml`` and temp files."""


def cassette_file_stem(label: str) -> str:
    """``label`` (``case[model]``) as one file name: path separators, control characters
    (NUL...), surrogates and ``%`` are %-encoded, so no model name can reach outside the
    cassette folder; a name too long for the file system is cut and told apart by a hash."""
    safe = label.isprintable() and not any(char in label for char in "/\\%")  # most are
    stem = label if safe else "".join(
        f"%{ord(char):02X}" if char in _UNSAFE_IN_FILE_NAMES
        or "\ud800" <= char <= "\udfff" else char  # surrogates: not UTF-8
        for char in label)
    if len(stem.encode()) <= _MAX_STEM_BYTES:
        return stem
    digest = hashlib.sha256(label.encode(errors="surrogatepass")).hexdigest()[:16]
    cut = stem.encode()[:_MAX_STEM_BYTES - 17].decode(errors="ignore")
    partial = cut.rfind("%", len(cut) - 2)  # an escape cut in two
    return f"{cut if partial == -1 else cut[:partial]}~{digest}"
