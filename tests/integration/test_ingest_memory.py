"""Ingest memory does not grow with a transaction's size: past `decode_task.KEEP_BYTES` of decoded history the
in-process ingest writes it to the batch's staging folder as Parquet pieces (an open transaction's too), appends
history from there and merges net changes read piece by piece, and a segment of many keys in key buckets
(binlake.lake.netbuckets). Measured as the peak RSS of `binlake ingest` subprocesses (no timing involved): with a
small budget, a twenty times larger transaction needs little more memory, while holding the same transaction in
memory (the budget out of reach) needs much more; both lakes are equal and equal the server's SELECT."""

from __future__ import annotations

import json
import random
import shutil
import subprocess
import sys
from decimal import Decimal
from pathlib import Path

from binlake.lake.engines import get_engine, tombstone_path
from binlake.lake.layout import LakeLayout
from binlake.lake.pending import BatchStore

PROJECT_ROOT = Path(__file__).resolve().parents[2]
LARGE_ROUNDS = 200  # the large transaction updates every row this many times (the small one 10)

# Runs `binlake ingest` with its memory budgets set (decoded history held before staging, rows per history data
# file, merge input per MERGE commit, merge inputs kept from decoding; history rows per bucket of net changes),
# then prints its own peak RSS (KiB).
DRIVER = """
import sys
from binlake.lake import decode_task, netbuckets, staging
from binlake.lake.engines import deltars
decode_task.KEEP_BYTES = deltars.FILE_BYTES = deltars.MERGE_CHUNK_BYTES = staging.MERGE_INPUT_BYTES = int(sys.argv[1])
netbuckets.NET_BUCKET_ROWS = int(sys.argv[2])
from binlake.cli import main
code = main(sys.argv[3:])
# VmHWM is this process's own peak; ru_maxrss carries the forking parent's peak across exec (pytest's, in CI)
print("peak_kib", next(int(ln.split()[1]) for ln in open("/proc/self/status") if ln.startswith("VmHWM:")))
import pyarrow as pa
print("arrow_peak_kib", pa.default_memory_pool().max_memory() >> 10)  # Arrow's share: no delta-rs writer buffers
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


def _ingest(files: list[Path], lake: Path, db: str, keep_bytes: int, tmp: Path, bucket_rows: int = 1 << 40,
            gates: bool = False) -> int:
    return _ingest_peaks(files, lake, db, keep_bytes, tmp, bucket_rows, gates)[0]


def _ingest_peaks(files: list[Path], lake: Path, db: str, keep_bytes: int, tmp: Path, bucket_rows: int = 1 << 40,
                  gates: bool = False) -> tuple[int, int]:
    """Peak RSS and the peak of Arrow's memory pool (MiB) of one `binlake ingest`."""
    src = tmp / f"src-{lake.name}"
    src.mkdir(exist_ok=True)
    for f in files:
        shutil.copy(f, src / f.name)
    out = subprocess.run([sys.executable, "-c", DRIVER, str(keep_bytes), str(bucket_rows), "ingest", "--source",
                          f"local:{src}", "--lake", str(lake), "--databases", db, "--no-progress",
                          *([] if gates else ["--no-gates"])],
                         capture_output=True, text=True, cwd=PROJECT_ROOT, timeout=600)
    assert out.returncode == 0, out.stderr[-2000:]
    return (int(out.stdout.split("peak_kib")[1].split()[0]) >> 10,
            int(out.stdout.split("arrow_peak_kib")[-1].split()[0]) >> 10)


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

    # Every run stages its history as Parquet pieces (the pending batch names them); the budgeted runs wrote theirs
    # while decoding, the held one held the whole history as Arrow and wrote it once decoded (pieces `r<n>`).
    for lake, spilled in (("small", True), ("large", True), ("held", False)):
        tables = BatchStore(str(tmp_path / lake)).load(0).tables
        pieces = tables["mem_ingest_large.t" if lake != "small" else "mem_ingest_small.t"]["staged"]
        assert pieces
        assert all(p["path"].rsplit("-", 1)[1].startswith("r") for p in pieces) != spilled, pieces
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
    # With the gates (the command line's default) too: a staged table is checked a piece at a time.
    gated_small = _ingest(small, tmp_path / "gsmall", "mem_ingest_small", budget, tmp_path, gates=True)
    gated_large = _ingest(large, tmp_path / "glarge", "mem_ingest_large", budget, tmp_path, gates=True)
    assert gated_large - gated_small < held / 2, (gated_small, gated_large, peak_held, peak_small)


def _keys_workload(server, db: str, rows: int) -> tuple[list[Path], list[Path]]:
    """ONE transaction inserting `rows` rows of distinct keys; then ONE updating most of them, deleting every
    tenth, moving some keys and inserting new ones (a batch of its own, into the filled table)."""
    with server.connect() as conn, conn.cursor() as cur:
        cur.execute(f"CREATE DATABASE `{db}`")
        cur.execute(f"USE `{db}`")
        start = server.binlog_files()[-1].name
        cur.execute("CREATE TABLE t (id BIGINT PRIMARY KEY, note VARCHAR(200) NOT NULL, amount DECIMAL(12,2), "
                    "seen DATETIME(6) NULL)")
        conn.begin()
        cur.execute(f"INSERT INTO t SELECT seq, CONCAT(MD5(seq), REPEAT('x', seq % 50)), seq / 7, "
                    f"'2024-01-01' + INTERVAL seq SECOND FROM seq_1_to_{rows}")
        conn.commit()
        first = server.flush_logs()
        conn.begin()
        cur.execute("UPDATE t SET note = CONCAT('u', MD5(id * 3)), amount = amount + 1 WHERE id % 3 <> 0")
        cur.execute("DELETE FROM t WHERE id % 10 = 0")
        cur.execute(f"UPDATE t SET id = id + {rows * 2} WHERE id % 97 = 1")
        cur.execute(f"INSERT INTO t SELECT {rows * 4} + seq, 'new', NULL, NULL FROM seq_1_to_{rows // 5}")
        conn.commit()
        second = server.flush_logs()
    names = [f.name for f in first]
    first = first[names.index(start):]
    return first, [f for f in second if f.name not in {g.name for g in first}]


def _txns(lake: Path, db: str) -> dict:
    """The app transactions (id -> version) of the current table and its tombstones."""
    path = LakeLayout(str(lake)).current_path(db, "t")
    out = {}
    for p in (path, tombstone_path(path)):
        for f in sorted((Path(p) / "_delta_log").glob("*.json")):
            for line in f.read_text().splitlines():
                if '"txn"' in line:
                    txn = json.loads(line)["txn"]
                    out[(Path(p).name, txn["appId"])] = txn["version"]
    return out


def test_merge_memory_stays_flat_as_a_transactions_keys_grow(mariadb_full, tmp_path) -> None:
    """A transaction of many distinct keys: its net changes are as large as its history. Bucketed, a fifteen
    times larger transaction needs little more Arrow memory; the same merged whole (buckets out of reach, as
    before) needs much more. (At this size RSS is dominated by delta-rs' writer buffers, bounded by its file size:
    Arrow's pool peak is what tells the net table held whole; benchmarks/matrix.py --memory measures RSS at
    millions of rows.) Lakes equal either way, after a first batch into an empty table and a second into the
    filled one (its parts' app ids, tombstones), and equal the server."""
    budget, bucket_rows = 4 << 20, 20_000
    small = _keys_workload(mariadb_full, "mem_keys_small", 20_000)
    large = _keys_workload(mariadb_full, "mem_keys_large", 300_000)
    peaks = {}
    for lake, files, db, rows in (("small", small, "mem_keys_small", bucket_rows),
                                  ("large", large, "mem_keys_large", bucket_rows),
                                  ("held", large, "mem_keys_large", 1 << 40)):
        peaks[lake] = _ingest_peaks(files[0], tmp_path / lake, db, budget, tmp_path, rows)[1]
        assert ("staged" in BatchStore(str(tmp_path / lake)).load(0).tables[f"{db}.t"])
        if lake != "small":
            first = _current(tmp_path / lake, db)
            assert len(first) == 300_000
            peaks[lake + "-next"] = _ingest_peaks(files[0] + files[1], tmp_path / lake, db, budget, tmp_path, rows)[1]
    assert _current(tmp_path / "large", "mem_keys_large") == _current(tmp_path / "held", "mem_keys_large")
    # The same commits' app ids (the parts of a large merge aside: bucketed and sliced whole, they differ).
    txns = {lake: _txns(tmp_path / lake, "mem_keys_large") for lake in ("large", "held")}
    assert {k: v for k, v in txns["large"].items() if "part" not in k[1]} == \
        {k: v for k, v in txns["held"].items() if "part" not in k[1]}
    assert any("part" in app for _t, app in txns["large"])
    with mariadb_full.connect("mem_keys_large") as conn, conn.cursor() as cur:
        cur.execute("SELECT id, note, amount FROM t")
        server = {i: (n, None if a is None else Decimal(a)) for i, n, a in cur.fetchall()}
    assert {k: v[:2] for k, v in _current(tmp_path / "large", "mem_keys_large").items()} == server

    grown, held = peaks["large"] - peaks["small"], peaks["held"] - peaks["small"]
    assert held > 15, peaks
    assert grown < held / 2, peaks
    assert peaks["large-next"] - peaks["small"] < (peaks["held-next"] - peaks["small"]) / 2, peaks
