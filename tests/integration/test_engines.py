"""Conformance suite for the Delta commit engines (binlake.lake.engines), run on every engine that is present.

delta-rs always runs; delta-spark runs on the session-scoped Spark session, which has the Delta jars when
`scripts/dev.sh setup` fetched them. Without them it is skipped with the reason from `available()`, except under
`scripts/dev.sh test` (CI), which sets BINLAKE_REQUIRE_DELTA_SPARK: there a skip would hide a broken setup.
"""

from __future__ import annotations

import datetime as dt
import decimal
import itertools
import threading
import uuid
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from binlake.lake.engines import (
    ColumnChange,
    DeltaEngine,
    EngineError,
    EngineUnavailable,
    MergeInputError,
    get_engine,
    tombstone_path,
)
from binlake.lake.engines.deltars import DeltaRsEngine
from tests.conftest import skip_or_fail

# -- fixtures ---------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module", params=["delta-rs", "delta-spark"])
def engine(request: pytest.FixtureRequest) -> DeltaEngine:
    if request.param == "delta-rs":
        return DeltaRsEngine()
    from binlake.lake.engines.deltaspark import DeltaSparkEngine, available

    try:
        spark = request.getfixturevalue("spark")
    except Exception as exc:  # no Java, ...: same outcome as missing jars
        skip_or_fail(f"delta-spark: no Spark session ({exc})")
    ok, reason = available(spark)
    if not ok:
        skip_or_fail(f"delta-spark: {reason}")
    return DeltaSparkEngine(spark)


@pytest.fixture(scope="module")
def lake_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("engines")


@pytest.fixture
def table(lake_root: Path) -> str:
    """A fresh table path (the module-scoped root keeps hypothesis happy)."""
    return str(lake_root / f"t_{uuid.uuid4().hex[:12]}")


# -- helpers ----------------------------------------------------------------------------------------------------

CHANGE_SCHEMA = pa.schema([("id", pa.int64()), ("name", pa.string()), ("qty", pa.int32()),
                           ("_seq", pa.int64()), ("_deleted", pa.bool_())])


def changes(*rows: tuple) -> pa.Table:
    """Merge input from (id, name, qty, seq, deleted) tuples."""
    return pa.Table.from_pylist([dict(zip(CHANGE_SCHEMA.names, r, strict=True)) for r in rows], schema=CHANGE_SCHEMA)


def rows(engine: DeltaEngine, path: str, key: str = "id") -> list[dict]:
    return sorted(engine.read(path).to_pylist(), key=lambda r: r[key])


def current(engine: DeltaEngine, path: str) -> dict[int, tuple]:
    return {r["id"]: (r["name"], r["qty"], r["_seq"]) for r in engine.read(path).to_pylist()}


def history_rows(ids: list[int], batch: int) -> pa.Table:
    return pa.table({"id": pa.array(ids, pa.int64()), "op": ["insert"] * len(ids),
                     "batch": pa.array([batch] * len(ids), pa.int64())})


ALL_TYPES = pa.schema([
    ("i8", pa.int8()), ("i16", pa.int16()), ("i32", pa.int32()), ("i64", pa.int64()),
    ("f32", pa.float32()), ("f64", pa.float64()),
    ("dec", pa.decimal128(38, 10)), ("u64", pa.decimal128(20, 0)),
    ("d", pa.date32()),
    ("ntz", pa.timestamp("us")), ("utc", pa.timestamp("us", tz="UTC")),
    ("s", pa.string()), ("b", pa.binary()),
    ("_before", pa.struct([("s", pa.string()), ("ntz", pa.timestamp("us")), ("dec", pa.decimal128(10, 2))])),
])


def all_types_rows() -> pa.Table:
    row = {
        "i8": -128, "i16": 32767, "i32": -2**31, "i64": 2**63 - 1, "f32": 1.5, "f64": -2.25,
        "dec": decimal.Decimal("1234567890123456789012345678.0123456789"), "u64": decimal.Decimal(2**64 - 1),
        "d": dt.date(1000, 1, 1), "ntz": dt.datetime(2038, 1, 19, 3, 14, 8, 999999),
        "utc": dt.datetime(1970, 1, 1, 0, 0, 1, 5, tzinfo=dt.UTC), "s": "añ\u2603\U0001f600", "b": b"\x00\xff",
        "_before": {"s": "x", "ntz": dt.datetime(2000, 2, 29), "dec": decimal.Decimal("-0.01")},
    }
    nulls = dict.fromkeys(ALL_TYPES.names)
    return pa.Table.from_pylist([row, nulls], schema=ALL_TYPES)


# -- create, append -----------------------------------------------------------------------------------------------


def test_append_creates_the_table_and_round_trips_every_mapped_type(engine: DeltaEngine, table: str) -> None:
    assert not engine.exists(table) and engine.version(table) is None and engine.txn_version(table, "h") is None
    data = all_types_rows()
    assert engine.append(table, data, "h", 0) is True
    assert engine.exists(table) and engine.txn_version(table, "h") == 0
    back = engine.read(table)
    assert back.schema == ALL_TYPES
    assert sorted(back.to_pylist(), key=lambda r: r["i8"] is None) == data.to_pylist()
    assert engine.read(table, ["s", "i8"]).column_names == ["s", "i8"]


def test_tables_only_need_reader_features_spark_supports(engine: DeltaEngine, table: str) -> None:
    """timestamp_ntz makes delta-rs upgrade the protocol to (3, 7) with the timestampNtz feature, which Delta Spark
    reads since 3.0; no other reader feature may appear, or Spark readers would refuse the table."""
    from deltalake import DeltaTable

    engine.append(table, all_types_rows(), "h", 0)
    protocol = DeltaTable(table).protocol()
    assert (protocol.min_reader_version, protocol.min_writer_version) == (3, 7)
    assert set(protocol.reader_features or []) == {"timestampNtz"}


def test_append_is_idempotent_per_app_transaction(engine: DeltaEngine, table: str) -> None:
    assert engine.append(table, history_rows([1, 2], 5), "h", 5) is True
    assert engine.append(table, history_rows([1, 2], 5), "h", 5) is False  # retry of the same batch
    assert engine.append(table, history_rows([9], 3), "h", 3) is False  # a lower batch after a higher one
    assert [r["id"] for r in rows(engine, table)] == [1, 2]
    assert engine.append(table, history_rows([3], 6), "h", 6) is True
    assert engine.append(table, history_rows([4], 0), "backfill", 0) is True  # another app id has its own counter
    assert [r["id"] for r in rows(engine, table)] == [1, 2, 3, 4]
    assert (engine.txn_version(table, "h"), engine.txn_version(table, "backfill")) == (6, 0)


def test_append_evolves_the_schema_by_union(engine: DeltaEngine, table: str) -> None:
    engine.append(table, pa.table({"id": pa.array([1], pa.int64()), "a": ["x"]}), "h", 1)
    engine.append(table, pa.table({"id": pa.array([2], pa.int64()), "a": ["y"], "b": pa.array([7], pa.int32())}),
                  "h", 2)
    engine.append(table, pa.table({"id": pa.array([3], pa.int64()), "b": pa.array([8], pa.int32())}), "h", 3)
    assert engine.read(table).schema.names == ["id", "a", "b"]
    assert rows(engine, table) == [{"id": 1, "a": "x", "b": None}, {"id": 2, "a": "y", "b": 7},
                                   {"id": 3, "a": None, "b": 8}]


def test_append_partitions_a_new_table(engine: DeltaEngine, table: str) -> None:
    from deltalake import DeltaTable

    engine.append(table, history_rows([1, 2], 1), "h", 1, partition_by=["batch"])
    engine.append(table, history_rows([3], 2), "h", 2)
    assert DeltaTable(table).metadata().partition_columns == ["batch"]
    assert [(r["id"], r["batch"]) for r in rows(engine, table)] == [(1, 1), (2, 1), (3, 2)]


def test_empty_append_still_records_the_batch(engine: DeltaEngine, table: str) -> None:
    engine.append(table, history_rows([1], 1), "h", 1)
    assert engine.append(table, history_rows([], 2), "h", 2) is True
    assert engine.txn_version(table, "h") == 2
    assert engine.append(table, history_rows([], 2), "h", 2) is False


# -- merge --------------------------------------------------------------------------------------------------------


def test_merge_inserts_updates_and_deletes_by_seq(engine: DeltaEngine, table: str) -> None:
    assert engine.merge(table, changes((1, "a", 1, 10, False), (2, "b", 2, 11, False), (3, "c", 3, 12, False),
                                       (4, None, None, 13, True)), ["id"], "m", 1) is True
    assert current(engine, table) == {1: ("a", 1, 10), 2: ("b", 2, 11), 3: ("c", 3, 12)}
    assert engine.read(table).schema.names == ["id", "name", "qty", "_seq"]  # no _deleted column
    engine.merge(table, changes(
        (1, "a2", 10, 20, False),  # newer update: applies
        (2, "stale", 0, 5, False),  # older than the row: ignored
        (3, None, None, 21, True),  # newer delete: removes the row
        (5, "e", 5, 22, False),  # new key: inserted
    ), ["id"], "m", 2)
    assert current(engine, table) == {1: ("a2", 10, 20), 2: ("b", 2, 11), 5: ("e", 5, 22)}


def test_merge_replay_is_a_no_op(engine: DeltaEngine, table: str) -> None:
    batch = changes((1, "a", 1, 10, False), (2, None, None, 11, True))
    assert engine.merge(table, batch, ["id"], "m", 7) is True
    version, state = engine.version(table), current(engine, table)
    assert engine.merge(table, batch, ["id"], "m", 7) is False
    assert engine.merge(table, batch, ["id"], "m", 6) is False
    assert engine.version(table) == version and current(engine, table) == state
    # The same changes under another app id commit (to record that txn) but change nothing: _seq guards them.
    assert engine.merge(table, batch, ["id"], "replay", 0) is True
    assert current(engine, table) == state and engine.txn_version(table, "replay") == 0


def test_a_delete_is_remembered_against_older_upserts(engine: DeltaEngine, table: str) -> None:
    engine.merge(table, changes((1, "a", 1, 10, False), (2, "b", 2, 10, False)), ["id"], "m", 1)
    engine.merge(table, changes((1, None, None, 30, True), (9, None, None, 31, True)), ["id"], "m", 2)
    assert current(engine, table) == {2: ("b", 2, 10)}
    assert {r["id"]: r["_seq"] for r in engine.read(tombstone_path(table)).to_pylist()} == {1: 30, 9: 31}
    # An out-of-order backfill brings older upserts of the deleted keys: they must not come back.
    engine.merge(table, changes((1, "old", 0, 20, False), (9, "older", 0, 5, False)), ["id"], "backfill", 0)
    assert current(engine, table) == {2: ("b", 2, 10)}
    # A newer upsert re-inserts the key, and its tombstone is pruned.
    engine.merge(table, changes((1, "again", 4, 40, False)), ["id"], "m", 3)
    assert current(engine, table) == {1: ("again", 4, 40), 2: ("b", 2, 10)}
    assert {r["id"]: r["_seq"] for r in engine.read(tombstone_path(table)).to_pylist()} == {9: 31}


def test_truncate_empties_once_per_app_transaction(engine: DeltaEngine, table: str) -> None:
    engine.merge(table, changes((1, "a", 1, 10, False), (2, "b", 2, 11, False), (3, None, None, 12, True)),
                 ["id"], "m", 1)
    schema = engine.read(table).schema
    assert engine.truncate(table, "m", 2) is True
    assert engine.read(table).num_rows == 0 and engine.read(table).schema == schema
    version = engine.version(table)
    assert engine.truncate(table, "m", 2) is False and engine.version(table) == version
    engine.merge(table, changes((4, "d", 4, 20, False)), ["id"], "m", 3)
    assert current(engine, table) == {4: ("d", 4, 20)}


def test_copy_table_moves_rows_schema_and_tombstones_at_a_version(engine: DeltaEngine, lake_root: Path) -> None:
    src, dst = str(lake_root / f"src_{uuid.uuid4().hex[:8]}"), str(lake_root / f"dst_{uuid.uuid4().hex[:8]}")
    engine.merge(src, changes((1, "a", 1, 10, False), (2, "b", 2, 11, False), (5, None, None, 12, True)),
                 ["id"], "s", 1)
    at = engine.version(src)
    engine.merge(src, changes((1, "later", 9, 30, False)), ["id"], "s", 2)  # not part of the copy
    # The destination held another table with other columns: it is replaced, schema included.
    engine.merge(dst, pa.table({"k": pa.array([7], pa.int32()), "_seq": pa.array([1], pa.int64()),
                                "_deleted": pa.array([False])}), ["k"], "d", 1)
    assert engine.copy_table(src, at, dst, "d", 2) is True
    assert current(engine, dst) == {1: ("a", 1, 10), 2: ("b", 2, 11)}
    assert engine.read(dst).schema == engine.read(src).schema
    assert {r["id"]: r["_seq"] for r in engine.read(tombstone_path(dst)).to_pylist()} == {5: 12}
    version = engine.version(dst)
    assert engine.copy_table(src, at, dst, "d", 2) is False and engine.version(dst) == version
    # The copied tombstone still stops an older upsert of the deleted key.
    engine.merge(dst, changes((5, "old", 0, 6, False), (6, "f", 6, 40, False)), ["id"], "d", 3)
    assert current(engine, dst) == {1: ("a", 1, 10), 2: ("b", 2, 11), 6: ("f", 6, 40)}
    # A new table as the destination.
    fresh = str(lake_root / f"new_{uuid.uuid4().hex[:8]}")
    assert engine.copy_table(src, engine.version(src), fresh, "n", 1) is True
    assert current(engine, fresh) == {1: ("later", 9, 30), 2: ("b", 2, 11)}
    # Created empty (version 0, no txn) then copied, as any table's first commit: both engines give a table the
    # same versions (the lake's catalog records a dropped table's last one).
    assert [(h["version"], h["action"]) for h in engine.history(fresh)] == [(1, "copy"), (0, None)]


def test_merge_accepts_composite_and_awkward_keys(engine: DeltaEngine, table: str) -> None:
    # Delta Spark takes no space (and a few other characters) in names without column mapping: see
    # test_delta_spark_refuses_column_names_it_could_only_store_with_column_mapping.
    tenant = "Tenant Id" if engine.name == "delta-rs" else "Tenant-Id.é"
    schema = pa.schema([(tenant, pa.string()), ("k`2", pa.decimal128(20, 0)), ("v", pa.binary()),
                        ("_seq", pa.int64()), ("_deleted", pa.bool_())])
    keys = [tenant, "k`2"]

    def batch(*r: tuple) -> pa.Table:
        return pa.Table.from_pylist([dict(zip(schema.names, x, strict=True)) for x in r], schema=schema)

    d = decimal.Decimal
    engine.merge(table, batch(("t", d(1), b"a", 1, False), ("t", d(2), b"b", 1, False)), keys, "m", 1)
    engine.merge(table, batch(("t", d(1), None, 2, True), ("t", d(2), b"c", 2, False)), keys, "m", 2)
    engine.merge(table, batch(("t", d(1), b"zombie", 1, False)), keys, "late", 0)
    assert engine.read(table).to_pylist() == [{tenant: "t", "k`2": d(2), "v": b"c", "_seq": 2}]


def test_merge_rejects_input_that_breaks_the_contract(engine: DeltaEngine, table: str) -> None:
    with pytest.raises(MergeInputError, match="one row per key"):
        engine.merge(table, changes((1, "a", 1, 1, False), (1, "b", 1, 2, False)), ["id"], "m", 1)
    with pytest.raises(MergeInputError, match="lacks"):
        engine.merge(table, changes((1, "a", 1, 1, False)).drop(["_seq"]), ["id"], "m", 1)
    with pytest.raises(MergeInputError, match="nulls"):
        engine.merge(table, changes((None, "a", 1, 1, False)), ["id"], "m", 1)
    engine.merge(table, changes((1, "a", 1, 1, False)), ["id"], "m", 1)
    with pytest.raises(MergeInputError, match="replace_schema"):
        engine.merge(table, changes((1, "a", 1, 2, False)).append_column("extra", pa.array([1])), ["id"], "m", 2)
    assert engine.txn_version(table, "m") == 1


Change = tuple[int, bool, int]  # key, is_delete, value


@st.composite
def shuffled_batches(draw: st.DrawFn) -> tuple[list[Change], list[int], list[tuple[int, bool]]]:
    """Keyed changes (seq = position + 1), batch boundaries, and an application order with repeats: a list of
    (batch index, replay under a fresh app id) - each batch at least once, in any order."""
    n = draw(st.integers(1, 24))
    log = [(draw(st.integers(0, 4)), draw(st.booleans()), draw(st.integers(0, 99))) for _ in range(n)]
    cuts = sorted(draw(st.sets(st.integers(1, n - 1), max_size=5))) if n > 1 else []
    nb = len(cuts) + 1
    order = draw(st.permutations(range(nb)))
    repeats = draw(st.lists(st.tuples(st.integers(0, nb - 1), st.booleans()), max_size=3))
    plan = [(b, False) for b in order]
    for b, fresh in repeats:
        plan.insert(draw(st.integers(0, len(plan))), (b, fresh))
    return log, [0, *cuts, n], plan


def _reduced(log: list[Change], start: int, stop: int) -> pa.Table:
    """The caller's reduction: last change per key inside the batch."""
    last: dict[int, tuple[int, Change]] = {}
    for i in range(start, stop):
        last[log[i][0]] = (i + 1, log[i])
    return changes(*[(k, None if d else f"v{v}", None if d else v, seq, d)
                     for seq, (k, d, v) in sorted(last.values())])


def test_out_of_order_batches_converge_to_the_in_order_result(engine: DeltaEngine, lake_root: Path) -> None:
    counter = itertools.count()

    @settings(max_examples=12 if engine.name == "delta-rs" else 3, deadline=None,
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
    @given(shuffled_batches())
    def check(case: tuple[list[Change], list[int], list[tuple[int, bool]]]) -> None:
        log, bounds, plan = case
        path = str(lake_root / f"prop_{engine.name}_{next(counter)}")  # lake_root is shared by both engines
        for b, fresh in plan:
            app_id = f"batch-{b}" + (f"-replay-{uuid.uuid4().hex[:6]}" if fresh else "")
            engine.merge(path, _reduced(log, bounds[b], bounds[b + 1]), ["id"], app_id, 0)
        expected = {}
        for seq, (k, deleted, v) in enumerate(log, start=1):
            if deleted:
                expected.pop(k, None)
            else:
                expected[k] = (f"v{v}", v, seq)
        assert current(engine, path) == expected

    check()


# -- schema changes, restore, history -----------------------------------------------------------------------------


def test_replace_schema_adds_drops_renames_and_converts(engine: DeltaEngine, table: str) -> None:
    engine.merge(table, changes((1, "a", 7, 10, False), (2, "b", None, 11, False), (3, None, None, 12, True)),
                 ["id"], "m", 1)
    plan = [
        ColumnChange.add("flag", pa.string(), pa.scalar("n/a"), position=1),
        ColumnChange.add("note", pa.int16()),
        ColumnChange.drop("name"),
        ColumnChange.rename("qty", "quantity"),
        ColumnChange.convert("quantity", pa.int64()),
        ColumnChange.convert("id", pa.string(), converter=lambda a: pc.cast(a, pa.string())),
    ]
    assert engine.replace_schema(table, plan, "ddl", 1) is True
    assert engine.replace_schema(table, plan, "ddl", 1) is False
    back = engine.read(table)
    assert back.schema == pa.schema([("id", pa.string()), ("flag", pa.string()), ("quantity", pa.int64()),
                                     ("_seq", pa.int64()), ("note", pa.int16())])
    assert sorted(back.to_pylist(), key=lambda r: r["id"]) == [
        {"id": "1", "flag": "n/a", "quantity": 7, "_seq": 10, "note": None},
        {"id": "2", "flag": "n/a", "quantity": None, "_seq": 11, "note": None}]
    # The tombstones follow the key column's conversion, so merges keep working with the new key type.
    assert engine.read(tombstone_path(table)).schema.field("id").type == pa.string()
    new = pa.table({"id": ["3", "2"], "flag": ["x", "y"], "quantity": pa.array([1, 2], pa.int64()),
                    "_seq": pa.array([5, 20], pa.int64()), "note": pa.array([None, 1], pa.int16()),
                    "_deleted": [False, False]})
    engine.merge(table, new, ["id"], "m", 2)
    assert sorted((r["id"], r["flag"]) for r in engine.read(table).to_pylist()) == [("1", "n/a"), ("2", "y")]


def test_replace_schema_refuses_lossy_conversions(engine: DeltaEngine, table: str) -> None:
    engine.merge(table, changes((1, "a", 300, 10, False)), ["id"], "m", 1)
    version = engine.version(table)
    with pytest.raises(EngineError, match="convert 'qty' to int8"):
        engine.replace_schema(table, [ColumnChange.convert("qty", pa.int8())], "ddl", 1)
    with pytest.raises(EngineError, match="no such column"):
        engine.replace_schema(table, [ColumnChange.drop("nope")], "ddl", 1)
    assert engine.version(table) == version and engine.txn_version(table, "ddl") is None


def test_restore_rolls_back_rows_tombstones_and_txn_versions(engine: DeltaEngine, table: str) -> None:
    engine.merge(table, changes((1, "a", 1, 10, False), (2, "b", 2, 11, False)), ["id"], "m", 1)
    good = engine.version(table)
    engine.merge(table, changes((1, None, None, 20, True), (2, "bad", 0, 21, False)), ["id"], "m", 2)
    assert engine.txn_version(table, "m") == 2
    engine.restore(table, good)  # the after-merge gate failed
    assert current(engine, table) == {1: ("a", 1, 10), 2: ("b", 2, 11)}
    assert engine.read(tombstone_path(table)).num_rows == 0
    assert engine.txn_version(table, "m") == 1
    assert engine.history(table)[0]["operation"] == "RESTORE"
    # The fixed batch can now run again under the same (app_id, batch).
    assert engine.merge(table, changes((1, None, None, 20, True), (2, "fixed", 0, 21, False)), ["id"], "m", 2)
    assert current(engine, table) == {2: ("fixed", 0, 21)}
    with pytest.raises(EngineError):
        engine.restore(table, 999)


def test_history_shows_the_app_transactions(engine: DeltaEngine, table: str) -> None:
    engine.append(table, history_rows([1], 1), "hist", 1)
    engine.append(table, history_rows([2], 2), "hist", 2)
    engine.append(table, history_rows([3], 0), "other", 0)
    entries = engine.history(table)
    assert [e["version"] for e in entries] == sorted((e["version"] for e in entries), reverse=True)
    ours = [(e["action"], [(t["app_id"], t["version"]) for t in e["txns"]]) for e in entries if e["txns"]]
    assert ours == [("append", [("other", 0)]), ("append", [("hist", 2)]), ("append", [("hist", 1)])]
    assert all(e["operation"] for e in entries)


# -- failures and races -------------------------------------------------------------------------------------------


class Killed(BaseException):
    """Stands for the process dying between two commits."""


def test_kill_between_history_append_and_merge_then_rerun(engine: DeltaEngine, lake_root: Path) -> None:
    hist, cur = str(lake_root / f"k_{uuid.uuid4().hex[:8]}__history"), str(lake_root / f"k_{uuid.uuid4().hex[:8]}")
    engine.merge(cur, changes((1, "a", 1, 1, False), (2, "b", 2, 2, False)), ["id"], "run", 1)
    engine.append(hist, history_rows([1, 2], 1), "run", 1)
    batch2 = changes((1, None, None, 3, True), (3, "c", 3, 4, False))

    def run_batch() -> tuple[bool, bool]:
        return engine.append(hist, history_rows([1, 3], 2), "run", 2), engine.merge(cur, batch2, ["id"], "run", 2)

    engine.append(hist, history_rows([1, 3], 2), "run", 2)  # ... and the process dies before the merge
    assert run_batch() == (False, True)
    assert run_batch() == (False, False)
    assert sorted(r["id"] for r in engine.read(hist).to_pylist()) == [1, 1, 2, 3]
    assert current(engine, cur) == {2: ("b", 2, 2), 3: ("c", 3, 4)}


def test_kill_between_tombstone_and_current_commit_then_rerun(engine: DeltaEngine, table: str,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    engine.merge(table, changes((1, "a", 1, 1, False)), ["id"], "m", 1)
    real = engine.run_merge

    def dies_on_current(path: str, *args, **kwargs):
        if path == table:
            raise Killed
        return real(path, *args, **kwargs)

    monkeypatch.setattr(engine, "run_merge", dies_on_current)
    with pytest.raises(Killed):
        engine.merge(table, changes((1, None, None, 5, True)), ["id"], "m", 2)
    monkeypatch.undo()
    assert current(engine, table) == {1: ("a", 1, 1)}  # the delete is only in the tombstones so far
    engine.merge(table, changes((1, "older", 0, 3, False)), ["id"], "backfill", 0)
    assert current(engine, table) == {1: ("a", 1, 1)}  # the remembered delete already outranks older upserts
    assert engine.merge(table, changes((1, None, None, 5, True)), ["id"], "m", 2) is True
    assert current(engine, table) == {}


def test_delta_rs_merges_a_large_input_in_parts_and_a_killed_part_reruns(lake_root: Path,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """delta-rs merges an input over MERGE_CHUNK_BYTES in key-disjoint parts, one commit each (bounded MERGE
    memory): the result equals one whole merge, the batch counts as merged only with its last part, and a run
    killed after any part reruns to the same table."""
    from binlake.lake.engines import deltars

    rng = __import__("random").Random(1701)
    engine = DeltaRsEngine()
    first = changes(*((i, f"n{i}", i % 7, 100 + i, False) for i in range(0, 300, 2)))
    ids = rng.sample(range(400), 250)
    second = changes(*((i, None if d else f"m{i}", None if d else rng.randint(0, 9), rng.choice((50, 500)) + i, d)
                       for i in ids for d in [rng.random() < 0.3]))
    whole = str(lake_root / f"whole_{uuid.uuid4().hex[:8]}")
    engine.merge(whole, first, ["id"], "m", 1)
    engine.merge(whole, second, ["id"], "m", 2)
    monkeypatch.setattr(deltars, "MERGE_CHUNK_BYTES", second.nbytes // 5)
    parts = str(lake_root / f"parts_{uuid.uuid4().hex[:8]}")
    engine.merge(parts, first, ["id"], "m", 1)
    before = engine.version(parts)
    assert engine.merge(parts, second, ["id"], "m", 2) is True
    assert current(engine, parts) == current(engine, whole)
    assert engine.read(tombstone_path(parts)).sort_by("id").equals(engine.read(tombstone_path(whole)).sort_by("id"))
    assert engine.version(parts) - before >= 5  # one commit per part at least
    assert engine.merge(parts, second, ["id"], "m", 2) is False  # replay: nothing again
    for kill_after in range(1, 5):
        path = str(lake_root / f"killed_{uuid.uuid4().hex[:8]}")
        engine.merge(path, first, ["id"], "m", 1)
        real, done = engine.run_merge, []

        def dies(p, *args, kill_after=kill_after, real=real, done=done, path=path, **kwargs):
            if p == path and len(done) == kill_after:
                raise Killed
            out = real(p, *args, **kwargs)
            if p == path:
                done.append(1)
            return out

        monkeypatch.setattr(engine, "run_merge", dies)
        with pytest.raises(Killed):
            engine.merge(path, second, ["id"], "m", 2)
        monkeypatch.setattr(engine, "run_merge", real)
        assert engine.txn_version(path, "m") == 1  # not merged until its last part is
        assert engine.merge(path, second, ["id"], "m", 2) is True
        assert current(engine, path) == current(engine, whole), kill_after


def test_an_upsert_overtaken_by_a_concurrent_delete_is_repaired(engine: DeltaEngine, table: str,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """Writer B read the tombstones just before writer A recorded a newer delete of a key the current table does
    not hold (so A's merge changed nothing there and nothing conflicts): B's insert must not survive."""
    engine.merge(table, changes((2, "b", 2, 1, False)), ["id"], "a", 0)
    engine.merge(table, changes((1, None, None, 30, True)), ["id"], "a", 1)  # writer A
    real, stale_reads = engine.read, [tombstone_path(table)]

    def read_before_a(path: str, columns=None):
        if stale_reads and path == stale_reads[0]:  # B's first tombstone read predates A's commit
            stale_reads.pop()
            return real(path, columns).slice(0, 0)
        return real(path, columns)

    monkeypatch.setattr(engine, "read", read_before_a)
    assert engine.merge(table, changes((1, "old", 0, 20, False)), ["id"], "b", 0) is True  # writer B
    monkeypatch.undo()
    assert not stale_reads
    assert current(engine, table) == {2: ("b", 2, 1)}


def _race(n: int, fn) -> list:
    barrier, results, errors = threading.Barrier(n), [], []

    def run() -> None:
        barrier.wait()
        try:
            results.append(fn())
        except Exception as exc:  # surfaced below
            errors.append(exc)

    threads = [threading.Thread(target=run) for _ in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    return results


def test_racing_writers_of_one_batch_commit_it_once(engine: DeltaEngine, lake_root: Path) -> None:
    hist, cur = str(lake_root / f"r_{uuid.uuid4().hex[:8]}__history"), str(lake_root / f"r_{uuid.uuid4().hex[:8]}")
    engine.append(hist, history_rows([0], 0), "h", 0)
    engine.merge(cur, changes((0, "z", 0, 1, False)), ["id"], "m", 0)
    assert sorted(_race(3, lambda: engine.append(hist, history_rows([1, 2], 1), "h", 1))) == [False, False, True]
    assert sorted(r["id"] for r in engine.read(hist).to_pylist()) == [0, 1, 2]
    batch = changes((1, "a", 1, 5, False), (0, None, None, 6, True))
    assert sorted(_race(3, lambda: engine.merge(cur, batch, ["id"], "m", 1))) == [False, False, True]
    assert current(engine, cur) == {1: ("a", 1, 5)}
    assert [t for e in engine.history(cur) for t in e["txns"] if t["app_id"] == "m"].count(
        {"app_id": "m", "version": 1}) == 1


# -- delta-spark only, and both engines on one table ---------------------------------------------------------------


@pytest.fixture(scope="module")
def spark_engine(request: pytest.FixtureRequest):
    from binlake.lake.engines.deltaspark import DeltaSparkEngine, available

    spark = request.getfixturevalue("spark")
    ok, reason = available(spark)
    if not ok:
        skip_or_fail(f"delta-spark: {reason}")
    return DeltaSparkEngine(spark)


def test_delta_spark_refuses_column_names_it_could_only_store_with_column_mapping(spark_engine,
                                                                                  lake_root: Path) -> None:
    cur, hist = str(lake_root / f"n_{uuid.uuid4().hex[:8]}"), str(lake_root / f"n_{uuid.uuid4().hex[:8]}__history")
    data = changes((1, "a", 1, 1, False)).rename_columns(["id", "first name", "qty", "_seq", "_deleted"])
    with pytest.raises(EngineError, match=rf"merge {cur}: column 'first name' contains ' '.*delta-rs engine"):
        spark_engine.merge(cur, data, ["id"], "m", 1)
    nested = pa.table({"id": pa.array([1], pa.int64()), "_before": pa.array([{"a=b": 1}])})
    with pytest.raises(EngineError, match=r"column 'a=b' contains '='"):
        spark_engine.append(hist, nested, "h", 1)
    assert not spark_engine.exists(cur) and not spark_engine.exists(hist)
    # delta-rs stores such names, and Delta Spark reads them.
    rs = DeltaRsEngine()
    rs.merge(cur, data, ["id"], "m", 1)
    assert spark_engine.read(cur).to_pylist() == rs.read(cur).to_pylist() == [
        {"id": 1, "first name": "a", "qty": 1, "_seq": 1}]
    with pytest.raises(EngineError, match=r"replace_schema .*column 'first name' contains ' '"):
        spark_engine.replace_schema(cur, [ColumnChange.rename("qty", "amount")], "ddl", 1)
    assert spark_engine.txn_version(cur, "ddl") is None


def _same_rows(a: pa.Table, b: pa.Table) -> bool:
    def key(r: dict) -> str:
        return repr(sorted(r.items()))

    return a.schema == b.schema and sorted(a.to_pylist(), key=key) == sorted(b.to_pylist(), key=key)


def test_a_table_one_engine_wrote_reads_and_continues_the_same_in_the_other(spark_engine, lake_root: Path) -> None:
    rs = DeltaRsEngine()
    for writer, reader in ((rs, spark_engine), (spark_engine, rs)):
        hist = str(lake_root / f"x_{uuid.uuid4().hex[:8]}__history")
        cur = str(lake_root / f"x_{uuid.uuid4().hex[:8]}")
        writer.append(hist, all_types_rows(), "h", 0)
        writer.append(hist, all_types_rows().slice(0, 1), "h", 1)
        writer.merge(cur, changes((1, "a", 1, 10, False), (2, "b", 2, 11, False), (3, "c", 3, 12, False)),
                     ["id"], "m", 1)
        writer.merge(cur, changes((1, None, None, 20, True), (2, "b2", 5, 21, False)), ["id"], "m", 2)
        for path in (hist, cur, tombstone_path(cur)):
            assert _same_rows(reader.read(path), writer.read(path)), (writer.name, path)
            assert reader.version(path) == writer.version(path)
        assert reader.read(hist).schema == ALL_TYPES and reader.read(hist).num_rows == 3
        assert reader.history(cur) == writer.history(cur)
        assert [e["action"] for e in reader.history(cur) if e["txns"]][:2] == ["merge", "merge"]
        assert (reader.txn_version(cur, "m"), reader.txn_version(hist, "h")) == (2, 1)
        # The other engine continues the tables: the same exactly-once bookkeeping, the same tombstones.
        assert reader.merge(cur, changes((1, "late", 0, 15, False)), ["id"], "m", 2) is False
        assert reader.append(hist, all_types_rows(), "h", 1) is False
        reader.merge(cur, changes((1, "older", 0, 15, False), (3, "c3", 3, 30, False)), ["id"], "backfill", 0)
        assert current(writer, cur) == {2: ("b2", 5, 21), 3: ("c3", 3, 30)}
        reader.replace_schema(cur, [ColumnChange.add("note", pa.string(), pa.scalar("n"))], "ddl", 1)
        assert writer.read(cur).schema.names == ["id", "name", "qty", "_seq", "note"]
        assert {r["note"] for r in writer.read(cur).to_pylist()} == {"n"}


# -- the factory ------------------------------------------------------------------------------------------------


def test_delta_spark_spots_timestamp_ntz_anywhere_in_a_schema() -> None:
    from binlake.lake.engines.deltaspark import _has_ntz

    assert _has_ntz(ALL_TYPES) and _has_ntz(pa.schema([("b", pa.struct([("t", pa.timestamp("us"))]))]))
    assert not _has_ntz(pa.schema([("utc", pa.timestamp("us", tz="UTC")), ("d", pa.date32())]))


def test_get_engine_defaults_to_delta_rs_and_names_bad_config() -> None:
    assert get_engine().name == "delta-rs" and get_engine("delta-rs").name == "delta-rs"
    with pytest.raises(EngineUnavailable, match=r"lake_engine = 'delta-lake' is not a Delta engine.*delta-spark"):
        get_engine("delta-lake", setting="lake_engine")


def test_get_engine_uses_the_session_the_command_line_set(spark_engine) -> None:
    """`--engine delta-spark` from the command line: the CLI builds binlake's session and hands it over once."""
    from binlake.lake.engines import use_spark

    with pytest.raises(EngineUnavailable, match=r"engine = 'delta-spark'.*needs a SparkSession"):
        get_engine("delta-spark")
    use_spark(spark_engine.spark)
    try:
        built = get_engine("delta-spark")
    finally:
        use_spark(None)
    assert built.name == "delta-spark" and built.spark is spark_engine.spark


def test_delta_spark_without_the_jars_fails_in_one_line_naming_the_folder(tmp_path: Path) -> None:
    import os
    import subprocess
    import sys

    from binlake.exitcodes import ExitCode

    missing = tmp_path / "no-jars"
    root = Path(__file__).resolve().parents[2]
    env = {**os.environ, "BINLAKE_DELTA_JARS": str(missing), "PYTHONPATH": str(root)}
    env.pop("BINLAKE_DEBUG", None)
    lake = tmp_path / "lake"
    DeltaRsEngine().append(str(lake / "a" / "b__history"), history_rows([1], 0), "h", 0)
    run = subprocess.run([sys.executable, "-m", "binlake.cli", "trace", "--lake", str(lake), "--table", "a.b",
                          "--key", "id=1", "--engine", "delta-spark"], env=env, capture_output=True, text=True,
                         timeout=300)
    assert run.returncode == ExitCode.UNAVAILABLE, run.stderr
    lines = run.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("binlake: error: --engine delta-spark: "), run.stderr
    from binlake.spark import delta_jar_name

    assert f"the Delta jars are not in {missing} (no {delta_jar_name()}): fetch them with `bash scripts/dev.sh " \
           "setup`" in lines[0], lines[0]
