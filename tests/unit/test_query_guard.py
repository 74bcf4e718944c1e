"""`binlake query` is read-only: exactly one SELECT, parsed and rewritten on the parse tree; everything else is refused
with one line and exit code 2, and the lake is unchanged byte for byte afterwards."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from binlake.cli import main
from binlake.exitcodes import ExitCode
from binlake.lake.query import run_query
from binlake.lake.sqlguard import QueryRefused, rewrite_query
from tests.conftest import SHARED_BINLOGS

BB = SHARED_BINLOGS / "blackbeam__rust_mysql_common"
SMALL = BB / "mariadb-bin.000001"  # 2 inserts into toddy_test.outbox (ids 62, 63), FULL metadata

pytestmark = pytest.mark.skipif(not BB.exists(), reason=f"fixture binlogs not found at {SHARED_BINLOGS}")


def tree(path: Path) -> dict[str, str]:
    return {str(p.relative_to(path)): hashlib.sha256(p.read_bytes()).hexdigest() if p.is_file() else "dir"
            for p in sorted(path.rglob("*"))}


@pytest.fixture(scope="module")
def lake(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("qlake") / "lake"
    assert main(["ingest", "--source", f"local:{SMALL}", "--lake", str(root), "--no-progress", "--no-gates"]) == 0
    return root


def refused_statements(lake: Path, outside: Path) -> list[str]:
    log = lake / "toddy_test" / "outbox" / "_delta_log"
    return [
        # writes: a forged Delta commit inside the table's log, files anywhere, tables, settings
        f"COPY (SELECT 1 AS x) TO '{log}/00000000000000000099.json' STORED AS JSON",
        f"COPY (SELECT * FROM toddy_test.outbox) TO '{outside}/copy.csv'",
        "COPY toddy_test.outbox TO '/tmp/binlake-copy.parquet'",
        "INSERT INTO toddy_test.outbox (id) VALUES (1)",
        "UPDATE toddy_test.outbox SET id = 1",
        "DELETE FROM toddy_test.outbox",
        "DROP TABLE toddy_test.outbox",
        "DROP VIEW v",
        "TRUNCATE TABLE toddy_test.outbox",
        "ALTER TABLE toddy_test.outbox ADD COLUMN z INT",
        "CREATE EXTERNAL TABLE pw STORED AS CSV LOCATION '/etc/passwd'",
        "CREATE TABLE t AS SELECT * FROM toddy_test.outbox",
        "CREATE VIEW v AS SELECT 1",
        "SET datafusion.execution.batch_size = 1",
        "SHOW TABLES",
        "DESCRIBE toddy_test.outbox",
        "EXPLAIN SELECT 1",
        "EXPLAIN ANALYZE SELECT count(*) FROM toddy_test.outbox",
        "PREPARE p AS SELECT 1",
        "BEGIN",
        "VALUES (1)",
        # more than one statement, in every spelling
        "SELECT 1; DROP TABLE toddy_test.outbox",
        "SELECT 1; SELECT 2",
        "SELECT 1;;SELECT 2",
        "/* c */ SELECT 1; -- x\n COPY (SELECT 1) TO '/tmp/x.csv'",
        # hidden inside a SELECT
        "SELECT 1 INTO newtable",
        "WITH x AS (INSERT INTO toddy_test.outbox (id) VALUES (1) RETURNING id) SELECT * FROM x",
        "SELECT * FROM (DELETE FROM toddy_test.outbox RETURNING *) d",
        # anything that can read files or other tables
        "SELECT * FROM '/etc/passwd'",
        "SELECT * FROM \"/etc/passwd\"",
        "SELECT * FROM read_csv('/etc/passwd')",
        "SELECT read_parquet('/etc/x.parquet')",
        "SELECT * FROM parquet_metadata('/etc/x.parquet')",
        "SELECT * FROM generate_series(1, 3)",
        "SELECT * FROM toddy_test__outbox",
        "SELECT * FROM datafusion.public.x",
        "SELECT * FROM information_schema.tables",
        "SELECT * FROM toddy_test.no_such_table",
        "SELECT * FROM __binlake_t0",
        "WITH __binlake_t0 AS (SELECT 1) SELECT * FROM toddy_test.outbox",
        # not SQL at all
        "",
        ";",
        "SELEC 1",
        "SELECT 'unterminated",
    ]


def test_every_other_statement_is_refused_and_the_lake_is_unchanged(lake: Path, tmp_path: Path, capsys) -> None:
    before = tree(lake)
    outside = tmp_path / "outside"
    outside.mkdir()
    for sql in refused_statements(lake, outside):
        code = main(["query", "--lake", str(lake), sql])
        out, err = capsys.readouterr()
        assert code == ExitCode.USAGE, (sql, code, err)
        assert out == "" and len(err.splitlines()) == 1 and err.startswith("binlake: error: query "), (sql, err)
        with pytest.raises(QueryRefused):
            run_query(str(lake), sql)
    assert tree(lake) == before
    assert list(outside.iterdir()) == []
    assert not Path("/tmp/binlake-copy.parquet").exists()
    assert run_query(str(lake), "SELECT count(*) AS n FROM toddy_test.outbox").to_pylist() == [{"n": 2}]


def test_literals_comments_and_quoting_are_untouched(lake: Path) -> None:
    for text in ("x toddy_test.outbox y", "toddy_test.outbox__history", "it's \\ \"q\" toddy_test.outbox",
                 "-- not a comment", "/* nor this */", "; DROP TABLE toddy_test.outbox; --"):
        lit = text.replace("'", "''")
        got = run_query(str(lake), f"SELECT '{lit}' AS s, count(*) AS n FROM toddy_test.outbox").to_pylist()
        assert got == [{"s": text, "n": 2}]
    # a comment holding a statement is dropped, never executed; a quoted alias that looks like a table name stays
    got = run_query(str(lake), "SELECT id AS \"toddy_test.outbox\" -- */ DROP TABLE toddy_test.outbox\n"
                               "FROM toddy_test.outbox /* ; DELETE FROM toddy_test.outbox */ ORDER BY id").to_pylist()
    assert got == [{"toddy_test.outbox": 62}, {"toddy_test.outbox": 63}]


def test_select_shapes(lake: Path) -> None:
    q = str(lake)
    ids = [{"id": 62}, {"id": 63}]
    assert run_query(q, 'SELECT "id" FROM "toddy_test"."outbox" ORDER BY 1').to_pylist() == ids
    assert run_query(q, "SELECT toddy_test.outbox.id FROM toddy_test.outbox ORDER BY id").to_pylist() == ids
    assert run_query(q, "SELECT outbox.id FROM toddy_test.outbox ORDER BY id").to_pylist() == ids
    assert run_query(q, "SELECT o.id FROM toddy_test.outbox o ORDER BY id").to_pylist() == ids
    assert run_query(q, "SELECT id FROM TODDY_TEST.OUTBOX ORDER BY id").to_pylist() == ids
    got = run_query(q, "SELECT h._op, c.id FROM toddy_test.outbox c JOIN toddy_test.outbox__history h "
                       "ON h.id = c.id WHERE c.id IN (SELECT max(id) FROM toddy_test.outbox__history)").to_pylist()
    assert got == [{"_op": "insert", "id": 63}]
    # a CTE named like a lake table's last part does not capture db.table, and vice versa
    got = run_query(q, "WITH outbox AS (SELECT 1 AS id) SELECT (SELECT count(*) FROM outbox) AS cte, "
                       "(SELECT count(*) FROM toddy_test.outbox) AS lake").to_pylist()
    assert got == [{"cte": 1, "lake": 2}]
    got = run_query(q, "SELECT id FROM toddy_test.outbox UNION ALL SELECT id FROM toddy_test.outbox__history "
                       "EXCEPT SELECT 62 ORDER BY id").to_pylist()
    assert got == [{"id": 63}]
    assert run_query(q, "(SELECT 1 AS a)").to_pylist() == [{"a": 1}]
    # quoted names holding quotes and SQL stay names
    got = run_query(q, 'WITH "w""x; DROP" AS (SELECT 1 AS v) SELECT v AS "a""b FROM t; --" FROM "w""x; DROP"')
    assert got.to_pylist() == [{'a"b FROM t; --': 1}]


def test_rewrite_registers_only_named_tables() -> None:
    tables = {"a.t": "/lake/a/t", "a.t__history": "/lake/a/t__history", "b.t": "/lake/b/t"}
    text, regs = rewrite_query("SELECT x.v, 'a.t' AS s FROM a.t x JOIN b.t ON true", tables)
    assert sorted(regs.values()) == ["/lake/a/t", "/lake/b/t"]
    assert "'a.t'" in text and "a.t " not in text.replace("'a.t'", "")


def test_missing_lake_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(QueryRefused, match="no such lake"):
        run_query(str(tmp_path / "missing"), "SELECT 1")


def test_printed_results_cannot_drive_the_terminal(lake: Path, capsys) -> None:
    sql = "SELECT 'a' || chr(27) || '[31mred' || chr(10) || 'x' AS \"c\nd\", id FROM toddy_test.outbox ORDER BY id"
    assert main(["query", "--lake", str(lake), sql]) == 0
    out = capsys.readouterr().out
    assert "\x1b" not in out and "a\\x1b[31mred\\nx" in out and "c\\nd" in out
    assert len(out.splitlines()) == 3  # header and two rows: no value broke a line


def test_repeated_column_names_print(lake: Path, capsys) -> None:
    """A join or SELECT naming the same column twice (a table joined with its history): every column printed,
    text escaped in each, no internal error."""
    sql = ("SELECT t.id, h.id, 'x' || chr(27) AS x, h._op FROM toddy_test.outbox t "
           "JOIN toddy_test.outbox__history h ON t.id = h.id ORDER BY t.id")
    assert main(["query", "--lake", str(lake), sql]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == ["id", "id", "x", "_op"]
    assert [line.split() for line in lines[1:]] == [["62", "62", "x\\x1b", "insert"], ["63", "63", "x\\x1b", "insert"]]


def test_invalid_sql_is_named_without_terminal_escapes(lake: Path, capsys) -> None:
    """A lookalike keyword (fullwidth letters) is not SQL: one line naming the spot, no escape codes (the parser's
    message underlines it with ANSI codes, which came out as literal \\x1b[4m)."""
    assert main(["query", "--lake", str(lake), "ＳＥＬＥＣＴ id FROM toddy_test.outbox"]) == ExitCode.USAGE
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1 and "not valid SQL" in err and "line 1, column" in err
    assert "\x1b" not in err and "\\x1b" not in err and "[4m" not in err
