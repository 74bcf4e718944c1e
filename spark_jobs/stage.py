"""spark-submit entry point for the Airflow tasks' prepare stage: decoding spread over Spark tasks, the result
in a file (see binlake/orchestration/jobs.py for why the exit code is not trusted).

    spark-submit spark_jobs/stage.py --config binlake.toml --stage prepare --instance I --lineage L --result R
"""

from __future__ import annotations


def spark_executor_factory():
    """A Spark-backed ingest executor and the function that stops its session."""
    from spark_jobs.ingest import spark_executor
    from spark_jobs.session import build_spark_session

    spark = build_spark_session("binlake-prepare")
    return spark_executor(spark), spark.stop


if __name__ == "__main__":
    from binlake.orchestration.jobs import job_main

    job_main(executor_factory=spark_executor_factory)
