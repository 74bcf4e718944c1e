"""Daily snapshots taken after an ALTER: the current tables keep following the source.

A snapshot numbers its columns afresh, in column order. Those numbers say nothing about the identities the
replayed DDL gave the same columns before, so a snapshot's table continues the lineage the replay reached at its
position, matched by name; a definition from an unrelated lineage is matched by name only.
"""

from __future__ import annotations

from binlake.lake.engines import get_engine
from binlake.lake.ingest import IngestOptions
from binlake.lake.layout import LakeLayout
from binlake.quality.stages import run_ingest
from binlake.schema.api import take_snapshot


def _ingest(lake, files, store, db) -> None:
    run_ingest(IngestOptions(lake=str(lake), files=[str(f) for f in files], schemas=str(store), databases={db}))


def _lake_rows(lake, db: str, table: str, cols: list[str]) -> list[tuple]:
    rows = get_engine().read(LakeLayout(str(lake)).current_path(db, table)).to_pylist()
    assert [k for k in rows[0] if not k.startswith("_")] == cols
    return sorted(tuple(r[c] for c in cols) for r in rows)


def _server_rows(server, db: str, table: str, cols: list[str]) -> list[tuple]:
    with server.connect(db) as conn, conn.cursor() as cur:
        cur.execute(f"SELECT {', '.join(cols)} FROM {table}")
        return sorted(cur.fetchall())


def test_snapshot_after_an_alter_that_moved_columns(mariadb_minimal, fresh_database, tmp_path) -> None:
    server, db = mariadb_minimal, fresh_database(mariadb_minimal)
    store, lake = tmp_path / "schemas", tmp_path / "lake"
    with server.connect(db) as conn, conn.cursor() as cur:
        cur.execute("CREATE TABLE t (id INT PRIMARY KEY, a INT, b VARCHAR(10), c INT)")
    take_snapshot(server.uri, store, include=[f"{db}.*"])
    first = server.binlog_files()[-1].name
    with server.connect(db) as conn, conn.cursor() as cur:
        cur.execute("INSERT INTO t VALUES (1, 1, 'x', 10), (2, 2, 'y', 20)")
        cur.execute("ALTER TABLE t ADD COLUMN dd VARCHAR(10) NOT NULL DEFAULT 'def' AFTER a")
        cur.execute("INSERT INTO t VALUES (3, 3, 'ddd', 'z', 30)")
    _ingest(lake, [f for f in server.flush_logs() if f.name >= first], store, db)
    take_snapshot(server.uri, store, include=[f"{db}.*"])  # the daily snapshot, after the ALTER
    with server.connect(db) as conn, conn.cursor() as cur:
        cur.execute("UPDATE t SET c = c + 1")
        cur.execute("INSERT INTO t VALUES (4, 4, 'e', 'w', 40)")
    _ingest(lake, [f for f in server.flush_logs() if f.name >= first], store, db)
    cols = ["id", "a", "dd", "b", "c"]
    assert _lake_rows(lake, db, "t", cols) == _server_rows(server, db, "t", cols)


def test_rename_replayed_before_a_later_snapshot_keeps_values(mariadb_minimal, fresh_database, tmp_path) -> None:
    """The RENAME COLUMN lies between the rows the table holds and the snapshot the next rows resolve to."""
    server, db = mariadb_minimal, fresh_database(mariadb_minimal)
    store, lake = tmp_path / "schemas", tmp_path / "lake"
    with server.connect(db) as conn, conn.cursor() as cur:
        cur.execute("CREATE TABLE t (id INT PRIMARY KEY, old_name VARCHAR(10), n INT)")
    take_snapshot(server.uri, store, include=[f"{db}.*"])
    first = server.binlog_files()[-1].name
    with server.connect(db) as conn, conn.cursor() as cur:
        cur.execute("INSERT INTO t VALUES (1, 'keep-1', 1), (2, 'keep-2', 2)")
    _ingest(lake, [f for f in server.flush_logs() if f.name >= first], store, db)
    with server.connect(db) as conn, conn.cursor() as cur:
        cur.execute("ALTER TABLE t RENAME COLUMN old_name TO new_name, ADD COLUMN extra INT NOT NULL DEFAULT 5 "
                    "AFTER id")
    take_snapshot(server.uri, store, include=[f"{db}.*"])
    with server.connect(db) as conn, conn.cursor() as cur:
        cur.execute("UPDATE t SET n = n + 10 WHERE id = 2")
        cur.execute("INSERT INTO t (id, new_name, n) VALUES (3, 'three', 3)")
    _ingest(lake, [f for f in server.flush_logs() if f.name >= first], store, db)
    cols = ["id", "extra", "new_name", "n"]
    assert _lake_rows(lake, db, "t", cols) == _server_rows(server, db, "t", cols)
