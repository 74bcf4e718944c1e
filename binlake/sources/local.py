"""The local source: a directory (or glob) of binlog files, ordered by sequence number."""

from __future__ import annotations

import glob
import re
from pathlib import Path

from ..binlog.api import sequence_number
from ..binlog.constants import MAGIC
from ..binlog.errors import BadMagic

GZIP_MAGIC = b"\x1f\x8b"


# A binlog's name: base name, a dot and its sequence number (mysql-bin.000042, also gzipped).
_BINLOG_NAME = re.compile(r"\.\d+(?:\.gz)?$")


def list_local(location: str) -> list[str]:
    """Binlog files at `location` (a directory or a glob), by sequence number. Index files, relay-log info, hidden
    files and other files without the binlog (or gzip) magic are left out; a file named like a binlog
    (name.000042) without the magic is a BadMagic error naming it (a damaged binlog is never skipped silently)."""
    p = Path(location)
    candidates = sorted(str(f) for f in p.iterdir() if f.is_file()) if p.is_dir() else sorted(glob.glob(location))
    out = []
    for f in candidates:
        with open(f, "rb") as fh:
            head = fh.read(4)
        if head == MAGIC or head[:2] == GZIP_MAGIC:
            out.append(f)
        elif _BINLOG_NAME.search(Path(f).name) and not Path(f).name.startswith("."):
            raise BadMagic(f"named like a binlog but does not start with the binlog magic (starts with "
                           f"{head.hex() or 'nothing: empty'}); repair or move it, or name the files with a glob",
                           f, 0)
    return sorted(out, key=lambda f: (sequence_number(f), Path(f).name))


def resolve_source(source: str) -> list[str]:
    """`local:DIR` (or a plain path) -> files. Other source kinds come with binlake.sources' RDS/OSS support."""
    if source.startswith("local:"):
        return list_local(source[len("local:"):])
    if "://" in source or source.startswith("rds:"):
        raise ValueError(f"--source {source!r}: only local:DIR is available in this version")
    return list_local(source)
