"""Two cassette folders as pairs of cases, for ``toolbench diff``.

Each cassette is read as replay reads it (``Cassette.load``) and every exchange reduced to
its reply by its API's own reader, whole or streamed event by event at the recorded
offsets, so a reply in a cassette means what it meant to the case that recorded it. A
cassette becomes one case record of the JSON report with one stage per exchange
(``exchange 1``, ``exchange 2``...): the diff then compares calls, arguments, answers,
errors, turns and figures as it does for reports. Cassettes hold no verdict.

Which files: every ``*.yaml`` below the folder inside a ``__cassettes__`` folder, or, when
there is none, every ``*.yaml`` below it (a ``--toolbench-cassette-dir`` folder).

Pairing: by path relative to each folder (the same suite recorded twice). When no path is
in both (the suite recorded against two models: ``name[m1].yaml`` and ``name[m2].yaml``),
by folder, case name and API, the ``[...]`` of the file name left out; a name that more
than one cassette of one folder has is left unpaired, since which two to compare cannot be
told.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..apis import AGENT
from ..defaults import CASSETTE_FOLDER
from ..records import Interaction, Reply, total_tokens
from ..report.json_report import (
    AttemptRecord,
    CaseRecord,
    ReplyRecord,
    RunRecord,
    StageRecord,
    TurnRecord,
)
from ..transport.cassette import Cassette
from ..transport.errors import ReplayError
from ..wire import WireApi, wire_api

_BRACKETS = re.compile(r"\[[^\[\]]*\]$")


@dataclass(frozen=True)
class CassetteCase:
    """One cassette of a folder, read into the JSON report's case shape (or not)."""

    path: str
    """Relative to its folder, ``/``-separated."""
    record: CaseRecord | None
    error: str | None = None
    """Why it could not be read."""
    api: str | None = None

    @property
    def name_key(self) -> tuple[str, str, str | None]:
        """Folder, case name without its ``[model-api]`` part, API."""
        parent, _, stem = self.path.removesuffix(".yaml").rpartition("/")
        return parent, _BRACKETS.sub("", stem), self.api


@dataclass(frozen=True)
class Pairs:
    pairs: list[tuple[CassetteCase, CassetteCase]]
    only_old: list[CassetteCase]
    only_new: list[CassetteCase]
    by_name: bool
    """Paired by case name, models aside (no path was in both folders)."""


def read_folder(folder: Path) -> list[CassetteCase]:
    """Every cassette of ``folder``, in path order."""
    return [read_cassette_case(path, path.relative_to(folder).as_posix())
            for path in cassette_files(folder)]


def cassette_files(folder: Path) -> list[Path]:
    files = sorted(path for path in folder.rglob("*.yaml") if path.is_file())
    inside = [path for path in files
              if CASSETTE_FOLDER in path.relative_to(folder).parts[:-1]]
    return inside or files


def pair(old: list[CassetteCase], new: list[CassetteCase]) -> Pairs:
    """Pairs by path; by name when no path is in both folders (see the module's doc)."""
    new_paths = {case.path: case for case in new}
    by_path = [(case, new_paths[case.path]) for case in old if case.path in new_paths]
    if by_path or not old or not new:
        paired = {case.path for case, _ in by_path}
        return Pairs(by_path, [c for c in old if c.path not in paired],
                     [c for c in new if c.path not in paired], by_name=False)
    old_names, new_names = _unique_names(old), _unique_names(new)
    by_name = [(case, new_names[key]) for key, case in old_names.items() if key in new_names]
    paired_old = {id(a) for a, _ in by_name}
    paired_new = {id(b) for _, b in by_name}
    return Pairs(by_name, [c for c in old if id(c) not in paired_old],
                 [c for c in new if id(c) not in paired_new], by_name=True)


def _unique_names(cases: list[CassetteCase]) -> dict[tuple[str, str, str | None],
                                                     CassetteCase]:
    """Readable cassettes by name key, the keys more than one of them share left out."""
    seen: dict[tuple[str, str, str | None], list[CassetteCase]] = {}
    for case in cases:
        if case.record is not None:
            seen.setdefault(case.name_key, []).append(case)
    return {key: found[0] for key, found in seen.items() if len(found) == 1}


# ---------------------------------------------------------------------------- one cassette


def read_cassette_case(path: Path, relative: str) -> CassetteCase:
    try:
        cassette = Cassette.load(path, shown=relative, api=None)
    except ReplayError as error:  # no re-record hint given: none in its message
        return CassetteCase(relative, None, error.message)
    # The judge's and the simulated user's exchanges are not the case's turns; an agent
    # case's cassette mixes APIs, each exchange naming its own, and its exchanges with
    # paths that are no model API (none named) are no replies.
    own = [interaction for interaction in cassette.interactions if interaction.role == "model"
           and (cassette.api != AGENT or interaction.api is not None)]
    replies = [_reply(wire_api(interaction.api or cassette.api), interaction)
               for interaction in own]
    requests = [interaction.request for interaction in own]
    return CassetteCase(relative, _record(relative, cassette.api, replies, requests),
                        api=cassette.api)


def _reply(wire: WireApi, interaction: Interaction) -> Reply:
    """The exchange's reply as its API's reader reads it, with its recorded latency."""
    reply = wire.read_interaction(interaction)
    reply.latency_ms = interaction.elapsed_ms
    return reply


def _record(path: str, api: str, replies: list[Reply],
            requests: list[dict[str, Any]]) -> CaseRecord:
    """The cassette as a case record: one stage per exchange, each with the request it
    recorded, no verdict (its outcome is ``recorded`` on both sides of a comparison)."""
    stages = [StageRecord(f"exchange {number}", True, [AttemptRecord(
        1, True, [], [], [], [TurnRecord(reply.stream is not None, None, None, [],
                                         reply.latency_ms, ReplyRecord.of(reply), [],
                                         request)])])
        for number, (reply, request) in enumerate(zip(replies, requests), 1)]
    return CaseRecord(
        nodeid=path, api=api, outcome="recorded", turns=len(replies),
        latency_ms=round(sum(r.latency_ms for r in replies), 1) if replies else None,
        ttft_ms=next((r.ttft_ms for r in replies if r.ttft_ms is not None), None),
        total_tokens=total_tokens(replies), runs=[RunRecord(1, True, None, stages)])


def shown(old: CassetteCase, new: CassetteCase) -> str:
    """How a pair is named in the diff: its path, or both when they differ."""
    return old.path if old.path == new.path else f"{old.path} -> {new.path}"

