"""The Kafka sink against a real broker and a real MariaDB: a seeded random workload -> binlogs -> `binlake publish`
-> a read_committed consumer rebuilds every table, which must equal SELECT *; events per table and op equal the
binlog's; every key on one partition in binlog order; publishers killed (SIGKILL) at 10 seeded points and run
again deliver each change exactly once; a re-run publishes nothing."""

from __future__ import annotations

import base64
import datetime as dt
import json
import os
import random
import shutil
import socket
import subprocess
import sys
import time
from collections import Counter, defaultdict
from decimal import Decimal
from pathlib import Path

import pytest
import redis

from binlake.binlog.decoder import BinlogDecoder, DecodeOptions
from binlake.sinks.kafka import KILL_AT_ENV
from binlake.testing.kafka import PrivateKafka, Record, read_topics
from binlake.testing.mariadb import PrivateMariaDB

PROJECT_ROOT = Path(__file__).resolve().parents[2]
DBS = ("k20_shop", "k20_ops")
# table -> (CREATE body, row identity columns or None)
TABLES = {
    "items": ("id INT NOT NULL PRIMARY KEY, price DECIMAL(12,4), name VARCHAR(60), at DATETIME(3), "
              "ts TIMESTAMP(6) NULL DEFAULT NULL, d DATE, t TIME(2), payload BLOB, f DOUBLE, big BIGINT UNSIGNED, "
              "e ENUM('x','y','z'), j JSON", ["id"]),
    "pairs": ("a INT NOT NULL, b VARCHAR(10) NOT NULL, v INT, note TEXT, PRIMARY KEY (b, a)", ["b", "a"]),
    "logs": ("lvl TINYINT, msg VARCHAR(40)", None),
    "uniq": ("code VARCHAR(12) NOT NULL, qty INT, UNIQUE KEY (code)", ["code"]),
}
TEXTS = ["", "plain", 'quote " and \\ back', "line\nbreak\ttab\rcr", "ctrl \x01\x1f end", "ünï 中文 😀", "a'b",
         "{\"json\": 1}"]


class Workload:
    """Seeded random DML over the tables of two databases, with key moves, multi-table transactions, ALTERs,
    a TRUNCATE and binlog rotations."""

    def __init__(self, server: PrivateMariaDB, seed: int) -> None:
        self.rng = random.Random(seed)
        self.conn = server.connect()
        self.server = server
        self.keys: dict[str, list] = defaultdict(list)
        self.next = Counter()
        self.truncates = Counter()
        self.added: set[tuple[str, str, str]] = set()  # (db, table, column) added by ALTER
        self.dropped: set[tuple[str, str, str]] = set()

    def sql(self, text: str, args=None) -> int:
        with self.conn.cursor() as cur:
            return cur.execute(text, args)

    def setup(self) -> None:
        for db in DBS:
            self.sql(f"DROP DATABASE IF EXISTS `{db}`")
            self.sql(f"CREATE DATABASE `{db}`")
            for name, (body, _key) in TABLES.items():
                self.sql(f"CREATE TABLE `{db}`.`{name}` ({body})")

    def value_row(self, db: str, table: str) -> dict:
        row = self._values(table)
        for d, t, c in self.added:
            if (d, t) == (db, table):
                row[c] = self.rng.choice(TEXTS)[:20]
        return {k: v for k, v in row.items() if (db, table, k) not in self.dropped}

    def _values(self, table: str) -> dict:
        r = self.rng
        if table == "items":
            return {"price": None if r.random() < 0.1 else Decimal(r.randint(-10**9, 10**9)) / 10000,
                    "name": r.choice(TEXTS) + str(r.randint(0, 99)),
                    "at": dt.datetime(2020 + r.randint(0, 5), r.randint(1, 12), r.randint(1, 28), r.randint(0, 23),
                                      r.randint(0, 59), r.randint(0, 59), r.randint(0, 999) * 1000),
                    "ts": None if r.random() < 0.2 else dt.datetime(2021, 3, 4, 5, 6, 7, r.randint(0, 999999)),
                    "d": dt.date(1990 + r.randint(0, 40), r.randint(1, 12), r.randint(1, 28)),
                    "t": f"{r.randint(-838, 838)}:{r.randint(0, 59):02d}:{r.randint(0, 59):02d}.{r.randint(0, 99):02d}",
                    "payload": None if r.random() < 0.2 else bytes(r.randrange(256) for _ in range(r.randint(0, 40))),
                    "f": r.choice([0.0, -1.5, 1e300, 3.141592653589793, r.random()]),
                    "big": r.choice([0, 2**64 - 1, r.randint(0, 2**63)]),
                    "e": r.choice(["x", "y", "z", None]),
                    "j": json.dumps({"n": r.randint(0, 9), "s": r.choice(TEXTS)})}
        if table == "pairs":
            return {"v": r.randint(-5, 5) if r.random() < 0.9 else None, "note": r.choice(TEXTS)}
        if table == "logs":
            return {"lvl": r.randint(-128, 127), "msg": r.choice(TEXTS)[:40]}
        return {"qty": r.randint(0, 1000)}

    def new_key(self, table: str) -> dict:
        self.next[table] += 1
        n = self.next[table]
        if table == "items":
            return {"id": n}
        if table == "pairs":
            return {"a": n % 7, "b": f"k{n}"}
        if table == "uniq":
            return {"code": f"c-{n:05d}"}
        return {}

    def dml(self, db: str, table: str) -> None:
        r = self.rng
        keys = self.keys[(db, table)]
        op = r.random()
        if op < 0.45 or not keys:
            rows = [({**self.new_key(table), **self.value_row(db, table)}) for _ in range(r.randint(1, 4))]
            cols = list(rows[0])
            marks = ", ".join("(" + ", ".join(["%s"] * len(cols)) + ")" for _ in rows)
            self.sql(f"INSERT INTO `{db}`.`{table}` ({', '.join(f'`{c}`' for c in cols)}) VALUES {marks}",
                     [row[c] for row in rows for c in cols])
            if TABLES[table][1]:
                keys.extend({k: row[k] for k in TABLES[table][1]} for row in rows)
            else:
                keys.extend(rows)
        elif op < 0.8:
            target = r.choice(keys)
            values = self.value_row(db, table)
            if TABLES[table][1] and r.random() < 0.2:  # move the key
                new = self.new_key(table)
                values.update(new)
                keys[keys.index(target)] = new
            if not TABLES[table][1]:
                target = keys.pop(keys.index(target))
                keys.append({**target, **values})
            sets = ", ".join(f"`{c}`=%s" for c in values)
            self.sql(f"UPDATE `{db}`.`{table}` SET {sets} WHERE {self.where(target)} LIMIT 1",
                     [*values.values(), *self.where_args(target)])
        else:
            target = keys.pop(r.randrange(len(keys)))
            self.sql(f"DELETE FROM `{db}`.`{table}` WHERE {self.where(target)} LIMIT 1", self.where_args(target))

    @staticmethod
    def where(row: dict) -> str:
        return " AND ".join(f"`{c}` <=> %s" for c in row)

    @staticmethod
    def where_args(row: dict) -> list:
        return list(row.values())

    def run(self, rounds: int) -> None:
        self.setup()
        for i in range(rounds):
            db, table = self.rng.choice(DBS), self.rng.choice(list(TABLES))
            if self.rng.random() < 0.3:  # a transaction over several tables
                self.conn.begin()
                for _ in range(self.rng.randint(2, 6)):
                    self.dml(self.rng.choice(DBS), self.rng.choice(list(TABLES)))
                self.conn.commit()
            else:
                self.dml(db, table)
            if i == rounds // 3:
                self.sql(f"ALTER TABLE `{DBS[0]}`.`items` ADD COLUMN extra VARCHAR(20) AFTER name")
                self.added.add((DBS[0], "items", "extra"))
            if i == rounds // 2:
                self.sql(f"ALTER TABLE `{DBS[1]}`.`pairs` DROP COLUMN note")
                self.dropped.add((DBS[1], "pairs", "note"))
                for row in self.keys[(DBS[1], "pairs")]:
                    row.pop("note", None)
            if i == 2 * rounds // 3:
                self.sql(f"TRUNCATE TABLE `{DBS[1]}`.`logs`")
                self.keys[(DBS[1], "logs")].clear()
                self.truncates[f"{DBS[1]}.logs"] += 1
            if self.rng.random() < 0.03:
                self.server.flush_logs()


# -- the server's tables in the sink's JSON value mapping ------------------------------------------------------------

def server_tables(server: PrivateMariaDB) -> dict[str, object]:
    """db.table -> {key JSON: row} (keyed tables) or Counter of row JSON (tables without a key)."""
    out = {}
    with server.connect() as conn, conn.cursor() as cur:
        for db in DBS:
            for table, (_body, key) in TABLES.items():
                cur.execute("SELECT COLUMN_NAME, DATA_TYPE, COLUMN_TYPE, DATETIME_PRECISION FROM "
                            "information_schema.COLUMNS WHERE TABLE_SCHEMA=%s AND TABLE_NAME=%s "
                            "ORDER BY ORDINAL_POSITION", (db, table))
                cols = cur.fetchall()
                cur.execute(f"SELECT * FROM `{db}`.`{table}`")
                rows = [{c[0]: _json_value(v, c[1], c[2], c[3]) for c, v in zip(cols, r, strict=True)}
                        for r in cur.fetchall()]
                if key:
                    out[f"{db}.{table}"] = {_key_json(row, key): row for row in rows}
                else:
                    out[f"{db}.{table}"] = Counter(_canon(row) for row in rows)
    return out


def _json_value(v, data_type: str, column_type: str, fsp):
    if v is None:
        return None
    if (data_type == "bigint" and "unsigned" in column_type) or data_type == "decimal":
        return str(v)
    if isinstance(v, dt.datetime):
        text = v.isoformat(timespec="microseconds")
        return text + "Z" if data_type == "timestamp" else text
    if isinstance(v, dt.date):
        return v.isoformat()
    if isinstance(v, dt.timedelta):
        sign = "-" if v < dt.timedelta(0) else ""
        us = abs(v) // dt.timedelta(microseconds=1)
        s, us = divmod(us, 1_000_000)
        text = f"{sign}{s // 3600:02d}:{s // 60 % 60:02d}:{s % 60:02d}"
        return text + f".{us:06d}"[: 1 + fsp] if fsp else text
    if isinstance(v, bytes):
        return base64.b64encode(v).decode()
    return v


def _key_json(row: dict, key: list[str]) -> str:
    return json.dumps({k: row[k] for k in key}, sort_keys=True, ensure_ascii=False)


def _canon(row: dict) -> str:
    return json.dumps(row, sort_keys=True, ensure_ascii=False)


# -- the consumer side -----------------------------------------------------------------------------------------------

def rebuild(records: list[Record], prefix: str) -> tuple[dict, Counter, list[dict]]:
    """Apply every change event in partition order: db.table -> state (as server_tables), counts per (table, op),
    and the schema-change events."""
    state: dict[str, object] = {}
    counts: Counter = Counter()
    schema_changes = []
    by_partition: dict[tuple[str, int], set] = defaultdict(set)  # keys last written from each partition
    for rec in sorted(records, key=lambda r: (r.topic, r.partition, r.offset)):
        if rec.topic == f"{prefix}.schema-changes":
            schema_changes.append(json.loads(rec.value))
            continue
        table = rec.topic[len(prefix) + 1:]
        if rec.value is None:  # a tombstone: the delete before it already removed the key
            assert rec.key is not None
            assert _norm_key(rec.key) not in state.get(table, {}), f"{table}: tombstone for a live key {rec.key}"
            continue
        ev = json.loads(rec.value)
        op = ev["op"]
        counts[(table, op)] += 1
        assert ev["source"]["db"] + "." + ev["source"]["table"] == table
        if rec.key is None:  # a table without a key: a multiset of rows, all on partition 0
            rows = state.setdefault(table, Counter())
            if op == "t":
                if rec.partition == 0:
                    rows.clear()
                continue
            assert rec.partition == 0
            if op in ("u", "d"):
                before = _canon(ev["before"])
                assert rows[before] > 0, f"{table}: {op} of a row that is not there: {before}"
                rows[before] -= 1
                if not rows[before]:
                    del rows[before]
            if op in ("c", "u"):
                rows[_canon(ev["after"])] += 1
            continue
        rows = state.setdefault(table, {})
        key = _norm_key(rec.key)
        if op in ("c", "u", "r"):
            rows[key] = ev["after"]
            by_partition[(table, rec.partition)].add(key)
        elif op == "d":
            assert key in rows, f"{table}: delete of an unknown key {key}"
            del rows[key]
    return state, counts, schema_changes


def _norm_key(raw: bytes) -> str:
    return json.dumps(json.loads(raw), sort_keys=True, ensure_ascii=False)


def project(state: dict, server: dict) -> dict:
    """The consumer's rows on the server's current columns (a column added later is null in rows not changed since;
    a dropped one is left out), as a Debezium consumer without schema handling sees them."""
    out = {}
    for table, rows in server.items():
        mine = state.get(table, Counter() if isinstance(rows, Counter) else {})
        columns = None
        sample = next(iter(rows.values()), None) if isinstance(rows, dict) else None
        if isinstance(rows, Counter):
            columns = list(json.loads(next(iter(rows)))) if rows else None
            out[table] = Counter()
            for text, n in mine.items():
                row = json.loads(text)
                out[table][_canon({c: row.get(c) for c in columns} if columns else row)] += n
        else:
            columns = list(sample) if sample else None
            out[table] = {k: ({c: v.get(c) for c in columns} if columns else v) for k, v in mine.items()}
    return out


def binlog_counts(files: list[Path], truncates: Counter) -> Counter:
    """Expected events per (db.table, op) from the binlog itself: insert c, delete d, update u, or d + c when the
    update changes the row identity (as the sink documents); TRUNCATE t."""
    counts: Counter = Counter()
    decoder = BinlogDecoder(DecodeOptions(databases=set(DBS)))
    for change in decoder.decode_files([str(f) for f in files]):
        table = change.table
        name = f"{table.database}.{table.table}"
        if change.op == "insert":
            counts[(name, "c")] += 1
        elif change.op == "delete":
            counts[(name, "d")] += 1
        else:
            key = TABLES[table.table][1]
            names = [c.name for c in table.columns]
            if key and [change.before[names.index(k)] for k in key] != [change.after[names.index(k)] for k in key]:
                counts[(name, "d")] += 1
                counts[(name, "c")] += 1
            else:
                counts[(name, "u")] += 1
    for name, n in truncates.items():
        counts[(name, "t")] += n
    return counts


def publish_cli(bootstrap: str, source: Path, prefix: str, *extra: str, env: dict | None = None,
                check: bool = True) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "binlake.cli", "publish", "--source", f"local:{source}", "--kafka", bootstrap,
           "--topic-prefix", prefix, "--databases", ",".join(DBS), "--no-progress", *extra]
    done = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, **(env or {})}, timeout=600,
                          cwd=PROJECT_ROOT)
    if check:
        assert done.returncode == 0, f"{' '.join(cmd)} exited {done.returncode}:\n{done.stdout}\n{done.stderr}"
    return done


def change_ids(records: list[Record], prefix: str) -> Counter:
    """Each change event's identity: topic, binlog file, position, offset in a payload, row, op."""
    ids = Counter()
    for rec in records:
        if rec.value is None or rec.topic == f"{prefix}.schema-changes":
            continue
        ev = json.loads(rec.value)
        s = ev["source"]
        ids[(rec.topic, rec.partition if ev["op"] == "t" else None, s["file"], s["pos"], s["sub"], s["row"],
             ev["op"])] += 1
    return ids


@pytest.fixture(scope="module")
def workload_binlogs(mariadb_full: PrivateMariaDB, tmp_path_factory: pytest.TempPathFactory):
    """The seeded workload's closed binlog files, copied to their own directory, and the workload."""
    mariadb_full.flush_logs()
    first = len(mariadb_full.binlog_files()) - 1  # the active file: the workload starts writing here
    work = Workload(mariadb_full, seed=2020)
    work.run(rounds=400)
    files = mariadb_full.flush_logs()[first:]
    out = tmp_path_factory.mktemp("k20_binlogs")
    for f in files:
        shutil.copy(f, out / f.name)
    return out, work


def test_publish_rebuilds_every_table(kafka_broker: PrivateKafka, mariadb_full: PrivateMariaDB,
                                      workload_binlogs) -> None:
    source, work = workload_binlogs
    files = sorted(source.iterdir())
    assert len(files) >= 3, "the workload rotates the binlog: several files"
    prefix = "k20main"
    done = publish_cli(kafka_broker.bootstrap, source, prefix, "--batch-mb", "0.05", "--partitions", "4")
    assert "published" in done.stdout
    records = read_topics(kafka_broker.bootstrap, prefix)
    state, counts, schema_changes = rebuild(records, prefix)
    expected = server_tables(mariadb_full)
    assert project(state, expected) == expected
    # Events per table and op equal the binlog's (key moves as d + c, TRUNCATE as one t per partition).
    partitions = {f"{db}.{t}": 4 for db in DBS for t in TABLES}
    per_partition = Counter({(t, op): n * (partitions[t] if op == "t" else 1)
                             for (t, op), n in binlog_counts(files, work.truncates).items()})
    assert counts == per_partition
    assert counts[(f"{DBS[0]}.items", "u")] and counts[(f"{DBS[0]}.items", "d")] and work.truncates
    # A tombstone after every delete, on the deleted key.
    tombstones = Counter(r.topic[len(prefix) + 1:] for r in records
                         if r.value is None and not r.topic.endswith("schema-changes"))
    assert tombstones == Counter({t: n for (t, op), n in counts.items() if op == "d" and TABLES[t.split(".")[1]][1]})
    # Every key on one partition, its changes in binlog order.
    seen: dict[tuple[str, bytes], int] = {}
    last: dict[tuple[str, bytes], tuple] = {}
    for rec in sorted(records, key=lambda r: (r.topic, r.partition, r.offset)):
        if rec.key is None or rec.value is None or rec.topic.endswith("schema-changes"):
            continue
        k = (rec.topic, rec.key)
        assert seen.setdefault(k, rec.partition) == rec.partition, f"{k} on two partitions"
        s = json.loads(rec.value)["source"]
        at = (s["file"], s["pos"], s["sub"], s["row"])
        assert at >= last.get(k, at), f"{k}: {at} after {last[k]}"
        last[k] = at
    assert len(set(seen.values())) > 1, "keys spread over several partitions"
    # Schema changes: the DDL with the resolved columns.
    alters = {c["ddl"]: c for c in schema_changes if c["ddl"].startswith("ALTER")}
    added = next(c for d, c in alters.items() if "ADD COLUMN extra" in d)["tableChanges"][0]
    assert added["type"] == "ALTER" and added["id"] == f"{DBS[0]}.items"
    assert [c["name"] for c in added["table"]["columns"]][:4] == ["id", "price", "name", "extra"]
    assert added["table"]["primaryKeyColumnNames"] == ["id"]
    dropped = next(c for d, c in alters.items() if "DROP COLUMN note" in d)["tableChanges"][0]
    assert [c["name"] for c in dropped["table"]["columns"]] == ["a", "b", "v"]
    creates = [c for c in schema_changes if c["ddl"].startswith("CREATE TABLE")]
    assert {c["tableChanges"][0]["id"] for c in creates} == {f"{db}.{t}" for db in DBS for t in TABLES}
    # Exactly once, and a second run publishes nothing.
    assert max(change_ids(records, prefix).values()) == 1
    before = read_topics(kafka_broker.bootstrap, prefix, isolation="read_uncommitted", include_offsets=True)
    again = publish_cli(kafka_broker.bootstrap, source, prefix, "--batch-mb", "0.05")
    assert "nothing new to publish" in again.stdout
    after = read_topics(kafka_broker.bootstrap, prefix, isolation="read_uncommitted", include_offsets=True)
    assert sorted((r.topic, r.partition, r.offset) for r in after) == sorted(
        (r.topic, r.partition, r.offset) for r in before)


def test_publisher_killed_at_random_points_delivers_each_change_once(
        kafka_broker: PrivateKafka, mariadb_full: PrivateMariaDB, workload_binlogs) -> None:
    source, _work = workload_binlogs
    reference = "k20ref"
    publish_cli(kafka_broker.bootstrap, source, reference, "--batch-mb", "0.005")
    ref_records = read_topics(kafka_broker.bootstrap, reference)
    ref_ids = change_ids(ref_records, reference)
    batches = len(read_topics(kafka_broker.bootstrap, reference, include_offsets=True)) - len(ref_records)
    assert batches > 20
    steps = len(ref_records) + 2 * batches  # a step: each record, and just before and after each commit
    rng = random.Random(20)
    prefix = "k20kill"
    kills = []
    for _ in range(10):
        at = rng.randint(1, max(2, steps // 14))
        done = publish_cli(kafka_broker.bootstrap, source, prefix, "--batch-mb", "0.005",
                           env={KILL_AT_ENV: str(at)}, check=False)
        kills.append((at, done.returncode))
    assert [rc for _, rc in kills] == [-9] * 10, f"every run killed by SIGKILL: {kills}"
    publish_cli(kafka_broker.bootstrap, source, prefix, "--batch-mb", "0.005")
    records = read_topics(kafka_broker.bootstrap, prefix)
    ids = change_ids(records, prefix)
    renamed = Counter({(t.replace(reference, prefix, 1), *rest): n for (t, *rest), n in ref_ids.items()})
    assert ids == renamed, "each change exactly once, as in the uninterrupted run"
    state, _counts, _schema = rebuild(records, prefix)
    expected = server_tables(mariadb_full)
    assert project(state, expected) == expected
    # The kills did cut transactions short: their records are on the broker, visible only uncommitted.
    uncommitted = read_topics(kafka_broker.bootstrap, prefix, isolation="read_uncommitted")
    assert len([r for r in uncommitted if r.value is not None]) > len([r for r in records if r.value is not None])
    assert "nothing new to publish" in publish_cli(kafka_broker.bootstrap, source, prefix, "--batch-mb",
                                                   "0.02").stdout


@pytest.fixture
def redis_url(tmp_path: Path):
    """A private redis-server (Debian's) on a free loopback port, no persistence; stopped after the test."""
    binary = shutil.which("redis-server")
    if binary is None:
        pytest.skip("no redis-server binary (apt-get install -y redis-server); scripts/dev.sh setup installs it")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen([binary, "--port", str(port), "--bind", "127.0.0.1", "--dir", str(tmp_path),
                             "--save", "", "--appendonly", "no", "--daemonize", "no"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
    client = redis.Redis(host="127.0.0.1", port=port)
    for _ in range(200):
        try:
            client.ping()
            break
        except redis.ConnectionError:
            time.sleep(0.05)
    yield f"redis://127.0.0.1:{port}/0"
    proc.terminate()
    proc.wait(timeout=30)


def test_redis_cache_example_equals_the_tables(kafka_broker: PrivateKafka, mariadb_full: PrivateMariaDB,
                                               workload_binlogs, redis_url: str, tmp_path: Path) -> None:
    """docs/examples/redis_cache.py keeps Redis equal to SELECT * of every keyed table: run after half the files
    are published, then again (resuming from its offsets in Redis) after the rest."""
    source, _work = workload_binlogs
    files = sorted(source.iterdir())
    half = tmp_path / "half"
    half.mkdir()
    for f in files[: len(files) // 2]:
        (half / f.name).symlink_to(f)
    prefix = "k20redis"
    example = [sys.executable, str(PROJECT_ROOT / "docs" / "examples" / "redis_cache.py"), kafka_broker.bootstrap,
               prefix, redis_url, "5"]
    publish_cli(kafka_broker.bootstrap, half, prefix, "--batch-mb", "0.05")
    subprocess.run(example, check=True, timeout=600)
    client = redis.Redis.from_url(redis_url)
    partial = {k: dict(client.hgetall(k)) for k in client.keys(f"{prefix}.*") if b"#" not in k}
    assert partial, "the first half already filled the cache"
    publish_cli(kafka_broker.bootstrap, source, prefix, "--batch-mb", "0.05")
    subprocess.run(example, check=True, timeout=600)
    expected = {t: rows for t, rows in server_tables(mariadb_full).items() if TABLES[t.split(".")[1]][1]}
    cache = {}
    for table in expected:
        raw = client.hgetall(f"{prefix}.{table}")
        cache[table] = {_norm_key(k): json.loads(v) for k, v in raw.items()}
    assert project(cache, expected) == expected
    assert not client.exists(f"{prefix}.{DBS[1]}.logs"), "tables without a key are not cached"


def test_publish_errors_are_one_line(kafka_broker: PrivateKafka, workload_binlogs) -> None:
    """A bad prefix (exit 2) and a broker that does not answer (exit 6): one line each, naming the option or the
    broker."""
    source, _work = workload_binlogs
    bad = publish_cli(kafka_broker.bootstrap, source, "bad prefix", check=False)
    assert bad.returncode == 2 and "--topic-prefix" in bad.stderr and len(bad.stderr.strip().splitlines()) == 1
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        dead = f"127.0.0.1:{s.getsockname()[1]}"
    down = publish_cli(dead, source, "k20down", "--kafka-timeout", "3", check=False)
    assert down.returncode == 6 and dead in down.stderr
    assert len([line for line in down.stderr.splitlines() if "binlake" in line]) == 1


def test_a_table_without_schema_is_held_back_alone_and_released(
        kafka_broker: PrivateKafka, mariadb_minimal: PrivateMariaDB, tmp_path: Path) -> None:
    """MINIMAL row metadata and a table created before the files: that table is held back alone (exit 3, one line
    naming it with file and position), the other is published; --release without a schema keeps it held (exit 5,
    nothing published); with --schemas its changes are published from where it was held, each once."""
    db = "k20_hold"
    rng = random.Random(7)
    with mariadb_minimal.connect() as conn, conn.cursor() as cur:
        cur.execute(f"DROP DATABASE IF EXISTS `{db}`")
        cur.execute(f"CREATE DATABASE `{db}`")
        cur.execute(f"CREATE TABLE `{db}`.bad (id INT PRIMARY KEY, v VARCHAR(20))")
        mariadb_minimal.flush_logs()
        first = len(mariadb_minimal.binlog_files()) - 1
        cur.execute(f"CREATE TABLE `{db}`.ok (id INT PRIMARY KEY, v INT)")
        for round_ in range(3):
            for i in range(40):
                conn.begin()
                for table in ("ok", "bad"):
                    key = rng.randint(1, 25)
                    value = rng.randint(0, 99) if table == "ok" else f"v{rng.randint(0, 99)}"
                    if rng.random() < 0.3:
                        cur.execute(f"DELETE FROM `{db}`.`{table}` WHERE id=%s", (key,))
                    else:
                        cur.execute(f"REPLACE INTO `{db}`.`{table}` VALUES (%s, %s)", (key, value))
                conn.commit()
                if i == 20 and round_ == 1:
                    cur.execute(f"UPDATE `{db}`.bad SET id=id+100 WHERE id < 5")
            mariadb_minimal.flush_logs()
        files = mariadb_minimal.binlog_files()[first:-1]
    source = tmp_path / "binlogs"
    source.mkdir()
    for f in files:
        shutil.copy(f, source / f.name)
    base = [sys.executable, "-m", "binlake.cli", "publish", "--source", f"local:{source}", "--kafka",
            kafka_broker.bootstrap, "--topic-prefix", "k20hold", "--databases", db, "--no-progress", "--batch-mb",
            "0.01"]

    def run(*extra: str) -> subprocess.CompletedProcess:
        return subprocess.run([*base, *extra], capture_output=True, text=True, timeout=300, cwd=PROJECT_ROOT)

    def tables() -> dict:
        with mariadb_minimal.connect() as conn, conn.cursor() as cur:
            out = {}
            for table in ("ok", "bad"):
                cur.execute(f"SELECT id, v FROM `{db}`.`{table}`")
                out[f"{db}.{table}"] = {json.dumps({"id": i}): {"id": i, "v": v} for i, v in cur.fetchall()}
            return out

    held = run()
    assert held.returncode == 3, held.stderr
    lines = held.stderr.strip().splitlines()
    assert len(lines) == 2 and f"{db}.bad: SchemaMissing" in lines[1] and files[0].name in lines[1]
    state, _counts, _schema = rebuild(read_topics(kafka_broker.bootstrap, "k20hold"), "k20hold")
    assert state.get(f"{db}.ok") == tables()[f"{db}.ok"] and not state.get(f"{db}.bad")
    still = run("--release", f"{db}.bad")
    assert still.returncode == 5 and f"--release {db}.bad" in still.stderr
    assert len(still.stderr.strip().splitlines()) == 1
    schemas = tmp_path / "schemas"
    schemas.mkdir()
    (schemas / f"{db}.sql").write_text(f"CREATE TABLE `{db}`.`bad` (id INT PRIMARY KEY, v VARCHAR(20));\n")
    released = run("--release", f"{db}.bad", "--schemas", str(schemas))
    assert released.returncode == 0, released.stderr
    assert f"released {db}.bad" in released.stdout
    records = read_topics(kafka_broker.bootstrap, "k20hold")
    state, counts, _schema = rebuild(records, "k20hold")
    assert {t: state.get(t) for t in tables()} == tables()
    assert max(change_ids(records, "k20hold").values()) == 1 and counts[(f"{db}.bad", "c")] > 0
    again = run("--schemas", str(schemas))
    assert again.returncode == 0 and "nothing new to publish" in again.stdout


def test_kafka_stage_from_the_deployment_config(kafka_broker: PrivateKafka, mariadb_full: PrivateMariaDB,
                                                workload_binlogs, tmp_path: Path) -> None:
    """[sink.kafka] -> run_stage(cfg, "kafka", ...) publishes an instance's landed files (what the DAG's
    publish_kafka task runs); a second run publishes nothing."""
    from binlake.config import parse_config
    from binlake.orchestration.stages import run_stage
    from binlake.sources.landing import landing_dir

    source, _work = workload_binlogs
    landing = tmp_path / "landing"
    target = landing_dir(str(landing), "shop", "default")
    target.mkdir(parents=True)
    for f in sorted(source.iterdir()):
        shutil.copy(f, target / f.name)
    cfg = parse_config({"lake": str(tmp_path / "lake"), "landing": str(landing),
                        "instances": [{"name": "shop", "source": f"local:{source}", "tables": [f"{DBS[0]}.*"]}],
                        "sink": {"kafka": {"bootstrap_servers": kafka_broker.bootstrap, "topic_prefix": "k20stage",
                                           "partitions": 2, "batch_mb": 1}}}, str(tmp_path / "binlake.toml"))
    first = run_stage(cfg, "kafka", "shop", "default")
    assert first["batches"] >= 1 and first["end"]["publisher"] == "shop-default"
    records = read_topics(kafka_broker.bootstrap, "k20stage")
    state, _counts, _schema = rebuild(records, "k20stage")
    expected = {t: rows for t, rows in server_tables(mariadb_full).items() if t.startswith(DBS[0] + ".")}
    assert project(state, expected) == expected and not any(t.startswith(DBS[1]) for t in state)
    assert run_stage(cfg, "kafka", "shop", "default")["batches"] == 0


def test_a_refused_record_publishes_nothing_of_its_batch(kafka_broker: PrivateKafka, workload_binlogs) -> None:
    """A record the client refuses (larger than message.max.bytes): exit 6, one line naming the topic and key;
    nothing of the batch (and nothing after it) is committed."""
    source, _work = workload_binlogs
    done = publish_cli(kafka_broker.bootstrap, source, "k20big", "--kafka-config", "message.max.bytes=1000",
                       check=False)
    assert done.returncode == 6, done.stderr
    line = done.stderr.strip()
    assert len(line.splitlines()) == 1 and "Kafka topic k20big." in line and "was not published" in line
    assert read_topics(kafka_broker.bootstrap, "k20big", include_offsets=True) == []


SLICED = """import sys
from pathlib import Path
from binlake.sinks.kafka import KafkaSinkOptions, publish
bootstrap, prefix, dbs, *files = sys.argv[1:]
publish(KafkaSinkOptions(bootstrap, prefix, files, databases=set(dbs.split(",")), batch_bytes=1 << 30,
                         slice_bytes=3000, partitions=3))
"""


def test_a_batch_of_many_slices_is_one_transaction_published_once(kafka_broker: PrivateKafka,
                                                                  mariadb_full: PrivateMariaDB,
                                                                  workload_binlogs) -> None:
    """A batch as large as a file, produced 3,000 binlog bytes (whole transactions) at a time into its one Kafka
    transaction: killed (SIGKILL) at seeded points inside batches and run again, every change is there exactly once,
    one committed offsets record per file, and the tables rebuild to SELECT *."""
    from binlake.lake.split import transaction_starts
    from binlake.sinks.kafka import _slices

    source, work = workload_binlogs
    files = sorted(source.iterdir())
    slices = [len(_slices(transaction_starts(str(f), f.name, 4)[0], 4, None, 3000)) for f in files]
    assert max(slices) >= 3, f"batches of several slices: {slices}"
    prefix = "k20slices"
    cmd = [sys.executable, "-c", SLICED, kafka_broker.bootstrap, prefix, ",".join(DBS), *map(str, files)]
    rng = random.Random(21)
    for _ in range(3):
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=600, cwd=PROJECT_ROOT,
                              env={**os.environ, KILL_AT_ENV: str(rng.randint(50, 600))})
        assert done.returncode == -9, done.stderr
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=600, cwd=PROJECT_ROOT)
    assert done.returncode == 0, done.stderr
    records = read_topics(kafka_broker.bootstrap, prefix)
    state, counts, _schema = rebuild(records, prefix)
    expected = server_tables(mariadb_full)
    assert project(state, expected) == expected
    per_partition = Counter({(t, op): n * (3 if op == "t" else 1)
                             for (t, op), n in binlog_counts(files, work.truncates).items()})
    assert counts == per_partition and max(change_ids(records, prefix).values()) == 1
    offsets = len(read_topics(kafka_broker.bootstrap, prefix, include_offsets=True)) - len(records)
    assert offsets == len(files), "one committed transaction (offsets record) per file"
    uncommitted = read_topics(kafka_broker.bootstrap, prefix, isolation="read_uncommitted")
    assert len(uncommitted) > len(records), "the kills cut transactions short"



def test_a_full_local_queue_publishes_every_change_once(kafka_broker: PrivateKafka, workload_binlogs) -> None:
    """A producer queue of a few records (BufferError on most produce calls, each waiting for room and then going
    on after the record it stopped at, the offsets records too): the run completes with the same per-table counts as
    a run with the default queue, no change is published twice, and a second run has nothing to publish."""
    source, _work = workload_binlogs
    reference = publish_cli(kafka_broker.bootstrap, source, "k20qref", "--batch-mb", "0.05")
    small_queue = ("--kafka-config", "queue.buffering.max.messages=7", "--kafka-config", "linger.ms=0")
    small = publish_cli(kafka_broker.bootstrap, source, "k20qsmall", "--batch-mb", "0.05", *small_queue)

    def counts(out: str) -> list[str]:
        return [line for line in out.splitlines() if line.startswith("  k20_")]

    assert counts(small.stdout) and counts(small.stdout) == counts(reference.stdout)
    records = read_topics(kafka_broker.bootstrap, "k20qsmall")
    assert len(records) > 7 * 20, "many more records than the queue holds"
    assert max(change_ids(records, "k20qsmall").values()) == 1
    assert "nothing new to publish" in publish_cli(kafka_broker.bootstrap, source, "k20qsmall", "--batch-mb", "0.05",
                                                   *small_queue).stdout
