"""Continuing on another host lineage (after an RDS primary/standby switch) from the GTIDs already applied.

Each host writes its own binlog files: names, boundaries and positions differ, the transactions (GTIDs) are the
same. The GTIDs applied from the old lineage are its last ingested file's PREVIOUS_GTIDS plus the GTIDs of the
transactions in that file before the checkpoint (`end_pos`). On the new lineage, the files whose PREVIOUS_GTIDS
are inside that set hold nothing new except possibly the last of them; the run starts in that file at the first
transaction whose GTID was not applied. Anything ambiguous (a new-lineage transaction already applied after an
unapplied one, applied transactions the new lineage never had) is an error, never a silent skip or repeat.
MySQL GTIDs only (PREVIOUS_GTIDS events): MariaDB files are refused with a clear error.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from ..binlog.api import build_options
from ..binlog.decoder import BinlogDecoder
from .base import SourceError

_RANGE = re.compile(r"^(\d+)(?:-(\d+))?$")


class GtidSet:
    """MySQL GTID set: source id ('uuid' or 'uuid:tag') -> sorted disjoint [start, end) intervals."""

    def __init__(self, text: str = "") -> None:
        self.sets: dict[str, list[tuple[int, int]]] = {}
        for part in text.replace("\n", "").split(","):
            tokens = [t.strip() for t in part.strip().split(":") if t.strip()]
            if not tokens:
                continue
            uuid, tag = tokens[0].lower(), None
            for tok in tokens[1:]:
                m = _RANGE.match(tok)
                if m is None:
                    tag = tok
                    continue
                lo, hi = int(m[1]), int(m[2] or m[1])
                self.add(f"{uuid}:{tag}" if tag else uuid, lo, hi + 1)

    def add(self, sid: str, start: int, end: int) -> None:
        ivs = sorted([*self.sets.get(sid, []), (start, end)])
        merged: list[tuple[int, int]] = []
        for s, e in ivs:
            if merged and s <= merged[-1][1]:
                merged[-1] = (merged[-1][0], max(merged[-1][1], e))
            else:
                merged.append((s, e))
        self.sets[sid] = merged

    def add_gtid(self, gtid: str) -> None:
        sid, gno = split_gtid(gtid)
        self.add(sid, gno, gno + 1)

    def __contains__(self, gtid: str) -> bool:
        sid, gno = split_gtid(gtid)
        return any(s <= gno < e for s, e in self.sets.get(sid, []))

    def issubset(self, other: GtidSet) -> bool:
        return all(any(os <= s and e <= oe for os, oe in other.sets.get(sid, []))
                   for sid, ivs in self.sets.items() for s, e in ivs)

    def minus(self, other: GtidSet) -> GtidSet:
        out = GtidSet()
        for sid, ivs in self.sets.items():
            holes = other.sets.get(sid, [])
            for s, e in ivs:
                cur = s
                for hs, he in holes:
                    if he <= cur or hs >= e:
                        continue
                    if hs > cur:
                        out.add(sid, cur, hs)
                    cur = max(cur, he)
                if cur < e:
                    out.add(sid, cur, e)
        return out

    def update(self, other: GtidSet) -> None:
        for sid, ivs in other.sets.items():
            for s, e in ivs:
                self.add(sid, s, e)

    def copy(self) -> GtidSet:
        out = GtidSet()
        out.sets = {k: list(v) for k, v in self.sets.items()}
        return out

    def __bool__(self) -> bool:
        return any(self.sets.values())

    def __str__(self) -> str:
        return ",".join(f"{sid}:" + ":".join(f"{s}" if e == s + 1 else f"{s}-{e - 1}" for s, e in ivs)
                        for sid, ivs in sorted(self.sets.items()) if ivs)


def split_gtid(gtid: str) -> tuple[str, int]:
    sid, _, gno = gtid.rpartition(":")
    if not sid or not gno.isdigit():
        raise ValueError(f"not a MySQL GTID: {gtid!r}")
    return sid.lower(), int(gno)


@dataclass
class FileGtids:
    name: str
    previous: GtidSet
    transactions: list[tuple[str, int]] = field(default_factory=list)  # (gtid, transaction start position)


def read_file_gtids(path: str | Path) -> FileGtids:
    """A binlog's PREVIOUS_GTIDS set and its transactions' GTIDs with start positions (rows are not decoded)."""
    name = Path(path).name
    decoder = BinlogDecoder(build_options(all_events=True, tables=r"(?!)"))
    previous: GtidSet | None = None
    txns: list[tuple[str, int]] = []
    for rec in decoder.decode_files([path]):
        kind = getattr(rec, "kind", None)
        if kind == "previous_gtids":
            previous = GtidSet(rec.info.get("gtid_set") or "")
        elif kind == "gtid_list":
            raise SourceError(f"{name}: a MariaDB binlog (GTID_LIST): continuing on another lineage needs MySQL "
                              "GTIDs (PREVIOUS_GTIDS)")
        elif kind == "gtid" and rec.gtid:
            try:
                split_gtid(rec.gtid)
            except ValueError:
                raise SourceError(f"{name}:{rec.pos}: transaction without a MySQL GTID ({rec.gtid!r}); a lineage "
                                  "switch needs gtid_mode=ON") from None
            txns.append((rec.gtid, rec.pos))
    if previous is None:
        raise SourceError(f"{name}: no PREVIOUS_GTIDS event; a lineage switch needs MySQL GTIDs")
    return FileGtids(name, previous, txns)


def applied_through(last: FileGtids, end_pos: int) -> GtidSet:
    """GTIDs applied when ingest stopped at `end_pos` of `last` (transactions starting before it committed)."""
    applied = last.previous.copy()
    for gtid, pos in last.transactions:
        if pos < end_pos:
            applied.add_gtid(gtid)
    return applied


@dataclass
class Continuation:
    start_index: int  # first new-lineage file to read
    start_pos: int | None  # position in it of the first unapplied transaction; None: all of it was applied
    skipped: list[str]  # new-lineage files entirely applied already


def continuation(applied: GtidSet, files: list[FileGtids]) -> Continuation:
    """Where to start on the new lineage's files (ordered by sequence) so nothing applied repeats or is missed."""
    if not files:
        raise SourceError("lineage switch: the new lineage has no files to continue from")
    if not files[0].previous.issubset(applied):
        missing = files[0].previous.minus(applied)
        raise SourceError(f"lineage switch: the new lineage's first listed file {files[0].name} starts after "
                          f"transactions never applied ({missing}); list an earlier window")
    idx = 0
    while idx + 1 < len(files) and files[idx + 1].previous.issubset(applied):
        idx += 1
    f = files[idx]
    start = None
    for gtid, pos in f.transactions:
        if gtid in applied:
            if start is not None:
                raise SourceError(f"lineage switch: {f.name}:{pos} holds applied transaction {gtid} after "
                                  f"unapplied ones; refusing to guess")
        elif start is None:
            start = pos
    covered = GtidSet()
    for g in files:
        covered.update(g.previous)
        for gtid, _ in g.transactions:
            covered.add_gtid(gtid)
    lost = applied.minus(covered)
    if lost:
        raise SourceError(f"lineage switch: transactions applied from the old lineage are missing on the new one "
                          f"({lost}); the new primary diverged, refusing to continue")
    return Continuation(idx, start, [g.name for g in files[:idx]])
