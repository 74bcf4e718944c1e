"""A report for binlog files, from the `binlake stats` report dictionary (binlake/binlog/stats.py)."""

from __future__ import annotations

import time
from typing import Any

from .charts import fmt_duration
from .model import ReportData, Series, TxnRow


def _txn(t: dict[str, Any], measure: float) -> TxnRow:
    return TxnRow(f"{t['file']}:{t['pos']}", t["rows"], measure, t["start"],
                  (f"gtid {t['gtid']}" if t.get("gtid") else "") + f" {t['bytes']:,} bytes")


def report_from_stats(stats: dict[str, Any], now: float | None = None) -> ReportData:
    s = stats["series"]
    start, span = s["start_epoch"], s["span_s"]
    per_second = [c / span for c in s["transactions"]]
    files = stats["files"]
    names = ", ".join(f["file"] for f in files[:4]) + (f" and {len(files) - 4} more" if len(files) > 4 else "")
    facts = [("row changes", f"{stats['rows']:,}"), ("transactions", f"{stats['transactions']:,}"),
             ("tables", f"{len(stats['tables']):,}"), ("files", f"{len(files):,}"),
             ("bytes", f"{stats['bytes']:,}"), ("DDL events", f"{stats['ddl_events']:,}")]
    if start is not None:
        last = start + span * s["buckets"]
        facts.append(("time span", fmt_duration(s["buckets"] * span)))
        age = (now if now is not None else time.time()) - last
        facts.append(("newest change's age now", fmt_duration(age)))
    tables = [(t, c.get("insert", 0), c.get("update", 0), c.get("delete", 0)) for t, c in stats["tables"].items()]
    file_rows = [[f["file"], str(f["server_version"]), f"{f['events']:,}", f"{f['rows']:,}",
                  f"{f['end']} at {f['end_pos']}" + (" (in use)" if f.get("in_use") else "")] for f in files]
    return ReportData(
        title="binlake stats",
        subtitle=f"Binlog files {names}: {stats['rows']:,} row changes in {stats['transactions']:,} transactions.",
        facts=facts,
        volume=Series(start, span, {t: list(v) for t, v in s["tables"].items()}),
        transactions=Series(start, span, {"transactions/s": per_second}),
        lag=Series(start, span, {"max": s["commit_delay_max_s"], "mean": s["commit_delay_mean_s"]}),
        lag_title="Commit delay (first event to commit)",
        lag_note="Per bucket of commit time: how long transactions took on the source from their first event to "
                 "their commit, by the server's timestamps (whole seconds). Replicas and ingest see a change no "
                 "earlier than its commit.",
        largest=[_txn(t, t["rows"]) for t in stats["largest_transactions"]],
        largest_title="Largest transactions (row changes)",
        longest=[_txn(t, t["duration_s"]) for t in stats["longest_transactions"]],
        longest_title="Longest transactions (seconds from first event to commit)",
        longest_unit="s",
        tables=tables,
        extra=[("Files", ["file", "server", "events", "rows", "read ended"], file_rows)],
    )
