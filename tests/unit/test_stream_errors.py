"""Framing under hostile reads and damaged bytes: complete events only, typed errors naming file and position."""

from __future__ import annotations

import gzip
import io
import random
import zlib
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from binlake.binlog.constants import HEADER_LEN, EventType
from binlake.binlog.decoder import BinlogDecoder, DecodeOptions
from binlake.binlog.errors import (
    BinlogError,
    ChecksumMismatch,
    CorruptEvent,
    TruncatedFile,
    UnknownEvent,
)
from binlake.binlog.output import change_to_dict
from binlake.binlog.records import RowChange
from binlake.binlog.stream import END_IN_USE, EventStream
from tests.conftest import SHARED_BINLOGS

CRC_FILE = SHARED_BINLOGS / "osheroff__mysql-binlog-connector-java/mysql-bin.checksum-crc32"
NOCRC_FILE = SHARED_BINLOGS / "osheroff__mysql-binlog-connector-java/mysql-bin.checksum-none"
MULTI_TABLE = SHARED_BINLOGS / "zalora__binlog-parser/gtid-fixtures/mysql-bin.01"

pytestmark = pytest.mark.skipif(not CRC_FILE.exists(), reason=f"fixture binlogs not found at {SHARED_BINLOGS}")


class DribbleReader(io.RawIOBase):
    """A file object that returns 1..7 bytes per read, like a slow HTTP stream."""

    def __init__(self, data: bytes, seed: int = 7) -> None:
        self.data = data
        self.pos = 0
        self.rng = random.Random(seed)

    def readable(self) -> bool:
        return True

    def read(self, n: int = -1) -> bytes:
        if self.pos >= len(self.data):
            return b""
        k = self.rng.randint(1, 7)
        if n is not None and n >= 0:
            k = min(k, n)
        out = self.data[self.pos : self.pos + k]
        self.pos += len(out)
        return out


def decode_bytes(data: bytes, name: str = "test.bin", **opts) -> list:
    return list(BinlogDecoder(DecodeOptions(**opts)).decode_stream(io.BytesIO(data), name))


def events_of(data: bytes) -> list:
    return [(ev.pos, ev.type, ev.size) for ev in EventStream(io.BytesIO(data), "x")]


def with_crc(event: bytes) -> bytes:
    return event[:-4] + zlib.crc32(event[:-4]).to_bytes(4, "little")


def test_short_reads_yield_identical_output() -> None:
    data = MULTI_TABLE.read_bytes()
    whole = [change_to_dict(r) for r in BinlogDecoder().decode_stream(io.BytesIO(data), "f")]
    for seed in range(3):
        dribbled = [change_to_dict(r) for r in BinlogDecoder().decode_stream(DribbleReader(data, seed), "f")]
        assert dribbled == whole
    assert len(whole) == 10


def test_gzip_is_transparent(tmp_path: Path) -> None:
    data = CRC_FILE.read_bytes()
    gz = tmp_path / "mysql-bin.000001.gz"
    gz.write_bytes(gzip.compress(data))
    plain = [change_to_dict(r) for r in BinlogDecoder().decode_files([CRC_FILE])]
    packed = [change_to_dict(r) for r in BinlogDecoder().decode_files([gz])]
    assert [dict(p, file=None) for p in packed] == [dict(p, file=None) for p in plain]
    assert len(plain) > 0


def test_checksum_mismatch_names_file_and_event() -> None:
    data = bytearray(CRC_FILE.read_bytes())
    events = events_of(bytes(data))
    pos, _etype, _size = events[10]
    data[pos + HEADER_LEN + 2] ^= 0xFF
    with pytest.raises(ChecksumMismatch) as err:
        decode_bytes(bytes(data), "damaged.bin")
    assert err.value.pos == pos and err.value.file == "damaged.bin"
    assert "damaged.bin at position" in str(err.value)


MARIA_FILE = SHARED_BINLOGS / "mariadb-operator__mariadb-poc/domain_id_0/mariadb-repl-bin.000005"


@pytest.mark.parametrize("path", [CRC_FILE, MARIA_FILE], ids=lambda p: p.name)
def test_any_flipped_bit_in_an_events_body_or_checksum_names_that_event(path: Path) -> None:
    """Every event after the FORMAT_DESCRIPTION (GTID, TABLE_MAP, rows, XID, QUERY...: the decoder's fast paths and
    the others), a random bit of its body or CRC32 flipped: a ChecksumMismatch naming the file and that event's
    position, never a quiet read."""
    data = path.read_bytes()
    events = events_of(data)
    assert len(decode_bytes(data, "intact.bin", commits=True)) > 0
    rng = random.Random(path.name)
    sample = events[1:] if len(events) <= 120 else rng.sample(events[1:], 120)
    for pos, _etype, size in sample:
        damaged = bytearray(data)
        damaged[pos + rng.randrange(HEADER_LEN, size)] ^= 1 << rng.randrange(8)
        with pytest.raises(ChecksumMismatch) as err:
            decode_bytes(bytes(damaged), "damaged.bin", commits=True)
        assert err.value.pos == pos and err.value.file == "damaged.bin"
        assert f"damaged.bin at position {pos}" in str(err.value) and "\n" not in str(err.value)


def test_fde_checksum_is_verified_with_the_in_use_flag_cleared() -> None:
    fixture = SHARED_BINLOGS / "zalora__binlog-parser/mysql-bin.01"  # FDE in-use flag set, CRC32
    data = fixture.read_bytes()
    stream = EventStream(io.BytesIO(data), "f")
    list(stream)
    assert stream.in_use and stream.fde.has_crc
    damaged = bytearray(data)
    damaged[4 + 30] ^= 0x01  # inside the FDE's server version
    with pytest.raises(ChecksumMismatch) as err:
        list(EventStream(io.BytesIO(bytes(damaged)), "f"))
    assert err.value.pos == 4


def test_unknown_event_without_ignorable_flag_is_an_error() -> None:
    data = bytearray(CRC_FILE.read_bytes())
    pos, _etype, size = events_of(bytes(data))[3]
    data[pos + 4] = 99  # type code no server writes
    data[pos : pos + size] = with_crc(bytes(data[pos : pos + size]))
    with pytest.raises(UnknownEvent) as err:
        decode_bytes(bytes(data))
    assert err.value.pos == pos and "99" in str(err.value)


def test_unknown_event_with_ignorable_flag_is_reported_not_fatal() -> None:
    data = bytearray(CRC_FILE.read_bytes())
    pos, _etype, size = events_of(bytes(data))[3]
    data[pos + 4] = 99
    flags = int.from_bytes(data[pos + 17 : pos + 19], "little") | 0x80
    data[pos + 17 : pos + 19] = flags.to_bytes(2, "little")
    data[pos : pos + size] = with_crc(bytes(data[pos : pos + size]))
    records = decode_bytes(bytes(data), all_events=True)
    ignored = [r for r in records if not isinstance(r, RowChange) and r.kind == "ignored"]
    assert [(r.pos, r.info["type_code"]) for r in ignored] == [(pos, 99)]


def test_length_running_past_the_file_is_truncation() -> None:
    data = NOCRC_FILE.read_bytes()
    pos, _, size = events_of(data)[20]
    cut = data[: pos + size // 2]
    with pytest.raises(TruncatedFile) as err:
        decode_bytes(cut)
    assert err.value.pos == pos and not err.value.in_use


def test_in_use_file_cut_mid_event_ends_cleanly_at_last_complete_event() -> None:
    fixture = SHARED_BINLOGS / "zalora__binlog-parser/gtid-fixtures/mysql-bin.01"  # in-use flag set
    data = fixture.read_bytes()
    events = events_of(data)
    pos, _, _size = events[-3]
    decoder = BinlogDecoder()
    out = list(decoder.decode_stream(io.BytesIO(data[: pos + 5]), "live.bin"))
    assert decoder.results[0].end.status == END_IN_USE
    assert decoder.results[0].end.pos == pos
    assert all(r.pos < pos for r in out)


def test_impossible_event_length_is_corrupt() -> None:
    data = bytearray(CRC_FILE.read_bytes())
    pos, _, _ = events_of(bytes(data))[5]
    data[pos + 9 : pos + 13] = (5).to_bytes(4, "little")
    with pytest.raises(CorruptEvent) as err:
        decode_bytes(bytes(data))
    assert err.value.pos == pos


def test_start_and_stop_position() -> None:
    data = MULTI_TABLE.read_bytes()
    all_rows = [r for r in decode_bytes(data) if isinstance(r, RowChange)]
    txn_starts = sorted({r.txn_pos for r in all_rows})
    start, stop = txn_starts[1], txn_starts[-1]
    sliced = [r for r in decode_bytes(data, start_position=start, stop_position=stop) if isinstance(r, RowChange)]
    assert sliced == [] or all(start <= r.txn_pos < stop for r in sliced)
    assert [(r.pos, r.row) for r in sliced] == [(r.pos, r.row) for r in all_rows if start <= r.txn_pos < stop]


def test_start_position_not_on_an_event_boundary_is_an_error() -> None:
    data = MULTI_TABLE.read_bytes()
    pos, _, _ = events_of(data)[4]
    with pytest.raises(BinlogError):
        decode_bytes(data, start_position=pos + 3)


@pytest.mark.parametrize("path", [MULTI_TABLE, CRC_FILE], ids=lambda p: p.name)
def test_start_position_inside_the_format_description_is_an_error(path) -> None:
    """The FORMAT_DESCRIPTION is always read; a start inside it (or inside the magic) is no event boundary. 0 and 4
    read the whole file, the FORMAT_DESCRIPTION's end the events after it."""
    data = path.read_bytes()
    (fde_pos, _, _), (after, _, _) = events_of(data)[:2]
    assert fde_pos == 4
    def shown(**opts) -> list:
        return [change_to_dict(r) if isinstance(r, RowChange) else (r.kind, r.pos)
                for r in decode_bytes(data, all_events=True, **opts)]

    whole = shown()
    assert any(isinstance(r, dict) for r in whole)
    for start in (0, 4, after):
        assert shown(start_position=start) == whole
    for start in (1, 3, 5, 19, after - 1):
        with pytest.raises(CorruptEvent, match=f"start position {start} is not an event boundary") as err:
            decode_bytes(data, start_position=start)
        assert err.value.pos == start


def test_several_table_maps_in_one_transaction_resolve_by_id() -> None:
    two_tables = SHARED_BINLOGS / "blackbeam__rust_mysql_common/update-full-row.binlog"  # NDB: 2 tables per txn
    rows = [r for r in decode_bytes(two_tables.read_bytes()) if isinstance(r, RowChange)]
    by_txn: dict[int, set[str]] = {}
    for r in rows:
        by_txn.setdefault(r.txn_pos, set()).add(r.table.table)
    assert max(len(t) for t in by_txn.values()) >= 2
    for r in rows:  # every row decodes with its own table's column count
        image = r.after if r.after is not None else r.before
        assert len(image) == len(r.table.columns)


def test_rows_event_without_table_map_is_a_typed_error() -> None:
    data = bytearray(MULTI_TABLE.read_bytes())
    events = events_of(bytes(data))
    tm_pos, _, tm_size = next(e for e in events if e[1] == EventType.TABLE_MAP)
    # Re-point the table map at another table id: the following rows event then refers to an unmapped id.
    data[tm_pos + HEADER_LEN] ^= 0x40
    data[tm_pos : tm_pos + tm_size] = with_crc(bytes(data[tm_pos : tm_pos + tm_size]))
    with pytest.raises(BinlogError) as err:
        decode_bytes(bytes(data))
    assert "table id" in str(err.value)


_SEED_FILES = [CRC_FILE, NOCRC_FILE, MULTI_TABLE, SHARED_BINLOGS / "blackbeam__rust_mysql_common/transaction_compression.000001",
               SHARED_BINLOGS / "blackbeam__rust_mysql_common/mariadb-bin.000001"]


@settings(max_examples=300, deadline=2000, suppress_health_check=[HealthCheck.too_slow])
@given(
    which=st.integers(0, len(_SEED_FILES) - 1),
    edits=st.lists(st.tuples(st.floats(0, 1, exclude_max=True), st.integers(0, 255)), min_size=1, max_size=8),
    cut=st.one_of(st.none(), st.floats(0, 1)),
    verify=st.booleans(),
)
def test_fuzz_mutated_fixtures_raise_only_binlog_errors(which, edits, cut, verify) -> None:
    data = bytearray(_SEED_FILES[which].read_bytes())
    for where, value in edits:
        data[int(where * len(data))] = value
    if cut is not None:
        data = data[: int(cut * len(data))]
    try:
        for _ in BinlogDecoder(DecodeOptions(all_events=True, verify_checksums=verify)).decode_stream(
            io.BytesIO(bytes(data)), "fuzz.bin"
        ):
            pass
    except BinlogError as exc:
        assert exc.file == "fuzz.bin"
