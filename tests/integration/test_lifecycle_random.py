"""Seeded workloads of the whole table lifecycle (issue 13) on a private MariaDB, FULL and MINIMAL row metadata:
RENAME (plain, ALTER ... RENAME, swaps, moves across databases), TRUNCATE, DROP TABLE, DROP DATABASE, DROP and
CREATE again with another layout, gh-ost and pt-online-schema-change migrations (one- and two-statement swaps),
interleaved with DML, with FLUSH BINARY LOGS at random points (inside migrations and between the two statements
of a swap too).

The binlog is ingested in one batch and, into another lake, batch by batch at every split point. After every
batch each table the server has (helpers aside) equals `SELECT *` at that point, and the lake lists nothing else
(dropped, renamed-away and helper tables are gone from it); at the end the history row counts per table and op
equal mariadb-binlog's count of the row events (and TRUNCATE rows the workload's TRUNCATE statements). No ingest
raises."""

from __future__ import annotations

import random
import re
import subprocess
from collections import Counter
from pathlib import Path

import pytest

from binlake.lake.engines import get_engine
from binlake.lake.ingest import IngestOptions
from binlake.lake.query import lake_tables
from binlake.quality.stages import run_ingest

from .test_lifecycle import _norm

HELPER = re.compile(r"^_.+_(gho|ghc|del|new|old)$")
KINDS = {
    "k1": "(id INT PRIMARY KEY, v INT, s VARCHAR(20))",
    "k2": "(id BIGINT PRIMARY KEY, y DATETIME(6), n DECIMAL(10,2), s VARCHAR(20))",
}


class Workload:
    def __init__(self, server, dbs: list[str], seed: int) -> None:
        self.server, self.dbs, self.rng = server, dbs, random.Random(seed)
        self.conn = server.connect()
        self.cur = self.conn.cursor()
        self.n = 0
        self.truncates: Counter = Counter()
        self.checkpoints: list[tuple[str, dict]] = []  # (last closed binlog file, server tables then)
        self.log: list[str] = []

    # -- plumbing -----------------------------------------------------------------------------------------
    def sql(self, text: str, *args) -> None:
        self.log.append(text)
        self.cur.execute(text, args or None)

    def fresh_name(self, prefix: str = "r") -> str:
        self.n += 1
        return f"{prefix}{self.n}"

    def tables(self, db: str | None = None, helpers: bool = False) -> list[str]:
        self.cur.execute("SELECT table_schema, table_name FROM information_schema.tables WHERE table_schema IN "
                         f"({', '.join(['%s'] * len(self.dbs))}) ORDER BY 1, 2", self.dbs)
        return [f"{d}.{t}" for d, t in self.cur.fetchall()
                if (db is None or d == db) and (helpers or not HELPER.match(t))]

    def columns(self, table: str) -> list[tuple[str, str]]:
        db, name = table.split(".")
        self.cur.execute("SELECT column_name, data_type FROM information_schema.columns WHERE table_schema = %s AND "
                         "table_name = %s ORDER BY ordinal_position", (db, name))
        return list(self.cur.fetchall())

    def value(self, data_type: str) -> str:
        r = self.rng
        if data_type in ("int", "bigint"):
            return str(r.randint(-500, 500))
        if data_type == "datetime":
            return f"'2024-{r.randint(1, 12):02d}-{r.randint(1, 28):02d} {r.randint(0, 23):02d}:{r.randint(0, 59):02d}:" \
                   f"{r.randint(0, 59):02d}.{r.randint(0, 999999):06d}'"
        if data_type == "decimal":
            return f"{r.randint(-9999, 9999)}.{r.randint(0, 99):02d}"
        return f"'s{r.randint(0, 999)}'"

    def checkpoint(self, p: float = 1.0) -> None:
        """FLUSH BINARY LOGS (a split point) with probability p, recording the server's tables there."""
        if self.rng.random() < p:
            closed = self.server.flush_logs()
            self.checkpoints.append((closed[-1].name, server_state(self.server, self.dbs)))

    # -- DML ----------------------------------------------------------------------------------------------
    def dml(self, table: str, n: int = 1) -> None:
        cols = self.columns(table)
        for _ in range(n):
            roll = self.rng.random()
            k = self.rng.randint(1, 18)
            if roll < 0.5:
                names = ", ".join(c for c, _ in cols)
                values = ", ".join([str(k), *(self.value(t) for _, t in cols[1:])])
                self.sql(f"REPLACE INTO {table} ({names}) VALUES ({values})")
            elif roll < 0.8 and len(cols) > 1:
                col, typ = self.rng.choice(cols[1:])
                where = f"id = {k}" if self.rng.random() < 0.7 else f"id % 3 = {k % 3}"
                self.sql(f"UPDATE {table} SET {col} = {self.value(typ)} WHERE {where}")
            else:
                self.sql(f"DELETE FROM {table} WHERE id = {k}")

    def some_dml(self, n: int) -> None:
        tables = self.tables()
        for _ in range(n):
            if tables:
                self.dml(self.rng.choice(tables))

    # -- lifecycle ----------------------------------------------------------------------------------------
    def create(self, db: str, name: str | None = None, kind: str | None = None) -> str:
        table = f"{db}.{name or self.fresh_name('t')}"
        self.sql(f"CREATE TABLE {table} {KINDS[kind or self.rng.choice(list(KINDS))]}")
        self.dml(table, 6)
        return table

    def op_rename(self) -> None:
        t = self.rng.choice(self.tables())
        db = t.split(".")[0]
        if self.rng.random() < 0.5:
            self.sql(f"RENAME TABLE {t} TO {db}.{self.fresh_name()}")
        else:
            self.sql(f"ALTER TABLE {t} RENAME TO {db}.{self.fresh_name()}")

    def op_swap(self) -> None:
        for db in self.rng.sample(self.dbs, len(self.dbs)):
            tables = self.tables(db)
            if len(tables) >= 2:
                x, y = self.rng.sample(tables, 2)
                tmp = f"{db}.{self.fresh_name('tmp')}"
                self.sql(f"RENAME TABLE {x} TO {tmp}, {y} TO {x}, {tmp} TO {y}")
                return

    def op_move(self) -> None:
        t = self.rng.choice(self.tables())
        db, name = t.split(".")
        other = next(d for d in self.dbs if d != db)
        target = f"{other}.{name}" if f"{other}.{name}" not in self.tables() else f"{other}.{self.fresh_name()}"
        self.sql(f"RENAME TABLE {t} TO {target}")

    def op_truncate(self) -> None:
        t = self.rng.choice(self.tables())
        self.cur.execute(f"SELECT count(*) FROM {t}")
        if self.cur.fetchone()[0]:
            self.sql(f"TRUNCATE TABLE {t}")
            self.truncates[t] += 1

    def op_drop(self) -> None:
        self.sql(f"DROP TABLE {self.rng.choice(self.tables())}")

    def op_recreate(self) -> None:
        t = self.rng.choice(self.tables())
        db, name = t.split(".")
        kind = "k2" if any(c == "y" for c, _ in self.columns(t)) else "k1"
        self.sql(f"DROP TABLE {t}")
        self.create(db, name, "k1" if kind == "k2" else "k2")

    def op_drop_database(self) -> None:
        db = self.dbs[-1]
        self.sql(f"DROP DATABASE {db}")
        self.sql(f"CREATE DATABASE {db}")
        self.create(db)

    def op_gh_ost(self) -> None:
        t = self.rng.choice(self.tables())
        db, name = t.split(".")
        gho, ghc, old = f"{db}._{name}_gho", f"{db}._{name}_ghc", f"{db}._{name}_del"
        self.sql(f"CREATE TABLE {ghc} (id BIGINT PRIMARY KEY, hint VARCHAR(64))")
        self.sql(f"INSERT INTO {ghc} VALUES (1, 'started')")
        self.sql(f"CREATE TABLE {gho} LIKE {t}")
        col = self.fresh_name("w")
        widen = ", MODIFY id BIGINT NOT NULL" if dict(self.columns(t))["id"] == "int" else ""
        self.sql(f"ALTER TABLE {gho} ADD COLUMN {col} INT NOT NULL DEFAULT 9{widen}")
        cols = ", ".join(c for c, _ in self.columns(t))
        self.sql(f"INSERT IGNORE INTO {gho} ({cols}) SELECT {cols} FROM {t} WHERE id <= 9")
        for _ in range(4):  # DML on the table, applied to the ghost table as gh-ost does from the binlog
            k = self.rng.randint(1, 18)
            self.dml_on(t, k)
            self.cur.execute(f"SELECT count(*) FROM {t} WHERE id = {k}")
            if self.cur.fetchone()[0]:
                self.sql(f"REPLACE INTO {gho} ({cols}) SELECT {cols} FROM {t} WHERE id = {k}")
            else:
                self.sql(f"DELETE FROM {gho} WHERE id = {k}")
            self.checkpoint(0.2)
        self.sql(f"INSERT IGNORE INTO {gho} ({cols}) SELECT {cols} FROM {t} WHERE id > 9")
        self.sql(f"UPDATE {ghc} SET hint = 'cut-over' WHERE id = 1")
        self.sql(f"RENAME TABLE {t} TO {old}, {gho} TO {t}")
        self.checkpoint(0.3)
        self.sql(f"DROP TABLE {old}")
        self.sql(f"DROP TABLE {ghc}")

    def dml_on(self, table: str, k: int) -> None:
        cols = self.columns(table)
        if self.rng.random() < 0.6:
            names = ", ".join(c for c, _ in cols)
            values = ", ".join([str(k), *(self.value(t) for _, t in cols[1:])])
            self.sql(f"REPLACE INTO {table} ({names}) VALUES ({values})")
        else:
            self.sql(f"DELETE FROM {table} WHERE id = {k}")

    def op_pt_osc(self) -> None:
        t = self.rng.choice(self.tables())
        db, name = t.split(".")
        new, old = f"{db}._{name}_new", f"{db}._{name}_old"
        cols = self.columns(t)
        names = [c for c, _ in cols]
        renamed = dict(zip(names, names, strict=True))
        self.sql(f"CREATE TABLE {new} LIKE {t}")
        if self.rng.random() < 0.5 and len(cols) > 1:
            col, _typ = self.rng.choice(cols[1:])
            self.cur.execute(f"SHOW COLUMNS FROM {t} LIKE %s", (col,))
            full_type = self.cur.fetchone()[1]
            renamed[col] = f"{col}_{self.fresh_name('v')}"
            self.sql(f"ALTER TABLE {new} CHANGE {col} {renamed[col]} {full_type}")
        else:
            self.sql(f"ALTER TABLE {new} ADD COLUMN {self.fresh_name('u')} INT DEFAULT 4")
        dst = ", ".join(renamed[c] for c in names)
        src = ", ".join(names)
        new_values = ", ".join(f"NEW.{c}" for c in names)
        trig = f"pt_{name}_{self.n}"
        self.sql(f"CREATE TRIGGER {db}.{trig}_i AFTER INSERT ON {t} FOR EACH ROW REPLACE INTO {new} ({dst}) "
                 f"VALUES ({new_values})")
        self.sql(f"CREATE TRIGGER {db}.{trig}_u AFTER UPDATE ON {t} FOR EACH ROW REPLACE INTO {new} ({dst}) "
                 f"VALUES ({new_values})")
        self.sql(f"CREATE TRIGGER {db}.{trig}_d AFTER DELETE ON {t} FOR EACH ROW DELETE FROM {new} WHERE id = OLD.id")
        self.sql(f"INSERT IGNORE INTO {new} ({dst}) SELECT {src} FROM {t} WHERE id <= 9")
        self.dml(t, 3)
        self.checkpoint(0.2)
        self.sql(f"INSERT IGNORE INTO {new} ({dst}) SELECT {src} FROM {t} WHERE id > 9")
        if self.rng.random() < 0.5:
            self.sql(f"RENAME TABLE {t} TO {old}, {new} TO {t}")
        else:  # the older two-statement swap, with a split point between the statements sometimes
            self.sql(f"RENAME TABLE {t} TO {old}")
            self.checkpoint(0.5)
            self.sql(f"RENAME TABLE {new} TO {t}")
        for suffix in "iud":
            self.sql(f"DROP TRIGGER {db}.{trig}_{suffix}")
        self.sql(f"DROP TABLE {old}")

    OPS = ("op_rename", "op_swap", "op_move", "op_truncate", "op_drop", "op_recreate", "op_drop_database",
           "op_gh_ost", "op_pt_osc")

    def run(self, rounds: int) -> None:
        for db in self.dbs:
            for _ in range(3):
                self.create(db)
        self.checkpoint()
        # Every operation at least once, in a random order, then random ones.
        ops = list(self.OPS)
        self.rng.shuffle(ops)
        ops += [self.rng.choice(self.OPS) for _ in range(max(0, rounds - len(ops)))]
        for op in ops:
            if len(self.tables()) < 3:
                self.create(self.rng.choice(self.dbs))
            getattr(self, op)()
            self.some_dml(self.rng.randint(2, 5))
            self.checkpoint(0.4)
        self.checkpoint()


def server_state(server, dbs) -> dict:
    """db.table -> (columns, sorted rows) of every non-helper table with rows."""
    out = {}
    with server.connect() as conn, conn.cursor() as cur:
        cur.execute("SELECT table_schema, table_name FROM information_schema.tables WHERE table_schema IN "
                    f"({', '.join(['%s'] * len(dbs))})", dbs)
        for db, t in cur.fetchall():
            if HELPER.match(t):
                continue
            cur.execute(f"SELECT * FROM `{db}`.`{t}`")
            rows = sorted(tuple(_norm(v) for v in r) for r in cur.fetchall())
            if rows:
                out[f"{db}.{t}"] = ([d[0] for d in cur.description], rows)
    return out


def lake_state(lake, dbs) -> tuple[dict, set[str]]:
    """The queryable lake: current tables with rows as in server_state, and every table name it lists."""
    engine = get_engine()
    listed = {n for n in lake_tables(str(lake)) if n.split(".")[0] in dbs}
    out = {}
    for name in listed:
        if name.endswith("__history"):
            continue
        table = engine.read(lake_tables(str(lake))[name])
        cols = [c for c in table.column_names if not c.startswith("_")]
        rows = sorted(tuple(_norm(r[c]) for c in cols) for r in table.to_pylist())
        if rows:
            out[name] = (cols, rows)
    return out, listed


def binlog_counts(files: list[Path], dbs: list[str]) -> Counter:
    """(db.table, op) -> row changes, as mariadb-binlog decodes them."""
    out = subprocess.run(["mariadb-binlog", "--base64-output=decode-rows", "-v", *map(str, files)],
                         capture_output=True, text=True, check=True).stdout
    counts: Counter = Counter()
    for m in re.finditer(r"^### (INSERT INTO|UPDATE|DELETE FROM) `([^`]+)`\.`([^`]+)`$", out, re.M):
        if m.group(2) in dbs:
            op = {"INSERT INTO": "insert", "UPDATE": "update", "DELETE FROM": "delete"}[m.group(1)]
            counts[(f"{m.group(2)}.{m.group(3)}", op)] += 1
    return counts


def history_counts(lake: Path, dbs: list[str]) -> Counter:
    """(db.table, op) -> history rows over every generation of every name (read from the directories)."""
    engine = get_engine()
    counts: Counter = Counter()
    for db in dbs:
        for path in sorted((lake / db).glob("*__history*")):
            if not (path / "_delta_log").exists():
                continue
            name = path.name.split("__history")[0]
            table = engine.read(str(path), ["_op"])
            for r in table.group_by("_op").aggregate([("_op", "count")]).to_pylist():
                counts[(f"{db}.{name}", r["_op"])] += r["_op_count"]
    return counts


def _ingest(lake, files, dbs) -> None:
    summary = run_ingest(IngestOptions(lake=str(lake), files=[str(f) for f in files], databases=set(dbs)))
    assert summary.batch is not None
    assert all(summary.gates.get(stage, {}).get("passed", True) for stage in ("before", "after"))


def _check(lake, dbs, expected: dict, where: str) -> None:
    got, listed = lake_state(lake, dbs)
    assert got == expected, where
    # Nothing else is listed: no dropped, renamed-away or helper table (empty ones aside).
    extra = {n for n in listed if not n.endswith("__history") and n not in expected}
    engine = get_engine()
    assert all(engine.read(lake_tables(str(lake))[n]).num_rows == 0 for n in extra), (where, extra)
    assert not {n for n in listed if HELPER.match(n.split(".", 1)[1].split("__history")[0])}, where


def _workload_test(server, tmp_path, seed: int, rounds: int) -> None:
    tag = f"{server.row_metadata.lower()[:3]}{seed}"
    dbs = [f"lr_{tag}_a", f"lr_{tag}_b"]
    first = server.binlog_files()[-1].name
    with server.connect() as conn, conn.cursor() as cur:
        for db in dbs:
            cur.execute(f"DROP DATABASE IF EXISTS {db}")
            cur.execute(f"CREATE DATABASE {db}")
    work = Workload(server, dbs, seed)
    work.run(rounds)
    files = [f for f in server.binlog_files()[:-1] if f.name >= first]
    final = server_state(server, dbs)
    assert work.checkpoints[-1][1] == final

    # One batch over everything.
    one = tmp_path / "one"
    _ingest(one, files, dbs)
    _check(one, dbs, final, "one batch")
    # Batch by batch, at every split point (some fall inside migrations and between a swap's statements).
    split = tmp_path / "split"
    for last, state in work.checkpoints:
        upto = [f for f in files if f.name <= last]
        if upto:
            _ingest(split, upto, dbs)
            _check(split, dbs, state, f"batches up to {last}")
    # History: every row event once, under the name the binlog gives it, plus one row per TRUNCATE.
    expected = binlog_counts(files, dbs)
    expected.update({(t, "truncate"): n for t, n in work.truncates.items()})
    for lake in (one, split):
        assert history_counts(lake, dbs) == expected, lake.name


@pytest.mark.parametrize("mode", ["FULL", "MINIMAL"])
def test_random_lifecycle_workload(mariadb_servers, tmp_path, mode) -> None:
    _workload_test(mariadb_servers.get(mode), tmp_path, seed=13, rounds=11)


@pytest.mark.slow
@pytest.mark.parametrize("seed", [1, 2])
@pytest.mark.parametrize("mode", ["FULL", "MINIMAL"])
def test_random_lifecycle_workload_more_seeds(mariadb_servers, tmp_path, mode, seed) -> None:
    _workload_test(mariadb_servers.get(mode), tmp_path, seed=seed, rounds=20)
