"""Inline SVG charts drawn in Python: stacked bars over time, lines over time, ranked horizontal bars.

Every mark carries a <title> so hovering shows the exact figure without any script.
"""

from __future__ import annotations

import math
import time
from html import escape

from .model import Series, TxnRow

WIDTH, HEIGHT = 960, 300
LEFT, RIGHT, TOP, BOTTOM = 70, 20, 18, 46
PALETTE = ["#2f6fb0", "#e07b29", "#3a9a5b", "#c23b3b", "#8a5cb8", "#8c6d3f", "#d16aa8", "#6f7378", "#b3a32a",
           "#2aa6b8"]
OTHER_COLOR = "#b9bec4"


def color(i: int) -> str:
    return PALETTE[i % len(PALETTE)]


def nice_step(top: float, ticks: int = 4) -> float:
    """A round tick step (1, 2, 2.5 or 5 times a power of ten) so that about `ticks` steps reach `top`."""
    if top <= 0:
        return 1.0
    raw = top / ticks
    mag = 10 ** math.floor(math.log10(raw))
    for m in (1, 2, 2.5, 5, 10):
        if m * mag >= raw:
            return m * mag
    return 10 * mag


def fmt_num(v: float) -> str:
    if abs(v) >= 1_000_000:
        return f"{v / 1_000_000:.3g}M"
    if abs(v) >= 10_000:
        return f"{v / 1000:.3g}k"
    if v == int(v):
        return f"{int(v):,}"
    return f"{v:.3g}"


def fmt_duration(seconds: float) -> str:
    """Seconds as a short readable duration: 42 s, 7 min 3 s, 5 h 12 min, 3 d 4 h, 2.1 years."""
    s = max(0, round(seconds))
    if s < 60:
        return f"{s} s"
    if s < 3600:
        return f"{s // 60} min {s % 60} s"
    if s < 86400:
        return f"{s // 3600} h {s % 3600 // 60} min"
    if s < 365 * 86400:
        return f"{s // 86400} d {s % 86400 // 3600} h"
    return f"{s / (365.25 * 86400):.1f} years"


def _time_label(epoch: int, span_all: int) -> str:
    fmt = "%H:%M:%S" if span_all < 86400 else "%m-%d %H:%M"
    return time.strftime(fmt, time.gmtime(epoch))


def _frame(title_id: str, label: str) -> list[str]:
    return [f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {WIDTH} {HEIGHT}" width="100%" role="img" '
            f'aria-labelledby="{title_id}" class="chart-svg">', f'<title id="{title_id}">{escape(label)}</title>',
            f'<rect x="0" y="0" width="{WIDTH}" height="{HEIGHT}" fill="#ffffff"/>']


def _y_axis(out: list[str], top_value: float, unit: str) -> float:
    """Grid lines and labels; returns the value at the top of the plot."""
    step = nice_step(top_value)
    ymax = step * max(1, math.ceil(top_value / step))
    plot_h = HEIGHT - TOP - BOTTOM
    v = 0.0
    while v <= ymax + step / 2:
        y = TOP + plot_h - plot_h * v / ymax
        out.append(f'<line x1="{LEFT}" y1="{y:.1f}" x2="{WIDTH - RIGHT}" y2="{y:.1f}" stroke="#e3e6ea"/>')
        out.append(f'<text x="{LEFT - 8}" y="{y + 4:.1f}" text-anchor="end" class="tick">{fmt_num(v)}</text>')
        v += step
    out.append(f'<text x="14" y="{TOP + plot_h / 2:.1f}" transform="rotate(-90 14 {TOP + plot_h / 2:.1f})" '
               f'text-anchor="middle" class="axis">{escape(unit)}</text>')
    return ymax


def _x_axis(out: list[str], series: Series, n: int) -> None:
    plot_w = WIDTH - LEFT - RIGHT
    base = TOP + HEIGHT - TOP - BOTTOM
    out.append(f'<line x1="{LEFT}" y1="{base}" x2="{WIDTH - RIGHT}" y2="{base}" stroke="#8a9099"/>')
    if series.start_epoch is None or n == 0:
        return
    labels = min(n, 7)
    for k in range(labels):
        i = round(k * (n - 1) / max(1, labels - 1))
        x = LEFT + plot_w * (i + 0.5) / n
        epoch = series.start_epoch + i * series.span_s
        out.append(f'<line x1="{x:.1f}" y1="{base}" x2="{x:.1f}" y2="{base + 5}" stroke="#8a9099"/>')
        out.append(f'<text x="{x:.1f}" y="{base + 19}" text-anchor="middle" class="tick">'
                   f'{_time_label(epoch, n * series.span_s)}</text>')
    out.append(f'<text x="{LEFT + plot_w / 2:.1f}" y="{HEIGHT - 6}" text-anchor="middle" class="axis">time (UTC), '
               f'{series.span_s} s per bucket</text>')


def _bucket_label(series: Series, i: int) -> str:
    if series.start_epoch is None:
        return f"bucket {i}"
    start = series.start_epoch + i * series.span_s
    return time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(start)) + f" UTC +{series.span_s}s"


def empty_chart(chart_id: str, label: str, message: str) -> str:
    out = _frame(f"{chart_id}-t", label)
    out.append(f'<text x="{WIDTH / 2}" y="{HEIGHT / 2}" text-anchor="middle" class="empty">{escape(message)}</text>')
    out.append("</svg>")
    return "\n".join(out)


def stacked_bars(series: Series, chart_id: str, label: str, unit: str, max_series: int = 9) -> str:
    """One bar per bucket, stacked by series (the largest `max_series` series, the rest as 'other')."""
    n = series.buckets
    if n == 0 or not any(any(v) for v in series.values.values()):
        return empty_chart(chart_id, label, "no data in this range")
    ranked = sorted(series.values.items(), key=lambda kv: -sum(kv[1]))
    shown = ranked[:max_series]
    rest = ranked[max_series:]
    layers = [(name, vals, color(i)) for i, (name, vals) in enumerate(shown)]
    if rest:
        other = [sum(v[i] for _, v in rest if i < len(v)) for i in range(n)]
        layers.append((f"other ({len(rest)} tables)", other, OTHER_COLOR))
    totals = [sum(vals[i] for _, vals, _ in layers if i < len(vals)) for i in range(n)]
    out = _frame(f"{chart_id}-t", label)
    ymax = _y_axis(out, max(totals), unit)
    plot_w, plot_h = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM
    bw = plot_w / n
    gap = min(2.0, bw * 0.15)
    for i in range(n):
        y = TOP + plot_h
        for name, vals, c in layers:
            v = vals[i] if i < len(vals) else 0
            if v <= 0:
                continue
            h = plot_h * v / ymax
            y -= h
            out.append(f'<rect class="mark" x="{LEFT + i * bw + gap / 2:.2f}" y="{y:.2f}" width="{bw - gap:.2f}" '
                       f'height="{h:.2f}" fill="{c}"><title>{escape(name)}: {fmt_num(v)} '
                       f'({_bucket_label(series, i)})</title></rect>')
    _x_axis(out, series, n)
    out.append("</svg>")
    return "\n".join(out) + legend([(name, c) for name, _, c in layers])


def lines(series: Series, chart_id: str, label: str, unit: str) -> str:
    """One line per series over the buckets, the first one with a filled area under it."""
    n = series.buckets
    if n == 0:
        return empty_chart(chart_id, label, "no data in this range")
    out = _frame(f"{chart_id}-t", label)
    top = max((max(v) for v in series.values.values() if v), default=0)
    ymax = _y_axis(out, top if top > 0 else 1, unit)
    plot_w, plot_h = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM
    base = TOP + plot_h
    names = list(series.values)
    for k, name in enumerate(names):
        vals = series.values[name]
        pts = [(LEFT + plot_w * (i + 0.5) / n, base - plot_h * v / ymax) for i, v in enumerate(vals)]
        c = color(k)
        if k == 0 and pts:
            area = " ".join(f"{x:.1f},{y:.1f}" for x, y in pts)
            out.append(f'<polygon points="{pts[0][0]:.1f},{base} {area} {pts[-1][0]:.1f},{base}" fill="{c}" '
                       f'fill-opacity="0.18" stroke="none"/>')
        out.append(f'<polyline class="mark" points="{" ".join(f"{x:.1f},{y:.1f}" for x, y in pts)}" fill="none" '
                   f'stroke="{c}" stroke-width="2.2" stroke-linejoin="round"/>')
        r = 3.2 if n <= 80 else 0
        for i, (x, y) in enumerate(pts):
            out.append(f'<circle cx="{x:.1f}" cy="{y:.1f}" r="{r or 6}" fill="{c}" fill-opacity="{1 if r else 0}">'
                       f'<title>{escape(name)}: {fmt_num(vals[i])} {escape(unit)} '
                       f'({_bucket_label(series, i)})</title></circle>')
    _x_axis(out, series, n)
    out.append("</svg>")
    return "\n".join(out) + legend([(name, color(k)) for k, name in enumerate(names)])


def ranked_bars(rows: list[TxnRow], chart_id: str, label: str, unit: str) -> str:
    """Horizontal bars, one per transaction, longest first, labelled with where it starts."""
    if not rows:
        return empty_chart(chart_id, label, "no transactions")
    row_h, left = 26, 300
    height = TOP + row_h * len(rows) + 28
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {WIDTH} {height}" width="100%" role="img" '
           f'aria-labelledby="{chart_id}-t" class="chart-svg">', f'<title id="{chart_id}-t">{escape(label)}</title>',
           f'<rect x="0" y="0" width="{WIDTH}" height="{height}" fill="#ffffff"/>']
    top = max(r.measure for r in rows) or 1
    plot_w = WIDTH - left - 110
    for k, r in enumerate(rows):
        y = TOP + k * row_h
        w = max(2.0, plot_w * r.measure / top)
        out.append(f'<text x="{left - 10}" y="{y + 16}" text-anchor="end" class="tick">{escape(r.where)}</text>')
        out.append(f'<rect class="mark" x="{left}" y="{y + 3}" width="{w:.1f}" height="{row_h - 8}" '
                   f'fill="{color(k if k < 1 else 0)}" fill-opacity="{1 - 0.05 * min(k, 10):.2f}">'
                   f'<title>{escape(r.where)}: {fmt_num(r.measure)} {escape(unit)}, {r.rows:,} rows, {escape(r.start)}'
                   f'{(", " + escape(r.detail)) if r.detail else ""}</title></rect>')
        shown_unit = unit[:-1] if r.measure == 1 and unit.endswith("s") and len(unit) > 1 else unit
        out.append(f'<text x="{left + w + 6:.1f}" y="{y + 16}" class="value">{fmt_num(r.measure)} '
                   f'{escape(shown_unit)}</text>')
    out.append(f'<line x1="{left}" y1="{TOP - 4}" x2="{left}" y2="{TOP + row_h * len(rows)}" stroke="#8a9099"/>')
    out.append("</svg>")
    return "\n".join(out)


def legend(items: list[tuple[str, str]]) -> str:
    spans = "".join(f'<span class="key"><i style="background:{c}"></i>{escape(name)}</span>' for name, c in items)
    return f'<div class="legend">{spans}</div>'
