"""Split a large binlog file into ranges of whole transactions, so one big file keeps every core busy.

A fast pass over event headers finds transaction starts (GTID events: MySQL GTID/ANONYMOUS_GTID/GTID_TAGGED and
MariaDB GTID, which begin every transaction on servers since MySQL 5.6 and MariaDB 10.0). Files without them
(older servers) are not split. Ranges are cut at the transaction start closest to each equal share of bytes.
"""

from __future__ import annotations

import bisect
import os

from ..binlog.constants import EventType
from ..binlog.stream import EventStream, open_binlog

TXN_STARTS = frozenset({EventType.GTID, EventType.ANONYMOUS_GTID, EventType.GTID_TAGGED, EventType.MARIA_GTID})


def transaction_starts(path: str, name: str, start: int) -> tuple[list[int], int]:
    """Positions of transaction starts at or after `start`, and the end of the last complete event."""
    stream = EventStream(open_binlog(path), name, verify_checksums=False, allow_truncated=True,
                         start_position=start if start > 4 else None)
    starts = [ev.pos for ev in stream if ev.type in TXN_STARTS and ev.pos >= start]
    return starts, stream.end.pos if stream.end else start


def _plain_size(path: str) -> float:
    """The file's size, an upper bound of its events' end; infinite for a gzip file (its events are larger)."""
    with open(path, "rb") as f:
        if f.read(2) == b"\x1f\x8b":
            return float("inf")
        return os.fstat(f.fileno()).st_size


def plan_ranges(path: str, name: str, start: int, target_bytes: int) -> list[tuple[int, int | None]]:
    """[(start, stop)] covering the file from `start`; the last range is open-ended (stop None)."""
    if target_bytes <= 0 or _plain_size(path) - start < 2 * target_bytes:
        # (One piece whatever the transactions: not worth reading the file for them.)
        return [(start, None)]
    starts, end = transaction_starts(path, name, start)
    pieces = max(1, (end - start) // target_bytes)
    if pieces == 1 or len(starts) < 2:
        return [(start, None)]
    cuts = []
    for i in range(1, pieces):
        want = start + i * (end - start) // pieces
        j = bisect.bisect_left(starts, want)
        if j < len(starts) and starts[j] > start and (not cuts or starts[j] > cuts[-1]):
            cuts.append(starts[j])
    bounds = [start, *cuts]
    return [(bounds[i], bounds[i + 1] if i + 1 < len(bounds) else None) for i in range(len(bounds))]
