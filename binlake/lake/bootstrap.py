"""Bootstrap: load existing rows into a lake, then let binlog ingest continue exactly where the data was read.

Each chunk (a primary-key range of one table) is read in its own consistent snapshot and tied to a binlog
position; its rows enter the lake as `snapshot` changes ordered at that position. Ingest then resumes at the
earliest chunk position. A binlog change ordered after a chunk's position wins over the chunk's rows, an older one
loses to them, so writes running during the bootstrap are neither lost nor applied twice, and chunks can be read in
parallel (Spark tasks) at different moments. No FLUSH TABLES WITH READ LOCK. Two ways to find the position:

- `snapshot` (MariaDB): the server reports the exact position of a consistent snapshot
  (binlog_snapshot_file/position, read inside the snapshot transaction). Rows are ordered there.
- `watermark` (MySQL and MariaDB): per chunk, observe a low watermark (the binlog position), optionally commit a
  write to a watermark table, open the snapshot and SELECT the chunk, observe a high watermark. Rows are ordered
  at the low watermark, so every binlog change after it (in particular those between low and high, which the
  SELECT may or may not have seen) is replayed over them: each carries the full row image, so replaying a change
  the SELECT already saw ends in the same row, and one it missed is applied, once, in binlog order. What the
  rows must reflect is every change before the low watermark; with the watermark write (committed after the low
  watermark was read), the server's binlog-ordered commit (binlog_order_commits=ON, the default) guarantees that
  those are visible to the snapshot. Without it, a transaction caught between its binlog write and its engine
  commit at the very moment the low watermark is read could be missed: use a watermark table where writes are
  allowed.
"""

from __future__ import annotations

import io
import os
import queue
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pymysql

from ..binlog.api import sequence_number
from ..binlog.decoder import RowBatch
from ..exitcodes import ExitCode
from ..schema.binlog_types import table_map_for
from ..schema.ddl import parse_create_table
from ..schema.model import TableDef
from ..schema.snapshot import binlog_position, connect_uri
from . import chunkread, staging
from .control import ControlTable, FileState
from .convert import ConversionStats, arrow_type
from .current import SEQ_FILE_SHIFT, current_schema, key_names, merge_input
from .engines import SEQ, DeltaEngine, get_engine
from .history import PARTITION_BY, CommittedBatch, history_table
from .layout import LakeLayout
from .pending import BatchStore

TEMPORAL = ("date", "datetime", "timestamp", "time")
METHODS = ("auto", "snapshot", "watermark")
DEFAULT_PART_ROWS = 100_000  # rows per record batch read and per file written


class BootstrapError(RuntimeError):
    pass


class ChunkReadError(BootstrapError):
    """The server (or the connection to it) failed while a chunk was read."""

    exit_code = ExitCode.UNAVAILABLE


@dataclass
class Chunk:
    database: str
    table: str
    ddl: str
    lower: object = None  # inclusive; None: from the start
    upper: object = None  # exclusive; None: to the end
    method: str = "snapshot"  # "snapshot" (MariaDB binlog_snapshot_*) or "watermark" (any server)
    watermark_table: str | None = None  # db.table written between the low watermark and the snapshot
    mariadb: bool = True  # the server's flavour: binlog column shapes differ (DATETIME2 ...)


@dataclass
class ChunkResult:
    chunk: Chunk
    binlog_file: str
    binlog_pos: int
    read_at: int
    rows: int
    ipc: bytes = field(repr=False, default=b"")
    high_file: str | None = None  # watermark method: the binlog position observed after the SELECT
    high_pos: int | None = None


def _select_list(tdef: TableDef) -> str:
    """Columns in binlake's value contract: temporal types as text (UTC session), BIT as an integer."""
    out = []
    for c in tdef.columns:
        name = "`" + c.name.replace("`", "``") + "`"
        if c.data_type in TEMPORAL:
            out.append(f"CAST({name} AS CHAR)")
        elif c.data_type == "bit":
            out.append(f"CAST({name} AS UNSIGNED)")
        elif c.data_type == "float":  # as text, a FLOAT has 6 digits, which do not always give its bits back
            out.append(f"CAST({name} AS DOUBLE)")
        elif c.data_type in ("inet4", "inet6", "uuid"):
            out.append(f"CAST({name} AS CHAR)")
        else:
            out.append(name)
    return ", ".join(out)


def read_chunk(uri: str, chunk: Chunk, batch_id: int) -> ChunkResult:
    """Read one chunk inside a consistent snapshot; return its rows as history-shaped Arrow (IPC) and position.
    (The whole chunk in memory: for executors that ship results; run_bootstrap's own readers stream parts.)"""
    reader = ChunkReader(uri, chunk, batch_id)
    parts = list(reader.parts())
    ipc = b""
    if parts:
        table = pa.concat_tables(parts)
        sink = io.BytesIO()
        with pa.ipc.new_stream(sink, table.schema) as w:
            w.write_table(table)
        ipc = sink.getvalue()
    reader.result.ipc = ipc
    return reader.result


class ChunkReader:
    """One chunk's rows as history-shaped Arrow tables of at most `part_rows` rows (`parts()`, a generator), read
    inside one consistent snapshot; `result` (position, row count, watermarks) is complete once it is exhausted.

    Rows go from the server to Arrow without a Python object per value (binlake/lake/chunkread.py) unless the
    table has a column that reader cannot take, or connectorx is missing: then the row-by-row reader (PyMySQL,
    an unbuffered cursor) is used, in parts too."""

    def __init__(self, uri: str, chunk: Chunk, batch_id: int, part_rows: int = DEFAULT_PART_ROWS,
                 stats: ConversionStats | None = None) -> None:
        if chunk.method not in METHODS[1:]:
            raise BootstrapError(f"bootstrap method {chunk.method!r}: expected one of {', '.join(METHODS[1:])}")
        self.uri, self.chunk, self.batch_id, self.part_rows = uri, chunk, batch_id, max(1, part_rows)
        self.stats = stats if stats is not None else ConversionStats()
        self.tdef = parse_create_table(chunk.ddl, chunk.database)
        self.tm = table_map_for(self.tdef, mariadb=chunk.mariadb)
        self.result = ChunkResult(chunk, "", 0, 0, 0)
        self.fast = chunkread.supported(self.tdef)
        self._conn = None  # the watermark method's connection (low watermark, watermark write, high watermark)
        self._stream: Iterator[pa.RecordBatch] | None = None  # the SELECT's record batches, once started

    @property
    def where(self) -> str:
        c = self.chunk
        bounds = "" if c.lower is None and c.upper is None else f" [{c.lower}, {c.upper})"
        return f"{c.database}.{c.table}{bounds}"

    def start(self) -> None:
        """Start reading without waiting for rows (the Arrow reader; a no-op otherwise or when started): the
        watermark method's low watermark (and watermark write), then the SELECT, whose rows connectorx receives
        in the background while the caller works on an earlier chunk. `parts()` starts the reader itself when
        nobody did; `close()` ends a reader whose parts are not wanted."""
        if not self.fast or self._stream is not None:
            return
        res, chunk = self.result, self.chunk
        snapshot = chunk.method == "snapshot"
        try:
            if chunk.method == "watermark":
                self._conn = connect_uri(self.uri)
                with self._conn.cursor() as cur:
                    res.binlog_file, res.binlog_pos = binlog_position(cur)  # the low watermark: rows ordered here
                    if chunk.watermark_table:
                        _write_watermark(cur, chunk)
            sql = chunkread.chunk_sql(self.tdef, chunk.database, chunk.table, chunk.lower, chunk.upper, snapshot,
                                      chunk.mariadb)
            res.read_at = int(time.time())
            self._stream = self._batches(sql, snapshot)
        except BaseException:
            self.close()
            raise

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def parts(self) -> Iterator[pa.Table]:
        if not self.fast:
            yield from self._row_parts()
            return
        res, chunk = self.result, self.chunk
        try:
            self.start()
            yield from self._arrow_parts()
            if chunk.method == "watermark":
                with self._conn.cursor() as cur:
                    res.high_file, res.high_pos = binlog_position(cur)
        finally:
            self.close()
        if chunk.method == "snapshot" and not res.binlog_file:
            # No row came, so no position with them: read the (empty) range again in a snapshot of its own,
            # which reports its position (and holds whatever rows a writer added meanwhile).
            yield from self._row_parts()

    def _arrow_parts(self) -> Iterator[pa.Table]:
        res, tm = self.result, self.tm
        snapshot = self.chunk.method == "snapshot"
        waiting: list[pa.RecordBatch] = []  # batches before the one carrying the snapshot's position (none, as
        # the server sends it with the first row; kept general)
        for batch in self._stream:
            if snapshot and not res.binlog_file:
                found = chunkread.snapshot_position(batch)
                if found is None:
                    waiting.append(batch)
                    continue
                if not found[0]:
                    raise self._no_position()
                res.binlog_file, res.binlog_pos = found
            for ready in [*waiting, batch]:
                values = chunkread.lake_columns(ready, tm, self.stats, 2 if snapshot else 0)
                yield chunkread.snapshot_history(values, tm, res.binlog_file, res.binlog_pos, res.read_at,
                                                 sequence_number(res.binlog_file), self.batch_id, res.rows)
                res.rows += ready.num_rows
            waiting = []
        if waiting:
            raise self._no_position()

    def _no_position(self) -> BootstrapError:
        return BootstrapError(f"{self.where}: the server reports no binlog_snapshot_file (is the binary log "
                              "enabled?)")

    def _batches(self, sql: str, snapshot: bool) -> Iterator[pa.RecordBatch]:
        """The SELECT's record batches, the query sent now; connectorx's failures (Rust panics are
        BaseExceptions) as one line."""
        stream = self._call(lambda: iter(_stream_select(self.uri, self.chunk.database, sql, snapshot,
                                                        self.part_rows)))

        def batches() -> Iterator[pa.RecordBatch]:
            while True:
                try:
                    yield self._call(lambda: next(stream))
                except StopIteration:
                    return

        return batches()

    def _call(self, fn):
        try:
            return fn()
        except (StopIteration, KeyboardInterrupt, SystemExit, GeneratorExit):
            raise
        except BaseException as exc:
            raise ChunkReadError(f"{self.where}: reading the chunk failed: {' '.join(str(exc).split())}") from exc

    def _row_parts(self) -> Iterator[pa.Table]:
        """PyMySQL, row by row (every type the binlog path knows), streamed from an unbuffered cursor."""
        res, chunk = self.result, self.chunk
        res.rows = 0
        conn = connect_uri(self.uri, cursorclass=pymysql.cursors.SSCursor)
        try:
            with conn.cursor() as cur:
                cur.execute("SET SESSION time_zone = '+00:00'")
                cur.execute("SET SESSION TRANSACTION ISOLATION LEVEL REPEATABLE READ")
                if chunk.method == "watermark":
                    res.binlog_file, res.binlog_pos = binlog_position(cur)
                    if chunk.watermark_table:
                        _write_watermark(cur, chunk)
                    cur.execute("START TRANSACTION WITH CONSISTENT SNAPSHOT")
                else:
                    cur.execute("START TRANSACTION WITH CONSISTENT SNAPSHOT")
                    res.binlog_file, res.binlog_pos = _snapshot_position(cur)
                res.read_at = int(time.time())
                seq = sequence_number(res.binlog_file)
                for rows in _select_chunk(cur, chunk, self.tdef, self.part_rows):
                    snapshot = RowBatch(res.binlog_file, res.binlog_pos, res.binlog_pos, 0, res.read_at, None,
                                        self.tm, "snapshot", [(None, list(r)) for r in rows])
                    part = history_table([CommittedBatch(snapshot, res.read_at, seq)], self.batch_id, self.stats)
                    if res.rows:
                        part = part.set_column(part.schema.get_field_index("_row"), "_row", pa.array(
                            np.arange(res.rows, res.rows + len(rows), dtype=np.int32)))
                    res.rows += len(rows)
                    yield part
                cur.execute("COMMIT")
                if chunk.method == "watermark":
                    res.high_file, res.high_pos = binlog_position(cur)
        finally:
            conn.close()


def _stream_select(uri: str, database: str, sql: str, snapshot: bool, batch_rows: int):
    """The chunk's SELECT as Arrow record batches (a seam: tests act between the SELECT and the high watermark)."""
    return chunkread.stream_select(uri, database, sql, snapshot, batch_rows)


def _snapshot_position(cur) -> tuple[str, int]:
    cur.execute("SHOW STATUS WHERE Variable_name IN ('binlog_snapshot_file', 'binlog_snapshot_position')")
    status = {k.lower(): v for k, v in cur.fetchall()}
    if "binlog_snapshot_file" not in status:
        raise BootstrapError("the server does not report binlog_snapshot_file/position (MariaDB does); use "
                             "--method watermark (or auto) on MySQL")
    return status["binlog_snapshot_file"], int(status["binlog_snapshot_position"])


def _write_watermark(cur, chunk: Chunk) -> None:
    """Commit one write after the low watermark: once it returns, every transaction the binlog holds before the
    low watermark is committed in the engine (binlog-ordered commit), hence visible to the snapshot."""
    db, _, table = chunk.watermark_table.partition(".")
    if not db or not table:
        raise BootstrapError(f"--watermark-table {chunk.watermark_table!r}: expected db.table")
    name = f"`{db.replace('`', '``')}`.`{table.replace('`', '``')}`"
    what = f"{chunk.database}.{chunk.table}:{chunk.lower}"[:250]
    cur.execute(f"INSERT INTO {name} (chunk, written) VALUES (%s, NOW(6)) "
                "ON DUPLICATE KEY UPDATE written = NOW(6)", (what,))


def ensure_watermark_table(uri: str, name: str) -> None:
    """Create the watermark table (db.table; the database must exist) when it is missing."""
    db, _, table = name.partition(".")
    if not db or not table:
        raise BootstrapError(f"--watermark-table {name!r}: expected db.table")
    conn = connect_uri(uri)
    try:
        with conn.cursor() as cur:
            cur.execute(f"CREATE TABLE IF NOT EXISTS `{db.replace('`', '``')}`.`{table.replace('`', '``')}` "
                        "(chunk VARCHAR(250) PRIMARY KEY, written DATETIME(6) NOT NULL)")
    finally:
        conn.close()


def _select_chunk(cur, chunk: Chunk, tdef: TableDef, part_rows: int = DEFAULT_PART_ROWS) -> Iterator[list]:
    """The chunk's rows, at most `part_rows` at a time (an unbuffered cursor: memory flat in chunk size)."""
    key = tdef.primary_key[0] if tdef.primary_key else None
    where, args = [], []
    if key is not None and chunk.lower is not None:
        where.append(f"`{key}` >= %s")
        args.append(chunk.lower)
    if key is not None and chunk.upper is not None:
        where.append(f"`{key}` < %s")
        args.append(chunk.upper)
    sql = f"SELECT {_select_list(tdef)} FROM `{chunk.database}`.`{chunk.table}`"
    if where:
        sql += " WHERE " + " AND ".join(where)
    cur.execute(sql, args)
    while True:
        rows = cur.fetchmany(part_rows)
        if not rows:
            return
        yield rows


def server_method(uri: str, method: str) -> tuple[str, bool]:
    """The method to use (`auto`: snapshot where the server reports snapshot positions, else watermark) and
    whether the server is MariaDB."""
    if method not in METHODS:
        raise BootstrapError(f"bootstrap method {method!r}: expected one of {', '.join(METHODS)}")
    conn = connect_uri(uri)
    try:
        with conn.cursor() as cur:
            cur.execute("SELECT VERSION()")
            mariadb = "mariadb" in str(cur.fetchone()[0]).lower()
            cur.execute("SHOW STATUS LIKE 'binlog_snapshot_file'")
            has_snapshot = cur.fetchone() is not None
    finally:
        conn.close()
    if method == "auto":
        method = "snapshot" if has_snapshot else "watermark"
    elif method == "snapshot" and not has_snapshot:
        raise BootstrapError("--method snapshot needs binlog_snapshot_file/position (MariaDB); this server does "
                             "not report them: use --method watermark")
    return method, mariadb


def plan_chunks(uri: str, tables: list[tuple[str, str]], chunk_rows: int, method: str = "snapshot",
                watermark_table: str | None = None, mariadb: bool = True) -> list[Chunk]:
    """Chunks per table: ranges of an integer primary key of about `chunk_rows` rows; one chunk otherwise."""
    how = {"method": method, "watermark_table": watermark_table, "mariadb": mariadb}
    conn = connect_uri(uri)
    out = []
    try:
        with conn.cursor() as cur:
            for db, table in tables:
                cur.execute(f"SHOW CREATE TABLE `{db}`.`{table}`")
                ddl = cur.fetchone()[1]
                tdef = parse_create_table(ddl, db)
                pk = tdef.primary_key
                integer = len(pk) == 1 and tdef.column(pk[0]).data_type in ("tinyint", "smallint", "mediumint",
                                                                             "int", "bigint")
                if not integer:
                    out.append(Chunk(db, table, ddl, **how))
                    continue
                lo, hi, count = _key_range(cur, db, table, pk[0], chunk_rows)
                if not count:
                    out.append(Chunk(db, table, ddl, **how))
                    continue
                pieces = max(1, -(-count // chunk_rows))
                step = max(1, -(-(hi - lo + 1) // pieces))
                bounds = list(range(lo, hi + 1, step))
                for i, b in enumerate(bounds):
                    out.append(Chunk(db, table, ddl, None if i == 0 else b,
                                     bounds[i + 1] if i + 1 < len(bounds) else None, **how))
    finally:
        conn.close()
    return out


ESTIMATED_CHUNKS = 10  # from this many chunks' rows on, the server's row estimate sizes the chunks


def _key_range(cur, db: str, table: str, key: str, chunk_rows: int) -> tuple:
    """The key's MIN and MAX and the table's rows: counted when the server's estimate (InnoDB's sampled
    statistics, within tens of percents) is under ESTIMATED_CHUNKS chunks, else the estimate. A COUNT(*) reads the
    whole table before the first chunk does (0.3-0.4 s of the server per 1,000,000 rows, minutes on a billion);
    chunks need their size only roughly (they are key ranges; rows are streamed in parts either way)."""
    cur.execute("SELECT TABLE_ROWS FROM information_schema.TABLES WHERE TABLE_SCHEMA = %s AND TABLE_NAME = %s",
                (db, table))
    found = cur.fetchone()
    estimate = int(found[0] or 0) if found else 0
    if estimate < ESTIMATED_CHUNKS * chunk_rows:
        cur.execute(f"SELECT MIN(`{key}`), MAX(`{key}`), COUNT(*) FROM `{db}`.`{table}`")
        return cur.fetchone()
    cur.execute(f"SELECT MIN(`{key}`), MAX(`{key}`) FROM `{db}`.`{table}`")
    lo, hi = cur.fetchone()
    return lo, hi, estimate if lo is not None else 0


ChunkExecutor = Callable[[str, list[Chunk], int], list[ChunkResult]]
Progress = Callable[[int, int, str], None]  # (done, total, what)


def local_chunks(uri: str, chunks: list[Chunk], batch_id: int, progress: Progress | None = None) -> list[ChunkResult]:
    """Every chunk read here, one after the other, whole (an executor for run_bootstrap's `executor`)."""
    out = []
    for i, chunk in enumerate(chunks):
        out.append(read_chunk(uri, chunk, batch_id))
        if progress:
            progress(i + 1, len(chunks), "chunks read")
    return out


@dataclass
class TablePlan:
    """Where one table's bootstrap rows go. Rows are written as Parquet files by whoever read them (a reader
    thread, a Spark executor) and committed by one process from the files' manifests: straight into the history
    table, and into a current table that did not exist when the bootstrap started (its chunks are disjoint key
    ranges read once, so there is nothing to merge). Otherwise (an existing current table; a lake the Parquet
    writer cannot reach; another engine) the rows are staged as files and the committing process appends or
    merges them through the engine, as the binlog path does."""

    database: str
    table: str
    ddl: str
    mariadb: bool
    history_path: str
    current_path: str
    stage: str  # folder for staged files
    history_direct: bool
    current_direct: bool
    # Per-column compression of the files written, learned as they are written (each process its own copy)
    history_codecs: staging.ColumnCodecs = field(default_factory=staging.ColumnCodecs, repr=False, compare=False)
    current_codecs: staging.ColumnCodecs = field(default_factory=staging.ColumnCodecs, repr=False, compare=False)

    def table_map(self):
        return table_map_for(parse_create_table(self.ddl, self.database), mariadb=self.mariadb)


@dataclass
class Staged:
    """Manifests of one part's files (no rows): files written into the history and current tables, and the
    part's history rows staged as a piece (binlake.lake.staging) where the engine must append or merge them."""

    index: int  # the chunk's position in the plan
    rows: int
    history: list[dict]
    current: list[dict]
    pieces: list[dict] = field(default_factory=list)


def stage_part(plan: TablePlan, part: pa.Table, index: int, tm=None) -> Staged:
    """Write one part's history rows (and current-table rows, for tables with a key) as Parquet files."""
    tm = tm or plan.table_map()
    keyed = bool(key_names(tm))
    # binlake's metadata dictionary-encoded (staging.repeated_columns): one value per part here
    history = staging.write_files(plan.history_path, _without_before(part), PARTITION_BY,
                                  staging.repeated_columns(part.schema), plan.history_codecs) \
        if plan.history_direct else []
    current = staging.write_files(plan.current_path, _current_rows(part, tm), codecs=plan.current_codecs) \
        if keyed and plan.current_direct else []
    pieces = []
    if not plan.history_direct or (keyed and not plan.current_direct):
        # Named by chunk and first row: a retried task rewrites its own piece.
        first = part.column("_row")[0].as_py() if part.num_rows else 0
        pieces.append(staging.write_piece(plan.stage, f"{plan.database}.{plan.table}", index, first,
                                          part.num_rows, part))
    return Staged(index, part.num_rows, history, current, pieces)


def _without_before(part: pa.Table) -> pa.Table:
    """A history part without its `_before` column when no row has a before image (snapshot rows never do): a
    Delta table's data file may leave out a nullable column of the table's schema, which every reader then reads as
    null (as after ADD COLUMNS), and encoding a struct of nulls cost 2-7% of the history file's writing."""
    before = part.column("_before")
    return part.drop_columns(["_before"]) if before.null_count == len(before) else part


def _read_staged(stage: str, pieces: list[dict]) -> pa.Table:
    return pa.concat_tables([staging.read_piece(stage, p) for p in pieces])


class _Committer:
    """Commits the parts' files, one table at a time, counting what is committed. Files of one table are
    gathered up to `commit_rows` rows per commit (staged ones up to `part_rows`, as they are read back), so
    commits and memory depend on neither chunk size nor table size.

    Versions: every commit of the bootstrap takes the next number from batch * 1000 on, under the table's app
    ids; the control row is recorded under `last_batch`, the batch number that covers them all, so the ingest
    after it (next batch) always commits above them."""

    def __init__(self, engine: DeltaEngine, layout: LakeLayout, batch: int, plans: dict, chunks: list[Chunk],
                 part_rows: int, progress: Progress | None) -> None:
        self.engine, self.layout, self.batch, self.plans = engine, layout, batch, plans
        self.chunks, self.part_rows, self.progress = chunks, part_rows, progress
        self.step = 0
        self.pending: dict[tuple[str, str], list[Staged]] = {}
        self.uncommitted = [0] * len(chunks)  # parts of each chunk read but not committed yet
        self.read_done = [False] * len(chunks)
        self.committed_chunks = self.committed_rows = 0
        self.maps: dict[tuple[str, str], object] = {}

    @property
    def last_batch(self) -> int:
        return self.batch + max(0, self.step - 1) // 1000

    def add(self, staged: Staged) -> None:
        chunk = self.chunks[staged.index]
        key = (chunk.database, chunk.table)
        pending = self.pending.setdefault(key, [])
        pending.append(staged)
        self.uncommitted[staged.index] += 1
        plan = self.plans[key]
        limit = self.part_rows * (4 if plan.history_direct and plan.current_direct else 1)
        if sum(p.rows for p in pending) >= limit:
            self.flush(key)

    def chunk_read(self, index: int) -> None:
        self.read_done[index] = True
        self._settle([index])

    def flush(self, key: tuple[str, str] | None = None) -> None:
        for k in [key] if key is not None else list(self.pending):
            items = self.pending.pop(k, [])
            if items:
                self._commit(k, items)

    def _commit(self, key: tuple[str, str], items: list[Staged]) -> None:
        db, t = key
        plan = self.plans[key]
        if key not in self.maps:
            self.maps[key] = plan.table_map()
        tm = self.maps[key]
        version = self.batch * 1000 + self.step
        self.step += 1
        history = [f for s in items for f in s.history]
        current = [f for s in items for f in s.current]
        pieces = [p for s in items for p in s.pieces]
        staged = _read_staged(plan.stage, pieces) if pieces else None
        app = self.layout.app_id("history", db, t)
        if plan.history_direct:
            self.engine.append_files(plan.history_path, history, _history_schema(tm), app, version, PARTITION_BY)
        else:
            self.engine.append(plan.history_path, staged, app, version, partition_by=PARTITION_BY)
        if key_names(tm):
            app = self.layout.app_id("current", db, t)
            if plan.current_direct:
                self.engine.append_files(plan.current_path, current, _current_file_schema(tm), app, version)
            else:
                self.engine.merge(plan.current_path, merge_input(staged, tm), key_names(tm), app, version)
        self.committed_rows += sum(s.rows for s in items)
        for s in items:
            self.uncommitted[s.index] -= 1
        self._settle(sorted({s.index for s in items}))

    def _settle(self, indexes: list[int]) -> None:
        for i in indexes:
            if self.read_done[i] and self.uncommitted[i] == 0:
                self.read_done[i] = False  # counted once
                self.committed_chunks += 1
                if self.progress:
                    self.progress(self.committed_chunks, len(self.chunks),
                                  f"chunks committed, {self.committed_rows:,} rows")


def _history_schema(tm) -> pa.Schema:
    """The history table's schema for a table map (what snapshot_history builds), partition column included."""
    values = {col.key: pa.array([], arrow_type(col)) for col in tm.columns}
    return chunkread.snapshot_history(values, tm, "", 0, 0, 0, 0).schema


def _current_file_schema(tm) -> pa.Schema:
    return pa.schema([*current_schema(tm), pa.field(SEQ, pa.int64())])


def _current_rows(history: pa.Table, tm) -> pa.Table:
    """Current-table rows for snapshot history rows of distinct keys: the merge input without `_deleted`."""
    schema = _current_file_schema(tm)
    seq = pc.add(pc.shift_left(history.column("_file_seq"), SEQ_FILE_SHIFT), history.column("_pos"))
    return pa.table([*(history.column(f.name).cast(f.type) for f in schema if f.name != SEQ), seq], schema=schema)


def plan_tables(engine: DeltaEngine, layout: LakeLayout, lake: str, chunks: list[Chunk], batch: int) -> dict:
    """Each table's TablePlan (see there), decided once before any chunk is read."""
    plans = {}
    files_ok = hasattr(engine, "append_files") and staging.local_lake(lake)
    stage = staging.stage_root(lake, layout.pipeline, batch)  # this batch's own staging folder
    for chunk in chunks:
        key = (chunk.database, chunk.table)
        if key in plans:
            continue
        history, current = layout.history_path(*key), layout.current_path(*key)
        plan = TablePlan(chunk.database, chunk.table, chunk.ddl, chunk.mariadb, history, current,
                         stage, False, False)
        tm = plan.table_map()
        if files_ok:
            plan.history_direct = (not engine.exists(history)
                                   or engine.table_schema(history) == _history_schema(tm))
            plan.current_direct = not engine.exists(current)
        plans[key] = plan
    return plans


def _read_in_pool(uri: str, chunks: list[Chunk], batch: int, readers: int, part_rows: int, plans: dict,
                  committer: _Committer, stats: ConversionStats) -> list[ChunkResult]:
    """`readers` threads read chunks and write their parts' files (server reads, Arrow conversion and Parquet
    encoding: mostly outside the GIL) while this thread commits; a bounded queue between them keeps memory flat."""
    results: list[ChunkResult] = []
    handoff: queue.Queue = queue.Queue(maxsize=max(2, readers))
    stop = threading.Event()
    todo = iter(enumerate(chunks))
    lock = threading.Lock()
    done = object()
    maps = {key: plan.table_map() for key, plan in plans.items()}

    def put(item) -> bool:
        while not stop.is_set():
            try:
                handoff.put(item, timeout=0.2)
                return True
            except queue.Full:
                continue
        return False

    def read() -> None:
        mine = ConversionStats()  # Counter += is not atomic across threads: each reader counts alone

        def readers() -> Iterator[tuple[int, ChunkReader]]:
            while not stop.is_set():
                with lock:
                    nxt = next(todo, None)
                if nxt is None:
                    return
                i, chunk = nxt
                yield i, ChunkReader(uri, chunk, batch, part_rows, mine)

        try:
            parts = chunk_parts(readers())
            for i, reader, part in parts:
                key = (reader.chunk.database, reader.chunk.table)
                if not put((i, reader.result) if part is None else stage_part(plans[key], part, i, maps[key])):
                    parts.close()
                    return
        except BaseException as exc:  # handed to the committing thread, which raises it
            put(exc)
        finally:
            with lock:
                stats.update(mine)
            put(done)

    threads = [threading.Thread(target=read, name=f"binlake-bootstrap-reader-{n}", daemon=True)
               for n in range(max(1, min(readers, len(chunks))))]
    for th in threads:
        th.start()
    running = len(threads)
    try:
        while running:
            item = handoff.get()
            if item is done:
                running -= 1
            elif isinstance(item, BaseException):
                raise item
            elif isinstance(item, Staged):
                committer.add(item)
            else:
                i, res = item
                results.append(res)
                committer.chunk_read(i)
        committer.flush()
    finally:
        stop.set()
        for th in threads:
            th.join()
    return results


# A stager reads every chunk and writes its parts' files elsewhere (Spark executors): (uri, chunks, batch,
# plans, part_rows) -> [(chunk index, ChunkResult, [Staged, ...])], manifests only.
Stager = Callable[[str, list[Chunk], int, dict, int], list[tuple[int, ChunkResult, list[Staged]]]]


def chunk_parts(readers: Iterator[tuple[int, ChunkReader]]) -> Iterator[tuple[int, ChunkReader, pa.Table | None]]:
    """Each chunk's parts in order as (index, reader, part), then (index, reader, None) once the chunk is read
    whole. The next chunk's read is started as soon as the current chunk's first part is in, so that the server
    sends it (and connectorx receives it) while this thread converts and writes the current one: one chunk
    ahead, at most two chunks in flight per reader."""
    following = None
    current = next(readers, None)
    parts = None
    try:
        while current is not None:
            i, reader = current
            reader.start()
            parts = reader.parts()
            for part in parts:
                if following is None:
                    following = next(readers, None)
                    if following is not None:
                        following[1].start()
                yield i, reader, part
            yield i, reader, None
            current, following = following if following is not None else next(readers, None), None
    finally:
        if parts is not None:
            parts.close()
        if following is not None:
            following[1].close()


def stage_chunks(uri: str, chunks: list[tuple[int, Chunk]], batch: int, plans: dict,
                 part_rows: int) -> list[tuple[int, ChunkResult, list[Staged], dict]]:
    """Read chunks (one ahead, chunk_parts) and write their parts' files; per chunk its index, result, manifests
    and conversion counts (a Spark task: several chunks per task, so that reads overlap the work)."""
    out: list[tuple[int, ChunkResult, list[Staged], dict]] = []
    counts: dict[int, ConversionStats] = {}
    staged: dict[int, list[Staged]] = {}
    maps = {}

    def readers() -> Iterator[tuple[int, ChunkReader]]:
        for i, chunk in chunks:
            counts[i] = ConversionStats()
            yield i, ChunkReader(uri, chunk, batch, part_rows, counts[i])

    for i, reader, part in chunk_parts(readers()):
        key = (reader.chunk.database, reader.chunk.table)
        if part is None:
            out.append((i, reader.result, staged.pop(i, []), dict(counts.pop(i))))
            continue
        if key not in maps:
            maps[key] = plans[key].table_map()
        staged.setdefault(i, []).append(stage_part(plans[key], part, i, maps[key]))
    return out


def stage_chunk(uri: str, chunk: Chunk, index: int, batch: int, plan: TablePlan,
                part_rows: int) -> tuple[int, ChunkResult, list[Staged], dict]:
    """Read one chunk and write its parts' files; its result, manifests and conversion counts."""
    return stage_chunks(uri, [(index, chunk)], batch, {(chunk.database, chunk.table): plan}, part_rows)[0]


def run_bootstrap(uri: str, tables: list[tuple[str, str]], lake: str, instance: str = "default",
                  lineage: str = "default", chunk_rows: int = 50_000, engine: DeltaEngine | None = None,
                  executor: ChunkExecutor | None = None, pipeline: str = "default", method: str = "auto",
                  watermark_table: str | None = None, progress: Progress | None = None, readers: int = 2,
                  part_rows: int = DEFAULT_PART_ROWS, stager: Stager | None = None) -> dict:
    """Load `tables` into the lake and record where binlog ingest continues. Returns a summary.

    `method`: "snapshot" (MariaDB), "watermark" (any server) or "auto" (snapshot where the server supports it).
    `readers`: chunks read at the same time (threads) while this thread commits; `part_rows`: rows per record
    batch read and per file. `stager` reads the chunks elsewhere and returns manifests (Spark: spark_stager);
    `executor` reads them whole and returns their rows (kept for callers that ship rows)."""
    engine = engine or get_engine()
    if "://" not in lake:  # files are written by other threads and processes (Spark workers: another cwd)
        lake = os.path.abspath(lake)
    layout = LakeLayout(lake, pipeline)
    control = ControlTable(engine, layout)
    for pb in BatchStore(lake, pipeline).unpublished():  # its batch number is not in the control table yet
        raise BootstrapError(f"batch {pb.batch} of pipeline {pipeline!r} is still {pb.state}: finish it (binlake "
                             "ingest) or release/discard it (binlake quarantine) before bootstrapping")
    method, mariadb = server_method(uri, method)
    if method == "watermark" and watermark_table:
        ensure_watermark_table(uri, watermark_table)
    chunks = plan_chunks(uri, tables, chunk_rows, method, watermark_table if method == "watermark" else None,
                         mariadb)
    batch = _first_batch(engine, layout, control, tables)
    plans = plan_tables(engine, layout, lake, chunks, batch)
    stats = ConversionStats()
    committer = _Committer(engine, layout, batch, plans, chunks, part_rows, progress)
    try:
        if stager is not None:
            results = []
            for i, res, staged, counts in stager(uri, chunks, batch, plans, part_rows):
                stats.update(counts)
                results.append(res)
                for item in staged:
                    committer.add(item)
                committer.chunk_read(i)
            committer.flush()
        elif executor is not None:
            results = executor(uri, chunks, batch)
            index = {id(c): i for i, c in enumerate(chunks)}
            ordered = sorted(results, key=lambda r: (r.chunk.database, r.chunk.table, str(r.chunk.lower)))
            for n, res in enumerate(ordered):
                i = index.get(id(res.chunk), n)  # results may come back as copies: any slot will do
                if res.ipc:
                    part = pa.ipc.open_stream(io.BytesIO(res.ipc)).read_all()
                    committer.add(stage_part(plans[(res.chunk.database, res.chunk.table)], part, i))
                committer.chunk_read(i)
            committer.flush()
        else:
            results = _read_in_pool(uri, chunks, batch, readers, part_rows, plans, committer, stats)
    finally:
        for stage in {plan.stage for plan in plans.values()}:
            staging.drop_stage(stage)
    start = min(results, key=lambda r: (sequence_number(r.binlog_file), r.binlog_pos))
    last = committer.last_batch
    state = FileState(instance, lineage, start.binlog_file, sequence_number(start.binlog_file), 0,
                      status="bootstrap", end_pos=start.binlog_pos, batch_id=last)
    control.record([state], last)
    summary = {"batch": last, "method": method, "chunks": len(results), "rows": sum(r.rows for r in results),
               "commits": committer.step, "resume_file": start.binlog_file, "resume_pos": start.binlog_pos}
    if stats:
        summary["conversions"] = dict(stats)
    if method == "watermark" and not watermark_table:
        summary["warning"] = ("no --watermark-table: a transaction written to the binlog but not yet committed "
                              "when a chunk's low watermark was read could be missing from that chunk")
    return summary


def _first_batch(engine: DeltaEngine, layout: LakeLayout, control: ControlTable,
                 tables: list[tuple[str, str]]) -> int:
    """The next batch number, above any version the tables' app ids already hold (an interrupted bootstrap
    commits before its control row is recorded: a new run must not reuse its versions)."""
    batch = control.last_batch() + 1
    for db, t in tables:
        for kind, path in (("history", layout.history_path(db, t)), ("current", layout.current_path(db, t))):
            if engine.exists(path):
                version = engine.txn_version(path, layout.app_id(kind, db, t))
                if version is not None:
                    batch = max(batch, version // 1000 + 1)
    return batch
