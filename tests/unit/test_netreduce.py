"""binlake.lake.engines.netreduce: the newest change per key over staged pieces' net files, cut into key-hash buckets."""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from binlake.lake.engines.base import DELETED, SEQ
from binlake.lake.engines.netreduce import key_buckets, reduce_bucket
from binlake.lake.staging import write_net

SHAPES = {
    "int": ([pa.field("id", pa.int64())], lambda r: (r.randrange(-50, 400),)),
    "text": ([pa.field("code", pa.string())], lambda r: (r.choice("abcdefg") * r.randrange(1, 4) + str(r.randrange(30)),)),
    "composite": ([pa.field("a", pa.int32()), pa.field("b", pa.string())],
                  lambda r: (r.randrange(20), r.choice(["x", "yy", "", "zz z"]))),
    "decimal-date": ([pa.field("d", pa.decimal128(8, 2)), pa.field("day", pa.date32())],
                     lambda r: (__import__("decimal").Decimal(r.randrange(-999, 999)) / 100,
                                datetime(2024, 1, 1).date() + timedelta(days=r.randrange(40)))),
}


def _schema(key_fields: list[pa.Field]) -> pa.Schema:
    return pa.schema([*key_fields, pa.field("v", pa.int32()), pa.field("note", pa.string()),
                      pa.field("_commit_ts", pa.timestamp("us", tz="UTC")), pa.field(SEQ, pa.int64()),
                      pa.field(DELETED, pa.bool_())])


def _pieces(tmp_path, shape: str, seed: int) -> tuple[str, list[dict], pa.Schema, list[str], dict]:
    """Net files of random pieces (one row per key each, later pieces with larger seqs), and the expected newest
    row per key."""
    rng = random.Random(seed)
    key_fields, make_key = SHAPES[shape]
    keys = [f.name for f in key_fields]
    schema = _schema(key_fields)
    stage = str(tmp_path / "stage")
    pieces, newest, seq = [], {}, 1 << 40
    for n in range(rng.randrange(1, 7)):
        rows = {}
        for _ in range(rng.randrange(0, 120)):
            seq += rng.randrange(1, 50)
            rows[make_key(rng)] = seq
        records = []
        for key, s in rows.items():
            deleted = rng.random() < 0.3
            rec = {**dict(zip(keys, key, strict=True)), "v": None if deleted else rng.randrange(1000),
                   "note": rng.choice([None, "n", "long text " * rng.randrange(3)]),
                   "_commit_ts": datetime(2025, 1, 1, tzinfo=UTC) + timedelta(seconds=s % 9999), SEQ: s,
                   DELETED: deleted}
            records.append(rec)
            newest[key] = rec
        piece = {"path": f"t/7-{n}-0.parquet", "min_seq": min(rows.values(), default=0)}
        rng.shuffle(records)  # a piece's rows in any order
        table = pa.Table.from_pylist(records, schema=schema)
        (tmp_path / "stage" / "t").mkdir(parents=True, exist_ok=True)
        pieces.append(write_net(stage, piece, table))
    return stage, pieces, schema, keys, newest


def _read(files: list[dict], folder) -> list[dict]:
    return [r for f in files for r in pq.read_table(str(folder / f["path"])).to_pylist()]


@pytest.mark.parametrize("shape", sorted(SHAPES))
@pytest.mark.parametrize("seed", [1, 2, 3])
@pytest.mark.parametrize("buckets", [1, 3])
def test_buckets_together_give_the_newest_row_per_key(tmp_path, shape, seed, buckets):
    stage, pieces, schema, keys, newest = _pieces(tmp_path, shape, seed)
    current, tombs = tmp_path / "current", tmp_path / "current" / "_tombs"
    results = [reduce_bucket((stage, pieces, keys, schema, b, buckets, str(current), str(tombs)))
               for b in range(buckets)]
    assert all(r["nulls"] is None for r in results)
    upserts = _read([f for r in results for f in r["upsert_files"]], current)
    deletes = _read([f for r in results for f in r["delete_files"]], tombs)
    assert sum(r["upserts"] for r in results) == len(upserts)
    assert sum(r["deletes"] for r in results) == len(deletes)

    def key(row):
        return tuple(row[k] for k in keys)

    want_up = {k: {c: v for c, v in r.items() if c != DELETED} for k, r in newest.items() if not r[DELETED]}
    want_del = {k: {**{c: r[c] for c in keys}, SEQ: r[SEQ]} for k, r in newest.items() if r[DELETED]}
    assert len(upserts) == len({key(r) for r in upserts}) and len(deletes) == len({key(r) for r in deletes})
    assert {key(r): r for r in upserts} == want_up
    assert {key(r): r for r in deletes} == want_del
    if buckets > 1 and len(newest) > 20:  # the keys spread over the buckets
        assert sum(1 for r in results if r["upserts"] + r["deletes"]) > 1


def test_a_key_keeps_its_bucket_in_every_piece(tmp_path):
    rng = random.Random(5)
    for shape in SHAPES:
        key_fields, make_key = SHAPES[shape]
        keys = [f.name for f in key_fields]
        values = [make_key(rng) for _ in range(200)]
        table = pa.Table.from_pylist([dict(zip(keys, v, strict=True)) for v in values], schema=pa.schema(key_fields))
        first = key_buckets(table, keys, 5)
        again = key_buckets(table.take(list(range(199, -1, -1))), keys, 5)[::-1]
        assert (first == again).all() and set(first.tolist()) <= set(range(5))
        assert len(set(first.tolist())) > 1


def test_null_keys_are_reported_not_written(tmp_path):
    schema = _schema([pa.field("id", pa.int64())])
    stage = str(tmp_path / "stage")
    (tmp_path / "stage" / "t").mkdir(parents=True)
    rows = pa.Table.from_pylist([{"id": None, "v": 1, "note": None, "_commit_ts": None, SEQ: 5, DELETED: False},
                                 {"id": 3, "v": 1, "note": None, "_commit_ts": None, SEQ: 6, DELETED: False}],
                                schema=schema)
    piece = write_net(stage, {"path": "t/1-0-0.parquet", "min_seq": 5}, rows)
    out = reduce_bucket((stage, [piece], ["id"], schema, 0, 1, str(tmp_path / "c"), str(tmp_path / "t")))
    assert out["nulls"] == "id" and not out["upsert_files"] and not (tmp_path / "c").exists()
