"""``parametrize:``: a table of inputs, one item per row, each row's values filled in as
``${name}`` wherever a captured value is.

Three ways to write a table, read here into one list of rows:

- a mapping of name -> list of values: the cross product, as stacked
  ``@pytest.mark.parametrize`` decorators give (the first name varies slowest);
- a list of rows, each a mapping of name -> value (every row gives every name);
- ``{file: rows.csv}`` (``.csv`` with a header row, ``.jsonl`` one object a line,
  ``.yaml``/``.yml`` a list of mappings), relative to the case file.

A row's id is made from its values as pytest makes them (text, numbers, booleans and null
as written, joined by ``-``; any other value, or text longer than ``MAX_ID_TEXT``, as the
name and the row's number); a repeated id gets the row's number appended. A bad row is a
KeyedError at its line, or, in a file, names the file's line.
"""

from __future__ import annotations

import csv
import io
import itertools
import json
import re
from pathlib import Path
from typing import Any

from ..keypaths import KeyedError
from .files import read_beside

MAX_ROWS = 10_000
"""The most rows a table may have: every row is an item, and a request or more."""
MAX_ID_TEXT = 40
"""Text longer than this is not put in an item's id (a prompt would make an unreadable
one): the name and the row's number stand for it."""
NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_SUFFIXES = (".csv", ".jsonl", ".yaml", ".yml")

Row = dict[str, Any]


def table_rows(value: Any, context: Any) -> list[Row]:
    """The rows ``value`` (as the case file gives ``parametrize``) stands for."""
    if isinstance(value, dict) and set(value) == {"file"} and not isinstance(
            value["file"], list):
        rows = _file_rows(value["file"], context)
    elif isinstance(value, dict):
        rows = _product(value)
    elif isinstance(value, list):
        rows = _listed(value)
    else:
        raise KeyedError("parametrize takes a mapping of name -> list of values, a list of"
                         " rows (mappings of name -> value), or {file: rows.csv}")
    if not rows:
        raise KeyedError("parametrize has no rows: a table needs at least one")
    if len(rows) > MAX_ROWS:
        raise KeyedError(f"parametrize has {len(rows):,} rows; a table may have at most"
                         f" {MAX_ROWS:,} (each row is an item)")
    return rows


def _product(columns: dict[Any, Any]) -> list[Row]:
    for name, values in columns.items():
        _check_name(name, (name,))
        if not isinstance(values, list) or not values:
            raise KeyedError(f"parametrize.{name} takes a list of values (at least one), as"
                             " the mapping form is the cross product of its lists", (name,))
    names = list(columns)
    rows = [dict(zip(names, values))
            for values in itertools.islice(itertools.product(*columns.values()),
                                           MAX_ROWS + 1)]
    return rows


def _listed(rows: list[Any]) -> list[Row]:
    names: list[str] | None = None
    for index, row in enumerate(rows):
        if not isinstance(row, dict) or not row:
            raise KeyedError(f"row {index + 1} is not a mapping of name -> value", (index,))
        for name in row:
            _check_name(name, (index, name))
        if names is None:
            names = list(row)
        elif set(row) != set(names):
            raise KeyedError(_other_names(f"row {index + 1}", list(row), names), (index,))
    return [dict(row) for row in rows]


def _other_names(what: str, got: list[str], names: list[str]) -> str:
    missing = [name for name in names if name not in got]
    extra = [name for name in got if name not in names]
    parts = ([f"lacks {', '.join(missing)}"] if missing else []) + (
        [f"adds {', '.join(extra)}"] if extra else [])
    return (f"{what} {' and '.join(parts)}: every row gives the names of the first"
            f" ({', '.join(names)})")


def _check_name(name: Any, path: tuple[str | int, ...]) -> None:
    if not isinstance(name, str) or not NAME.match(name):
        raise KeyedError(f"{name!r} cannot be a ${{name}}: a name is letters, digits and _,"
                         " not starting with a digit", path)


def _file_rows(name: Any, context: Any) -> list[Row]:
    suffix = Path(name).suffix.lower() if isinstance(name, str) else ""
    if suffix not in _SUFFIXES:
        raise KeyedError(f"parametrize reads {', '.join(_SUFFIXES)} files, not {name!r}",
                         ("file",))
    path, text = read_beside(context, name, "a table of rows")
    try:
        if suffix == ".csv":
            return _csv_rows(text, name)
        if suffix == ".jsonl":
            return _jsonl_rows(text, name)
        return _yaml_rows(path, text, name)
    except _RowError as error:
        raise KeyedError(f"{name}:{error.line}: {error.message}", ("file",)) from None


class _RowError(Exception):
    def __init__(self, line: int, message: str) -> None:
        super().__init__(message)
        self.line = line
        self.message = message


def _csv_rows(text: str, name: str) -> list[Row]:
    reader = csv.reader(io.StringIO(text, newline=""))
    header = next(reader, None)
    if not header:
        raise _RowError(1, "no header row: the first row names the columns")
    for column in header:
        if not NAME.match(column):
            raise _RowError(1, f"column {column!r} cannot be a ${{name}}: a name is letters,"
                               " digits and _, not starting with a digit")
    rows: list[Row] = []
    for values in reader:
        if not values:
            continue  # a blank line
        if len(values) != len(header):
            raise _RowError(reader.line_num, f"row {len(rows) + 1} has {len(values)} values;"
                                             f" the header names {len(header)}")
        rows.append(dict(zip(header, values)))
        if len(rows) > MAX_ROWS:
            break
    return rows


def _jsonl_rows(text: str, name: str) -> list[Row]:
    rows: list[Row] = []
    names: list[str] | None = None
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except ValueError as exc:
            raise _RowError(number, f"not JSON: {exc}") from None
        if not isinstance(row, dict) or not row:
            raise _RowError(number, "a row is a JSON object of name -> value")
        try:
            for column in row:
                _check_name(column, ())
        except KeyedError as error:
            raise _RowError(number, error.message) from None
        names = names or list(row)
        if set(row) != set(names):
            raise _RowError(number, _other_names(f"row {len(rows) + 1}", list(row), names))
        rows.append(row)
        if len(rows) > MAX_ROWS:
            break
    return rows


def _yaml_rows(path: Path, text: str, name: str) -> list[Row]:
    from .loader import CaseFileError, load_documents

    try:
        documents = load_documents(path, text)
    except CaseFileError as error:
        raise _RowError(error.line or 1, error.message) from None
    if len(documents) != 1 or not isinstance(documents[0].data, list):
        raise _RowError(1, "a YAML table is one list of rows (mappings of name -> value)")
    document = documents[0]
    try:
        return _listed(document.data)
    except KeyedError as error:
        raise _RowError(document.line_of(error.path), error.message) from None


def row_ids(rows: list[Row]) -> list[str]:
    """Each row's id, as pytest makes ids from parameter values; unique."""
    ids = ["-".join(_id_part(name, value, index) for name, value in row.items())
           for index, row in enumerate(rows)]
    repeated = {id_ for id_ in ids if ids.count(id_) > 1} if len(set(ids)) < len(ids) else set()
    return [f"{id_}{index}" if id_ in repeated else id_ for index, id_ in enumerate(ids)]


def _id_part(name: str, value: Any, index: int) -> str:
    if isinstance(value, str) and len(value) <= MAX_ID_TEXT:
        return value.encode("unicode_escape").decode("ascii")  # as pytest: ASCII only
    if value is None or isinstance(value, (bool, int, float)):
        return str(value)
    return f"{name}{index}"

