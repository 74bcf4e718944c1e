"""MariaDB's 5.3-format high-resolution TIME(n)/DATETIME(n)/TIMESTAMP(n) (a server started with
mysql56_temporal_format=OFF): old type codes without TABLE_MAP metadata, so the precision comes from the schema
(replayed DDL or a snapshot). Every precision 0..6, seeded random values and the range ends, compared with the
server's SELECT on both decoder paths, FULL and MINIMAL metadata. Without a schema the read stops with an error
that says what is needed (the binlog does not carry the precision)."""

from __future__ import annotations

import random

import numpy  # noqa: F401  (whole-column conversions at once: vectorized.numpy_ready; test_numpy_gate.py covers the rest)
import pytest

from binlake.binlog import rows
from binlake.binlog.decoder import BinlogDecoder, DecodeOptions
from binlake.binlog.records import RowChange
from binlake.schema.api import build_resolver, take_snapshot

OLD_FORMAT = ("--mysql56-temporal-format=OFF",)


def _frac(rng: random.Random, fsp: int) -> str:
    return "." + "".join(rng.choice("0123456789") for _ in range(fsp)) if fsp else ""


def _time(rng: random.Random, fsp: int) -> str:
    choice = rng.random()
    if choice < 0.1:
        return "-838:59:59" + ("." + "9" * fsp if fsp else "")
    if choice < 0.2:
        return "838:59:59" + ("." + "9" * fsp if fsp else "")
    if choice < 0.3:
        return "-00:00:00" + ("." + "0" * (fsp - 1) + "1" if fsp else "")
    sign = rng.choice(["", "-"])
    return f"{sign}{rng.randint(0, 837):02d}:{rng.randint(0, 59):02d}:{rng.randint(0, 59):02d}{_frac(rng, fsp)}"


def _datetime(rng: random.Random, fsp: int, lo: int = 1000, hi: int = 9999) -> str:
    choice = rng.random()
    if choice < 0.1 and lo == 1000:
        return "1000-01-01 00:00:00" + ("." + "0" * fsp if fsp else "")
    if choice < 0.2 and hi == 9999:
        return "9999-12-31 23:59:59" + ("." + "9" * fsp if fsp else "")
    return (f"{rng.randint(lo, hi):04d}-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d} "
            f"{rng.randint(0, 23):02d}:{rng.randint(0, 59):02d}:{rng.randint(0, 59):02d}{_frac(rng, fsp)}")


def _timestamp(rng: random.Random, fsp: int) -> str:
    if rng.random() < 0.1:
        return "2038-01-19 03:14:07" + ("." + "9" * fsp if fsp else "")
    if rng.random() < 0.1:
        return "1970-01-01 00:00:01" + ("." + "0" * fsp if fsp else "")
    return _datetime(rng, fsp, 1971, 2037)


KINDS = {"time": _time, "datetime": _datetime, "timestamp": _timestamp}


@pytest.mark.parametrize("metadata", ["FULL", "MINIMAL"])
def test_hires_temporal_53_format_equals_select(mariadb_servers, tmp_path, monkeypatch, metadata: str) -> None:
    server = mariadb_servers.get(metadata, OLD_FORMAT)
    db = f"hires53_{metadata.lower()}"
    rng = random.Random(f"hires-{metadata}")
    with server.connect() as conn, conn.cursor() as cur:
        cur.execute(f"DROP DATABASE IF EXISTS `{db}`")
        cur.execute(f"CREATE DATABASE `{db}`")
        cur.execute("SHOW MASTER STATUS")
        start_file, start = cur.fetchone()[:2]
    cols = [(f"{k}{fsp}", k, fsp) for k in KINDS for fsp in range(7)]
    rng.shuffle(cols)
    defs = ", ".join(f"`{n}` {k.upper()}({fsp}) NULL" for n, k, fsp in cols)
    with server.connect(db) as conn, conn.cursor() as cur:
        cur.execute(f"CREATE TABLE t (id INT PRIMARY KEY, {defs})")
    store = tmp_path / "schemas"
    take_snapshot(server.uri, store, include=[f"{db}.*"])
    with server.connect(db) as conn, conn.cursor() as cur:
        names = ", ".join(f"`{n}`" for n, _, _ in cols)
        marks = ", ".join(["%s"] * (len(cols) + 1))
        for key in range(1, 61):
            values = [None if rng.random() < 0.05 else KINDS[k](rng, fsp) for _, k, fsp in cols]
            cur.execute(f"INSERT INTO t (id, {names}) VALUES ({marks})", [key, *values])
        cur.execute("UPDATE t SET `time3` = '-12:00:00.5', `datetime6` = '2001-01-01 00:00:00.000001' WHERE id % 4 = 0")
        cur.execute("DELETE FROM t WHERE id % 9 = 0")
        cur.execute(f"SELECT id, {', '.join(f'CAST(`{n}` AS CHAR)' for n, _, _ in cols)} FROM t")
        expected = {row[0]: list(row) for row in cur.fetchall()}
    files = server.flush_logs()
    files = files[[f.name for f in files].index(start_file):]

    for store_arg in (None, store):
        resolver = build_resolver(files, store_arg)
        for columnar in (True, False):
            monkeypatch.setattr(rows, "COLUMNAR", columnar)
            opts = DecodeOptions(start_position=start, databases={db}, table_resolver=resolver)
            state: dict[int, list] = {}
            for c in BinlogDecoder(opts).decode_files(files):
                if not isinstance(c, RowChange):
                    continue
                if c.before is not None:
                    assert list(c.before) == state.pop(c.before[0])
                if c.after is not None:
                    state[c.after[0]] = list(c.after)
            assert state.keys() == expected.keys()
            for key, row in expected.items():
                diffs = {cols[i - 1][0]: (state[key][i], row[i]) for i in range(1, len(row)) if state[key][i] != row[i]}
                assert not diffs, f"schemas={store_arg} columnar={columnar} id={key}: (decoded, server) {diffs}"

    # Without a schema the precision is unknown: that table's rows events are held back, each with an error that
    # says what to pass; no wrong value comes out (every row here has a non-NULL fractional column).
    decoder = BinlogDecoder(DecodeOptions(start_position=start, databases={db}))
    assert not [c for c in decoder.decode_files(files) if isinstance(c, RowChange)]
    assert len(decoder.table_errors) == 60 + 2  # one INSERT per row, one UPDATE, one DELETE statement
    assert all(e.table == "t" and "--binlog-ddl" in e.reason for e in decoder.table_errors)
