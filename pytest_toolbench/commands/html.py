"""``toolbench html REPORT.json``: render a saved JSON report as the HTML page.

The page is the one ``--toolbench-html`` writes, drawn by the same function from the same
data (``report.html.render_html``).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any


class ReportUnreadable(Exception):
    """The file is missing, not JSON, or not a toolbench JSON report."""


def load_report(path: Path) -> dict[str, Any]:
    """A saved JSON report, checked to be one at the top level."""
    try:
        document = json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ReportUnreadable(f"cannot read {path}: {exc.strerror or exc}") from None
    except ValueError as exc:
        raise ReportUnreadable(f"{path} is not JSON: {exc}") from None
    if not isinstance(document, dict) or not isinstance(document.get("cases"), list) \
            or not all(isinstance(case, dict) and isinstance(case.get("nodeid"), str)
                       for case in document["cases"]):
        raise ReportUnreadable(f"{path} is not a toolbench JSON report (write one with "
                               "pytest --toolbench-report PATH)")
    return document


def checked_report(document: dict[str, Any], path: Path) -> dict[str, Any]:
    """``document`` with every case read as the record type a session writes (keys a
    version before added filled with their defaults), or ReportUnreadable naming the first
    case and key that is not one: the page is drawn only from what a session could write."""
    from pydantic import ValidationError

    from ..report.json_report import CaseRecord

    cases = []
    for case in document["cases"]:
        try:
            cases.append(CaseRecord.from_json(case).to_json())
        except ValidationError as exc:
            error = exc.errors()[0]
            where = ".".join(str(part) for part in error["loc"])
            raise ReportUnreadable(f"{path}: case {case['nodeid']}: {where}: {error['msg']}"
                                   " (not a case record of a toolbench JSON report)") from None
    return {**document, "cases": cases}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="toolbench html",
        description="Render a JSON report (pytest --toolbench-report) as one self-contained "
        "HTML page: the same page pytest --toolbench-html writes.")
    parser.add_argument("report", type=Path, metavar="REPORT.json", help="the JSON report")
    parser.add_argument("-o", "--output", type=Path, metavar="PATH",
                        help="where to write the page (default: REPORT with .html)")
    parser.add_argument("--title", default=None,
                        help="the page's title (default: toolbench report: REPORT)")
    return parser


def main(argv: list[str]) -> int:
    args = build_parser().parse_args(argv)
    output: Path = args.output or args.report.with_suffix(".html")
    try:
        from ..report.html import write_html  # here: toolbench diff reads reports too

        document = checked_report(load_report(args.report), args.report)
        write_html(output, document, args.title or f"toolbench report: {args.report.name}")
    except ReportUnreadable as error:
        print(f"toolbench html: error: {error}", file=sys.stderr)
        return 2
    except OSError as exc:
        print(f"toolbench html: error: cannot write {output}: {exc.strerror or exc}",
              file=sys.stderr)
        return 2
    print(f"wrote {output} ({len(document['cases'])} cases)")
    return 0
