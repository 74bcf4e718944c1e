"""Capture a DDL snapshot from a live server through pymysql, with the binlog position it is valid at.

No FLUSH TABLES WITH READ LOCK (not allowed on RDS): the DDL is read twice with the binlog position read between
the passes; when both passes agree, no DDL ran around that moment and the snapshot is valid at that position.
"""

from __future__ import annotations

import fnmatch
import time
from datetime import UTC, datetime
from typing import TYPE_CHECKING
from urllib.parse import unquote, urlparse

from .store import Snapshot

if TYPE_CHECKING:
    import pymysql

SYSTEM_DATABASES = {"mysql", "information_schema", "performance_schema", "sys"}
FACT_VARIABLES = (
    "version", "version_comment", "binlog_format", "binlog_row_image", "binlog_row_metadata",
    "binlog_row_value_options", "binlog_transaction_compression", "binlog_checksum", "time_zone",
    "system_time_zone", "character_set_server", "collation_server", "lower_case_table_names", "gtid_mode",
    "server_id", "server_uuid",
)


class SnapshotError(RuntimeError):
    pass


def connect_uri(uri: str, **kwargs) -> pymysql.connections.Connection:
    """mysql://user:password@host:port/[db]?charset=utf8mb4 -> a pymysql connection (autocommit)."""
    u = urlparse(uri)
    if u.scheme not in ("mysql", "mariadb"):
        raise ValueError(f"--mysql {uri!r}: expected mysql://user:password@host:port/")
    import pymysql  # only here: decoding and ingest never connect (the import costs 0.05 s of CPU)

    return pymysql.connect(
        host=u.hostname or "127.0.0.1", port=u.port or 3306, user=unquote(u.username or "root"),
        password=unquote(u.password or ""), database=(u.path.lstrip("/") or None), charset="utf8mb4",
        autocommit=True, **kwargs,
    )


def server_facts(cur) -> dict:
    names = ", ".join(f"'{v}'" for v in FACT_VARIABLES)
    cur.execute(f"SHOW GLOBAL VARIABLES WHERE Variable_name IN ({names})")
    return {k: v for k, v in cur.fetchall()}


def binlog_position(cur) -> tuple[str, int]:
    """SHOW BINARY LOG STATUS (MySQL 8.4+) or SHOW MASTER STATUS."""
    import pymysql

    for statement in ("SHOW BINARY LOG STATUS", "SHOW MASTER STATUS"):
        try:
            cur.execute(statement)
        except pymysql.err.MySQLError:
            continue
        row = cur.fetchone()
        if row is None:
            raise SnapshotError("the server has binary logging off (SHOW MASTER STATUS is empty)")
        return row[0], int(row[1])
    raise SnapshotError("the server answers neither SHOW BINARY LOG STATUS nor SHOW MASTER STATUS")


def tracked_tables(cur, include: list[str], exclude: list[str]) -> list[tuple[str, str]]:
    cur.execute("SELECT TABLE_SCHEMA, TABLE_NAME FROM information_schema.TABLES WHERE TABLE_TYPE = 'BASE TABLE'"
                " ORDER BY TABLE_SCHEMA, TABLE_NAME")
    out = []
    for db, table in cur.fetchall():
        if db in SYSTEM_DATABASES:
            continue
        name = f"{db}.{table}"
        if include and not any(fnmatch.fnmatchcase(name, p) for p in include):
            continue
        if any(fnmatch.fnmatchcase(name, p) for p in exclude):
            continue
        out.append((db, table))
    return out


def _read_ddl(cur, tables: list[tuple[str, str]]) -> dict[str, str]:
    import pymysql

    ddl = {}
    for db, table in tables:
        try:
            cur.execute(f"SHOW CREATE TABLE `{db.replace('`', '``')}`.`{table.replace('`', '``')}`")
        except pymysql.err.ProgrammingError:
            continue  # dropped since it was listed; the second pass will see the difference
        ddl[f"{db}.{table}"] = cur.fetchone()[1]
    return ddl


def _db_charsets(cur, dbs: set[str]) -> dict[str, str]:
    cur.execute("SELECT SCHEMA_NAME, DEFAULT_CHARACTER_SET_NAME FROM information_schema.SCHEMATA")
    return {db: cs for db, cs in cur.fetchall() if db in dbs}


def capture_snapshot(conn, include: list[str] | None = None, exclude: list[str] | None = None,
                     attempts: int = 5) -> Snapshot:
    """Read the tracked tables' DDL, the server facts and the binlog position the DDL is valid at."""
    include, exclude = include or [], exclude or []
    with conn.cursor() as cur:
        facts = server_facts(cur)
        for attempt in range(attempts):
            # The position is read between two identical passes, so no DDL ran around the moment it names.
            first = _read_ddl(cur, tracked_tables(cur, include, exclude))
            file, pos = binlog_position(cur)
            second = _read_ddl(cur, tracked_tables(cur, include, exclude))
            if first == second:
                captured = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
                dbs = {t.split(".", 1)[0] for t in second}
                return Snapshot(captured, file, pos, second, facts, _db_charsets(cur, dbs))
            time.sleep(0.2 * (attempt + 1))
    raise SnapshotError(f"DDL kept changing during {attempts} capture attempts; try again when DDL is quiet")
