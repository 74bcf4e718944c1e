"""Large generated binlogs for the Spark memory and speed benchmarks (issue 16), written with
binlake/testing/binlog_writer.py in a cache folder outside the repository.

`generate(path, size_mb)` writes one MySQL 8.0 binlog (row-based, CRC32, binlog_row_metadata=FULL) of about
`size_mb` MB: CREATE TABLE events, then transactions of 500 to 10,000 row changes on `bench.events` (inserts of
new ids, updates and deletes of live ids, 6 columns: BIGINT key, INT, DECIMAL, TINYINT UNSIGNED, DATETIME(3),
a nullable VARCHAR of 20 to 100 characters) each with one update on `bench.accounts`, and, at 40% of the file,
ONE transaction updating `big_tx_rows` rows (default 2,000 per MB: 2 million at 1 GB; inserting first what it
needs to update if fewer rows are live). At 1 GB that makes about
8.5 million row changes. Every image is consistent (an update's before image is the row as it was), and the
generator keeps the final state, so a test can compare the lake with it. Seeded: the same arguments write the
same file.

    .venv/bin/python benchmarks/big_binlog.py --mb 1024 [--mb 100 ...] [--files 8] [--cache-dir DIR]   # prints paths

With `files`, the changes go on in the next file (ROTATE, as a server rotates) each time a file reaches its share.

Files land in $BINLAKE_BENCH_CACHE or ~/.cache/binlake-bench (never in the repository), with a JSON sidecar of
their counts; an existing file with a matching sidecar is reused.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import struct
import sys
from decimal import Decimal
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
if str(HERE.parent) not in sys.path:
    sys.path.insert(0, str(HERE.parent))

from binlake.testing.binlog_writer import BinlogWriter, column  # noqa: E402

VERSION = 2  # of the layout below: a cached file written by another version is rewritten
POOL = 4096  # distinct encoded (account, amount, status, created, note) tails
EVENTS_SQL = ("CREATE TABLE events (id BIGINT NOT NULL PRIMARY KEY, account INT NOT NULL, amount DECIMAL(12,2) NOT "
              "NULL, status TINYINT UNSIGNED NOT NULL, created DATETIME(3) NOT NULL, note VARCHAR(100) NULL)")
ACCOUNTS_SQL = "CREATE TABLE accounts (id INT NOT NULL PRIMARY KEY, balance BIGINT NOT NULL, name VARCHAR(40))"
ACCOUNTS = 1000
T0 = 1_735_689_600  # 2025-01-01T00:00:00Z: the first commit time; one second per transaction after it


def cache_dir(given: str | os.PathLike | None = None) -> Path:
    base = given or os.environ.get("BINLAKE_BENCH_CACHE") or Path(
        os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "binlake-bench"
    path = Path(base)
    path.mkdir(parents=True, exist_ok=True)
    return path


def _tail_values(rng: random.Random, j: int) -> list:
    note = None if j % 11 == 0 else ("note-%05d " % j) + "x" * rng.randint(9, 89)
    # Amounts keep to 500 integer parts: the decoder caches DECIMAL values per integer part (512 of them), and
    # values that miss it on every row decode about 10x slower (issue 17's subject, not measured here).
    return [j % 9973 + 1, Decimal(f"{rng.randint(0, 499)}.{rng.randint(0, 99):02d}"), j % 5,
            f"2024-{1 + j % 12:02d}-{1 + j % 28:02d} {j % 24:02d}:{j % 60:02d}:{(7 * j) % 60:02d}.{j % 1000:03d}",
            note]


class _Events:
    """bench.events: its pre-encoded image parts and the state of every id (the tail each id currently has)."""

    def __init__(self, writer: BinlogWriter, tm) -> None:
        self.writer, self.tm = writer, tm
        self.nulls, self.tails = [], []
        for j in range(POOL):  # each from its own generator, so that row() can rebuild it
            img = writer.image(tm, [0, *_tail_values(random.Random(f"tail{j}"), j)])
            self.nulls.append(img[:1])
            self.tails.append(img[9:])
        self.pack = struct.Struct("<q").pack
        self.salt = np.zeros(1 << 16, dtype=np.int64)  # per id: tail index = (id + salt[id]) % POOL
        self.lo = self.hi = 1  # live ids are lo .. hi-1

    def images(self, ids: np.ndarray, salts: np.ndarray) -> list[bytes]:
        nulls, tails, pack = self.nulls, self.tails, self.pack
        return [nulls[j] + pack(i) + tails[j] for i, j in zip(ids.tolist(), ((ids + salts) % POOL).tolist(),
                                                              strict=True)]

    def insert(self, tx, n: int, salt: int) -> int:
        ids = np.arange(self.hi, self.hi + n, dtype=np.int64)
        if self.hi + n > len(self.salt):
            self.salt = np.resize(self.salt, max(2 * len(self.salt), self.hi + n))
        self.salt[ids] = salt
        self.hi += n
        return tx.images(self.tm, "insert", self.images(ids, self.salt[ids]))

    def update(self, tx, a: int, b: int, salt: int) -> int:
        def pairs():  # in chunks: a 2-million-row UPDATE's images are never all in memory
            for lo in range(a, b, 65536):
                ids = np.arange(lo, min(b, lo + 65536), dtype=np.int64)
                before = self.images(ids, self.salt[ids])
                self.salt[ids] = salt
                yield from (x + y for x, y in zip(before, self.images(ids, self.salt[ids]), strict=True))
        return tx.images(self.tm, "update", pairs())

    def delete(self, tx, n: int) -> int:
        ids = np.arange(self.lo, self.lo + n, dtype=np.int64)
        self.lo += n
        return tx.images(self.tm, "delete", self.images(ids, self.salt[ids]))

    def row(self, i: int) -> tuple:
        """The current row of a live id, as the lake should hold it."""
        j = (i + int(self.salt[i])) % POOL
        return (i, *_tail_values(random.Random(f"tail{j}"), j))


def file_names(first: str | os.PathLike, files: int) -> list[Path]:
    """`first` and the names after it, numbered on as a server rotates (mysql-bin.000001, mysql-bin.000002...)."""
    first = Path(first)
    stem, _, number = first.name.rpartition(".")
    return [first.with_name(f"{stem}.{int(number) + n:0{len(number)}d}") for n in range(files)]


def generate(path: str | os.PathLike, size_mb: float, big_tx_rows: int | None = None, seed: int = 16,
             keep_state: bool = False, files: int = 1) -> dict:
    """Write the binlog; returns its counts ({"rows": {table: {op: n}}, "changes", "transactions", "bytes",
    "big_tx_rows"}) and, with keep_state, the expected current rows of bench.events ("events_rows")."""
    target = int(size_mb * (1 << 20))
    big = int(2000 * size_mb) if big_tx_rows is None else big_tx_rows
    rng = random.Random(seed)
    counts = {"bench.events": {"insert": 0, "update": 0, "delete": 0},
              "bench.accounts": {"insert": 0, "update": 0, "delete": 0}}
    tx_count = big_changes = 0
    names = file_names(path, files)
    per_file, done_bytes = target / files, 0
    with BinlogWriter(str(path), server_version="8.0.36-binlake-bench", timestamp=T0) as w:
        w.query("CREATE DATABASE bench", None, T0)
        w.query(EVENTS_SQL, "bench", T0)
        w.query(ACCOUNTS_SQL, "bench", T0)
        ev_cols = [column("bigint", "id", 0, False), column("int", "account", 1, False),
                   column("decimal(12,2)", "amount", 2, False), column("tinyint unsigned", "status", 3, False),
                   column("datetime(3)", "created", 4, False), column("varchar(100)", "note", 5)]
        ac_cols = [column("int", "id", 0, False), column("bigint", "balance", 1, False),
                   column("varchar(40)", "name", 2)]
        ev_tm = w.define_table(101, "bench", "events", ev_cols, [0])
        ac_tm = w.define_table(102, "bench", "accounts", ac_cols, [0])
        events = _Events(w, ev_tm)
        balances = [0] * ACCOUNTS

        def account_row(a: int) -> list:
            return [a, balances[a], None if a % 7 == 0 else f"account {a}"]

        with w.transaction(T0) as tx:
            counts["bench.accounts"]["insert"] += tx.insert(ac_tm, [account_row(a) for a in range(ACCOUNTS)])
        tx_count += 1
        big_done = big == 0
        rotated = 0
        while done_bytes + w.position < target or rotated + 1 < files:  # every file gets transactions
            full = w.position >= per_file or done_bytes + w.position >= target
            if full and rotated + 1 < files:  # the next file, as the server rotates
                rotated += 1
                done_bytes += w.position
                w.rotate(names[rotated].name, names[rotated], T0 + tx_count)
            tx_count += 1
            with w.transaction(T0 + tx_count) as tx:
                live = events.hi - events.lo
                at = done_bytes + w.position
                if not big_done and (at >= 0.4 * target or (live >= big and at >= 0.3 * target)):
                    big_changes = 1  # with the accounts update below
                    if live < big:
                        big_changes += events.insert(tx, big - live, rng.randrange(POOL))
                        counts["bench.events"]["insert"] += big - live
                    big_changes += events.update(tx, events.lo, events.lo + big, rng.randrange(POOL))
                    counts["bench.events"]["update"] += big
                    big_done = True
                else:
                    n = rng.randint(500, 10_000)
                    op = rng.choices(("insert", "update", "delete"), (55, 15, 30))[0] if live > 2 * n else "insert"
                    if op == "insert":
                        counts["bench.events"]["insert"] += events.insert(tx, n, rng.randrange(POOL))
                    elif op == "update":
                        a = rng.randint(events.lo, events.hi - n)
                        counts["bench.events"]["update"] += events.update(tx, a, a + n, rng.randrange(POOL))
                    else:
                        counts["bench.events"]["delete"] += events.delete(tx, n)
                a = rng.randrange(ACCOUNTS)
                before = account_row(a)
                balances[a] += rng.randint(-1000, 1000)
                counts["bench.accounts"]["update"] += tx.update(ac_tm, [(before, account_row(a))])
        w.stop(T0 + tx_count)
    size = sum(p.stat().st_size for p in names[:rotated + 1])
    out = {"version": VERSION, "size_mb": size_mb, "seed": seed, "bytes": size, "transactions": tx_count,
           "files": [p.name for p in names[:rotated + 1]],
           "big_tx_rows": big, "big_tx_changes": big_changes, "rows": counts,
           "changes": sum(n for ops in counts.values() for n in ops.values()),
           "events_live": [events.lo, events.hi]}
    if keep_state:
        out["events_rows"] = [events.row(i) for i in range(events.lo, events.hi)]
        out["accounts_rows"] = [tuple(account_row(a)) for a in range(ACCOUNTS)]
    return out


def cached(size_mb: float, cache: str | os.PathLike | None = None, seed: int = 16, files: int = 1
           ) -> tuple[Path, dict]:
    """The cached binlog of `size_mb` MB in total (`files` files, one folder; written when missing or from another
    layout version): the first file's path and the counts."""
    folder = cache_dir(cache) / (f"big-{size_mb:g}mb-s{seed}" + (f"-{files}files" if files > 1 else ""))
    folder.mkdir(parents=True, exist_ok=True)
    path, meta = folder / "mysql-bin.000001", folder / "counts.json"
    if path.exists() and meta.exists():
        info = json.loads(meta.read_text())
        if info.get("version") == VERSION and info.get("bytes") == sum(
                (folder / n).stat().st_size for n in info.get("files", [path.name]) if (folder / n).exists()):
            return path, info
    for old in folder.glob("mysql-bin.*"):
        old.unlink()
    info = generate(path, size_mb, seed=seed, files=files)
    meta.write_text(json.dumps(info, indent=1))
    return path, info


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--mb", type=float, action="append", required=True, help="size in MB (repeatable)")
    parser.add_argument("--cache-dir", help="default $BINLAKE_BENCH_CACHE or ~/.cache/binlake-bench")
    parser.add_argument("--seed", type=int, default=16)
    parser.add_argument("--files", type=int, default=1, help="spread each size over this many rotated files")
    args = parser.parse_args()
    for mb in args.mb:
        path, info = cached(mb, args.cache_dir, args.seed, args.files)
        print(json.dumps({"path": str(path), **{k: v for k, v in info.items() if k != "version"}}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
