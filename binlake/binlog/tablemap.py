"""TABLE_MAP contents: per-column type, metadata and (when the server wrote them) names and labels."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .constants import BINARY_COLLATION, ColumnType


@dataclass
class Column:
    """One column as a rows event sees it.

    `type` is the binlog column type (ENUM/SET/real STRING resolved from STRING metadata), `meta` the raw
    type metadata integer (length, precision/scale packed as precision<<8|scale, fsp, bytes of length ...).
    `signed`/`collation`/`name`/`labels` are None when neither the table map nor a caller schema gave them.
    """

    index: int
    type: int
    meta: int = 0
    nullable: bool = True
    signed: bool | None = None
    collation: int | None = None
    name: str | None = None
    enum_labels: list[str] | None = None
    set_labels: list[str] | None = None
    geometry_type: int | None = None
    visible: bool = True
    vector_dimension: int | None = None
    # What the stored bytes mean beyond their binlog type: "inet4", "inet6", "uuid", "vector" (MariaDB writes
    # these as BINARY/VARBINARY: only the schema tells; MySQL 9's VECTOR type says so itself).
    logical: str | None = None

    @property
    def key(self) -> str:
        """The name used in output: the column name, else `@N` (1-based)."""
        return self.name if self.name is not None else f"@{self.index + 1}"

    @property
    def is_binary(self) -> bool:
        return self.collation == BINARY_COLLATION

    @property
    def precision(self) -> int:
        return self.meta >> 8

    @property
    def scale(self) -> int:
        return self.meta & 0xFF


INTEGER_TYPES = frozenset({ColumnType.TINY, ColumnType.SHORT, ColumnType.INT24, ColumnType.LONG, ColumnType.LONGLONG})
# Types whose signedness bit appears in SIGNEDNESS metadata, one bit per such column in column order.
# MySQL: its is_numeric_type() list, integers, FLOAT, DOUBLE and NEWDECIMAL (YEAR and BIT are not in it).
NUMERIC_TYPES = frozenset(INTEGER_TYPES | {ColumnType.FLOAT, ColumnType.DOUBLE, ColumnType.NEWDECIMAL})
# MariaDB: every column whose field is a numeric field (Field_num), which also covers YEAR (a TINYINT UNSIGNED
# underneath) and the pre-5.0 DECIMAL; BIT is not one. Checked on MariaDB 10.11: a YEAR column takes a bit.
MARIADB_NUMERIC_TYPES = frozenset(NUMERIC_TYPES | {ColumnType.YEAR, ColumnType.DECIMAL})


def signedness_types(mariadb: bool) -> frozenset[int]:
    """The column types the SIGNEDNESS bitmap has a bit for, on MariaDB or on MySQL."""
    return MARIADB_NUMERIC_TYPES if mariadb else NUMERIC_TYPES
# Types carrying a character set in DEFAULT_CHARSET/COLUMN_CHARSET metadata (ENUM/SET are separate).
# MySQL: its is_character_type() list (VECTOR since 9.0; GEOMETRY is not in it).
CHARACTER_TYPES = frozenset(
    {
        ColumnType.STRING,
        ColumnType.VAR_STRING,
        ColumnType.VARCHAR,
        ColumnType.BLOB,
        ColumnType.TINY_BLOB,
        ColumnType.MEDIUM_BLOB,
        ColumnType.LONG_BLOB,
        ColumnType.VECTOR,
    }
)
# MariaDB: every field with a character set, which includes GEOMETRY (binary) and the COMPRESSED columns.
# Checked on MariaDB 10.11: a GEOMETRY column takes an entry of COLUMN_CHARSET.
MARIADB_CHARACTER_TYPES = frozenset(
    (CHARACTER_TYPES - {ColumnType.VECTOR})
    | {ColumnType.GEOMETRY, ColumnType.BLOB_COMPRESSED, ColumnType.VARCHAR_COMPRESSED}
)


def character_types(mariadb: bool) -> frozenset[int]:
    """The column types the charset metadata has an entry for, on MariaDB or on MySQL."""
    return MARIADB_CHARACTER_TYPES if mariadb else CHARACTER_TYPES


@dataclass
class TableMap:
    """A TABLE_MAP event: the table id's database, table and columns, plus optional metadata."""

    table_id: int
    database: str
    table: str
    columns: list[Column]
    flags: int = 0
    primary_key: list[int] | None = None  # column indexes, when SIMPLE_PRIMARY_KEY/PRIMARY_KEY_WITH_PREFIX present
    metadata_fields: list[int] = field(default_factory=list)  # which optional metadata types were present
    names_from_server: bool = False
    signedness_known: bool = False
    charsets_known: bool = False
    schema_version: str | None = None  # set when a caller-supplied schema named the columns
    schema: Any = None  # the schema version (binlake.schema.model.TableDef) the columns were resolved against
    qualified_name: str = field(init=False, default="")

    def __post_init__(self) -> None:
        self.qualified_name = f"{self.database}.{self.table}"

    @property
    def column_keys(self) -> list[str]:
        return [c.key for c in self.columns]
