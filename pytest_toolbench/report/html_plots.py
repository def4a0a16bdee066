"""The HTML report's small inline SVG plots: a spread of timings, a stream's timeline.

Numbers only go into the SVG (coordinates, and labels formatted from floats); names shown
beside a timeline are escaped like every other text of the page.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence

from .html_page import escape, ms

WIDTH = 220
HEIGHT = 30


def dot_plot(values: Sequence[float]) -> str:
    """Each value as a dot on a line from 0 to the largest, the median as a tick."""
    if not values:
        return '<span class="none">none</span>'
    top = max(values) or 1.0
    dots = "".join(f'<circle cx="{_x(v, top):.1f}" cy="{10 + (i * 7) % 12}" r="2.5" '
                   'fill="#2e90fa" fill-opacity="0.6"/>' for i, v in enumerate(values))
    median = statistics.median(values)
    label = (f"n={len(values)} median {ms(median)} "
             f"p90 {ms(_quantile(values, 0.9))} max {ms(max(values))}")
    return (f'<svg width="{WIDTH}" height="{HEIGHT}" viewBox="0 0 {WIDTH} {HEIGHT}" '
            f'role="img"><title>{escape(label)}</title>'
            f'<line x1="4" y1="26" x2="{WIDTH - 4}" y2="26" stroke="#d0d5dd"/>{dots}'
            f'<line x1="{_x(median, top):.1f}" y1="4" x2="{_x(median, top):.1f}" y2="28" '
            f'stroke="#1d2939"/></svg><div class="muted">{escape(label)}</div>')


def stream_timeline(ttft_ms: float | None, latency_ms: float | None,
                    calls: Sequence[tuple[str, float | None]]) -> str:
    """From the request to the last byte: the first token, and when each tool call's
    arguments completed (``calls``: name and offset; None when the reader did not say)."""
    if latency_ms is None:
        return ""
    top = max([latency_ms, *(at for _, at in calls if at is not None)]) or 1.0
    marks = [f'<rect x="4" y="8" width="{WIDTH - 8}" height="8" fill="#d1e9ff"/>']
    if ttft_ms is not None:
        marks.append(_tick(ttft_ms, top, "#067647", f"first token {ms(ttft_ms)}"))
    marks.extend(_tick(at, top, "#7a5af8", f"{name} arguments complete {ms(at)}")
                 for name, at in calls if at is not None)
    words = [f"first token {ms(ttft_ms)}" if ttft_ms is not None else "no first token"]
    words += [f"{name} arguments complete "
              + (ms(at) if at is not None else "(when: not recorded)") for name, at in calls]
    words.append(f"end {ms(latency_ms)}")
    return (f'<div class="timeline"><svg width="{WIDTH}" height="24" '
            f'viewBox="0 0 {WIDTH} 24" role="img">{"".join(marks)}</svg>'
            f'<span class="muted">0 ms · {escape(" · ".join(words))}</span></div>')


def _tick(at: float, top: float, colour: str, label: str) -> str:
    x = _x(at, top)
    return (f'<line x1="{x:.1f}" y1="4" x2="{x:.1f}" y2="20" stroke="{colour}" '
            f'stroke-width="2"><title>{escape(label)}</title></line>')


def _x(value: float, top: float) -> float:
    """Position on the axis, inside a 4-pixel margin."""
    return 4 + (WIDTH - 8) * max(0.0, min(value / top, 1.0))


def _quantile(values: Sequence[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


