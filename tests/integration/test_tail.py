"""`binlake tail` against a private MariaDB: the landed files are byte-identical to the server's (`cmp`) while a
writer runs, across kill -9 of the tail at seeded random moments, FLUSH BINARY LOGS, a server restart, a KILL of
the replica connection and an idle server; a purged start is one clear line; `ingest --follow` over the landing
ends equal to SELECT *."""

from __future__ import annotations

import os
import random
import re
import signal
import struct
import subprocess
import sys
import threading
import time
import zlib
from decimal import Decimal
from pathlib import Path

import pytest

from binlake.binlog.constants import ET, EventType
from binlake.binlog.stream import EventStream, open_binlog
from binlake.lake.engines import get_engine
from binlake.lake.layout import LakeLayout
from binlake.sources.tail import Boundaries, Tail, _checksum_len, _events
from binlake.testing.mariadb import PrivateMariaDB, find_server_binary

ROOT = Path(__file__).resolve().parents[2]
DB = "tail_db"

pytestmark = pytest.mark.skipif(find_server_binary() is None,
                                reason="no mariadbd/mysqld binary installed (apt-get install -y mariadb-server)")


@pytest.fixture
def server(tmp_path):
    db = PrivateMariaDB.start(base_dir=tmp_path / "server", extra_args=("--gtid-strict-mode=ON",))
    try:
        yield db
    finally:
        db.stop()


def _schema(db: PrivateMariaDB) -> None:
    with db.connect() as conn, conn.cursor() as cur:
        cur.execute(f"CREATE DATABASE {DB}")
        cur.execute(f"CREATE TABLE {DB}.items (id INT PRIMARY KEY, name VARCHAR(300), qty BIGINT, body TEXT)")
        cur.execute(f"CREATE TABLE {DB}.pairs (a INT, b VARCHAR(12), amount DECIMAL(12,2), PRIMARY KEY (a, b))")


class Writer:
    """Seeded random transactions (1-8 statements, inserts/updates/deletes/key moves, rows up to ~30 KB) and,
    when asked, FLUSH BINARY LOGS now and then; runs until stopped."""

    def __init__(self, db: PrivateMariaDB, seed: int, flush_every: int = 0) -> None:
        self.db, self.rng, self.flush_every = db, random.Random(seed), flush_every
        self.stop = threading.Event()
        self.commits = 0
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> Writer:
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop.set()
        self.thread.join(60)

    def wait_commits(self, n: int) -> None:
        target = self.commits + n
        while self.commits < target and self.thread.is_alive():
            time.sleep(0.05)

    def _run(self) -> None:
        try:
            self._loop()
        except BaseException as exc:  # reported by the test
            self.error = exc

    def _loop(self) -> None:
        rng = self.rng
        conn = None
        while not self.stop.is_set():
            try:
                if conn is None:
                    conn = self.db.connect(DB)
                self.transaction(conn.cursor(), rng)
                self.commits += 1
                if self.flush_every and rng.randrange(self.flush_every) == 0:
                    conn.cursor().execute("FLUSH BINARY LOGS")
            except Exception as exc:
                if type(exc).__module__.startswith("pymysql"):  # the server restarts under the writer
                    conn = None
                    time.sleep(0.2)
                    continue
                raise

    @staticmethod
    def transaction(cur, rng: random.Random) -> None:
        cur.execute("BEGIN")
        for _ in range(rng.randint(1, 8)):
            roll, i = rng.random(), rng.randint(1, 400)
            if roll < 0.35:
                body = "x" * rng.choice((0, 10, 200, 30_000))
                cur.execute("REPLACE INTO items VALUES (%s, %s, %s, %s)",
                            (i, f"n{rng.random()}", rng.randint(-2**62, 2**62), body))
            elif roll < 0.55:
                cur.execute("UPDATE items SET qty = qty + 1, name = %s WHERE id = %s", (f"u{i}", i))
            elif roll < 0.65:
                cur.execute("UPDATE IGNORE items SET id = %s WHERE id = %s", (rng.randint(1, 400), i))
            elif roll < 0.75:
                cur.execute("DELETE FROM items WHERE id = %s", (i,))
            elif roll < 0.9:
                cur.execute("INSERT INTO pairs VALUES (%s, %s, %s) ON DUPLICATE KEY UPDATE amount = amount + 1",
                            (i % 50, rng.choice("abcdef") * rng.randint(1, 12), Decimal(rng.randint(0, 10**8)) / 100))
            else:
                cur.execute("DELETE FROM pairs WHERE a = %s", (i % 50,))
        cur.execute("ROLLBACK" if rng.random() < 0.05 else "COMMIT")


def _tail_cmd(db: PrivateMariaDB, landing: Path, *extra: str) -> list[str]:
    return [sys.executable, "-m", "binlake.cli", "tail", "--mysql", db.uri, "--landing", str(landing),
            "--heartbeat", "1", *extra]


def _env() -> dict:
    return {**os.environ, "PYTHONPATH": str(ROOT)}


def _wait_identical(db: PrivateMariaDB, landing: Path, timeout: float = 120.0,
                    crashed: str | None = None) -> list[Path]:
    """Wait until every server binlog is landed at its full size, then cmp each pair; returns the files. The file
    a server crash left behind (`crashed`) is checked by `_committed_prefix` instead."""
    deadline = time.monotonic() + timeout
    while True:
        # Bytes, not sizes: MariaDB appends a Binlog_checkpoint event on its own after a rotation, so a file can
        # grow after the writer stops; the tail is still running and lands it.
        files = db.binlog_files()
        landed = {f.name: (landing / f.name).read_bytes() if (landing / f.name).exists() else None for f in files}
        if all(landed[f.name] is not None if f.name == crashed else landed[f.name] == f.read_bytes()
               for f in files) or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    for f in files:
        if f.name == crashed:
            _committed_prefix(f, landing / f.name)
            continue
        done = subprocess.run(["cmp", str(f), str(landing / f.name)], capture_output=True, text=True)
        assert done.returncode == 0, f"{f.name}: {done.stdout}{done.stderr}"
    extra = {p.name for p in landing.iterdir() if p.is_file()} - {f.name for f in files}
    assert not extra, f"landed files the server does not have: {extra}"
    return files


def _wait_checkpointed(db: PrivateMariaDB, name: str, timeout: float = 60.0) -> None:
    """Wait until MariaDB has written the Binlog_checkpoint naming `name` into it: after a rotation the server
    appends that event on its own once InnoDB no longer needs the older file, so until then `name` can grow."""
    deadline = time.monotonic() + timeout
    with db.connect() as conn, conn.cursor() as cur:
        while time.monotonic() < deadline:
            cur.execute(f"SHOW BINLOG EVENTS IN '{name}'")
            if any(row[2] == "Binlog_checkpoint" and name in row[5] for row in cur.fetchall()):
                return
            time.sleep(0.1)
    pytest.fail(f"{name}: no Binlog_checkpoint naming it within {timeout:.0f} s")


def _committed_prefix(server_file: Path, landed_file: Path) -> None:
    """A file the server crashed in: the landed copy is the server's up to a transaction end, and what the server
    has beyond it is never committed: whole events with no transaction end, then maybe the partial event a kill
    mid-write leaves (the dump cannot send it)."""
    server_data, landed = server_file.read_bytes(), landed_file.read_bytes()
    assert server_data[:len(landed)] == landed, f"{landed_file.name}: the landed copy differs from the server's"
    if len(landed) == len(server_data):
        return
    checksum = _checksum_len(server_data)
    track = Boundaries(in_txn=False)
    end = len(landed)
    for pos, etype, _flags, ev in _events(server_data, len(landed)):
        assert not track.feed(etype, ev, checksum), (
            f"{server_file.name}: a transaction ends at {pos + len(ev)}, after the landed end {len(landed)}")
        end = pos + len(ev)
    assert track.in_txn or end < len(server_data)


def _landed_bytes(landing: Path) -> int:
    return sum(p.stat().st_size for p in landing.iterdir()) if landing.is_dir() else 0


def _kill_after_progress(tail: subprocess.Popen, landing: Path, rng: random.Random) -> str:
    """Wait until the tail has landed something new, then kill -9 it a random moment later; its stderr."""
    before = _landed_bytes(landing)
    deadline = time.monotonic() + 120
    while _landed_bytes(landing) <= before and tail.poll() is None and time.monotonic() < deadline:
        time.sleep(0.01)
    time.sleep(rng.random() * 0.4)
    tail.send_signal(signal.SIGKILL)
    return tail.communicate()[1]


def _check_restarts(logs: list[str], files: list[Path]) -> None:
    """Every restart after the first start resumes from what the landing holds: by MariaDB GTID state when its
    last file is open mid-way, by position at a closed file's end or a fresh file's header (which of them depends
    on where the kill fell, so neither is required); never from the first file's start again, never before an
    earlier restart's start, and by position only where no GTID state could say where."""
    starts = [re.search(r"dump from (GTID state \S+|(\S+):(\d+))", log) for log in logs[1:]]
    assert all(starts), "every restart names its start: " + "".join(logs)
    assert not [m for m in starts if m[0] == "dump from mysql-bin.000001:4"], "restarts resume from the landing: " \
        + "".join(logs)
    positions = [(m[2], int(m[3])) for m in starts if m[2] is not None]
    assert positions == sorted(positions), "restarts never go back: " + "".join(logs)
    by_name = {f.name: f for f in files}
    for name, pos in positions:  # a closed file's end, or a file whose landed part held no transaction yet
        if pos != by_name[name].stat().st_size:  # (MariaDB writes its GTID state per transaction)
            with open_binlog(str(by_name[name])) as fh:
                gtids = [ev.pos for ev in EventStream(fh, name) if ev.pos < pos and ev.type == ET.MARIA_GTID]
            assert not gtids, f"restart by position at {name}:{pos} after GTID events at {gtids}: " + "".join(logs)
    assert not [log for log in logs if "Traceback" in log], "".join(logs)


def _server_rows(db: PrivateMariaDB) -> dict:
    with db.connect(DB) as conn, conn.cursor() as cur:
        cur.execute("SELECT id, name, qty, body FROM items")
        items = {r[0]: tuple(r[1:]) for r in cur.fetchall()}
        cur.execute("SELECT a, b, amount FROM pairs")
        pairs = {(r[0], r[1]): r[2] for r in cur.fetchall()}
    return {"items": items, "pairs": pairs}


def _lake_rows(lake: Path) -> dict:
    engine, layout = get_engine(), LakeLayout(str(lake))
    out = {}
    for table in ("items", "pairs"):
        path = layout.current_path(DB, table)
        out[table] = engine.read(path).to_pylist() if engine.exists(path) else []
    return {"items": {r["id"]: (r["name"], r["qty"], r["body"]) for r in out["items"]},
            "pairs": {(r["a"], r["b"]): r["amount"] for r in out["pairs"]}}


@pytest.mark.slow  # about 90 s: 11 tail processes, an ingest --follow process and a writer
def test_kill9_at_random_moments_gtid_resume_and_ingest_follow_equals_select(server, tmp_path):
    """10 kill -9 of the tail at seeded random moments while a writer runs (rotations too); every restart
    resumes by MariaDB GTID state (strict mode); the files stay byte-identical and `ingest --follow` running all
    along ends with the lake equal to SELECT *."""
    landing, lake = tmp_path / "landing", tmp_path / "lake"
    _schema(server)
    rng = random.Random(19)
    logs = []
    follow = subprocess.Popen([sys.executable, "-m", "binlake.cli", "ingest", "--follow", "--interval", "1",
                               "--source", str(landing), "--lake", str(lake), "--databases", DB, "--no-progress",
                               "--no-gates"], env=_env(), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    tail = None
    try:
        with Writer(server, seed=7, flush_every=40) as writer:
            for _kill in range(10):
                tail = subprocess.Popen(_tail_cmd(server, landing), env=_env(), stdout=subprocess.DEVNULL,
                                        stderr=subprocess.PIPE, text=True)
                logs.append(_kill_after_progress(tail, landing, rng))
            tail = subprocess.Popen(_tail_cmd(server, landing), env=_env(), stdout=subprocess.DEVNULL,
                                    stderr=subprocess.PIPE, text=True)
            writer.wait_commits(30)
        assert writer.error is None, writer.error
        files = _wait_identical(server, landing)
        assert len(files) >= 3, "the writer's FLUSH BINARY LOGS rotated the binlog"
        want = _server_rows(server)
        deadline = time.monotonic() + 300
        while _lake_rows(lake) != want and time.monotonic() < deadline and follow.poll() is None:
            time.sleep(1)
        assert follow.poll() is None, follow.communicate()[1].decode()
        assert _lake_rows(lake) == want
    finally:
        for proc in (tail, follow):
            if proc is not None and proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
                try:
                    proc.communicate(timeout=30)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.communicate()
    _check_restarts(logs, files)


def test_position_resume_after_kills(server, tmp_path):
    """--resume-by position: FILE:POS restarts (after kill -9 at seeded moments) keep the files identical."""
    landing = tmp_path / "landing"
    _schema(server)
    rng = random.Random(23)
    logs = []
    with Writer(server, seed=11, flush_every=25) as writer:
        for _kill in range(4):
            tail = subprocess.Popen(_tail_cmd(server, landing, "--resume-by", "position"), env=_env(),
                                    stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
            logs.append(_kill_after_progress(tail, landing, rng))
        tail = subprocess.Popen(_tail_cmd(server, landing, "--resume-by", "position"), env=_env(),
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        writer.wait_commits(20)
    try:
        assert writer.error is None, writer.error
        _wait_identical(server, landing)
    finally:
        tail.send_signal(signal.SIGTERM)
        out, err = tail.communicate(timeout=30)
    assert tail.returncode == 0, err
    assert '"events"' in out
    assert not any("GTID state" in log for log in logs)
    assert sum("dump from mysql-bin." in log for log in logs) >= 4


def test_flush_restart_kill_connection_and_idle_heartbeats(server, tmp_path):
    """In one tail session: FLUSH BINARY LOGS, a clean server restart (STOP event, new file), a KILL of the
    replica connection from the server side, and an idle server kept alive by heartbeats; identical files."""
    landing = tmp_path / "landing"
    _schema(server)
    stop = threading.Event()
    messages: list[str] = []
    tail = Tail(server.uri, landing, server_id=4242, heartbeat=0.5, log=messages.append, stop=stop.is_set)
    runner = threading.Thread(target=tail.run, daemon=True)
    runner.start()
    rng = random.Random(5)
    try:
        with server.connect(DB) as conn:
            for _ in range(30):
                Writer.transaction(conn.cursor(), rng)
            conn.cursor().execute("FLUSH BINARY LOGS")
            for _ in range(30):
                Writer.transaction(conn.cursor(), rng)
        _wait_identical(server, landing)
        server.restart()
        with server.connect(DB) as conn:
            for _ in range(20):
                Writer.transaction(conn.cursor(), rng)
        _wait_identical(server, landing)
        connects = tail.stats.connects
        with server.connect() as conn, conn.cursor() as cur:
            cur.execute("SELECT id FROM information_schema.processlist WHERE command LIKE 'Binlog Dump%'")
            ids = [r[0] for r in cur.fetchall()]
            assert ids, "the tail's dump thread is in the server's process list"
            for i in ids:
                cur.execute(f"KILL {i}")
        with server.connect(DB) as conn:
            for _ in range(20):
                Writer.transaction(conn.cursor(), rng)
        _wait_identical(server, landing)
        assert tail.stats.connects > connects
        # Idle: only heartbeats arrive; the connection is not treated as dead (no reconnect).
        connects, beats = tail.stats.connects, tail.stats.heartbeats
        while tail.stats.heartbeats < beats + 6:
            time.sleep(0.1)
        assert tail.stats.connects == connects
        with server.connect(DB) as conn:
            Writer.transaction(conn.cursor(), rng)
        files = _wait_identical(server, landing)
    finally:
        stop.set()
        runner.join(30)
    assert len(files) >= 3
    with open(landing / files[1].name, "rb") as fh:  # closed by the restart: STOP at the end, in-use flag clear
        data = fh.read()
    assert data[4 + 17] & 1 == 0
    pos, last_type = 4, None
    while pos < len(data):
        last_type = data[pos + 4]
        pos += int.from_bytes(data[pos + 9:pos + 13], "little")
    assert last_type == 3  # STOP


def test_purged_start_is_one_clear_line(server, tmp_path):
    landing = tmp_path / "landing"
    _schema(server)
    with server.connect() as conn, conn.cursor() as cur:
        for _ in range(3):
            cur.execute(f"INSERT INTO {DB}.items VALUES ({random.randint(1, 10**6)}, 'p', 1, '')")
            cur.execute("FLUSH BINARY LOGS")
        for _ in range(600):  # MariaDB keeps a file until InnoDB's binlog checkpoint has moved past it
            cur.execute("PURGE BINARY LOGS TO 'mysql-bin.000003'")
            cur.execute("SHOW BINARY LOGS")
            if cur.fetchone()[0] == "mysql-bin.000003":
                break
            time.sleep(0.1)
        else:
            pytest.fail("PURGE BINARY LOGS did not remove mysql-bin.000001 and 000002")
    done = subprocess.run(_tail_cmd(server, landing, "--from", "mysql-bin.000001"), env=_env(),
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 6
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 + sum(line.startswith("[tail]") for line in lines), done.stderr
    error = next(line for line in lines if not line.startswith("[tail]"))
    assert "mysql-bin.000001:4" in error and "purged" in error and "bootstrap" in error
    assert "mysql-bin.000003" in error  # what the server still has
    # A landing that ends in a purged file: the resume names the landed position.
    landing2 = tmp_path / "landing2"
    landing2.mkdir()
    (landing2 / "mysql-bin.000002").write_bytes(b"\xfebin")  # a tail killed right after the magic
    done = subprocess.run(_tail_cmd(server, landing2), env=_env(), capture_output=True, text=True, timeout=120)
    assert done.returncode == 6 and "binlog at mysql-bin.000002:4 (purged" in done.stderr, done.stderr


def test_gtid_start_lands_the_file_holding_it_whole(server, tmp_path):
    """--gtid into an empty landing: the server's file holding that GTID state is landed from its start (so it
    is byte-identical), and every later file after it; earlier files are not landed."""
    landing = tmp_path / "landing"
    _schema(server)
    rng = random.Random(31)
    with server.connect(DB) as conn:
        for _ in range(10):
            Writer.transaction(conn.cursor(), rng)
        conn.cursor().execute("FLUSH BINARY LOGS")
        for _ in range(5):
            Writer.transaction(conn.cursor(), rng)
        cur = conn.cursor()
        cur.execute("SELECT @@gtid_binlog_pos")
        state = cur.fetchone()[0]
        for _ in range(5):
            Writer.transaction(conn.cursor(), rng)
        conn.cursor().execute("FLUSH BINARY LOGS")
        for _ in range(5):
            Writer.transaction(conn.cursor(), rng)
    files = server.binlog_files()
    assert len(files) == 3
    _wait_checkpointed(server, files[-1].name)  # the server's files no longer change: the tail is stopped below
    tail = subprocess.Popen(_tail_cmd(server, landing, "--gtid", state), env=_env(), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and tail.poll() is None:
            got = {p.name: p.stat().st_size for p in landing.glob("mysql-bin.*")} if landing.is_dir() else {}
            if got == {f.name: f.stat().st_size for f in files[1:]}:
                break
            time.sleep(0.2)
    finally:
        tail.send_signal(signal.SIGTERM)
        _out, err = tail.communicate(timeout=30)
    assert sorted(p.name for p in landing.glob("mysql-bin.*")) == [f.name for f in files[1:]], err
    for f in files[1:]:
        assert (landing / f.name).read_bytes() == f.read_bytes(), f.name
    assert f"GTID state {state}" in err


def test_server_crash_during_the_tail(server, tmp_path):
    """kill -9 of the server while a writer runs: the server restarts with a new file and leaves the crashed one
    flagged in use; the landed files are byte-identical to the server's, flags included."""
    landing = tmp_path / "landing"
    _schema(server)
    stop = threading.Event()
    tail = Tail(server.uri, landing, heartbeat=0.5, stop=stop.is_set)
    runner = threading.Thread(target=tail.run, daemon=True)
    runner.start()
    try:
        with Writer(server, seed=3) as writer:
            writer.wait_commits(40)
            server.process.kill()
            server.process.wait()
            crashed = server.binlog_files()[-1]
            server.process = subprocess.Popen(server.args, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
            server._wait(60)
            writer.wait_commits(40)
        assert writer.error is None, writer.error
        files = _wait_identical(server, landing, crashed=crashed.name)
    finally:
        stop.set()
        runner.join(30)
    assert files[-1] != crashed
    assert crashed.read_bytes()[4 + 17] & 1 == 1  # the server leaves it in use
    assert (landing / crashed.name).read_bytes()[4 + 17] & 1 == 1  # and so does the landed copy


def _append_crashed_write(binlog: Path) -> int:
    """Leave what a kill mid-write leaves: the whole events of a transaction the server never committed (a copy of
    the file's last transaction under the next GTID, without its XID), then half of its last event. Returns the
    file's committed size."""
    data = bytearray(binlog.read_bytes())
    checksum = _checksum_len(bytes(data))
    track, begin, events = Boundaries(), 4, []
    for pos, etype, _flags, ev in _events(bytes(data)):
        events.append((pos, etype, ev))
        if track.feed(etype, ev, checksum):
            last, begin = [e for e in events if e[0] >= begin], pos + len(ev)
    committed = len(data)
    assert begin == committed and last[0][1] == EventType.MARIA_GTID and last[-1][1] == EventType.XID
    pos = committed
    for i, (_p, etype, ev) in enumerate(last[:-1]):
        ev = bytearray(ev)
        if etype == EventType.MARIA_GTID:
            seq = struct.unpack_from("<Q", ev, 19)[0]
            struct.pack_into("<Q", ev, 19, seq + 1)
        struct.pack_into("<I", ev, 13, pos + len(ev))
        if checksum:
            struct.pack_into("<I", ev, len(ev) - 4, zlib.crc32(bytes(ev[:-4])))
        data += ev if i < len(last) - 2 else ev[:len(ev) // 2]  # the last one is cut in the middle
        pos += len(ev)
    binlog.write_bytes(bytes(data))
    return committed


def test_a_file_the_server_crashed_in_mid_event_is_landed_to_its_last_commit(server, tmp_path):
    """The server killed in the middle of writing an event: its file ends in a partial event that no dump can
    send (the server says the binlog is truncated in the middle of an event). The tail lands the file up to its
    last committed transaction and goes on with the server's next file; nothing committed is skipped."""
    landing = tmp_path / "landing"
    _schema(server)
    messages: list[str] = []
    stop = threading.Event()
    tail = Tail(server.uri, landing, heartbeat=0.5, stop=stop.is_set, log=messages.append)
    errors: list[BaseException] = []

    def run() -> None:
        try:
            tail.run()
        except BaseException as exc:  # reported below
            errors.append(exc)

    runner = threading.Thread(target=run, daemon=True)
    try:
        runner.start()
        with Writer(server, seed=11) as writer:
            writer.wait_commits(20)
        assert writer.error is None, writer.error
        _wait_identical(server, landing)
        server.process.kill()
        server.process.wait()
        crashed = server.binlog_files()[-1]
        committed = _append_crashed_write(crashed)
        server.process = subprocess.Popen(server.args, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
        server._wait(60)
        with Writer(server, seed=12) as writer:
            writer.wait_commits(20)
        assert writer.error is None, writer.error
        files = _wait_identical(server, landing, crashed=crashed.name)
    finally:
        stop.set()
        runner.join(30)
    assert not errors, errors
    assert files[-1] != crashed
    assert (landing / crashed.name).stat().st_size == committed < crashed.stat().st_size
    assert any("partial event" in m and crashed.name in m for m in messages), messages
