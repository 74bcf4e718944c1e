"""docs/analysts.md: every SQL and Python example on the page runs against a lake built by the real ingest from a
real server's binlogs (MINIMAL row metadata, with a column-moving ALTER), and answers what the page says. The
Spark example runs on the test run's Spark session with the real Delta jars, over tables delta-rs wrote."""

from __future__ import annotations

import contextlib
import io
import re
from decimal import Decimal
from pathlib import Path

import pytest

from binlake.lake.ingest import IngestOptions
from binlake.lake.query import run_query
from binlake.quality.stages import run_ingest
from tests.conftest import skip_or_fail

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "analysts.md"

# (source commit time on 2026-01-15, statements); the page describes this run.
ROUND_1 = [
    ("09:00:00", ["CREATE TABLE customers (id INT PRIMARY KEY, name VARCHAR(50), city VARCHAR(30), "
                  "balance DECIMAL(10,2))",
                  "INSERT INTO customers VALUES (1, 'Ada', 'London', 10.50), (2, 'Grace', 'New York', 0.00), "
                  "(3, 'Lei', 'Beijing', 99.99)"]),
    ("09:30:00", ["UPDATE customers SET balance = balance + 5 WHERE id = 2"]),
    ("10:00:00", ["ALTER TABLE customers MODIFY city VARCHAR(30) AFTER id",
                  "INSERT INTO customers (id, name, city, balance) VALUES (4, 'Linus', 'Zürich', 1.00)"]),
]
ROUND_2 = [
    ("10:30:00", ["UPDATE customers SET id = 40 WHERE id = 4"]),
    ("11:00:00", ["DELETE FROM customers WHERE id = 1"]),
    ("11:30:00", ["UPDATE customers SET balance = 2.50 WHERE id = 40"]),
]


def blocks(kind: str) -> list[str]:
    return re.findall(rf"```{kind}\n(.*?)```", DOC.read_text(), re.S)


def write(server, db: str, steps) -> None:
    with server.connect(db) as conn, conn.cursor() as cur:
        for clock, statements in steps:
            cur.execute(f"SET timestamp = UNIX_TIMESTAMP('2026-01-15 {clock}')")
            for sql in statements:
                cur.execute(sql)
        cur.execute("SET timestamp = DEFAULT")


@pytest.fixture(scope="module")
def lake(mariadb_minimal, tmp_path_factory) -> str:
    server = mariadb_minimal
    with server.connect() as conn, conn.cursor() as cur:
        cur.execute("DROP DATABASE IF EXISTS shop")
        cur.execute("CREATE DATABASE shop")
    earlier = {f.name for f in server.flush_logs()}
    lake = str(tmp_path_factory.mktemp("analysts") / "lake")
    opts = IngestOptions(lake=lake, files=[], databases={"shop"})
    for steps in (ROUND_1, ROUND_2):
        write(server, "shop", steps)
        opts.files = [str(f) for f in server.flush_logs() if f.name not in earlier]
        assert run_ingest(opts).batch is not None
    return lake


def test_the_page_has_the_examples() -> None:
    assert len(blocks("sql")) == 4 and len(blocks("python")) == 2


def test_row_history(lake) -> None:
    rows = run_query(lake, blocks("sql")[0]).to_pylist()
    assert [(r["_op"], r["old_id"], r["id"], r["city"], r["balance"]) for r in rows] == [
        ("insert", None, 4, "Zürich", Decimal("1.00")),
        ("update", 4, 40, "Zürich", Decimal("1.00")),
        ("update", 40, 40, "Zürich", Decimal("2.50")),
    ]
    assert all(r["_binlog_file"].startswith("mysql-bin.") and r["_gtid"] for r in rows)


def test_changes_between_two_times(lake) -> None:
    rows = run_query(lake, blocks("sql")[1]).to_pylist()
    assert [(r["_op"], r["id"], r["name"]) for r in rows] == [("insert", 4, "Linus"), ("update", 40, "Linus")]
    assert rows[1]["_before"]["id"] == 4


def test_changes_per_hour(lake) -> None:
    rows = run_query(lake, blocks("sql")[2]).to_pylist()
    got = {(r["hour"].hour, r["_op"]): r["changes"] for r in rows}
    assert got == {(9, "insert"): 3, (9, "update"): 1, (10, "insert"): 1, (10, "update"): 1, (11, "delete"): 1,
                   (11, "update"): 1}


def test_table_as_of_a_source_time(lake) -> None:
    rows = run_query(lake, blocks("sql")[3]).to_pylist()
    assert [(r["id"], r["name"], r["city"], r["balance"]) for r in rows] == [
        (1, "Ada", "London", Decimal("10.50")), (2, "Grace", "New York", Decimal("5.00")),
        (3, "Lei", "Beijing", Decimal("99.99")), (40, "Linus", "Zürich", Decimal("1.00"))]
    now = run_query(lake, "SELECT id FROM shop.customers ORDER BY id").to_pylist()
    assert [r["id"] for r in now] == [2, 3, 40]


def test_time_travel_snippet(lake) -> None:
    code = blocks("python")[0].replace('LAKE = ".binlake-demo/lake"', f"LAKE = {lake!r}")
    scope: dict = {}
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(code, str(DOC), "exec"), scope)  # the page's own code
    first = scope["as_of_first_batch"]
    assert list(first["id"]) == [1, 2, 3, 4]  # the lake after the first batch: before the key change
    assert "MERGE" in out.getvalue()


def _last_version_of_batch(path: str, batch: int) -> int:
    """From delta-rs's view of the commit log: binlake's app transaction names each commit's batch."""
    from deltalake import DeltaTable

    return max(h["version"] for h in DeltaTable(path).history()
               if (h.get("binlake") or {}).get("txns") and h["binlake"]["txns"][0]["version"] // 1000 == batch)


def test_spark_snippet(lake, spark) -> None:
    from deltalake import DeltaTable

    from binlake.lake.engines.deltaspark import available

    ok, reason = available(spark)
    if not ok:
        skip_or_fail(f"delta-spark: {reason}")
    first = _last_version_of_batch(f"{lake}/shop/customers", 0)
    code = blocks("python")[1]
    assert 'LAKE = ".binlake-demo/lake"' in code and "version = 3\n" in code
    code = code.replace('LAKE = ".binlake-demo/lake"', f"LAKE = {lake!r}").replace("version = 3\n", f"version = {first}\n")
    scope: dict = {}
    with contextlib.redirect_stdout(io.StringIO()):
        exec(compile(code, str(DOC), "exec"), scope)  # the page's own code

    def plain(df) -> list[tuple]:
        return [tuple(r) for r in df.collect()]

    # Spark reads what delta-rs wrote exactly as delta-rs's own SQL does (Arrow on both sides: UTC instants).
    def order(r: dict) -> tuple:
        return r["id"], r.get("_pos", 0), r.get("_sub", 0), r.get("_row", 0)

    for name, df in (("shop.customers", scope["current"]), ("shop.customers__history", scope["changes"])):
        got = sorted(df.toArrow().to_pylist(), key=order)
        want = sorted(run_query(lake, f"SELECT * FROM {name}").to_pylist(), key=order)
        assert len(got) == len(want) > 2 and got == want, name
    assert [r["id"] for r in scope["current"].orderBy("id").collect()] == [2, 3, 40]
    assert [(r["_op"], r["old_id"], r["id"]) for r in scope["window"].collect()] == [
        ("insert", None, 4), ("update", 4, 40)]
    assert all(r["_commit_ts"].hour == 10 for r in scope["window"].collect())
    commits = scope["commits"].collect()
    assert [r["version"] for r in commits] == [h["version"] for h in DeltaTable(f"{lake}/shop/customers").history()]
    # The table as the lake showed it after the first batch: before the key change and the delete.
    as_of = plain(scope["as_of_version"])
    assert [r[0] for r in as_of] == [1, 2, 3, 4]
    assert as_of[3] == (4, "Linus", "Zürich", Decimal("1.00"))
    assert plain(scope["as_of_time"]) == as_of
    assert sorted(plain(scope["same"].select("id", "name", "city", "balance"))) == as_of
