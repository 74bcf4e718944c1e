"""A staged merge segment's net changes reduced to one row per key away from the driver (a Spark task each).

The decode tasks write each staged piece's net changes beside it (binlake.lake.staging.write_net). A segment's
reduction is cut by a stable hash of the key into buckets of bounded size; a task reads every piece's net file,
keeps its bucket's rows, reduces them to the newest row per key (binlake.lake.engines.mergeplan.NewestPerKey, the
in-process code) and writes the upserts and the deletes as Parquet data files of the tables given (binlake.lake.staging
write_files: random names, not part of any table until committed). The driver gets back file manifests and counts.
"""

from __future__ import annotations

import math

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..staging import read_net, write_files
from .base import DELETED, SEQ
from .mergeplan import NewestPerKey, int_key

BUCKET_BYTES = 64 << 20
"""Net file bytes (Parquet, on disk) one reduce task takes at most: its memory holds about a few times that."""


def bucket_count(pieces: list[dict], schema: pa.Schema, keys: list[str]) -> int:
    """How many key-hash buckets a segment's reduction is cut into (1 for floating-point keys, whose equal values
    may differ in their bits: -0.0 and 0.0)."""
    if any(pa.types.is_floating(schema.field(k).type) for k in keys):
        return 1
    return max(1, math.ceil(sum(p.get("net_bytes", 0) for p in pieces) / BUCKET_BYTES))


def key_buckets(rows: pa.Table, keys: list[str], buckets: int) -> np.ndarray:
    """Each row's bucket: the key's value (a single integer key) or a stable hash of the key columns (pandas'
    hash with its fixed hash key: the same in every process), modulo `buckets`."""
    k = int_key(rows, keys)
    if k is not None:
        return np.mod(k, buckets).astype(np.int64)
    from pandas.util import hash_pandas_object

    frame = rows.select(keys).to_pandas()
    return (hash_pandas_object(frame, index=False).to_numpy() % np.uint64(buckets)).astype(np.int64)


def reduce_bucket(task: tuple) -> dict:
    """One reduce task: (stage, pieces in binlog order, keys, merge input schema, bucket, buckets, folder of the
    upserts' files, folder of the deletes' files). Returns the files' manifests and counts, or the first key
    column (or `_seq`) holding nulls (then nothing is written)."""
    stage, pieces, keys, schema, bucket, buckets, upsert_path, delete_path = task
    newest = NewestPerKey(keys)
    for p in pieces:
        rows = read_net(stage, p)
        if rows.schema != schema:
            rows = rows.cast(schema)
        if buckets > 1:
            rows = rows.filter(pa.array(key_buckets(rows, keys, buckets) == bucket))
        if rows.num_rows:
            newest.add(rows)
        del rows
    out = {"bucket": bucket, "nulls": None, "upserts": 0, "deletes": 0, "upsert_files": [], "delete_files": []}
    if not newest.parts:
        return out
    net = newest.result()
    bad = [c for c in [*keys, SEQ] if net.column(c).null_count]
    if bad:
        out["nulls"] = bad[0]
        return out
    deleted = net.column(DELETED)
    columns = [c for c in schema.names if c != DELETED]
    n_deletes = int(pc.sum(deleted).as_py() or 0)
    if n_deletes:
        deletes = net.filter(deleted).select([*keys, SEQ])
        out["delete_files"] = write_files(delete_path, deletes)
        out["deletes"] = deletes.num_rows
        del deletes
    if n_deletes < net.num_rows:
        upserts = net.filter(pc.invert(deleted)).select(columns) if n_deletes else net.select(columns)
        out["upsert_files"] = write_files(upsert_path, upserts)
        out["upserts"] = upserts.num_rows
    pa.default_memory_pool().release_unused()
    return out
