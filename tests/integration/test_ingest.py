"""binlake ingest end to end: a real MariaDB writes, binlogs are ingested into real Delta tables (delta-rs), and
the current tables must equal the server's SELECT, the history must count the binlog's rows, re-runs change
nothing, and later batches continue from the checkpoint across ALTER TABLEs."""

from __future__ import annotations

import random
import time
from decimal import Decimal

import pytest

from binlake.lake.engines import get_engine
from binlake.lake.ingest import IngestOptions
from binlake.lake.layout import LakeLayout
from binlake.quality.stages import run_ingest

DB = "ingest_db"


def write(server, statements: list[str]) -> None:
    with server.connect(DB) as conn, conn.cursor() as cur:
        for sql in statements:
            cur.execute(sql)


def random_workload(rng: random.Random, ids: set[int], n: int) -> list[str]:
    out = []
    for _ in range(n):
        roll = rng.random()
        if roll < 0.5 or not ids:
            new = rng.randint(1, 10_000)
            while new in ids:
                new = rng.randint(1, 10_000)
            ids.add(new)
            out.append(f"INSERT INTO orders (id, customer, amount, note) VALUES ({new}, {rng.randint(1, 50)}, "
                       f"{rng.randint(0, 99999) / 100}, 'n{new}')")
        elif roll < 0.75:
            target = rng.choice(sorted(ids))
            out.append(f"UPDATE orders SET amount = amount + 1, note = 'u{target}' WHERE id = {target}")
        elif roll < 0.85:
            old = rng.choice(sorted(ids))
            new = max(ids) + 1
            ids.discard(old)
            ids.add(new)
            out.append(f"UPDATE orders SET id = {new} WHERE id = {old}")
        else:
            target = rng.choice(sorted(ids))
            ids.discard(target)
            out.append(f"DELETE FROM orders WHERE id = {target}")
    return out


def server_rows(server, table: str) -> dict:
    with server.connect(DB) as conn, conn.cursor() as cur:
        cur.execute(f"SELECT * FROM `{table}`")
        names = [d[0] for d in cur.description]
        rows = [dict(zip(names, r, strict=True)) for r in cur.fetchall()]
        return {r["id"]: r for r in rows}


def lake_rows(lake, table: str) -> dict:
    engine = get_engine()
    data = engine.read(LakeLayout(str(lake)).current_path(DB, table)).to_pylist()
    return {r["id"]: {k: v for k, v in r.items() if not k.startswith("_")} for r in data}


def normalize(rows: dict) -> dict:
    return {k: {c: (format(v, "f") if isinstance(v, Decimal) else v) for c, v in r.items()} for k, r in rows.items()}


def binlog_dir_files(server) -> list[str]:
    return [str(f) for f in server.flush_logs()]


@pytest.fixture(scope="module")
def source(mariadb_servers):
    server = mariadb_servers.get("MINIMAL")
    with server.connect() as conn, conn.cursor() as cur:
        cur.execute(f"DROP DATABASE IF EXISTS {DB}")
        cur.execute(f"CREATE DATABASE {DB}")
    return server


def test_ingest_batches_equal_select_and_reruns_are_noops(source, tmp_path) -> None:
    server = source
    lake = tmp_path / "lake"
    rng = random.Random(7)
    ids: set[int] = set()
    first_file = server.binlog_files()[-1].name
    write(server, ["CREATE TABLE orders (id INT PRIMARY KEY, customer INT, amount DECIMAL(10,2), note VARCHAR(40))",
                   "CREATE TABLE audit (at INT, what VARCHAR(20))",  # no primary key: history only
                   "INSERT INTO audit VALUES (1, 'start')"])
    write(server, random_workload(rng, ids, 120))
    # Multi-table transactions: one transaction touching two keyed tables and the keyless one.
    write(server, ["CREATE TABLE order_lines (order_id INT, line INT, qty INT, PRIMARY KEY (order_id, line))"])
    for t in range(5):
        target = sorted(ids)[t]
        write(server, ["START TRANSACTION",
                       f"INSERT INTO order_lines VALUES ({target}, 1, {t}), ({target}, 2, {t + 1})",
                       f"UPDATE orders SET note = 'has lines' WHERE id = {target}",
                       f"INSERT INTO audit VALUES ({t}, 'lines')",
                       f"UPDATE order_lines SET qty = qty * 10 WHERE order_id = {target} AND line = 2",
                       "COMMIT"])
    files = [f for f in binlog_dir_files(server) if f >= str(server.binlog_dir / first_file)]

    opts = IngestOptions(lake=str(lake), files=files, databases={DB})
    first = run_ingest(opts)
    assert first.batch == 0
    assert normalize(lake_rows(lake, "orders")) == normalize(server_rows(server, "orders"))
    lines = {(r["order_id"], r["line"]): r["qty"] for r in get_engine().read(
        LakeLayout(str(lake)).current_path(DB, "order_lines")).to_pylist()}
    with server.connect(DB) as conn, conn.cursor() as cur:
        cur.execute("SELECT order_id, line, qty FROM order_lines")
        assert lines == {(o, ln): q for o, ln, q in cur.fetchall()}
    assert "ingest_db.audit" in first.history_only
    assert run_ingest(opts).batch is None  # nothing new: no batch at all

    history = get_engine().read(LakeLayout(str(lake)).history_path(DB, "orders"))
    ops = history.group_by("_op").aggregate([("_op", "count")]).to_pylist()
    assert {r["_op"]: r["_op_count"] for r in ops} == {op: n for (t, op), n in first.rows.items()
                                                       if t == f"{DB}.orders"}

    # Batch 2: an ALTER that moves, adds (with a default) and renames, then more changes, in new files.
    write(server, ["ALTER TABLE orders MODIFY note VARCHAR(40) FIRST, ADD COLUMN status VARCHAR(10) NOT NULL "
                   "DEFAULT 'new' AFTER customer, CHANGE amount total DECIMAL(12,3)"])
    write(server, [s.replace("amount", "total") for s in random_workload(rng, ids, 60)])
    files = [str(f) for f in server.flush_logs() if str(f) >= str(server.binlog_dir / first_file)]
    second = run_ingest(IngestOptions(lake=str(lake), files=files, databases={DB}))
    assert second.batch == 1
    assert normalize(lake_rows(lake, "orders")) == normalize(server_rows(server, "orders"))
    current = get_engine().read(LakeLayout(str(lake)).current_path(DB, "orders"))
    assert "total" in current.column_names and "amount" not in current.column_names
    assert run_ingest(IngestOptions(lake=str(lake), files=files, databases={DB})).batch is None


def test_spark_decode_with_split_ranges_equals_local(source, tmp_path, spark) -> None:
    """Spark tasks over ranges of whole transactions give the same lake as one local pass."""
    from binlake.spark import spark_executor

    server = source
    first_file = server.binlog_files()[-1].name
    write(server, ["CREATE TABLE big (id INT PRIMARY KEY, v VARCHAR(100), n BIGINT)"])
    with server.connect(DB) as conn, conn.cursor() as cur:
        for chunk in range(20):
            cur.execute("INSERT INTO big SELECT seq, REPEAT('x', seq % 90), seq * 3 FROM "
                        f"seq_{chunk * 500 + 1}_to_{chunk * 500 + 500}")
        cur.execute("UPDATE big SET n = n + 1 WHERE id % 3 = 0")
        cur.execute("DELETE FROM big WHERE id % 7 = 0")
    files = [str(f) for f in server.flush_logs() if str(f) >= str(server.binlog_dir / first_file)]
    size = sum(__import__("os").path.getsize(f) for f in files)
    local = run_ingest(IngestOptions(lake=str(tmp_path / "local"), files=files, databases={DB}, tables=None))
    tasks_seen = []
    executor = spark_executor(spark)

    def counting(tasks, *args):
        tasks_seen.extend(tasks)
        return executor(tasks, *args)

    distributed = run_ingest(IngestOptions(lake=str(tmp_path / "spark"), files=files, databases={DB},
                                           split_bytes=max(1, size // 6)), executor=counting)
    assert len(tasks_seen) > len(files)  # the large file really was split
    assert distributed.rows == local.rows
    engine = get_engine()
    for lake in ("local", "spark"):
        rows = engine.read(LakeLayout(str(tmp_path / lake)).current_path(DB, "big")).to_pylist()
        assert {r["id"]: (r["v"], r["n"]) for r in rows} == {
            k: (r["v"], r["n"]) for k, r in server_rows(server, "big").items()}


class CrashAfter:
    """The real delta-rs engine, made to fail after `n` successful commits: a process killed mid-batch."""

    def __init__(self, n: int) -> None:
        self.inner = get_engine()
        self.left = n
        self.name = "crashing"

    def __getattr__(self, item):
        return getattr(self.inner, item)

    def _commit(self, fn, *args, **kwargs):
        if self.left <= 0:
            raise RuntimeError("killed")
        result = fn(*args, **kwargs)
        self.left -= 1
        return result

    def append(self, *args, **kwargs):
        return self._commit(self.inner.append, *args, **kwargs)

    def append_staged(self, *args, **kwargs):
        return self._commit(self.inner.append_staged, *args, **kwargs)

    def merge(self, *args, **kwargs):
        return self._commit(self.inner.merge, *args, **kwargs)

    def replace_schema(self, *args, **kwargs):
        return self._commit(self.inner.replace_schema, *args, **kwargs)


def _lake_state(lake) -> tuple[dict, dict]:
    engine = get_engine()
    layout = LakeLayout(str(lake))
    current = {r["id"]: r for r in engine.read(layout.current_path(DB, "k")).to_pylist()}
    history = engine.read(layout.history_path(DB, "k"))
    keys = sorted(zip(*(history.column(c).to_pylist() for c in ("_file_seq", "_pos", "_sub", "_row")), strict=True))
    return {k: (v["v"], v["_seq"]) for k, v in current.items()}, {"rows": history.num_rows, "keys": keys}


def test_killed_at_any_commit_then_rerun_equals_uninterrupted(source, tmp_path) -> None:
    server = source
    first_file = server.binlog_files()[-1].name
    write(server, ["CREATE TABLE k (id INT PRIMARY KEY, v VARCHAR(10))", "CREATE TABLE k2 (id INT PRIMARY KEY)"])
    write(server, [f"INSERT INTO k VALUES ({i}, 'a{i}')" for i in range(30)] +
          [f"INSERT INTO k2 VALUES ({i})" for i in range(5)] +
          ["UPDATE k SET v = 'b' WHERE id < 10", "DELETE FROM k WHERE id >= 25", "UPDATE k SET id = 100 WHERE id = 3"])
    files = [str(f) for f in server.flush_logs() if str(f) >= str(server.binlog_dir / first_file)]
    opts = dict(files=files, databases={DB}, tables=__import__("re").compile(r"\.k2?$"))
    from binlake.lake.pending import BatchStore

    run_ingest(IngestOptions(lake=str(tmp_path / "clean"), **opts))
    expected = _lake_state(tmp_path / "clean")
    assert len(expected[0]) == 25
    # Commits of one batch: 2 history appends, the before-merge gate's results, 2 current merges, tables
    # registry, the after-merge gate's results, control table.
    for crash_at in range(8):
        lake = tmp_path / f"crash{crash_at}"
        with pytest.raises(RuntimeError, match="killed"):
            run_ingest(IngestOptions(lake=str(lake), **opts), engine=CrashAfter(crash_at))
        rerun = run_ingest(IngestOptions(lake=str(lake), **opts))
        assert rerun.batch == 0  # the unrecorded batch is redone under the same number
        assert _lake_state(lake) == expected, f"crash after {crash_at} commits"
        assert run_ingest(IngestOptions(lake=str(lake), **opts)).batch is None
    # Killed right after the control table's commit, before the pending batch was closed: the rerun closes it.
    lake = tmp_path / "after-control"
    engine = CrashAfter(8)
    real_merge = engine.inner.merge

    def merge_then_die(path, *args, **kwargs):
        done = real_merge(path, *args, **kwargs)
        if path.endswith("_binlake/files"):
            raise RuntimeError("killed")
        return done

    engine.inner.merge = merge_then_die
    with pytest.raises(RuntimeError, match="killed"):
        run_ingest(IngestOptions(lake=str(lake), **opts), engine=engine)
    assert run_ingest(IngestOptions(lake=str(lake), **opts)).batch is None
    assert _lake_state(lake) == expected
    assert BatchStore(str(lake)).load(0).state == "published"
    # The pending batch's manifest is saved between the commits: a kill right after any save, then a rerun.

    saves = 0
    real_save = BatchStore.save

    def counting_save(self, pb):
        nonlocal saves
        saves += 1
        real_save(self, pb)

    BatchStore.save = counting_save
    try:
        run_ingest(IngestOptions(lake=str(tmp_path / "count"), **opts))
    finally:
        BatchStore.save = real_save
    assert saves >= 6
    for crash_at in range(1, saves):
        lake = tmp_path / f"save{crash_at}"
        left = crash_at

        def dying_save(self, pb):
            nonlocal left
            real_save(self, pb)
            left -= 1
            if left == 0:
                raise RuntimeError("killed")

        BatchStore.save = dying_save
        try:
            with pytest.raises(RuntimeError, match="killed"):
                run_ingest(IngestOptions(lake=str(lake), **opts))
        finally:
            BatchStore.save = real_save
        assert run_ingest(IngestOptions(lake=str(lake), **opts)).batch == 0
        assert _lake_state(lake) == expected, f"crash after manifest save {crash_at}"
        assert run_ingest(IngestOptions(lake=str(lake), **opts)).batch is None


def _staged_state(lake) -> tuple[list, list]:
    engine = get_engine()
    layout = LakeLayout(str(lake))
    current = sorted((r["id"], r["v"], r["_seq"]) for r in engine.read(layout.current_path(DB, "staged")).to_pylist())
    history = engine.read(layout.history_path(DB, "staged"))
    cols = ("_file_seq", "_pos", "_sub", "_row", "_op", "_commit_ts", "id", "v")
    return current, sorted(zip(*(history.column(c).to_pylist() for c in cols), strict=True))


def test_staged_in_process_killed_anywhere_then_rerun_equals_in_memory(source, tmp_path, monkeypatch) -> None:
    """Past its memory budget the in-process ingest stages history as Parquet pieces; here the budget is 0 and
    FLUSH_ROWS 5, so even an open transaction's rows are written aside before its commit, and the current merge
    goes in parts (MERGE_CHUNK_BYTES). Killed while writing pieces (nothing may be committed) or after any commit,
    the rerun equals the in-memory run."""
    import re

    from binlake.lake import decode_task
    from binlake.lake.engines import deltars
    from binlake.lake.ingest import GatesOff
    from binlake.lake.pending import BatchStore

    server = source
    first_file = server.binlog_files()[-1].name
    rng = random.Random(4242)
    write(server, ["CREATE TABLE staged (id INT PRIMARY KEY, v VARCHAR(20))"])
    ids: set[int] = set()
    with server.connect(DB) as conn, conn.cursor() as cur:
        conn.begin()  # one transaction of many rows events: written aside piece by piece before its commit
        for i in rng.sample(range(1, 5000), 80):
            ids.add(i)
            cur.execute(f"INSERT INTO staged VALUES ({i}, 'i{rng.randint(0, 99)}')")
        for _ in range(60):  # updates, key moves and deletes of rows inserted in the same transaction
            roll, target = rng.random(), rng.choice(sorted(ids))
            if roll < 0.5:
                cur.execute(f"UPDATE staged SET v = 'u{rng.randint(0, 99)}' WHERE id = {target}")
            elif roll < 0.75:
                new = max(ids) + rng.randint(1, 9)
                ids.discard(target)
                ids.add(new)
                cur.execute(f"UPDATE staged SET id = {new} WHERE id = {target}")
            else:
                ids.discard(target)
                cur.execute(f"DELETE FROM staged WHERE id = {target}")
        conn.commit()
    write(server, [f"UPDATE staged SET v = 'x{n}' WHERE id = {i}" for n, i in enumerate(sorted(ids)[:7])])
    files = [str(f) for f in server.flush_logs() if str(f) >= str(server.binlog_dir / first_file)]
    opts = dict(files=files, databases={DB}, tables=re.compile(r"\.staged$"))

    run_ingest(IngestOptions(lake=str(tmp_path / "memory"), **opts))  # gates on, in memory
    expected = _staged_state(tmp_path / "memory")
    assert sorted(i for i, _v, _s in expected[0]) == sorted(server_rows(server, "staged"))
    monkeypatch.setattr(decode_task, "KEEP_BYTES", 0)
    monkeypatch.setattr(decode_task, "FLUSH_ROWS", 5)
    monkeypatch.setattr(deltars, "MERGE_CHUNK_BYTES", 2000)  # the current merge in parts of a few dozen keys
    run_ingest(IngestOptions(lake=str(tmp_path / "staged"), **opts))  # gates on, staged
    assert "staged" in BatchStore(str(tmp_path / "staged")).load(0).tables[f"{DB}.staged"]
    assert _staged_state(tmp_path / "staged") == expected

    real_write = decode_task.write_piece
    for crash_at in range(4):  # killed while writing the n-th piece (some of them an open transaction's)
        lake, left = tmp_path / f"piece{crash_at}", crash_at

        def dying_write(*args, **kwargs):
            nonlocal left
            if left == 0:
                raise RuntimeError("killed")
            left -= 1
            return real_write(*args, **kwargs)

        monkeypatch.setattr(decode_task, "write_piece", dying_write)
        with pytest.raises(RuntimeError, match="killed"):
            run_ingest(IngestOptions(lake=str(lake), quality=GatesOff(), **opts))
        monkeypatch.setattr(decode_task, "write_piece", real_write)
        assert not get_engine().exists(LakeLayout(str(lake)).history_path(DB, "staged"))
        assert run_ingest(IngestOptions(lake=str(lake), quality=GatesOff(), **opts)).batch == 0
        assert _staged_state(lake) == expected, f"killed at piece {crash_at}"
    # Commits without the gates: history append, current merge, tables registry, control table.
    for crash_at in range(4):
        lake = tmp_path / f"commit{crash_at}"
        with pytest.raises(RuntimeError, match="killed"):
            run_ingest(IngestOptions(lake=str(lake), quality=GatesOff(), **opts), engine=CrashAfter(crash_at))
        assert run_ingest(IngestOptions(lake=str(lake), quality=GatesOff(), **opts)).batch == 0
        assert _staged_state(lake) == expected, f"crash after {crash_at} commits"
        assert run_ingest(IngestOptions(lake=str(lake), quality=GatesOff(), **opts)).batch is None


def test_bootstrap_with_writes_running_then_ingest_equals_select(mariadb_servers, tmp_path) -> None:
    """Chunks read at different moments while a writer keeps changing rows; ingest from the recorded position
    must end equal to the server: nothing lost, nothing applied twice."""
    import threading

    from binlake.lake.bootstrap import read_chunk, run_bootstrap

    server = mariadb_servers.get("FULL")
    db = "boot_db"
    with server.connect() as conn, conn.cursor() as cur:
        cur.execute(f"DROP DATABASE IF EXISTS {db}")
        cur.execute(f"CREATE DATABASE {db}")
        cur.execute(f"CREATE TABLE {db}.acct (id INT PRIMARY KEY, balance DECIMAL(10,2), note VARCHAR(20), "
                    "seen DATETIME(3))")
        cur.execute(f"INSERT INTO {db}.acct SELECT seq, seq, CONCAT('n', seq), '2024-01-01 00:00:00.000' "
                    f"FROM {db}.seq_1_to_3000")
    stop = threading.Event()
    rng = random.Random(3)

    def writer() -> None:
        with server.connect(db) as conn, conn.cursor() as cur:
            while not stop.is_set():
                i = rng.randint(1, 3500)
                roll = rng.random()
                if roll < 0.5:
                    cur.execute("UPDATE acct SET balance = balance + 1 WHERE id = %s", (i,))
                elif roll < 0.8:
                    cur.execute("INSERT IGNORE INTO acct VALUES (%s, 0, 'new', NOW(3))", (i,))
                else:
                    cur.execute("DELETE FROM acct WHERE id = %s", (i,))

    def slow_chunks(uri, chunks, batch):
        out = []
        for c in chunks:
            out.append(read_chunk(uri, c, batch))
            time.sleep(0.05)  # let the writer move between chunks
        return out

    first_file = server.binlog_files()[-1].name
    thread = threading.Thread(target=writer)
    thread.start()
    try:
        time.sleep(0.2)
        summary = run_bootstrap(server.uri, [(db, "acct")], str(tmp_path / "lake"), chunk_rows=400,
                                executor=slow_chunks)
        time.sleep(0.3)
    finally:
        stop.set()
        thread.join()
    assert summary["chunks"] >= 4  # about 3000 rows / 400; the writer's deletes before planning lower the count
    files = [str(f) for f in server.flush_logs() if str(f) >= str(server.binlog_dir / first_file)]
    run_ingest(IngestOptions(lake=str(tmp_path / "lake"), files=files, databases={db}))
    lake = {r["id"]: (format(r["balance"], "f"), r["note"])
            for r in get_engine().read(LakeLayout(str(tmp_path / "lake")).current_path(db, "acct")).to_pylist()}
    with server.connect(db) as conn, conn.cursor() as cur:
        cur.execute("SELECT id, balance, note FROM acct")
        expected = {i: (format(b, "f"), n) for i, b, n in cur.fetchall()}
    assert lake == expected


def test_files_ingested_out_of_order_with_repeats_converge(source, tmp_path) -> None:
    """Backfills: files become available in a random order, some runs repeat; the current table ends equal to
    the server's (deletes stay deleted, older changes never overwrite newer ones)."""
    server = source
    rng = random.Random(11)
    first_file = server.binlog_files()[-1].name
    ddl = "CREATE TABLE ooo (id INT PRIMARY KEY, v INT, note VARCHAR(10))"
    write(server, [ddl])
    schemas = tmp_path / "schemas"  # the DDL snapshot a deployment keeps: later files can be read first
    schemas.mkdir()
    (schemas / f"{DB}.sql").write_text(ddl + ";\n")
    ids: set[int] = set()
    for _ in range(6):  # six files of random changes, including deletes and re-inserts of the same keys
        stmts = []
        for _ in range(40):
            i = rng.randint(1, 30)
            if i in ids and rng.random() < 0.3:
                stmts.append(f"DELETE FROM ooo WHERE id = {i}")
                ids.discard(i)
            elif i in ids:
                stmts.append(f"UPDATE ooo SET v = v + 1, note = 'u' WHERE id = {i}")
            else:
                stmts.append(f"INSERT INTO ooo VALUES ({i}, {rng.randint(0, 9)}, 'i')")
                ids.add(i)
        write(server, stmts)
        server.flush_logs()
    files = [str(f) for f in server.binlog_files()[:-1] if str(f) >= str(server.binlog_dir / first_file)]
    expected = {r["id"]: (r["v"], r["note"]) for r in server_rows(server, "ooo").values()}
    for trial in range(3):
        order = files[:]
        rng.shuffle(order)
        lake = tmp_path / f"lake{trial}"
        available: list[str] = []
        for f in order:
            available.append(f)
            opts = IngestOptions(lake=str(lake), files=list(available), databases={DB}, schemas=str(schemas),
                                 tables=__import__("re").compile(r"\.ooo$"))
            run_ingest(opts)
            if rng.random() < 0.5:
                assert run_ingest(opts).batch is None  # a repeat changes nothing
        rows = get_engine().read(LakeLayout(str(lake)).current_path(DB, "ooo")).to_pylist()
        assert {r["id"]: (r["v"], r["note"]) for r in rows} == expected, f"order {[f[-6:] for f in order]}"


def test_rows_without_any_schema_are_refused(source, tmp_path) -> None:
    """MINIMAL metadata, and no snapshot or DDL in the files: the table is held back instead of inventing @N
    columns (no history, no current table), naming the table and the position."""
    from binlake.lake.holds import TablesHeldBack

    server = source
    write(server, ["CREATE TABLE nameless (id INT PRIMARY KEY, v INT)"])
    server.flush_logs()
    write(server, ["INSERT INTO nameless VALUES (1, 2)"])
    later = [str(f) for f in server.flush_logs()][-1:]
    with pytest.raises(TablesHeldBack, match=r"ingest_db\.nameless: held back at mysql-bin\.\d+:\d+: SchemaMissing"):
        run_ingest(IngestOptions(lake=str(tmp_path / "lake"), files=later, databases={DB}))
    assert not get_engine().exists(LakeLayout(str(tmp_path / "lake")).history_path(DB, "nameless"))


def test_partial_row_images_are_refused_for_current_tables(source, tmp_path) -> None:
    """binlog_row_image=MINIMAL logs only changed columns: the history keeps them, the current table refuses (the
    table is held back)."""
    from binlake.lake.holds import TablesHeldBack

    server = source
    first_file = server.binlog_files()[-1].name
    write(server, ["CREATE TABLE slim (id INT PRIMARY KEY, a INT, b INT)", "INSERT INTO slim VALUES (1, 1, 1)",
                   "SET SESSION binlog_row_image = 'MINIMAL'", "UPDATE slim SET a = 2 WHERE id = 1"])
    files = [str(f) for f in server.flush_logs() if str(f) >= str(server.binlog_dir / first_file)]
    with pytest.raises(TablesHeldBack, match="binlog_row_image=FULL"):
        run_ingest(IngestOptions(lake=str(tmp_path / "lake"), files=files, databases={DB},
                                 tables=__import__("re").compile(r"\.slim$")))
    history = get_engine().read(LakeLayout(str(tmp_path / "lake")).history_path(DB, "slim"))
    assert sorted(history.column("_op").to_pylist()) == ["insert", "update"]


def test_staged_merge_takes_the_merge_inputs_kept_at_decode(source, tmp_path, monkeypatch) -> None:
    """An in-process ingest that stages its history computes each written piece's merge input from the rows at
    hand, and the merge takes it instead of reading the piece back: the lake (current rows with their `_seq` and
    row order, history) equals the one where every piece is read back. Changes of every kind in several
    transactions, an ALTER between them (two schema versions) and the table dropped and created again (two
    lifetimes, told apart by position)."""
    import re

    from binlake.lake import decode_task, staging
    from binlake.lake.ingest import GatesOff

    server = source
    first_file = server.binlog_files()[-1].name
    rng = random.Random(77)
    ids: list[int] = []
    statements = ["CREATE TABLE kept (id INT PRIMARY KEY, v VARCHAR(20))"]
    for t in range(6):
        if t == 3:
            statements.append("ALTER TABLE kept ADD COLUMN w INT NULL")
        for _ in range(rng.randrange(20, 60)):
            roll = rng.random()
            if roll < 0.5 or not ids:
                i = rng.randrange(1, 10_000)
                if i not in ids:
                    ids.append(i)
                    statements.append(f"INSERT INTO kept (id, v) VALUES ({i}, 'i{t}')")
            elif roll < 0.75:
                statements.append(f"UPDATE kept SET v = 'u{t}' WHERE id = {rng.choice(ids)}")
            elif roll < 0.85:
                old, new = rng.choice(ids), rng.randrange(10_000, 20_000)
                if new not in ids:
                    ids[ids.index(old)] = new
                    statements.append(f"UPDATE kept SET id = {new} WHERE id = {old}")
            else:
                gone = ids.pop(rng.randrange(len(ids)))
                statements.append(f"DELETE FROM kept WHERE id = {gone}")
    statements += ["DROP TABLE kept", "CREATE TABLE kept (id INT PRIMARY KEY, v VARCHAR(20))",
                   *(f"INSERT INTO kept VALUES ({i}, 'again')" for i in range(1, 30))]
    with server.connect(DB) as conn, conn.cursor() as cur:
        for n, sql in enumerate(statements):
            if n % 17 == 0:
                conn.commit()
                conn.begin()
            cur.execute(sql)
        conn.commit()
    files = [str(f) for f in server.flush_logs() if str(f) >= str(server.binlog_dir / first_file)]
    opts = dict(files=files, databases={DB}, tables=re.compile(r"\.kept$"), quality=GatesOff())
    monkeypatch.setattr(decode_task, "KEEP_BYTES", 0)  # every piece staged
    monkeypatch.setattr(decode_task, "FLUSH_ROWS", 7)
    real_read, reads = staging.read_piece_keys, []

    def counted_read(*args, **kwargs):
        reads.append(args[1]["path"])
        return real_read(*args, **kwargs)

    def state(lake) -> tuple:
        engine, layout = get_engine(), LakeLayout(str(lake))
        # (sorted: delta-rs' writer may put record batches in another order from one run to the next)
        current = sorted(engine.read(layout.current_path(DB, "kept")).to_pylist(), key=lambda r: r["id"])
        histories = [engine.read(layout.history_path(DB, "kept", g)).sort_by("_pos").to_pylist() for g in (1, 2)]
        return current, histories

    import binlake.lake.current as current_module

    monkeypatch.setattr(current_module, "read_piece_keys", counted_read)
    run_ingest(IngestOptions(lake=str(tmp_path / "kept"), **opts))
    kept_reads = list(reads)
    reads.clear()
    monkeypatch.setattr(staging, "MERGE_INPUT_BYTES", 0)  # nothing kept: every piece read back
    run_ingest(IngestOptions(lake=str(tmp_path / "read"), **opts))
    kept, read = state(tmp_path / "kept"), state(tmp_path / "read")
    assert kept == read
    assert len(kept[1][1]) > 0  # the second lifetime has its own history
    assert [r["id"] for r in kept[0]] == sorted(server_rows(server, "kept"))
    assert len(kept_reads) < len(reads)  # some pieces were not read back
    assert not staging._merge_inputs  # every kept input taken or dropped with its stage


def test_a_large_segment_whose_net_changes_were_kept_is_reduced_without_buckets(source, tmp_path, monkeypatch) -> None:
    """A staged segment of more history rows than one bucket of net changes holds is split into key buckets on
    disk, unless this process kept the merge input of every one of its pieces from decoding: those are reduced in
    memory, no bucket written. Both ways give the same lake (current rows with `_seq`, tombstones of deleted and
    moved keys, history), equal to the server; transactions of one row and of many, key moves and deletes."""
    import re

    from binlake.lake import current as current_module
    from binlake.lake import decode_task, netbuckets, staging
    from binlake.lake.ingest import GatesOff

    server = source
    first_file = server.binlog_files()[-1].name
    rng = random.Random(4242)
    ids = list(range(1, 120))
    with server.connect(DB) as conn, conn.cursor() as cur:
        cur.execute("CREATE TABLE netkept (id INT PRIMARY KEY, v VARCHAR(30), n BIGINT NULL)")
        cur.execute("INSERT INTO netkept VALUES " + ", ".join(f"({i}, 'v{i}', {i * 7})" for i in ids))
        conn.commit()
        for t in range(12):
            for _ in range(rng.randrange(1, 25)):
                roll = rng.random()
                if roll < 0.4:
                    cur.execute(f"UPDATE netkept SET v = 'u{t}', n = NULL WHERE id = {rng.choice(ids)}")
                elif roll < 0.6:
                    old, new = rng.choice(ids), rng.randrange(1000, 100_000)
                    if new not in ids:
                        ids[ids.index(old)] = new
                        cur.execute(f"UPDATE netkept SET id = {new} WHERE id = {old}")
                elif roll < 0.75 and len(ids) > 10:
                    cur.execute(f"DELETE FROM netkept WHERE id = {ids.pop(rng.randrange(len(ids)))}")
                else:
                    new = rng.randrange(100_000, 200_000)
                    if new not in ids:
                        ids.append(new)
                        cur.execute(f"INSERT INTO netkept VALUES ({new}, 'i{t}', {t})")
            conn.commit()
        cur.execute("UPDATE netkept SET n = COALESCE(n, 0) + 1")  # one transaction over every row
        conn.commit()
    files = [str(f) for f in server.flush_logs() if str(f) >= str(server.binlog_dir / first_file)]
    opts = dict(files=files, databases={DB}, tables=re.compile(r"\.netkept$"), quality=GatesOff())
    monkeypatch.setattr(decode_task, "KEEP_BYTES", 0)  # every piece staged
    monkeypatch.setattr(decode_task, "FLUSH_ROWS", 9)
    monkeypatch.setattr(netbuckets, "NET_BUCKET_ROWS", 40)  # the segment is several buckets' worth
    writers = []

    class CountedWriter(netbuckets.BucketWriter):
        def __init__(self, *args, **kwargs) -> None:
            writers.append(args[1])
            super().__init__(*args, **kwargs)

    monkeypatch.setattr(current_module, "BucketWriter", CountedWriter)

    def state(lake) -> tuple:
        engine, layout = get_engine(), LakeLayout(str(lake))
        current = sorted(engine.read(layout.current_path(DB, "netkept")).to_pylist(), key=lambda r: r["id"])
        tombstones = sorted(map(str, engine.read(layout.current_path(DB, "netkept") + "/_binlake_tombstones")
                                .to_pylist()))
        history = engine.read(layout.history_path(DB, "netkept", 1)).sort_by([("_pos", "ascending"),
                                                                              ("_row", "ascending")]).to_pylist()
        return current, tombstones, history

    run_ingest(IngestOptions(lake=str(tmp_path / "kept"), **opts))
    assert writers == []  # reduced in memory
    monkeypatch.setattr(staging, "MERGE_INPUT_BYTES", 0)  # nothing kept: the pieces are bucketed
    run_ingest(IngestOptions(lake=str(tmp_path / "bucketed"), **opts))
    assert writers  # the same segment went through key buckets
    kept, bucketed = state(tmp_path / "kept"), state(tmp_path / "bucketed")
    assert kept == bucketed
    assert {r["id"]: (r["v"], r["n"]) for r in kept[0]} == \
        {i: (r["v"], r["n"]) for i, r in server_rows(server, "netkept").items()}
    assert kept[1]  # deleted and moved keys left tombstones
    assert not staging._merge_inputs
