"""Current-state tables: net changes per key, merged in binlog order; schema changes where the source had them.

A batch's history rows of one table are cut into segments of one schema version each. Segment by segment, the
current table is first brought to the segment's layout (the ALTER the server ran: added columns take the DDL
default, dropped ones go, renames keep values, type changes convert) and then the segment's net changes are
merged. So the table ends mirroring the source schema at the batch end, as the server's table did.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc

from ..binlog.tablemap import TableMap
from ..schema.evolve import column_mapping, default_value
from ..schema.model import TableDef
from .convert import arrow_type
from .engines import DELETED, SEQ, ColumnChange
from .history import META_NAMES
from .ordering import net_changes

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
    ordered = history.sort_by([(c, "ascending") for c in ORDER])
    versions = ordered.column("_schema_version").to_pylist()
    start = 0
    for i in range(1, len(versions) + 1):
        if i == len(versions) or versions[i] != versions[start]:
            yield Segment(versions[start], ordered.slice(start, i - start))
            start = i


def current_schema(tm: TableMap) -> pa.Schema:
    fields = [pa.field(c.key, arrow_type(c)) for c in tm.columns]
    return pa.schema([*fields, pa.field("_commit_ts", pa.timestamp("us", tz="UTC"))])


def key_names(tm: TableMap) -> list[str]:
    return [tm.columns[i].key for i in (tm.primary_key or [])]


def merge_input(seg: pa.Table, tm: TableMap) -> pa.Table:
    """One row per key: the last change of each key in the segment, with `_seq` and `_deleted`."""
    keys = key_names(tm)
    columns = [c.key for c in tm.columns]
    rows = seg.select([*columns, "_before", "_op", "_file_seq", "_pos", "_sub", "_row", "_commit_ts"]).to_pylist()
    items = []
    for r in rows:
        full = (r["_file_seq"], r["_pos"], r["_sub"], r["_row"])
        after_key = tuple(r[k] for k in keys)
        before = r["_before"]
        before_key = tuple(before[k] for k in keys) if before else after_key
        row = {c: r[c] for c in columns}
        row["_commit_ts"] = r["_commit_ts"]
        # Net reduction needs a strictly increasing order: the full position, as one tuple-sortable integer.
        items.append((full, r["_op"], before_key, after_key, row, event_seq(r["_file_seq"], r["_pos"])))
    ordered = [(i, op, bk, ak, (None if op == "delete" else row), seq)
               for i, (_full, op, bk, ak, row, seq) in enumerate(items)]
    net = net_changes(ordered)
    schema = current_schema(tm)
    out: dict[str, list] = {f.name: [] for f in schema}
    out[SEQ], out[DELETED] = [], []
    for change in net.values():
        seq = change.commit_ts  # the event seq was carried in the commit_ts slot of net_changes' input
        if change.row is None:
            for name, value in zip(keys, change.key, strict=True):
                out[name].append(value)
            for f in schema:
                if f.name not in keys:
                    out[f.name].append(None)
        else:
            for f in schema:
                out[f.name].append(change.row[f.name])
        out[SEQ].append(seq)
        out[DELETED].append(change.row is None)
    arrays = [pa.array(out[f.name], f.type) for f in schema]
    return pa.table([*arrays, pa.array(out[SEQ], pa.int64()), pa.array(out[DELETED], pa.bool_())],
                    names=[*schema.names, SEQ, DELETED])


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
