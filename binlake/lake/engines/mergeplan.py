"""Engine-neutral MERGE plans: input validation and SQL clauses that both delta-rs (DataFusion SQL) and Spark SQL
accept. Source alias `s`, target alias `t`; every identifier is backtick-quoted so any MySQL column name works.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..convert import np_array
from .base import DELETED, SEQ, MergeInputError

ClauseKind = Literal["matched_delete", "matched_update", "not_matched_insert"]


def quote(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


@dataclass(frozen=True)
class Clause:
    kind: ClauseKind
    predicate: str | None = None
    assignments: tuple[tuple[str, str], ...] = ()
    """(quoted target column, source expression) pairs for update/insert."""


@dataclass(frozen=True)
class MergeSpec:
    on: str
    clauses: tuple[Clause, ...]


def _on(keys: list[str]) -> str:
    return " AND ".join(f"t.{quote(k)} = s.{quote(k)}" for k in keys)


def _assign(columns: list[str]) -> tuple[tuple[str, str], ...]:
    return tuple((quote(c), f"s.{quote(c)}") for c in columns)


S_SEQ, T_SEQ, S_DEL = f"s.{quote(SEQ)}", f"t.{quote(SEQ)}", f"s.{quote(DELETED)}"


def current_spec(columns: list[str], keys: list[str]) -> MergeSpec:
    """The current-table merge: only strictly newer changes apply; deletes of unknown keys insert nothing."""
    return MergeSpec(_on(keys), (
        Clause("matched_delete", f"{S_DEL} AND {S_SEQ} > {T_SEQ}"),
        Clause("matched_update", f"NOT {S_DEL} AND {S_SEQ} > {T_SEQ}", _assign(columns)),
        Clause("not_matched_insert", f"NOT {S_DEL}", _assign(columns)),
    ))


def tombstone_spec(keys: list[str]) -> MergeSpec:
    """Record deletes: a tombstone keeps the newest delete `_seq` seen for its key."""
    return MergeSpec(_on(keys), (
        Clause("matched_update", f"{S_SEQ} > {T_SEQ}", _assign([SEQ])),
        Clause("not_matched_insert", None, _assign([*keys, SEQ])),
    ))


def delete_older_spec(keys: list[str]) -> MergeSpec:
    """Delete target rows older than the source `_seq` for the key (tombstone pruning, resurrection repair)."""
    return MergeSpec(_on(keys), (Clause("matched_delete", f"{T_SEQ} < {S_SEQ}"),))


def validate_merge_input(data: pa.Table, keys: list[str]) -> pa.Table:
    """Check the merge contract and normalise `_seq` to int64 and `_deleted` to bool."""
    if not keys:
        raise MergeInputError("merge needs at least one key column")
    names = data.column_names
    missing = [c for c in [*keys, SEQ, DELETED] if c not in names]
    if missing:
        raise MergeInputError(f"merge input lacks column(s) {missing}; it has {names}")
    if len(set(names)) != len(names):
        raise MergeInputError(f"merge input has duplicate column names: {names}")
    if not pa.types.is_integer(data.schema.field(SEQ).type):
        raise MergeInputError(f"{SEQ} must be an integer column, got {data.schema.field(SEQ).type}")
    if not pa.types.is_boolean(data.schema.field(DELETED).type):
        raise MergeInputError(f"{DELETED} must be a boolean column, got {data.schema.field(DELETED).type}")
    data = data.set_column(names.index(SEQ), SEQ, data.column(SEQ).cast(pa.int64()))
    for col in [*keys, SEQ, DELETED]:
        if data.column(col).null_count:
            raise MergeInputError(f"merge input column {col!r} has nulls")
    k = int_key(data, keys)
    if data.num_rows and (k is None or not last_of_each(k).all()) and not _few_distinct(data, keys):
        # A single integer key is sorted, not hashed; a few rows of string or integer keys (the control tables'
        # merges) are checked in Python, so such a run never loads Arrow's group-by engine (about 0.2 s of CPU).
        groups = data.select(keys).group_by(keys).aggregate([([], "count_all")])
        if groups.num_rows != data.num_rows:
            dup = groups.filter(pc.greater(groups.column("count_all"), 1)).slice(0, 3).drop(["count_all"])
            raise MergeInputError(f"merge input must hold one row per key; duplicated keys e.g. {dup.to_pylist()}")
    return data


# At most this many rows are checked for repeated keys as Python tuples (a set) instead of an Arrow group-by.
FEW_ROWS = 4096


def _few_distinct(data: pa.Table, keys: list[str]) -> bool:
    """Whether `data` (no nulls in `keys`) is small, keyed by integer and string columns only (whose Python values
    are equal exactly when Arrow's are), and holds one row per key. False means: check with the group-by."""
    if data.num_rows > FEW_ROWS or not all(_exact_in_python(data.schema.field(c).type) for c in keys):
        return False
    if data.num_rows == 1:
        return True
    return len(set(zip(*(data.column(c).to_pylist() for c in keys), strict=True))) == data.num_rows


def _exact_in_python(t: pa.DataType) -> bool:
    return pa.types.is_integer(t) or pa.types.is_string(t) or pa.types.is_large_string(t) or \
        pa.types.is_binary(t) or pa.types.is_large_binary(t)


def int_key(table: pa.Table, keys: list[str]) -> np.ndarray | None:
    """The values of a single integer key column without nulls as numpy (None for any other key)."""
    if len(keys) != 1:
        return None
    col = table.column(keys[0])
    if not pa.types.is_integer(col.type) or col.null_count:
        return None
    return col.to_numpy()


def last_of_each(k: np.ndarray) -> np.ndarray:
    """Per row, whether it is the last row of its key value (a stable sort: near-linear on the runs of ascending
    keys binlogs mostly hold)."""
    order = np.argsort(k, kind="stable")
    ranked = k[order]
    keep = np.zeros(len(k), dtype=bool)
    if len(k):
        ends = np.empty(len(k), dtype=bool)
        np.not_equal(ranked[1:], ranked[:-1], out=ends[:-1])
        ends[-1] = True
        keep[order[ends]] = True
    return keep


def current_columns(data: pa.Table) -> list[str]:
    """The current table's columns for merge input `data`: everything except `_deleted`."""
    return [c for c in data.column_names if c != DELETED]


COLLAPSE_BYTES = 64 << 20  # reduced pieces held before they are reduced together (NewestPerKey)


class NewestPerKey:
    """Reduced pieces (one row per key each, in binlog order) to one row per key, the one with the largest `_seq`.

    Pieces are held as they come and reduced together when they outgrow a budget: COLLAPSE_BYTES, then twice what
    the last reduction kept (so each row is looked at a bounded number of times however many pieces come; a
    reduction reads the key and `_seq` columns, and copies only the pieces that lost rows)."""

    def __init__(self, keys: list[str]) -> None:
        self.keys = keys
        self.parts: list[pa.Table] = []
        self.held = 0
        self.limit = COLLAPSE_BYTES

    def add(self, part: pa.Table) -> None:
        self.parts.append(part)
        self.held += part.nbytes
        if len(self.parts) > 1 and self.held > self.limit:  # keys changed again in later pieces: reduce as we go
            self._reduce()
            self.limit = max(COLLAPSE_BYTES, 2 * self.held)

    def _in_seq_order(self) -> bool:
        """Whether every part's `_seq` values all lie above the previous part's (pieces come in binlog order)."""
        top = None
        for p in self.parts:
            if not p.num_rows:
                continue
            mm = pc.min_max(p.column(SEQ)).as_py()
            if top is not None and mm["min"] <= top:
                return False
            top = mm["max"]
        return True

    def result(self) -> pa.Table:
        self._reduce()
        return pa.concat_tables(self.parts) if len(self.parts) > 1 else self.parts[0]

    def _reduce(self) -> None:
        if len(self.parts) < 2:
            return
        ids = pa.concat_tables([p.select([*self.keys, SEQ]) for p in self.parts])
        n = ids.num_rows
        k = int_key(ids, self.keys) if self._in_seq_order() else None
        if k is not None:
            # Parts in `_seq` order, one row per key each: a key's newest row is its last one in part order.
            keep = last_of_each(k)
            if keep.all():
                return
        else:
            ids = ids.append_column("_i", np_array(np.arange(n, dtype=np.int64))).sort_by([(SEQ, "ascending")])
            ids = ids.append_column("_r", np_array(np.arange(n, dtype=np.int64)))
            last = ids.group_by(self.keys, use_threads=False).aggregate([("_r", "max")])
            if last.num_rows == n:  # no key in two pieces: every row stays
                return
            keep = np.zeros(n, dtype=bool)
            keep[ids.column("_i").take(last.column("_r_max")).to_numpy()] = True
        parts, at = [], 0
        for p in self.parts:
            mine = keep[at:at + p.num_rows]
            at += p.num_rows
            if mine.all():
                parts.append(p)
            elif mine.any():
                parts.append(p.filter(np_array(mine)))
        self.parts = parts
        self.held = sum(p.nbytes for p in parts)
