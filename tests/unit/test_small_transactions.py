"""Rows events of many small transactions are converted in groups across their commits (decoder.GROUP_ITEMS): the
items come out in binlog order with exactly the values, commit records and errors of the row-at-a-time path."""

from __future__ import annotations

import io
import json
import random
from decimal import Decimal

import pytest

from binlake.binlog import decoder, rows
from binlake.binlog.decoder import BinlogDecoder, DecodeOptions, RowBatch
from binlake.binlog.errors import BinlogError
from binlake.binlog.records import EventRecord
from binlake.testing.binlog_writer import BinlogWriter, column

MIXED = [("DECIMAL(12,2) NOT NULL", "d"), ("DATETIME(3)", "t"), ("VARCHAR(40) CHARACTER SET utf8mb4", "name"),
         ("INT", "n"), ("DATE", "day")]
TEXT = [("VARCHAR(30) CHARACTER SET latin1", "s"), ("BLOB", "b"), ("INT NOT NULL", "k"), ("JSON", "doc"),
        ("MEDIUMBLOB", "mb"), ("LONGTEXT", "lt")]


def _value(rng: random.Random, sql: str):
    if rng.random() < 0.15 and "NOT NULL" not in sql:
        return None
    if sql.startswith("DECIMAL"):
        return Decimal(rng.randrange(-10**11, 10**11)).scaleb(-2)
    if sql.startswith("DATETIME"):
        return (f"{rng.randrange(1000, 9999)}-{rng.randrange(1, 13):02d}-{rng.randrange(1, 29):02d} "
                f"{rng.randrange(24):02d}:{rng.randrange(60):02d}:{rng.randrange(60):02d}.{rng.randrange(1000):03d}")
    if sql.startswith("DATE"):
        return f"{rng.randrange(1000, 9999)}-{rng.randrange(1, 13):02d}-{rng.randrange(1, 29):02d}"
    if sql.startswith(("VARCHAR", "LONGTEXT")):
        return "".join(rng.choice("abcxyzé ü€ß") for _ in range(rng.randrange(0 if "latin1" not in sql else 1, 25)))
    if sql.startswith(("BLOB", "MEDIUMBLOB")):
        return rng.randbytes(rng.randrange(0, 300))
    if sql.startswith("JSON"):
        return json.dumps({"k": rng.randrange(1000), "v": [rng.randrange(10**6) / 64, "x" * rng.randrange(5)]})
    return rng.randrange(-2**31, 2**31)


def _write(seed: int, bad_txn: int | None = None) -> bytes:
    """Single-row transactions (and a few larger ones) on two tables, in a seeded random order; with `bad_txn`,
    that transaction inserts a DECIMAL whose digit group is out of range."""
    rng = random.Random(seed)
    out = io.BytesIO()
    with BinlogWriter(out, row_metadata=rng.choice(["FULL", "MINIMAL"]), timestamp=1_700_000_000) as w:
        tables = []
        for tid, (name, spec) in enumerate((("mixed", MIXED), ("text", TEXT)), start=10):
            cols = [column(sql.removesuffix(" NOT NULL"), cname, i, nullable="NOT NULL" not in sql) for i, (sql, cname) in enumerate(spec)]
            tables.append((w.define_table(tid, "db", name, cols), spec))
        for n in range(400):
            tm, spec = tables[0] if rng.random() < 0.6 else tables[1]
            count = 1 if rng.random() < 0.9 else rng.randrange(2, 40)
            images = [[_value(rng, sql) for sql, _ in spec] for _ in range(count)]
            with w.transaction(timestamp=1_700_000_000 + n) as tx:
                if n == bad_txn:
                    tm, spec = tables[0]
                    image = bytearray(w.image(tm, [_value(rng, sql) for sql, _ in spec]))
                    nb = (len(spec) + 7) // 8
                    image[nb : nb + 6] = bytes([0x8A, 0, 0, 0, 1, 5])  # 10 in DECIMAL(12,2)'s 1-digit group
                    tx.images(tm, "insert", [bytes(image)])
                    continue
                op = rng.choice(["insert", "insert", "update", "delete"])
                if op == "insert":
                    tx.insert(tm, images)
                elif op == "delete":
                    tx.delete(tm, images)
                else:
                    tx.update(tm, [(b, [_value(rng, sql) for sql, _ in spec]) for b in images])
    return out.getvalue()


def _items(data: bytes, columnar: bool, monkeypatch: pytest.MonkeyPatch) -> tuple[list, tuple | None]:
    """Every item the decoder yields (rows with their values, commit records with their summaries), in order, and
    the error that ended the read."""
    monkeypatch.setattr(rows, "COLUMNAR", columnar)
    out: list = []
    try:
        for item in BinlogDecoder(DecodeOptions(commits=True)).decode_stream_batched(io.BytesIO(data), "small"):
            if type(item) is RowBatch:
                pairs = [tuple(None if image is None else list(image) for image in pair) for pair in item.pairs]
                out.append(("rows", item.pos, item.txn_pos, item.table.qualified_name, item.op, pairs))
            else:
                assert type(item) is EventRecord
                s = item.info.get("summary")
                out.append((item.kind, item.pos, item.txn_pos, item.gtid, s.rows if s else None,
                            s.tables if s else None))
    except BinlogError as exc:
        return out, (type(exc).__name__, exc.pos)
    return out, None


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_small_transactions_decode_as_row_at_a_time(seed: int, monkeypatch: pytest.MonkeyPatch) -> None:
    data = _write(seed)
    groups: list[int] = []
    convert = decoder.convert_pending
    monkeypatch.setattr(decoder, "convert_pending", lambda group: (groups.append(len(group)), convert(group)))
    fast = _items(data, True, monkeypatch)
    assert max(groups) > 3  # events of several single-row transactions converted together
    reference = _items(data, False, monkeypatch)
    assert fast == reference
    items, error = fast
    assert error is None
    assert sum(1 for i in items if i[0] == "commit") == 400
    assert sum(len(i[5]) for i in items if i[0] == "rows") > 400


@pytest.mark.parametrize("seed", [4, 5])
def test_bad_value_in_a_later_transaction_reported_at_its_event(seed: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """Everything before the bad event (rows and commits of earlier transactions) comes out, then its error."""
    bad = random.Random(seed).randrange(50, 350)
    data = _write(seed, bad_txn=bad)
    fast = _items(data, True, monkeypatch)
    assert fast == _items(data, False, monkeypatch)
    items, error = fast
    assert error is not None and error[0] == "CorruptEvent"
    assert sum(1 for i in items if i[0] == "commit") == bad
    assert all(i[1] < error[1] for i in items)


@pytest.mark.parametrize("seed", [6, 7])
def test_table_id_remapped_between_transactions_decodes_with_its_new_map(seed: int,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """Rows events whose header bytes (table id, flags, column count, bitmaps) repeat while the id maps another
    table (a server reuses ids after a cache flush or an ALTER): each event decodes with the map of its own
    transaction, never the previous transaction's."""
    rng = random.Random(seed)
    specs = [[("INT", "a"), ("BIGINT", "b")], [("VARCHAR(40) CHARACTER SET utf8mb4", "s"), ("DATE", "d")],
             [("DECIMAL(12,2)", "x"), ("DATETIME(3)", "t")]]
    out = io.BytesIO()
    written = []
    with BinlogWriter(out, row_metadata=rng.choice(["FULL", "MINIMAL"]), timestamp=1_700_000_000) as w:
        k = 0
        for n in range(60):
            if n % 5 == 0:  # runs of transactions on one table, then the id goes to a (maybe) other one
                k = rng.randrange(len(specs))
            spec = specs[k]
            cols = [column(sql, name, i) for i, (sql, name) in enumerate(spec)]
            tm = w.define_table(10, "db", f"t{k}", cols)
            values = [_value(rng, sql) for sql, _ in spec]
            with w.transaction(timestamp=1_700_000_000 + n) as tx:
                tx.insert(tm, [values])
            written.append((f"db.t{k}", values))
    data = out.getvalue()
    fast = _items(data, True, monkeypatch)
    assert fast == _items(data, False, monkeypatch)
    items, error = fast
    assert error is None
    got = [(i[3], i[5][0][1]) for i in items if i[0] == "rows"]
    assert [name for name, _ in got] == [name for name, _ in written]
    assert len({name for name, _ in written}) > 1
    for (name, row), (_, values) in zip(got, written, strict=True):
        assert len(row) == len(values), name
