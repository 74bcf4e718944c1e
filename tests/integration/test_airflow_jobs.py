"""The stage processes the Airflow tasks start: their result file counts, not their exit code (a child that
aborts after writing a success result succeeded; one that dies without a result failed, with its output); gate
failures come back typed with their table; and the whole chain runs through a real `spark-submit` to a Spark
standalone cluster on 127.0.0.1, from a local source, ending with current tables equal to the server's."""

from __future__ import annotations

import json
import os
import random
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path

import pytest

from binlake.config import load_config
from binlake.orchestration import jobs
from binlake.orchestration.jobs import GateFailedError, StageError, run_stage_process, stage_command
from binlake.testing.processes import free_port

DB = "af_jobs"

CHILD = r"""
import os, sys
from binlake.orchestration.jobs import write_result
result = sys.argv[sys.argv.index("--result") + 1]
print("child: working")
mode = os.environ["CHILD_MODE"]
if mode == "ok-then-abort":
    write_result(result, {"status": "ok", "result": {"batch": 7}})
    sys.stdout.flush()
    os.abort()
if mode == "gate":
    write_result(result, {"status": "error", "type": "GateFailed", "message": "amount below 0", "table": "db.t",
                          "batch": 3, "failures": [{"expectation": "between"}]})
    os._exit(1)
print("child: giving up")
sys.stdout.flush()
os._exit(3)
"""


def config(tmp_path: Path, extra: str = "", source: str = "local:/nowhere", tables: str = "") -> Path:
    path = tmp_path / "binlake.toml"
    path.write_text(f'lake = "lake"\nlanding = "landing"\nretries = 0\n{extra}\n'
                    f'[[instances]]\nname = "a"\nsource = "{source}"\n{tables}\n')
    return path


@pytest.fixture
def fake_child(monkeypatch: pytest.MonkeyPatch):
    """Run CHILD (a real process) in place of the stage module, in the mode given."""

    def use(mode: str) -> None:
        monkeypatch.setenv("CHILD_MODE", mode)
        monkeypatch.setattr(jobs, "stage_command", lambda cfg, stage, args: ([sys.executable, "-c", CHILD, *args], {}))

    return use


def test_result_file_wins_over_an_abort_at_exit(tmp_path: Path, fake_child) -> None:
    fake_child("ok-then-abort")
    lines: list[str] = []
    out = run_stage_process(load_config(config(tmp_path)), "merge", "a", "default", batch=7, log=lines.append)
    assert out == {"batch": 7}
    assert "child: working" in lines
    assert any("exited with code -6 after its work succeeded" in ln for ln in lines), lines


def test_no_result_file_is_a_failure_with_the_output(tmp_path: Path, fake_child) -> None:
    fake_child("die")
    with pytest.raises(StageError) as err:
        run_stage_process(load_config(config(tmp_path)), "merge", "a", "default", batch=1, log=lambda _m: None)
    assert "instance a: merge ended with exit code 3 and no result file" in str(err.value)
    assert "child: giving up" in str(err.value)


def test_gate_failure_comes_back_typed(tmp_path: Path, fake_child) -> None:
    fake_child("gate")
    with pytest.raises(GateFailedError) as err:
        run_stage_process(load_config(config(tmp_path)), "gate_before", "a", "default", batch=3, log=lambda _m: None)
    assert (err.value.table, err.value.batch, err.value.kind) == ("db.t", 3, "GateFailed")
    assert err.value.failures == [{"expectation": "between"}] and "amount below 0" in str(err.value)


def test_stage_commands(tmp_path: Path) -> None:
    local = load_config(config(tmp_path, '[spark]\nmode = "local"\nmaster = "local[3]"'))
    cmd, env = stage_command(local, "prepare", ["--x"])
    assert cmd[1:] == ["-m", "spark_jobs.stage", "--x"] and env == {"BINLAKE_SPARK_MASTER": "local[3]"}
    assert stage_command(local, "merge", ["--x"])[0][1:] == ["-m", "binlake.orchestration.jobs", "--x"]
    submit = load_config(config(tmp_path, '[spark]\nmode = "submit"\nmaster = "yarn"\ndeploy_mode = "cluster"\n'
                                          'spark_submit = "/opt/spark/bin/spark-submit"\n'
                                          'conf = { "spark.b" = 2, "spark.a" = "x" }\nsubmit_args = ["--queue", "etl"]'))
    cmd, env = stage_command(submit, "prepare", ["--x"])
    assert cmd[:5] == ["/opt/spark/bin/spark-submit", "--master", "yarn", "--deploy-mode", "cluster"]
    assert cmd[5:11] == ["--conf", "spark.a=x", "--conf", "spark.b=2", "--queue", "etl"]
    assert cmd[11].endswith("spark_jobs/stage.py") and Path(cmd[11]).is_file()
    assert cmd[12:] == ["--spark-cluster", "--x"]  # yarn: the driver binds to its host name, not the loopback
    assert env == {"PYSPARK_PYTHON": sys.executable}
    plain = load_config(config(tmp_path, '[spark]\nmode = "in-process"'))
    assert stage_command(plain, "prepare", [])[0][1:] == ["-m", "binlake.orchestration.jobs"]
    # the delta-spark engine: every lake stage is a Spark job (its commits and merges run on Spark), fetch is not
    delta = load_config(config(tmp_path, 'engine = "delta-spark"\n[spark]\nmode = "local"\nmaster = "local[2]"'))
    for stage in ("prepare", "gate_before", "merge", "gate_after", "publish"):
        assert stage_command(delta, stage, ["--x"])[0][1:] == ["-m", "spark_jobs.stage", "--x"], stage
    assert stage_command(delta, "fetch", ["--x"])[0][1:] == ["-m", "binlake.orchestration.jobs", "--x"]
    delta_plain = load_config(config(tmp_path, 'engine = "delta-spark"\n[spark]\nmode = "in-process"'))
    assert stage_command(delta_plain, "merge", [])[0][1:] == ["-m", "binlake.orchestration.jobs"]


def spark_home() -> Path:
    import pyspark

    home = Path(pyspark.__file__).parent
    if not (home / "bin" / "spark-submit").exists() or shutil.which("java") is None:
        pytest.skip("spark-submit (pyspark's bin/) or java not installed")
    return home


@pytest.fixture(scope="module")
def standalone_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A Spark standalone master and one worker (1 core, 1 GiB) on 127.0.0.1: a real cluster to submit to."""
    home, work = spark_home(), tmp_path_factory.mktemp("spark-standalone")
    port = free_port()
    env = {**os.environ, "SPARK_HOME": str(home), "SPARK_NO_DAEMONIZE": "1", "SPARK_LOCAL_IP": "127.0.0.1",
           "SPARK_WORKER_DIR": str(work / "worker"), "SPARK_LOG_DIR": str(work),
           "SPARK_MASTER_OPTS": "-Dspark.master.rest.enabled=false"}
    spark_class = str(home / "bin" / "spark-class")
    logs = [open(work / name, "wb") for name in ("master.log", "worker.log")]  # noqa: SIM115 - closed below
    master = subprocess.Popen([spark_class, "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1",
                               "--port", str(port), "--webui-port", str(free_port())], env=env, stdout=logs[0],
                              stderr=subprocess.STDOUT)
    url = f"spark://127.0.0.1:{port}"
    worker = subprocess.Popen([spark_class, "org.apache.spark.deploy.worker.Worker", "--host", "127.0.0.1",
                               "--webui-port", str(free_port()), "--cores", "1", "--memory", "1g", url], env=env,
                              stdout=logs[1], stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 120
        while b"Registering worker" not in (work / "master.log").read_bytes():
            if time.monotonic() > deadline or master.poll() is not None or worker.poll() is not None:
                raise RuntimeError("the standalone cluster did not come up:\n"
                                   + (work / "master.log").read_text(errors="replace")[-3000:]
                                   + (work / "worker.log").read_text(errors="replace")[-3000:])
            time.sleep(0.5)
        yield url
    finally:
        for proc in (worker, master):
            proc.terminate()
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
        for fh in logs:
            fh.close()


@pytest.mark.slow  # about 90 s: a Spark master, a worker, spark-submit and an executor JVM
def test_chain_through_spark_submit(mariadb_full, tmp_path: Path, standalone_cluster: str) -> None:
    """fetch -> prepare (spark-submit to a standalone cluster: the driver must bind to an address the executors
    reach) -> gate -> merge -> gate -> publish, each a stage process. (The local-mode Spark job runs in
    test_airflow_e2e.py.)"""
    spark_master = standalone_cluster
    spark_submit = spark_home() / "bin" / "spark-submit"
    server = mariadb_full
    with server.connect() as conn, conn.cursor() as cur:
        cur.execute(f"DROP DATABASE IF EXISTS {DB}")
        cur.execute(f"CREATE DATABASE {DB}")
    server.flush_logs()
    with server.connect(DB) as conn, conn.cursor() as cur:
        cur.execute("CREATE TABLE t (id INT PRIMARY KEY, v DECIMAL(8,2), s VARCHAR(20))")
        for i in range(1, 31):
            cur.execute(f"INSERT INTO t VALUES ({i}, {i}.25, 's{i}')")
        cur.execute("UPDATE t SET v = v * 2 WHERE id % 3 = 0")
        cur.execute("DELETE FROM t WHERE id > 25")
        conn.commit()
    newest = sorted(server.binlog_files(), key=lambda p: p.name)[-1]
    server.flush_logs()
    source = tmp_path / "binlogs"
    source.mkdir()
    shutil.copy(newest, source / newest.name)
    cfg = load_config(config(tmp_path, f'[spark]\nmode = "submit"\nmaster = "{spark_master}"\n'
                                       f'spark_submit = "{spark_submit}"\n'
                                       'conf = { "spark.ui.enabled" = false }', source=f"local:{source}",
                             tables=f'tables = ["{DB}.*"]'))
    now = datetime.now(UTC)
    landed = run_stage_process(cfg, "fetch", "a", window=(now - timedelta(days=1), now + timedelta(hours=1)),
                               log=lambda _m: None)
    assert landed["files"] == [newest.name] and landed["lineage"] == "default"
    lines: list[str] = []
    prepared = run_stage_process(cfg, "prepare", "a", "default", log=lines.append)
    assert prepared["decoded_by"] == "spark" and prepared["batch"] == 0
    assert (prepared["spark"]["master"], prepared["spark"]["submitted"]) == (spark_master, True), prepared["spark"]
    (command,) = [ln for ln in lines if "spark-submit" in ln and "spark_jobs/stage.py" in ln]
    assert "--spark-cluster" in command
    for stage in ("gate_before", "merge", "gate_after"):
        done = run_stage_process(cfg, stage, "a", "default", batch=0, log=lambda _m: None)
        assert "spark" not in done, stage  # delta-rs: only prepare is a Spark job
    summary = run_stage_process(cfg, "publish", "a", "default", batch=0, log=lambda _m: None)
    assert summary["changed_tables"] == [f"{DB}.t"] and summary["rows"][f"{DB}.t"] == \
        {"insert": 30, "update": 10, "delete": 5}

    from binlake.lake.engines import get_engine
    from binlake.lake.layout import LakeLayout

    lake = {r["id"]: (r["v"], r["s"]) for r in get_engine().read(LakeLayout(cfg.lake).current_path(DB, "t")).to_pylist()}
    with server.connect(DB) as conn, conn.cursor() as cur:
        cur.execute("SELECT id, v, s FROM t")
        expected = {i: (Decimal(v), s) for i, v, s in cur.fetchall()}
    assert lake == expected
    # nothing new: the next prepare finds no batch
    assert run_stage_process(cfg, "prepare", "a", "default", log=lambda _m: None)["batch"] is None


def _merge_engines(table: Path) -> list[str]:
    """Who made each commit of the merge stage in a Delta table's log: its MERGEs, and the WRITE (an append) that
    fills a table the batch created. Spark's commits name it (commitInfo.engineInfo); the files of a table that
    delta-spark's merge created are reduced by Spark tasks and committed by the driver with delta-rs, whose commit
    names binlake's record `reducedBy: spark` ("spark-tasks" here)."""
    engines = []
    for entry in sorted((table / "_delta_log").glob("*.json")):
        for line in entry.read_text().splitlines():
            info = json.loads(line).get("commitInfo") or {}
            if info.get("operation") in ("MERGE", "WRITE"):
                record = info.get("binlake") or {}
                record = json.loads(record) if isinstance(record, str) else record
                engines.append("spark-tasks" if isinstance(record, dict) and record.get("reducedBy") == "spark"
                               else str(info.get("engineInfo", "")))
    return engines


def test_chain_with_the_delta_spark_engine(mariadb_full, tmp_path: Path) -> None:
    """The Airflow tasks' stages (run_stage_process, as plugins/binlake_airflow/tasks.py runs them) with
    `engine = "delta-spark"`: prepare, merge and publish each a Spark job committing through Delta on Spark, in both
    Spark modes on one lake - prepared in `local` mode (python -m spark_jobs.stage), merged through `spark-submit`
    (`submit` mode, the Delta jars by --jars), published locally again. One small seeded batch, master local[1];
    gates off, so the gate stages start no JVM (three Spark jobs in all). The merges are Spark's commits, the
    results say which master and whether spark-submit ran them, and the current tables equal the server's."""
    from binlake.lake.engines import get_engine
    from binlake.lake.layout import LakeLayout
    from binlake.spark import delta_jars
    from tests.conftest import skip_or_fail

    spark_submit = spark_home() / "bin" / "spark-submit"
    jars = delta_jars()
    if not jars:
        skip_or_fail("the Delta jars are not fetched (bash scripts/dev.sh setup)")
    server = mariadb_full
    db = "af_delta"
    with server.connect() as conn, conn.cursor() as cur:
        cur.execute(f"DROP DATABASE IF EXISTS {db}")
        cur.execute(f"CREATE DATABASE {db}")
    server.flush_logs()
    first = server.binlog_files()[-1].name
    rng = random.Random(1617)
    ids = rng.sample(range(1, 200), rng.randint(15, 30))
    statements = [
        "CREATE TABLE t (id INT PRIMARY KEY, v DECIMAL(8,2), s VARCHAR(20))",
        "CREATE TABLE k (a INT, b VARCHAR(8), n INT, PRIMARY KEY (a, b))",
        "INSERT INTO t VALUES " + ", ".join(
            f"({i}, {rng.randint(-9999, 9999) / 100}, {'NULL' if rng.random() < 0.2 else repr(f's{i}')})"
            for i in ids),
        "INSERT IGNORE INTO k VALUES " + ", ".join(
            f"({rng.randint(1, 9)}, 'b{rng.randint(0, 9)}', {rng.randint(-5, 5)})" for _ in range(20)),
        f"UPDATE t SET v = v * 2 WHERE id % {rng.randint(2, 4)} = 0",
        f"UPDATE k SET n = n + 1, b = CONCAT(b, 'x') WHERE a = {rng.randint(1, 9)}",  # key changes
        f"DELETE FROM t WHERE id % {rng.randint(5, 7)} = 1", f"DELETE FROM k WHERE n < {rng.randint(-4, 0)}"]
    with server.connect(db) as conn, conn.cursor() as cur:
        for statement in statements:
            cur.execute(statement)
        conn.commit()
    source = tmp_path / "binlogs"
    source.mkdir()
    for f in server.flush_logs():
        if f.name >= first:
            shutil.copy(f, source / f.name)
    configs = {}
    for mode, extra in (("local", ""), ("submit", f'spark_submit = "{spark_submit}"\n'
                                                  f'submit_args = ["--jars", "{",".join(jars)}"]\n')):
        path = tmp_path / f"binlake-{mode}.toml"  # both configs name the same lake and landing area
        path.write_text(f'lake = "lake"\nlanding = "landing"\nretries = 0\nengine = "delta-spark"\n'
                        f'[quality]\nenabled = false\n[spark]\nmode = "{mode}"\nmaster = "local[1]"\n{extra}\n'
                        f'[[instances]]\nname = "a"\nsource = "local:{source}"\ntables = ["{db}.*"]\n')
        configs[mode] = load_config(path)
    now = datetime.now(UTC)
    run_stage_process(configs["local"], "fetch", "a", window=(now - timedelta(days=1), now + timedelta(hours=1)),
                      log=lambda _m: None)
    prepared = run_stage_process(configs["local"], "prepare", "a", "default", log=lambda _m: None)
    assert prepared["batch"] == 0 and prepared["decoded_by"] == "spark", prepared
    assert (prepared["spark"]["master"], prepared["spark"]["engine"], prepared["spark"]["submitted"]) == \
        ("local[1]", "delta-spark", False), prepared["spark"]
    for stage, mode in (("gate_before", "local"), ("merge", "submit"), ("gate_after", "submit"),
                        ("publish", "local")):
        lines: list[str] = []
        done = run_stage_process(configs[mode], stage, "a", "default", batch=0, log=lines.append)
        if stage.startswith("gate_"):
            assert "spark" not in done, (stage, done)  # quality off: no Spark job for a gate
            continue
        assert (done["spark"]["engine"], done["spark"]["submitted"]) == ("delta-spark", mode == "submit"), \
            (stage, done["spark"])
        assert ("spark-submit" in lines[0] and "--jars" in lines[0]) == (mode == "submit"), lines[0]
    assert done["changed_tables"] == [f"{db}.k", f"{db}.t"], done
    layout = LakeLayout(configs["local"].lake)
    for table in ("t", "k"):
        path = Path(layout.current_path(db, table))
        engines = _merge_engines(path)  # the merges ran on Spark (a delta-rs merge would name delta-rs)
        assert engines and all(e.startswith("Apache-Spark") or e == "spark-tasks" for e in engines), (table, engines)
        rows = get_engine().read(str(path)).to_pylist()
        with server.connect(db) as conn, conn.cursor() as cur:
            cur.execute(f"SELECT * FROM {table}")
            names = [d[0] for d in cur.description]
            expected = sorted(tuple(r) for r in cur.fetchall())
        assert expected, table
        assert sorted(tuple(r[c] for c in names) for r in rows) == expected, table  # unique keys first
