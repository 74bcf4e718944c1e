"""Lake stages in a child process whose outcome is a result file, not its exit code.

delta-rs can abort a process at exit after Arrow reads (exit code 134, delta-rs#2184). A task process that aborts
after its work committed would be reported failed and retried. So the Airflow task starts the stage as a child
(`python -m binlake.orchestration.jobs`, or `spark_jobs/stage.py` under Spark), the child writes a JSON result
file (temp name, then rename), flushes, and leaves with os._exit; the parent trusts the result file. A child that
dies without writing one is a failure, with the exit code and the tail of its output.

    python -m binlake.orchestration.jobs --config C --stage merge --instance I --lineage L --batch 7 --result R
"""

from __future__ import annotations

import argparse
import collections
import importlib.util
import json
import os
import subprocess
import sys
import tempfile
import traceback
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any, NoReturn

from ..config import DeploymentConfig, load_config
from .stages import STAGES, jsonable, run_stage

CREDENTIALS_ENV = "BINLAKE_SOURCE_CREDENTIALS"  # source secrets reach the child in its environment, not its argv
SPARK_STAGES = ("prepare", "gate_before", "merge", "gate_after", "publish")  # fetch (and kafka) never need Spark


class StageError(RuntimeError):
    """A stage failed in its child process. Carries the child's exception type and, for gates, table and batch."""

    def __init__(self, message: str, kind: str = "", table: str | None = None, batch: int | None = None,
                 failures: list | None = None) -> None:
        super().__init__(message)
        self.kind, self.table, self.batch, self.failures = kind, table, batch, failures or []


class GateFailedError(StageError):
    """A data quality gate refused the batch (the lake side quarantined or restored it)."""


def stage_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="binlake-stage", description="run one lake stage and write a result file")
    p.add_argument("--config", required=True)
    p.add_argument("--stage", required=True, choices=STAGES)
    p.add_argument("--instance", required=True)
    p.add_argument("--lineage")
    p.add_argument("--batch", type=int)
    p.add_argument("--start", help="window start (fetch), ISO 8601 UTC")
    p.add_argument("--end", help="window end (fetch), ISO 8601 UTC")
    p.add_argument("--result", required=True)
    return p


def write_result(path: str, payload: dict[str, Any]) -> None:
    tmp = f"{path}.tmp"
    with open(tmp, "w", encoding="utf-8") as fh:
        json.dump(payload, fh, default=str)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)


def error_payload(exc: BaseException) -> dict[str, Any]:
    failures = getattr(exc, "failures", None) or getattr(exc, "expectations", None) or []
    return {"status": "error", "type": type(exc).__name__, "message": str(exc) or type(exc).__name__,
            "table": getattr(exc, "table", None), "batch": getattr(exc, "batch", None),
            "failures": jsonable(failures), "traceback": traceback.format_exc()[-4000:]}


SessionFactory = Callable[[DeploymentConfig], tuple[Callable, Callable[[], None], dict[str, Any]]]


def job_main(argv: list[str] | None = None, executor_factory: SessionFactory | None = None) -> NoReturn:
    """Child process entry: run the stage, write the result, exit without running interpreter teardown.

    `executor_factory` (the Spark job, spark_jobs/stage.py) starts a Spark session for the stage and returns the
    decode executor (used by prepare), the function that stops the session and what to report about it (master,
    application id), which goes into the result as "spark"."""
    args = stage_parser().parse_args(argv)
    close: Callable[[], None] = lambda: None  # noqa: E731
    try:
        cfg = load_config(args.config)
        executor, spark_info = None, None
        if executor_factory is not None and args.stage in SPARK_STAGES:
            executor, close, spark_info = executor_factory(cfg)
        window = (datetime.fromisoformat(args.start), datetime.fromisoformat(args.end)) if args.start else None
        credentials = json.loads(os.environ.pop(CREDENTIALS_ENV, "") or "{}")
        out = run_stage(cfg, args.stage, args.instance, args.lineage, args.batch,
                        executor if args.stage == "prepare" else None, window, credentials)
        if spark_info is not None:
            out["spark"] = spark_info
        payload = {"status": "ok", "result": out}
    except BaseException as exc:  # everything goes to the result file
        payload = error_payload(exc)
        print(payload["traceback"], file=sys.stderr)
    try:
        close()
    except Exception as exc:  # the stage outcome is already decided
        print(f"binlake-stage: cleanup failed: {exc}", file=sys.stderr)
    write_result(args.result, payload)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0 if payload["status"] == "ok" else 1)


def on_spark(cfg: DeploymentConfig, stage: str) -> bool:
    """Whether a stage runs as a Spark job (`spark.mode` local or submit): prepare (decoding in Spark tasks)
    always; with the delta-spark engine every stage that touches the lake (its commits, merges and reads are
    Spark jobs, on the cluster's executors under submit)."""
    if cfg.spark.mode == "in-process" or stage not in SPARK_STAGES:
        return False
    if stage.startswith("gate_") and not cfg.quality.enabled:
        return False  # the stage only says it skipped: no Spark job for that
    return stage == "prepare" or cfg.engine == "delta-spark"


def stage_command(cfg: DeploymentConfig, stage: str, args: list[str]) -> tuple[list[str], dict[str, str]]:
    """The child's command line and extra environment: a Spark job where `on_spark` says so."""
    python = cfg.spark.python or sys.executable
    env: dict[str, str] = {}
    if not on_spark(cfg, stage):
        return [python, "-m", "binlake.orchestration.jobs", *args], env
    if cfg.spark.mode == "local":
        env["BINLAKE_SPARK_MASTER"] = cfg.spark.master
        return [python, "-m", "spark_jobs.stage", *args], env
    # The job file's location for spark-submit; the library never imports the deployment folder's code.
    job = str(Path(importlib.util.find_spec("spark_jobs").origin).parent / "stage.py")
    cmd = [cfg.spark.spark_submit, "--master", cfg.spark.master, "--deploy-mode", cfg.spark.deploy_mode]
    for key, value in sorted(cfg.spark.conf.items()):
        cmd += ["--conf", f"{key}={value}"]
    cluster = [] if cfg.spark.master.startswith("local") else ["--spark-cluster"]  # driver reachable off-host
    cmd += [*cfg.spark.submit_args, job, *cluster, *args]
    env["PYSPARK_PYTHON"] = python
    return cmd, env


def run_stage_process(cfg: DeploymentConfig, stage: str, instance: str, lineage: str | None = None,
                      batch: int | None = None, window: tuple[datetime, datetime] | None = None,
                      credentials: dict[str, Any] | None = None, log: Callable[[str], None] = print) -> dict[str, Any]:
    """Run a stage in a child process and return its result; raise StageError (GateFailedError for gates)."""
    jobs_dir = Path(cfg.landing) / "_jobs"
    jobs_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=jobs_dir, prefix=f"{instance}-{stage}-") as tmp:
        result = os.path.join(tmp, "result.json")
        args = ["--config", cfg.path, "--stage", stage, "--instance", instance, "--result", result]
        if lineage is not None:
            args += ["--lineage", lineage]
        if batch is not None:
            args += ["--batch", str(batch)]
        if window is not None:
            args += ["--start", window[0].isoformat(), "--end", window[1].isoformat()]
        cmd, extra_env = stage_command(cfg, stage, args)
        log(f"{instance}: {stage}: {' '.join(cmd)}")
        tail: collections.deque[str] = collections.deque(maxlen=40)
        env = {**os.environ, **extra_env}
        if credentials:
            env[CREDENTIALS_ENV] = json.dumps(credentials)
        with subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env,
                              errors="replace") as proc:
            assert proc.stdout is not None
            for line in proc.stdout:
                line = line.rstrip("\n")
                tail.append(line)
                log(line)
            try:
                code = proc.wait(timeout=cfg.spark.timeout_minutes * 60)
            except subprocess.TimeoutExpired:
                proc.kill()
                raise StageError(f"instance {instance}: {stage} did not finish within "
                                 f"{cfg.spark.timeout_minutes} minutes (spark.timeout_minutes)") from None
        if not os.path.exists(result):
            raise StageError(f"instance {instance}: {stage} ended with exit code {code} and no result file; "
                             "last output:\n" + "\n".join(tail), kind="NoResult")
        with open(result, encoding="utf-8") as fh:
            payload = json.load(fh)
    if payload["status"] == "ok":
        if code != 0:
            log(f"{instance}: {stage}: the process exited with code {code} after its work succeeded "
                "(delta-rs exit abort); the result file counts")
        return payload["result"]
    cls = GateFailedError if payload["type"] == "GateFailed" else StageError
    raise cls(f"instance {instance}: {stage} failed: {payload['type']}: {payload['message']}", kind=payload["type"],
              table=payload.get("table"), batch=payload.get("batch") if payload.get("batch") is not None else batch,
              failures=payload.get("failures"))


if __name__ == "__main__":
    job_main()
