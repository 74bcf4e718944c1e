"""Where a lake keeps its tables, and the application ids its commits carry.

    LAKE/_binlake/files            control table: one row per source binlog file (the checkpoint)
    LAKE/_binlake/tables           the schema version each current table mirrors
    LAKE/_binlake/catalog          table lifecycle: each name's generations, lineage, dropped/renamed state
    LAKE/<db>/<table>__history     append-only change history of db.table
    LAKE/<db>/<table>              current state of db.table (tables with a primary key)

Database and table names are percent-encoded where they hold characters unsafe in paths.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from urllib.parse import quote

_SAFE = re.compile(r"^[A-Za-z0-9_$][A-Za-z0-9_$-]*$")


def path_part(name: str) -> str:
    """A database or table name as one safe path segment."""
    if _SAFE.match(name):
        return name
    return quote(name, safe="").replace(".", "%2E") if name else "%00"


@dataclass(frozen=True)
class LakeLayout:
    root: str
    pipeline: str = "default"

    def _join(self, *parts: str) -> str:
        return "/".join([self.root.rstrip("/"), *parts])

    @property
    def control_path(self) -> str:
        return self._join("_binlake", "files")

    @property
    def catalog_path(self) -> str:
        return self._join("_binlake", "catalog")

    @property
    def tables_path(self) -> str:
        return self._join("_binlake", "tables")

    def history_path(self, database: str, table: str, generation: int = 1) -> str:
        """A table name's history; a name that later held another table (DROP and CREATE again, the target of a
        RENAME) writes that generation's history to `<table>__history__g<n>` (see docs/lifecycle.md)."""
        suffix = "__history" if generation <= 1 else f"__history__g{generation}"
        return self._join(path_part(database), path_part(table) + suffix)

    def current_path(self, database: str, table: str) -> str:
        return self._join(path_part(database), path_part(table))

    def app_id(self, kind: str, database: str = "", table: str = "") -> str:
        """One ordered stream of commits: a pipeline's history or current commits of one table, or its control."""
        target = f"{database}.{table}" if database or table else "_"
        return f"binlake/{self.pipeline}/{kind}/{target}"
