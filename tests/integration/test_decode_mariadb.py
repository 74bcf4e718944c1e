"""A real MariaDB writes every column type; what binlake decodes must equal what the server SELECTs, and the SQL
it prints must rebuild the tables (forward) and restore the earlier state (rollback)."""

from __future__ import annotations

import io
import random
import struct
from pathlib import Path

import pytest

from binlake.binlog.api import build_options, decode_to
from binlake.binlog.decoder import BinlogDecoder, DecodeOptions
from binlake.binlog.records import RowChange
from binlake.testing.workload import ALL_TYPES, run_all_types_workload

TEMPORAL = ("DATE", "TIME", "DATETIME", "TIMESTAMP")


def master_position(server) -> tuple[str, int]:
    with server.connect() as conn, conn.cursor() as cur:
        cur.execute("SHOW MASTER STATUS")
        name, pos = cur.fetchone()[:2]
    return name, pos


def files_since(server, start_file: str) -> list[Path]:
    files = server.flush_logs()
    names = [f.name for f in files]
    return files[names.index(start_file):]


def select_rows(server, db: str, table: str) -> dict[int, list]:
    """SELECT * in binlake's value contract: temporal columns as text, BIT as int, FLOAT widened exactly."""
    exprs = ["`id`"]
    for name, sql_type in ALL_TYPES:
        base = sql_type.split(" NULL")[0]
        if base.startswith(TEMPORAL):
            exprs.append(f"CAST(`{name}` AS CHAR)")
        elif base.startswith("BIT"):
            exprs.append(f"CAST(`{name}` AS UNSIGNED)")
        elif base == "FLOAT":
            exprs.append(f"CAST(`{name}` AS DOUBLE)")
        else:
            exprs.append(f"`{name}`")
    with server.connect(db) as conn, conn.cursor() as cur:
        cur.execute(f"SELECT {', '.join(exprs)} FROM `{table}`")
        return {row[0]: list(row) for row in cur.fetchall()}


def apply_changes(changes: list[RowChange], table: str) -> dict[int, list]:
    state: dict[int, list] = {}
    for c in changes:
        if c.table.table != table:
            continue
        if c.before is not None:
            assert c.before[0] in state, f"{c} changes a row the log never inserted"
            del state[c.before[0]]
        if c.after is not None:
            state[c.after[0]] = list(c.after)
    return state


def comparable(value, sql_type: str | None):
    if sql_type is not None and sql_type.startswith("FLOAT") and value is not None:
        return struct.unpack("<f", struct.pack("<f", value))[0]
    return value


@pytest.fixture(scope="module")
def all_types_run(mariadb_servers):
    """One workload on the FULL-metadata server, decoded once; shared by the tests below."""
    server = mariadb_servers.get("FULL")
    db = "decode_all_types"
    with server.connect() as conn, conn.cursor() as cur:
        cur.execute(f"DROP DATABASE IF EXISTS `{db}`")
        cur.execute(f"CREATE DATABASE `{db}`")
    start_file, start_pos = master_position(server)
    with server.connect(db) as conn:
        counts = run_all_types_workload(conn, "all_types", random.Random(20261122), rows=150)
    files = files_since(server, start_file)
    opts = DecodeOptions(start_position=start_pos, databases={db})
    changes = [r for r in BinlogDecoder(opts).decode_files(files) if isinstance(r, RowChange)]
    return server, db, files, start_pos, changes, counts


def test_decoded_rows_equal_server_select(all_types_run) -> None:
    server, db, _files, _pos, changes, counts = all_types_run
    by_op = {op: sum(1 for c in changes if c.op == op) for op in ("insert", "update", "delete")}
    assert by_op == counts
    decoded = apply_changes(changes, "all_types")
    expected = select_rows(server, db, "all_types")
    assert decoded.keys() == expected.keys()
    types = [None] + [t for _, t in ALL_TYPES]
    names = ["id"] + [n for n, _ in ALL_TYPES]
    for key, row in expected.items():
        ours = [comparable(v, t) for v, t in zip(decoded[key], types, strict=True)]
        diffs = {names[i]: (ours[i], row[i]) for i in range(len(row)) if ours[i] != row[i]}
        assert not diffs, f"row id={key}: (decoded, server) differ: {diffs}"


def test_full_metadata_names_and_types(all_types_run) -> None:
    changes = all_types_run[4]
    table = changes[0].table
    assert table.names_from_server
    assert [c.name for c in table.columns] == ["id"] + [n for n, _ in ALL_TYPES]
    assert table.primary_key == [0]
    unsigned = {c.name for c in table.columns if c.signed is False}
    assert unsigned == {n for n, t in ALL_TYPES if "UNSIGNED" in t}
    enum = next(c for c in table.columns if c.name == "c_enum")
    assert enum.enum_labels == ["small", "medium", "large", "x'quote"]


def _replay(server, db: str, sql_text: str) -> int:
    n = 0
    with server.connect(db) as conn, conn.cursor() as cur:
        for line in sql_text.splitlines():
            if line and not line.startswith("#"):
                cur.execute(line)
                n += 1
    return n


def test_forward_sql_rebuilds_and_rollback_restores(all_types_run, mariadb_servers) -> None:
    server, db, files, start_pos, changes, _ = all_types_run
    replica = mariadb_servers.get("MINIMAL")
    with replica.connect() as conn, conn.cursor() as cur:
        cur.execute(f"DROP DATABASE IF EXISTS `{db}`")
        cur.execute(f"CREATE DATABASE `{db}`")
    with server.connect(db) as conn, conn.cursor() as cur:
        cur.execute("SHOW CREATE TABLE all_types")
        ddl = cur.fetchone()[1]
    with replica.connect(db) as conn, conn.cursor() as cur:
        cur.execute(ddl)

    # Split the decoded range at a transaction boundary in its middle: replay the first half, remember that
    # state, replay the second half (now equal to the source), then roll the second half back.
    split = changes[len(changes) // 2].txn_pos
    last_file = files[-1]
    first_half = io.StringIO()
    decode_to(files, first_half, "sql", DecodeOptions(start_position=start_pos, databases={db}))
    lines = first_half.getvalue()
    # Forward SQL for everything: the replica must equal the source.
    _replay(replica, db, lines)
    assert select_rows(replica, db, "all_types") == select_rows(server, db, "all_types")

    # Rollback of the part from `split` on, then forward of the same part: back and forth exactly.
    split_file = changes[len(changes) // 2].file
    split_files = [f for f in files if f.name >= split_file]
    before_split = apply_changes([c for c in changes if (c.file, c.txn_pos) < (split_file, split)], "all_types")
    rollback = io.StringIO()
    decode_to(split_files, rollback, "rollback", build_options(start_position=split, databases=[db]))
    _replay(replica, db, rollback.getvalue())
    restored = select_rows(replica, db, "all_types")
    types = [None] + [t for _, t in ALL_TYPES]
    assert restored.keys() == before_split.keys()
    for key, row in restored.items():
        assert [comparable(v, t) for v, t in zip(before_split[key], types, strict=True)] == row
    assert last_file.exists()
