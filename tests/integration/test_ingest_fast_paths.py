"""The ingest's cheaper paths give what the general ones give (issue 17): staged history pieces of one commit date
linked into the history table as its data files, the merge into a table with no rows and no tombstones written
as an overwrite conditioned on the whole table, the staged merge input reduced to the newest row per key as it
goes, and open transactions' rows put aside as Arrow IPC. Seeded random inputs; delta-rs."""

from __future__ import annotations

import datetime as dt
import random
import uuid
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from binlake.lake import staging
from binlake.lake.current import NewestPerKey
from binlake.lake.engines import DELETED, SEQ, tombstone_path
from binlake.lake.engines import deltars as deltars_module
from binlake.lake.engines.deltars import DeltaRsEngine
from binlake.lake.engines.tombstones import merge_with_tombstones
from binlake.lake.history import PARTITION_BY

US = 1_000_000


def history(rng: random.Random, n: int, dates: list[dt.date], version: str = "v1") -> pa.Table:
    """History-shaped rows: typed columns, a `_before` struct, the metadata columns `_commit_date` last."""
    ts = [dt.datetime.combine(rng.choice(dates), dt.time(rng.randrange(24), rng.randrange(60)), dt.UTC)
          for _ in range(n)]
    ids = [rng.randrange(10_000) for _ in range(n)]
    return pa.table({
        "id": pa.array(ids, pa.int64()),
        "name": pa.array([None if rng.random() < 0.2 else f"n{rng.randrange(99)}é" for _ in range(n)]),
        "qty": pa.array([rng.randrange(-5, 5) for _ in range(n)], pa.int32()),
        "_before": pa.array([None if rng.random() < 0.7 else {"id": i, "name": "b", "qty": 1} for i in ids],
                            pa.struct([("id", pa.int64()), ("name", pa.string()), ("qty", pa.int32())])),
        "_op": pa.array([rng.choice(("insert", "update", "delete")) for _ in range(n)]),
        "_file_seq": pa.array([1] * n, pa.int64()),
        "_pos": pa.array(sorted(rng.sample(range(4, 10 * n + 4), n)), pa.int64()),
        "_commit_ts": pa.array(ts, pa.timestamp("us", tz="UTC")),
        "_schema_version": pa.array([version] * n),
        "_commit_date": pa.array([t.date() for t in ts], pa.date32()),
    })


@pytest.mark.parametrize("seed", [3, 17])
def test_one_date_pieces_are_linked_into_history_and_read_back_whole(tmp_path: Path, seed: int) -> None:
    rng = random.Random(seed)
    stage = str(tmp_path / "stage")
    day = dt.date(2024, 2, 28) + dt.timedelta(days=rng.randrange(3))
    one = history(rng, rng.randrange(50, 400), [day])
    two = history(rng, rng.randrange(50, 400), [day, day + dt.timedelta(days=1)])
    pieces = [staging.write_piece(stage, "db.t", 1, 4, n, rows) for n, rows in enumerate((one, two))]
    # One commit date: the file leaves the partition column out, the manifest says it (and the file's stats).
    assert pieces[0]["commit_date"] == day.isoformat() and "stats" in pieces[0]
    assert "_commit_date" not in pq.read_schema(f"{stage}/{pieces[0]['path']}").names
    assert "commit_date" not in pieces[1]  # two dates: written whole, as before
    middle = one.select([*one.column_names[:4], "_commit_date", *one.column_names[4:-1]])  # the date anywhere
    moved = staging.write_piece(stage, "db.t", 1, 4, 9, middle)
    assert staging.read_piece(stage, moved).equals(middle) and staging.piece_schema(stage, moved) == middle.schema
    for piece, rows in zip(pieces, (one, two), strict=True):
        assert staging.read_piece(stage, piece).equals(rows)
        assert staging.piece_schema(stage, piece) == rows.schema
        cols = ["_op", "_commit_date", "id"]
        assert staging.read_piece(stage, piece, columns=cols).equals(rows.select(cols))
        assert pa.Table.from_batches(list(staging.scan_piece(stage, piece, columns=cols))).equals(rows.select(cols))
        lo = rows.column("_pos")[len(rows) // 3].as_py() + (1 << 40)
        assert staging.read_piece(stage, piece, lo=lo).equals(rows.slice(len(rows) // 3))
    engine, path = DeltaRsEngine(), str(tmp_path / "t__history")
    info = {"staged": pieces}
    assert engine.append_staged(path, stage, info, "h", 1, partition_by=PARTITION_BY) is True
    assert engine.append_staged(path, stage, info, "h", 1, partition_by=PARTITION_BY) is False  # replay
    expected = pa.concat_tables([one, two]).sort_by([("_pos", "ascending"), ("_commit_date", "ascending")])
    got = engine.read(path).select(expected.column_names).sort_by([("_pos", "ascending"),
                                                                   ("_commit_date", "ascending")])
    assert got.equals(expected.cast(got.schema))
    files = [p for p in Path(path).rglob("*.parquet")]
    assert len(files) >= 2 and all("_commit_date" not in pq.read_schema(f).names for f in files)
    linked = Path(path, f"_commit_date={day.isoformat()}")
    assert any(f.stat().st_ino == Path(stage, pieces[0]["path"]).stat().st_ino for f in linked.glob("*.parquet"))


@pytest.mark.parametrize("seed", [4, 29])
def test_delta_spark_links_pieces_only_when_every_piece_fits(spark, tmp_path: Path, seed: int) -> None:
    """delta-spark's history append: an entry whose pieces all fit the table (one commit date each, its columns)
    is linked in as data files and committed once; an entry with a piece that does not (two dates) is read and
    written by Spark, nothing linked. Both read back equal through Spark, and a replay commits nothing."""
    from binlake.lake.engines.deltaspark import DeltaSparkEngine, available
    from tests.conftest import skip_or_fail

    ok, reason = available(spark)
    if not ok:
        skip_or_fail(f"delta-spark: {reason}")
    engine = DeltaSparkEngine(spark)
    rng = random.Random(seed)
    stage = str(tmp_path / "stage")
    day = dt.date(2024, 2, 28) + dt.timedelta(days=rng.randrange(3))
    days = [day, day + dt.timedelta(days=1 + rng.randrange(2))]
    linked = [history(rng, rng.randrange(50, 300), [d]) for d in days]
    mixed = [history(rng, rng.randrange(50, 300), [day]), history(rng, rng.randrange(50, 300), days)]
    for name, tables in (("linked", linked), ("mixed", mixed)):
        pieces = [staging.write_piece(stage, f"db.{name}", 1, 4, n, rows) for n, rows in enumerate(tables)]
        path = str(tmp_path / f"{name}__history")
        info = {"staged": pieces}
        before = set(spark.sparkContext.statusTracker().getJobIdsForGroup(None))
        assert engine.append_staged(path, stage, info, "h", 7, partition_by=PARTITION_BY) is True
        spark_jobs = set(spark.sparkContext.statusTracker().getJobIdsForGroup(None)) - before
        assert engine.append_staged(path, stage, info, "h", 7, partition_by=PARTITION_BY) is False  # replay
        assert engine.txn_version(path, "h") == 7 and engine.version(path) == 1
        expected = pa.concat_tables(tables).sort_by([("_pos", "ascending"), ("_commit_date", "ascending")])
        got = engine.read(path).select(expected.column_names).sort_by([("_pos", "ascending"),
                                                                       ("_commit_date", "ascending")])
        assert got.equals(expected.cast(got.schema)), name
        inodes = {Path(stage, p["path"]).stat().st_ino for p in pieces}
        found = {f.stat().st_ino for f in Path(path).rglob("*.parquet")}
        if name == "linked":
            assert inodes <= found and not spark_jobs
        else:
            assert not inodes & found and spark_jobs


def test_the_piece_kept_aside_reads_back_equal(tmp_path: Path) -> None:
    rows = history(random.Random(5), 300, [dt.date(2023, 1, 1), dt.date(2023, 1, 2)])
    piece = staging.write_aside(str(tmp_path), "db.t", 1, 4, "open-1", rows)
    assert staging.read_aside(str(tmp_path), piece).equals(rows)
    staging.delete_piece(str(tmp_path), piece)
    assert not list(tmp_path.rglob("*.arrow"))


def test_piece_keys_read_matches_the_whole_read(tmp_path: Path) -> None:
    rng = random.Random(11)
    rows = history(rng, 500, [dt.date(2022, 5, 5)])
    piece = staging.write_piece(str(tmp_path), "db.t", 1, 4, 0, rows)
    lo, hi = rows.column("_pos")[100].as_py() + (1 << 40), rows.column("_pos")[400].as_py() + (1 << 40)
    got = staging.read_piece_keys(str(tmp_path), piece, lo, hi, ["id", "name", "_file_seq", "_pos", "_op"], ["id"])
    whole = rows.slice(100, 300)
    assert got.select(["id", "name", "_file_seq", "_pos", "_op"]).equals(
        whole.select(["id", "name", "_file_seq", "_pos", "_op"]))
    assert got.column("_before").type == pa.struct([("id", pa.int64())])
    assert got.column("_before").to_pylist() == [None if b is None else {"id": b["id"]}
                                                 for b in whole.column("_before").to_pylist()]


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_newest_per_key_keeps_the_largest_seq_in_order(monkeypatch: pytest.MonkeyPatch, seed: int) -> None:
    import binlake.lake.engines.mergeplan as mergeplan

    rng = random.Random(seed)
    monkeypatch.setattr(mergeplan, "COLLAPSE_BYTES", rng.choice((1, 200, 5000)))
    reducer, seq, everything = NewestPerKey(["k"]), 0, []
    for _ in range(rng.randrange(2, 12)):
        keys = rng.sample(range(60), rng.randrange(1, 40))  # one row per key within a part
        part = []
        for k in keys:
            seq += rng.randrange(1, 5)
            part.append({"k": k, "v": f"{k}@{seq}", SEQ: seq, DELETED: rng.random() < 0.3})
        everything += part
        reducer.add(pa.Table.from_pylist(part))
    newest = {}
    for r in everything:
        newest[r["k"]] = r
    expected = [r for r in everything if newest[r["k"]] is r]  # binlog order, the newest row of each key
    assert reducer.result().to_pylist() == expected


def changes(rows: list[tuple]) -> pa.Table:
    return pa.table({"id": pa.array([r[0] for r in rows], pa.int64()),
                     "name": pa.array([r[1] for r in rows], pa.string()),
                     SEQ: pa.array([r[2] for r in rows], pa.int64()),
                     DELETED: pa.array([r[3] for r in rows], pa.bool_())})


def table_state(engine: DeltaRsEngine, path: str) -> tuple[list, list]:
    cur = sorted(tuple(r.values()) for r in engine.read(path).to_pylist())
    tpath = tombstone_path(path)
    tombs = sorted(tuple(r.values()) for r in engine.read(tpath).to_pylist()) if engine.exists(tpath) else []
    return cur, tombs


@pytest.mark.parametrize("seed", [4, 8, 15])
def test_merge_into_a_pristine_table_equals_the_general_merge(tmp_path: Path, seed: int) -> None:
    rng = random.Random(seed)
    engine = DeltaRsEngine()
    ids = rng.sample(range(1000), rng.randrange(1, 300))
    data = changes([(i, None if rng.random() < 0.1 else f"x{i}", rng.randrange(1, 1 << 40), rng.random() < 0.3)
                    for i in ids])
    fast, general = str(tmp_path / "fast"), str(tmp_path / "general")
    assert engine.merge(fast, data, ["id"], "m", 1) is True
    assert engine.merge(fast, data, ["id"], "m", 1) is False  # replay
    assert merge_with_tombstones(engine, general, data, ["id"], "m", 1) is True
    assert table_state(engine, fast) == table_state(engine, general)
    assert engine.txn_version(fast, "m") == 1
    # A second batch goes through the general MERGE and still agrees.
    more = changes([(i, f"y{i}", rng.randrange(1, 1 << 41), rng.random() < 0.3) for i in rng.sample(range(1000), 50)])
    engine.merge(fast, more, ["id"], "m", 2)
    merge_with_tombstones(engine, general, more, ["id"], "m", 2)
    assert table_state(engine, fast) == table_state(engine, general)


def test_a_writer_filling_the_table_meanwhile_sends_the_merge_the_general_way(tmp_path: Path,
                                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """Another writer commits rows between the pristine check and the overwrite: the overwrite, conditioned on the
    whole table, fails, and the retry merges by the rule (the newer change of a key wins, no duplicate)."""
    engine, path = DeltaRsEngine(), str(tmp_path / f"t_{uuid.uuid4().hex[:8]}")
    real, other = deltars_module.write_deltalake, []

    def racing(table, data, *args, **kwargs):
        if not other and "_binlake_tombstones" not in table.table_uri:
            other.append(1)
            merge_with_tombstones(engine, path, changes([(1, "theirs", 50, False), (2, "theirs", 50, False)]),
                                  ["id"], "other", 1)
        return real(table, data, *args, **kwargs)

    monkeypatch.setattr(deltars_module, "write_deltalake", racing)
    mine = changes([(1, "mine", 10, False), (2, "mine", 90, False), (3, "mine", 10, False), (4, None, 10, True)])
    assert engine.merge(path, mine, ["id"], "m", 1) is True
    assert other
    cur, tombs = table_state(engine, path)
    assert cur == [(1, "theirs", 50), (2, "mine", 90), (3, "mine", 10)]
    assert tombs == [(4, 10)]


def _events(rng: random.Random, mode: str) -> list:
    """Rows events of db.t (id INT key, v VARCHAR): keys ascending, shuffled but distinct, or changed again and again
    (updates that keep or move the key, deletes, re-inserts)."""
    from binlake.binlog.decoder import RowBatch

    tm = _tm()
    pos, out = 4, []
    if mode != "mixed":
        ids = list(range(rng.randrange(1, 50), rng.randrange(60, 400)))
        if mode == "shuffled":
            rng.shuffle(ids)
        for at in range(0, len(ids), 37):
            pos += rng.randrange(10, 90)
            op = rng.choice(("insert", "delete"))
            rows = [[i, f"v{i}"] for i in ids[at:at + 37]]
            out.append(RowBatch("f.000001", pos, pos, 0, 0, None, tm, op,
                                [(None, r) if op == "insert" else (r, None) for r in rows]))
        return out
    live: dict[int, str] = {}
    for _ in range(rng.randrange(5, 40)):
        pos += rng.randrange(10, 90)
        op = rng.choice(("insert", "update", "delete")) if live else "insert"
        pairs = []
        if op == "insert":
            for i in rng.sample(range(300), rng.randrange(1, 20)):
                if i not in live:
                    live[i] = f"i{pos}"
                    pairs.append((None, [i, live[i]]))
        else:
            for i in rng.sample(sorted(live), min(len(live), rng.randrange(1, 10))):
                if i not in live:
                    continue
                if op == "delete":
                    pairs.append(([i, live.pop(i)], None))
                    continue
                new = i if rng.random() < 0.6 else rng.choice([k for k in range(300) if k not in live] or [i])
                old = live.pop(i)
                live[new] = f"u{pos}"
                pairs.append(([i, old], [new, live[new]]))
        if pairs:
            out.append(RowBatch("f.000001", pos, pos, 0, 0, None, tm, op, pairs))
    return out


def _tm():
    from binlake.binlog.constants import ColumnType as T
    from binlake.binlog.tablemap import Column, TableMap

    tm = TableMap(1, "db", "t", [Column(0, T.LONG, 0, True, True, 45, "id"),
                                 Column(1, T.VARCHAR, 40, True, None, 45, "v")], primary_key=[0])
    tm.schema_version = "v1"
    return tm


@pytest.mark.parametrize("mode", ["ascending", "shuffled", "mixed"])
@pytest.mark.parametrize("seed", [5, 6, 7])
def test_merge_input_and_newest_per_key_by_sorting_equal_the_hashing_ones(monkeypatch: pytest.MonkeyPatch,
                                                                         mode: str, seed: int) -> None:
    """With a single integer key, merge_input and NewestPerKey sort the key instead of hashing it: the same rows
    (each key's last change, key-changing updates' tombstones included), for keys that ascend (rows kept as they
    came), are shuffled or change again; parts out of `_seq` order take the general way."""
    import binlake.lake.current as current
    import binlake.lake.engines.mergeplan as mergeplan
    from binlake.lake.convert import ConversionStats
    from binlake.lake.current import merge_input
    from binlake.lake.history import CommittedBatch, history_table

    rng = random.Random(seed * 10 + len(mode))
    events = _events(rng, mode)
    cut = sorted(rng.sample(range(1, len(events)), min(len(events) - 1, 3))) if len(events) > 1 else []
    parts = [events[a:b] for a, b in zip([0, *cut], [*cut, len(events)], strict=True)]
    rows = [history_table([CommittedBatch(b, 0, 1) for b in part], 0, ConversionStats()) for part in parts]

    def reduce(order: list[int]) -> tuple[list, pa.Table]:
        newest = NewestPerKey(["id"])
        inputs = [merge_input(rows[i], _tm()) for i in order]
        for part in inputs:
            newest.add(part)
        return [p.to_pylist() for p in inputs], newest.result()

    shuffled = list(range(len(rows)))
    rng.shuffle(shuffled)
    got = [reduce(list(range(len(rows)))), reduce(shuffled)]
    for module in (current, mergeplan):  # the general way: hashing, sorting by `_seq`
        monkeypatch.setattr(module, "int_key", lambda *_: None)
    want = [reduce(list(range(len(rows)))), reduce(shuffled)]
    for (got_inputs, got_result), (want_inputs, want_result) in zip(got, want, strict=True):
        if mode != "mixed":  # no key twice in a part: its rows as they came, in that order
            assert got_inputs == want_inputs
        assert [sorted(p, key=lambda r: r["id"]) for p in got_inputs] == \
            [sorted(p, key=lambda r: r["id"]) for p in want_inputs]
        assert sorted(got_result.to_pylist(), key=lambda r: r["id"]) == \
            sorted(want_result.to_pylist(), key=lambda r: r["id"])
        assert got_result.num_rows == len({r["id"] for r in got_result.to_pylist()})
    assert sorted(r["id"] for r in got[0][1].to_pylist()) == sorted(r["id"] for r in got[1][1].to_pylist())


def test_validate_merge_input_finds_a_repeated_integer_key() -> None:
    from binlake.lake.engines.base import MergeInputError
    from binlake.lake.engines.mergeplan import validate_merge_input

    ok = changes([(i, "x", i, False) for i in (5, 1, 9, 3)])
    assert validate_merge_input(ok, ["id"]).num_rows == 4
    with pytest.raises(MergeInputError, match="duplicated keys"):
        validate_merge_input(changes([(i, "x", 1, False) for i in (5, 1, 9, 1)]), ["id"])


@pytest.mark.parametrize("seed", [3, 17])
def test_validate_merge_input_checks_small_string_and_composite_keys_like_the_group_by(
        monkeypatch: pytest.MonkeyPatch, seed: int) -> None:
    """Few rows of string / integer keys are checked in Python (_few_distinct), more by Arrow's group-by: both
    accept the same inputs and name the same duplicated keys."""
    from binlake.lake.engines import mergeplan
    from binlake.lake.engines.base import MergeInputError

    rng = random.Random(seed)
    names = ["é", "e", "E", "e\u0301", "", " e", "e ", "ü" * 3, "10", "1"]
    for n in (1, 2, 7, 40):
        for repeat in (False, True):
            picked = rng.sample(names, min(n, len(names))) if n <= len(names) else \
                [f"{rng.choice(names)}{i}" for i in range(n)]
            if repeat and len(picked) > 1:
                picked[rng.randrange(1, len(picked))] = picked[0]
            nums = [rng.choice([0, -1, 2**63 - 1]) for _ in picked]
            for keys, cols in ((["k"], {"k": picked}), (["k", "n"], {"k": picked, "n": nums}),
                               (["b"], {"b": [s.encode() for s in picked]})):
                data = pa.table({**cols, SEQ: list(range(len(picked))), DELETED: [False] * len(picked)})
                unique = len(set(zip(*(cols[k] for k in keys), strict=True))) == len(picked)
                results = []
                for few in (mergeplan.FEW_ROWS, 0):  # the Python check, then the group-by alone
                    monkeypatch.setattr(mergeplan, "FEW_ROWS", few)
                    try:
                        results.append(mergeplan.validate_merge_input(data, keys).to_pylist())
                    except MergeInputError as exc:
                        assert "duplicated keys" in str(exc)
                        results.append(str(exc))
                assert results[0] == results[1]
                assert (type(results[0]) is list) == unique


def test_kept_merge_inputs_are_taken_once_within_the_budget_and_forgotten_with_their_stage(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    rows = changes([(i, "x", i, False) for i in range(100)])
    stage, other = str(tmp_path / "b1"), str(tmp_path / "b2")
    monkeypatch.setattr(staging, "_merge_inputs", {})
    monkeypatch.setattr(staging, "MERGE_INPUT_BYTES", rows.nbytes * 2)
    assert staging.keep_merge_input(stage, {"path": "t/1.parquet"}, ["id"], rows)
    assert staging.keep_merge_input(other, {"path": "t/1.parquet"}, ["id"], rows)
    assert not staging.merge_input_room()
    assert not staging.keep_merge_input(stage, {"path": "t/2.parquet"}, ["id"], rows)  # over the budget
    assert staging.take_merge_input(stage, {"path": "t/1.parquet"}, ["k"]) is None  # other key names: read it
    assert staging.keep_merge_input(stage, {"path": "t/1.parquet"}, ["id"], rows)
    assert staging.take_merge_input(stage, {"path": "t/1.parquet"}, ["id"]) is rows
    assert staging.take_merge_input(stage, {"path": "t/1.parquet"}, ["id"]) is None  # taken once
    assert staging.keep_merge_input(stage, {"path": "t/3.parquet"}, ["id"], rows)
    staging.forget_merge_inputs(stage)
    assert staging.take_merge_input(stage, {"path": "t/3.parquet"}, ["id"]) is None
    assert staging.take_merge_input(other, {"path": "t/1.parquet"}, ["id"]) is rows  # another batch's stays


def _lake_state(lake: Path) -> dict:
    """Every Delta table of a lake: schema, rows (sorted), and per commit its operation, binlake metadata and txn
    actions (the control table's wall-clock column left out)."""
    import json

    from deltalake import DeltaTable

    out = {}
    for log in sorted(lake.rglob("_delta_log")):
        dt_ = DeltaTable(str(log.parent))
        rows = pa.table(dt_.scan()).cast(pa.schema(dt_.schema().to_arrow()))
        if "updated_at" in rows.column_names:
            rows = rows.drop_columns(["updated_at"])
        flat = [c for c in rows.column_names if not pa.types.is_nested(rows.schema.field(c).type)]
        commits = []
        for f in sorted(log.glob("*.json")):
            actions = [json.loads(line) for line in f.read_text().splitlines()]
            info = next(a["commitInfo"] for a in actions if "commitInfo" in a)
            commits.append((info.get("operation"), info.get("binlake"), [a["txn"] for a in actions if "txn" in a],
                            sum("add" in a for a in actions), sum("remove" in a for a in actions)))
        out[str(log.parent.relative_to(lake))] = (rows.schema, rows.sort_by([(c, "ascending") for c in flat]),
                                                  commits)
    return out


@pytest.mark.parametrize("seed", [5, 8])
def test_a_lake_ingested_from_integer_arrays_equals_one_from_ints(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                 seed: int) -> None:
    """Decode tasks hand integer columns to history as numpy arrays (DecodeOptions.int_arrays); two batches ingested
    that way and with Python ints give the same lakes: history and current tables, tombstones, registry and control
    tables, their rows, types, commit metadata and txn app ids."""
    import contextlib

    from binlake.lake import ingest as ingest_module
    from binlake.lake import pipeline
    from binlake.lake.ingest import GatesOff, IngestOptions
    from binlake.quality.stages import run_ingest
    from binlake.testing.binlog_writer import BinlogWriter, column

    rng = random.Random(seed)
    folder = tmp_path / "binlogs"
    folder.mkdir()
    spec = ["BIGINT", "TINYINT UNSIGNED", "SMALLINT", "INT", "INT UNSIGNED", "BIGINT UNSIGNED", "MEDIUMINT"]
    bounds = {"BIGINT": (-2**63, 2**63 - 1), "TINYINT UNSIGNED": (0, 255), "SMALLINT": (-2**15, 2**15 - 1),
              "INT": (-2**31, 2**31 - 1), "INT UNSIGNED": (0, 2**32 - 1), "BIGINT UNSIGNED": (0, 2**64 - 1),
              "MEDIUMINT": (-2**23, 2**23 - 1)}

    def value(sql: str, nullable: bool):
        if nullable and rng.random() < 0.1:
            return None
        lo, hi = bounds[sql]
        return rng.choice((lo, hi, rng.randrange(lo, hi + 1)))

    files = []
    keys = {"db.keyed": 0, "db.nokey": 0}
    for n, name in enumerate(("mysql-bin.000001", "mysql-bin.000002")):
        with BinlogWriter(str(folder / name), row_metadata="FULL", timestamp=1_700_000_000 + n * 1000) as w:
            tables = []
            for tid, table, pk in ((11, "keyed", [0]), (12, "nokey", None)):
                cols = [column("INT UNSIGNED", "id", 0, nullable=False)]
                cols += [column(sql, f"c{i}", i + 1, nullable=i % 2 == 1) for i, sql in enumerate(spec)]
                cols.append(column("VARCHAR(16) CHARACTER SET utf8mb4", "s", len(cols)))
                tables.append((w.define_table(tid, "db", table, cols, primary_key=pk), cols))
            live: dict[str, list] = {"db.keyed": [], "db.nokey": []}
            for t in range(rng.randrange(40, 80)):
                tm, cols = rng.choice(tables)
                rows = live[tm.qualified_name]
                with w.transaction(timestamp=1_700_000_000 + n * 1000 + t) as tx:
                    op = rng.choice(("insert", "insert", "update", "delete")) if rows else "insert"
                    count = 1 if rng.random() < 0.6 else rng.randrange(2, 600)
                    if op == "insert":
                        new = []
                        for _ in range(count):
                            keys[tm.qualified_name] += 1
                            new.append([keys[tm.qualified_name],
                                        *(value(sql, i % 2 == 1) for i, sql in enumerate(spec)), f"r{t}é"])
                        tx.insert(tm, new)
                        rows += new
                    else:
                        picked = rng.sample(range(len(rows)), min(count, len(rows)))
                        if op == "delete":
                            tx.delete(tm, [rows[i] for i in picked])
                            for i in sorted(picked, reverse=True):
                                rows.pop(i)
                        else:
                            changed = [[rows[i][0], value(spec[0], False), *rows[i][2:]] for i in picked]
                            tx.update(tm, [(rows[i], c) for i, c in zip(picked, changed, strict=True)])
                            for i, c in zip(picked, changed, strict=True):
                                rows[i] = c
        files.append(str(folder / name))

    def ingest(lake: Path, arrays: bool) -> None:
        if not arrays:
            monkeypatch.setattr(pipeline, "integer_arrays", contextlib.nullcontext)
            monkeypatch.setattr(ingest_module, "integer_arrays", contextlib.nullcontext)
        for upto in (1, 2):  # two batches: the second merges into tables with rows and tombstones
            run_ingest(IngestOptions(lake=str(lake), files=files[:upto], quality=GatesOff()))
        monkeypatch.undo()

    ingest(tmp_path / "arrays", True)
    ingest(tmp_path / "ints", False)
    arrays, ints = _lake_state(tmp_path / "arrays"), _lake_state(tmp_path / "ints")
    assert sorted(arrays) == sorted(ints) and "db/keyed" in arrays and "db/nokey__history" in arrays
    for name, (schema, rows, commits) in arrays.items():
        assert schema == ints[name][0], name
        assert rows.equals(ints[name][1]), name
        assert commits == ints[name][2], name
