"""The ingest service: options, run summary and the pieces the stages share (file planning, decode tasks, the
schema registry). The lake's stages are in pipeline.py (the segment-wise current merges in current.py);
`binlake.quality.stages.run_ingest` runs them all with the gates (used by `binlake ingest`, the Spark job and the
demo; Airflow runs them one task each).

Decoding is handed to an executor (in-process, or Spark tasks: one per file range); commits each carry an
application transaction, and the control table advances last. Re-running a batch that was cut short at any point
redoes only what was not committed.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import pyarrow as pa

from ..binlog.api import sequence_number
from ..binlog.decoder import integer_arrays
from ..schema.model import TableDef
from .control import FileState
from .crashpoints import crash_point
from .decode_task import RangeResult, decode_range, in_process
from .engines import DELETED, SEQ, DeltaEngine, bookkeeping_engine
from .holds import held_line
from .layout import LakeLayout

if TYPE_CHECKING:
    from rich.console import RenderableType

    from ..settings import QualityConfig

OPS = ("insert", "update", "delete")
Task = tuple[str, str, int, int, int | None]  # path, file name, file sequence, start, stop (None: to the end)
# (tasks, batch, resolver, filters, stage): `stage` is the batch's staging folder (binlake.lake.staging), where an
# executor running the tasks away from this process (Spark) has them write their history rows; in-process
# executors may ignore it and return the rows in the results.
Executor = Callable[..., list[RangeResult]]


def run_task(task: Task, batch: int, resolver, filters, stage: str | None = None,
             keep_bytes: int | None = None) -> RangeResult:
    """One decode task; what a Spark task runs (everything it needs is in its arguments). With `stage`, its history
    rows go to Parquet pieces there and the result holds their manifests (binlake.lake.staging); with
    `keep_bytes` too, only if they outgrow it (decode_range)."""
    path, name, seq, start, stop = task
    tables, databases = filters
    with integer_arrays():  # integer columns reach history as numpy arrays (DecodeOptions.int_arrays)
        result = decode_range(path, name, seq, start, stop, batch, resolver, tables, databases, stage=stage,
                              keep_bytes=keep_bytes)
    crash_point("decode-task")
    return result


def local_executor(tasks: list[Task], batch: int, resolver, filters, stage: str | None = None) -> list[RangeResult]:
    """The tasks decoded here, one after the other; history stays Arrow in memory up to decode_task.KEEP_BYTES,
    beyond which it is staged (binlake.lake.staging) and read back piece by piece."""
    return in_process(tasks, lambda task, keep: run_task(task, batch, resolver, filters, stage, keep), stage)


@dataclass(frozen=True)
class GatesOff:
    """`IngestOptions.quality` of a run without the gates (`binlake ingest --no-gates`): what the stages read of
    it (`enabled`) without loading the gates' validated settings (binlake.settings: pydantic, 0.08 s of CPU)."""

    enabled: bool = False


def _default_quality() -> QualityConfig:
    from ..settings import QualityConfig

    return QualityConfig()


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
    quality: QualityConfig | GatesOff = field(default_factory=_default_quality)  # the gates (binlake.quality)
    # Regexes on table names of online-schema-change helper tables (gh-ost, pt-online-schema-change): kept in
    # the lake only while needed, never listed as lake tables. None: binlake.lake.lifecycle.DEFAULT_HELPERS.
    helper_tables: Sequence[str] | None = None
    # `ingest --follow`: the DDL found in files the previous rounds read (binlake.schema.timeline.DdlScanCache)
    ddl_cache: object = None


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
    gates: dict = field(default_factory=dict)  # "before"/"after" -> {"runs": n, "passed": bool}; "released": bool
    held: dict = field(default_factory=dict)  # table -> its hold (binlake.lake.holds): held back, not ingested
    warnings: list = field(default_factory=list)  # one line each (e.g. generated columns not evaluated)

    def text(self) -> str:
        """The summary as plain lines (what `binlake ingest` prints off a terminal; scripts parse it)."""
        if self.batch is None:
            return "nothing new to ingest"
        lines = [self._headline()]
        for t, ops in self._table_rows():
            lines.append(f"  {t}: insert {ops[0]}, update {ops[1]}, delete {ops[2]}")
        lines += ["  " + note for note in self._notes()]
        lines.append("  time: " + ", ".join(f"{k} {v:.2f} s" for k, v in self.seconds.items()))
        return "\n".join(lines)

    def rich(self) -> RenderableType:
        """The same summary as rich tables (`binlake ingest` on a terminal)."""
        from rich.console import Group
        from rich.table import Table
        from rich.text import Text

        if self.batch is None:
            return Text("nothing new to ingest")
        changes = Table(title=self._headline(), title_justify="left")
        changes.add_column("table")
        for op in OPS:
            changes.add_column(op, justify="right")
        for t, ops in self._table_rows():
            changes.add_row(Text(t), *(str(n) for n in ops))
        times = Table(title="time", title_justify="left")
        times.add_column("step")
        times.add_column("seconds", justify="right")
        for k, v in self.seconds.items():
            times.add_row(Text(k), f"{v:.2f}")
        return Group(changes, *(Text(note) for note in self._notes()), times)

    def _headline(self) -> str:
        return f"batch {self.batch}: {len(self.files)} file(s), {sum(self.rows.values())} row changes"

    def _table_rows(self) -> list[tuple[str, list[int]]]:
        return [(t, [self.rows[(t, op)] for op in OPS]) for t in sorted({t for t, _ in self.rows})]

    def _notes(self) -> list[str]:
        """The lines after the row counts: history-only and held-back tables, warnings, conversions, gates, lag."""
        notes = []
        if self.history_only:
            notes.append(f"history only (no primary or UNIQUE NOT NULL key): {', '.join(self.history_only)}")
        for name, hold in sorted(self.held.items()):
            notes.append(held_line(name, hold))
        for warning in self.warnings:
            notes.append(f"warning: {warning}")
        if self.statements:
            notes.append(f"statement-based DML events seen (not replayable as rows): {self.statements}")
        if self.conversions:
            notes.append(f"values not representable as-is: {json.dumps(self.conversions)}")
        if self.gates:
            ran = [f"{stage} merge passed" for stage in ("before", "after") if self.gates.get(stage, {}).get("passed")]
            notes.append("quality gates: " + (", ".join(ran) or "not run")
                         + (" (released from quarantine)" if self.gates.get("released") else ""))
        if self.lag_seconds is not None:
            notes.append(f"lag: newest commit is {self.lag_seconds:.0f} s old")
        return notes


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


class TableRegistry:
    """`_binlake/tables`: the schema version each current table mirrors (to know what an ALTER changes)."""

    def __init__(self, engine: DeltaEngine, layout: LakeLayout) -> None:
        engine = bookkeeping_engine(engine)
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
