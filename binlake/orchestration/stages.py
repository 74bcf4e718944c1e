"""The lake stages of one instance's run, over the deployment config: prepare (decode + history), the gate before
merge, merge, the gate after merge, publish. Each calls `binlake.lake.pipeline` (the gates: `binlake.quality.stages`)
and returns JSON-safe data.

These touch Delta and Arrow, so the Airflow tasks run them in a child process (`jobs.py`), never in the task
process itself (delta-rs can abort a process at exit, which Airflow would take for a failure).
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..config import DeploymentConfig
from .service import OrchestrationError, fetch, landed_files, source_instance

STAGES = ("fetch", "prepare", "gate_before", "merge", "gate_after", "publish", "kafka")


def ingest_options(cfg: DeploymentConfig, instance: str, lineage: str):
    """IngestOptions for one instance and lineage: every landed file (only what is not complete gets read)."""
    from ..lake.ingest import IngestOptions

    inst = cfg.instance(instance)
    # No snapshot taken yet (a local store without the instance): the binlog's own DDL is all there is.
    schemas = cfg.schemas if "://" in cfg.schemas or (Path(cfg.schemas) / source_instance(inst)).is_dir() else None
    opts = IngestOptions(lake=cfg.lake, files=landed_files(cfg, instance, lineage), schemas=schemas,
                         instance=source_instance(inst), lineage=lineage, engine=cfg.engine, pipeline=cfg.pipeline,
                         tables=inst.table_regex, split_bytes=cfg.split_mb << 20, helper_tables=cfg.helper_tables)
    opts.quality = quality_options(cfg)
    return opts


def kafka_options(cfg: DeploymentConfig, instance: str, lineage: str):
    """KafkaSinkOptions from `[sink.kafka]` for one instance's landed files (the publisher is named after the
    instance and lineage: its offsets record and transactional.id)."""
    from ..sinks.kafka import KafkaSinkOptions

    sink = cfg.sink.kafka
    if sink is None:
        raise OrchestrationError(f"{cfg.path}: no [sink.kafka] section: the kafka stage has nothing to publish to")
    inst = cfg.instance(instance)
    schemas = cfg.schemas if "://" in cfg.schemas or (Path(cfg.schemas) / source_instance(inst)).is_dir() else None
    return KafkaSinkOptions(bootstrap=sink.bootstrap_servers, topic_prefix=sink.topic_prefix,
                            files=landed_files(cfg, instance, lineage), schemas=schemas,
                            name=f"{instance}-{lineage}", tables=inst.table_regex, tombstones=sink.tombstones,
                            partitions=sink.partitions, replication=sink.replication_factor,
                            batch_bytes=sink.batch_mb << 20, producer_config=dict(sink.producer))


def quality_options(cfg: DeploymentConfig):
    """The gates' settings. Their own alert channel stays log-only: under Airflow the failing task's notifiers
    deliver the alert (webhook, email) with instance, table and interval, once."""
    return cfg.quality.model_copy(deep=True)


def run_stage(cfg: DeploymentConfig, stage: str, instance: str, lineage: str | None = None,
              batch: int | None = None, executor: Callable | None = None, window: tuple | None = None,
              credentials: dict | None = None) -> dict[str, Any]:
    """Run one stage; returns {"batch": ...} plus the stage's report (fetch: what landed)."""
    if stage not in STAGES:
        raise OrchestrationError(f"unknown stage {stage!r} (one of {', '.join(STAGES)})")
    started = time.perf_counter()
    if stage == "fetch":
        if window is None:
            raise OrchestrationError(f"instance {instance}: fetch needs a window (start, end)")
        out: dict[str, Any] = fetch(cfg, instance, window[0], window[1], credentials, log=print)
        out["seconds"] = round(time.perf_counter() - started, 3)
        return out
    if lineage is None:
        raise OrchestrationError(f"instance {instance}: {stage} needs the host lineage fetch chose")
    if stage == "kafka":
        from ..sinks.kafka import publish

        summary = publish(kafka_options(cfg, instance, lineage), progress=print)
        return {"batches": summary.batches, "end": summary.end, "schema_changes": summary.schema_changes,
                "held": summary.held,
                "changes": {f"{t}:{op}": n for (t, op), n in sorted(summary.changes.items())},
                "seconds": round(time.perf_counter() - started, 3)}
    from ..lake import pipeline
    from ..quality import stages as gate_stages

    opts = ingest_options(cfg, instance, lineage)
    if stage == "prepare":
        kwargs = {"executor": executor} if executor is not None else {}
        out = {"batch": pipeline.prepare_batch(opts, progress=print, **kwargs),
               "decoded_by": "spark" if executor is not None else "in-process"}
    elif batch is None:
        out = {"batch": None, "skipped": "nothing new to ingest"}
    elif stage.startswith("gate_") and not cfg.quality.enabled:
        out = {"batch": batch, "skipped": "quality.enabled is false"}
    elif stage == "gate_before":
        out = {"batch": batch, "report": jsonable(gate_stages.gate_before_merge(opts, batch))}
    elif stage == "merge":
        out = {"batch": batch, "merged": jsonable(pipeline.merge_batch(opts, batch))}
    elif stage == "gate_after":
        out = {"batch": batch, "report": jsonable(gate_stages.gate_after_merge(opts, batch))}
    else:
        out = summary_dict(pipeline.publish_batch(opts, batch))
    out["seconds"] = round(time.perf_counter() - started, 3)
    return out


def summary_dict(summary) -> dict[str, Any]:
    """A RunSummary as data: the tables that changed (one Asset event each), the lag, the tables held back (one
    line each, binlake.lake.holds) and warnings."""
    from ..lake.holds import held_line

    rows: dict[str, dict[str, int]] = {}
    for (table, op), n in summary.rows.items():
        rows.setdefault(table, {})[op] = n
    return {"batch": summary.batch, "files": list(summary.files), "rows": rows,
            "changed_tables": sorted(t for t, ops in rows.items() if sum(ops.values())),
            "history_only": list(summary.history_only), "lag_seconds": summary.lag_seconds,
            "held": {name: held_line(name, h) for name, h in sorted(getattr(summary, "held", {}).items())},
            "warnings": list(getattr(summary, "warnings", [])), "published_at": time.time()}


def jsonable(value: Any) -> Any:
    """Reports (dataclasses, Counters, tuples) as JSON-safe data."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return jsonable(dataclasses.asdict(value))
    if isinstance(value, dict):
        return {str(k) if not isinstance(k, tuple) else ".".join(map(str, k)): jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, set)):
        return [jsonable(v) for v in value]
    if value is None or isinstance(value, (str, int, float, bool)):
        return value
    return str(value)

