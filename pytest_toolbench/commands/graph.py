"""``toolbench graph FILE [NAME]`` (or ``FILE::NAME``): a case's executor flow as a Mermaid
state diagram, drawn by ``report.graph`` from the executor's own ``TRANSITIONS`` table, so
the picture cannot drift from what runs."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ..casefile.load import LoadedCase
from ..casefile.schema import Case
from ..items import CaseItem
from ..report.graph import case_graph
from .usage import ExitCode, UsageError
from .validate import collect_cases


def build_parser() -> argparse.ArgumentParser:
    graph = argparse.ArgumentParser(
        prog="toolbench graph",
        description="Print the executor's state machine for each stage of a case as a "
        "Mermaid stateDiagram-v2, leaving out what the stage's settings rule out "
        "(the tool loop without run_tools, other_variant without stream: both, retry "
        "without retry:).",
    )
    graph.add_argument("case_file", metavar="CASE_FILE",
                       help="the case file, or a pytest node id of a case:"
                       " CASE_FILE::NAME or CASE_FILE::NAME[MODEL]")
    graph.add_argument("name", nargs="?", metavar="NAME",
                       help="the case to draw; needed when the file holds several")
    graph.add_argument("--markdown", action="store_true",
                       help="wrap the diagram in a ```mermaid fence, for Markdown pages")
    return graph


def main(argv: list[str]) -> int:
    return run(build_parser().parse_args(argv))


def run(args: argparse.Namespace) -> int:
    file, name, item_name = _graph_target(args.case_file, args.name)
    if not file.is_file():
        raise UsageError(f"no such case file: {file}")
    collected = collect_cases([file])
    if collected.problems:
        print("\n".join(problem.text for problem in collected.problems), file=sys.stderr)
        return ExitCode.INVALID
    loaded = list({item.loaded.case.name: item.loaded for item in collected.items}.values())
    case = _pick_case(loaded, name, file)
    if item_name is not None:
        _require_item(collected.items, case.name, item_name, file)
    source = case_graph(case)
    print(f"```mermaid\n{source}```" if args.markdown else source, end="")
    return ExitCode.OK


def _graph_target(target: str, name: str | None) -> tuple[Path, str | None, str | None]:
    """The file, the case name and the item name (``NAME[ID]``, if one) of ``graph``'s
    arguments: ``FILE [NAME]`` or a pytest node id, ``FILE::NAME`` or ``FILE::NAME[ID]``.
    A case's items (one per model or API) share its flow, so the item only has to exist."""
    file, separator, node_name = target.partition("::")
    if not separator:
        return Path(file), name, None
    if name is not None:
        raise UsageError(f"{target} names the case already; leave out {name!r}")
    case_name = node_name.partition("[")[0]  # a case name holds no "["
    return Path(file), case_name, node_name if node_name != case_name else None


def _require_item(items: list[CaseItem], case: str, item_name: str, file: Path) -> None:
    names = [item.name for item in items if item.loaded.case.name == case]
    if item_name not in names:
        raise UsageError(f"{file} has no item {item_name!r}; its items: {', '.join(names)}")


def _pick_case(loaded: list[LoadedCase], name: str | None, file: Path) -> Case:
    by_name = {item.case.name: item.case for item in loaded}
    if name is None and len(by_name) == 1:
        return loaded[0].case
    if name is not None and name in by_name:
        return by_name[name]
    problem = f"has no case named {name!r}" if name is not None else f"holds {len(by_name)} cases"
    raise UsageError(f"{file} {problem}; name one of: {', '.join(by_name)}")
