"""History rows: one per row change, the source table's typed columns plus binlake's metadata columns.

The typed columns hold the row after the change (the deleted row for deletes); `_before` holds the row before an
update. Metadata: `_op`, `_binlog_file`, `_file_seq`, `_pos`, `_sub`, `_row`, `_txn_pos`, `_commit_ts` (UTC),
`_gtid`, `_schema_version`, `_batch_id`, and `_commit_date` (the partition column).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

import pyarrow as pa

from ..binlog.records import RowChange
from ..binlog.rows import ABSENT
from ..binlog.tablemap import TableMap
from .convert import ConversionStats, arrow_type, to_arrow

META_FIELDS = [
    pa.field("_op", pa.string(), nullable=False),
    pa.field("_binlog_file", pa.string(), nullable=False),
    pa.field("_file_seq", pa.int64(), nullable=False),
    pa.field("_pos", pa.int64(), nullable=False),
    pa.field("_sub", pa.int64(), nullable=False),
    pa.field("_row", pa.int32(), nullable=False),
    pa.field("_txn_pos", pa.int64(), nullable=False),
    pa.field("_commit_ts", pa.timestamp("us", tz="UTC"), nullable=False),
    pa.field("_gtid", pa.string()),
    pa.field("_schema_version", pa.string()),
    pa.field("_batch_id", pa.int64(), nullable=False),
    pa.field("_commit_date", pa.date32(), nullable=False),
]
META_NAMES = {f.name for f in META_FIELDS} | {"_before"}
PARTITION_BY = ["_commit_date"]


@dataclass
class CommittedChange:
    """A row change with the commit time of its transaction (known only once the transaction ended)."""

    change: RowChange
    commit_ts: int
    file_seq: int


def history_table(items: Sequence[CommittedChange], batch_id: int, stats: ConversionStats) -> pa.Table:
    """History rows for changes that share one TABLE_MAP layout (same table, same schema version)."""
    if not items:
        raise ValueError("no changes")
    tm: TableMap = items[0].change.table
    names = tm.column_keys
    clash = META_NAMES.intersection(names)
    if clash:
        raise ValueError(f"{tm.qualified_name} has columns named like binlake's metadata: {sorted(clash)}")
    where = tm.qualified_name
    images = [c.change.after if c.change.after is not None else c.change.before for c in items]
    columns = {}
    for col in tm.columns:
        columns[col.key] = to_arrow([img[col.index] for img in images], col, f"{where}.{col.key}", stats)
    befores = [c.change.before if c.change.op == "update" else None for c in items]
    before_fields = [pa.field(col.key, arrow_type(col)) for col in tm.columns]
    if any(b is not None for b in befores):
        children = [to_arrow([None if b is None else b[col.index] for b in befores], col, f"{where}.{col.key}",
                             stats) for col in tm.columns]
        mask = pa.array([b is None for b in befores])
        columns["_before"] = pa.StructArray.from_arrays(children, fields=before_fields, mask=mask)
    else:
        columns["_before"] = pa.nulls(len(items), pa.struct(before_fields))
    commit = [datetime.fromtimestamp(c.commit_ts, tz=UTC) for c in items]
    meta = {
        "_op": [c.change.op for c in items],
        "_binlog_file": [c.change.file for c in items],
        "_file_seq": [c.file_seq for c in items],
        "_pos": [c.change.pos for c in items],
        "_sub": [c.change.sub for c in items],
        "_row": [c.change.row for c in items],
        "_txn_pos": [c.change.txn_pos if c.change.txn_pos is not None else c.change.pos for c in items],
        "_commit_ts": commit,
        "_gtid": [c.change.gtid for c in items],
        "_schema_version": [tm.schema_version for _ in items],
        "_batch_id": [batch_id] * len(items),
        "_commit_date": [d.date() for d in commit],
    }
    for f in META_FIELDS:
        columns[f.name] = pa.array(meta[f.name], f.type)
    return pa.table(columns)


def absent_columns(items: Sequence[CommittedChange]) -> set[str]:
    """Columns missing from some row image (binlog_row_image=MINIMAL/NOBLOB): the current table cannot use them."""
    out: set[str] = set()
    for c in items:
        for img in (c.change.before, c.change.after):
            if img is not None:
                out.update(col.key for col, v in zip(c.change.table.columns, img, strict=False) if v is ABSENT)
    return out
