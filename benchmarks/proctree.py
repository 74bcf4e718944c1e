"""CPU seconds of a process tree, for the benchmarks that run Spark (its JVM and Python workers are descendants)."""

from __future__ import annotations

import os
from pathlib import Path


def tree_cpu() -> float:
    """CPU seconds (user + sys, reaped children included) of this process and every descendant."""
    stats = {}
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                text = Path(f"/proc/{d}/stat").read_text()
            except OSError:
                continue
            f = text[text.rindex(")") + 2:].split()
            stats[int(d)] = (int(f[1]), sum(int(x) for x in f[11:15]))
    mine, todo = set(), [os.getpid()]
    while todo:
        pid = todo.pop()
        mine.add(pid)
        todo.extend(p for p, (ppid, _) in stats.items() if ppid == pid and p not in mine)
    return sum(stats[p][1] for p in mine if p in stats) / os.sysconf("SC_CLK_TCK")
