"""A report for a lake (one batch or all of them), from the history tables and the control table.

Reads `_commit_ts`, `_op`, `_batch_id`, `_binlog_file`, `_txn_pos` and `_pos` of every `<db>.<table>__history`,
the commit times of the history tables' Delta versions (which batch each committed: binlake's application
transactions) and the control table `_binlake/files`.
"""

from __future__ import annotations

import time
from collections import Counter, defaultdict
from datetime import UTC, datetime
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc

from ..lake.control import ControlTable
from ..lake.engines import get_engine
from ..lake.layout import LakeLayout
from ..lake.query import lake_tables
from .charts import fmt_duration
from .model import ReportData, Series, TxnRow

COLUMNS = ["_op", "_commit_ts", "_batch_id", "_binlog_file", "_txn_pos", "_pos"]


class NothingToReport(ValueError):
    """The lake has no history rows for the requested batch."""


def _append_times(history: list, pipeline: str, batches: set[int]) -> dict[int, float]:
    """Batch -> epoch seconds of the first history commit that recorded it.

    Per-table app transaction versions are batch * 1000 + step (binlake/lake/ingest.py: a batch may commit several
    times to one table); versions that are plain batch numbers are understood too.
    """
    scaled: dict[int, float] = {}
    plain: dict[int, float] = {}
    for h in history:
        if h["timestamp"] is None:
            continue
        for txn in h["txns"]:
            if not txn["app_id"].startswith(f"binlake/{pipeline}/history/"):
                continue
            when = h["timestamp"] / 1000
            v = txn["version"]
            scaled[v // 1000] = min(scaled.get(v // 1000, when), when)
            plain[v] = min(plain.get(v, when), when)
    return scaled if batches <= scaled.keys() or not batches <= plain.keys() else plain


def _grid(seconds: list[int], buckets: int) -> tuple[int | None, int, int]:
    if not seconds:
        return None, 1, 0
    lo, hi = min(seconds), max(seconds)
    span = max(1, -(-(hi - lo + 1) // buckets))
    return lo, span, (hi - lo) // span + 1


def report_from_lake(lake: str, batch: int | None = None, engine: str | None = None, pipeline: str = "default",
                     buckets: int = 60, top: int = 10, now: float | None = None) -> ReportData:
    if not Path(lake).is_dir():
        raise ValueError(f"--lake {lake}: no such directory")
    eng = get_engine(engine)
    parts: list[pa.Table] = []
    for name, path in sorted(lake_tables(lake).items()):
        if not name.endswith("__history"):
            continue
        table = eng.read(path, columns=COLUMNS)
        if batch is not None:
            table = table.filter(pc.equal(table["_batch_id"], batch))
        if table.num_rows == 0:
            continue
        secs = pc.divide(pc.cast(pc.cast(table["_commit_ts"], pa.timestamp("us")), pa.int64()), 1_000_000)
        ids = pc.unique(table["_batch_id"])
        appended = _append_times(eng.history(path), pipeline, set(ids.to_pylist()))
        when = pa.array([appended.get(b) for b in ids.to_pylist()], pa.float64())
        visible = pc.take(when, pc.index_in(table["_batch_id"], value_set=ids))
        parts.append(table.select(["_op", "_batch_id", "_binlog_file", "_txn_pos", "_pos"])
                     .append_column("_sec", secs)
                     .append_column("_lag", pc.subtract(visible, pc.cast(secs, pa.float64())))
                     .append_column("_table", pa.repeat(pa.scalar(name.removesuffix("__history")), table.num_rows)))
    if not parts:
        where = f"batch {batch}" if batch is not None else "any batch"
        raise NothingToReport(f"--lake {lake}: no history rows for {where}")
    rows = pa.concat_tables(parts)
    first, last = pc.min_max(rows["_sec"]).values()
    lo, span, n = _grid([first.as_py(), last.as_py()], buckets)
    rows = rows.append_column("_bucket", pc.divide(pc.subtract(rows["_sec"], lo), span))

    volume: dict[str, list[int]] = defaultdict(lambda: [0] * n)
    for r in rows.group_by(["_table", "_bucket"]).aggregate([("_bucket", "count")]).to_pylist():
        volume[r["_table"]][r["_bucket"]] = r["_bucket_count"]
    lag_max, lag_mean = [0.0] * n, [0.0] * n
    for r in rows.group_by("_bucket").aggregate([("_lag", "max"), ("_lag", "mean")]).to_pylist():
        if r["_lag_max"] is not None:
            lag_max[r["_bucket"]], lag_mean[r["_bucket"]] = r["_lag_max"], r["_lag_mean"]
    lag_max_all = pc.max(rows["_lag"]).as_py()

    by_table: dict[str, Counter] = defaultdict(Counter)
    for r in rows.group_by(["_table", "_op"]).aggregate([("_op", "count")]).to_pylist():
        by_table[r["_table"]][r["_op"]] = r["_op_count"]

    txns = rows.group_by(["_binlog_file", "_txn_pos"]).aggregate(
        [("_sec", "max"), ("_pos", "count"), ("_pos", "max"), ("_table", "count_distinct")])
    txns = txns.append_column("_extent", pc.subtract(txns["_pos_max"], txns["_txn_pos"]))
    commits = [0] * n
    bucket_of_commit = pc.divide(pc.subtract(txns["_sec_max"], lo), span)
    for r in pa.table({"b": bucket_of_commit}).group_by("b").aggregate([("b", "count")]).to_pylist():
        commits[r["b"]] = r["b_count"]

    def top_by(column: str) -> list[dict]:
        order = [(column, "descending"), ("_binlog_file", "ascending"), ("_txn_pos", "ascending")]
        return txns.take(pc.sort_indices(txns, sort_keys=order)[:top]).to_pylist()

    def row(t: dict, measure: float) -> TxnRow:
        when = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(t["_sec_max"]))
        return TxnRow(f"{t['_binlog_file']}:{t['_txn_pos']}", t["_pos_count"], measure, when,
                      f"{t['_table_count_distinct']} table(s)")

    largest = top_by("_pos_count")
    longest = top_by("_extent")
    n_txns = txns.num_rows

    batches = sorted(pc.unique(rows["_batch_id"]).to_pylist())
    control = ControlTable(eng, LakeLayout(lake, pipeline)).load()
    files = sorted((s for s in control.values() if batch is None or s.batch_id == batch),
                   key=lambda s: (s.instance, s.lineage, s.file_seq))
    file_rows = [[s.instance, s.file, s.status, str(s.batch_id), f"{s.end_pos:,}", "yes" if s.complete else "no",
                  str(s.attempts), s.last_error or ""] for s in files]
    newest = last.as_py()
    if batch is not None or len(batches) == 1:
        label = f"batch {batches[0]}"
    else:
        label = f"batches {batches[0]} to {batches[-1]}"
    facts = [("row changes", f"{rows.num_rows:,}"), ("transactions", f"{n_txns:,}"),
             ("tables", f"{len(by_table):,}"), ("files in the control table", f"{len(files):,}"),
             ("batches", f"{len(batches):,}"),
             ("max ingest lag", fmt_duration(lag_max_all) if lag_max_all is not None else "n/a"),
             ("newest change", datetime.fromtimestamp(newest, tz=UTC).strftime("%Y-%m-%d %H:%M:%S")),
             ("newest change's age now", fmt_duration((now if now is not None else time.time()) - newest))]
    return ReportData(
        title=f"binlake lake report: {label}",
        subtitle=f"Lake {lake}: {rows.num_rows:,} row changes of {len(by_table)} table(s) in {label}.",
        facts=facts,
        volume=Series(lo, span, dict(sorted(volume.items()))),
        transactions=Series(lo, span, {"transactions/s": [c / span for c in commits]}),
        lag=Series(lo, span, {"max": [round(v, 1) for v in lag_max], "mean": [round(v, 1) for v in lag_mean]}),
        lag_title="Ingest lag (source commit to lake commit)",
        lag_note="Per bucket of source commit time: seconds from the transaction's commit on the source to the "
                 "history table's Delta commit that made it visible in the lake.",
        largest=[row(t, t["_pos_count"]) for t in largest],
        largest_title="Largest transactions (row changes in the lake)",
        longest=[row(t, t["_extent"]) for t in longest],
        longest_title="Longest transactions in the binlog (bytes from BEGIN to the last rows event)",
        longest_unit="bytes",
        tables=[(t, c["insert"] + c["snapshot"], c["update"], c["delete"]) for t, c in sorted(by_table.items())],
        extra=[("Files (control table)", ["instance", "file", "status", "batch", "end_pos", "complete", "attempts",
                                          "last error"], file_rows)],
    )
