"""Bootstrap: load existing rows into a lake, then let binlog ingest continue exactly where the data was read.

Each chunk (a primary-key range of one table) is read in its own consistent snapshot, together with the exact
binlog position that snapshot corresponds to (MariaDB's binlog_snapshot_file/position, read inside the snapshot
transaction; no FLUSH TABLES WITH READ LOCK). A chunk's rows enter the lake as `snapshot` changes ordered at that
position. Ingest then resumes at the earliest chunk position: a binlog change older than a chunk's snapshot
orders before the chunk's rows and loses to them, a newer one wins, so writes running during the bootstrap are
neither lost nor applied twice, and chunks can be read in parallel (Spark tasks) at different moments.
"""

from __future__ import annotations

import io
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import pyarrow as pa

from ..binlog.api import sequence_number
from ..binlog.decoder import RowBatch
from ..binlog.tablemap import Column, TableMap
from ..schema.binlog_types import binlog_shape, collation_id
from ..schema.ddl import parse_create_table
from ..schema.model import TableDef
from ..schema.snapshot import connect_uri
from .control import ControlTable, FileState
from .convert import ConversionStats
from .current import key_names, merge_input
from .engines import DeltaEngine, get_engine
from .history import PARTITION_BY, CommittedBatch, history_table
from .layout import LakeLayout

TEMPORAL = ("date", "datetime", "timestamp", "time")


class BootstrapError(RuntimeError):
    pass


@dataclass
class Chunk:
    database: str
    table: str
    ddl: str
    lower: object = None  # inclusive; None: from the start
    upper: object = None  # exclusive; None: to the end


@dataclass
class ChunkResult:
    chunk: Chunk
    binlog_file: str
    binlog_pos: int
    read_at: int
    rows: int
    ipc: bytes = field(repr=False, default=b"")


def table_map_for(tdef: TableDef, mariadb: bool) -> TableMap:
    """A TABLE_MAP-like description of a table from its DDL, so snapshot rows take the binlog rows' types."""
    columns = []
    for i, c in enumerate(tdef.columns):
        shape = binlog_shape(c, mariadb)
        col = Column(i, shape.type, shape.meta or 0, c.nullable, not c.unsigned, collation_id(c), c.name)
        if c.data_type == "enum":
            col.enum_labels = list(c.labels or [])
        elif c.data_type == "set":
            col.set_labels = list(c.labels or [])
        columns.append(col)
    tm = TableMap(0, tdef.database, tdef.name, columns,
                  primary_key=[tdef.index_of(n) for n in tdef.primary_key] or None)
    tm.schema_version = tdef.fingerprint()
    tm.schema = tdef
    tm.names_from_server = True
    return tm


def _select_list(tdef: TableDef) -> str:
    """Columns in binlake's value contract: temporal types as text (UTC session), BIT as an integer."""
    out = []
    for c in tdef.columns:
        name = "`" + c.name.replace("`", "``") + "`"
        if c.data_type in TEMPORAL:
            out.append(f"CAST({name} AS CHAR)")
        elif c.data_type == "bit":
            out.append(f"CAST({name} AS UNSIGNED)")
        else:
            out.append(name)
    return ", ".join(out)


def read_chunk(uri: str, chunk: Chunk, batch_id: int) -> ChunkResult:
    """Read one chunk inside a consistent snapshot; return its rows as history-shaped Arrow (IPC) and position."""
    conn = connect_uri(uri)
    try:
        with conn.cursor() as cur:
            cur.execute("SET SESSION time_zone = '+00:00'")
            cur.execute("SET SESSION TRANSACTION ISOLATION LEVEL REPEATABLE READ")
            cur.execute("START TRANSACTION WITH CONSISTENT SNAPSHOT")
            cur.execute("SHOW STATUS WHERE Variable_name IN ('binlog_snapshot_file', 'binlog_snapshot_position')")
            status = {k.lower(): v for k, v in cur.fetchall()}
            if "binlog_snapshot_file" not in status:
                raise BootstrapError("the server does not report binlog_snapshot_file/position (MariaDB does); "
                                     "bootstrapping MySQL needs another way to tie a snapshot to a position")
            file, pos = status["binlog_snapshot_file"], int(status["binlog_snapshot_position"])
            tdef = parse_create_table(chunk.ddl, chunk.database)
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
            rows = cur.fetchall()
            cur.execute("COMMIT")
            read_at = int(time.time())
    finally:
        conn.close()
    tm = table_map_for(tdef, mariadb=True)
    ipc = b""
    if rows:
        snapshot = RowBatch(file, pos, pos, 0, read_at, None, tm, "snapshot", [(None, list(r)) for r in rows])
        table = history_table([CommittedBatch(snapshot, read_at, sequence_number(file))], batch_id, ConversionStats())
        sink = io.BytesIO()
        with pa.ipc.new_stream(sink, table.schema) as w:
            w.write_table(table)
        ipc = sink.getvalue()
    return ChunkResult(chunk, file, pos, read_at, len(rows), ipc)


def plan_chunks(uri: str, tables: list[tuple[str, str]], chunk_rows: int) -> list[Chunk]:
    """Chunks per table: ranges of an integer primary key of about `chunk_rows` rows; one chunk otherwise."""
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
                    out.append(Chunk(db, table, ddl))
                    continue
                cur.execute(f"SELECT MIN(`{pk[0]}`), MAX(`{pk[0]}`), COUNT(*) FROM `{db}`.`{table}`")
                lo, hi, count = cur.fetchone()
                if not count:
                    out.append(Chunk(db, table, ddl))
                    continue
                pieces = max(1, -(-count // chunk_rows))
                step = max(1, -(-(hi - lo + 1) // pieces))
                bounds = list(range(lo, hi + 1, step))
                for i, b in enumerate(bounds):
                    out.append(Chunk(db, table, ddl, None if i == 0 else b,
                                     bounds[i + 1] if i + 1 < len(bounds) else None))
    finally:
        conn.close()
    return out


ChunkExecutor = Callable[[str, list[Chunk], int], list[ChunkResult]]


def local_chunks(uri: str, chunks: list[Chunk], batch_id: int) -> list[ChunkResult]:
    return [read_chunk(uri, c, batch_id) for c in chunks]


def run_bootstrap(uri: str, tables: list[tuple[str, str]], lake: str, instance: str = "default",
                  lineage: str = "default", chunk_rows: int = 50_000, engine: DeltaEngine | None = None,
                  executor: ChunkExecutor = local_chunks, pipeline: str = "default") -> dict:
    """Load `tables` into the lake and record where binlog ingest continues. Returns a summary."""
    engine = engine or get_engine()
    layout = LakeLayout(lake, pipeline)
    control = ControlTable(engine, layout)
    batch = control.last_batch() + 1
    chunks = plan_chunks(uri, tables, chunk_rows)
    results = executor(uri, chunks, batch)
    step = 0
    for res in sorted(results, key=lambda r: (r.chunk.database, r.chunk.table, str(r.chunk.lower))):
        if not res.ipc:
            continue
        data = pa.ipc.open_stream(io.BytesIO(res.ipc)).read_all()
        tdef = parse_create_table(res.chunk.ddl, res.chunk.database)
        tm = table_map_for(tdef, mariadb=True)
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
    return {"batch": batch, "chunks": len(results), "rows": sum(r.rows for r in results),
            "resume_file": start.binlog_file, "resume_pos": start.binlog_pos}
