"""Decode one range of one binlog file into history tables: the unit of work of a Spark task (or a local loop).

Only whole transactions count: rows of a transaction still open at the end of the range are left for the next
run, which resumes at `end` (the end of the last complete transaction).
"""

from __future__ import annotations

import gc
import io
import threading
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace

import pyarrow as pa

from ..binlog.decoder import BinlogDecoder, DecodeOptions, RowBatch, event_type_counts
from ..binlog.records import EventRecord
from ..binlog.stream import open_binlog
from .convert import ConversionStats
from .current import key_names, merge_input
from .history import CommittedBatch, history_table, with_commit_ts
from .staging import (
    ColumnCodecs,
    delete_piece,
    keep_merge_input,
    merge_input_room,
    read_aside,
    write_aside,
    write_net,
    write_piece,
)

SEQ_FILE_SHIFT = 40  # binlake.lake.current.event_seq
FLUSH_ROWS = 32_768  # rows held as Python values before they are converted to Arrow (open transactions too)
PROGRESS_BYTES = 1 << 20  # progress callbacks about every MiB of binlog
# Decoded history held as Arrow in process before a range with a staging folder writes it there instead (and every
# later piece as soon as it is built): what bounds ingest memory whatever the batch or transaction size.
KEEP_BYTES = 160 << 20


class SchemaMissing(ValueError):
    """Rows of a table no schema describes: ingesting them would mean guessing column names."""


@dataclass
class TableResult:
    """One table's share of a range: history rows and its last TABLE_MAP.

    In process the history stays Arrow tables (no copy); pickled (a Spark task's result) it travels as Arrow IPC
    stream bytes."""

    history: list[pa.Table] = field(default_factory=list)
    table_map: object = None  # binlake.binlog.tablemap.TableMap of the last change (columns, key, schema)
    versions: dict = field(default_factory=dict)  # schema version id -> the TableMap decoded under it
    # Staged ranges (binlake.lake.staging): the history rows are in Parquet pieces, these are their manifests.
    staged: list[dict] = field(default_factory=list)
    # Runs of one schema version in binlog order: [version, first seq, last seq] (the merge's segments).
    runs: list[list] = field(default_factory=list)

    @property
    def history_ipc(self) -> list[bytes]:
        return [_ipc(table) for table in self.history]

    def __getstate__(self) -> dict:
        return {"history_ipc": self.history_ipc, "table_map": self.table_map, "versions": self.versions,
                "staged": self.staged, "runs": self.runs}

    def __setstate__(self, state: dict) -> None:
        self.history = [read_ipc(data) for data in state["history_ipc"]]
        self.table_map = state["table_map"]
        self.versions = state["versions"]
        self.staged = state.get("staged", [])
        self.runs = state.get("runs", [])


@dataclass
class RangeResult:
    file: str
    file_seq: int
    start: int
    end: int  # end of the last complete transaction: where the next run resumes
    end_status: str
    reached_file_end: bool
    transactions: int = 0
    tables: dict[str, TableResult] = field(default_factory=dict)
    counts: Counter = field(default_factory=Counter)  # (table, op) -> rows
    statements: list[dict] = field(default_factory=list)  # statement-based DML seen
    ddl: list[dict] = field(default_factory=list)
    conversions: ConversionStats = field(default_factory=ConversionStats)
    event_types: dict[str, int] = field(default_factory=dict)  # event type name -> count (quality gates)
    # Tables whose changes could not be decoded (schema mismatch, no schema, values that do not convert): table ->
    # {"error", "file", "pos"} of the first failure. Their rows are left out of the range entirely; the batch
    # holds them back alone (binlake.lake.holds) and every other table goes on.
    held: dict[str, dict] = field(default_factory=dict)


def _ipc(table: pa.Table) -> bytes:
    sink = io.BytesIO()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    return sink.getvalue()


def read_ipc(data: bytes) -> pa.Table:
    return pa.ipc.open_stream(io.BytesIO(data)).read_all()


_gc_lock = threading.Lock()
_gc_pausers = 0
_gc_was_enabled = False


@contextmanager
def cyclic_gc_paused() -> Iterator[None]:
    """Pause Python's cyclic garbage collector while a range is decoded (reentrant, thread-safe).

    Decoded rows are held until they become Arrow columns; every collection then rescans all of them (and the
    whole heap), which cost a quarter of the decode-and-build time. The rows hold no reference cycles, so
    nothing accumulates: reference counting frees them, and collection resumes when the last pauser ends.
    """
    global _gc_pausers, _gc_was_enabled
    with _gc_lock:
        if _gc_pausers == 0:
            _gc_was_enabled = gc.isenabled()
            gc.disable()
        _gc_pausers += 1
    try:
        yield
    finally:
        with _gc_lock:
            _gc_pausers -= 1
            if _gc_pausers == 0 and _gc_was_enabled:
                gc.enable()


def decode_range(path: str, name: str, file_seq: int, start: int | None, stop: int | None, batch_id: int,
                 resolver=None, tables=None, databases=None,
                 progress: Callable[[int], None] | None = None, stage: str | None = None,
                 keep_bytes: int | None = None, text: bool = False) -> RangeResult:
    """Decode [start, stop) of one file (whole transactions only) into per-table history rows. `progress` is
    told the position reached (end of the last committed transaction), about every MiB. With `stage` (a batch's
    staging folder, binlake.lake.staging) the rows are written there as Parquet pieces and the result carries
    only their manifests; pieces are written as soon as the range holds more than KEEP_BYTES of them, so memory
    stays bounded whatever the range or a transaction holds. With `stage` and `keep_bytes` (the in-process
    executors), the rows stay Arrow in the result unless they outgrow `keep_bytes`: then the range is staged.
    `text` (the Kafka sink): DECIMAL and DATE/DATETIME/TIMESTAMP columns as their text (history_table's `text`)."""
    with cyclic_gc_paused():
        return _decode_range(path, name, file_seq, start, stop, batch_id, resolver, tables, databases, progress,
                             stage, keep_bytes, text)


def in_process(tasks: list, decode: Callable[..., RangeResult], stage: str | None) -> list[RangeResult]:
    """Run decode tasks one after the other in this process: `decode(task, keep_bytes)` decodes one with the bytes
    of history it may still hold as Arrow. Together the results hold at most KEEP_BYTES of it (past that, a range
    writes its pieces to `stage` as it goes). Then, with a `stage`, every result's history is staged: written once,
    as the Parquet pieces the history append links into the table as they are, each piece's merge input kept in
    memory for the merge (binlake.lake.staging). Without one, the history stays Arrow in the results."""
    out: list[RangeResult] = []
    held = 0
    for task in tasks:
        res = decode(task, max(0, KEEP_BYTES - held) if stage is not None else None)
        held += sum(t.nbytes for tr in res.tables.values() for t in tr.history)
        out.append(res)
    if stage is not None:
        codecs: dict[str, ColumnCodecs] = {}
        for res in out:
            stage_history(res, stage, codecs)
    return out


def stage_history(res: RangeResult, stage: str, codecs: dict[str, ColumnCodecs] | None = None) -> None:
    """Write a result's in-memory history rows to the stage, a piece per schema version (each table result then
    carries manifests only), keeping each keyed piece's merge input (binlake.lake.current.merge_input) for the
    merge while the budget allows. `codecs`: per table, what its pieces learned of their columns' compression."""
    codecs = {} if codecs is None else codecs
    for tr in res.tables.values():
        for n, rows in enumerate(tr.history):
            version = rows.column("_schema_version")[0].as_py() if rows.num_rows else None
            tr.staged.append(_stage_piece(stage, tr.versions.get(version, tr.table_map), res.file_seq, res.start,
                                          f"r{n}", rows, codecs, away=False))
        tr.history = []


def _stage_piece(stage: str, tm, file_seq: int, start: int, n: int | str, rows: pa.Table,
                 codecs: dict[str, ColumnCodecs], away: bool) -> dict:
    """Write a history piece of table map `tm` to the stage (binlake.lake.staging.write_piece; `codecs`: per table,
    what its pieces learned of their columns' compression) and return its manifest. A keyed piece's merge input is
    computed now, from the rows at hand, for the merge of this batch to take rather than read the piece back:
    written beside the piece when `away` from the driver (write_net), kept in memory in process while the budget
    allows (keep_merge_input)."""
    keys = key_names(tm) if tm.primary_key else None
    manifest = write_piece(stage, tm.qualified_name, file_seq, start, n, rows, keys,
                           codecs.setdefault(tm.qualified_name, ColumnCodecs()))
    if not keys or not (away or merge_input_room()):
        return manifest
    try:
        net = merge_input(rows, tm)
    except Exception:  # the merge computes it again from the piece, and reports the error
        return manifest
    if away:
        write_net(stage, manifest, net)
    else:
        keep_merge_input(stage, manifest, keys, net)
    return manifest


def tracked_executor(report: Callable[[int, int], None]) -> Callable:
    """An in-process executor (the ingest Executor signature) that reports (bytes decoded, bytes in all tasks)."""

    def execute(tasks: list, batch: int, resolver, filters, stage: str | None = None) -> list[RangeResult]:
        tables, databases = filters
        spans = [(stop if stop is not None else Path(path).stat().st_size) - (start or 4)
                 for path, _name, _seq, start, stop in tasks]
        total = sum(spans)
        before = [sum(spans[:i]) for i in range(len(spans))]
        report(0, total)

        def decode(i: int, keep: int | None) -> RangeResult:
            path, name, seq, start, stop = tasks[i]
            first, span = start or 4, spans[i]

            def at(pos: int) -> None:
                report(before[i] + min(max(pos - first, 0), span), total)

            res = decode_range(path, name, seq, start, stop, batch, resolver, tables, databases, at, stage, keep)
            report(before[i] + span, total)
            return res

        return in_process(list(range(len(tasks))), decode, stage)

    return execute


def _decode_range(path: str, name: str, file_seq: int, start: int | None, stop: int | None, batch_id: int,
                  resolver, tables, databases, progress: Callable[[int], None] | None,
                  stage: str | None = None, keep_bytes: int | None = None, text: bool = False) -> RangeResult:
    opts = DecodeOptions(start_position=start if start and start > 4 else None, stop_position=stop, commits=True,
                         table_resolver=resolver, tables=tables, databases=databases, allow_truncated=False,
                         on_schema_mismatch="skip", text_values=text)  # one table's mismatch holds back that table only
    decoder = BinlogDecoder(opts)
    result = RangeResult(name, file_seq, start or 4, start or 4, "", False)
    pending: list[RowBatch] = []  # rows events of the open transaction
    committed: dict[int, list[CommittedBatch]] = {}  # id(table map) -> rows events
    maps: dict[int, object] = {}
    latest: dict[str, object] = {}  # table -> its TABLE_MAP at the latest committed change
    runs: dict[str, list[list]] = {}  # table -> [version, first seq, last seq] in binlog order
    built: dict[int, list[pa.Table]] = {}  # id(table map) -> history pieces already converted
    written: dict[int, list[dict]] = {}  # id(table map) -> manifests of the pieces written to `stage`, in order
    codecs: dict[str, ColumnCodecs] = {}  # table -> which of its columns snappy pays for (learned from its pieces)
    held = 0  # committed rows not yet converted
    reported = result.end
    limit = (KEEP_BYTES if keep_bytes is None else keep_bytes) if stage is not None else None
    spill = SimpleNamespace(on=limit is not None and limit <= 0, held=0, n=0, open_n=0)

    def hold(table: str, error: str, pos: int) -> None:
        result.held.setdefault(table, {"error": error, "file": name, "pos": pos})

    # The open transaction's rows already converted (it outgrew FLUSH_ROWS): (key, table map, Arrow piece with a
    # provisional commit time (or, spilling, the manifest of that piece written aside), its rows per operation,
    # its rows events' positions), given their commit time when the transaction commits.
    open_built: list[tuple[int, object, pa.Table | dict, Counter, list[int]]] = []
    pending_rows = 0

    def write(key: int, piece: pa.Table) -> None:
        """A committed history piece written to the stage, its manifest kept in binlog order (_stage_piece; away
        from the driver, keep_bytes None: a Spark executor)."""
        written.setdefault(key, []).append(_stage_piece(stage, maps[key], file_seq, result.start, spill.n, piece,
                                                        codecs, away=keep_bytes is None))
        spill.n += 1

    def keep_built(key: int, piece: pa.Table) -> None:
        """A committed history piece: held as Arrow, or written to the stage once the range outgrew its budget."""
        if spill.on:
            write(key, piece)
            return
        built.setdefault(key, []).append(piece)
        spill.held += piece.nbytes
        if limit is not None and spill.held > limit:
            start_spilling()

    def start_spilling() -> None:
        """Over budget: every held piece goes to the stage now, and every later one as it is built."""
        spill.on = True
        for key, pieces in built.items():
            write(key, pa.concat_tables(pieces) if len(pieces) > 1 else pieces[0])
        built.clear()
        for i, (key, tm, piece, ops, positions) in enumerate(open_built):
            if isinstance(piece, pa.Table):
                open_built[i] = (key, tm, write_open(tm, piece), ops, positions)
        spill.held = 0

    def write_open(tm, piece: pa.Table) -> dict:
        """A piece of the open transaction written aside (its commit time is not known yet)."""
        spill.open_n += 1
        return write_aside(stage, tm.qualified_name, file_seq, result.start, f"open-{spill.open_n}", piece)

    def keep(rows: RowBatch) -> bool:
        """Whether a rows event goes into history (else its table is, or is now, held back)."""
        tm = rows.table
        if tm.qualified_name in result.held:
            return False
        if tm.columns and tm.columns[0].name is None:
            hold(tm.qualified_name, "SchemaMissing: " + str(SchemaMissing(
                f"no schema names the columns of {tm.qualified_name} (the binlog has MINIMAL row "
                "metadata and neither a snapshot nor the files' DDL describe the table); take a DDL "
                "snapshot (binlake schema snapshot) and pass --schemas")), rows.pos)
            return False
        return True

    def note_run(tm, pos: int) -> None:
        seq = file_seq << SEQ_FILE_SHIFT | pos
        mine = runs.setdefault(tm.qualified_name, [])
        if mine and mine[-1][0] == tm.schema_version:
            mine[-1][2] = seq
        else:
            mine.append([tm.schema_version, seq, seq])

    def convert_open() -> None:
        """Convert the open transaction's rows now (a large transaction never piles up as Python values)."""
        flush()  # earlier transactions' rows first: pieces stay in binlog order
        groups: dict[int, list[CommittedBatch]] = {}
        for rows in pending:
            if keep(rows):
                maps[id(rows.table)] = rows.table
                groups.setdefault(id(rows.table), []).append(CommittedBatch(rows, 0, file_seq))
        for key, items in groups.items():
            table = maps[key].qualified_name
            if table in result.held:
                continue
            ops: Counter = Counter()
            for item in items:
                ops[item.batch.op] += len(item.batch.pairs)
            try:
                piece = history_table(items, batch_id, result.conversions, text)
            except (ValueError, TypeError, OverflowError, pa.ArrowException) as exc:
                hold(table, f"{type(exc).__name__}: {exc}", items[0].batch.pos)
                continue
            if spill.on:
                piece = write_open(maps[key], piece)
            else:
                spill.held += piece.nbytes
            open_built.append((key, maps[key], piece, ops, [item.batch.pos for item in items]))
        pending.clear()
        if not spill.on and limit is not None and spill.held > limit:
            start_spilling()

    def flush() -> None:
        # Convert held rows to Arrow now, so decoded Python objects never pile up (memory, and the cyclic GC
        # rescanning millions of live lists is what made building history slower than decoding).
        for key, items in committed.items():
            table = maps[key].qualified_name
            if table in result.held:
                continue
            try:
                piece = history_table(items, batch_id, result.conversions, text)
            except (ValueError, TypeError, OverflowError, pa.ArrowException) as exc:
                hold(table, f"{type(exc).__name__}: {exc}", items[0].batch.pos)
                continue
            keep_built(key, piece)
        committed.clear()

    with open_binlog(path) as f:
        for item in decoder.decode_stream_batched(f, name):
            if type(item) is RowBatch:
                if item.pairs:
                    pending.append(item)
                    pending_rows += len(item.pairs)
                    if pending_rows >= FLUSH_ROWS:
                        convert_open()
                        pending_rows = 0
                continue
            rec: EventRecord = item
            if rec.kind == "commit":
                for key, tm, piece, ops, positions in open_built:
                    if tm.qualified_name in result.held:
                        if isinstance(piece, dict):
                            delete_piece(stage, piece)
                        continue
                    if isinstance(piece, dict):  # written aside: stamped with the commit time, written again
                        aside = piece
                        piece = with_commit_ts(read_aside(stage, aside), rec.ts)
                        delete_piece(stage, aside)
                    else:
                        spill.held -= piece.nbytes
                        piece = with_commit_ts(piece, rec.ts)
                    keep_built(key, piece)
                    for op, n in ops.items():
                        result.counts[(tm.qualified_name, op)] += n
                    latest[tm.qualified_name] = tm
                    for pos in positions:
                        note_run(tm, pos)
                open_built.clear()
                pending_rows = 0
                for rows in pending:
                    tm = rows.table
                    if not keep(rows):
                        continue
                    key = id(tm)
                    maps[key] = tm
                    committed.setdefault(key, []).append(CommittedBatch(rows, rec.ts, file_seq))
                    result.counts[(tm.qualified_name, rows.op)] += len(rows.pairs)
                    held += len(rows.pairs)
                    latest[tm.qualified_name] = tm
                    note_run(tm, rows.pos)
                pending.clear()
                if held >= FLUSH_ROWS:
                    flush()
                    held = 0
                result.transactions += 1
                result.end = rec.end_pos if rec.end_pos is not None else result.end
                if progress is not None and result.end - reported >= PROGRESS_BYTES:
                    reported = result.end
                    progress(reported)
            elif rec.kind == "statement":
                result.statements.append({"file": name, "pos": rec.pos, **{k: rec.info.get(k) for k in
                                                                           ("database", "query")}})
            elif rec.kind == "ddl":
                result.ddl.append({"file": name, "pos": rec.pos, "database": rec.info.get("database"),
                                   "query": rec.info.get("query"), "file_seq": file_seq, "ts": rec.ts})
            elif rec.kind == "table_error":
                # A rows event of a table whose TABLE_MAP cannot be read (UnreadableTableMap, carrying db, table,
                # file, pos): that table alone is held back (binlake.lake.holds), its rows never skipped silently.
                err = decoder.table_errors[-1]
                hold(f"{err.db}.{err.table}", f"UnreadableTableMap: {err.reason}", err.pos)
    end = decoder.results[-1].end
    for skipped in decoder.skipped:  # the first event of each table the guard refused names the cause
        if skipped.reason != "rows event skipped" or skipped.table not in result.held:
            hold(skipped.table, "SchemaMismatch: " + skipped.reason, skipped.pos)
    result.event_types = event_type_counts(decoder.event_counts)
    if stop is not None and (pending or open_built):
        raise ValueError(f"{name}: the range [{start}, {stop}) ends inside a transaction; ranges must be cut at "
                         "transaction starts")
    if stop is not None and end is not None and end.status == "stop position":
        result.end = stop
    result.end_status = end.status if end else "complete"
    result.reached_file_end = stop is None and end is not None and end.status == "complete"
    if result.reached_file_end and not pending and not open_built:
        # Only non-transactional events (ROTATE, STOP) follow the last commit: the file is fully consumed.
        result.end = end.pos
    for _key, _tm, piece, _ops, _positions in open_built:  # a transaction the range ends inside: read again later
        if isinstance(piece, dict):
            delete_piece(stage, piece)
    flush()
    if stage is not None and keep_bytes is None and not spill.on and built:
        start_spilling()  # a task away from the driver: everything goes to the stage
    for key in [*built, *(k for k in written if k not in built)]:
        tm = maps[key]
        if tm.qualified_name in result.held:
            continue
        entry = result.tables.setdefault(tm.qualified_name, TableResult())
        if key in written:
            entry.staged.extend(written[key])
        if key in built:
            pieces = built[key]
            entry.history.append(pa.concat_tables(pieces) if len(pieces) > 1 else pieces[0])
        entry.versions[tm.schema_version] = tm
    for name, tm in latest.items():
        if name not in result.held:
            result.tables[name].table_map = tm
            result.tables[name].runs = runs.get(name, [])
    for (table, op) in list(result.counts):
        if table in result.held:
            del result.counts[(table, op)]
    return result
