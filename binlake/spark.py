"""Spark for binlake: the only place a SparkSession is built, and the ingest executor that runs decode tasks as
Spark tasks. Imported only where Spark is wanted (`binlake ingest --spark`, spark_jobs/, tests): pyspark is the
optional `spark` extra, and nothing else in binlake imports this module at its top."""

from __future__ import annotations

import os
import sys

from .exitcodes import ExitCode
from .lake.ingest import run_task


class SparkUnavailable(RuntimeError):
    """pyspark is not installed (it is the optional `spark` extra)."""

    exit_code = ExitCode.UNAVAILABLE


def build_spark_session(app_name: str = "binlake", master: str | None = None, extra_conf: dict | None = None):
    """A SparkSession with binlake's defaults: UI off, small shuffle, UTC session zone, loopback driver (local
    masters only).

    `master` defaults to $BINLAKE_SPARK_MASTER, then local[*]; under spark-submit the submitted master wins.
    """
    chosen = master or os.environ.get("BINLAKE_SPARK_MASTER")
    # Loopback only for a local master: a cluster's executors must reach the driver on a routable address.
    loopback = chosen is None or chosen.startswith("local")
    if loopback:
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    # Python workers must run this interpreter (with pyarrow and binlake), not whatever `python3` is on PATH.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    try:
        from pyspark.sql import SparkSession
    except ImportError as exc:
        raise SparkUnavailable(f"Spark is not installed ({exc}): pip install 'binlake[spark]'") from None

    builder = SparkSession.builder.appName(app_name)
    if chosen:
        builder = builder.master(chosen)
    elif "SPARK_HOME" not in os.environ and not os.environ.get("PYSPARK_SUBMIT_ARGS"):
        builder = builder.master("local[*]")
    conf = {
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.sql.shuffle.partitions": "4",
        "spark.sql.session.timeZone": "UTC",
        "spark.sql.execution.arrow.pyspark.enabled": "true",
    }
    if loopback:
        conf.update({"spark.driver.host": "127.0.0.1", "spark.driver.bindAddress": "127.0.0.1"})
    conf.update(extra_conf or {})
    for key, value in conf.items():
        builder = builder.config(key, value)
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel("ERROR")
    return session


def spark_executor(spark):
    """An ingest executor that runs each decode task as a Spark task and collects the results."""
    def run(tasks, batch, resolver, filters):
        if not tasks:
            return []
        shared = spark.sparkContext.broadcast((batch, resolver, filters))
        rdd = spark.sparkContext.parallelize(tasks, len(tasks))
        return rdd.map(lambda task: run_task(task, *shared.value)).collect()

    return run
