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


def tools_timeline(stream_ended_ms: float | None,
                   calls: Sequence[tuple[str, float | None, float | None, float | None]],
                   saved_ms: float | None) -> str:
    """A streamed turn's tool runs on the stream's clock: each call's close (a tick) and its
    tool's run (a bar), the stream's end; ``calls``: name, closed, started, ended."""
    times = [at for call in calls for at in call[1:] if at is not None]
    if stream_ended_ms is not None:
        times.append(stream_ended_ms)
    if not times:
        return ""
    top = max(times) or 1.0
    height = 8 + 12 * len(calls)
    marks = []
    if stream_ended_ms is not None:
        x = _x(stream_ended_ms, top)
        marks.append(f'<line x1="{x:.1f}" y1="0" x2="{x:.1f}" y2="{height}" stroke="#344054" '
                     f'stroke-dasharray="2 2"><title>stream ended {escape(ms(stream_ended_ms))}'
                     "</title></line>")
    words = []
    for row, (name, closed, started, ended) in enumerate(calls):
        y = 4 + 12 * row
        if started is not None and ended is not None:
            left, right = _x(started, top), _x(ended, top)
            marks.append(f'<rect x="{left:.1f}" y="{y}" width="{max(right - left, 1.5):.1f}" '
                         f'height="8" fill="#f79009"><title>{escape(name)} ran '
                         f"{escape(ms(started))} to {escape(ms(ended))}</title></rect>")
        if closed is not None:
            x = _x(closed, top)
            marks.append(f'<line x1="{x:.1f}" y1="{y - 2}" x2="{x:.1f}" y2="{y + 10}" '
                         f'stroke="#7a5af8" stroke-width="2"><title>{escape(name)} closed '
                         f"{escape(ms(closed))}</title></line>")
        words.append(f"{name}: closed {_at(closed)}, ran {_at(started)} to {_at(ended)}")
    words.append(f"stream ended {_at(stream_ended_ms)}")
    if saved_ms is not None:
        words.append(f"progressive execution saved {ms(saved_ms)}")
    return (f'<div class="timeline tools"><svg width="{WIDTH}" height="{height}" '
            f'viewBox="0 0 {WIDTH} {height}" role="img">{"".join(marks)}</svg>'
            f'<span class="muted">{escape(" · ".join(words))}</span></div>')


def _at(value: float | None) -> str:
    return ms(value) if value is not None else "-"


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


