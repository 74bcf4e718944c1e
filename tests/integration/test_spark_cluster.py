"""A real Spark cluster (issue 16): a standalone master and two one-core workers started from the pyspark install
on loopback (binlake.testing.spark_cluster), `spark-submit spark_jobs/ingest.py --engine delta-spark` against the
binlogs of a private MariaDB workload (seeded: several tables of different key and column shapes, inserts,
updates, key-changing updates, deletes, spread over several binlog files), then:

- the Spark UI REST API (served for the ended application by the cluster's history server from its event log)
  says tasks ran on both workers: each worker's executor (the worker's own /json/ names its executors) has
  completed tasks, and the task lists of the application's stages name both executors;
- the lake's current tables equal the server's `SELECT *`.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from binlake.testing.spark_cluster import SparkClusterError, SparkStandalone, spark_home
from tests.conftest import skip_or_fail

from .test_lifecycle import fresh, lake_current, new_files, run, server_tables

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def spark_cluster(tmp_path_factory) -> SparkStandalone:
    """A standalone master, two workers (1 core, 1 GB each) and a history server on free loopback ports; all
    stopped (by process id) at teardown."""
    if spark_home() is None:
        pytest.skip("pyspark is not installed (the `spark` extra)")
    if shutil.which("java") is None:
        pytest.skip("no java on PATH (Spark needs a JVM; .ci/run installs one)")
    # Executors run this checkout's binlake (the venv's editable install may point at another one).
    env = {"PYTHONPATH": os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)}
    try:
        cluster = SparkStandalone.start(tmp_path_factory.mktemp("spark_cluster"), workers=2, cores=1, memory="1g",
                                        worker_env=env)
    except SparkClusterError as exc:
        pytest.fail(f"the private Spark cluster did not start: {exc}", pytrace=False)
    yield cluster
    cluster.stop()


def delta_jars() -> list[str]:
    from binlake.spark import delta_jars as found
    from binlake.spark import missing_jars_message

    jars = found()
    if not jars:
        skip_or_fail(f"delta-spark: {missing_jars_message()}")
    return jars


def workload(rng: random.Random) -> list[list[str]]:
    """Statements in several groups (one binlog file each): three tables of different key and column shapes."""
    def amount() -> str:
        return "NULL" if rng.random() < 0.1 else f"{rng.randint(-99999, 99999) / 100:.2f}"

    create = ["CREATE TABLE orders (id INT PRIMARY KEY, customer INT NOT NULL, amount DECIMAL(9,2), "
              "note VARCHAR(30), placed DATETIME(3))",
              "CREATE TABLE order_lines (order_id INT, line SMALLINT, sku VARCHAR(12), qty INT, PRIMARY KEY (order_id, line))",
              "CREATE TABLE tags (name VARCHAR(20) PRIMARY KEY, score DOUBLE, flag TINYINT UNSIGNED)"]
    groups: list[list[str]] = [create]
    ids: list[int] = []
    for g in range(4):
        stmts = []
        new = rng.sample(range(1000 * g + 1, 1000 * g + 900), rng.randint(20, 60))
        ids += new
        stmts.append("INSERT INTO orders VALUES " + ", ".join(
            f"({i}, {rng.randint(1, 9)}, {amount()}, "
            f"{'NULL' if rng.random() < 0.2 else repr('n' * rng.randint(0, 30))}, "
            f"'2024-0{rng.randint(1, 9)}-1{rng.randint(0, 9)} 0{rng.randint(0, 9)}:1{rng.randint(0, 9)}:00.{rng.randint(0, 999):03d}')"
            for i in new))
        stmts.append("INSERT IGNORE INTO order_lines VALUES " + ", ".join(
            f"({rng.choice(ids)}, {n}, 'sku{rng.randint(0, 99)}', {rng.randint(-5, 50)})"
            for n in rng.sample(range(1, 30000), rng.randint(10, 40))))
        stmts.append("INSERT INTO tags VALUES " + ", ".join(
            f"('t{g}_{n}', {rng.uniform(-1e6, 1e6)!r}, {rng.randint(0, 255)})" for n in range(rng.randint(3, 15))))
        stmts.append(f"UPDATE orders SET amount = {amount()}, note = 'upd{g}' WHERE customer = {rng.randint(1, 9)}")
        stmts.append(f"UPDATE order_lines SET qty = qty + 1 WHERE line % {rng.randint(2, 5)} = 0")
        moved = rng.choice(ids)
        stmts.append(f"UPDATE IGNORE orders SET id = {100000 + g} WHERE id = {moved}")
        stmts.append(f"DELETE FROM orders WHERE id % {rng.randint(5, 9)} = {g}")
        stmts.append(f"DELETE FROM tags WHERE flag < {rng.randint(0, 60)}")
        stmts.append(f"UPDATE tags SET name = CONCAT(name, 'x') WHERE flag > {rng.randint(150, 250)}")
        rng.shuffle(stmts)  # the order of statements varies (every id exists or the statement matches nothing)
        groups.append(stmts)
    return groups


def submit(cluster: SparkStandalone, jars: list[str], source: Path, lake: Path, db: str, log: Path) -> None:
    conf = {**cluster.submit_conf(),
            # schedule only once both executors registered, so that each stage's tasks spread over both
            "spark.scheduler.minRegisteredResourcesRatio": "1.0",
            "spark.scheduler.maxRegisteredResourcesWaitingTime": "300s",
            "spark.executor.memory": "512m",
            "spark.executorEnv.PYTHONPATH": str(ROOT)}
    cmd = [cluster.spark_submit, "--master", cluster.master_url, "--deploy-mode", "client",
           "--jars", ",".join(jars), *(a for k, v in conf.items() for a in ("--conf", f"{k}={v}")),
           str(ROOT / "spark_jobs" / "ingest.py"), "--source", f"local:{source}", "--lake", str(lake),
           "--engine", "delta-spark", "--databases", db, "--no-progress", "--no-gates"]
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable,
           "SPARK_LOCAL_IP": "127.0.0.1",
           "PYTHONPATH": os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)}
    env.pop("SPARK_HOME", None)
    with open(log, "w") as out:
        done = subprocess.run(cmd, stdout=out, stderr=subprocess.STDOUT, env=env, cwd=ROOT, timeout=900)
    assert done.returncode == 0, f"spark-submit exit {done.returncode}:\n{log.read_text()[-6000:]}\n{cluster.logs()}"


def test_ingest_job_on_a_two_worker_cluster(spark_cluster, mariadb_minimal, tmp_path) -> None:
    jars = delta_jars()
    server = mariadb_minimal  # MINIMAL row metadata: columns named from the binlog's DDL
    (db,) = fresh(server, "sc_shop")
    server.flush_logs()
    first = server.binlog_files()[-1].name
    rng = random.Random(16)
    for group in workload(rng):
        run(server, db, *group)
        server.flush_logs()
    source = tmp_path / "binlogs"
    source.mkdir()
    files = [f for f in server.binlog_files() if f.name >= first][:-1]  # closed files only
    for f in files:
        shutil.copy(f, source / f.name)
    assert len(files) >= 5, files
    lake = tmp_path / "lake"

    apps_before = {a["id"] for a in spark_cluster.applications()}
    submit(spark_cluster, jars, source, lake, db, tmp_path / "submit.log")
    app_id = spark_cluster.wait_new_application(apps_before)
    spark_cluster.wait_application(app_id)

    # tasks ran on both workers: each worker ran an executor of the application that completed tasks
    per_worker = spark_cluster.worker_executors(app_id)
    assert all(len(ids) == 1 for ids in per_worker.values()), per_worker
    executors = {e["id"]: e for e in spark_cluster.application_executors(app_id)}
    for worker, (exec_id,) in per_worker.items():
        assert exec_id in executors, (worker, sorted(executors))
        assert executors[exec_id]["completedTasks"] > 0, (worker, executors[exec_id])
    assert executors["driver"]["completedTasks"] == 0  # nothing ran in the driver
    tasks = spark_cluster.application_tasks(app_id)
    assert {t["executorId"] for t in tasks} == {ids[0] for ids in per_worker.values()}
    assert all(t["status"] == "SUCCESS" for t in tasks), [t for t in tasks if t["status"] != "SUCCESS"][:3]

    expected = server_tables(server, [db])
    assert set(expected) == {f"{db}.orders", f"{db}.order_lines", f"{db}.tags"}
    assert all(rows for _, rows in expected.values())
    assert lake_current(lake, [db]) == expected


def test_submit_without_the_delta_jars_is_one_line(tmp_path) -> None:
    """spark-submit of the ingest job with --engine delta-spark but without the Delta jars: exit 6 (unavailable)
    and one line saying how to submit them, before anything is read or written."""
    home = spark_home()
    if home is None or shutil.which("java") is None:
        pytest.skip("pyspark's spark-submit or java is not installed")
    source = tmp_path / "binlogs"
    source.mkdir()
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable,
           "SPARK_LOCAL_IP": "127.0.0.1",
           "PYTHONPATH": os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)}
    env.pop("SPARK_HOME", None)
    done = subprocess.run([str(home / "bin" / "spark-submit"), "--master", "local[1]",
                           str(ROOT / "spark_jobs" / "ingest.py"), "--source", f"local:{source}",
                           "--lake", str(tmp_path / "lake"), "--engine", "delta-spark", "--no-progress"],
                          capture_output=True, text=True, env=env, cwd=ROOT, timeout=600)
    output = done.stdout + done.stderr  # spark-submit passes the Python driver's stderr on as its stdout
    errors = [ln for ln in output.splitlines() if ln.startswith("binlake:")]
    assert done.returncode == 6, output[-3000:]
    assert len(errors) == 1 and "--engine delta-spark" in errors[0] and "--jars" in errors[0], errors
    assert "Traceback" not in output and not (tmp_path / "lake").exists()


def _ancestors(pid: int) -> list[int]:
    """pid's parent, its parent, ... (from /proc)."""
    out = []
    while pid > 1:
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            break
        pid = int(stat.rsplit(")", 1)[1].split()[1])
        out.append(pid)
    return out


def _task_ends(events: Path) -> list[dict]:
    """The SparkListenerTaskEnd events of an application's event log: stage, task index, executor, reason."""
    (app,) = events.iterdir()  # one application: a file, or (rolling event logs, Spark 4) a folder of parts
    lines = [ln for part in (sorted(app.iterdir()) if app.is_dir() else [app]) if part.name.startswith(("events", "app"))
             for ln in part.read_text().splitlines()]
    ends = []
    for line in lines:
        event = json.loads(line)
        if event.get("Event") == "SparkListenerTaskEnd":
            info = event["Task Info"]
            ends.append({"stage": event["Stage ID"], "index": info["Index"], "executor": info["Executor ID"],
                         "reason": event["Task End Reason"]["Reason"]})
    return ends


@pytest.mark.slow  # a cluster of its own (the kill ends a worker): about 1-2 min quiet
def test_a_worker_killed_while_decode_tasks_run_is_survived(mariadb_full, tmp_path) -> None:
    """A lost worker: `spark-submit spark_jobs/ingest.py --engine delta-spark` on a fresh standalone cluster (two
    one-core workers), and while a decode task runs (it waits at crash point `decode-task` with `pause`, after
    staging its pieces) that task's worker is killed with SIGKILL: the worker JVM, its executor JVM and the
    executor's Python workers. Spark runs the lost task again on the other worker (spark.task.maxFailures = 2: the
    loss counts at most once, so the retry is certain) and the run succeeds; the event log shows the task lost on
    the killed worker's executor and done on the other; the lake equals the uninterrupted in-process lake, table by
    table, with no history row twice (the lost attempt's staged pieces are not committed)."""
    from binlake.lake.crashpoints import CRASH_ENV, PAUSE_FILE_ENV
    from binlake.lake.ingest import IngestOptions
    from binlake.quality.stages import run_ingest
    from binlake.settings import QualityConfig

    from .test_spark_failures import assert_same_tables

    if spark_home() is None or shutil.which("java") is None:
        pytest.skip("pyspark's spark-submit or java is not installed")
    jars = delta_jars()
    server = mariadb_full
    dbs = fresh(server, "sc_lost")
    server.flush_logs()
    first = server.binlog_files()[-1].name
    for group in workload(random.Random(1636)):  # several files: several decode tasks, on both workers
        run(server, dbs[0], *group)
        server.flush_logs()
    source = tmp_path / "binlogs"
    source.mkdir()
    for f in new_files(server, first):
        shutil.copy(f, source / f.name)
    assert len(list(source.iterdir())) >= 5
    clean = tmp_path / "clean"
    run_ingest(IngestOptions(lake=str(clean), files=sorted(str(f) for f in source.iterdir()), databases=set(dbs),
                             quality=QualityConfig(enabled=False)))
    assert lake_current(clean, dbs) == server_tables(server, dbs)

    env = {"PYTHONPATH": os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)}
    try:
        cluster = SparkStandalone.start(tmp_path / "cluster", workers=2, cores=1, memory="1g", history=False,
                                        worker_env=env)
    except SparkClusterError as exc:
        pytest.fail(f"the private Spark cluster did not start: {exc}", pytrace=False)
    pause = tmp_path / "paused"
    lake = tmp_path / "lake"
    conf = {**cluster.submit_conf(),
            "spark.scheduler.minRegisteredResourcesRatio": "1.0",
            "spark.scheduler.maxRegisteredResourcesWaitingTime": "300s",
            "spark.executor.memory": "512m",
            "spark.task.maxFailures": "2",
            "spark.eventLog.compress": "false", "spark.eventLog.rolling.enabled": "false",  # one plain JSON file
            "spark.executorEnv.PYTHONPATH": str(ROOT),
            f"spark.executorEnv.{CRASH_ENV}": "decode-task:1:pause",
            f"spark.executorEnv.{PAUSE_FILE_ENV}": str(pause)}
    cmd = [cluster.spark_submit, "--master", cluster.master_url, "--deploy-mode", "client",
           "--jars", ",".join(jars), *(a for k, v in conf.items() for a in ("--conf", f"{k}={v}")),
           str(ROOT / "spark_jobs" / "ingest.py"), "--source", f"local:{source}", "--lake", str(lake),
           "--engine", "delta-spark", "--databases", ",".join(dbs), "--no-progress", "--no-gates"]
    submit_env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable,
                  "SPARK_LOCAL_IP": "127.0.0.1", **env}
    for key in ("SPARK_HOME", CRASH_ENV, PAUSE_FILE_ENV, "BINLAKE_DEBUG"):
        submit_env.pop(key, None)
    log = tmp_path / "submit.log"
    try:
        with open(log, "w") as out:
            job = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=submit_env, cwd=ROOT,
                                   start_new_session=True)
        try:
            while not pause.exists():  # a decode task waits at the crash point (the job cannot end before)
                assert job.poll() is None, f"the job ended ({job.returncode}) before a decode task paused:\n" \
                                           f"{log.read_text()[-4000:]}"
                time.sleep(0.1)
            paused = int(pause.read_text())
            lineage = _ancestors(paused)
            (worker,) = [p for p in cluster.procs if p.name.startswith("worker") and p.process.pid in lineage]
            # the worker JVM and its executor JVM (the worker's process group), the executor's Python workers
            # (pyspark's daemon makes its own group)
            os.killpg(worker.process.pid, signal.SIGKILL)
            os.killpg(os.getpgid(paused), signal.SIGKILL)
            code = job.wait(timeout=900)
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(job.pid, signal.SIGKILL)
        assert code == 0, f"spark-submit exit {code}:\n{log.read_text()[-6000:]}\n{cluster.logs()}"
        assert worker.process.wait(timeout=60) == -signal.SIGKILL
    finally:
        cluster.stop()

    ends = _task_ends(cluster.event_log_dir)
    lost = [e for e in ends if e["reason"] == "ExecutorLostFailure"]
    assert lost, ends
    assert len({e["executor"] for e in lost}) == 1, lost  # only the killed worker's executor was lost
    for e in lost:  # each lost task was done again, on the other executor
        assert any(d["reason"] == "Success" and d["executor"] != e["executor"] and (d["stage"], d["index"]) ==
                   (e["stage"], e["index"]) for d in ends), (e, ends)
    assert lake_current(lake, dbs) == lake_current(clean, dbs)
    assert_same_tables(lake, clean)
