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
from ..schema.evolve import column_mapping, default_value
from ..schema.model import TableDef
from .convert import arrow_type
from .engines import DELETED, SEQ, ColumnChange
from .history import META_NAMES

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
    versions = ordered.column("_schema_version").combine_chunks()
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
    order = pa.array(range(n), pa.int64())
    main = pa.table({**{c: seg.column(c) for c in values}, SEQ: seq,
                     DELETED: pc.equal(op, "delete"), "_order": pc.add(pc.multiply(order, 2), 1)})
    parts = [main]
    before = seg.column("_before")
    if before.null_count < n:
        # Key-changing updates: a delete of the old key, ordered just before the upsert of the new one.
        changed = pc.equal(op, "update")
        for k in keys:
            changed = pc.and_(changed, pc.not_equal(pc.struct_field(before, k), seg.column(k)))
        changed = pc.fill_null(changed, False)
        if pc.any(changed).as_py():
            old = seg.filter(changed)
            tomb = {c: (pc.struct_field(old.column("_before"), c) if c in keys else pa.nulls(old.num_rows,
                    schema.field(c).type)) for c in values}
            tomb[SEQ] = seq.filter(changed)
            tomb[DELETED] = pa.array([True] * old.num_rows)
            tomb["_order"] = pc.multiply(order.filter(changed), 2)
            parts.append(pa.table(tomb).cast(main.schema))
    events = pa.concat_tables(parts).combine_chunks() if len(parts) > 1 else main.combine_chunks()
    last = events.group_by(keys, use_threads=False).aggregate([("_order", "max")])
    positions = pc.index_in(last.column("_order_max"), value_set=events.column("_order"))
    result = events.take(positions).drop_columns(["_order"])
    return result.select([*values, SEQ, DELETED]).cast(
        pa.schema([*[schema.field(c) for c in values], pa.field(SEQ, pa.int64()), pa.field(DELETED, pa.bool_())]))


def schema_changes(old_cols: list[str], old_def: TableDef | None, new_tm: TableMap, table_schema: pa.Schema,
                   ddl_time: str | None) -> list[ColumnChange]:
    """The column changes that turn the current table (columns `old_cols`, layout `old_def` when known) into
    `new_tm`'s layout, as the server's ALTER did."""
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
    existing = {f.name: f.type for f in table_schema}
    for i, col in enumerate(new_tm.columns):
        target = new_schema.field(col.key).type
        src = mapping[col.key]
        if src is None:
            default = None
            if new_def is not None:
                value = default_value(new_def.columns[i], ddl_time)
                default = pa.array([value], target)[0] if value is not None else None
            changes.append(ColumnChange.add(col.key, target, default=default, position=i))
        elif existing.get(src) is not None and existing[src] != target:
            changes.append(ColumnChange.convert(col.key, target, converter=_converter(target)))
    return changes


def _converter(target: pa.DataType):
    def convert(values: pa.Array) -> pa.Array:
        if pa.types.is_decimal(target) and pa.types.is_decimal(values.type) and target.scale < values.type.scale:
            # The server rounds half away from zero when a DECIMAL loses scale.
            values = pc.round(values, ndigits=target.scale, round_mode="half_towards_infinity")
        return values.cast(target, safe=True)

    return convert
