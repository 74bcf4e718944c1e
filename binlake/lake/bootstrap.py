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
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import pyarrow as pa

from ..binlog.api import sequence_number
from ..binlog.decoder import RowBatch
from ..schema.binlog_types import table_map_for
from ..schema.ddl import parse_create_table
from ..schema.model import TableDef
from ..schema.snapshot import binlog_position, connect_uri
from .control import ControlTable, FileState
from .convert import ConversionStats
from .current import key_names, merge_input
from .engines import DeltaEngine, get_engine
from .history import PARTITION_BY, CommittedBatch, history_table
from .layout import LakeLayout
from .pending import BatchStore

TEMPORAL = ("date", "datetime", "timestamp", "time")
METHODS = ("auto", "snapshot", "watermark")


class BootstrapError(RuntimeError):
    pass


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
        elif c.data_type in ("inet4", "inet6", "uuid"):
            out.append(f"CAST({name} AS CHAR)")
        else:
            out.append(name)
    return ", ".join(out)


def read_chunk(uri: str, chunk: Chunk, batch_id: int) -> ChunkResult:
    """Read one chunk inside a consistent snapshot; return its rows as history-shaped Arrow (IPC) and position."""
    conn = connect_uri(uri)
    high: tuple[str, int] | None = None
    try:
        with conn.cursor() as cur:
            cur.execute("SET SESSION time_zone = '+00:00'")
            cur.execute("SET SESSION TRANSACTION ISOLATION LEVEL REPEATABLE READ")
            if chunk.method == "watermark":
                file, pos = binlog_position(cur)  # the low watermark: rows are ordered here
                if chunk.watermark_table:
                    _write_watermark(cur, chunk)
                cur.execute("START TRANSACTION WITH CONSISTENT SNAPSHOT")
            elif chunk.method == "snapshot":
                cur.execute("START TRANSACTION WITH CONSISTENT SNAPSHOT")
                file, pos = _snapshot_position(cur)
            else:
                raise BootstrapError(f"bootstrap method {chunk.method!r}: expected one of {', '.join(METHODS[1:])}")
            tdef = parse_create_table(chunk.ddl, chunk.database)
            rows = _select_chunk(cur, chunk, tdef)
            cur.execute("COMMIT")
            read_at = int(time.time())
            if chunk.method == "watermark":
                high = binlog_position(cur)
    finally:
        conn.close()
    tm = table_map_for(tdef, mariadb=chunk.mariadb)
    ipc = b""
    if rows:
        snapshot = RowBatch(file, pos, pos, 0, read_at, None, tm, "snapshot", [(None, list(r)) for r in rows])
        table = history_table([CommittedBatch(snapshot, read_at, sequence_number(file))], batch_id, ConversionStats())
        sink = io.BytesIO()
        with pa.ipc.new_stream(sink, table.schema) as w:
            w.write_table(table)
        ipc = sink.getvalue()
    return ChunkResult(chunk, file, pos, read_at, len(rows), ipc, *(high or (None, None)))


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


def _select_chunk(cur, chunk: Chunk, tdef: TableDef) -> list[tuple]:
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
    return list(cur.fetchall())


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
    out = []
    for i, chunk in enumerate(chunks):
        out.append(read_chunk(uri, chunk, batch_id))
        if progress:
            progress(i + 1, len(chunks), "chunks read")
    return out


def run_bootstrap(uri: str, tables: list[tuple[str, str]], lake: str, instance: str = "default",
                  lineage: str = "default", chunk_rows: int = 50_000, engine: DeltaEngine | None = None,
                  executor: ChunkExecutor | None = None, pipeline: str = "default", method: str = "auto",
                  watermark_table: str | None = None, progress: Progress | None = None) -> dict:
    """Load `tables` into the lake and record where binlog ingest continues. Returns a summary.

    `method`: "snapshot" (MariaDB), "watermark" (any server) or "auto" (snapshot where the server supports it).
    `executor` reads the chunks (default: one after the other here; Spark tasks in spark_jobs)."""
    engine = engine or get_engine()
    layout = LakeLayout(lake, pipeline)
    control = ControlTable(engine, layout)
    for pb in BatchStore(lake, pipeline).unpublished():  # its batch number is not in the control table yet
        raise BootstrapError(f"batch {pb.batch} of pipeline {pipeline!r} is still {pb.state}: finish it (binlake "
                             "ingest) or release/discard it (binlake quarantine) before bootstrapping")
    batch = control.last_batch() + 1
    method, mariadb = server_method(uri, method)
    if method == "watermark" and watermark_table:
        ensure_watermark_table(uri, watermark_table)
    chunks = plan_chunks(uri, tables, chunk_rows, method, watermark_table if method == "watermark" else None,
                         mariadb)
    results = local_chunks(uri, chunks, batch, progress) if executor is None else executor(uri, chunks, batch)
    step = 0
    ordered = sorted(results, key=lambda r: (r.chunk.database, r.chunk.table, str(r.chunk.lower)))
    for i, res in enumerate(ordered):
        if progress:
            progress(i + 1, len(ordered), "chunks committed")
        if not res.ipc:
            continue
        data = pa.ipc.open_stream(io.BytesIO(res.ipc)).read_all()
        tdef = parse_create_table(res.chunk.ddl, res.chunk.database)
        tm = table_map_for(tdef, mariadb=res.chunk.mariadb)
        db, t = res.chunk.database, res.chunk.table
        engine.append(layout.history_path(db, t), data, layout.app_id("history", db, t), batch * 1000 + step,
                      partition_by=PARTITION_BY)
        if key_names(tm):
            engine.merge(layout.current_path(db, t), merge_input(data, tm), key_names(tm),
                         layout.app_id("current", db, t), batch * 1000 + step)
        step += 1
    start = min(results, key=lambda r: (sequence_number(r.binlog_file), r.binlog_pos))
    state = FileState(instance, lineage, start.binlog_file, sequence_number(start.binlog_file), 0,
                      status="bootstrap", end_pos=start.binlog_pos, batch_id=batch)
    control.record([state], batch)
    summary = {"batch": batch, "method": method, "chunks": len(results), "rows": sum(r.rows for r in results),
               "resume_file": start.binlog_file, "resume_pos": start.binlog_pos}
    if method == "watermark" and not watermark_table:
        summary["warning"] = ("no --watermark-table: a transaction written to the binlog but not yet committed "
                              "when a chunk's low watermark was read could be missing from that chunk")
    return summary
