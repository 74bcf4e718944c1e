"""Reading the lake: SQL over its tables (delta-rs' DataFusion) and a row's change timeline."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
from deltalake import DeltaTable, QueryBuilder
from deltalake.exceptions import DeltaError

from .engines import get_engine
from .layout import LakeLayout, path_part
from .sqlguard import QueryRefused, rewrite_query


def lake_tables(lake: str, dropped: bool = False, catalog: bool = False) -> dict[str, str]:
    """'db.table' and 'db.table__history' -> Delta table path, for every table in the lake.

    The lake's catalog (`_binlake/catalog`, binlake.lake.lifecycle) decides what a name shows: `db.t` and
    `db.t__history` are the table the source has under that name now. Tables dropped or renamed away, and
    online-schema-change helper tables, are left out unless `dropped` is set; then every generation of a name's
    history is listed too (`db.t__history__g2`: the second table to carry the name). With `catalog`,
    `_binlake.catalog` too (the names' generations, lineage, state, the Delta version a dropped table ended
    with): `binlake query` names it."""
    root = Path(lake)
    slots = _catalog(root)
    out = {}
    for delta_log in sorted(root.glob("*/*/_delta_log")):
        table_dir = delta_log.parent
        db = table_dir.parent.name
        if db == "_binlake":
            continue
        out[f"{db}.{table_dir.name}"] = str(table_dir)
    by_name: dict[str, list[dict]] = {}
    for s in slots:
        by_name.setdefault(s["table"].lower(), []).append(s)
    for name_slots in by_name.values():
        name_slots.sort(key=lambda s: s["generation"])
        latest = name_slots[-1]
        db, table = latest["database"], latest["name"]
        current = f"{path_part(db)}.{path_part(table)}"
        histories = {s["generation"]: f"{path_part(db)}.{path_part(s['history'])}" for s in name_slots}
        visible = latest["state"] == "live" and not latest["helper"]
        for g, key in histories.items():
            path = out.pop(key, None)
            if path is not None and dropped:
                out[f"{current}__history__g{g}"] = path
                if g == latest["generation"]:
                    out[f"{current}__history"] = path
            elif path is not None and visible and g == latest["generation"]:
                out[f"{current}__history"] = path
        if not visible and not dropped:
            out.pop(current, None)
    path = root / "_binlake" / "catalog"
    if catalog and (path / "_delta_log").exists():
        out["_binlake.catalog"] = str(path)
    return out


def _catalog(root: Path) -> list[dict]:
    path = root / "_binlake" / "catalog"
    if not (path / "_delta_log").exists():
        return []

    return pa.table(DeltaTable(str(path)).scan()).to_pylist()


def run_query(lake: str, sql: str, dropped: bool = False) -> pa.Table:
    """Run one read-only SELECT naming lake tables as db.table / db.table__history (delta-rs' DataFusion).

    The SQL is parsed (sqlglot), refused unless it is exactly one SELECT that touches nothing but lake tables, and
    rewritten on the parse tree; only the tables it names are registered. Raises QueryRefused for refused or
    failing SQL and for a lake that is not there. `dropped` also names dropped and renamed-away tables and every
    history generation of a re-used name (see lake_tables)."""
    if "://" not in lake and not Path(lake).is_dir():
        raise QueryRefused(f"--lake {lake}: no such lake directory")
    text, registrations = rewrite_query(sql, lake_tables(lake, dropped, catalog=True))
    qb = QueryBuilder()
    for internal, path in registrations.items():
        qb.register(internal, DeltaTable(path))
    try:
        return pa.table(qb.execute(text).read_all())
    except (DeltaError, pa.ArrowException, ValueError) as exc:  # planning/execution errors of the user's SQL
        raise QueryRefused(f"query failed: {' '.join(str(exc).split())[:500]}") from None


def trace(lake: str, table: str, key: dict[str, str], engine: str | None = None) -> list[str]:
    """Every change of the row whose key columns equal `key`, oldest first, as readable lines."""
    db, _, name = table.partition(".")
    layout = LakeLayout(lake)
    eng = get_engine(engine)
    # The history of the table the source calls `table` now (a re-used name has generations: docs/lifecycle.md)
    path = lake_tables(lake).get(f"{path_part(db)}.{path_part(name)}__history") or layout.history_path(db, name)
    if not eng.exists(path):
        raise ValueError(f"no history table for {table} in {lake}")
    history = eng.read(path)
    for col in key:
        if col not in history.column_names:
            raise ValueError(f"{table} has no column {col!r}")
    cols = list(key)
    try:
        wanted = {tuple(pa.scalar(key[c]).cast(history.schema.field(c).type).as_py() for c in cols)}
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
        raise ValueError(f"--key {', '.join(f'{c}={key[c]}' for c in cols)}: not a value of {table}'s key "
                         f"columns ({exc})") from None
    rows = history.select([*cols, "_before", "_op"]).to_pylist()
    # Follow the row through primary-key changes: an update from key A to key B is the same row.
    grew = True
    while grew:
        grew = False
        for r in rows:
            after = tuple(r[c] for c in cols)
            before = tuple((r["_before"] or {}).get(c) for c in cols) if r["_op"] == "update" else after
            if (after in wanted) != (before in wanted):
                wanted.update((after, before))
                grew = True
    keep = [tuple(r[c] for c in cols) in wanted or (r["_op"] == "update" and tuple(
        (r["_before"] or {}).get(c) for c in cols) in wanted) for r in rows]
    hits = history.filter(pa.array(keep))
    hits = hits.sort_by([("_file_seq", "ascending"), ("_pos", "ascending"), ("_sub", "ascending"),
                         ("_row", "ascending")])
    meta = {"_op", "_binlog_file", "_file_seq", "_pos", "_sub", "_row", "_txn_pos", "_commit_ts", "_gtid",
            "_schema_version", "_batch_id", "_commit_date", "_before"}
    lines = []
    for r in hits.to_pylist():
        after = {k: v for k, v in r.items() if k not in meta}
        when = r["_commit_ts"].strftime("%Y-%m-%d %H:%M:%S UTC")
        where = f"{r['_binlog_file']}:{r['_pos']}" + (f" gtid {r['_gtid']}" if r["_gtid"] else "")
        if r["_op"] == "update":
            before = r["_before"] or {}
            diff = {k: f"{before.get(k)!r} -> {v!r}" for k, v in after.items() if before.get(k) != v}
            lines.append(f"{when}  update  {diff}  at {where}")
        elif r["_op"] == "insert":
            lines.append(f"{when}  insert  {after}  at {where}")
        else:
            lines.append(f"{when}  delete  {after}  at {where}")
    return lines
