"""A self-contained HTML page of the gates' results (`binlake quality report`): one section per batch and stage,
each expectation with its outcome, the observed value and a sample of failing values. No external assets."""

from __future__ import annotations

import html
import json
from collections import defaultdict
from datetime import UTC, datetime

import pyarrow as pa

from ..lake.validations import read_validations

_CSS = """
body{font-family:system-ui,sans-serif;margin:2em;color:#222}
h1{font-size:1.4em} h2{font-size:1.1em;margin-top:1.6em}
table{border-collapse:collapse;width:100%;margin:.4em 0 1em}
th,td{border:1px solid #ccc;padding:.25em .5em;text-align:left;vertical-align:top;font-size:.9em}
th{background:#f2f2f2} .ok{color:#176317} .fail{color:#a40000;font-weight:600}
tr.fail td{background:#fff0f0} code{font-size:.85em;word-break:break-all}
.summary span{margin-right:1.5em}
"""


def _cell(value) -> str:
    return html.escape("" if value is None else str(value))


def _pretty(text: str | None) -> str:
    if not text or text in ("null", "[]"):
        return ""
    try:
        value = json.loads(text)
    except ValueError:
        return _cell(text)
    return f"<code>{_cell(json.dumps(value, default=str)[:600])}</code>"


def render(validations: pa.Table, title: str = "binlake quality gates", batch: int | None = None) -> str:
    rows = validations.to_pylist()
    if batch is not None:
        rows = [r for r in rows if r["batch"] == batch]
    runs: dict[tuple, list[dict]] = defaultdict(list)
    for r in rows:
        runs[(r["batch"], r["checked_at"], r["run_id"], r["stage"])].append(r)
    failed_runs = sum(1 for rs in runs.values() if not all(r["success"] for r in rs))
    parts = [f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>{_cell(title)}</title>"
             f"<style>{_CSS}</style></head><body><h1>{_cell(title)}</h1>",
             f"<p class='summary'><span>{len(runs)} gate run(s)</span><span class='fail'>{failed_runs} failed</span>"
             f"<span>{len(rows)} expectation results</span>"
             f"<span>rendered {datetime.now(UTC).isoformat(timespec='seconds')}</span></p>"]
    for (b, at, run_id, stage), rs in sorted(runs.items(), key=lambda kv: (kv[0][0], kv[0][1]), reverse=True):
        ok = all(r["success"] for r in rs)
        seconds = rs[0]["gate_seconds"]
        parts.append(f"<h2 id='{_cell(run_id)}'>batch {b} &middot; {_cell(stage)} &middot; "
                     f"<span class='{'ok' if ok else 'fail'}'>{'passed' if ok else 'FAILED'}</span> "
                     f"<small>({_cell(at)}, {seconds:.2f} s, pipeline {_cell(rs[0]['pipeline'])})</small></h2>")
        parts.append("<table><tr><th>table</th><th>gate</th><th>expectation</th><th>arguments</th><th>result</th>"
                     "<th>unexpected</th><th>observed</th><th>sample</th></tr>")
        for r in sorted(rs, key=lambda r: (r["success"], r["table"], r["gate"])):
            cls = "ok" if r["success"] else "fail"
            parts.append(
                f"<tr class='{cls}'><td>{_cell(r['table'])}</td><td>{_cell(r['gate'])}<br><small>"
                f"{_cell(r['description'])}</small></td><td>{_cell(r['expectation'])}</td>"
                f"<td>{_pretty(r['kwargs'])}</td><td class='{cls}'>{'pass' if r['success'] else 'FAIL'}"
                f"{'<br>' + _cell(r['error']) if r['error'] else ''}</td><td>{_cell(r['unexpected_count'])}</td>"
                f"<td>{_pretty(r['observed'])}</td><td>{_pretty(r['sample'])}</td></tr>")
        parts.append("</table>")
    if not runs:
        parts.append("<p>No gate results recorded yet.</p>")
    parts.append("</body></html>")
    return "\n".join(parts)


def write_report(engine, lake: str, out: str, batch: int | None = None) -> int:
    """Render the lake's validations table into `out`; returns the number of results shown."""
    data = read_validations(engine, lake)
    page = render(data, f"binlake quality gates: {lake}", batch)
    with open(out, "w", encoding="utf-8") as f:
        f.write(page)
    return data.num_rows if batch is None else sum(1 for b in data.column("batch").to_pylist() if b == batch)
