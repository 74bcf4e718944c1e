"""The ingest as separate, idempotent stages, so a scheduler can run each as its own task and retry only what
failed (docs/lake.md "Quality gates"). The lake's stages are here; the two gate stages and `run_ingest`, which runs
them all in order, are in binlake.quality.stages (the layer above, which may import both):

    prepare_batch     pick files from the control table, build the schema timeline, decode, persist the pending
                      batch in the lake, append history (app txn). Resumes an unpublished batch instead of
                      starting a new one.
    gate_before_merge (quality) Great Expectations gates on the decoded batch -> GateFailed (quarantined)
    merge_batch       current-table MERGEs, segment by segment of schema version, then the DDL after a table's
                      last row change (the schema at the batch end, schema_end.py) (app txn)
    gate_after_merge  (quality) gates on the merged current tables -> GateFailed (undo_merge restores them)
    publish_batch     the control table advances (the watermark moves); the pending batch is closed

Every stage takes the same IngestOptions and reads what it needs from the lake (`_binlake/batches/...`, see
pending.py), so each can run in a different process. Every Delta commit carries an application transaction and
the control table advances last: a run killed anywhere and re-run ends with the same tables, no duplicates.

Batches of one pipeline are strictly sequential: the app-id versions of a table's commits grow with the batch
number, so a later batch must never commit before an earlier one. Hence an unpublished batch is resumed by the
next `prepare_batch` of the pipeline whatever its options name (its files and decoded rows are in the lake), and
a quarantined one blocks the pipeline until it is released.
"""

from __future__ import annotations

import json
import re
import time
from collections import Counter
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from types import SimpleNamespace

import pyarrow as pa
import pyarrow.compute as pc

from ..binlog.decoder import integer_arrays
from ..schema.api import build_resolver
from .control import ControlTable
from .crashpoints import crash_point
from .current import key_names, merge_input, merge_schema, segments, staged_merge_input
from .current import merge_segments as _merge_segments
from .decode_task import RangeResult
from .engines import DELETED, SEQ, DeltaEngine, EngineError, EngineUnavailable, get_engine, tombstone_path
from .history import PARTITION_BY
from .holds import TablesHeldBack, batch_pieces, held_tables
from .ingest import (
    Executor,
    IngestOptions,
    RunSummary,
    TableRegistry,
    _ordered,
    _refuse_partial_images,
    local_executor,
    plan_files,
)
from .layout import LakeLayout
from .lifecycle import LifecycleRun, lifecycle_held, split_entries
from .netbuckets import BucketedNet
from .pending import BatchQuarantined, BatchStore, PendingBatch
from .schema_end import apply_end_versions, end_key, end_versions, file_is_mariadb
from .split import plan_ranges
from .staging import StagedSegment, drop_stage, entry_pieces, forget_merge_inputs, read_piece, staged_segments

__all__ = [
    "BatchQuarantined",
    "StageOrderError",
    "TablesHeldBack",
    "merge_batch",
    "prepare_batch",
    "prepare_catchup",
    "publish_batch",
    "undo_merge",
]

Progress = Callable[[str], None]


class StageOrderError(RuntimeError):
    """A stage was called before the stage it depends on succeeded for the batch (e.g. merge before its gate)."""


# What makes one table's changes unappliable (bad data, a schema change or conversion that cannot be done, an
# engine refusing the input): that table is held back alone. Anything else (a crash, I/O, an unreachable engine)
# stops the stage; the batch stays pending and is resumed.
TABLE_ERRORS = (ValueError, TypeError, KeyError, pa.ArrowException, EngineError)


def _table_error(exc: BaseException) -> bool:
    return isinstance(exc, TABLE_ERRORS) and not isinstance(exc, EngineUnavailable)


def quiet(_msg: str) -> None:
    """The default progress callback: says nothing."""


def open_stage(opts: IngestOptions, engine: DeltaEngine | None) -> tuple[DeltaEngine, LakeLayout, BatchStore]:
    """What every stage works on: the engine (`opts.engine` unless given), the lake layout and the batch store."""
    return engine or get_engine(opts.engine), LakeLayout(opts.lake, opts.pipeline), BatchStore(opts.lake, opts.pipeline)


def load_batch(store: BatchStore, batch: int) -> PendingBatch:
    """A batch still to be worked on (not published, discarded or quarantined)."""
    pb = store.load(batch)
    if pb.state in ("published", "discarded"):
        raise StageOrderError(f"batch {batch} is already {pb.state}")
    if pb.state == "quarantined":
        raise BatchQuarantined(batch, pb.quarantine)
    return pb


# -- prepare ----------------------------------------------------------------------------------------------------

def _resume(store: BatchStore, engine: DeltaEngine, layout: LakeLayout) -> PendingBatch | None:
    """The unpublished batch to continue, if any. A batch whose control commit landed (crash before its manifest
    said so) is closed here."""
    for pb in store.unpublished():
        published = engine.txn_version(layout.control_path, layout.app_id("control"))
        if published is not None and published >= pb.batch:
            pb.state = "published"
            store.save(pb)
            store.drop_data(pb)
            continue
        return pb
    return None


def prepare_batch(opts: IngestOptions, executor: Executor = local_executor, engine: DeltaEngine | None = None,
                  progress: Progress = quiet) -> int | None:
    """Decode the next batch, persist it and append its history. Returns its id; None when nothing is new.
    An unpublished batch is resumed (returned again); a quarantined one raises BatchQuarantined."""
    started = time.perf_counter()
    engine, layout, store = open_stage(opts, engine)
    pending = _resume(store, engine, layout)
    if pending is not None:
        if pending.state == "quarantined":
            raise BatchQuarantined(pending.batch, pending.quarantine)
        progress(f"batch {pending.batch}: resuming ({pending.state})")
        _append_history(engine, layout, store, pending, progress)
        return pending.batch

    control = ControlTable(engine, layout)
    states = control.load()
    todo = plan_files(opts, states)
    if not todo:
        return None
    batch = _next_batch(states, store)
    holds = held_tables(store)
    progress(f"batch {batch}: {len(todo)} file(s) to read")
    resolver = build_resolver(_ordered(opts.files), opts.schemas, opts.instance, opts.ddl_cache)
    seconds = {"schema timeline": time.perf_counter() - started}

    t0 = time.perf_counter()
    tasks = [(path, st.file, st.file_seq, a, b) for path, st in todo
             for a, b in plan_ranges(path, st.file, st.end_pos, opts.split_bytes)]
    progress(f"decoding {len(tasks)} range(s)")
    stage = store.stage(batch)
    drop_stage(stage)  # pieces a killed earlier attempt at this batch left (it never saved a manifest)
    with integer_arrays():  # in-process decode tasks: integer columns reach history as numpy arrays
        results = executor(tasks, batch, resolver, (opts.tables, opts.databases), stage)
    if hasattr(engine, "staged_span"):  # it reduces staged pieces where they are (delta-spark): nothing to take
        forget_merge_inputs(stage)
    seconds["decode"] = time.perf_counter() - t0
    crash_point("decoded")

    pb = PendingBatch(batch, opts.pipeline, prepared_at=datetime.now(UTC).isoformat())
    histories, table_maps = _collect(results, pb)
    staged = stage if _staged(results) else None
    by_file: dict[str, list[RangeResult]] = {}
    for res in results:
        by_file.setdefault(res.file, []).append(res)
    for path, st in todo:
        ranges = by_file[st.file]
        last = max(ranges, key=lambda r: r.start)
        # A file still being written (binlake tail) may have grown, or been closed by its ROTATE, since it was
        # listed: complete means read to its end as it is now, and the size recorded is the one read.
        size = max(st.size, Path(path).stat().st_size)
        pb.files.append({"instance": st.instance, "lineage": st.lineage, "file": st.file, "file_seq": st.file_seq,
                         "size": size, "status": "merged", "start_pos": st.end_pos, "end_pos": last.end,
                         "complete": last.reached_file_end and last.end == size, "batch_id": batch,
                         "attempts": st.attempts, "last_error": None, "previous_status": st.status,
                         "previous_complete": st.complete, "checksum": st.checksum,
                         "first_ts": st.first_ts.isoformat() if st.first_ts else None,
                         "last_ts": st.last_ts.isoformat() if st.last_ts else None})
    _hold_decoded(pb, results, holds, histories, table_maps)
    histories, table_maps, facts = split_entries(engine, layout, pb, histories, table_maps, _tracked(opts),
                                                 opts.helper_tables, staged)
    t0 = time.perf_counter()
    _record_entries(store, pb, histories, table_maps, facts, staged)
    pb.schema_end = _schema_at_end(engine, layout, resolver, pb, table_maps, todo)
    pb.seconds = seconds
    store.save(pb)  # from here on, the batch is resumed rather than decoded again
    pb.seconds["persist batch"] = time.perf_counter() - t0
    _append_history(engine, layout, store, pb, progress, histories)
    return batch


def _staged(results: list[RangeResult]) -> bool:
    """Whether the decode tasks staged their history rows (binlake.lake.staging) rather than returning them."""
    return any(tr.staged for res in results for tr in res.tables.values())


def _record_entries(store: BatchStore, pb: PendingBatch, histories: dict, table_maps: dict, facts: dict,
                    staged: str | None, append_from: dict | None = None) -> None:
    """Persist each entry's history (Arrow rows, or staged pieces' manifests) and TableMaps; fill pb.tables."""
    names = store.write_data(pb.batch, {} if staged else histories, table_maps)
    for name, history in histories.items():
        tm = table_maps[name][1]
        info = {"database": tm.database, "table": tm.table, "has_pk": bool(tm.primary_key)}
        if staged:
            info.update({k: v for k, v in history.items() if k in ("staged", "runs", "rows", "seq_from", "seq_to")})
            newest = max((p["newest_commit_ts"] for p in history["staged"] if p.get("newest_commit_ts")), default=None)
        else:
            last = pc.max(history.column("_commit_ts")).as_py() if history.num_rows else None
            newest = last.isoformat() if last else None
            info.update({"file": names[name], "rows": history.num_rows})
        if append_from is not None:
            info["append_from"] = append_from.get(name, 0)
        pb.tables[name] = {**info, "newest_commit_ts": newest, **facts[name]}


def _schema_at_end(engine: DeltaEngine, layout: LakeLayout, resolver, pb: PendingBatch, table_maps: dict,
                   todo: list) -> dict[str, dict]:
    """The schema version in force at the batch end of every table with a current table (in the registry) or
    rows in the batch, where it is later than the one the batch's last rows or the registry leave it in."""
    key = end_key(pb.files)
    if key is None:
        return {}
    held = {name: row["version"] for name, row in TableRegistry(engine, layout).rows.items() if name not in pb.held}
    for name, info in sorted(pb.tables.items(), key=lambda item: item[1].get("generation", 1)):
        if info["has_pk"]:
            held[info.get("name", name)] = table_maps[name][1].schema_version
    held = lifecycle_held(pb.lifecycle, held)
    if not held:
        return {}
    path, st = max(todo, key=lambda item: item[1].file_seq)
    return end_versions(resolver.timeline, key, held, file_is_mariadb(path, st.file))


def _next_batch(states: dict, store: BatchStore) -> int:
    """The next batch number: after every batch the control table or the store knows (catch-up batches of held
    tables have no control rows)."""
    return max([s.batch_id for s in states.values()] + store.batches(), default=-1) + 1


def _hold_decoded(pb: PendingBatch, results: list[RangeResult], holds: dict[str, dict],
                  histories: dict[str, pa.Table], table_maps: dict) -> None:
    """Hold back the tables the decoder could not decode in this batch and those already held (every later batch
    leaves a held table out until it is released); their rows, counts and conversions leave the batch."""
    pieces = batch_pieces(pb, appended=False)
    for res in sorted(results, key=lambda r: (r.file_seq, r.start)):
        for name, h in getattr(res, "held", {}).items():
            if name not in pb.held:
                pb.held[name] = _hold_record(name, "decode", h["error"], h["file"], h["pos"], pieces)
    for name, h in holds.items():
        if name not in pb.held and name not in pb.catchup:
            pb.held[name] = _hold_record(name, "held", f"held back since batch {h['since']}: {h['error']}",
                                         h.get("file"), h.get("pos"), pieces)
    if not pb.held:
        return
    for name in pb.held:
        histories.pop(name, None)
        table_maps.pop(name, None)
    pb.counts = [c for c in pb.counts if c[0] not in pb.held]
    pb.conversions = {k: v for k, v in pb.conversions.items()
                      if not any(k.split(":", 1)[-1].startswith(name + ".") for name in pb.held)}


def _hold_record(name: str, stage: str, error: str, file: str | None, pos: int | None, pieces: list[dict]) -> dict:
    db, _, table = name.partition(".")
    return {"database": db, "table": table, "stage": stage, "error": error, "file": file, "pos": pos,
            "pieces": pieces}


def hold_table(engine: DeltaEngine, layout: LakeLayout, store: BatchStore, pb: PendingBatch, entry: str,
               exc: BaseException, registry: TableRegistry | None = None, saved: dict | None = None) -> None:
    """Hold back a table of a prepared batch (its history is appended) whose current table cannot take the
    batch: restore the current table to its version before the batch and keep its registry entry. `entry` is
    its key in pb.tables (or pb.schema_end)."""
    info = pb.tables.pop(entry, None) or {}
    name = info.get("name", entry)
    end = pb.schema_end.pop(name, None) or {}
    db, table = info.get("database") or end.get("database"), info.get("table") or end.get("table")
    path = layout.current_path(db, table)
    pre = pb.premerge.get("tables", {}).get(entry) or {"version": pb.premerge.get("schema_end", {}).get(name)}
    if engine.exists(path) and pb.premerge:
        engine.restore(path, 0 if pre.get("version") is None else pre["version"])
    if registry is not None:
        if saved is None:
            registry.rows.pop(name, None)
        else:
            registry.rows[name] = saved
    first = _first_change(store, pb, info) if info.get("file") or info.get("staged") else (None, None)
    if first == (None, None) and end.get("ddl"):  # no row of it in the batch: where the DDL it failed on is
        seq, pos = end["ddl"]["key"]
        first = (next((f["file"] for f in pb.files if f["file_seq"] == seq), None), pos)
    pb.held[name] = {**_hold_record(name, "merge", f"{type(exc).__name__}: {exc}", *first,
                                    batch_pieces(pb, appended=True)), "database": db, "table": table}
    pb.committed.pop(entry, None)
    store.save(pb)


def _first_change(store: BatchStore, pb: PendingBatch, info: dict) -> tuple[str | None, int | None]:
    """File and position of the table's first change in the batch (`info`: its entry in pb.tables)."""
    pieces = entry_pieces(info)
    if pieces:  # staged: the first piece's earliest row, two columns read
        first = min(pieces, key=lambda p: p["min_seq"])
        rows = read_piece(store.stage(pb.batch), first, info.get("seq_from"), info.get("seq_to"),
                          ["_binlog_file", "_pos"]).sort_by("_pos")
        return (rows.column("_binlog_file")[0].as_py(), rows.column("_pos")[0].as_py()) if rows.num_rows else \
            (None, None)
    try:
        history = store.read_history(PendingBatch(pb.batch, pb.pipeline, tables={"t": info}), "t")
    except (OSError, KeyError):
        return None, None
    if not history.num_rows:
        return None, None
    return history.column("_binlog_file")[0].as_py(), history.column("_pos")[0].as_py()


def _collect(results: list[RangeResult], pb: PendingBatch) -> tuple[dict[str, list], dict[str, tuple]]:
    """Each table's history pieces (in file order) and (versions, last TableMap); batch-wide tallies into `pb`.
    Staged results (binlake.lake.staging) give each table {"pieces": manifests, "runs": schema version runs}."""
    parts: dict[str, list] = {}
    staged: dict[str, dict] = {}
    versions: dict[str, dict] = {}
    last: dict[str, object] = {}
    counts: Counter = Counter()
    events: Counter = Counter()
    for res in sorted(results, key=lambda r: (r.file_seq, r.start)):
        counts.update(res.counts)
        events.update(getattr(res, "event_types", {}) or {})
        pb.statements.extend(res.statements)
        pb.ddl.extend(res.ddl)
        for k, v in res.conversions.items():
            pb.conversions[k] = pb.conversions.get(k, 0) + v
        for name, tr in res.tables.items():
            parts.setdefault(name, []).extend(tr.history)
            mine = staged.setdefault(name, {"pieces": [], "runs": []})
            mine["pieces"].extend(tr.staged)
            for run in tr.runs:
                if mine["runs"] and mine["runs"][-1][0] == run[0]:
                    mine["runs"][-1][2] = run[2]
                else:
                    mine["runs"].append(list(run))
            versions.setdefault(name, {}).update(tr.versions)
            last[name] = tr.table_map
    pb.counts = [[t, op, n] for (t, op), n in sorted(counts.items())]
    pb.event_types = dict(events)
    # Each table's pieces stay apart until split_entries cut them by lifecycle slot (a name re-used by another
    # table may have columns of other types) and concatenated them.
    if _staged(results):
        parts = staged
    return parts, {name: (versions[name], last[name]) for name in parts}


def _tracked(opts: IngestOptions) -> Callable[[str], bool]:
    """Whether a db.table is one this ingest decodes (--databases / --tables)."""
    def tracked(qualified: str) -> bool:
        db = qualified.split(".", 1)[0]
        if opts.databases is not None and db not in opts.databases:
            return False
        return opts.tables is None or bool(opts.tables.search(qualified))

    return tracked


def _append_history(engine: DeltaEngine, layout: LakeLayout, store: BatchStore, pb: PendingBatch,
                    progress: Progress, histories: dict[str, pa.Table] | None = None) -> None:
    t0 = time.perf_counter()

    def append_staged(name: str, info: dict) -> None:  # appended from the staged pieces (binlake.lake.staging)
        path = layout.history_path(info["database"], info["table"], info.get("generation", 1))
        app_id = layout.app_id("history", info["database"], info["table"])
        skip = set(info.get("append_from") or [])
        only = {**info, "staged": [p for p in info["staged"] if p["path"] not in skip]}
        appended = engine.append_staged(path, store.stage(pb.batch), only, app_id, pb.batch * 1000,
                                        partition_by=PARTITION_BY)
        pb.committed.setdefault(name, {})["history"] = appended or pb.committed.get(name, {}).get("history", False)
        progress(f"{name}: {info['rows']} history rows {'appended' if appended else 'already committed'}")
        if appended:
            crash_point("history")

    staged = [(name, info) for name, info in sorted(pb.tables.items()) if "staged" in info]
    threads = min(len(staged), getattr(engine, "commit_threads", 1))
    if threads > 1:
        # Each table's append is its own commit (its own app id), independent of the others': an engine whose
        # commits run as cluster jobs (delta-spark) runs several at once, from driver threads.
        from concurrent.futures import ThreadPoolExecutor  # here: only such engines need it

        with ThreadPoolExecutor(threads, thread_name_prefix="history-append") as pool:
            done = [pool.submit(append_staged, name, info) for name, info in staged]
        for future in done:
            future.result()  # the first table's error, once every other append has finished
    else:
        for name, info in staged:
            append_staged(name, info)
    for name, info in sorted(pb.tables.items()):
        if "staged" in info:
            continue
        history = histories[name] if histories is not None else store.read_history(pb, name)
        if info.get("append_from"):  # a catch-up batch: rows of pieces whose history is already appended first
            history = history.slice(info["append_from"])
        # Versions of per-table app ids are batch * 1000 + step everywhere (bootstrap writes several per batch).
        appended = engine.append(layout.history_path(info["database"], info["table"], info.get("generation", 1)),
                                 history,
                                 layout.app_id("history", info["database"], info["table"]), pb.batch * 1000,
                                 partition_by=PARTITION_BY)
        pb.committed.setdefault(name, {})["history"] = appended or pb.committed.get(name, {}).get("history", False)
        progress(f"{name}: {history.num_rows} history rows {'appended' if appended else 'already committed'}")
    pb.seconds["history append"] = time.perf_counter() - t0
    store.save(pb)


def hold_partial_images(engine: DeltaEngine, layout: LakeLayout, store: BatchStore, pb: PendingBatch) -> None:
    """A current table needs full row images: a table with partial ones is held back (its history stays)."""
    for name, info in sorted(pb.tables.items()):
        if info["has_pk"]:
            try:
                _refuse_partial_images(info.get("name", name), pb.conversions)
            except ValueError as exc:
                hold_table(engine, layout, store, pb, name, exc)


def undo_merge(engine: DeltaEngine, layout: LakeLayout, store: BatchStore, pb: PendingBatch) -> None:
    """Restore the batch's current tables and the registry to their versions before the batch's merges (txn
    versions included, so merging the batch again really merges)."""
    targets = [(layout.current_path(t["database"], t["table"]), pb.premerge.get("tables", {}).get(name, {}))
               for name, t in pb.tables.items() if t["has_pk"]]
    targets += [(layout.current_path(end["database"], end["table"]), {"version": pb.premerge["schema_end"][name]})
                for name, end in pb.schema_end.items() if name not in pb.tables and name in
                pb.premerge.get("schema_end", {})]
    targets.append((layout.tables_path, {"version": pb.premerge.get("registry_version")}))
    targets += [(path, {"version": version}) for path, version in pb.premerge.get("lifecycle", {}).items()]
    for path, pre in targets:
        if not engine.exists(path):
            continue
        version = pre.get("version")
        # A table the batch created goes back to its empty creation commit (version 0).
        engine.restore(path, 0 if version is None else version)
    pb.gates["merge"] = {"done": False, "undone": True}
    store.save(pb)


# -- merge ------------------------------------------------------------------------------------------------------

def _require_gate(opts: IngestOptions, pb: PendingBatch, stage: str, what: str) -> None:
    if opts.quality.enabled and not pb.gates.get(stage, {}).get("passed"):
        raise StageOrderError(f"batch {pb.batch}: {what} needs the {stage}-merge gate to have passed for it")


def merge_batch(opts: IngestOptions, batch: int, engine: DeltaEngine | None = None) -> dict:
    """Merge the batch's net changes into the current tables (each merge carries an app txn: a retry skips what
    was committed). Returns table -> {"history": bool, "current": merges}."""
    t0 = time.perf_counter()
    engine, layout, store = open_stage(opts, engine)
    pb = load_batch(store, batch)
    _require_gate(opts, pb, "before", "merge_batch")
    table_maps = store.read_table_maps(pb)
    hold_partial_images(engine, layout, store, pb)
    plans = {}
    for name, info in sorted(pb.tables.items()):
        if not info["has_pk"]:
            continue
        try:
            versions = table_maps[name][0]
            if "staged" in info and hasattr(engine, "staged_span"):
                # The engine reduces and merges the staged rows where they are (delta-spark: on the executors).
                plans[name] = staged_segments(store.stage(pb.batch), info, versions, merge_schema)
                continue
            if "staged" in info:  # read and reduced piece by piece: memory holds the net changes only
                plans[name] = staged_merge_input(store.stage(pb.batch), info, versions, name)
                continue
            history = store.read_history(pb, name)
            plans[name] = [(seg.version, versions[seg.version], merge_input(seg.rows, versions[seg.version]))
                           for seg in segments(history)]
        except Exception as exc:
            if not _table_error(exc):
                raise
            hold_table(engine, layout, store, pb, name, exc)
    registry = TableRegistry(engine, layout)
    run = LifecycleRun(engine, layout, registry, pb)
    touched = run.touched()
    for name in plans:  # changes older than the table's last TRUNCATE (or its creation) never reach it
        plans[name] = _above_floor(plans[name], run.floor({"name": name, **pb.tables[name]}))
    if not pb.premerge:  # the state before the batch's first merge commit; kept across retries and restores
        pb.premerge = {"registry_version": engine.version(layout.tables_path),
                       "tables": {name: premerge_figures(engine, layout, pb.tables[name], plan,
                                                         pb.tables[name].get("name", name).lower() in touched,
                                                         counts=opts.quality.enabled)
                                  for name, plan in plans.items()},
                       "schema_end": {name: _table_version(engine, layout.current_path(end["database"], end["table"]))
                                      for name, end in pb.schema_end.items() if name not in pb.tables
                                      and engine.exists(layout.current_path(end["database"], end["table"]))},
                       "lifecycle": {path: _table_version(engine, path)
                                     for path in [*run.touched_paths(), layout.catalog_path]}}
        store.save(pb)
    before, rest, skipped = run.schedule({name: {"name": name, **pb.tables[name]} for name in plans})

    notes: dict[str, list[str]] = {}  # table -> warnings of its schema changes

    def merge_one(name: str) -> None:
        if name not in pb.tables:  # held back
            return
        info = {"name": name, **pb.tables[name]}
        saved = dict(registry.rows[info["name"]]) if info["name"] in registry.rows else None
        try:
            plan = plans[name]
            run.prepare_fresh(info, pa.schema([f for f in plan[0][2].schema if f.name != DELETED]))
            # Steps of the table's app id: its segments take at most two each (an ALTER and a merge).
            first = run.step(info["name"], 2 * len(plan))
            merges = _merge_segments(engine, layout, registry, info["name"], plan, batch, first_step=first,
                                     warnings=notes.setdefault(info["name"], []))
        except Exception as exc:
            if not _table_error(exc):
                raise
            hold_table(engine, layout, store, pb, name, exc, registry, saved)
            return
        pb.committed.setdefault(name, {})["current"] = merges

    for name in skipped:
        pb.committed.setdefault(name, {})["current"] = 0
    for i in range(len(run.events)):
        for name in before.get(i, []):
            merge_one(name)
        run.apply_event(i)
    for name in rest:
        merge_one(name)
    # DDL after a table's last row change: the table is altered to the version in force at the batch end, in the
    # table's next app-txn step.
    steps = run.steps_by_table(pb.schema_end)
    for name, end in sorted(pb.schema_end.items()):
        saved = dict(registry.rows[name]) if name in registry.rows else None
        try:
            apply_end_versions(engine, layout, registry, {name: end}, batch, {name: steps.get(name, 0)},
                               notes.setdefault(name, []))
        except Exception as exc:
            if not _table_error(exc):
                raise
            hold_table(engine, layout, store, pb, name, exc, registry, saved)
    for name in sorted({pb.tables[e].get("name", e) for e in plans if e in pb.tables} | set(pb.schema_end)):
        if name not in pb.held:
            _record_columns(engine, layout, registry, name, notes.get(name, []), pb)
    crash_point("merged")
    registry.commit(batch)
    run.commit()
    pb.gates["merge"] = {"done": True}
    pb.seconds["merge"] = time.perf_counter() - t0
    store.save(pb)
    return dict(pb.committed)


def _record_columns(engine: DeltaEngine, layout: LakeLayout, registry: TableRegistry, name: str, warnings: list[str],
                    pb: PendingBatch) -> None:
    """The current table's properties say which columns are generated (and how) or invisible in the source, and
    keep the warnings about them (`binlake.generated`, `binlake.invisible`, `binlake.warnings`, JSON)."""
    for w in warnings:
        if w not in pb.warnings:
            pb.warnings.append(w)
    _version, table_def = registry.get(name)
    db, _, table = name.partition(".")
    path = layout.current_path(db, table)
    if table_def is None or not engine.exists(path) or not hasattr(engine, "set_properties"):
        return
    generated = {c.name: f"{'STORED' if c.stored else 'VIRTUAL'} {c.generated}" for c in table_def.columns
                 if c.generated is not None}
    invisible = [c.name for c in table_def.columns if c.invisible]
    have = engine.properties(path)
    kept = json.loads(have.get("binlake.warnings", "[]"))
    props = {}
    if generated or "binlake.generated" in have:
        props["binlake.generated"] = json.dumps(generated, sort_keys=True)
    if invisible or "binlake.invisible" in have:
        props["binlake.invisible"] = json.dumps(invisible)
    if warnings:
        props["binlake.warnings"] = json.dumps(kept + [w for w in warnings if w not in kept])
    if props:
        engine.set_properties(path, props)


def _table_version(engine: DeltaEngine, path: str) -> int | None:
    return engine.version(path) if engine.exists(path) else None


def net_changes(plan: list[tuple]) -> tuple[list[str], pa.Table] | None:
    """The batch's last change per key across its schema segments (keys, `_seq`, `_deleted`); None when the key
    columns change name inside the batch."""
    keys = key_names(plan[-1][1])
    if len(plan) == 1:  # merge_input already keeps one row per key
        return keys, plan[0][2].select([*keys, SEQ, DELETED])
    parts = []
    for i, (_version, tm, data) in enumerate(plan):
        if key_names(tm) != keys:
            return None
        narrow = data.select([*keys, SEQ, DELETED])  # a BucketedNet's rows are known once reduced
        parts.append(narrow.append_column("_segment", pa.array([i] * narrow.num_rows, pa.int32())))
    allrows = pa.concat_tables(parts, promote_options="permissive") if len(parts) > 1 else parts[0]
    allrows = allrows.append_column("_i", pa.array(range(allrows.num_rows), pa.int64()))
    last = allrows.group_by(keys, use_threads=False).aggregate([("_i", "max")])
    return keys, allrows.take(last.column("_i_max")).drop_columns(["_segment", "_i"])


def _above_floor(plan: list[tuple], floor: int | None) -> list[tuple]:
    """The plan without changes older than the table's last TRUNCATE (or its creation): they never reach it."""
    if floor is None:
        return plan
    return [(v, tm, data.above(floor) if isinstance(data, (StagedSegment, BucketedNet)) else
             data.filter(pc.greater_equal(data.column(SEQ), floor))) for v, tm, data in plan]


def premerge_figures(engine: DeltaEngine, layout: LakeLayout, info: dict, plan: list[tuple],
                     lifecycle: bool = False, counts: bool = True) -> dict:
    """The current table's version and row count before the batch, and the net inserts and deletes the batch's
    changes make by the merge rule (a change applies when newer than the row's `_seq`, an upsert of a deleted key
    only when not older than its tombstone). `counts` False (the gates are off: only the after-merge gate's count
    reconciliation reads them): the version alone, the figures left out (None: not evaluated), which spares
    a pass over the batch and the table's keys (with Spark, several jobs per table)."""
    path = layout.current_path(info["database"], info["table"])
    exists = engine.exists(path)
    out: dict = {"version": engine.version(path) if exists else None, "count": 0, "inserts": None, "deletes": None}
    if lifecycle or not counts:
        return out  # renamed, truncated or dropped in the batch (or gates off): the count reconciliation is not run
    if any(isinstance(data, StagedSegment) for _v, _tm, data in plan):
        # Staged rows: the engine computes the figures where the rows are (delta-spark: joins and aggregates).
        figures = engine.net_change_figures(path, [data for _v, _tm, data in plan])
        if figures is not None:
            out.update(figures)
        return out
    net = net_changes(plan)
    if net is None:
        return out  # keys renamed in the batch: the count reconciliation is not evaluated
    keys, changes = net
    key_schema = pa.schema([changes.schema.field(k) for k in keys] + [pa.field(SEQ, pa.int64())])
    try:
        target = engine.read(path, [*keys, SEQ]).cast(key_schema) if exists else None
        tpath = tombstone_path(path)
        tombs = engine.read(tpath, [*keys, SEQ]).cast(key_schema) if exists and engine.exists(tpath) else None
    except (EngineError, pa.ArrowInvalid, pa.ArrowNotImplementedError):
        return out  # the table's key columns are renamed or retyped by this batch: not evaluated either
    out["count"] = target.num_rows if target is not None else 0
    joined = changes
    if target is not None and target.num_rows:
        joined = joined.join(target.rename_columns([*keys, "_t_seq"]), keys, join_type="left outer")
    else:
        joined = joined.append_column("_t_seq", pa.nulls(joined.num_rows, pa.int64()))
    if tombs is not None:
        joined = joined.join(tombs.rename_columns([*keys, "_d_seq"]), keys, join_type="left outer")
    else:
        joined = joined.append_column("_d_seq", pa.nulls(joined.num_rows, pa.int64()))
    present = pc.is_valid(joined.column("_t_seq"))
    newer = pc.fill_null(pc.greater(joined.column(SEQ), joined.column("_t_seq")), False)
    deleted = joined.column(DELETED)
    not_superseded = pc.invert(pc.fill_null(pc.less(joined.column(SEQ), joined.column("_d_seq")), False))
    inserts = pc.and_(pc.and_(pc.invert(present), pc.invert(deleted)), not_superseded)
    deletes = pc.and_(pc.and_(present, deleted), newer)
    out["inserts"] = pc.sum(inserts.cast(pa.int64())).as_py() or 0
    out["deletes"] = pc.sum(deletes.cast(pa.int64())).as_py() or 0
    return out


# -- publish ----------------------------------------------------------------------------------------------------

def publish_batch(opts: IngestOptions, batch: int, engine: DeltaEngine | None = None) -> RunSummary:
    """Advance the control table (the watermark moves) and close the pending batch."""
    t0 = time.perf_counter()
    engine, layout, store = open_stage(opts, engine)
    pb = load_batch(store, batch)
    if not pb.gates.get("merge", {}).get("done"):
        raise StageOrderError(f"batch {batch}: publish_batch before merge_batch finished")
    _require_gate(opts, pb, "after", "publish_batch")
    crash_point("publish")
    if not pb.catchup:  # a catch-up batch re-reads published files: the watermark stays
        ControlTable(engine, layout).record(pb.file_states(), batch)
    pb.state = "published"
    pb.seconds["publish"] = time.perf_counter() - t0
    store.save(pb)
    store.drop_data(pb)
    return summary_of(pb)


def summary_of(pb: PendingBatch) -> RunSummary:
    summary = RunSummary(pb.batch, [f["file"] for f in pb.files])
    for t, op, n in pb.counts:
        summary.rows[(t, op)] = n
    summary.history_only = sorted(name for name, t in pb.tables.items() if not t["has_pk"])
    summary.held = {name: dict(h) for name, h in pb.held.items()}
    summary.warnings = list(pb.warnings)
    summary.statements = len(pb.statements)
    summary.conversions = dict(pb.conversions)
    summary.seconds = dict(pb.seconds)
    summary.committed = {k: dict(v) for k, v in pb.committed.items()}
    summary.gates = {k: dict(v) for k, v in pb.gates.items() if k in ("before", "after")}
    if pb.quarantine:
        summary.gates["released"] = True
    newest = [datetime.fromisoformat(t["newest_commit_ts"]) for t in pb.tables.values() if t.get("newest_commit_ts")]
    if newest:
        summary.lag_seconds = max(0.0, time.time() - max(newest).timestamp())
    return summary


# -- held-back tables -------------------------------------------------------------------------------------------

def prepare_catchup(opts: IngestOptions, table: str, executor: Executor = local_executor,
                    engine: DeltaEngine | None = None, progress: Progress = quiet) -> int:
    """A catch-up batch for a held-back table (binlake.lake.holds): decode its held pieces again (with the
    schemas and files of `opts`), persist the batch and append the history rows not yet appended. The other
    stages then run on it as on any batch; publishing it closes the hold and leaves the control table alone."""
    started = time.perf_counter()
    engine, layout, store = open_stage(opts, engine)
    waiting = store.unpublished()
    if waiting:
        raise StageOrderError(f"batch {waiting[0].batch} is {waiting[0].state}: finish it (binlake ingest, or "
                              "binlake quarantine release/discard) before releasing a held-back table")
    hold = held_tables(store).get(table)
    if hold is None:
        raise ValueError(f"{table} is not held back in pipeline {opts.pipeline!r} (binlake quarantine list)")
    by_name = {Path(p).name: str(p) for p in opts.files}
    pieces = hold["pieces"]
    missing = sorted({piece["file"] for piece in pieces} - set(by_name))
    if missing:
        raise ValueError(f"{table}: its held-back changes are in {', '.join(missing)}, which are not among the "
                         "files given (--source)")
    batch = _next_batch(ControlTable(engine, layout).load(), store)
    progress(f"batch {batch}: catching up {table} ({len(pieces)} held piece(s) since batch {hold['since']})")
    resolver = build_resolver(_ordered(opts.files), opts.schemas, opts.instance)
    tasks = [(by_name[piece["file"]], piece["file"], piece["file_seq"], piece["start"], piece["end"])
             for piece in pieces]
    only = re.compile("^" + re.escape(table) + "$")
    stage = store.stage(batch)
    drop_stage(stage)
    with integer_arrays():  # in-process decode tasks: integer columns reach history as numpy arrays
        results = executor(tasks, batch, resolver, (only, None), stage)
    pb = PendingBatch(batch, opts.pipeline, prepared_at=datetime.now(UTC).isoformat(), catchup=[table])
    histories, table_maps = _collect(results, pb)
    staged = stage if _staged(results) else None
    spans: dict[int, dict] = {}
    for piece in pieces:  # one entry per file (the gates check positions per file)
        f = spans.setdefault(piece["file_seq"], {
            "instance": opts.instance, "lineage": opts.lineage, "file": piece["file"], "file_seq": piece["file_seq"],
            "size": 0, "status": "merged", "start_pos": piece["start"], "end_pos": piece["end"], "complete": False,
            "batch_id": batch, "attempts": 0, "last_error": None, "previous_status": "merged",
            "previous_complete": False})
        f["start_pos"], f["end_pos"] = min(f["start_pos"], piece["start"]), max(f["end_pos"], piece["end"])
    pb.files = [spans[k] for k in sorted(spans)]
    for res in sorted(results, key=lambda r: (r.file_seq, r.start)):
        for name, h in getattr(res, "held", {}).items():
            pb.held.setdefault(name, {**_hold_record(name, "decode", h["error"], h["file"], h["pos"], pieces)})
    for name in pb.held:
        histories.pop(name, None)
        table_maps.pop(name, None)
    pb.counts = [c for c in pb.counts if c[0] not in pb.held]
    appended = {(piece["file_seq"], piece["start"]) for piece in pieces if piece.get("appended")}
    before = sum(t.num_rows for r in results if (r.file_seq, r.start) in appended and table in r.tables
                 for t in r.tables[table].history)
    # Only the held table's lifecycle statements count here (the others were applied when their batches ran).
    histories, table_maps, facts = split_entries(engine, layout, pb, histories, table_maps,
                                                 lambda q: q.lower() == table.lower(), opts.helper_tables, staged)
    if staged:  # pieces whose history rows an earlier batch appended are merged, not appended again
        before = [p["path"] for p in histories.get(table, {}).get("staged", [])
                  if (p["file_seq"], p["start"]) in appended]
    _record_entries(store, pb, histories, table_maps, facts, staged, {table: before})
    last = max(pieces, key=lambda x: (x["file_seq"], x["end"]))
    todo = [(by_name[last["file"]], SimpleNamespace(file=last["file"], file_seq=last["file_seq"]))]
    pb.schema_end = {k: v for k, v in _schema_at_end(engine, layout, resolver, pb, table_maps, todo).items()
                     if k == table}
    pb.seconds = {"decode": time.perf_counter() - started}
    store.save(pb)
    _append_history(engine, layout, store, pb, progress, histories)
    return batch
