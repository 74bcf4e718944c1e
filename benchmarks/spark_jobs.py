"""Spark jobs and CPU of one `ingest --spark --engine delta-spark` batch (issue 16's fixed cost per batch).

Runs `run_ingest` on the given binlog files (gates off, the CLI's 64 MB decode ranges) with the delta-spark engine
on a local master, then prints one JSON line: rows, wall and CPU seconds of the run (user + sys of the whole process
tree: the JVM and its Python workers included; the session start apart) and the number of Spark jobs the batch ran
(Spark's status tracker). Usage:

    .venv/bin/python benchmarks/spark_jobs.py [--master local[1]] FILE...

for example on the 4 MB generated file of benchmarks/big_binlog.py (~/.cache/binlake-bench/big-4mb-s16).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.proctree import tree_cpu


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("files", nargs="+")
    parser.add_argument("--master", default="local[1]")
    args = parser.parse_args()
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from binlake.lake.engines import use_spark
    from binlake.lake.ingest import IngestOptions
    from binlake.quality.stages import run_ingest
    from binlake.settings import QualityConfig
    from binlake.spark import build_spark_session, spark_executor

    t, c = time.perf_counter(), tree_cpu()
    spark = build_spark_session("spark-jobs", master=args.master, delta=True)
    use_spark(spark)
    session, session_cpu = time.perf_counter() - t, tree_cpu() - c
    tracker = spark.sparkContext.statusTracker()
    before = len(tracker.getJobIdsForGroup(None))
    with tempfile.TemporaryDirectory(prefix="binlake-spark-jobs-") as lake:
        opts = IngestOptions(lake=lake, files=args.files, split_bytes=64 << 20, quality=QualityConfig(enabled=False),
                             engine="delta-spark")
        t, c = time.perf_counter(), tree_cpu()
        summary = run_ingest(opts, executor=spark_executor(spark))
        wall, cpu = time.perf_counter() - t, tree_cpu() - c
    print(json.dumps({"master": args.master, "rows": sum(summary.rows.values()), "seconds": round(wall, 1),
                      "cpu": round(cpu, 1), "spark_jobs": len(tracker.getJobIdsForGroup(None)) - before,
                      "session": round(session, 1), "session_cpu": round(session_cpu, 1), "load": round(os.getloadavg()[0], 1),
                      "split": {k: round(v, 1) for k, v in summary.seconds.items()}}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
