"""Named crash points for the crash tests: with $BINLAKE_CRASH_AT=NAME[:N[:HOW]] the process kills itself (SIGKILL,
no cleanup) the N-th time (default first) it passes the point NAME; HOW `memory` raises MemoryError there instead
(what running out of memory looks like to Python). Unset, a crash point costs one dict lookup.

Points: `decode-task` (in a decode task, after its range is decoded and staged: under Spark it is the executor's
Python worker that dies, counted per worker), `decoded` (decode tasks done, nothing saved), `history:<i>` counted per
history append, `merge` counted per current-table merge commit and `merge-tombstones` between a staged merge's
tombstone and MERGE commits, `merged` (every merge done, before the registry and catalog commits), `publish` (before
the control table's commit). Counts are of the commits this process makes: a re-run after a crash skips what was
committed without counting it, so `history:1` / `merge:1` there is the first append / merge it still had to make.
"""

from __future__ import annotations

import os
import signal
from collections import Counter

CRASH_ENV = "BINLAKE_CRASH_AT"
_passed: Counter = Counter()


def crash_point(name: str) -> None:
    wanted = os.environ.get(CRASH_ENV)
    if not wanted:
        return
    point, _, rest = wanted.partition(":")
    if point != name:
        return
    nth, _, how = rest.partition(":")
    _passed[name] += 1
    if _passed[name] != int(nth or 1):
        return
    if how == "memory":
        raise MemoryError(f"crash point {name} ({CRASH_ENV}={wanted})")
    os.kill(os.getpid(), signal.SIGKILL)
