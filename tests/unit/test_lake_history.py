"""History rows from decoded row batches: the fast (whole-column Arrow) conversion and the careful one must give
the same values and counts, and the per-event metadata must be repeated exactly per row."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal
from itertools import pairwise

import pyarrow as pa
import pytest

from binlake.binlog.constants import ColumnType as T
from binlake.binlog.decoder import RowBatch
from binlake.binlog.rows import JsonPatch
from binlake.binlog.tablemap import Column, TableMap
from binlake.binlog.values import ABSENT
from binlake.lake.convert import ConversionStats, to_arrow
from binlake.lake.current import in_order, segments
from binlake.lake.history import CommittedBatch, history_table

BINARY = 63  # the binary collation id
UTF8 = 45


def col(index: int, typ: int, meta: int = 0, name: str = "c", signed: bool | None = True, **kw) -> Column:
    return Column(index, typ, meta, True, signed, kw.pop("collation", UTF8), name, **kw)


@pytest.mark.parametrize(("column", "values", "expected", "counted"), [
    (col(0, T.LONG), [1, None, -5], [1, None, -5], {}),
    (col(0, T.LONGLONG, signed=False), [2**64 - 1, None], [Decimal(2**64 - 1), None], {}),
    (col(0, T.NEWDECIMAL, 10 << 8 | 2), [Decimal("1.50"), None], [Decimal("1.50"), None], {}),
    (col(0, T.NEWDECIMAL, 40 << 8 | 1), [Decimal("12.5")], ["12.5"], {}),
    (col(0, T.VARCHAR, 40), ["a", None, "é"], ["a", None, "é"], {}),
    (col(0, T.VARCHAR, 40), [None, None], [None, None], {}),
    (col(0, T.VARCHAR, 40), ["a", b"\xff\xfe"], ["a", "\ufffd\ufffd"], {"undecodable_text:t.c": 1}),
    (col(0, T.VARCHAR, 40), ["a", ABSENT, "b"], ["a", None, "b"], {"absent:t.c": 1}),
    (col(0, T.BLOB, 2, collation=BINARY), [b"\x00\xff", "x", None], [b"\x00\xff", b"x", None], {}),
    (col(0, T.ENUM, enum_labels=["a", "b"]), ["a", 3, None], ["a", "3", None], {"unlabeled_enum:t.c": 1}),
    (col(0, T.DATE), ["2024-02-29", "0000-00-00", "2024-00-10", None],
     [dt.date(2024, 2, 29), None, None, None], {"zero_date:t.c": 2}),
    (col(0, T.DATETIME2, 3), ["2024-01-01 10:00:00.125", ABSENT],
     [dt.datetime(2024, 1, 1, 10, 0, 0, 125000), None], {"absent:t.c": 1}),
    (col(0, T.TIMESTAMP2, 0), ["2024-01-01 10:00:00"], [dt.datetime(2024, 1, 1, 10, tzinfo=dt.UTC)], {}),
    (col(0, T.DOUBLE), [0.1, None], [0.1, None], {}),
])
def test_to_arrow_values_and_counts(column, values, expected, counted) -> None:
    stats = ConversionStats()
    for seq in (values, tuple(values)):  # columns arrive as lists (history) or tuples
        stats.clear()
        assert to_arrow(seq, column, "t.c", stats).to_pylist() == expected
        assert dict(stats) == counted


def test_to_arrow_json_patch_is_text_and_counted() -> None:
    stats = ConversionStats()
    out = to_arrow(['{"a": 1}', JsonPatch([])], col(0, T.JSON), "t.j", stats).to_pylist()
    assert out == ['{"a": 1}', '{"json_diff": []}']
    assert stats == {"json_patch:t.j": 1}


def test_to_arrow_errors_still_raise() -> None:
    with pytest.raises(pa.ArrowInvalid):  # a value that does not fit the column is an error, not a null
        to_arrow([1, 300], col(0, T.TINY), "t.c", ConversionStats())
    with pytest.raises(pa.ArrowInvalid):
        to_arrow([Decimal("1.555")], col(0, T.NEWDECIMAL, 5 << 8 | 2), "t.c", ConversionStats())


def _table() -> TableMap:
    tm = TableMap(1, "db", "t", [col(0, T.LONG, name="id"), col(1, T.VARCHAR, 40, name="v")], primary_key=[0])
    tm.schema_version = "v1"
    return tm


def test_history_metadata_repeats_per_event() -> None:
    tm = _table()
    day = 1_700_006_400  # 2023-11-15T00:00:00Z
    ins = RowBatch("f.000003", 100, 90, 0, day - 1, "0-1-7", tm, "insert", [(None, [1, "a"]), (None, [2, "b"])])
    upd = RowBatch("f.000003", 200, 90, 7, day, None, tm, "update", [([1, "a"], [1, "c"])])
    dele = RowBatch("f.000003", 300, 300, 0, day, "0-1-8", tm, "delete", [([2, "b"], None)])
    stats = ConversionStats()
    table = history_table([CommittedBatch(ins, day - 1, 3), CommittedBatch(upd, day + 0.5, 3),
                           CommittedBatch(dele, day, 3)], 42, stats)
    rows = table.to_pylist()
    assert [(r["id"], r["v"], r["_op"], r["_pos"], r["_row"], r["_sub"]) for r in rows] == [
        (1, "a", "insert", 100, 0, 0), (2, "b", "insert", 100, 1, 0), (1, "c", "update", 200, 0, 7),
        (2, "b", "delete", 300, 0, 0)]
    assert [r["_before"] for r in rows] == [None, None, {"id": 1, "v": "a"}, None]
    assert [r["_commit_ts"] for r in rows] == [
        dt.datetime(2023, 11, 14, 23, 59, 59, tzinfo=dt.UTC)] * 2 + [
        dt.datetime(2023, 11, 15, 0, 0, 0, 500000, tzinfo=dt.UTC), dt.datetime(2023, 11, 15, tzinfo=dt.UTC)]
    assert [r["_commit_date"] for r in rows] == [dt.date(2023, 11, 14)] * 2 + [dt.date(2023, 11, 15)] * 2
    assert [r["_gtid"] for r in rows] == ["0-1-7", "0-1-7", None, "0-1-8"]
    assert {(r["_binlog_file"], r["_file_seq"], r["_batch_id"], r["_schema_version"]) for r in rows} == {
        ("f.000003", 3, 42, "v1")}
    assert [r["_txn_pos"] for r in rows] == [90, 90, 90, 300]
    assert table.schema.field("_row").type == pa.int32()
    assert not stats


def test_segments_sort_only_when_needed_and_cut_at_versions() -> None:
    t = pa.table({"_file_seq": [1, 1, 1, 2, 1], "_pos": [5, 5, 6, 1, 9], "_sub": [0, 0, 0, 0, 0],
                  "_row": [0, 1, 0, 0, 0], "_schema_version": ["a", "a", None, "b", "a"]})
    assert not in_order(t)
    assert in_order(t.slice(0, 4))
    assert in_order(pa.table({"_file_seq": [1, 1], "_pos": [5, 5], "_sub": [0, 0], "_row": [1, 1]}))
    assert [(s.version, s.rows.column("_pos").to_pylist()) for s in segments(t)] == [
        ("a", [5, 5]), (None, [6]), ("a", [9]), ("b", [1])]
    assert list(segments(t.slice(0, 0))) == []


def test_before_images_spread_over_rows_and_missing_ones_are_null() -> None:
    tm = _table()
    upd = RowBatch("f.000001", 10, 10, 0, 0, None, tm, "update",
                   [([1, "a"], [1, "b"]), (None, [2, "c"]), ([3, "d"], [3, "e"])])
    ins = RowBatch("f.000001", 20, 20, 0, 0, None, tm, "insert", [(None, [4, "f"])])
    upd2 = RowBatch("f.000001", 30, 30, 0, 0, None, tm, "update", [([4, "f"], [5, "g"])])
    rows = history_table([CommittedBatch(b, 0, 1) for b in (upd, ins, upd2)], 0, ConversionStats()).to_pylist()
    assert [r["_before"] for r in rows] == [{"id": 1, "v": "a"}, None, {"id": 3, "v": "d"}, None,
                                            {"id": 4, "v": "f"}]
    assert [(r["id"], r["v"]) for r in rows] == [(1, "b"), (2, "c"), (3, "e"), (4, "f"), (5, "g")]


def test_rows_of_the_wrong_width_are_refused() -> None:
    tm = _table()
    bad = RowBatch("f.000001", 10, 10, 0, 0, None, tm, "insert", [(None, [1, "a"]), (None, [2])])
    with pytest.raises(ValueError, match="do not all have the table map's 2 columns"):
        history_table([CommittedBatch(bad, 0, 1)], 0, ConversionStats())


def test_merge_input_keeps_each_keys_last_change_with_key_changes() -> None:
    from binlake.lake.current import merge_input

    tm = _table()
    batches = [
        RowBatch("f.000001", 10, 10, 0, 0, None, tm, "insert", [(None, [1, "a"]), (None, [5, "e"])]),
        RowBatch("f.000001", 20, 20, 0, 0, None, tm, "update", [([1, "a"], [2, "a"]), ([5, "e"], [5, "f"])]),
        RowBatch("f.000001", 30, 30, 0, 0, None, tm, "update", [([2, "a"], [3, "b"])]),
        RowBatch("f.000001", 40, 40, 0, 0, None, tm, "insert", [(None, [1, "again"])]),
        RowBatch("f.000001", 50, 50, 0, 0, None, tm, "delete", [([5, "f"], None)]),
    ]
    history = history_table([CommittedBatch(b, 0, 1) for b in batches], 0, ConversionStats())
    out = merge_input(history, tm).sort_by("id").to_pylist()
    assert [(r["id"], r["v"], r["_deleted"], r["_seq"] & 0xFFFF) for r in out] == [
        (1, "again", False, 40),  # its key-change tombstone (pos 20) lost to the later insert
        (2, None, True, 30),  # moved on to 3: a tombstone
        (3, "b", False, 30),
        (5, "f", True, 50)]  # deletes carry the deleted row


def test_merge_input_moves_composite_keys_changed_in_any_column() -> None:
    """An update changing one column of a composite key deletes the old key, as a single-column move does;
    chains, swaps through a spare key and moves back inside one segment keep each key's last change."""
    from binlake.lake.current import merge_input

    tm = TableMap(1, "db", "t", [col(0, T.LONG, name="a"), col(1, T.LONG, name="b"), col(2, T.VARCHAR, 40, name="v")],
                  primary_key=[0, 1])
    tm.schema_version = "v1"
    batches = [
        RowBatch("f.000001", 10, 10, 0, 0, None, tm, "insert",
                 [(None, [1, 1, "x"]), (None, [1, 2, "y"]), (None, [2, 1, "z"]), (None, [3, 3, "w"])]),
        RowBatch("f.000001", 20, 20, 0, 0, None, tm, "update", [([1, 1, "x"], [1, 9, "x"])]),  # second column
        RowBatch("f.000001", 30, 30, 0, 0, None, tm, "update", [([2, 1, "z"], [7, 1, "z"])]),  # first column
        # swap (1,2) and (1,9) through the spare key (1,0), all in one event
        RowBatch("f.000001", 40, 40, 0, 0, None, tm, "update",
                 [([1, 2, "y"], [1, 0, "y"]), ([1, 9, "x"], [1, 2, "x"]), ([1, 0, "y"], [1, 9, "y"])]),
        RowBatch("f.000001", 50, 50, 0, 0, None, tm, "update", [([3, 3, "w"], [4, 4, "w"])]),
        RowBatch("f.000001", 60, 60, 0, 0, None, tm, "update", [([4, 4, "w"], [3, 3, "w2"])]),  # and back
    ]
    history = history_table([CommittedBatch(b, 0, 1) for b in batches], 0, ConversionStats())
    out = merge_input(history, tm).to_pylist()
    got = {(r["a"], r["b"]): (r["v"], r["_deleted"], r["_seq"] & 0xFFFF) for r in out}
    assert got == {(1, 1): (None, True, 20), (1, 9): ("y", False, 40), (2, 1): (None, True, 30),
                   (7, 1): ("z", False, 30), (1, 2): ("x", False, 40), (1, 0): (None, True, 40),
                   (3, 3): ("w2", False, 60), (4, 4): (None, True, 60)}


@pytest.mark.parametrize("name", ["osheroff__mysql-binlog-connector-java/mysql-bin.checksum-crc32",
                                  "zalora__binlog-parser/gtid-fixtures/mysql-bin.01"])
def test_history_of_events_converted_together_equals_history_event_by_event(name: str) -> None:
    """The decoder converts small rows events together (ColumnarPairs.span); history_table takes the columns of such
    events that follow each other in one slice. The table must equal the one built from each event's own columns."""
    from binlake.binlog.columnar import ColumnarPairs
    from binlake.binlog.decoder import BinlogDecoder
    from tests.conftest import SHARED_BINLOGS

    path = SHARED_BINLOGS / name
    if not path.exists():
        pytest.skip(f"fixture binlogs not found at {SHARED_BINLOGS}")

    def by_table() -> dict[str, list[CommittedBatch]]:
        out: dict[str, list[CommittedBatch]] = {}
        for item in BinlogDecoder().decode_files_batched([path]):
            if type(item) is RowBatch:
                out.setdefault(item.table.qualified_name, []).append(CommittedBatch(item, item.ts, 1))
        return out

    grouped, single = by_table(), by_table()
    runs = 0
    for items in single.values():
        spans = [i.batch.pairs.span() for i in items if type(i.batch.pairs) is ColumnarPairs]
        runs += sum(1 for a, b in pairwise(spans) if a is not None and b is not None and a[1] is b[1])
        for i in items:  # each event's own columns, cut from its group's (span() is None from then on)
            if type(i.batch.pairs) is ColumnarPairs:
                assert i.batch.pairs.after is not None or i.batch.pairs.before is not None
                assert i.batch.pairs.span() is None
    assert runs > 0  # some events were converted together and follow each other
    for table, items in grouped.items():
        one, each = history_table(items, 7, ConversionStats()), history_table(single[table], 7, ConversionStats())
        assert one.num_rows == sum(len(i.batch.pairs) for i in items) > 0
        assert one.equals(each), table


INTS = [("TINYINT", -128, 127), ("TINYINT UNSIGNED", 0, 255), ("SMALLINT", -2**15, 2**15 - 1),
        ("SMALLINT UNSIGNED", 0, 2**16 - 1), ("INT", -2**31, 2**31 - 1), ("INT UNSIGNED", 0, 2**32 - 1),
        ("BIGINT", -2**63, 2**63 - 1), ("BIGINT UNSIGNED", 0, 2**64 - 1), ("MEDIUMINT", -2**23, 2**23 - 1),
        ("MEDIUMINT UNSIGNED", 0, 2**24 - 1), ("FLOAT", None, None), ("DOUBLE", None, None)]


def _number(rng, sql: str, lo: int | None, hi: int | None):
    """A value of the column type: an integer at a bound or between them, or a float (FLOAT: one float32 holds)."""
    import struct

    if lo is not None:
        return rng.choice((lo, hi, rng.randrange(lo, hi + 1)))
    value = rng.choice((0.0, -0.0, 1.5, rng.uniform(-1e30, 1e30), rng.uniform(-1, 1) * 10 ** rng.randrange(-30, 30)))
    return struct.unpack("<f", struct.pack("<f", value))[0] if sql == "FLOAT" else value


def _int_binlog(seed: int) -> bytes:
    """Every integer type at its bounds and FLOAT and DOUBLE, NOT NULL and nullable (NULL in some events only), in
    single-row
    transactions (converted in groups) and statements of many rows; inserts, updates (some columns unchanged) and
    deletes; a text column beside them."""
    import io
    import random

    from binlake.testing.binlog_writer import BinlogWriter, column

    rng = random.Random(seed)
    grouped = seed % 2 == 0  # the NOT NULL columns first (runs of them beside the key), stray NULLs in a few
    spec = [(sql, lo, hi, nullable) for nullable in (False, True) for sql, lo, hi in INTS] if grouped else \
        [(sql, lo, hi, nullable) for sql, lo, hi in INTS for nullable in (False, True)]
    cols = [column("BIGINT", "k", 0, nullable=False)]
    cols += [column(sql, f"c{i}", i + 1, nullable=nullable) for i, (sql, _lo, _hi, nullable) in enumerate(spec)]
    cols.append(column("VARCHAR(20) CHARACTER SET utf8mb4", "s", len(cols)))

    def image(n: int, nulls: bool) -> list:
        row = [_number(rng, sql, lo, hi) for sql, lo, hi, _nullable in spec]
        if nulls:
            stray = grouped and n // 1000 % 40 == 3  # a few transactions only: the others' runs stay whole
            row = [None if (nullable and rng.random() < 0.3) or (stray and rng.random() < 0.05) else v
                   for v, (_sql, _lo, _hi, nullable) in zip(row, spec, strict=True)]
        return [n, *row, f"s{n}é"]

    out = io.BytesIO()
    with BinlogWriter(out, row_metadata=rng.choice(["FULL", "MINIMAL"]), timestamp=1_700_000_000) as w:
        tm = w.define_table(7, "db", "ints", cols, primary_key=[0])
        if grouped:  # rows that hold NULL in a NOT NULL column, as no server writes them (the decoder still reads them)
            w._tables[7].nullable = [i > 0 for i in range(len(cols))]
        for n in range(300):
            count = 1 if rng.random() < 0.7 else rng.randrange(2, 300)
            rows = [image(n * 1000 + i, rng.random() < 0.3) for i in range(count)]
            with w.transaction(timestamp=1_700_000_000 + n) as tx:
                op = rng.choice(("insert", "insert", "update", "delete"))
                if op == "insert":
                    tx.insert(tm, rows)
                elif op == "delete":
                    tx.delete(tm, rows)
                else:
                    changed = [[*r[:3], *image(r[0], False)[3:5], *r[5:]] for r in rows]  # two columns changed
                    tx.update(tm, list(zip(rows, changed, strict=True)))
    return out.getvalue()


@pytest.mark.parametrize("seed", [1, 2, 3, 4])
def test_history_from_integer_arrays_equals_history_from_ints(seed: int) -> None:
    """DecodeOptions.int_arrays (what the lake's decode tasks run with): integer columns (MEDIUMINT included) come as
    numpy arrays of their stored width, as NullableArray where some images of an event hold NULL, and runs of NOT
    NULL ones are cut from one field per image (a NULL there read image by image); the history built from them
    equals the one built from Python ints (values, types, conversion counts), and the row tuples still hold Python
    ints and None."""
    import io

    import numpy as np

    from binlake.binlog.columnar import NullableArray
    from binlake.binlog.decoder import BinlogDecoder, DecodeOptions, integer_arrays

    data = _int_binlog(seed)

    def decoded(arrays: bool) -> tuple[list[CommittedBatch], int]:
        opts = DecodeOptions(int_arrays=arrays)
        items, found, masked = [], 0, 0
        for item in BinlogDecoder(opts).decode_stream_batched(io.BytesIO(data), "ints.000001"):
            if type(item) is RowBatch:
                for side in (item.pairs.before, item.pairs.after):
                    found += sum(type(c) is np.ndarray for c in side or ())
                    masked += sum(type(c) is NullableArray and not c.valid.all() for c in side or ())
                items.append(CommittedBatch(item, item.ts, 1))
        return items, found, masked

    plain, none, none_masked = decoded(False)
    arrays, found, masked = decoded(True)
    assert none == none_masked == 0 and found > 0 and masked > 0
    for at in range(0, len(plain), 37):  # history pieces of varied extents, events converted together included
        stats_a, stats_b = ConversionStats(), ConversionStats()
        a = history_table(plain[at : at + 37], 3, stats_a)
        b = history_table(arrays[at : at + 37], 3, stats_b)
        assert a.schema == b.schema and a.equals(b) and stats_a == stats_b
    got = [(i.batch.op, [tuple(image) if image is not None else None for image in pair])
           for i in arrays for pair in i.batch.pairs]
    assert got == [(i.batch.op, [tuple(image) if image is not None else None for image in pair])
                   for i in plain for pair in i.batch.pairs]
    assert all(type(v) in (int, float, str) or v is None
               for i in arrays[:50] for pair in i.batch.pairs for image in pair if image for v in image)
    with integer_arrays():
        assert DecodeOptions().int_arrays
    assert not DecodeOptions().int_arrays


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_np_array_with_a_validity_mask_equals_pyarrow_masked_array(seed: int) -> None:
    """convert.np_array (numeric and boolean numpy arrays to Arrow from their buffers) equals pa.array with
    mask=~valid for every numeric width and signedness, booleans, no NULL, all NULL and mixed, and for a
    non-contiguous array."""
    import numpy as np
    import pyarrow as pa

    from binlake.lake.convert import np_array

    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 300))
    for dtype in (np.int8, np.uint8, np.int16, np.uint16, np.int32, np.uint32, np.int64, np.uint64, np.float32,
                  np.float64, np.bool_):
        values = rng.integers(0, 100, n).astype(dtype)
        for valid in (None, np.ones(n, bool), np.zeros(n, bool), rng.random(n) < 0.7):
            got = np_array(values, valid=valid)
            want = pa.array(values) if valid is None else pa.array(values, mask=~valid)
            assert got.type == want.type and got.equals(want), (dtype, valid)
            assert got.null_count == (0 if valid is None else int((~valid).sum()))
    strided = np.arange(2 * n, dtype=np.int64)[::2]
    assert np_array(strided).equals(pa.array(strided))


def test_history_and_net_buckets_do_not_import_numpy_masked_arrays() -> None:
    """Building nullable integer history columns and cutting net buckets leaves numpy.ma unimported (its import
    costs about 15 ms of CPU per ingest process)."""
    import subprocess
    import sys

    probe = """
import sys
import numpy as np
from binlake.lake.convert import np_array
from binlake.lake.netbuckets import range_bounds
np_array(np.arange(10, dtype=np.int32), valid=np.arange(10) % 3 > 0)
np_array(np.arange(10) % 2 == 0)
assert list(range_bounds([np.array([5, 1, 1, 9, 9, 3])], 4)) == [1, 5, 9]
print("numpy.ma" in sys.modules)
"""
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout.strip()
    assert out == "False"
