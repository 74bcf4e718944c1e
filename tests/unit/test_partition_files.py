"""staging.write_files: one Parquet file per partition value, found by a min/max scan when the rows share one
value (a bootstrap part, most binlog batches) and by a group-by otherwise; both give the same files and rows."""

from __future__ import annotations

import datetime as dt
import random

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from binlake.lake import staging


def _files(root, data: pa.Table, partition_by: list[str]) -> dict:
    """Partition values -> the rows written for them (sorted by id), read back from the files."""
    out = {}
    for entry in staging.write_files(str(root), data, partition_by):
        rows = pq.read_table(root / entry["path"]).sort_by("id")
        key = tuple(sorted(entry["partition_values"].items()))
        assert key not in out  # one file per partition value
        assert rows.num_rows == len(rows.column("id"))
        out[key] = rows.column("id").to_pylist()
    return out


def _expected(data: pa.Table, partition_by: list[str]) -> dict:
    out: dict = {}
    for row in data.to_pylist():
        key = tuple(sorted((n, None if row[n] is None else (row[n].isoformat() if isinstance(row[n], dt.date)
                                                             else str(row[n]))) for n in partition_by))
        out.setdefault(key, []).append(row["id"])
    return {k: sorted(v) for k, v in out.items()}


@pytest.mark.parametrize("seed", range(6))
def test_partitioned_files_hold_each_row_once_under_its_values(tmp_path, seed) -> None:
    rng = random.Random(seed)
    n = rng.choice([1, 7, 500])
    day = dt.date(2024, 1, 1) + dt.timedelta(days=rng.randrange(1000))
    shape = ["one", "two", "nulls", "some-null", "two-columns", "text"][seed]
    dates = [day] * n
    other = None
    if shape == "two":
        dates = [day + dt.timedelta(days=rng.randrange(2)) for _ in range(n)]
    elif shape == "nulls":
        dates = [None] * n
    elif shape == "some-null":
        dates = [rng.choice([day, None]) for _ in range(n)]
    elif shape == "two-columns":
        other = [rng.choice([3, 3, 4]) if n > 1 else 3 for _ in range(n)]
    elif shape == "text":
        other = ["a b/c"] * n
    cols = {"id": pa.array(rng.sample(range(10 * n), n), pa.int64()), "d": pa.array(dates, pa.date32())}
    partition_by = ["d"]
    if other is not None:
        cols["p"] = pa.array(other)
        partition_by.append("p")
    data = pa.table(cols)
    got = _files(tmp_path / "t", data, partition_by)
    assert got == _expected(data, partition_by)
    assert sum(len(v) for v in got.values()) == n


def test_no_rows_no_files(tmp_path) -> None:
    data = pa.table({"id": pa.array([], pa.int64()), "d": pa.array([], pa.date32())})
    assert staging.write_files(str(tmp_path / "t"), data, ["d"]) == []


def _codecs(path) -> dict:
    """Each leaf column's compression codec in a Parquet file."""
    meta = pq.ParquetFile(path).metadata
    return {meta.row_group(0).column(c).path_in_schema: meta.row_group(0).column(c).compression
            for c in range(meta.num_columns)}


@pytest.mark.parametrize("seed", [1, 2])
def test_columns_snappy_does_not_shrink_are_written_uncompressed_between_measured_files(tmp_path, seed) -> None:
    """ColumnCodecs: the first file (and every MEASURE-th) is written with snappy throughout and measured; the files
    between leave uncompressed the columns snappy did not shrink by an eighth (random bytes, hex digests), keep
    snappy on the others, and hold the same rows."""
    rng = random.Random(seed)
    codecs = staging.ColumnCodecs()
    written = []
    for f in range(codecs.MEASURE + 2):
        n = rng.randint(200, 600)
        data = pa.table({
            "id": pa.array(range(f * 1000, f * 1000 + n), pa.int64()),
            "noise": pa.array([rng.randbytes(rng.randint(8, 40)) for _ in range(n)], pa.binary()),
            "digest": pa.array([f"{rng.getrandbits(128):032x}" for _ in range(n)]),
            "words": pa.array([rng.choice(["alpha beta ", "gamma delta "]) * rng.randint(3, 9) for _ in range(n)]),
            "s": pa.array([{"x": rng.randbytes(16), "y": "constant text " * 4} for _ in range(n)],
                          pa.struct([("x", pa.binary()), ("y", pa.string())])),
        })
        [entry] = staging.write_files(str(tmp_path / "t"), data, codecs=codecs)
        path = tmp_path / "t" / entry["path"]
        assert pq.read_table(path).equals(data)
        written.append(_codecs(path))
    for f, got in enumerate(written):
        measured = f % codecs.MEASURE == 0
        assert got["words"] == got["s.y"] == "SNAPPY", f
        for name in ("noise", "digest", "s.x"):
            assert got[name] == ("SNAPPY" if measured else "UNCOMPRESSED"), (f, name)


def test_only_binlakes_repeating_metadata_is_dictionary_encoded(tmp_path) -> None:
    """History files dictionary-encode binlake's metadata that repeats per event (text and integers), never a
    table's own columns, even ones whose names start with an underscore, nor `_row` (one value per row)."""
    n = 2000
    data = pa.table({
        "id": pa.array(range(n), pa.int64()),
        "_note": pa.array([f"user {i % 3}" for i in range(n)]),  # a table column named like metadata
        "_op": pa.array(["insert"] * n),
        "_gtid": pa.array(["0-1-7"] * n),
        "_pos": pa.array([4 + i // 100 for i in range(n)], pa.int64()),
        "_row": pa.array([i % 100 for i in range(n)], pa.int32()),
        "_batch_id": pa.array([3] * n, pa.int64()),
    })
    assert staging.repeated_columns(data.schema) == ["_op", "_gtid", "_pos", "_batch_id"]
    (entry,) = staging.write_files(str(tmp_path), data, None, staging.repeated_columns(data.schema))
    meta = pq.ParquetFile(tmp_path / entry["path"]).metadata.row_group(0)
    dictionary = {meta.column(i).path_in_schema for i in range(meta.num_columns)
                  if meta.column(i).dictionary_page_offset is not None}
    assert dictionary == {"_op", "_gtid", "_pos", "_batch_id"}
    assert pq.read_table(tmp_path / entry["path"]).equals(data)
