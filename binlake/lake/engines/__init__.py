"""Delta commit engines: one interface (DeltaEngine), two implementations (delta-rs, delta-spark).

Nothing here imports pyspark at module level; the delta-spark engine imports it when constructed.
"""

from .base import (
    DELETED,
    SEQ,
    ColumnChange,
    DeltaEngine,
    EngineError,
    EngineUnavailable,
    HistoryEntry,
    MergeInputError,
    TxnInfo,
    bookkeeping_engine,
)
from .factory import DEFAULT_ENGINE, ENGINE_NAMES, get_engine, use_spark
from .tombstones import TOMBSTONE_DIR, tombstone_path

__all__ = [
    "DEFAULT_ENGINE",
    "DELETED",
    "ENGINE_NAMES",
    "SEQ",
    "TOMBSTONE_DIR",
    "ColumnChange",
    "DeltaEngine",
    "EngineError",
    "EngineUnavailable",
    "HistoryEntry",
    "MergeInputError",
    "TxnInfo",
    "bookkeeping_engine",
    "get_engine",
    "tombstone_path",
    "use_spark",
]
