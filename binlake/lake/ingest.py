"""The ingest service: one batch from the control table's checkpoint to history appends and current merges.

Used by `binlake ingest`, the Spark job and the Airflow tasks. Decoding is handed to an executor (in-process, or
Spark tasks: one per file); commits happen here, each carrying an application transaction, and the control table
advances last. Re-running a batch that was cut short at any point redoes only what was not committed.
"""

from __future__ import annotations

import json
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa

from ..binlog.api import sequence_number
from ..schema.api import build_resolver
from ..schema.model import TableDef
from .control import ControlTable, FileState
from .current import key_names, merge_input, schema_changes, segments
from .decode_task import RangeResult, decode_range, read_ipc
from .engines import DELETED, SEQ, DeltaEngine, get_engine
from .history import PARTITION_BY
from .layout import LakeLayout
from .split import plan_ranges

Task = tuple[str, str, int, int, int | None]  # path, file name, file sequence, start, stop (None: to the end)
Executor = Callable[[list[Task], int, object, object], list[RangeResult]]


def run_task(task: Task, batch: int, resolver, filters) -> RangeResult:
    """One decode task; what a Spark task runs (everything it needs is in its arguments)."""
    path, name, seq, start, stop = task
    tables, databases = filters
    return decode_range(path, name, seq, start, stop, batch, resolver, tables, databases)


def local_executor(tasks: list[Task], batch: int, resolver, filters) -> list[RangeResult]:
    return [run_task(t, batch, resolver, filters) for t in tasks]


@dataclass
class IngestOptions:
    lake: str
    files: Sequence[str]
    schemas: str | None = None
    instance: str = "default"
    lineage: str = "default"
    engine: str | None = None
    pipeline: str = "default"
    tables: object = None  # compiled regex on db.table
    databases: set[str] | None = None
    split_bytes: int = 64 << 20  # files larger than this are decoded as several ranges of whole transactions


@dataclass
class RunSummary:
    batch: int | None
    files: list[str] = field(default_factory=list)
    rows: Counter = field(default_factory=Counter)  # (table, op) -> rows
    history_only: list[str] = field(default_factory=list)
    statements: int = 0
    conversions: dict = field(default_factory=dict)
    seconds: dict = field(default_factory=dict)
    lag_seconds: float | None = None
    committed: dict = field(default_factory=dict)  # table -> {"history": bool, "current": n merges}

    def text(self) -> str:
        if self.batch is None:
            return "nothing new to ingest"
        lines = [f"batch {self.batch}: {len(self.files)} file(s), {sum(self.rows.values())} row changes"]
        tables = sorted({t for t, _ in self.rows})
        for t in tables:
            ops = {op: self.rows[(t, op)] for op in ("insert", "update", "delete")}
            lines.append(f"  {t}: insert {ops['insert']}, update {ops['update']}, delete {ops['delete']}")
        if self.history_only:
            lines.append(f"  history only (no primary key): {', '.join(self.history_only)}")
        if self.statements:
            lines.append(f"  statement-based DML events seen (not replayable as rows): {self.statements}")
        if self.conversions:
            lines.append(f"  values not representable as-is: {json.dumps(self.conversions)}")
        if self.lag_seconds is not None:
            lines.append(f"  lag: newest commit is {self.lag_seconds:.0f} s old")
        lines.append("  time: " + ", ".join(f"{k} {v:.2f} s" for k, v in self.seconds.items()))
        return "\n".join(lines)


def _ordered(files: Sequence[str]) -> list[str]:
    return sorted((str(f) for f in files), key=lambda p: (sequence_number(p), Path(p).name))


def plan_files(opts: IngestOptions, states: dict) -> list[tuple[str, FileState]]:
    """Files with something left to read, with their state (new files start at position 4)."""
    todo = []
    # After a bootstrap, ingest starts at its position: older files are already reflected in the loaded rows.
    floor = min((s.file_seq for s in states.values()
                 if s.status == "bootstrap" and (s.instance, s.lineage) == (opts.instance, opts.lineage)),
                default=-1)
    for path in _ordered(opts.files):
        name = Path(path).name
        if sequence_number(name) < floor:
            continue
        size = Path(path).stat().st_size
        st = states.get((opts.instance, opts.lineage, name))
        if st is None:
            st = FileState(opts.instance, opts.lineage, name, sequence_number(name), size)
        elif st.complete and st.size == size:
            continue
        st.size = size
        todo.append((path, st))
    return todo


class _Registry:
    """`_binlake/tables`: the schema version each current table mirrors (to know what an ALTER changes)."""

    def __init__(self, engine: DeltaEngine, layout: LakeLayout) -> None:
        self.engine, self.layout, self.path = engine, layout, layout.tables_path
        self.rows: dict[str, dict] = {}
        if engine.exists(self.path):
            self.rows = {r["table"]: r for r in engine.read(self.path).to_pylist()}

    def get(self, table: str) -> tuple[str | None, TableDef | None]:
        r = self.rows.get(table)
        if r is None:
            return None, None
        return r["version"], (TableDef.from_dict(json.loads(r["definition"])) if r["definition"] else None)

    def set(self, table: str, version: str | None, definition: TableDef | None) -> None:
        self.rows[table] = {"table": table, "version": version,
                            "definition": json.dumps(definition.to_dict()) if definition else None}

    def commit(self, batch: int) -> None:
        rows = list(self.rows.values())
        if not rows:
            return
        data = pa.table({"table": [r["table"] for r in rows], "version": [r["version"] for r in rows],
                         "definition": [r["definition"] for r in rows], SEQ: [batch] * len(rows),
                         DELETED: [False] * len(rows)},
                        schema=pa.schema([("table", pa.string()), ("version", pa.string()),
                                          ("definition", pa.string()), (SEQ, pa.int64()), (DELETED, pa.bool_())]))
        self.engine.merge(self.path, data, ["table"], self.layout.app_id("tables"), batch)


def run_ingest(opts: IngestOptions, executor: Executor = local_executor, engine: DeltaEngine | None = None,
               progress: Callable[[str], None] = lambda _msg: None) -> RunSummary:
    started = time.perf_counter()
    engine = engine or get_engine(opts.engine)
    layout = LakeLayout(opts.lake, opts.pipeline)
    control = ControlTable(engine, layout)
    states = control.load()
    todo = plan_files(opts, states)
    if not todo:
        return RunSummary(None)
    batch = max((s.batch_id for s in states.values()), default=-1) + 1
    summary = RunSummary(batch, [Path(p).name for p, _ in todo])
    progress(f"batch {batch}: {len(todo)} file(s) to read")
    all_files = _ordered(opts.files)
    resolver = build_resolver(all_files, opts.schemas, opts.instance)
    summary.seconds["schema timeline"] = time.perf_counter() - started

    t0 = time.perf_counter()
    tasks = [(path, st.file, st.file_seq, a, b) for path, st in todo
             for a, b in plan_ranges(path, st.file, st.end_pos, opts.split_bytes)]
    progress(f"decoding {len(tasks)} range(s)")
    results = executor(tasks, batch, resolver, (opts.tables, opts.databases))
    summary.seconds["decode"] = time.perf_counter() - t0

    tables = _collect(results, summary)
    t0 = time.perf_counter()
    for name, (history, _versions, last_tm) in sorted(tables.items()):
        db, table = last_tm.database, last_tm.table
        # Versions of per-table app ids are batch * 1000 + step everywhere (bootstrap writes several per batch).
        appended = engine.append(layout.history_path(db, table), history, layout.app_id("history", db, table),
                                 batch * 1000, partition_by=PARTITION_BY)
        summary.committed[name] = {"history": appended}
        progress(f"{name}: {history.num_rows} history rows {'appended' if appended else 'already committed'}")
    summary.seconds["history append"] = time.perf_counter() - t0

    t0 = time.perf_counter()
    registry = _Registry(engine, layout)
    for name, (history, versions, last_tm) in sorted(tables.items()):
        if not last_tm.primary_key:
            summary.history_only.append(name)
            continue
        _refuse_partial_images(name, summary.conversions)
        merges = _merge_current(engine, layout, registry, name, history, versions, batch)
        summary.committed[name]["current"] = merges
    registry.commit(batch)
    summary.seconds["merge"] = time.perf_counter() - t0

    by_file: dict[str, list[RangeResult]] = {}
    for res in results:
        by_file.setdefault(res.file, []).append(res)
    for _path, st in todo:
        last = max(by_file[st.file], key=lambda r: r.start)
        st.end_pos = last.end
        st.complete = last.reached_file_end and last.end == st.size
        st.status = "merged"
        st.batch_id = batch
    control.record([st for _, st in todo], batch)
    newest = max((h.column("_commit_ts").to_pylist()[-1] for h, _, _ in tables.values() if h.num_rows),
                 default=None)
    if newest is not None:
        summary.lag_seconds = max(0.0, time.time() - newest.timestamp())
    summary.seconds["total"] = time.perf_counter() - started
    return summary


class PartialImages(ValueError):
    """Row images without every column: merging them into a current table would invent values."""


def _refuse_partial_images(table: str, conversions: dict) -> None:
    """A current table needs full row images; the history keeps what the binlog has either way."""
    partial = sorted(k for k in conversions if k.split(":", 1)[1].startswith(table + ".")
                     and k.split(":", 1)[0] in ("absent", "json_patch"))
    if partial:
        raise PartialImages(
            f"{table}: the binlog holds partial row images ({', '.join(partial)}); a current table needs "
            "binlog_row_image=FULL (and no partial JSON updates: binlog_row_value_options='') on the server. "
            "The history append of this batch is committed; the current table was not changed")


def _collect(results: list[RangeResult], summary: RunSummary) -> dict[str, tuple[pa.Table, dict, object]]:
    parts: dict[str, list[pa.Table]] = {}
    versions: dict[str, dict] = {}
    last: dict[str, object] = {}
    for res in sorted(results, key=lambda r: (r.file_seq, r.start)):
        summary.rows.update(res.counts)
        summary.statements += len(res.statements)
        for k, v in res.conversions.items():
            summary.conversions[k] = summary.conversions.get(k, 0) + v
        for name, tr in res.tables.items():
            parts.setdefault(name, []).extend(read_ipc(b) for b in tr.history_ipc)
            versions.setdefault(name, {}).update(tr.versions)
            last[name] = tr.table_map
    return {name: (pa.concat_tables(tbls, promote_options="permissive"), versions[name], last[name])
            for name, tbls in parts.items()}


def _merge_current(engine: DeltaEngine, layout: LakeLayout, registry: _Registry, name: str, history: pa.Table,
                   versions: dict, batch: int) -> int:
    """Merge the table's net changes segment by segment, applying schema changes between them."""
    step = 0
    merges = 0
    for seg in segments(history):
        tm = versions[seg.version]
        db, table = tm.database, tm.table
        path = layout.current_path(db, table)
        app = layout.app_id("current", db, table)
        recorded, old_def = registry.get(name)
        if engine.exists(path) and recorded is not None and recorded != seg.version:
            current = engine.read(path).schema
            old_cols = [f.name for f in current if f.name not in (SEQ, "_commit_ts")]
            changes = schema_changes(old_cols, old_def, tm, current, None)
            if changes:
                engine.replace_schema(path, changes, app, batch * 1000 + step)
            step += 1
        data = merge_input(seg.rows, tm)
        engine.merge(path, data, key_names(tm), app, batch * 1000 + step)
        step += 1
        merges += 1
        registry.set(name, seg.version, tm.schema)
    return merges
