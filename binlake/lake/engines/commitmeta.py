"""binlake's commit-info record: which action made a commit and which application transactions it carried.

The txn actions themselves are what Delta checks; this mirror (written in the same commit, so atomically) is what
`history()` shows and what `restore()` uses to find the app ids whose txn versions it must roll back. delta-rs puts it
under the commit-info key "binlake"; delta-spark puts the same JSON in `userMetadata`. Both engines read the commit
log with delta-rs and accept either (`meta_of`), so a table one engine wrote has the same history in the other.
"""

from __future__ import annotations

import json
from typing import Any

from .base import HistoryEntry, TxnInfo

META_KEY = "binlake"


def commit_meta(action: str, txns: list[tuple[str, int]], **extra: Any) -> dict[str, Any]:
    meta: dict[str, Any] = {"action": action, "txns": [{"appId": a, "version": v} for a, v in txns]}
    meta.update(extra)
    return meta


def parse_meta(raw: Any) -> dict[str, Any] | None:
    """The binlake record from a commit-info value (dict or userMetadata JSON string); None when foreign."""
    if isinstance(raw, str):
        try:
            raw = json.loads(raw)
        except ValueError:
            return None
    if isinstance(raw, dict) and isinstance(raw.get("txns"), list):
        return raw
    return None


def meta_of(commit_info: dict[str, Any]) -> dict[str, Any] | None:
    """The binlake record of a commit-info dict as delta-rs returns it, whichever engine wrote it."""
    return parse_meta(commit_info.get(META_KEY)) or parse_meta(commit_info.get("userMetadata"))


def history_entry(version: int, timestamp: int | None, operation: str, meta: dict[str, Any] | None) -> HistoryEntry:
    txns: list[TxnInfo] = []
    if meta:
        txns = [{"app_id": str(t["appId"]), "version": int(t["version"])} for t in meta["txns"]]
    return {
        "version": int(version),
        "timestamp": None if timestamp is None else int(timestamp),
        "operation": operation,
        "action": meta.get("action") if meta else None,
        "txns": txns,
    }


def app_ids_after(history: list[HistoryEntry], version: int) -> set[str]:
    """App ids with a txn recorded by a commit newer than `version`."""
    return {t["app_id"] for h in history if h["version"] > version for t in h["txns"]}


def meta_at(history_raw: list[tuple[int, dict[str, Any] | None]], version: int, key: str) -> Any:
    """The value of `key` in the newest binlake record at or before `version`, None when absent."""
    for v, meta in sorted(history_raw, key=lambda x: x[0], reverse=True):
        if v <= version and meta and key in meta:
            return meta[key]
    return None
