"""The `_seq`-ordered merge with tombstones, written once over a small backend interface both engines implement.

Why tombstones: a current table that physically deletes rows forgets the delete's `_seq`; an older upsert of the
same key arriving later (an out-of-order backfill) would then find no row and re-insert it. Each current table
therefore keeps a tombstone table - key columns plus the `_seq` of the newest delete - as a nested Delta table in
`<table>/_binlake_tombstones`. Delta readers only follow `_delta_log`, and VACUUM (Spark and delta-rs) skips
directories starting with "_", so the nested table is invisible to consumers and moves with the table.

One merge (see `merge_with_tombstones`):
 1. drop input rows older than the key's tombstone (`_seq` < tombstone `_seq`; equal is the same change replayed);
 2. commit the input's deletes to the tombstone table (keeps the newest `_seq` per key) - before step 3, so a
    crash in between leaves the delete remembered and the rerun still applies it;
 3. MERGE into the current table (only strictly newer `_seq` applies), carrying (app_id, batch);
 4. re-read tombstones for the upserted keys: delete rows a concurrent writer's newer tombstone has overtaken
    (repair), and prune tombstones now older than the row (keeps the table to currently-deleted keys).
Steps 2 and 4 are idempotent by content (step 2 carries (app_id, batch), step 4 the batch under its own app ids,
`role_app_id`); step 3 is idempotent by content and skipped outright by the txn check. See docs/engines.md.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Any, Protocol, TypeVar

import pyarrow as pa
import pyarrow.compute as pc

from ..crashpoints import crash_point
from .base import DELETED, SEQ, ColumnChange, EngineError, MergeInputError, check_batch, is_committed
from .commitmeta import commit_meta, meta_at
from .mergeplan import (
    MergeSpec,
    current_columns,
    current_spec,
    delete_older_spec,
    tombstone_spec,
    validate_merge_input,
)
from .schema_change import relevant

log = logging.getLogger(__name__)
T = TypeVar("T")

TOMBSTONE_DIR = "_binlake_tombstones"
_TSEQ = "__binlake_tombstone_seq"
_ROW = "__binlake_row"


def role_app_id(app_id: str, role: str) -> str:
    """The app id of a follow-up commit (repair, prune, reset) of batch (app_id, batch). Its own id, because
    delta-spark silently skips any write whose (app id, version) the table already recorded - and the batch's
    main commit has recorded (app_id, batch) by then."""
    return f"{app_id}:{role}"


def tombstone_path(path: str) -> str:
    return str(path).rstrip("/") + "/" + TOMBSTONE_DIR


class MergeBackend(Protocol):
    """The primitives an engine supplies to the shared merge algorithm."""

    def exists(self, path: str) -> bool: ...

    def version(self, path: str) -> int | None: ...

    def txn_version(self, path: str, app_id: str) -> int | None: ...

    def table_schema(self, path: str) -> pa.Schema: ...

    def create_empty(self, path: str, schema: pa.Schema) -> None:
        """Create an empty table (version 0) unless one exists; tolerate a concurrent creator."""
        ...

    def read(self, path: str, columns: list[str] | None = None) -> pa.Table: ...

    def run_merge(self, path: str, source: pa.Table, spec: MergeSpec, app_id: str, batch: int,
                  meta: dict[str, Any], check_txn: bool) -> bool:
        """One MERGE commit carrying txn (app_id, batch) and `meta`, made even when no row changes (so the txn
        is recorded). With check_txn, returns False without writing when the snapshot it merges into already
        has the txn."""
        ...

    def reset(self, path: str, schema: pa.Schema, app_id: str, batch: int) -> None:
        """Overwrite the table with an empty one of `schema`."""
        ...


def _key_schema(data: pa.Table, keys: list[str]) -> pa.Schema:
    return pa.schema([pa.field(k, data.schema.field(k).type) for k in keys] + [pa.field(SEQ, pa.int64())])


def _read_tombstones(b: MergeBackend, tpath: str, key_schema: pa.Schema) -> pa.Table | None:
    if not b.exists(tpath):
        return None
    tombs = b.read(tpath, key_schema.names)
    try:
        return tombs.cast(key_schema)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
        raise EngineError(f"tombstones at {tpath} do not fit the merge keys {key_schema}: {exc}") from exc


def _with_tombstone_seq(rows: pa.Table, tombs: pa.Table, keys: list[str]) -> pa.Table:
    """keys + `_seq` + row index of `rows`, with the key's tombstone `_seq` (null when none) - payload-free join."""
    left = rows.select([*keys, SEQ]).append_column(_ROW, pa.array(range(rows.num_rows), pa.int64()))
    right = tombs.rename_columns([*keys, _TSEQ])
    return left.join(right, keys, join_type="left outer")


def drop_superseded(data: pa.Table, tombs: pa.Table | None, keys: list[str]) -> pa.Table:
    """`data` without the rows older than their key's tombstone."""
    if tombs is None or not tombs.num_rows or not data.num_rows:
        return data
    j = _with_tombstone_seq(data, tombs, keys)
    stale = j.filter(pc.less(j.column(SEQ), j.column(_TSEQ)))
    if not stale.num_rows:
        return data
    keep = pc.invert(pc.is_in(pa.array(range(data.num_rows), pa.int64()), value_set=stale.column(_ROW)))
    return data.filter(keep)


def check_merge_columns(b: MergeBackend, path: str, columns: list[str]) -> None:
    table_cols = b.table_schema(path).names
    if set(table_cols) != set(columns):
        extra = sorted(set(columns) - set(table_cols))
        missing = sorted(set(table_cols) - set(columns))
        raise MergeInputError(
            f"merge input columns differ from table {path}: not in table {extra}, missing from input {missing}; "
            "change the table schema with replace_schema first")


def _load_tombstones(b: MergeBackend, tpath: str, key_schema: pa.Schema, app_id: str, batch: int) -> pa.Table | None:
    if b.exists(tpath) and set(b.table_schema(tpath).names) != set(key_schema.names):
        # The primary key changed: old tombstones describe other keys, so they cannot order the new ones.
        log.warning("tombstones at %s are keyed by %s, merge keys are %s: starting them afresh",
                    tpath, b.table_schema(tpath).names[:-1], key_schema.names[:-1])
        b.reset(tpath, key_schema, role_app_id(app_id, "reset"), batch)
    return _read_tombstones(b, tpath, key_schema)


def merge_with_tombstones(b: MergeBackend, path: str, data: pa.Table, keys: list[str], app_id: str,
                          batch: int) -> bool:
    data = validate_merge_input(data, keys)
    columns = current_columns(data)
    if b.exists(path):
        check_merge_columns(b, path, columns)
    else:
        b.create_empty(path, data.select(columns).schema)
    if is_committed(b.txn_version(path, app_id), batch):
        return False

    tpath = tombstone_path(path)
    key_schema = _key_schema(data, keys)
    source = drop_superseded(data, _load_tombstones(b, tpath, key_schema, app_id, batch), keys)

    is_delete = source.column(DELETED)
    deletes = source.filter(is_delete).select(key_schema.names)
    if deletes.num_rows:
        b.create_empty(tpath, key_schema)
        b.run_merge(tpath, deletes, tombstone_spec(keys), app_id, batch,
                    commit_meta("tombstones", [(app_id, batch)]), check_txn=False)
        crash_point("tombstones-committed")

    meta = commit_meta("merge", [(app_id, batch)], tombstonesVersion=b.version(tpath))
    if not b.run_merge(path, source, current_spec(columns, keys), app_id, batch, meta, check_txn=True):
        return False

    upserts = source.filter(pc.invert(is_delete)).select(key_schema.names)
    if upserts.num_rows and b.exists(tpath):
        settle(b, path, tpath, upserts, keys, key_schema, app_id, batch)
    return True


def settle(b: MergeBackend, path: str, tpath: str, upserts: pa.Table, keys: list[str], key_schema: pa.Schema,
            app_id: str, batch: int) -> None:
    """Step 4: repair rows a newer (concurrently written) tombstone overtook; prune tombstones rows overtook."""
    tombs = _read_tombstones(b, tpath, key_schema)
    if tombs is None or not tombs.num_rows:
        return
    j = _with_tombstone_seq(upserts, tombs, keys).filter(pc.is_valid(pc.field(_TSEQ)))
    overtaken = j.filter(pc.greater(j.column(_TSEQ), j.column(SEQ)))
    if overtaken.num_rows:
        log.warning("%d row(s) of %s were overtaken by a concurrent delete; removing them", overtaken.num_rows, path)
        repair = overtaken.select(keys).append_column(SEQ, overtaken.column(_TSEQ))
        repair_id = role_app_id(app_id, "repair")
        b.run_merge(path, repair, delete_older_spec(keys), repair_id, batch,
                    commit_meta("repair", [(repair_id, batch)]), check_txn=False)
    redundant = j.filter(pc.less(j.column(_TSEQ), j.column(SEQ))).select(key_schema.names)
    if redundant.num_rows:
        prune_id = role_app_id(app_id, "prune")
        b.run_merge(tpath, redundant, delete_older_spec(keys), prune_id, batch,
                    commit_meta("prune", [(prune_id, batch)]), check_txn=False)


def tombstone_version_at(history_meta: list[tuple[int, dict[str, Any] | None]], version: int) -> int:
    """The tombstone-table version that belonged to current-table `version` (0 = the empty creation)."""
    recorded = meta_at(history_meta, version, "tombstonesVersion")
    return 0 if recorded is None else int(recorded)


class CopyBackend(Protocol):
    """The primitives an engine supplies to `copy_with_tombstones`."""

    def exists(self, path: str) -> bool: ...

    def version(self, path: str) -> int | None: ...

    def txn_version(self, path: str, app_id: str) -> int | None: ...

    def _history_meta(self, path: str) -> list[tuple[int, dict[str, Any] | None]]: ...

    def _overwrite_from(self, src: str | None, version: int | None, dst: str, app_id: str, batch: int,
                        meta: dict[str, Any], like: str | None = None, like_version: int | None = None) -> bool:
        """Overwrite `dst` (created when missing) with `src` at `version` in one commit carrying (app_id, batch)
        and `meta`; src None: with no rows, dst's columns typed as `like`'s of the same name at `like_version`."""
        ...


def copy_with_tombstones(b: CopyBackend, src: str, version: int, dst: str, app_id: str, batch: int) -> bool:
    """The engines' `copy_table`: make `dst` hold exactly `src` at `version` (rows, schema and tombstones), in one
    commit of `dst` carrying (app_id, batch), its tombstone table first."""
    check_batch(app_id, batch)
    if is_committed(b.txn_version(dst, app_id), batch):
        return False
    tsrc, tdst = tombstone_path(src), tombstone_path(dst)
    tversion = tombstone_version_at(b._history_meta(src), version) if b.exists(tsrc) else None
    copy = commit_meta("copy", [(app_id, batch)])
    if tversion is not None:
        b._overwrite_from(tsrc, tversion, tdst, app_id, batch, copy)
    elif b.exists(tdst):  # no deletes to remember: empty, with the keys typed as the source's
        b._overwrite_from(None, None, tdst, app_id, batch, copy, like=src, like_version=version)
    meta = commit_meta("copy", [(app_id, batch)], copiedFrom=str(src), copiedVersion=version,
                       tombstonesVersion=b.version(tdst))
    return b._overwrite_from(src, version, dst, app_id, batch, meta)


class RewriteBackend(Protocol):
    """The primitives an engine supplies to `replace_schema_with_tombstones`."""

    def exists(self, path: str) -> bool: ...

    def table_schema(self, path: str) -> pa.Schema: ...

    def _retry(self, attempt: Callable[[], T]) -> T: ...

    def _rewrite(self, path: str, changes: list[ColumnChange], app_id: str, batch: int) -> bool:
        """Overwrite the table with itself, changed, in one commit carrying (app_id, batch)."""
        ...


def replace_schema_with_tombstones(b: RewriteBackend, path: str, changes: Sequence[ColumnChange], app_id: str,
                                   batch: int) -> bool:
    """The engines' `replace_schema`: the table rewritten, then its tombstone table for the changes to its key
    columns."""
    check_batch(app_id, batch)
    changes = list(changes)
    done = b._retry(lambda: b._rewrite(path, changes, app_id, batch))
    tpath = tombstone_path(path)
    if b.exists(tpath):
        tchanges = relevant(changes, b.table_schema(tpath).names)
        if tchanges:
            b._retry(lambda: b._rewrite(tpath, tchanges, app_id, batch))
    return done
