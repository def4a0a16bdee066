"""``toolbench diff --html``: the diff as one self-contained page, from its JSON document.

The page is drawn from what ``toolbench diff --format json`` prints, so the two always say
the same. It has no script; its CSS is the report's. Word diffs (``[-old-]{+new+}``) are
coloured after escaping: the markers survive escaping unchanged, and whatever text sits
between them is escaped already.
"""

from __future__ import annotations

import re
from itertools import groupby

from .html_page import Data, page
from .html_page import escape as e

_REMOVED = re.compile(r"\[-(.*?)-\]", re.DOTALL)
_ADDED = re.compile(r"\{\+(.*?)\+\}", re.DOTALL)


def render_diff_html(document: Data, title: str = "toolbench diff") -> str:
    changes = list(document.get("changes", []))
    body = [f"<h1>{e(title)}</h1>",
            f'<div class="muted">{e(document.get("old"))} → {e(document.get("new"))}</div>',
            f"<p>{e(document.get('summary'))}</p>"]
    if changes:
        rows = "\n".join(_case_rows(nodeid, list(group)) for nodeid, group in
                         groupby(changes, key=lambda change: change.get("nodeid")))
        body.append('<table class="models diff-table"><tr><th>case</th><th>change</th>'
                    f"<th>detail</th></tr>\n{rows}</table>")
    else:
        body.append('<div class="none">nothing changed</div>')
    return page(title, "\n".join(body))


def _case_rows(nodeid: str, changes: list[Data]) -> str:
    rows = []
    for number, change in enumerate(changes):
        name = (f'<td rowspan="{len(changes)}" class="id">{e(nodeid)}</td>'
                if number == 0 else "")
        kind = e(change.get("kind"))
        if change.get("regression"):
            kind = f'<span class="badge o-failed">regressed</span> {kind}'
        rows.append(f"<tr>{name}<td>{kind}</td><td><pre>{_detail(str(change.get('detail')))}"
                    "</pre></td></tr>")
    return "\n".join(rows)


def _detail(text: str) -> str:
    escaped = e(text)
    escaped = _REMOVED.sub(r'<del class="del">\1</del>', escaped)
    return _ADDED.sub(r'<ins class="ins">\1</ins>', escaped)
