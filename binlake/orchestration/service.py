"""The steps of the scheduled pipeline as plain functions over the deployment config.

discover talks to the source only (no Delta, no Arrow: it runs in the Airflow task process); fetch records new
files in the control table and, like the lake stages in `stages.py`, runs in a child process (`jobs.py`).
Every step is idempotent: a retried task redoes only what did not finish.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from ..config import DeploymentConfig, InstanceConfig
from ..sources.base import Source, SourceFile


class OrchestrationError(RuntimeError):
    """A pipeline step cannot go on; the message names the instance and what is wrong."""


def source_instance(inst: InstanceConfig) -> str:
    """The instance name the lake and the snapshot store know: the RDS instance id for `rds:` sources (what the
    control table records), the config's instance name otherwise."""
    return inst.source[len("rds:"):] if inst.source.startswith("rds:") else inst.name


def open_instance_source(inst: InstanceConfig, credentials: dict[str, Any] | None = None) -> Source:
    """The instance's Source, built from its spec plus the connection secrets the Airflow hook resolved."""
    from ..sources import open_source

    options = {**inst.source_options, **(credentials or {})}
    if not inst.source.startswith("rds:"):
        options["instance"] = inst.name
    return open_source(inst.source, **options)


def file_to_dict(f: SourceFile) -> dict[str, Any]:
    """A SourceFile as JSON-safe data (what travels between tasks as XCom)."""
    out = asdict(f)
    for key in ("begin", "end"):
        out[key] = out[key].isoformat() if out[key] else None
    out["extra"] = json.loads(json.dumps(out["extra"], default=str))
    return out


def discover(cfg: DeploymentConfig, instance: str, start: datetime, end: datetime,
             credentials: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    """The instance's binlog files overlapping [start, end), by sequence, as JSON-safe dicts."""
    source = open_instance_source(cfg.instance(instance), credentials)
    files = source.list_all(start, end) if hasattr(source, "list_all") else source.list_files(start, end)
    return [file_to_dict(f) for f in sorted(files, key=lambda f: (f.lineage, f.seq, f.name))]


def fetch(cfg: DeploymentConfig, instance: str, start: datetime, end: datetime,
          credentials: dict[str, Any] | None = None, log=lambda _m: None) -> dict[str, Any]:
    """Land the window's files of the chosen host lineage (verified, temp name then rename; landed files are not
    downloaded again; new files get their control-table row). Touches Delta: runs in the stage child process."""
    from ..sources.fetch import land_files

    source = open_instance_source(cfg.instance(instance), credentials)
    landed = land_files(source, cfg.landing, start, end, lake=cfg.lake, pipeline=cfg.pipeline, progress=log)
    return {"instance": landed.instance, "lineage": landed.lineage, "files": [f.name for f in landed.files],
            "switched_from": landed.switched_from}


def landed_files(cfg: DeploymentConfig, instance: str, lineage: str) -> list[str]:
    """Every file landed so far for the instance's lineage (the ingest reads those not yet complete)."""
    from ..sources.landing import landing_dir
    from ..sources.local import list_local

    directory = landing_dir(cfg.landing, source_instance(cfg.instance(instance)), lineage)
    if not directory.is_dir():
        return []
    return [p for p in list_local(str(directory)) if not Path(p).name.startswith(".")]


def snapshot_instance(cfg: DeploymentConfig, instance: str, mysql_uri: str) -> dict[str, Any]:
    """Capture the tracked tables' DDL (stored only when it changed) and report which tables changed."""
    from ..schema.api import changed_tables, take_snapshot
    from ..schema.store import SnapshotStore

    inst = cfg.instance(instance)
    store_name = source_instance(inst)
    stored, name, snap = take_snapshot(mysql_uri, cfg.schemas, store_name, inst.tables or None, inst.exclude or None)
    out: dict[str, Any] = {"instance": instance, "stored": stored, "snapshot": name, "tables": len(snap.ddl),
                           "binlog_file": snap.binlog_file, "binlog_pos": snap.binlog_pos,
                           "changes": {"added": [], "dropped": [], "changed": []}}
    if stored:
        out["changes"] = changed_tables(SnapshotStore.at(cfg.schemas, store_name), snap)
    return out


def _freshness_path(cfg: DeploymentConfig, instance: str) -> Path:
    return Path(cfg.landing) / "_jobs" / f"{instance}.newest-change.json"


def record_newest_change(cfg: DeploymentConfig, instance: str, when: datetime) -> datetime:
    """Remember the newest change published for the instance (only ever moves forward); returns the newest."""
    previous = newest_change(cfg, instance)
    newest = max(when, previous) if previous else when
    path = _freshness_path(cfg, instance)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps({"instance": instance, "newest_change": newest.isoformat()}))
    os.replace(tmp, path)
    return newest


def newest_change(cfg: DeploymentConfig, instance: str) -> datetime | None:
    """The newest change published for the instance so far (None before the first publish)."""
    path = _freshness_path(cfg, instance)
    if not path.exists():
        return None
    when = datetime.fromisoformat(json.loads(path.read_text())["newest_change"])
    return when if when.tzinfo else when.replace(tzinfo=UTC)
