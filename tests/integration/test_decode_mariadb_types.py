"""MariaDB's own column types against the server's SELECT: INET4, INET6 and UUID (stored as BINARY(n): only the
schema, replayed DDL or a snapshot, tells what they are) decode to the text the server prints; `COMPRESSED`
columns (VARCHAR/VARBINARY/TEXT/BLOB) decode to what they hold; a GEOMETRY column takes an entry of MariaDB's
charset metadata, so the text columns after it keep their character sets. Seeded random values and column orders,
FULL, MINIMAL and NO_LOG metadata, both decoder paths; `binlake decode --binlog-ddl` prints the same text."""

from __future__ import annotations

import io
import ipaddress
import json
import random
import shutil
import subprocess
import uuid
from pathlib import Path

import pytest

from binlake.binlog import rows
from binlake.binlog.api import decode_to
from binlake.binlog.decoder import BinlogDecoder, DecodeOptions
from binlake.binlog.records import RowChange
from binlake.cli import main
from binlake.lake.convert import ConversionStats, arrow_type, to_arrow
from binlake.schema.api import build_resolver, take_snapshot

# name -> (DDL type, kind)
COLUMNS = {
    "i4": ("INET4", "inet4"),
    "i6": ("INET6", "inet6"),
    "u": ("UUID", "uuid"),
    "vc": ("VARCHAR(300) COMPRESSED", "text"),
    "tc": ("TEXT COMPRESSED", "text"),
    "vb": ("VARBINARY(200) COMPRESSED", "bytes"),
    "bc": ("BLOB COMPRESSED", "bytes"),
    "lt": ("LONGTEXT CHARACTER SET latin1 COMPRESSED", "latin1"),
    "g": ("GEOMETRY", "geometry"),
    "tx": ("TEXT", "text"),
    "ch": ("CHAR(5) CHARACTER SET latin1", "latin1"),
}


def _inet6(rng: random.Random) -> str:
    special = ["::", "::1", "1::", "::ffff:1.2.3.4", "::1.2.3.4", "::ffff:0.0.0.1", "1:0:0:2:0:0:0:3",
               "0:0:1:0:0:0:0:0", "1:0:2:0:3:0:4:0", "fe80::1:0:0:5", "ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff",
               "0:0:0:0:0:1:0:0", "2001:db8::ff00:42:8329", "::ffff:ffff:ffff"]
    if rng.random() < 0.4:
        return rng.choice(special)
    words = [rng.choice([0, 0, rng.randrange(1, 0x10000), rng.randrange(0, 16)]) for _ in range(8)]
    return str(ipaddress.IPv6Address(b"".join(w.to_bytes(2, "big") for w in words)).exploded)


def _value(rng: random.Random, kind: str, name: str):
    if kind == "inet4":
        return rng.choice(["0.0.0.0", "255.255.255.255", "10.0.0.0", "1.2.0.0",
                           str(ipaddress.IPv4Address(rng.getrandbits(32)))])
    if kind == "inet6":
        return _inet6(rng)
    if kind == "uuid":
        # MariaDB refuses version/variant combinations outside RFC 4122 (random 128 bits): v1, v4, v7-like, nil.
        v7 = uuid.UUID(int=rng.getrandbits(128), version=4).int & ~(0xF << 76) | (7 << 76)
        return rng.choice([str(uuid.uuid1(node=rng.getrandbits(48), clock_seq=rng.getrandbits(14))),
                           "00000000-0000-0000-0000-000000000000", str(uuid.UUID(int=v7)),
                           str(uuid.UUID(int=rng.getrandbits(128), version=4))])
    if kind == "geometry":
        return None  # written with POINT() below
    limit = 60 if name == "vb" else (300 if name == "vc" else 5 if name == "ch" else 3000)
    alphabet = "ab" if rng.random() < 0.5 else "abcdefghijklmnopqrstuvwxyzé€ü😀"
    if kind in ("latin1", "bytes"):
        alphabet = "abü" if rng.random() < 0.5 else "abcdefghijklmnopqrstuvwxyzéü"
    text = "".join(rng.choice(alphabet) for _ in range(min(limit, rng.choice([0, 1, 20, limit]))))
    if kind == "bytes":
        return text.encode("latin1") if rng.random() < 0.5 else rng.randbytes(rng.choice([0, 5, min(limit, 150)]))
    return text


def _select_expr(name: str, kind: str) -> str:
    if kind in ("inet4", "inet6", "uuid"):
        return f"CAST(`{name}` AS CHAR)"
    return f"`{name}`"


def _comparable(value, kind: str):
    if kind in ("bytes", "geometry") and value is not None:
        return bytes(value)
    return value


@pytest.fixture(scope="module")
def workload(mariadb_servers, tmp_path_factory):
    runs = {}
    for metadata in ("FULL", "MINIMAL", "NO_LOG"):
        server = mariadb_servers.get(metadata)
        db = f"mtypes_{metadata.lower()}"
        rng = random.Random(f"mariadb-types-{metadata}")
        with server.connect() as conn, conn.cursor() as cur:
            cur.execute("FLUSH BINARY LOGS")  # the files hold this workload only (the servers are shared)
            cur.execute(f"DROP DATABASE IF EXISTS `{db}`")
            cur.execute(f"CREATE DATABASE `{db}`")
            cur.execute("SHOW MASTER STATUS")
            start_file, start_pos = cur.fetchone()[:2]
        layouts = {}
        with server.connect(db) as conn, conn.cursor() as cur:
            for t in range(3):
                names = list(COLUMNS)
                rng.shuffle(names)
                layouts[f"t{t}"] = ["id", *names]
                defs = ", ".join(f"`{n}` {COLUMNS[n][0]} NULL" for n in names)
                key = "PRIMARY KEY" if t else "NOT NULL"  # t0 has no key: SQL finds its rows by every column
                cur.execute(f"CREATE TABLE `t{t}` (`id` INT {key}, {defs})")
        store = tmp_path_factory.mktemp(f"schemas_{metadata.lower()}")
        take_snapshot(server.uri, store, include=[f"{db}.*"])
        with server.connect(db) as conn, conn.cursor() as cur:
            for table, layout in layouts.items():
                names = layout[1:]
                for key in range(1, 41):
                    values = [None if rng.random() < 0.1 else _value(rng, COLUMNS[n][1], n) for n in names]
                    exprs = ["POINT(%s, %s)" if n == "g" else "%s" for n in names]
                    params = []
                    for n, v in zip(names, values, strict=True):
                        params += [rng.random(), rng.random()] if n == "g" else [v]
                    cur.execute(f"INSERT INTO `{table}` (`id`, {', '.join(f'`{n}`' for n in names)}) "
                                f"VALUES (%s, {', '.join(exprs)})", [key, *params])
                cur.execute(f"UPDATE `{table}` SET `i6` = '::ffff:9.8.7.6', `tc` = REPEAT('xyz', 400) WHERE id % 3 = 0")
                cur.execute(f"DELETE FROM `{table}` WHERE id % 7 = 0")
        files = server.flush_logs()
        files = files[[f.name for f in files].index(start_file):]
        runs[metadata] = (server, db, files, start_pos, layouts, store)
    return runs


def _decode(files: list[Path], start: int, db: str, resolver) -> list[RowChange]:
    opts = DecodeOptions(start_position=start, databases={db}, table_resolver=resolver)
    return [r for r in BinlogDecoder(opts).decode_files(files) if isinstance(r, RowChange)]


def _state(changes: list[RowChange], table: str) -> dict[int, list]:
    state: dict[int, list] = {}
    for c in changes:
        if c.table.table != table:
            continue
        if c.before is not None:
            assert list(c.before) == state.pop(c.before[0])
        if c.after is not None:
            state[c.after[0]] = list(c.after)
    return state


def _server_rows(server, db: str, table: str, layout: list[str]) -> dict[int, list]:
    exprs = ", ".join(["`id`", *(_select_expr(n, COLUMNS[n][1]) for n in layout[1:])])
    with server.connect(db) as conn, conn.cursor() as cur:
        cur.execute(f"SELECT {exprs} FROM `{table}`")
        return {row[0]: list(row) for row in cur.fetchall()}


@pytest.mark.parametrize("metadata", ["FULL", "MINIMAL", "NO_LOG"])
@pytest.mark.parametrize("schema", ["binlog-ddl", "snapshot"])
@pytest.mark.parametrize("columnar", [True, False])
def test_mariadb_types_equal_select(workload, monkeypatch, metadata: str, schema: str, columnar: bool) -> None:
    monkeypatch.setattr(rows, "COLUMNAR", columnar)
    server, db, files, start, layouts, store = workload[metadata]
    resolver = build_resolver(files, store if schema == "snapshot" else None)
    changes = _decode(files, start, db, resolver)
    assert not resolver.timeline.unparsed
    for table, layout in layouts.items():
        kinds = ["int", *(COLUMNS[n][1] for n in layout[1:])]
        decoded = _state(changes, table)
        expected = _server_rows(server, db, table, layout)
        assert decoded.keys() == expected.keys()
        for key, row in expected.items():
            ours = [_comparable(v, k) for v, k in zip(decoded[key], kinds, strict=True)]
            theirs = [_comparable(v, k) for v, k in zip(row, kinds, strict=True)]
            diffs = {layout[i]: (ours[i], theirs[i]) for i in range(len(row)) if ours[i] != theirs[i]}
            assert not diffs, f"{table} id={key}: (decoded, server) differ: {diffs}"
        tm = next(c.table for c in changes if c.table.table == table)
        where = f"{db}.{table}"
        kinds_all = ["int", *(COLUMNS[n][1] for n in layout[1:])]
        for i, kind in enumerate(kinds_all):
            col = tm.columns[i]
            values = [r[i] for r in decoded.values()]
            arr = to_arrow(values, col, where, ConversionStats())
            if kind in ("inet4", "inet6", "uuid", "text", "latin1"):
                assert str(arrow_type(col)) == "string" and arr.to_pylist() == values


@pytest.mark.parametrize("metadata", ["FULL", "MINIMAL"])
def test_compressed_and_text_after_geometry_need_no_schema(workload, metadata: str) -> None:
    """With FULL or MINIMAL metadata the charsets are in the TABLE_MAP: COMPRESSED and text columns decode exactly
    without any schema (INET4/INET6/UUID then stay bytes: nothing in the binlog says what they are)."""
    server, db, files, start, layouts, _ = workload[metadata]
    changes = _decode(files, start, db, None)
    for table, layout in layouts.items():
        decoded = _state(changes, table)
        expected = _server_rows(server, db, table, layout)
        for key, row in expected.items():
            for i, name in enumerate(layout[1:], start=1):
                kind = COLUMNS[name][1]
                if kind in ("text", "latin1", "bytes", "geometry"):
                    assert _comparable(decoded[key][i], kind) == _comparable(row[i], kind), (table, key, name)
                elif kind in ("inet6", "uuid") and row[i] is not None:
                    assert isinstance(decoded[key][i], bytes) and len(decoded[key][i]) == 16


def test_cli_decode_renders_the_types_as_text(workload, capsys) -> None:
    server, db, files, start, layouts, _ = workload["MINIMAL"]
    code = main(["decode", "--no-progress", "--binlog-ddl", "--start-position", str(start), "--databases", db,
                 *map(str, files)])
    out = capsys.readouterr().out
    assert code == 0
    docs = [json.loads(line) for line in out.splitlines()]
    table, layout = next(iter(layouts.items()))
    final = {}
    for d in docs:
        if d["table"] != table:
            continue
        if d["before"] is not None:
            final.pop(d["before"]["id"])
        if d["after"] is not None:
            final[d["after"]["id"]] = d["after"]
    expected = _server_rows(server, db, table, layout)
    assert final.keys() == expected.keys()
    for key, row in expected.items():
        for i, name in enumerate(layout):
            if COLUMNS.get(name, ("", ""))[1] in ("inet4", "inet6", "uuid", "text", "latin1"):
                assert final[key][name] == row[i]


def _apply_sql(server, sql: str) -> None:
    """Through the real client, as an operator would; binlog writes of the replay itself off."""
    done = subprocess.run(["mariadb", "--no-defaults", "-h127.0.0.1", f"-P{server.port}", "-uroot",
                           "--default-character-set=utf8mb4", "--init-command=SET sql_log_bin=0"],
                          input=sql.encode(), capture_output=True)
    assert done.returncode == 0, done.stderr.decode(errors="replace")[-3000:]


def _hex_rows(server, db: str, table: str, layout: list[str]) -> list[tuple]:
    exprs = ", ".join(f"HEX(`{n}`)" for n in layout)
    with server.connect(db) as conn, conn.cursor() as cur:
        cur.execute(f"SELECT {exprs} FROM `{table}` ORDER BY id")
        return list(cur.fetchall())


@pytest.mark.skipif(shutil.which("mariadb") is None, reason="the mariadb client is not installed")
def test_forward_and_rollback_sql_of_the_types(workload, mariadb_servers) -> None:
    """Forward SQL rebuilds the tables byte for byte on another server; rollback SQL of the whole range then
    finds every row again (INET6/UUID compared as text, COMPRESSED and GEOMETRY as bytes) and empties them."""
    server, db, files, start, layouts, _ = workload["FULL"]
    replica = mariadb_servers.get("MINIMAL")
    with replica.connect() as conn, conn.cursor() as cur:
        cur.execute(f"DROP DATABASE IF EXISTS `{db}`")
        cur.execute(f"CREATE DATABASE `{db}`")
    for table in layouts:
        with server.connect(db) as conn, conn.cursor() as cur:
            cur.execute(f"SHOW CREATE TABLE `{table}`")
            ddl = cur.fetchone()[1]
        with replica.connect(db) as conn, conn.cursor() as cur:
            cur.execute(ddl)
    opts = DecodeOptions(start_position=start, databases={db}, table_resolver=build_resolver(files))
    forward = io.StringIO()
    decode_to(files, forward, "sql", opts)
    _apply_sql(replica, forward.getvalue())
    for table, layout in layouts.items():
        assert _hex_rows(replica, db, table, layout) == _hex_rows(server, db, table, layout)
    rollback = io.StringIO()
    opts = DecodeOptions(start_position=start, databases={db}, table_resolver=build_resolver(files))
    decode_to(files, rollback, "rollback", opts)
    _apply_sql(replica, rollback.getvalue())
    for table, layout in layouts.items():
        assert _hex_rows(replica, db, table, layout) == []
