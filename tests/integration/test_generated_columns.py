"""Generated and invisible columns against a real MariaDB (FULL and MINIMAL row metadata), real Delta tables.

Found on MariaDB 10.11 with binlog_row_image=FULL (both metadata modes): every rows event carries STORED and
VIRTUAL generated columns and INVISIBLE columns (the TABLE_MAP lists them all). With binlog_row_image=MINIMAL an
insert leaves out VIRTUAL columns and columns it did not set (partial images: a current table refuses them).
What no rows event carries is what the server computes for the rows already there when an ALTER adds a
generated column or changes its expression: binlake evaluates the expression for them (sqlglot -> pyarrow
compute) or, when it cannot, leaves null and warns in the run summary and the table's properties."""

from __future__ import annotations

import json
import random
from decimal import Decimal

import pytest
from deltalake import DeltaTable

from binlake.lake.engines import get_engine
from binlake.lake.ingest import IngestOptions
from binlake.lake.layout import LakeLayout
from binlake.quality.stages import run_ingest
from binlake.settings import QualityConfig

CREATE = ("CREATE TABLE g (id INT PRIMARY KEY, a INT, b VARCHAR(10), s INT AS (a * 2) STORED, "
          "v INT AS (a + 1) VIRTUAL, h INT INVISIBLE DEFAULT 7, c VARCHAR(40) AS (CONCAT(b, '-', a)) VIRTUAL)")


def write(server, db: str, statements: list[str]) -> None:
    with server.connect(db) as conn, conn.cursor() as cur:
        for sql in statements:
            cur.execute(sql)


def columns(server, db: str) -> list[str]:
    with server.connect(db) as conn, conn.cursor() as cur:
        cur.execute("SELECT COLUMN_NAME FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = %s AND TABLE_NAME = 'g' "
                    "ORDER BY ORDINAL_POSITION", (db,))
        return [r[0] for r in cur.fetchall()]


def server_rows(server, db: str) -> dict:
    names = columns(server, db)  # SELECT * leaves invisible columns out: name them all
    with server.connect(db) as conn, conn.cursor() as cur:
        cur.execute(f"SELECT {', '.join(f'`{n}`' for n in names)} FROM g")
        return {r[0]: _norm(dict(zip(names, r, strict=True))) for r in cur.fetchall()}


def lake_rows(lake, db: str) -> dict:
    data = get_engine().read(LakeLayout(str(lake)).current_path(db, "g")).to_pylist()
    return {r["id"]: _norm({k: v for k, v in r.items() if not k.startswith("_")}) for r in data}


def _norm(row: dict) -> dict:
    return {k: (float(v) if isinstance(v, Decimal) else v) for k, v in row.items()}


def changes(rng: random.Random, ids: set[int], n: int, touched: set[int] | None = None) -> list[str]:
    out = []
    for _ in range(n):
        roll = rng.random()
        if roll < 0.5 or len(ids) < 3:
            new = max(ids, default=0) + 1
            ids.add(new)
            a = "NULL" if rng.random() < 0.1 else rng.randint(-50, 50)
            out.append(f"INSERT INTO g (id, a, b) VALUES ({new}, {a}, 'b{rng.randint(0, 9)}')")
            target = new
        elif roll < 0.85:
            target = rng.choice(sorted(ids))
            out.append(f"UPDATE g SET a = {rng.randint(-50, 50)}, h = {rng.randint(0, 9)} WHERE id = {target}")
        else:
            target = rng.choice(sorted(ids))
            ids.discard(target)
            out.append(f"DELETE FROM g WHERE id = {target}")
        if touched is not None:
            touched.add(target)
    return out


@pytest.mark.parametrize("metadata", ["FULL", "MINIMAL"])
def test_generated_and_invisible_columns_equal_the_server_across_alters(mariadb_servers, fresh_database, tmp_path,
                                                                        metadata) -> None:
    server = mariadb_servers.get(metadata)
    db = fresh_database(server)
    rng = random.Random(len(metadata))
    server.flush_logs()
    first = server.binlog_files()[-1].name
    write(server, db, [CREATE, "CREATE TABLE other (id INT PRIMARY KEY, x INT)", "INSERT INTO other VALUES (1, 1)"])
    ids: set[int] = set()
    write(server, db, changes(rng, ids, 40))
    lake = tmp_path / "lake"

    def ingest():
        files = [str(f) for f in server.flush_logs() if f.name >= first]
        return run_ingest(IngestOptions(lake=str(lake), files=files, databases={db},
                                        quality=QualityConfig(enabled=metadata == "FULL")))

    ingest()
    assert lake_rows(lake, db) == server_rows(server, db)
    path = LakeLayout(str(lake)).current_path(db, "g")
    props = get_engine().properties(path)
    assert json.loads(props["binlake.invisible"]) == ["h"]
    assert set(json.loads(props["binlake.generated"])) == {"s", "v", "c"}
    assert json.loads(props["binlake.generated"])["s"].startswith("STORED")

    # ALTERs that add generated columns, followed by rows (the table is altered when they arrive): the rows
    # already there get the evaluated expressions; `/` is not translated: null and a warning.
    write(server, db, ["ALTER TABLE g ADD COLUMN v2 INT AS (a * 10 + id) VIRTUAL, "
                       "ADD COLUMN s2 VARCHAR(20) AS (IF(a > 0, UPPER(b), CONCAT('n', id))) STORED, "
                       "ADD COLUMN u DOUBLE AS (a / 3) VIRTUAL"])
    touched: set[int] = set()
    write(server, db, changes(rng, ids, 15, touched))
    summary = ingest()
    expected, got = server_rows(server, db), lake_rows(lake, db)
    assert set(got) == set(expected)
    for key, row in expected.items():
        if key not in touched:  # rows no event carried after the ALTER: u could not be evaluated
            assert got[key]["u"] is None
            row = {**row, "u": None}
        assert got[key] == row, key
    assert any("u: VIRTUAL" in w and "(a / 3)" in w.replace("`", "") for w in summary.warnings), summary.warnings
    assert "warning: " in summary.text()
    props = get_engine().properties(path)
    assert any(".u:" in w for w in json.loads(props["binlake.warnings"]))
    assert {"v2", "s2", "u"} <= set(json.loads(props["binlake.generated"]))

    # An expression changed by the batch's last statement (no row of the new version follows): every row again.
    write(server, db, ["ALTER TABLE g MODIFY v INT AS (a * 3 - 1) VIRTUAL"])
    ingest()
    expected, got = server_rows(server, db), lake_rows(lake, db)
    assert {k: {c: x for c, x in r.items() if c != "u"} for k, r in got.items()} == {
        k: {c: x for c, x in r.items() if c != "u"} for k, r in expected.items()}
    assert [f.name for f in DeltaTable(path).schema().fields][:10] == columns(server, db)[:10]
    assert get_engine().read(LakeLayout(str(lake)).current_path(db, "other")).num_rows == 1


@pytest.mark.parametrize("metadata", ["FULL", "MINIMAL"])
def test_what_the_binlog_carries_for_generated_and_invisible_columns(mariadb_servers, fresh_database,
                                                                     metadata) -> None:
    """The facts the lake relies on, read back from the real server's binlog: with binlog_row_image=FULL every
    image holds STORED, VIRTUAL and INVISIBLE columns with the values the server computed; with MINIMAL an insert
    leaves out the VIRTUAL column and the columns it did not set (so such images are partial)."""
    from binlake.binlog.decoder import BinlogDecoder, DecodeOptions
    from binlake.binlog.records import RowChange
    from binlake.binlog.rows import ABSENT

    server = mariadb_servers.get(metadata)
    db = fresh_database(server)
    write(server, db, ["CREATE TABLE f (id INT PRIMARY KEY, a INT, s INT AS (a * 2) STORED, "
                       "v INT AS (a + 1) VIRTUAL, h INT INVISIBLE DEFAULT 7)"])
    server.flush_logs()
    first = server.binlog_files()[-1].name
    write(server, db, ["INSERT INTO f (id, a) VALUES (1, 5)", "UPDATE f SET a = 6 WHERE id = 1",
                       "SET SESSION binlog_row_image = 'MINIMAL'", "INSERT INTO f (id, a) VALUES (2, 8)"])
    files = [str(f) for f in server.flush_logs() if f.name >= first]
    changes = [c for c in BinlogDecoder(DecodeOptions(databases={db})).decode_files(files)
               if isinstance(c, RowChange)]
    full_insert, update, minimal_insert = changes
    assert len(full_insert.table.columns) == 5  # the TABLE_MAP lists every column, generated and invisible ones
    assert list(full_insert.after) == [1, 5, 10, 6, 7]
    assert list(update.before) == [1, 5, 10, 6, 7] and list(update.after) == [1, 6, 12, 7, 7]
    after = list(minimal_insert.after)
    assert after[:3] == [2, 8, 16] and after[3] is ABSENT and after[4] is ABSENT
