"""The guard: a rows event is resolved against a schema version only if its TABLE_MAP really describes it.

Column count, type codes and metadata (lengths, precision/scale, fsp, pack lengths) are compared, and the names
when the server wrote them. A mismatch is a SchemaMismatch naming table, file, position and the first differing
column; nothing is padded, truncated or guessed.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..binlog import coltypes as ct
from ..binlog.coltypes import TYPES
from ..binlog.constants import ColumnType as T
from ..binlog.errors import SchemaMismatch
from ..binlog.tablemap import Column, TableMap
from .binlog_types import LOGICAL_TYPES, binlog_shape, collation_id
from .model import TableDef

__all__ = ["NameDisagreement", "SchemaMismatch", "apply_version", "check"]


@dataclass
class NameDisagreement:
    """The server's column names (FULL metadata) differ from the schema version: the server's names win."""

    table: str
    file: str
    pos: int
    index: int
    server_name: str
    schema_name: str

    def __str__(self) -> str:
        return (f"{self.file}:{self.pos} {self.table} column {self.index + 1}: the binlog names it "
                f"{self.server_name!r}, the schema version {self.schema_name!r}")


def _type_name(code: int) -> str:
    try:
        return T(code).name
    except ValueError:
        return str(code)


def check(tm: TableMap, version: TableDef, file: str, pos: int, mariadb: bool) -> list[NameDisagreement]:
    """Raise SchemaMismatch when `tm` cannot be `version`; return the name disagreements (server names win)."""
    table = tm.qualified_name
    if len(tm.columns) != len(version.columns):
        raise SchemaMismatch(
            f"{table}: the TABLE_MAP has {len(tm.columns)} columns, the schema version valid here has "
            f"{len(version.columns)} ({', '.join(c.name for c in version.columns)})",
            file, pos, table,
        )
    disagreements = []
    for i, (col, cdef) in enumerate(zip(tm.columns, version.columns, strict=True)):
        shape = binlog_shape(cdef, mariadb)
        if shape.type == -1:
            raise SchemaMismatch(f"{table}: column {i + 1} `{cdef.name}` has type {cdef.data_type!r}, which the "
                                 "schema module cannot map to a binlog type", file, pos, table, cdef.name)
        if not shape.matches(col.type, col.meta):
            raise SchemaMismatch(
                f"{table}: column {i + 1} `{cdef.name}` is {cdef.data_type} in the schema version valid here "
                f"(binlog {_type_name(shape.type)} meta {shape.meta}) but the TABLE_MAP has "
                f"{_type_name(col.type)} meta {col.meta}",
                file, pos, table, cdef.name,
            )
        if col.name is not None and col.name != cdef.name:
            disagreements.append(NameDisagreement(table, file, pos, i, col.name, cdef.name))
    return disagreements


def apply_version(tm: TableMap, version: TableDef, version_id: str) -> TableMap:
    """Name and type the TABLE_MAP's columns from the schema version (the server's own metadata wins)."""
    for col, cdef in zip(tm.columns, version.columns, strict=True):
        _enrich(col, cdef)
    if tm.primary_key is None and version.row_key():  # the primary key, else a UNIQUE NOT NULL key
        tm.primary_key = [version.index_of(n) for n in version.row_key()]
    tm.schema_version = version_id
    tm.schema = version
    return tm


def _enrich(col: Column, cdef) -> None:
    if col.name is None:
        col.name = cdef.name
    spec = TYPES.get(col.type)
    if spec is None:
        return
    if col.signed is None and spec.signedness[0]:  # a type with a sign (MySQL's SIGNEDNESS types)
        col.signed = not cdef.unsigned
    if col.collation is None and spec.charset:
        col.collation = collation_id(cdef)
    if spec.fsp_from_schema and not col.meta and cdef.fsp:
        col.meta = cdef.fsp  # MariaDB 5.3 hires format: the binlog does not carry the precision
    if col.logical is None and cdef.data_type in LOGICAL_TYPES:
        col.logical = LOGICAL_TYPES[cdef.data_type]
        if col.collation is None:
            col.collation = 63  # binary storage
    if cdef.labels is not None:
        if spec.value == ct.ENUM and col.enum_labels is None:
            col.enum_labels = list(cdef.labels)
        elif spec.value == ct.SET and col.set_labels is None:
            col.set_labels = list(cdef.labels)
