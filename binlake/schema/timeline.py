"""The schema timeline: for every table, the versions of its layout and the binlog position each is valid from.

A position's schema is the latest snapshot at or before it, plus the DDL statements of the binlog after that
snapshot, replayed in order. Positions are (file sequence number, byte position). Statements the DDL parser cannot
understand mark the tables they name as unknown from that point on, until a later snapshot; nothing is guessed.
"""

from __future__ import annotations

import bisect
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from ..binlog.api import sequence_number
from ..binlog.decoder import BinlogDecoder, DecodeOptions
from ..binlog.tablemap import TableMap
from .ddl import Catalog, apply_ddl, parse_create_table
from .guard import NameDisagreement, SchemaMismatch, apply_version, check
from .model import TableDef
from .store import Snapshot

Key = tuple[int, int]
START: Key = (-1, -1)


@dataclass
class DdlEvent:
    key: Key
    file: str
    pos: int
    sql: str
    database: str | None


@dataclass
class TableVersion:
    table: TableDef | None  # None: the table does not exist here (not created yet, or dropped)
    valid_from: Key
    source: str
    unknown: str | None = None  # why the layout is unknown (a DDL statement that could not be parsed)
    # The id, computed once: the decoder asks for it at every TABLE_MAP (a version's table is never changed).
    _id: str | None = field(default=None, init=False, repr=False, compare=False)

    @property
    def version_id(self) -> str:
        if self._id is None:
            self._id = ("unknown" if self.unknown else self.table.fingerprint() if self.table is not None
                        else "absent")
        return self._id


@dataclass
class _Segment:
    start: Key
    source: str
    versions: dict[str, list[TableVersion]] = field(default_factory=dict)
    froms: dict[str, list[Key]] = field(default_factory=dict)

    def add(self, qualified: str, version: TableVersion) -> None:
        k = qualified.lower()
        self.versions.setdefault(k, []).append(version)
        self.froms.setdefault(k, []).append(version.valid_from)


def file_keys(files: Sequence[str | Path]) -> dict[str, int]:
    """File name -> sequence number; files without one are numbered by their order in the list."""
    keys = {}
    for i, f in enumerate(files):
        name = Path(f).name
        seq = sequence_number(name)
        keys[name] = seq if seq >= 0 else i
    return keys


@dataclass
class DdlScanCache:
    """The DDL statements found in each file, reused while the file is unchanged (same size, modification time
    and inode): what `ingest --follow` keeps from round to round, so a round decodes only the new and grown files
    for the schema timeline instead of every listed file."""

    files: dict[str, tuple[tuple, list[DdlEvent]]] = field(default_factory=dict)
    scanned: list[str] = field(default_factory=list)  # the files the last scan decoded


def _file_signature(path: str) -> tuple | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_size, st.st_mtime_ns, st.st_ino, st.st_dev


def scan_ddl(files: Sequence[str | Path], keys: dict[str, int], cache: DdlScanCache | None = None) -> list[DdlEvent]:
    """Every DDL statement of `files`, in order, without decoding any row; with `cache`, an unchanged file's
    statements come from the previous scan instead of being read again."""
    if cache is None:
        return _scan_ddl(files, keys)
    cache.scanned = []
    out: list[DdlEvent] = []
    for f in files:
        path = str(f)
        sig = _file_signature(path)
        hit = cache.files.get(path)
        if sig is not None and hit is not None and hit[0] == sig:
            events = hit[1]
        else:
            events = _scan_ddl([f], keys)
            cache.scanned.append(path)
            if sig is not None:
                cache.files[path] = (sig, events)
        out.extend(DdlEvent((keys[e.file], e.pos), e.file, e.pos, e.sql, e.database) for e in events)
    return out


def _scan_ddl(files: Sequence[str | Path], keys: dict[str, int]) -> list[DdlEvent]:
    decoder = BinlogDecoder(DecodeOptions(commits=True, databases=set(), allow_truncated=True))
    out = []
    for rec in decoder.statement_records(files):
        if rec.kind == "ddl":
            out.append(DdlEvent((keys[rec.file], rec.pos), rec.file, rec.pos, rec.info["query"], rec.info.get("database")))
    return out


def _continue_lineage(table: TableDef, previous: Catalog | None) -> None:
    """A snapshot's table continues the lineage the replayed DDL reached at the snapshot's position: columns of
    the same name keep their identities, new ones get fresh ones. So a RENAME COLUMN replayed before the snapshot
    is still a rename for rows older than it, and the snapshot's fresh column order is not taken for identity."""
    before = previous.get(table.database, table.name) if previous is not None else None
    if before is None or before.lineage is None:
        return
    by_name = {c.name.lower(): c.uid for c in before.columns}
    for c in table.columns:
        c.uid = by_name.get(c.name.lower())
    table.last_uid = max([before.last_uid, *(c.uid or 0 for c in before.columns)])
    table.lineage = before.lineage
    table.ensure_uids()


class SchemaTimeline:
    def __init__(self, snapshots: Sequence[Snapshot], ddl_events: Sequence[DdlEvent]) -> None:
        self.snapshots = sorted(snapshots, key=lambda s: s.position or START)
        self.unparsed: list[tuple[DdlEvent, str]] = []
        self._segments: list[_Segment] = []
        self._previous: Catalog | None = None  # the state the last segment ended in (where the next one begins)
        starts = [s.position or START for s in self.snapshots]
        if not starts or starts[0] != START:
            # Before the first snapshot: only what CREATE TABLE statements in the binlog say.
            self._build(None, START, starts[0] if starts else None, ddl_events)
        for i, snap in enumerate(self.snapshots):
            end = starts[i + 1] if i + 1 < len(starts) else None
            self._build(snap, starts[i], end, ddl_events)
        self._starts = [seg.start for seg in self._segments]

    def _build(self, snap: Snapshot | None, start: Key, end: Key | None, events: Sequence[DdlEvent]) -> None:
        source = f"snapshot {snap.name or snap.captured_at}" if snap else "binlog only"
        seg = _Segment(start, source)
        facts = snap.server if snap is not None else {}
        catalog = Catalog(snap.db_charsets if snap is not None else None, None,
                          facts.get("character_set_server"), facts.get("collation_server"))
        if snap is not None:
            catalog.origin = source
            for qualified, sql in snap.ddl.items():
                table = parse_create_table(sql, qualified.split(".", 1)[0], snap.db_charsets)
                _continue_lineage(table, self._previous)
                catalog.put(table)
                seg.add(table.qualified_name, TableVersion(table.copy(), start, source))
        for ev in events:
            if ev.key < start or (end is not None and ev.key >= end):
                continue
            where = f"DDL at {ev.file}:{ev.pos}"
            catalog.origin = where
            effect = apply_ddl(catalog, ev.sql, ev.database)
            if effect.kind == "unparsed":
                self.unparsed.append((ev, effect.error or "not understood"))
                for qualified in effect.tables:
                    seg.add(qualified, TableVersion(None, ev.key, where, unknown=f"{where} was not understood: "
                                                                             f"{effect.error}"))
                continue
            if effect.kind in ("truncate", "ignored", "create_database"):
                continue  # no layout changed
            for qualified in effect.tables:
                db, _, name = qualified.partition(".")
                current = catalog.get(db, name)
                seg.add(qualified, TableVersion(current.copy() if current else None, ev.key, where))
        self._segments.append(seg)
        self._previous = catalog

    def at(self, database: str, table: str, key: Key) -> TableVersion | None:
        """The version of db.table valid at `key`, or None when the timeline never heard of the table."""
        i = bisect.bisect_right(self._starts, key) - 1
        if i < 0:
            return None
        seg = self._segments[i]
        k = f"{database}.{table}".lower()
        froms = seg.froms.get(k)
        if not froms:
            return None
        j = bisect.bisect_right(froms, key) - 1
        return seg.versions[k][j] if j >= 0 else None

    def changed_at(self, key: Key) -> list[tuple[str, TableVersion]]:
        """The tables whose version begins at `key` (the position of a DDL statement), with their new version
        (lower-case qualified name as the timeline keys it)."""
        if not hasattr(self, "_by_start"):
            by_start: dict[Key, list[tuple[str, TableVersion]]] = {}
            for seg in self._segments:
                for name, versions in seg.versions.items():
                    for v in versions:
                        by_start.setdefault(v.valid_from, []).append((name, v))
            self._by_start = by_start
        return self._by_start.get(key, [])

    def versions(self, database: str, table: str) -> list[TableVersion]:
        k = f"{database}.{table}".lower()
        return [v for seg in self._segments for v in seg.versions.get(k, [])]


class TimelineResolver:
    """Plugs the timeline into the decoder: names and types each TABLE_MAP from the version valid at it."""

    def __init__(self, timeline: SchemaTimeline, keys: dict[str, int]) -> None:
        self.timeline = timeline
        self.keys = keys
        self.disagreements: list[NameDisagreement] = []
        self.missing: dict[str, tuple[str, int]] = {}

    def _version(self, database: str, table: str, file: str, pos: int) -> TableVersion | None:
        return self.timeline.at(database, table, (self.keys.get(file, -1), pos))

    def version_key(self, database: str, table: str, file: str, pos: int) -> object:
        v = self._version(database, table, file, pos)
        return None if v is None else (id(v), v.version_id)

    def resolve(self, tm: TableMap, file: str, pos: int, mariadb: bool) -> TableMap:
        v = self._version(tm.database, tm.table, file, pos)
        name = tm.qualified_name
        if v is None:
            # No schema knows this table: columns keep the server's names or @N; reported once.
            self.missing.setdefault(name, (file, pos))
            return tm
        if v.unknown or v.table is None:
            why = (f"the schema is unknown here because the {v.unknown}; take a new snapshot after it" if v.unknown
                   else f"the schema timeline says the table does not exist here ({v.source})")
            if tm.names_from_server:
                # FULL metadata names the columns itself: decode with the server's names, and say so.
                self.missing.setdefault(name, (file, pos))
                return tm
            raise SchemaMismatch(f"{name}: {why}", file, pos, name)
        self.disagreements.extend(check(tm, v.table, file, pos, mariadb))
        return apply_version(tm, v.table, f"{v.version_id}@{v.source}")
