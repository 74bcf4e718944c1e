"""Current-state tables: net changes per key, merged in binlog order; schema changes where the source had them.

A batch's history rows of one table are cut into segments of one schema version each. Segment by segment, the
current table is first brought to the segment's layout (the ALTER the server ran: added columns take the DDL
default, dropped ones go, renames keep values, type changes convert) and then the segment's net changes are
merged. So the table ends mirroring the source schema at the batch end, as the server's table did.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..binlog.tablemap import TableMap
from ..schema.binlog_types import table_map_for
from ..schema.evolve import column_mapping, default_value
from ..schema.model import TableDef, expression_key
from .convert import arrow_type, np_array
from .crashpoints import crash_point
from .engines import DELETED, SEQ, ColumnChange, tombstone_path
from .engines.mergeplan import NewestPerKey, int_key, last_of_each
from .engines.schema_change import apply_changes
from .engines.schema_change import plan as plan_schema
from .generated import Untranslatable, compile_expression
from .history import META_NAMES
from .netbuckets import BucketedNet, BucketWriter, bucket_count, bucketer, range_bounds, sample_of, single_int_key
from .staging import (
    StagedSegment,
    in_bounds_all,
    merge_inputs_kept,
    net_bucket_folder,
    read_net,
    read_piece,
    read_piece_keys,
    staged_segments,
    take_merge_input,
)

ORDER = ["_file_seq", "_pos", "_sub", "_row"]
SEQ_FILE_SHIFT = 40


def event_seq(file_seq: int, pos: int) -> int:
    """Current tables' `_seq`: (file sequence, event position) as a long. Changes of one key in different
    batches always come from different events, so this orders them; inside a batch the full order is used."""
    return file_seq << SEQ_FILE_SHIFT | pos


@dataclass
class Segment:
    """Consecutive history rows of one table sharing one schema version."""

    version: str | None
    rows: pa.Table


def segments(history: pa.Table) -> Iterator[Segment]:
    """The history rows in binlog order, cut where the schema version changes."""
    ordered = history if in_order(history) else history.sort_by([(c, "ascending") for c in ORDER])
    if ordered.num_rows == 0:
        return
    versions = ordered.column("_schema_version")
    first = versions[0]
    if first.is_valid and versions.null_count == 0 and pc.all(pc.equal(versions, first)).as_py():
        yield Segment(first.as_py(), ordered)  # one schema version (the usual batch): no codes needed
        return
    versions = versions.combine_chunks()
    codes = versions.dictionary_encode().indices.fill_null(-1).to_numpy(zero_copy_only=False)
    cuts = [0, *(np.flatnonzero(codes[1:] != codes[:-1]) + 1).tolist(), len(codes)]
    for a, b in itertools.pairwise(cuts):
        yield Segment(versions[a].as_py(), ordered.slice(a, b - a))


def in_order(history: pa.Table) -> bool:
    """Whether the rows are already sorted by (file sequence, position, sub-position, row): decode ranges come
    in order, so the usual batch needs no sort."""
    if history.num_rows < 2:
        return True
    cols = [history.column(c).to_numpy() for c in ORDER]
    earlier = np.zeros(history.num_rows - 1, dtype=bool)  # row i+1 sorts after row i on a previous column
    for col in cols:
        a, b = col[:-1], col[1:]
        if np.any(~earlier & (b < a)):
            return False
        earlier |= b > a
    return True


def current_schema(tm: TableMap) -> pa.Schema:
    fields = [pa.field(c.key, arrow_type(c)) for c in tm.columns]
    return pa.schema([*fields, pa.field("_commit_ts", pa.timestamp("us", tz="UTC"))])


def merge_schema(tm: TableMap) -> pa.Schema:
    """The schema of merge_input's result for a version: the current table's columns, `_seq`, `_deleted`."""
    return pa.schema([*current_schema(tm), pa.field(SEQ, pa.int64()), pa.field(DELETED, pa.bool_())])


def table_schema(engine, path: str) -> pa.Schema:
    """A Delta table's schema, without reading its rows where the engine can tell it alone."""
    getter = getattr(engine, "table_schema", None)
    return getter(path) if getter is not None else engine.read(path).schema


def key_names(tm: TableMap) -> list[str]:
    return [tm.columns[i].key for i in (tm.primary_key or [])]


def merge_input(seg: pa.Table, tm: TableMap) -> pa.Table:
    """One row per key: the last change of each key in the segment (rows in binlog order), with `_seq` and
    `_deleted`. An update that changes the key also deletes the old key. Vectorized with Arrow."""
    keys = key_names(tm)
    schema = current_schema(tm)
    values = [f.name for f in schema]
    n = seg.num_rows
    seq = pc.add(pc.shift_left(seg.column("_file_seq").cast(pa.int64()), SEQ_FILE_SHIFT),
                 seg.column("_pos").cast(pa.int64()))
    op = seg.column("_op")
    order = np_array(np.arange(n, dtype=np.int64))
    main = pa.table({**{c: seg.column(c) for c in values}, SEQ: seq,
                     DELETED: pc.equal(op, "delete"), "_order": pc.add(pc.multiply(order, 2), 1)})
    parts = [main]
    tomb_orders = np.empty(0, dtype=np.int64)
    before = seg.column("_before")
    if before.null_count < n:
        # Key-changing updates: a delete of the old key, ordered just before the upsert of the new one.
        # Any key column differing moves the row (a composite key changed in one column moves it too).
        moved = np_array(np.zeros(n, dtype=bool))
        for k in keys:
            moved = pc.or_(moved, pc.fill_null(pc.not_equal(pc.struct_field(before, k), seg.column(k)), False))
        changed = pc.and_(pc.equal(op, "update"), moved)
        if pc.any(changed).as_py():
            old = seg.filter(changed)
            tomb = {c: (pc.struct_field(old.column("_before"), c) if c in keys else pa.nulls(old.num_rows,
                    schema.field(c).type)) for c in values}
            tomb[SEQ] = seq.filter(changed)
            tomb[DELETED] = np_array(np.ones(old.num_rows, dtype=bool))
            tomb["_order"] = pc.multiply(order.filter(changed), 2)
            tomb_orders = tomb["_order"].to_numpy()
            parts.append(pa.table(tomb).cast(main.schema))
    out_schema = pa.schema([*[schema.field(c) for c in values], pa.field(SEQ, pa.int64()),
                            pa.field(DELETED, pa.bool_())])
    k = int_key(pa.concat_tables(parts) if len(parts) > 1 else main, keys)
    if k is not None:
        # A single integer key: sorted rather than hashed. Rows of keys that strictly ascend are their keys'
        # last changes as they are (statements over key ranges log their rows that way); otherwise the changes
        # are put in order (the tombstones between the upserts) and each key's last one found by a stable sort
        # of the key (near linear on the few ascending runs binlogs mostly hold), and kept in binlog order.
        if len(parts) == 1 and bool(np.all(k[1:] > k[:-1])):
            return main.select([*values, SEQ, DELETED]).cast(out_schema)
        if len(parts) > 1:
            in_order = np.argsort(np.concatenate([np.arange(n, dtype=np.int64) * 2 + 1, tomb_orders]), kind="stable")
            last = np.zeros(len(k), dtype=bool)
            last[in_order[last_of_each(k[in_order])]] = True
        else:
            last = last_of_each(k)
        events = pa.concat_tables(parts) if len(parts) > 1 else main
        if not last.all():
            events = events.filter(np_array(last))
        return events.select([*values, SEQ, DELETED]).cast(out_schema)
    events = pa.concat_tables(parts).combine_chunks() if len(parts) > 1 else main.combine_chunks()
    last = events.group_by(keys, use_threads=False).aggregate([("_order", "max")])
    # Row positions from the order numbers: upsert i (order 2i+1) is row i, the tombstones (even orders, in
    # ascending order) follow the n upserts.
    orders = last.column("_order_max").to_numpy()
    positions = np.where(orders % 2 == 1, orders // 2, n + np.searchsorted(tomb_orders, orders))
    result = events.take(positions).drop_columns(["_order"])
    return result.select([*values, SEQ, DELETED]).cast(out_schema)


def staged_merge_input(stage: str, info: dict, versions: dict, entry: str | None = None
                       ) -> list[tuple[str | None, TableMap, pa.Table | BucketedNet]]:
    """A staged batch entry's merge segments (version, TableMap, merge input), its rows read one piece at a time:
    each piece is reduced to one row per key (merge_input), then the pieces' rows to the newest per key (a key's
    changes in different pieces come from different events, so their `_seq` differ). Memory holds one piece and
    the net changes, never the whole history. Of `_before` only the key columns are read (merge_input looks at
    nothing else of it). A segment of more than netbuckets.NET_BUCKET_ROWS rows is not reduced whole: its
    pieces' merge inputs are split into key buckets in the staging folder (a BucketedNet, named by `entry`, the
    batch's table entry), reduced and merged a bucket at a time, so memory does not grow with its keys either."""
    out = []
    for index, (version, tm, seg) in enumerate(staged_segments(stage, info, versions, merge_schema)):
        keys = key_names(tm)
        columns = [*(f.name for f in current_schema(tm)), "_file_seq", "_pos", "_op"]  # what merge_input reads
        pieces = sorted(seg.pieces, key=lambda p: (p["min_seq"], p["path"]))
        count = bucket_count(seg.num_rows)
        if count > 1 and all(in_bounds_all(p, seg.lo, seg.hi) for p in pieces) and \
                merge_inputs_kept(stage, pieces, keys):
            count = 1  # their net changes are in memory already (within MERGE_INPUT_BYTES): reduced here, no buckets
        if count > 1:  # many changes: reduced and merged a bucket of keys at a time (binlake.lake.netbuckets)
            bounds = None
            if single_int_key(seg.schema, keys):
                bounds = range_bounds([sample_of(read_piece(stage, p, columns=keys).column(keys[0]).to_numpy(),
                                                 seg.num_rows) for p in pieces], count)
            fs, folder = net_bucket_folder(stage, entry or tm.qualified_name, index)
            newest = BucketWriter(fs, folder, count, bucketer(keys, count, bounds), seg.schema)
        else:
            newest = NewestPerKey(keys)
        for piece in pieces:
            whole = in_bounds_all(piece, seg.lo, seg.hi)
            kept = take_merge_input(stage, piece, keys) if whole else None
            if kept is None and whole and piece.get("net"):  # written beside the piece by a task away from here
                kept = read_net(stage, piece)
            if kept is not None and kept.schema == seg.schema:  # computed when the piece was written: not read
                newest.add(kept)
                continue
            rows = read_piece_keys(stage, piece, seg.lo, seg.hi, columns, keys)
            if rows.num_rows:
                newest.add(merge_input(rows, tm))
            del rows
            pa.default_memory_pool().release_unused()  # each piece's intermediates back to the system
        if isinstance(newest, BucketWriter):
            out.append((version, tm, newest.close(keys)))
        else:
            out.append((version, tm, newest.result() if newest.parts else merge_schema(tm).empty_table()))
        pa.default_memory_pool().release_unused()
    return out


def schema_changes(old_cols: list[str], old_def: TableDef | None, new_tm: TableMap, table_schema: pa.Schema,
                   ddl_time: str | None, warnings: list[str] | None = None) -> list[ColumnChange]:
    """The column changes that turn the current table (columns `old_cols`, layout `old_def` when known) into
    `new_tm`'s layout, as the server's ALTER did. A generated column the ALTER adds, or whose expression it
    changes, is computed for the existing rows (binlake.lake.generated); where that cannot be done they get null
    and a line goes to `warnings`."""
    new_def: TableDef | None = new_tm.schema
    new_schema = current_schema(new_tm)
    if old_def is not None and new_def is not None:
        mapping = column_mapping(old_def, new_def)
    else:  # no schema versions (FULL metadata without a timeline): names are all there is
        lower = {c.lower(): c for c in old_cols}
        mapping = {c.key: lower.get(c.key.lower()) for c in new_tm.columns}
    changes: list[ColumnChange] = []
    kept = {src for src in mapping.values() if src is not None}
    for name in old_cols:
        if name not in kept and name not in META_NAMES and name != "_commit_ts":
            changes.append(ColumnChange.drop(name))
    for new_name, src in mapping.items():
        if src is not None and src != new_name:
            changes.append(ColumnChange.rename(src, new_name))
    recomputed = set()
    if old_def is not None and new_def is not None:
        for i, col in enumerate(new_tm.columns):
            src, new_col = mapping[col.key], new_def.columns[i]
            old_col = old_def.column(src) if src is not None else None
            if new_col.generated is not None and old_col is not None and (
                    old_col.generated is None or expression_key(old_col.generated) != expression_key(new_col.generated)):
                recomputed.add(col.key)  # a new expression: the server computed every row again
                changes.append(ColumnChange.drop(col.key))
    existing = {f.name: f.type for f in table_schema}
    for i, col in enumerate(new_tm.columns):
        target = new_schema.field(col.key).type
        src = mapping[col.key]
        if new_def is not None and new_def.columns[i].generated is not None and (src is None or col.key in recomputed):
            changes.append(ColumnChange.add(col.key, target, position=i,
                                            compute=_generated(new_tm.qualified_name, new_def.columns[i], target,
                                                               warnings)))
        elif src is None:
            default = None
            if new_def is not None:
                value = default_value(new_def.columns[i], ddl_time)
                default = _default_scalar(value, target) if value is not None else None
            changes.append(ColumnChange.add(col.key, target, default=default, position=i))
        elif existing.get(src) is not None and existing[src] != target:
            changes.append(ColumnChange.convert(col.key, target, converter=_converter(target)))
    return changes


def _generated(table: str, col, target: pa.DataType, warnings: list[str] | None):
    """The values of a generated column for rows no rows event carried (an ALTER added it or changed its
    expression): the expression evaluated, or nulls and a warning when it cannot be."""
    kind = "STORED" if col.stored else "VIRTUAL"

    def warn(reason: str) -> None:
        line = (f"{table}.{col.name}: {kind} generated column ({col.generated}) not evaluated for the rows before "
                f"the ALTER, they hold null: {reason}")
        if warnings is not None and line not in warnings:
            warnings.append(line)

    try:
        fn = compile_expression(col.generated, target)
    except Untranslatable as exc:
        fn, reason = None, str(exc)

    def compute(batch: pa.RecordBatch) -> pa.Array:
        if fn is not None:
            try:
                return fn(batch)
            except (Untranslatable, pa.ArrowException, ValueError, TypeError, OverflowError) as exc:
                warn(f"evaluation failed: {exc}")
        else:
            warn(reason)
        return pa.nulls(batch.num_rows, target)

    return compute


def _default_scalar(value: object, target: pa.DataType) -> pa.Scalar:
    """A DDL default as a value of the column's Arrow type (temporal defaults come as text: '2020-02-29')."""
    if isinstance(value, str) and pa.types.is_temporal(target):
        return pa.array([value]).cast(target)[0]
    return pa.array([value], target)[0]


def _converter(target: pa.DataType):
    def convert(values: pa.Array) -> pa.Array:
        if pa.types.is_decimal(target) and pa.types.is_decimal(values.type) and target.scale < values.type.scale:
            # The server rounds half away from zero when a DECIMAL loses scale.
            values = pc.round(values, ndigits=target.scale, round_mode="half_towards_infinity")
        return values.cast(target, safe=True)

    return convert


class BackfillError(ValueError):
    """A segment of an older schema version that cannot be brought to the current table's layout."""


def newest_seq(engine, path: str) -> int | None:
    """The newest `_seq` a current table has applied (its rows' and its tombstones'); None for no table."""
    out = None
    largest = getattr(engine, "column_max", None)  # delta-spark: an aggregate on the executors
    for p in (path, tombstone_path(path)):
        if engine.exists(p):
            top = largest(p, SEQ) if largest is not None else pc.max(engine.read(p, columns=[SEQ]).column(SEQ)).as_py()
            if top is not None and (out is None or top > out):
                out = top
    return out


def backfill_input(data: pa.Table, tm: TableMap, table_def: TableDef | None, table_schema: pa.Schema,
                   newest: int | None, ddl_time: str | None = None,
                   warnings: list[str] | None = None, span=None) -> tuple[pa.Table, list[str]] | None:
    """A segment whose schema version is not the one the current table mirrors, seen from the table.

    Returns None when the segment is newer than every change the table holds: the source's schema moved on, and
    the caller alters the table (schema_changes) before merging, as before. When the whole segment is older (a
    backfill: files older than the table's schema version arriving late), returns the segment's merge input
    evolved forward to the table's layout, with the key names to merge on: the table is not altered back.
    Evolving forward does to these rows what the server's later ALTERs did to them: added columns take their
    DDL default, dropped ones go, renames keep values, retyped ones are converted (or the batch fails). The merge
    then keeps whichever change of each key is newer, so the table converges to the in-order result.

    `merge_segments` below is the call site.
    """
    if data.num_rows == 0 or newest is None:
        return None
    if isinstance(data, BucketedNet):  # a backfill of many changes (rare): evolved in memory
        data = data.whole()
    if isinstance(data, StagedSegment):  # rows still staged: the engine that will reduce them tells their span
        first, last = span(data)
    else:
        seqs = data.column(SEQ)
        first, last = pc.min(seqs).as_py(), pc.max(seqs).as_py()
    if first > newest:
        return None
    if last > newest:
        raise BackfillError(
            f"{tm.qualified_name}: rows of schema version {tm.schema_version} span the current table's newest "
            f"change (seq {newest}); a table cannot both keep its newer layout and take these rows in order. "
            "Re-ingest the files in binlog order for this table")
    if table_def is None:
        raise BackfillError(f"{tm.qualified_name}: a backfill of schema version {tm.schema_version} needs the "
                            "definition of the table's current version (ingest with --schemas or binlog DDL)")

    target = table_map_for(table_def, mariadb=True)  # Arrow types only; the flavour changes binlog codes
    target.schema_version = table_def.fingerprint()
    values = [c.key for c in tm.columns]
    changes = schema_changes(values, tm.schema, target, data.schema, ddl_time, warnings)
    if isinstance(data, StagedSegment):  # evolved where the engine reduces the rows (mapInArrow)
        evolved = plan_schema(data.schema, changes)
        missing = [f.name for f in table_schema if f.name not in evolved.names and f.name not in (SEQ, DELETED)]
        if missing:
            raise BackfillError(f"{tm.qualified_name}: evolved rows lack the table's columns {missing}")
        names = [f.name for f in table_schema if f.name in evolved.names]
        names += [c for c in (SEQ, DELETED) if c not in names]
        return data.evolved(changes, pa.schema([table_schema.field(c) if c in table_schema.names else
                                                evolved.field(c) for c in names])), key_names(target)
    try:
        rows = pa.Table.from_batches([apply_changes(b, changes) for b in data.to_batches()])
    except Exception as exc:  # EngineError from a conversion the ALTER could not have done
        raise BackfillError(f"{tm.qualified_name}: rows of schema version {tm.schema_version} cannot be evolved "
                            f"to the table's layout: {exc}") from exc
    wanted = [f.name for f in table_schema if f.name in rows.column_names]
    missing = [f.name for f in table_schema if f.name not in rows.column_names and f.name not in (SEQ, DELETED)]
    if missing:
        raise BackfillError(f"{tm.qualified_name}: evolved rows lack the table's columns {missing}")
    rows = rows.select([*wanted, *(c for c in (SEQ, DELETED) if c not in wanted)])
    rows = rows.cast(pa.schema([table_schema.field(c) if c in table_schema.names else rows.schema.field(c)
                                for c in rows.column_names]))
    return rows, key_names(target)


def merge_segments(engine, layout, registry, name: str, plan: list[tuple[str | None, TableMap, pa.Table]],
                   batch: int, first_step: int = 0, warnings: list[str] | None = None) -> int:
    """Merge a table's net changes segment by segment (schema version, its TableMap, merge input).

    A segment of the version the table mirrors is merged as is. One of another version is either newer than
    everything the table holds (the source's schema moved on: the table is altered as the server did, then the
    segment merged, and the registry records the new version) or older (a backfill: its rows are evolved forward
    to the table's layout and merged; the table and the registry keep the newer version). `registry` is the
    `_binlake/tables` registry (get(name) -> (version, TableDef); set(name, version, TableDef)). Returns the
    number of merges. Every commit's app-transaction version is batch * 1000 + step, steps in plan order from
    `first_step` (a table renamed or truncated in the batch merges in several calls)."""
    step = first_step
    merges = 0
    for version, tm, data in plan:
        path = layout.current_path(tm.database, tm.table)
        app = layout.app_id("current", tm.database, tm.table)
        recorded, table_def = registry.get(name)
        rows, keys, evolved = data, key_names(tm), False
        if engine.exists(path) and recorded is not None and recorded != version:
            current = table_schema(engine, path)
            # A table already in this segment's layout was altered by an earlier attempt of this batch (the
            # registry advances only at the batch end): the alter path then replays as a no-op.
            fresh = not _has_layout(current, tm)
            backfill = (backfill_input(data, tm, table_def, current, newest_seq(engine, path), None, warnings,
                                       getattr(engine, "staged_span", None)) if fresh else None)
            if backfill is not None:
                (rows, keys), evolved = backfill, True
            else:
                alter_to(engine, path, current, table_def, tm, app, batch * 1000 + step, warnings)
                step += 1
        if engine.merge(path, rows, keys, app, batch * 1000 + step):
            crash_point("merge")  # counted per merge this process commits (a re-run skips the committed ones)
        step += 1
        merges += 1
        if not evolved:
            registry.set(name, version, tm.schema)
    return merges


def alter_to(engine, path: str, current: pa.Schema, table_def: TableDef | None, tm: TableMap, app: str,
             version: int, warnings: list[str] | None = None) -> bool:
    """Alter the current table at `path` (schema `current`, layout `table_def`) to `tm`'s version, as the server's
    ALTER did, in one commit with the app-transaction version given. Returns whether anything changed."""
    old_cols = [f.name for f in current if f.name not in (SEQ, "_commit_ts")]
    changes = schema_changes(old_cols, table_def, tm, current, None, warnings)
    if changes:
        engine.replace_schema(path, changes, app, version)
    return bool(changes)


def _has_layout(table_schema: pa.Schema, tm: TableMap) -> bool:
    """Whether a current table's columns are those of `tm`'s version (names and types, in order)."""
    have = [(f.name, f.type) for f in table_schema if f.name != SEQ]
    return have == [(f.name, f.type) for f in current_schema(tm)]
