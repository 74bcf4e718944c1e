"""The one interface every binlog source implements (RDS OpenAPI, OSS prefix, local directory).

A source lists the binlog files of one instance whose time span overlaps a UTC window, opens a file as a
binary stream, and fetches a file into landing storage (verified, temp name then rename). `binlake ingest
--source rds:INSTANCE | oss://bucket/prefix | local:DIR` and the Airflow tasks use sources only through this.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import datetime
from typing import BinaryIO, Protocol

from ..binlog.api import sequence_number
from ..exitcodes import ExitCode
from ..storage.errors import SourceConfigError, SourceError

__all__ = ["ChecksumMismatchError", "Source", "SourceConfigError", "SourceError", "SourceFile", "safe_file_name"]


class ChecksumMismatchError(SourceError):
    """A downloaded file's size or checksum differs from what the source announced."""

    exit_code = ExitCode.BAD_DATA


_SAFE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._\-]{0,254}$")


def safe_file_name(name: str, origin: str) -> str:
    """A file name that came from an API or a bucket, checked before it becomes a local path.

    Only a bare name is accepted: no directories, no `..`, no absolute paths, no control characters."""
    if not _SAFE_NAME.match(name or "") or name in (".", ".."):
        raise SourceError(f"{origin}: refusing file name {name!r} (not a plain binlog file name)")
    return name


@dataclass
class SourceFile:
    """One binlog file as a source announces it. `extra` keeps every field the source returned."""

    name: str
    size: int | None = None
    begin: datetime | None = None  # UTC
    end: datetime | None = None  # UTC
    checksum: str | None = None
    lineage: str = "default"  # RDS HostInstanceID; "default" where a source has no lineages
    location: str = ""  # local path, oss key, or download URL
    extra: dict = field(default_factory=dict)

    @property
    def seq(self) -> int:
        return sequence_number(self.name)


class Source(Protocol):
    """What ingest and the Airflow tasks need from a place binlog files come from."""

    kind: str
    instance: str

    def list_files(self, start: datetime | None = None, end: datetime | None = None) -> list[SourceFile]:
        """Files whose [begin, end] overlaps [start, end) (UTC; None: unbounded), by sequence, each once."""
        ...

    def open(self, f: SourceFile) -> BinaryIO:
        """A binary stream of the file's bytes (for decoding straight from the source)."""
        ...

    def fetch(self, f: SourceFile, landing: str) -> str:
        """Download into the landing directory (temp name, verify, rename); returns the local path.
        Idempotent: an already landed, verified file is not downloaded again."""
        ...
