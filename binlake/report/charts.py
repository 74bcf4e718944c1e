"""The report's charts as Vega-Lite specifications built with altair: stacked bars over time, lines over time,
ranked horizontal bars. The page draws them with vega-embed (binlake/report/page.py); hovering a mark shows its
figure (tooltips).
"""

from __future__ import annotations

from typing import Any

import altair as alt
import pandas as pd

from .model import Series, TxnRow

WIDTH, HEIGHT = "container", 240
PALETTE = ["#2f6fb0", "#e07b29", "#3a9a5b", "#c23b3b", "#8a5cb8", "#8c6d3f", "#d16aa8", "#6f7378", "#b3a32a",
           "#2aa6b8"]
OTHER_COLOR = "#b9bec4"
EMPTY = "no data in this range"


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


def _spec(chart: alt.TopLevelMixin) -> dict[str, Any]:
    return chart.properties(width=WIDTH).configure_view(stroke=None).configure_axis(
        labelColor="#57606a", titleColor="#57606a", gridColor="#e3e6ea").to_dict()


def empty(message: str = EMPTY) -> dict[str, Any]:
    """A chart that only says there is nothing to draw."""
    chart = alt.Chart(pd.DataFrame({"message": [message]})).mark_text(fontSize=15, color="#8a9099").encode(
        text="message:N")
    return _spec(chart.properties(height=80))


def _time_frame(series: Series, columns: dict[str, list[float]]) -> tuple[pd.DataFrame, alt.X, alt.X | None]:
    """Long-form rows (bucket, start, end, series, value) and the x encodings: UTC time when the buckets have a
    start time, the bucket number otherwise."""
    rows = [(i, name, v) for name, vals in columns.items() for i, v in enumerate(vals)]
    frame = pd.DataFrame(rows, columns=["bucket", "series", "value"])
    if series.start_epoch is None:
        return frame, alt.X("bucket:O", title="bucket"), None
    frame["start"] = pd.to_datetime(series.start_epoch + frame["bucket"] * series.span_s, unit="s", utc=True)
    frame["end"] = frame["start"] + pd.Timedelta(seconds=series.span_s)
    title = f"time (UTC), {series.span_s} s per bucket"
    return frame, alt.X("start:T", title=title, scale=alt.Scale(type="utc")), alt.X2("end:T")


def _tooltip_time(series: Series) -> list[alt.Tooltip]:
    if series.start_epoch is None:
        return [alt.Tooltip("bucket:Q")]
    return [alt.Tooltip("utcyearmonthdatehoursminutesseconds(start):T", title="bucket start (UTC)")]


def stacked_bars(series: Series, unit: str, max_series: int = 9) -> dict[str, Any]:
    """One bar per bucket, stacked by series (the largest `max_series` series, the rest as 'other')."""
    n = series.buckets
    if n == 0 or not any(any(v) for v in series.values.values()):
        return empty()
    ranked = sorted(series.values.items(), key=lambda kv: -sum(kv[1]))
    layers = dict(ranked[:max_series])
    colors = [PALETTE[i % len(PALETTE)] for i in range(len(layers))]
    rest = ranked[max_series:]
    if rest:
        layers[f"other ({len(rest)} tables)"] = [sum(v[i] for _, v in rest if i < len(v)) for i in range(n)]
        colors.append(OTHER_COLOR)
    frame, x, x2 = _time_frame(series, layers)
    frame = frame[frame["value"] > 0]  # one mark per series and bucket that has changes
    order = list(layers)
    frame = frame.assign(rank=frame["series"].map(order.index)).sort_values(["bucket", "rank"])
    frame["top"] = frame.groupby("bucket")["value"].cumsum()  # stacked in the legend's order, largest first
    frame["bottom"] = frame["top"] - frame["value"]
    encodings = {"x": x, "y": alt.Y("top:Q", title=unit), "y2": alt.Y2("bottom:Q"),
                 "color": alt.Color("series:N", title=None, sort=order,
                                    scale=alt.Scale(domain=order, range=colors), legend=alt.Legend(orient="bottom")),
                 "tooltip": [alt.Tooltip("series:N", title="table"), alt.Tooltip("value:Q", title=unit, format=","),
                             *_tooltip_time(series)]}
    if x2 is not None:
        encodings["x2"] = x2
    chart = alt.Chart(frame).mark_bar(binSpacing=0, stroke="#ffffff", strokeWidth=0.5).encode(**encodings)
    return _spec(chart.properties(height=HEIGHT))


def lines(series: Series, unit: str) -> dict[str, Any]:
    """One line per series over the buckets, with a point per bucket on the first series (hover targets)."""
    if series.buckets == 0:
        return empty()
    names = list(series.values)
    frame, x, _ = _time_frame(series, series.values)
    if series.start_epoch is not None:
        frame["mid"] = frame["start"] + pd.Timedelta(seconds=series.span_s / 2)
        x = alt.X("mid:T", title=x.to_dict()["title"], scale=alt.Scale(type="utc"))
    color = alt.Color("series:N", title=None, sort=names,
                      scale=alt.Scale(domain=names, range=[PALETTE[i % len(PALETTE)] for i in range(len(names))]),
                      legend=alt.Legend(orient="bottom"))
    tooltip = [alt.Tooltip("series:N", title="series"), alt.Tooltip("value:Q", title=unit, format=",.3~f"),
               *_tooltip_time(series)]
    base = alt.Chart(frame).encode(x=x, y=alt.Y("value:Q", title=unit), color=color, tooltip=tooltip)
    line = base.mark_line(strokeWidth=2.2, interpolate="linear")
    points = base.transform_filter(alt.datum.series == names[0]).mark_point(filled=True, size=30 if
                                                                              series.buckets <= 80 else 8)
    return _spec(alt.layer(line, points).properties(height=HEIGHT))


def ranked_bars(rows: list[TxnRow], unit: str) -> dict[str, Any]:
    """Horizontal bars, one per transaction, largest first, labelled with where it starts."""
    if not rows:
        return empty("no transactions")
    frame = pd.DataFrame({"where": [r.where for r in rows], "measure": [r.measure for r in rows],
                          "rows": [r.rows for r in rows], "start": [r.start for r in rows],
                          "detail": [r.detail for r in rows], "rank": list(range(len(rows)))})
    frame["label"] = [f"{_num(m)} {unit[:-1] if m == 1 and unit.endswith('s') and len(unit) > 1 else unit}"
                      for m in frame["measure"]]
    y = alt.Y("where:N", title=None, sort=alt.EncodingSortField("rank", order="ascending"),
              axis=alt.Axis(labelLimit=320))
    base = alt.Chart(frame).encode(y=y, x=alt.X("measure:Q", title=unit, axis=alt.Axis(tickCount=8)))
    bars = base.mark_bar(color=PALETTE[0], height={"band": 0.7}).encode(
        tooltip=[alt.Tooltip("where:N", title="transaction"), alt.Tooltip("measure:Q", title=unit, format=","),
                 alt.Tooltip("rows:Q", format=","), alt.Tooltip("start:N", title="started"),
                 alt.Tooltip("detail:N")])
    labels = base.mark_text(align="left", dx=5, color="#1f2328").encode(text="label:N")
    return _spec(alt.layer(bars, labels).properties(height=alt.Step(26)))


def _num(v: float) -> str:
    return f"{int(v):,}" if v == int(v) else f"{v:.3g}"
