"""History rows built from the columnar decoder's columns (no row tuples) equal those built from row-at-a-time
row images, on a real MariaDB workload of every column type (NULLs, updates, deletes, full and partial images)."""

from __future__ import annotations

import random

import pyarrow as pa
import pytest

from binlake.binlog import rows
from binlake.binlog.columnar import ColumnarPairs
from binlake.binlog.decoder import BinlogDecoder, DecodeOptions, RowBatch
from binlake.binlog.vectorized import DecimalColumn, TextColumn
from binlake.lake.decode_task import decode_range
from binlake.testing.workload import run_all_types_workload


def _histories(files: list, start: tuple[str, int], db: str, columnar: bool, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(rows, "COLUMNAR", columnar)
    tables, conversions, counts = {}, {}, {}
    for seq, path in enumerate(files):
        begin = start[1] if path.name == start[0] else None
        res = decode_range(str(path), path.name, seq, begin, None, 7, databases={db})
        for name, tr in res.tables.items():
            tables.setdefault(name, []).extend(tr.history)
        conversions.update(res.conversions)
        counts.update(res.counts)
    return tables, conversions, counts


@pytest.mark.parametrize("row_image", ["FULL", "MINIMAL"])
def test_history_from_columns_equals_history_from_rows(mariadb_full, row_image: str,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    db = f"history_columnar_{row_image}".lower()
    with mariadb_full.connect() as conn, conn.cursor() as cur:
        cur.execute(f"DROP DATABASE IF EXISTS `{db}`")
        cur.execute(f"CREATE DATABASE `{db}`")
        cur.execute("SHOW MASTER STATUS")
        start = tuple(cur.fetchone()[:2])
    with mariadb_full.connect(db) as conn:
        with conn.cursor() as cur:
            cur.execute(f"SET SESSION binlog_row_image='{row_image}'")
        workload = run_all_types_workload(conn, "t", random.Random(f"history-{row_image}"), rows=150)
    files = mariadb_full.flush_logs()
    files = files[[f.name for f in files].index(start[0]):]

    # The fast path really hands columns over on this workload.
    monkeypatch.setattr(rows, "COLUMNAR", True)
    batches = [b for b in BinlogDecoder(DecodeOptions(start_position=start[1], databases={db})).decode_files_batched(
        files) if type(b) is RowBatch]
    assert any(isinstance(b.pairs, ColumnarPairs) for b in batches)
    assert {b.op for b in batches} == {"insert", "update", "delete"}
    handed = {type(c) for b in batches if isinstance(b.pairs, ColumnarPairs) for c in (b.pairs.after or b.pairs.before)}
    # DECIMAL columns went to the lake as digit groups, temporal and UTF-8 text as text buffers, not Python objects
    assert {DecimalColumn, TextColumn} <= handed

    fast, fast_conv, fast_counts = _histories(files, start, db, True, monkeypatch)
    slow, slow_conv, slow_counts = _histories(files, start, db, False, monkeypatch)
    assert sum(fast_counts.values()) == sum(workload.values())
    assert fast_counts == slow_counts
    assert fast_conv == slow_conv
    if row_image == "MINIMAL":
        assert any(k.startswith("absent:") for k in fast_conv)  # partial images went through the columns too
    assert fast.keys() == slow.keys() and fast
    for name in fast:
        for a, b in zip(fast[name], slow[name], strict=True):
            assert a.schema == b.schema
            assert a.to_pylist() == b.to_pylist(), name
        before = sum(t.column("_before").null_count < t.num_rows for t in fast[name])
        assert before  # update rows carry their before images


def test_large_transactions_convert_before_their_commit(mariadb_full, monkeypatch: pytest.MonkeyPatch) -> None:
    """A transaction with more rows than decode_task.FLUSH_ROWS is converted to Arrow before it commits (its
    rows never pile up as Python values) and given its commit time at the commit: the history equals the one
    built with every transaction converted after its commit."""
    from binlake.lake import decode_task

    db = "history_open_txn"
    with mariadb_full.connect() as conn, conn.cursor() as cur:
        cur.execute(f"DROP DATABASE IF EXISTS `{db}`")
        cur.execute(f"CREATE DATABASE `{db}`")
        cur.execute("SHOW MASTER STATUS")
        start = tuple(cur.fetchone()[:2])
    with mariadb_full.connect(db) as conn:
        workload = run_all_types_workload(conn, "t", random.Random("open-txn"), rows=120)
        with conn.cursor() as cur:  # one more table, changed in a transaction of several statements
            cur.execute("CREATE TABLE u (id INT PRIMARY KEY, v VARCHAR(20))")
            cur.execute("BEGIN")
            cur.execute("INSERT INTO u SELECT seq, CONCAT('v', seq) FROM seq_1_to_300")
            cur.execute("UPDATE u SET v = CONCAT(v, '!') WHERE id % 3 = 0")
            cur.execute("DELETE FROM u WHERE id % 7 = 0")
            cur.execute("COMMIT")
    files = mariadb_full.flush_logs()
    files = files[[f.name for f in files].index(start[0]):]
    whole, _, whole_counts = _histories(files, start, db, True, monkeypatch)
    monkeypatch.setattr(decode_task, "FLUSH_ROWS", 7)
    early, _, early_counts = _histories(files, start, db, True, monkeypatch)
    assert early_counts == whole_counts and sum(early_counts.values()) >= sum(workload.values()) + 300
    assert early.keys() == whole.keys() == {f"{db}.t", f"{db}.u"}
    for name in whole:
        a = pa.concat_tables(early[name]).to_pylist()
        b = pa.concat_tables(whole[name]).to_pylist()
        assert a == b, name
