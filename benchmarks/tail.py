"""`binlake tail` + `binlake ingest --follow` against a private MariaDB: lag from COMMIT to the row in the lake's
current table, and the tail's own throughput against `mariadb-binlog --read-from-remote-server --raw`.

Phase 1 (per rate, default 1,000 and 10,000 row changes/s for --seconds each): a writer inserts rows at the rate
(multi-row INSERTs, 10 transactions/s per 1,000 rows/s ... see ROWS_PER_TXN) and records each row's COMMIT time
(when the COMMIT returned); `binlake tail` lands the binlog and `binlake ingest --follow --interval N` ingests it;
a poller reads the current table's keys whenever its Delta version changes (every 0.5 s at most) and records when
each key first appears. Lag = appearance - COMMIT; median and p99 over every row written.

Phase 2: the whole binlog the run wrote is read again from the server by `binlake tail` (in process, into an empty
directory) and by `mariadb-binlog --read-from-remote-server --raw --to-last-log`; MB/s of each, same bytes.

    .venv/bin/python benchmarks/tail.py [--seconds 60] [--rates 1000,10000] [--interval 10] [--gates] [--json OUT]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT))

from binlake.sources.tail import Tail  # noqa: E402
from binlake.testing.mariadb import PrivateMariaDB  # noqa: E402

ROWS_PER_TXN = 50
DB = "bench_tail"


def writer(db: PrivateMariaDB, table: str, rate: int, seconds: float, commits: dict, first_id: int) -> int:
    """Insert `rate` rows/s for `seconds` in transactions of ROWS_PER_TXN rows; commits[id] = COMMIT time."""
    conn = db.connect(DB)
    cur = conn.cursor()
    txns_per_s = rate / ROWS_PER_TXN
    next_id, n = first_id, 0
    start = time.time()
    while time.time() - start < seconds:
        wait = start + n / txns_per_s - time.time()
        if wait > 0:
            time.sleep(wait)
        ids = range(next_id, next_id + ROWS_PER_TXN)
        cur.execute("BEGIN")
        cur.execute(f"INSERT INTO {table} VALUES " + ",".join(f"({i}, 'v{i}', {i % 1000})" for i in ids))
        cur.execute("COMMIT")
        now = time.time()
        for i in ids:
            commits[i] = now
        next_id += ROWS_PER_TXN
        n += 1
    conn.close()
    return next_id


def poller(lake: Path, table: str, seen: dict, stop: threading.Event) -> None:
    from deltalake import DeltaTable

    path = lake / DB / table
    version = None
    while not stop.is_set():
        try:
            dt = DeltaTable(str(path))
            v = dt.version()
            if v != version:
                now = time.time()
                for i in dt.to_pyarrow_table(columns=["id"]).column("id").to_pylist():
                    seen.setdefault(i, now)
                version = v
        except Exception:  # the table does not exist before the first batch
            pass
        stop.wait(0.5)


def lag_phase(db: PrivateMariaDB, work: Path, rate: int, seconds: float, interval: float, gates: bool) -> dict:
    table = f"t{rate}"
    with db.connect() as conn, conn.cursor() as cur:
        cur.execute(f"CREATE TABLE {DB}.{table} (id BIGINT PRIMARY KEY, v VARCHAR(32), n INT)")
    landing, lake = work / f"landing{rate}", work / f"lake{rate}"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    with db.connect() as conn, conn.cursor() as cur:
        cur.execute("SHOW MASTER STATUS")
        current = cur.fetchone()[0]
    tail = subprocess.Popen([sys.executable, "-m", "binlake.cli", "tail", "--mysql", db.uri, "--landing",
                             str(landing), "--from", current], env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    follow = subprocess.Popen([sys.executable, "-m", "binlake.cli", "ingest", "--follow", "--interval", str(interval),
                               "--source", str(landing), "--lake", str(lake), "--tables", rf"^{DB}\.{table}$",
                               "--no-progress", *([] if gates else ["--no-gates"])], env=env,
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    commits: dict[int, float] = {}
    seen: dict[int, float] = {}
    stop = threading.Event()
    watch = threading.Thread(target=poller, args=(lake, table, seen, stop), daemon=True)
    watch.start()
    try:
        writer(db, f"{DB}.{table}", rate, seconds, commits, 1)
        deadline = time.time() + 10 * interval + 120
        while len(seen) < len(commits) and time.time() < deadline and follow.poll() is None:
            time.sleep(0.5)
    finally:
        stop.set()
        watch.join()
        for proc in (tail, follow):
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(60)
            except subprocess.TimeoutExpired:
                proc.kill()
    lags = sorted(seen[i] - t for i, t in commits.items() if i in seen)
    missing = len(commits) - len(lags)
    return {"rate": rate, "seconds": seconds, "rows": len(commits), "rows_seen": len(lags), "missing": missing,
            "achieved_rate": round(len(commits) / seconds), "lag_median_s": round(statistics.median(lags), 2),
            "lag_p99_s": round(lags[int(0.99 * (len(lags) - 1))], 2), "lag_max_s": round(lags[-1], 2)}


def throughput(db: PrivateMariaDB, work: Path) -> dict:
    files = db.binlog_files()
    total = sum(f.stat().st_size for f in files)
    last, last_size = files[-1].name, files[-1].stat().st_size
    out = work / "tp_binlake"
    tail: Tail | None = None
    reached: list[bool] = []

    def done() -> bool:  # once the last byte is landed (stays true: the tail then stops at once)
        if not reached and tail is not None and tail.landing.name == last and tail.landing.size >= last_size:
            reached.append(True)
        return bool(reached)

    t = time.perf_counter()
    tail = Tail(db.uri, out, server_id=777, start_file=files[0].name, stop=done)
    tail.run()
    binlake_s = time.perf_counter() - t
    same = all(subprocess.run(["cmp", str(f), str(out / f.name)], capture_output=True).returncode == 0 for f in files)
    raw = work / "tp_mariadb"
    raw.mkdir()
    t = time.perf_counter()
    subprocess.run(["mariadb-binlog", "--read-from-remote-server", "--raw", "--host=127.0.0.1", f"--port={db.port}",
                    "--user=root", f"--result-file={raw}/", "--to-last-log", files[0].name], check=True,
                   capture_output=True)
    mariadb_s = time.perf_counter() - t
    return {"bytes": total, "files": len(files), "binlake_tail_s": round(binlake_s, 2),
            "binlake_tail_mb_s": round(total / binlake_s / 1e6, 1), "mariadb_binlog_s": round(mariadb_s, 2),
            "mariadb_binlog_mb_s": round(total / mariadb_s / 1e6, 1), "binlake_identical": same}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=60.0)
    ap.add_argument("--rates", default="1000,10000")
    ap.add_argument("--interval", type=float, default=10.0)
    ap.add_argument("--gates", action="store_true", help="run the quality gates in every batch (default off)")
    ap.add_argument("--json")
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="binlake-tail-bench-"))
    db = PrivateMariaDB.start(base_dir=work / "server")
    try:
        with db.connect() as conn, conn.cursor() as cur:
            cur.execute(f"CREATE DATABASE {DB}")
        result = {"seconds_per_rate": args.seconds, "interval": args.interval, "gates": args.gates,
                  "rows_per_txn": ROWS_PER_TXN, "lag": []}
        for rate in (int(r) for r in args.rates.split(",")):
            phase = lag_phase(db, work, rate, args.seconds, args.interval, args.gates)
            print(json.dumps(phase), flush=True)
            result["lag"].append(phase)
        result["throughput"] = throughput(db, work)
        print(json.dumps(result["throughput"]), flush=True)
    finally:
        db.stop()
        shutil.rmtree(work, ignore_errors=True)
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
