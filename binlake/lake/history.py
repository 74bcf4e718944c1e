"""History rows: one per row change, the source table's typed columns plus binlake's metadata columns.

The typed columns hold the row after the change (the deleted row for deletes); `_before` holds the row before an
update. Metadata: `_op`, `_binlog_file`, `_file_seq`, `_pos`, `_sub`, `_row`, `_txn_pos`, `_commit_ts` (UTC),
`_gtid`, `_schema_version`, `_batch_id`, and `_commit_date` (the partition column).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import pyarrow as pa

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
class CommittedBatch:
    """The rows of one rows event (a decoder RowBatch) with the commit time of their transaction, which is
    known only once the transaction ended."""

    batch: Any  # binlake.binlog.decoder.RowBatch (or anything with its attributes)
    commit_ts: int
    file_seq: int


def history_table(items: Sequence[CommittedBatch], batch_id: int, stats: ConversionStats) -> pa.Table:
    """History rows for rows events that share one TABLE_MAP layout (same table, same schema version)."""
    if not items:
        raise ValueError("no changes")
    tm: TableMap = items[0].batch.table
    names = tm.column_keys
    clash = META_NAMES.intersection(names)
    if clash:
        raise ValueError(f"{tm.qualified_name} has columns named like binlake's metadata: {sorted(clash)}")
    where = tm.qualified_name
    pairs = [p for item in items for p in item.batch.pairs]
    ops = [op for item in items for op in [item.batch.op] * len(item.batch.pairs)]
    n = len(pairs)
    images = [a if a is not None else b for b, a in pairs]
    by_column = list(zip(*images, strict=True)) if images else [()] * len(tm.columns)
    columns = {}
    for col in tm.columns:
        columns[col.key] = to_arrow(list(by_column[col.index]), col, f"{where}.{col.key}", stats)
    before_fields = [pa.field(col.key, arrow_type(col)) for col in tm.columns]
    if "update" in ops:
        filler = [None] * len(tm.columns)
        befores = [b if op == "update" else None for (b, _a), op in zip(pairs, ops, strict=True)]
        by_before = list(zip(*[b if b is not None else filler for b in befores], strict=True))
        children = [to_arrow(list(by_before[col.index]), col, f"{where}.{col.key}", stats) for col in tm.columns]
        mask = pa.array([b is None for b in befores])
        columns["_before"] = pa.StructArray.from_arrays(children, fields=before_fields, mask=mask)
    else:
        columns["_before"] = pa.nulls(n, pa.struct(before_fields))
    meta: dict[str, list] = {f.name: [] for f in META_FIELDS}
    for item in items:
        b = item.batch
        k = len(b.pairs)
        commit = datetime.fromtimestamp(item.commit_ts, tz=UTC)
        meta["_op"] += [b.op] * k
        meta["_binlog_file"] += [b.file] * k
        meta["_file_seq"] += [item.file_seq] * k
        meta["_pos"] += [b.pos] * k
        meta["_sub"] += [b.sub] * k
        meta["_row"] += range(k)
        meta["_txn_pos"] += [b.txn_pos if b.txn_pos is not None else b.pos] * k
        meta["_commit_ts"] += [commit] * k
        meta["_gtid"] += [b.gtid] * k
        meta["_commit_date"] += [commit.date()] * k
    meta["_schema_version"] = [tm.schema_version] * n
    meta["_batch_id"] = [batch_id] * n
    for f in META_FIELDS:
        columns[f.name] = pa.array(meta[f.name], f.type)
    return pa.table(columns)


def absent_columns(items: Sequence[CommittedBatch]) -> set[str]:
    """Columns missing from some row image (binlog_row_image=MINIMAL/NOBLOB): the current table cannot use them."""
    out: set[str] = set()
    for item in items:
        cols = item.batch.table.columns
        for pair in item.batch.pairs:
            for img in pair:
                if img is not None:
                    out.update(col.key for col, v in zip(cols, img, strict=False) if v is ABSENT)
    return out
