"""Progress reporting hooked into real work: ingest's in-process executor reports bytes decoded (and decodes the
same as the plain executor), `stats`/`decode` report file positions, and the commands keep stderr quiet on short
non-terminal runs while still printing their messages."""

from __future__ import annotations

import os

import binlake.lake.decode_task as decode_task
from binlake.binlog.api import compute_stats, decode_to
from binlake.cli import main
from binlake.lake.ingest import local_executor


def _binlog(server, db: str) -> str:
    first = server.binlog_files()[-1]
    with server.connect(db) as conn, conn.cursor() as cur:
        cur.execute("CREATE TABLE t (id INT PRIMARY KEY, v VARCHAR(200))")
        for i in range(60):
            cur.execute("INSERT INTO t VALUES (%s, %s)", (i, "x" * 150))
    server.flush_logs()
    return str(first)


def test_tracked_executor_reports_bytes_and_decodes_like_the_local_one(mariadb_full, fresh_database,
                                                                       monkeypatch) -> None:
    path = _binlog(mariadb_full, fresh_database(mariadb_full))
    size = os.path.getsize(path)
    name = path.rsplit("/", 1)[1]
    monkeypatch.setattr(decode_task, "PROGRESS_BYTES", 1)  # report after every transaction
    reports: list[tuple[int, int]] = []
    tasks = [(path, name, 1, 4, None)]
    tracked = decode_task.tracked_executor(lambda done, total: reports.append((done, total)))(tasks, 0, None,
                                                                                              (None, None))
    plain = local_executor(tasks, 0, None, (None, None))
    assert {total for _, total in reports} == {size - 4}
    done = [d for d, _ in reports]
    assert done == sorted(done) and done[0] == 0 and done[-1] == size - 4
    assert len(done) > 60  # one per committed transaction, at least
    assert [t.counts for t in tracked] == [t.counts for t in plain]
    assert ([decode_task.read_ipc(b) for r in tracked for tr in r.tables.values() for b in tr.history_ipc] ==
            [decode_task.read_ipc(b) for r in plain for tr in r.tables.values() for b in tr.history_ipc])


def test_stats_and_decode_report_positions(mariadb_full, fresh_database, tmp_path) -> None:
    path = _binlog(mariadb_full, fresh_database(mariadb_full))
    size = os.path.getsize(path)
    seen: list[tuple[str, int]] = []
    compute_stats([path], progress=lambda f, p: seen.append((f, p)))
    positions = [p for _, p in seen]
    assert seen and {f for f, _ in seen} == {path.rsplit("/", 1)[1]}
    assert positions == sorted(positions) and 4 <= positions[-1] < size
    seen.clear()
    with open(tmp_path / "out.jsonl", "w") as out:
        n, _ = decode_to([path], out, "jsonl", progress=lambda f, p: seen.append((f, p)))
    assert n == 60 and seen and seen[0][1] < size


def test_cli_runs_stay_quiet_on_short_non_terminal_runs(mariadb_full, fresh_database, tmp_path, capsys) -> None:
    db = fresh_database(mariadb_full)
    path = _binlog(mariadb_full, db)
    assert main(["stats", path]) == 0
    assert capsys.readouterr().err == ""
    assert main(["decode", "--output", str(tmp_path / "o.jsonl"), path]) == 0
    assert capsys.readouterr().err.splitlines() == [f"binlake: wrote 60 records to {tmp_path / 'o.jsonl'}"]
    assert main(["ingest", "--source", f"local:{path}", "--lake", str(tmp_path / "lake"), "--databases", db,
                 "--no-gates"]) == 0
    captured = capsys.readouterr()
    assert "[ingest] decoding 1 range(s)" in captured.err
    assert "ingest decode" not in captured.err  # too short for a periodic line
    assert "insert 60" in captured.out
