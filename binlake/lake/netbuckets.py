"""A large staged segment's net changes in key buckets, so that no step holds the whole net table.

`staged_merge_input` (binlake.lake.current) reduces a staged segment piece by piece to one row per key. A segment
of many keys (one transaction of millions of rows) has a net table as large as its history: held whole, ingest
memory grew with the transaction. A segment of more than NET_BUCKET_ROWS history rows is therefore reduced in
buckets of keys instead: each piece's merge input is split by key into B buckets (B from the segment's rows)
written to the batch's staging folder, and the merge reads, reduces and merges one bucket at a time
(`BucketedNet.buckets`). Buckets hold disjoint keys, so each is a merge input of its own.

The split depends only on the staged pieces (never on what a process kept in memory): a single integer key is cut
into ranges at quantiles of a sample of the pieces' keys (a bucket then covers one key range, as the slices of a
binlog-ordered merge input did), any other key by a hash of its values. A re-run of the batch rebuilds the same
buckets, so the engine's per-part app ids (`part<i>`) name the same rows again: exactly-once holds.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.fs as pafs

from .convert import np_array
from .engines.base import DELETED, SEQ
from .engines.mergeplan import NewestPerKey

NET_BUCKET_ROWS = 1 << 18  # history rows of a staged segment per bucket of its net changes (about 60 MB of them)
SAMPLE_ROWS = 1 << 16  # keys sampled from the pieces to cut a single integer key into ranges

_MIX = np.uint64(0x9E3779B97F4A7C15)
_BYTE = np.uint64(0x100000001B3)


def bucket_count(rows: int) -> int:
    """Buckets for a segment of `rows` history rows (1: not bucketed)."""
    return max(1, math.ceil(rows / NET_BUCKET_ROWS))


def _mix(h: np.ndarray) -> np.ndarray:
    h = h ^ (h >> np.uint64(31))
    h = h * _MIX
    return h ^ (h >> np.uint64(29))


def _text_hash(arr: pa.Array) -> np.ndarray:
    """A hash of each value of a string or binary array (no nulls), vectorized over its bytes."""
    width = np.int64 if pa.types.is_large_string(arr.type) or pa.types.is_large_binary(arr.type) else np.int32
    buffers = arr.buffers()
    offsets = np.frombuffer(buffers[1], dtype=width)[arr.offset:arr.offset + len(arr) + 1].astype(np.int64)
    data = np.frombuffer(buffers[2], dtype=np.uint8) if buffers[2] is not None else np.zeros(0, np.uint8)
    first = offsets[0]
    body = data[first:offsets[-1]].astype(np.uint64)
    starts, lengths = offsets[:-1] - first, np.diff(offsets)
    at = np.arange(len(body), dtype=np.int64) - np.repeat(starts, lengths)
    longest = int(lengths.max()) if len(lengths) else 0
    powers = np.cumprod(np.full(max(1, longest), _BYTE, dtype=np.uint64))
    sums = np.zeros(len(body) + 1, dtype=np.uint64)
    np.cumsum((body + np.uint64(1)) * powers[at] if len(body) else body, out=sums[1:])
    ends = starts + lengths
    return _mix(sums[ends] - sums[starts] + lengths.astype(np.uint64))


def key_hash(table: pa.Table, keys: list[str]) -> np.ndarray:
    """A hash of each row's key (uint64), the same for equal keys whichever table or piece they are in."""
    out = np.zeros(table.num_rows, dtype=np.uint64)
    with np.errstate(over="ignore"):
        for k in keys:
            col = table.column(k).combine_chunks()
            if pa.types.is_integer(col.type) or pa.types.is_boolean(col.type):
                h = _mix(col.cast(pa.int64()).to_numpy().view(np.uint64))
            else:
                if not (pa.types.is_string(col.type) or pa.types.is_large_string(col.type)
                        or pa.types.is_binary(col.type) or pa.types.is_large_binary(col.type)):
                    col = col.cast(pa.string())
                h = _text_hash(col)
            out = _mix(out * np.uint64(1000003) + h)
    return out


def single_int_key(schema: pa.Schema, keys: list[str]) -> bool:
    return len(keys) == 1 and pa.types.is_integer(schema.field(keys[0]).type)


def range_bounds(samples: list[np.ndarray], count: int) -> np.ndarray:
    """The `count - 1` cut points of a single integer key from samples of its values."""
    if not samples:
        return np.zeros(0, dtype=np.int64)
    values = np.sort(np.concatenate(samples))
    if not len(values):
        return np.zeros(0, dtype=np.int64)
    at = (np.arange(1, count, dtype=np.int64) * len(values)) // count
    cuts = values[at]  # sorted: the distinct ones without np.unique (whose masked-array check imports numpy.ma)
    return cuts[np.concatenate(([True], cuts[1:] != cuts[:-1]))] if len(cuts) else cuts


def sample_of(keys: np.ndarray, total: int) -> np.ndarray:
    """Every n-th key of a piece, n chosen so a segment of `total` rows yields about SAMPLE_ROWS of them."""
    step = max(1, total // SAMPLE_ROWS)
    return keys[::step].astype(np.int64)


def bucketer(keys: list[str], count: int, bounds: np.ndarray | None) -> Callable[[pa.Table], np.ndarray]:
    """Rows -> their bucket numbers: key ranges cut at `bounds` (a single integer key), else a key hash."""
    if bounds is not None:
        def by_range(rows: pa.Table) -> np.ndarray:
            return np.searchsorted(bounds, rows.column(keys[0]).to_numpy(), side="right")
        return by_range

    def by_hash(rows: pa.Table) -> np.ndarray:
        return (key_hash(rows, keys) % np.uint64(count)).astype(np.int64)
    return by_hash


# Bucket files are Arrow IPC files with LZ4-compressed record batches: as small on disk as the Parquet files they
# were (snappy) at a third of the CPU to write and read back (they are read once, whole, by this module only).
_IPC = pa.ipc.IpcWriteOptions(compression="lz4")


class BucketWriter:
    """Writes reduced pieces (one row per key each) split into bucket files under `folder`, record batches per piece
    and bucket (read back one at a time: each is one row per key)."""

    def __init__(self, fs: pafs.FileSystem, folder: str, count: int, assign: Callable[[pa.Table], np.ndarray],
                 schema: pa.Schema) -> None:
        self.fs, self.folder, self.count, self.assign, self.schema = fs, folder.rstrip("/"), count, assign, schema
        if fs.get_file_info(self.folder).type == pafs.FileType.Directory:
            fs.delete_dir(self.folder)  # an earlier attempt's buckets: made again from the same pieces
        fs.create_dir(self.folder, recursive=True)
        self.writers: list[tuple | None] = [None] * count  # per bucket: (output stream, IPC file writer)
        self.rows = 0
        self.deletes = 0

    def path(self, i: int) -> str:
        return f"{self.folder}/b{i:05d}.arrow"

    def add(self, rows: pa.Table) -> None:
        if not rows.num_rows:
            return
        rows = rows.cast(self.schema)
        self.rows += rows.num_rows
        self.deletes += pc.sum(rows.column(DELETED).cast(pa.int64())).as_py() or 0
        ids = self.assign(rows)
        order = np.argsort(ids, kind="stable")
        counts = np.bincount(ids, minlength=self.count)
        ranked = rows.take(np_array(order)) if not bool(np.all(order[1:] > order[:-1])) else rows
        at = 0
        for i in np.flatnonzero(counts).tolist():
            part = ranked.slice(at, int(counts[i]))
            at += int(counts[i])
            if self.writers[i] is None:
                sink = self.fs.open_output_stream(self.path(i))
                self.writers[i] = (sink, pa.ipc.new_file(sink, self.schema, options=_IPC))
            self.writers[i][1].write_table(part)

    def close(self, keys: list[str]) -> BucketedNet:
        files = []
        for i, w in enumerate(self.writers):
            if w is not None:
                w[1].close()
                w[0].close()
                files.append(self.path(i))
        self.writers = []
        return BucketedNet(self.fs, files, keys, self.schema, self.rows, self.deletes)


@dataclass
class BucketedNet:
    """A segment's merge input as bucket files of disjoint keys (see the module's docstring): `buckets()` yields
    each bucket reduced to one row per key (the newest `_seq`). `rows` and `deletes` count the rows before the
    reduction (upper bounds); `floor` drops changes older than it (a TRUNCATE in the batch)."""

    fs: pafs.FileSystem
    files: list[str]
    keys: list[str]
    schema: pa.Schema
    rows: int
    deletes: int
    floor: int | None = None

    @property
    def num_rows(self) -> int:
        return self.rows

    def above(self, floor: int) -> BucketedNet:
        return replace(self, floor=floor if self.floor is None else max(self.floor, floor))

    def buckets(self, columns: list[str] | None = None) -> Iterator[pa.Table]:
        """Each bucket's net changes (one row per key), `columns` of them (the key and `_seq` always read)."""
        names = None if columns is None else list(dict.fromkeys([*self.keys, SEQ, *columns]))
        schema = self.schema if names is None else pa.schema([self.schema.field(c) for c in names])
        for path in self.files:
            newest = NewestPerKey(self.keys)
            with self.fs.open_input_file(path) as f:
                reader = pa.ipc.open_file(f)
                for g in range(reader.num_record_batches):
                    part = pa.Table.from_batches([reader.get_batch(g)])
                    newest.add(part.select(names) if names is not None else part)
            rows = newest.result() if newest.parts else schema.empty_table()
            if self.floor is not None:
                rows = rows.filter(pc.greater_equal(rows.column(SEQ), self.floor))
            yield rows.select(schema.names) if columns is not None else rows
            del rows, newest
            pa.default_memory_pool().release_unused()

    def select(self, columns: list[str]) -> pa.Table:
        """`columns` of every bucket's net changes, in one table (narrow columns: the keys, `_seq`, `_deleted`)."""
        parts = list(self.buckets(columns))
        return pa.concat_tables(parts).select(columns) if parts else self.schema.empty_table().select(columns)

    def whole(self) -> pa.Table:
        """Every bucket in one table (a backfill evolves the rows in memory)."""
        parts = list(self.buckets())
        return pa.concat_tables(parts) if parts else self.schema.empty_table()
