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
    from binlake.cli import _debug_wanted, build_parser, check_arguments, guarded, ingest_options

    argv = list(argv if argv is not None else sys.argv[1:])
    try:
        args = build_parser().parse_args(["ingest", *argv])
    except SystemExit as exc:  # a usage error, already printed as one line
        return int(exc.code or 0)
    return guarded(lambda: _ingest(args, check_arguments, ingest_options), _debug_wanted(argv))


def _ingest(args, check_arguments, ingest_options) -> int:
    from binlake.lake.ingest import run_ingest
    from spark_jobs.session import build_spark_session

    check_arguments(args)
    opts = ingest_options(args)
    spark = build_spark_session("binlake-ingest")
    try:
        summary = run_ingest(opts, executor=spark_executor(spark),
                             progress=lambda msg: print(f"[ingest] {msg}", file=sys.stderr))
    finally:
        spark.stop()
    print(summary.text())
    return 0

if __name__ == "__main__":
    sys.exit(main())
