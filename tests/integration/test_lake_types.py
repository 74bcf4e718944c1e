"""The lake (real Delta tables through the ingest pipeline) takes the decoder's types exactly: unsigned integers
after a YEAR column keep their signedness on MariaDB, INET4/INET6/UUID land as strings, COMPRESSED columns as
their text or bytes, vectors as list<float32> (MariaDB VECTOR from the binlog's DDL, MySQL 9 VECTOR from a real
server's file). Current tables are compared with the server's SELECT."""

from __future__ import annotations

import random
import struct
import uuid
from decimal import Decimal
from pathlib import Path

import pyarrow as pa
import pytest

from binlake.binlog.errors import UnreadableTableMap
from binlake.binlog.tablemap import Column
from binlake.lake.convert import VECTOR
from binlake.lake.engines import get_engine
from binlake.lake.ingest import IngestOptions
from binlake.lake.layout import LakeLayout
from binlake.quality.stages import run_ingest
from binlake.testing.binlog_writer import BinlogWriter, column

DB = "lake_types"
COLUMNS = [
    ("yr", "YEAR"), ("tiny_u", "TINYINT UNSIGNED"), ("i4", "INET4"), ("small_neg", "SMALLINT"), ("u", "UUID"),
    ("mid", "MEDIUMINT"), ("i6", "INET6"), ("big_u", "BIGINT UNSIGNED"), ("vc", "VARCHAR(200) COMPRESSED"),
    ("tc", "TEXT COMPRESSED"), ("vb", "VARBINARY(50) COMPRESSED"), ("g", "GEOMETRY"), ("tx", "TEXT"),
]
EXPECTED_TYPES = {"yr": pa.int16(), "tiny_u": pa.int16(), "i4": pa.string(), "small_neg": pa.int16(),
                  "u": pa.string(), "mid": pa.int32(), "i6": pa.string(), "big_u": pa.decimal128(20, 0),
                  "vc": pa.string(), "tc": pa.string(), "vb": pa.binary(), "g": pa.binary(), "tx": pa.string()}


def _value(rng: random.Random, name: str):
    return {
        "yr": rng.choice([1901, 2155, rng.randint(1901, 2155)]),
        "tiny_u": rng.choice([0, 255, rng.randint(0, 255)]),
        "i4": f"{rng.randint(0, 255)}.{rng.randint(0, 255)}.0.{rng.randint(0, 255)}",
        "small_neg": rng.choice([-32768, 32767, rng.randint(-32768, 32767)]),
        "u": str(uuid.UUID(int=rng.getrandbits(128), version=4)),
        "mid": rng.choice([-8388608, 8388607, rng.randint(-8388608, 8388607)]),
        "i6": rng.choice(["::1", "::ffff:10.0.0.1", f"2001:db8::{rng.randint(1, 0xffff):x}", "1:0:0:2::"]),
        "big_u": rng.choice([0, 2**64 - 1, rng.randint(0, 2**64 - 1)]),
        "vc": "ab" * rng.randint(0, 100),
        "tc": "é" * rng.randint(0, 3000),
        "vb": rng.randbytes(rng.randint(0, 50)),
        "tx": rng.choice(["", "text", "ü" * 10]),
    }[name]


def test_mariadb_types_in_the_current_table_equal_select(mariadb_servers, tmp_path) -> None:
    server = mariadb_servers.get("MINIMAL")
    rng = random.Random(13)
    with server.connect() as conn, conn.cursor() as cur:
        cur.execute(f"DROP DATABASE IF EXISTS {DB}")
        cur.execute(f"CREATE DATABASE {DB}")
        cur.execute("SHOW MASTER STATUS")
        first = cur.fetchone()[0]
    names = [n for n, _ in COLUMNS]
    with server.connect(DB) as conn, conn.cursor() as cur:
        cur.execute(f"CREATE TABLE t (id INT PRIMARY KEY, {', '.join(f'`{n}` {t} NULL' for n, t in COLUMNS)})")
        for key in range(1, 51):
            values = [None if rng.random() < 0.08 else _value(rng, n) for n in names if n != "g"]
            marks = ", ".join("POINT(%s, %s)" if n == "g" else "%s" for n in names)
            params = []
            it = iter(values)
            for n in names:
                params += [rng.random(), key] if n == "g" else [next(it)]
            cur.execute(f"INSERT INTO t (id, {', '.join(f'`{n}`' for n in names)}) VALUES (%s, {marks})",
                        [key, *params])
        cur.execute("UPDATE t SET tiny_u = 255, big_u = 18446744073709551615, i6 = '::ffff:1.2.3.4' WHERE id % 5 = 0")
        cur.execute("DELETE FROM t WHERE id % 11 = 0")
        exprs = ", ".join(f"CAST(`{n}` AS CHAR)" if n in ("i4", "i6", "u") else f"`{n}`" for n in names)
        cur.execute(f"SELECT id, {exprs} FROM t")
        expected = {r[0]: dict(zip(names, r[1:], strict=True)) for r in cur.fetchall()}
    files = [str(f) for f in server.flush_logs() if f.name >= first]
    lake = tmp_path / "lake"
    summary = run_ingest(IngestOptions(lake=str(lake), files=files, databases={DB}))
    assert summary.batch == 0
    table = get_engine().read(LakeLayout(str(lake)).current_path(DB, "t"))
    for name, typ in EXPECTED_TYPES.items():
        assert table.schema.field(name).type == typ, name
    got = {r["id"]: {n: r[n] for n in names} for r in table.to_pylist()}
    assert got.keys() == expected.keys()
    for key, row in expected.items():
        ours = {n: (int(v) if isinstance(v, Decimal) else v) for n, v in got[key].items()}
        diffs = {n: (ours[n], row[n]) for n in names if ours[n] != row[n]}
        assert not diffs, f"id={key}: (lake, server) differ: {diffs}"


def test_vectors_land_as_float_lists(tmp_path, fixture_binlogs) -> None:
    rng = random.Random(5)
    path = tmp_path / "mariadb-bin.000001"
    expected = {}
    with BinlogWriter(str(path), server_version="11.8.2-MariaDB-log", row_metadata="MINIMAL",
                      timestamp=1_700_000_000) as w:
        w.query("CREATE TABLE emb (id INT NOT NULL PRIMARY KEY, e VECTOR(4) NOT NULL)", "ai")
        tm = w.define_table(7, "ai", "emb", [column("int", "id", 0, False), column("varbinary(16)", "e", 1, False)],
                            [0])
        with w.transaction() as tx:
            for key in range(1, 20):
                vec = [struct.unpack("<f", struct.pack("<f", rng.uniform(-5, 5)))[0] for _ in range(4)]
                expected[key] = vec
                tx.insert(tm, [[key, struct.pack("<4f", *vec)]])
    lake = tmp_path / "lake"
    run_ingest(IngestOptions(lake=str(lake), files=[str(path)]))
    table = get_engine().read(LakeLayout(str(lake)).current_path("ai", "emb"))
    assert table.schema.field("e").type == VECTOR
    assert {r["id"]: r["e"] for r in table.to_pylist()} == expected

    mysql9 = fixture_binlogs / "blackbeam__rust_mysql_common" / "vector.binlog"
    lake9 = tmp_path / "lake9"
    run_ingest(IngestOptions(lake=str(lake9), files=[str(mysql9)]))
    current = get_engine().read(LakeLayout(str(lake9)).current_path("dtb", "foo"))
    assert current.schema.field("vector_column").type == VECTOR
    vectors = current.column("vector_column").to_pylist()
    assert vectors and all(len(v) == 3 for v in vectors)


def test_an_unreadable_table_map_holds_back_only_its_table(tmp_path) -> None:
    """A batch with an unreadable TABLE_MAP holds back that table alone (binlake.lake.holds): the typed per-table
    error (db, table, file, pos) names it, nothing of it is written and never dropped silently, and the other
    table of the same transaction is ingested."""
    from binlake.lake.holds import TablesHeldBack

    path = tmp_path / "mysql-bin.000001"
    with BinlogWriter(str(path), timestamp=1_700_000_000) as w:
        good = w.define_table(1, "shop", "good", [column("int", "id", 0, False)], [0])
        bad = w.define_table(2, "shop", "bad", [column("int", "id", 0, False), Column(1, 200, name="x")], [0],
                             raw_metadata={1: b"\x01"})
        with w.transaction() as tx:
            tx.insert(good, [[1]])
            tx.insert(bad, [[1, b"\x00"]])
    lake = tmp_path / "lake"
    with pytest.raises(TablesHeldBack) as info:
        run_ingest(IngestOptions(lake=str(lake), files=[str(path)]))
    hold = info.value.held["shop.bad"]
    assert set(info.value.held) == {"shop.bad"} and hold["file"] == path.name
    assert hold["error"].startswith(UnreadableTableMap.__name__)
    layout = LakeLayout(str(lake))
    assert get_engine().read(layout.current_path("shop", "good")).column("id").to_pylist() == [1]
    assert not Path(layout.current_path("shop", "bad")).exists()
    assert not Path(layout.history_path("shop", "bad")).exists()
