"""Peak driver memory of `binlake ingest --spark` on generated binlogs of 100 MB, 500 MB and 1 GB (issue 16: it
must stay flat, not grow with the input), at Spark's default 1 GB driver memory (nothing sets
spark.driver.memory; $SPARK_HOME/conf is not used).

Each run is `python -m binlake.cli ingest --spark --source local:DIR --lake TMP --no-progress` in a fresh
process; every 0.2 s the resident memory of its whole process tree is summed from /proc: the Python driver, the
JVM it starts (local mode: the executors are threads of that JVM) and the Python workers the JVM forks for the
decode tasks. Reported per input: the peak of that sum, the peaks of the three parts, wall time, exit status.
The binlogs come from benchmarks/big_binlog.py (cached outside the repository); the lakes are temp folders,
removed afterwards. Linux only (/proc). Usage:

    .venv/bin/python benchmarks/spark_memory.py [--mb 100 --mb 500 --mb 1024] [--master local[2]] [--gates]
        [--cache-dir DIR] [--json OUT]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
if str(HERE.parent) not in sys.path:
    sys.path.insert(0, str(HERE.parent))

from benchmarks.big_binlog import cached  # noqa: E402

PAGE = os.sysconf("SC_PAGE_SIZE")


def _proc_table() -> dict[int, tuple[int, str, int]]:
    """pid -> (parent pid, command name, resident bytes) of every process we can read."""
    table = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as fh:
                stat = fh.read()
            with open(f"/proc/{entry}/statm") as fh:
                rss = int(fh.read().split()[1]) * PAGE
        except (OSError, ValueError, IndexError):
            continue
        name = stat[stat.index("(") + 1:stat.rindex(")")]
        ppid = int(stat[stat.rindex(")") + 2:].split()[1])
        table[int(entry)] = (ppid, name, rss)
    return table


def tree_rss(root: int) -> dict[str, int]:
    """Resident bytes of `root` and its descendants: total, the root (the Python driver), JVMs, other processes
    (the Python workers of the decode tasks)."""
    table = _proc_table()
    children: dict[int, list[int]] = {}
    for pid, (ppid, _, _) in table.items():
        children.setdefault(ppid, []).append(pid)
    out = {"total": 0, "driver_python": 0, "jvm": 0, "workers": 0}
    stack = [root]
    while stack:
        pid = stack.pop()
        if pid not in table:
            continue
        _, name, rss = table[pid]
        out["total"] += rss
        kind = "driver_python" if pid == root else "jvm" if name == "java" else "workers"
        out[kind] += rss
        stack += children.get(pid, [])
    return out


class Sampler(threading.Thread):
    """Samples the tree's memory; also follows the run's output, so that each part's peak is reported with the
    last output line before it (which step of the ingest it happened in)."""

    def __init__(self, pid: int, log: Path, every: float = 0.2) -> None:
        super().__init__(daemon=True)
        self.pid, self.log, self.every = pid, log, every
        self.peak = {"total": 0, "driver_python": 0, "jvm": 0, "workers": 0}
        self.peak_during = dict.fromkeys(self.peak, "")
        self.samples = 0
        self.done = threading.Event()

    def run(self) -> None:
        last, offset = "(start)", 0
        while not self.done.is_set():
            now = tree_rss(self.pid)
            try:
                with open(self.log, "rb") as fh:
                    fh.seek(offset)
                    chunk = fh.read()
                offset += len(chunk)
                lines = [ln for ln in chunk.decode(errors="replace").splitlines() if ln.startswith("[")]
                last = lines[-1][:160] if lines else last
            except OSError:
                pass
            self.samples += 1
            for k, v in now.items():
                if v > self.peak[k]:
                    self.peak[k], self.peak_during[k] = v, last
            self.done.wait(self.every)


def measure(binlog: Path, master: str | None, gates: bool) -> dict:
    lake = tempfile.mkdtemp(prefix="binlake-spark-mem-")
    cmd = [sys.executable, "-m", "binlake.cli", "ingest", "--spark", "--source", f"local:{binlog.parent}",
           "--lake", lake, "--no-progress", *([] if gates else ["--no-gates"])]
    env = {**os.environ, "SPARK_LOCAL_IP": "127.0.0.1",
           "PYTHONPATH": os.pathsep.join(p for p in (str(HERE.parent), os.environ.get("PYTHONPATH")) if p)}
    for key in ("SPARK_HOME", "SPARK_CONF_DIR", "PYSPARK_SUBMIT_ARGS", "BINLAKE_SPARK_MASTER"):
        env.pop(key, None)
    if master:
        env["BINLAKE_SPARK_MASTER"] = master
    log = Path(lake + ".log")
    try:
        started = time.perf_counter()
        with open(log, "w") as out:
            proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=env, cwd=HERE.parent)
            sampler = Sampler(proc.pid, log)
            sampler.start()
            code = proc.wait()
            sampler.done.set()
            sampler.join()
        seconds = time.perf_counter() - started
        text = log.read_text(errors="replace")
        return {"file": str(binlog), "mb": round(binlog.stat().st_size / (1 << 20), 1), "exit": code,
                "seconds": round(seconds, 1), "samples": sampler.samples,
                "peak_mb": {k: round(v / (1 << 20)) for k, v in sampler.peak.items()},
                "peak_during": sampler.peak_during,
                "output_tail": text.strip().splitlines()[-6:] if text.strip() else []}
    finally:
        shutil.rmtree(lake, ignore_errors=True)
        log.unlink(missing_ok=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--mb", type=float, action="append", help="input sizes (default 100, 500, 1024)")
    parser.add_argument("--master", help="Spark master (default: binlake's, local[*])")
    parser.add_argument("--gates", action="store_true", help="run the quality gates too (default --no-gates)")
    parser.add_argument("--cache-dir", help="where the generated binlogs are kept (benchmarks/big_binlog.py)")
    parser.add_argument("--json", help="also write the figures to this file")
    args = parser.parse_args()
    results = []
    for mb in args.mb or [100, 500, 1024]:
        path, info = cached(mb, args.cache_dir)
        load = os.getloadavg()
        run = measure(path, args.master, args.gates)
        run.update(changes=info["changes"], big_tx_changes=info["big_tx_changes"],
                   load_before=[round(x, 1) for x in load], load_after=[round(x, 1) for x in os.getloadavg()])
        print(json.dumps(run), flush=True)
        results.append(run)
    print("\n| input | row changes | largest transaction | exit | seconds | peak RSS, whole tree | Python driver | "
          "JVM | Python workers |\n|---|---|---|---|---|---|---|---|---|")
    for r in results:
        p = r["peak_mb"]
        print(f"| {r['mb']:.0f} MB | {r['changes']:,} | {r['big_tx_changes']:,} | {r['exit']} | {r['seconds']} | "
              f"{p['total']} MB | {p['driver_python']} MB | {p['jvm']} MB | {p['workers']} MB |")
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2) + "\n")
    return 0 if all(r["exit"] == 0 for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
