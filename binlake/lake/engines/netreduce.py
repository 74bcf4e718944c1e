"""A staged merge segment's net changes reduced to one row per key away from the driver (a Spark task each).

The decode tasks write each staged piece's net changes beside it (binlake.lake.staging.write_net). A segment's
reduction is cut by a stable hash of the key into buckets of bounded size; a task reads every piece's net file,
keeps its bucket's rows, reduces them to the newest row per key (binlake.lake.engines.mergeplan.NewestPerKey, the
in-process code) and writes the upserts and the deletes as Parquet data files of the tables given (binlake.lake.staging
write_files: random names, not part of any table until committed). The driver gets back file manifests and counts.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..staging import read_net, write_files
from .base import DELETED, SEQ, EngineError
from .deltars import DeltaRsEngine
from .mergeplan import NewestPerKey, int_key
from .schema_change import apply_changes

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


def newest_of(stage: str, pieces: list[dict], keys: list[str], schema: pa.Schema,
              keep: Callable[[pa.Table], pa.Array] | None = None) -> NewestPerKey:
    """The pieces' net files, in binlog order, cast to `schema` and cut to the rows `keep` (a mask) takes, reduced
    to the newest row per key as they are read (one piece in memory beside the reduction)."""
    newest = NewestPerKey(keys)
    for p in sorted(pieces, key=lambda p: (p["min_seq"], p["path"])):
        rows = read_net(stage, p)
        if rows.schema != schema:
            rows = rows.cast(schema)
        if keep is not None:
            rows = rows.filter(keep(rows))
        if rows.num_rows:
            newest.add(rows)
        del rows
    return newest


def reduce_bucket(task: tuple) -> dict:
    """One reduce task: (stage, pieces in binlog order, keys, merge input schema, bucket, buckets, folder of the
    upserts' files, folder of the deletes' files). Returns the files' manifests and counts, or the first key
    column (or `_seq`) holding nulls (then nothing is written)."""
    stage, pieces, keys, schema, bucket, buckets, upsert_path, delete_path = task
    mine = (lambda rows: pa.array(key_buckets(rows, keys, buckets) == bucket)) if buckets > 1 else None
    newest = newest_of(stage, pieces, keys, schema, mine)
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


def segment_net(stage: str, pieces: list[dict], keys: list[str], base: pa.Schema, changes: list,
                schema: pa.Schema) -> pa.Table:
    """A staged segment's net changes, one row per key: its pieces' net files (newest_of) reduced to the newest
    row per key, evolved forward by `changes` (a backfill) and cast to the merge input's `schema`."""
    newest = newest_of(stage, pieces, keys, base)
    net = newest.result() if newest.parts else base.empty_table()
    if changes:
        batches = net.to_batches() or [pa.RecordBatch.from_pylist([], schema=base)]
        net = pa.Table.from_batches([apply_changes(b, changes) for b in batches])
    return net.select(schema.names).cast(schema)


def merge_segment(task: tuple) -> dict:
    """One merge task: (stage, pieces, keys, base schema, changes, merge input schema, table path, app id, batch,
    storage options). The segment's net changes (segment_net) merged into the existing current table at the path
    by the embedded engine's `_seq`-ordered merge with tombstones (delta-rs, binlake.lake.engines.tombstones: the
    same commits, app transactions and result as in process), its commits recording `reducedBy: spark`. Returns
    whether it committed (False: the batch's txn was in) and the net row count; an expected failure comes back as
    `error` (its type name and message) rather than as a failed task."""
    stage, pieces, keys, base, changes, schema, path, app_id, batch, storage_options = task
    try:
        net = segment_net(stage, pieces, keys, base, changes, schema)
        engine = DeltaRsEngine(storage_options, record={"reducedBy": "spark"})
        merged = engine.merge(path, net, keys, app_id, batch)
    except (EngineError, ValueError) as exc:  # MergeInputError, a conversion the backfill cannot make
        return {"merged": False, "rows": 0, "error": (type(exc).__name__, str(exc))}
    finally:
        pa.default_memory_pool().release_unused()
    return {"merged": merged, "rows": net.num_rows, "error": None}
