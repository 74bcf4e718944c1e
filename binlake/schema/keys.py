"""UNIQUE keys of a table definition, kept so that a table without a primary key can still be identified: the
server uses the first UNIQUE key whose columns are all NOT NULL as the primary key (TableDef.row_key).

Each key is {"name", "columns", "plain"}: `plain` is False when a part is a prefix or an expression (or the key
is a hash key), which the server never takes as the primary key. Names follow the server's defaults (the first
column's name, then `_2`, `_3`, ... when taken), so DROP INDEX / RENAME INDEX find the key.
"""

from __future__ import annotations

from typing import Any

from .model import TableDef

Key = dict[str, Any]


def unique_key(name: str | None, columns: list[str], plain: bool = True) -> Key:
    return {"name": name, "columns": list(columns), "plain": plain}


def _find(keys: list[Key], name: str) -> int | None:
    low = name.lower()
    return next((i for i, k in enumerate(keys) if (k["name"] or "").lower() == low), None)


def add_key(keys: list[Key], key: Key) -> None:
    """Append `key`, giving it the server's default name when it has none."""
    key = dict(key)
    if not key["name"]:
        base = key["columns"][0] if key["columns"] else "key"
        name, n = base, 2
        while _find(keys, name) is not None or name.upper() == "PRIMARY":
            name, n = f"{base}_{n}", n + 1
        key["name"] = name
    keys.append(key)


def named(keys: list[Key]) -> list[Key]:
    out: list[Key] = []
    for k in keys:
        add_key(out, k)
    return out


def with_columns(table: TableDef, keys: list[Key]) -> list[Key]:
    """Keys whose columns all exist in `table`, with the columns' own case."""
    out = []
    for k in keys:
        cols = [table.column(n) for n in k["columns"]]
        if cols and all(c is not None for c in cols):
            out.append({**k, "columns": [c.name for c in cols if c is not None]})
    return out


def alter_unique_keys(old: TableDef, new: TableDef, ops: list, drops: set[str], renamed: dict[str, str]) -> None:
    """`new.unique_keys` after ALTER TABLE `ops` on `old`: dropped columns leave their keys (a key left without
    columns goes), renamed ones are renamed in them; DROP INDEX, RENAME INDEX, then ADD UNIQUE (also a column's
    inline UNIQUE), in statement order within each kind, as the server applies them."""
    keys: list[Key] = []
    for k in old.unique_keys:
        cols = [renamed.get(n.lower(), n) for n in k["columns"] if n.lower() not in drops]
        if cols:
            keys.append({**k, "columns": cols})
    for op in ops:
        if op.kind == "drop_index":
            i = _find(keys, str(op.value))
            if i is not None:
                del keys[i]
    for op in ops:
        if op.kind == "rename_index":
            src, dst = op.value
            i = _find(keys, src)
            if i is not None:
                keys[i] = {**keys[i], "name": dst}
    for op in ops:
        if op.kind == "add_unique":
            add_key(keys, op.value)
        elif op.kind in ("add", "change") and op.spec is not None and op.spec.unique:
            add_key(keys, unique_key(None, [op.spec.col.name]))
    new.unique_keys = with_columns(new, keys)
