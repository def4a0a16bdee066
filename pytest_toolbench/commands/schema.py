"""``toolbench schema``: the JSON Schema of a case file, generated from the models that
validate cases, for editors; a copy ships in the package (``SCHEMA_PATH``)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from ..casefile.inherit import allowed_keys
from ..casefile.schema import Case, CaseJsonSchema, SharedMcpServers
from .usage import ExitCode, UsageError

SCHEMA_DIALECT = "https://json-schema.org/draft/2020-12/schema"  # what pydantic generates
SCHEMA_ID = "urn:pytest-toolbench:case-file"
SCHEMA_TITLE = "pytest-toolbench case file"
SCHEMA_PATH = Path(__file__).parent.parent / "case.schema.json"
"""The committed copy of ``toolbench schema``, shipped in the package for editors."""


def build_parser() -> argparse.ArgumentParser:
    schema = argparse.ArgumentParser(
        prog="toolbench schema",
        description="Print the JSON Schema of one YAML document of a case file (a case, or "
        "a file-level document of mcp_servers and defaults), "
        "generated from the models that validate cases. Point an editor at it with "
        "'# yaml-language-server: $schema=PATH' as a case file's first line. "
        f"A copy ships with the package: {SCHEMA_PATH}",
    )
    schema.add_argument("--output", "-o", type=Path, metavar="PATH",
                        help="write the schema to PATH instead of printing it")
    return schema


def main(argv: list[str]) -> int:
    return run(build_parser().parse_args(argv))


def case_schema() -> dict[str, Any]:
    """The JSON Schema of one YAML document of a case file, from the models: a case (a
    document with a ``name`` or ``stages``), else a file-level document of shared
    ``mcp_servers`` and ``defaults``."""
    case = Case.model_json_schema(schema_generator=CaseJsonSchema)
    case.pop("title", None)
    definitions = case.pop("$defs", {})
    shared = SharedMcpServers.model_json_schema(schema_generator=CaseJsonSchema)
    for name, definition in shared.pop("$defs", {}).items():
        assert definitions.setdefault(name, definition) == definition, name
    defaults = {"type": "object", "additionalProperties": False,
                "description": "The keys every case of the file starts from.",
                "properties": {key: case["properties"][key] for key in allowed_keys()}}
    file_level = {
        "type": "object", "additionalProperties": False, "minProperties": 1,
        "description": "A file-level document: MCP servers every case of the file may use"
                       " by name, and the defaults every case starts from.",
        "properties": {"mcp_servers": shared["properties"]["mcp_servers"],
                       "defaults": defaults}}
    return {"$schema": SCHEMA_DIALECT, "$id": SCHEMA_ID, "title": SCHEMA_TITLE,
            "description": "One YAML document of a case file: a case, or a file-level"
                           " document (mcp_servers, defaults).",
            "$defs": definitions,
            "if": {"anyOf": [{"required": ["name"]}, {"required": ["stages"]}]},
            "then": case, "else": file_level}


def schema_text() -> str:
    return json.dumps(case_schema(), indent=2, ensure_ascii=False) + "\n"


def run(args: argparse.Namespace) -> int:
    if args.output is None:
        sys.stdout.write(schema_text())
        return ExitCode.OK
    try:
        args.output.write_text(schema_text(), encoding="utf-8")
    except OSError as exc:
        raise UsageError(f"cannot write {args.output}: {exc.strerror or exc}") from None
    print(f"wrote the case-file schema to {args.output}")
    return ExitCode.OK
