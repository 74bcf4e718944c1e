"""The column-reorder hazard on a real MariaDB with MINIMAL row metadata: names come only from the timeline.

Tables are created, written, snapshotted, ALTERed (move FIRST/AFTER, add in the middle, drop, rename, change a
type), written again, rotated, and so on. Then the files are decoded (a) with no snapshot (the CREATE TABLEs
are in the binlog), (b) only the later files with the snapshot taken just before them, (c) later files with a
stale snapshot, which must raise SchemaMismatch, and (d) the same script on a FULL-metadata server, whose names
must agree with the timeline's.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

from binlake.binlog.decoder import BinlogDecoder, DecodeOptions
from binlake.binlog.errors import SchemaMismatch
from binlake.binlog.output import image_to_dict
from binlake.binlog.records import RowChange
from binlake.cli import main
from binlake.exitcodes import ExitCode
from binlake.schema.api import build_resolver, take_snapshot
from binlake.schema.evolve import evolve_row

STAGES = [
    [  # stage 0: create and fill
        "CREATE TABLE people (id INT PRIMARY KEY, name VARCHAR(40), city VARCHAR(40), age INT, score DECIMAL(6,2))",
        "CREATE TABLE tags (id INT PRIMARY KEY, label VARCHAR(20), weight SMALLINT)",
        "INSERT INTO people VALUES (1,'Ada','London',36,1.50),(2,'Bob','Paris',41,2.25),(3,'Cy','Rome',29,NULL)",
        "INSERT INTO tags VALUES (1,'red',3),(2,'blue',7)",
        "UPDATE people SET age = age + 1 WHERE id = 2",
    ],
    [  # stage 1: move, add in the middle, write
        "ALTER TABLE people MODIFY city VARCHAR(40) FIRST",
        "ALTER TABLE people ADD COLUMN email VARCHAR(60) AFTER name",
        "INSERT INTO people (id, name, email, city, age, score) VALUES (4,'Dee','d@x.io','Oslo',50,9.99)",
        "UPDATE people SET email = 'a@x.io' WHERE id = 1",
        "ALTER TABLE tags CHANGE label tag_name VARCHAR(20), MODIFY weight INT AFTER id",
        "INSERT INTO tags VALUES (3, 5, 'green')",
    ],
    [  # stage 2: drop, rename, change a type, move again
        "ALTER TABLE people DROP COLUMN age",
        "ALTER TABLE people RENAME COLUMN score TO points",
        "ALTER TABLE people MODIFY points DECIMAL(8,3)",
        "ALTER TABLE people MODIFY name VARCHAR(40) AFTER points",
        "INSERT INTO people (id, city, email, points, name) VALUES (5,'Lima','e@x.io',12.345,'Eve')",
        "UPDATE people SET id = 50, points = 0.5 WHERE id = 5",
        "DELETE FROM people WHERE id = 3",
        "UPDATE tags SET weight = weight * 10",
    ],
]


def run_script(server, db: str, store: Path | None) -> tuple[list[Path], list[str]]:
    """Run the stages, rotating after each and snapshotting (into `store`) before each later stage."""
    with server.connect() as conn, conn.cursor() as cur:
        cur.execute(f"DROP DATABASE IF EXISTS `{db}`")
        cur.execute(f"CREATE DATABASE `{db}`")
        first = server.binlog_files()[-1].name
    snapshots = []
    for i, stage in enumerate(STAGES):
        if i > 0 and store is not None:
            stored, name, _ = take_snapshot(server.uri, store, include=[f"{db}.*"])
            assert stored
            snapshots.append(name)
        with server.connect(db) as conn, conn.cursor() as cur:
            for sql in stage:
                cur.execute(sql)
        server.flush_logs()
    files = server.binlog_files()[:-1]
    return files[[f.name for f in files].index(first):], snapshots


def decode(files: list[Path], resolver=None, db: str | None = None) -> list[RowChange]:
    opts = DecodeOptions(table_resolver=resolver, databases={db} if db else None)
    return [r for r in BinlogDecoder(opts).decode_files(files) if isinstance(r, RowChange)]


def final_state(changes: list[RowChange], db: str, table: str, resolver) -> dict:
    """Apply the changes in order; rows the binlog does not rewrite follow each ALTER as the server did."""
    versions = [v.table for v in resolver.timeline.versions(db, table) if v.table is not None]
    index = {id(t): i for i, t in enumerate(versions)}
    state: dict = {}  # id -> (version index, row by name)

    def move_all(to: int) -> None:
        for key, (at, row) in list(state.items()):
            while at < to:
                row = evolve_row(row, versions[at], versions[at + 1])
                at += 1
            state[key] = (at, row)

    for c in changes:
        if c.table.table != table:
            continue
        at = index[id(c.table.schema)]
        move_all(at)
        names = [col.name for col in c.table.columns]
        if c.before is not None:
            state.pop(c.before[0] if names[0] == "id" else c.before[names.index("id")])
        if c.after is not None:
            row = {n: v for n, v in zip(names, c.after, strict=True)}
            state[row["id"]] = (at, row)
    move_all(len(versions) - 1)
    return {k: {n: _plain(v) for n, v in row.items()} for k, (_, row) in state.items()}


def _plain(v):
    return format(v, "f") if hasattr(v, "as_tuple") else v


def server_state(server, db: str, table: str) -> dict:
    with server.connect(db) as conn, conn.cursor() as cur:
        cur.execute(f"SELECT * FROM `{table}`")
        names = [d[0] for d in cur.description]
        rows = [dict(zip(names, r, strict=True)) for r in cur.fetchall()]
    out = {}
    for r in rows:
        out[r["id"]] = {k: _plain(v) for k, v in r.items()}
    return out


def stale_store(store: Path, name: str, tmp_path: Path) -> Path:
    """A store holding only snapshot `name` (copied)."""
    stale = tmp_path / "stale"
    shutil.copytree(store / "default" / "snapshots" / name, stale / "default" / "snapshots" / name)
    return stale


@pytest.fixture(scope="module")
def minimal_run(mariadb_servers, tmp_path_factory):
    server = mariadb_servers.get("MINIMAL")
    store = tmp_path_factory.mktemp("schema-store")
    files, snapshots = run_script(server, "timeline_db", store)
    return server, files, store, snapshots


def test_a_all_files_without_snapshot_match_select(minimal_run) -> None:
    server, files, _, _ = minimal_run
    resolver = build_resolver(files)
    changes = decode(files, resolver, "timeline_db")
    assert changes and all(not k.startswith("@") for c in changes for k in c.table.column_keys)
    for table in ("people", "tags"):
        assert final_state(changes, "timeline_db", table, resolver) == server_state(server, "timeline_db", table)


def test_without_timeline_minimal_rows_have_no_names(minimal_run) -> None:
    _, files, _, _ = minimal_run
    changes = decode(files, None, "timeline_db")
    assert all(k.startswith("@") for c in changes for k in c.table.column_keys)


def test_b_later_files_with_the_snapshot_taken_before_them(minimal_run) -> None:
    _server, files, store, _snapshots = minimal_run
    full = decode(files, build_resolver(files), "timeline_db")
    later = files[1:]
    partial = decode(later, build_resolver(later, store), "timeline_db")
    later_names = {f.name for f in later}
    expected = [c for c in full if c.file in later_names]
    assert [(c.file, c.pos, c.row, c.op) for c in partial] == [(c.file, c.pos, c.row, c.op) for c in expected]
    for ours, theirs in zip(partial, expected, strict=True):
        assert image_to_dict(ours.table, ours.after) == image_to_dict(theirs.table, theirs.after)
        assert image_to_dict(ours.table, ours.before) == image_to_dict(theirs.table, theirs.before)


def test_c_stale_snapshot_raises_schema_mismatch(minimal_run, tmp_path) -> None:
    _server, files, store, snapshots = minimal_run
    # A store holding only the first snapshot (before stage 1's ALTERs), used for the last file alone: the
    # ALTERs of stage 1 and 2 are in files not decoded, so the snapshot is stale there.
    stale = stale_store(store, snapshots[0], tmp_path)
    last = files[-1:]
    with pytest.raises(SchemaMismatch) as err:
        decode(last, build_resolver(last, stale), "timeline_db")
    assert err.value.file == last[0].name and err.value.pos is not None
    assert "timeline_db.people" in str(err.value) or "timeline_db.tags" in str(err.value)


def test_c_stale_schema_of_a_table_outside_the_filter_does_not_stop_the_read(minimal_run, tmp_path) -> None:
    """Only the tables asked for are resolved: another database's unknown layout is not this read's problem."""
    _server, files, store, snapshots = minimal_run
    stale = stale_store(store, snapshots[0], tmp_path)
    last = files[-1:]
    assert decode(last, build_resolver(last, stale), "another_db") == []
    opts = DecodeOptions(table_resolver=build_resolver(last, stale), tables=re.compile(r"^timeline_db\.nothing$"))
    assert [r for r in BinlogDecoder(opts).decode_files(last) if isinstance(r, RowChange)] == []


def test_c_cli_exits_non_zero_and_skip_reports_positions(minimal_run, tmp_path, capsys) -> None:
    _server, files, store, snapshots = minimal_run
    stale = stale_store(store, snapshots[0], tmp_path)
    last = str(files[-1])
    code = main(["decode", "--schemas", str(stale), "--databases", "timeline_db", last])
    out, err = capsys.readouterr()
    assert code == ExitCode.SCHEMA_MISMATCH and "SchemaMismatch" in err and out == ""
    code = main(["decode", "--schemas", str(stale), "--on-schema-mismatch", "skip", "--databases", "timeline_db",
                 last])
    out, err = capsys.readouterr()
    assert code == 0
    skipped = [line for line in err.splitlines() if line.startswith("binlake: skipped")]
    assert skipped and all(f"{files[-1].name}:" in line for line in skipped)


def test_d_full_metadata_names_agree_with_the_timeline(mariadb_servers, tmp_path) -> None:
    server = mariadb_servers.get("FULL")
    files, _ = run_script(server, "timeline_full", None)
    resolver = build_resolver(files)
    changes = decode(files, resolver, "timeline_full")
    assert changes
    assert resolver.disagreements == []
    assert all(c.table.names_from_server for c in changes)
    for table in ("people", "tags"):
        assert final_state(changes, "timeline_full", table, resolver) == server_state(server, "timeline_full", table)


def test_snapshot_store_layout_and_change_detection(minimal_run, tmp_path, capsys) -> None:
    server, _, _, _ = minimal_run
    out = tmp_path / "store"
    code = main(["schema", "snapshot", "--mysql", server.uri, "--out", str(out), "--include", "timeline_db.*"])
    first = json.loads(capsys.readouterr().out)
    assert code == 0 and first["stored"] is True and first["tables"] == 2
    snap_dir = out / "default" / "snapshots" / first["snapshot"]
    manifest = json.loads((snap_dir / "manifest.json").read_text())
    assert manifest["binlog_file"] and manifest["binlog_pos"] > 0 and manifest["server"]["binlog_format"] == "ROW"
    assert "CREATE TABLE `people`" in (snap_dir / "timeline_db.sql").read_text()
    tables = json.loads((snap_dir / "tables.json").read_text())
    assert [c["name"] for c in tables["timeline_db.people"]["columns"]] == ["city", "id", "email", "points", "name"]
    # Nothing changed: nothing stored. Rows (and AUTO_INCREMENT counters) do not count as changes.
    with server.connect("timeline_db") as conn, conn.cursor() as cur:
        cur.execute("INSERT INTO tags VALUES (99, 1, 'x')")
    main(["schema", "snapshot", "--mysql", server.uri, "--out", str(out), "--include", "timeline_db.*"])
    assert json.loads(capsys.readouterr().out)["stored"] is False
    with server.connect("timeline_db") as conn, conn.cursor() as cur:
        cur.execute("ALTER TABLE tags ADD COLUMN note TEXT")
    main(["schema", "snapshot", "--mysql", server.uri, "--out", str(out), "--include", "timeline_db.*"])
    third = json.loads(capsys.readouterr().out)
    assert third["stored"] is True and third["changes"]["changed"] == ["timeline_db.tags"]
    with server.connect("timeline_db") as conn, conn.cursor() as cur:
        cur.execute("ALTER TABLE tags DROP COLUMN note")
        cur.execute("DELETE FROM tags WHERE id = 99")


def test_plain_sql_directory_as_schemas(minimal_run, tmp_path) -> None:
    _server, files, _, _ = minimal_run
    # The first file starts with CREATE TABLE; a <db>.sql directory with the same DDL names rows the same way.
    sql_dir = tmp_path / "sql"
    sql_dir.mkdir()
    (sql_dir / "timeline_db.sql").write_text(";\n".join(STAGES[0][:2]) + ";\n")
    first_only = files[:1]
    named = decode(first_only, build_resolver(first_only, sql_dir), "timeline_db")
    assert named and {k for c in named if c.table.table == "people" for k in c.table.column_keys} == {
        "id", "name", "city", "age", "score"}
