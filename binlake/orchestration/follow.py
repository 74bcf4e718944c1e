"""`binlake ingest --follow`: the ingest service run again every interval while a landing directory grows.

A round runs when the listed files changed since the last successful round (a new file, a file that grew); the
ingest itself reads each file from its control-table position to its last complete transaction, so the file
`binlake tail` is still writing is ingested as far as it is whole, with every guarantee of a single ingest.
The command line keeps a `DdlScanCache` across rounds, so the schema timeline is extended from the new and grown
files only.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable


def _signature(files: list[str]) -> tuple:
    out = []
    for f in files:
        try:
            out.append((f, os.stat(f).st_size))
        except FileNotFoundError:
            continue
    return tuple(out)


def follow(list_files: Callable[[], list[str] | None], run_once: Callable[[], None], interval: float,
           log: Callable[[str], None] = lambda _m: None, stop: Callable[[], bool] = lambda: False,
           sleep: Callable[[float], None] = time.sleep) -> int:
    """Run `run_once` every `interval` seconds while `list_files()` shows a change (None: a remote source that
    cannot be listed cheaply, always run); returns the number of rounds run when `stop()` turns true."""
    seen: tuple | None = None
    rounds = 0
    while not stop():
        started = time.monotonic()
        files = list_files()
        sig = None if files is None else _signature(files)
        if files is None or (sig and sig != seen):
            run_once()
            rounds += 1
            seen = sig
        elif not files:
            log("no binlog files yet; waiting")
        wait = interval - (time.monotonic() - started)
        while wait > 0 and not stop():
            sleep(min(wait, 0.5))
            wait = interval - (time.monotonic() - started)
    return rounds
