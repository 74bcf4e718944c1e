"""spark-submit entry point for the Airflow tasks' Spark stages: prepare (decoding spread over Spark tasks) and,
with the delta-spark engine, every lake stage (commits and merges through the job's session); the result in a
file (see binlake/orchestration/jobs.py for why the exit code is not trusted).

    spark-submit [--master M ...] spark_jobs/stage.py [--spark-cluster] --config binlake.toml --stage prepare \
        --instance I --lineage L --result R

`--spark-cluster` (added by the task for a non-local master): the driver must be reachable from executors on
other hosts, so it binds to its host name instead of the loopback defaults of binlake/spark.py (unless spark.driver.host
or spark.driver.bindAddress were submitted).
"""

from __future__ import annotations

import os
import socket
import sys

from binlake.config import DeploymentConfig
from binlake.lake.engines import use_spark
from binlake.orchestration.jobs import job_main
from binlake.spark import build_spark_session, spark_executor, submitted_conf

CLUSTER_FLAG = "--spark-cluster"


def spark_executor_factory(cfg: DeploymentConfig, cluster: bool = False):
    """A Spark session for the stage: the decode executor on it, the function that stops it, and what the result
    reports about it. With `engine = "delta-spark"` the session must have Delta (spark-submit needs the jars:
    `submit_args = ["--jars", ...]`) and the engine commits through it."""

    submitted = bool(os.environ.get("PYSPARK_GATEWAY_PORT"))  # spark-submit started this process and its JVM
    # `spark.conf`: spark-submit got them as --conf; a local session takes them here.
    extra: dict[str, str] = {} if submitted else {k: str(v) for k, v in cfg.spark.conf.items()}
    if cluster:
        conf = submitted_conf()
        extra |= {"spark.driver.host": conf.get("spark.driver.host", socket.getfqdn()),
                 "spark.driver.bindAddress": conf.get("spark.driver.bindAddress", "0.0.0.0")}
    delta = cfg.engine == "delta-spark"
    spark = build_spark_session("binlake-stage", extra_conf=extra, delta=True if delta else None)
    if delta:
        use_spark(spark)
    context = spark.sparkContext
    info = {"master": context.master, "app_id": context.applicationId, "engine": cfg.engine, "submitted": submitted}
    return spark_executor(spark), spark.stop, info


if __name__ == "__main__":
    cluster = CLUSTER_FLAG in sys.argv
    job_main([a for a in sys.argv[1:] if a != CLUSTER_FLAG],
             executor_factory=lambda cfg: spark_executor_factory(cfg, cluster))
