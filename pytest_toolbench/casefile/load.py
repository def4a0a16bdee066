"""Case files -> validated cases, with every problem reported as ``file:line``.

Used by collection and by ``toolbench validate``, so both print the same messages.

pydantic and the case schema are imported with the first case validated: a collection
whose files are all read back outlined (``outline.py``) validates nothing, and needs
neither.
"""

from __future__ import annotations

import difflib
import re
import types
import typing
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..keypaths import KeyedError, KeyedErrors, KeyPath, format_key_path
from .files import Reads
from .inherit import DEFAULTS, Inheritance, allowed_keys, inherit, is_file_level
from .loader import CaseFileError, Document, ParsedDocuments, load_documents
from .names import names_checked, names_known_at_load, offered_at_load, unoffered
from .outline import SHARED_SERVERS, Outline
from .placeholders import did_you_mean, undefined_names
from .routes import route_problems

if TYPE_CHECKING:
    from pydantic import ValidationError
    from pydantic_core import ErrorDetails

    from .schema import Case, McpServer


class LoadedCase:
    """A case of a case file and where it came from: validated when loaded, or, read back
    outlined from the parsed-file cache, validated with its file when first asked for."""

    def __init__(self, file: Path, document: Document, outline: Outline, *,
                 case: Case | None = None, mcp_servers: Mapping[str, McpServer] | None = None,
                 later: _Validation | None = None, inheritance: Inheritance | None = None
                 ) -> None:
        self.file = file
        self.document = document
        self.outline = outline
        self._case = case
        self._mcp_servers = mcp_servers
        self._later = later
        self.inheritance = inheritance
        """Where the file's defaults were written, when it has them."""

    @property
    def case(self) -> Case:
        """The validated case (raises CaseFileErrors if, read back outlined, it no longer
        validates)."""
        if self._case is None:
            self._take_validated()
        assert self._case is not None
        return self._case

    @property
    def mcp_servers(self) -> Mapping[str, McpServer]:
        """Every MCP server the case may use: its file's shared ones, then its own."""
        if self._mcp_servers is None:
            self._take_validated()
        assert self._mcp_servers is not None
        return self._mcp_servers

    def line_of(self, *path: str | int) -> int:
        """The line of ``path`` of the case: in its document, or in the file's defaults."""
        return self.line_at(path)

    def line_at(self, path: KeyPath) -> int:
        """``line_of``, of a key path given whole."""
        if self.inheritance is not None:
            return self.inheritance.line_of(path)
        return self.document.line_of(path)

    def problems(self) -> CaseFileErrors | None:
        """Why the case does not validate (validating it, when read back outlined); None
        when it does."""
        if self._case is not None:
            return None
        try:
            self._take_validated()
        except CaseFileErrors as errors:
            return errors
        return None

    def forget(self) -> None:
        """Let the validated case go, when it can be validated again when next asked for
        (it was read back outlined, and its data stays packed): a session need not keep
        every case it has run."""
        if self._later is not None:
            self._case = self._mcp_servers = None

    def _take_validated(self) -> None:
        assert self._later is not None  # only outlined cases are validated later
        validated = self._later.take(self.document.index)
        self._case, self._mcp_servers = validated.case, validated.mcp_servers


class LoadedFile(list[LoadedCase]):
    """The cases of one case file, in file order, with the documents they came from."""

    def __init__(self, file: Path, documents: Sequence[Document], cases: Sequence[LoadedCase]
                 ) -> None:
        super().__init__(cases)
        self.file = file
        self.documents = list(documents)

    def keep(self, kept: ParsedDocuments | None) -> None:
        """Leave the file's outlines in ``kept`` when they are all known and something of
        them is new (a first collection, or an API checked for the first time)."""
        outlines = [document.outline for document in self.documents]
        if kept is None or not self.documents or not all(
                outline == SHARED_SERVERS or (isinstance(outline, Outline) and outline.keepable)
                for outline in outlines):
            return
        if any(isinstance(outline, Outline) and outline.learned for outline in outlines):
            kept.put(self.file, self.documents[0].source, self.documents)
            for outline in outlines:
                if isinstance(outline, Outline):
                    outline.learned = False


class CaseFileErrors(Exception):
    """All problems found in one file, in file order."""

    def __init__(self, errors: list[CaseFileError]) -> None:
        super().__init__("\n".join(str(error) for error in errors))
        self.errors = errors


def load_case_file(file: Path, kept: ParsedDocuments | None = None) -> LoadedFile:
    """Load and validate every case in ``file``; raise CaseFileErrors listing all problems.
    ``kept``: parsed files kept between runs (``cache.ParsedCache``): a file read back with
    the outlines of all its cases is not validated here, each case when first used."""
    try:
        documents = load_documents(file, kept=kept)
    except CaseFileError as error:
        raise CaseFileErrors([error]) from None
    if kept is not None and documents and all(
            document.outline is not None for document in documents):
        later = _Validation(file, documents)
        defaults = _defaults_document(documents)
        return LoadedFile(file, documents, [
            LoadedCase(file, document, document.outline, later=later,
                       inheritance=None if defaults is None else Inheritance(
                           document, defaults, None))
            for document in documents if isinstance(document.outline, Outline)])
    return LoadedFile(file, documents, _validated(file, documents, outline=kept is not None))


class _Validation:
    """The validation of an outlined file, run when one of its cases is first used. Each
    validated case is handed out once: the file keeps none of them, so a case its item let
    go (``LoadedCase.forget``) is not held here; asked for again, the file is validated
    again."""

    def __init__(self, file: Path, documents: Sequence[Document]) -> None:
        self.file = file
        self.documents = documents
        self._cases: dict[int, LoadedCase] | None = None
        self._errors: CaseFileErrors | None = None

    def take(self, index: int) -> LoadedCase:
        """The validated case of document ``index``; raises CaseFileErrors (the same each
        time) when the file does not validate."""
        if self._errors is not None:
            raise self._errors
        if self._cases is not None and index in self._cases:
            return self._cases.pop(index)
        try:
            validated = {case.document.index: case
                         for case in _validated(self.file, self.documents, outline=False)}
        except CaseFileErrors as errors:
            self._errors = errors
            raise
        if self._cases is None:  # the first: the others wait for their items
            self._cases = validated
            return self._cases.pop(index)
        return validated[index]  # again, after it was let go: the rest were handed out


def _validated(file: Path, documents: Sequence[Document], outline: bool) -> list[LoadedCase]:
    """Validate every document; with ``outline``, note each one's outline on it (for the
    cache) and keep its data packed for it."""
    from pydantic import ValidationError

    from .schema import SharedMcpServers

    loaded: list[LoadedCase] = []
    errors: list[CaseFileError] = []
    shared: dict[str, McpServer] = {}
    defaults_document = _defaults_document(documents)
    defaults = _defaults_of(defaults_document, file, errors)
    for document in documents:
        data = document.unpacked()
        if is_file_level(data):
            if DEFAULTS in data and defaults_document not in (None, document):
                assert defaults_document is not None
                errors.append(CaseFileError(file, document.line_of((DEFAULTS,)), (
                    "a second defaults document: a file has one, which every case of it"
                    f" starts from (line {defaults_document.line_of((DEFAULTS,))})"),
                    (DEFAULTS,)))
            try:
                shared.update(SharedMcpServers.model_validate(
                    {"mcp_servers": data.get("mcp_servers", {})}).mcp_servers)
            except ValidationError as exc:
                errors.extend(_describe(exc, data, _located(document), file))
            if outline:
                document.outline = SHARED_SERVERS
            continue
        inheritance = None
        if defaults_document is not None:
            data, origins = inherit(defaults, data)
            inheritance = Inheritance(document, defaults_document, origins)
        try:
            reads = Reads(file.parent)
            case = _validate(data, reads)
        except ValidationError as exc:
            locate = inheritance.locate if inheritance is not None else _located(document)
            errors.extend(_describe(exc, data, locate, file))
            continue
        known = document.outline  # read back from the cache: the case's own
        loaded.append(LoadedCase(file, document, known if isinstance(known, Outline)
                                 else _outline_of(case, reads), case=case,
                                 inheritance=inheritance))
    for item in loaded:
        _with_servers(item, shared)
    errors.extend(_duplicate_names(loaded))
    errors.extend(error for item in loaded for error in _undefined_servers(item))
    errors.extend(error for item in loaded for error in _bad_routes(item))
    errors.extend(error for item in loaded for error in _undefined_variables(item))
    errors.extend(error for item in loaded for error in _unoffered_tools(item))
    if errors:  # a problem of the defaults is every case's: told once
        raise CaseFileErrors(sorted(dict.fromkeys(errors), key=lambda error: error.line or 0))
    for item in loaded:
        if outline:
            item.document.outline = item.outline
            item.outline.learned = True
    # The validated case holds what the raw data said; only the lines are needed from here
    # on (and, for the cache, the packed data). Dropping the rest halves what a case keeps
    # alive for the session (and what every garbage collection scans).
    for document in documents:
        if outline:
            try:
                document.pack()
            except ValueError:  # a value marshal cannot hold: the file is not kept
                document.outline = None
        document.data = None
    return loaded


def _outline_of(case: Case, reads: Reads) -> Outline:
    from .schema import BfclTools, Toolbox

    imports_code = any(isinstance(entry, (Toolbox, BfclTools)) for entry in case.tools) or any(
        tool.python for tool in case.function_tools) or case.agent is not None or any(
        stage.expect.python for stage in case.stages)
    rows = tuple(case.parametrize.ids) if case.parametrize else ()
    endpoint = case.endpoint
    return Outline(case.name, tuple(case.models), case.api, tuple(case.marks),
                   only=tuple(endpoint.apis or ()),
                   skips_unsupported=endpoint.unsupported == "skip",
                   rows=rows, reads=tuple(reads.read), keepable=not imports_code,
                   wants_judge=tuple(case.wants_judge))


def _validate(data: Any, reads: Reads) -> Case:
    from pydantic import ValidationError

    from .schema import Case

    if not isinstance(data, dict):
        kind = type(data).__name__ if data is not None else "empty"
        raise ValidationError.from_exception_data(
            "Case",
            [{"type": "model_type", "loc": (), "input": data,
              "ctx": {"class_name": f"a mapping (got {kind})"}}],
        )
    return Case.model_validate(data, context=reads)


def _defaults_document(documents: Sequence[Document]) -> Document | None:
    """The file's first document that holds ``defaults``. A case's document read back
    outlined is left packed: it is no file-level document."""
    return next((document for document in documents
                 if not isinstance(document.outline, Outline)
                 and is_file_level(data := document.unpacked()) and DEFAULTS in data), None)


def _defaults_of(document: Document | None, file: Path, errors: list[CaseFileError]
                 ) -> dict[str, Any]:
    """The keys the file's cases start from; what cannot be a default is told in
    ``errors`` (a second defaults document, a key that is not a default's)."""
    if document is None:
        return {}
    defaults = document.unpacked()[DEFAULTS]
    path: KeyPath = (DEFAULTS,)
    if not isinstance(defaults, dict):
        errors.append(CaseFileError(file, document.line_of(path), "defaults is a mapping of"
                                    f" case keys ({', '.join(allowed_keys())})", path))
        return {}
    for key in defaults:
        if key not in allowed_keys():
            errors.append(CaseFileError(file, document.line_of((*path, key)), (
                f"{key!r} cannot be a default{_not_default(key)}: defaults hold"
                f" {', '.join(allowed_keys())}"), (*path, key)))
    return {key: value for key, value in defaults.items() if key in allowed_keys()}


def _with_servers(item: LoadedCase, shared: Mapping[str, McpServer]) -> None:
    own = item.case.mcp_servers
    item._mcp_servers = {**shared, **own} if shared or own else own


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


def _unoffered_tools(item: LoadedCase) -> list[CaseFileError]:
    """Tool names the case refers to that none of its tools has (known here unless an MCP
    server offers tools: then the run checks, before its first request)."""
    case = item.case
    if not (names_checked(case) and names_known_at_load(case)):
        return []
    return [CaseFileError(item.file, item.line_of(*path), message, path)
            for path, message in unoffered(case, offered_at_load(case))]


def _bad_routes(item: LoadedCase) -> list[CaseFileError]:
    """Routes that lead nowhere, stages none reaches, loops with no way out."""
    return [CaseFileError(item.file, item.line_of(*path), message, path)
            for path, message in route_problems(item.case)]


def _undefined_variables(item: LoadedCase) -> list[CaseFileError]:
    """``${name}``s that no earlier stage captures: each would fail every run of the case."""
    if not item.document.may_interpolate:
        return []
    return [CaseFileError(item.file, item.line_of(*path), message, path)
            for path, message in undefined_names(item.case)]


def _located(document: Document) -> Callable[[KeyPath], tuple[int, KeyPath]]:
    return lambda path: (document.line_of(path), path)


def _not_default(key: str) -> str:
    from .schema import Case, Stage

    if key in Case.model_fields:
        return " (each case has its own)"
    if key in Stage.model_fields:
        return " (it is a stage key)"
    close = difflib.get_close_matches(key, allowed_keys(), n=1, cutoff=0.6)
    return f" (did you mean {close[0]!r}?)" if close else ""


def _describe(exc: ValidationError, data: Any,
              locate: Callable[[KeyPath], tuple[int, KeyPath]], file: Path
              ) -> list[CaseFileError]:
    errors = []
    # A value one of its key's forms nearly names (``requird``): that form's message alone
    # is told, not those of every other form the value is not either.
    near: set[KeyPath] = set()
    for detail in exc.errors():
        path = _data_path(detail, data)
        keyed = (detail.get("ctx") or {}).get("error")
        if isinstance(keyed, KeyedErrors):  # several problems of one check, each told
            for each in keyed.errors:
                line, shown = locate((*path, *each.path))
                errors.append((CaseFileError(file, line, each.message, shown), False))
            continue
        message = _message(detail, path)
        if isinstance(keyed, KeyedError):
            path = (*path, *keyed.path)
            message = keyed.message
        line, shown = locate(path)
        error = CaseFileError(file, line, message, shown)
        if _nearly_named(detail):
            near.add(shown)
            error = replace(error, message=f"{message} (did you mean"
                            f" {_closest(detail['input'], detail)!r}?)")
        errors.append((error, _nearly_named(detail)))
    return [error for error, nearly in errors if nearly or error.key_path not in near]


def _nearly_named(detail: ErrorDetails) -> bool:
    return detail["type"] == "literal_error" and isinstance(detail.get("input"), str) and (
        _closest(detail["input"], detail) is not None)


def _closest(given: str, detail: ErrorDetails) -> str | None:
    """The nearest of the values a literal allows (pydantic lists them quoted)."""
    expected = str((detail.get("ctx") or {}).get("expected", ""))
    close = difflib.get_close_matches(given, re.findall(r"'([^']*)'", expected), n=1,
                                      cutoff=0.6)
    return close[0] if close else None


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
        return f"unknown key {key!r}{_misplaced(key, path[:-1]) or _suggestion(key, path[:-1])}"
    if detail["type"] == "missing":
        return f"missing required key {format_key_path(detail['loc'][-1:])!r}"
    return detail["msg"].removeprefix("Value error, ")


def _misplaced(key: str, parent: KeyPath) -> str:
    """Why a key of a stage is not one of a case, or a case's key not one of a stage."""
    from .schema import Case, Stage

    if parent == () and key == DEFAULTS:
        return (": a file's defaults are a document of their own, `defaults:` alone (beside"
                " mcp_servers), `---` apart from the cases")
    if parent == () and key in Stage.model_fields:
        return (f": this is a stage key: move it under a stage"
                f" (stages: [{{name: ..., {key}: ...}}])")
    if len(parent) == 2 and parent[0] == "stages" and key in Case.model_fields:
        return ": this is a case key: move it out of the stage, to the case's top level"
    return ""


def _suggestion(key: str, parent: KeyPath) -> str:
    allowed = _allowed_keys(parent)
    close = difflib.get_close_matches(key, allowed, n=1, cutoff=0.6)
    if close:
        return f" (did you mean {close[0]!r}?)"
    return f" (allowed: {', '.join(sorted(allowed))})" if allowed else ""


def _allowed_keys(parent: KeyPath) -> list[str]:
    """Field names of the model found at ``parent`` inside a Case (of every model a union
    there allows: a ``tools`` entry is a tool or an MCP server's tools)."""
    from .schema import Case

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
    from pydantic import BaseModel

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
