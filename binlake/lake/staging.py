"""Staged history: decode tasks running away from the driver (Spark executors) write their history rows as Parquet
files into the lake's storage and hand back only a manifest, so the driver's memory does not grow with the batch.

    LAKE/_binlake/staging/<pipeline>/<batch>/<table>/<file_seq>-<start>-<n>.parquet

One file ("piece") per table and schema version of a decode range. A piece's manifest entry (a dict, JSON in the
pending batch) holds its path relative to the batch's staging folder, rows, bytes, schema version and the first
and last change order key (`_seq` = file sequence << 40 | position) it holds. A table's entry in the batch may
carry seq bounds (`seq_from` inclusive, `seq_to` exclusive): a name re-used by another table in the batch is cut
into slots (binlake.lake.lifecycle) by filtering, without rewriting files.

Piece file names are fixed by the range and table, so a retried task (or a re-run after a crash) writes the same
files again. The folder is removed once the batch is published (`drop_stage`); a re-run of an unpublished batch
keeps using the manifest of the files that are there.

Data files: Parquet files written straight into a Delta table's folder by whoever holds the rows (a bootstrap
reader thread, a Spark executor), described by a small manifest (a dict per file: the add action's fields), and
committed later, by the one process that commits, from the manifests alone (DeltaRsEngine.append_files). A file
written but never committed is not part of the table (Delta readers follow the log only; VACUUM removes it).
Names are random, so a retried writer never clobbers a committed file. Their statistics: numRecords and nullCount
for every column, minValues/maxValues for integer and date columns (what a key-range merge needs to skip files),
nothing where truncation rules would apply (text, timestamps, decimals).
"""

from __future__ import annotations

import datetime as dt
import json
import os
import posixpath
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from typing import Any
from urllib.parse import quote

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.fs as pafs
import pyarrow.parquet as pq

SEQ_COLUMN = "_seq"  # binlake.lake.engines.base.SEQ
SEQ_FILE_SHIFT = 40  # binlake.lake.current.SEQ_FILE_SHIFT (current imports history; this module stays below both)
STAGING = "_binlake/staging"
DATE = "_commit_date"  # binlake.lake.history.PARTITION_BY: a piece of one commit date leaves it out of its file


def stage_root(lake: str, pipeline: str, batch: int) -> str:
    """The batch's staging folder as a location both pyarrow (lake_fs) and Spark read: a URI for object stores,
    an absolute path for local lakes."""
    root = lake if "://" in lake else os.path.abspath(lake)
    return f"{root.rstrip('/')}/{STAGING}/{pipeline}/{batch}"


def _fs(location: str) -> tuple[pafs.FileSystem, str]:
    if "://" in location:
        return pafs.FileSystem.from_uri(location)
    return pafs.LocalFileSystem(), location


def piece_location(stage: str, piece: dict) -> str:
    return f"{stage.rstrip('/')}/{piece['path']}"


def _seqs(table: pa.Table) -> pa.ChunkedArray:
    return pc.add(pc.shift_left(table.column("_file_seq").cast(pa.int64()), SEQ_FILE_SHIFT),
                  table.column("_pos").cast(pa.int64()))


def write_piece(stage: str, table_name: str, file_seq: int, start: int, n: int, rows: pa.Table,
                keys: list[str] | None = None, codecs: ColumnCodecs | None = None) -> dict:
    """Write one piece (rows of one table and schema version of one range) and return its manifest entry. With
    the table's `keys`, the entry also says how many of its updates changed the key (`moved_keys`, moved_keys()).
    `codecs`: the table's ColumnCodecs, which learns from the pieces written which columns snappy pays for."""
    fs, root = _fs(stage)
    rel = f"{quote(table_name, safe='')}/{file_seq}-{start}-{n}.parquet"
    path = f"{root.rstrip('/')}/{rel}"
    fs.create_dir(posixpath.dirname(path), recursive=True)
    tmp = f"{path}.{uuid.uuid4().hex}.tmp"
    # Dictionary encoding only for binlake's metadata (repeated_columns): on row values it costs a third of the
    # write and doubles the read (pieces are read back once or twice); statistics only for the order columns.
    repeated = repeated_columns(rows.schema)
    date = _one_date(rows)
    if date is None:
        pq.write_table(rows, tmp, filesystem=fs, use_dictionary=repeated,
                       write_statistics=[c for c in ("_file_seq", "_pos") if c in rows.column_names])
    else:
        # Rows of one commit date: the piece is written as a history data file of that date would be (no
        # partition column, write_files' settings), so the history append can link it into the table as is.
        body = rows.drop_columns([DATE])
        _write_data_file(body, tmp, fs, repeated, codecs)
    fs.move(tmp, path)  # a retried task replaces the file whole
    seq = pc.min_max(_seqs(rows)).as_py() if rows.num_rows else {"min": 0, "max": 0}
    versions = rows.column("_schema_version")
    newest = pc.max(rows.column("_commit_ts")).as_py() if rows.num_rows else None
    out = {"path": rel, "rows": rows.num_rows, "bytes": fs.get_file_info(path).size,
           "version": versions[0].as_py() if rows.num_rows else None,
           "min_seq": seq["min"], "max_seq": seq["max"], "file_seq": file_seq, "start": start,
           "newest_commit_ts": newest.isoformat() if newest else None}
    if date is not None:
        out.update(commit_date=date.isoformat(), date_at=rows.column_names.index(DATE), stats=_stats(body))
    if keys:
        moved = moved_keys(rows, keys)
        if moved is not None:
            out["moved_keys"] = moved
    return out


def write_net(stage: str, piece: dict, rows: pa.Table) -> dict:
    """Write a piece's net changes (binlake.lake.current.merge_input of all its rows: one row per key with `_seq`
    and `_deleted`, the old keys' deletes of key-changing updates included) beside it, and name the file in the
    piece's manifest (`net`, `net_rows`, `net_bytes`). A merge that takes the whole piece reads these rows instead
    of the piece's (fewer rows, no `_before` image, nothing to reduce within the piece)."""
    fs, root = _fs(stage)
    rel = piece["path"][:-len(".parquet")] + ".net.parquet"
    path = f"{root.rstrip('/')}/{rel}"
    tmp = f"{path}.{uuid.uuid4().hex}.tmp"
    pq.write_table(rows, tmp, filesystem=fs, use_dictionary=False, write_statistics=[SEQ_COLUMN])
    fs.move(tmp, path)
    piece.update(net=rel, net_rows=rows.num_rows, net_bytes=fs.get_file_info(path).size)
    return piece


def net_pieces(pieces: list[dict], lo: int | None, hi: int | None) -> bool:
    """Whether a merge segment's pieces all have their net changes written (write_net) and lie wholly inside its
    bounds, so that their net files stand for them."""
    return bool(pieces) and all(p.get("net") and in_bounds_all(p, lo, hi) for p in pieces)


def net_location(stage: str, piece: dict) -> str:
    return f"{stage.rstrip('/')}/{piece['net']}"


def net_schema(stage: str, piece: dict) -> pa.Schema:
    fs, root = _fs(stage)
    return pq.read_schema(f"{root.rstrip('/')}/{piece['net']}", filesystem=fs)


def read_net(stage: str, piece: dict, columns: list[str] | None = None) -> pa.Table:
    fs, root = _fs(stage)
    with fs.open_input_file(f"{root.rstrip('/')}/{piece['net']}") as f:
        return pq.ParquetFile(f).read(columns=columns)


def moved_keys(rows: pa.Table, keys: list[str]) -> int | None:
    """How many update rows of a history piece changed their key (an old key field in `_before` that differs from
    the new one, nulls not counting): the rows from which a merge derives the old key's delete. None when it cannot
    be told here (the merge then looks at every update). A piece with none need not be read again for them (the
    delta-spark engine's merge_frame)."""
    names = rows.column_names
    if "_op" not in names or "_before" not in names or not rows.num_rows:
        return 0
    try:  # (masks over the piece's own chunks: no copy of its update rows)
        before = rows.column("_before")
        if not pa.types.is_struct(before.type):
            return None
        fields = {before.type.field(i).name for i in range(before.type.num_fields)}
        moved = None
        for k in keys:
            if k not in names or k not in fields:
                continue  # an old key field the image lacks reads as null: not a move
            differs = pc.fill_null(pc.not_equal(pc.struct_field(before, k), rows.column(k)), False)
            moved = differs if moved is None else pc.or_(moved, differs)
        if moved is None:
            return 0
        return int(pc.sum(pc.and_(pc.equal(rows.column("_op"), "update"), moved)).as_py() or 0)
    except (pa.ArrowException, TypeError, ValueError):
        return None


def _one_date(rows: pa.Table) -> dt.date | None:
    """The commit date of history rows that all have the same one (else None)."""
    if DATE not in rows.column_names or not rows.num_rows or not pa.types.is_date32(rows.schema.field(DATE).type):
        return None
    col = rows.column(DATE)
    if col.null_count:
        return None
    mm = pc.min_max(col).as_py()
    return mm["min"] if mm["min"] == mm["max"] else None


def _dated(data: pa.Table | pa.RecordBatch, piece: dict, columns: list[str] | None = None):
    """A piece's rows with their `_commit_date` (a piece of one commit date has it in its manifest, not its file),
    where the piece's rows had it or where `columns` put it."""
    date = piece.get("commit_date")
    if date is None or DATE in data.schema.names or (columns is not None and DATE not in columns):
        return data
    value = pa.repeat(pa.scalar(dt.date.fromisoformat(date), pa.date32()), data.num_rows)
    at = len(data.schema.names) if columns is not None else min(piece.get("date_at", 1 << 30), data.num_columns)
    cols, names = list(data.columns), list(data.schema.names)
    cols.insert(at, value)
    names.insert(at, DATE)
    out = pa.Table.from_arrays(cols, names=names) if isinstance(data, pa.Table) else \
        pa.RecordBatch.from_arrays(cols, names=names)
    return out.select(columns) if columns is not None else out


def _stored(piece: dict, columns: list[str] | None) -> list[str] | None:
    """The columns to read from a piece's file for `columns` (the commit date of a one-date piece is not there)."""
    if columns is None or not piece.get("commit_date"):
        return columns
    return [c for c in columns if c != DATE]


def write_aside(stage: str, table_name: str, file_seq: int, start: int, n: int, rows: pa.Table) -> dict:
    """Rows of a transaction still open, put aside until its commit gives their commit time (read_aside, then
    delete_piece): private to the decode task that wrote them, so an uncompressed Arrow IPC file, about a tenth of
    the CPU of a Parquet write and read."""
    fs, root = _fs(stage)
    rel = f"{quote(table_name, safe='')}/{file_seq}-{start}-{n}.arrow"
    path = f"{root.rstrip('/')}/{rel}"
    fs.create_dir(posixpath.dirname(path), recursive=True)
    with fs.open_output_stream(path) as sink, pa.ipc.new_file(sink, rows.schema) as writer:
        writer.write_table(rows)
    return {"path": rel, "rows": rows.num_rows}


def read_aside(stage: str, piece: dict) -> pa.Table:
    """A piece write_aside put aside; on a local stage memory-mapped (its rows not copied: the file may be deleted
    while they are in use, its pages stay readable until the table is released)."""
    fs, root = _fs(stage)
    path = f"{root.rstrip('/')}/{piece['path']}"
    if isinstance(fs, pafs.LocalFileSystem):
        with pa.memory_map(path) as source:
            return pa.ipc.open_file(source).read_all()
    with fs.open_input_file(path) as f:
        return pa.ipc.open_file(f).read_all()


def delete_piece(stage: str, piece: dict) -> None:
    fs, root = _fs(stage)
    fs.delete_file(f"{root.rstrip('/')}/{piece['path']}")


def in_bounds(piece: dict, lo: int | None, hi: int | None) -> bool:
    """Whether a piece may hold rows with lo <= seq < hi."""
    return (lo is None or piece["max_seq"] >= lo) and (hi is None or piece["min_seq"] < hi)


def seq_filter(lo: int | None, hi: int | None) -> pc.Expression | None:
    seq = pc.add(pc.shift_left(pc.field("_file_seq"), SEQ_FILE_SHIFT), pc.field("_pos"))
    out = None
    if lo is not None:
        out = seq >= lo
    if hi is not None:
        out = (seq < hi) if out is None else (out & (seq < hi))
    return out


def entry_pieces(info: dict) -> list[dict]:
    """The pieces of a batch entry that may hold rows inside its bounds."""
    lo, hi = info.get("seq_from"), info.get("seq_to")
    return [p for p in info.get("staged", []) if in_bounds(p, lo, hi)]


def _dataset(stage: str, piece: dict):
    import pyarrow.dataset as ds  # here, not at import: it imports pandas (0.3 CPU s for every process and
    # Spark worker that stages or writes data files without reading pieces back)

    fs, root = _fs(stage)
    return ds.dataset(f"{root.rstrip('/')}/{piece['path']}", format="parquet", filesystem=fs)


def scan_piece(stage: str, piece: dict, lo: int | None = None, hi: int | None = None,
               columns: list[str] | None = None) -> Iterator[pa.RecordBatch]:
    """The piece's rows within the bounds, streamed in record batches."""
    for b in _dataset(stage, piece).to_batches(columns=_stored(piece, columns), filter=seq_filter(lo, hi)):
        yield _dated(b, piece, columns)


def read_piece(stage: str, piece: dict, lo: int | None = None, hi: int | None = None,
               columns: list[str] | None = None) -> pa.Table:
    rows = _dataset(stage, piece).to_table(columns=_stored(piece, columns), filter=seq_filter(lo, hi))
    return _dated(rows, piece, columns)


def read_piece_keys(stage: str, piece: dict, lo: int | None, hi: int | None, columns: list[str],
                    keys: list[str]) -> pa.Table:
    """The piece's rows within the bounds: `columns`, and `_before` with only the `keys` fields read (a merge's
    input needs no more of the before image; the rest of it can be most of a piece)."""
    names = [*columns, *(f"_before.{k}" for k in keys)]
    if any("." in c for c in [*columns, *keys]):  # dotted names would be read as nested paths: read it all
        return read_piece(stage, piece, lo, hi, [*columns, "_before"])
    fs, root = _fs(stage)
    try:
        with fs.open_input_file(f"{root.rstrip('/')}/{piece['path']}") as f:
            rows = pq.ParquetFile(f).read(columns=names)
    except (KeyError, IndexError, ValueError, pa.ArrowInvalid):  # not the expected layout: the general read
        return read_piece(stage, piece, lo, hi, [*columns, "_before"])
    return rows if in_bounds_all(piece, lo, hi) else rows.filter(seq_filter(lo, hi))


def in_bounds_all(piece: dict, lo: int | None, hi: int | None) -> bool:
    """Whether every row of a piece has lo <= seq < hi."""
    return (lo is None or piece["min_seq"] >= lo) and (hi is None or piece["max_seq"] < hi)


def piece_schema(stage: str, piece: dict) -> pa.Schema:
    fs, root = _fs(stage)
    schema = pq.read_schema(f"{root.rstrip('/')}/{piece['path']}", filesystem=fs)
    if piece.get("commit_date") and DATE not in schema.names:
        schema = schema.insert(min(piece.get("date_at", 1 << 30), len(schema)), pa.field(DATE, pa.date32()))
    return schema


def unified_schema(stage: str, pieces: list[dict]) -> pa.Schema:
    """One schema for pieces of several schema versions (columns added by a version are null elsewhere)."""
    schemas = [piece_schema(stage, p) for p in pieces]
    return pa.unify_schemas(schemas, promote_options="permissive") if len(schemas) > 1 else schemas[0]


def read_entry(stage: str, info: dict) -> pa.Table:
    """A batch entry's history rows (in memory: the in-process stages and small tables)."""
    lo, hi = info.get("seq_from"), info.get("seq_to")
    pieces = entry_pieces(info)
    parts = [read_piece(stage, p, lo, hi) for p in pieces]
    nonempty = [t for t in parts if t.num_rows] or parts[:1]
    if not nonempty:
        raise ValueError(f"no staged history rows for {info.get('database')}.{info.get('table')}")
    return nonempty[0] if len(nonempty) == 1 else pa.concat_tables(nonempty, promote_options="permissive")


def entry_reader(stage: str, info: dict, schema: pa.Schema | None = None) -> pa.RecordBatchReader:
    """A batch entry's history rows streamed under one schema (history appends without the rows in memory):
    `schema`, else the pieces' unified one."""
    lo, hi = info.get("seq_from"), info.get("seq_to")
    pieces = entry_pieces(info)
    schema = schema or unified_schema(stage, pieces)

    def batches() -> Iterator[pa.RecordBatch]:
        for p in pieces:
            for b in scan_piece(stage, p, lo, hi):
                if b.num_rows:
                    yield _conform(b, schema)

    return pa.RecordBatchReader.from_batches(schema, batches())


def _conform(batch: pa.RecordBatch, schema: pa.Schema) -> pa.RecordBatch:
    cols = [batch.column(f.name).cast(f.type) if f.name in batch.schema.names else pa.nulls(batch.num_rows, f.type)
            for f in schema]
    return pa.RecordBatch.from_arrays(cols, schema=schema)


def slot_facts(stage: str, pieces: list[dict], lo: int | None, hi: int | None) -> tuple[dict[str, int], str | None]:
    """Rows per operation and the schema version of the last change within the bounds, streamed."""
    counts: dict[str, int] = {}
    last: tuple[int, str | None] | None = None
    for p in pieces:
        if not in_bounds(p, lo, hi):
            continue
        for b in scan_piece(stage, p, lo, hi, ["_op", "_file_seq", "_pos"]):
            if not b.num_rows:
                continue
            for r in pa.table(b).group_by("_op").aggregate([("_op", "count")]).to_pylist():
                counts[r["_op"]] = counts.get(r["_op"], 0) + r["_op_count"]
            top = pc.max(_seqs(pa.table(b))).as_py()
            if last is None or top > last[0]:
                last = (top, p["version"])
    return counts, (last[1] if last else None)


# Merge inputs of pieces this process wrote (an in-process ingest: binlake.lake.decode_task), kept so the merge
# need not read back what was just written: piece location -> (key names, the piece's merge input). Bounded by
# MERGE_INPUT_BYTES (later pieces are read back as usual); an entry is taken once, and dropped with its stage.
MERGE_INPUT_BYTES = 128 << 20
_merge_inputs: dict[str, tuple[list[str], pa.Table]] = {}


def merge_input_room() -> bool:
    """Whether the merge inputs kept are still under the budget."""
    return sum(t.nbytes for _k, t in _merge_inputs.values()) < MERGE_INPUT_BYTES


def keep_merge_input(stage: str, piece: dict, keys: list[str], rows: pa.Table) -> bool:
    """Keep a written piece's merge input (binlake.lake.current.merge_input of all its rows) for take_merge_input,
    if it fits the budget."""
    if sum(t.nbytes for _k, t in _merge_inputs.values()) + rows.nbytes > MERGE_INPUT_BYTES:
        return False
    _merge_inputs[piece_location(stage, piece)] = (list(keys), rows)
    return True


def merge_inputs_kept(stage: str, pieces: list[dict], keys: list[str]) -> bool:
    """Whether the merge input of every one of these pieces is kept (keep_merge_input) with these key names."""
    return all(_merge_inputs.get(piece_location(stage, p), (None,))[0] == keys for p in pieces)


def take_merge_input(stage: str, piece: dict, keys: list[str]) -> pa.Table | None:
    """The merge input kept for a piece of this stage with these key names (None: read the piece)."""
    kept = _merge_inputs.pop(piece_location(stage, piece), None)
    return kept[1] if kept is not None and kept[0] == keys else None


def forget_merge_inputs(stage: str) -> None:
    """Drop the merge inputs kept for a stage's pieces (its batch is merged by an engine that reduces the pieces
    itself, or the stage goes)."""
    prefix = stage.rstrip("/") + "/"
    for location in [loc for loc in _merge_inputs if loc.startswith(prefix)]:
        del _merge_inputs[location]


def net_bucket_folder(stage: str, table_name: str, segment: int) -> tuple[pafs.FileSystem, str]:
    """The folder of a staged segment's net-change buckets (binlake.lake.netbuckets) and its filesystem."""
    fs, root = _fs(stage)
    return fs, f"{root.rstrip('/')}/_net/{quote(table_name, safe='')}/{segment}"


def drop_stage(stage: str) -> None:
    forget_merge_inputs(stage)
    fs, root = _fs(stage)
    if fs.get_file_info(root).type == pafs.FileType.Directory:
        fs.delete_dir(root)


@dataclass
class StagedSegment:
    """One merge segment of a staged table (the rows of one schema version run, binlake.lake.current) left where it
    is: an engine that computes merge input itself (delta-spark: executors read the pieces, reduce them to one
    row per key and merge) takes it in place of an Arrow table. `schema` is the merge input's (the current
    table's columns, `_seq`, `_deleted`); `changes` evolve the rows forward when the segment is a backfill."""

    stage: str
    pieces: list[dict]
    version: str | None
    lo: int | None  # first seq (inclusive)
    hi: int | None  # last seq (exclusive)
    table_map: Any  # the version's TableMap (columns, key)
    schema: pa.Schema  # the merge input's schema (after `changes`)
    keys: list[str]  # the version's key: one row per key after the reduction
    changes: list = field(default_factory=list)  # ColumnChanges evolving the reduced rows (a backfill)
    base_schema: pa.Schema | None = None  # the merge input's schema before `changes` (None: `schema`)

    @property
    def num_rows(self) -> int:
        """An upper bound of the rows (0 only when the segment surely has none)."""
        return sum(p["rows"] for p in self.pieces if in_bounds(p, self.lo, self.hi))

    def above(self, floor: int) -> StagedSegment:
        """The segment without changes older than `floor`."""
        return replace(self, lo=floor if self.lo is None else max(self.lo, floor))

    def evolved(self, changes: list, schema: pa.Schema) -> StagedSegment:
        """The segment's rows evolved forward by `changes` (a backfill), then cast to `schema`."""
        return replace(self, changes=[*self.changes, *changes], schema=schema,
                       base_schema=self.base_schema or self.schema)


def staged_segments(stage: str, info: dict, versions: dict, merge_schema) -> list[tuple]:
    """A staged batch entry's merge segments in binlog order: (version, TableMap, StagedSegment), from its schema
    version runs. `merge_schema(tm)` is the merge input's schema of a version."""
    lo, hi = info.get("seq_from"), info.get("seq_to")
    out = []
    for version, first, last in info.get("runs", []):
        a = first if lo is None else max(first, lo)
        b = last + 1 if hi is None else min(last + 1, hi)
        if a >= b:
            continue
        tm = versions[version]
        pieces = [p for p in entry_pieces(info) if p["version"] == version and in_bounds(p, a, b)]
        schema = merge_schema(tm)
        keys = [tm.columns[i].key for i in (tm.primary_key or [])]
        out.append((version, tm, StagedSegment(stage, pieces, version, a, b, tm, schema, keys)))
    return out


# Data files written straight into a Delta table's folder (see the module's docstring).

COMPRESSION = "snappy"
COMPRESSION_NONE = "none"


class ColumnCodecs:
    """Which columns of one table's data files snappy pays for, learned from the files written: a column whose
    snappy pages kept more than KEEP of their plain size (hashes, random tokens, already compressed bytes) is written
    uncompressed in the files that follow, where snappy cost its CPU for nothing much (on hex MD5 text: 77% of that
    column's encoding time, for 11% of its size). Every MEASURE-th file is written with snappy throughout again,
    so a column whose values change their nature is measured anew. Only the codec per column chunk changes (a
    Parquet file may mix them; every reader decodes both); values and types are the same either way. A write from
    another thread may use a choice a moment old: it is advice, never a value."""

    KEEP = 0.875  # snappy must save an eighth of a column's bytes to be used
    MEASURE = 8

    def __init__(self) -> None:
        self.names: list[str] = []  # the measured file's columns
        self.codecs: dict[str, str] = {}  # its leaf columns' codecs ("a", "s.x" in a struct s)
        self.files = 0

    def measuring(self) -> bool:
        """Whether the next file is one written with snappy throughout, to be measured."""
        return self.files % self.MEASURE == 0

    def compression(self, names: list[str]) -> str | dict[str, str]:
        if names != self.names or COMPRESSION_NONE not in self.codecs.values():
            return COMPRESSION
        return self.codecs

    def learn(self, meta: pq.FileMetaData, measured: bool) -> None:
        """Count a file written; from one written to be measured, take its columns' sizes."""
        self.files += 1
        if not measured:
            return
        sizes: dict[str, list[int]] = {}
        for g in range(meta.num_row_groups):
            group = meta.row_group(g)
            for c in range(group.num_columns):
                col = group.column(c)
                both = sizes.setdefault(col.path_in_schema, [0, 0])
                both[0] += col.total_compressed_size
                both[1] += col.total_uncompressed_size
        self.codecs = {path: COMPRESSION_NONE if packed > self.KEEP * plain else COMPRESSION
                       for path, (packed, plain) in sizes.items()}
        self.names = meta.schema.to_arrow_schema().names


def local_lake(path: str) -> bool:
    """Whether a table path is on the local file system (where pyarrow writes without storage options)."""
    return "://" not in str(path) or str(path).startswith("file://")


def _table_fs(table_path: str) -> tuple[pafs.FileSystem, str]:
    path = str(table_path)
    if path.startswith("file://"):
        path = path[len("file://"):]
    return pafs.LocalFileSystem(), os.path.abspath(path)


def _partition_text(value) -> str | None:
    if value is None:
        return None
    if isinstance(value, dt.date):
        return value.isoformat()
    return str(value)


def _stats(data: pa.Table) -> str:
    nulls, mins, maxs = {}, {}, {}
    for name, col in zip(data.column_names, data.columns, strict=True):
        typ = col.type
        if pa.types.is_struct(typ):
            continue
        nulls[name] = col.null_count
        if col.null_count == len(col) or not (pa.types.is_integer(typ) or pa.types.is_date32(typ)):
            continue
        mm = pc.min_max(col).as_py()
        lo, hi = mm["min"], mm["max"]
        if pa.types.is_date32(typ):
            lo, hi = lo.isoformat(), hi.isoformat()
        mins[name], maxs[name] = lo, hi
    return json.dumps({"numRecords": data.num_rows, "minValues": mins, "maxValues": maxs, "nullCount": nulls})


# binlake's history metadata holding one value per rows event (or per batch, or per file): text and integers
# (binlake.lake.history.META_FIELDS; not `_row`, one value per row)
REPEATED = frozenset({"_op", "_binlog_file", "_gtid", "_schema_version", "_file_seq", "_pos", "_sub", "_txn_pos",
                      "_commit_ts", "_batch_id"})


def repeated_columns(schema: pa.Schema) -> list[str]:
    """The history columns dictionary-encoded in Parquet: binlake's metadata that repeats (REPEATED: runs of one
    value, files a tenth smaller, read back about 40% faster, written at the same cost); never a table's own
    columns, whatever their names."""
    return [f.name for f in schema if f.name in REPEATED]


def _write_data_file(rows: pa.Table, path: str, fs: pafs.FileSystem, dictionary: list[str],
                     codecs: ColumnCodecs | None) -> None:
    """Write `rows` as one Parquet data file of a table: dictionary encoding for the `dictionary` columns only,
    statistics for all but text, binary and nested ones, snappy on every column or where `codecs` (the table's
    ColumnCodecs, told of the file written) finds that it pays."""
    measuring = codecs is not None and codecs.measuring()
    written: list[pq.FileMetaData] = []
    pq.write_table(rows, path, filesystem=fs, use_dictionary=dictionary,
                   compression=codecs.compression(rows.column_names) if codecs is not None and not measuring
                   else COMPRESSION,
                   write_statistics=_statistics_columns(rows.schema), metadata_collector=written)
    if codecs is not None:
        codecs.learn(written[0], measuring)


def _statistics_columns(schema: pa.Schema) -> list[str]:
    """Columns whose Parquet column statistics (min/max per row group) are written: all but text, binary and
    nested ones (min/max of text costs a tenth of the file's encoding and is truncated anyway; Delta's own
    statistics above skip them too)."""
    return [f.name for f in schema if not (pa.types.is_string(f.type) or pa.types.is_large_string(f.type)
                                           or pa.types.is_binary(f.type) or pa.types.is_large_binary(f.type)
                                           or pa.types.is_nested(f.type))]


def _single_key(data: pa.Table, partition_by: list[str]) -> dict | None:
    """The partition key when every row has the same one (each column's min equals its max, or all of it is
    null), else None: a min/max scan costs a hundredth of the group-by that finds the keys otherwise."""
    if not data.num_rows:
        return None
    key = {}
    for name in partition_by:
        col = data.column(name)
        if col.null_count == len(col):
            key[name] = None
            continue
        if col.null_count or not (pa.types.is_integer(col.type) or pa.types.is_temporal(col.type)
                                  or pa.types.is_string(col.type)):
            return None
        bounds = pc.min_max(col).as_py()
        if bounds["min"] != bounds["max"]:
            return None
        key[name] = bounds["min"]
    return key


def write_files(table_path: str, data: pa.Table, partition_by: list[str] | None = None,
                dictionary: list[str] | None = None, codecs: ColumnCodecs | None = None) -> list[dict]:
    """Write `data` as Parquet files in the table folder (one per partition value); their manifests.

    Dictionary encoding only for the `dictionary` columns (repeated values such as binlake's metadata): on row
    values it costs about as much as the rest of the encoding and, with snappy, saves little or nothing. Snappy on
    every column, or where `codecs` (the table's ColumnCodecs) finds that it pays."""
    fs, root = _table_fs(table_path)
    parts = [((), data)]
    if partition_by:
        single = _single_key(data, partition_by)
        keys = [single] if single is not None else \
            data.select(partition_by).group_by(partition_by).aggregate([]).to_pylist()
        parts = []
        for key in keys:
            if len(keys) == 1:  # one value (a bootstrap part): no filtered copy of the rows
                parts.append((tuple((n, _partition_text(key[n])) for n in partition_by), data))
                break
            mask = None
            for name in partition_by:
                value = key[name]
                test = pc.is_null(data.column(name)) if value is None else pc.equal(data.column(name), value)
                mask = test if mask is None else pc.and_(mask, test)
            parts.append((tuple((n, _partition_text(key[n])) for n in partition_by), data.filter(mask)))
    out = []
    for values, rows in parts:
        folder = "/".join(f"{quote(n, safe='')}={'__HIVE_DEFAULT_PARTITION__' if v is None else quote(v, safe='')}"
                          for n, v in values)
        file_rows = rows.drop_columns(list(partition_by or []))
        rel = (folder + "/" if folder else "") + f"part-00000-{uuid.uuid4()}-c000.snappy.parquet"
        fs.create_dir(f"{root}/{folder}" if folder else root, recursive=True)
        _write_data_file(file_rows, f"{root}/{rel}", fs, [c for c in dictionary or () if c in file_rows.column_names],
                         codecs)
        out.append({"path": rel, "size": fs.get_file_info(f"{root}/{rel}").size,
                    "partition_values": dict(values), "modification_time": int(time.time() * 1000),
                    "stats": _stats(file_rows)})
    return out


def linkable(stage: str, piece: dict, lo: int | None, hi: int | None, schema: pa.Schema) -> bool:
    """Whether a piece can become a data file of a history table of `schema` partitioned by commit date as it is
    (link_pieces): one commit date, every row inside the entry's bounds, the table's very columns, local."""
    return bool(piece.get("commit_date") and piece.get("stats") is not None and in_bounds_all(piece, lo, hi)
                and "://" not in stage and piece_schema(stage, piece) == schema)


def link_pieces(table_path: str, stage: str, pieces: list[dict]) -> list[dict]:
    """Put pieces into a local table folder partitioned by commit date as data files (hard links, else copies:
    the pieces stay readable until the batch ends); their manifests as write_files gives them."""
    fs, root = _table_fs(table_path)
    out = []
    for p in pieces:
        folder = f"{quote(DATE, safe='')}={quote(p['commit_date'], safe='')}"
        rel = f"{folder}/part-00000-{uuid.uuid4()}-c000.snappy.parquet"
        fs.create_dir(f"{root}/{folder}", recursive=True)
        src, dst = f"{stage.rstrip('/')}/{p['path']}", f"{root}/{rel}"
        try:
            os.link(src, dst)
        except OSError:  # another file system, or no hard links there
            fs.copy_file(src, dst)
        out.append({"path": rel, "size": p["bytes"], "partition_values": {DATE: p["commit_date"]},
                    "modification_time": int(time.time() * 1000), "stats": p["stats"]})
    return out
