"""The control table `_binlake/files`: one row per source binlog file per instance and host lineage.

It is the checkpoint. A run resumes each file at `end_pos` (the end of its last committed transaction) and the
batch number continues from the highest recorded one. It advances only after the batch's history and current
commits succeeded, so a run killed at any point redoes exactly the batch it did not record.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime

import pyarrow as pa

from .engines import DELETED, SEQ, DeltaEngine, bookkeeping_engine
from .layout import LakeLayout

STATUSES = ("discovered", "fetched", "decoded", "merged", "quarantined")
KEYS = ["instance", "lineage", "file"]
EVENT_LIMIT = (1 << 20) - 1  # rows' `_seq` is batch << 20 | event; the batch's final record uses the limit
SCHEMA = pa.schema([
    pa.field("instance", pa.string()),
    pa.field("lineage", pa.string()),
    pa.field("file", pa.string()),
    pa.field("file_seq", pa.int64()),
    pa.field("size", pa.int64()),
    pa.field("first_ts", pa.timestamp("us", tz="UTC")),
    pa.field("last_ts", pa.timestamp("us", tz="UTC")),
    pa.field("checksum", pa.string()),
    pa.field("status", pa.string()),
    pa.field("attempts", pa.int32()),
    pa.field("last_error", pa.string()),
    pa.field("end_pos", pa.int64()),
    pa.field("complete", pa.bool_()),
    pa.field("batch_id", pa.int64()),
    pa.field("updated_at", pa.timestamp("us", tz="UTC")),
])


@dataclass
class FileState:
    instance: str
    lineage: str
    file: str
    file_seq: int
    size: int
    status: str = "discovered"
    end_pos: int = 4
    complete: bool = False
    batch_id: int = -1
    attempts: int = 0
    last_error: str | None = None
    checksum: str | None = None
    first_ts: datetime | None = None
    last_ts: datetime | None = None
    extra: dict = field(default_factory=dict)


class ControlTable:
    def __init__(self, engine: DeltaEngine, layout: LakeLayout) -> None:
        self.engine = bookkeeping_engine(engine)
        self.layout = layout
        self.path = layout.control_path

    def load(self) -> dict[tuple[str, str, str], FileState]:
        if not self.engine.exists(self.path):
            return {}
        out = {}
        for r in self.engine.read(self.path).to_pylist():
            st = FileState(r["instance"], r["lineage"], r["file"], r["file_seq"], r["size"], r["status"],
                           r["end_pos"], bool(r["complete"]), r["batch_id"], r["attempts"] or 0, r["last_error"],
                           r["checksum"], r["first_ts"], r["last_ts"])
            out[(st.instance, st.lineage, st.file)] = st
        return out

    def last_batch(self) -> int:
        states = self.load()
        return max((s.batch_id for s in states.values()), default=-1)

    def record(self, states: list[FileState], batch: int, event: int | None = None) -> bool:
        """Upsert the files' rows as of `batch` (exactly once per batch). With `event` (1, 2, ...), record a
        state change inside the batch instead (quarantine, release): ordered after the batch's earlier events
        and before its final record, each exactly once."""
        if event is not None and not 0 < event < EVENT_LIMIT:
            raise ValueError(f"control event {event} out of range 1..{EVENT_LIMIT - 1}")
        seq = batch << 20 | (EVENT_LIMIT if event is None else event)
        app, version = ((self.layout.app_id("control"), batch) if event is None
                        else (self.layout.app_id("control-events"), seq))
        return self.engine.merge(self.path, _rows(states, seq), KEYS, app, version)

    def insert_new(self, known: dict, states: list[FileState], app: str) -> None:
        """Insert rows for files the table does not hold yet (`known`: its loaded rows, updated here), never
        updating an existing one: what a source announced before any batch read the file (binlake.sources.fetch,
        application transaction `app`)."""
        states = [s for s in states if (s.instance, s.lineage, s.file) not in known]
        if not states:
            return
        app_id = self.layout.app_id(app)
        version = (self.engine.txn_version(self.path, app_id) or 0) + 1
        self.engine.merge(self.path, _rows(states, -1), KEYS, app_id, version)
        for s in states:
            known[(s.instance, s.lineage, s.file)] = s


def _rows(states: list[FileState], seq: int) -> pa.Table:
    now = datetime.now(UTC)
    rows: dict[str, list] = {f.name: [] for f in SCHEMA}
    for s in states:
        values = {"instance": s.instance, "lineage": s.lineage, "file": s.file, "file_seq": s.file_seq,
                  "size": s.size, "first_ts": s.first_ts, "last_ts": s.last_ts, "checksum": s.checksum,
                  "status": s.status, "attempts": s.attempts, "last_error": s.last_error,
                  "end_pos": s.end_pos, "complete": s.complete, "batch_id": s.batch_id, "updated_at": now}
        for k, v in values.items():
            rows[k].append(v)
    arrays = [pa.array(rows[f.name], f.type) for f in SCHEMA]
    return pa.table([*arrays, pa.array([seq] * len(states), pa.int64()), pa.array([False] * len(states))],
                    names=[*SCHEMA.names, SEQ, DELETED])
