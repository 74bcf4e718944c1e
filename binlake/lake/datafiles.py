"""Parquet data files written straight into a Delta table's folder by whoever holds the rows (a bootstrap reader
thread, a Spark executor), described by a small manifest (a dict per file: the add action's fields), and
committed later, by the one process that commits, from the manifests alone (DeltaRsEngine.append_files).

A file written but never committed is not part of the table (Delta readers follow the log only; VACUUM removes
it). Names are random, so a retried writer never clobbers a committed file.

Statistics: numRecords and nullCount for every column, minValues/maxValues for integer and date columns (what a
key-range merge needs to skip files), nothing where truncation rules would apply (text, timestamps, decimals).
"""

from __future__ import annotations

import datetime as dt
import json
import os
import time
import uuid
from urllib.parse import quote

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.fs as pafs
import pyarrow.parquet as pq

COMPRESSION = "snappy"


def local_lake(path: str) -> bool:
    """Whether a table path is on the local file system (where pyarrow writes without storage options)."""
    return "://" not in str(path) or str(path).startswith("file://")


def _fs(table_path: str) -> tuple[pafs.FileSystem, str]:
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


def write_files(table_path: str, data: pa.Table, partition_by: list[str] | None = None,
                dictionary: list[str] | None = None) -> list[dict]:
    """Write `data` as Parquet files in the table folder (one per partition value); their manifests.

    Dictionary encoding only for the `dictionary` columns (repeated values such as binlake's metadata): on row
    values it costs about as much as the rest of the encoding and, with snappy, saves little or nothing."""
    fs, root = _fs(table_path)
    parts = [((), data)]
    if partition_by:
        keys = data.select(partition_by).group_by(partition_by).aggregate([]).to_pylist()
        parts = []
        for key in keys:
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
        pq.write_table(file_rows, f"{root}/{rel}", filesystem=fs, compression=COMPRESSION,
                       use_dictionary=[c for c in dictionary or () if c in file_rows.column_names])
        out.append({"path": rel, "size": fs.get_file_info(f"{root}/{rel}").size,
                    "partition_values": dict(values), "modification_time": int(time.time() * 1000),
                    "stats": _stats(file_rows)})
    return out
