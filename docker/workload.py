"""The compose stack's workload: writes row changes into MySQL and ships closed binlog files to OSS.

Two databases: `shop` (customers, orders: inserts, updates, deletes, primary-key changes, a multi-table
transaction each round) and `crm` (contacts). Half-way through, `ALTER TABLE shop.customers` moves a column: with
binlog_row_metadata=MINIMAL the binlog does not carry column names, which is the case binlake's schema timeline
exists for. Every `--flush-every` rounds the binlog is rotated (FLUSH BINARY LOGS) so the RDS-compatible server can
announce the closed files; with `--oss-endpoint`, each closed file is also uploaded to the OSS-compatible store
(`oss://BUCKET/PREFIX<file>`), once.

    python docker/workload.py --host mysql --password binlake --rounds 0 --interval 2 \
        --binlog-dir /var/lib/mysql --oss-endpoint http://oss:8091 --oss-bucket binlake-binlogs --oss-prefix mysql8/

`--rounds 0` runs until stopped. Deterministic for a given `--seed`.
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from pathlib import Path

import pymysql

SCHEMA = [
    "CREATE DATABASE IF NOT EXISTS shop",
    "CREATE DATABASE IF NOT EXISTS crm",
    "CREATE TABLE IF NOT EXISTS shop.customers (id INT PRIMARY KEY, name VARCHAR(60) NOT NULL, "
    "city VARCHAR(40), balance DECIMAL(12,2) NOT NULL DEFAULT 0, updated_at TIMESTAMP(3) NULL)",
    "CREATE TABLE IF NOT EXISTS shop.orders (id BIGINT PRIMARY KEY, customer_id INT NOT NULL, "
    "amount DECIMAL(12,2) NOT NULL, status ENUM('new','paid','shipped','cancelled') NOT NULL, "
    "note JSON NULL, created_at DATETIME(6) NOT NULL)",
    "CREATE TABLE IF NOT EXISTS crm.contacts (id INT PRIMARY KEY, customer_id INT, email VARCHAR(120), "
    "score DOUBLE, active TINYINT(1) NOT NULL DEFAULT 1)",
]
# The column-reorder hazard: after this, rows events list city before name.
ALTER = "ALTER TABLE shop.customers MODIFY city VARCHAR(40) AFTER id"
CITIES = ["Hangzhou", "Berlin", "São Paulo", "Zürich", "Nairobi", "Osaka", None]


class Workload:
    def __init__(self, conn: pymysql.connections.Connection, seed: int) -> None:
        self.conn = conn
        self.rng = random.Random(seed)
        self.customers: set[int] = set()
        self.orders: set[int] = set()
        self.next_order = 1
        self.changes = 0

    def setup(self) -> None:
        with self.conn.cursor() as cur:
            for sql in SCHEMA:
                cur.execute(sql)
            cur.execute("SELECT id FROM shop.customers")
            self.customers = {r[0] for r in cur.fetchall()}
            cur.execute("SELECT id FROM shop.orders")
            self.orders = {r[0] for r in cur.fetchall()}
            self.next_order = max(self.orders, default=0) + 1

    def alter_once(self) -> None:
        with self.conn.cursor() as cur:
            cur.execute("SELECT ordinal_position FROM information_schema.columns "
                        "WHERE table_schema = 'shop' AND table_name = 'customers' AND column_name = 'city'")
            if cur.fetchone()[0] != 2:
                cur.execute(ALTER)

    def run_round(self, n: int) -> int:
        """One round: a few transactions; returns the rows changed."""
        rng, changed = self.rng, 0
        with self.conn.cursor() as cur:
            cur.execute("BEGIN")
            for _ in range(rng.randint(1, 4)):
                cid = rng.randint(1, 50_000)
                if cid in self.customers:
                    continue
                cur.execute("INSERT INTO shop.customers (id, name, city, balance, updated_at) "
                            "VALUES (%s, %s, %s, %s, NOW(3))", (cid, f"customer {cid}", rng.choice(CITIES),
                                                                round(rng.uniform(0, 500), 2)))
                cur.execute("INSERT INTO crm.contacts (id, customer_id, email, score) VALUES (%s, %s, %s, %s)",
                            (cid, cid, f"c{cid}@example.com", rng.random()))
                self.customers.add(cid)
                changed += 2
            cur.execute("COMMIT")
            if self.customers:
                cur.execute("BEGIN")
                for _ in range(rng.randint(1, 6)):
                    oid, self.next_order = self.next_order, self.next_order + 1
                    cur.execute("INSERT INTO shop.orders VALUES (%s, %s, %s, 'new', %s, NOW(6))",
                                (oid, rng.choice(sorted(self.customers)), round(rng.uniform(1, 900), 2),
                                 '{"channel": "%s", "round": %d}' % (rng.choice(["web", "app"]), n)))
                    self.orders.add(oid)
                    changed += 1
                cur.execute("UPDATE shop.customers SET balance = balance - 1, updated_at = NOW(3) WHERE id = %s",
                            (rng.choice(sorted(self.customers)),))
                changed += cur.rowcount
                cur.execute("COMMIT")
            if self.orders:
                oid = rng.choice(sorted(self.orders))
                cur.execute("UPDATE shop.orders SET status = %s WHERE id = %s",
                            (rng.choice(["paid", "shipped", "cancelled"]), oid))
                changed += cur.rowcount
            if n % 7 == 3 and len(self.orders) > 5:
                victim = rng.choice(sorted(self.orders))
                cur.execute("DELETE FROM shop.orders WHERE id = %s", (victim,))
                self.orders.discard(victim)
                changed += cur.rowcount
            if n % 11 == 5 and self.customers:
                old = rng.choice(sorted(self.customers))
                new = max(self.customers) + 1
                cur.execute("UPDATE shop.customers SET id = %s WHERE id = %s", (new, old))  # a key change
                self.customers.discard(old)
                self.customers.add(new)
                changed += cur.rowcount
            cur.execute("UPDATE crm.contacts SET score = score + 0.5, active = %s WHERE id = %s",
                        (rng.randint(0, 1), rng.choice(sorted(self.customers)) if self.customers else 0))
            changed += cur.rowcount
        self.changes += changed
        return changed


def closed_binlogs(conn: pymysql.connections.Connection) -> list[str]:
    """Rotate the binlog; the names of every file that is now closed (all but the newest)."""
    with conn.cursor() as cur:
        cur.execute("FLUSH BINARY LOGS")
        cur.execute("SHOW BINARY LOGS")
        names = [r[0] for r in cur.fetchall()]
    return names[:-1]


class OssShipper:
    """Uploads closed binlog files to oss://bucket/prefix<name>, each once (kept across restarts: HEAD first)."""

    def __init__(self, endpoint: str, bucket: str, prefix: str, key_id: str, secret: str, binlog_dir: Path) -> None:
        import oss2

        # Inside the compose network the server is `oss:8091`: the bucket must go in the path, not the host name.
        self.bucket = oss2.Bucket(oss2.Auth(key_id, secret), endpoint, bucket, is_path_style=True)
        self.prefix = prefix
        self.binlog_dir = binlog_dir
        self.shipped: set[str] = set()
        try:
            self.bucket.list_objects(prefix=prefix, max_keys=1)
        except oss2.exceptions.NoSuchBucket:
            self.bucket.create_bucket()

    def ship(self, names: list[str]) -> list[str]:
        done = []
        for name in names:
            key = self.prefix + name
            if name in self.shipped or self.bucket.object_exists(key):
                self.shipped.add(name)
                continue
            path = self.binlog_dir / name
            if not path.is_file():
                raise FileNotFoundError(f"--binlog-dir {self.binlog_dir}: no {name} (is the MySQL datadir mounted?)")
            self.bucket.put_object_from_file(key, str(path))
            self.shipped.add(name)
            done.append(key)
        return done


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=3306)
    p.add_argument("--user", default="root")
    p.add_argument("--password", default="")
    p.add_argument("--rounds", type=int, default=0, help="rounds to run (0: until stopped)")
    p.add_argument("--interval", type=float, default=1.0, help="seconds between rounds")
    p.add_argument("--alter-at", type=int, default=None, help="round of the ALTER TABLE (default: half-way, or 50)")
    p.add_argument("--flush-every", type=int, default=30, help="rotate the binlog every N rounds (0: never)")
    p.add_argument("--seed", type=int, default=7)
    p.add_argument("--connect-timeout", type=float, default=120, help="seconds to wait for the server")
    p.add_argument("--binlog-dir", type=Path, help="the server's binlog directory (read-only mount) for shipping")
    p.add_argument("--oss-endpoint", help="OSS endpoint, e.g. http://oss:8091 (ship closed binlogs there)")
    p.add_argument("--oss-bucket", default="binlake-binlogs")
    p.add_argument("--oss-prefix", default="mysql8/")
    p.add_argument("--oss-access-key-id", default="demo-ak")
    p.add_argument("--oss-access-key-secret", default="demo-sk")
    args = p.parse_args(argv)
    if args.oss_endpoint and not args.binlog_dir:
        p.error("--oss-endpoint needs --binlog-dir (where the closed binlog files are read from)")
    return args


def connect(args: argparse.Namespace) -> pymysql.connections.Connection:
    deadline = time.monotonic() + args.connect_timeout
    while True:
        try:
            return pymysql.connect(host=args.host, port=args.port, user=args.user, password=args.password,
                                   autocommit=True, charset="utf8mb4")
        except pymysql.err.OperationalError as exc:
            if time.monotonic() > deadline:
                raise SystemExit(f"workload: cannot connect to {args.host}:{args.port}: {exc}") from None
            time.sleep(2)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    conn = connect(args)
    work = Workload(conn, args.seed)
    work.setup()
    shipper = (OssShipper(args.oss_endpoint, args.oss_bucket, args.oss_prefix, args.oss_access_key_id,
                          args.oss_access_key_secret, args.binlog_dir) if args.oss_endpoint else None)
    alter_at = args.alter_at if args.alter_at is not None else (args.rounds // 2 if args.rounds else 50)
    n = 0
    while args.rounds == 0 or n < args.rounds:
        if n == alter_at:
            work.alter_once()
        work.run_round(n)
        n += 1
        if args.flush_every and n % args.flush_every == 0:
            names = closed_binlogs(conn)
            shipped = shipper.ship(names) if shipper else []
            print(f"workload: round {n}, {work.changes} row changes, binlog rotated; shipped {len(shipped)} "
                  "file(s) to OSS", flush=True)
        if args.interval:
            time.sleep(args.interval)
    names = closed_binlogs(conn)
    if shipper:
        shipper.ship(names)
    print(f"workload: done after {n} rounds, {work.changes} row changes", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
