"""The Airflow DAGs end to end with `dag.test()` (metadata on SQLite in a temp AIRFLOW_HOME).

A private MariaDB (MINIMAL row metadata: names come from the DDL snapshot and the binlog's DDL) writes changes
with commit times spread over four past hours, one binlog file per hour, which the local RDS OpenAPI server lists
and serves (signed API, download links). Then: `binlake_ddl_snapshot`, two hourly `binlake_ingest` runs whose
prepare task decodes in a Spark job, the first in `local` mode (`python -m spark_jobs.stage`), the second through
pyspark's `spark-submit` (`submit` mode), each followed by the gates, merge and publish; then a `binlake_backfill` over a range overlapping them (the overlap is not read again); the Delta current
tables must equal the server's tables and every changed table must have had an Asset event. Finally a batch with
a value the user's expectations forbid fails the gate: the run fails, nothing is merged, and a webhook receiver
on 127.0.0.1 gets the alert with instance, table, interval and reason (and an SMTP receiver the same by email).

Each DAG run happens in its own interpreter (`python -m tests.integration.test_airflow_e2e DAG_ID ...`) so that
Airflow's configuration (read at import) is this test's and nothing else's.
"""

from __future__ import annotations

import email
import email.header
import json
import os
import socketserver
import subprocess
import sys
import threading
import time
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DB = "af_shop"
INSTANCE = "rm-airflow-e2e"  # the RDS instance id
NAME = "shop"  # the instance's name in the deployment config (task group, alerts)
HOST = "host-primary-1"


# -- the driver: one DAG run per interpreter ---------------------------------------------------------------------

def drive(dag_id: str, logical_date: str | None, conf: dict | None) -> dict:
    """Run one DAG with dag.test() and report the run's state, its tasks and the Asset events it emitted."""
    from airflow.dag_processing.dagbag import DagBag

    bag = DagBag(dag_folder=os.environ["AIRFLOW__CORE__DAGS_FOLDER"])
    assert not bag.import_errors, bag.import_errors
    dag = bag.get_dag(dag_id)
    when = datetime.fromisoformat(logical_date) if logical_date else None
    started = time.perf_counter()
    run = dag.test(logical_date=when, run_conf=conf) if when else dag.test(run_conf=conf)
    seconds = time.perf_counter() - started

    from airflow.models.asset import AssetEvent, AssetModel
    from airflow.models.taskinstance import TaskInstance
    from airflow.models.xcom import XComModel
    from airflow.utils.session import create_session

    with create_session() as session:
        tis = session.query(TaskInstance).filter(TaskInstance.dag_id == dag_id, TaskInstance.run_id == run.run_id)
        tis = list(tis)
        tasks = {f"{ti.task_id}[{ti.map_index}]" if ti.map_index >= 0 else ti.task_id: ti.state for ti in tis}
        durations = {ti.task_id: round(ti.duration or 0, 1) for ti in tis if ti.map_index < 1}
        returned = {f"{x.task_id}[{x.map_index}]": XComModel.deserialize_value(x)
                    for x in session.query(XComModel).filter(XComModel.dag_id == dag_id, XComModel.run_id == run.run_id,
                                                             XComModel.key == "return_value")}
        xcoms = {k: v for k, v in returned.items() if k.split("[")[0].endswith(("publish", "snapshot_ddl"))}
        prepared = {k: v for k, v in returned.items() if k.split("[")[0].endswith("prepare")}
        events = [{"asset": a.name, "uri": a.uri, "extra": e.extra}
                  for e, a in session.query(AssetEvent, AssetModel)
                  .join(AssetModel, AssetEvent.asset_id == AssetModel.id)
                  .filter(AssetEvent.source_run_id == run.run_id)]
    return {"state": run.state, "seconds": seconds, "durations": durations, "tasks": tasks, "xcoms": xcoms,
            "prepared": prepared, "events": events}


if __name__ == "__main__":
    args = json.loads(sys.argv[1])
    print("RESULT " + json.dumps(drive(args["dag_id"], args.get("logical_date"), args.get("conf")), default=str))
    sys.stdout.flush()
    os._exit(0)  # delta-rs may abort at interpreter exit (delta-rs#2184); the result line is what counts


# -- fixtures -----------------------------------------------------------------------------------------------------

pytest.importorskip("airflow.sdk", reason="the Airflow extra is not installed (pip install -e '.[airflow]')")


class Webhook:
    """An HTTP receiver on 127.0.0.1 that keeps every JSON body POSTed to it."""

    def __init__(self) -> None:
        received = self.received = []

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                received.append(json.loads(body))
                self.send_response(204)
                self.end_headers()

            def log_message(self, *args) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/alerts"

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


class SmtpReceiver:
    """A minimal SMTP server on 127.0.0.1 (HELO/EHLO, MAIL, RCPT, DATA, QUIT) that keeps each message's text."""

    def __init__(self) -> None:
        messages = self.messages = []

        class Handler(socketserver.StreamRequestHandler):
            def handle(self) -> None:
                self.wfile.write(b"220 localhost ESMTP\r\n")
                while line := self.rfile.readline():
                    verb = line.strip().split(b" ")[0].upper()
                    if verb == b"DATA":
                        self.wfile.write(b"354 go ahead\r\n")
                        body = []
                        while (part := self.rfile.readline()) not in (b".\r\n", b""):
                            body.append(part)
                        messages.append(b"".join(body).decode("utf-8", "replace"))
                        self.wfile.write(b"250 queued\r\n")
                    elif verb == b"QUIT":
                        self.wfile.write(b"221 bye\r\n")
                        return
                    else:
                        self.wfile.write(b"250 ok\r\n")

        self.server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.port = self.server.server_address[1]

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def write_at(server, when: datetime, statements: list[str]) -> None:
    """Run statements with the session clock at `when` (their binlog events carry that commit time)."""
    with server.connect(DB) as conn, conn.cursor() as cur:
        for i, sql in enumerate(statements):
            cur.execute(f"SET TIMESTAMP = {int(when.timestamp()) + i}")
            cur.execute(sql)
        conn.commit()


def hour_files(server, rds, hour_start: datetime) -> Path:
    """Close the current binlog file and serve it as the hour's RDS backup file."""
    before = set(server.binlog_files())
    newest = sorted(server.binlog_files(), key=lambda p: p.name)[-1]
    server.flush_logs()
    assert newest in before
    rds.add_path(INSTANCE, HOST, newest, begin=hour_start + timedelta(minutes=1),
                 end=hour_start + timedelta(minutes=59))
    return newest


def config_text(tmp: Path, webhook: str, spark_mode: str, expectations: Path | None = None, sla: int = 100000,
                engine: str = "delta-rs", spark: str = "") -> str:
    q = f'expectations = "{expectations}"\n' if expectations else ""
    email = 'email_to = ["oncall@example.com"]\nemail_from = "binlake@example.com"\n' if expectations else ""
    return f"""
lake = "{tmp / 'lake'}"
landing = "{tmp / 'landing'}"
schemas = "{tmp / 'schemas'}"
start_date = "2026-01-01T00:00:00Z"
retries = 0
engine = "{engine}"

[spark]
mode = "{spark_mode}"
master = "local[1]"
{spark}

[quality]
{q}
[alerts]
webhook_url = "{webhook}"
sla_lag_minutes = {sla}
{email}

[[instances]]
name = "{NAME}"
source = "rds:{INSTANCE}"
tables = ["{DB}.*"]
mysql_conn_id = "binlake_mysql"
aliyun_conn_id = "binlake_aliyun"
"""


@pytest.fixture(scope="module")
def scenario(mariadb_servers, tmp_path_factory):
    from binlake.testing.rds_server import LocalRdsServer

    tmp = tmp_path_factory.mktemp("airflow_e2e")
    server = mariadb_servers.get("MINIMAL")
    webhook = Webhook()
    smtp = SmtpReceiver()
    rds = LocalRdsServer().start()
    home = tmp / "airflow_home"
    home.mkdir()
    env = {**os.environ, "AIRFLOW_HOME": str(home), "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
           "AIRFLOW__CORE__DAGS_FOLDER": str(ROOT / "dags"), "AIRFLOW__CORE__PLUGINS_FOLDER": str(ROOT / "plugins"),
           "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{home / 'airflow.db'}",
           "AIRFLOW__CORE__UNIT_TEST_MODE": "False", "SPARK_LOCAL_IP": "127.0.0.1",
           "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "plugins"), os.environ.get("PYTHONPATH", "")]),
           "AIRFLOW_CONN_BINLAKE_MYSQL": server.uri,
           "AIRFLOW_CONN_SMTP_DEFAULT": json.dumps({
               "conn_type": "smtp", "host": "127.0.0.1", "port": smtp.port,
               "extra": {"disable_ssl": True, "disable_tls": True}}),
           "AIRFLOW_CONN_BINLAKE_ALIYUN": json.dumps({
               "conn_type": "generic", "login": rds.access_key_id, "password": rds.access_key_secret,
               "extra": {"endpoint": f"http://{rds.endpoint}", "region_id": rds.region}})}
    expectations = tmp / "expectations.yml"
    expectations.write_text(f"tables:\n  {DB}.orders:\n"
                            "    - expect_column_values_to_be_between: {column: amount, min_value: 0}\n")
    configs = {}
    for key, mode, exp, sla in (("plain", "in-process", None, 100000), ("lag", "in-process", None, 30),
                                ("dq", "in-process", expectations, 100000)):
        path = tmp / f"binlake-{key}.toml"
        path.write_text(config_text(tmp, webhook.url, mode, exp, sla))
        configs[key] = path
    # The two Spark modes for the prepare task: `local` (python -m spark_jobs.stage) and `submit` (pyspark's own
    # spark-submit, master local[1]); the second with a 30 min lag SLA. Their merge runs in the stage process
    # (delta-rs; with engine = "delta-spark" it would be a Spark job too: test_airflow_jobs.test_stage_commands).
    from binlake.testing.spark_cluster import spark_home

    if spark_home() is None:
        pytest.skip("pyspark (its bin/spark-submit) is not installed")
    submit = f'spark_submit = "{spark_home() / "bin" / "spark-submit"}"\n'
    for key, mode, sla, extra in (("spark", "local", 100000, ""), ("submit", "submit", 30, submit)):
        path = tmp / f"binlake-{key}.toml"
        path.write_text(config_text(tmp, webhook.url, mode, None, sla, spark=extra))
        configs[key] = path
    migrate = subprocess.run([sys.executable, "-m", "airflow", "db", "migrate"], env=env, capture_output=True,
                             text=True, timeout=300)
    assert migrate.returncode == 0, migrate.stderr[-3000:]
    base = datetime.now(UTC).replace(minute=0, second=0, microsecond=0) - timedelta(hours=8)
    yield {"tmp": tmp, "server": server, "rds": rds, "webhook": webhook, "smtp": smtp, "env": env,
           "configs": configs, "base": base}
    rds.stop()
    webhook.stop()
    smtp.stop()


def run_dag(scenario, dag_id: str, config: str, logical_date: datetime | None = None,
            conf: dict | None = None) -> dict:
    env = {**scenario["env"], "BINLAKE_CONFIG": str(scenario["configs"][config])}
    arg = json.dumps({"dag_id": dag_id, "logical_date": logical_date.isoformat() if logical_date else None,
                      "conf": conf})
    proc = subprocess.run([sys.executable, "-m", "tests.integration.test_airflow_e2e", arg], env=env, cwd=ROOT,
                          capture_output=True, text=True, timeout=1800)
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")]
    assert lines, f"{dag_id}: no result (exit {proc.returncode})\n{proc.stdout[-4000:]}\n{proc.stderr[-6000:]}"
    result = json.loads(lines[-1][len("RESULT "):])
    result["log"] = proc.stdout[-20000:] + proc.stderr[-20000:]
    print(f"{dag_id} ({config}, {logical_date}): {result['state']} in {result['seconds']:.1f} s; tasks (s): "
          f"{result['durations']}")
    return result


def server_rows(server, table: str) -> dict:
    with server.connect(DB) as conn, conn.cursor() as cur:
        cur.execute(f"SELECT * FROM `{table}`")
        names = [d[0] for d in cur.description]
        return {r[0]: dict(zip(names, r, strict=True)) for r in cur.fetchall()}


def lake_rows(lake: Path, table: str) -> dict:
    from binlake.lake.engines import get_engine
    from binlake.lake.layout import LakeLayout

    data = get_engine().read(LakeLayout(str(lake)).current_path(DB, table)).to_pylist()
    return {r["id"]: {k: v for k, v in r.items() if not k.startswith("_")} for r in data}


def normalize(rows: dict) -> dict:
    return {k: {c: (format(v, "f") if isinstance(v, Decimal) else v) for c, v in r.items()} for k, r in rows.items()}


# -- the scenario -------------------------------------------------------------------------------------------------

def test_snapshot_ingest_backfill_and_alert(scenario) -> None:
    server, rds, base = scenario["server"], scenario["rds"], scenario["base"]
    hours = [base + timedelta(hours=h) for h in range(8)]
    with server.connect() as conn, conn.cursor() as cur:
        cur.execute(f"DROP DATABASE IF EXISTS {DB}")
        cur.execute(f"CREATE DATABASE {DB}")
    server.flush_logs()

    # hour 0: the tables and their first rows
    write_at(server, hours[0], [
        "CREATE TABLE orders (id INT PRIMARY KEY, customer INT NOT NULL, amount DECIMAL(10,2), note VARCHAR(40))",
        "CREATE TABLE customers (id INT PRIMARY KEY, name VARCHAR(40), city VARCHAR(40))",
        *[f"INSERT INTO orders VALUES ({i}, {i % 5}, {i * 10}.50, 'o{i}')" for i in range(1, 21)],
        *[f"INSERT INTO customers VALUES ({i}, 'c{i}', 'city{i % 3}')" for i in range(5)],
    ])
    hour_files(server, rds, hours[0])

    snap = run_dag(scenario, "binlake_ddl_snapshot", "plain")
    assert snap["state"] == "success", snap["log"]
    (result,) = snap["xcoms"].values()
    assert result["instance"] == NAME and result["stored"] and result["tables"] == 2

    # hours 1-3: updates, deletes, a key change, and an ALTER that adds a column mid-stream
    write_at(server, hours[1], [
        "UPDATE orders SET amount = amount + 1 WHERE id <= 5",
        "DELETE FROM orders WHERE id IN (6, 7)",
        "UPDATE orders SET id = 100 WHERE id = 8",
        "INSERT INTO customers VALUES (10, 'c10', 'city1')",
    ])
    hour_files(server, rds, hours[1])
    write_at(server, hours[2], [
        "ALTER TABLE orders ADD COLUMN status VARCHAR(10) NOT NULL DEFAULT 'new' AFTER customer",
        "UPDATE orders SET status = 'paid' WHERE id BETWEEN 9 AND 12",
        "INSERT INTO orders (id, customer, status, amount, note) VALUES (200, 3, 'new', 7.25, 'late')",
        "DELETE FROM customers WHERE id = 0",
    ])
    hour_files(server, rds, hours[2])
    write_at(server, hours[3], [
        "UPDATE orders SET note = 'touched' WHERE id > 15",
        "UPDATE customers SET city = 'moved' WHERE id = 1",
    ])
    hour_files(server, rds, hours[3])

    # two hourly runs, prepare decoding in a Spark job: [h0, h1) in `local` mode, then [h1, h2) through
    # spark-submit (`submit` mode) with a 30 min lag SLA
    first = run_dag(scenario, "binlake_ingest", "spark", logical_date=hours[1])
    assert first["state"] == "success", first["log"]
    assert scenario["webhook"].received == []
    second = run_dag(scenario, "binlake_ingest", "submit", logical_date=hours[2])
    assert second["state"] == "success", second["log"]
    for run, submitted in ((first, False), (second, True)):
        (summary,) = run["xcoms"].values()
        (prepared,) = run["prepared"].values()
        assert prepared["decoded_by"] == "spark" and summary["decoded_by"] == "spark"
        spark = prepared["spark"]
        assert (spark["master"], spark["engine"], spark["submitted"]) == ("local[1]", "delta-rs", submitted), spark
        assert spark["app_id"].startswith("local-")
        # delta-rs: merge and publish run in the stage process, not as Spark jobs
        assert summary["merge"]["merged"] and "spark" not in summary["merge"] and "spark" not in summary["publish"]
    for run in (first, second):
        (summary,) = run["xcoms"].values()
        assert summary["batch"] is not None and summary["publish"]["changed_tables"]
        assert {e["asset"] for e in run["events"]} == {f"binlake/{t}" for t in summary["publish"]["changed_tables"]}

    # backfill [h0, h4): hours 0-1 overlap the hourly runs and change nothing; hours 2-3 (with the ALTER) are new
    backfill = run_dag(scenario, "binlake_backfill", "plain", conf={
        "instance": NAME, "start": hours[0].isoformat(), "end": hours[4].isoformat(), "tables": [f"{DB}.orders"]})
    assert backfill["state"] == "success", backfill["log"]
    assert sum(1 for t in backfill["tasks"] if t.startswith("fetch[")) == 4
    (summary,) = backfill["xcoms"].values()
    assert len(summary["publish"]["files"]) == 2 and summary["publish"]["changed_tables"] == [f"{DB}.customers",
                                                                                              f"{DB}.orders"]

    # the second run's newest change (hour 1) is about an hour older than its interval end: beyond the SLA
    (lag,) = scenario["webhook"].received
    assert lag["event"] == "binlake.lag_beyond_sla" and lag["instance"] == NAME
    assert lag["interval"] == [hours[1].isoformat(), hours[2].isoformat()]
    assert 50 * 60 < lag["details"]["lag_seconds"] < 70 * 60
    scenario["webhook"].received.clear()

    lake = scenario["tmp"] / "lake"
    for table in ("orders", "customers"):
        assert normalize(lake_rows(lake, table)) == normalize(server_rows(server, table)), table

    # an hour with no new files: nothing to ingest, but the lake is now two hours behind: a lag alert all the same
    quiet = run_dag(scenario, "binlake_ingest", "lag", logical_date=hours[5])
    assert quiet["state"] == "success", quiet["log"]
    (state,) = quiet["xcoms"].values()
    assert state["batch"] is None and quiet["events"] == []
    (lag,) = scenario["webhook"].received
    assert lag["event"] == "binlake.lag_beyond_sla" and lag["interval"] == [hours[4].isoformat(), hours[5].isoformat()]
    assert 110 * 60 < lag["details"]["lag_seconds"] < 130 * 60
    scenario["webhook"].received.clear()

    # hour 4's file arrives late, with an amount the expectations forbid; the next hourly run picks it up through
    # its look-back window: the gate fails, nothing merges, the webhook and the mailbox hear of it
    expected = normalize(server_rows(server, "orders"))
    write_at(server, hours[4], ["INSERT INTO orders (id, customer, amount, note) VALUES (300, 1, -5.00, 'bad')"])
    hour_files(server, rds, hours[4])
    failed = run_dag(scenario, "binlake_ingest", "dq", logical_date=hours[6])
    assert failed["state"] == "failed", failed["log"]
    assert failed["tasks"][f"{NAME}.gate_before_merge"] == "failed"
    assert failed["tasks"][f"{NAME}.merge"] == "upstream_failed"
    assert normalize(lake_rows(lake, "orders")) == expected
    alerts = scenario["webhook"].received
    assert [a["event"] for a in alerts] == ["binlake.dq_gate_failed"], alerts
    alert = alerts[0]
    assert alert["instance"] == NAME and alert["table"] == f"{DB}.orders"
    assert alert["interval"] == [hours[5].isoformat(), hours[6].isoformat()]
    assert "amount" in alert["reason"] and alert["task_id"] == f"{NAME}.gate_before_merge"
    dq_batch = alert["details"]["batch"]
    (mail,) = scenario["smtp"].messages  # the same alert by email, through Airflow's SMTP notifier
    msg = email.message_from_string(mail)
    subject = str(email.header.make_header(email.header.decode_header(msg["Subject"])))
    assert msg["To"] == "oncall@example.com"
    assert subject.startswith(f"binlake dq gate failed: instance {NAME}, table {DB}.orders, interval")
    body = "".join(part.get_payload(decode=True).decode() for part in msg.walk() if not part.is_multipart())
    assert '&quot;table&quot;: &quot;af_shop.orders&quot;' in body and "amount" in body

    # a plain task failure: a backfill whose end is before its start fails planning, and says so
    alerts.clear()
    bad = run_dag(scenario, "binlake_backfill", "plain", conf={
        "instance": NAME, "start": hours[3].isoformat(), "end": hours[1].isoformat(), "tables": []})
    assert bad["state"] == "failed" and bad["tasks"]["plan_backfill"] == "failed", bad["log"]
    (alert,) = alerts
    assert alert["event"] == "binlake.task_failed" and alert["instance"] == NAME and alert["table"] is None
    assert alert["interval"] == [hours[3].isoformat(), hours[1].isoformat()]
    assert "param `end`" in alert["reason"] and "must be after `start`" in alert["reason"]

    # the operator accepts the batch (the expectation was wrong): release it, and the next hourly run merges it
    release = subprocess.run([sys.executable, "-m", "binlake.cli", "quarantine", "release", str(dq_batch), "--lake",
                              str(lake), "--no-run"], capture_output=True, text=True, timeout=300)
    assert release.returncode == 0, release.stderr[-3000:]
    alerts.clear()
    resumed = run_dag(scenario, "binlake_ingest", "plain", logical_date=hours[7])
    assert resumed["state"] == "success", resumed["log"]
    (state,) = resumed["xcoms"].values()
    assert state["batch"] == dq_batch and state["publish"]["changed_tables"] == [f"{DB}.orders"]
    assert normalize(lake_rows(lake, "orders")) == normalize(server_rows(server, "orders"))
    assert 300 in lake_rows(lake, "orders") and alerts == []
