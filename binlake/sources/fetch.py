"""Fetch before ingest: list a source's files in a UTC window, pick the host lineage, land and verify them.

`land_files` is what `binlake ingest --source rds:...|oss://...` (and later the Airflow fetch task) runs before
the ingest service; it returns the landed paths and the lineage that ingest must record them under.

Lineage choice (sources whose files carry a host lineage, i.e. RDS): an explicit `source.lineage` wins; else the
lineage this instance was last ingested from while it still has files in the window; else, when that lineage has
no files in the window but another has, a primary/standby switch is assumed and the run continues on the other
lineage from the GTIDs already applied (`binlake.sources.lineage`); with nothing ingested yet, the lineage whose
newest file ends last (the primary keeps writing), refusing to guess on a tie.

The control table is touched here only by inserting rows for files it does not know yet (so it never competes
with the ingest's own batch-ordered updates): what the source announced (size, checksum, begin/end time),
`quarantined` with `last_error` for a file whose checksum or size was wrong, and, after a lineage switch, the new
lineage's starting point.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from ..lake.control import ControlTable, FileState
from ..lake.engines import get_engine
from ..lake.layout import LakeLayout
from . import open_source
from .base import ChecksumMismatchError, Source, SourceConfigError, SourceError, SourceFile
from .landing import landed_path
from .lineage import Continuation, applied_through, continuation, read_file_gtids
from .local import resolve_source

FETCH_APP = "fetch"  # app id suffix of the control-table commits made here


@dataclass
class Landed:
    instance: str
    lineage: str
    paths: list[str] = field(default_factory=list)
    files: list[SourceFile] = field(default_factory=list)
    switched_from: str | None = None
    continuation: Continuation | None = None


def _control(lake: str | None, pipeline: str, engine) -> ControlTable | None:
    if not lake:
        return None
    return ControlTable(engine or get_engine(), LakeLayout(lake, pipeline))


def _current_lineage(states: dict, instance: str) -> str | None:
    """The lineage this instance was last ingested from (highest batch, then highest file)."""
    mine = [s for s in states.values() if s.instance == instance and s.batch_id >= 0]
    if not mine:
        return None
    return max(mine, key=lambda s: (s.batch_id, s.file_seq)).lineage


def choose_lineage(files: list[SourceFile], explicit: str | None, current: str | None) -> str:
    lineages = sorted({f.lineage for f in files})
    if explicit:
        return explicit
    if current and (current in lineages or not lineages):
        return current
    if current and lineages:
        others = [lin for lin in lineages if lin != current]
        return _primary(files, others)
    if not lineages:
        raise SourceError("no binlog files in the window")
    return _primary(files, lineages)


def _primary(files: list[SourceFile], candidates: list[str]) -> str:
    if len(candidates) == 1:
        return candidates[0]
    newest = {lin: max((f.end or f.begin or datetime.min.replace(tzinfo=UTC)) for f in files if f.lineage == lin)
              for lin in candidates}
    best = max(newest.values())
    top = [lin for lin, t in newest.items() if t == best]
    if len(top) > 1:
        raise SourceError(f"several host lineages end at {best:%Y-%m-%dT%H:%M:%SZ} ({', '.join(top)}): "
                          "cannot tell the primary; choose one with --lineage")
    return top[0]


def _state(instance: str, f: SourceFile, **kw) -> FileState:
    st = FileState(instance, f.lineage, f.name, f.seq, f.size or 0, checksum=f.checksum, first_ts=f.begin,
                   last_ts=f.end)
    for k, v in kw.items():
        setattr(st, k, v)
    return st


def land_files(source: Source, landing: str, start: datetime | None = None, end: datetime | None = None, *,
               lake: str | None = None, pipeline: str = "default", engine=None,
               progress: Callable[[str], None] = lambda _m: None) -> Landed:
    """List, choose the lineage, fetch every listed file of it (idempotent), verify; see the module doc."""
    control = _control(lake, pipeline, engine)
    states = control.load() if control is not None else {}
    instance = source.instance
    all_files = source.list_all(start, end) if hasattr(source, "list_all") else source.list_files(start, end)
    explicit = getattr(source, "lineage", None)
    current = _current_lineage(states, instance)
    lineage = choose_lineage(all_files, explicit, current) if all_files or explicit or current else "default"
    if hasattr(source, "lineage"):
        source.lineage = lineage
    files = [f for f in all_files if f.lineage == lineage]
    out = Landed(instance, lineage, files=files)
    progress(f"{len(files)} file(s) of {instance} lineage {lineage} in the window"
             + (f" ({len({f.lineage for f in all_files})} lineages listed)" if all_files else ""))
    for f in files:
        try:
            path = source.fetch(f, landing)
        except ChecksumMismatchError as exc:
            if control is not None:
                control.insert_new(states, [_state(instance, f, status="quarantined", last_error=str(exc),
                                                   attempts=1)], FETCH_APP)
            raise
        out.paths.append(path)
        progress(f"landed {f.name} ({Path(path).stat().st_size} bytes)")
    if control is not None:
        seen = [_state(instance, f, status="fetched", size=Path(p).stat().st_size)
                for f, p in zip(files, out.paths, strict=True)]
        if current and lineage != current and not any(s.lineage == lineage and s.instance == instance
                                                       for s in states.values()):
            out.switched_from = current
            out.continuation = _continue(control, states, source, landing, current, files, out.paths, seen)
        control.insert_new(states, seen, FETCH_APP)
    return out


def _continue(control, states: dict, source: Source, landing: str, old: str, files: list[SourceFile],
              paths: list[str], seen: list) -> Continuation:
    """Seed the new lineage's control rows so ingest resumes right after the GTIDs applied from `old`."""
    instance = source.instance
    done = [s for s in states.values() if s.instance == instance and s.lineage == old and s.end_pos > 4]
    if not done:
        raise SourceError(f"lineage switch {old} -> {files[0].lineage if files else '?'}: nothing was applied from "
                          f"{old}, nothing to continue from")
    last = max(done, key=lambda s: s.file_seq)
    old_path = landed_path(landing, instance, SourceFile(name=last.file, lineage=old))
    if not old_path.exists():
        raise SourceError(f"lineage switch {old} -> {files[0].lineage}: the last file applied from {old} "
                          f"({last.file}) is not in the landing area {landing}; its GTIDs are needed")
    applied = applied_through(read_file_gtids(old_path), last.end_pos)
    plan = continuation(applied, [read_file_gtids(p) for p in paths])
    first_new = files[plan.start_index]
    if first_new.seq <= last.file_seq:
        # Current tables order changes by (file sequence, position): lower-numbered files of the new lineage
        # would lose against older changes already merged. Refuse rather than produce a wrong current table.
        raise SourceError(f"lineage switch {old} -> {first_new.lineage}: the new lineage continues in "
                          f"{first_new.name}, numbered at or below {last.file} already applied from {old}; "
                          "changes would order before older ones")
    for i, st in enumerate(seen):
        if i < plan.start_index or (i == plan.start_index and plan.start_pos is None):
            st.status, st.complete, st.end_pos = "superseded", True, st.size
            st.last_error = f"already applied through lineage {old} (GTIDs up to {last.file}:{last.end_pos})"
        elif i == plan.start_index:
            st.end_pos = plan.start_pos
    return plan


def parse_utc(text: str | None, option: str) -> datetime | None:
    """'2024-05-01T00:00:00Z' (or with an offset, or a date) -> aware UTC datetime; None stays None."""
    if not text:
        return None
    try:
        t = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise SourceConfigError(f"{option}: {text!r} is not a UTC time like 2024-05-01T00:00:00Z") from None
    return (t if t.tzinfo else t.replace(tzinfo=UTC)).astimezone(UTC)


def ingest_inputs(args) -> tuple[list[str], str, str]:
    """`binlake ingest` arguments -> (local files, instance, lineage) for the ingest service. Local sources are
    read in place; other sources are listed and landed first (`land_files`)."""
    spec = args.source
    if not (spec.startswith("rds:") or "://" in spec):
        return resolve_source(spec), args.instance, "default"
    options = {}
    if spec.startswith("rds:"):
        options = {"endpoint": getattr(args, "rds_endpoint", None), "lineage": getattr(args, "lineage", None),
                   "public_link": bool(getattr(args, "public_link", False))}
    source = open_source(spec, **{k: v for k, v in options.items() if v is not None})
    landing = getattr(args, "landing", None)
    if not landing:
        raise SourceConfigError(f"--source {spec}: --landing DIR is needed (where fetched files are put and verified)")
    start = parse_utc(getattr(args, "window_from", None), "--from")
    end = parse_utc(getattr(args, "window_to", None), "--to")
    landed = land_files(source, landing, start, end, lake=args.lake, pipeline=args.pipeline,
                        progress=lambda m: print(f"[fetch] {m}", file=sys.stderr))
    return landed.paths, landed.instance, landed.lineage
