"""Ingest memory does not grow with a transaction's size: past `decode_task.KEEP_BYTES` of decoded history the
in-process ingest writes it to the batch's staging folder as Parquet pieces (an open transaction's too), appends
history from there and merges net changes read piece by piece. Measured as the peak RSS of `binlake ingest`
subprocesses (no timing involved): with a small budget, a twenty times larger transaction needs little more memory,
while holding the same transaction in memory (the budget out of reach) needs much more; both lakes are equal and
equal the server's SELECT."""

from __future__ import annotations

import random
import shutil
import subprocess
import sys
from decimal import Decimal
from pathlib import Path

from binlake.lake.engines import get_engine
from binlake.lake.layout import LakeLayout
from binlake.lake.pending import BatchStore

PROJECT_ROOT = Path(__file__).resolve().parents[2]
LARGE_ROUNDS = 200  # the large transaction updates every row this many times (the small one 10)

# Runs `binlake ingest` with its memory budgets set (decoded history held before staging, rows per history data
# file, merge input per MERGE commit), then prints its own peak RSS (KiB).
DRIVER = """
import sys
from binlake.lake import decode_task
from binlake.lake.engines import deltars
decode_task.KEEP_BYTES = deltars.FILE_BYTES = deltars.MERGE_CHUNK_BYTES = int(sys.argv[1])
from binlake.cli import main
code = main(sys.argv[2:])
# VmHWM is this process's own peak; ru_maxrss carries the forking parent's peak across exec (pytest's, in CI)
print("peak_kib", next(int(ln.split()[1]) for ln in open("/proc/self/status") if ln.startswith("VmHWM:")))
sys.exit(code)
"""


def _workload(server, db: str, rounds: int, seed: int) -> list[Path]:
    """2,000 rows inserted, then ONE transaction updating every row `rounds` times (values differ every round)."""
    rng = random.Random(seed)
    with server.connect() as conn, conn.cursor() as cur:
        cur.execute(f"CREATE DATABASE `{db}`")
        cur.execute(f"USE `{db}`")
        start = server.binlog_files()[-1].name
        cur.execute("CREATE TABLE t (id INT PRIMARY KEY, note VARCHAR(200) NOT NULL, amount DECIMAL(12,2), "
                    "seen DATETIME(6) NULL)")
        cur.execute("INSERT INTO t SELECT seq, CONCAT('n', seq), seq / 7, NULL FROM seq_1_to_2000")
        conn.begin()
        for r in range(rounds):
            salt = rng.randint(0, 10**9)
            cur.execute(f"UPDATE t SET note = CONCAT(MD5(id * {salt}), REPEAT(CHAR(65 + (id + {r}) % 26), "
                        f"{rng.randint(60, 140)})), amount = amount + {rng.randint(1, 99)} / 100, "
                        f"seen = '2024-01-01' + INTERVAL id * {salt % 1000} MICROSECOND")
        conn.commit()
    files = server.flush_logs()
    return files[[f.name for f in files].index(start):]


def _ingest(files: list[Path], lake: Path, db: str, keep_bytes: int, tmp: Path) -> int:
    src = tmp / f"src-{lake.name}"
    src.mkdir()
    for f in files:
        shutil.copy(f, src / f.name)
    out = subprocess.run([sys.executable, "-c", DRIVER, str(keep_bytes), "ingest", "--source", f"local:{src}",
                          "--lake", str(lake), "--databases", db, "--no-gates", "--no-progress"],
                         capture_output=True, text=True, cwd=PROJECT_ROOT, timeout=600)
    assert out.returncode == 0, out.stderr[-2000:]
    return int(out.stdout.split("peak_kib")[-1].split()[0]) >> 10  # MiB


def _current(lake: Path, db: str) -> dict:
    rows = get_engine().read(LakeLayout(str(lake)).current_path(db, "t")).to_pylist()
    return {r["id"]: (r["note"], r["amount"], r["seen"], r["_seq"]) for r in rows}


def test_ingest_memory_stays_flat_as_a_transaction_grows(mariadb_full, tmp_path) -> None:
    small = _workload(mariadb_full, "mem_ingest_small", 10, seed=17)
    large = _workload(mariadb_full, "mem_ingest_large", LARGE_ROUNDS, seed=71)
    budget = 4 << 20  # history held as Arrow before the range is staged, and the bytes of each later step
    peak_small = _ingest(small, tmp_path / "small", "mem_ingest_small", budget, tmp_path)
    peak_large = _ingest(large, tmp_path / "large", "mem_ingest_large", budget, tmp_path)
    peak_held = _ingest(large, tmp_path / "held", "mem_ingest_large", 1 << 40, tmp_path)

    # The staged runs really staged (the pending batch names Parquet pieces), the held one did not.
    for lake, staged in (("small", True), ("large", True), ("held", False)):
        tables = BatchStore(str(tmp_path / lake)).load(0).tables
        assert ("staged" in tables["mem_ingest_large.t" if lake != "small" else "mem_ingest_small.t"]) == staged
    # Same lake either way, and equal to the server.
    assert _current(tmp_path / "large", "mem_ingest_large") == _current(tmp_path / "held", "mem_ingest_large")
    history = {lake: get_engine().read(LakeLayout(str(tmp_path / lake)).history_path("mem_ingest_large", "t"),
                                       ["_file_seq", "_pos", "_row", "amount"]).sort_by(
        [("_file_seq", "ascending"), ("_pos", "ascending"), ("_row", "ascending")]) for lake in ("large", "held")}
    assert history["large"].num_rows == 2000 * (LARGE_ROUNDS + 1)
    assert history["large"].equals(history["held"])
    with mariadb_full.connect("mem_ingest_large") as conn, conn.cursor() as cur:
        cur.execute("SELECT id, note, amount FROM t")
        server = {i: (n, Decimal(a)) for i, n, a in cur.fetchall()}
    assert {k: v[:2] for k, v in _current(tmp_path / "large", "mem_ingest_large").items()} == server

    # Twenty times the changes: staged, the peak grows by a fraction of what holding them in memory costs.
    grown, held = peak_large - peak_small, peak_held - peak_small
    assert held > 100, (peak_small, peak_large, peak_held)
    assert grown < held / 2, (peak_small, peak_large, peak_held)
