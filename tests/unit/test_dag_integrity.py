"""Every DAG file imports cleanly in a fresh interpreter (measured and printed), pulls in no Spark, pandas, Arrow or
Delta at module level, and has the schedule, params, catchup and max_active_runs the orchestration promises."""

from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("airflow.sdk", reason="the Airflow extra is not installed (pip install -e '.[airflow]')")

ROOT = Path(__file__).resolve().parents[2]
DAG_FILES = sorted((ROOT / "dags").glob("binlake_*.py"))
HEAVY = ("pyspark", "pandas", "pyarrow", "deltalake", "great_expectations")

# Airflow's DAG processor already has Airflow loaded when it parses a file: the 2 s budget is the file's own
# import (binlake's modules included); the cold start with Airflow itself is measured and printed too.
PROBE = r"""
import importlib.util, json, sys, time
cold = time.perf_counter()
from airflow.sdk import DAG, Asset, AssetAlias, CronDataIntervalTimetable, Param, TaskGroup, chain, dag, task
airflow_seconds = time.perf_counter() - cold
t0 = time.perf_counter()
spec = importlib.util.spec_from_file_location("dag_under_test", sys.argv[1])
spec.loader.exec_module(importlib.util.module_from_spec(spec))
seconds = time.perf_counter() - t0
print(json.dumps({"seconds": seconds, "airflow_seconds": airflow_seconds, "heavy": sorted(m for m in %r if m in sys.modules)}))
"""


def airflow_env(tmp_path: Path, config: Path) -> dict[str, str]:
    return {**os.environ, "AIRFLOW_HOME": str(tmp_path / "airflow"), "BINLAKE_CONFIG": str(config),
            "AIRFLOW__CORE__LOAD_EXAMPLES": "False", "AIRFLOW__CORE__DAGS_FOLDER": str(ROOT / "dags"),
            "AIRFLOW__CORE__PLUGINS_FOLDER": str(ROOT / "plugins"),
            "PYTHONPATH": os.pathsep.join([str(ROOT / "plugins"), os.environ.get("PYTHONPATH", "")])}


@pytest.fixture(scope="module")
def example_config() -> Path:
    return ROOT / "docs" / "binlake.example.toml"


def test_dag_files_present() -> None:
    assert [p.name for p in DAG_FILES] == ["binlake_backfill.py", "binlake_ddl_snapshot.py", "binlake_ingest.py"]


@pytest.mark.parametrize("dag_file", DAG_FILES, ids=lambda p: p.stem)
def test_dag_imports_fast_without_heavy_modules(dag_file: Path, tmp_path: Path, example_config: Path) -> None:
    proc = subprocess.run([sys.executable, "-c", PROBE % (HEAVY,), str(dag_file)], capture_output=True, text=True,
                          env=airflow_env(tmp_path, example_config), timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    print(f"{dag_file.name}: imported in {report['seconds']:.3f} s (after Airflow itself: "
          f"{report['airflow_seconds']:.2f} s cold)")
    assert report["heavy"] == [], f"{dag_file.name} imports {report['heavy']} at module level"
    assert report["seconds"] < 2.0, f"{dag_file.name} took {report['seconds']:.2f} s to import (limit: 2 s)"


def test_dagbag_structure(tmp_path: Path, example_config: Path) -> None:
    """Parse the folder as Airflow does and check schedules, params, catchup and the task wiring."""
    script = r"""
import json
from airflow.dag_processing.dagbag import DagBag
bag = DagBag(dag_folder=%r)
out = {"errors": {k: str(v) for k, v in bag.import_errors.items()}, "dags": {}}
for dag_id, dag in bag.dags.items():
    out["dags"][dag_id] = {
        "schedule": getattr(dag.timetable, "expression", None),
        "timetable": type(dag.timetable).__name__, "catchup": dag.catchup,
        "max_active_runs": dag.max_active_runs, "params": sorted(dag.params.keys()),
        "tasks": sorted(t.task_id for t in dag.tasks),
        "mapped": sorted(t.task_id for t in dag.tasks if getattr(t, "is_mapped", False)
                         or type(t).__name__ == "MappedOperator"),
        "retries": sorted({t.retries for t in dag.tasks}),
        "callbacks": sorted({type(c).__name__ for t in dag.tasks for c in (
            t.on_failure_callback if isinstance(t.on_failure_callback, list) else [t.on_failure_callback])}),
        "upstream": {t.task_id: sorted(t.upstream_task_ids) for t in dag.tasks},
    }
print(json.dumps(out))
""" % str(ROOT / "dags")
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          env=airflow_env(tmp_path, example_config), timeout=180)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["errors"] == {}
    dags = out["dags"]
    assert sorted(dags) == ["binlake_backfill", "binlake_ddl_snapshot", "binlake_ingest"]

    snap = dags["binlake_ddl_snapshot"]
    assert snap["schedule"] == "0 0 * * *" and snap["mapped"] == ["snapshot_ddl"]

    ingest = dags["binlake_ingest"]
    assert ingest["timetable"] == "CronDataIntervalTimetable" and ingest["schedule"] == "0 * * * *"
    assert ingest["catchup"] is True and ingest["max_active_runs"] == 1
    steps = ["discover", "fetch", "prepare", "gate_before_merge", "merge", "gate_after_merge", "publish"]
    assert ingest["tasks"] == sorted(f"{inst}.{s}" for inst in ("orders", "billing") for s in steps)
    for inst in ("orders", "billing"):  # each step waits for the one before it
        for before, after in itertools.pairwise(steps):
            assert f"{inst}.{before}" in ingest["upstream"][f"{inst}.{after}"]
    assert "orders.publish" in ingest["upstream"]["billing.discover"]  # instances in turn: one control table

    backfill = dags["binlake_backfill"]
    assert backfill["schedule"] is None and backfill["timetable"] == "NullTimetable"
    assert backfill["params"] == ["end", "instance", "start", "tables"]
    assert backfill["max_active_runs"] == 1
    assert backfill["mapped"] == ["discover", "fetch"]
    for dag in dags.values():
        assert dag["retries"] == [2]
        assert dag["callbacks"] == ["BinlakeFailureNotifier"]


def test_missing_config_is_a_clear_import_error(tmp_path: Path) -> None:
    env = airflow_env(tmp_path, tmp_path / "nope.toml")
    proc = subprocess.run([sys.executable, "-c", PROBE % (HEAVY,), str(DAG_FILES[0])], capture_output=True,
                          text=True, env=env, timeout=120)
    assert proc.returncode != 0
    assert "nope.toml: cannot read the deployment config" in proc.stderr


def test_kafka_sink_adds_a_publish_task_after_fetch(tmp_path: Path, example_config: Path) -> None:
    """With [sink.kafka] each instance's chain also publishes its landed files to Kafka, after fetch."""
    config = tmp_path / "binlake.toml"
    text = example_config.read_text()
    config.write_text(text + '\n[sink.kafka]\nbootstrap_servers = "127.0.0.1:9092"\ntopic_prefix = "shop"\n')
    script = r"""
import json
from airflow.dag_processing.dagbag import DagBag
bag = DagBag(dag_folder=%r)
dag = bag.dags["binlake_ingest"]
print(json.dumps({"errors": {k: str(v) for k, v in bag.import_errors.items()},
                  "upstream": {t.task_id: sorted(t.upstream_task_ids) for t in dag.tasks}}))
""" % str(ROOT / "dags")
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          env=airflow_env(tmp_path, config), timeout=180)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["errors"] == {}
    for inst in ("orders", "billing"):
        assert out["upstream"][f"{inst}.publish_kafka"] == [f"{inst}.fetch"]
