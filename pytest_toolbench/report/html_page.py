"""What every page toolbench writes shares: the shell with its policy, escaping, small texts.

A page loads nothing: CSS and script are inline, and the Content-Security-Policy allows only
the page's own script (named by its hash), so it works opened from a CI artifact and no text
in it can run. Every text that came from a model, a tool or a server goes through
``escape`` on its way in.
"""

from __future__ import annotations

import base64
import hashlib
import html
import json
from collections.abc import Mapping
from importlib import resources
from typing import Any

Data = Mapping[str, Any]
"""A JSON object of a report: a case, run, stage, attempt, turn, reply or tool run."""


def page(title: str, body: str, script: str | None = None, css: str | None = None) -> str:
    """A whole self-contained page: ``css`` (by default the report's), ``body``, and
    ``script`` if any."""
    tag = f"<script>{script}</script>\n" if script else ""
    return (f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">\n'
            f'<meta http-equiv="Content-Security-Policy" content="{_policy(script)}">\n'
            f'<meta name="viewport" content="width=device-width, initial-scale=1">\n'
            f"<title>{escape(title)}</title>\n<style>{asset('report.css') if css is None else css}</style></head>\n"
            f"<body>\n{body}\n{tag}</body></html>\n")


def asset(name: str) -> str:
    return (resources.files(__package__) / "html_assets" / name).read_text(encoding="utf-8")


def _policy(script: str | None) -> str:
    """Nothing from outside; inline styles; only the page's own script, named by hash."""
    policy = "default-src 'none'; style-src 'unsafe-inline'; img-src data:"
    if script is None:
        return policy
    digest = base64.b64encode(hashlib.sha256(script.encode("utf-8")).digest()).decode()
    return f"{policy}; script-src 'sha256-{digest}'"


def escape(value: Any) -> str:
    """Escaped text for the page, attributes included."""
    return html.escape("" if value is None else str(value), quote=True)


def pretty(text: Any) -> str:
    """JSON text indented for reading; anything else as it came."""
    try:
        return json.dumps(json.loads(text), indent=2, ensure_ascii=False)
    except (ValueError, TypeError):
        return str(text)


def json_lines(value: Any) -> list[str]:
    return json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False).splitlines()


def plural(count: Any, noun: str) -> str:
    return f"{count or 0} {noun}{'' if count == 1 else 's'}"


def count(value: Any) -> str:
    return "-" if value is None else str(value)


def ms(value: Any) -> str:
    """Milliseconds as people read them; ``-`` when unknown."""
    if not isinstance(value, (int, float)):
        return "-"
    return f"{value / 1000:.2f} s" if value >= 1000 else f"{value:.1f} ms"
