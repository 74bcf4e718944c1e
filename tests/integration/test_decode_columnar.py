"""A real MariaDB writes every column type (NULLs mixed in, full and minimal row images, both metadata levels):
the column-at-a-time fast path decodes exactly what the row-at-a-time decoders do."""

from __future__ import annotations

import random
from pathlib import Path

import numpy  # noqa: F401  (whole-column conversions at once: vectorized.numpy_ready; test_numpy_gate.py covers the rest)
import pytest

from binlake.binlog import rows
from binlake.binlog.decoder import BinlogDecoder, DecodeOptions, RowBatch
from binlake.testing.workload import run_all_types_workload


def _position(server) -> tuple[str, int]:
    with server.connect() as conn, conn.cursor() as cur:
        cur.execute("SHOW MASTER STATUS")
        name, pos = cur.fetchone()[:2]
    return name, pos


def _batches(files: list[Path], start: int, db: str, columnar: bool, monkeypatch: pytest.MonkeyPatch) -> list:
    monkeypatch.setattr(rows, "COLUMNAR", columnar)
    decoder = BinlogDecoder(DecodeOptions(start_position=start, databases={db}))
    # The fast path's images are tuples, the row-at-a-time path's lists: compare their values.
    return [(b.pos, b.op, [tuple(None if i is None else list(i) for i in pair) for pair in b.pairs])
            for b in decoder.decode_files_batched(files) if type(b) is RowBatch]


def _records(files: list[Path], start: int, db: str) -> list:
    """decode_files' row changes (the plans made for consumers of row tuples), as _batches groups them."""
    out: list = []
    for r in BinlogDecoder(DecodeOptions(start_position=start, databases={db})).decode_files(files):
        pair = tuple(None if i is None else list(i) for i in (r.before, r.after))
        if r.row:
            out[-1][2].append(pair)
        else:
            out.append((r.pos, r.op, [pair]))
    return out


@pytest.mark.parametrize("metadata", ["FULL", "MINIMAL"])
@pytest.mark.parametrize("row_image", ["FULL", "MINIMAL", "NOBLOB"])
def test_columnar_equals_row_at_a_time(mariadb_servers, metadata: str, row_image: str,
                                       monkeypatch: pytest.MonkeyPatch) -> None:
    server = mariadb_servers.get(metadata)
    db = f"columnar_{metadata}_{row_image}".lower()
    with server.connect() as conn, conn.cursor() as cur:
        cur.execute(f"DROP DATABASE IF EXISTS `{db}`")
        cur.execute(f"CREATE DATABASE `{db}`")
    start_file, start_pos = _position(server)
    with server.connect(db) as conn:
        with conn.cursor() as cur:
            cur.execute(f"SET SESSION binlog_row_image='{row_image}'")
        counts = run_all_types_workload(conn, "t", random.Random(f"{metadata}-{row_image}"), rows=120)
    files = server.flush_logs()
    files = files[[f.name for f in files].index(start_file):]
    reference = _batches(files, start_pos, db, False, monkeypatch)
    fast = _batches(files, start_pos, db, True, monkeypatch)
    assert sum(len(pairs) for _, _, pairs in fast) == sum(counts.values())
    assert fast == reference
    assert _records(files, start_pos, db) == reference
    nulls = sum(1 for _, _, pairs in fast for pair in pairs for image in pair if image for v in image if v is None)
    assert nulls > 100  # NULLs mixed with values in the same events
