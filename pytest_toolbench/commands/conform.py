"""``toolbench conform``: a conformance matrix of a server's tool calling.

The probes are ordinary case files shipped in ``pytest_toolbench/conform/probes``. They run
through pytest in this process, the way ``pytest PROBES --toolbench-record`` would, against
the server at ``--base-url``: recorded into a temporary folder rather than only run live, so
that the checks the expectations cannot state (reasoning fields, the error body, the
indices of a stream's calls) can read the raw replies. The JSON report and the cassettes
then fill the matrix (``conform_matrix``). Nothing is left behind.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import re
import shutil
import socket
import sys
import tempfile
import urllib.parse
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest

from ..apis import API_NAMES, DEFAULT_API, api_names, api_row, with_version_path
from ..atomic import write_atomic
from ..report.json_report import CaseRecord, read_report
from ..transport.cassette import Cassette
from ..transport.errors import ReplayError
from .argtypes import positive_float, positive_int
from .conform_matrix import (
    APIS,
    PROBES,
    Cell,
    Row,
    Verdict,
    judge,
    matrix_json,
    render_html,
    render_markdown,
    render_table,
)

__all__ = ["PROBES_DIR", "build_parser", "main", "probe_files", "urls_by_api"]

PROBES_DIR = Path(__file__).resolve().parent.parent / "conform" / "probes"
"""The shipped probe case files: read them, copy them, run them with pytest."""
FORMATS = ("table", "markdown", "json")


def probe_files() -> list[Path]:
    """The probe case files, in the matrix's row order."""
    return [PROBES_DIR / f"{name}.case.yaml" for name in PROBES]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="toolbench conform",
        description="Run the built-in tool-calling probes against an OpenAI-compatible "
        "server and print a matrix: one row per probe, one column per wire API ("
        f"{', '.join(API_NAMES)}), each cell pass, fail (protocol "
        "or model) or not supported, with the reason. Exit 0 when every supported probe passes, 1 otherwise, 2 on a "
        f"wrong command line. The probes are case files: {PROBES_DIR}",
    )
    parser.add_argument("--base-url", required=True, action="append", type=_base_url,
                        metavar="[API=]URL",
                        help="the base URL every probed API answers at, e.g. "
                        "http://127.0.0.1:8080/v1; API=URL gives one API its own (repeat the "
                        "option: --base-url http://127.0.0.1:8080/v1 --base-url "
                        "gemini=https://generativelanguage.googleapis.com/v1beta). A URL "
                        "with no path gets each API's version path (/v1; gemini /v1beta)")
    parser.add_argument("--model", metavar="M", help="the model to ask (sent as 'model'; "
                        "default: none sent, the server's own)")
    parser.add_argument("--repeat", type=positive_int, default=1, metavar="N",
                        help="run each probe N times; it passes when more than half pass "
                        "(default 1)")
    parser.add_argument("--api", type=_api_list, default=(DEFAULT_API,), metavar="A[,B...]",
                        help="the wire APIs to probe, one column each: "
                        f"{', '.join(API_NAMES)} (default: {DEFAULT_API})")
    parser.add_argument("--report", type=Path, metavar="PATH",
                        help="write the matrix as JSON to PATH")
    parser.add_argument("--html", type=Path, metavar="PATH",
                        help="write the matrix as a self-contained HTML page to PATH")
    parser.add_argument("--format", choices=FORMATS, default="table",
                        help="how to print the matrix (default: table)")
    parser.add_argument("--api-key-env", metavar="NAME",
                        help="the environment variable holding the API key "
                        "(default OPENAI_API_KEY; none set: no Authorization header)")
    parser.add_argument("--timeout", type=positive_float, metavar="S",
                        help="the longest wait for the next bytes of a reply, seconds "
                        "(default 60)")
    parser.add_argument("--verbose", "-v", action="store_true",
                        help="show pytest's own output of the probe run (on stderr)")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``toolbench conform``; return the exit code."""
    try:
        args = build_parser().parse_args(argv)
    except SystemExit as exit_:
        return exit_.code if isinstance(exit_.code, int) else 2
    try:
        urls = urls_by_api(args.base_url, args.api)
    except ValueError as error:
        print(f"toolbench conform: error: {error}", file=sys.stderr)
        return 2
    for url in dict.fromkeys(urls.values()):
        unreachable = _unreachable(url, min(args.timeout or REACH_TIMEOUT_S, REACH_TIMEOUT_S))
        if unreachable:
            print(f"toolbench conform: error: {unreachable}; is the server running?",
                  file=sys.stderr)
            return 2
    with tempfile.TemporaryDirectory(prefix="toolbench-conform-") as scratch:
        rows = run_probes(args, urls, Path(scratch))
    if rows is None:
        return 2
    about = {"base_url": _urls_text(urls), "base_urls": urls, "model": args.model,
             "repeat": args.repeat}
    document = matrix_json(rows, about)
    if args.report is not None and not _write(args.report, json.dumps(document, indent=2)
                                              + "\n"):
        return 2
    if args.html is not None and not _write(args.html, render_html(rows, about)):
        return 2
    sys.stdout.write(_render(args.format, rows, document))
    return 0 if _all_supported_pass(rows) else 1


REACH_TIMEOUT_S = 5.0
"""How long the server may take to accept a connection before no probe is sent."""


def _unreachable(base_url: str, timeout_s: float) -> str:
    """Why no connection to ``base_url``'s host can be opened, or "" when one can.

    Every probe would otherwise wait out its own connect failures and retries (about 15 s
    for the suite) to say the same thing fifteen times.
    """
    url = urllib.parse.urlsplit(base_url)
    if url.scheme not in ("http", "https") or not url.hostname:
        return f"--base-url {base_url!r} is not an http(s) URL"
    try:
        port = url.port or (443 if url.scheme == "https" else 80)
    except ValueError as exc:
        return f"--base-url {base_url!r}: {exc}"
    try:
        socket.create_connection((url.hostname, port), timeout=timeout_s).close()
    except OSError as exc:
        reason = exc.strerror or str(exc) or type(exc).__name__
        return f"cannot connect to {url.hostname}:{port} ({reason})"
    return ""


def _base_url(value: str) -> tuple[str | None, str]:
    """``URL`` (every API's) or ``API=URL`` (that API's): (the API or None, the URL)."""
    named = _API_URL.fullmatch(value)
    if named is None:
        return None, value
    try:
        api_row(named[1])
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None
    return named[1], named[2]


_API_URL = re.compile(r"([A-Za-z][A-Za-z0-9_-]*)=(.+)")
"""``gemini=https://...``: an API's name before the URL (a URL starts with its scheme)."""


def urls_by_api(given: Sequence[tuple[str | None, str]], apis: Sequence[str]
                ) -> dict[str, str]:
    """Each probed API's base URL: its own ``API=URL``, else the one plain ``URL``, a bare
    host given that API's version path; ValueError saying what is wrong."""
    plain = [url for api, url in given if api is None]
    own: dict[str, str] = {}
    for api, url in given:
        if api is not None:
            if api in own:
                raise ValueError(f"--base-url names {api} twice")
            if api not in apis:
                raise ValueError(f"--base-url {api}=... names an API not probed; add it to"
                                 f" --api (now {','.join(apis)})")
            own[api] = url
    if len(plain) > 1:
        raise ValueError("--base-url gives more than one URL for every API; give one, and"
                         " API=URL for the APIs that answer elsewhere")
    missing = [api for api in apis if api not in own and not plain]
    if missing:
        raise ValueError(f"no base URL for {', '.join(missing)}: give --base-url URL, or"
                         f" --base-url {missing[0]}=URL")
    return {api: with_version_path(api, own.get(api) or plain[0]) for api in apis}


def _urls_text(urls: Mapping[str, str]) -> str:
    """One URL, or each with the APIs that answer there: ``URL (chat); URL2 (gemini)``."""
    groups = _groups(urls)
    if len(groups) == 1:
        return next(iter(groups))
    return "; ".join(f"{url} ({', '.join(apis)})" for url, apis in groups.items())


def _groups(urls: Mapping[str, str]) -> dict[str, list[str]]:
    groups: dict[str, list[str]] = {}
    for api, url in urls.items():
        groups.setdefault(url, []).append(api)
    return groups


def run_probes(args: argparse.Namespace, urls: Mapping[str, str],
               scratch: Path) -> list[Row] | None:
    """Run every probe through pytest, once per base URL with the APIs that answer there;
    one row per probe, or None when pytest could not."""
    for file in probe_files():
        shutil.copy(file, scratch / file.name)
    # An empty ini of its own: the user's addopts, conftest.py files and ini settings stay
    # out of the probe run, wherever the command is started.
    (scratch / "pytest.ini").write_text("[pytest]\n", encoding="utf-8")
    records: list[CaseRecord] = []
    for number, (url, apis) in enumerate(_groups(urls).items()):
        report = scratch / f"report-{number}.json"
        output = io.StringIO()
        with contextlib.redirect_stdout(output):
            code = pytest.main(_pytest_args(args, url, apis, scratch, report))
        if args.verbose:
            sys.stderr.write(output.getvalue())
        if not report.is_file():
            sys.stderr.write(output.getvalue())
            print(f"toolbench conform: error: the probe run wrote no report (pytest exit"
                  f" code {int(code)}); its output is above", file=sys.stderr)
            return None
        records += read_report(report)
    return _rows(records, scratch / "cassettes", args.api)


def _pytest_args(args: argparse.Namespace, url: str, apis: Sequence[str], scratch: Path,
                 report: Path) -> list[str]:
    options = {
        "--toolbench-base-url": url, "--toolbench-model": args.model,
        "--toolbench-repeat": str(args.repeat), "--toolbench-api-key-env": args.api_key_env,
        "--toolbench-timeout": None if args.timeout is None else str(args.timeout),
        "--toolbench-api": ",".join(apis),
    }
    given = [part for key, value in options.items() if value is not None
             for part in (key, value)]
    # One request at a time: many local servers serve one, and cut a stream off for another.
    # No circuit breaker: a probe the server answers with 5xx must not fail the next ones.
    return ["-c", str(scratch / "pytest.ini"), "--rootdir", str(scratch), "-q",
            "-p", "no:cacheprovider", "--assert=plain", "--toolbench-record",
            "--toolbench-cassette-dir", str(scratch / "cassettes"),
            "--toolbench-report", str(report), "--toolbench-concurrency", "1",
            "--toolbench-breaker-threshold", "0",
            *given, "--", *(str(scratch / file.name) for file in probe_files())]


def _rows(report: list[CaseRecord], cassettes: Path, apis: Sequence[str]) -> list[Row]:
    records = {(record.case, record.api): record for record in report}
    rows: list[Row] = []
    for name, probe in PROBES.items():
        recorded = _interactions(cassettes / name)
        rows.append((name, probe.title, {
            api: judge(probe, records.get((name, api)), recorded.get(api, []), api)
            for api in apis}))
    return rows


def _interactions(folder: Path) -> dict[str, list[Any]]:
    """The probe's recorded exchanges by API, each cassette read once (an API is missing
    when nothing was recorded, e.g. after a 5xx). Each cassette says which API it holds."""
    found: dict[str, list[Any]] = {}
    for path in sorted(folder.glob("*.yaml")) if folder.is_dir() else ():
        try:
            cassette = Cassette.load(path, api=None)
        except ReplayError:
            continue  # unreadable: the probe's own record says what went wrong
        found.setdefault(cassette.api, []).extend(cassette.interactions)
    return found


def _api_list(value: str) -> tuple[str, ...]:
    try:
        apis = api_names(value)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None
    if not apis:
        raise argparse.ArgumentTypeError(f"no API named; choose from {', '.join(APIS)}")
    return apis


def _render(fmt: str, rows: Sequence[Row], document: Mapping[str, Any]) -> str:
    if fmt == "json":
        return json.dumps(document, indent=2) + "\n"
    if fmt == "markdown":
        return render_markdown(rows)
    return render_table(rows) + _summary(rows)


def _summary(rows: Sequence[Row]) -> str:
    cells = [cell for _name, _title, cells in rows for cell in cells.values()]
    counts = {verdict: sum(cell.verdict is verdict for cell in cells) for verdict in Verdict}
    return (f"{counts[Verdict.PASS]} passed, {counts[Verdict.FAIL]} failed, "
            f"{counts[Verdict.NOT_SUPPORTED]} not supported\n")


def _all_supported_pass(rows: Sequence[Row]) -> bool:
    cells: list[Cell] = [cell for _name, _title, cells in rows for cell in cells.values()]
    return all(cell.verdict is not Verdict.FAIL for cell in cells)


def _write(path: Path, text: str) -> bool:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(path, text)
    except OSError as exc:
        print(f"toolbench conform: error: cannot write {path}: {exc.strerror or exc}",
              file=sys.stderr)
        return False
    return True

