"""docs/analysts.md: every SQL and Python example on the page runs against a lake built by the real ingest from a
real server's binlogs (MINIMAL row metadata, with a column-moving ALTER), and answers what the page says."""

from __future__ import annotations

import contextlib
import io
import re
from decimal import Decimal
from pathlib import Path

import pytest

from binlake.lake.ingest import IngestOptions
from binlake.lake.pipeline import run_ingest
from binlake.lake.query import run_query

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
    assert len(blocks("sql")) == 4 and len(blocks("python")) == 1


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
