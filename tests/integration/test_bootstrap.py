"""Bootstrap by watermarks (the method for MySQL, which has no binlog_snapshot_* status), forced on the private
MariaDB: chunks are read while a writer keeps inserting, updating, deleting and moving keys; after the bootstrap
and an ingest from the recorded position the lake must equal the server: nothing lost, nothing applied twice."""

from __future__ import annotations

import itertools
import random
import threading
import time

import pytest

from binlake.lake.bootstrap import BootstrapError, read_chunk, run_bootstrap, server_method
from binlake.lake.engines import get_engine
from binlake.lake.ingest import IngestOptions
from binlake.lake.layout import LakeLayout
from binlake.quality.stages import run_ingest

DB = "wm_db"


def _setup(server) -> None:
    with server.connect() as conn, conn.cursor() as cur:
        cur.execute(f"DROP DATABASE IF EXISTS {DB}")
        cur.execute(f"CREATE DATABASE {DB}")
        cur.execute(f"CREATE TABLE {DB}.acct (id INT PRIMARY KEY, balance DECIMAL(10,2), note VARCHAR(20), "
                    "seen DATETIME(3))")
        cur.execute(f"INSERT INTO {DB}.acct SELECT seq, seq, CONCAT('n', seq), '2024-01-01 00:00:00.000' "
                    f"FROM {DB}.seq_1_to_3000")


def _writer(server, stop: threading.Event, seed: int) -> None:
    rng = random.Random(seed)
    with server.connect(DB) as conn, conn.cursor() as cur:
        while not stop.is_set():
            i = rng.randint(1, 3500)
            roll = rng.random()
            if roll < 0.45:
                cur.execute("UPDATE acct SET balance = balance + 1, note = 'u' WHERE id = %s", (i,))
            elif roll < 0.7:
                cur.execute("INSERT IGNORE INTO acct VALUES (%s, 0, 'new', NOW(3))", (i,))
            elif roll < 0.8:  # a key change, possibly across chunk boundaries
                cur.execute("UPDATE IGNORE acct SET id = %s WHERE id = %s", (rng.randint(1, 3500), i))
            else:
                cur.execute("DELETE FROM acct WHERE id = %s", (i,))


def _lake_rows(lake) -> dict:
    rows = get_engine().read(LakeLayout(str(lake)).current_path(DB, "acct")).to_pylist()
    return {r["id"]: (format(r["balance"], "f"), r["note"]) for r in rows}


def _server_rows(server) -> dict:
    with server.connect(DB) as conn, conn.cursor() as cur:
        cur.execute("SELECT id, balance, note FROM acct")
        return {i: (format(b, "f"), n) for i, b, n in cur.fetchall()}


@pytest.mark.parametrize("watermark_table", [f"{DB}_wm.marks", None])
def test_watermark_bootstrap_with_writes_running_then_ingest_equals_select(mariadb_servers, tmp_path,
                                                                          watermark_table) -> None:
    server = mariadb_servers.get("FULL")
    _setup(server)
    if watermark_table:
        with server.connect() as conn, conn.cursor() as cur:
            cur.execute(f"CREATE DATABASE IF NOT EXISTS {DB}_wm")
    stop = threading.Event()
    windows = []

    def slow_chunks(uri, chunks, batch):
        out = []
        for c in chunks:
            out.append(read_chunk(uri, c, batch))
            windows.append(out[-1])
            time.sleep(0.05)  # let the writer move between chunks
        return out

    first_file = server.binlog_files()[-1].name
    thread = threading.Thread(target=_writer, args=(server, stop, 5))
    thread.start()
    try:
        time.sleep(0.2)
        summary = run_bootstrap(server.uri, [(DB, "acct")], str(tmp_path / "lake"), chunk_rows=400,
                                executor=slow_chunks, method="watermark", watermark_table=watermark_table)
        time.sleep(0.3)
    finally:
        stop.set()
        thread.join()
    assert summary["method"] == "watermark"
    assert ("warning" in summary) == (watermark_table is None)
    assert summary["chunks"] >= 4  # about 3000 rows / 400; the writer's deletes before planning lower the count
    for res in windows:  # each chunk's rows are ordered at its low watermark, observed before its high one
        assert res.chunk.method == "watermark"
        assert (res.high_file, res.high_pos) >= (res.binlog_file, res.binlog_pos)
    # The writer ran between chunks: later chunks start later in the binlog.
    assert (windows[-1].binlog_file, windows[-1].binlog_pos) > (windows[0].binlog_file, windows[0].binlog_pos)
    assert (summary["resume_file"], summary["resume_pos"]) == (windows[0].binlog_file, windows[0].binlog_pos)
    files = [str(f) for f in server.flush_logs() if str(f) >= str(server.binlog_dir / first_file)]
    run_ingest(IngestOptions(lake=str(tmp_path / "lake"), files=files, databases={DB}))
    assert _lake_rows(tmp_path / "lake") == _server_rows(server)
    history = get_engine().read(LakeLayout(str(tmp_path / "lake")).history_path(DB, "acct"))
    assert history.column("_op").to_pylist().count("snapshot") == summary["rows"]


def test_method_resolution(mariadb_servers) -> None:
    server = mariadb_servers.get("FULL")
    assert server_method(server.uri, "auto") == ("snapshot", True)  # MariaDB reports snapshot positions
    assert server_method(server.uri, "watermark") == ("watermark", True)
    with pytest.raises(BootstrapError, match="expected one of"):
        server_method(server.uri, "flush-tables")


def test_watermark_changes_inside_the_window_win_over_chunk_rows(mariadb_servers, tmp_path, monkeypatch) -> None:
    """Deterministic window: right after each chunk's SELECT (inside its snapshot, before the high watermark)
    another session updates, deletes and re-keys rows of that chunk. The SELECT cannot see these changes; they
    are in the binlog after the low watermark, so ingest must apply them over the chunk's rows."""
    import binlake.lake.bootstrap as bootstrap

    server = mariadb_servers.get("FULL")
    _setup(server)
    original = bootstrap._stream_select
    touched = []

    def select_then_write(uri, database, sql, snapshot, batch_rows):
        batches = list(original(uri, database, sql, snapshot, batch_rows))  # the chunk's SELECT, read through
        ids = sorted(i for b in batches for i in b.column("c0").to_pylist())
        with server.connect(DB) as conn, conn.cursor() as other:
            other.execute("UPDATE acct SET note = 'after-select' WHERE id = %s", (ids[0],))
            other.execute("DELETE FROM acct WHERE id = %s", (ids[1],))
            other.execute("UPDATE acct SET id = id + 100000, note = 'moved' WHERE id = %s", (ids[2],))
        touched.extend(ids[:3])
        return iter(batches)

    monkeypatch.setattr(bootstrap, "_stream_select", select_then_write)
    first_file = server.binlog_files()[-1].name
    summary = run_bootstrap(server.uri, [(DB, "acct")], str(tmp_path / "lake"), chunk_rows=1000,
                            method="watermark")
    assert summary["chunks"] >= 3 and len(touched) == 3 * summary["chunks"]
    before_ingest = _lake_rows(tmp_path / "lake")
    assert before_ingest[touched[0]][1] == f"n{touched[0]}"  # the chunk's rows predate the window's changes
    files = [str(f) for f in server.flush_logs() if str(f) >= str(server.binlog_dir / first_file)]
    run_ingest(IngestOptions(lake=str(tmp_path / "lake"), files=files, databases={DB}))
    lake = _lake_rows(tmp_path / "lake")
    assert lake == _server_rows(server)
    assert lake[touched[0]][1] == "after-select" and touched[1] not in lake and lake[touched[2] + 100000][1] == "moved"


def test_cli_bootstrap_watermark(mariadb_servers, tmp_path, capsys) -> None:
    import json

    from binlake.cli import main

    server = mariadb_servers.get("FULL")
    _setup(server)
    with server.connect() as conn, conn.cursor() as cur:
        cur.execute(f"CREATE DATABASE IF NOT EXISTS {DB}_wm")
    assert main(["bootstrap", "--mysql", server.uri, "--tables", f"{DB}.acct", "--lake", str(tmp_path / "lake"),
                 "--method", "watermark", "--watermark-table", f"{DB}_wm.cli_marks", "--chunk-rows", "1000",
                 "--readers", "3"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert (summary["method"], summary["rows"]) == ("watermark", 3000)
    with server.connect() as conn, conn.cursor() as cur:  # one watermark row per chunk
        cur.execute(f"SELECT COUNT(*) FROM {DB}_wm.cli_marks")
        assert cur.fetchone()[0] == summary["chunks"]
    assert _lake_rows(tmp_path / "lake") == _server_rows(server)



def test_cli_bootstrap_in_process_leaves_pandas_unimported(mariadb_servers, tmp_path) -> None:
    """The in-process bootstrap makes pyarrow's first pandas check with pandas out of reach (pyarrow would import
    pandas, about 0.2 s of CPU, at the first `pa.array`); the lake still equals the server. A fresh interpreter:
    this one has pandas loaded already."""
    import json
    import os
    import subprocess
    import sys

    server = mariadb_servers.get("FULL")
    _setup(server)
    code = ("import json, sys\nfrom binlake.cli import main\n"
            "rc = main(sys.argv[1:])\nprint(json.dumps({'rc': rc, 'pandas': 'pandas' in sys.modules}))")
    done = subprocess.run([sys.executable, "-c", code, "bootstrap", "--mysql", server.uri, "--tables", f"{DB}.acct",
                           "--lake", str(tmp_path / "lake"), "--no-progress"], capture_output=True, text=True,
                          env=dict(os.environ), timeout=300)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout.strip().splitlines()[-1]) == {"rc": 0, "pandas": False}
    assert _lake_rows(tmp_path / "lake") == _server_rows(server)

def _full_rows(rows) -> dict:
    return {i: (format(b, "f"), n, s.replace(tzinfo=None) if s else s) for i, b, n, s in rows}


@pytest.mark.parametrize(("path", "method"), [("pool", "snapshot"), ("pool", "watermark"), ("spark", "snapshot"),
                                              ("spark", "watermark")])
def test_parallel_bootstrap_with_writes_running_then_ingest_equals_select(mariadb_servers, tmp_path, request, path,
                                                                         method) -> None:
    """Reader threads (or Spark tasks writing Parquet into the lake) read chunks while a writer inserts, updates,
    deletes and moves keys; progress counts committed chunks and rows; after an ingest from the recorded position
    the lake equals SELECT *."""
    server = mariadb_servers.get("FULL")
    _setup(server)
    watermark_table = f"{DB}_wm.par" if method == "watermark" else None
    if watermark_table:
        with server.connect() as conn, conn.cursor() as cur:
            cur.execute(f"CREATE DATABASE IF NOT EXISTS {DB}_wm")
    stager = None
    if path == "spark":
        from binlake.spark import bootstrap_stager

        stager = bootstrap_stager(request.getfixturevalue("spark"))
    calls = []

    def progress(done, total, what):
        calls.append((done, total, what))
        time.sleep(0.02)  # slower commits: readers run ahead, the writer keeps writing

    first_file = server.binlog_files()[-1].name
    stop = threading.Event()
    thread = threading.Thread(target=_writer, args=(server, stop, 11 if path == "pool" else 12))
    thread.start()
    try:
        time.sleep(0.2)
        summary = run_bootstrap(server.uri, [(DB, "acct")], str(tmp_path / "lake"), chunk_rows=250, readers=3,
                                part_rows=90, method=method, watermark_table=watermark_table, stager=stager,
                                progress=progress)
        time.sleep(0.3)
    finally:
        stop.set()
        thread.join()
    assert summary["method"] == method and summary["chunks"] >= 8
    assert summary["commits"] >= 2  # parts gathered per commit, more than one commit
    # Progress counts committed chunks, once each, up to all of them; rows committed add up to the rows read.
    assert [c[0] for c in calls] == list(range(1, summary["chunks"] + 1))
    assert calls[-1][2] == f"chunks committed, {summary['rows']:,} rows"
    layout = LakeLayout(str(tmp_path / "lake"))
    history = get_engine().read(layout.history_path(DB, "acct"))
    assert history.num_rows == summary["rows"] and set(history.column("_op").to_pylist()) == {"snapshot"}
    files = [str(f) for f in server.flush_logs() if str(f) >= str(server.binlog_dir / first_file)]
    run_ingest(IngestOptions(lake=str(tmp_path / "lake"), files=files, databases={DB}))
    lake = get_engine().read(layout.current_path(DB, "acct"))
    with server.connect(DB) as conn, conn.cursor() as cur:
        cur.execute("SELECT id, balance, note, seen FROM acct")
        expected = _full_rows(cur.fetchall())
    got = _full_rows((r["id"], r["balance"], r["note"], r["seen"]) for r in lake.to_pylist())
    assert got == expected
    assert not (tmp_path / "lake" / "_binlake" / "staging").exists() or not any(
        (tmp_path / "lake" / "_binlake" / "staging").rglob("*.parquet"))


def test_bootstrap_again_over_an_existing_lake_merges(mariadb_servers, tmp_path) -> None:
    """A second bootstrap finds the current table there: its rows are staged and merged (newer snapshot rows win,
    as binlog changes would), history appended; the run's versions stay above the first run's."""
    server = mariadb_servers.get("FULL")
    _setup(server)
    lake = str(tmp_path / "lake")
    first = run_bootstrap(server.uri, [(DB, "acct")], lake, chunk_rows=700, part_rows=300)
    with server.connect(DB) as conn, conn.cursor() as cur:
        cur.execute("UPDATE acct SET note = 'second', balance = balance * 2 WHERE id % 7 = 0")
        cur.execute("INSERT INTO acct VALUES (5000, 1.5, 'new', NOW(3))")
    first_file = server.binlog_files()[-1].name
    second = run_bootstrap(server.uri, [(DB, "acct")], lake, chunk_rows=400, part_rows=150, readers=3)
    assert second["batch"] > first["batch"] and second["rows"] == 3001
    layout = LakeLayout(lake)
    assert _lake_rows(tmp_path / "lake") == _server_rows(server)
    assert get_engine().read(layout.history_path(DB, "acct")).num_rows == 3000 + 3001
    with server.connect(DB) as conn, conn.cursor() as cur:
        cur.execute("DELETE FROM acct WHERE id < 10")
    files = [str(f) for f in server.flush_logs() if str(f) >= str(server.binlog_dir / first_file)]
    run_ingest(IngestOptions(lake=lake, files=files, databases={DB}))
    assert _lake_rows(tmp_path / "lake") == _server_rows(server)


def test_spark_bootstrap_task_failure_is_one_line_naming_the_chunk(mariadb_servers, tmp_path, spark) -> None:
    """A chunk whose read fails in its Spark task (here: the table is gone when the task runs) stops the bootstrap
    with one line naming the table and key range; nothing is recorded for ingest to resume from."""
    from binlake.lake.bootstrap import plan_chunks
    from binlake.spark import SparkTaskFailed, bootstrap_stager

    server = mariadb_servers.get("FULL")
    _setup(server)
    chunks = plan_chunks(server.uri, [(DB, "acct")], 1000)
    with server.connect(DB) as conn, conn.cursor() as cur:
        cur.execute("RENAME TABLE acct TO acct_gone")
    try:
        stager = bootstrap_stager(spark)
        with pytest.raises(SparkTaskFailed) as failed:
            stager(server.uri, chunks, 0, _plans(tmp_path, chunks), 1000)
    finally:
        with server.connect(DB) as conn, conn.cursor() as cur:
            cur.execute("RENAME TABLE acct_gone TO acct")
    text = str(failed.value)
    assert "\n" not in text and text.startswith(f"Spark bootstrap task failed: {DB}.acct [")
    assert f"Table '{DB}.acct' doesn't exist" in text  # the server's error, from the chunk's reader


def _plans(tmp_path, chunks):
    from binlake.lake.bootstrap import plan_tables

    return plan_tables(get_engine(), LakeLayout(str(tmp_path / "lake")), str(tmp_path / "lake"), chunks, 0)


@pytest.mark.parametrize("method", ["snapshot", "watermark"])
def test_chunks_are_read_one_ahead_and_a_stopped_reader_closes_both(mariadb_servers, method) -> None:
    """chunk_parts starts the next chunk's SELECT once the current chunk's first part is in (the server sends it
    while this one is worked on); every chunk's rows and position are the ones read alone; a consumer that stops
    after the first part leaves no reader open (the watermark method's connections closed)."""
    from binlake.lake.bootstrap import ChunkReader, chunk_parts, plan_chunks

    server = mariadb_servers.get("FULL")
    _setup(server)
    chunks = plan_chunks(server.uri, [(DB, "acct")], 700, method)
    assert len(chunks) >= 4
    readers = [(i, ChunkReader(server.uri, c, 1, 300)) for i, c in enumerate(chunks)]
    seen: dict[int, list[int]] = {}
    for i, _reader, part in chunk_parts(iter(readers)):
        if part is None:
            continue
        if i + 1 < len(readers):
            assert readers[i + 1][1]._stream is not None  # started while chunk i's parts are handed out
        seen.setdefault(i, []).extend(part.column("id").to_pylist())
    with server.connect(DB) as conn, conn.cursor() as cur:
        cur.execute("SELECT id FROM acct ORDER BY id")
        assert sorted(k for ids in seen.values() for k in ids) == [r[0] for r in cur.fetchall()]
    for i, reader in readers:
        lo, hi = reader.chunk.lower, reader.chunk.upper
        assert all((lo is None or k >= lo) and (hi is None or k < hi) for k in seen[i])
        assert reader.result.rows == len(seen[i]) and reader.result.binlog_file and reader.result.binlog_pos > 0
        if method == "watermark":
            assert reader.result.high_pos is not None

    fresh = [(i, ChunkReader(server.uri, c, 1, 300)) for i, c in enumerate(chunks)]
    parts = chunk_parts(iter(fresh))
    first = next(parts)
    assert first[0] == 0 and first[2].num_rows and fresh[1][1]._stream is not None
    parts.close()
    assert all(r._conn is None for _, r in fresh)


def test_a_table_of_many_chunks_is_planned_from_the_server_estimate(mariadb_servers, tmp_path) -> None:
    """From ESTIMATED_CHUNKS chunks' rows on, the server's row estimate (no COUNT(*)) sizes the chunks: they still
    cover the whole key range, and the bootstrap reads every row once."""
    from binlake.lake.bootstrap import ESTIMATED_CHUNKS, plan_chunks

    server = mariadb_servers.get("FULL")
    rng = random.Random(4)
    with server.connect() as conn, conn.cursor() as cur:
        cur.execute(f"DROP DATABASE IF EXISTS {DB}")
        cur.execute(f"CREATE DATABASE {DB}")
        cur.execute(f"CREATE TABLE {DB}.big (id BIGINT PRIMARY KEY, v INT)")
        ids = rng.sample(range(-10**6, 10**6), 5000)  # sparse, negative keys too
        cur.executemany(f"INSERT INTO {DB}.big VALUES (%s, %s)", [(i, i % 7) for i in ids])
        cur.execute(f"ANALYZE TABLE {DB}.big")
        cur.fetchall()
        cur.execute("SELECT TABLE_ROWS FROM information_schema.TABLES WHERE TABLE_SCHEMA = %s AND TABLE_NAME = 'big'",
                    (DB,))
        estimate = cur.fetchone()[0]
    assert estimate > 0
    chunk_rows = max(1, estimate // (2 * ESTIMATED_CHUNKS))

    def rows_read() -> int:
        with server.connect() as conn, conn.cursor() as cur:
            cur.execute("SHOW GLOBAL STATUS LIKE 'Handler_read%'")  # rows the engine handed the server
            return sum(int(v) for _, v in cur.fetchall())

    before = rows_read()
    chunks = plan_chunks(server.uri, [(DB, "big")], chunk_rows)
    assert rows_read() - before < 100  # MIN and MAX from the key's ends, no COUNT(*) over the 5000 rows
    assert len(chunks) >= ESTIMATED_CHUNKS
    assert chunks[0].lower is None and chunks[-1].upper is None
    assert all(a.upper == b.lower for a, b in itertools.pairwise(chunks))
    summary = run_bootstrap(server.uri, [(DB, "big")], str(tmp_path / "lake"), chunk_rows=chunk_rows)
    assert summary["rows"] == 5000 and summary["chunks"] == len(chunks)
    lake = get_engine().read(LakeLayout(str(tmp_path / "lake")).current_path(DB, "big"))
    assert sorted(lake.column("id").to_pylist()) == sorted(ids)
