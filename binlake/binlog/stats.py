"""`binlake stats`: row counts per table and operation, transaction sizes and durations, throughput over time."""

from __future__ import annotations

import heapq
from collections import Counter, defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from .columnar import ColumnarPairs
from .output import format_ts
from .records import EventRecord, RowChange


@dataclass
class TxnInfo:
    file: str
    pos: int
    gtid: str | None
    rows: int
    bytes: int
    first_ts: int
    last_ts: int

    @property
    def duration(self) -> int:
        return max(0, self.last_ts - self.first_ts)

    def as_dict(self) -> dict[str, Any]:
        return {"file": self.file, "pos": self.pos, "gtid": self.gtid, "rows": self.rows, "bytes": self.bytes,
                "start": format_ts(self.first_ts), "duration_s": self.duration}


@dataclass
class BinlogStats:
    top: int = 10
    rows_by_table: dict[str, Counter] = field(default_factory=lambda: defaultdict(Counter))
    rows_per_second: Counter = field(default_factory=Counter)
    table_seconds: dict[str, Counter] = field(default_factory=lambda: defaultdict(Counter))
    commits_per_second: Counter = field(default_factory=Counter)
    delay_max: Counter = field(default_factory=Counter)
    delay_sum: Counter = field(default_factory=Counter)
    transactions: int = 0
    statements: int = 0
    ddl: int = 0
    _largest: list = field(default_factory=list)
    _longest: list = field(default_factory=list)
    _seq: int = 0
    _open_first_ts: int | None = None  # earliest row event time of the transaction being read
    # With --databases/--tables/--ops, only transactions holding a kept row change count, sized by those rows.
    filtered: bool = False
    _open_rows: int = 0

    def add(self, r: RowChange | EventRecord) -> None:
        if type(r) is RowChange:
            self.rows_by_table[r.table.qualified_name][r.op] += 1
            self.rows_per_second[r.ts] += 1
            self.table_seconds[r.table.qualified_name][r.ts] += 1
            self._open_rows += 1
            if self._open_first_ts is None or r.ts < self._open_first_ts:
                self._open_first_ts = r.ts
            return
        if r.kind == "commit":
            s = r.info.get("summary")
            if s is None:
                return
            kept, self._open_rows = self._open_rows, 0
            if self.filtered and not kept:
                self._open_first_ts = None
                return
            self.transactions += 1
            # MariaDB (and MySQL) write the GTID event at commit, with the commit time: the transaction began no
            # later than its earliest row event.
            first = s.first_ts if self._open_first_ts is None else min(s.first_ts, self._open_first_ts)
            self._open_first_ts = None
            rows = kept if self.filtered else s.rows
            last = s.last_ts
            duration = last - first if last > first else 0
            self._seq += 1
            seq = -self._seq
            self.commits_per_second[last] += 1
            if duration:
                if duration > self.delay_max[last]:
                    self.delay_max[last] = duration
                self.delay_sum[last] += duration
            # The transaction's TxnInfo is made only when it enters a top list (most do not). Heap entries are
            # (key, TxnInfo); keys are unique (seq).
            t = None
            top = self.top
            heap = self._largest
            key = (rows, s.bytes, seq)
            if len(heap) < top or key > heap[0][0]:
                t = TxnInfo(r.file, r.txn_pos if r.txn_pos is not None else r.pos, r.gtid, rows, s.bytes, first, last)
                if len(heap) < top:
                    heapq.heappush(heap, (key, t))
                else:
                    heapq.heapreplace(heap, (key, t))
            heap = self._longest
            key = (duration, rows, seq)
            if len(heap) < top or key > heap[0][0]:
                if t is None:
                    t = TxnInfo(r.file, r.txn_pos if r.txn_pos is not None else r.pos, r.gtid, rows, s.bytes,
                                first, last)
                if len(heap) < top:
                    heapq.heappush(heap, (key, t))
                else:
                    heapq.heapreplace(heap, (key, t))
        elif r.kind == "statement":
            self.statements += 1
        elif r.kind == "ddl":
            self.ddl += 1

    def consume(self, records: Iterable[RowChange | EventRecord]) -> BinlogStats:
        for r in records:
            self.add(r)
        return self

    def consume_batched(self, items: Iterable) -> BinlogStats:
        """Consume decode_files_batched output: a rows event's batch is counted at once."""
        add = self.add
        # Rows by (table, operation, second), folded into rows_by_table, rows_per_second and table_seconds at the
        # end: one count per rows event instead of three.
        counts: dict[tuple, int] = {}
        get = counts.get
        try:
            for item in items:
                if type(item) is not EventRecord and type(item) is not RowChange:  # a RowBatch: one rows event
                    pairs = item.pairs
                    n = pairs.n if type(pairs) is ColumnarPairs else len(pairs)
                    if n:
                        ts = item.ts
                        key = (item.table.qualified_name, item.op, ts)
                        counts[key] = get(key, 0) + n
                        self._open_rows += n
                        first = self._open_first_ts
                        if first is None or ts < first:
                            self._open_first_ts = ts
                else:
                    add(item)
        finally:
            by_table, per_second, table_seconds = self.rows_by_table, self.rows_per_second, self.table_seconds
            for (table, op, ts), n in counts.items():
                by_table[table][op] += n
                per_second[ts] += n
                table_seconds[table][ts] += n
        return self

    @property
    def largest(self) -> list[TxnInfo]:
        return [t for _, t in sorted(self._largest, reverse=True)]

    @property
    def longest(self) -> list[TxnInfo]:
        return [t for _, t in sorted(self._longest, reverse=True)]

    @property
    def total_rows(self) -> int:
        return sum(sum(c.values()) for c in self.rows_by_table.values())


def timeline(per_second: dict[int, int], buckets: int = 60) -> list[tuple[int, int, int]]:
    """Group per-second counts into at most `buckets` equal spans: (start ts, span seconds, count)."""
    if not per_second:
        return []
    lo, hi = min(per_second), max(per_second)
    span = max(1, -(-(hi - lo + 1) // buckets))
    out: Counter = Counter()
    for ts, n in per_second.items():
        out[lo + (ts - lo) // span * span] += n
    return [(ts, span, out[ts]) for ts in sorted(out)]


def time_series(stats: BinlogStats, buckets: int = 60) -> dict[str, Any]:
    """Per-table rows, commits and commit delay on one grid of equal time buckets (for charts).

    The commit delay of a transaction is the time from its first event to its commit event (the server's
    timestamps); per bucket of commit time the maximum and the mean are given.
    """
    seconds = set(stats.rows_per_second) | set(stats.commits_per_second)
    if not seconds:
        return {"start": None, "start_epoch": None, "span_s": 1, "buckets": 0, "tables": {}, "transactions": [],
                "commit_delay_max_s": [], "commit_delay_mean_s": []}
    lo, hi = min(seconds), max(seconds)
    span = max(1, -(-(hi - lo + 1) // buckets))
    n = (hi - lo) // span + 1

    def bucketed(per_second: dict[int, int], combine=lambda a, b: a + b) -> list[int]:
        out = [0] * n
        for ts, v in per_second.items():
            i = (ts - lo) // span
            out[i] = combine(out[i], v)
        return out

    commits = bucketed(stats.commits_per_second)
    delay_sum = bucketed(stats.delay_sum)
    return {
        "start": format_ts(lo),
        "start_epoch": lo,
        "span_s": span,
        "buckets": n,
        "tables": {t: bucketed(c) for t, c in sorted(stats.table_seconds.items())},
        "transactions": commits,
        "commit_delay_max_s": bucketed(stats.delay_max, max),
        "commit_delay_mean_s": [round(s / c, 3) if c else 0 for s, c in zip(delay_sum, commits, strict=True)],
    }


def stats_report(stats: BinlogStats, decoder_results: list, event_counts: Counter, events_per_second: dict[int, int],
                 elapsed: float, size_bytes: int) -> dict[str, Any]:
    rows_tl = {ts: n for ts, _, n in timeline(stats.rows_per_second)}
    return {
        "files": [
            {"file": r.name, "server_version": r.server_version, "events": r.events, "rows": r.rows,
             "end": r.end.status if r.end else None, "end_pos": r.end.pos if r.end else None, "in_use": r.in_use}
            for r in decoder_results
        ],
        "events": sum(event_counts.values()),
        "event_types": dict(sorted(event_counts.items())),
        "rows": stats.total_rows,
        "tables": {t: dict(sorted(c.items())) for t, c in sorted(stats.rows_by_table.items())},
        "transactions": stats.transactions,
        "statement_events": stats.statements,
        "ddl_events": stats.ddl,
        "largest_transactions": [t.as_dict() for t in stats.largest],
        "longest_transactions": [t.as_dict() for t in stats.longest],
        "events_over_time": [{"start": format_ts(ts), "seconds": s, "events": n}
                             for ts, s, n in timeline(events_per_second)],
        "rows_over_time": [{"start": format_ts(ts), "rows": n} for ts, n in sorted(rows_tl.items())],
        "series": time_series(stats),
        "decode_seconds": round(elapsed, 3),
        "bytes": size_bytes,
        "rows_per_second": round(stats.total_rows / elapsed) if elapsed > 0 else None,
        "mb_per_second": round(size_bytes / elapsed / 1e6, 2) if elapsed > 0 else None,
    }


def _shown(text: Any) -> str:
    """A name from the binlog (file, table, version, GTID) for the terminal: control characters, C0 and C1 (U+0080..
    U+009F, e.g. U+009B, a terminal's CSI) alike, as escapes, so no name can drive the terminal or break a line."""
    text = str(text)
    return text if text.isprintable() else "".join(ch if ch.isprintable() else repr(ch)[1:-1] for ch in text)


def render_text(report: dict[str, Any]) -> str:
    """The human text of a stats report; names are escaped here only (the JSON report keeps them as they are)."""
    lines = [_headline(report)]
    for f in report["files"]:
        lines.append(f"  {_shown(f['file'])}: {_shown(f['server_version'])}, {f['events']} events, {f['rows']} rows, "
                     f"ended {f['end']} at {f['end_pos']}")
    lines.append("")
    lines.append(f"{'table':40} {'insert':>10} {'update':>10} {'delete':>10}")
    for t, c in report["tables"].items():
        lines.append(f"{_shown(t):40} {c.get('insert', 0):>10} {c.get('update', 0):>10} {c.get('delete', 0):>10}")
    lines.append("")
    lines.append("largest transactions (rows, bytes):")
    for t in report["largest_transactions"]:
        lines.append(f"  {_shown(t['file'])}:{t['pos']}  {t['rows']} rows  {t['bytes']} bytes  {t['start']}  "
                     f"{_shown(t['gtid'] or '')}")
    lines.append("longest transactions (first event to commit):")
    for t in report["longest_transactions"]:
        lines.append(f"  {_shown(t['file'])}:{t['pos']}  {t['duration_s']} s  {t['rows']} rows  {t['start']}")
    lines.append("")
    lines.append("events over time:")
    peak = max((e["events"] for e in report["events_over_time"]), default=0)
    for e in report["events_over_time"]:
        bar = "#" * (round(40 * e["events"] / peak) if peak else 0)
        lines.append(f"  {e['start']} +{e['seconds']}s {e['events']:>9} {bar}")
    lines.append("")
    lines += _closing(report)
    return "\n".join(lines)


def _headline(report: dict[str, Any]) -> str:
    return (f"files: {len(report['files'])}  events: {report['events']}  rows: {report['rows']}  "
            f"transactions: {report['transactions']}  statement events: {report['statement_events']}  "
            f"DDL: {report['ddl_events']}")


def _closing(report: dict[str, Any]) -> list[str]:
    lines = [f"event types: {', '.join(f'{k}={v}' for k, v in report['event_types'].items())}"]
    if report["rows_per_second"] is not None:
        lines.append(f"decoded {report['bytes']} bytes in {report['decode_seconds']} s: "
                     f"{report['rows_per_second']} rows/s, {report['mb_per_second']} MB/s")
    return lines


def render_rich(report: dict[str, Any]):
    """The same report as rich tables (`binlake stats` on a terminal); names escaped as in render_text."""
    # rich.table is imported here, not at the top: this module is part of `binlake decode`'s start-up.
    from rich.console import Group
    from rich.table import Table
    from rich.text import Text

    def table(title: str, *columns: str) -> Table:
        t = Table(title=title, title_justify="left")
        for i, name in enumerate(columns):
            t.add_column(name, justify="left" if i == 0 or name in ("start", "GTID", "version") else "right")
        return t

    files = table(_headline(report), "file", "version", "events", "rows", "ended", "at")
    for f in report["files"]:
        files.add_row(Text(_shown(f["file"])), Text(_shown(f["server_version"])), str(f["events"]), str(f["rows"]),
                      str(f["end"]), str(f["end_pos"]))
    tables = table("row changes", "table", "insert", "update", "delete")
    for t, c in report["tables"].items():
        tables.add_row(Text(_shown(t)), *(str(c.get(op, 0)) for op in ("insert", "update", "delete")))
    largest = table("largest transactions", "at", "rows", "bytes", "start", "GTID")
    for t in report["largest_transactions"]:
        largest.add_row(Text(f"{_shown(t['file'])}:{t['pos']}"), str(t["rows"]), str(t["bytes"]), str(t["start"]),
                        Text(_shown(t["gtid"] or "")))
    longest = table("longest transactions (first event to commit)", "at", "seconds", "rows", "start")
    for t in report["longest_transactions"]:
        longest.add_row(Text(f"{_shown(t['file'])}:{t['pos']}"), str(t["duration_s"]), str(t["rows"]),
                        str(t["start"]))
    over_time = table("events over time", "start", "seconds", "events", "")
    peak = max((e["events"] for e in report["events_over_time"]), default=0)
    for e in report["events_over_time"]:
        over_time.add_row(str(e["start"]), f"+{e['seconds']}", str(e["events"]),
                          Text("#" * (round(40 * e["events"] / peak) if peak else 0), justify="left"))
    return Group(files, tables, largest, longest, over_time, *(Text(line) for line in _closing(report)))
