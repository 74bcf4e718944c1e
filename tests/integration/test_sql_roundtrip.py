"""Forward and rollback SQL are exact on a real MariaDB, for hostile identifiers and values, with and without keys.

A seeded random workload (duplicate rows in keyless tables; values that MariaDB's collations call equal: case-only
differences, trailing spaces, different emoji, latin1 letters with and without accents) runs on the private
server; a snapshot (every column through HEX()) is taken after each transaction. Then, through the real `mariadb`
client:
- forward: the tables emptied, the forward SQL of the whole workload applied -> the server's final state;
- rollback from position P: the final state restored, the rollback SQL of everything after P applied -> the
  snapshot taken at P (every transaction boundary in one run; the first, the last and random ones in the others).
The binlog is read under a file name holding a newline and a statement: it must stay inside its comment.
"""

from __future__ import annotations

import random
import shutil
import subprocess
from collections import Counter
from pathlib import Path

import pytest

from binlake.cli import main

SEEDS = (14, 1414)
DB = "bl `db' \"x\" é"
CANARY = "bl_canary"
KEEP = "bl_keep"
HOSTILE_FILE = "x\nDROP DATABASE bl_canary; -- "  # + the binlog's sequence suffix

# Hostile identifiers: backtick, quote, double quote, space, non-ASCII.
KEYED = "t`key 'k' ü"
NOKEY = "no \"key\" `t` \\"
LATIN = "lat'in`1 é"
CIKEY = "ci key`"

COLS = {
    KEYED: [("id", "INT NOT NULL PRIMARY KEY", "int"), ("c`s", "VARCHAR(20) COLLATE utf8mb4_general_ci", "text"),
            ("c'b", "VARBINARY(300)", "bytes"), ("c 3", "CHAR(8) CHARACTER SET latin1", "latin"),
            ("f", "FLOAT", "float"), ("d", "DOUBLE", "double"), ("dt", "DATETIME(3)", "dt"),
            ("e", "ENUM('a','B','ç','1')", "enum"), ("s", "SET('x','Y','z')", "set"), ("j", "JSON", "json"),
            ("bt", "BIT(5)", "bit"), ("dec", "DECIMAL(10,3)", "dec"), ("tm", "TIME(2)", "time"),
            ("ts", "TIMESTAMP(6) NULL", "ts6"), ("y", "YEAR", "year"), ("dd", "DATE", "date")],
    NOKEY: [("c`s", "VARCHAR(20) COLLATE utf8mb4_general_ci", "text"), ("c 2", "CHAR(6) COLLATE utf8mb4_unicode_ci",
                                                                     "text6"),
            ("f", "FLOAT", "float"), ("d", "DOUBLE", "double"), ("e", "ENUM('a','B','ç','1')", "enum"),
            ("s", "SET('x','Y','z')", "set"), ("j", "JSON", "json"), ("dt", "DATETIME(3)", "dt"),
            ("bt", "BIT(5)", "bit"), ("n", "INT", "small"), ("u", "BIGINT UNSIGNED", "u64"),
            ("ti", "TINYINT", "i8"), ("dec", "DECIMAL(10,3)", "dec")],
    LATIN: [("l", "VARCHAR(12) CHARACTER SET latin1 COLLATE latin1_swedish_ci", "latin"), ("b", "BLOB", "bytes"),
            ("t", "TEXT COLLATE utf8mb4_unicode_ci", "text"), ("bn", "BINARY(4)", "bytes4"),
            ("w\\\n# x; --x", "VARCHAR(8) CHARACTER SET utf16 COLLATE utf16_general_ci", "text")],
    CIKEY: [("k", "VARCHAR(12) COLLATE utf8mb4_general_ci NOT NULL PRIMARY KEY", "text"), ("v", "INT", "small")],
}

TEXTS = ["ABC", "abc", "Abc", "x", "x ", "x  ", "😀", "😁", "🙂", "a'b", "a\\b", "\\", "'", '"', "a\x00b",
         "\x01\x02\x1f\x7f", "tab\there", "new\nline", "cr\r", "\x1a", "é", "e", "E", "É", "ß", "ss", "", "% _",
         "-- x", "/* c */", "; DROP TABLE t;", "`", "\u2028", "Ǆ", "ǆ"]


def q(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


def value(rng: random.Random, kind: str):
    if rng.random() < 0.08 and kind not in ("int",):
        return None
    if kind == "text":
        return rng.choice(TEXTS)[:12]
    if kind == "text6":
        return rng.choice(TEXTS)[:6]
    if kind == "latin":
        return bytes(rng.choice([rng.randrange(256), 0x45, 0x65, 0xC9, 0xE9, 0x20]) for _ in range(rng.randrange(0, 8)))
    if kind == "bytes":
        return rng.choice([bytes(range(256)), b"", b"\x00", b"\x00\x00", b"a ", b"a", b"A",
                           bytes(rng.randrange(256) for _ in range(rng.randrange(1, 40)))])
    if kind == "bytes4":
        return rng.choice([b"a", b"a\x00", b"\x00", b"A", b"\xff\xff\xff\xff", b"ab  "])
    if kind == "float":
        return rng.choice([1.1, 0.1, -2.5, 3.4e38, 1e-40, 16777217.0, rng.uniform(-1e6, 1e6), rng.random()])
    if kind == "double":
        return rng.choice([0.1 + 0.2, 0.3, 1e308, 5e-324, -0.0, rng.uniform(-1e12, 1e12), 2.0 ** 60 + 1])
    if kind == "dt":
        return f"20{rng.randrange(10, 40)}-0{rng.randrange(1, 10)}-1{rng.randrange(0, 10)} " \
               f"1{rng.randrange(0, 10)}:0{rng.randrange(0, 10)}:{rng.randrange(10, 60)}.{rng.randrange(1000):03d}"
    if kind == "ts6":
        return rng.choice(["2024-03-10 02:30:00.123456", "1970-01-01 00:00:01.000000", "2038-01-19 03:14:07.999999",
                           "2021-11-07 01:30:00.000001"])
    if kind == "year":
        return rng.choice([0, 1901, 2000, 2155, 1999])
    if kind == "date":
        return rng.choice(["0000-00-00", "2020-02-29", "1000-01-01", "9999-12-31", "2024-00-00"])
    if kind == "u64":
        return rng.choice([0, 2**64 - 1, 2**63, 1])
    if kind == "i8":
        return rng.choice([-128, 127, 0, -1])
    if kind == "time":
        return rng.choice(["-838:59:59.00", "00:00:00.01", "12:34:56.78", "-00:00:01.50"])
    if kind == "enum":
        return rng.choice(["a", "B", "ç", "1", "A", "b"])
    if kind == "set":
        return rng.choice(["", "x", "Y,z", "x,Y,z", "X", "y"])
    if kind == "json":
        return rng.choice(['{"a": 1}', '{"a":1}', '[1, 2.50]', '"x\\"y"', '{"é": "😀"}', "null"])
    if kind == "bit":
        return rng.randrange(32)
    if kind == "dec":
        return f"{rng.randrange(-9999999, 9999999)}.{rng.randrange(1000):03d}"
    if kind == "small":
        return rng.randrange(3)
    if kind == "int":
        return rng.randrange(1, 10**6)
    raise AssertionError(kind)


def snapshot_exprs(table: str) -> str:
    out = []
    for name, _sql, kind in COLS[table]:
        c = q(name)
        if kind in ("float", "double"):
            out.append(f"HEX(CONCAT(CAST({c} AS DOUBLE)))")
        elif kind in ("dt", "dec", "time", "ts6", "year", "date"):
            out.append(f"HEX(CAST({c} AS CHAR))")
        elif kind == "bit":
            out.append(f"HEX({c}+0)")
        else:
            out.append(f"HEX({c})")
    return ", ".join(out)


def snapshot(cur) -> dict[str, Counter]:
    state = {}
    for table in COLS:
        cur.execute(f"SELECT {snapshot_exprs(table)} FROM {q(DB)}.{q(table)}")
        state[table] = Counter(cur.fetchall())
    return state


def position(cur) -> int:
    cur.execute("SHOW MASTER STATUS")
    return cur.fetchone()[1]


def run_workload(server, seed: int, created=lambda: None) -> tuple[Path, list[tuple[int, dict]]]:
    """Create the tables (then call `created`), run the workload; the binlog file and (position, state) after
    every transaction."""
    rng = random.Random(seed)
    with server.connect() as conn, conn.cursor() as cur:
        cur.execute("SET SESSION sql_mode = 'NO_ENGINE_SUBSTITUTION'")  # zero dates are part of the test
        for db in (DB, KEEP, CANARY):
            cur.execute(f"DROP DATABASE IF EXISTS {q(db)}")
        cur.execute(f"CREATE DATABASE {q(DB)} CHARACTER SET utf8mb4")
        cur.execute(f"CREATE DATABASE {q(CANARY)}")
        for table, cols in COLS.items():
            cur.execute(f"CREATE TABLE {q(DB)}.{q(table)} ({', '.join(f'{q(n)} {t}' for n, t, _ in cols)})")
        cur.execute("FLUSH BINARY LOGS")
        cur.execute("SHOW MASTER STATUS")
        file = cur.fetchone()[0]
        created()
        points = [(position(cur), snapshot(cur))]
        # every byte value as latin1 text (12 a row) and as a blob, every code point up to U+00FF as utf8mb4 text
        t = f"{q(DB)}.{q(LATIN)}"
        for k in range(0, 256, 12):
            cur.execute(f"INSERT INTO {t} VALUES (%s, %s, %s, %s, %s)",
                        [bytes(range(k, min(k + 12, 256))), bytes(range(256)), "".join(map(chr, range(256))),
                         bytes([k, 255 - k]), "".join(map(chr, range(k, k + 8)))])
        points.append((position(cur), snapshot(cur)))
        next_id = 1
        for _ in range(70):
            cur.execute("BEGIN")
            for _ in range(rng.randrange(1, 4)):
                table = rng.choice(list(COLS))
                cols = COLS[table]
                t = f"{q(DB)}.{q(table)}"
                action = rng.random()
                if action < 0.45 or (table == CIKEY and action < 0.6):
                    vals = []
                    for _name, _sql, kind in cols:
                        if kind == "int":
                            vals.append(next_id)
                            next_id += 1
                        else:
                            vals.append(value(rng, kind))
                    if table == CIKEY:
                        vals[0] = vals[0] or "k"
                    ignore = "IGNORE " if table == CIKEY else ""
                    cur.execute(f"INSERT {ignore}INTO {t} VALUES ({', '.join(['%s'] * len(vals))})", vals)
                elif action < 0.6 and table not in (KEYED, CIKEY):
                    cur.execute(f"INSERT INTO {t} SELECT * FROM {t} ORDER BY RAND({rng.randrange(99)}) LIMIT 2")
                elif action < 0.8:
                    name, _sql, kind = rng.choice([c for c in cols if c[2] != "int"])
                    target, tkind = rng.choice(cols)[0], None
                    tkind = next(k for n, _s, k in cols if n == target)
                    new = value(rng, tkind) if tkind != "int" else None
                    if tkind == "int" or (table == CIKEY and target == "k"):
                        if table == CIKEY:  # a key change by case only, or to another key
                            cur.execute(f"UPDATE IGNORE {t} SET {q('k')} = IF(RAND({rng.randrange(99)}) < 0.5, "
                                        f"UPPER({q('k')}), LOWER({q('k')})) WHERE {q(name)} = %s LIMIT 1",
                                        [value(rng, kind)])
                        continue
                    limit = rng.choice(["LIMIT 1", "LIMIT 2", ""])
                    cur.execute(f"UPDATE {t} SET {q(target)} = %s WHERE {q(name)} = %s {limit}",
                                [new, value(rng, kind)])
                else:
                    name, _sql, kind = rng.choice([c for c in cols if c[2] != "int"])
                    limit = rng.choice(["LIMIT 1", "LIMIT 1", ""])
                    cur.execute(f"DELETE FROM {t} WHERE {q(name)} = %s {limit}", [value(rng, kind)])
            cur.execute("COMMIT")
            points.append((position(cur), snapshot(cur)))
        cur.execute("FLUSH BINARY LOGS")
    return server.binlog_dir / file, points


def apply_sql(server, sql_file: Path) -> None:
    """Through the real client, as an operator would; binlog writes of the replay itself off."""
    with sql_file.open("rb") as f:
        done = subprocess.run(["mariadb", "--no-defaults", "-h127.0.0.1", f"-P{server.port}", "-uroot",
                               "--default-character-set=utf8mb4", "--init-command=SET sql_log_bin=0"],
                              stdin=f, capture_output=True)
    assert done.returncode == 0, done.stderr.decode(errors="replace")[-3000:]


def set_state(server, source_db: str | None) -> None:
    """Empty every table, then copy the rows of `source_db` (same table names) in, without binlogging."""
    with server.connect() as conn, conn.cursor() as cur:
        cur.execute("SET sql_log_bin=0")
        for table in COLS:
            cur.execute(f"DELETE FROM {q(DB)}.{q(table)}")
            if source_db:
                cur.execute(f"INSERT INTO {q(DB)}.{q(table)} SELECT * FROM {q(source_db)}.{q(table)}")


def state_now(server) -> dict[str, Counter]:
    with server.connect() as conn, conn.cursor() as cur:
        return snapshot(cur)


@pytest.mark.parametrize(("seed", "metadata"), [(SEEDS[0], "FULL"), (SEEDS[1], "FULL"), (SEEDS[0], "MINIMAL")])
def test_forward_and_rollback_are_exact(mariadb_servers, tmp_path: Path, capsys, seed: int, metadata: str) -> None:
    """FULL: names, keys, labels and charsets from the binlog; MINIMAL: from a schema snapshot (--schemas)."""
    server = mariadb_servers.get(metadata)
    store = tmp_path / "schemas"
    schemas = ["--schemas", str(store)] if metadata == "MINIMAL" else []

    def snapshot_schemas() -> None:  # before the workload: the schema valid at its first position
        if schemas:
            assert main(["schema", "snapshot", "--mysql", server.uri, "--out", str(store), "--include",
                         f"{DB}.*"]) == 0

    binlog, points = run_workload(server, seed, snapshot_schemas)
    final = points[-1][1]
    assert sum(sum(c.values()) for c in final.values()) > 20
    assert any(n > 1 for n in final[NOKEY].values()), "the workload must leave duplicate rows in a keyless table"
    with server.connect() as conn, conn.cursor() as cur:
        cur.execute("SET sql_log_bin=0")
        cur.execute(f"CREATE DATABASE {q(KEEP)}")
        for table in COLS:
            cur.execute(f"CREATE TABLE {q(KEEP)}.{q(table)} LIKE {q(DB)}.{q(table)}")
            cur.execute(f"INSERT INTO {q(KEEP)}.{q(table)} SELECT * FROM {q(DB)}.{q(table)}")
    hostile = tmp_path / (HOSTILE_FILE + binlog.suffix)  # the same sequence number: snapshots still apply
    shutil.copy(binlog, hostile)

    # forward: from the empty tables to the final state
    set_state(server, None)
    assert state_now(server) == points[0][1]
    forward = tmp_path / "forward.sql"
    assert main(["decode", "--format", "sql", "--no-progress", "--databases", DB, "-o", str(forward), *schemas,
                 str(hostile)]) == 0
    text = forward.read_text()
    assert "\nDROP DATABASE" not in text and f"# x%0ADROP DATABASE bl_canary; -- {binlog.suffix}:" in text
    apply_sql(server, forward)
    assert state_now(server) == final
    with server.connect() as conn, conn.cursor() as cur:
        cur.execute("SHOW DATABASES LIKE %s", [CANARY])
        assert cur.fetchall(), "the file name's statement ran"

    # rollback from positions: the first, the last, and random ones in between
    rng = random.Random(seed)
    every = seed == SEEDS[0] and metadata == "FULL"  # one run rolls back from every transaction boundary
    chosen = range(len(points)) if every else sorted({0, len(points) - 1, *rng.sample(range(1, len(points) - 1), 6)})
    for i in chosen:
        pos, expected = points[i]
        set_state(server, KEEP)
        rollback = tmp_path / f"rollback-{pos}.sql"
        assert main(["decode", "--format", "rollback", "--no-progress", "--databases", DB, "--start-position",
                     str(pos), "-o", str(rollback), *schemas, str(hostile)]) == 0
        apply_sql(server, rollback)
        got = state_now(server)
        for table in COLS:
            assert got[table] == expected[table], (f"rollback from transaction {i} (position {pos}): {table} "
                                                   f"differs: extra {got[table] - expected[table]}, missing "
                                                   f"{expected[table] - got[table]}")
    capsys.readouterr()
