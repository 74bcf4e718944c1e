"""Spark at scale, first step (issue 16): the lake `binlake ingest --spark --engine delta-spark` writes (decode in
Spark tasks, commits through delta-spark) equals the lake the in-process delta-rs path writes, table by table,
current and history tables of every generation, on a MariaDB workload with the table lifecycle (RENAME incl. a
swap and a move to another database, TRUNCATE, DROP + CREATE again with another layout), key moves on a composite
key and ALTERs mid-stream, ingested in two batches; and the current tables equal the server's `SELECT *`.
The command line stops its SparkSession when done, so the test runs what `cmd_ingest` runs (run_ingest with the
Spark executor and the delta-spark engine) on the suite's one session; quality gates are off in both lakes."""

from __future__ import annotations

import random
from pathlib import Path

import pyarrow as pa

from binlake.lake.engines import get_engine
from binlake.lake.ingest import IngestOptions
from binlake.quality.stages import run_ingest
from binlake.settings import QualityConfig
from tests.conftest import skip_or_fail

from .test_key_moves import TABLES, Model
from .test_lifecycle import _norm, fresh, lake_current, new_files, run, server_tables


def delta_tables(lake: Path) -> dict[str, Path]:
    """Every Delta table under the lake (current, history of every generation, binlake's own), by relative path."""
    return {str(p.parent.relative_to(lake)): p.parent for p in lake.rglob("_delta_log")}


def table_rows(path: Path, wall_clock: bool = False) -> tuple[list[str], list[tuple]]:
    """Columns (sorted) and sorted rows of a Delta table read with delta-rs: the data, not the engine's log.
    `wall_clock`: leave out timestamp columns (binlake's own tables record when a step ran)."""
    table = get_engine().read(str(path))
    cols = sorted(f.name for f in table.schema if not (wall_clock and pa.types.is_timestamp(f.type)))
    return cols, sorted((tuple(_norm(r[c]) for c in cols) for r in table.to_pylist()), key=repr)


def workload(dbs: list[str], seed: int) -> tuple[list[list[str]], list[list[str]]]:
    """Two batches of statements (per database 0 / 1) with seeded values and key moves on a composite key."""
    rng = random.Random(seed)
    db2 = dbs[1]
    ck = Model(rng, "ck")

    def vals(n: int) -> str:
        return ", ".join(f"({i}, {rng.randint(-50, 50)})" for i in rng.sample(range(1, 60), n))

    first = [TABLES["ck"], "CREATE TABLE x (id INT PRIMARY KEY, v INT)", "CREATE TABLE y (id INT PRIMARY KEY, v INT)",
             "CREATE TABLE t (id INT PRIMARY KEY, v INT)", "CREATE TABLE g (id INT PRIMARY KEY, v INT)",
             f"INSERT INTO x VALUES {vals(rng.randint(3, 8))}", f"INSERT INTO y VALUES {vals(rng.randint(3, 8))}",
             f"INSERT INTO t VALUES {vals(rng.randint(3, 8))}", f"INSERT INTO g VALUES {vals(rng.randint(3, 8))}",
             *(s for _ in range(25) for s in ck.step()),
             "UPDATE x SET v = v + 1 ORDER BY id LIMIT 2", "RENAME TABLE x TO tmp, y TO x, tmp TO y",
             f"INSERT INTO x VALUES ({rng.randint(100, 200)}, 1)", "TRUNCATE TABLE t",
             f"INSERT INTO t VALUES {vals(2)}", "UPDATE g SET v = -v"]
    second = [*(s for _ in range(10) for s in ck.step()),
              "ALTER TABLE ck ADD COLUMN z INT DEFAULT 7, MODIFY w VARCHAR(40)",
              "UPDATE ck SET z = v WHERE v > 50", *(s for _ in range(15) for s in ck.step()),
              "ALTER TABLE x ADD COLUMN note VARCHAR(10) DEFAULT 'n', CHANGE v vv BIGINT",
              f"INSERT INTO x (id, vv) VALUES ({rng.randint(300, 400)}, 2)",
              "DROP TABLE g", "CREATE TABLE g (id BIGINT PRIMARY KEY, d DATETIME(6), s VARCHAR(5))",
              "INSERT INTO g VALUES (9, '2024-01-02 03:04:05.678901', 'new')",
              f"RENAME TABLE t TO {db2}.t", f"INSERT INTO {db2}.t VALUES (500, 5)", "TRUNCATE TABLE y",
              "DELETE FROM x ORDER BY id LIMIT 1"]
    return first, second


def test_delta_spark_lake_equals_delta_rs_lake(mariadb_minimal, spark, tmp_path) -> None:
    from binlake.lake.engines.deltaspark import DeltaSparkEngine, available
    from binlake.spark import spark_executor

    ok, reason = available(spark)
    if not ok:
        skip_or_fail(f"delta-spark: {reason}")
    server = mariadb_minimal  # MINIMAL metadata: the harder decode (columns from the tracked schema)
    dbs = fresh(server, "sp_parity_a", "sp_parity_b")
    first = server.binlog_files()[-1].name
    batches = workload(dbs, seed=16)
    rs_lake, spark_lake = tmp_path / "rs", tmp_path / "spark"
    spark_engine = DeltaSparkEngine(spark)
    files: list[Path] = []
    for n, statements in enumerate(batches):
        run(server, dbs[0], *statements)
        files = new_files(server, first)
        opts = dict(files=[str(f) for f in files], databases=set(dbs), quality=QualityConfig(enabled=False))
        assert run_ingest(IngestOptions(lake=str(rs_lake), **opts)).batch is not None
        assert run_ingest(IngestOptions(lake=str(spark_lake), **opts), executor=spark_executor(spark),
                          engine=spark_engine).batch is not None
        expected = server_tables(server, dbs)
        assert lake_current(rs_lake, dbs) == expected, f"delta-rs lake after batch {n + 1}"
        assert lake_current(spark_lake, dbs) == expected, f"delta-spark lake after batch {n + 1}"
        rs_tables, spark_tables = delta_tables(rs_lake), delta_tables(spark_lake)
        assert sorted(spark_tables) == sorted(rs_tables), f"batch {n + 1}"
        for name, path in sorted(rs_tables.items()):
            own = name.startswith("_binlake")
            assert table_rows(spark_tables[name], own) == table_rows(path, own), f"{name} after batch {n + 1}"
    # The workload did what it says: older generations of the swapped and the re-created tables, the moved table.
    names = set(delta_tables(rs_lake))
    db, db2 = dbs
    assert {f"{db}/y__history__g2", f"{db}/g__history__g2", f"{db2}/t", f"{db2}/t__history"} <= names, names


def test_all_types_and_random_lifecycle_workloads_equal_on_both_paths(mariadb_full, spark, tmp_path) -> None:
    """The suite's other MariaDB workloads through both paths, split in two batches: the all-types workload (every
    column type; key-changing updates and deletes in the second batch: the values travel through staged Parquet
    and Spark here) and a seeded round of the random lifecycle workload (every operation once: tables created,
    renamed, swapped, moved, truncated, dropped, created again, gh-ost and pt-osc cut-overs), the split at one of
    its FLUSH points. The delta-spark lake equals the delta-rs lake table by table after each batch (the catalog
    too: a dropped table's `final_version` is the same Delta version in both); the lifecycle workload's tables
    equal the server's SELECT * at the split point and at the end (the all-types table's values are compared with
    the server by tests/integration/test_sql_roundtrip)."""
    from binlake.lake.engines.deltaspark import DeltaSparkEngine, available
    from binlake.spark import spark_executor
    from binlake.testing.workload import run_all_types_workload

    from .test_lifecycle_random import Workload

    ok, reason = available(spark)
    if not ok:
        skip_or_fail(f"delta-spark: {reason}")
    server = mariadb_full
    dbs = fresh(server, "sp_wl_a", "sp_wl_b", "sp_wl_types")  # the lifecycle workload uses the first two
    first = server.binlog_files()[-1].name
    rs_lake, spark_lake = tmp_path / "rs", tmp_path / "spark"
    spark_engine = DeltaSparkEngine(spark)

    def both(label: str, files: list[Path], expected: dict) -> None:
        opts = dict(files=[str(f) for f in files], databases=set(dbs), quality=QualityConfig(enabled=False))
        assert run_ingest(IngestOptions(lake=str(rs_lake), **opts)).batch is not None
        assert run_ingest(IngestOptions(lake=str(spark_lake), **opts), executor=spark_executor(spark),
                          engine=spark_engine).batch is not None
        rs_tables, spark_tables = delta_tables(rs_lake), delta_tables(spark_lake)
        assert sorted(spark_tables) == sorted(rs_tables), label
        for name, path in sorted(rs_tables.items()):
            own = name.startswith("_binlake")
            assert table_rows(spark_tables[name], own) == table_rows(path, own), f"{name} after {label}"
        lifecycle = {k: v for k, v in lake_current(spark_lake, dbs[:2]).items() if v[1]}  # as server_state: rows
        assert lifecycle == expected, label

    with server.connect(dbs[2]) as conn:
        counts = run_all_types_workload(conn, "all_types", random.Random(1616), rows=120)
    assert counts["update"] and counts["delete"]
    work = Workload(server, dbs[:2], seed=1617)
    work.run(len(Workload.OPS))
    with server.connect(dbs[2]) as conn, conn.cursor() as cur:
        cur.execute("UPDATE all_types SET id = id + 1000 WHERE id % 7 = 0")
        cur.execute("DELETE FROM all_types WHERE id % 5 = 0")
        conn.commit()
    files = new_files(server, first)
    split, state = work.checkpoints[len(work.checkpoints) // 2]
    assert len(work.checkpoints) > 1 and split < files[-1].name
    both(f"batch 1 (to {split})", [f for f in files if f.name <= split], state)
    both("batch 2", files, work.checkpoints[-1][1])
    # The workload did what it says, and the split left lifecycle statements to both batches.
    catalog = {r["slot"]: r for r in get_engine().read(str(spark_lake / "_binlake" / "catalog")).to_pylist()}
    assert {r["state"] for r in catalog.values()} >= {"live", "renamed", "dropped"}, catalog
    assert len({r["batch_id"] for r in catalog.values()}) == 2, catalog


def _merge_commits(table: Path) -> list[tuple[str, bool]]:
    """(who, reduced by Spark) of each MERGE commit in a Delta table's log: `engineInfo` names Spark for Spark's own
    commits and delta-rs for the embedded engine's; binlake's record says `reducedBy: spark` when a Spark task made
    it (binlake.lake.engines.netreduce.merge_segment)."""
    import json

    out = []
    for entry in sorted((table / "_delta_log").glob("*.json")):
        for line in entry.read_text().splitlines():
            info = json.loads(line).get("commitInfo") or {}
            if info.get("operation") == "MERGE":
                record = info.get("binlake") or info.get("userMetadata") or {}
                record = json.loads(record) if isinstance(record, str) else record
                who = "spark" if str(info.get("engineInfo", "")).startswith("Apache-Spark") else "delta-rs"
                out.append((who, record.get("reducedBy") == "spark"))
    return out


def test_merges_into_filled_tables_by_a_task_or_by_delta_merge_equal_delta_rs(mariadb_full, spark, tmp_path) -> None:
    """Batches into current tables that already hold rows (the hourly steady state), three ways on one seeded
    workload of three batches: in process (delta-rs, the reference); on Spark, where a staged segment into a
    filled table is merged by one Python task (binlake.lake.engines.netreduce.merge_segment: its MERGE commits are
    delta-rs's with `reducedBy: spark`); and on Spark with that path turned off (the Spark conf
    `spark.binlake.taskMergeMaxMB` = 0: Delta MERGEs in the JVM). The workload has key moves on a composite key,
    deletes and re-inserts of deleted keys (tombstones), an ALTER between batches and one inside a batch, and a
    table of 3,000 rows. Before the third batch one table of the task-merge lake gets deletion vectors enabled (a
    writer feature the embedded engine does not write): its merge falls back to Spark's MERGE. All three lakes equal
    each other table by table after every batch, and the server's SELECT *."""
    from binlake.lake.engines.deltaspark import DeltaSparkEngine, available
    from binlake.spark import spark_executor

    ok, reason = available(spark)
    if not ok:
        skip_or_fail(f"delta-spark: {reason}")
    server = mariadb_full
    dbs = fresh(server, "sp_fill_a", "sp_fill_b")
    db = dbs[0]
    first = server.binlog_files()[-1].name
    rng = random.Random(1618)
    ck = Model(rng, "ck")

    def rows(n: int, lo: int, hi: int, z: bool = False) -> str:
        return ", ".join(f"({i}, {rng.randint(-10**6, 10**6)}, '{rng.choice(['a', 'bb', 'ccc', ''])}'"
                         + (f", {rng.randint(-9, 9)})" if z else ")") for i in rng.sample(range(lo, hi), n))

    big = ", ".join(f"({i}, {rng.randint(0, 99)}, 's{i % 13}')" for i in range(1, 3001))
    batches = [
        [TABLES["ck"], "CREATE TABLE big (id INT PRIMARY KEY, v INT, s VARCHAR(8))",
         "CREATE TABLE small (id INT PRIMARY KEY, v INT, s VARCHAR(8))", f"INSERT INTO big VALUES {big}",
         f"INSERT INTO small VALUES {rows(20, 1, 100)}", *(s for _ in range(15) for s in ck.step())],
        [f"UPDATE big SET v = v + 1 WHERE id % {rng.randint(3, 7)} = 0",
         f"DELETE FROM big WHERE id % {rng.randint(8, 11)} = 1", "DELETE FROM small WHERE id % 2 = 0",
         *(s for _ in range(15) for s in ck.step()),
         "UPDATE big SET id = id + 5000 WHERE id % 17 = 0",  # key moves
         "INSERT INTO small VALUES (2, 1, 'back'), (4, 2, 'back')",  # deleted keys again
         "ALTER TABLE small ADD COLUMN z INT DEFAULT 3", f"INSERT INTO small VALUES {rows(5, 200, 300, z=True)}"],
        [f"INSERT INTO big VALUES {rows(50, 10000, 20000)}", f"UPDATE big SET s = 'x' WHERE id % {rng.randint(2, 5)} = 0",
         "DELETE FROM big WHERE id BETWEEN 100 AND 400", *(s for _ in range(15) for s in ck.step()),
         "UPDATE small SET z = z + id", "INSERT INTO small (id, v, s) VALUES (2000, 1, 'n')",
         f"DELETE FROM small WHERE id < {rng.randint(5, 50)}"],
    ]
    lakes = {"rs": tmp_path / "rs", "task": tmp_path / "task", "merge": tmp_path / "merge"}
    engine = DeltaSparkEngine(spark)
    conf = DeltaSparkEngine.TASK_MERGE_CONF
    for n, statements in enumerate(batches):
        run(server, db, *statements)
        files = new_files(server, first)
        opts = dict(files=[str(f) for f in files], databases=set(dbs), quality=QualityConfig(enabled=False))
        if n == 2:  # deletion vectors on one table of the task-merge lake: the embedded engine leaves it to Spark
            spark.sql(f"ALTER TABLE delta.`{lakes['task'] / db / 'small'}` "
                      "SET TBLPROPERTIES ('delta.enableDeletionVectors' = 'true')")
        assert run_ingest(IngestOptions(lake=str(lakes["rs"]), **opts)).batch is not None
        assert run_ingest(IngestOptions(lake=str(lakes["task"]), **opts), executor=spark_executor(spark),
                          engine=engine).batch is not None
        spark.conf.set(conf, "0")
        try:
            assert run_ingest(IngestOptions(lake=str(lakes["merge"]), **opts), executor=spark_executor(spark),
                              engine=engine).batch is not None
        finally:
            spark.conf.unset(conf)
        expected = server_tables(server, dbs)
        assert expected[f"{db}.big"][1] and expected[f"{db}.ck"][1], expected.keys()
        tables = {k: delta_tables(v) for k, v in lakes.items()}
        for name in ("task", "merge"):
            assert lake_current(lakes[name], dbs) == expected, f"{name} lake after batch {n + 1}"
            assert sorted(tables[name]) == sorted(tables["rs"]), f"{name} lake after batch {n + 1}"
            for table, path in sorted(tables["rs"].items()):
                own = table.startswith("_binlake")
                assert table_rows(tables[name][table], own) == table_rows(path, own), \
                    f"{table} of the {name} lake after batch {n + 1}"
    # Who merged: batches 2 and 3 into the filled tables by tasks, or by Delta MERGE with the path off; the table
    # with deletion vectors by Spark in batch 3.
    for table in ("big", "ck"):
        task = _merge_commits(lakes["task"] / db / table)
        assert task and all(c == ("delta-rs", True) for c in task), (table, task)
        merge = _merge_commits(lakes["merge"] / db / table)
        assert merge and all(who == "spark" for who, _ in merge), (table, merge)
    small = _merge_commits(lakes["task"] / db / "small")
    assert ("delta-rs", True) in small and small[-1][0] == "spark", small
