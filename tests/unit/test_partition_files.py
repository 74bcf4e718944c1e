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
