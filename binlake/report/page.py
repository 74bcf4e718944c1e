"""The report page: one HTML file with its styles, its data and the chart scripts inline. The charts are Vega-Lite
specifications (binlake/report/charts.py) drawn by vega-embed; the Vega, Vega-Lite and vega-embed scripts come
from the vl-convert-python package and are written into the page, so it opens without a network."""

from __future__ import annotations

import functools
import json
from html import escape
from typing import Any

from . import charts
from .model import ReportData

STYLE = """
body { font: 14px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, "DejaVu Sans", sans-serif; color: #1f2328;
       background: #f4f6f8; margin: 0; }
main { max-width: 1000px; margin: 0 auto; padding: 20px 16px 40px; }
h1 { font-size: 24px; margin: 8px 0 2px; }
h2 { font-size: 17px; margin: 0 0 4px; }
p.sub, p.note { color: #57606a; margin: 0 0 10px; }
.facts { display: grid; grid-template-columns: repeat(auto-fill, minmax(170px, 1fr)); gap: 10px; margin: 16px 0; }
.fact { background: #fff; border: 1px solid #d8dee4; border-radius: 8px; padding: 10px 12px; }
.fact b { display: block; font-size: 20px; }
.fact span { color: #57606a; font-size: 12px; }
section.chart { background: #fff; border: 1px solid #d8dee4; border-radius: 8px; padding: 14px 16px 10px;
                margin: 14px 0; }
.vis { width: 100%; }
table { border-collapse: collapse; width: 100%; background: #fff; font-size: 13px; }
th, td { border-bottom: 1px solid #e3e6ea; padding: 5px 8px; text-align: left; }
td.n, th.n { text-align: right; font-variant-numeric: tabular-nums; }
footer { color: #8a9099; font-size: 12px; margin-top: 24px; }
"""

# Draws every chart of the page (specs in the #binlake-charts JSON block) into its section's .vis element; the
# body's data-charts tells when they are drawn (or why not).
DRAW = """
const specs = JSON.parse(document.getElementById("binlake-charts").textContent);
Promise.all(Object.entries(specs).map(([id, spec]) =>
  vegaEmbed("#" + id + " .vis", spec, {renderer: "svg", actions: false})))
  .then(() => { document.body.dataset.charts = "drawn"; })
  .catch((err) => { document.body.dataset.charts = "failed: " + err; });
"""


@functools.cache
def chart_script() -> str:
    """vega-embed with Vega and Vega-Lite (the version altair writes) and DRAW, bundled into one module script."""
    # altair takes over a second to import: only a report page needs it, not the commands that import this module.
    import altair as alt
    import vl_convert

    version = ".".join(alt.SCHEMA_VERSION.lstrip("v").split(".")[:2])
    script = vl_convert.javascript_bundle(DRAW, vl_version=version)
    if "</script" in script.lower():  # cannot happen with today's bundle; would end the element early
        raise RuntimeError("the Vega bundle contains '</script' and cannot be inlined")
    return script


def _section(chart_id: str, title: str, note: str) -> str:
    note_html = f'<p class="note">{escape(note)}</p>' if note else ""
    return (f'<section class="chart" id="{chart_id}" data-chart="{chart_id}"><h2>{escape(title)}</h2>{note_html}'
            f'<div class="vis"></div></section>')


def _table(title: str, header: list[str], rows: list[list[str]], numeric: set[int]) -> str:
    head = "".join(f'<th class="{"n" if i in numeric else ""}">{escape(h)}</th>' for i, h in enumerate(header))
    body = "".join("<tr>" + "".join(f'<td class="{"n" if i in numeric else ""}">{escape(str(c))}</td>'
                                    for i, c in enumerate(r)) + "</tr>" for r in rows)
    return (f'<section class="chart"><h2>{escape(title)}</h2><table><thead><tr>{head}</tr></thead>'
            f"<tbody>{body}</tbody></table></section>")


def _json_in_html(value: Any) -> str:
    """JSON that cannot end its <script> element ("</" written as "<\\/", still the same JSON)."""
    return json.dumps(value, separators=(",", ":"), default=str).replace("</", "<\\/").replace("<!--", "<\\!--")


def render_html(data: ReportData) -> str:
    facts = "".join(f'<div class="fact"><b>{escape(v)}</b><span>{escape(k)}</span></div>' for k, v in data.facts)
    specs = {
        "chart-volume": ("Row changes per table over time", "Stacked by table; hover a bar for the figure.",
                         charts.stacked_bars(data.volume, "row changes")),
        "chart-tps": ("Transactions per second", "Mean over each bucket, by commit time.",
                      charts.lines(data.transactions, "transactions/s")),
        "chart-largest": (data.largest_title, "", charts.ranked_bars(data.largest, "rows")),
        "chart-longest": (data.longest_title, "", charts.ranked_bars(data.longest, data.longest_unit)),
        "chart-lag": (data.lag_title, data.lag_note, charts.lines(data.lag, "seconds")),
    }
    parts = [_section(chart_id, title, note) for chart_id, (title, note, _) in specs.items()]
    table_rows = [[t, f"{i:,}", f"{u:,}", f"{d:,}", f"{i + u + d:,}"] for t, i, u, d in data.tables]
    parts.append(_table("Row changes per table", ["table", "inserts", "updates", "deletes", "total"], table_rows,
                        {1, 2, 3, 4}))
    for title, header, rows in data.extra:
        parts.append(_table(title, header, rows, set()))
    spec_json = _json_in_html({chart_id: spec for chart_id, (_, _, spec) in specs.items()})
    return (f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
            f'<meta name="viewport" content="width=device-width, initial-scale=1">'
            f"<title>{escape(data.title)}</title><style>{STYLE}</style></head>\n"
            f'<body><main><h1>{escape(data.title)}</h1><p class="sub">{escape(data.subtitle)}</p>'
            f'<div class="facts">{facts}</div>\n' + "\n".join(parts) +
            "\n<footer>Generated by binlake. Self-contained: the chart scripts (Vega, Vega-Lite, vega-embed) and "
            "data are in this file; it needs no network.</footer></main>\n"
            f'<script type="application/json" id="binlake-charts">{spec_json}</script>\n'
            f'<script type="module">{chart_script()}</script>\n'
            "</body></html>\n")
