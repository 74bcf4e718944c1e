"""Decode and ingest speed over a matrix of table shapes, value distributions, transaction sizes and row metadata.

Each cell is one binlog (a table created, filled, half updated and a quarter deleted, in transactions of the
cell's size) written by a private MariaDB with binlog_row_metadata FULL or MINIMAL. For every cell, in the same
run and pinned to one core (taskset): `binlake stats --json` against
`mariadb-binlog --base64-output=decode-rows -vv > /dev/null` (wall and CPU seconds, medians of --repeat
alternated runs, with the load average), and `binlake ingest --no-gates` into a fresh lake, alternated with them
(wall, CPU, the median of the per-round ingest/decode CPU ratios, and peak RSS). A markdown table, worst decode CPU ratio first, goes to stdout (and --markdown); the figures to --json.

The binlogs are cached outside the repository (--data, default ~/.cache/binlake/matrix/<sizes>), keyed by the
shapes' SQL, so a second run only times. `--quick` uses small sizes for development. `--memory` instead measures
ingest peak RSS on single transactions of 250,000, 2,000,000 and 4,000,000 rows (12-column table, distinct values;
`--memory-rows` for others).

    .venv/bin/python benchmarks/matrix.py [--quick] [--shapes narrow,wide] [--dists distinct] [--sizes 1,5000]
        [--metadata FULL,MINIMAL] [--repeat 2] [--no-ingest] [--baseline CHECKOUT] [--markdown OUT] [--json OUT]
    .venv/bin/python benchmarks/matrix.py --memory [--memory-rows 250000,2000000,4000000] [--cpu 1] [--json OUT]

`--baseline` times another checkout's binlake (`git worktree add /tmp/base main`) in the same rounds: before and
after side by side.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from statistics import median

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT))

# Shapes: (columns DDL, insert expressions over {v} (the value source) and {i} (the row id), update SET clause over
# {v}). A cell's value source is the row id itself (all distinct) or the id modulo 5 (repeating).
_WIDE_COLS = []
_WIDE_VALS = []
for _k in range(8):
    _WIDE_COLS.append(f"i{_k} INT NOT NULL")
    _WIDE_VALS.append(f"({{v}} * {_k + 3}) % 2000000000")
for _k in range(4):
    _WIDE_COLS.append(f"b{_k} BIGINT NULL")
    _WIDE_VALS.append(f"IF({{v}} % 11 = {_k}, NULL, {{v}} * 1000003 + {_k})")
for _k, (_p, _s) in enumerate(((12, 2), (18, 4), (10, 0), (20, 6))):
    _WIDE_COLS.append(f"d{_k} DECIMAL({_p},{_s}) NOT NULL")
    _WIDE_VALS.append(f"({{v}} * {7 + _k}) / {10 ** _s or 1} + 0.{_k}")
for _k in range(4):
    _WIDE_COLS.append(f"f{_k} DOUBLE NOT NULL")
    _WIDE_VALS.append(f"{{v}} / {_k + 3}")
for _k in range(4):
    _WIDE_COLS.append(f"s{_k} VARCHAR(120) NULL")
    _WIDE_VALS.append(f"CONCAT('value ', {{v}} * {_k + 1}, ' éè')")
for _k, _f in enumerate((0, 3, 6, 0)):
    _WIDE_COLS.append(f"t{_k} DATETIME({_f}) NOT NULL")
    _WIDE_VALS.append(f"'2001-02-03 04:05:06' + INTERVAL {{v}} * {_k + 7} SECOND + INTERVAL {{v}} * 13 MICROSECOND")
for _k, _f in enumerate((0, 6)):
    _WIDE_COLS.append(f"ts{_k} TIMESTAMP({_f}) NULL DEFAULT NULL")
    _WIDE_VALS.append("'2010-01-01 00:00:00' + INTERVAL {v} * 61 SECOND + INTERVAL {v} * 7 MICROSECOND")
_WIDE_COLS += ["dt0 DATE NOT NULL", "dt1 DATE NULL", "c0 CHAR(8) CHARACTER SET latin1 NOT NULL",
               "c1 CHAR(8) CHARACTER SET latin1 NULL", "e0 ENUM('a','b','c','d') NOT NULL",
               "e1 ENUM('x','y') NULL", "k0 TINYINT(1) NOT NULL", "tm TIME(3) NULL",
               "y YEAR NOT NULL"]
_WIDE_VALS += ["'1990-01-01' + INTERVAL {v} % 20000 DAY", "IF({v} % 5 = 0, NULL, '2020-01-01' + INTERVAL {v} % 999 DAY)",
               "LEFT(CONCAT('c', {v}), 8)", "LEFT(CONCAT('é', {v}), 8)", "ELT(1 + {v} % 4, 'a','b','c','d')",
               "ELT(1 + {v} % 2, 'x','y')", "{v} % 2",
               "SEC_TO_TIME({v} % 86400) + INTERVAL {v} % 1000 * 1000 MICROSECOND", "1901 + {v} % 250"]
assert len(_WIDE_COLS) == 39  # plus the id

SHAPES: dict[str, dict] = {
    "narrow": {
        "cols": ["a INT NOT NULL", "b SMALLINT NOT NULL", "c TINYINT NOT NULL", "d BIGINT NOT NULL",
                 "e INT UNSIGNED NOT NULL", "f MEDIUMINT NULL"],
        "vals": ["({v} * 7) % 2000000000", "{v} % 30000", "{v} % 100", "{v} * 1000003", "{v} * 3 % 4000000000",
                 "IF({v} % 9 = 0, NULL, {v} % 8000000)"],
        "set": "a = a + 1, d = ({v} * 31)",
    },
    "wide": {"cols": _WIDE_COLS, "vals": _WIDE_VALS, "set": "i0 = i0 + 1, s0 = CONCAT('updated ', {v})"},
    "utf8mb4": {
        "cols": ["name VARCHAR(100) NOT NULL", "city VARCHAR(60) NULL", "note TEXT NOT NULL",
                 "tag VARCHAR(20) NOT NULL"],
        "vals": ["CONCAT('Zoë Ångström ', {v})", "IF({v} % 13 = 0, NULL, CONCAT('Kraków ', {v} % 997))",
                 "CONCAT('注文 ', {v}, ' — ', MD5({v}), ' ✓ ', REPEAT('ü', {v} % 20))", "CONCAT('🙂', {v} % 50)"],
        "set": "note = CONCAT('changed ', {v})",
        "charset": "utf8mb4",
    },
    "latin1": {
        "cols": ["name VARCHAR(80) NOT NULL", "body TEXT NULL", "code CHAR(8) NOT NULL"],
        "vals": ["CONCAT('café ', {v})", "IF({v} % 7 = 0, NULL, CONCAT('Señor Müller ', {v}, ' ', MD5({v})))",
                 "LEFT(CONCAT('ç', {v}), 8)"],
        "set": "name = CONCAT('naïve ', {v})",
        "charset": "latin1",
    },
    "temporal": {
        "cols": ["d0 DATETIME NOT NULL", "d3 DATETIME(3) NOT NULL", "d6 DATETIME(6) NOT NULL",
                 "t0 TIMESTAMP NULL DEFAULT NULL", "t3 TIMESTAMP(3) NULL DEFAULT NULL",
                 "t6 TIMESTAMP(6) NULL DEFAULT NULL", "dt DATE NOT NULL", "tm TIME(6) NULL"],
        "vals": ["'2000-01-01' + INTERVAL {v} * 97 SECOND",
                 "'2000-01-01' + INTERVAL {v} * 89 SECOND + INTERVAL {v} * 7 % 1000 * 1000 MICROSECOND",
                 "'1970-06-01' + INTERVAL {v} * 83 SECOND + INTERVAL {v} * 7919 % 1000000 MICROSECOND",
                 "'2001-01-01' + INTERVAL {v} * 79 SECOND",
                 "'2001-01-01' + INTERVAL {v} * 73 SECOND + INTERVAL {v} * 11 % 1000 * 1000 MICROSECOND",
                 "'2001-01-01' + INTERVAL {v} * 71 SECOND + INTERVAL {v} * 104729 % 1000000 MICROSECOND",
                 "'1900-01-01' + INTERVAL {v} % 70000 DAY",
                 "SEC_TO_TIME({v} % 3000000 - 1500000) + INTERVAL {v} % 999983 MICROSECOND"],
        "set": "d6 = d6 + INTERVAL 1 SECOND, t6 = '2020-02-02 02:02:02' + INTERVAL {v} MICROSECOND",
    },
    "json": {
        "cols": ["doc JSON NOT NULL", "meta JSON NULL"],
        "vals": ["JSON_OBJECT('id', {v}, 'name', CONCAT('item ', {v}), 'price', {v} / 100, 'tags', "
                 "JSON_ARRAY('a', {v} % 10, TRUE), 'nested', JSON_OBJECT('x', {v} * 2, 'y', NULL))",
                 "IF({v} % 4 = 0, NULL, JSON_ARRAY({v}, CONCAT('k', {v}), 1.5))"],
        "set": "meta = JSON_ARRAY({v})",
    },
    "blob": {
        "cols": ["payload BLOB NOT NULL", "vb VARBINARY(64) NULL", "fixed BINARY(16) NOT NULL"],
        "vals": ["UNHEX(REPEAT(MD5({v}), 1 + {v} % 8))", "IF({v} % 6 = 0, NULL, UNHEX(SHA1({v})))",
                 "UNHEX(MD5({v} + 1))"],
        "set": "vb = UNHEX(MD5({v}))",
    },
    "decimal": {
        "cols": ["p DECIMAL(12,2) NOT NULL", "q DECIMAL(18,4) NOT NULL", "r DECIMAL(30,10) NULL",
                 "s DECIMAL(5,0) NOT NULL", "u DECIMAL(10,6) NOT NULL", "w DECIMAL(38,3) NOT NULL"],
        "vals": ["({v} * 37 % 10000000) / 100 - 20000", "({v} * 7919) / 10000", "IF({v} % 8 = 0, NULL, {v} / 7)",
                 "{v} % 99999 - 49999", "({v} % 9999 * 101) / 1000000", "{v} * 123456789.123"],
        "set": "p = p + 1, u = u / 2",
    },
}

# Transaction sizes: (rows inserted per cell, rows per transaction). A cell inserts N rows, updates N/2 and
# deletes N/4, each in transactions of the cell's size.
FULL_SIZES = {1: 10_000, 5000: 100_000, 500_000: 500_000}
QUICK_SIZES = {1: 500, 5000: 10_000, 500_000: 20_000}
DISTS = {"repeating": "CAST(q.seq % 5 AS SIGNED)", "distinct": "CAST(q.seq AS SIGNED)"}


def cell_sql(shape: str, dist: str, n: int, txn: int, table: str) -> list[str]:
    """The statements that write one cell (autocommit: each statement, or each statement of a loop, is one
    transaction)."""
    spec = SHAPES[shape]
    charset = f" DEFAULT CHARSET={spec['charset']}" if "charset" in spec else ""
    stmts = [f"CREATE TABLE {table} (id BIGINT NOT NULL PRIMARY KEY, {', '.join(spec['cols'])}) ENGINE=InnoDB"
             f"{charset}"]
    v = DISTS[dist]
    select = ", ".join(["q.seq", *(e.format(v=v) for e in spec["vals"])])
    upd = spec["set"].format(v=("(id % 5 + 1000)" if dist == "repeating" else "(id + 1000003)"))
    if txn == 1:
        stmts.append(f"FOR i IN 1..{n} DO INSERT INTO {table} SELECT {select} FROM (SELECT i AS seq) AS q; END FOR")
        stmts.append(f"FOR i IN 1..{n // 2} DO UPDATE {table} SET {upd} WHERE id = i; END FOR")
        stmts.append(f"FOR i IN {n - n // 4 + 1}..{n} DO DELETE FROM {table} WHERE id = i; END FOR")
        return stmts
    for lo in range(1, n + 1, txn):
        stmts.append(f"INSERT INTO {table} SELECT {select} FROM seq_{lo}_to_{min(n, lo + txn - 1)} AS q")
    for lo in range(1, n // 2 + 1, txn):
        stmts.append(f"UPDATE {table} SET {upd} WHERE id BETWEEN {lo} AND {min(n // 2, lo + txn - 1)}")
    for lo in range(n - n // 4 + 1, n + 1, txn):
        stmts.append(f"DELETE FROM {table} WHERE id BETWEEN {lo} AND {min(n, lo + txn - 1)}")
    return stmts


def build_cells(data: Path, metadata: str, cells: list[tuple[str, str, int]], sizes: dict[int, int]) -> None:
    """Write each missing cell's binlog with one private server of this row metadata."""
    from binlake.testing.mariadb import PrivateMariaDB

    todo = []
    for shape, dist, txn in cells:
        d = cell_dir(data, metadata, shape, dist, txn, sizes)
        if not (d / "done.json").exists():
            todo.append((shape, dist, txn, d))
    if not todo:
        return
    server = PrivateMariaDB.start(metadata, extra_args=("--max-binlog-size=1G", "--max-allowed-packet=256M",
                                                        "--innodb-buffer-pool-size=512M"))
    try:
        with server.connect() as conn, conn.cursor() as cur:
            cur.execute("CREATE DATABASE m")
            cur.execute("USE m")
            for shape, dist, txn, d in todo:
                n = sizes[txn]
                t = time.perf_counter()
                server.flush_logs()
                first = server.binlog_files()[-1]
                for stmt in cell_sql(shape, dist, n, txn, f"{shape}_{dist}_{txn}"):
                    cur.execute(stmt)
                server.flush_logs()
                files = [f for f in server.binlog_files()[:-1] if f.name >= first.name]
                if d.exists():
                    shutil.rmtree(d)
                d.mkdir(parents=True)
                for f in files:
                    shutil.copy(f, d / f.name)
                (d / "done.json").write_text(json.dumps({"files": [f.name for f in files], "rows": n}))
                print(f"built {metadata} {shape} {dist} {txn}: {n} rows in {time.perf_counter() - t:.1f} s",
                      file=sys.stderr)
    finally:
        server.stop(remove=True)


def cell_dir(data: Path, metadata: str, shape: str, dist: str, txn: int, sizes: dict[int, int]) -> Path:
    spec = SHAPES[shape]
    key = hashlib.sha1(json.dumps([spec, DISTS[dist], sizes[txn], txn]).encode()).hexdigest()[:10]
    return data / metadata / f"{shape}-{dist}-{txn}-{key}"


CPU = "0"  # the core every timed command is pinned to (--cpu)


def _pinned(cmd: list[str]) -> list[str]:
    return ["taskset", "-c", CPU, *cmd] if shutil.which("taskset") else cmd


class Runner:
    """Runs commands pinned to one core and measures each through its own wait4 (CPU and peak RSS)."""

    @staticmethod
    def run(cmd: list[str], env: dict | None = None, shell_out: str | None = None, cwd: Path | None = None) -> dict:
        start = time.perf_counter()
        stdout = open(shell_out, "wb") if shell_out else subprocess.PIPE  # noqa: SIM115
        try:
            proc = subprocess.Popen(_pinned(cmd), stdout=stdout, stderr=subprocess.PIPE, env=env, cwd=cwd)
            if shell_out is None:
                out_chunks = []
                # Read stdout fully before waiting (the pipe could fill up otherwise).
                out_chunks.append(proc.stdout.read())
            _pid, status, usage = os.wait4(proc.pid, 0)
            wall = time.perf_counter() - start
            err = proc.stderr.read()
        finally:
            if shell_out:
                stdout.close()
        code = os.waitstatus_to_exitcode(status)
        if code != 0:
            raise SystemExit(f"{' '.join(cmd)} failed ({code}):\n{err.decode(errors='replace')[-2000:]}")
        return {"wall": wall, "cpu": usage.ru_utime + usage.ru_stime, "rss_mb": usage.ru_maxrss / 1024,
                "out": b"".join(out_chunks) if shell_out is None else b""}


def _ingest(d: Path, root: Path) -> dict:
    lake = tempfile.mkdtemp(prefix="binlake-matrix-lake-")
    try:
        return Runner.run([sys.executable, "-m", "binlake.cli", "ingest", "--source", f"local:{d}", "--lake", lake,
                           "--no-gates", "--no-progress"],
                          dict(os.environ, PYTHONPATH=str(root), SPARK_LOCAL_IP="127.0.0.1"), cwd=root)
    finally:
        shutil.rmtree(lake, ignore_errors=True)


def measure_cell(d: Path, repeat: int, ingest: bool, mariadb_binlog: str, baseline: Path | None = None) -> dict:
    """Decode-only (`binlake stats`), `mariadb-binlog -vv` and (with `ingest`) `binlake ingest --no-gates` into a
    fresh lake, alternated `repeat` times; medians (ingest peak RSS: the largest). The ingest/decode CPU ratio is
    the median of the per-round ratios (each round's runs saw about the same load). With `baseline` (another
    checkout of binlake), its `binlake stats` and ingest run in the same rounds (the `base_` figures: before and
    after in one window). binlake runs in its checkout's directory: `python -m` puts the working directory first
    on sys.path, ahead of PYTHONPATH."""
    info = json.loads((d / "done.json").read_text())
    files = [str(d / f) for f in info["files"]]
    stats_cmd = [sys.executable, "-m", "binlake.cli", "stats", "--json", *files]
    ref_cmd = [mariadb_binlog, "--base64-output=decode-rows", "-vv", *files]
    ours, theirs, ingests, base_stats, base_ingests = [], [], [], [], []
    rows = None
    for _ in range(repeat):
        r = Runner.run(stats_cmd, dict(os.environ, PYTHONPATH=str(ROOT)), cwd=ROOT)
        rows = json.loads(r["out"])["rows"]
        ours.append(r)
        theirs.append(Runner.run(ref_cmd, shell_out=os.devnull))
        if baseline is not None:
            base_stats.append(Runner.run(stats_cmd, dict(os.environ, PYTHONPATH=str(baseline)), cwd=baseline))
        if ingest:
            ingests.append(_ingest(d, ROOT))
            if baseline is not None:
                base_ingests.append(_ingest(d, baseline))
    cell = {"rows": rows, "bytes": sum(Path(f).stat().st_size for f in files),
            "stats_wall": median(r["wall"] for r in ours), "stats_cpu": median(r["cpu"] for r in ours),
            "ref_wall": median(r["wall"] for r in theirs), "ref_cpu": median(r["cpu"] for r in theirs),
            "load": os.getloadavg()[0]}
    cell["ratio_wall"] = cell["stats_wall"] / cell["ref_wall"]
    cell["ratio_cpu"] = cell["stats_cpu"] / cell["ref_cpu"]
    if ingest:
        cell.update(ingest_wall=median(r["wall"] for r in ingests), ingest_cpu=median(r["cpu"] for r in ingests),
                    ingest_rss_mb=max(r["rss_mb"] for r in ingests))
        cell.update(ingest_over_stats=cell["ingest_wall"] / cell["stats_wall"],
                    ingest_over_stats_cpu=median(i["cpu"] / o["cpu"] for i, o in zip(ingests, ours, strict=True)))
    if base_stats:
        cell.update(base_stats_wall=median(r["wall"] for r in base_stats),
                    base_stats_cpu=median(r["cpu"] for r in base_stats))
        cell["base_ratio_cpu"] = cell["base_stats_cpu"] / cell["ref_cpu"]
    if base_ingests:
        cell.update(base_ingest_cpu=median(r["cpu"] for r in base_ingests),
                    base_ingest_over_stats_cpu=median(i["cpu"] / o["cpu"]
                                                      for i, o in zip(base_ingests, base_stats, strict=True)))
    return cell


def markdown(results: list[dict]) -> str:
    head = ("| metadata | shape | values | rows/txn | row changes | MB | binlake stats s (CPU) "
            "| mariadb-binlog -vv s (CPU) | ratio wall | ratio CPU | ingest s (CPU) | ingest / stats wall | "
            "ingest / stats CPU | ingest peak RSS MB |")
    based = any("base_stats_cpu" in c for c in results)
    if based:
        head += " before: stats CPU (ratio) | before: ingest / stats CPU |"
    lines = [head, "|" + "---|" * (head.count("|") - 1)]
    # Worst CPU ratio first: on a machine shared with other jobs wall seconds measure the load as much as the tools.
    for c in sorted(results, key=lambda c: c["ratio_cpu"], reverse=True):
        ingest = (f"{c['ingest_wall']:.2f} ({c['ingest_cpu']:.2f}) | {c['ingest_over_stats']:.2f}x | "
                  f"{c['ingest_over_stats_cpu']:.2f}x | {c['ingest_rss_mb']:.0f}") if "ingest_wall" in c else \
            "- | - | - | -"
        lines.append(f"| {c['metadata']} | {c['shape']} | {c['dist']} | {c['txn']:,} | {c['rows']:,} | "
                     f"{c['bytes'] / 1e6:.1f} | {c['stats_wall']:.2f} ({c['stats_cpu']:.2f}) | "
                     f"{c['ref_wall']:.2f} ({c['ref_cpu']:.2f}) | {c['ratio_wall']:.2f}x | {c['ratio_cpu']:.2f}x | "
                     f"{ingest} |" + (f" {c['base_stats_cpu']:.2f} ({c['base_ratio_cpu']:.2f}x) | "
                                      + (f"{c['base_ingest_over_stats_cpu']:.2f}x |"
                                         if "base_ingest_cpu" in c else "- |") if based else ""))
    return "\n".join(lines) + "\n"


MEMORY_TABLE = """CREATE TABLE big (id BIGINT NOT NULL PRIMARY KEY, customer INT NOT NULL,
  status ENUM('new','paid','shipped','cancelled') NOT NULL, amount DECIMAL(12,2) NOT NULL, qty SMALLINT NOT NULL,
  score DOUBLE NULL, created DATETIME(6) NOT NULL, touched TIMESTAMP(3) NULL DEFAULT NULL,
  title VARCHAR(80) CHARACTER SET latin1 NOT NULL, body TEXT CHARACTER SET latin1 NULL,
  code CHAR(8) CHARACTER SET latin1 NOT NULL, flag TINYINT(1) NOT NULL) ENGINE=InnoDB"""
MEMORY_SELECT = ("SELECT seq, seq % 99991, ELT(1 + seq % 4, 'new','paid','shipped','cancelled'), (seq * 37 % 10000000)"
                 " / 100, seq % 30000, seq / 7, '2001-01-01' + INTERVAL seq * 7 SECOND + INTERVAL seq MICROSECOND,"
                 " '2005-01-01' + INTERVAL seq * 3 SECOND + INTERVAL seq % 1000 * 1000 MICROSECOND,"
                 " CONCAT('title é ', seq), CONCAT('body text ', MD5(seq)), LEFT(CONCAT('ç', seq), 8), seq % 2"
                 " FROM seq_1_to_{n}")


MEMORY_ROWS = "250000,2000000,4000000"


def memory(data: Path, mariadb_binlog: str, rows: list[int], build_only: bool = False) -> list[dict]:
    """Ingest peak RSS for one INSERT ... SELECT transaction of each of `rows` rows (default 250,000, 2,000,000 and
    4,000,000)."""
    from binlake.testing.mariadb import PrivateMariaDB

    out = []
    for n in rows:
        d = data / "memory" / f"txn-{n}-{hashlib.sha1((MEMORY_TABLE + MEMORY_SELECT).encode()).hexdigest()[:10]}"
        if not (d / "done.json").exists():
            server = PrivateMariaDB.start("MINIMAL", extra_args=("--max-binlog-size=1G", "--max-allowed-packet=256M",
                                                                 "--innodb-buffer-pool-size=1G"))
            try:
                with server.connect() as conn, conn.cursor() as cur:
                    cur.execute("CREATE DATABASE m")
                    cur.execute("USE m")
                    server.flush_logs()
                    first = server.binlog_files()[-1]
                    cur.execute(MEMORY_TABLE)
                    cur.execute("INSERT INTO big " + MEMORY_SELECT.format(n=n))
                    server.flush_logs()
                    files = [f for f in server.binlog_files()[:-1] if f.name >= first.name]
                    d.mkdir(parents=True, exist_ok=True)
                    for f in files:
                        shutil.copy(f, d / f.name)
                    (d / "done.json").write_text(json.dumps({"files": [f.name for f in files], "rows": n}))
            finally:
                server.stop(remove=True)
        if build_only:
            continue
        cell = measure_cell(d, 1, True, mariadb_binlog)
        cell.update(metadata="MINIMAL", shape="12 columns (memory)", dist="distinct", txn=n)
        print(json.dumps(cell), file=sys.stderr)
        out.append(cell)
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="small sizes, for development")
    parser.add_argument("--data", default=None, help="binlog cache (default ~/.cache/binlake/matrix)")
    parser.add_argument("--shapes", default=",".join(SHAPES))
    parser.add_argument("--dists", default=",".join(DISTS))
    parser.add_argument("--sizes", default="1,5000,500000", help="rows per transaction")
    parser.add_argument("--metadata", default="FULL,MINIMAL")
    parser.add_argument("--repeat", type=int, default=2, help="alternated decode runs per tool; medians are kept")
    parser.add_argument("--no-ingest", action="store_true")
    parser.add_argument("--build-only", action="store_true", help="only write the missing cells' binlogs")
    parser.add_argument("--memory", action="store_true", help="only the ingest memory cells (--memory-rows)")
    parser.add_argument("--memory-rows", default=MEMORY_ROWS, help="rows of each --memory cell's one transaction")
    parser.add_argument("--cpu", default="0", help="the core to pin the timed commands to (taskset -c)")
    parser.add_argument("--baseline", help="another checkout of binlake (e.g. `git worktree add /tmp/base main`) "
                        "timed in the same rounds: before and after side by side")
    parser.add_argument("--markdown")
    parser.add_argument("--json")
    args = parser.parse_args()
    global CPU
    CPU = args.cpu

    sizes = QUICK_SIZES if args.quick else FULL_SIZES
    base = Path(args.data) if args.data else Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / \
        "binlake" / "matrix"
    data = base / ("quick" if args.quick else "full")
    mariadb_binlog = shutil.which("mariadb-binlog") or shutil.which("mysqlbinlog")
    if mariadb_binlog is None:
        raise SystemExit("mariadb-binlog not found (apt-get install -y mariadb-client)")
    # binlake as installed: bytecode compiled once (a PYTHONDONTWRITEBYTECODE shell would recompile every run).
    baseline = Path(args.baseline).resolve() if args.baseline else None
    for root in (ROOT, baseline) if baseline else (ROOT,):
        subprocess.run([sys.executable, "-m", "compileall", "-q", str(root / "binlake")], check=True)
    load = os.getloadavg()
    if args.memory:
        results = memory(base / "memory", mariadb_binlog, [int(s) for s in args.memory_rows.split(",") if s],
                         args.build_only)
    else:
        shapes = [s for s in args.shapes.split(",") if s]
        dists = [s for s in args.dists.split(",") if s]
        txns = [int(s) for s in args.sizes.split(",") if s]
        results = []
        for metadata in [m.strip().upper() for m in args.metadata.split(",") if m.strip()]:
            cells = [(s, d, t) for s in shapes for d in dists for t in txns]
            build_cells(data, metadata, cells, sizes)
            if args.build_only:
                continue
            for shape, dist, txn in cells:
                cell = measure_cell(cell_dir(data, metadata, shape, dist, txn, sizes), args.repeat,
                                    not args.no_ingest, mariadb_binlog, baseline)
                cell.update(metadata=metadata, shape=shape, dist=dist, txn=txn)
                print(f"{metadata} {shape} {dist} {txn}: stats {cell['stats_wall']:.2f}s ref {cell['ref_wall']:.2f}s"
                      f" = {cell['ratio_wall']:.2f}x (CPU {cell['ratio_cpu']:.2f}x)"
                      + (f", ingest {cell['ingest_wall']:.2f}s {cell['ingest_over_stats']:.2f}x "
                         f"(CPU {cell['ingest_over_stats_cpu']:.2f}x) {cell['ingest_rss_mb']:.0f} MB"
                         if "ingest_wall" in cell else "")
                      + (f"; before: CPU {cell['base_ratio_cpu']:.2f}x"
                         + (f", ingest CPU {cell['base_ingest_over_stats_cpu']:.2f}x" if "base_ingest_cpu" in cell
                            else "") if "base_stats_cpu" in cell else ""), file=sys.stderr)
                results.append(cell)
    if args.build_only:
        return 0
    table = markdown(results)
    load_after = os.getloadavg()
    note = (f"\nLoad average (1 min) {load[0]:.2f} before, {load_after[0]:.2f} after; {os.cpu_count()} CPUs; "
            f"{'quick' if args.quick else 'full'} sizes; "
            + ("one run per tool.\n" if args.memory else f"medians of {args.repeat} alternated runs per tool.\n"))
    print(table + note)
    if args.markdown:
        Path(args.markdown).write_text(table + note)
    if args.json:
        Path(args.json).write_text(json.dumps({"sizes": {str(k): v for k, v in sizes.items()},
                                               "load_before": load, "load_after": load_after,
                                               "cells": results}, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
