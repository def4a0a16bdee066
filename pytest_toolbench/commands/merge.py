"""``toolbench merge A.json B.json ... -o ALL.json``: shard reports joined into one.

A suite split over CI runners (pytest-split's ``--splits N --group K``, or any other
selection) writes one JSON report per shard; the merged report is the one a single run of
the whole suite would have written, so ``toolbench diff`` and ``toolbench html`` take it
like any other. Each report is read by the one report loader (``json_report.read_report``),
so reports written by older versions get the keys added since with their defaults, and the
summary's counts and the pass rates are worked out again from the cases. A case in two
reports is refused: two shards ran it, and which verdict stands cannot be told. The
shards' runs become one (``provenance.merged_run``): what they share, from the first start
to the last end.
"""

from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path

from ..report.json_report import (
    CaseRecord,
    ReportUnreadable,
    RunInfo,
    read_report_run,
    report_document,
    write_report,
)
from ..report.provenance import merged_run


def merged_records(paths: list[Path]) -> tuple[list[CaseRecord], RunInfo | None]:
    """Every case of ``paths``, in the order given, each node id from one report only; and
    the shards' runs as one (``merged_run``)."""
    seen: dict[str, Path] = {}
    records = []
    runs = []
    for path in paths:
        run, shard = read_report_run(path)
        runs.append(run)
        for record in shard:
            if record.nodeid in seen:
                raise ReportUnreadable(
                    f"{record.nodeid} is in both {seen[record.nodeid]} and {path}: each case"
                    " must come from one shard (were two shards given the same group, or one"
                    " report twice?)")
            seen[record.nodeid] = path
            records.append(record)
    return records, merged_run(runs)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="toolbench merge",
        description="Join JSON reports of shards of one suite (pytest --toolbench-report, "
        "one per CI runner) into one report, as one run of the whole suite writes it; "
        "exit 2 when a case is in two reports or a report cannot be read.")
    parser.add_argument("reports", nargs="+", type=Path, metavar="REPORT.json",
                        help="the shards' JSON reports")
    parser.add_argument("-o", "--output", type=Path, metavar="PATH", required=True,
                        help="where to write the merged JSON report")
    parser.add_argument("--html", type=Path, metavar="PAGE",
                        help="also write the merged report as the HTML page")
    parser.add_argument("--title", default=None,
                        help="the HTML page's title (default: toolbench report: OUTPUT)")
    return parser


def main(argv: list[str]) -> int:
    args = build_parser().parse_args(argv)
    try:
        records, run = merged_records(args.reports)
        document = report_document(records, run)
        if args.html is not None:
            from ..report.html import write_html

            write_html(args.html, records, args.title or f"toolbench report: {args.output.name}",
                       run)
        write_report(args.output, document)
    except ReportUnreadable as error:
        print(f"toolbench merge: error: {error}", file=sys.stderr)
        return 2
    except OSError as exc:
        print(f"toolbench merge: error: cannot write {exc.filename}: {exc.strerror or exc}",
              file=sys.stderr)
        return 2
    _tell(args, records)
    return 0


def _tell(args: argparse.Namespace, records: list[CaseRecord]) -> None:
    from ..report.summary import render_rates

    print(f"merged {len(args.reports)} reports ({len(records)} cases) into {args.output}")
    if args.html is not None:
        print(f"wrote {args.html}")
    sys.stdout.write(render_rates(records, shutil.get_terminal_size().columns, color=False))
