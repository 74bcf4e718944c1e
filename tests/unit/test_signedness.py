"""Which columns the SIGNEDNESS bitmap has a bit for: MySQL's numeric types (integers, FLOAT, DOUBLE, DECIMAL) or
MariaDB's (those plus YEAR). Tables of every numeric type in seeded random orders, written with MySQL and with
MariaDB server versions, FULL and MINIMAL metadata, decode to the values written on both decoder paths; the bitmap's
bit count is checked from the TABLE_MAP bytes independently of the decoder."""

from __future__ import annotations

import random
from decimal import Decimal

import pytest

from binlake.binlog import rows
from binlake.binlog.constants import ColumnType as T
from binlake.binlog.constants import EventType as E
from binlake.binlog.decoder import BinlogDecoder
from binlake.binlog.records import RowChange
from binlake.binlog.stream import EventStream
from binlake.testing.binlog_writer import BinlogWriter, column

TYPES = [
    ("tinyint", -128, 127), ("tinyint unsigned", 0, 255), ("smallint", -32768, 32767),
    ("smallint unsigned", 0, 65535), ("mediumint", -(1 << 23), (1 << 23) - 1), ("mediumint unsigned", 0, (1 << 24) - 1),
    ("int", -(1 << 31), (1 << 31) - 1), ("int unsigned", 0, (1 << 32) - 1), ("bigint", -(1 << 63), (1 << 63) - 1),
    ("bigint unsigned", 0, (1 << 64) - 1), ("year", 1901, 2155), ("bit(7)", 0, 127), ("bit(64)", 0, (1 << 64) - 1),
    ("decimal(12,3)", Decimal("-999999999.999"), Decimal("999999999.999")),
    ("decimal(12,3) unsigned", Decimal("0.000"), Decimal("999999999.999")),
    ("float", -3.0e38, 3.0e38), ("double", -1.5e308, 1.5e308), ("double unsigned", 0.0, 1.5e308),
]


def _write(path, version: str, metadata: str, orders: list[list[int]]) -> list[list[list]]:
    written = []
    with BinlogWriter(str(path), server_version=version, row_metadata=metadata, timestamp=1_700_000_000) as w:
        for t, order in enumerate(orders):
            cols = [column(TYPES[i][0], f"c{n}", n) for n, i in enumerate(order)]
            tm = w.define_table(100 + t, "db", f"t{t}", cols)
            values = [[TYPES[i][1] for i in order], [TYPES[i][2] for i in order]]
            values.append([(TYPES[i][1] if (n + t) % 2 else TYPES[i][2]) for n, i in enumerate(order)])
            for row in values:
                for n, i in enumerate(order):
                    if TYPES[i][0] == "float":
                        row[n] = float(rows.struct.unpack("<f", rows.struct.pack("<f", row[n]))[0])
            with w.transaction() as tx:
                tx.insert(tm, values)
            written.append(values)
    return written


def _signedness_fields(path) -> list[bytes]:
    """The SIGNEDNESS field of each TABLE_MAP, found with a minimal walk to the end of the null bitmap
    (independent of the decoder's TABLE_MAP parser; one-byte lengths suffice for these tables)."""
    out = []
    with open(path, "rb") as f:
        for ev in EventStream(f, "x"):
            if ev.type != E.TABLE_MAP:
                continue
            buf, off = ev.buf, ev.body + 8
            off += 1 + buf[off] + 1
            off += 1 + buf[off] + 1
            ncols = buf[off]
            off += 1 + ncols
            meta_len = buf[off]
            off += 1 + meta_len + (ncols + 7) // 8
            assert buf[off] == 1  # SIGNEDNESS comes first
            out.append(bytes(buf[off + 2 : off + 2 + buf[off + 1]]))
    return out


def _expected_field(order: list[int], mariadb: bool) -> bytes:
    """One bit per covered column, most significant first, set for UNSIGNED (MariaDB's YEAR is unsigned)."""
    bits = []
    for i in order:
        name = TYPES[i][0]
        if name.startswith("bit") or (name == "year" and not mariadb):
            continue
        bits.append(name == "year" or "unsigned" in name)
    out = bytearray((len(bits) + 7) // 8)
    for n, b in enumerate(bits):
        if b:
            out[n // 8] |= 0x80 >> (n % 8)
    return bytes(out)


@pytest.mark.parametrize("version", ["8.0.36-binlake", "10.11.19-MariaDB-log"])
@pytest.mark.parametrize("metadata", ["FULL", "MINIMAL"])
def test_signedness_covers_the_flavours_numeric_types(tmp_path, monkeypatch, version: str, metadata: str) -> None:
    rng = random.Random(f"{version}-{metadata}")
    orders = []
    for _ in range(8):
        order = list(range(len(TYPES)))
        rng.shuffle(order)
        orders.append(order[: rng.randint(3, len(order))])
    path = tmp_path / "bin.000001"
    written = _write(path, version, metadata, orders)
    mariadb = "MariaDB" in version
    assert _signedness_fields(path) == [_expected_field(order, mariadb) for order in orders]
    for columnar in (True, False):
        monkeypatch.setattr(rows, "COLUMNAR", columnar)
        changes = [c for c in BinlogDecoder().decode_files([path]) if isinstance(c, RowChange)]
        got = [[list(c.after) for c in changes if c.table.table == f"t{t}"] for t in range(len(orders))]
        assert got == written
        for c in changes:
            for col in c.table.columns:
                if col.type in (T.TINY, T.SHORT, T.INT24, T.LONG, T.LONGLONG, T.NEWDECIMAL, T.DOUBLE):
                    assert col.signed is ("unsigned" not in TYPES[orders[int(c.table.table[1:])][col.index]][0])
