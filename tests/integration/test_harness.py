"""The test harness itself: a private MariaDB that writes binlogs, and a working Spark session."""

from __future__ import annotations

from binlake.binlog.constants import MAGIC, EventType
from binlake.binlog.stream import EventStream, open_binlog


def test_private_server_writes_row_binlogs(mariadb_full, fresh_database) -> None:
    db = fresh_database(mariadb_full)
    before = set(mariadb_full.binlog_files())
    with mariadb_full.connect(db) as conn, conn.cursor() as cur:
        cur.execute("SELECT @@binlog_format, @@binlog_row_metadata, @@log_bin")
        assert cur.fetchone() == ("ROW", "FULL", 1)
        cur.execute("CREATE TABLE t (id INT PRIMARY KEY, v VARCHAR(10))")
        cur.executemany("INSERT INTO t VALUES (%s, %s)", [(1, "a"), (2, "b")])
    closed = mariadb_full.flush_logs()
    assert closed, "FLUSH BINARY LOGS must close at least one file"
    newest_closed = closed[-1]
    assert newest_closed.read_bytes()[:4] == MAGIC
    types = [ev.type for ev in EventStream(open_binlog(str(newest_closed)), newest_closed.name)]
    assert types[0] == EventType.FORMAT_DESCRIPTION
    assert EventType.WRITE_ROWS_V1 in types or EventType.WRITE_ROWS_V2 in types
    assert set(mariadb_full.binlog_files()) > before


def test_minimal_metadata_server_is_separate(mariadb_minimal, mariadb_full) -> None:
    with mariadb_minimal.connect() as conn, conn.cursor() as cur:
        cur.execute("SELECT @@binlog_row_metadata")
        assert cur.fetchone() == ("MINIMAL",)
    assert mariadb_minimal.port != mariadb_full.port


def test_spark_runs_a_tiny_job(spark) -> None:
    df = spark.createDataFrame([(i, i % 3) for i in range(100)], "n INT, k INT")
    counts = {r["k"]: r["c"] for r in df.groupBy("k").count().withColumnRenamed("count", "c").collect()}
    assert counts == {0: 34, 1: 33, 2: 33}
    assert spark.conf.get("spark.ui.enabled") == "false"
    assert spark.sparkContext.master == "local[2]"
