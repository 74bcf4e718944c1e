"""An ALTER after a table's last row change reaches the current table in the same batch (issue 5: current tables
mirror the source schema at the batch end), not only when a later batch brings a row of the table."""

from __future__ import annotations

from binlake.lake.engines import get_engine
from binlake.lake.ingest import IngestOptions
from binlake.lake.layout import LakeLayout
from binlake.quality.stages import run_ingest


def _ingest(lake, files, db) -> dict:
    summary = run_ingest(IngestOptions(lake=str(lake), files=[str(f) for f in files], databases={db}))
    return summary.gates


def _lake(lake, db: str) -> tuple[list[str], list[tuple]]:
    table = get_engine().read(LakeLayout(str(lake)).current_path(db, "t"))
    cols = [c for c in table.column_names if not c.startswith("_")]
    return cols, sorted(tuple(r[c] for c in cols) for r in table.to_pylist())


def _server(server, db: str) -> tuple[list[str], list[tuple]]:
    with server.connect(db) as conn, conn.cursor() as cur:
        cur.execute("SELECT * FROM t")
        cols = [d[0] for d in cur.description]
        return cols, sorted(tuple(r) for r in cur.fetchall())


def test_alter_after_the_last_row_change_reaches_the_current_table(mariadb_minimal, fresh_database,
                                                                  tmp_path) -> None:
    server, db = mariadb_minimal, fresh_database(mariadb_minimal)
    lake = tmp_path / "lake"
    first = server.binlog_files()[-1].name
    with server.connect(db) as conn, conn.cursor() as cur:
        cur.execute("CREATE TABLE t (id INT PRIMARY KEY, old_name VARCHAR(10), n INT)")
        cur.execute("INSERT INTO t VALUES (1, 'one', 1), (2, 'two', 2)")
    gates = _ingest(lake, [f for f in server.flush_logs() if f.name >= first], db)
    assert gates["before"]["passed"] and gates["after"]["passed"]
    assert _lake(lake, db) == _server(server, db)

    with server.connect(db) as conn, conn.cursor() as cur:  # no row change after it
        cur.execute("ALTER TABLE t ADD COLUMN extra INT NOT NULL DEFAULT 5 AFTER id, "
                    "RENAME COLUMN old_name TO new_name")
    gates = _ingest(lake, [f for f in server.flush_logs() if f.name >= first], db)
    assert gates["before"]["passed"] and gates["after"]["passed"]
    expected = (["id", "extra", "new_name", "n"], [(1, 5, "one", 1), (2, 5, "two", 2)])
    assert _server(server, db) == expected
    assert _lake(lake, db) == expected

    with server.connect(db) as conn, conn.cursor() as cur:
        cur.execute("UPDATE t SET n = n + 10 WHERE id = 2")
        cur.execute("INSERT INTO t (id, new_name, n) VALUES (3, 'three', 3)")
    gates = _ingest(lake, [f for f in server.flush_logs() if f.name >= first], db)
    assert gates["before"]["passed"] and gates["after"]["passed"]
    assert _lake(lake, db) == _server(server, db)
    assert _lake(lake, db)[1] == [(1, 5, "one", 1), (2, 5, "two", 12), (3, 5, "three", 3)]


def test_rows_then_alter_in_one_batch_and_a_dropped_table_emptied(mariadb_minimal, fresh_database,
                                                                         tmp_path) -> None:
    server, db = mariadb_minimal, fresh_database(mariadb_minimal)
    lake = tmp_path / "lake"
    first = server.binlog_files()[-1].name
    with server.connect(db) as conn, conn.cursor() as cur:
        cur.execute("CREATE TABLE t (id INT PRIMARY KEY, a VARCHAR(10))")
        cur.execute("CREATE TABLE gone (id INT PRIMARY KEY, v INT)")
        cur.execute("INSERT INTO gone VALUES (1, 10)")
        cur.execute("INSERT INTO t VALUES (1, 'x')")
    _ingest(lake, [f for f in server.flush_logs() if f.name >= first], db)
    with server.connect(db) as conn, conn.cursor() as cur:  # rows of t, then its ALTER, in one batch
        cur.execute("INSERT INTO t VALUES (2, 'y')")
        cur.execute("ALTER TABLE t ADD COLUMN d DATE NOT NULL DEFAULT '2020-02-29' FIRST, MODIFY a VARCHAR(20)")
        cur.execute("DROP TABLE gone")
    gates = _ingest(lake, [f for f in server.flush_logs() if f.name >= first], db)
    assert gates["before"]["passed"] and gates["after"]["passed"]
    assert _lake(lake, db) == _server(server, db)
    assert _lake(lake, db)[0] == ["d", "id", "a"]
    # The dropped table's current table is emptied at the DROP (its last state stays reachable by time travel) and
    # it is no longer listed as a lake table (docs/lifecycle.md).
    from binlake.lake.query import lake_tables

    assert get_engine().read(LakeLayout(str(lake)).current_path(db, "gone")).num_rows == 0
    assert f"{db}.gone" not in lake_tables(str(lake))


def test_a_merge_retried_after_the_alter_committed_alters_once(mariadb_minimal, fresh_database, tmp_path) -> None:
    """A crash between the batch-end ALTER and the registry commit: the retry skips the committed ALTER."""
    from binlake.lake import pipeline
    from binlake.quality import stages

    server, db = mariadb_minimal, fresh_database(mariadb_minimal)
    lake = tmp_path / "lake"
    first = server.binlog_files()[-1].name
    with server.connect(db) as conn, conn.cursor() as cur:
        cur.execute("CREATE TABLE t (id INT PRIMARY KEY, old_name VARCHAR(10))")
        cur.execute("INSERT INTO t VALUES (1, 'one')")
    _ingest(lake, [f for f in server.flush_logs() if f.name >= first], db)
    with server.connect(db) as conn, conn.cursor() as cur:
        cur.execute("ALTER TABLE t ADD COLUMN extra INT NOT NULL DEFAULT 5, RENAME COLUMN old_name TO new_name")
    opts = IngestOptions(lake=str(lake), files=[str(f) for f in server.flush_logs() if f.name >= first],
                         databases={db})
    engine, layout = get_engine(), LakeLayout(str(lake))
    batch = pipeline.prepare_batch(opts)
    stages.gate_before_merge(opts, batch)
    pipeline.merge_batch(opts, batch)
    path = layout.current_path(db, "t")
    altered = engine.version(path)
    engine.restore(layout.tables_path, pipeline.BatchStore(str(lake)).load(batch).premerge["registry_version"])
    pipeline.merge_batch(opts, batch)
    assert engine.version(path) == altered
    stages.gate_after_merge(opts, batch)
    pipeline.publish_batch(opts, batch)
    assert _lake(lake, db) == _server(server, db) == (["id", "new_name", "extra"], [(1, "one", 5)])
