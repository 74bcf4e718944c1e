"""Choosing an engine by its configured name."""

from __future__ import annotations

from typing import Any

from .base import DeltaEngine, EngineUnavailable

DEFAULT_ENGINE = "delta-rs"
ENGINE_NAMES = ("delta-rs", "delta-spark")


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

        if spark is None:  # the CLI, a stage process: binlake's own session, with the jars setup fetched
            from ...spark import SparkUnavailable, build_spark_session

            try:
                spark = build_spark_session("binlake", delta=True)
            except (EngineUnavailable, SparkUnavailable) as exc:
                raise EngineUnavailable(f"{setting} = {name!r}: {exc}") from None
        ok, reason = available(spark)
        if not ok:
            raise EngineUnavailable(f"{setting} = {name!r}: delta-spark is unavailable: {reason}")
        return DeltaSparkEngine(spark, storage_options)
    raise EngineUnavailable(f"{setting} = {name!r} is not a Delta engine; choose one of {', '.join(ENGINE_NAMES)}")
