"""Self-contained HTML reports with inline SVG charts: for binlog files (`binlake stats --html`) and for a lake
batch (`binlake report --lake`). No JavaScript, no external resources: the page works offline."""

from .model import ReportData, Series, TxnRow
from .page import render_html

__all__ = ["ReportData", "Series", "TxnRow", "render_html"]
