"""Quarantine: a batch that failed a gate is held back with the evidence, and released by an operator.

On failure the batch's files are marked `quarantined` in the control table with the failing expectations as
their last error (their `end_pos`, the watermark, does not move), the pending batch records the failures, and an
alert goes out per failing table. No new batch starts while one is quarantined (it would decode the same changes
again). `release` marks the files `decoded` again and (by default) runs the batch's remaining stages at once:
the gates run again, and a batch that now passes is merged and published exactly once. When the decoded batch
itself is wrong (e.g. a stale schema snapshot named the columns), `discard` undoes its history append and drops
it instead: the next run decodes the same range again, as a new batch, with the fixed inputs.
"""

from __future__ import annotations

from dataclasses import asdict
from datetime import UTC, datetime

from ..lake.control import ControlTable, FileState
from ..lake.engines import get_engine
from ..lake.layout import LakeLayout
from ..lake.pending import BatchStore
from ..lake.validations import read_validations
from ..settings import AlertConfig
from .alerts import Alert, send_alert
from .report import render
from .runner import ExpectationResult


def _mark(engine, layout, pb, status: str, error: str | None) -> None:
    """One control-table event for the batch's files (their end_pos stays where the previous batch left it). A
    catch-up batch of a held-back table re-reads published files: the control table is not its to change."""
    if getattr(pb, "catchup", None):
        return
    pb.control_events += 1
    states = []
    for f in pb.files:
        st = FileState(f["instance"], f["lineage"], f["file"], f["file_seq"], f["size"], status,
                       f["start_pos"], f["previous_complete"], pb.batch, f.get("attempts", 0), error)
        if status == "quarantined":
            st.attempts += 1
            f["attempts"] = st.attempts
        states.append(st)
    ControlTable(engine, layout).record(states, pb.batch, event=pb.control_events)


def quarantine_batch(engine, layout, store, pb, stage: str, failures: list[ExpectationResult],
                     alerts: AlertConfig | None, lake: str) -> dict:
    """Mark the batch quarantined (control table, then the pending batch) and alert. Returns alert outcomes."""
    error = f"{stage} gate: " + "; ".join(f.line() for f in failures)
    _mark(engine, layout, pb, "quarantined", error[:4000])
    pb.state = "quarantined"
    pb.quarantine = {"stage": stage, "at": datetime.now(UTC).isoformat(),
                     "failures": [asdict(f) for f in failures], "alerts": {}}
    store.save(pb)
    page = _write_batch_report(engine, store, pb, lake)
    outcomes = {}
    for table in sorted({f.table for f in failures}):
        alert = Alert(table, pb.batch, stage, [{"expectation": f.expectation, "gate": f.gate, "kwargs": f.kwargs,
                                                "unexpected_count": f.unexpected_count, "observed": f.observed,
                                                "sample": f.sample[:5], "error": f.error}
                                               for f in failures if f.table == table], lake, pb.pipeline, page)
        outcomes[table] = send_alert(alerts, alert)
    pb.quarantine["alerts"] = outcomes
    store.save(pb)
    return outcomes


def _write_batch_report(engine, store, pb, lake: str) -> str | None:
    """The batch's gate results as an HTML page next to its manifest (`gates.html`); None if it cannot be written
    (the quarantine itself must not fail on it)."""
    path = f"{store.dir}/{pb.batch}/gates.html"
    try:
        page = render(read_validations(engine, lake), f"binlake quality gates: batch {pb.batch}", pb.batch)
        with store.fs.open_output_stream(path) as f:
            f.write(page.encode())
    except Exception:
        return None
    return path


def quarantined(lake: str, pipeline: str = "default") -> list:
    """Pending batches of the pipeline that are quarantined (binlake.lake.pending.PendingBatch)."""
    return [pb for pb in BatchStore(lake, pipeline).unpublished() if pb.state == "quarantined"]


def quarantined_files(lake: str, pipeline: str = "default", engine=None) -> list[FileState]:
    """Control-table rows marked quarantined outside any quarantined batch (e.g. a download that failed its
    checksum), so `binlake quarantine list` shows every held-back file."""
    engine = engine or get_engine()
    in_batches = {(f["instance"], f["lineage"], f["file"]) for pb in quarantined(lake, pipeline) for f in pb.files}
    states = ControlTable(engine, LakeLayout(lake, pipeline)).load()
    return sorted((s for key, s in states.items() if s.status == "quarantined" and key not in in_batches),
                  key=lambda s: (s.instance, s.lineage, s.file_seq))


def release_batch(opts, batch: int, engine=None) -> None:
    """Release a quarantined batch: the next `binlake.quality.stages.run_ingest` runs its remaining stages (gates,
    merge, publish; the batch fails again with GateFailed if the gates still fail)."""
    engine = engine or get_engine(opts.engine)
    store = BatchStore(opts.lake, opts.pipeline)
    pb = store.load(batch)
    if pb.state != "quarantined":
        raise ValueError(f"batch {batch} is not quarantined (state: {pb.state})")
    _mark(engine, LakeLayout(opts.lake, opts.pipeline), pb, "decoded", None)
    pb.state = "released"
    pb.quarantine = {**(pb.quarantine or {}), "released_at": datetime.now(UTC).isoformat()}
    store.save(pb)


class DiscardError(ValueError):
    """The batch cannot be discarded (not quarantined, or later history commits; names the table and why)."""


def discard_batch(opts, batch: int, engine=None) -> list[str]:
    """Drop a quarantined batch: restore each history table to its version before the batch's append (only when
    that append is still the table's newest commit), mark the batch discarded and its files back to their status
    before it. The watermark never moved, so the next run decodes the same range again as a new batch. Returns
    the history tables restored."""
    engine = engine or get_engine(opts.engine)
    layout = LakeLayout(opts.lake, opts.pipeline)
    store = BatchStore(opts.lake, opts.pipeline)
    pb = store.load(batch)
    if pb.state != "quarantined":
        raise DiscardError(f"batch {batch} is not quarantined (state: {pb.state}); only a quarantined batch can be "
                           "discarded")
    plan = []
    for name, info in sorted(pb.tables.items()):
        path = layout.history_path(info["database"], info["table"], info.get("generation", 1))
        if not engine.exists(path):
            continue
        app = layout.app_id("history", info["database"], info["table"])
        entries = engine.history(path)  # newest first
        mine = [h for h in entries if {"app_id": app, "version": batch * 1000} in h["txns"]]
        if not mine:
            continue  # the batch's append never landed
        if mine[0]["version"] != entries[0]["version"]:
            raise DiscardError(f"{name}: history commits after batch {batch}'s append (versions "
                               f"{[h['version'] for h in entries if h['version'] > mine[0]['version']]}); "
                               "discarding it would undo them too")
        plan.append((name, path, mine[0]["version"] - 1))
    for _name, path, version in plan:
        engine.restore(path, version)
    if not pb.catchup:  # a discarded catch-up batch leaves its table held back, the control table as it is
        pb.control_events += 1
        states = [FileState(f["instance"], f["lineage"], f["file"], f["file_seq"], f["size"], f["previous_status"],
                            f["start_pos"], f["previous_complete"], pb.batch, f.get("attempts", 0),
                            f"batch {batch} discarded after a failed {(pb.quarantine or {}).get('stage')} gate")
                  for f in pb.files]
        ControlTable(engine, layout).record(states, pb.batch, event=pb.control_events)
    pb.state = "discarded"
    pb.quarantine = {**(pb.quarantine or {}), "discarded_at": datetime.now(UTC).isoformat()}
    store.save(pb)
    store.drop_data(pb)
    return [name for name, _, _ in plan]
