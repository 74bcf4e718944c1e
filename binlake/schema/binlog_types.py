"""How a DDL column appears in a binlog TABLE_MAP: type code, metadata, signedness, collation, labels.

Used two ways: to name and type the columns of a rows event from a schema version (MINIMAL metadata gives
positions only), and by the guard to check that the version really is the table the server logged.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..binlog.charsets import COLLATION_CHARSET, COLLATION_IDS
from ..binlog.coltypes import BLOB_PACK, DDL_TYPES, LOGICAL, TYPES
from ..binlog.constants import ColumnType as T
from ..binlog.tablemap import Column, TableMap
from .model import ColumnDef, TableDef

# Bytes per character, by character set (what the server multiplies declared lengths by).
MBMAXLEN = {
    "utf8mb4": 4, "utf8mb3": 3, "utf8": 3, "utf16": 4, "utf16le": 4, "utf32": 4, "ucs2": 2, "gbk": 2, "gb2312": 2,
    "gb18030": 4, "big5": 2, "sjis": 2, "cp932": 2, "ujis": 3, "eucjpms": 3, "euckr": 2, "binary": 1,
}

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
    """The TABLE_MAP type and metadata the server writes for this column: MySQL's, from the column-type registry
    (binlake/binlog/coltypes.py: the entry naming the DDL type, its `ddl_meta`, `ddl_alias` and `ddl_old`), unless
    MariaDB stores the type another way or the type is a logical one over BINARY."""
    dt = col.data_type
    if mariadb:
        shape = _mariadb_shape(col)
        if shape is not None:
            return shape
    if dt == "inet4":  # MariaDB: stored as BINARY(4), network byte order
        return BinlogShape(T.STRING, 4)
    if dt in ("inet6", "uuid"):  # MariaDB: stored as BINARY(16)
        return BinlogShape(T.STRING, 16)
    code = DDL_TYPES.get(dt)
    if code is None:
        return BinlogShape(-1, None)
    spec = TYPES[code]
    meta = spec.ddl_meta(col, _max_bytes(col))  # type: ignore[misc]
    alternatives: list[tuple[int, int | None]] = []
    if spec.ddl_alias is not None:
        alternatives.append((spec.ddl_alias, meta))
    # The pre-5.6 types: MySQL 5.5 (no fractions), and MariaDB with mysql56_temporal_format=OFF, whose
    # TIME(n)/DATETIME(n)/TIMESTAMP(n) keep the old codes without metadata (the decoder takes n from the schema).
    if spec.ddl_old is not None and (mariadb or not col.fsp):
        alternatives.append((spec.ddl_old, 0))
    return BinlogShape(code, meta, tuple(alternatives))


def _mariadb_shape(col: ColumnDef) -> BinlogShape | None:
    """MariaDB's own storage of a column (COMPRESSED columns, JSON as LONGTEXT, vectors as VARBINARY), else None."""
    dt = col.data_type
    if col.compressed and dt in ("varchar", "varbinary"):
        size = _max_bytes(col)  # the stored value has one more byte, the compression header
        return BinlogShape(T.VARCHAR_COMPRESSED, None if size is None else size + 1)
    if col.compressed and dt in BLOB_PACK:
        return BinlogShape(T.BLOB_COMPRESSED, BLOB_PACK[dt])
    if dt == "json":
        return BinlogShape(T.BLOB, 4)
    if dt == "vector":  # MariaDB 11.7+: VARBINARY(4 * dimensions); MySQL 9 has its own VECTOR type
        size = 4 * col.length if col.length else None
        return BinlogShape(T.VARCHAR, size, ((T.VAR_STRING, size), (T.VECTOR, None)))
    return None


# Schema types whose binlog storage is an ordinary binary type: the decoder reads the bytes as this.
LOGICAL_TYPES = {name: name for name in LOGICAL}  # coltypes.LOGICAL: the DDL type names the logical type


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
