"""Every real fixture binlog: event counts as the MANIFEST lists them, a full decode or the predicted typed error,
and row values equal to the expected outputs shipped beside zalora's files."""

from __future__ import annotations

import calendar
import json
import re
import time
from collections import Counter
from pathlib import Path

import pytest

from binlake.binlog.constants import event_name
from binlake.binlog.decoder import BinlogDecoder, DecodeOptions
from binlake.binlog.errors import BadMagic, BinlogError, CorruptEvent, TruncatedFile
from binlake.binlog.fde import _PRE_GA_PERMUTATION
from binlake.binlog.records import RowChange
from binlake.binlog.stream import END_IN_USE, END_UNCLOSED, EventStream, open_binlog
from tests.conftest import SHARED_BINLOGS
from tests.fixture_manifest import ManifestEntry, read_manifest

ENTRIES = [e for e in read_manifest(SHARED_BINLOGS) if not e.is_text] if SHARED_BINLOGS.exists() else []
NO_FIXTURES = pytest.mark.skipif(not ENTRIES, reason=f"fixture binlogs not found at {SHARED_BINLOGS}")

# Files whose full decode must fail, with the error and position we expect and why.
# corrupt-relay-bin.000624 is the corrupted relay log of MySQL's own test suite: its framing is intact (so the
# MANIFEST's header-level count parses "cleanly"), but the QUERY event at 91204 carries bytes from the middle of
# another statement; its status-variable length runs past the event. A decoder must stop there, typed.
EXPECTED_FAILURES = {"corrupt-relay-bin.000624": (CorruptEvent, 91204)}

# Closed files (in-use flag clear) that end without the ROTATE or STOP a server writes before it clears the flag:
# copies of a binlog still being written, taken through the replication protocol (which clears the flag) or cut
# short by hand. Bytes alone cannot tell them from a closed file cut at an event boundary, so a default decode
# ends with TruncatedFile after delivering every event; allow_truncated=True reads them as before.
UNCLOSED = {"mysql-bin.aurora-padding": 1294, "mysql-bin.000057": 1283, "mysql-bin.000080": 2454}


def _ids(entries: list[ManifestEntry]) -> list[str]:
    return [str(e.path.relative_to(SHARED_BINLOGS)) for e in entries]


def _outer_counts(path: Path) -> tuple[Counter, EventStream]:
    stream = EventStream(open_binlog(str(path)), path.name, allow_truncated=True)
    counts: Counter = Counter()
    for ev in stream:
        counts[ev.type] += 1
    return counts, stream


@NO_FIXTURES
@pytest.mark.parametrize("entry", ENTRIES, ids=_ids(ENTRIES))
def test_event_counts_match_manifest(entry: ManifestEntry) -> None:
    if entry.bad_magic:
        with pytest.raises(BadMagic) as err:
            _outer_counts(entry.path)
        assert err.value.pos == 0 and entry.path.name in str(err.value)
        return
    if entry.truncated and not entry.fde_in_use:
        with pytest.raises(TruncatedFile):
            EventStream(open_binlog(str(entry.path)), entry.path.name).__iter__().__next__()
        return
    counts, stream = _outer_counts(entry.path)
    names = Counter()
    for code, n in counts.items():
        if stream.fde.permutation:
            # The MANIFEST names raw type codes by today's numbering; these pre-GA trees numbered them differently.
            code = {v: k for k, v in _PRE_GA_PERMUTATION.items()}.get(code, code)
        names[event_name(code)] += n
    if "TRANSACTION_PAYLOAD" in entry.events:
        decoder = BinlogDecoder(DecodeOptions(all_events=True, allow_truncated=entry.path.name in UNCLOSED))
        list(decoder.decode_files([entry.path]))
        for key, n in decoder.event_counts.items():
            if isinstance(key, tuple):
                names[f"inner:{event_name(key[1])}"] += n
    assert dict(names) == entry.events
    if entry.checksum in ("CRC32", "no"):
        assert stream.first_fde is not None
        assert stream.first_fde.has_crc == (entry.checksum == "CRC32")
    assert stream.in_use == entry.fde_in_use


@NO_FIXTURES
@pytest.mark.parametrize("entry", ENTRIES, ids=_ids(ENTRIES))
def test_full_decode_ends_as_predicted(entry: ManifestEntry) -> None:
    decoder = BinlogDecoder(DecodeOptions(all_events=True))
    expected = EXPECTED_FAILURES.get(entry.path.name)
    if entry.bad_magic:
        with pytest.raises(BadMagic):
            list(decoder.decode_files([entry.path]))
        return
    if expected:
        with pytest.raises(expected[0]) as err:
            list(decoder.decode_files([entry.path]))
        assert err.value.pos == expected[1] and err.value.file == entry.path.name
        return
    if entry.truncated and not entry.fde_in_use:
        with pytest.raises(TruncatedFile) as err:
            list(decoder.decode_files([entry.path]))
        assert err.value.in_use is False
        return
    if entry.path.name in UNCLOSED:
        with pytest.raises(TruncatedFile) as err:
            list(decoder.decode_files([entry.path]))
        assert err.value.pos == UNCLOSED[entry.path.name] == entry.path.stat().st_size
        assert "without the ROTATE or STOP" in str(err.value) and not err.value.in_use
        decoder = BinlogDecoder(DecodeOptions(all_events=True, allow_truncated=True))
    records = list(decoder.decode_files([entry.path]))
    result = decoder.results[-1]
    size = entry.path.stat().st_size if not entry.path.name.endswith(".gz") else None
    if entry.truncated:
        assert result.end.status == END_IN_USE
        assert result.end.trailing_bytes > 0
    else:
        assert result.end.status == (END_UNCLOSED if entry.path.name in UNCLOSED else "complete")
        if size is not None:
            assert result.end.pos == size
    expected_rows = sum(1 for r in records if isinstance(r, RowChange))
    assert expected_rows == result.rows
    positions = [(r.pos, r.sub) for r in records]
    assert positions == sorted(positions), "records must come out in binlog order"


# -- expected values from zalora/binlog-parser (mysqlbinlog -v output beside each file) ----------------------

ZALORA = SHARED_BINLOGS / "zalora__binlog-parser"
ZALORA_FILES = [
    (ZALORA / f"mysql-bin.{n}", ZALORA / f"plaintext-mysql-bin.{n}", ZALORA / f"{n}.json")
    for n in ("01", "02", "03", "05", "06", "07")
] + [(ZALORA / "gtid-fixtures/mysql-bin.01", ZALORA / "gtid-fixtures/plaintext-mysql-bin.01",
      ZALORA / "gtid-fixtures/01.json")]

_STMT = re.compile(r"^### (INSERT INTO|UPDATE|DELETE FROM) `([^`]*)`\.`([^`]*)`")
_VALUE = re.compile(r"^###   @(\d+)=(.*?)(?: /\* (\w+).*\*/)?$")


def parse_mysqlbinlog_rows(text: str) -> list[tuple[str, str, str, list[dict[int, str]]]]:
    """(op, db, table, images) from mysqlbinlog -v '###' pseudo-SQL; images are {column number: text}."""
    changes = []
    current = None
    for line in text.splitlines():
        m = _STMT.match(line)
        if m:
            op = {"INSERT INTO": "insert", "UPDATE": "update", "DELETE FROM": "delete"}[m.group(1)]
            current = (op, m.group(2), m.group(3), [])
            changes.append(current)
            continue
        if current is None:
            continue
        if line.strip() in ("### SET", "### WHERE"):
            current[3].append({})
            continue
        m = _VALUE.match(line)
        if m:
            current[3][-1][int(m.group(1))] = m.group(2)
    return changes


def as_mysqlbinlog_text(value, column_type: int) -> str:
    """Our decoded value in mysqlbinlog -v's notation."""
    if value is None:
        return "NULL"
    if column_type in (7, 17):  # TIMESTAMP, TIMESTAMP2: mysqlbinlog prints epoch seconds
        return str(calendar.timegm(time.strptime(value[:19], "%Y-%m-%d %H:%M:%S")))
    if column_type == 10:  # DATE is printed with colons
        return "'" + value.replace("-", ":") + "'"
    if isinstance(value, str):
        return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"
    return str(value)


@NO_FIXTURES
@pytest.mark.parametrize("binlog, plaintext, expected_json", ZALORA_FILES, ids=lambda p: str(p)[-30:])
def test_zalora_values_match_mysqlbinlog(binlog: Path, plaintext: Path, expected_json: Path) -> None:
    expected = parse_mysqlbinlog_rows(plaintext.read_text())
    changes = [r for r in BinlogDecoder().decode_files([binlog]) if isinstance(r, RowChange)]
    assert len(changes) == len(expected)
    for got, (op, db, table, images) in zip(changes, expected, strict=True):
        assert (got.op, got.database, got.table_name) == (op, db, table)
        ours = [got.before, got.after] if op == "update" else [got.after if op == "insert" else got.before]
        for image, theirs in zip(ours, images, strict=True):
            rendered = {
                i + 1: as_mysqlbinlog_text(v, got.table.columns[i].type) for i, v in enumerate(image)
            }
            assert rendered == theirs


@NO_FIXTURES
@pytest.mark.parametrize("binlog, plaintext, expected_json", ZALORA_FILES, ids=lambda p: str(p)[-30:])
def test_zalora_values_match_their_json(binlog: Path, plaintext: Path, expected_json: Path) -> None:
    """zalora's JSON names columns from a live database (alphabetical), so rows are compared as value sets."""
    docs = json.loads("[" + re.sub(r"}\s*\n{", "},{", expected_json.read_text().strip()) + "]")
    row_docs = [d for d in docs if d["Type"] in ("Insert", "Update", "Delete")]
    changes = [r for r in BinlogDecoder().decode_files([binlog]) if isinstance(r, RowChange)]
    assert len(changes) == len(row_docs)
    for got, doc in zip(changes, row_docs, strict=True):
        assert doc["Type"].lower() == got.op
        assert doc["Header"]["Schema"] == got.database and doc["Header"]["Table"] == got.table_name
        if got.op == "update":
            pairs = [(got.before, doc["OldData"]["Row"]), (got.after, doc["NewData"]["Row"])]
        else:
            pairs = [(got.after if got.op == "insert" else got.before, doc["Data"]["Row"])]
        for image, row in pairs:
            theirs = sorted(str(v) for v in row.values())
            ours = sorted(_zalora_text(v, got.table.columns[i].type) for i, v in enumerate(image))
            assert ours == theirs
        assert doc["Header"]["BinlogMessageTime"] == time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(got.ts))


def _zalora_text(value, column_type: int) -> str:
    return "None" if value is None else str(value)


@NO_FIXTURES
def test_every_error_is_typed_and_names_the_file() -> None:
    """Decoding every fixture either succeeds or raises a BinlogError naming the file and a position."""
    for entry in ENTRIES:
        try:
            list(BinlogDecoder(DecodeOptions(all_events=True)).decode_files([entry.path]))
        except BinlogError as exc:
            assert exc.file == entry.path.name
            assert exc.pos is not None
            assert entry.path.name in str(exc)
