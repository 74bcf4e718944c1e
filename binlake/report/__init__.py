"""Self-contained HTML reports with interactive charts (altair / Vega-Lite): for binlog files (`binlake stats
--html`) and for a lake batch (`binlake report --lake`). The chart scripts and data are inline: the page works
offline."""

from .model import ReportData, Series, TxnRow
from .page import render_html

__all__ = ["ReportData", "Series", "TxnRow", "render_html"]
