"""Case files -> validated cases, with every problem reported as ``file:line``.

Used by collection and by ``toolbench validate``, so both print the same messages.
"""

from __future__ import annotations

import difflib
import types
import typing
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ValidationError
from pydantic_core import ErrorDetails

from ..keypaths import KeyedError, KeyPath, format_key_path
from .loader import CaseFileError, Document, ParsedDocuments, load_documents
from .placeholders import did_you_mean, undefined_names
from .schema import Case, McpServer, SharedMcpServers


@dataclass(frozen=True)
class LoadedCase:
    """A validated case and where it came from."""

    case: Case
    file: Path
    document: Document
    mcp_servers: Mapping[str, McpServer] = field(default_factory=dict)
    """Every MCP server the case may use: its file's shared ones, then its own."""

    def line_of(self, *path: str | int) -> int:
        return self.document.line_of(path)


class CaseFileErrors(Exception):
    """All problems found in one file, in file order."""

    def __init__(self, errors: list[CaseFileError]) -> None:
        super().__init__("\n".join(str(error) for error in errors))
        self.errors = errors


def load_case_file(file: Path, kept: ParsedDocuments | None = None) -> list[LoadedCase]:
    """Load and validate every case in ``file``; raise CaseFileErrors listing all problems.
    ``kept``: parsed files kept between runs (``cache.ParsedCache``)."""
    try:
        documents = load_documents(file, kept=kept)
    except CaseFileError as error:
        raise CaseFileErrors([error]) from None
    loaded: list[LoadedCase] = []
    errors: list[CaseFileError] = []
    shared: dict[str, McpServer] = {}
    for document in documents:
        try:
            if _is_shared_servers(document.data):
                shared.update(SharedMcpServers.model_validate(document.data).mcp_servers)
            else:
                loaded.append(LoadedCase(_validate(document), file, document))
        except ValidationError as exc:
            errors.extend(_describe(exc, document, file))
    loaded = [_with_servers(item, shared) for item in loaded]
    errors.extend(_duplicate_names(loaded))
    errors.extend(error for item in loaded for error in _undefined_servers(item))
    errors.extend(error for item in loaded for error in _undefined_variables(item))
    if errors:
        raise CaseFileErrors(sorted(errors, key=lambda error: error.line or 0))
    # The validated case holds what the raw data said; only the lines are needed from here
    # on. Dropping the rest halves what a case keeps alive for the session (and what every
    # garbage collection scans).
    for document in documents:
        document.data = None
    return loaded


def _validate(document: Document) -> Case:
    if not isinstance(document.data, dict):
        kind = type(document.data).__name__ if document.data is not None else "empty"
        raise ValidationError.from_exception_data(
            "Case",
            [{"type": "model_type", "loc": (), "input": document.data,
              "ctx": {"class_name": f"a mapping (got {kind})"}}],
        )
    return Case.model_validate(document.data)


def _is_shared_servers(data: Any) -> bool:
    """A document holding ``mcp_servers`` alone: the servers every case of the file may use."""
    return isinstance(data, dict) and set(data) == {"mcp_servers"}


def _with_servers(item: LoadedCase, shared: Mapping[str, McpServer]) -> LoadedCase:
    if not shared and not item.case.mcp_servers:
        return item
    return LoadedCase(item.case, item.file, item.document,
                      {**shared, **item.case.mcp_servers})


def _undefined_servers(item: LoadedCase) -> list[CaseFileError]:
    """``{mcp: NAME}`` entries that no ``mcp_servers`` (the case's or its file's) defines."""
    errors = []
    for index, entry in enumerate(item.case.tools):
        name = getattr(entry, "mcp", None)
        if name is not None and name not in item.mcp_servers:
            defined = ", ".join(sorted(item.mcp_servers)) or "none"
            path = ("tools", index, "mcp")
            errors.append(CaseFileError(
                item.file, item.line_of(*path),
                f"MCP server {name!r} is not defined{did_you_mean(name, item.mcp_servers)}"
                f" (mcp_servers of this case and file: {defined})", path))
    return errors


def _duplicate_names(loaded: list[LoadedCase]) -> list[CaseFileError]:
    seen: set[str] = set()
    errors = []
    for item in loaded:
        if item.case.name in seen:
            line = item.line_of("name")
            errors.append(CaseFileError(item.file, line, f"duplicate case name {item.case.name!r}",
                                        ("name",)))
        seen.add(item.case.name)
    return errors


def _undefined_variables(item: LoadedCase) -> list[CaseFileError]:
    """``${name}``s that no earlier stage captures: each would fail every run of the case."""
    if not item.document.may_interpolate:
        return []
    return [CaseFileError(item.file, item.line_of(*path), message, path)
            for path, message in undefined_names(item.case)]


def _describe(exc: ValidationError, document: Document, file: Path) -> list[CaseFileError]:
    errors = []
    for detail in exc.errors():
        path = _data_path(detail, document.data)
        message = _message(detail, path)
        keyed = (detail.get("ctx") or {}).get("error")
        if isinstance(keyed, KeyedError):
            path = (*path, *keyed.path)
            message = keyed.message
        errors.append(CaseFileError(file, document.line_of(path), message, path))
    return errors


def _data_path(detail: ErrorDetails, data: Any) -> KeyPath:
    """The error's location with pydantic's union-member labels removed.

    pydantic adds a label per union member (``str``, ``literal['auto']``...) to ``loc``;
    only the parts that exist in the data are kept, so the path is one the user wrote.
    """
    path: list[str | int] = []
    node = data
    for part in detail["loc"]:
        if isinstance(node, dict) and part in node:  # noqa: SIM114 - mypy narrows each branch
            node = node[part]
        elif isinstance(node, list) and isinstance(part, int) and 0 <= part < len(node):
            node = node[part]
        else:
            continue  # a union label, or the missing key itself (reported on its parent)
        path.append(part)
    return tuple(path)


def _message(detail: ErrorDetails, path: KeyPath) -> str:
    if detail["type"] == "extra_forbidden":
        key = str(path[-1]) if path else "?"
        return f"unknown key {key!r}{_suggestion(key, path[:-1])}"
    if detail["type"] == "missing":
        return f"missing required key {format_key_path(detail['loc'][-1:])!r}"
    return detail["msg"].removeprefix("Value error, ")


def _suggestion(key: str, parent: KeyPath) -> str:
    allowed = _allowed_keys(parent)
    close = difflib.get_close_matches(key, allowed, n=1, cutoff=0.6)
    if close:
        return f" (did you mean {close[0]!r}?)"
    return f" (allowed: {', '.join(sorted(allowed))})" if allowed else ""


def _allowed_keys(parent: KeyPath) -> list[str]:
    """Field names of the model found at ``parent`` inside a Case (of every model a union
    there allows: a ``tools`` entry is a tool or an MCP server's tools)."""
    models: list[Any] = [Case]
    for part in parent:
        if isinstance(part, str):
            found = []
            for model in models:
                if _is_model(model) and part in model.model_fields:
                    found += _models_in(model.model_fields[part].annotation)
                elif typing.get_origin(model) is dict:  # a name the user chose: its value
                    found += _models_in(typing.get_args(model)[-1])
            models = found
        else:
            models = [inner for model in models for inner in _models_in(model, items=True)]
    return sorted({name for model in models if _is_model(model)
                   for name in model.model_fields})


def _is_model(candidate: Any) -> bool:
    return isinstance(candidate, type) and issubclass(candidate, BaseModel)


def _models_in(annotation: Any, items: bool = False) -> list[Any]:
    """The model classes inside ``X | None``, ``Annotated[X, ...]`` (and, with ``items``,
    ``list[X]``), or a ``dict[str, X]`` itself; else nothing."""
    if _is_model(annotation):
        return [annotation]
    origin = typing.get_origin(annotation)
    if origin is dict:
        return [annotation]
    if origin is list and not items:
        return [annotation]
    if origin in (typing.Union, types.UnionType, list, typing.Annotated):
        return [found for arg in typing.get_args(annotation) for found in _models_in(arg)]
    return []


def describe_errors(errors: CaseFileErrors) -> str:
    """The text shown for a broken case file: a count, then one line per problem."""
    count = len(errors.errors)
    head = f"{count} problem{'s' if count != 1 else ''} in case file"
    return "\n".join([head, *(f"  {error}" for error in errors.errors)])
