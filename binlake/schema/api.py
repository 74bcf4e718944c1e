"""Schema service functions: what the CLI, the Spark jobs and Airflow tasks call."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from .snapshot import capture_snapshot, connect_uri
from .store import Snapshot, SnapshotStore, open_schemas
from .timeline import DdlScanCache, SchemaTimeline, TimelineResolver, file_keys, scan_ddl


def build_resolver(files: Sequence[str | Path], schemas: str | Path | None = None,
                   instance: str = "default", ddl_cache: DdlScanCache | None = None) -> TimelineResolver:
    """A resolver for decoding `files` (in order): snapshots from `schemas` (a store or a directory of <db>.sql
    files; None for none) plus the DDL found in the files themselves; `ddl_cache` keeps what earlier calls found in unchanged files."""
    keys = file_keys(files)
    snapshots: list[Snapshot] = open_schemas(schemas, instance) if schemas else []
    return TimelineResolver(SchemaTimeline(snapshots, scan_ddl(files, keys, ddl_cache)), keys)


def take_snapshot(mysql_uri: str, out: str | Path, instance: str = "default", include: list[str] | None = None,
                  exclude: list[str] | None = None) -> tuple[bool, str, Snapshot]:
    """Capture the tracked tables' DDL and store it when it changed; returns (stored, name, snapshot)."""
    conn = connect_uri(mysql_uri)
    try:
        snap = capture_snapshot(conn, include, exclude)
    finally:
        conn.close()
    stored, name = SnapshotStore.at(out, instance).save(snap)
    snap.name = name
    return stored, name, snap


def changed_tables(store: SnapshotStore, snapshot: Snapshot) -> dict[str, list[str]]:
    """Tables added, dropped or changed in `snapshot` compared with the store's previous snapshot."""
    names = store.names()
    previous = [n for n in names if n < (snapshot.name or "~")]
    before = store.load(previous[-1]).table_hashes() if previous else {}
    now = snapshot.table_hashes()
    return {
        "added": sorted(set(now) - set(before)),
        "dropped": sorted(set(before) - set(now)),
        "changed": sorted(t for t in set(now) & set(before) if now[t] != before[t]),
    }
