"""The local source: a directory (or glob) of binlog files, ordered by sequence number."""

from __future__ import annotations

import glob
from pathlib import Path

from ..binlog.api import sequence_number
from ..binlog.constants import MAGIC

GZIP_MAGIC = b"\x1f\x8b"


def list_local(location: str) -> list[str]:
    """Binlog files at `location` (a directory or a glob), by sequence number. Index files, relay-log info and
    anything without the binlog (or gzip) magic are left out."""
    p = Path(location)
    candidates = sorted(str(f) for f in p.iterdir() if f.is_file()) if p.is_dir() else sorted(glob.glob(location))
    out = []
    for f in candidates:
        with open(f, "rb") as fh:
            head = fh.read(4)
        if head == MAGIC or head[:2] == GZIP_MAGIC:
            out.append(f)
    return sorted(out, key=lambda f: (sequence_number(f), Path(f).name))


def resolve_source(source: str) -> list[str]:
    """`local:DIR` (or a plain path) -> files. Other source kinds come with binlake.sources' RDS/OSS support."""
    if source.startswith("local:"):
        return list_local(source[len("local:"):])
    if "://" in source or source.startswith("rds:"):
        raise ValueError(f"--source {source!r}: only local:DIR is available in this version")
    return list_local(source)
