"""The steps of the scheduled pipeline as plain functions over the deployment config.

discover and fetch talk to the source only (no Delta, no Arrow: they can run in the scheduler's worker process);
the lake stages (prepare, gates, merge, publish) are in `stages.py` and run in a child process (`jobs.py`).
Every step is idempotent: a retried task redoes only what did not finish.
"""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import asdict, fields
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from ..config import DeploymentConfig, InstanceConfig
from ..sources.base import SourceFile, safe_file_name

MARKERS = "_landed"  # per lineage: one small JSON per landed file naming where it is


class OrchestrationError(RuntimeError):
    """A pipeline step cannot go on; the message names the instance and what is wrong."""


def open_instance_source(cfg: DeploymentConfig, inst: InstanceConfig, credentials: dict[str, Any] | None = None):
    """The instance's Source, built from its spec plus the connection secrets the Airflow hook resolved."""
    options = {**inst.source_options, **(credentials or {})}
    try:
        from ..sources import open_source
    except ImportError:  # the sources package without open_source: only local directories
        if not inst.source.startswith("local:"):
            raise OrchestrationError(f"instance {inst.name}: source {inst.source!r} needs binlake.sources."
                                     "open_source, which this installation lacks") from None
        return _LocalDirSource(inst.name, inst.source[len("local:"):])
    return open_source(inst.source, instance=inst.name, **options)


class _LocalDirSource:
    """Minimal local-directory source (used only where binlake.sources.open_source is not available)."""

    kind = "local"

    def __init__(self, instance: str, directory: str) -> None:
        self.instance, self.directory = instance, directory

    def list_files(self, start: datetime | None = None, end: datetime | None = None) -> list[SourceFile]:
        from ..sources.local import list_local

        out = []
        for path in list_local(self.directory):
            st = os.stat(path)
            out.append(SourceFile(name=Path(path).name, size=st.st_size, location=path,
                                  end=datetime.fromtimestamp(st.st_mtime, UTC)))
        return [f for f in out if start is None or f.end is None or f.end >= start]

    def fetch(self, f: SourceFile, landing: str) -> str:
        target = Path(landing) / safe_file_name(f.name, f"local:{self.directory}")
        if target.exists() and target.stat().st_size == os.stat(f.location).st_size:
            return str(target)
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = target.with_name(target.name + ".part")
        shutil.copyfile(f.location, tmp)
        os.replace(tmp, target)
        return str(target)


def file_to_dict(f: SourceFile) -> dict[str, Any]:
    """A SourceFile as JSON-safe data (what travels between tasks as XCom)."""
    out = asdict(f)
    for key in ("begin", "end"):
        out[key] = out[key].isoformat() if out[key] else None
    out["extra"] = json.loads(json.dumps(out["extra"], default=str))
    return out


def file_from_dict(d: dict[str, Any]) -> SourceFile:
    known = {f.name for f in fields(SourceFile)}
    data = {k: v for k, v in d.items() if k in known}
    for key in ("begin", "end"):
        if data.get(key):
            data[key] = datetime.fromisoformat(data[key])
    return SourceFile(**data)


def discover(cfg: DeploymentConfig, instance: str, start: datetime, end: datetime,
             credentials: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    """The instance's binlog files overlapping [start, end), by sequence, as JSON-safe dicts."""
    inst = cfg.instance(instance)
    source = open_instance_source(cfg, inst, credentials)
    files = source.list_files(start, end)
    return [file_to_dict(f) for f in sorted(files, key=lambda f: (f.lineage, f.seq, f.name))]


def fetch(cfg: DeploymentConfig, instance: str, files: list[dict[str, Any]],
          credentials: dict[str, Any] | None = None) -> dict[str, Any]:
    """Land the files (verified, temp name then rename; landed files are not downloaded again) and mark each one
    in its lineage's landing directory. Returns {"lineages": [...], "files": [names]}."""
    inst = cfg.instance(instance)
    source = open_instance_source(cfg, inst, credentials) if files else None
    landed: list[str] = []
    lineages: set[str] = set()
    for d in files:
        f = file_from_dict(d)
        landing = cfg.landing_dir(instance, f.lineage)
        os.makedirs(landing, exist_ok=True)
        path = source.fetch(f, landing)
        _mark_landed(landing, f, path)
        landed.append(f.name)
        lineages.add(f.lineage)
    return {"lineages": sorted(lineages), "files": landed}


def _mark_landed(landing: str, f: SourceFile, path: str) -> None:
    markers = Path(landing) / MARKERS
    markers.mkdir(exist_ok=True)
    marker = markers / (safe_file_name(f.name, landing) + ".json")
    tmp = marker.with_name(marker.name + ".tmp")
    tmp.write_text(json.dumps({"path": os.path.abspath(path), "file": file_to_dict(f)}))
    os.replace(tmp, marker)


def landed_files(cfg: DeploymentConfig, instance: str, lineage: str) -> list[str]:
    """Every file landed so far for the instance's lineage (the ingest reads those not yet complete)."""
    markers = Path(cfg.landing_dir(instance, lineage)) / MARKERS
    if not markers.is_dir():
        return []
    paths = [json.loads(m.read_text())["path"] for m in sorted(markers.glob("*.json"))]
    missing = [p for p in paths if not os.path.exists(p)]
    if missing:
        raise OrchestrationError(f"instance {instance}: landed file {missing[0]} is gone from the landing area "
                                 f"({len(missing)} missing); re-run fetch for its interval")
    return paths


def choose_lineage(cfg: DeploymentConfig, instance: str, fetched: dict[str, Any] | None) -> str | None:
    """The host lineage this run ingests: the one the source delivered (several at once is refused), else the one
    files were landed for before (files that grew since the last run), else None (nothing ever landed)."""
    lineages = list((fetched or {}).get("lineages") or [])
    if len(lineages) > 1:
        raise OrchestrationError(f"instance {instance}: files of several host lineages ({', '.join(lineages)}) "
                                 "in one interval; pin one lineage in the source options")
    if lineages:
        return lineages[0]
    root = Path(cfg.landing) / instance
    known = sorted((p for p in root.iterdir() if (p / MARKERS).is_dir()), key=lambda p: (p / MARKERS).stat().st_mtime) \
        if root.is_dir() else []
    return known[-1].name if known else None


def snapshot_instance(cfg: DeploymentConfig, instance: str, mysql_uri: str) -> dict[str, Any]:
    """Capture the tracked tables' DDL (stored only when it changed) and report which tables changed."""
    from ..schema.api import changed_tables, take_snapshot
    from ..schema.store import SnapshotStore

    inst = cfg.instance(instance)
    stored, name, snap = take_snapshot(mysql_uri, cfg.schemas, instance, inst.tables or None, inst.exclude or None)
    out: dict[str, Any] = {"instance": instance, "stored": stored, "snapshot": name, "tables": len(snap.ddl),
                           "binlog_file": snap.binlog_file, "binlog_pos": snap.binlog_pos,
                           "changes": {"added": [], "dropped": [], "changed": []}}
    if stored:
        out["changes"] = changed_tables(SnapshotStore.at(cfg.schemas, instance), snap)
    return out
