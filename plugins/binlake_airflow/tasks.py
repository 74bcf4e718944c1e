"""The TaskFlow tasks of binlake's DAGs and the per-instance ingest chain the hourly and backfill DAGs share.

Each task is one idempotent step: discover -> fetch -> prepare (decode + history, Spark when configured) ->
gate before merge -> merge -> gate after merge -> publish; with `[sink.kafka]`, publish_kafka after fetch too. Tasks pass a small state dict ({instance, lineage,
batch}); the lake stages run in a child process (binlake.orchestration.jobs) whose result file is what counts.
"""

from __future__ import annotations

import logging
from datetime import UTC, datetime, timedelta
from typing import Any

from airflow.sdk import Asset, AssetAlias, TaskGroup, get_current_context, task

from binlake.config import DeploymentConfig, load_config

log = logging.getLogger("binlake")
ASSET_ALIAS = "binlake-tables"  # every current table that changed gets an Asset event through this alias
MAX_BACKFILL_CHUNKS = 1000  # hourly chunks per backfill run (Airflow maps at most 1024 by default)


def _parse_time(value: Any, what: str) -> datetime:
    if isinstance(value, datetime):
        t = value
    else:
        try:
            t = datetime.fromisoformat(str(value).replace("Z", "+00:00"))
        except ValueError:
            raise ValueError(f"{what} must be an ISO 8601 UTC time such as 2026-01-01T00:00:00Z, not {value!r}") \
                from None
    return t if t.tzinfo else t.replace(tzinfo=UTC)


def _window(cfg: DeploymentConfig, window: dict | None) -> tuple[datetime, datetime]:
    """A backfill chunk as given; else the run's data interval, its start moved back by `lookback_hours` (backup
    files can be uploaded hours after the interval they cover; landed files are not fetched again)."""
    if window:
        return _parse_time(window["start"], "window start"), _parse_time(window["end"], "window end")
    ctx = get_current_context()
    return ctx["data_interval_start"] - timedelta(hours=cfg.lookback_hours), ctx["data_interval_end"]


def _instance(instance: str | None) -> str:
    if instance:
        return instance
    params = get_current_context().get("params") or {}
    if not params.get("instance"):
        raise ValueError("no instance: give the `instance` param")
    return str(params["instance"])


def _credentials(cfg: DeploymentConfig, instance: str) -> dict[str, Any]:
    from .hooks import BinlakeHook

    return BinlakeHook(cfg.instance(instance)).source_credentials()


@task
def snapshot_ddl(config: str, instance: str) -> dict[str, Any]:
    """Capture the instance's DDL snapshot (stored only when changed); report which tables changed."""
    from binlake.orchestration.service import snapshot_instance

    from .hooks import BinlakeHook

    cfg = load_config(config)
    result = snapshot_instance(cfg, instance, BinlakeHook(cfg.instance(instance)).mysql_uri())
    changes = result["changes"]
    log.info("%s: snapshot %s (%s), %d tables; added %s, dropped %s, changed %s", instance, result["snapshot"],
             "stored" if result["stored"] else "unchanged", result["tables"], changes["added"], changes["dropped"],
             changes["changed"])
    return result


@task
def discover(config: str, instance: str | None = None, window: dict | None = None) -> list[dict[str, Any]]:
    """The instance's binlog files overlapping the run's data interval (or the given window)."""
    from binlake.orchestration.service import discover as discover_files

    cfg, name = load_config(config), _instance(instance)
    start, end = _window(cfg, window)
    files = discover_files(cfg, name, start, end, _credentials(cfg, name))
    log.info("%s: %d file(s) in [%s, %s): %s", name, len(files), start, end, [f["name"] for f in files])
    return files


@task
def fetch(config: str, instance: str | None = None, window: dict | None = None) -> dict[str, Any]:
    """Land the window's files of the chosen host lineage (verified; landed files are not downloaded again)."""
    from binlake.orchestration.jobs import run_stage_process

    cfg, name = load_config(config), _instance(instance)
    start, end = _window(cfg, window)
    landed = run_stage_process(cfg, "fetch", name, window=(start, end), credentials=_credentials(cfg, name),
                               log=log.info)
    log.info("%s: lineage %s, landed %d file(s): %s", name, landed["lineage"], len(landed["files"]), landed["files"])
    return landed


def _lineage(instance: str, fetched: Any) -> str | None:
    """The host lineage of one fetch result, or of all results of a mapped fetch (which must agree)."""
    items = [fetched] if isinstance(fetched, dict) else list(fetched or [])
    lineages = sorted({f["lineage"] for f in items if f.get("lineage")})
    if len(lineages) > 1:
        raise ValueError(f"instance {instance}: the fetched chunks chose different host lineages "
                         f"({', '.join(lineages)}); pin one with `source_options.lineage`")
    return lineages[0] if lineages else None


def _stage(config: str, state: dict[str, Any], stage: str) -> dict[str, Any]:
    from binlake.orchestration.jobs import run_stage_process

    if state.get("batch") is None:
        log.info("%s: %s: nothing new to ingest", state["instance"], stage)
        return state
    cfg = load_config(config)
    result = run_stage_process(cfg, stage, state["instance"], state["lineage"], state["batch"], log=log.info)
    return {**state, stage: result}


@task
def prepare(config: str, fetched: Any, instance: str | None = None) -> dict[str, Any]:
    """Decode what is new (Spark job when configured) and append the history; the pending batch or None."""
    from binlake.orchestration.jobs import run_stage_process

    cfg, name = load_config(config), _instance(instance)
    lineage = _lineage(name, fetched)
    if lineage is None:
        log.info("%s: no files landed yet", name)
        return {"instance": name, "lineage": None, "batch": None}
    result = run_stage_process(cfg, "prepare", name, lineage, log=log.info)
    log.info("%s: batch %s (decoded %s)", name, result["batch"], result.get("decoded_by"))
    return {"instance": name, "lineage": lineage, "batch": result["batch"], "decoded_by": result.get("decoded_by"),
            "spark": result.get("spark")}


@task
def publish_kafka(config: str, fetched: Any, instance: str | None = None) -> dict[str, Any]:
    """`[sink.kafka]`: publish the landed files' changes to Kafka, exactly once (binlake.sinks.kafka; its position
    lives in Kafka, so it runs beside the lake stages, not after them)."""
    from binlake.orchestration.jobs import run_stage_process

    cfg, name = load_config(config), _instance(instance)
    lineage = _lineage(name, fetched)
    if lineage is None:
        log.info("%s: no files landed yet", name)
        return {"instance": name, "batches": 0}
    result = run_stage_process(cfg, "kafka", name, lineage, log=log.info)
    log.info("%s: published %s Kafka batch(es), position %s", name, result["batches"], result["end"])
    for table, hold in sorted((result.get("held") or {}).items()):
        log.warning("%s: Kafka: %s held back: %s (%s:%s); release it with `binlake publish ... --release %s`",
                    name, table, hold["error"], hold["file"], hold["pos"], table)
    return {"instance": name, **result}


@task
def gate_before_merge(config: str, state: dict[str, Any]) -> dict[str, Any]:
    return _stage(config, state, "gate_before")


@task
def merge(config: str, state: dict[str, Any]) -> dict[str, Any]:
    return _stage(config, state, "merge")


@task
def gate_after_merge(config: str, state: dict[str, Any]) -> dict[str, Any]:
    return _stage(config, state, "gate_after")


def table_asset(cfg: DeploymentConfig, table: str) -> Asset:
    """The Asset of a current table: its location in the lake (file:// for a local lake)."""
    from binlake.lake.layout import LakeLayout  # light: no Arrow or Delta

    db, name = table.split(".", 1)
    path = LakeLayout(cfg.lake, cfg.pipeline).current_path(db, name)
    return Asset(uri=path if "://" in path else f"file://{path}", name=f"binlake/{table}")


@task(outlets=[AssetAlias(ASSET_ALIAS)])
def publish(config: str, state: dict[str, Any], *, outlet_events=None) -> dict[str, Any]:
    """Advance the control table; one Asset event per table that changed; alert when the lag beats the SLA."""
    from binlake.orchestration.service import record_newest_change

    state = _stage(config, state, "publish")
    cfg = load_config(config)
    summary = state.get("publish")
    if summary:
        for table in summary["changed_tables"]:
            outlet_events[AssetAlias(ASSET_ALIAS)].add(
                table_asset(cfg, table), extra={"instance": state["instance"], "batch": summary["batch"],
                                                "rows": summary["rows"].get(table, {})})
        log.info("%s: published batch %s: %s", state["instance"], summary["batch"], summary["rows"])
        if summary.get("held"):
            alert_held(cfg, state["instance"], summary["held"])
        if summary.get("lag_seconds") is not None:
            newest = datetime.fromtimestamp(summary["published_at"] - summary["lag_seconds"], UTC)
            record_newest_change(cfg, state["instance"], newest)
    state["lag_seconds"] = check_lag(cfg, state["instance"])
    return state


def alert_held(cfg: DeploymentConfig, instance: str, held: dict[str, str]) -> None:
    """One alert per table the batch held back (binlake.lake.holds); the task itself succeeds (the batch is
    published for every other table)."""
    from binlake.orchestration.alerts import held_alert

    from .notifiers import deliver, interval_of, task_context

    ctx = get_current_context()
    for table, line in sorted(held.items()):
        log.warning("%s: %s", instance, line)
        deliver(cfg.alerts, held_alert(instance, interval_of(ctx), table, line, **task_context(ctx)), ctx)


def check_lag(cfg: DeploymentConfig, instance: str) -> float | None:
    """Lag = the run's interval end minus the newest change published so far (whether or not this run found
    anything: a stalled source shows); beyond `alerts.sla_lag_minutes` it alerts."""
    from binlake.orchestration.alerts import lag_alert
    from binlake.orchestration.service import newest_change

    from .notifiers import deliver, interval_of, task_context

    newest = newest_change(cfg, instance)
    if newest is None or cfg.alerts.sla_lag_minutes is None:
        return None
    ctx = get_current_context()
    interval = interval_of(ctx)
    end = _parse_time(interval[1], "interval end") if interval[1] else datetime.now(UTC)
    lag = (end - newest).total_seconds()
    if lag > cfg.alerts.sla_lag_minutes * 60:
        deliver(cfg.alerts, lag_alert(instance, interval, lag, cfg.alerts.sla_lag_minutes, newest.isoformat(),
                                      **task_context(ctx)), ctx)
    return lag


def ingest_chain(cfg: DeploymentConfig, instance: str) -> TaskGroup:
    """One instance's hourly chain, as a task group named after the instance."""
    lake = {"pool": cfg.pool} if cfg.pool else {}
    with TaskGroup(group_id=instance) as group:
        landed = fetch(cfg.path, instance)
        discover(cfg.path, instance) >> landed
        state = prepare.override(**lake)(cfg.path, landed, instance)
        if cfg.sink.kafka is not None:
            publish_kafka(cfg.path, landed, instance)
        state = gate_before_merge.override(**lake)(cfg.path, state)
        state = merge.override(**lake)(cfg.path, state)
        state = gate_after_merge.override(**lake)(cfg.path, state)
        publish.override(**lake)(cfg.path, state)
    return group


@task
def plan_backfill(config: str) -> list[dict[str, str]]:
    """The backfill's hourly chunks from its params (instance, start, end, tables), validated."""
    cfg = load_config(config)
    params = get_current_context()["params"]
    inst = cfg.instance(str(params.get("instance") or ""))
    start, end = _parse_time(params.get("start"), "param `start`"), _parse_time(params.get("end"), "param `end`")
    if end <= start:
        raise ValueError(f"param `end` ({end.isoformat()}) must be after `start` ({start.isoformat()})")
    untracked = [t for t in params.get("tables") or [] if not inst.tracks(t)]
    if untracked:
        raise ValueError(f"param `tables`: {', '.join(untracked)} not tracked by instance {inst.name} "
                         f"(tables {inst.tables or ['*']}, exclude {inst.exclude})")
    first = start.replace(minute=0, second=0, microsecond=0)
    chunks = []
    t = first
    while t < end:
        chunks.append({"start": max(t, start).isoformat(), "end": min(t + timedelta(hours=1), end).isoformat()})
        t += timedelta(hours=1)
    if len(chunks) > MAX_BACKFILL_CHUNKS:
        raise ValueError(f"[{start.isoformat()}, {end.isoformat()}) is {len(chunks)} hourly chunks; at most "
                         f"{MAX_BACKFILL_CHUNKS} per backfill run")
    log.info("%s: backfill %d hourly chunk(s) from %s to %s", inst.name, len(chunks), start, end)
    return chunks
