"""Service functions behind `binlake stats --html` and `binlake report`."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from .from_lake import report_from_lake
from .from_stats import report_from_stats
from .page import render_html


def _write(html: str, out: str | Path) -> Path:
    path = Path(out)
    if path.parent and not path.parent.is_dir():
        raise ValueError(f"--out {out}: directory {path.parent} does not exist")
    path.write_text(html, encoding="utf-8")
    return path


def write_stats_html(stats: dict[str, Any], out: str | Path) -> Path:
    """The HTML page for a `binlake stats` report."""
    return _write(render_html(report_from_stats(stats)), out)


def write_lake_html(lake: str, out: str | Path, batch: int | None = None, engine: str | None = None,
                    pipeline: str = "default") -> Path:
    """The HTML page for one batch of a lake (all batches when `batch` is None)."""
    return _write(render_html(report_from_lake(lake, batch=batch, engine=engine, pipeline=pipeline)), out)
