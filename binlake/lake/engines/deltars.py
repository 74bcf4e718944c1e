"""The embedded engine: delta-rs (`deltalake`) fed with Arrow, no JVM.

Exactly-once: each operation loads one snapshot, checks `transaction_version(app_id)` on it, and commits from that
snapshot with `CommitProperties(app_transactions=[Transaction(app_id, batch)])`. delta-rs' conflict checker fails
a commit when a concurrent winning commit carries the same app id (verified: two appends, and two merges, of the
same (app_id, batch) from one snapshot -> the second raises CommitFailedError), and fails a MERGE whenever a
concurrent commit added data. On CommitFailedError the whole operation is retried from a fresh snapshot, where the
txn check turns a duplicate into a no-op. Table creation is its own empty commit, because a writer that finds no
table has no snapshot to conflict-check against (verified: two racing creating appends both landed).
Reads go through `DeltaTable.scan` (DataFusion) rather than `to_pyarrow_table`; see docs/engines.md (exit abort).
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any, TypeVar

import pyarrow as pa
import pyarrow.compute as pc
from deltalake import CommitProperties, DeltaTable, Transaction, WriterProperties, write_deltalake
from deltalake.exceptions import CommitFailedError, DeltaError, TableNotFoundError
from deltalake.transaction import AddAction

from ..staging import (
    DATE,
    entry_pieces,
    entry_reader,
    link_pieces,
    linkable,
    local_lake,
    repeated_columns,
    unified_schema,
    write_files,
)
from .base import DELETED, SEQ, ColumnChange, EngineError, HistoryEntry, check_batch, is_committed
from .commitmeta import META_KEY, app_ids_after, commit_meta, history_entry, meta_of
from .mergeplan import MergeSpec, current_columns, validate_merge_input
from .schema_change import apply_changes, plan, renamed
from .tombstones import (
    check_merge_columns,
    copy_with_tombstones,
    merge_with_tombstones,
    replace_schema_with_tombstones,
    role_app_id,
    settle,
    tombstone_path,
    tombstone_version_at,
)

T = TypeVar("T")
FILE_BYTES = 64 << 20  # Arrow bytes per data file written from staged history (append_staged)
MERGE_CHUNK_BYTES = 16 << 20  # merge input bytes per MERGE commit: a larger input is merged in key-disjoint parts
# Rows per Parquet row group of a pristine table's overwrite: delta-rs' writer holds a row group's rows (default
# 1,048,576) before it encodes them, as much again as the whole merge input for most batches.
ROW_GROUP_ROWS = 1 << 16
# A column's dictionary page grows to this before its writer falls back to plain encoding: delta-rs' default (1 MiB)
# had distinct values hashed into a dictionary about 100,000 deep before every fallback, 80% of a write's CPU
# for distinct integers; columns of few values stay dictionary-encoded (their files came out smaller, too).
DICTIONARY_PAGE_BYTES = 16 << 10


class DeltaRsEngine:
    """DeltaEngine on delta-rs. `storage_options` go to every table (object stores: S3/OSS-compatible, GCS, ...)."""

    name = "delta-rs"

    def __init__(self, storage_options: dict[str, str] | None = None, max_attempts: int = 6,
                 record: dict[str, Any] | None = None) -> None:
        self.storage_options = dict(storage_options) if storage_options else None
        self.max_attempts = max_attempts
        # Added to binlake's record of every commit this engine makes (e.g. `reducedBy: spark` in a Spark task).
        self.record = dict(record) if record else {}

    # -- plumbing ---------------------------------------------------------------------------------------------

    def _dt(self, path: str, version: int | None = None):
        try:
            return DeltaTable(str(path), version=version, storage_options=self.storage_options)
        except TableNotFoundError as exc:
            raise EngineError(f"no Delta table at {path}" + (f" version {version}" if version is not None else "")
                              + f": {exc}") from exc

    def _props(self, meta: dict[str, Any]):
        meta = {**meta, **self.record} if self.record else meta
        txns = [Transaction(app_id=t["appId"], version=t["version"]) for t in meta["txns"]]
        return CommitProperties(app_transactions=txns, custom_metadata={META_KEY: meta})

    def _retry(self, attempt: Callable[[], T]) -> T:
        """Rerun a whole read-check-commit attempt when delta-rs reports a commit conflict."""
        for n in range(self.max_attempts):
            try:
                return attempt()
            except CommitFailedError:
                if n == self.max_attempts - 1:
                    raise
                time.sleep(0.05 * 2**n * (1 + random.random()))
        raise AssertionError("unreachable")

    def _ensure_commit(self, dt, before: int, meta: dict[str, Any]) -> None:
        """delta-rs makes no commit for a write that changes nothing; commit the txn alone then (a blind
        append of no files, still conflict-checked on the txn app id)."""
        if dt.version() == before:
            dt.create_write_transaction([], "append", dt.schema(), partition_by=dt.metadata().partition_columns,
                                        commit_properties=self._props(meta))

    def _commit_once(self, path: str, app_id: str, batch: int, meta: dict[str, Any], write: Callable[[Any], Any],
                     create: tuple[pa.Schema, list[str] | None] | None = None) -> bool:
        """One commit of `write(table)` carrying (app_id, batch), unless the table recorded it (False); retried
        from a fresh snapshot on a conflict. `create`: (schema, partition columns) to create the table with first.
        `write` returns True when it committed whatever it was given (create_write_transaction): then the handle
        is not brought up to date to find out."""

        def attempt() -> bool:
            dt = self._create(path, *create) if create is not None else None
            dt = dt or self._dt(path)
            if is_committed(dt.transaction_version(app_id), batch):
                return False
            before = dt.version()
            if not write(dt):
                self._ensure_commit(dt, before, meta)
            return True

        return self._retry(attempt)

    @staticmethod
    def _arrow_schema(dt) -> pa.Schema:
        return pa.schema(dt.schema().to_arrow())

    # -- reads ------------------------------------------------------------------------------------------------

    def exists(self, path: str) -> bool:
        return DeltaTable.is_deltatable(str(path), self.storage_options)

    def version(self, path: str) -> int | None:
        return self._dt(path).version() if self.exists(path) else None

    def txn_version(self, path: str, app_id: str) -> int | None:
        if not self.exists(path):
            return None
        v = self._dt(path).transaction_version(app_id)
        return None if v is None or v < 0 else v

    def table_schema(self, path: str) -> pa.Schema:
        return self._arrow_schema(self._dt(path))

    def read(self, path: str, columns: list[str] | None = None) -> pa.Table:
        dt = self._dt(path)
        schema = self._arrow_schema(dt)
        if columns is not None:
            unknown = [c for c in columns if c not in schema.names]
            if unknown:
                raise EngineError(f"read {path}: no column(s) {unknown}; columns are {schema.names}")
            schema = pa.schema([schema.field(c) for c in columns])
        # scan() streams Arrow view types (string_view...); cast back to the table's declared types.
        return pa.table(dt.scan(columns=columns)).cast(schema)

    def read_batches(self, path: str, columns: list[str]) -> Iterator[pa.Table]:
        """`columns` of a table streamed in record batches (as small tables of the declared types): a scan that
        does not hold the table (the after-merge gate's key checks of a large table)."""
        dt = self._dt(path)
        schema = pa.schema([self._arrow_schema(dt).field(c) for c in columns])
        for b in pa.RecordBatchReader.from_stream(dt.scan(columns=columns)):
            yield pa.Table.from_batches([b]).cast(schema)

    def history(self, path: str) -> list[HistoryEntry]:
        return [history_entry(h["version"], h.get("timestamp"), h.get("operation", ""), meta_of(h))
                for h in self._dt(path).history()]

    def _history_meta(self, path: str) -> list[tuple[int, dict[str, Any] | None]]:
        return [(h["version"], meta_of(h)) for h in self._dt(path).history()]

    # -- writes -----------------------------------------------------------------------------------------------

    def create_empty(self, path: str, schema: pa.Schema, partition_by: list[str] | None = None) -> None:
        self._create(path, schema, partition_by)

    def _create(self, path: str, schema: pa.Schema, partition_by: list[str] | None = None):
        """create_empty, returning the new table's handle as created (version 0), or None when the table existed
        already (or another writer created it first): the caller then loads it."""
        if self.exists(path):
            return None
        try:
            return DeltaTable.create(str(path), schema, mode="ignore", partition_by=partition_by or None,
                                     storage_options=self.storage_options)
        except (CommitFailedError, DeltaError):
            if not self.exists(path):  # lost a creation race: fine; anything else is a real error
                raise
        return None

    def append(self, path: str, data: pa.Table, app_id: str, batch: int,
               partition_by: list[str] | None = None) -> bool:
        """Append rows in one commit. On a local lake whose table has the rows' schema (or none yet), the rows are
        written as the table's data files here (binlake.lake.staging.write_files: pyarrow's Parquet writer, dictionary
        encoding only for binlake's text metadata columns) and committed with append_files: about a third less
        CPU than delta-rs' writer on history rows."""
        check_batch(app_id, batch)
        if data.num_rows and self._files_fit(path, data.schema):
            return self._append_as_files(path, [data], data.schema, app_id, batch, partition_by)
        meta = commit_meta("append", [(app_id, batch)])

        return self._commit_once(path, app_id, batch, meta, lambda dt: write_deltalake(
            dt, data, mode="append", schema_mode="merge", commit_properties=self._props(meta)),
            create=(data.schema, partition_by))

    def append_files(self, path: str, files: list[dict], schema: pa.Schema, app_id: str, batch: int,
                     partition_by: list[str] | None = None, meta: dict[str, Any] | None = None) -> bool:
        """Commit Parquet files already written in the table folder (binlake.lake.staging.write_files manifests) as one
        append carrying (app_id, batch); skipped (False) when that batch is committed. `schema` is the files'
        schema with the partition columns; the table must have exactly that schema (else: use append). `meta`: the
        commit's metadata (default: an append's)."""
        check_batch(app_id, batch)
        meta = meta or commit_meta("append", [(app_id, batch)])
        actions = [AddAction(f["path"], f["size"], f["partition_values"], f["modification_time"], True, f["stats"])
                   for f in files]

        def write(dt) -> bool:
            dt.create_write_transaction(actions, "append", schema, partition_by=partition_by or None,
                                        commit_properties=self._props(meta))
            return True  # a commit even of no files (the txn alone), so nothing for _ensure_commit to add

        return self._commit_once(path, app_id, batch, meta, write, create=(schema, partition_by))

    def append_staged(self, path: str, stage: str, info: dict, app_id: str, batch: int,
                      partition_by: list[str] | None = None) -> bool:
        """Append a batch entry's staged history pieces (binlake.lake.staging) in one commit, streamed: the rows
        go from the Parquet pieces to the table without being held in memory together. On a local lake whose
        table has the pieces' schema (or none yet), the pieces of one commit date are linked into the table as its
        data files (no rows read: binlake.lake.staging.link_pieces), the rest written as data files here, a
        bounded part at a time (FILE_BYTES), and all committed together (append_files)."""
        check_batch(app_id, batch)
        if not entry_pieces(info):
            return False
        schema = unified_schema(stage, entry_pieces(info))
        if self._files_fit(path, schema):
            return self._append_as_files(path, None, schema, app_id, batch, partition_by, (stage, info))
        meta = commit_meta("append", [(app_id, batch)])

        return self._commit_once(path, app_id, batch, meta, lambda dt: write_deltalake(
            dt, entry_reader(stage, info), mode="append", schema_mode="merge", commit_properties=self._props(meta)),
            create=(schema, partition_by))

    WRITER_FEATURES = frozenset({"appendOnly", "invariants", "checkConstraints", "timestampNtz"})
    """Table writer features this engine's merges and appends keep to (another engine may have enabled others)."""

    def writes(self, path: str) -> bool:
        """Whether this engine may write the table at `path` (none yet, or a protocol of legacy writer version 3 at
        most or of WRITER_FEATURES only: tables binlake creates; one another engine upgraded, e.g. with deletion
        vectors or column mapping, is left to it)."""
        if not self.exists(path):
            return True
        protocol = self._dt(path).protocol()
        if protocol.min_writer_version <= 3:
            return True
        return protocol.min_writer_version == 7 and set(protocol.writer_features or ()) <= self.WRITER_FEATURES

    def _files_fit(self, path: str, schema: pa.Schema) -> bool:
        """Whether rows of `schema` may be written as data files of the table at `path` (append_files)."""
        return local_lake(path) and (not self.exists(path) or self.table_schema(path) == schema)

    def _append_as_files(self, path: str, tables: Iterable[pa.Table] | None, schema: pa.Schema, app_id: str,
                         batch: int, partition_by: list[str] | None, staged: tuple[str, dict] | None = None) -> bool:
        """Write `tables` as the table's data files and commit them in one append carrying (app_id, batch).
        `staged` (stage, batch entry) instead: the entry's pieces that are data files of the table as they are
        (one commit date, the table's columns: binlake.lake.staging.linkable) are linked into it, the others
        read and written."""
        if self.exists(path):
            dt = self._dt(path)
            if is_committed(dt.transaction_version(app_id), batch):
                return False  # no files written for a batch already committed
            partition_by = dt.metadata().partition_columns or None  # an existing table keeps its partitioning
        files = []
        if staged is not None:
            stage, info = staged
            lo, hi = info.get("seq_from"), info.get("seq_to")
            links = [p for p in entry_pieces(info) if partition_by == [DATE] and linkable(stage, p, lo, hi, schema)]
            files += link_pieces(path, stage, links)
            rest = {**info, "staged": [p for p in entry_pieces(info) if p not in links]}
            tables = _parts(entry_reader(stage, rest, schema), FILE_BYTES) if rest["staged"] else []
        files += [f for part in tables for f in write_files(path, part, partition_by, repeated_columns(schema))]
        return self.append_files(path, files, schema, app_id, batch, partition_by)

    def run_merge(self, path: str, source: pa.Table, spec: MergeSpec, app_id: str, batch: int,
                  meta: dict[str, Any], check_txn: bool) -> bool:
        dt = self._dt(path)
        if check_txn and is_committed(dt.transaction_version(app_id), batch):
            return False
        before = dt.version()
        # streamed_exec=False lets delta-rs derive a file-pruning predicate from the (in-memory) source's key
        # ranges, so a batch rewrites only the files its keys can be in.
        merger = dt.merge(source, spec.on, source_alias="s", target_alias="t", streamed_exec=False,
                          commit_properties=self._props(meta),
                          writer_properties=WriterProperties(dictionary_page_size_limit=DICTIONARY_PAGE_BYTES))
        for clause in spec.clauses:
            assignments = dict(clause.assignments)
            if clause.kind == "matched_delete":
                merger = merger.when_matched_delete(clause.predicate)
            elif clause.kind == "matched_update":
                merger = merger.when_matched_update(assignments, clause.predicate)
            else:
                merger = merger.when_not_matched_insert(assignments, clause.predicate)
        merger.execute()
        self._ensure_commit(dt, before, meta)
        return True

    def merge(self, path: str, data: pa.Table, keys: list[str], app_id: str, batch: int) -> bool:
        """The `_seq`-ordered merge with tombstones. An input over MERGE_CHUNK_BYTES is merged in parts (rows of
        distinct keys: merge input holds one row per key), each its own commit, so the MERGE's working memory stays
        bounded: every part but the last carries its own app id (role `part<i>`), the last one (app_id, batch),
        so the batch counts as merged only once every part is; a rerun skips the parts committed."""
        check_batch(app_id, batch)
        if hasattr(data, "buckets"):  # binlake.lake.netbuckets.BucketedNet: read, reduced and merged bucket by bucket
            if self._pristine(path):
                return self._retry(lambda: self._merge_buckets_into_empty(path, data, keys, app_id, batch))
            return self._merge_buckets(path, data, keys, app_id, batch)
        if self._pristine(path):
            return self._retry(lambda: self._merge_into_empty(path, data, keys, app_id, batch))
        rows = max(1, data.num_rows * MERGE_CHUNK_BYTES // max(1, data.nbytes))
        if data.num_rows <= rows:
            return self._retry(lambda: merge_with_tombstones(self, path, data, keys, app_id, batch))
        if self.exists(path) and is_committed(self.txn_version(path, app_id), batch):
            return False
        starts = list(range(0, data.num_rows, rows))
        for i, start in enumerate(starts[:-1]):
            part = data.slice(start, rows)
            self._retry(lambda part=part, i=i: merge_with_tombstones(self, path, part, keys,
                                                                     role_app_id(app_id, f"part{i}"), batch))
            pa.default_memory_pool().release_unused()  # a part's working memory back before the next one
        last = data.slice(starts[-1])
        return self._retry(lambda: merge_with_tombstones(self, path, last, keys, app_id, batch))

    def _merge_buckets(self, path: str, data, keys: list[str], app_id: str, batch: int) -> bool:
        """The general merge of a BucketedNet: each bucket (disjoint keys) in parts of about MERGE_CHUNK_BYTES, the
        parts numbered across the buckets (role `part<i>`), the last one carrying (app_id, batch), as `merge` does
        with the slices of one table. The buckets are the same on a re-run (made from the same staged pieces), so
        the parts are too: the committed ones are skipped."""
        if self.exists(path) and is_committed(self.txn_version(path, app_id), batch):
            return False

        def parts() -> Iterator[pa.Table]:
            for bucket in data.buckets():
                rows = max(1, bucket.num_rows * MERGE_CHUNK_BYTES // max(1, bucket.nbytes))
                for at in range(0, bucket.num_rows, rows):
                    yield bucket.slice(at, rows)

        held, i = None, 0
        for part in parts():
            if held is not None:  # not the last part: its own app id
                self._retry(lambda held=held, i=i: merge_with_tombstones(self, path, held, keys,
                                                                         role_app_id(app_id, f"part{i}"), batch))
                i += 1
                pa.default_memory_pool().release_unused()
            held = part
        last = held if held is not None else data.schema.empty_table()
        return self._retry(lambda: merge_with_tombstones(self, path, last, keys, app_id, batch))

    def _merge_buckets_into_empty(self, path: str, data, keys: list[str], app_id: str, batch: int) -> bool:
        """`_merge_into_empty` for a BucketedNet: the same commits (tombstones, then the rows, each one overwrite),
        their rows streamed a bucket at a time rather than held whole."""
        columns = [f.name for f in data.schema if f.name != DELETED]
        schema = pa.schema([data.schema.field(c) for c in columns])
        dt = None
        if self.exists(path):
            check_merge_columns(self, path, columns)
        else:
            dt = self._create(path, schema)
        dt = dt or self._dt(path)
        if is_committed(dt.transaction_version(app_id), batch):
            return False
        target = self._arrow_schema(dt)
        tpath = tombstone_path(path)
        if dt.file_uris() or (self.exists(tpath) and self._dt(tpath).file_uris()) or set(schema) != set(target):
            return self._merge_buckets(path, data, keys, app_id, batch)  # filled meanwhile, or other types
        key_schema = pa.schema([pa.field(k, data.schema.field(k).type) for k in keys] + [pa.field(SEQ, pa.int64())])
        narrow = [*keys, SEQ, DELETED]
        # Deletes the reduction keeps (a key deleted and inserted again in the batch keeps its insert): counted
        # first, so that a batch without any leaves the tombstone table as the in-memory merge does.
        deletes = sum(pc.sum(b.column(DELETED).cast(pa.int64())).as_py() or 0
                      for b in data.buckets(narrow)) if data.deletes else 0
        if deletes:
            tdt = self._create(tpath, key_schema) or self._dt(tpath)
            tombs = pa.RecordBatchReader.from_batches(key_schema, (
                rb for b in data.buckets(narrow)
                for rb in validate_merge_input(b, keys).filter(b.column(DELETED)).select(key_schema.names)
                .cast(key_schema).to_batches(max_chunksize=1 << 16)))
            write_deltalake(tdt, tombs, mode="overwrite", predicate="true",
                            commit_properties=self._props(commit_meta("tombstones", [(app_id, batch)])),
                            writer_properties=WriterProperties(dictionary_page_size_limit=DICTIONARY_PAGE_BYTES))
            ours = tdt.version()
        else:
            ours = self.version(tpath)
        meta = commit_meta("merge", [(app_id, batch)], tombstonesVersion=ours)
        before = dt.version()

        def upserts() -> Iterator[pa.RecordBatch]:
            for b in data.buckets():
                b = validate_merge_input(b, keys)
                if deletes:
                    b = b.filter(pc.invert(b.column(DELETED)))
                yield from b.select(target.names).to_batches(max_chunksize=1 << 16)

        write_deltalake(dt, pa.RecordBatchReader.from_batches(target, upserts()), mode="overwrite",
                        predicate="true", commit_properties=self._props(meta),
                        writer_properties=WriterProperties(max_row_group_size=ROW_GROUP_ROWS,
                                                           dictionary_page_size_limit=DICTIONARY_PAGE_BYTES))
        self._ensure_commit(dt, before, meta)
        if self.exists(tpath) and self.version(tpath) != ours:  # tombstones another writer recorded since
            kept = [b.filter(pc.invert(b.column(DELETED))).select(key_schema.names).cast(key_schema)
                    for b in data.buckets(narrow)]
            upserted = pa.concat_tables(kept) if kept else key_schema.empty_table()
            if upserted.num_rows:
                settle(self, path, tpath, upserted, keys, key_schema, app_id, batch)
        return True

    def _pristine(self, path: str) -> bool:
        """Whether a current table has no rows and no tombstones (none yet, or empty and never told of a delete):
        then the merge rule keeps exactly the input's upserts, and deletes only become tombstones."""
        return all(not self.exists(p) or not self._dt(p).file_uris() for p in (path, tombstone_path(path)))

    def _merge_into_empty(self, path: str, data: pa.Table, keys: list[str], app_id: str, batch: int) -> bool:
        """The merge into a pristine table (`_pristine`): its deletes written as the tombstones and its upserts as
        the rows, each by an overwrite of the empty table (the delta-rs writer, no join, no parts) conditioned on
        the whole table (`predicate`), so a concurrent commit that added rows or tombstones meanwhile fails it (the
        retry then takes the general merge); the repair step as in merge_with_tombstones. Same commits, app
        transactions and result as the general merge."""
        # Checked in parts of the general merge's size (its parts are each checked alone): bounded working memory.
        rows = max(1, data.num_rows * MERGE_CHUNK_BYTES // max(1, data.nbytes))
        data = pa.concat_tables([validate_merge_input(data.slice(at, rows), keys)
                                 for at in range(0, max(1, data.num_rows), rows)])
        columns = current_columns(data)
        dt = None
        if self.exists(path):
            check_merge_columns(self, path, columns)
        else:
            dt = self._create(path, data.select(columns).schema)
        dt = dt or self._dt(path)
        if is_committed(dt.transaction_version(app_id), batch):
            return False
        target = self._arrow_schema(dt)
        tpath = tombstone_path(path)
        # Pristine (as `_pristine`), judged on the snapshot the overwrite below commits from.
        if dt.file_uris() or (self.exists(tpath) and self._dt(tpath).file_uris()) or \
                set(data.select(columns).schema) != set(target):  # filled meanwhile, or other types:
            return merge_with_tombstones(self, path, data, keys, app_id, batch)  # the general way
        key_schema = pa.schema([pa.field(k, data.schema.field(k).type) for k in keys] + [pa.field(SEQ, pa.int64())])
        deleted = data.column(DELETED)
        deletes = data.select(key_schema.names).filter(deleted)
        if deletes.num_rows:
            tdt = self._create(tpath, key_schema) or self._dt(tpath)
            write_deltalake(tdt, deletes, mode="overwrite", predicate="true",
                            commit_properties=self._props(commit_meta("tombstones", [(app_id, batch)])),
                            writer_properties=WriterProperties(dictionary_page_size_limit=DICTIONARY_PAGE_BYTES))
            ours = tdt.version()  # the handle is at the commit it just made
        else:
            ours = self.version(tpath)
        meta = commit_meta("merge", [(app_id, batch)], tombstonesVersion=ours)
        before = dt.version()
        # The upserts streamed batch by batch (no copy of the whole input held beside it).
        upserts = pa.RecordBatchReader.from_batches(target, (
            b.filter(pc.invert(b.column(DELETED))).select(target.names) if deletes.num_rows else b.select(target.names)
            for b in data.to_batches(max_chunksize=1 << 16)))
        write_deltalake(dt, upserts, mode="overwrite", predicate="true", commit_properties=self._props(meta),
                        writer_properties=WriterProperties(max_row_group_size=ROW_GROUP_ROWS,
                                                           dictionary_page_size_limit=DICTIONARY_PAGE_BYTES))
        self._ensure_commit(dt, before, meta)
        # The repair step reads tombstones another writer recorded since: none when the tombstone table is still at
        # the version this merge left it in (its own deletes, keys other than the upserts').
        if deletes.num_rows < data.num_rows and self.exists(tpath) and self.version(tpath) != ours:
            settle(self, path, tpath, data.select(key_schema.names).filter(pc.invert(deleted)), keys, key_schema,
                   app_id, batch)
        return True

    def reset(self, path: str, schema: pa.Schema, app_id: str, batch: int) -> None:
        write_deltalake(self._dt(path), schema.empty_table(), mode="overwrite", schema_mode="overwrite",
                        commit_properties=self._props(commit_meta("reset", [(app_id, batch)])))

    def truncate(self, path: str, app_id: str, batch: int) -> bool:
        """Remove every row (schema, tombstones and txn versions stay) in one commit carrying (app_id, batch)."""
        check_batch(app_id, batch)
        meta = commit_meta("truncate", [(app_id, batch)])

        return self._commit_once(path, app_id, batch, meta, lambda dt: write_deltalake(
            dt, self._arrow_schema(dt).empty_table(), mode="overwrite",
            partition_by=dt.metadata().partition_columns or None, commit_properties=self._props(meta)))

    def copy_table(self, src: str, version: int, dst: str, app_id: str, batch: int) -> bool:
        return copy_with_tombstones(self, src, version, dst, app_id, batch)

    def _overwrite_from(self, src: str | None, version: int | None, dst: str, app_id: str, batch: int,
                        meta: dict[str, Any], like: str | None = None, like_version: int | None = None) -> bool:
        """Overwrite `dst` with `src` at `version` (None: with no rows, dst's columns typed as `like`'s at
        `like_version`); see tombstones.CopyBackend."""
        source = self._dt(src, version) if src is not None else None
        if source is not None:
            schema = self._arrow_schema(source)
        elif like is not None:
            schema = _retyped(self.table_schema(dst), self._arrow_schema(self._dt(like, like_version)))
        else:
            schema = self.table_schema(dst)

        def write(dt) -> None:
            if source is None:
                data = pa.RecordBatchReader.from_batches(schema, iter(()))
            else:
                scan = pa.RecordBatchReader.from_stream(source.scan())
                data = pa.RecordBatchReader.from_batches(schema, (b.cast(schema) for b in scan))
            write_deltalake(dt, data, mode="overwrite", schema_mode="overwrite", commit_properties=self._props(meta))

        return self._commit_once(dst, app_id, batch, meta, write, create=(schema, None))

    def properties(self, path: str) -> dict[str, str]:
        """The table's properties (Delta metadata configuration)."""
        return dict(self._dt(path).metadata().configuration)

    def set_properties(self, path: str, props: dict[str, str]) -> bool:
        """Set table properties (binlake's own `binlake.*` keys included) in a metadata-only commit, unless they
        already hold these values. Returns whether it committed."""
        dt = self._dt(path)
        have = dt.metadata().configuration
        if all(have.get(k) == v for k, v in props.items()):
            return False
        dt.alter.set_table_properties(dict(props), raise_if_not_exists=False, commit_properties=CommitProperties(
            custom_metadata={META_KEY: commit_meta("properties", [], keys=sorted(props))}))
        return True

    def replace_schema(self, path: str, changes: Sequence[ColumnChange], app_id: str, batch: int) -> bool:
        return replace_schema_with_tombstones(self, path, changes, app_id, batch)

    def _rewrite(self, path: str, changes: list[ColumnChange], app_id: str, batch: int) -> bool:
        """Overwrite the table with itself, changed, in one commit; streams batch by batch."""
        dt = self._dt(path)
        if is_committed(dt.transaction_version(app_id), batch):
            return False
        old = self._arrow_schema(dt)
        new = plan(old, changes)
        scan = pa.RecordBatchReader.from_stream(dt.scan())

        failed: list[EngineError] = []

        def batches() -> Iterator[pa.RecordBatch]:
            for b in scan:
                try:
                    yield apply_changes(b.cast(old), changes)
                except EngineError as exc:  # delta-rs would wrap it in a DeltaError; re-raised as is below
                    failed.append(exc)
                    raise

        meta = commit_meta("replace_schema", [(app_id, batch)],
                           changes=[f"{c.kind} {c.column}" + (f" -> {c.new_name}" if c.new_name else "")
                                    for c in changes])
        partitions = renamed(dt.metadata().partition_columns, changes)
        try:
            write_deltalake(dt, pa.RecordBatchReader.from_batches(new, batches()), mode="overwrite",
                            schema_mode="overwrite", partition_by=partitions or None,
                            commit_properties=self._props(meta))
        except Exception:
            if failed:
                raise failed[0] from None
            raise
        return True

    def restore(self, path: str, version: int) -> None:
        history = self._history_meta(path)
        self._restore_one(path, version)
        tpath = tombstone_path(path)
        if self.exists(tpath):
            current = self._dt(tpath).version()
            self._restore_one(tpath, min(tombstone_version_at(history, version), current))

    def _restore_one(self, path: str, version: int) -> None:
        """Restore `path` to `version` and put every txn version changed since back to its value then
        (-1 = none), so a rolled-back batch runs again when retried."""
        dt = self._dt(path)
        current = dt.version()
        if not 0 <= version <= current:
            raise EngineError(f"restore {path}: version {version} is not in 0..{current}")
        if version == current:
            return
        apps = sorted(app_ids_after(self.history(path), version))
        then = self._dt(path, version)
        txns = [(a, v if (v := then.transaction_version(a)) is not None else -1) for a in apps]
        meta = commit_meta("restore", txns, restoredTo=version)
        dt.restore(version, commit_properties=self._props(meta))
        self._ensure_commit(dt, current, meta)


def _parts(reader: pa.RecordBatchReader, limit: int) -> Iterator[pa.Table]:
    """A reader's rows as tables of about `limit` bytes each."""
    held, size = [], 0
    for b in reader:
        held.append(b)
        size += b.nbytes
        if size >= limit:
            yield pa.Table.from_batches(held, reader.schema)
            held, size = [], 0
    if held:
        yield pa.Table.from_batches(held, reader.schema)


def _retyped(schema: pa.Schema, like: pa.Schema) -> pa.Schema:
    """`schema` with the types `like` gives its columns of the same name (tombstone keys after a copy)."""
    return pa.schema([like.field(f.name) if f.name in like.names else f for f in schema])
