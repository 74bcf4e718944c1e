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
    compressed: bool = False  # MariaDB `COMPRESSED` (a different binlog type and value format)
    comment: str | None = None
    # Identity across ALTERs within one lineage of versions: CHANGE/MODIFY/RENAME COLUMN keep it, ADD gets a new
    # one. It is how existing rows follow a renamed column (see evolve.py). Not part of the layout fingerprint.
    uid: int | None = None

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
    last_uid: int = 0  # highest column identity ever given in this lineage (never reused after a DROP)
    # Where this lineage of versions began (a snapshot, or a CREATE TABLE at a binlog position): column identities
    # are comparable only within one lineage. Deterministic, so a rebuilt timeline gives the same one.
    lineage: str | None = None
    # UNIQUE keys in the server's order: {"name", "columns", "plain"} (plain: no prefix or expression parts).
    # Without a primary key, the first one whose columns are all NOT NULL is the row identity (row_key).
    unique_keys: list[dict[str, Any]] = field(default_factory=list)

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

    def row_key(self) -> list[str]:
        """The columns that identify a row: the primary key, else (as the server picks its clustered key) the
        first UNIQUE key whose columns are all NOT NULL, whole (no prefix, no expression) and not BLOB/TEXT (those
        are hash keys); [] when there is neither (history only)."""
        if self.primary_key:
            return list(self.primary_key)
        for key in self.unique_keys:
            cols = [self.column(n) for n in key["columns"]]
            if key.get("plain", True) and cols and all(c is not None and not c.nullable and c.data_type not in
                                                       _LOB_TYPES for c in cols):
                return [c.name for c in cols]
        return []

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> TableDef:
        cols = [ColumnDef(**c) for c in data.get("columns", [])]
        rest = {k: v for k, v in data.items() if k != "columns"}
        return cls(columns=cols, **rest)

    def fingerprint(self) -> str:
        """A short hash of the column layout (what decoding depends on): the schema version id used in the lake.

        Defaults, comments, integer display widths and column identities are left out, so a table parsed from a
        snapshot and the same table replayed from DDL get the same id."""
        layout = []
        for c in self.columns:
            length = None if c.data_type in _INTEGER_TYPES else c.length
            entry = [c.name, c.data_type, length, c.precision, c.scale, c.fsp, c.unsigned, c.charset, c.labels,
                     c.generated is not None and not c.stored]
            if c.compressed:  # only when set: the ids of every other layout stay what they were
                entry.append("compressed")
            if c.generated is not None:  # a changed expression changes every row: a version of its own
                entry.append(expression_key(c.generated))
            layout.append(entry)
        identity = [self.primary_key]
        if not self.primary_key and self.row_key():  # a UNIQUE NOT NULL key identifies rows: part of the layout
            identity.append(self.row_key())
        payload = json.dumps([layout, *identity], sort_keys=True)
        return hashlib.sha256(payload.encode()).hexdigest()[:16]

    def ensure_uids(self) -> None:
        """Give columns without an identity the next free ones, in column order."""
        next_uid = max([self.last_uid, *(c.uid for c in self.columns if c.uid is not None)]) + 1
        for c in self.columns:
            if c.uid is None:
                c.uid = next_uid
                next_uid += 1
        self.last_uid = next_uid - 1


def expression_key(sql: str) -> str:
    """A generation expression without the spelling differences of SHOW CREATE TABLE and the DDL as written
    (backticks, spaces, case, outer parentheses)."""
    text = "".join(sql.replace("`", "").split()).lower()
    while text.startswith("(") and text.endswith(")") and _balanced(text[1:-1]):
        text = text[1:-1]
    return text


def _balanced(text: str) -> bool:
    depth = 0
    for ch in text:
        depth += (ch == "(") - (ch == ")")
        if depth < 0:
            return False
    return depth == 0


_INTEGER_TYPES = frozenset({"tinyint", "smallint", "mediumint", "int", "bigint"})
_LOB_TYPES = frozenset({"tinytext", "text", "mediumtext", "longtext", "tinyblob", "blob", "mediumblob", "longblob",
                        "json"})
