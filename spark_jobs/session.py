"""Spark session setup shared by the entry points (the only place binlake builds a SparkSession)."""

from __future__ import annotations

import os
import sys


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
    from pyspark.sql import SparkSession

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
