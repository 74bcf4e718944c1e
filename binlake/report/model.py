"""What a report shows, independent of where it came from (binlog files or a lake batch)."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class Series:
    """Values on a grid of equal time buckets: bucket i starts at start_epoch + i * span_s (UTC seconds)."""

    start_epoch: int | None
    span_s: int
    values: dict[str, list[float]] = field(default_factory=dict)

    @property
    def buckets(self) -> int:
        return max((len(v) for v in self.values.values()), default=0)


@dataclass
class TxnRow:
    """One transaction in a 'largest' or 'longest' list."""

    where: str  # file:position of its start
    rows: int
    measure: float  # what the list is ranked by (rows, seconds, bytes)
    start: str
    detail: str = ""


@dataclass
class ReportData:
    title: str
    subtitle: str
    facts: list[tuple[str, str]]
    volume: Series  # row changes per table per bucket
    transactions: Series  # transactions per second (mean over each bucket)
    lag: Series  # seconds (one or more series)
    lag_title: str
    lag_note: str
    largest: list[TxnRow]
    largest_title: str
    longest: list[TxnRow]
    longest_title: str
    longest_unit: str
    tables: list[tuple[str, int, int, int]]  # table, inserts, updates, deletes
    extra: list[tuple[str, list[str], list[list[str]]]] = field(default_factory=list)  # title, header, rows
