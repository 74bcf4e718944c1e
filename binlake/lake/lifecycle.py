"""The table lifecycle in the lake: RENAME, TRUNCATE, DROP TABLE / DROP DATABASE and CREATE again, applied to
the current tables at the binlog position where the server ran them (docs/lifecycle.md).

Identity lives in the lake's catalog (`LAKE/_binlake/catalog`): a table name has generations ("slots"), each one
the span of binlog positions during which the name held one table. A slot records its lineage (the source table's
identity, which a RENAME carries to the new name), its state (live, dropped, renamed), where its history is, and
its floor (the position of the last TRUNCATE: older changes never reach the current table again).

prepare_batch plans (`plan_batch`): the batch's DDL statements are read for their lifecycle effect, replayed on the
catalog, and every table's history rows are split by slot (a name re-used by another table never mixes rows of
the two in one history table). merge_batch executes (`LifecycleRun`): each slot's net changes are merged just
before the statement that ends it (a RENAME copies the table as it was there), statements are applied in binlog
order (TRUNCATE/DROP empty the current table, RENAME copies it to the new name and empties the old one), then the
rest is merged. Every commit carries the batch's app transaction (batch * 1000 + the table's next step), so a
retry replays as a no-op; the catalog commits last.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from urllib.parse import unquote

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.fs as pafs

from ..schema.lifecycle import lifecycle_of
from .current import SEQ_FILE_SHIFT, newest_seq
from .engines import DELETED, SEQ, DeltaEngine, bookkeeping_engine
from .history import META_FIELDS, PARTITION_BY
from .layout import path_part
from .pending import lake_fs
from .staging import in_bounds, slot_facts

# gh-ost (_t_gho, _t_ghc, _t_del) and pt-online-schema-change (_t_new, _t_old) helper tables.
DEFAULT_HELPERS = (r"^_.+_(gho|ghc|del)$", r"^_.+_(new|old)$")
FIRST = -1  # start of a slot that began before anything the lake saw

CATALOG_SCHEMA = pa.schema([
    ("slot", pa.string()), ("table", pa.string()), ("database", pa.string()), ("name", pa.string()),
    ("generation", pa.int32()), ("lineage", pa.string()), ("state", pa.string()), ("helper", pa.bool_()),
    ("start_seq", pa.int64()), ("end_seq", pa.int64()), ("ended_by", pa.string()), ("renamed_from", pa.string()),
    ("renamed_to", pa.string()), ("history", pa.string()), ("floor_seq", pa.int64()), ("fresh", pa.bool_()),
    ("final_version", pa.int64()), ("batch_id", pa.int64()),
])


class LifecycleError(ValueError):
    """Changes that cannot be placed in the lake's table lifecycle (e.g. a backfill across a RENAME)."""

    exit_code = 4  # binlake.exitcodes.ExitCode.BAD_DATA


def key_seq(file_seq: int, pos: int) -> int:
    return file_seq << SEQ_FILE_SHIFT | pos


def helper_matcher(patterns: Iterable[str] | None) -> Callable[[str], bool]:
    compiled = [re.compile(p) for p in (DEFAULT_HELPERS if patterns is None else patterns)]
    return lambda name: any(p.search(name) for p in compiled)


def _split(qualified: str) -> tuple[str, str]:
    db, _, name = qualified.partition(".")
    return db, name


class LakeCatalog:
    """The slots of every table name (lower-cased `db.table` -> slots by generation)."""

    def __init__(self, rows: Iterable[dict] = ()) -> None:
        self.slots: dict[str, list[dict]] = {}
        for r in sorted(rows, key=lambda r: r["generation"]):
            self.slots.setdefault(r["table"].lower(), []).append(dict(r))

    @classmethod
    def load(cls, engine: DeltaEngine, layout) -> LakeCatalog:
        path = layout.catalog_path
        engine = bookkeeping_engine(engine)
        if not engine.exists(path):
            return cls()
        return cls(engine.read(path, CATALOG_SCHEMA.names).to_pylist())

    def latest(self, name: str) -> dict | None:
        slots = self.slots.get(name.lower())
        return slots[-1] if slots else None

    def live(self, name: str) -> dict | None:
        s = self.latest(name)
        return s if s is not None and s["state"] == "live" else None

    def at(self, name: str, seq: int) -> dict | None:
        """The slot in force at `seq` (the first one for changes older than every slot's start)."""
        slots = self.slots.get(name.lower()) or []
        found = [s for s in slots if s["start_seq"] <= seq]
        return found[-1] if found else (slots[0] if slots else None)

    def add(self, table: str, start: int, lineage: str, helper: bool, batch: int, **extra) -> dict:
        db, name = _split(table)
        generation = len(self.slots.get(table.lower(), [])) + 1
        slot = {"slot": f"{table}#{generation}", "table": table, "database": db, "name": name,
                "generation": generation, "lineage": lineage, "state": "live", "helper": helper, "start_seq": start,
                "end_seq": None, "ended_by": None, "renamed_from": None, "renamed_to": None,
                "history": f"{name}__history" if generation == 1 else f"{name}__history__g{generation}",
                "floor_seq": None, "fresh": start != FIRST, "final_version": None, "batch_id": batch}
        slot.update(extra)
        self.slots.setdefault(table.lower(), []).append(slot)
        return slot

    def rows(self) -> list[dict]:
        return [s for slots in self.slots.values() for s in slots]

    def commit(self, engine: DeltaEngine, layout, changed: list[dict], batch: int) -> None:
        if not changed:
            return
        data = pa.Table.from_pylist([{k: r.get(k) for k in CATALOG_SCHEMA.names} for r in changed], CATALOG_SCHEMA)
        data = data.append_column(SEQ, pa.array([batch] * data.num_rows, pa.int64()))
        data = data.append_column(DELETED, pa.array([False] * data.num_rows))
        bookkeeping_engine(engine).merge(layout.catalog_path, data, ["slot"], layout.app_id("catalog"), batch)


# -- prepare: the plan ------------------------------------------------------------------------------------------


@dataclass
class Planner:
    catalog: LakeCatalog
    batch: int
    tracked: Callable[[str], bool]
    helper: Callable[[str], bool]
    exists: Callable[[str], bool]  # whether the lake holds a current table for db.table
    newest: Callable[[str], int | None]  # the newest change a current table holds (its `_seq`)
    lake_tables: Callable[[str], list[str]]  # the current tables the lake holds in a database (db.table)
    changed: dict[str, dict] = field(default_factory=dict)
    events: list[dict] = field(default_factory=list)

    def _touch(self, slot: dict) -> dict:
        self.changed[slot["slot"]] = slot
        return slot

    def _live(self, table: str, seq: int, lineage_hint: str) -> dict | None:
        """The live slot of `table`, begun now when the lake knows none (a table older than the files read)."""
        slot = self.catalog.live(table)
        if slot is None and self.catalog.latest(table) is None:
            slot = self.catalog.add(table, FIRST, f"{table}@{FIRST}", self.helper(_split(table)[1]), self.batch)
        return self._touch(slot) if slot is not None else None

    def _end(self, slot: dict, seq: int, state: str, why: str, to: str | None = None) -> None:
        slot.update(state=state, end_seq=seq, ended_by=why, renamed_to=to, batch_id=self.batch)
        self._touch(slot)

    def apply(self, ev: dict, first_rows: dict[str, int]) -> None:
        op = lifecycle_of(ev["query"] or "", ev.get("database"))
        if op is None:
            return
        seq = key_seq(ev["file_seq"], ev["pos"])
        where = f"{ev['file']}:{ev['pos']}"
        kind = {"create": "CREATE TABLE", "rename": "RENAME", "truncate": "TRUNCATE", "drop": "DROP TABLE",
                "drop_database": "DROP DATABASE"}[op.kind]
        action = {"seq": seq, "file": ev["file"], "pos": ev["pos"], "ts": ev.get("ts"), "kind": op.kind,
                  "truncate": [], "copy": [], "clear": [], "fresh": [], "marker": []}
        known = {n.lower() for n in first_rows if first_rows[n] < seq} | set(self.catalog.slots)
        newest: dict[str, int | None] = {}

        def stale(table: str) -> bool:
            """The lake already holds a later state of the name (a backfill of older files): the statement was
            applied then, or is superseded; applying it again would undo newer changes."""
            slot = self.catalog.latest(table)
            marks = [m for m in ((slot or {}).get(k) for k in ("start_seq", "floor_seq", "end_seq")) if m is not None]
            if any(m > seq for m in marks):
                return True
            if table.lower() not in newest:
                newest[table.lower()] = self.newest(table) if self.exists(table) else None
            return newest[table.lower()] is not None and newest[table.lower()] > seq

        def seen(table: str) -> bool:  # the lake has heard of the table (a CREATE of a new name needs no slot)
            return self.tracked(table) and (table.lower() in known or self.exists(table))

        # A RENAME, TRUNCATE or DROP of any tracked table is recorded, even of one the lake has no rows of yet: older
        # files ingested later (a backfill) must not bring the old name back.
        relevant = self.tracked

        if op.kind == "create":
            table = op.tables[0]
            if not self.tracked(table) or stale(table):
                return
            if self.catalog.latest(table) is None and not seen(table):
                return  # a new name: its implicit first slot needs no catalog row
            live = self._live(table, seq, where)
            if live is not None and not op.replace:
                return  # the name is taken: the server refused or ignored it (IF NOT EXISTS)
            if live is not None:
                self._end(live, seq, "dropped", f"CREATE OR REPLACE at {where}")
                action["truncate"].append(table)
            self._touch(self.catalog.add(table, seq, f"{table}@{where}", self.helper(_split(table)[1]), self.batch,
                                         floor_seq=seq))
            action["clear"].append(table)
        elif op.kind in ("truncate", "drop", "drop_database"):
            if op.kind == "drop_database":
                low = (op.database or "").lower()
                names = {s["table"] for slots in self.catalog.slots.values() for s in slots
                         if s["database"].lower() == low and s["state"] == "live"}
                names |= {n for n in first_rows if n.split(".", 1)[0].lower() == low and first_rows[n] < seq}
                names |= {n for n in self.lake_tables(op.database or "")
                          if (s := self.catalog.latest(n)) is None or s["state"] == "live"}
                tables = sorted(names)
            else:
                tables = op.tables
            for table in tables:
                if not relevant(table) or stale(table):
                    continue
                slot = self._live(table, seq, where)
                if slot is None:
                    continue
                action["truncate"].append(slot["table"])
                if op.kind == "truncate":
                    slot["floor_seq"] = seq
                    action["marker"].append(slot["slot"])
                else:
                    self._end(slot, seq, "dropped", f"{kind} at {where}")
                    action["clear"].append(slot["table"])
        else:  # rename: the pairs in order on an overlay, so a swap moves each table once
            overlay: dict[str, str | None] = {}  # name -> the table it holds after the statement (None: free)
            shown: dict[str, str] = {}
            if any(stale(t) for pair in op.renames for t in pair):
                return
            for src, dst in op.renames:
                ident = overlay.get(src.lower(), src)
                overlay[src.lower()] = None
                overlay[dst.lower()] = ident
                shown.setdefault(src.lower(), src)
                shown[dst.lower()] = dst
            moves = {low: ident for low, ident in overlay.items() if ident is not None and ident.lower() != low}
            sources = {ident.lower(): slot for ident in moves.values()
                       if relevant(ident) and (slot := self._live(ident, seq, where)) is not None}
            for low, ident in overlay.items():
                if ident is not None and ident.lower() == low:
                    continue  # renamed back onto itself within the statement: unchanged
                target = next((shown[d] for d, i in moves.items() if i.lower() == low), None)
                if low in sources:
                    self._end(sources[low], seq, "renamed", f"RENAME to {target} at {where}", to=target)
                    if ident is None:
                        action["truncate"].append(shown[low])
                        action["clear"].append(shown[low])
                elif self.tracked(shown[low]) and (live := self.catalog.live(shown[low])) is not None:
                    self._end(live, seq, "dropped", f"replaced by RENAME at {where}")
                    action["truncate"].append(shown[low])
                    action["clear"].append(shown[low])
            for low, ident in moves.items():
                table = shown[low]
                if not self.tracked(table):
                    continue
                src_slot = sources.get(ident.lower())
                helper = self.helper(_split(table)[1])
                if src_slot is None:
                    self._touch(self.catalog.add(table, seq, f"{table}@{where}", helper, self.batch, floor_seq=seq))
                    action["truncate"].append(table)
                    action["clear"].append(table)
                    continue
                new = self._touch(self.catalog.add(table, seq, src_slot["lineage"], helper, self.batch,
                                                   floor_seq=src_slot["floor_seq"], renamed_from=src_slot["slot"],
                                                   fresh=src_slot["fresh"]))
                src_slot["renamed_to"] = new["slot"]
                action["copy"].append([src_slot["table"], table, new["slot"]])
                action["truncate"] = [t for t in action["truncate"] if t.lower() != low]
                action["clear"] = [t for t in action["clear"] if t.lower() != low]
        if action["truncate"] or action["copy"] or action["clear"]:
            action["truncate"] = list(dict.fromkeys(action["truncate"]))
            self.events.append(action)

    def assign(self, name: str, first: int, last: int) -> list[dict]:
        """The slots the rows of `name` in [first, last] belong to, in order (one is begun for rows after the
        name's last slot ended: a CREATE the lake did not see)."""
        slots = self.catalog.slots.get(name.lower())
        if not slots:  # a name without lifecycle statements: its implicit first slot, not written to the catalog
            helper = self.helper(_split(name)[1])
            slots = [self.catalog.add(name, FIRST, f"{name}@{FIRST}", helper, self.batch)]
            if helper:  # except for a helper table: the catalog is what keeps it out of the lake's listing
                self._touch(slots[0])
        last_slot = slots[-1]
        if last_slot["end_seq"] is not None and last >= last_slot["end_seq"]:
            start = max(first, last_slot["end_seq"])
            self._touch(self.catalog.add(name, start, f"{name}@{start}", self.helper(_split(name)[1]), self.batch,
                                         floor_seq=start))
            slots = self.catalog.slots[name.lower()]
        out = [s for i, s in enumerate(slots)
               if s["start_seq"] <= last and (i + 1 == len(slots) or slots[i + 1]["start_seq"] > first)]
        return out or [slots[0]]


def plan_batch(engine: DeltaEngine, layout, batch: int, ddl: list[dict], spans: dict[str, tuple[int, int]],
               tracked: Callable[[str], bool], helpers: Iterable[str] | None) -> tuple[dict, dict[str, list[dict]]]:
    """The batch's lifecycle plan ({"events": [...], "slots": {slot: row}}) and, per table name with rows
    (`spans`: name -> first and last change seq), the slots its rows belong to."""
    catalog = LakeCatalog.load(engine, layout)
    planner = Planner(catalog, batch, tracked, helper_matcher(helpers),
                      lambda t: engine.exists(layout.current_path(*_split(t))),
                      lambda t: newest_seq(engine, layout.current_path(*_split(t))),
                      lambda db: current_tables(engine, layout, db))
    first_rows = {name: span[0] for name, span in spans.items()}
    for ev in sorted(ddl, key=lambda e: (e["file_seq"], e["pos"])):
        planner.apply(ev, first_rows)
    assigned = {name: planner.assign(name, *span) for name, span in spans.items()}
    slots = {s["slot"]: dict(s) for ss in assigned.values() for s in ss} | {k: dict(v) for k, v in
                                                                              planner.changed.items()}
    plan = {"events": planner.events, "slots": slots, "changed": sorted(planner.changed)}
    return plan, {name: [s["slot"] for s in ss] for name, ss in assigned.items()}


def current_tables(engine: DeltaEngine, layout, database: str) -> list[str]:
    """db.table of every current table the lake holds in `database` (history tables aside)."""

    fs, root = lake_fs(layout.root)
    try:
        infos = fs.get_file_info(pafs.FileSelector(f"{root.rstrip('/')}/{path_part(database)}", allow_not_found=True))
    except (OSError, ValueError):
        return []
    names = [unquote(i.base_name) for i in infos if i.type == pafs.FileType.Directory]
    return [f"{database}.{n}" for n in names if "__history" not in n
            and engine.exists(layout.current_path(database, n))]


def split_by_slot(history: pa.Table, starts: list[int]) -> list[pa.Table]:
    """`history` cut at the slots' start positions (rows before the second start go to the first slot)."""
    if len(starts) <= 1:
        return [history]
    seq = _seqs(history)
    out = []
    for i in range(len(starts)):
        mask = pc.greater_equal(seq, starts[i]) if i else pc.scalar(True)
        if i + 1 < len(starts):
            mask = pc.and_(mask, pc.less(seq, starts[i + 1])) if i else pc.less(seq, starts[i + 1])
        out.append(history.filter(mask))
    return out


# -- merge: the run ---------------------------------------------------------------------------------------------


class LifecycleRun:
    """Executes a batch's lifecycle plan around the merges (see the module docstring)."""

    def __init__(self, engine: DeltaEngine, layout, registry, pb) -> None:
        self.engine, self.layout, self.registry, self.pb = engine, layout, registry, pb
        self.plan = pb.lifecycle or {"events": [], "slots": {}}
        self.events = self.plan.get("events", [])
        self.steps: dict[str, int] = {}
        self.markers: dict[str, int] = {}
        self.slots = {k: dict(v) for k, v in self.plan.get("slots", {}).items()}
        self.changed = set(self.plan.get("changed", self.slots))

    def step(self, name: str, n: int = 1) -> int:
        """The next app-transaction step of the name's current table (reserving n)."""
        s = self.steps.get(name.lower(), 0)
        self.steps[name.lower()] = s + n
        return s

    def steps_by_table(self, names: Iterable[str]) -> dict[str, int]:
        """The next free step of each table (registry names), for the batch-end ALTERs."""
        return {name: self.steps.get(name.lower(), 0) for name in names}

    def version(self, step: int) -> int:
        return self.pb.batch * 1000 + step

    def _path(self, table: str) -> str:
        return self.layout.current_path(*_split(table))

    def _app(self, table: str) -> str:
        return self.layout.app_id("current", *_split(table))

    def touched(self) -> set[str]:
        """Lower-cased names a statement of this batch changed, or whose table starts afresh."""
        names = {n.lower() for ev in self.events for n in (*ev["truncate"], *(c[1] for c in ev["copy"]),
                                                          *(c[0] for c in ev["copy"]), *ev["clear"])}
        return names | {s["table"].lower() for s in self.slots.values() if s.get("fresh")}

    def schedule(self, entries: dict[str, dict]) -> tuple[dict[int, list[str]], list[str], list[str]]:
        """Entries to merge just before event i (their slot ends there by a RENAME that copies it), entries to
        merge after every event, and entries whose current-table effect is nil (their table was dropped or
        renamed away without a copy: it is empty at the batch end)."""
        copies = {(c[0].lower(), ev["seq"]): i for i, ev in enumerate(self.events) for c in ev["copy"]}
        in_batch = {ev["seq"] for ev in self.events}
        before: dict[int, list[str]] = {}
        rest, skipped = [], []
        for entry, info in entries.items():
            slot = self.slots.get(info.get("slot", ""))
            end = slot.get("end_seq") if slot else None
            if end is None:
                rest.append(entry)
            elif (info["name"].lower(), end) in copies:
                before.setdefault(copies[(info["name"].lower(), end)], []).append(entry)
            elif slot["state"] == "renamed" and end not in in_batch and slot.get("renamed_to"):
                raise LifecycleError(
                    f"{info['name']}: changes at positions before its RENAME ({slot['ended_by']}, an earlier batch) "
                    "arrived after it; a backfill across a RENAME is not merged into the renamed table. Re-ingest the "
                    "files in binlog order (a new lake or pipeline) for this table")
            else:
                skipped.append(entry)
        return before, rest, skipped

    def floor(self, info: dict) -> int | None:
        slot = self.slots.get(info.get("slot", ""))
        return slot.get("floor_seq") if slot else None

    def prepare_fresh(self, info: dict, schema: pa.Schema) -> None:
        """A slot whose table starts empty (created again, renamed from a table with no rows in the lake): the
        name's current table is replaced by an empty one of the new layout before its first merge."""
        slot = self.slots.get(info.get("slot", ""))
        name = info["name"]
        if slot is None or not slot.get("fresh"):
            return
        version = self.version(self.step(name))
        path = self._path(name)
        if self.engine.exists(path) and not _committed(self.engine, path, self._app(name), version):
            self.engine.reset(path, schema, self._app(name), version)
        slot["fresh"] = False
        self.changed.add(slot["slot"])

    def apply_event(self, i: int) -> None:
        ev = self.events[i]
        dsts = {c[1].lower() for c in ev["copy"]}
        steps = {n.lower(): self.version(self.step(n)) for n in
                 dict.fromkeys([*(c[0] for c in ev["copy"]), *(c[1] for c in ev["copy"]), *ev["truncate"]])}
        # Where each source is read: its version before this event's own commits (a retry finds them made).
        sources = {}
        for src, _dst, _slot in ev["copy"]:
            path = self._path(src)
            if self.engine.exists(path):
                sources[src.lower()] = _version_before(self.engine, path, self._app(src), steps[src.lower()])
        saved = {c[0].lower(): self.registry.get(c[0]) for c in ev["copy"]}
        for slot in self.slots.values():  # the version a dropped or renamed-away table ended with
            if slot.get("end_seq") == ev["seq"] and slot["table"].lower() in steps:
                path = self._path(slot["table"])
                if self.engine.exists(path):
                    slot["final_version"] = _version_before(self.engine, path, self._app(slot["table"]),
                                                            steps[slot["table"].lower()])
        for src, dst, dst_slot in ev["copy"]:
            version = sources.get(src.lower())
            if version is None:  # the source never had a current table: the new name starts empty
                if dst_slot in self.slots:
                    self.slots[dst_slot]["fresh"] = True
                if self.engine.exists(self._path(dst)):
                    self.engine.truncate(self._path(dst), self._app(dst), steps[dst.lower()])
            else:
                self.engine.copy_table(self._path(src), version, self._path(dst), self._app(dst), steps[dst.lower()])
                if dst_slot in self.slots:
                    self.slots[dst_slot]["fresh"] = False
            self._start_history(src, dst_slot)
            self.registry.set(dst, *saved[src.lower()])
        for table in ev["truncate"]:
            path = self._path(table)
            if table.lower() not in dsts and self.engine.exists(path):
                self.engine.truncate(path, self._app(table), steps[table.lower()])
        for table in ev["clear"]:
            if table.lower() not in dsts:
                self.registry.set(table, None, None)
        for slot_key in ev["marker"]:
            self._marker(slot_key, ev)

    def _start_history(self, src: str, dst_slot: str) -> None:
        """The history of a name's new slot exists from the RENAME on (empty, with the source's columns), so the
        name always has a history table to query."""
        slot = self.slots.get(dst_slot)
        old = next((s for s in self.slots.values() if s.get("renamed_to") == dst_slot), None)
        if slot is None or old is None:
            return
        src_path = self.layout.history_path(old["database"], old["name"], old["generation"])
        path = self.layout.history_path(slot["database"], slot["name"], slot["generation"])
        if self.engine.exists(src_path) and not self.engine.exists(path):
            schema = self.engine.table_schema(src_path)
            self.engine.create_empty(path, schema, partition_by=PARTITION_BY)

    def _marker(self, slot_key: str, ev: dict) -> None:
        """A TRUNCATE in the name's history: one row with `_op` 'truncate' at the statement's position."""
        slot = self.slots.get(slot_key)
        if slot is None:
            return
        db, name = slot["database"], slot["name"]
        n = self.markers[slot_key] = self.markers.get(slot_key, 0) + 1
        us = int(ev.get("ts") or 0) * 1_000_000
        values = {"_op": "truncate", "_binlog_file": ev["file"], "_file_seq": ev["seq"] >> SEQ_FILE_SHIFT,
                  "_pos": ev["pos"], "_sub": 0, "_row": 0, "_txn_pos": ev["pos"], "_commit_ts": us, "_gtid": None,
                  "_schema_version": None, "_batch_id": self.pb.batch, "_commit_date": us // 86_400_000_000}
        arrays = {}
        for f in META_FIELDS:
            if f.name == "_commit_ts":
                arrays[f.name] = pa.array([us], pa.int64()).cast(f.type)
            elif f.name == "_commit_date":
                arrays[f.name] = pa.array([values[f.name]], pa.int32()).cast(f.type)
            else:
                arrays[f.name] = pa.array([values[f.name]], f.type)
        path = self.layout.history_path(db, name, slot["generation"])
        self.engine.append(path, pa.table(arrays), self.layout.app_id("history", db, name),
                           self.version(n), partition_by=PARTITION_BY)

    def commit(self) -> None:
        LakeCatalog().commit(self.engine, self.layout, [self.slots[k] for k in sorted(self.changed)], self.pb.batch)

    def touched_paths(self) -> list[str]:
        return sorted({self._path(self.slots[k]["table"]) for k in self.changed}
                      | {self.layout.current_path(*_split(n)) for ev in self.events for n in ev["truncate"]})


def split_entries(engine: DeltaEngine, layout, pb, histories: dict[str, list], table_maps: dict,
                  tracked: Callable[[str], bool], helpers: Iterable[str] | None,
                  stage: str | None = None) -> tuple[dict, dict, dict]:
    """Plan the batch's lifecycle (kept in pb.lifecycle) and split each table's history rows by slot: entries
    keyed by the table name, or `name#generation` for a later slot of a name in the same batch. Returns the
    histories, table maps and per-entry facts (name, slot, generation) by entry.

    `histories`: per table its history pieces, Arrow tables or, with `stage`, staged Parquet pieces' manifests
    (binlake.lake.staging; each table's value is then {"pieces": [...], "runs": [...]}). A staged table's entry
    is its pieces with the slot's seq bounds (`seq_from`, `seq_to`): no row is read here but, where a name has
    several slots in the batch, its operation counts and last schema version, streamed."""
    spans = {}
    for name, pieces in histories.items():
        if stage is not None:
            staged = [p for p in pieces["pieces"] if p["rows"]]
            spans[name] = ((min(p["min_seq"] for p in staged), max(p["max_seq"] for p in staged)) if staged
                           else (0, 0))
            continue
        lo = hi = None
        for piece in pieces:
            if not piece.num_rows:
                continue
            seq = _seqs(piece)
            a, b = pc.min(seq).as_py(), pc.max(seq).as_py()
            lo, hi = (a if lo is None else min(lo, a)), (b if hi is None else max(hi, b))
        spans[name] = (lo if lo is not None else 0, hi if hi is not None else 0)
    plan, assigned = plan_batch(engine, layout, pb.batch, pb.ddl, spans, tracked, helpers)
    pb.lifecycle = plan
    out_h, out_m, facts = {}, {}, {}
    counts = {(t, op): n for t, op, n in pb.counts}
    for name, pieces in histories.items():
        slots = [plan["slots"][k] for k in assigned[name]]
        starts = [s["start_seq"] for s in slots]
        if stage is not None:
            parts = _staged_parts(stage, pieces, starts)
        else:
            cut = [split_by_slot(piece, starts) for piece in pieces]
            parts = [_concat([c[i] for c in cut]) for i in range(len(slots))]
        versions, last_tm = table_maps[name]
        if len(parts) > 1:
            for op in ("insert", "update", "delete"):
                counts.pop((name, op), None)
        for i, (slot, part) in enumerate(zip(slots, parts, strict=True)):
            rows = part["rows"] if stage is not None else part.num_rows
            if len(parts) > 1 and rows == 0:
                continue
            entry = name if i == 0 else f"{name}#{slot['generation']}"
            tm = last_tm
            if len(parts) > 1:
                if stage is not None:
                    mine = {v: versions[v] for v in {r[0] for r in part["runs"]} if v in versions}
                    last_version, ops = part["last_version"], part["ops"]
                else:
                    mine = {v: versions[v] for v in set(part.column("_schema_version").to_pylist()) if v in versions}
                    last_version = part.column("_schema_version")[-1].as_py()
                    ops = {r["_op"]: r["_op_count"]
                           for r in part.group_by("_op").aggregate([("_op", "count")]).to_pylist()}
                tm = versions.get(last_version, last_tm)
                for op, n in ops.items():
                    counts[(entry, op)] = n
            else:
                mine = versions
            out_h[entry], out_m[entry] = part, (mine, tm)
            facts[entry] = {"name": name, "slot": slot["slot"], "generation": slot["generation"],
                            "lifecycle": name.lower() in _touched_names(plan) or slot["state"] != "live"}
    pb.counts = [[t, op, n] for (t, op), n in sorted(counts.items())]
    return out_h, out_m, facts


def _staged_parts(stage: str, staged: dict, starts: list[int]) -> list[dict]:
    """A staged table's rows cut at the slots' start positions, as bounds on its pieces (no data is rewritten)."""
    pieces, runs = staged["pieces"], staged["runs"]
    if len(starts) <= 1:
        return [{"staged": pieces, "runs": runs, "rows": sum(p["rows"] for p in pieces)}]
    out = []
    for i in range(len(starts)):
        lo = starts[i] if i else None
        hi = starts[i + 1] if i + 1 < len(starts) else None
        mine = [p for p in pieces if in_bounds(p, lo, hi)]
        ops, last_version = slot_facts(stage, mine, lo, hi)
        clipped = [[v, max(a, lo) if lo is not None else a, min(b, hi - 1) if hi is not None else b]
                   for v, a, b in runs if (lo is None or b >= lo) and (hi is None or a < hi)]
        out.append({"staged": mine, "runs": clipped, "rows": sum(ops.values()), "seq_from": lo, "seq_to": hi,
                    "ops": ops, "last_version": last_version})
    return out


def _seqs(history: pa.Table) -> pa.ChunkedArray:
    return pc.add(pc.shift_left(history.column("_file_seq").cast(pa.int64()), SEQ_FILE_SHIFT),
                  history.column("_pos").cast(pa.int64()))


def _concat(tables: list[pa.Table]) -> pa.Table:
    nonempty = [t for t in tables if t.num_rows] or tables[:1]
    return nonempty[0] if len(nonempty) == 1 else pa.concat_tables(nonempty, promote_options="permissive")


def lifecycle_held(plan: dict, held: dict[str, str | None]) -> dict[str, str | None]:
    """The schema versions current tables are left in (for the batch-end DDL), after the batch's lifecycle:
    a renamed table's moves to its new name; a dropped or renamed-away name holds none."""
    out = dict(held)
    lower = {k.lower(): k for k in out}
    for ev in plan.get("events", []):
        moved = {c[1]: out.get(lower.get(c[0].lower(), c[0])) for c in ev["copy"]}
        for table in ev["clear"]:
            out.pop(lower.get(table.lower(), table), None)
        for dst, version in moved.items():
            key = lower.setdefault(dst.lower(), dst)
            if version is None:
                out.pop(key, None)
            else:
                out[key] = version
    return out


def _touched_names(plan: dict) -> set[str]:
    return {n.lower() for ev in plan["events"] for n in (*ev["truncate"], *ev["clear"], *(c[0] for c in ev["copy"]),
                                                         *(c[1] for c in ev["copy"]))} | {
        s["table"].lower() for s in plan["slots"].values() if s.get("fresh")}


def _path_part(name: str) -> str:
    return path_part(name)


def _committed(engine: DeltaEngine, path: str, app: str, version: int) -> bool:
    v = engine.txn_version(path, app)
    return v is not None and v >= version


def _version_before(engine: DeltaEngine, path: str, app: str, version: int) -> int | None:
    """The table's version before this batch's commits from step `version` on (the event's own and everything
    after it): where an event reads its source, also when it runs again after a crash. None: the table did not
    exist at the event (it was created by a later step)."""
    if not engine.exists(path):
        return None
    history = engine.history(path)
    later = [h["version"] for h in history if any(t["app_id"] == app and t["version"] >= version for t in h["txns"])]
    if not later:
        return engine.version(path)
    before = min(later) - 1
    first = next((h for h in history if h["version"] == 0), None)
    # Version 0 without a transaction is the empty table binlake creates just before a table's first commit.
    if before < 0 or (before == 0 and first is not None and not first["txns"]):
        return None
    return before


def catalog_json(slots: dict) -> str:
    return json.dumps(slots, sort_keys=True, default=str)
