"""What the decoder yields: row changes, and (on request) every other event and transaction boundary."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .tablemap import TableMap

OP_INSERT = "insert"
OP_UPDATE = "update"
OP_DELETE = "delete"


class RowChange:
    """One row changed by a rows event.

    `before`/`after` are sequences (tuples; lists when a partial JSON update was applied) of values in table
    column order (ABSENT for columns outside the row image); `pos` is
    the rows event's start, `txn_pos` the start of its transaction (the safe resume point), `sub` the offset of
    the inner event inside a TRANSACTION_PAYLOAD (0 outside one), `row` the row's index inside its event.
    """

    __slots__ = ("after", "before", "file", "gtid", "op", "pos", "row", "sub", "table", "ts", "txn_pos")

    def __init__(self, file, pos, txn_pos, sub, row, ts, gtid, table, op, before, after) -> None:
        self.file = file
        self.pos = pos
        self.txn_pos = txn_pos
        self.sub = sub
        self.row = row
        self.ts = ts
        self.gtid = gtid
        self.table: TableMap = table
        self.op = op
        self.before = before
        self.after = after

    @property
    def database(self) -> str:
        return self.table.database

    @property
    def table_name(self) -> str:
        return self.table.table

    def __repr__(self) -> str:
        return (
            f"RowChange({self.file}:{self.pos}/{self.sub}#{self.row} {self.op} {self.table.qualified_name} "
            f"before={self.before} after={self.after})"
        )


@dataclass
class EventRecord:
    """A non-row event (with --all-events), or a transaction boundary ('commit').

    `kind` is one of: statement (DML in statement format), ddl, begin, commit, rollback, gtid, rotate, format,
    intvar, rand, user_var, rows_query, incident, heartbeat, gtid_list, checkpoint, previous_gtids, stop,
    table_map, payload, load_data, ignored, other.
    """

    kind: str
    file: str
    pos: int
    ts: int
    event_type: str
    txn_pos: int | None = None
    sub: int = 0
    gtid: str | None = None
    end_pos: int | None = None
    info: dict[str, Any] = field(default_factory=dict)


@dataclass
class TransactionSummary:
    """Attached to 'commit' records: size and timing of the transaction that just ended."""

    rows: int
    bytes: int
    first_ts: int
    last_ts: int
    tables: dict[str, int]
