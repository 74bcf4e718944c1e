"""spark-submit entry point for the Airflow tasks' prepare stage: decoding spread over Spark tasks, the result
in a file (see binlake/orchestration/jobs.py for why the exit code is not trusted).

    spark-submit [--master M ...] spark_jobs/stage.py [--spark-cluster] --config binlake.toml --stage prepare \
        --instance I --lineage L --result R

`--spark-cluster` (added by the task for a non-local master): the driver must be reachable from executors on
other hosts, so it binds to its host name instead of the loopback defaults of binlake/spark.py (unless spark.driver.host
or spark.driver.bindAddress were submitted).
"""

from __future__ import annotations

import socket
import sys

from binlake.orchestration.jobs import job_main
from binlake.spark import build_spark_session, spark_executor

CLUSTER_FLAG = "--spark-cluster"


def spark_executor_factory(cluster: bool = False):
    """A Spark-backed ingest executor and the function that stops its session."""

    extra: dict[str, str] = {}
    if cluster:
        from pyspark import SparkConf

        submitted = SparkConf()
        extra = {"spark.driver.host": submitted.get("spark.driver.host", socket.getfqdn()),
                 "spark.driver.bindAddress": submitted.get("spark.driver.bindAddress", "0.0.0.0")}
    spark = build_spark_session("binlake-prepare", extra_conf=extra)
    return spark_executor(spark), spark.stop


if __name__ == "__main__":
    cluster = CLUSTER_FLAG in sys.argv
    job_main([a for a in sys.argv[1:] if a != CLUSTER_FLAG], executor_factory=lambda: spark_executor_factory(cluster))
