"""Kafka publish speed on the decoder benchmark's 500,000-change binlog (built by benchmarks/decode.py if missing).

A private single-node KRaft broker (binlake/testing/kafka.py, on this machine: it shares the cores) takes
`binlake publish`'s change events: changes per second published end to end, i.e. until the last transaction's
commit returned (every record acknowledged by the broker), beside decode-only in the same run (goal: within 2x).
Each publish runs in a fresh process on a fresh topic prefix, timed after its one-off imports (reported apart, as
benchmarks/ingest.py does), with the split between decoding, encoding and producing (wall and CPU seconds; CPU of
the publishing process, librdkafka's threads included, the broker's not). The broker's own CPU seconds over each
publish run are reported apart (`broker_cpu_seconds`, from /proc), as is the publishing child's whole CPU (imports
and the second, empty run included: `publish_process_cpu_seconds`). Decode-only and publish runs alternate;
each ratio is a publish over the decode-only run just before it, and the medians are reported, with the load
average (os.getloadavg) at the start and the end. Usage:

    .venv/bin/python benchmarks/publish.py [--repeat 3] [--json benchmarks/results/publish.json]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

CHILD = r"""
import json, sys, time
sys.path.insert(0, {root!r})
t = time.perf_counter()
from binlake.sinks.kafka import KafkaSinkOptions, publish
import pyarrow
pyarrow.array([0])
imports = time.perf_counter() - t
bootstrap, prefix, files = sys.argv[1], sys.argv[2], sys.argv[3:]
opts = KafkaSinkOptions(bootstrap, prefix, files)
t, c = time.perf_counter(), time.process_time()
s = publish(opts)
first, first_cpu = time.perf_counter() - t, time.process_time() - c
t = time.perf_counter(); again = publish(opts); second = time.perf_counter() - t
print(json.dumps({{"changes": sum(s.changes.values()), "messages": s.messages, "batches": s.batches,
                  "first": first, "first_cpu": first_cpu, "second": second, "second_batches": again.batches,
                  "imports": imports, "split": s.seconds, "split_cpu": s.cpu_seconds}}))
"""


def decode_only(files: list[str]) -> tuple[float, float]:
    """(wall, CPU) seconds of decoding every row of `files` in this process (as benchmarks/ingest.py)."""
    from binlake.binlog.decoder import BinlogDecoder

    t, c = time.perf_counter(), time.process_time()
    for _ in BinlogDecoder().decode_files(files):
        pass
    return time.perf_counter() - t, time.process_time() - c


def process_cpu(pid: int) -> float:
    """CPU seconds (user + sys, its threads and reaped children included) a running process has used so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return sum(int(x) for x in fields[11:15]) / os.sysconf("SC_CLK_TCK")


def run_child(bootstrap: str, prefix: str, files: list[str], broker_pid: int) -> dict:
    """One publish in a fresh process; adds the CPU seconds of the whole child process (imports and second run
    included: `child_cpu`) and the broker's CPU seconds over the same span (`broker_cpu`)."""
    code = CHILD.format(root=str(HERE.parent))
    broker0, usage0 = process_cpu(broker_pid), resource.getrusage(resource.RUSAGE_CHILDREN)
    done = subprocess.run([sys.executable, "-c", code, bootstrap, prefix, *files], capture_output=True, text=True,
                          env=dict(os.environ))
    broker, usage = process_cpu(broker_pid) - broker0, resource.getrusage(resource.RUSAGE_CHILDREN)
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if done.returncode != 0 or not lines:
        raise SystemExit(f"publish run failed ({done.returncode}):\n{done.stderr[-3000:]}")
    result = json.loads(lines[-1])
    result["child_cpu"] = usage.ru_utime + usage.ru_stime - usage0.ru_utime - usage0.ru_stime
    result["broker_cpu"] = broker
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--json", help="also write the figures to this file")
    parser.add_argument("--repeat", type=int, default=3, help="decode-only and publish runs, alternated; medians "
                        "are reported")
    args = parser.parse_args()
    from benchmarks.decode import cached_binlog
    from binlake.testing.kafka import PrivateKafka

    files = [str(f) for f in cached_binlog(500_000, False)]
    load_start = os.getloadavg()
    broker = PrivateKafka.start(heap="1g")
    try:
        decodes, runs = [], []
        for i in range(max(1, args.repeat)):
            decodes.append(decode_only(files))
            runs.append(run_child(broker.bootstrap, f"bench{i}", files, broker.process.pid))
    finally:
        broker.stop()
    med = statistics.median
    wall, cpu = med(d[0] for d in decodes), med(d[1] for d in decodes)
    typical = sorted(runs, key=lambda r: r["first"])[(len(runs) - 1) // 2]  # the median run (the lower of two)
    figures = {
        "load_average_start": [round(x, 2) for x in load_start],
        "load_average_end": [round(x, 2) for x in os.getloadavg()], "repeat": len(runs),
        "decode_only_seconds": round(wall, 2), "decode_only_cpu_seconds": round(cpu, 2),
        "publish_seconds": round(med(r["first"] for r in runs), 2),
        "publish_cpu_seconds": round(med(r["first_cpu"] for r in runs), 2),
        "changes_per_second_published": round(typical["changes"] / med(r["first"] for r in runs)),
        "changes_per_second_decode_only": round(typical["changes"] / wall),
        "publish_process_cpu_seconds": round(med(r["child_cpu"] for r in runs), 2),
        "broker_cpu_seconds": round(med(r["broker_cpu"] for r in runs), 2),
        "publish_over_decode": round(med(r["first"] / d[0] for r, d in zip(runs, decodes, strict=True)), 2),
        "publish_over_decode_cpu": round(med(r["first_cpu"] / d[1] for r, d in zip(runs, decodes, strict=True)), 2),
        "publish_cold_over_decode": round(med((r["first"] + r["imports"]) / d[0]
                                              for r, d in zip(runs, decodes, strict=True)), 2),
        "all_decode_only": [[round(w, 2), round(c, 2)] for w, c in decodes],
        "all_publish": [[round(r["first"], 2), round(r["first_cpu"], 2)] for r in runs],
        "all_broker_cpu": [round(r["broker_cpu"], 2) for r in runs],
        "median_run": typical,
    }
    print(json.dumps(figures, indent=2))
    if args.json:
        Path(args.json).write_text(json.dumps(figures, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
