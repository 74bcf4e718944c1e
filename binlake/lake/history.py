"""History rows: one per row change, the source table's typed columns plus binlake's metadata columns.

The typed columns hold the row after the change (the deleted row for deletes); `_before` holds the row before an
update. Metadata: `_op`, `_binlog_file`, `_file_seq`, `_pos`, `_sub`, `_row`, `_txn_pos`, `_commit_ts` (UTC),
`_gtid`, `_schema_version`, `_batch_id`, and `_commit_date` (the partition column).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from itertools import chain, groupby
from operator import is_
from typing import Any

import numpy as np
import pyarrow as pa

from ..binlog.coltypes import value_kind
from ..binlog.columnar import ColumnarPairs, NullableArray
from ..binlog.tablemap import TableMap
from ..binlog.vectorized import DecimalColumn, TextColumn
from .convert import TEXT_KINDS, ConversionStats, arrow_type, from_texts, np_array, to_arrow, to_text

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
US_PER_DAY = 86_400_000_000


@dataclass
class CommittedBatch:
    """The rows of one rows event (a decoder RowBatch) with the commit time of their transaction, which is
    known only once the transaction ended."""

    batch: Any  # binlake.binlog.decoder.RowBatch (or anything with its attributes)
    commit_ts: int
    file_seq: int


def history_table(items: Sequence[CommittedBatch], batch_id: int, stats: ConversionStats, text: bool = False
                  ) -> pa.Table:
    """History rows for rows events that share one TABLE_MAP layout (same table, same schema version). `text` (the
    Kafka sink's rows): DECIMAL and DATE/DATETIME/TIMESTAMP columns as the text of the lake's values
    (convert.value_text), taking the decoder's TextColumns as they come (DecodeOptions.text_values)."""
    if not items:
        raise ValueError("no changes")
    tm: TableMap = items[0].batch.table
    names = tm.column_keys
    clash = META_NAMES.intersection(names)
    if clash:
        raise ValueError(f"{tm.qualified_name} has columns named like binlake's metadata: {sorted(clash)}")
    batches = [item.batch for item in items]
    counts = np.fromiter((len(b.pairs) for b in batches), np.int64, len(batches))
    n = int(counts.sum())
    k = len(tm.columns)
    rows: list[list] = [[] for _ in range(k)]  # per column: each event's values of the row after the change
    befores: list[list] = [[] for _ in range(k)]  # per column: each update's before-image values
    # Per run of events: whether its rows have a before image (a bool for all of them, or an array per row).
    has_before: list[bool | np.ndarray] = []
    run_starts: list[int] = []  # the index of each run's first event
    i = 0
    while i < len(batches):
        run_starts.append(i)
        i, main, before, present = _run_columns(batches, i, k, tm.qualified_name)
        for out, col in zip(rows, main, strict=True):
            out.append(col)
        if before is not None:
            for out, col in zip(befores, before, strict=True):
                out.append(col)
        has_before.append(present)
    where = tm.qualified_name
    as_text = {col.index for col in tm.columns if text and value_kind(col) in TEXT_KINDS}

    def convert(parts: list, count: int, col) -> pa.Array:
        if col.index in as_text or (text and any(type(p) is TextColumn for p in parts)):  # (TextColumn: UTF-8 text)
            return to_text(parts, col, f"{where}.{col.key}", stats)
        return _column(parts, count, col, f"{where}.{col.key}", stats)

    columns = {col.key: convert(rows[col.index], n, col) for col in tm.columns}
    before_fields = [pa.field(col.key, pa.string() if col.index in as_text else arrow_type(col)) for col in tm.columns]
    per_row = _per_row(has_before, np.add.reduceat(counts, run_starts))  # items is not empty: neither are runs
    if per_row.all() and n:
        # Every row has a before image (updates only): the images are the struct's rows as they are, and a column
        # the updates left as it was (the decoder hands the same values) is the after column's array again.
        children = [columns[col.key] if _same(rows[col.index], befores[col.index])
                    else convert(befores[col.index], n, col) for col in tm.columns]
        columns["_before"] = pa.StructArray.from_arrays(children, fields=before_fields)
    elif per_row.any():
        # Only update rows have a before image: convert those, then spread them over all rows (null elsewhere).
        children = [convert(befores[col.index], int(per_row.sum()), col) for col in tm.columns]
        at = np.cumsum(per_row) - 1
        spread = pa.Array.from_buffers(pa.int64(), n, [np_array(per_row).buffers()[1], pa.py_buffer(at)])
        columns["_before"] = pa.StructArray.from_arrays(children, fields=before_fields).take(spread)
    else:
        columns["_before"] = pa.nulls(n, pa.struct(before_fields))
    columns.update(_meta_columns(batches, items, counts, n, tm.schema_version, batch_id))
    return pa.table(columns)


# Arrow types whose decoded values (Python ints, floats) numpy reads as they are: such a column without NULLs is
# read straight from the events' value sequences (no list of all of them first, a third less CPU than pa.array).
_NUMPY = {pa.int8(): np.int8, pa.int16(): np.int16, pa.int32(): np.int32, pa.int64(): np.int64,
          pa.float32(): np.float32, pa.float64(): np.float64}


def _column(parts: list, n: int, col, where: str, stats: ConversionStats) -> pa.Array:
    """One column of the events (`parts`: each event's value sequence; n values in all) as an Arrow array."""
    kinds = set(map(type, parts))  # one pass over the events' parts (a table of wide rows has many events)
    if np.ndarray in kinds or NullableArray in kinds:
        arr = _int_arrays(parts, col, kinds)
        if arr is not None:
            return arr
        # with lists (an event decoded row by row): value by value
        parts = [p.tolist() if type(p) is np.ndarray or type(p) is NullableArray else p for p in parts]
        kinds = set(map(type, parts))
    if TextColumn in kinds:
        arr = from_texts(parts, col, where, stats)
        if arr is not None:
            return arr
    if DecimalColumn in kinds:
        typ = arrow_type(col)
        if pa.types.is_decimal(typ):
            return _decimals(parts, typ, col, where, stats)
    dtype = _NUMPY.get(arrow_type(col)) if not col.nullable else None
    if dtype is not None:
        try:
            values = np.fromiter(chain.from_iterable(parts), dtype, n)
        except (TypeError, ValueError, OverflowError):  # not a plain value (ABSENT, out of range): to_arrow says
            pass
        else:
            # numpy reads None as NaN: a float column with a NaN (a NULL where the table map says NOT NULL) goes
            # value by value, so that the NULL stays NULL
            if values.dtype.kind != "f" or not np.isnan(values).any():
                return np_array(values)
    return to_arrow(list(chain.from_iterable(parts)), col, where, stats)


def _int_arrays(parts: list, col, kinds: set[type]) -> pa.Array | None:
    """An integer column the decoder gave as numpy arrays in every event (DecodeOptions.int_arrays; NullableArray
    where some images hold NULL) as the array of its Arrow type: the values as they are, each array's width and
    signedness fitting that type's (a wider type holds them all). None: some event gave a list, or the type is
    not a plain integer. `kinds`: the types of the parts."""
    dtype = _NUMPY.get(arrow_type(col))
    if dtype is None or not kinds <= {np.ndarray, NullableArray}:
        return None
    arrays = [p.values if type(p) is NullableArray else p for p in parts] if NullableArray in kinds else parts
    if not all(np.can_cast(t, dtype) for t in {a.dtype for a in arrays}):
        return None
    values = (arrays[0] if len(arrays) == 1 else np.concatenate(arrays)).astype(dtype, copy=False)
    if NullableArray not in kinds:
        return np_array(values)
    valid = np.concatenate([p.valid if type(p) is NullableArray else np.ones(len(p), bool) for p in parts])
    return np_array(values, valid=valid)


def _decimals(parts: list, typ: pa.DataType, col, where: str, stats: ConversionStats) -> pa.Array:
    """A DECIMAL column's parts as one decimal array: runs of decoder DecimalColumns from their digit groups (no
    Decimal made), runs of value lists through to_arrow."""
    arrays: list[pa.Array] = []
    for kind, group in groupby(parts, key=lambda p: type(p) is DecimalColumn):
        run = list(group)
        if kind:
            arrays.append(DecimalColumn.join(run).arrow(typ))
        else:
            arrays.append(to_arrow(list(chain.from_iterable(run)), col, where, stats))
    return arrays[0] if len(arrays) == 1 else pa.concat_arrays(arrays)


def _same(after: list, before: list) -> bool:
    """Whether the events' after and before values of a column are the very same objects (the decoder hands the
    values of a column an update left unchanged to both images, unless they are plain numbers)."""
    return all(a.same(b) if type(a) is TextColumn or type(a) is DecimalColumn else
               a is b if type(a) is np.ndarray or type(a) is NullableArray else
               type(b) is not TextColumn and type(b) is not DecimalColumn and type(b) is not np.ndarray and
               type(b) is not NullableArray and len(a) == len(b) and all(map(is_, a, b))
               for a, b in zip(after, before, strict=True))


def _per_row(flags: list[bool | np.ndarray], rows: np.ndarray) -> np.ndarray:
    """Per row, whether it has a before image, from each run's flag (`rows` rows each)."""
    if np.ndarray not in set(map(type, flags)):
        return np.repeat(np.array(flags, bool), rows)
    return np.concatenate([f if type(f) is np.ndarray else np.full(int(r), f, bool)
                           for f, r in zip(flags, rows, strict=True)])


def _run_columns(batches: list, i: int, k: int, where: str) -> tuple[int, list, list | None, bool | np.ndarray]:
    """The columns of batches[i] as _event_columns gives them, and the index of the next batch; when the events
    that follow were converted together with it (the decoder's groups of small rows events: ColumnarPairs.span),
    at the places that follow, their columns come with it in one slice each rather than one per event."""
    pairs = batches[i].pairs
    span = pairs.span() if type(pairs) is ColumnarPairs else None
    if span is None:
        return (i + 1, *_event_columns(batches[i], k, where))
    whole_before, whole_after, at = span
    op = batches[i].op
    end = at + pairs.n
    j = i + 1
    while j < len(batches):
        more = batches[j].pairs
        nxt = more.span() if type(more) is ColumnarPairs else None
        if (nxt is None or nxt[0] is not whole_before or nxt[1] is not whole_after or nxt[2] != end
                or batches[j].op != op):
            break
        end += more.n
        j += 1
    main = whole_after if whole_after is not None else whole_before
    if j == i + 1 or main is None:
        return (i + 1, *_event_columns(batches[i], k, where))
    if len(main) != k:
        raise ValueError(f"{where}: row images do not all have the table map's {k} columns")
    main = [c[at:end] for c in main]
    if op == "update" and whole_before is not None:
        return j, main, [c[at:end] for c in whole_before], True
    return j, main, None, False


def _event_columns(batch: Any, k: int, where: str) -> tuple[list, list | None, bool | np.ndarray]:
    """One rows event as columns: the rows after the change (the deleted rows for deletes), the before images of
    an update (None otherwise) and whether its rows have a before image (a bool for all, else per row).

    The columnar decoder hands its columns over (no row tuples are built); other events' row images are
    transposed here."""
    pairs = batch.pairs
    n = len(pairs)
    update = batch.op == "update"
    after, before = getattr(pairs, "after", None), getattr(pairs, "before", None)
    if after is not None or before is not None:
        main = after if after is not None else before
        if len(main) != k:
            raise ValueError(f"{where}: row images do not all have the table map's {k} columns")
        if update and before is not None:
            return main, before, True
        return main, None, False
    main = _transpose([a if a is not None else b for b, a in pairs], k, where)
    if not update:
        return main, None, False
    # An update without a before image (partial JSON, MINIMAL image): no before values for that row.
    present = np.fromiter((b is not None for b, _ in pairs), bool, n)
    return main, _transpose([b for b, _ in pairs if b is not None], k, where), present


def _transpose(images: list, k: int, where: str) -> list:
    """Row images (value sequences in column order) as k column lists."""
    if not images:
        return [[] for _ in range(k)]
    if any(len(image) != k for image in images):
        raise ValueError(f"{where}: row images do not all have the table map's {k} columns")
    return [list(col) for col in zip(*images, strict=True)]


def _meta_columns(batches: list, items: Sequence[CommittedBatch], counts: np.ndarray, n: int,
                  version: str | None, batch_id: int) -> dict[str, pa.Array]:
    """The metadata columns, built per rows event and repeated per row in Arrow (no per-row Python objects)."""
    events = np.repeat(np.arange(len(batches), dtype=np.int64), counts)
    starts = np.cumsum(counts) - counts
    taken: list = []  # the events as an Arrow array, made once when first needed

    def per_event(values: list, typ: pa.DataType) -> pa.Array:
        if values.count(values[0]) == len(values):  # one value (a large transaction's events): no take
            return pa.repeat(pa.scalar(values[0], typ), n)
        if not taken:
            taken.append(np_array(events))
        return pa.array(values, typ).take(taken[0])

    def per_event_int(values) -> np.ndarray:
        return np.repeat(np.fromiter(values, np.int64, len(batches)), counts)

    commit_us = per_event_int(_epoch_us(item.commit_ts) for item in items)
    return {
        "_op": per_event([b.op for b in batches], pa.string()),
        "_binlog_file": per_event([b.file for b in batches], pa.string()),
        "_file_seq": np_array(per_event_int(item.file_seq for item in items), pa.int64()),
        "_pos": np_array(per_event_int(b.pos for b in batches), pa.int64()),
        "_sub": np_array(per_event_int(b.sub for b in batches), pa.int64()),
        "_row": np_array((np.arange(n, dtype=np.int64) - np.repeat(starts, counts)).astype(np.int32)),
        "_txn_pos": np_array(per_event_int(b.txn_pos if b.txn_pos is not None else b.pos for b in batches),
                             pa.int64()),
        "_commit_ts": np_array(commit_us, pa.int64()).cast(pa.timestamp("us", tz="UTC")),
        "_gtid": per_event([b.gtid for b in batches], pa.string()),
        "_schema_version": pa.repeat(pa.scalar(version, pa.string()), n),
        "_batch_id": np_array(np.full(n, batch_id, np.int64), pa.int64()),
        "_commit_date": np_array(np.floor_divide(commit_us, US_PER_DAY).astype(np.int32)).cast(pa.date32()),
    }


def with_commit_ts(table: pa.Table, commit_ts: int | float) -> pa.Table:
    """A history piece built before its transaction's commit (history_table with a provisional commit time), with
    the commit time it learned since."""
    n = table.num_rows
    commit_us = np.full(n, _epoch_us(commit_ts), np.int64)
    stamps = np_array(commit_us, pa.int64()).cast(pa.timestamp("us", tz="UTC"))
    dates = np_array(np.floor_divide(commit_us, US_PER_DAY).astype(np.int32)).cast(pa.date32())
    table = table.set_column(table.schema.get_field_index("_commit_ts"), "_commit_ts", stamps)
    return table.set_column(table.schema.get_field_index("_commit_date"), "_commit_date", dates)


def _epoch_us(ts: float) -> int:
    """Commit time (epoch seconds, int or float) in microseconds."""
    return ts * 1_000_000 if type(ts) is int else round(ts * 1_000_000)
