"""docker/: the compose stack cannot be run here (no Docker engine), so its files are checked with what runs here:
the compose file parses and wires what the README promises, every volume and bind mount exists, every Dockerfile
COPY source exists, every command the containers run exists in the project or in the pinned packages the images
install, the deployment config it mounts loads, and the Airflow connections it sets are valid JSON/URIs."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
import yaml

from binlake.cli import build_parser
from binlake.config import load_config

ROOT = Path(__file__).resolve().parents[2]
DOCKER = ROOT / "docker"
COMPOSE = DOCKER / "docker-compose.yml"
VENV_BIN = Path(sys.executable).parent


@pytest.fixture(scope="module")
def compose() -> dict:
    return yaml.safe_load(COMPOSE.read_text())


def command(service: dict) -> list[str]:
    cmd = service.get("command", [])
    return shlex.split(cmd) if isinstance(cmd, str) else [str(c) for c in cmd]


def flags(cmd: list[str]) -> list[str]:
    return [c.split("=", 1)[0] for c in cmd if c.startswith("--")]


def test_services_and_mysql_binlog_settings(compose) -> None:
    services = compose["services"]
    assert set(services) == {"mysql", "workload", "rds", "oss", "spark-master", "spark-worker", "airflow"}
    mysql = services["mysql"]
    assert mysql["image"] == "mysql:8.0"
    cmd = command(mysql)
    for setting in ("--binlog-format=ROW", "--binlog-row-metadata=MINIMAL", "--log-bin=mysql-bin",
                    "--binlog-row-image=FULL", "--server-id=1"):
        assert setting in cmd
    assert mysql["healthcheck"]["test"][:2] == ["CMD", "mysqladmin"]
    airflow = services["airflow"]
    mounts = {v.split(":")[1]: v.split(":")[0] for v in airflow["volumes"]}
    assert mounts["/opt/airflow/dags"] == "../dags" and mounts["/opt/airflow/plugins"] == "../plugins"
    assert airflow["environment"]["AIRFLOW__CORE__DAGS_FOLDER"] == "/opt/airflow/dags"


def test_volumes_mounts_and_dependencies_exist(compose) -> None:
    declared = set(compose["volumes"])
    used = set()
    for name, svc in compose["services"].items():
        for v in svc.get("volumes", []):
            source = v.split(":")[0]
            if source.startswith((".", "/")):
                assert (DOCKER / source).exists(), f"{name}: bind mount {source} missing"
            else:
                used.add(source)
                assert source in declared, f"{name}: volume {source} not declared"
        for dep in svc.get("depends_on", []):
            assert dep in compose["services"], f"{name} depends on unknown {dep}"
    assert used == declared


def test_images_build_from_files_that_exist(compose) -> None:
    dockerfiles = set()
    for name, svc in compose["services"].items():
        build = svc.get("build")
        if build is None:
            assert "image" in svc, name
            continue
        context = (DOCKER / build["context"]).resolve()
        dockerfile = context / build["dockerfile"]
        assert context == ROOT and dockerfile.is_file(), name
        dockerfiles.add(dockerfile)
    assert {d.name for d in dockerfiles} == {"Dockerfile", "airflow.Dockerfile"}
    for dockerfile in dockerfiles:  # the context is the project root: the venv and git history stay out
        ignored = (dockerfile.parent / f"{dockerfile.name}.dockerignore").read_text().split()
        assert {".git", ".venv"} <= set(ignored)
        copied = {src for line in dockerfile.read_text().splitlines() if line.startswith("COPY ")
                  for src in [p for p in line.split()[1:] if not p.startswith("--")][:-1]}
        assert not copied & set(ignored), f"{dockerfile.name} copies what its .dockerignore leaves out"
    for dockerfile in dockerfiles:
        for line in dockerfile.read_text().splitlines():
            if line.startswith("COPY "):
                parts = [p for p in line.split()[1:] if not p.startswith("--")]
                for src in parts[:-1]:
                    assert (ROOT / src).exists(), f"{dockerfile.name}: COPY {src} missing"


def test_airflow_image_matches_the_pinned_version() -> None:
    pinned = re.search(r'"apache-airflow==([\d.]+)"', (ROOT / "pyproject.toml").read_text()).group(1)
    text = (DOCKER / "airflow.Dockerfile").read_text()
    assert f"FROM apache/airflow:{pinned}-python3.11" in text
    assert f'"apache-airflow=={pinned}"' in text


def _module_path(module: str) -> Path:
    spec = importlib.util.find_spec(module)
    assert spec is not None and spec.origin, f"no module {module}"
    path = Path(spec.origin)
    assert ROOT in path.parents, f"{module} is not part of the project ({path})"
    return path


def test_every_command_exists(compose) -> None:
    """python scripts and modules are in the project; spark-class and airflow come from the pinned packages."""
    seen = set()
    for name, svc in compose["services"].items():
        cmd = command(svc)
        if not cmd:
            assert name == "mysql" or svc.get("image") == "mysql:8.0"
            continue
        exe = cmd[0]
        if name == "mysql":
            continue
        seen.add(exe)
        if exe == "python":
            if cmd[1] == "-m":
                _module_path(cmd[2])
            else:
                assert (ROOT / cmd[1]).is_file(), f"{name}: {cmd[1]} missing"
        elif exe == "spark-class":
            import pyspark

            assert (Path(pyspark.__file__).parent / "bin" / "spark-class").is_file()
            assert cmd[1] in ("org.apache.spark.deploy.master.Master", "org.apache.spark.deploy.worker.Worker")
        elif exe == "airflow":
            assert cmd[1:] == ["standalone"]
            env = {**os.environ, "AIRFLOW_HOME": str(ROOT / ".pytest_cache" / "airflow-home")}
            out = subprocess.run([str(VENV_BIN / "airflow"), "--help"], capture_output=True, text=True, env=env,
                                 timeout=120).stdout
            assert re.search(r"^\s+standalone\s", out, re.M), out[-2000:]
        else:
            pytest.fail(f"{name}: unexpected command {exe}")
    assert seen == {"python", "spark-class", "airflow"}


def test_workload_flags_exist(compose) -> None:
    cmd = command(compose["services"]["workload"])
    assert cmd[:2] == ["python", "docker/workload.py"]
    help_text = subprocess.run([sys.executable, str(ROOT / cmd[1]), "--help"], capture_output=True, text=True,
                               check=True).stdout
    for flag in flags(cmd):
        assert flag in help_text, flag


@pytest.mark.parametrize("service", ["rds", "oss"])
def test_local_server_entry_points(compose, service) -> None:
    """The RDS/OSS-compatible servers' command lines accept the flags the stack passes."""
    cmd = command(compose["services"][service])
    module = cmd[2]
    source = _module_path(module).read_text()
    if '__name__ == "__main__"' not in source:
        pytest.skip(f"{module} has no command-line entry point yet: the stack assumes "
                    f"`python -m {module} {' '.join(cmd[3:])}`")
    done = subprocess.run([sys.executable, "-m", module, "--help"], capture_output=True, text=True, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    for flag in flags(cmd):
        assert flag in done.stdout, f"{module} --help does not list {flag}"


def test_deployment_config_and_connections(compose) -> None:
    airflow = compose["services"]["airflow"]
    env = airflow["environment"]
    mounted = {v.split(":")[1]: v.split(":")[0] for v in airflow["volumes"]}
    config_file = DOCKER / mounted[env["BINLAKE_CONFIG"]]
    cfg = load_config(config_file)
    assert cfg.lake.startswith("/data/") and cfg.landing.startswith("/data/")
    assert cfg.spark.master == "spark://spark-master:7077"
    conn_ids = {c for i in cfg.instances for c in (i.mysql_conn_id, i.aliyun_conn_id, i.oss_conn_id) if c}
    for conn_id in conn_ids:
        value = env[f"AIRFLOW_CONN_{conn_id.upper()}"]
        if value.lstrip().startswith("{"):
            conn = json.loads(value)
            endpoint = conn["extra"]["endpoint"]
            host, port = endpoint.removeprefix("http://").split(":")
            served = command(compose["services"][host])
            assert f"--port={port}" in served, f"{conn_id} points at {endpoint}, {host} serves elsewhere"
            assert f"--access-key-id={conn['login']}" in served
        else:
            assert value.startswith("mysql://root:binlake@mysql:3306")
    sources = {i.source for i in cfg.instances}
    assert "rds:rm-binlake-demo" in sources and "--instance=rm-binlake-demo" in command(compose["services"]["rds"])
    oss = next(s for s in sources if s.startswith("oss://"))
    workload = command(compose["services"]["workload"])
    assert oss == f"oss://{_flag(workload, '--oss-bucket')}/{_flag(workload, '--oss-prefix')}"
    # the binlake CLI the README tells you to run inside the stack exists
    assert {"ingest", "report", "query", "trace"} <= set(build_parser()._subparsers._group_actions[0].choices)
    assert tomllib.loads(config_file.read_text())["pipeline"] == "demo"


def _flag(cmd: list[str], name: str) -> str:
    return next(c.split("=", 1)[1] for c in cmd if c.startswith(name + "="))


def test_docker_compose_config_accepts_the_file() -> None:
    """`docker compose config` validates against the Compose specification without an engine, where installed."""
    docker = shutil.which("docker")
    if docker is None or subprocess.run([docker, "compose", "version"], capture_output=True).returncode != 0:
        pytest.skip("the docker compose plugin is not installed here (`docker compose version` fails)")
    done = subprocess.run([docker, "compose", "-f", str(COMPOSE), "config", "--quiet"], capture_output=True,
                          text=True)
    assert done.returncode == 0, done.stderr
