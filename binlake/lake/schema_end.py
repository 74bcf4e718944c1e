"""DDL after a table's last row change: current tables still mirror the source schema at the batch end.

`merge_segments` alters a current table when a row of a newer schema version arrives. An ALTER after the table's
last row change of a batch (or in a batch without rows of the table) brings no such row, so prepare_batch records
the version in force at the batch end (`end_versions`, kept in the pending batch) and merge_batch alters the
table to it after the segments (`apply_end_versions`), as a segment's ALTER does.
"""

from __future__ import annotations

from collections.abc import Mapping

from ..binlog.stream import EventStream, open_binlog
from ..binlog.tablemap import TableMap
from ..schema.binlog_types import table_map_for
from ..schema.guard import apply_version
from ..schema.model import TableDef
from ..schema.timeline import Key, SchemaTimeline, TableVersion
from .current import alter_to, event_seq, newest_seq, table_schema


def end_key(files: list[dict]) -> Key | None:
    """The timeline key of the batch end: the last decoded event of its last file (the end is exclusive)."""
    if not files:
        return None
    last = max(files, key=lambda f: f["file_seq"])
    return last["file_seq"], last["end_pos"] - 1


def file_is_mariadb(path: str, name: str) -> bool:
    """The flavour of a binlog file, from its FORMAT_DESCRIPTION event (binlog column shapes differ)."""
    stream = EventStream(open_binlog(path), name, verify_checksums=False, allow_truncated=True)
    for _ev in stream:
        if stream.first_fde is not None:
            break
    return (stream.first_fde or stream.fde).is_mariadb


def _full_id(v: TableVersion) -> str:
    return f"{v.version_id}@{v.source}"  # the id the decoder gives rows of this version (apply_version)


def _index_of(versions: list[TableVersion], held: str, upto: int) -> int | None:
    """Where the version a table is left in sits in the table's timeline (its full id, else its layout)."""
    for match in (lambda v: _full_id(v) == held, lambda v: v.version_id == held.split("@", 1)[0]):
        found = [i for i, v in enumerate(versions[: upto + 1]) if match(v)]
        if found:
            return found[-1]
    return None


def end_versions(timeline: SchemaTimeline, key: Key, held: Mapping[str, str | None], mariadb: bool) -> dict:
    """For each table (name -> the version its current table is left in by the batch's rows or the registry),
    the version in force at `key` when it is a later one than that: {version, definition, database, table,
    mariadb, ddl: {source, key}}."""
    out: dict[str, dict] = {}
    for name, version in sorted(held.items()):
        if version is None or version == "unknown":
            continue  # no schema versions (server-named columns): nothing to compare with
        db, _, table = name.partition(".")
        v = timeline.at(db, table, key)
        if v is None or v.unknown or v.version_id == version.split("@", 1)[0]:
            continue
        if v.table is None:
            # Dropped at the batch end: the current table is left as it is (the last state the source had; a
            # table created again under the name continues it with its own rows and ALTERs).
            continue
        versions = timeline.versions(db, table)
        j = next(i for i, x in enumerate(versions) if x is v)
        i = _index_of(versions, version, j)
        if i is None or i >= j:
            continue  # the end version is not after the held one (a backfill of older files): never go back
        out[name] = {"version": _full_id(v), "definition": v.table.to_dict(), "database": v.table.database,
                     "table": v.table.name, "mariadb": mariadb, "ddl": {"source": v.source, "key": list(v.valid_from)}}
    return out


def end_table_map(end: dict) -> TableMap:
    """A TableMap of the end version, as a TABLE_MAP event of it would be resolved (none is in the batch)."""
    tdef = TableDef.from_dict(end["definition"])
    return apply_version(table_map_for(tdef, mariadb=end["mariadb"]), tdef, end["version"])


def apply_end_versions(engine, layout, registry, schema_end: dict[str, dict], batch: int,
                       first_step: Mapping[str, int], warnings: list[str] | None = None) -> list[str]:
    """Alter each current table to its batch-end version (schema_changes + replace_schema, the app-txn version
    batch * 1000 + the table's next step after its segments, so a retry skips a committed ALTER) and record
    the version in the registry. Returns the tables altered."""
    altered = []
    for name, end in sorted(schema_end.items()):
        path = layout.current_path(end["database"], end["table"])
        recorded, table_def = registry.get(name)
        if recorded is None or recorded == end["version"] or not engine.exists(path):
            continue
        newest = newest_seq(engine, path)
        if newest is not None and event_seq(*end["ddl"]["key"]) <= newest:
            continue  # the table holds changes made after this DDL: it is already past it
        tm = end_table_map(end)
        if alter_to(engine, path, table_schema(engine, path), table_def, tm,
                    layout.app_id("current", end["database"], end["table"]), batch * 1000 + first_step.get(name, 0),
                    warnings):
            altered.append(name)
        registry.set(name, end["version"], tm.schema)
    return altered
