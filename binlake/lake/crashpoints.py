"""Named crash points for the crash tests: with $BINLAKE_CRASH_AT=NAME[:N[:HOW]] the process kills itself (SIGKILL,
no cleanup) the N-th time (default first) it passes the point NAME. HOW instead:

- `memory` raises MemoryError there (what running out of memory looks like to Python);
- `jvm-memory` (a Spark driver: a process with an active SparkSession) runs a one-row Spark job whose task asks
  the JVM for an array larger than any heap: a real java.lang.OutOfMemoryError in an executor (in local mode the
  JVM, driver and executor in one, exits with Spark's out-of-memory code 52);
- `pause`: the first process of all to get there ($BINLAKE_CRASH_PAUSE_FILE, created exclusively, gets its pid)
  waits there to be killed (a test kills it, or its whole Spark worker, at that deterministic moment); any other
  process passes on. A paused process whose parent dies exits, so nothing is left behind.

Unset, a crash point costs one dict lookup.

Points: `decode-task` (in a decode task, after its range is decoded and staged: under Spark it is the executor's
Python worker that dies, counted per worker), `decoded` (decode tasks done, nothing saved), `history:<i>` counted per
history append, `merge` counted per current-table merge commit and `merge-tombstones` between a staged merge's
tombstone and MERGE commits, `tombstones-committed` the same in the embedded engine's merge (in process, or in the
Spark task that merges a staged segment into a filled table: there the executor's Python worker dies), `merged` (every merge done, before the registry and catalog commits), `publish` (before
the control table's commit). Counts are of the commits this process makes: a re-run after a crash skips what was
committed without counting it, so `history:1` / `merge:1` there is the first append / merge it still had to make.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from collections import Counter

CRASH_ENV = "BINLAKE_CRASH_AT"
PAUSE_FILE_ENV = "BINLAKE_CRASH_PAUSE_FILE"
PAUSE_SECONDS = 900  # a paused process nobody killed gives up (exit 1) after this long
_passed: Counter = Counter()
_lock = threading.Lock()  # commits of several tables may run at once, from threads


def crash_point(name: str) -> None:
    wanted = os.environ.get(CRASH_ENV)
    if not wanted:
        return
    point, _, rest = wanted.partition(":")
    if point != name:
        return
    nth, _, how = rest.partition(":")
    with _lock:
        _passed[name] += 1
        reached = _passed[name] == int(nth or 1)
    if not reached:
        return
    if how == "memory":
        raise MemoryError(f"crash point {name} ({CRASH_ENV}={wanted})")
    if how == "jvm-memory":
        _jvm_out_of_memory()
        return
    if how == "pause":
        _pause()
        return
    os.kill(os.getpid(), signal.SIGKILL)


def _jvm_out_of_memory() -> None:
    """A Spark job whose one task allocates a long array of 2**31 - 1024 elements (16 GiB) in its executor."""
    sql = sys.modules.get("pyspark.sql")  # only a process that already runs Spark (no import here: layers)
    session = sql.SparkSession.getActiveSession() if sql is not None else None
    if session is None:
        raise RuntimeError(f"crash point {CRASH_ENV}=...:jvm-memory needs an active SparkSession in this process")
    session.range(1).selectExpr("size(sequence(id, id + 2147482623)) AS n").collect()


def _pause() -> None:
    path = os.environ.get(PAUSE_FILE_ENV)
    if not path:
        raise RuntimeError(f"crash point {CRASH_ENV}=...:pause needs {PAUSE_FILE_ENV}")
    mine = f"{path}.{os.getpid()}"
    with open(mine, "w") as fh:
        fh.write(str(os.getpid()))
    try:
        os.link(mine, path)  # atomic and exclusive: the file appears with the pid in it
    except FileExistsError:
        return  # another process paused first: this one goes on
    finally:
        os.unlink(mine)
    parent = os.getppid()
    deadline = time.monotonic() + PAUSE_SECONDS
    while time.monotonic() < deadline:
        if os.getppid() != parent:
            os._exit(1)
        time.sleep(0.05)
    os._exit(1)
