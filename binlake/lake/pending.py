"""The pending batch: what a decoded batch's later stages need, persisted in the lake so each stage can run in
its own process (an Airflow task) and be retried alone.

    LAKE/_binlake/batches/<pipeline>/<batch>/manifest.json   files, counts, state, gate runs, pre-merge figures
    LAKE/_binlake/batches/<pipeline>/<batch>/tables.pkl      each table's TableMaps per schema version
    LAKE/_binlake/batches/<pipeline>/<batch>/<n>.arrow       each table's history rows (Arrow IPC)

The manifest is written last (and replaced atomically where the filesystem allows): a batch directory without
one is an interrupted prepare and is redone. Published batches keep only their manifest (the record of what ran).
States: prepared -> (quarantined -> released ->) published, or quarantined -> discarded (decoded again later).
"""

from __future__ import annotations

import json
import os
import pickle
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import pyarrow as pa
import pyarrow.fs as pafs

from ..exitcodes import ExitCode
from .control import FileState
from .staging import drop_stage, read_entry, stage_root

STATES = ("prepared", "quarantined", "released", "published", "discarded")
DONE = ("published", "discarded")


def lake_fs(lake: str) -> tuple[pafs.FileSystem, str]:
    if "://" in lake:
        return pafs.FileSystem.from_uri(lake)
    return pafs.LocalFileSystem(), os.path.abspath(lake)


class BatchNotFound(KeyError):
    """No pending batch with that number (a KeyError for existing callers; a usage error on the command line)."""

    exit_code = ExitCode.USAGE

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else "no such batch"


class BatchQuarantined(RuntimeError):
    """The pipeline's pending batch is quarantined: inspect and release it (`binlake quarantine`)."""

    exit_code = ExitCode.QUARANTINED

    def __init__(self, batch: int, info: dict | None) -> None:
        self.batch = batch
        self.info = info or {}
        failures = self.info.get("failures") or []
        first = failures[0] if failures else {}
        super().__init__(
            f"batch {batch} is quarantined ({self.info.get('stage', '?')} gate: {len(failures)} failing "
            f"expectation(s), first: table {first.get('table')}, {first.get('gate')}); nothing new is ingested "
            f"until it is released: binlake quarantine show {batch} / binlake quarantine release {batch}")

    def __reduce__(self):  # picklable across processes
        return (BatchQuarantined, (self.batch, self.info))


@dataclass
class PendingBatch:
    batch: int
    pipeline: str
    state: str = "prepared"
    files: list[dict] = field(default_factory=list)  # FileState fields as they will be published, + start_pos
    tables: dict[str, dict] = field(default_factory=dict)  # name -> database, table, has_pk, file, rows
    counts: list[list] = field(default_factory=list)  # [table, op, rows]: the decoder's own tally
    statements: list[dict] = field(default_factory=list)
    ddl: list[dict] = field(default_factory=list)
    conversions: dict[str, int] = field(default_factory=dict)
    event_types: dict[str, int] = field(default_factory=dict)
    prepared_at: str = ""
    gates: dict[str, dict] = field(default_factory=dict)  # stage -> {"runs": n, "passed": bool}
    premerge: dict[str, Any] = field(default_factory=dict)  # figures recorded before the first merge commit
    committed: dict[str, dict] = field(default_factory=dict)
    quarantine: dict[str, Any] | None = None  # stage, failures, at
    control_events: int = 0  # quarantine/release records written to the control table for this batch
    seconds: dict[str, float] = field(default_factory=dict)
    # name -> the schema version in force at the batch end where it differs from the one the batch's rows or the
    # registry leave the current table in (DDL after the table's last row change): version, definition, mariadb,
    # ddl (its source and position). merge_batch alters the current table to it.
    schema_end: dict[str, dict] = field(default_factory=dict)
    # The batch's table lifecycle (RENAME/TRUNCATE/DROP/CREATE again): statements to apply and the catalog slots
    # they change (binlake.lake.lifecycle). Planned by prepare_batch, executed by merge_batch.
    lifecycle: dict[str, Any] = field(default_factory=dict)
    # Tables held back by this batch (binlake.lake.holds): name -> database, table, stage, error, file, pos, pieces.
    held: dict[str, dict] = field(default_factory=dict)
    # A catch-up batch: the held tables whose pieces it decodes again (its files are pieces, not control rows).
    catchup: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)  # e.g. generated columns not evaluated (run summary)

    def file_states(self) -> list[FileState]:
        out = []
        for f in self.files:
            st = FileState(f["instance"], f["lineage"], f["file"], f["file_seq"], f["size"], f["status"],
                           f["end_pos"], f["complete"], f["batch_id"], f.get("attempts", 0), f.get("last_error"),
                           f.get("checksum"), _ts(f.get("first_ts")), _ts(f.get("last_ts")))
            out.append(st)
        return out


def _ts(text: str | None) -> datetime | None:
    return datetime.fromisoformat(text) if text else None


class BatchStore:
    """Pending batches of one pipeline in one lake."""

    def __init__(self, lake: str, pipeline: str = "default") -> None:
        self.fs, root = lake_fs(lake)
        self.lake = lake
        self.dir = f"{root.rstrip('/')}/_binlake/batches/{pipeline}"
        self.pipeline = pipeline

    def _path(self, batch: int, name: str = "") -> str:
        return f"{self.dir}/{batch}" + (f"/{name}" if name else "")

    def batches(self) -> list[int]:
        info = self.fs.get_file_info(pafs.FileSelector(self.dir, allow_not_found=True))
        return sorted(int(i.base_name) for i in info if i.type == pafs.FileType.Directory and i.base_name.isdigit())

    def exists(self, batch: int) -> bool:
        return self.fs.get_file_info(self._path(batch, "manifest.json")).type == pafs.FileType.File

    def unpublished(self) -> list[PendingBatch]:
        """Batches still in progress (neither published nor discarded)."""
        return [m for b in self.batches() if self.exists(b) and (m := self.load(b)).state not in DONE]

    def all(self) -> list[PendingBatch]:
        return [self.load(b) for b in self.batches() if self.exists(b)]

    def load(self, batch: int) -> PendingBatch:
        path = self._path(batch, "manifest.json")
        if self.fs.get_file_info(path).type != pafs.FileType.File:
            raise BatchNotFound(f"no pending batch {batch} of pipeline {self.pipeline!r} ({path})")
        with self.fs.open_input_stream(path) as f:
            return PendingBatch(**json.loads(f.read().decode()))

    def save(self, pb: PendingBatch) -> None:
        path = self._path(pb.batch, "manifest.json")
        tmp = path + ".tmp"
        self.fs.create_dir(self._path(pb.batch), recursive=True)
        with self.fs.open_output_stream(tmp) as f:
            # vars, not asdict (whose deep copy of every manifest and figure cost more than the file), and json's C
            # encoder (an indent would take the Python one): saved several times per batch.
            f.write(json.dumps(vars(pb), default=str, separators=(",", ":")).encode())
        self.fs.move(tmp, path)

    def write_data(self, batch: int, histories: dict[str, pa.Table], table_maps: dict[str, Any]) -> dict[str, str]:
        """Each table's history rows and TableMaps; returns table -> data file name."""
        self.fs.create_dir(self._path(batch), recursive=True)
        names = {}
        for i, (name, table) in enumerate(sorted(histories.items())):
            names[name] = f"{i}.arrow"
            # Written aside and renamed: a reader still mapping an earlier file keeps its (unlinked) inode.
            tmp = self._path(batch, names[name] + ".tmp")
            with self.fs.open_output_stream(tmp) as f, pa.ipc.new_file(f, table.schema) as writer:
                writer.write_table(table)
            self.fs.move(tmp, self._path(batch, names[name]))
        with self.fs.open_output_stream(self._path(batch, "tables.pkl")) as f:
            f.write(pickle.dumps(table_maps))
        return names

    def stage(self, batch: int) -> str:
        """The batch's staging folder (binlake.lake.staging): history rows decode tasks wrote away from here."""
        return stage_root(self.lake, self.pipeline, batch)

    def read_history(self, pb: PendingBatch, name: str) -> pa.Table:
        info = pb.tables[name]
        if "staged" in info:
            return read_entry(self.stage(pb.batch), info)
        path = self._path(pb.batch, info["file"])
        if isinstance(self.fs, pafs.LocalFileSystem):  # memory-mapped: no copy of the batch's rows
            with pa.memory_map(path) as source:
                return pa.ipc.open_file(source).read_all()
        with self.fs.open_input_file(path) as f:
            return pa.ipc.open_file(f).read_all()

    def read_table_maps(self, pb: PendingBatch) -> dict[str, Any]:
        """table -> (versions: schema version -> TableMap, the last TableMap)."""
        with self.fs.open_input_stream(self._path(pb.batch, "tables.pkl")) as f:
            return pickle.loads(f.read())  # written by this module into the lake: trusted

    def drop_data(self, pb: PendingBatch) -> None:
        """After publishing: only the manifest stays."""
        for name in [*(t["file"] for t in pb.tables.values() if "file" in t), "tables.pkl"]:
            path = self._path(pb.batch, name)
            if self.fs.get_file_info(path).type == pafs.FileType.File:
                self.fs.delete_file(path)
        drop_stage(self.stage(pb.batch))
