"""Damaged binlogs: every outcome is a clean decode with every change, or a typed error naming file and position.

Targeted cases for each kind of damage the fuzz run (below) found, then the seeded fuzz run itself."""

from __future__ import annotations

import io
import zlib

import pytest

from binlake.binlog.decoder import BinlogDecoder, DecodeOptions
from binlake.binlog.errors import CorruptEvent
from binlake.binlog.stream import EventStream
from binlake.testing.binlog_damage import bounded_outcome
from tests.conftest import SHARED_BINLOGS

GTID_FILE = SHARED_BINLOGS / "Meituan-Dianping__MyFlash/haha.000041"  # 7 single-row inserts, CRC32, ROTATE
NO_FIXTURES = pytest.mark.skipif(not GTID_FILE.exists(), reason=f"fixture binlogs not found at {SHARED_BINLOGS}")


def events(data: bytes) -> list:
    return list(EventStream(io.BytesIO(data), "x", allow_truncated=True))


def fix_crc(data: bytearray, pos: int, size: int) -> None:
    data[pos + size - 4 : pos + size] = zlib.crc32(data[pos : pos + size - 4]).to_bytes(4, "little")


def decode(data: bytes, **opts) -> list:
    return list(BinlogDecoder(DecodeOptions(**opts)).decode_stream(io.BytesIO(data), "damaged.bin"))


@NO_FIXTURES
@pytest.mark.parametrize("which", ["first", "all"])
def test_rows_event_listing_no_column_is_corrupt_not_a_hang(which: str) -> None:
    data = bytearray(GTID_FILE.read_bytes())
    rows = [ev for ev in events(bytes(data)) if ev.type == 30]  # WRITE_ROWS_V2
    assert len(rows) == 7
    for ev in rows[:1] if which == "first" else rows:
        ncols = data[ev.pos + 19 + 10]
        assert ncols == 2 and data[ev.pos + 19 + 11] == 0xFF
        data[ev.pos + 19 + 11] = 0  # columns-present bitmap: no column
        fix_crc(data, ev.pos, ev.size)
    # Bounded: before the fix this looped forever, allocating gigabytes.
    result, _, error = bounded_outcome(bytes(data), timeout=120)
    assert result == "typed" and error.startswith("CorruptEvent"), error
    with pytest.raises(CorruptEvent) as err:
        decode(bytes(data))
    assert err.value.pos == rows[0].pos and "no column" in str(err.value)
