"""`binlake tail`'s entry: the landing writer chosen by `--landing` (a directory or oss://) and the tail run."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from .tail import Landing, Tail, TailError
from .tail_oss import OssLanding


def open_landing(landing: str | Path) -> Landing:
    """The landing writer for `--landing`: a local directory, or `oss://bucket/prefix` (`OssLanding`)."""
    text = str(landing)
    if text.startswith("oss://"):
        return OssLanding(text)
    if "://" in text:
        raise TailError(f"--landing {landing}: the tail lands into a local directory or oss://bucket/prefix")
    return Landing(landing)


def run_tail(url: str, landing: str | Path, server_id: int = 0, start_file: str | None = None,
             gtid: str | None = None, heartbeat: float = 5.0, resume_by: str = "auto",
             log: Callable[[str], None] = lambda _m: None, stop: Callable[[], bool] = lambda: False) -> dict:
    """`binlake tail`: land the server's binlog in `landing` until `stop()`; returns what was landed."""
    if gtid is not None and not gtid.strip():
        raise ValueError("--gtid is empty")
    tail = Tail(url, open_landing(landing), server_id, start_file, gtid, heartbeat, resume_by, log, stop)
    stats = tail.run()
    return {"events": stats.events, "bytes": stats.bytes, "connects": stats.connects, "files": stats.files}
