"""The gate stages and the whole ingest run: the layer that may import both the lake's stages (binlake.lake.pipeline)
and the gates (gates.py, quarantine.py).

    prepare_batch      (lake)     decode, persist the pending batch, append history
    gate_before_merge  (here)     Great Expectations gates on the decoded batch -> GateFailed (batch quarantined)
    merge_batch        (lake)     the current tables' MERGEs
    gate_after_merge   (here)     gates on the merged current tables -> GateFailed (merges undone, quarantined)
    publish_batch      (lake)     the control table's watermark moves

`run_ingest` runs them in order in one process (`binlake ingest`, the demo, the Spark job); Airflow runs each as
its own task (binlake.orchestration.stages). `release_table` runs them on a held-back table's catch-up batch.
"""

from __future__ import annotations

import importlib
import sys
import threading
import time
from typing import TYPE_CHECKING

from ..lake.engines import DeltaEngine, get_engine
from ..lake.holds import TablesHeldBack
from ..lake.ingest import Executor, IngestOptions, RunSummary, local_executor
from ..lake.layout import LakeLayout
from ..lake.pending import BatchStore, PendingBatch
from ..lake.pipeline import (
    Progress,
    StageOrderError,
    hold_partial_images,
    load_batch,
    merge_batch,
    open_stage,
    prepare_batch,
    prepare_catchup,
    publish_batch,
    quiet,
    undo_merge,
)
from ..lake.validations import record_report

if TYPE_CHECKING:
    from .gates import GateFailed, GateReport

# The gates and the quarantine (and what they import: alerts by mail and webhook, reports) load when a gate runs:
# `binlake ingest --no-gates` never needs them.

__all__ = ["GateFailed", "GateReport", "gate_after_merge", "gate_before_merge", "release_table", "run_ingest"]


def __getattr__(name: str):
    if name in ("GateFailed", "GateReport"):
        from .gates import GateFailed, GateReport

        return {"GateFailed": GateFailed, "GateReport": GateReport}[name]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _gate_failed(opts: IngestOptions, engine: DeltaEngine, store: BatchStore, pb: PendingBatch,
                 report: GateReport) -> GateFailed:
    from .gates import GateFailed
    from .quarantine import quarantine_batch

    failures = report.failures
    quarantine_batch(engine, LakeLayout(opts.lake, opts.pipeline), store, pb, report.stage, failures,
                     opts.quality.alerts, opts.lake)
    return GateFailed(report)


def _import_gx(pb: PendingBatch) -> None:
    """Import Great Expectations (seconds, once per process) outside the gates' own timing; recorded apart."""
    t0 = time.perf_counter()
    import great_expectations  # noqa: F401  (waits for an import another thread started)

    waited = time.perf_counter() - t0
    if waited > 0.01:
        pb.seconds["gate library import"] = waited


def gate_before_merge(opts: IngestOptions, batch: int, engine: DeltaEngine | None = None) -> GateReport:
    """Gates on the decoded batch. On failure: the batch is quarantined (its history stays, the current tables
    are not touched), an alert is sent and GateFailed raised."""
    engine, layout, store = open_stage(opts, engine)
    pb = load_batch(store, batch)
    hold_partial_images(engine, layout, store, pb)
    _import_gx(pb)
    from .gates import before_merge_gate

    report = before_merge_gate(pb, store, opts, engine)
    record_report(engine, layout, pb, report)
    pb.gates["before"] = {"runs": pb.gates.get("before", {}).get("runs", 0) + 1, "passed": report.success}
    pb.seconds["gate before merge"] = report.seconds
    store.save(pb)
    if not report.success:
        raise _gate_failed(opts, engine, store, pb, report)
    return report

def gate_after_merge(opts: IngestOptions, batch: int, engine: DeltaEngine | None = None) -> GateReport:
    """Gates on the merged current tables. On failure: every current table of the batch (and the schema
    registry) is restored to its version before the batch, the batch quarantined, an alert sent, GateFailed
    raised."""
    engine, layout, store = open_stage(opts, engine)
    pb = load_batch(store, batch)
    if not pb.gates.get("merge", {}).get("done"):
        raise StageOrderError(f"batch {batch}: gate_after_merge before merge_batch finished")
    _import_gx(pb)
    from .gates import after_merge_gate

    report = after_merge_gate(pb, store, opts, engine, layout)
    record_report(engine, layout, pb, report)
    pb.gates["after"] = {"runs": pb.gates.get("after", {}).get("runs", 0) + 1, "passed": report.success}
    pb.seconds["gate after merge"] = report.seconds
    store.save(pb)
    if not report.success:
        undo_merge(engine, layout, store, pb)
        raise _gate_failed(opts, engine, store, pb, report)
    return report

def run_ingest(opts: IngestOptions, executor: Executor = local_executor, engine: DeltaEngine | None = None,
               progress: Progress = quiet) -> RunSummary:
    """prepare -> gate -> merge -> gate -> publish, in one process."""
    started = time.perf_counter()
    gates = opts.quality.enabled
    if gates and executor is not local_executor and "great_expectations" not in sys.modules:
        # Decoding runs elsewhere (Spark tasks): the idle driver imports the gates' library meanwhile.
        threading.Thread(target=importlib.import_module, args=("great_expectations",), daemon=True).start()
    engine = engine or get_engine(opts.engine)
    batch = prepare_batch(opts, executor, engine, progress)
    if batch is None:
        return RunSummary(None)
    return _run_stages(opts, batch, engine, progress, started)


def _run_stages(opts: IngestOptions, batch: int, engine: DeltaEngine, progress: Progress,
                started: float) -> RunSummary:
    gates = opts.quality.enabled
    if gates:
        report = gate_before_merge(opts, batch, engine)
        progress(f"batch {batch}: before-merge gate passed ({len(report.results)} expectations, "
                 f"{report.seconds:.2f} s)")
    merge_batch(opts, batch, engine)
    if gates:
        report = gate_after_merge(opts, batch, engine)
        progress(f"batch {batch}: after-merge gate passed ({len(report.results)} expectations, "
                 f"{report.seconds:.2f} s)")
    summary = publish_batch(opts, batch, engine)
    summary.seconds["total"] = time.perf_counter() - started
    if summary.held:
        raise TablesHeldBack(summary.held, summary)
    return summary

def release_table(opts: IngestOptions, table: str, executor: Executor = local_executor,
                  engine: DeltaEngine | None = None, progress: Progress = quiet) -> RunSummary:
    """Catch a held-back table up now (after its cause was fixed): prepare_catchup, then the gates, the merge
    and publish. Raises TablesHeldBack when it is still held back (with the new cause)."""
    started = time.perf_counter()
    engine = engine or get_engine(opts.engine)
    batch = prepare_catchup(opts, table, executor, engine, progress)
    return _run_stages(opts, batch, engine, progress, started)
