"""Out-of-order backfills across a schema change, on real Delta tables (delta-rs): rows of an older schema
version arriving after the current table moved to a newer one are evolved forward (DDL default for an added
column, rename, drop, widening) instead of altering the table back, and the table ends equal to the in-order run."""

from __future__ import annotations

import pyarrow as pa
import pytest

from binlake.binlog.decoder import RowBatch
from binlake.lake.convert import ConversionStats
from binlake.lake.current import (
    BackfillError,
    backfill_input,
    key_names,
    merge_input,
    newest_seq,
    schema_changes,
    segments,
)
from binlake.lake.engines import get_engine
from binlake.lake.history import CommittedBatch, history_table
from binlake.schema.binlog_types import table_map_for
from binlake.schema.catalog import Catalog
from binlake.schema.ddl import apply_ddl

V1_DDL = "CREATE TABLE t (id INT PRIMARY KEY, a INT, old_name VARCHAR(10), gone INT)"
V2_DDL = ("ALTER TABLE t ADD COLUMN c INT NOT NULL DEFAULT 7, RENAME COLUMN old_name TO new_name, "
          "DROP COLUMN gone, MODIFY a BIGINT")


def _versions():
    catalog = Catalog()
    apply_ddl(catalog, V1_DDL, "db")
    v1 = catalog.get("db", "t")
    apply_ddl(catalog, V2_DDL, "db")
    v2 = catalog.get("db", "t")
    maps = []
    for tdef in (v1, v2):
        tm = table_map_for(tdef, mariadb=True)
        maps.append(tm)
    return maps


def _segment(tm, file_seq: int, changes: list[tuple[int, str, list | None, list | None]]) -> pa.Table:
    """Merge input for rows events (pos, op, before, after) of one schema version in one file."""
    items = [CommittedBatch(RowBatch(f"bin.{file_seq:06d}", pos, pos, 0, 1_700_000_000 + pos, None, tm, op,
                                     [(before, after)]), 1_700_000_000 + pos, file_seq)
             for pos, op, before, after in changes]
    history = history_table(items, 0, ConversionStats())
    (seg,) = list(segments(history))
    return merge_input(seg.rows, tm)


V1_ROWS = [(100, "insert", None, [1, 10, "one", 5]), (200, "insert", None, [2, 20, "two", 6]),
           (300, "insert", None, [3, 30, "three", 7]), (400, "delete", [3, 30, "three", 7], None),
           (500, "update", [2, 20, "two", 6], [2, 21, "two!", 6])]
V2_ROWS = [(100, "update", [1, 10, "one", 7], [1, 11, "uno", 7]), (200, "insert", None, [4, 40, "four", 8])]


def _rows(engine, path) -> dict:
    table = engine.read(path)
    return {r["id"]: {k: v for k, v in r.items() if not k.startswith("_")} for r in table.to_pylist()}


def test_older_version_rows_evolve_forward_and_converge_to_the_in_order_result(tmp_path) -> None:
    engine = get_engine()
    v1, v2 = _versions()
    old = _segment(v1, 1, V1_ROWS)
    new = _segment(v2, 2, V2_ROWS)

    in_order = str(tmp_path / "in_order")
    engine.merge(in_order, old, key_names(v1), "app", 1)
    current = engine.read(in_order).schema
    changes = schema_changes([c.key for c in v1.columns], v1.schema, v2, current, None)
    engine.replace_schema(in_order, changes, "app", 2)
    engine.merge(in_order, new, key_names(v2), "app", 3)

    backfilled = str(tmp_path / "backfilled")
    engine.merge(backfilled, new, key_names(v2), "app", 1)
    layout = engine.read(backfilled).schema
    assert backfill_input(new, v2, v2.schema, layout, None) is None  # no table yet: nothing to evolve
    evolved, keys = backfill_input(old, v1, v2.schema, layout, newest_seq(engine, backfilled))
    assert keys == ["id"]
    assert evolved.column_names == [*[f.name for f in layout], "_deleted"]
    engine.merge(backfilled, evolved, keys, "app", 2)

    assert engine.read(backfilled).schema == layout  # the table kept its newer layout
    expected = {1: {"id": 1, "a": 11, "c": 7, "new_name": "uno"},  # newer V2 change wins over the backfill
                2: {"id": 2, "a": 21, "c": 7, "new_name": "two!"},  # V1 row: DDL default, renamed, widened
                4: {"id": 4, "a": 40, "c": 8, "new_name": "four"}}  # key 3 was deleted in V1
    assert _rows(engine, backfilled) == expected
    assert _rows(engine, in_order) == expected


def test_newer_segments_are_left_to_the_alter_and_straddling_ones_refused(tmp_path) -> None:
    engine = get_engine()
    v1, v2 = _versions()
    path = str(tmp_path / "t")
    engine.merge(path, _segment(v1, 2, V1_ROWS[:2]), key_names(v1), "app", 1)
    layout = engine.read(path).schema
    newest = newest_seq(engine, path)
    assert newest == 2 << 40 | 200
    later = _segment(v2, 3, V2_ROWS)
    assert backfill_input(later, v2, v1.schema, layout, newest) is None  # the source moved on: ALTER
    straddling = _segment(v2, 2, [(150, "insert", None, [5, 50, "x", 7]), (250, "insert", None, [6, 60, "y", 7])])
    with pytest.raises(BackfillError, match="span the current table's newest change"):
        backfill_input(straddling, v2, v1.schema, layout, newest)
    with pytest.raises(BackfillError, match="needs the definition"):
        backfill_input(_segment(v2, 1, V2_ROWS), v2, None, layout, newest)


def test_pipeline_backfill_across_an_alter_equals_select(mariadb_servers, tmp_path) -> None:
    """End to end on a MINIMAL-metadata MariaDB: file 1 (old layout), file 2 (writes, ALTER, writes), file 3 (new
    layout) are ingested in the order 2, 3, 1 (file 1 arrives last, older than the table's layout) with a snapshot
    taken before file 1. The current table must end equal to SELECT, in the new layout, with every gate on."""
    import random
    import re

    from binlake.lake.ingest import IngestOptions
    from binlake.lake.layout import LakeLayout
    from binlake.quality.stages import run_ingest
    from binlake.schema.api import take_snapshot

    server = mariadb_servers.get("MINIMAL")
    db = "bf_db"
    with server.connect() as conn, conn.cursor() as cur:
        cur.execute(f"DROP DATABASE IF EXISTS {db}")
        cur.execute(f"CREATE DATABASE {db}")
        cur.execute(f"CREATE TABLE {db}.acct (id INT PRIMARY KEY, a INT, old_name VARCHAR(10), gone INT)")
    store = tmp_path / "schemas"
    take_snapshot(server.uri, store, include=[f"{db}.*"])
    first = server.binlog_files()[-1]
    rng = random.Random(5)

    def writes(n: int, new_layout: bool) -> None:
        with server.connect(db) as conn, conn.cursor() as cur:
            for _ in range(n):
                i = rng.randint(1, 40)
                roll = rng.random()
                if roll < 0.5:
                    cols = "(id, a, new_name, c)" if new_layout else "(id, a, old_name, gone)"
                    cur.execute(f"REPLACE INTO acct {cols} VALUES (%s, %s, %s, %s)",
                                (i, rng.randint(0, 99), f"v{i}", rng.randint(0, 9)))
                elif roll < 0.8:
                    cur.execute("UPDATE acct SET a = a + 1 WHERE id = %s", (i,))
                else:
                    cur.execute("DELETE FROM acct WHERE id = %s", (i,))

    writes(80, False)
    server.flush_logs()
    writes(30, False)
    with server.connect(db) as conn, conn.cursor() as cur:
        cur.execute("ALTER TABLE acct ADD COLUMN c INT NOT NULL DEFAULT 7, RENAME COLUMN old_name TO new_name, "
                    "DROP COLUMN gone, MODIFY a BIGINT")
    writes(30, True)
    server.flush_logs()
    writes(80, True)
    server.flush_logs()
    files = [str(f) for f in server.binlog_files()[:-1] if str(f) >= str(first)]
    assert len(files) == 3
    lake = tmp_path / "lake"
    available: list[str] = []
    for f in (files[1], files[2], files[0]):
        available.append(f)
        opts = IngestOptions(lake=str(lake), files=sorted(available), databases={db}, schemas=str(store),
                             tables=re.compile(r"\.acct$"))
        assert run_ingest(opts).batch is not None
    with server.connect(db) as conn, conn.cursor() as cur:
        cur.execute("SELECT id, a, new_name, c FROM acct")
        expected = {r[0]: r for r in cur.fetchall()}
    table = get_engine().read(LakeLayout(str(lake)).current_path(db, "acct"))
    assert [n for n in table.column_names if not n.startswith("_")] == ["id", "a", "new_name", "c"]
    assert {r["id"]: (r["id"], r["a"], r["new_name"], r["c"]) for r in table.to_pylist()} == expected


class _Registry:
    """The registry's interface, in memory (the real one commits to _binlake/tables at the batch end)."""

    def __init__(self) -> None:
        self.rows: dict = {}

    def get(self, name):
        return self.rows.get(name, (None, None))

    def set(self, name, version, definition) -> None:
        self.rows[name] = (version, definition)


class _Layout:
    def __init__(self, root) -> None:
        self.root = root

    def current_path(self, db, table) -> str:
        return str(self.root / db / table)

    def app_id(self, *parts) -> str:
        return "-".join(parts)


def test_merge_segments_alters_forward_backfills_and_replays_after_a_crash(tmp_path) -> None:
    from binlake.lake.current import merge_segments

    engine, layout = get_engine(), _Layout(tmp_path)
    v1, v2 = _versions()
    registry = _Registry()
    first = [(v1.schema_version, v1, _segment(v1, 1, V1_ROWS[:2]))]
    assert merge_segments(engine, layout, registry, "db.t", first, 0) == 1
    assert registry.get("db.t")[0] == v1.schema_version
    forward = [(v2.schema_version, v2, _segment(v2, 3, V2_ROWS))]
    assert merge_segments(engine, layout, registry, "db.t", forward, 1) == 1  # ALTER, then merge
    after_forward = _rows(engine, layout.current_path("db", "t"))
    assert after_forward[2] == {"id": 2, "a": 20, "new_name": "two", "c": 7}
    # A crash before the registry was committed: the batch is redone with the registry still at v1.
    registry.set("db.t", v1.schema_version, v1.schema)
    assert merge_segments(engine, layout, registry, "db.t", forward, 1) == 1
    assert _rows(engine, layout.current_path("db", "t")) == after_forward
    assert registry.get("db.t")[0] == v2.schema_version
    # A late file of the old layout: evolved forward, the table and the registry keep v2.
    late = [(v1.schema_version, v1, _segment(v1, 2, [(100, "insert", None, [9, 90, "nine", 0])]))]
    assert merge_segments(engine, layout, registry, "db.t", late, 2) == 1
    assert registry.get("db.t")[0] == v2.schema_version
    assert _rows(engine, layout.current_path("db", "t"))[9] == {"id": 9, "a": 90, "new_name": "nine", "c": 7}
