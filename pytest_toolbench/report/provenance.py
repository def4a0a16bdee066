"""How a report was made: the session's mode, where its answers came from, when it ran,
for how long, and at which revision of the repository; and the models the servers said
answered, set against the models asked.

The JSON report keeps this as its ``run`` object (``json_report.RunInfo``), the HTML page
shows it in its header, and ``toolbench diff`` reads it to tell a replayed run from a live
one.
"""

from __future__ import annotations

import importlib.metadata
import subprocess
from collections.abc import Iterator, Sequence
from datetime import datetime, timezone
from pathlib import Path

from .json_report import CaseRecord, RunInfo

GIT_TIMEOUT_S = 5.0
"""How long reading the revision may take: a report is never held up by git."""


def session_run(mode: str, base_url: str | None, started: datetime, duration_s: float,
                folder: Path) -> RunInfo:
    """The ``RunInfo`` of this session, which ran in ``folder``."""
    return RunInfo(mode=mode, base_url=None if mode == "replay" else base_url,
                   started=started.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
                   duration_s=round(duration_s, 2), revision=git_revision(folder),
                   toolbench=_version())


def merged_run(runs: Sequence[RunInfo]) -> RunInfo | None:
    """The runs of a suite's shards as one: each fact they all share (null where they
    differ), from the first start to the last end; None when no shard said how it ran."""
    if all(run.mode is None for run in runs):
        return None
    spans = [(start, start + run.duration_s) for run in runs
             if (start := _seconds(run.started)) is not None and run.duration_s is not None]
    first = min((start for start, _ in spans), default=None)
    return RunInfo(
        mode=_shared(run.mode for run in runs), base_url=_shared(run.base_url for run in runs),
        started=None if first is None else min(run.started for run in runs
                                                if run.started is not None),
        duration_s=None if first is None else round(max(end for _, end in spans) - first, 2),
        revision=_shared(run.revision for run in runs),
        toolbench=_shared(run.toolbench for run in runs))


def _shared(values: Iterator[str | None] | Sequence[str | None]) -> str | None:
    found = set(values)
    return found.pop() if len(found) == 1 else None


def _seconds(started: str | None) -> float | None:
    if started is None:
        return None
    try:
        return datetime.strptime(started, "%Y-%m-%dT%H:%M:%SZ").replace(
            tzinfo=timezone.utc).timestamp()
    except ValueError:
        return None


def git_revision(folder: Path) -> str | None:
    """The commit checked out in ``folder``'s repository, ``+dirty`` when tracked files
    differ from it; None when there is no repository, no git, or git fails or stalls."""
    commit = _git(folder, "rev-parse", "--verify", "--quiet", "HEAD")
    if commit is None:
        return None
    changed = _git(folder, "status", "--porcelain", "--untracked-files=no")
    return f"{commit}+dirty" if changed else commit


def _git(folder: Path, *args: str) -> str | None:
    try:
        done = subprocess.run(["git", "-C", str(folder), *args], capture_output=True,
                              text=True, timeout=GIT_TIMEOUT_S, check=False,
                              stdin=subprocess.DEVNULL)
    except (OSError, subprocess.SubprocessError, ValueError):
        return None
    return done.stdout.strip() or None if done.returncode == 0 else None


def _version() -> str | None:
    try:
        return importlib.metadata.version("pytest-toolbench")
    except importlib.metadata.PackageNotFoundError:
        return None


# ---------------------------------------------------------------------------- models


def answered_as(asked: str, reported: str) -> bool:
    """Whether a server naming ``reported`` answered as the model ``asked``: the same
    name, with a path or ``models/`` before it or not, or that name with a version after
    it (``gpt-4o-mini-2024-07-18``, ``claude-sonnet-4-5-20250929``, ``gemini-2.0-flash-001``,
    ``-latest``, ``-preview-05-20``), or a ``.gguf`` file of it (``gemma-3-270m-it-Q8_0.gguf``).
    Another model of the family is not it: ``gpt-4o-mini`` did not answer for ``gpt-4o``."""
    file = reported.endswith(".gguf")
    name = reported.rsplit("/", 1)[-1].removesuffix(".gguf")
    wanted = asked.rsplit("/", 1)[-1].removesuffix(".gguf")
    if name == wanted:
        return True
    rest = name[len(wanted):] if name.startswith(wanted) else ""
    if not rest or rest[0] not in "-@:.":
        return False
    return file or rest[1:2].isdigit() or rest[1:].split("-")[0] in _VERSION_WORDS


_VERSION_WORDS = frozenset({"latest", "preview", "exp", "experimental"})
"""Words a service's versioned model names carry after the model's own name."""


def model_mismatches(records: Sequence[CaseRecord]) -> list[str]:
    """One line per model asked whose replies a server said came from another model:
    ``asked gpt-4o, the server answered as gpt-4o-mini (2 cases: a, b)``."""
    found: dict[tuple[str, str], list[str]] = {}
    for record in records:
        if record.model is None:
            continue
        for reported in dict.fromkeys(_reported(record)):
            if not answered_as(record.model, reported):
                found.setdefault((record.model, reported), []).append(record.case)
    return [f"asked {asked}, the server answered as {reported}"
            f" ({_cases(cases)})" for (asked, reported), cases in found.items()]


def _reported(record: CaseRecord) -> Iterator[str]:
    for run in record.runs:
        for stage in run.stages:
            for attempt in stage.attempts:
                for turn in attempt.turns:
                    if turn.reply is not None and turn.reply.model is not None:
                        yield turn.reply.model


def _cases(cases: list[str]) -> str:
    names = list(dict.fromkeys(cases))
    shown = ", ".join(names[:3]) + (f" and {len(names) - 3} more" if len(names) > 3 else "")
    return f"{len(names)} case{'' if len(names) == 1 else 's'}: {shown}"

