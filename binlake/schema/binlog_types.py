"""How a DDL column appears in a binlog TABLE_MAP: type code, metadata, signedness, collation, labels.

Used two ways: to name and type the columns of a rows event from a schema version (MINIMAL metadata gives
positions only), and by the guard to check that the version really is the table the server logged.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..binlog import coltypes as ct
from ..binlog.charsets import COLLATION_CHARSET, COLLATION_IDS
from ..binlog.coltypes import DDL_TYPES, ddl_names
from ..binlog.constants import ColumnType as T
from ..binlog.tablemap import Column, TableMap
from .model import ColumnDef, TableDef

# Bytes per character, by character set (what the server multiplies declared lengths by).
MBMAXLEN = {
    "utf8mb4": 4, "utf8mb3": 3, "utf8": 3, "utf16": 4, "utf16le": 4, "utf32": 4, "ucs2": 2, "gbk": 2, "gb2312": 2,
    "gb18030": 4, "big5": 2, "sjis": 2, "cp932": 2, "ujis": 3, "eucjpms": 3, "euckr": 2, "binary": 1,
}

INTEGERS = {name: DDL_TYPES[name] for name in ddl_names(ct.INT)}
BLOB_PACK = {"tinyblob": 1, "tinytext": 1, "blob": 2, "text": 2, "mediumblob": 3, "mediumtext": 3, "longblob": 4,
             "longtext": 4}
GEOMETRY = ddl_names(ct.GEOMETRY)
CHARACTER = {"char", "varchar", "tinytext", "text", "mediumtext", "longtext"}
BINARY_TYPES = {"binary", "varbinary", "tinyblob", "blob", "mediumblob", "longblob"}


@dataclass(frozen=True)
class BinlogShape:
    """What the server writes for a column: type code and metadata, and the equivalent forms it may use."""

    type: int
    meta: int | None  # None when the metadata cannot be derived from DDL alone
    alternatives: tuple[tuple[int, int | None], ...] = ()

    def matches(self, type_code: int, meta: int) -> bool:
        return any(t == type_code and (m is None or m == meta) for t, m in ((self.type, self.meta), *self.alternatives))

    def describe(self) -> str:
        return f"type {T(self.type).name} meta {self.meta}" if self.type in T._value2member_map_ else str(self.type)


def charset_of(col: ColumnDef) -> str | None:
    if col.charset:
        return "utf8mb3" if col.charset == "utf8" else col.charset
    if col.collation and col.collation in COLLATION_IDS:
        return COLLATION_CHARSET.get(COLLATION_IDS[col.collation])
    return None


def collation_id(col: ColumnDef) -> int | None:
    """The collation id to decode the column with (any id of its charset will do for decoding)."""
    if col.data_type in BINARY_TYPES:
        return 63
    if col.collation and col.collation in COLLATION_IDS:
        return COLLATION_IDS[col.collation]
    cs = charset_of(col)
    if cs is None:
        return None
    default = f"{cs}_general_ci" if cs != "binary" else None
    if default and default in COLLATION_IDS:
        return COLLATION_IDS[default]
    for cid, name in COLLATION_CHARSET.items():
        if name == cs:
            return cid
    return None


def _max_bytes(col: ColumnDef) -> int | None:
    if col.length is None:
        return None
    if col.data_type in ("binary", "varbinary"):
        return col.length
    cs = charset_of(col)
    if cs is None:
        return None
    return col.length * MBMAXLEN.get(cs, 1)


def binlog_shape(col: ColumnDef, mariadb: bool = False) -> BinlogShape:
    """The TABLE_MAP type and metadata the server writes for this column."""
    dt = col.data_type
    if dt in INTEGERS:
        return BinlogShape(INTEGERS[dt], 0)
    if dt in ("decimal", "numeric"):
        p, s = col.precision or 10, col.scale or 0
        return BinlogShape(T.NEWDECIMAL, p << 8 | s)
    if dt == "float":
        return BinlogShape(T.FLOAT, 4)
    if dt in ("double", "real"):
        return BinlogShape(T.DOUBLE, 8)
    if dt == "bit":
        n = col.length or 1
        return BinlogShape(T.BIT, (n // 8) << 8 | (n % 8))
    if dt == "year":
        return BinlogShape(T.YEAR, 0)
    if dt == "date":
        return BinlogShape(T.DATE, 0, ((T.NEWDATE, 0),))
    fsp = col.fsp or 0
    # The pre-5.6 types: MySQL 5.5 (no fractions), and MariaDB with mysql56_temporal_format=OFF, whose
    # TIME(n)/DATETIME(n)/TIMESTAMP(n) keep the old codes without metadata (the decoder takes n from the schema).
    old = mariadb or not fsp
    if dt == "datetime":
        return BinlogShape(T.DATETIME2, fsp, ((T.DATETIME, 0),) if old else ())
    if dt == "timestamp":
        return BinlogShape(T.TIMESTAMP2, fsp, ((T.TIMESTAMP, 0),) if old else ())
    if dt == "time":
        return BinlogShape(T.TIME2, fsp, ((T.TIME, 0),) if old else ())
    if col.compressed and mariadb and dt in ("varchar", "varbinary"):
        size = _max_bytes(col)  # the stored value has one more byte, the compression header
        return BinlogShape(T.VARCHAR_COMPRESSED, None if size is None else size + 1)
    if col.compressed and mariadb and dt in BLOB_PACK:
        return BinlogShape(T.BLOB_COMPRESSED, BLOB_PACK[dt])
    if dt in ("varchar", "varbinary"):
        return BinlogShape(T.VARCHAR, _max_bytes(col), ((T.VAR_STRING, _max_bytes(col)),))
    if dt in ("char", "binary"):
        return BinlogShape(T.STRING, _max_bytes(col))
    if dt in BLOB_PACK:
        return BinlogShape(T.BLOB, BLOB_PACK[dt])
    if dt == "enum":
        return BinlogShape(T.ENUM, 2 if len(col.labels or ()) > 255 else 1)
    if dt == "set":
        n = len(col.labels or ())
        return BinlogShape(T.SET, {0: 1, 1: 1, 2: 2, 3: 3, 4: 4}.get((n + 7) // 8, 8))
    if dt == "json":
        # MariaDB's JSON is LONGTEXT; MySQL writes its binary JSON type.
        return BinlogShape(T.BLOB, 4) if mariadb else BinlogShape(T.JSON, 4, ((T.BLOB, 4),))
    if dt in GEOMETRY:
        return BinlogShape(T.GEOMETRY, 4)
    if dt == "vector":
        # MySQL 9: its own VECTOR type. MariaDB 11.7+: stored as VARBINARY(4 * dimensions).
        if mariadb:
            size = 4 * col.length if col.length else None
            return BinlogShape(T.VARCHAR, size, ((T.VAR_STRING, size), (T.VECTOR, None)))
        return BinlogShape(T.VECTOR, 4)
    if dt == "inet4":  # MariaDB: stored as BINARY(4), network byte order
        return BinlogShape(T.STRING, 4)
    if dt in ("inet6", "uuid"):  # MariaDB: stored as BINARY(16)
        return BinlogShape(T.STRING, 16)
    return BinlogShape(-1, None)


# Schema types whose binlog storage is an ordinary binary type: the decoder reads the bytes as this.
LOGICAL_TYPES = {"inet4": "inet4", "inet6": "inet6", "uuid": "uuid", "vector": "vector"}


def table_map_for(tdef: TableDef, mariadb: bool) -> TableMap:
    """A TABLE_MAP-like description of a table from its DDL, so snapshot rows take the binlog rows' types."""
    columns = []
    for i, c in enumerate(tdef.columns):
        shape = binlog_shape(c, mariadb)
        col = Column(i, shape.type, shape.meta or 0, c.nullable, not c.unsigned, collation_id(c), c.name)
        col.logical = LOGICAL_TYPES.get(c.data_type)
        if c.data_type == "enum":
            col.enum_labels = list(c.labels or [])
        elif c.data_type == "set":
            col.set_labels = list(c.labels or [])
        columns.append(col)
    tm = TableMap(0, tdef.database, tdef.name, columns,
                  primary_key=[tdef.index_of(n) for n in tdef.row_key()] or None)
    tm.schema_version = tdef.fingerprint()
    tm.schema = tdef
    tm.names_from_server = True
    return tm
