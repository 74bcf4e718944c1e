"""Spark for binlake: the only place a SparkSession is built, and the ingest executor that runs decode tasks as
Spark tasks. Imported only where Spark is wanted (`binlake ingest --spark`, spark_jobs/, tests): pyspark is the
optional `spark` extra, and nothing else in binlake imports this module at its top.

The Delta jars: `scripts/dev.sh setup` fetches them with Maven into `.venv/jars/delta` (the jars folder of the
environment running binlake; $BINLAKE_DELTA_JARS overrides it). When that folder holds them, every session this
module starts gets them on `spark.jars` plus Delta's SQL extension and catalog, so the delta-spark engine and
Spark SQL on `delta.`path`` tables work in it.
"""

from __future__ import annotations

import logging
import os
import re
import sys
from pathlib import Path

from .exitcodes import ExitCode
from .lake.bootstrap import stage_chunks
from .lake.engines.base import EngineUnavailable
from .lake.engines.deltaspark import is_spark_failure, spark_cause, spark_error_text
from .lake.ingest import run_task


class SparkUnavailable(RuntimeError):
    """pyspark is not installed (it is the optional `spark` extra)."""

    exit_code = ExitCode.UNAVAILABLE


DELTA_JARS_ENV = "BINLAKE_DELTA_JARS"
SETUP_COMMAND = "bash scripts/dev.sh setup"
DELTA_EXTENSION = "io.delta.sql.DeltaSparkSessionExtension"
DELTA_CATALOG = "org.apache.spark.sql.delta.catalog.DeltaCatalog"
LOCAL_JAVA_OPTIONS = "-XX:TieredStopAtLevel=1"


def delta_jars_dir() -> Path:
    """Where the Delta jars are looked for: $BINLAKE_DELTA_JARS, else `<venv>/jars/delta`."""
    return Path(os.environ.get(DELTA_JARS_ENV) or Path(sys.prefix) / "jars" / "delta")


def delta_jars(folder: Path | None = None) -> list[str]:
    """The jars of `folder` (default delta_jars_dir()), or [] when it holds no delta-spark jar."""
    folder = folder or delta_jars_dir()
    jars = sorted(str(p) for p in folder.glob("*.jar")) if folder.is_dir() else []
    return jars if any(Path(j).name.startswith("delta-spark_") for j in jars) else []


def delta_jar_name() -> str:
    """The delta-spark jar matching the installed delta-spark and pyspark (what setup fetches from Maven Central:
    io.delta:delta-spark_<Spark major.minor>_2.13:<delta-spark version>)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        delta, spark = version("delta-spark"), version("pyspark")
    except PackageNotFoundError:
        return "delta-spark_<spark>_2.13-<version>.jar"
    return f"delta-spark_{'.'.join(spark.split('.')[:2])}_2.13-{delta}.jar"


def missing_jars_message(folder: Path | None = None) -> str:
    return (f"the Delta jars are not in {folder or delta_jars_dir()} (no {delta_jar_name()}): fetch them with "
            f"`{SETUP_COMMAND}` (or set {DELTA_JARS_ENV} to a folder holding them)")


def _jvm_running() -> bool:
    """Whether this process already has a Spark JVM: spark-submit started it, or an earlier session did."""
    from pyspark import SparkContext

    return SparkContext._gateway is not None or bool(os.environ.get("PYSPARK_GATEWAY_PORT"))


def submitted_conf():
    """spark-submit's settings (a SparkConf): empty when this process starts the JVM itself. Under spark-submit
    the Python side must first connect to the submitted JVM, or SparkConf() reads nothing (pure Python)."""
    from pyspark import SparkConf, SparkContext

    if SparkContext._jvm is None and os.environ.get("PYSPARK_GATEWAY_PORT"):
        SparkContext._ensure_initialized()
    return SparkConf()


def _delta_submitted(extra_conf: dict) -> bool:
    """Whether Delta reaches the classpath another way: spark.jars / spark.jars.packages given or submitted."""
    submitted = submitted_conf()
    for key in ("spark.jars", "spark.jars.packages"):
        if "delta-spark" in str(extra_conf.get(key) or submitted.get(key, "") or ""):
            return True
    return False


def delta_conf(jars: list[str], extra_conf: dict) -> dict[str, str]:
    """spark.jars plus Delta's extension and catalog, added to what extra_conf (or spark-submit) already sets."""
    submitted = submitted_conf()

    def listed(key: str) -> list[str]:
        return [v for v in str(extra_conf.get(key) or submitted.get(key, "") or "").split(",") if v]

    extensions = listed("spark.sql.extensions")
    conf = {
        "spark.sql.extensions": ",".join([*extensions, *([] if DELTA_EXTENSION in extensions else [DELTA_EXTENSION])]),
        "spark.sql.catalog.spark_catalog": DELTA_CATALOG,
    }
    given = listed("spark.jars")
    if given or jars:
        conf["spark.jars"] = ",".join([*given, *(j for j in jars if j not in given)])
    return conf


def build_spark_session(app_name: str = "binlake", master: str | None = None, extra_conf: dict | None = None,
                        delta: bool | None = None):
    """A SparkSession with binlake's defaults: UI off, small shuffle, UTC session zone, loopback driver (local
    masters only), and Delta when its jars are present (see the module docstring).

    `master` defaults to $BINLAKE_SPARK_MASTER, then local[*]; under spark-submit the submitted master wins.
    `delta`: None adds Delta when the jars are there or were submitted; True requires it (EngineUnavailable, one
    line naming the jar folder and the setup command, or under spark-submit the --jars option, when the jars are
    neither there nor submitted); False leaves it out.
    """
    try:
        from pyspark.sql import SparkSession
    except ImportError as exc:
        raise SparkUnavailable(f"Spark is not installed ({exc}): pip install 'binlake[spark]'") from None
    extra_conf = dict(extra_conf or {})
    # The driver's classpath is fixed when its JVM starts: the jars go in only when this call starts it. Under
    # spark-submit (or after an earlier session) Delta is there only if it was submitted (--jars, --packages).
    jvm_running = _jvm_running()
    from pyspark import SparkContext

    submitted_jvm = SparkContext._gateway is None and bool(os.environ.get("PYSPARK_GATEWAY_PORT"))
    jars = delta_jars() if delta is not False and not jvm_running else []
    with_delta = bool(jars)
    if not jars and (delta or (delta is None and submitted_jvm)):
        with_delta = _delta_submitted(extra_conf)
        if delta and not with_delta and submitted_jvm:
            raise EngineUnavailable("the delta-spark engine needs Delta on Spark's classpath: submit the jars of "
                                    f"{delta_jars_dir()} with spark-submit --jars (comma-separated) or --packages")
        if delta and not with_delta and not jvm_running:
            raise EngineUnavailable(f"the delta-spark engine needs Delta on Spark's classpath, but "
                                    f"{missing_jars_message()}")
    chosen = master or os.environ.get("BINLAKE_SPARK_MASTER")
    # Loopback only for a local master: a cluster's executors must reach the driver on a routable address.
    loopback = chosen is None or chosen.startswith("local")
    if loopback:
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    # Python workers must run this interpreter (with pyarrow and binlake), not whatever `python3` is on PATH.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)

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
        if not jvm_running and "spark.driver.extraJavaOptions" not in extra_conf:
            # Local mode: one short-lived JVM is driver and executor. Its C2 JIT compiler took about half of the
            # JVM's CPU in an ingest (36 of 90 s at 100 MB, docs/speed.md); the quick C1 tier alone halves the
            # CPU of small and medium batches. Set spark.driver.extraJavaOptions to choose otherwise.
            conf["spark.driver.extraJavaOptions"] = LOCAL_JAVA_OPTIONS
    if with_delta:
        conf.update(delta_conf(jars, extra_conf))
        if loopback:
            # Delta rebuilds a table's snapshot in 50 tasks by default, sized for clusters and long logs; on one
            # machine those tasks dominate every small commit (the engine suite ran several times longer).
            conf["spark.databricks.delta.snapshotPartitions"] = "2"
        extra_conf = {k: v for k, v in extra_conf.items() if k not in ("spark.jars", "spark.sql.extensions")}
    conf.update(extra_conf)
    for key, value in conf.items():
        builder = builder.config(key, value)
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel("ERROR")
    _quiet_task_failures(session)
    return session


# Spark's loggers that print a failed task's stack trace (the executor's, the scheduler's): binlake reports the
# failure itself, as one line naming the stage, file and positions (SparkTaskFailed, SparkStageFailed).
TASK_FAILURE_LOGGERS = ("org.apache.spark.executor.Executor", "org.apache.spark.scheduler.TaskSetManager",
                        "org.apache.spark.util.SparkUncaughtExceptionHandler")


def _not_py4j_resend(record: logging.LogRecord) -> bool:
    """py4j logs a stack trace on the root logger when the JVM is gone ("Exception while sending command."):
    binlake reports that failure itself, as one line."""
    return not (record.getMessage() == "Exception while sending command." and "py4j" in record.pathname)


def _quiet_jvm_gone(handle_error):
    """pyspark's accumulator server prints a stack trace when the JVM's connection to it ends (EOFError): the JVM
    is gone, which binlake reports itself; other errors are printed as before."""
    def handle(request, client_address) -> None:
        if not isinstance(sys.exc_info()[1], (EOFError, ConnectionError)):
            handle_error(request, client_address)

    return handle


def _quiet_task_failures(session) -> None:
    """Silence TASK_FAILURE_LOGGERS in this JVM, unless BINLAKE_DEBUG asks for everything."""
    if os.environ.get("BINLAKE_DEBUG", "") not in ("", "0"):
        return
    root = logging.getLogger()
    if _not_py4j_resend not in root.filters:
        root.addFilter(_not_py4j_resend)
    accumulators = getattr(session.sparkContext, "_accumulatorServer", None)
    if accumulators is not None and not getattr(accumulators, "binlake_quiet", False):
        accumulators.handle_error = _quiet_jvm_gone(accumulators.handle_error)
        accumulators.binlake_quiet = True
    jvm = session.sparkContext._jvm
    try:
        off = jvm.org.apache.logging.log4j.Level.OFF
        for name in TASK_FAILURE_LOGGERS:
            jvm.org.apache.logging.log4j.core.config.Configurator.setLevel(name, off)
    except Exception:  # another logging backend: its logs stay as they are
        return


def stop_session(spark) -> None:
    """spark.stop(); a JVM already gone (out of memory, killed) is no second error: the run's own error, one line,
    says what happened."""
    try:
        spark.stop()
    except Exception as exc:
        if not is_spark_failure(exc):
            raise


class SparkTaskFailed(RuntimeError):
    """A Spark decode task failed (its error, an executor lost or out of memory): one line naming the stage, the
    file and the position range. Nothing was committed for the batch; a re-run decodes it again."""

    exit_code = ExitCode.UNAVAILABLE


class TaskError:
    """A decode task's own error, returned instead of raised (Spark would bury it in a Java stack trace): the
    driver raises it as one line with the error's exit code."""

    def __init__(self, task, exc: BaseException) -> None:
        _path, self.name, _seq, self.start, self.stop = task
        self.kind, self.message = type(exc).__name__, " ".join(str(exc).split())[:600]
        self.exit_code = getattr(exc, "exit_code", ExitCode.BAD_DATA if isinstance(exc, ValueError) else None)

    def error(self) -> SparkTaskFailed:
        where = f"{self.name} [{self.start}, {'end' if self.stop is None else self.stop})"
        failed = SparkTaskFailed(f"Spark decode stage failed at {where}: {self.kind}: {self.message}")
        if self.exit_code is not None:
            failed.exit_code = self.exit_code
        return failed


def _run_guarded(task, batch, resolver, filters, stage):
    try:
        return run_task(task, batch, resolver, filters, stage)
    except Exception as exc:  # MemoryError is not an Exception: the task fails and Spark reports it
        return TaskError(task, exc)


def _task_failure(exc: BaseException, tasks: list) -> SparkTaskFailed:
    """The one-line error for a failed Spark job of decode tasks (task i of the job is tasks[i])."""
    text = spark_error_text(exc) or ""
    found = re.search(r"Task (\d+) in stage [\d.]+ failed", text)
    where = ""
    if found and int(found.group(1)) < len(tasks):
        _path, name, _seq, start, stop = tasks[int(found.group(1))]
        where = f" {name} [{start}, {'end' if stop is None else stop})"
    elif tasks:  # the whole job failed (the JVM gone): every range it was decoding
        (_p, first, _s, start, _e), (_p, last, _s, _b, stop) = tasks[0], tasks[-1]
        where = f" {first} [{start}, {'end' if stop is None else stop})" if len(tasks) == 1 else \
            f" {first} [{start}, ...) to {last} [..., {'end' if stop is None else stop})"
    cause = spark_cause(exc)
    return SparkTaskFailed(f"Spark decode stage failed at{where or ' an unknown range'}: {cause}")


def spark_executor(spark):
    """An ingest executor that runs each decode task as a Spark task. Given the batch's staging folder (prepare
    passes it), the tasks write their history rows there (binlake.lake.staging) and only their manifests come
    back to the driver; without it the rows come back in the results."""
    def run(tasks, batch, resolver, filters, stage=None):
        if not tasks:
            return []
        shared = spark.sparkContext.broadcast((batch, resolver, filters, stage))
        rdd = spark.sparkContext.parallelize(tasks, len(tasks))
        try:
            results = rdd.map(lambda task: _run_guarded(task, *shared.value)).collect()
        except Exception as exc:
            if not is_spark_failure(exc):
                raise
            raise _task_failure(exc, tasks) from None
        finally:
            shared.unpersist()
        for failed in results:
            if isinstance(failed, TaskError):
                raise failed.error()
        return results

    return run


def bootstrap_stager(spark, tasks: int | None = None):
    """A bootstrap stager (binlake.lake.bootstrap.Stager): Spark tasks read the chunks, each on its own connection
    (snapshot or watermark method, as in-process), and write their rows as Parquet files into the lake; the
    driver gets back manifests only (file paths, sizes, statistics, positions) and commits them.

    `tasks` (default: twice the default parallelism) tasks take the chunks in turn, each reading its chunks one
    ahead (binlake.lake.bootstrap.stage_chunks: the server sends the next chunk while the task converts and
    writes the current one), so the per-task costs are paid a few times rather than once per chunk."""
    def run(uri, chunks, batch, plans, part_rows):
        if not chunks:
            return []
        count = max(1, min(len(chunks), tasks or 2 * spark.sparkContext.defaultParallelism))
        groups = [list(enumerate(chunks))[n::count] for n in range(count)]
        shared = spark.sparkContext.broadcast((uri, batch, plans, part_rows))

        def task(group):
            uri, batch, plans, part_rows = shared.value
            return stage_chunks(uri, group, batch, plans, part_rows)

        rdd = spark.sparkContext.parallelize(groups, len(groups))
        try:
            return sorted((item for items in rdd.map(task).collect() for item in items), key=lambda r: r[0])
        except Exception as exc:
            if type(exc).__name__ not in ("Py4JJavaError", "PythonException", "SparkException") and \
                    "Job aborted" not in str(exc) and not is_spark_failure(exc):
                raise
            raise _chunk_failure(exc, [g[0][1] for g in groups]) from None
        finally:
            shared.unpersist()

    return run


def _chunk_failure(exc: BaseException, chunks: list) -> SparkTaskFailed:
    """The one-line error for a failed Spark job of bootstrap chunks: the chunk reader's own line (it names the
    table and key range) when the task's error carries it, else the cause and the (first) chunk of the failed
    task (`chunks`: each task's first chunk)."""
    text = spark_error_text(exc) or ""
    own = re.search(r"(?:ChunkReadError|BootstrapError): ([^\n]+)", text)
    if own:
        detail = own.group(1)
    else:
        cause = str(_task_failure(exc, [])).split(": ", 1)[-1]
        found = re.search(r"Task (\d+) in stage [\d.]+ failed", text)
        where = "a chunk"
        if found and int(found.group(1)) < len(chunks):
            c = chunks[int(found.group(1))]
            where = f"{c.database}.{c.table} [{c.lower}, {c.upper})"
        detail = f"{where}: {cause}"
    return SparkTaskFailed(" ".join(f"Spark bootstrap task failed: {detail}".split())[:1000])
