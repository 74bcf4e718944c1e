"""Damaged binlogs: every outcome is a clean decode with every change, or a typed error naming file and position.

Targeted cases for each kind of damage the fuzz run (below) found, then the seeded fuzz run itself."""

from __future__ import annotations

import io
import itertools
import zlib

import pytest

from binlake.binlog.decoder import BinlogDecoder, DecodeOptions
from binlake.binlog.errors import ChecksumMismatch, CorruptEvent, TruncatedFile
from binlake.binlog.records import RowChange
from binlake.binlog.stream import END_IN_USE, END_UNCLOSED, EventStream
from binlake.testing.binlog_damage import (
    bounded_outcome,
    decode_outcome,
    fixture_corpus,
    mutate,
    run_mutants,
    writer_corpus,
)
from tests.conftest import SHARED_BINLOGS

GTID_FILE = SHARED_BINLOGS / "Meituan-Dianping__MyFlash/haha.000041"  # 7 single-row inserts, CRC32, ROTATE
DDL_FILE = SHARED_BINLOGS / "rusuly__MySqlCdc/mysql-bin.000001"  # two DDL, then inserts; CRC32
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


# -- FORMAT_DESCRIPTION damage -------------------------------------------------------------------------------------

CLOSED_57 = SHARED_BINLOGS / "Fanduzi__BinlogVisualizer/minimal.binlog"  # 5.7.44, CRC32, ends with ROTATE
IN_USE_57 = SHARED_BINLOGS / "zalora__binlog-parser/gtid-fixtures/mysql-bin.01"  # 5.7.32, CRC32, in-use flag set


def fde_crc(data: bytearray) -> None:
    size = int.from_bytes(data[4 + 9 : 4 + 13], "little")
    event = bytearray(data[4 : 4 + size - 4])
    event[17] &= 0xFE
    data[4 + size - 4 : 4 + size] = zlib.crc32(event).to_bytes(4, "little")


@NO_FIXTURES
@pytest.mark.parametrize("recompute", [False, True])
@pytest.mark.parametrize("version", [b"4.7.44", b"5.5.44", b"5.1.44", b"x.7.44"])
def test_damaged_server_version_is_corrupt_not_checksums_off(version: bytes, recompute: bool) -> None:
    data = bytearray(CLOSED_57.read_bytes())
    at = 4 + 19 + 2
    assert data[at : at + 6] == b"5.7.44"
    data[at : at + 6] = version
    if recompute:
        fde_crc(data)
    with pytest.raises(CorruptEvent) as err:
        decode(bytes(data))
    assert err.value.pos == 4 and "FORMAT_DESCRIPTION" in str(err.value)


@NO_FIXTURES
def test_checksum_algorithm_flipped_off_is_corrupt() -> None:
    data = bytearray(CLOSED_57.read_bytes())
    size = int.from_bytes(data[4 + 9 : 4 + 13], "little")
    assert data[4 + size - 5] == 1
    data[4 + size - 5] = 0
    with pytest.raises(ChecksumMismatch):  # the FDE's own CRC covers the algorithm byte
        decode(bytes(data))
    fde_crc(data)
    with pytest.raises(CorruptEvent) as err:  # recomputed: the next event's CRC32 contradicts "off"
        decode(bytes(data))
    assert err.value.pos == 4 + size and "checksums are off" in str(err.value)


@NO_FIXTURES
def test_damaged_post_header_length_is_corrupt() -> None:
    data = bytearray(CLOSED_57.read_bytes())
    query_len = 4 + 19 + 57 + 1  # post-header lengths start after the 57 fixed bytes; QUERY is type 2
    assert data[query_len] == 13
    data[query_len] = 12
    fde_crc(data)
    with pytest.raises(CorruptEvent) as err:
        decode(bytes(data))
    assert err.value.pos == 4 and "QUERY" in str(err.value)


# -- gaps and early ends ---------------------------------------------------------------------------------------------


def row_count(data: bytes, **opts) -> int:
    return sum(1 for r in decode(data, **opts) if isinstance(r, RowChange))


@NO_FIXTURES
@pytest.mark.parametrize("path", [GTID_FILE, CLOSED_57], ids=lambda p: p.name)
def test_closed_file_cut_at_any_event_boundary_is_truncated(path) -> None:
    data = path.read_bytes()
    evs = events(data)
    assert evs[-1].type in (4, 3) and evs[-1].pos + evs[-1].size == len(data)  # ROTATE or STOP
    total = row_count(data)
    assert total > 0
    for ev in evs[1:]:
        with pytest.raises(TruncatedFile) as err:
            decode(data[: ev.pos])
        assert err.value.pos == ev.pos and not err.value.in_use
        # Every complete event was delivered before the error, and the lenient read says how it ended.
        decoder = BinlogDecoder(DecodeOptions(allow_truncated=True))
        assert sum(1 for r in decoder.decode_stream(io.BytesIO(data[: ev.pos]), "x") if isinstance(r, RowChange)) <= total
        assert decoder.results[-1].end.status == END_UNCLOSED


@NO_FIXTURES
def test_in_use_file_may_end_at_any_boundary_or_inside_its_last_event() -> None:
    data = IN_USE_57.read_bytes()
    evs = events(data)
    for ev in evs[1:]:
        for cut in (ev.pos, ev.pos + 7, ev.pos + ev.size - 1):
            decoder = BinlogDecoder()
            list(decoder.decode_stream(io.BytesIO(data[:cut]), "x"))
            assert decoder.results[-1].end.status in ("complete", END_IN_USE)


@NO_FIXTURES
@pytest.mark.parametrize("path", [GTID_FILE, IN_USE_57], ids=lambda p: p.name)
def test_any_chunk_of_whole_events_spliced_out_is_corrupt(path) -> None:
    data = path.read_bytes()
    evs = events(data)
    for i in range(1, len(evs) - 1):
        for j in range(i + 1, min(i + 3, len(evs) - 1) + 1):
            a, b = evs[i].pos, evs[j].pos
            with pytest.raises(CorruptEvent) as err:
                decode(data[:a] + data[b:])
            assert err.value.pos == a and "missing" in str(err.value)


@NO_FIXTURES
def test_in_use_file_with_a_damaged_length_mid_file_is_corrupt_not_a_quiet_end() -> None:
    data = bytearray(IN_USE_57.read_bytes())
    ev = events(bytes(data))[5]
    data[ev.pos + 9 : ev.pos + 13] = (len(data) * 2).to_bytes(4, "little")  # runs past the end: looks torn
    with pytest.raises(CorruptEvent) as err:
        decode(bytes(data))
    assert err.value.pos == ev.pos


@NO_FIXTURES
@pytest.mark.parametrize("index", [1, 5, -3])
def test_in_use_file_whose_length_and_next_position_agree_on_running_past_the_end_is_corrupt(index) -> None:
    # Both fields damaged consistently: the event looks torn, but whole events follow it.
    data = bytearray(IN_USE_57.read_bytes())
    ev = events(bytes(data))[index]
    size = len(data) - ev.pos + 1000 + index * 7
    data[ev.pos + 9 : ev.pos + 13] = size.to_bytes(4, "little")
    data[ev.pos + 13 : ev.pos + 17] = (ev.pos + size).to_bytes(4, "little")
    with pytest.raises(CorruptEvent) as err:
        decode(bytes(data))
    assert err.value.pos == ev.pos and "complete event follows" in str(err.value)


@NO_FIXTURES
def test_in_use_file_torn_inside_its_last_event_still_ends_quietly_after_the_scan() -> None:
    data = IN_USE_57.read_bytes()
    last = events(data)[-1]
    decoder = BinlogDecoder()
    rows = sum(1 for r in decoder.decode_stream(io.BytesIO(data[: last.pos + last.size - 1]), "x")
               if isinstance(r, RowChange))
    assert decoder.results[-1].end.status == END_IN_USE and rows == row_count(data[: last.pos])


# -- the fuzz run ----------------------------------------------------------------------------------------------------

FUZZ_CASES_PER_SOURCE = 40  # x (73 fixture files + 4 writer files): about 3,000 mutants, half with CRCs recomputed


@NO_FIXTURES
def test_fuzz_every_outcome_is_all_changes_or_a_typed_error() -> None:
    corpus = fixture_corpus(SHARED_BINLOGS) + writer_corpus(seed=14)
    assert len(corpus) > 60 and sum(s.changes for s in corpus) > 1000
    report = run_mutants(corpus, FUZZ_CASES_PER_SOURCE, seed=2026, timeout=60, mem_bytes=1 << 30)
    counts = report.counts()
    print("fuzz outcomes:", counts, report.errors_by_type())
    assert len(report.outcomes) == len(corpus) * FUZZ_CASES_PER_SOURCE
    # Damage was found by every layer: framing/parsers, checksums, truncation, unknown types.
    assert {"CorruptEvent", "ChecksumMismatch", "TruncatedFile"} <= set(report.errors_by_type())
    assert counts.get("ok", 0) > 0
    failures = [(o.source, o.seed, o.fix_crc, o.kind, o.detail, o.result, o.changes, o.expected, o.error)
                for o in report.failures]
    assert failures == []


@NO_FIXTURES
def test_cli_decode_and_stats_end_as_the_api_does(tmp_path, capsys) -> None:
    from binlake.cli import main

    corpus = [s for s in fixture_corpus(SHARED_BINLOGS) if s.changes] + writer_corpus(seed=3)
    seen = set()
    for k, src in enumerate(corpus[::4]):
        for seed in range(3):
            m = mutate(src, seed + 100 * k, fix_crc=seed % 2 == 1)
            result, _, _ = decode_outcome(m.data, "m.bin")
            path = tmp_path / f"m{k}-{seed}.bin"
            path.write_bytes(m.data)
            rows = sum(1 for r in BinlogDecoder().decode_files([path]) if isinstance(r, RowChange)) if (
                result == "ok") else None
            for command in ("decode", "stats"):
                code = main([command, "--no-progress", str(path)])
                out, err = capsys.readouterr()
                assert "Traceback" not in err
                if result == "ok":
                    assert code == 0, (m.detail, err)
                    if command == "decode":
                        assert len(out.splitlines()) == rows
                else:
                    assert code != 0 and str(path.name) in err and len(err.strip().splitlines()) == 1, (m.detail, err)
                seen.add(result)
    assert seen == {"ok", "typed"}


@NO_FIXTURES
@pytest.mark.parametrize("which, new_type", [
    ("rows", 28),  # IGNORABLE: would be skipped with its rows
    ("rows", 19),  # TABLE_MAP: a map that no rows event follows
    ("begin", 33),  # GTID: a transaction without events
    ("begin", 6),  # LOAD: MySQL 4.x only
], ids=str)
def test_event_type_damaged_with_a_matching_crc_is_corrupt(which: str, new_type: int) -> None:
    data = bytearray(GTID_FILE.read_bytes())
    evs = events(bytes(data))
    if which == "rows":
        ev = next(e for e in evs if e.type == 30)
    else:
        ev = next(e for e in evs if e.type == 2 and b"BEGIN" in bytes(e.buf[e.start : e.start + e.size]))
    data[ev.pos + 4] = new_type
    fix_crc(data, ev.pos, ev.size)
    with pytest.raises(CorruptEvent):
        decode(bytes(data))


PARTIAL_ROW = SHARED_BINLOGS / "blackbeam__rust_mysql_common/write-partial-row.binlog"  # rows events after rows


@pytest.mark.skipif(not PARTIAL_ROW.exists(), reason=f"fixture binlogs not found at {SHARED_BINLOGS}")
def test_rows_event_turned_into_an_incident_inside_a_transaction_is_corrupt() -> None:
    """A rows event right after another rows event (no TABLE_MAP between) whose type is damaged into INCIDENT (26),
    with a matching CRC when the file has one: found by the larger fuzz run (scripts/fuzz_decoder.py --seed 14) to
    drop its rows with a clean end. Servers write INCIDENT only between transactions."""
    data = bytes(PARTIAL_ROW.read_bytes())
    stream = EventStream(io.BytesIO(data), "x")
    evs = list(stream)
    crc = bool(stream.first_fde and stream.first_fde.has_crc)
    rows_types = {23, 24, 25, 30, 31, 32}
    after_rows = [e for prev, e in itertools.pairwise(evs) if e.type in rows_types and prev.type in rows_types]
    assert after_rows
    for ev in after_rows:
        damaged = bytearray(data)
        damaged[ev.pos + 4] = 26
        if crc:
            fix_crc(damaged, ev.pos, ev.size)
        with pytest.raises(CorruptEvent, match="INCIDENT event inside a transaction") as err:
            decode(bytes(damaged))
        assert err.value.pos == ev.pos
    # A real INCIDENT between transactions still reads (MySQL 5.1's LOST_EVENTS test file).
    real = SHARED_BINLOGS / "blackbeam__rust_mysql_common/bug40482-bin.000001"
    kinds = [r.kind for r in decode(real.read_bytes(), all_events=True)]
    assert "incident" in kinds


@NO_FIXTURES
def test_the_ddl_scan_checksums_the_events_it_reads_and_leaves_rows_events_to_the_decode(tmp_path) -> None:
    """statement_records (the DDL scan before decoding) verifies the CRC32 of the events it decodes (QUERY) but
    not of rows events, which the decode of the same file verifies: a damaged rows event passes the scan unchanged
    and fails the decode at its position; a damaged QUERY event fails the scan at its position."""
    data = DDL_FILE.read_bytes()
    evs = events(data)
    row = next(ev for ev in evs if ev.type == 30)
    query = next(ev for ev in evs if ev.type == 2 and ev.pos == 219)  # the CREATE TABLE

    def scan(blob: bytes) -> list:
        path = tmp_path / "scanned.000001"
        path.write_bytes(blob)
        decoder = BinlogDecoder(DecodeOptions(commits=True, databases=set(), allow_truncated=True))
        return [(r.kind, r.pos) for r in decoder.statement_records([path])]

    clean = scan(data)
    assert ("ddl", 219) in clean
    damaged_rows = bytearray(data)
    damaged_rows[row.pos + 19 + 3] ^= 0xFF  # the rows event's table id, CRC32 left as it was
    assert scan(bytes(damaged_rows)) == clean
    with pytest.raises(ChecksumMismatch) as err:
        decode(bytes(damaged_rows))
    assert err.value.pos == row.pos
    damaged_query = bytearray(data)
    damaged_query[query.pos + query.size - 5] ^= 0xFF  # the QUERY's last byte before its CRC32
    with pytest.raises(ChecksumMismatch) as err:
        scan(bytes(damaged_query))
    assert err.value.pos == query.pos
