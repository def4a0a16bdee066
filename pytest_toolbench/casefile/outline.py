"""What collection asks of a validated case, kept so a later run can collect the case
without validating it again.

Collecting a case makes its items: their names (the case's name, models and wire APIs),
their marks, and what each API cannot express of the case (which fails or skips that
API's items). That is
all an ``Outline`` holds. A case file whose cases validated leaves their outlines in its
entry of the parsed-file cache (``cache.ParsedCache``), beside its parsed data; a run that
reads back that entry (the file's exact bytes, the same plugin code and the same versions
of Python, PyYAML and pydantic) makes the items from the outlines and validates each case
when it first runs. A ``--collect-only`` run never validates them.

A case whose validation depends on more than its text is never outlined for later: one
with a ``python:`` tool, a toolbox or BFCL's tools, which validation imports (the module
may have changed since). Its file is validated at every collection.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ..keypaths import KeyPath

SHARED_SERVERS = "mcp_servers"
"""The outline of a file's shared ``mcp_servers`` document (no case of its own)."""

Problems = list[tuple[str, KeyPath]]
"""What a wire API cannot express of a case: (message, key path) each."""


@dataclass
class Outline:
    """A validated case, as collection sees it."""

    name: str
    models: tuple[str | None, ...]
    """The case's own models (``[None]``: whatever the endpoint serves)."""
    api: str | None
    """The case's ``endpoint.api``, if it names one."""
    marks: tuple[Any, ...]
    """The case's ``marks`` as written (validated): names and one-key mappings."""
    only: tuple[str, ...] = ()
    """The case's ``endpoint.apis``: the only APIs it runs over (empty: any)."""
    skips_unsupported: bool = False
    """``endpoint.unsupported: skip``: the item of an API that cannot express the case is
    skipped, not failed."""
    unsupported: dict[str, Problems] = field(default_factory=dict)
    """Per wire API checked so far: what it cannot express of the case run with its own
    models (empty: nothing)."""
    rows: tuple[str, ...] = ()
    """The ids of the case's ``parametrize`` rows, each an item (none: one item)."""
    reads: tuple[tuple[str, bytes], ...] = ()
    """The files the case read beside it (``files.py``), each with its bytes' digest: the
    outline holds while they are unchanged."""
    keepable: bool = True
    """Whether a later run may use the outline: False when validating the case depends on
    more than its text (it imports code)."""
    learned: bool = False
    """Something here is not yet in the cache: the outline is new, or an API was checked."""
    wants_judge: tuple[KeyPath, ...] = ()
    """Where the case needs a judge model it does not name (``Case.wants_judge``)."""

    def unsupported_over(self, api: str, check: Callable[[], Problems]) -> Problems:
        """What ``api`` cannot express of the case with its own models: known, or found by
        ``check`` (which validates the case) and remembered."""
        problems = self.unsupported.get(api)
        if problems is None:
            problems = self.unsupported[api] = check()
            self.learned = True
        return problems

    def to_data(self) -> tuple[Any, ...]:
        """Plain data, for the cache."""
        return (self.name, self.models, self.api, self.marks,
                {api: [(message, tuple(path)) for message, path in problems]
                 for api, problems in self.unsupported.items()}, self.wants_judge, self.rows,
                self.reads, self.only, self.skips_unsupported)

    @classmethod
    def from_data(cls, data: Any) -> Outline | None:
        """The outline ``to_data`` gave, or None when ``data`` is not one."""
        if not (isinstance(data, tuple) and len(data) == 10):
            return None
        name, models, api, marks, unsupported, wants_judge, rows, reads, only, skips = data
        if not (isinstance(wants_judge, tuple)
                and all(isinstance(path, tuple) for path in wants_judge)):
            return None
        if not (isinstance(name, str) and isinstance(models, tuple)
                and isinstance(only, tuple) and all(isinstance(each, str) for each in only)
                and isinstance(skips, bool)
                and all(model is None or isinstance(model, str) for model in models)
                and (api is None or isinstance(api, str)) and isinstance(marks, tuple)
                and isinstance(unsupported, dict) and all(
                    isinstance(problems, list) and all(
                        isinstance(problem, tuple) and len(problem) == 2
                        and isinstance(problem[0], str) and isinstance(problem[1], tuple)
                        for problem in problems)
                    for problems in unsupported.values())
                and isinstance(rows, tuple) and all(isinstance(row, str) for row in rows)
                and isinstance(reads, tuple) and all(
                    isinstance(read, tuple) and len(read) == 2 and isinstance(read[0], str)
                    and isinstance(read[1], bytes) for read in reads)):
            return None
        return cls(name, models, api, marks, only=only, skips_unsupported=skips,
                   unsupported=unsupported, rows=rows, reads=reads, wants_judge=wants_judge)
