"""The catalog of table definitions, and how ALTER TABLE operations change a TableDef.

ALTER TABLE follows the server's two-phase rules (mysql_prepare_alter_table): DROP, MODIFY, CHANGE and RENAME
COLUMN name columns of the table as it was before the statement; then new columns and moved ones are placed
(FIRST / AFTER a name in the new list) in statement order. So `CHANGE a b INT, CHANGE b a INT` swaps two columns
and `ADD c INT AFTER a, CHANGE a a2 INT` fails, as on the server.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass

from .coldef import (
    CHARACTER_TYPES,
    LOB_BYTES,
    TEXT_TYPES,
    TO_BINARY,
    ColumnSpec,
    charset_of_collation,
    lob_type,
    mbmaxlen,
    norm_charset,
    norm_collation,
    resolve_charset,
)
from .keys import alter_unique_keys
from .model import ColumnDef, TableDef

# MariaDB: the hidden columns WITH SYSTEM VERSIONING adds when none are declared (they are in the binlog rows).
VERSIONING_COLUMNS = [
    ColumnDef("row_start", "timestamp", fsp=6, nullable=False, generated="ROW START", stored=True, invisible=True),
    ColumnDef("row_end", "timestamp", fsp=6, nullable=False, generated="ROW END", stored=True, invisible=True),
]


class DdlError(ValueError):
    """A statement that cannot be turned into a layout: bad syntax, or it does not fit the catalog."""


class Catalog:
    """Table definitions by (database, table), matched case-insensitively (lower_case_table_names=1 or 2 style;
    on a case-sensitive server `T` and `t` would be one table here). Original case is kept.

    Also holds database default charsets/collations (from snapshots or CREATE DATABASE; a database created
    without one gets the server's, when known) and the tables whose layout became unknown (a statement about
    them was not understood): `get` returns None for those.
    """

    def __init__(self, db_charsets: dict[str, str] | None = None, db_collations: dict[str, str] | None = None,
                 server_charset: str | None = None, server_collation: str | None = None) -> None:
        self._tables: dict[tuple[str, str], TableDef] = {}
        # character_set_server / collation_server: what CREATE DATABASE without a charset gets
        self.server_charset, self.server_collation = norm_charset(server_charset), norm_collation(server_collation)
        self.db_charsets: dict[str, str] = {k.lower(): norm_charset(v) for k, v in (db_charsets or {}).items() if v}
        self.db_collations: dict[str, str] = {
            k.lower(): norm_collation(v) for k, v in (db_collations or {}).items() if v}
        self.unknown: dict[tuple[str, str], str] = {}  # (db, table) lower-cased -> why
        # Where the statements being applied come from (set by the timeline): new tables' lineage starts there.
        self.origin: str | None = None

    def get(self, db: str, table: str) -> TableDef | None:
        return self._tables.get((db.lower(), table.lower()))

    def put(self, table_def: TableDef) -> None:
        table_def.ensure_uids()
        if table_def.lineage is None and self.origin is not None:
            table_def.lineage = f"{self.origin} {table_def.qualified_name}"
        key = (table_def.database.lower(), table_def.name.lower())
        self._tables[key] = table_def
        self.unknown.pop(key, None)

    def drop(self, db: str, table: str) -> TableDef | None:
        key = (db.lower(), table.lower())
        self.unknown.pop(key, None)
        return self._tables.pop(key, None)

    def mark_unknown(self, db: str, table: str, why: str) -> None:
        key = (db.lower(), table.lower())
        self._tables.pop(key, None)
        self.unknown[key] = why

    def tables(self) -> list[TableDef]:
        return [self._tables[k] for k in sorted(self._tables)]

    def copy(self) -> Catalog:
        return copy.deepcopy(self)

    def db_default(self, db: str) -> tuple[str | None, str | None]:
        return self.db_charsets.get(db.lower()), self.db_collations.get(db.lower())

    def set_db_default(self, db: str, charset: str | None, collation: str | None) -> None:
        if collation and not charset:
            charset = charset_of_collation(collation)
        for store, value in ((self.db_charsets, charset), (self.db_collations, collation)):
            if value:
                store[db.lower()] = value
            else:
                store.pop(db.lower(), None)

    def drop_database(self, db: str) -> list[str]:
        low = db.lower()
        gone = [t.qualified_name for k, t in sorted(self._tables.items()) if k[0] == low]
        gone += [f"{db}.{k[1]}" for k in sorted(self.unknown) if k[0] == low]
        self._tables = {k: t for k, t in self._tables.items() if k[0] != low}
        self.unknown = {k: v for k, v in self.unknown.items() if k[0] != low}
        self.db_charsets.pop(low, None)
        self.db_collations.pop(low, None)
        return gone


# -- ALTER TABLE ----------------------------------------------------------------------------------------------


@dataclass
class AlterOp:
    kind: str  # add | drop | change | rename_col | alter_col | rename_table | convert | charset | add_pk | drop_pk
    #            | engine | add_versioning | drop_versioning | add_unique | drop_index | rename_index
    name: str | None = None  # the column it names (as it was before the statement)
    spec: ColumnSpec | None = None
    value: object = None
    if_exists: bool = False


def _pick(columns: list[ColumnDef], name: str) -> int | None:
    low = name.lower()
    return next((i for i, c in enumerate(columns) if c.name.lower() == low), None)


def _place(columns: list[ColumnDef], col: ColumnDef, position: tuple[str, str | None] | None) -> None:
    if position is None:
        columns.append(col)
    elif position[0] == "first":
        columns.insert(0, col)
    else:
        i = _pick(columns, position[1] or "")
        if i is None:
            raise DdlError(f"AFTER {position[1]}: no such column")
        columns.insert(i + 1, col)


def _convert_column(col: ColumnDef, charset: str, collation: str | None) -> None:
    """CONVERT TO CHARACTER SET for one column. TEXT types grow so they still hold as many characters (MariaDB
    and MySQL both do this: TEXT latin1 -> MEDIUMTEXT utf8mb4); they never shrink."""
    if col.data_type not in CHARACTER_TYPES:
        return
    if col.data_type in TEXT_TYPES and col.charset and charset != "binary":
        chars = LOB_BYTES[TEXT_TYPES.index(col.data_type)] // mbmaxlen(col.charset)
        grown = lob_type(TEXT_TYPES, chars * mbmaxlen(charset))
        if TEXT_TYPES.index(grown) > TEXT_TYPES.index(col.data_type):
            col.data_type = grown
    col.charset, col.collation = charset, collation
    if charset == "binary":
        col.data_type = TO_BINARY.get(col.data_type, col.data_type)
        col.collation = "binary"


def _spec(op: AlterOp) -> ColumnSpec:
    assert op.spec is not None, op
    return op.spec


def apply_alter(table: TableDef, ops: list[AlterOp]) -> TableDef:
    """A new TableDef: `table` after the ALTER TABLE operations (raises DdlError when they do not fit it)."""
    new = table.copy()
    for op in ops:  # table defaults first: columns defined in the same statement get the new default
        if op.kind in ("charset", "convert"):
            new.charset, new.collation = op.value
    drops, changes = _old_column_ops(table, new, ops)
    columns: list[ColumnDef] = []
    for col in table.columns:  # phase 1: the old columns, dropped or changed in place
        low = col.name.lower()
        if low in drops:
            continue
        op = changes.get(low)
        if op is None:
            columns.append(col.copy())
        elif _spec(op).position is None:
            columns.append(_spec(op).col)
    for op in ops:  # phase 2: new columns and moved ones, in statement order
        if op.kind == "add":
            spec = _spec(op)
            if _pick(columns, spec.col.name) is not None:
                if op.if_exists:  # ADD COLUMN IF NOT EXISTS
                    continue
                raise DdlError(f"ADD COLUMN {spec.col.name}: {table.qualified_name} already has it")
            _place(columns, resolve_charset(spec, new.charset, new.collation), spec.position)
        elif changes.get((op.name or "").lower()) is op and _spec(op).position is not None:
            _place(columns, _spec(op).col, _spec(op).position)
    new.columns = columns
    check_unique(new)
    _alter_keys(table, new, ops, drops, changes)
    _alter_rest(new, ops)
    new.ensure_uids()
    return new


def _old_column_ops(table: TableDef, new: TableDef, ops: list[AlterOp]) -> tuple[set[str], dict[str, AlterOp]]:
    """DROP / CHANGE / MODIFY / RENAME COLUMN by the lower-cased name they have in `table` (before the
    statement); each column at most once, as on the server."""
    original = {c.name.lower() for c in table.columns}
    drops: set[str] = set()
    changes: dict[str, AlterOp] = {}
    for op in ops:
        if op.kind not in ("drop", "change", "rename_col"):
            continue
        low = (op.name or "").lower()
        if low not in original and op.if_exists:
            continue
        if low not in original or low in drops or low in changes:
            raise DdlError(f"{op.kind.replace('_col', '').upper()} COLUMN {op.name}: no such column in "
                           f"{table.qualified_name} (or named twice)")
        if op.kind == "drop":
            drops.add(low)
            continue
        if op.kind == "rename_col":  # the same definition under a new name
            col = table.columns[_pick(table.columns, op.name or "") or 0].copy()
            col.name = str(op.value)
            op.spec = ColumnSpec(col)
        else:  # MODIFY / CHANGE redefine the column: no charset given means the table's (new) default
            resolve_charset(_spec(op), new.charset, new.collation)
        # The redefined column is still the same column: existing rows keep their values under it.
        _spec(op).col.uid = table.columns[_pick(table.columns, op.name or "") or 0].uid
        changes[low] = op
    return drops, changes


def check_unique(table: TableDef) -> None:
    seen: set[str] = set()
    for c in table.columns:
        if c.name.lower() in seen:
            raise DdlError(f"{table.qualified_name} would have two columns named {c.name}")
        seen.add(c.name.lower())


def _alter_keys(old: TableDef, new: TableDef, ops: list[AlterOp], drops: set[str], changes: dict[str, AlterOp]) -> None:
    renamed = {k: _spec(op).col.name for k, op in changes.items()}
    alter_unique_keys(old, new, ops, drops, renamed)
    pk = [renamed.get(n.lower(), n) for n in old.primary_key if n.lower() not in drops]
    for op in ops:
        if op.kind == "drop_pk":
            pk = []
    for op in ops:
        if op.kind == "add_pk":
            pk = list(op.value)
        elif op.kind in ("add", "change") and op.spec is not None and op.spec.primary:
            pk = [op.spec.col.name]
    new.primary_key = pk_names(new, pk)


def pk_names(table: TableDef, names: list[str]) -> list[str]:
    """Key columns with the case of their definitions; they become NOT NULL."""
    out = []
    for n in names:
        i = _pick(table.columns, n)
        if i is None:
            raise DdlError(f"PRIMARY KEY column {n} is not a column of {table.qualified_name}")
        table.columns[i].nullable = False
        out.append(table.columns[i].name)
    return out


def _alter_rest(new: TableDef, ops: list[AlterOp]) -> None:
    for op in ops:
        if op.kind == "alter_col":
            i = _pick(new.columns, op.name or "")
            if i is None:
                if op.if_exists:
                    continue
                raise DdlError(f"ALTER COLUMN {op.name}: no such column in {new.qualified_name}")
            action, default = op.value
            col = new.columns[i]
            if action == "default":
                col.default = default
            elif action == "invisible":
                col.invisible = default == "invisible"
        elif op.kind == "add_versioning" and not any(c.generated == "ROW START" for c in new.columns):
            new.columns.extend(c.copy() for c in VERSIONING_COLUMNS)
        elif op.kind == "drop_versioning":
            new.columns = [c for c in new.columns if c.generated not in ("ROW START", "ROW END")]
        elif op.kind == "engine":
            new.engine = str(op.value)
    for op in ops:
        if op.kind == "convert":
            charset, collation = op.value
            for col in new.columns:
                _convert_column(col, charset, collation)
