"""The decoder's service functions: what the CLI, Spark jobs and Airflow tasks call."""

from __future__ import annotations

import gc
import os
import re
import time
from collections.abc import Callable, Iterator, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import TextIO

from .decoder import BinlogDecoder, DecodeOptions, event_type_counts
from .output import write_jsonl, write_rollback, write_sql
from .records import EventRecord, RowChange
from .stats import BinlogStats, stats_report

FORMATS = ("jsonl", "sql", "rollback")
_SEQ = re.compile(r"(\d+)(?:\.gz)?$")


def parse_time(text: str) -> int:
    """ISO 8601 to epoch seconds; UTC unless the text carries a zone."""
    t = text.strip()
    if t.endswith("Z"):
        t = t[:-1] + "+00:00"
    try:
        dt = datetime.fromisoformat(t)
    except ValueError:
        raise ValueError(f"not an ISO 8601 time: {text!r} (example: 2024-05-01T12:00:00Z)") from None
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=UTC)
    return int(dt.timestamp())


def sequence_number(path: str | Path) -> int:
    """The numeric suffix of a binlog file name (mysql-bin.000042 -> 42); -1 when there is none."""
    m = _SEQ.search(Path(path).name)
    return int(m.group(1)) if m else -1


def order_files(paths: Sequence[str | Path], sort: bool) -> list[str]:
    files = [str(p) for p in paths]
    if sort:
        files.sort(key=lambda p: (sequence_number(p), Path(p).name))
    return files


def build_options(
    start_position: int | None = None,
    stop_position: int | None = None,
    start_time: str | None = None,
    stop_time: str | None = None,
    databases: str | Sequence[str] | None = None,
    tables: str | None = None,
    ops: str | Sequence[str] | None = None,
    all_events: bool = False,
    commits: bool = False,
) -> DecodeOptions:
    def split(v, option: str):
        if v is None:
            return None
        items = v.split(",") if isinstance(v, str) else list(v)
        kept = {i.strip() for i in items if i.strip()}
        if not kept:  # an empty filter would keep nothing and end with exit 0
            raise ValueError(f"{option} is empty: name at least one (or leave the option out)")
        return kept

    for option, value in (("--start-time", start_time), ("--stop-time", stop_time)):
        if value is not None and not value.strip():
            raise ValueError(f"{option} is empty: give an ISO 8601 time (or leave the option out)")
    op_set = split(ops, "--ops")
    if op_set is not None:
        bad = op_set - {"insert", "update", "delete"}
        if bad:
            raise ValueError(f"--ops accepts insert, update, delete; got {', '.join(sorted(bad))}")
    return DecodeOptions(
        start_position=start_position,
        stop_position=stop_position,
        start_time=parse_time(start_time) if start_time else None,
        stop_time=parse_time(stop_time) if stop_time else None,
        databases=split(databases, "--databases"),
        tables=re.compile(tables) if tables else None,
        ops=op_set,
        all_events=all_events,
        commits=commits,
    )


def iter_changes(files: Sequence[str | Path], options: DecodeOptions | None = None) -> Iterator[RowChange | EventRecord]:
    """Decode files in the given order."""
    return BinlogDecoder(options).decode_files(files)


def decode_to(files: Sequence[str | Path], out: TextIO, fmt: str = "jsonl", options: DecodeOptions | None = None,
              progress: Callable[[str, int], None] | None = None) -> tuple[int, BinlogDecoder]:
    """Write decoded changes of `files` to `out` in `fmt`; returns (records written, the decoder). `progress`,
    when given, is told (file name, position) now and then."""
    if fmt not in FORMATS:
        raise ValueError(f"unknown format {fmt!r}; choose one of {', '.join(FORMATS)}")
    decoder = BinlogDecoder(options)
    records = decoder.decode_files(files)
    if progress is not None:
        records = _reporting(records, progress, 4096)
    if fmt == "jsonl":
        n = write_jsonl(records, out)
    elif fmt == "sql":
        n = write_sql(records, out)
    else:
        n = write_rollback(records, out)
    return n, decoder


def _reporting(items: Iterator, progress: Callable[[str, int], None], every: int) -> Iterator:
    """Pass items through, telling `progress` the (file, pos) of every `every`-th one."""
    for i, item in enumerate(items):
        if i % every == 0:
            progress(item.file, item.pos)
        yield item


def compute_stats(files: Sequence[str | Path], options: DecodeOptions | None = None, top: int = 10,
                  progress: Callable[[str, int], None] | None = None) -> dict:
    """Decode every value of `files` and report counts, transactions and throughput. `progress`: as decode_to."""
    opts = options or DecodeOptions()
    opts.commits = True
    decoder = BinlogDecoder(opts)
    filtered = opts.databases is not None or opts.tables is not None or opts.ops is not None
    stats = BinlogStats(top=top, filtered=filtered)
    started = time.perf_counter()
    items = decoder.decode_files_batched(files)
    # The decoder and the tallies make many containers and no reference cycles: the cyclic collector, which would
    # only rescan the items in flight (about 6% of a binlog of small transactions), stays off while they run.
    collecting = gc.isenabled()
    gc.disable()
    try:
        stats.consume_batched(_reporting(items, progress, 64) if progress is not None else items)
    finally:
        if collecting:
            gc.enable()
    elapsed = time.perf_counter() - started
    size = sum(os.path.getsize(f) for f in files)
    report = stats_report(stats, decoder.results, event_type_counts(decoder.event_counts),
                          decoder.events_per_second, elapsed, size)
    # Rows events of tables whose TABLE_MAP could not be read: not counted above, reported here.
    report["table_errors"] = table_error_lines(decoder.table_errors)
    return report


def table_error_lines(errors: Sequence) -> list[str]:
    """One line per table and file for UnreadableTableMap errors: the first error and how many events it held."""
    groups: dict[tuple[str, str, str], list] = {}
    for e in errors:
        groups.setdefault((e.file, e.db, e.table), []).append(e)
    out = []
    for group in groups.values():
        first = group[0]
        more = f" ({len(group)} rows events held back, the last at {group[-1].pos})" if len(group) > 1 else ""
        out.append(f"{first}{more}")
    return out
