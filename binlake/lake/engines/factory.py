"""Choosing an engine by its configured name."""

from __future__ import annotations

from typing import Any

from .base import DeltaEngine, EngineUnavailable

DEFAULT_ENGINE = "delta-rs"
ENGINE_NAMES = ("delta-rs", "delta-spark")
_default_spark: Any = None


def use_spark(session: Any) -> None:
    """The SparkSession `get_engine("delta-spark")` uses when it is given none. The command line sets it for
    `--engine delta-spark` (binlake.spark builds it, with the Delta jars); the lake layer never starts Spark."""
    global _default_spark
    _default_spark = session


def get_engine(name: str | None = None, spark: Any = None, storage_options: dict[str, str] | None = None,
               setting: str = "engine") -> DeltaEngine:
    """The engine called `name` (default delta-rs). `setting` names the config value in error messages."""
    chosen = (name or DEFAULT_ENGINE).strip().lower()
    if chosen == "delta-rs":
        try:
            from .deltars import DeltaRsEngine

            return DeltaRsEngine(storage_options)
        except ImportError as exc:
            raise EngineUnavailable(f"{setting} = {name!r}: the deltalake package is not importable ({exc})") from exc
    if chosen == "delta-spark":
        from .deltaspark import DeltaSparkEngine, available

        ok, reason = available(spark if spark is not None else _default_spark)
        if not ok:
            raise EngineUnavailable(f"{setting} = {name!r}: delta-spark is unavailable: {reason}")
        return DeltaSparkEngine(spark if spark is not None else _default_spark, storage_options)
    raise EngineUnavailable(f"{setting} = {name!r} is not a Delta engine; choose one of {', '.join(ENGINE_NAMES)}")
