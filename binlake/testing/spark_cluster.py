"""A private Spark standalone cluster on loopback, for tests and benchmarks: a master, workers and a history
server, started from the pyspark install (its `bin/spark-class`) on free ports in a temp directory.

    cluster = SparkStandalone.start(tmp_dir, workers=2)
    ... spark-submit --master cluster.master_url --conf spark.eventLog.enabled=true \
            --conf spark.eventLog.dir=cluster.event_log_url ...
    cluster.application_executors(app_id)     # the Spark UI REST API (history server) /executors list
    cluster.stop()

Every process is started by this object (in its own session) and stopped by its id; the history server serves
the same REST API (`/api/v1/applications/...`) as a running application's UI, for applications that ended.
Nothing here imports pyspark: only its install folder is looked up.
"""

from __future__ import annotations

import importlib.util
import json
import os
import signal
import subprocess
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .processes import LOOPBACK, free_port


class SparkClusterError(RuntimeError):
    """The private cluster did not come up; the message carries the tail of the failing process's log."""


def spark_home() -> Path | None:
    """The pyspark install folder (it holds bin/spark-class and the jars), or None without pyspark."""
    spec = importlib.util.find_spec("pyspark")
    if spec is None or not spec.origin:
        return None
    home = Path(spec.origin).parent
    return home if (home / "bin" / "spark-class").exists() else None


def get_json(url: str, timeout: float = 300.0) -> Any:
    """GET a JSON document. The generous timeout is for the history server, which replays an application's event
    log on the first request for it (minutes on a busy machine)."""
    with urllib.request.urlopen(url, timeout=timeout) as resp:
        return json.loads(resp.read().decode())


@dataclass
class _Proc:
    name: str
    process: subprocess.Popen
    log: Path


@dataclass
class SparkStandalone:
    """A running cluster. Create with `start()`; always `stop()` it."""

    base_dir: Path
    home: Path
    master_port: int
    master_ui_port: int
    history_port: int | None = None
    worker_ui_ports: list[int] = field(default_factory=list)
    procs: list[_Proc] = field(default_factory=list)

    @property
    def master_url(self) -> str:
        return f"spark://{LOOPBACK}:{self.master_port}"

    @property
    def master_ui(self) -> str:
        return f"http://{LOOPBACK}:{self.master_ui_port}"

    @property
    def worker_uis(self) -> list[str]:
        return [f"http://{LOOPBACK}:{p}" for p in self.worker_ui_ports]

    @property
    def event_log_dir(self) -> Path:
        return self.base_dir / "events"

    @property
    def event_log_url(self) -> str:
        return self.event_log_dir.resolve().as_uri()

    @property
    def history_ui(self) -> str:
        if self.history_port is None:
            raise SparkClusterError("the cluster was started without a history server")
        return f"http://{LOOPBACK}:{self.history_port}"

    @property
    def spark_submit(self) -> str:
        return str(self.home / "bin" / "spark-submit")

    def submit_conf(self) -> dict[str, str]:
        """spark-submit settings that make an application's events reach this cluster's history server."""
        return {"spark.eventLog.enabled": "true", "spark.eventLog.dir": self.event_log_url}

    # -- processes -------------------------------------------------------------------------------------------

    def _env(self, **extra: str) -> dict[str, str]:
        env = {**os.environ, "SPARK_HOME": str(self.home), "SPARK_LOCAL_IP": LOOPBACK, "SPARK_NO_DAEMONIZE": "1",
               "SPARK_LOG_DIR": str(self.base_dir / "logs"), "SPARK_PID_DIR": str(self.base_dir / "pids")}
        env.pop("SPARK_CONF_DIR", None)
        env.update(extra)
        return env

    def _launch(self, name: str, args: list[str], **env: str) -> None:
        log = self.base_dir / f"{name}.log"
        with open(log, "wb") as out:
            proc = subprocess.Popen([str(self.home / "bin" / "spark-class"), *args], stdout=out,
                                    stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=self._env(**env),
                                    cwd=self.base_dir, start_new_session=True)
        self.procs.append(_Proc(name, proc, log))

    def _wait(self, what: str, ready, timeout: float) -> Any:
        deadline = time.monotonic() + timeout
        while True:
            for p in self.procs:
                if p.process.poll() is not None:
                    raise SparkClusterError(f"{p.name} exited with {p.process.returncode} while waiting for {what}: "
                                            f"{p.log.read_text(errors='replace')[-3000:]}")
            try:
                value = ready()
                if value:
                    return value
            except (OSError, urllib.error.URLError, ValueError):
                pass
            if time.monotonic() > deadline:
                logs = "\n".join(f"--- {p.name}\n{p.log.read_text(errors='replace')[-1500:]}" for p in self.procs)
                raise SparkClusterError(f"{what} not ready within {timeout:.0f} s\n{logs}")
            time.sleep(0.5)

    @classmethod
    def start(cls, base_dir: Path, workers: int = 2, cores: int = 1, memory: str = "1g", history: bool = True,
              timeout: float = 180.0, worker_env: dict[str, str] | None = None) -> SparkStandalone:
        """Start a master, `workers` workers (`cores` cores and `memory` each) and, with `history`, a history
        server reading `event_log_dir`; returns once every worker registered with the master."""
        home = spark_home()
        if home is None:
            raise SparkClusterError("pyspark is not installed (its bin/spark-class starts the cluster)")
        base_dir = Path(base_dir)
        (base_dir / "events").mkdir(parents=True, exist_ok=True)
        cluster = cls(base_dir=base_dir, home=home, master_port=free_port(), master_ui_port=free_port())
        try:
            cluster._launch("master", ["org.apache.spark.deploy.master.Master", "--host", LOOPBACK,
                                       "--port", str(cluster.master_port), "--webui-port", str(cluster.master_ui_port)],
                            SPARK_MASTER_OPTS="-Dspark.master.rest.enabled=false")
            cluster._wait("the master", lambda: get_json(f"{cluster.master_ui}/json/", 10)["status"] == "ALIVE",
                          timeout)
            for n in range(workers):
                port = free_port()
                work = base_dir / f"worker{n}"
                work.mkdir(exist_ok=True)
                cluster.worker_ui_ports.append(port)
                cluster._launch(f"worker{n}", ["org.apache.spark.deploy.worker.Worker", "--host", LOOPBACK,
                                               "--webui-port", str(port), "--cores", str(cores), "--memory", memory,
                                               cluster.master_url], SPARK_WORKER_DIR=str(work), **(worker_env or {}))
            cluster._wait(f"{workers} workers", lambda: len(cluster.alive_workers()) == workers, timeout)
            if history:
                cluster.history_port = free_port()
                opts = (f"-Dspark.history.fs.logDirectory={cluster.event_log_url} "
                        f"-Dspark.history.ui.port={cluster.history_port} -Dspark.history.fs.update.interval=1s")
                cluster._launch("history", ["org.apache.spark.deploy.history.HistoryServer"], SPARK_HISTORY_OPTS=opts)
                cluster._wait("the history server", lambda: get_json(f"{cluster.history_ui}/api/v1/applications", 10)
                              is not None, timeout)
        except BaseException:
            cluster.stop()
            raise
        return cluster

    def stop(self, timeout: float = 30.0) -> None:
        """Stop every process this cluster started (by its process id: SIGTERM, then SIGKILL), workers first."""
        for p in reversed(self.procs):
            if p.process.poll() is None:
                p.process.send_signal(signal.SIGTERM)
        for p in reversed(self.procs):
            try:
                p.process.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                p.process.kill()
                p.process.wait(timeout=timeout)
        self.procs.clear()

    def logs(self) -> str:
        return "\n".join(f"--- {p.name} ({p.log})\n{p.log.read_text(errors='replace')[-3000:]}" for p in self.procs)

    # -- what the cluster reports ----------------------------------------------------------------------------

    def alive_workers(self) -> list[dict]:
        return [w for w in get_json(f"{self.master_ui}/json/", 10)["workers"] if w.get("state") == "ALIVE"]

    def worker_executors(self, app_id: str) -> dict[str, list[str]]:
        """Per worker (its web UI address), the ids of the executors it ran (or runs) for an application."""
        out = {}
        for ui in self.worker_uis:
            info = get_json(f"{ui}/json/")
            out[ui] = [str(e["id"]) for e in info.get("executors", []) + info.get("finishedexecutors", [])
                       if e.get("appid") == app_id]
        return out

    def applications(self) -> list[dict]:
        """The history server's applications (the REST API's /applications), newest first."""
        return get_json(f"{self.history_ui}/api/v1/applications")

    def wait_new_application(self, known: set[str], timeout: float = 60.0) -> str:
        """The id of the one application the history server lists beyond `known` (waits for it to appear)."""
        def new() -> str | None:
            ids = {a["id"] for a in self.applications()} - known
            if len(ids) > 1:
                raise SparkClusterError(f"several new applications: {sorted(ids)}")
            return ids.pop() if ids else None
        return self._wait("a new application in the history server", new, timeout)

    def wait_application(self, app_id: str, timeout: float = 60.0) -> dict:
        """The history server's entry of an ended application, once it has read its event log."""
        def done() -> dict | None:
            for app in self.applications():
                if app["id"] == app_id and app["attempts"] and all(a.get("completed") for a in app["attempts"]):
                    return app
            return None
        return self._wait(f"application {app_id} in the history server", done, timeout)

    def application_executors(self, app_id: str) -> list[dict]:
        """The REST API's /applications/<id>/allexecutors (the driver and every executor, with task counts)."""
        return get_json(f"{self.history_ui}/api/v1/applications/{app_id}/allexecutors")

    def application_tasks(self, app_id: str) -> list[dict]:
        """Every task of the application's stages, from the REST API's /stages/<id>/<attempt>/taskList."""
        base = f"{self.history_ui}/api/v1/applications/{app_id}"
        tasks = []
        for stage in get_json(f"{base}/stages"):
            tasks += get_json(f"{base}/stages/{stage['stageId']}/{stage['attemptId']}/taskList?length=100000")
        return tasks
