"""``toolbench html REPORT.json``: render a saved JSON report as the HTML page.

The page is the one ``--toolbench-html`` writes, drawn by the same function from the same
typed records (``report.html.render_html``), read back by the one report loader
(``report.json_report.read_report``: reports of earlier format versions too).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


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
    from ..report.html import write_html
    from ..report.json_report import ReportUnreadable, read_report_run

    try:
        run, records = read_report_run(args.report)
        write_html(output, records, args.title or f"toolbench report: {args.report.name}",
                   run)
    except ReportUnreadable as error:
        print(f"toolbench html: error: {error}", file=sys.stderr)
        return 2
    except OSError as exc:
        print(f"toolbench html: error: cannot write {output}: {exc.strerror or exc}",
              file=sys.stderr)
        return 2
    print(f"wrote {output} ({len(records)} cases)")
    return 0
