"""TABLE_MAP contents: per-column type, metadata and (when the server wrote them) names and labels."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .constants import BINARY_COLLATION


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
