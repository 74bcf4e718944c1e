"""The tail's resume cut (binlake.sources.tail.Landing.resume_point) on real servers' binlogs of the servers a
tail follows (those that begin transactions with GTID events: MySQL 5.6+ and MariaDB 10+, with compressed
transactions, XA, DDL): a file cut at seeded random bytes is cut back to a point that loses no complete
transaction and lies inside none, as the decoder sees the transactions."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from binlake.binlog.constants import MAGIC
from binlake.binlog.decoder import BinlogDecoder, DecodeOptions
from binlake.binlog.errors import BinlogError
from binlake.binlog.records import EventRecord
from binlake.lake.split import TXN_STARTS as GTID_TYPES
from binlake.sources.replica import check_maria_gtid_state, encode_mysql_gtid_set
from binlake.sources.tail import Landing, _events


def _transactions(path: Path) -> list[tuple[int, int]] | None:
    """(start, end) of every transaction the decoder closes; None when the file does not decode cleanly."""
    try:
        decoder = BinlogDecoder(DecodeOptions(commits=True))
        out = [(r.txn_pos if r.txn_pos is not None else r.pos, r.end_pos) for r in decoder.decode_files([path])
               if isinstance(r, EventRecord) and r.kind in ("commit", "ddl", "rollback")]
    except (BinlogError, ValueError):
        return None
    if decoder.results[-1].end is None or decoder.results[-1].end.status != "complete":
        return None
    return out


def _candidates(root: Path) -> list[Path]:
    out = []
    for p in sorted(root.rglob("*")):
        if not p.is_file() or p.stat().st_size > 4 << 20 or p.suffix == ".gz":
            continue
        data = p.read_bytes()
        if data[:4] != MAGIC:
            continue
        if any(etype in GTID_TYPES for _pos, etype, _flags, _ev in _events(data)):
            out.append(p)
    return out


def test_resume_cut_keeps_whole_transactions_on_real_binlogs(fixture_binlogs: Path, tmp_path: Path) -> None:
    rng = random.Random(1919)
    checked = 0
    for path in _candidates(fixture_binlogs):
        txns = _transactions(path)
        if not txns or len(txns) < 2:
            continue
        data = path.read_bytes()
        ends = sorted(e for _s, e in txns)
        for _ in range(12):
            cut = rng.randint(4, len(data))
            landing = tmp_path / f"l{checked}"
            landing.mkdir()
            (landing / "bin.000001").write_bytes(data[:cut])
            point = Landing(landing).resume_point()
            assert point is not None
            kept = (landing / "bin.000001").stat().st_size
            where = f"{path.relative_to(fixture_binlogs)} cut at {cut}: kept {kept}"
            assert kept <= cut and point.pos == max(kept, 4), where
            assert kept >= max((e for e in ends if e <= cut), default=4), where  # no complete transaction lost
            assert not any(s < kept < e for s, e in txns), where  # not inside a transaction
            assert data[:kept] == (landing / "bin.000001").read_bytes(), where
            checked += 1
    if checked == 0:
        pytest.skip(f"no fixture binlog with transactions decoded cleanly under {fixture_binlogs}")
    assert checked >= 12 * 5  # the corpus holds many such files


def test_mysql_gtid_set_encoding_follows_the_protocol() -> None:
    """COM_BINLOG_DUMP_GTID's GTID set: sid count, then per sid its 16 UUID bytes, interval count and intervals
    as (start, end exclusive), all little-endian 8-byte integers (the MySQL protocol documentation)."""
    import struct
    import uuid

    a, b = "3e11fa47-71ca-11e1-9e33-c80aa9429562", "0b6a2c4e-2b2f-11ee-8a3f-0242ac120002"
    data = encode_mysql_gtid_set(f"{a}:1-5:7, {b}:3")
    assert struct.unpack_from("<Q", data, 0)[0] == 2
    off = 8
    assert data[off:off + 16] == uuid.UUID(a).bytes
    assert struct.unpack_from("<QQQQQ", data, off + 16) == (2, 1, 6, 7, 8)
    off += 16 + 8 + 32
    assert data[off:off + 16] == uuid.UUID(b).bytes
    assert struct.unpack_from("<QQQ", data, off + 16) == (1, 3, 4)
    assert len(data) == off + 16 + 24
    for bad in ("nope:1-2", f"{a}:x", f"{a}:1-"):
        with pytest.raises(ValueError, match="--gtid"):
            encode_mysql_gtid_set(bad)


def test_mariadb_gtid_state_checked() -> None:
    assert check_maria_gtid_state(" 0-1-5, 1-2-9 ") == "0-1-5,1-2-9"
    for bad in ("0-1", "0-1-5,0-2-6", "a-b-c"):
        with pytest.raises(ValueError, match="--gtid"):
            check_maria_gtid_state(bad)


def test_resume_clears_the_flag_of_a_file_closed_before_the_kill(fixture_binlogs: Path, tmp_path: Path) -> None:
    """A tail killed after landing a file's ROTATE but before clearing its in-use flag: the restart clears it (the
    server's closed file has it clear) and keeps every byte else."""
    closed = []
    for path in _candidates(fixture_binlogs):
        data = path.read_bytes()
        events = list(_events(data))
        if events and events[-1][1] == 4 and events[-1][0] + len(events[-1][3]) == len(data) and not data[21] & 1:
            closed.append((path, data))
    if not closed:
        pytest.skip(f"no closed binlog with GTIDs under {fixture_binlogs}")
    for i, (path, data) in enumerate(closed):
        landing = tmp_path / f"c{i}"
        landing.mkdir()
        flagged = bytearray(data)
        flagged[21] |= 1
        (landing / "bin.000007").write_bytes(bytes(flagged))
        point = Landing(landing).resume_point()
        assert point is not None and point.closed and point.pos == len(data), path
        assert (landing / "bin.000007").read_bytes() == data, path
