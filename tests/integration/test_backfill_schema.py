"""Out-of-order backfills across a schema change, on real Delta tables (delta-rs): rows of an older schema
version arriving after the current table moved to a newer one are evolved forward (DDL default for an added
column, rename, drop, widening) instead of altering the table back, and the table ends equal to the in-order run."""

from __future__ import annotations

import pyarrow as pa
import pytest

from binlake.binlog.decoder import RowBatch
from binlake.lake.bootstrap import table_map_for
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
