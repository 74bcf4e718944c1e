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
from . import chunkread
from .control import ControlTable, FileState
from .convert import ConversionStats
from .current import SEQ_FILE_SHIFT, current_schema, key_names, merge_input
from .engines import SEQ, DeltaEngine, get_engine
from .history import PARTITION_BY, CommittedBatch, history_table
from .layout import LakeLayout
from .pending import BatchStore

TEMPORAL = ("date", "datetime", "timestamp", "time")
METHODS = ("auto", "snapshot", "watermark")
DEFAULT_PART_ROWS = 100_000  # rows per record batch read and per commit


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

    @property
    def where(self) -> str:
        c = self.chunk
        bounds = "" if c.lower is None and c.upper is None else f" [{c.lower}, {c.upper})"
        return f"{c.database}.{c.table}{bounds}"

    def parts(self) -> Iterator[pa.Table]:
        if not self.fast:
            yield from self._row_parts()
            return
        res, chunk = self.result, self.chunk
        conn = None
        try:
            if chunk.method == "watermark":
                conn = connect_uri(self.uri)
                with conn.cursor() as cur:
                    res.binlog_file, res.binlog_pos = binlog_position(cur)  # the low watermark: rows ordered here
                    if chunk.watermark_table:
                        _write_watermark(cur, chunk)
            yield from self._arrow_parts()
            if chunk.method == "watermark":
                with conn.cursor() as cur:
                    res.high_file, res.high_pos = binlog_position(cur)
        finally:
            if conn is not None:
                conn.close()
        if chunk.method == "snapshot" and not res.binlog_file:
            # No row came, so no position with them: read the (empty) range again in a snapshot of its own,
            # which reports its position (and holds whatever rows a writer added meanwhile).
            yield from self._row_parts()

    def _arrow_parts(self) -> Iterator[pa.Table]:
        res, chunk, tm = self.result, self.chunk, self.tm
        snapshot = chunk.method == "snapshot"
        sql = chunkread.chunk_sql(self.tdef, chunk.database, chunk.table, chunk.lower, chunk.upper, snapshot)
        res.read_at = int(time.time())
        try:
            stream = _stream_select(self.uri, chunk.database, sql, snapshot, self.part_rows)
            for batch in stream:
                if snapshot and not res.binlog_file:
                    res.binlog_file = batch.column(0)[0].as_py() or ""
                    res.binlog_pos = int(batch.column(1)[0].as_py() or 0)
                    if not res.binlog_file:
                        raise BootstrapError(f"{self.where}: the server reports no binlog_snapshot_file (is the "
                                             "binary log enabled?)")
                values = chunkread.lake_columns(batch, tm, self.stats, 2 if snapshot else 0)
                yield chunkread.snapshot_history(values, tm, res.binlog_file, res.binlog_pos, res.read_at,
                                                 sequence_number(res.binlog_file), self.batch_id, res.rows)
                res.rows += batch.num_rows
        except (BootstrapError, GeneratorExit):
            raise
        except BaseException as exc:  # connectorx's errors, including Rust panics (BaseException)
            if isinstance(exc, (KeyboardInterrupt, SystemExit)):
                raise
            raise ChunkReadError(f"{self.where}: reading the chunk failed: {exc}") from exc

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
                cur.execute(f"SELECT MIN(`{pk[0]}`), MAX(`{pk[0]}`), COUNT(*) FROM `{db}`.`{table}`")
                lo, hi, count = cur.fetchone()
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


class _Committer:
    """Commits the chunks' history rows (and current-table rows) in parts, one table at a time, counting what
    is committed. Parts of one table are gathered up to `part_rows` rows per commit, so the number of commits
    and the memory held depend on neither chunk size nor table size.

    Versions: every commit of the bootstrap takes the next number from batch * 1000 on, under the table's app
    ids; the control row is recorded under `last_batch`, the batch number that covers them all, so the ingest
    after it (next batch) always commits above them. A current table that did not exist when the bootstrap
    started is appended to (its chunks are disjoint key ranges read once: nothing to merge); an existing one is
    merged, as the binlog path does."""

    def __init__(self, engine: DeltaEngine, layout: LakeLayout, batch: int, part_rows: int, chunks: list[Chunk],
                 progress: Progress | None) -> None:
        self.engine, self.layout, self.batch, self.part_rows = engine, layout, batch, part_rows
        self.chunks, self.progress = chunks, progress
        self.step = 0
        self.pending: dict[tuple[str, str], list[tuple[int, pa.Table]]] = {}
        self.uncommitted = [0] * len(chunks)  # parts of each chunk read but not committed yet
        self.read_done = [False] * len(chunks)
        self.committed_chunks = self.committed_rows = 0
        self.fresh: dict[tuple[str, str], bool] = {}
        self.maps: dict[tuple[str, str, str], object] = {}

    @property
    def last_batch(self) -> int:
        return self.batch + max(0, self.step - 1) // 1000

    def add(self, index: int, part: pa.Table) -> None:
        chunk = self.chunks[index]
        key = (chunk.database, chunk.table)
        if key not in self.fresh:
            self.fresh[key] = not self.engine.exists(self.layout.current_path(*key))
        parts = self.pending.setdefault(key, [])
        parts.append((index, part))
        self.uncommitted[index] += 1
        if sum(p.num_rows for _, p in parts) >= self.part_rows:
            self.flush(key)

    def chunk_read(self, index: int) -> None:
        self.read_done[index] = True
        self._settle([index])

    def flush(self, key: tuple[str, str] | None = None) -> None:
        for k in [key] if key is not None else list(self.pending):
            parts = self.pending.pop(k, [])
            if parts:
                self._commit(k, parts)

    def _commit(self, key: tuple[str, str], parts: list[tuple[int, pa.Table]]) -> None:
        db, t = key
        chunk = self.chunks[parts[0][0]]
        data = pa.concat_tables([p for _, p in parts]) if len(parts) > 1 else parts[0][1]
        tm = self._table_map(chunk)
        version = self.batch * 1000 + self.step
        self.step += 1
        self.engine.append(self.layout.history_path(db, t), data, self.layout.app_id("history", db, t), version,
                           partition_by=PARTITION_BY)
        keys = key_names(tm)
        if keys:
            path, app = self.layout.current_path(db, t), self.layout.app_id("current", db, t)
            if self.fresh[key]:
                self.engine.append(path, _current_rows(data, tm), app, version)
            else:
                self.engine.merge(path, merge_input(data, tm), keys, app, version)
        self.committed_rows += data.num_rows
        for index, _ in parts:
            self.uncommitted[index] -= 1
        self._settle(sorted({i for i, _ in parts}))

    def _settle(self, indexes: list[int]) -> None:
        for i in indexes:
            if self.read_done[i] and self.uncommitted[i] == 0:
                self.read_done[i] = False  # counted once
                self.committed_chunks += 1
                if self.progress:
                    self.progress(self.committed_chunks, len(self.chunks),
                                  f"chunks committed, {self.committed_rows:,} rows")

    def _table_map(self, chunk: Chunk):
        key = (chunk.database, chunk.table, chunk.ddl)
        if key not in self.maps:
            self.maps[key] = table_map_for(parse_create_table(chunk.ddl, chunk.database), mariadb=chunk.mariadb)
        return self.maps[key]


def _current_rows(history: pa.Table, tm) -> pa.Table:
    """Current-table rows for snapshot history rows of distinct keys: the merge input without `_deleted`."""
    schema = current_schema(tm)
    seq = pc.add(pc.shift_left(history.column("_file_seq"), SEQ_FILE_SHIFT), history.column("_pos"))
    return pa.table([*(history.column(f.name).cast(f.type) for f in schema), seq],
                    schema=pa.schema([*schema, pa.field(SEQ, pa.int64())]))


def _read_in_pool(uri: str, chunks: list[Chunk], batch: int, readers: int, part_rows: int,
                  committer: _Committer, stats: ConversionStats) -> list[ChunkResult]:
    """`readers` threads read chunks (server reads and Arrow conversion, outside the GIL mostly) while this
    thread commits their parts; a bounded queue between them keeps memory flat."""
    results: list[ChunkResult] = []
    handoff: queue.Queue = queue.Queue(maxsize=max(2, readers))
    stop = threading.Event()
    todo = iter(enumerate(chunks))
    lock = threading.Lock()
    done = object()

    def put(item) -> bool:
        while not stop.is_set():
            try:
                handoff.put(item, timeout=0.2)
                return True
            except queue.Full:
                continue
        return False

    def read() -> None:
        try:
            while not stop.is_set():
                with lock:
                    nxt = next(todo, None)
                if nxt is None:
                    break
                i, chunk = nxt
                reader = ChunkReader(uri, chunk, batch, part_rows, stats)
                parts = reader.parts()
                for part in parts:
                    if not put((i, part)):
                        parts.close()
                        return
                put((i, reader.result))
        except BaseException as exc:  # handed to the committing thread, which raises it
            put((-1, exc))
        finally:
            put((-1, done))

    threads = [threading.Thread(target=read, name=f"binlake-bootstrap-reader-{n}", daemon=True)
               for n in range(max(1, min(readers, len(chunks))))]
    for th in threads:
        th.start()
    running = len(threads)
    try:
        while running:
            i, item = handoff.get()
            if item is done:
                running -= 1
            elif isinstance(item, BaseException):
                raise item
            elif isinstance(item, ChunkResult):
                results.append(item)
                committer.chunk_read(i)
            else:
                committer.add(i, item)
        committer.flush()
    finally:
        stop.set()
        for th in threads:
            th.join()
    return results


def run_bootstrap(uri: str, tables: list[tuple[str, str]], lake: str, instance: str = "default",
                  lineage: str = "default", chunk_rows: int = 50_000, engine: DeltaEngine | None = None,
                  executor: ChunkExecutor | None = None, pipeline: str = "default", method: str = "auto",
                  watermark_table: str | None = None, progress: Progress | None = None, readers: int = 2,
                  part_rows: int = DEFAULT_PART_ROWS) -> dict:
    """Load `tables` into the lake and record where binlog ingest continues. Returns a summary.

    `method`: "snapshot" (MariaDB), "watermark" (any server) or "auto" (snapshot where the server supports it).
    `readers`: chunks read at the same time (threads) while this thread commits; `part_rows`: rows per commit
    (and per record batch read). `executor` reads the chunks instead (whole, e.g. as Spark tasks)."""
    engine = engine or get_engine()
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
    stats = ConversionStats()
    committer = _Committer(engine, layout, batch, part_rows, chunks, progress)
    if executor is None:
        results = _read_in_pool(uri, chunks, batch, readers, part_rows, committer, stats)
    else:
        results = executor(uri, chunks, batch)
        index = {id(c): i for i, c in enumerate(chunks)}
        ordered = sorted(results, key=lambda r: (r.chunk.database, r.chunk.table, str(r.chunk.lower)))
        for n, res in enumerate(ordered):
            i = index.get(id(res.chunk), n)  # results may come back as copies (Spark): any slot will do
            if res.ipc:
                committer.add(i, pa.ipc.open_stream(io.BytesIO(res.ipc)).read_all())
            committer.chunk_read(i)
        committer.flush()
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
