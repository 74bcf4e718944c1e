"""Order keys and net-change reduction.

A change's order is (file sequence, event position, sub-position inside a TRANSACTION_PAYLOAD, row index), never
its timestamp. `_seq` packs the four into one integer, stored as decimal(38,0) so Delta compares it natively:
24 bits of file sequence, 40 of position, 32 of sub-position and 20 of row index (116 bits).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

SEQ_TYPE = pa.decimal128(38, 0)
_FILE_BITS, _POS_BITS, _SUB_BITS, _ROW_BITS = 24, 40, 32, 20


def order_key(file_seq: int, pos: int, sub: int, row: int) -> int:
    if not (0 <= file_seq < 1 << _FILE_BITS and 0 <= pos < 1 << _POS_BITS and 0 <= sub < 1 << _SUB_BITS
            and 0 <= row < 1 << _ROW_BITS):
        raise ValueError(f"position ({file_seq}, {pos}, {sub}, {row}) is outside the order key's range")
    return (((file_seq << _POS_BITS | pos) << _SUB_BITS | sub) << _ROW_BITS) | row


def split_key(seq: int) -> tuple[int, int, int, int]:
    row = seq & ((1 << _ROW_BITS) - 1)
    seq >>= _ROW_BITS
    sub = seq & ((1 << _SUB_BITS) - 1)
    seq >>= _SUB_BITS
    pos = seq & ((1 << _POS_BITS) - 1)
    return seq >> _POS_BITS, pos, sub, row


@dataclass
class NetChange:
    """The last change of one key in a batch: its row (None for a delete) and order key."""

    key: tuple
    seq: int
    row: dict[str, Any] | None
    commit_ts: Any = None

    @property
    def deleted(self) -> bool:
        return self.row is None


def net_changes(changes: Iterable[tuple[int, str, tuple | None, tuple | None, dict | None, Any]]) -> dict[tuple, NetChange]:
    """Reduce ordered changes to the last one per key.

    Each item: (seq, op, before_key, after_key, after_row, commit_ts). An update that changes the key deletes the
    old key (a tombstone at that seq) and upserts the new one; a later change of either key wins.
    """
    out: dict[tuple, NetChange] = {}
    last = -1
    for seq, op, before_key, after_key, after_row, commit_ts in changes:
        if seq <= last:
            raise ValueError(f"changes are not in binlog order at seq {seq}")
        last = seq
        if op == "delete":
            out[before_key] = NetChange(before_key, seq, None, commit_ts)
        elif op == "insert":
            out[after_key] = NetChange(after_key, seq, after_row, commit_ts)
        else:
            if before_key != after_key:
                out[before_key] = NetChange(before_key, seq, None, commit_ts)
            out[after_key] = NetChange(after_key, seq, after_row, commit_ts)
    return out
