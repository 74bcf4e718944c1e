"""spark-submit entry point: `binlake ingest` with decoding spread over Spark tasks (one per file range).

    spark-submit spark_jobs/ingest.py --source local:/data/binlogs --lake /data/lake [--schemas DIR] ...
"""

from __future__ import annotations

import sys


def spark_executor(spark):
    """An ingest executor that runs each decode task as a Spark task and collects the results."""
    from binlake.lake.ingest import run_task

    def run(tasks, batch, resolver, filters):
        if not tasks:
            return []
        shared = spark.sparkContext.broadcast((batch, resolver, filters))
        rdd = spark.sparkContext.parallelize(tasks, len(tasks))
        return rdd.map(lambda task: run_task(task, *shared.value)).collect()

    return run


def main(argv: list[str] | None = None) -> int:
    from binlake.cli import build_parser, ingest_options
    from binlake.lake.ingest import run_ingest
    from spark_jobs.session import build_spark_session

    args = build_parser().parse_args(["ingest", *(argv if argv is not None else sys.argv[1:])])
    spark = build_spark_session("binlake-ingest")
    try:
        summary = run_ingest(ingest_options(args), executor=spark_executor(spark),
                             progress=lambda msg: print(f"[ingest] {msg}", file=sys.stderr))
    finally:
        spark.stop()
    print(summary.text())
    return 0


if __name__ == "__main__":
    sys.exit(main())
