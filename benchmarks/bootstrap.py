"""Bootstrap speed on a private MariaDB: a 1,000,000-row 12-column table and a wide 40-column one, binlake beside
`mariadb-dump --single-transaction --quick` of the same table in the same run.

Reported per table and tool: wall seconds, rows/s, MB/s (MB = the size of mariadb-dump's output for that table, the
same figure for every tool, so MB/s compares like rows/s), CPU seconds (user+sys) of the process that reads
(`cpu`; for Spark the driver only) and of the server (`server_cpu`), peak RSS, and the machine's load average
around each run. Each figure is the median over `--repeat` runs; besides the rows/s ratio to mariadb-dump
(`..._over_dump_rows_per_s`, wall time: meaningful on a quiet machine only) the client CPU ratio
(`..._over_dump_cpu` = dump's CPU / binlake's CPU for the same rows: what a loaded machine still measures). Each
configuration runs in a fresh child process:

- `dump`: mariadb-dump to /dev/null (the server's own read speed, one client core);
- `binlake-1core`: binlake bootstrap in-process pinned to one core (`taskset -c 0`, --readers 1);
- `binlake`: in-process, --readers 2, unpinned;
- `spark-local2`: --spark on local[2] (session start-up reported apart, not in the wall time).

Usage (the machine's other load slows every run; compare figures of one run):

    .venv/bin/python benchmarks/bootstrap.py [--rows 1000000] [--wide-rows 250000] [--repeat 2] [--json OUT]
        [--no-spark] [--only binlake-1core,binlake] [--stages]

`--stages` adds binlake's CPU per stage per 1,000,000 rows (the SELECT read by connectorx, conversion to the lake's
types, the history metadata, the history and current-table Parquet files) beside mariadb-dump's client CPU.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

CHILD = r"""
import json, os, resource, sys, time
sys.path.insert(0, {root!r})
mode, uri, table, lake, chunk_rows = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4], int(sys.argv[5])
from binlake.lake.bootstrap import run_bootstrap
import connectorx, deltalake, pyarrow  # one-off imports, outside the timing
extra, startup = {{}}, 0.0
if mode == "spark-local2":
    t = time.perf_counter()
    from binlake.spark import bootstrap_stager, build_spark_session
    spark = build_spark_session("bench-bootstrap", master="local[2]")
    spark.sparkContext.parallelize([0], 1).count()  # executors up
    extra = {{"stager": bootstrap_stager(spark)}}
    startup = time.perf_counter() - t
readers = 1 if mode == "binlake-1core" else 2
db, name = table.split(".")
t, c = time.perf_counter(), time.process_time()
s = run_bootstrap(uri, [(db, name)], lake, chunk_rows=chunk_rows, readers=readers, **extra)
wall, cpu = time.perf_counter() - t, time.process_time() - c
rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
children = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
print(json.dumps({{"rows": s["rows"], "chunks": s["chunks"], "commits": s["commits"], "wall": wall, "cpu": cpu,
                  "startup": startup, "peak_rss_mb": round(max(rss, children))}}))
"""

# Where the CPU goes, per stage of the in-process path, on the table's second chunk (one reader, no threads of
# binlake's own): the SELECT read by connectorx, conversion to the lake's types, the history rows' metadata, the
# Parquet files of the history and of the current table. CPU seconds per 1,000,000 rows, medians of `repeat`.
STAGES = r"""
import json, os, statistics, sys, tempfile, time, shutil
sys.path.insert(0, {root!r})
uri, table, chunk_rows, repeat = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
from binlake.binlog.api import sequence_number
from binlake.lake import bootstrap as B, chunkread, staging
from binlake.lake.convert import ConversionStats
from binlake.lake.engines import get_engine
from binlake.lake.layout import LakeLayout
db, name = table.split(".")
chunks = B.plan_chunks(uri, [(db, name)], chunk_rows)
chunk = chunks[min(1, len(chunks) - 1)]
reader = B.ChunkReader(uri, chunk, 1, part_rows=chunk_rows)
sql = chunkread.chunk_sql(reader.tdef, db, name, chunk.lower, chunk.upper, True)
lake = tempfile.mkdtemp(prefix="binlake-bench-stages-")
plan = B.plan_tables(get_engine(), LakeLayout(lake, "default"), lake, [chunk], 1)[(db, name)]
cpu = {{}}
def measure(stage, fn):
    times, out = [], None
    for _ in range(repeat):
        c = time.process_time()
        out = fn()
        times.append(time.process_time() - c)
    cpu[stage] = statistics.median(times)
    return out
batches = measure("read", lambda: list(chunkread.stream_select(uri, db, sql, True, chunk_rows)))
import pyarrow as pa
batch = pa.Table.from_batches(batches).combine_chunks().to_batches()[0]
file, pos = chunkread.snapshot_position(batch)
values = measure("convert", lambda: chunkread.lake_columns(batch, reader.tm, ConversionStats(), 2))
part = measure("history_rows", lambda: chunkread.snapshot_history(values, reader.tm, file, pos, 0,
                                                                 sequence_number(file), 1, 0))
# The files as stage_part writes them: history without the all-null _before; snappy where it pays (ColumnCodecs: a
# first file, written with snappy throughout and measured, is not timed; the timed ones are as 7 files in 8 are)
history = B._without_before(part)
staging.write_files(plan.history_path, history, B.PARTITION_BY, B.REPEATED, plan.history_codecs)
measure("history_parquet", lambda: staging.write_files(plan.history_path, history, B.PARTITION_BY, B.REPEATED,
                                                       plan.history_codecs))
current = measure("current_rows", lambda: B._current_rows(part, reader.tm))
staging.write_files(plan.current_path, current, codecs=plan.current_codecs)
measure("current_parquet", lambda: staging.write_files(plan.current_path, current, codecs=plan.current_codecs))
shutil.rmtree(lake, ignore_errors=True)
n = batch.num_rows
print(json.dumps({{k: round(v * 1e6 / n, 3) for k, v in cpu.items()}}))
"""

DUMP = r"""
import resource, subprocess, sys, time
t = time.perf_counter()
with open(sys.argv[1], "wb") as out:
    subprocess.run(sys.argv[2:], stdout=out, check=True)
wall = time.perf_counter() - t
r = resource.getrusage(resource.RUSAGE_CHILDREN)
print(wall, r.ru_utime + r.ru_stime, r.ru_maxrss / 1024)
"""


def make_tables(server, rows: int, wide_rows: int) -> None:
    with server.connect() as conn, conn.cursor() as cur:
        cur.execute("CREATE DATABASE bench")
        cur.execute("CREATE TABLE bench.t12 (id BIGINT PRIMARY KEY, a INT, b BIGINT, c DECIMAL(12,2), d DOUBLE, "
                    "e VARCHAR(32), f VARCHAR(64), g DATETIME(6), h DATE, i TINYINT, j CHAR(8), k TIMESTAMP NULL)")
        cur.execute(f"INSERT INTO bench.t12 SELECT seq, seq % 100000, seq * 7919, (seq % 1000000) / 100, seq / 7, "
                    "CONCAT('name-', seq), MD5(seq), '2024-01-01 00:00:00' + INTERVAL seq SECOND, "
                    "'2020-01-01' + INTERVAL (seq % 2000) DAY, seq % 100, LPAD(seq % 9999, 8, 'x'), "
                    f"'2024-01-01' + INTERVAL seq MINUTE FROM bench.seq_1_to_{rows}")
        # 40 columns: integers of every width, decimals, floats, text, dates and times, enum, a blob.
        kinds = [("INT", "seq % {m}"), ("BIGINT", "seq * {m}"), ("SMALLINT", "seq % 30000"),
                 ("DECIMAL(14,4)", "seq / {m}"), ("DOUBLE", "seq / {m}.5"), ("VARCHAR(40)", "CONCAT('v', seq * {m})"),
                 ("DATETIME", "'2023-01-01' + INTERVAL (seq * {m}) SECOND"), ("DATE", "'2001-01-01' + INTERVAL "
                 "(seq % {m}) DAY"), ("TINYINT UNSIGNED", "seq % 250"), ("ENUM('a','b','c')", "1 + seq % 3")]
        cols, exprs = [], []
        for n in range(39):
            typ, expr = kinds[n % len(kinds)]
            cols.append(f"w{n} {typ}")
            exprs.append(expr.format(m=n + 3))
        cur.execute(f"CREATE TABLE bench.w40 (id BIGINT PRIMARY KEY, {', '.join(cols)})")
        cur.execute(f"INSERT INTO bench.w40 SELECT seq, {', '.join(exprs)} FROM bench.seq_1_to_{wide_rows}")


def server_cpu(server) -> float:
    """The private server's CPU seconds so far (user+sys, from /proc)."""
    fields = Path(f"/proc/{server.process.pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def median(values: list[float]) -> float:
    ordered = sorted(values)
    mid = len(ordered) // 2
    return ordered[mid] if len(ordered) % 2 else (ordered[mid - 1] + ordered[mid]) / 2


def port_of(uri: str) -> str:
    return uri.rsplit(":", 1)[1].strip("/")


def run_dump(uri: str, table: str) -> dict:
    db, name = table.split(".")
    out = tempfile.mktemp(prefix="binlake-bench-dump-")
    cmd = ["mariadb-dump", "-h127.0.0.1", f"-P{port_of(uri)}", "-uroot", "--single-transaction", "--quick", db, name]
    try:
        done = subprocess.run([sys.executable, "-c", DUMP, out, *cmd], capture_output=True, text=True, check=True)
        wall, cpu, rss = (float(x) for x in done.stdout.split())
        return {"wall": wall, "cpu": cpu, "peak_rss_mb": round(rss), "bytes": os.path.getsize(out)}
    finally:
        if os.path.exists(out):
            os.remove(out)


def run_binlake(mode: str, uri: str, table: str, chunk_rows: int) -> dict:
    lake = tempfile.mkdtemp(prefix=f"binlake-bench-{mode}-")
    try:
        cmd = [sys.executable, "-c", CHILD.format(root=str(HERE.parent)), mode, uri, table, lake, str(chunk_rows)]
        if mode == "binlake-1core":
            cmd = ["taskset", "-c", "0", *cmd]
        done = subprocess.run(cmd, capture_output=True, text=True, env=dict(os.environ, SPARK_LOCAL_IP="127.0.0.1"))
        lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
        if not lines:
            raise SystemExit(f"{mode} failed ({done.returncode}):\n{done.stderr[-3000:]}")
        return json.loads(lines[-1])
    finally:
        shutil.rmtree(lake, ignore_errors=True)


def run_stages(uri: str, table: str, chunk_rows: int, repeat: int) -> dict:
    cmd = ["taskset", "-c", "0", sys.executable, "-c", STAGES.format(root=str(HERE.parent)), uri, table,
           str(chunk_rows), str(max(3, repeat))]
    done = subprocess.run(cmd, capture_output=True, text=True)
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if not lines:
        raise SystemExit(f"stages failed ({done.returncode}):\n{done.stderr[-3000:]}")
    return json.loads(lines[-1])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--wide-rows", type=int, default=250_000)
    parser.add_argument("--chunk-rows", type=int, default=50_000)
    parser.add_argument("--repeat", type=int, default=3, help="runs per configuration; medians are reported")
    parser.add_argument("--no-spark", action="store_true")
    parser.add_argument("--only", help="comma-separated binlake configurations to run (dump always runs)")
    parser.add_argument("--stages", action="store_true", help="also give binlake's CPU per stage (per 1,000,000 "
                        "rows, one chunk read, converted and written in turn, pinned to one core)")
    parser.add_argument("--json", help="also write the figures to this file")
    args = parser.parse_args()
    from binlake.testing.mariadb import PrivateMariaDB

    server = PrivateMariaDB.start("FULL")
    figures: dict = {"cores": os.cpu_count(), "chunk_rows": args.chunk_rows, "tables": {}}
    try:
        t = time.perf_counter()
        make_tables(server, args.rows, args.wide_rows)
        figures["table_build_seconds"] = round(time.perf_counter() - t, 1)
        modes = ["dump", "binlake-1core", "binlake"] + ([] if args.no_spark else ["spark-local2"])
        if args.only:
            modes = ["dump"] + [m for m in modes[1:] if m in args.only.split(",")]
        for table, rows in (("bench.t12", args.rows), ("bench.w40", args.wide_rows)):
            out: dict = {"rows": rows}
            runs: dict = {m: [] for m in modes}
            for _ in range(max(1, args.repeat)):
                for mode in modes:  # alternated, so that other load falls on every configuration alike
                    before, server_before = os.getloadavg()[0], server_cpu(server)
                    run = run_dump(server.uri, table) if mode == "dump" else run_binlake(mode, server.uri, table,
                                                                                       args.chunk_rows)
                    run["server_cpu"] = round(server_cpu(server) - server_before, 2)
                    run["load_before"], run["load_after"] = round(before, 1), round(os.getloadavg()[0], 1)
                    print(f"{table} {mode}: {run['wall']:.2f} s, load {run['load_before']}", file=sys.stderr)
                    runs[mode].append(run)
            mb = min(r["bytes"] for r in runs["dump"]) / 1e6
            for mode in modes:
                got = {k: round(median([r[k] for r in runs[mode]]), 2) for k in runs[mode][0]
                       if isinstance(runs[mode][0][k], (int, float))}
                got["rows_per_s"] = round(rows / got["wall"])
                got["mb_per_s"] = round(mb / got["wall"], 1)
                got["runs"] = len(runs[mode])
                out[mode] = got
            out["dump_mb"] = round(mb, 1)
            if args.stages:
                out["binlake_cpu_per_million_rows_by_stage"] = run_stages(server.uri, table, args.chunk_rows,
                                                                          args.repeat)
                out["dump_cpu_per_million_rows"] = round(out["dump"]["cpu"] * 1e6 / rows, 3)
            for mode in modes[1:]:
                out[f"{mode}_over_dump_rows_per_s"] = round(out[mode]["rows_per_s"] / out["dump"]["rows_per_s"], 2)
                if mode != "spark-local2":
                    out[f"{mode}_over_dump_cpu"] = round(out["dump"]["cpu"] / out[mode]["cpu"], 2)
            figures["tables"][table] = out
    finally:
        server.stop()
    print(json.dumps(figures, indent=2))
    if args.json:
        Path(args.json).write_text(json.dumps(figures, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
