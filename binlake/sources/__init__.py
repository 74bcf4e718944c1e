"""Binlog sources behind one interface (`base.Source`): `open_source("rds:INSTANCE" | "oss://bucket/prefix" |
"local:DIR")`. Fetching into landing storage before ingest is `fetch.land_files`."""

from __future__ import annotations

import inspect
import shutil
from datetime import UTC, datetime
from pathlib import Path
from typing import BinaryIO

from ..binlog.stream import open_binlog
from .base import ChecksumMismatchError, Source, SourceConfigError, SourceError, SourceFile, safe_file_name
from .local import list_local, resolve_source

__all__ = ["ChecksumMismatchError", "LocalSource", "Source", "SourceError", "SourceFile", "list_local",
           "open_source", "resolve_source", "safe_file_name"]


class LocalSource:
    """A directory (or glob) of binlog files. Times are the files' modification times (no API to ask)."""

    kind = "local"

    def __init__(self, location: str, instance: str = "default") -> None:
        self.location = location
        self.instance = instance

    def list_files(self, start: datetime | None = None, end: datetime | None = None) -> list[SourceFile]:
        out = []
        for p in list_local(self.location):
            st = Path(p).stat()
            t = datetime.fromtimestamp(st.st_mtime, UTC)
            if (start is None or t >= start) and (end is None or t < end):
                out.append(SourceFile(name=Path(p).name, size=st.st_size, end=t, location=p))
        return out

    def open(self, f: SourceFile) -> BinaryIO:
        return open_binlog(f.location)

    def fetch(self, f: SourceFile, landing: str) -> str:
        """Local files need no landing copy: the path itself (landing is only used when it is asked for)."""
        if not landing:
            return f.location
        dest = Path(landing) / self.instance / f.lineage / safe_file_name(f.name, self.location)
        if not (dest.exists() and dest.stat().st_size == f.size):
            dest.parent.mkdir(parents=True, exist_ok=True)
            tmp = dest.with_name(f".{dest.name}.part")
            shutil.copyfile(f.location, tmp)
            tmp.replace(dest)
        return str(dest)


def open_source(spec: str, **options) -> Source:
    """`rds:INSTANCE` -> RdsSource (options: endpoint, access_key_id, access_key_secret, lineage, public_link,
    page_size, region_id, policy); `oss://bucket/prefix` -> the OSS source; `local:DIR` or a path -> LocalSource."""
    if spec.startswith("rds:"):
        from .rds import RdsSource

        return RdsSource(spec[len("rds:"):], **options)
    if spec.startswith("oss://"):
        from .oss import OssSource

        return OssSource(spec, **_accepted(OssSource, options))
    if "://" in spec:
        raise SourceConfigError(f"--source {spec!r}: unknown source kind (rds:INSTANCE, oss://bucket/prefix, local:DIR)")
    location = spec[len("local:"):] if spec.startswith("local:") else spec
    return LocalSource(location, **_accepted(LocalSource, options))


def _accepted(cls, options: dict) -> dict:
    """The options `cls` takes (CLI options of other source kinds are left out); None means "not given"."""
    params = inspect.signature(cls).parameters
    return {k: v for k, v in options.items() if k in params and v is not None}
