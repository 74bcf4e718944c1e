"""`LAKE/_binlake/validations`: every gate run's expectation results, one row per expectation (a Delta table).

Appended once per gate run (app id per pipeline and stage, version = batch * 1000 + run number), so a stage
retried after a crash does not record its results twice, while a released batch's new gate runs are kept too.
"""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime

import pyarrow as pa

SCHEMA = pa.schema([
    pa.field("run_id", pa.string()),
    pa.field("pipeline", pa.string()),
    pa.field("batch", pa.int64()),
    pa.field("stage", pa.string()),
    pa.field("table", pa.string()),
    pa.field("gate", pa.string()),
    pa.field("description", pa.string()),
    pa.field("expectation", pa.string()),
    pa.field("kwargs", pa.string()),
    pa.field("success", pa.bool_()),
    pa.field("unexpected_count", pa.int64()),
    pa.field("observed", pa.string()),
    pa.field("sample", pa.string()),
    pa.field("error", pa.string()),
    pa.field("checked_at", pa.timestamp("us", tz="UTC")),
    pa.field("gate_seconds", pa.float64()),
])


def validations_path(lake: str) -> str:
    return lake.rstrip("/") + "/_binlake/validations"


def record_report(engine, layout, pb, report) -> bool:
    """Append `report`'s results (a quality.gates.GateReport) for pending batch `pb`."""
    key = "before" if report.stage.startswith("before") else "after"
    run = pb.gates.get(key, {}).get("runs", 0)
    now = datetime.now(UTC)
    run_id = str(uuid.uuid4())
    rows = [{"run_id": run_id, "pipeline": pb.pipeline, "batch": pb.batch, "stage": r.stage, "table": r.table,
             "gate": r.gate, "description": r.description, "expectation": r.expectation,
             "kwargs": json.dumps(r.kwargs, default=str), "success": r.success,
             "unexpected_count": r.unexpected_count, "observed": json.dumps(r.observed, default=str),
             "sample": json.dumps(r.sample, default=str), "error": r.error, "checked_at": now,
             "gate_seconds": report.seconds} for r in report.results]
    data = pa.Table.from_pylist(rows, schema=SCHEMA)
    return engine.append(validations_path(layout.root), data, layout.app_id(f"validations-{key}"),
                         pb.batch * 1000 + run)


def read_validations(engine, lake: str) -> pa.Table:
    path = validations_path(lake)
    if not engine.exists(path):
        return SCHEMA.empty_table()
    return engine.read(path)
