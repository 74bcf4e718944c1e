"""Decode speed: `binlake stats` (every value decoded) against `mariadb-binlog -vv` on the same binlog, same run.

Builds (or reuses, under benchmarks/.data) a binlog of at least 500,000 row changes written by a private MariaDB,
then times both tools on one core (best of --repeat runs, alternating) and prints rows/s, MB/s and the ratio of
wall times, plus the ratio of CPU times (steadier when other work shares the machine). Usage:

    .venv/bin/python benchmarks/decode.py [--rows 500000] [--rebuild] [--repeat 5] [--instructions] [--json OUT]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import shutil
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
DATA = HERE / ".data" / "decode"
sys.path.insert(0, str(HERE.parent))

TABLE_SQL = """CREATE TABLE orders (
  id BIGINT NOT NULL PRIMARY KEY,
  customer INT NOT NULL,
  status ENUM('new','paid','shipped','cancelled') NOT NULL,
  amount DECIMAL(12,2) NOT NULL,
  note VARCHAR(100) NULL,
  created DATETIME(3) NOT NULL,
  updated TIMESTAMP(6) NULL DEFAULT NULL,
  flags TINYINT UNSIGNED NOT NULL,
  score DOUBLE NULL
) ENGINE=InnoDB"""


def build_binlog(rows: int) -> list[Path]:
    """Write >= `rows` row changes (inserts, updates, deletes in 5,000-row transactions); returns the files."""
    from binlake.testing.mariadb import PrivateMariaDB

    if DATA.exists():
        shutil.rmtree(DATA)
    DATA.mkdir(parents=True)
    server = PrivateMariaDB.start("FULL", base_dir=DATA / "server", extra_args=("--max-binlog-size=256M",))
    try:
        with server.connect() as conn, conn.cursor() as cur:
            cur.execute("CREATE DATABASE bench")
            cur.execute("USE bench")
            cur.execute(TABLE_SQL)
            inserts, updates, deletes = rows // 2, rows * 3 // 10, rows - rows // 2 - rows * 3 // 10
            chunk = 5000
            for lo in range(1, inserts + 1, chunk):
                hi = min(inserts, lo + chunk - 1)
                cur.execute(
                    "INSERT INTO orders SELECT seq, seq % 9973, ELT(1 + seq % 4, 'new','paid','shipped','cancelled'),"
                    " (seq % 100000) / 100, IF(seq % 7 = 0, NULL, CONCAT('order note ', seq)),"
                    " '2024-01-01 00:00:00.000' + INTERVAL seq SECOND, NULL, seq % 256, seq / 7"
                    f" FROM seq_{lo}_to_{hi}"
                )
            for lo in range(1, updates + 1, chunk):
                cur.execute(
                    "UPDATE orders SET status='paid', amount=amount+1, updated='2024-06-01 12:00:00.123456',"
                    " note=CONCAT('updated ', id) WHERE id BETWEEN %s AND %s", (lo, min(updates, lo + chunk - 1)))
            for lo in range(inserts - deletes + 1, inserts + 1, chunk):
                cur.execute("DELETE FROM orders WHERE id BETWEEN %s AND %s", (lo, min(inserts, lo + chunk - 1)))
        server.flush_logs()
        files = server.binlog_files()[:-1]
        kept = []
        for f in files:
            target = DATA / f.name
            shutil.copy(f, target)
            kept.append(target)
        (DATA / "files.json").write_text(json.dumps({"rows": rows, "files": [p.name for p in kept]}))
        return kept
    finally:
        server.stop(remove=True)


def cached_binlog(rows: int, rebuild: bool) -> list[Path]:
    meta = DATA / "files.json"
    if not rebuild and meta.exists():
        info = json.loads(meta.read_text())
        if info["rows"] >= rows:
            return [DATA / n for n in info["files"]]
    return build_binlog(rows)


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def run_timed(cmd: list[str], env: dict | None = None) -> tuple[float, float, str]:
    """Run pinned to one core; returns (wall seconds, CPU seconds of the child processes, stdout).

    CPU seconds are what the tool itself used: on a machine shared with other work, wall time also counts the
    time the pinned core spent running something else."""
    pinned = ["taskset", "-c", "0", *cmd] if shutil.which("taskset") else cmd
    cpu = _children_cpu()
    start = time.perf_counter()
    done = subprocess.run(pinned, capture_output=True, env=env, text=True)
    elapsed = time.perf_counter() - start
    cpu = _children_cpu() - cpu
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed ({done.returncode}):\n{done.stderr[-2000:]}")
    return elapsed, cpu, done.stdout


def instructions(cmd: list[str], env: dict | None = None) -> int:
    """Instructions the command executes, counted by valgrind (independent of what else runs on the machine)."""
    if shutil.which("valgrind") is None:
        raise SystemExit("--instructions needs valgrind (apt-get install -y valgrind)")
    done = subprocess.run(["valgrind", "--tool=cachegrind", "--cache-sim=no", "--cachegrind-out-file=/dev/null",
                           "--trace-children=yes", *cmd], capture_output=True, env=env, text=True)
    counts = [int(m.replace(",", "")) for m in re.findall(r"I\s+refs:\s+([\d,]+)", done.stderr)]
    if done.returncode != 0 or not counts:
        raise SystemExit(f"valgrind {' '.join(cmd)} failed ({done.returncode}):\n{done.stderr[-2000:]}")
    return sum(counts)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=500_000)
    parser.add_argument("--rebuild", action="store_true")
    parser.add_argument("--repeat", type=int, default=3, help="runs per tool; the best is reported")
    parser.add_argument("--json", help="also write the figures to this file")
    parser.add_argument("--instructions", action="store_true",
                        help="also count both tools' instructions under valgrind (slow; independent of machine load)")
    args = parser.parse_args()

    files = cached_binlog(args.rows, args.rebuild)
    size = sum(f.stat().st_size for f in files)
    binlake = [sys.executable, "-m", "binlake.cli", "stats", "--json", *map(str, files)]
    mariadb_binlog = shutil.which("mariadb-binlog") or shutil.which("mysqlbinlog")
    if mariadb_binlog is None:
        raise SystemExit("mariadb-binlog not found (apt-get install -y mariadb-client)")
    reference = ["sh", "-c", f"{mariadb_binlog} --base64-output=decode-rows -vv {' '.join(map(str, files))} > /dev/null"]

    # Time binlake as it runs when installed, with its modules' bytecode compiled once (pip does this for an
    # install; a shell with PYTHONDONTWRITEBYTECODE set would otherwise recompile every module on every run).
    subprocess.run([sys.executable, "-m", "compileall", "-q", str(HERE.parent / "binlake")], check=True)
    ours, theirs, ours_cpu, theirs_cpu = [], [], [], []
    report = None
    for _ in range(args.repeat):
        t, c, out = run_timed(binlake, env=dict(os.environ, PYTHONPATH=str(HERE.parent)))
        ours.append(t)
        ours_cpu.append(c)
        report = json.loads(out)
        t2, c2, _ = run_timed(reference)
        theirs.append(t2)
        theirs_cpu.append(c2)
    rows = report["rows"]
    best, ref = min(ours), min(theirs)
    figures = {
        "rows": rows,
        "files": len(files),
        "bytes": size,
        "binlake_seconds": round(best, 2),
        "binlake_rows_per_s": round(rows / best),
        "binlake_mb_per_s": round(size / best / 1e6, 1),
        "mariadb_binlog_seconds": round(ref, 2),
        "mariadb_binlog_rows_per_s": round(rows / ref),
        "mariadb_binlog_mb_per_s": round(size / ref / 1e6, 1),
        "ratio_binlake_over_mariadb_binlog": round(best / ref, 2),
        "binlake_cpu_seconds": round(min(ours_cpu), 2),
        "mariadb_binlog_cpu_seconds": round(min(theirs_cpu), 2),
        "cpu_ratio_binlake_over_mariadb_binlog": round(min(ours_cpu) / min(theirs_cpu), 2),
        "repeats": args.repeat,
        "cpu": os.cpu_count(),
        "pinned_to_one_core": bool(shutil.which("taskset")),
    }
    if args.instructions:
        env = dict(os.environ, PYTHONPATH=str(HERE.parent))
        ours_i, theirs_i = instructions(binlake, env), instructions(reference)
        figures.update(binlake_instructions=ours_i, mariadb_binlog_instructions=theirs_i,
                       instruction_ratio_binlake_over_mariadb_binlog=round(ours_i / theirs_i, 2))
    print(json.dumps(figures, indent=2))
    if args.json:
        Path(args.json).write_text(json.dumps(figures, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
