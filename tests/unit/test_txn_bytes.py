"""A transaction's byte count (the `bytes` of `binlake stats`' largest transactions, and of every commit record's
summary) is its span in the file: from its first event to its commit event's end, each event counted once. Checked
on every fixture binlog (MySQL 5.0-9.x, Percona, MariaDB; GTID and anonymous, BEGIN/COMMIT and XID commits, DDL,
compressed transaction payloads), through both decode paths (record by record, and batched as stats reads)."""

from __future__ import annotations

from pathlib import Path

import pytest

from binlake.binlog.decoder import BinlogDecoder, DecodeOptions
from binlake.binlog.errors import BinlogError
from binlake.binlog.records import EventRecord

_NOT_BINLOGS = {".md", ".json", ".txt", ".sql"}


def _spans(path: Path, batched: bool) -> list[tuple[int, int, int]]:
    """(transaction start, commit end, summary bytes) of every commit record decoded before any error."""
    decoder = BinlogDecoder(DecodeOptions(commits=True))
    items = decoder.decode_files_batched([path]) if batched else decoder.decode_files([path])
    out = []
    try:
        for item in items:
            if type(item) is EventRecord and "summary" in item.info:
                out.append((item.txn_pos, item.end_pos, item.info["summary"].bytes))
    except BinlogError:  # the damaged fixtures: what came before the damage is checked
        pass
    return out


@pytest.mark.parametrize("batched", [False, True], ids=["records", "batched"])
def test_transaction_bytes_are_the_span_in_the_file(fixture_binlogs, batched):
    files = sorted(f for f in fixture_binlogs.rglob("*") if f.is_file() and f.suffix not in _NOT_BINLOGS)
    checked, wrong = 0, {}
    for f in files:
        for start, end, size in _spans(f, batched):
            checked += 1
            if size != end - start:
                wrong.setdefault(f.name, (start, end, size))
    assert checked > 1000, f"only {checked} commits decoded from {len(files)} fixture files"
    assert not wrong, f"(start, end, bytes) of the first wrong transaction per file: {wrong}"
