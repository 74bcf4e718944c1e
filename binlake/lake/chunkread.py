"""A bootstrap chunk's rows from the server straight into Arrow, in the lake's types, with no Python object per
value: connectorx (Rust, the MySQL binary protocol) streams record batches, and Arrow compute kernels convert
them to the same columns the binlog path writes (binlake/lake/convert.py).

The SELECT list hands every value over in a form that converts exactly: DATE, DATETIME and TIMESTAMP as the
server's packed integer (YYYYMMDD[hhmmss], `CAST(.. AS UNSIGNED)` in a UTC session) with the microseconds beside
it, taken apart with integer arithmetic (zero, partial and impossible dates found and sent, as text, through the
binlog path's conversion, which nulls and counts them); TIME as text; DECIMAL as text (cast to
decimal128 by Arrow, or kept as text above 38 digits), BIT as an unsigned integer, INET4/INET6/UUID as text;
integers, floating point (binary protocol: the stored bits), text (converted to utf8mb4 by the server, from
any character set) and bytes come as they are. Columns without such a form (GEOMETRY, VECTOR) make the table
use the row-by-row reader (`supported`).
"""

from __future__ import annotations

import functools
from collections.abc import Iterator
from urllib.parse import quote, urlparse

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..binlog.coltypes import value_kind
from ..binlog.constants import ColumnType as T
from ..binlog.tablemap import TableMap
from ..schema.model import TableDef
from .convert import TEMPORAL as TEMPORAL_KINDS
from .convert import UINT64_DECIMAL, ConversionStats, _temporal, arrow_type, np_array
from .history import US_PER_DAY

try:  # optional at import time: without it every table takes the row-by-row reader
    import connectorx
except ImportError:  # pragma: no cover - pinned in pyproject.toml
    connectorx = None

TEXT_CAST = ("time", "decimal", "numeric", "inet4", "inet6", "uuid")
PACKED = ("date", "datetime", "timestamp")  # read as integers: packed_temporal
UNSUPPORTED = ("geometry", "point", "linestring", "polygon", "multipoint", "multilinestring", "multipolygon",
               "geometrycollection", "geomcollection", "vector")
FILE_COL, POS_COL = "__binlake_file", "__binlake_pos"
# What the snapshot method runs on the reading connection before its SELECT: the snapshot, then its binlog
# position into session variables, which the SELECT returns beside the rows (one connection, one snapshot): on the
# first row it sends only (@binlake_sent is set while that row is evaluated), NULL on the others, so that the
# position costs neither the server nor the reader a value per row.
SNAPSHOT_POSITION = [
    "SET @binlake_file = (SELECT VARIABLE_VALUE FROM information_schema.SESSION_STATUS "
    "WHERE VARIABLE_NAME = 'BINLOG_SNAPSHOT_FILE')",
    "SET @binlake_pos = (SELECT VARIABLE_VALUE FROM information_schema.SESSION_STATUS "
    "WHERE VARIABLE_NAME = 'BINLOG_SNAPSHOT_POSITION')",
    "SET @binlake_sent = NULL",
]
POSITION_COLUMNS = [
    "IF(@binlake_sent IS NULL, CAST(@binlake_file AS CHAR), NULL) AS {file}",
    "IF(@binlake_sent IS NULL, CAST(@binlake_pos AS UNSIGNED) + 0 * (@binlake_sent := 1), NULL) AS {pos}",
]
SESSION = ["SET SESSION time_zone = '+00:00'", "SET SESSION TRANSACTION ISOLATION LEVEL REPEATABLE READ",
           "START TRANSACTION WITH CONSISTENT SNAPSHOT"]


def supported(tdef: TableDef) -> bool:
    """Whether the table's rows can take the Arrow reader (connectorx installed, every column convertible)."""
    return connectorx is not None and not any(c.data_type in UNSUPPORTED for c in tdef.columns)


def quote_name(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


def select_expressions(tdef: TableDef, packed: bool = True) -> list[str]:
    """Column i as `c{i}` (and a DATETIME's or TIMESTAMP's microseconds as `u{i}` when it has fractions).
    Temporal columns packed (MariaDB, whose integer form of a DATETIME drops its fraction) or as text (MySQL
    rounds the fraction into the seconds)."""
    out = []
    for i, c in enumerate(tdef.columns):
        name = quote_name(c.name)
        if c.data_type in TEXT_CAST or (c.data_type in PACKED and not packed):
            expr = f"CAST({name} AS CHAR)"
        elif c.data_type == "bit" or c.data_type in PACKED:
            expr = f"CAST({name} AS UNSIGNED)"
        else:
            expr = name
        out.append(f"{expr} AS c{i}")
        if packed and c.data_type in PACKED[1:] and c.fsp:
            out.append(f"MICROSECOND({name}) AS u{i}")
    return out


def chunk_sql(tdef: TableDef, database: str, table: str, lower, upper, with_position: bool,
              mariadb: bool = True) -> str:
    """The chunk's SELECT (key bounds are the planner's integers, written in as numbers)."""
    cols = select_expressions(tdef, packed=mariadb)
    if with_position:
        cols = [POSITION_COLUMNS[0].format(file=FILE_COL), POSITION_COLUMNS[1].format(pos=POS_COL), *cols]
    sql = f"SELECT {', '.join(cols)} FROM {quote_name(database)}.{quote_name(table)}"
    key = tdef.primary_key[0] if tdef.primary_key else None
    where = []
    if key is not None and lower is not None:
        where.append(f"{quote_name(key)} >= {int(lower)}")
    if key is not None and upper is not None:
        where.append(f"{quote_name(key)} < {int(upper)}")
    return sql + (" WHERE " + " AND ".join(where) if where else "")


def snapshot_position(batch: pa.RecordBatch) -> tuple[str, int] | None:
    """The snapshot's binlog position from the two leading columns of a batch (chunk_sql with_position), when
    the batch holds the row that carries it."""
    files = batch.column(0).drop_null()
    if not len(files):
        return None
    return files[0].as_py(), int(batch.column(1).drop_null()[0].as_py() or 0)


def connectorx_uri(uri: str, database: str) -> str:
    """binlake's mysql://user:password@host:port/ (percent-encoded as given) for connectorx, on `database`."""
    u = urlparse(uri)
    netloc = u.netloc if "@" in u.netloc else f"root@{u.netloc}"
    user, _, host = netloc.rpartition("@")
    if ":" not in user:
        user += ":"  # connectorx wants the password field, even empty
    return f"mysql://{user}@{host}/{quote(database, safe='')}"


def stream_select(uri: str, database: str, sql: str, snapshot: bool, batch_rows: int) -> Iterator[pa.RecordBatch]:
    """The SELECT's record batches, read inside a consistent snapshot in a UTC session on one connection
    (with the snapshot's binlog position in two leading columns when `snapshot`). The query is sent now and
    connectorx receives the rows in the background (its own threads), so a caller can start the next chunk's
    read before it works on this one's rows."""
    pre = SESSION + (SNAPSHOT_POSITION if snapshot else [])
    reader = connectorx.read_sql(connectorx_uri(uri, database), sql, return_type="arrow_stream",
                                 pre_execution_query=pre, batch_size=batch_rows)
    return (batch for batch in reader if batch.num_rows)


def lake_array(arr: pa.Array, col, where: str, stats: ConversionStats, micros: pa.Array | None = None) -> pa.Array:
    """One column as read to the lake's type for it (the binlog path's mapping). Temporal columns come packed
    (select_expressions), with `micros` beside a DATETIME or TIMESTAMP with fractions."""
    typ = arrow_type(col)
    if value_kind(col) in TEMPORAL_KINDS and pa.types.is_integer(arr.type):
        return packed_temporal(arr, micros, typ, where, stats)
    if value_kind(col) in TEMPORAL_KINDS:
        strings = arr.cast(pa.string())
        # Zero and partial dates: year 0000 parses, so it is looked for; a zero month or day fails the cast. Either
        # way the careful path (the binlog path's) finds, nulls and counts them.
        if not pc.any(pc.starts_with(strings, "0000")).as_py():
            try:
                naive = strings.cast(pa.date32() if typ == pa.date32() else pa.timestamp("us"))
                return naive.cast(typ) if naive.type != typ else naive
            except pa.ArrowInvalid:
                pass
        return _temporal(strings, typ, where, stats)
    if typ == UINT64_DECIMAL:  # BIGINT UNSIGNED, BIT(64)
        return arr.cast(pa.uint64()).cast(typ)
    if col.type == T.NEWDECIMAL and typ != pa.string():
        return arr.cast(pa.string()).cast(typ)
    return arr.cast(typ)


def lake_columns(batch: pa.RecordBatch, tm: TableMap, stats: ConversionStats, offset: int = 0) -> dict:
    """The typed value columns of a record batch of chunk_sql's columns (`offset` is not used: they are found by
    name)."""
    names = batch.schema.names
    out = {}
    for col in tm.columns:
        micros = f"u{col.index}"
        out[col.key] = lake_array(batch.column(f"c{col.index}"), col, f"{tm.qualified_name}.{col.key}", stats,
                                  batch.column(micros) if micros in names else None)
    return out


US_PER_SECOND = 1_000_000


def packed_temporal(packed: pa.Array, micros: pa.Array | None, typ: pa.DataType, where: str,
                    stats: ConversionStats) -> pa.Array:
    """DATE (YYYYMMDD), DATETIME or TIMESTAMP (YYYYMMDDhhmmss, and its microseconds) as the server packs them, to
    date32 or microseconds since the epoch (months' first days from a table of numpy's calendar: _month_firsts).
    Rows with a year, month or day 0 or a day past its month's end take the binlog path's conversion from their
    text (`_temporal`: zero and partial dates null and counted), as they did when the whole column came as text."""
    n = len(packed)
    valid = None if not packed.null_count else packed.is_valid().to_numpy(zero_copy_only=False)
    v = _int64s(packed)
    dated = typ == pa.date32()
    if dated:
        date, clock = v, None
    else:
        date, clock = np.divmod(v, 1_000_000)
    year_month, day = np.divmod(date, 100)
    year, month = np.divmod(year_month, 100)
    firsts = _month_firsts()
    index = year * 12 + month - 1
    np.clip(index, 0, len(firsts) - 2, out=index)
    first = firsts[index]  # the month's first day, days since 1970-01-01
    odd = (year == 0) | (month == 0) | (day == 0) | (month > 12) | (day > firsts[index + 1] - first)
    days = first + day - 1
    us = None if dated or micros is None else _int64s(micros)
    if dated:
        values = days.astype(np.int32)
    else:
        hours, rest = np.divmod(clock, 10_000)
        minutes, seconds = np.divmod(rest, 100)
        values = (days * 86_400 + hours * 3_600 + minutes * 60 + seconds) * US_PER_SECOND
        if us is not None:
            values += us
    if valid is not None:
        odd &= valid
    bitmap = None if valid is None else pa.py_buffer(np.packbits(valid, bitorder="little"))
    out = pa.Array.from_buffers(typ, n, [bitmap, pa.py_buffer(values)], null_count=packed.null_count)
    if not odd.any():
        return out
    at = np.flatnonzero(odd)
    texts = [_packed_text(int(date[i]), None if dated else int(clock[i]), 0 if us is None else int(us[i]))
             for i in at]
    mask = pa.Array.from_buffers(pa.bool_(), n, [None, pa.py_buffer(np.packbits(odd, bitorder="little"))])
    return pc.replace_with_mask(out, mask, _temporal(pa.array(texts, pa.string()), typ, where, stats))


@functools.cache
def _month_firsts() -> np.ndarray:
    """The first day of every month of the years 0-9999 (index year * 12 + month - 1, and one past the end), in
    days since 1970-01-01: numpy's calendar, proleptic Gregorian as Arrow's parser and the server count."""
    return (np.arange(10_000 * 12 + 1, dtype=np.int64) - 1970 * 12).astype("M8[M]").astype("M8[D]").view(np.int64)


def _int64s(arr: pa.Array) -> np.ndarray:
    """An integer array's values as int64 (nulls as 0)."""
    if arr.null_count:
        arr = pc.fill_null(arr, 0)
    return arr.to_numpy(zero_copy_only=False).astype(np.int64, copy=False)


def _packed_text(date: int, clock: int | None, micros: int) -> str:
    y, md = divmod(date, 10_000)
    m, d = divmod(md, 100)
    if clock is None:
        return f"{y:04d}-{m:02d}-{d:02d}"
    hh, rest = divmod(clock, 10_000)
    mi, ss = divmod(rest, 100)
    return f"{y:04d}-{m:02d}-{d:02d} {hh:02d}:{mi:02d}:{ss:02d}.{micros:06d}"


def snapshot_history(values: dict, tm: TableMap, file: str, pos: int, read_at: int, file_seq: int, batch_id: int,
                     first_row: int = 0) -> pa.Table:
    """History rows (`snapshot` changes ordered at file:pos) for typed value columns: the layout history_table
    gives the binlog path's rows, built with Arrow only (constant metadata columns from buffers)."""
    n = len(next(iter(values.values()))) if values else 0
    commit_us = read_at * 1_000_000
    meta = {
        "_op": _repeat_text("snapshot", n),
        "_binlog_file": _repeat_text(file, n),
        "_file_seq": _repeat_int(file_seq, n, pa.int64()),
        "_pos": _repeat_int(pos, n, pa.int64()),
        "_sub": _repeat_int(0, n, pa.int64()),
        "_row": np_array(np.arange(first_row, first_row + n, dtype=np.int32)),
        "_txn_pos": _repeat_int(pos, n, pa.int64()),
        "_commit_ts": _repeat_int(commit_us, n, pa.int64()).cast(pa.timestamp("us", tz="UTC")),
        "_gtid": pa.nulls(n, pa.string()),
        "_schema_version": _repeat_text(tm.schema_version, n) if tm.schema_version is not None
        else pa.nulls(n, pa.string()),
        "_batch_id": _repeat_int(batch_id, n, pa.int64()),
        "_commit_date": _repeat_int(commit_us // US_PER_DAY, n, pa.int32()).cast(pa.date32()),
    }
    before = pa.struct([pa.field(col.key, arrow_type(col)) for col in tm.columns])
    return pa.table({**values, "_before": pa.nulls(n, before), **meta})


def _repeat_text(value: str, n: int) -> pa.Array:
    data = value.encode()
    offsets = np.arange(0, (n + 1) * len(data), len(data) or 1, dtype=np.int32)[:n + 1] if data else \
        np.zeros(n + 1, np.int32)
    return pa.StringArray.from_buffers(n, pa.py_buffer(offsets), pa.py_buffer(data * n))


def _repeat_int(value: int, n: int, typ: pa.DataType) -> pa.Array:
    return np_array(np.full(n, value, dtype=np.int32 if typ == pa.int32() else np.int64))
