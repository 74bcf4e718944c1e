"""Which tables a DDL statement creates, renames, truncates or drops: the table lifecycle, by name only.

The schema timeline replays statements against the layouts it knows; the lake's table lifecycle (binlake.lake.
lifecycle) needs the names even where no layout is known (a table created before the decoded files, FULL row
metadata without snapshots), so this reads them from the statement alone, with the same tokenizer and name rules
as the DDL parser. Anything else (ALTER without RENAME, views, ...) is None.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .catalog import Catalog, DdlError
from .ddl import _Statement
from .sqllex import Cursor, SqlSyntaxError


@dataclass
class LifecycleOp:
    """kind: create | rename | truncate | drop | drop_database. `tables` are qualified names (db.table):
    the created, truncated or dropped tables; `renames` the (old, new) pairs in statement order (a swap is several
    pairs of one statement); `database` the dropped database; `replace` CREATE OR REPLACE."""

    kind: str
    tables: list[str] = field(default_factory=list)
    renames: list[tuple[str, str]] = field(default_factory=list)
    database: str | None = None
    replace: bool = False


def lifecycle_of(sql: str, default_db: str | None) -> LifecycleOp | None:
    """The lifecycle effect of one statement, or None (not a lifecycle statement, or not understood)."""
    try:
        cur = Cursor(sql)
        st = _Statement(Catalog(), cur, default_db)
        if cur.at_end():
            return None
        word = cur.next().upper
        if word == "CREATE":
            replace = cur.accept("OR", "REPLACE")
            if not cur.accept("TABLE"):
                return None  # TEMPORARY tables, views, databases, ...
            cur.accept("IF", "NOT", "EXISTS")
            return LifecycleOp("create", [st.table_name().qualified], replace=replace)
        if word == "RENAME":
            if not (cur.accept("TABLE") or cur.accept("TABLES")):
                return None
            cur.accept("IF", "EXISTS")
            pairs = [(src.qualified, dst.qualified) for src, dst in st.rename_pairs()]
            return LifecycleOp("rename", renames=pairs)
        if word == "ALTER":
            while cur.accept("ONLINE") or cur.accept("OFFLINE") or cur.accept("IGNORE"):
                pass
            if not cur.accept("TABLE"):
                return None
            tn, ops, _options = st.alter_parts()
            rename = next((op for op in reversed(ops) if op.kind == "rename_table"), None)
            if rename is None or rename.value.key == tn.key:
                return None
            return LifecycleOp("rename", renames=[(tn.qualified, rename.value.qualified)])
        if word == "TRUNCATE":
            cur.accept("TABLE")
            return LifecycleOp("truncate", [st.table_name().qualified])
        if word == "DROP":
            if cur.accept("TEMPORARY"):
                return None
            if cur.accept("TABLE") or cur.accept("TABLES") or cur.accept("SEQUENCE"):
                cur.accept("IF", "EXISTS")
                names = [st.table_name().qualified]
                while cur.accept_op(","):
                    names.append(st.table_name().qualified)
                return LifecycleOp("drop", names)
            if cur.accept("DATABASE") or cur.accept("SCHEMA"):
                cur.accept("IF", "EXISTS")
                return LifecycleOp("drop_database", database=cur.ident("a database name"))
        return None
    except (SqlSyntaxError, DdlError):
        return None
