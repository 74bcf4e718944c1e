"""The table lifecycle in the lake (issue 13): RENAME (all forms), TRUNCATE, DROP TABLE / DROP DATABASE, CREATE
again with another layout, and gh-ost / pt-online-schema-change cut-overs, on a private MariaDB with FULL and
MINIMAL row metadata. After each ingest every surviving current table equals the server's `SELECT *`, dropped,
renamed-away and helper tables are gone from the queryable lake, and the history holds what the binlog says."""

from __future__ import annotations

import decimal
import re
from datetime import datetime

import pytest

from binlake.lake.engines import get_engine
from binlake.lake.ingest import IngestOptions
from binlake.lake.layout import LakeLayout
from binlake.lake.query import lake_tables, run_query
from binlake.quality.stages import run_ingest

MODES = ["FULL", "MINIMAL"]


def _norm(v):
    if isinstance(v, decimal.Decimal):
        return str(v)
    if isinstance(v, datetime):
        return v.replace(tzinfo=None)
    return v


def server_tables(server, dbs) -> dict[str, tuple[list[str], list[tuple]]]:
    out = {}
    with server.connect() as conn, conn.cursor() as cur:
        for db in dbs:
            cur.execute("SELECT table_name FROM information_schema.tables WHERE table_schema = %s", (db,))
            for (t,) in cur.fetchall():
                cur.execute(f"SELECT * FROM `{db}`.`{t}`")
                cols = [d[0] for d in cur.description]
                out[f"{db}.{t}"] = (cols, sorted(tuple(_norm(v) for v in r) for r in cur.fetchall()))
    return out


def lake_current(lake, dbs) -> dict[str, tuple[list[str], list[tuple]]]:
    out = {}
    engine = get_engine()
    for name, path in lake_tables(str(lake)).items():
        db, _, t = name.partition(".")
        if db not in dbs or t.endswith("__history") or "__history__g" in t:
            continue
        table = engine.read(path)
        cols = [c for c in table.column_names if not c.startswith("_")]
        out[name] = (cols, sorted(tuple(_norm(r[c]) for c in cols) for r in table.to_pylist()))
    return out


def ingest(lake, files, dbs, schemas=None):
    summary = run_ingest(IngestOptions(lake=str(lake), files=[str(f) for f in files], databases=set(dbs),
                                       schemas=schemas))
    if summary.batch is not None:
        assert summary.gates["before"]["passed"] and summary.gates["after"]["passed"]
    return summary


def new_files(server, first):
    return [f for f in server.flush_logs() if f.name >= first]


def fresh(server, *names) -> list[str]:
    with server.connect() as conn, conn.cursor() as cur:
        for db in names:
            cur.execute(f"DROP DATABASE IF EXISTS `{db}`")
            cur.execute(f"CREATE DATABASE `{db}`")
    return list(names)


def run(server, db, *statements) -> None:
    with server.connect(db) as conn, conn.cursor() as cur:
        for sql in statements:
            cur.execute(sql)


@pytest.mark.parametrize("mode", MODES)
def test_truncate_drop_and_create_again(mariadb_servers, tmp_path, mode, capsys) -> None:
    server = mariadb_servers.get(mode)
    db = fresh(server, f"lc_td_{mode.lower()}")[0]
    lake = tmp_path / "lake"
    first = server.binlog_files()[-1].name
    run(server, db, "CREATE TABLE t (id INT PRIMARY KEY, v VARCHAR(10))",
        "CREATE TABLE g (id INT PRIMARY KEY, y VARCHAR(20))",
        "INSERT INTO t VALUES (1, 'a'), (2, 'b'), (3, 'c')", "INSERT INTO g VALUES (1, 'x'), (2, 'y')")
    ingest(lake, new_files(server, first), [db])
    assert lake_current(lake, [db]) == server_tables(server, [db])
    # Rows, TRUNCATE, more rows in one batch; DROP of g and CREATE again with another type for y, with rows.
    run(server, db, "INSERT INTO t VALUES (4, 'd')", "TRUNCATE TABLE t", "INSERT INTO t VALUES (5, 'e')",
        "UPDATE g SET y = 'z' WHERE id = 1", "DROP TABLE g",
        "CREATE TABLE g (id INT PRIMARY KEY, y DATETIME(6))", "INSERT INTO g VALUES (7, '2024-01-02 03:04:05')")
    ingest(lake, new_files(server, first), [db])
    assert lake_current(lake, [db]) == server_tables(server, [db])
    hist = run_query(str(lake), f"SELECT _op, count(*) AS n FROM {db}.t__history GROUP BY _op ORDER BY _op")
    assert hist.to_pylist() == [{"_op": "insert", "n": 5}, {"_op": "truncate", "n": 1}]
    # The first g's history is a generation of its own; its rows (y text) never mix with the new ones.
    tables = lake_tables(str(lake), dropped=True)
    assert f"{db}.g__history__g1" in tables and f"{db}.g__history__g2" in tables
    old = run_query(str(lake), f"SELECT count(*) AS n FROM {db}.g__history__g1", dropped=True).to_pylist()
    assert old == [{"n": 3}]
    # The command line: older generations only with --dropped.
    from binlake.cli import main

    sql = f"SELECT count(*) AS n FROM {db}.g__history__g1"
    assert main(["query", "--lake", str(lake), "--dropped", sql]) == 0
    assert capsys.readouterr().out.split() == ["n", "3"]
    assert main(["query", "--lake", str(lake), sql]) != 0
    # DROP TABLE then DROP DATABASE: gone from the lake's listing, kept for time travel.
    run(server, db, "DROP TABLE t")
    ingest(lake, new_files(server, first), [db])
    assert lake_current(lake, [db]) == server_tables(server, [db])
    assert f"{db}.t" not in lake_tables(str(lake)) and f"{db}.t__history" not in lake_tables(str(lake))
    run(server, None, f"DROP DATABASE {db}")
    ingest(lake, new_files(server, first), [db])
    assert lake_current(lake, [db]) == {}
    catalog = run_query(str(lake), "SELECT \"table\", generation, state, final_version FROM _binlake.catalog "
                        "ORDER BY \"table\", generation").to_pylist()
    assert [(r["table"], r["generation"], r["state"]) for r in catalog] == [
        (f"{db}.g", 1, "dropped"), (f"{db}.g", 2, "dropped"), (f"{db}.t", 1, "dropped")]
    # Time travel still shows a dropped table's last rows.
    from deltalake import DeltaTable

    t_slot = next(r for r in catalog if r["table"] == f"{db}.t")
    rows = DeltaTable(LakeLayout(str(lake)).current_path(db, "t"), version=t_slot["final_version"]).to_pyarrow_table()
    assert sorted(rows.column("id").to_pylist()) == [5]


@pytest.mark.parametrize("mode", MODES)
def test_rename_forms_carry_rows(mariadb_servers, tmp_path, mode) -> None:
    server = mariadb_servers.get(mode)
    db, db2 = fresh(server, f"lc_rn_{mode.lower()}", f"lc_rn2_{mode.lower()}")
    lake = tmp_path / "lake"
    first = server.binlog_files()[-1].name
    run(server, db, "CREATE TABLE a (id INT PRIMARY KEY, v INT)", "CREATE TABLE x (id INT PRIMARY KEY, v INT)",
        "CREATE TABLE y (id INT PRIMARY KEY, v INT)", "CREATE TABLE m (id INT PRIMARY KEY, s VARCHAR(5))",
        "CREATE TABLE c (id INT PRIMARY KEY, v INT)",
        "INSERT INTO a VALUES (1, 10), (2, 20)", "INSERT INTO x VALUES (1, 100)", "INSERT INTO y VALUES (1, 200)",
        "INSERT INTO m VALUES (1, 'm')", "INSERT INTO c VALUES (1, 1)")
    ingest(lake, new_files(server, first), [db, db2])
    run(server, db, "INSERT INTO a VALUES (3, 30)", "RENAME TABLE a TO b", "UPDATE b SET v = v + 1 WHERE id = 1",
        "INSERT INTO x VALUES (2, 101)", "RENAME TABLE x TO tmp, y TO x, tmp TO y", "INSERT INTO x VALUES (3, 202)",
        f"RENAME TABLE {db}.m TO {db2}.m", f"INSERT INTO {db2}.m VALUES (2, 'n')",
        "ALTER TABLE c RENAME TO d", "INSERT INTO d VALUES (2, 2)")
    ingest(lake, new_files(server, first), [db, db2])
    assert lake_current(lake, [db, db2]) == server_tables(server, [db, db2])
    names = lake_tables(str(lake))
    assert f"{db}.a" not in names and f"{db}.a__history" not in names and f"{db}.b__history" in names
    # The old name's history is found through the catalog: the renamed slot says where it went.
    rows = run_query(str(lake), f"SELECT \"table\", renamed_to FROM _binlake.catalog WHERE state = 'renamed' AND "
                     f"\"table\" = '{db}.a'").to_pylist()
    assert rows == [{"table": f"{db}.a", "renamed_to": f"{db}.b#1"}]
    old = run_query(str(lake), f"SELECT count(*) AS n FROM {db}.a__history__g1", dropped=True).to_pylist()
    assert old == [{"n": 3}]


@pytest.mark.parametrize("mode", MODES)
def test_gh_ost_and_pt_osc_cut_overs(mariadb_servers, tmp_path, mode) -> None:
    server = mariadb_servers.get(mode)
    db = fresh(server, f"lc_osc_{mode.lower()}")[0]
    lake = tmp_path / "lake"
    first = server.binlog_files()[-1].name
    run(server, db, "CREATE TABLE t (id INT PRIMARY KEY, v INT, s VARCHAR(10))",
        *(f"INSERT INTO t VALUES ({i}, {i * 3}, 's{i}')" for i in range(1, 41)))
    ingest(lake, new_files(server, first), [db])
    # gh-ost: ghost table LIKE t, altered (id widened, a column added), rows copied while DML is mirrored.
    run(server, db, "CREATE TABLE _t_ghc (id BIGINT PRIMARY KEY, hint VARCHAR(20))",
        "INSERT INTO _t_ghc VALUES (1, 'start')",
        "CREATE TABLE _t_gho LIKE t", "ALTER TABLE _t_gho MODIFY id BIGINT, ADD COLUMN w INT NOT NULL DEFAULT 9",
        "INSERT INTO _t_gho (id, v, s) SELECT id, v, s FROM t WHERE id <= 20",
        "UPDATE t SET v = v + 1 WHERE id = 5", "UPDATE _t_gho SET v = v + 1 WHERE id = 5",
        "INSERT INTO t VALUES (41, 1, 'new')", "INSERT INTO _t_gho (id, v, s) VALUES (41, 1, 'new')",
        "INSERT INTO _t_gho (id, v, s) SELECT id, v, s FROM t WHERE id > 20 AND id <= 40",
        "DELETE FROM t WHERE id = 7", "DELETE FROM _t_gho WHERE id = 7",
        "RENAME TABLE t TO _t_del, _t_gho TO t", "DROP TABLE _t_del", "DROP TABLE _t_ghc",
        "UPDATE t SET w = 1 WHERE id = 2")
    ingest(lake, new_files(server, first), [db])
    assert lake_current(lake, [db]) == server_tables(server, [db])
    assert sorted(n for n in lake_tables(str(lake)) if n.startswith(db + ".")) == [f"{db}.t", f"{db}.t__history"]
    # pt-online-schema-change: _t_new, triggers mirror DML, swap through _t_old; twice, the second renames a column.
    for n, alter in enumerate(("ADD COLUMN u INT DEFAULT 4", "CHANGE v vv INT")):
        cols = "id, v, s, w" + (", u" if n == 1 else "")
        new_cols = cols.replace("v,", "vv,") if n == 1 else cols
        run(server, db, "CREATE TABLE _t_new LIKE t", f"ALTER TABLE _t_new {alter}",
            f"CREATE TRIGGER pt_ins AFTER INSERT ON t FOR EACH ROW REPLACE INTO _t_new ({new_cols}) VALUES "
            f"({', '.join('NEW.' + c.strip() for c in cols.split(','))})",
            f"CREATE TRIGGER pt_upd AFTER UPDATE ON t FOR EACH ROW REPLACE INTO _t_new ({new_cols}) VALUES "
            f"({', '.join('NEW.' + c.strip() for c in cols.split(','))})",
            "CREATE TRIGGER pt_del AFTER DELETE ON t FOR EACH ROW DELETE FROM _t_new WHERE id = OLD.id",
            f"INSERT IGNORE INTO _t_new ({new_cols}) SELECT {cols} FROM t WHERE id <= 20",
            "UPDATE t SET v = v + 100 WHERE id IN (3, 25, 30)", "DELETE FROM t WHERE id = 26",
            f"INSERT IGNORE INTO _t_new ({new_cols}) SELECT {cols} FROM t WHERE id > 20",
            "RENAME TABLE t TO _t_old, _t_new TO t", "DROP TRIGGER IF EXISTS pt_ins",
            "DROP TRIGGER IF EXISTS pt_upd", "DROP TRIGGER IF EXISTS pt_del", "DROP TABLE IF EXISTS _t_old")
        ingest(lake, new_files(server, first), [db])
        assert lake_current(lake, [db]) == server_tables(server, [db])
    assert sorted(n for n in lake_tables(str(lake)) if n.startswith(db + ".")) == [f"{db}.t", f"{db}.t__history"]
    assert re.search("vv", ",".join(get_engine().read(LakeLayout(str(lake)).current_path(db, "t")).column_names))


def test_backfills_across_truncate_and_drop_converge_and_across_rename_stop_clearly(mariadb_full, tmp_path) -> None:
    """Files ingested out of order: older changes of a table truncated or dropped later never reach its current
    table; older changes of a table renamed later stop the batch with one clear message, nothing else changed."""
    from binlake.cli import main
    from binlake.lake.lifecycle import LifecycleError

    server = mariadb_full  # FULL metadata: a file decodes without the files before it
    db = fresh(server, "lc_backfill")[0]
    first = server.binlog_files()[-1].name
    run(server, db, "CREATE TABLE t (id INT PRIMARY KEY, v INT)", "CREATE TABLE g (id INT PRIMARY KEY, v INT)",
        "CREATE TABLE r (id INT PRIMARY KEY, v INT)", "INSERT INTO t VALUES (1, 1), (2, 2)",
        "INSERT INTO g VALUES (1, 1)", "INSERT INTO r VALUES (1, 1)")
    old = new_files(server, first)[-1]
    run(server, db, "UPDATE t SET v = 5 WHERE id = 1", "TRUNCATE TABLE t", "INSERT INTO t VALUES (3, 3)",
        "DROP TABLE g")
    middle = new_files(server, first)[-1]
    run(server, db, "RENAME TABLE r TO r2", "INSERT INTO r2 VALUES (2, 2)")
    last = new_files(server, first)[-1]
    files = [f for f in server.binlog_files() if f.name >= first and f.name <= last.name]
    lake = tmp_path / "lake"
    ingest(lake, [middle], [db])
    ingest(lake, [old, middle], [db])  # the backfill of t and g: older than their TRUNCATE / DROP
    state = lake_current(lake, [db])
    assert state == {f"{db}.t": (["id", "v"], [(3, 3)]), f"{db}.r": (["id", "v"], [(1, 1)])}
    ingest(lake, [old, middle, last], [db])
    assert lake_current(lake, [db]) == server_tables(server, [db])
    # Another lake reads the RENAME before r's older rows: that batch stops, naming r and the RENAME.
    lake = tmp_path / "lake2"
    ingest(lake, [middle], [db])
    ingest(lake, [middle, last], [db])
    before = lake_current(lake, [db])
    assert before[f"{db}.r2"] == (["id", "v"], [(2, 2)])
    with pytest.raises(LifecycleError, match=r"r: changes at positions before its RENAME"):
        ingest(lake, files, [db])
    assert lake_current(lake, [db]) == before  # nothing merged
    # On the command line: one line naming the table and the RENAME, exit code 4 (bad data), no traceback.
    import contextlib
    import io

    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        code = main(["ingest", "--source", f"local:{files[0].parent}", "--lake", str(lake), "--databases", db,
                     "--no-progress", "--no-gates"])
    lines = [line for line in err.getvalue().splitlines() if line.strip() and not line.startswith("[ingest]")]
    assert code == 4 and len(lines) == 1 and "Traceback" not in err.getvalue(), lines
    assert re.search(r"r: changes at positions before its RENAME \(RENAME to \S+r2 at mysql-bin\.\d+:\d+", lines[0])


def test_helper_table_patterns_are_configurable(mariadb_full, tmp_path) -> None:
    server = mariadb_full
    db = fresh(server, "lc_helpers")[0]
    first = server.binlog_files()[-1].name
    run(server, db, "CREATE TABLE copy_of_t (id INT PRIMARY KEY)", "CREATE TABLE _t_gho (id INT PRIMARY KEY)",
        "INSERT INTO copy_of_t VALUES (1)", "INSERT INTO _t_gho VALUES (1)")
    files = [str(f) for f in new_files(server, first)]
    default, custom = tmp_path / "default", tmp_path / "custom"
    run_ingest(IngestOptions(lake=str(default), files=files, databases={db}))
    run_ingest(IngestOptions(lake=str(custom), files=files, databases={db}, helper_tables=[r"^copy_of_"]))
    assert sorted(n for n in lake_tables(str(default)) if "__" not in n) == [f"{db}.copy_of_t"]
    assert sorted(n for n in lake_tables(str(custom)) if "__" not in n) == [f"{db}._t_gho"]
    assert f"{db}.copy_of_t" in lake_tables(str(custom), dropped=True)


class _CrashAfter:
    """delta-rs, failing after `n` successful commits of any kind (lifecycle ones included): a killed process."""

    COMMITS = ("append", "merge", "replace_schema", "truncate", "copy_table", "reset")

    def __init__(self, n: int | None) -> None:
        self.inner = get_engine()
        self.left = n
        self.commits = 0
        self.name = "crashing"

    def __getattr__(self, item):
        attr = getattr(self.inner, item)
        if item not in self.COMMITS:
            return attr

        def commit(*args, **kwargs):
            if self.left is not None and self.left <= 0:
                raise RuntimeError("killed")
            result = attr(*args, **kwargs)
            self.commits += 1
            if self.left is not None:
                self.left -= 1
            return result

        return commit


def test_killed_at_any_lifecycle_commit_then_rerun_equals_uninterrupted(mariadb_full, tmp_path) -> None:
    """A batch with a swap, a move, a TRUNCATE, a DROP and a re-create: killed after each of its commits and run
    again, the lake ends as the uninterrupted run left it (current tables, catalog, history) and no commit twice."""
    from binlake.settings import QualityConfig

    server = mariadb_full
    db, db2 = fresh(server, "lc_kill", "lc_kill2")
    first = server.binlog_files()[-1].name
    run(server, db, "CREATE TABLE x (id INT PRIMARY KEY, v INT)", "CREATE TABLE y (id INT PRIMARY KEY, v INT)",
        "CREATE TABLE t (id INT PRIMARY KEY, s VARCHAR(5))", "CREATE TABLE g (id INT PRIMARY KEY, v INT)",
        "INSERT INTO x VALUES (1, 1), (2, 2)", "INSERT INTO y VALUES (1, 10)", "INSERT INTO t VALUES (1, 'a')",
        "INSERT INTO g VALUES (1, 1)", "UPDATE x SET v = 3 WHERE id = 1",
        "RENAME TABLE x TO tmp, y TO x, tmp TO y", "INSERT INTO x VALUES (5, 50)", "TRUNCATE TABLE t",
        "INSERT INTO t VALUES (2, 'b')", f"RENAME TABLE t TO {db2}.t", "DROP TABLE g",
        "CREATE TABLE g (id BIGINT PRIMARY KEY, d DATETIME)", "INSERT INTO g VALUES (9, '2024-01-01 00:00:00')")
    files = [str(f) for f in new_files(server, first)]
    opts = dict(files=files, databases={db, db2}, quality=QualityConfig(enabled=False))
    expected = server_tables(server, [db, db2])

    def state(lake):
        catalog = run_query(str(lake), 'SELECT slot, state, final_version FROM _binlake.catalog ORDER BY slot')
        history = {n: get_engine().read(p).num_rows for n, p in lake_tables(str(lake), dropped=True).items()
                   if "__history" in n}
        return lake_current(lake, [db, db2]), catalog.to_pylist(), history

    counting = _CrashAfter(None)
    run_ingest(IngestOptions(lake=str(tmp_path / "clean"), **opts), engine=counting)
    clean = state(tmp_path / "clean")
    assert clean[0] == expected
    for crash_at in range(counting.commits):
        lake = tmp_path / f"crash{crash_at}"
        with pytest.raises(RuntimeError, match="killed"):
            run_ingest(IngestOptions(lake=str(lake), **opts), engine=_CrashAfter(crash_at))
        assert run_ingest(IngestOptions(lake=str(lake), **opts)).batch == 0
        got = state(lake)
        assert got[0] == clean[0] and got[2] == clean[2], f"killed after {crash_at} commits"
        assert got[1] == clean[1], (crash_at, got[1], clean[1])
