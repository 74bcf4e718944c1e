"""The Delta commit engine interface shared by the delta-rs and delta-spark implementations.

Every commit an engine makes carries a Delta application transaction (`txn` action: app id + version) so a
retried batch is a no-op. See docs/engines.md for the idempotency and tombstone design.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal, Protocol, TypedDict, runtime_checkable

import pyarrow as pa

from ...exitcodes import ExitCode

SEQ = "_seq"
"""Order key column of current-state tables (long; larger is newer)."""
DELETED = "_deleted"
"""Merge-input-only flag: the change is a delete of its key."""


class EngineError(RuntimeError):
    """A Delta operation failed in a way the caller should see (bad input, unreadable table, ...)."""


class EngineUnavailable(EngineError):
    """The configured engine cannot run in this process (missing package, jars or session)."""

    exit_code = ExitCode.UNAVAILABLE

    exit_code = ExitCode.UNAVAILABLE


class MergeInputError(EngineError, ValueError):
    """The data handed to `merge` violates its contract (missing columns, duplicate keys, null keys...)."""


class TxnInfo(TypedDict):
    app_id: str
    version: int


class HistoryEntry(TypedDict):
    version: int
    timestamp: int | None
    """Commit time, milliseconds since the epoch."""
    operation: str
    """Delta operation name: WRITE, MERGE, RESTORE, CREATE TABLE, ..."""
    action: str | None
    """binlake's name for the commit (append, merge, replace_schema, ...); None for foreign commits."""
    txns: list[TxnInfo]
    """Application transactions recorded by the commit (mirrored in commit info by binlake)."""


ChangeKind = Literal["add", "drop", "rename", "convert"]


@dataclass(frozen=True)
class ColumnChange:
    """One column change of a current-table schema change (applied in order by `replace_schema`).

    - add: new column `column` of type `type`; existing rows get `default` (None = null). `position` is the
      index in the new schema (None = last).
    - drop: remove `column`.
    - rename: `column` becomes `new_name`; values kept.
    - convert: `column` changes to `type`; values pass through `converter` (an Arrow array -> array function)
      or, when None, a safe Arrow cast that fails on overflow/truncation instead of guessing.
    """

    kind: ChangeKind
    column: str
    type: pa.DataType | None = None
    default: pa.Scalar | None = None
    position: int | None = None
    new_name: str | None = None
    converter: Callable[[pa.Array], pa.Array] | None = None
    # add: the new column's values computed from the row (a record batch of the columns so far) instead of
    # `default` (generated columns an ALTER adds: binlake.lake.generated)
    compute: Callable[[pa.RecordBatch], pa.Array] | None = None

    @classmethod
    def add(cls, column: str, type: pa.DataType, default: pa.Scalar | None = None,
            position: int | None = None, compute: Callable[[pa.RecordBatch], pa.Array] | None = None) -> ColumnChange:
        return cls("add", column, type=type, default=default, position=position, compute=compute)

    @classmethod
    def drop(cls, column: str) -> ColumnChange:
        return cls("drop", column)

    @classmethod
    def rename(cls, column: str, new_name: str) -> ColumnChange:
        return cls("rename", column, new_name=new_name)

    @classmethod
    def convert(cls, column: str, type: pa.DataType,
                converter: Callable[[pa.Array], pa.Array] | None = None) -> ColumnChange:
        return cls("convert", column, type=type, converter=converter)


@runtime_checkable
class DeltaEngine(Protocol):
    """Commits to Delta tables, exactly once per (app_id, batch).

    `batch` is a non-negative, per-app-id increasing number; a write whose batch is <= the version already
    recorded for its app id is skipped and the method returns False (True when it committed).
    """

    name: str

    def exists(self, path: str) -> bool: ...

    def version(self, path: str) -> int | None:
        """Current table version, None when there is no table."""
        ...

    def txn_version(self, path: str, app_id: str) -> int | None:
        """Last application-transaction version committed for app_id, None when none (or reset)."""
        ...

    def append(self, path: str, data: pa.Table, app_id: str, batch: int,
               partition_by: list[str] | None = None) -> bool:
        """Append rows; new columns are added to the table schema, missing ones are null."""
        ...

    def merge(self, path: str, data: pa.Table, keys: list[str], app_id: str, batch: int) -> bool:
        """Upsert/delete one row per key by `_seq` order (see docs/engines.md); creates the table if missing."""
        ...

    def replace_schema(self, path: str, changes: Sequence[ColumnChange], app_id: str, batch: int) -> bool:
        """Rewrite the table with the changed schema in one commit."""
        ...

    def truncate(self, path: str, app_id: str, batch: int) -> bool:
        """Remove every row in one commit (schema and tombstones stay): TRUNCATE, DROP, a table renamed away."""
        ...

    def copy_table(self, src: str, version: int, dst: str, app_id: str, batch: int) -> bool:
        """Overwrite `dst` (created when missing) with `src` at `version`, schema and tombstones included, in one
        commit of `dst`: a RENAME moving a current table to its new name."""
        ...

    def read(self, path: str, columns: list[str] | None = None) -> pa.Table: ...

    def history(self, path: str) -> list[HistoryEntry]:
        """Commit log entries, newest first."""
        ...

    def restore(self, path: str, version: int) -> None:
        """Roll the table (and its tombstones and txn versions) back to `version`."""
        ...


def is_committed(recorded: int | None, batch: int) -> bool:
    return recorded is not None and recorded >= batch


def check_batch(app_id: str, batch: int) -> None:
    if not app_id:
        raise EngineError("app_id must be a non-empty string")
    if isinstance(batch, bool) or not isinstance(batch, int) or batch < 0:
        raise EngineError(f"batch must be a non-negative int, got {batch!r}")


def bookkeeping_engine(engine: DeltaEngine) -> DeltaEngine:
    """The engine binlake's own small tables (`_binlake/`: control, registry, catalog: a few rows built in the
    driver) are read and committed with: the engine's `bookkeeping` engine when it names one (delta-spark: its
    delta-rs log writer, since a Spark job per read and per MERGE of a few driver rows is only fixed cost), else
    the engine itself."""
    return getattr(engine, "bookkeeping", None) or engine
