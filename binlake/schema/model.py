"""Table definitions as DDL describes them: what the schema timeline stores and the guard compares.

A `TableDef` is parsed from CREATE TABLE text (snapshots) and changed by the DDL found in binlogs. It knows how
each column appears in a binlog TABLE_MAP (type code and metadata), so a rows event can be checked against it.
"""

from __future__ import annotations

import copy
import hashlib
import json
from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass
class ColumnDef:
    """One column. `data_type` is the lower-case base type ('int', 'varchar', 'decimal', 'enum', 'datetime', ...).

    `length` is the declared length (CHAR/VARCHAR/BINARY/VARBINARY/BIT/display width), `fsp` the fractional
    seconds of TIME/DATETIME/TIMESTAMP, `precision`/`scale` those of DECIMAL (and FLOAT/DOUBLE when given),
    `charset`/`collation` the effective ones for character columns (table default applied), `labels` the ENUM or
    SET values (unquoted, unescaped), `generated` the expression of a generated column.
    """

    name: str
    data_type: str
    length: int | None = None
    precision: int | None = None
    scale: int | None = None
    fsp: int | None = None
    unsigned: bool = False
    zerofill: bool = False
    charset: str | None = None
    collation: str | None = None
    labels: list[str] | None = None
    nullable: bool = True
    default: str | None = None  # SQL text of the DEFAULT clause, None when there is none
    auto_increment: bool = False
    generated: str | None = None
    stored: bool = False
    invisible: bool = False
    comment: str | None = None

    def copy(self) -> ColumnDef:
        return copy.deepcopy(self)


@dataclass
class TableDef:
    database: str
    name: str
    columns: list[ColumnDef] = field(default_factory=list)
    primary_key: list[str] = field(default_factory=list)
    charset: str | None = None
    collation: str | None = None
    engine: str | None = None

    @property
    def qualified_name(self) -> str:
        return f"{self.database}.{self.name}"

    def column(self, name: str) -> ColumnDef | None:
        low = name.lower()
        for c in self.columns:
            if c.name.lower() == low:
                return c
        return None

    def index_of(self, name: str) -> int:
        low = name.lower()
        for i, c in enumerate(self.columns):
            if c.name.lower() == low:
                return i
        raise KeyError(name)

    def copy(self) -> TableDef:
        return copy.deepcopy(self)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> TableDef:
        cols = [ColumnDef(**c) for c in data.get("columns", [])]
        rest = {k: v for k, v in data.items() if k != "columns"}
        return cls(columns=cols, **rest)

    def fingerprint(self) -> str:
        """A short hash of the column layout: the schema version id used in the lake."""
        payload = json.dumps([asdict(c) for c in self.columns] + [self.primary_key], sort_keys=True)
        return hashlib.sha256(payload.encode()).hexdigest()[:16]
