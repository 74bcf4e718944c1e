"""Running Great Expectations suites on pandas data frames in an ephemeral context (no GE project directory).

Each binlake check is a GE expectation tagged with the gate it belongs to; results come back as plain records
(`ExpectationResult`) that the gates report, the validations table stores and the HTML page shows.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from functools import cache
from typing import Any

os.environ.setdefault("GX_ANALYTICS_ENABLED", "False")


@dataclass
class Check:
    gate: str  # binlake's name for the property checked, e.g. "pk_not_null"
    description: str
    expectation: Any  # a great_expectations Expectation


@dataclass
class ExpectationResult:
    stage: str
    table: str
    gate: str
    description: str
    expectation: str  # GE expectation type, e.g. expect_compound_columns_to_be_unique
    kwargs: dict[str, Any]
    success: bool
    unexpected_count: int | None = None
    observed: Any = None
    sample: list = field(default_factory=list)
    error: str | None = None

    def line(self) -> str:
        detail = []
        if self.unexpected_count:
            detail.append(f"{self.unexpected_count} unexpected")
        if self.observed is not None:
            detail.append(f"observed {self.observed}")
        if self.sample:
            detail.append(f"e.g. {self.sample[:5]}")
        if self.error:
            detail.append(f"error: {self.error}")
        args = ", ".join(f"{k}={v}" for k, v in self.kwargs.items() if k not in ("condition_parser",))
        return (f"{self.table}: {self.gate} ({self.description}) - {self.expectation}({args})"
                + (f": {'; '.join(detail)}" if detail else ""))


@cache
def _context():
    import great_expectations as gx

    context = gx.get_context(mode="ephemeral")
    try:
        from great_expectations.data_context.types.base import ProgressBarsConfig

        context.variables.progress_bars = ProgressBarsConfig(globally=False)
    except Exception:  # older/newer layouts: progress bars are cosmetic
        pass
    return context


@cache
def _batch_definition():
    source = _context().data_sources.add_pandas("binlake")
    return source.add_dataframe_asset("frame").add_batch_definition_whole_dataframe("whole")


@cache
def _spark_batch_definition():
    """Spark DataFrames are validated by Great Expectations' Spark execution engine, on the executors."""
    source = _context().data_sources.add_spark("binlake_spark")
    return source.add_dataframe_asset("frame").add_batch_definition_whole_dataframe("whole")


def is_spark_frame(frame) -> bool:
    return type(frame).__module__.startswith("pyspark.")


def ensure_context() -> None:
    _batch_definition()


def _plain(value: Any) -> Any:
    """JSON-safe form of GE's observed values and samples (numpy scalars, Decimals, timestamps, tuples)."""
    try:
        return json.loads(json.dumps(value, default=lambda v: v.item() if hasattr(v, "item") else str(v)))
    except (TypeError, ValueError):
        return str(value)


def validate(frame, checks: list[Check], stage: str, table: str, sample_size: int = 20) -> list[ExpectationResult]:
    """Run `checks` on the pandas data frame `frame` (or a Spark DataFrame: then on Spark's executors); one result
    per check, in order."""
    import great_expectations as gx

    if not checks:
        return []
    batch_definition = _batch_definition()  # creates the context, which suites need
    if is_spark_frame(frame):
        batch_definition = _spark_batch_definition()
    suite = gx.ExpectationSuite(name=f"binlake {stage} {table}")
    for i, check in enumerate(checks):
        check.expectation.meta = {**(check.expectation.meta or {}), "binlake_check": i}
        suite.add_expectation(check.expectation)
    outcome = batch_definition.get_batch(batch_parameters={"dataframe": frame}).validate(suite)
    out: list[ExpectationResult | None] = [None] * len(checks)
    for r in outcome.results:
        i = int(r.expectation_config.meta["binlake_check"])
        check = checks[i]
        res = r.result or {}
        info = r.exception_info or {}
        error = info.get("exception_message") if info.get("raised_exception") else None
        kwargs = {k: _plain(v) for k, v in r.expectation_config.kwargs.items() if k not in ("batch_id",)}
        out[i] = ExpectationResult(
            stage, table, check.gate, check.description, r.expectation_config.type, kwargs,
            bool(r.success) and error is None, res.get("unexpected_count"), _plain(res.get("observed_value")),
            _plain((res.get("partial_unexpected_list") or [])[:sample_size]), error)
    missing = [checks[i].gate for i, r in enumerate(out) if r is None]
    if missing:
        raise RuntimeError(f"Great Expectations returned no result for {missing}")
    return [r for r in out if r is not None]
