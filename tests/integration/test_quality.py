"""Quality gates end to end: a real MariaDB writes binlogs, the ingest decodes them (in-process or in Spark tasks)
into real Delta tables, real Great Expectations suites gate each batch. Every gate is made to fail by a batch
crafted to break exactly it; the current table must then be unchanged, the control table's watermark unmoved, the
alert delivered to a local webhook, and releasing after the fix must merge the batch exactly once."""

from __future__ import annotations

import json
import pickle
import re
import threading
from decimal import Decimal
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pyarrow as pa
import pytest

from binlake.cli import main
from binlake.lake.control import ControlTable, FileState
from binlake.lake.engines import ColumnChange, get_engine
from binlake.lake.ingest import IngestOptions
from binlake.lake.layout import LakeLayout
from binlake.lake.pending import BatchQuarantined, BatchStore
from binlake.lake.validations import read_validations
from binlake.quality.gates import GateFailed
from binlake.quality.quarantine import quarantined, release_batch
from binlake.quality.stages import run_ingest
from binlake.settings import AlertConfig, QualityConfig
from tests.conftest import skip_or_fail

DB = "quality_db"


class Webhook:
    """A local HTTP receiver for alert POSTs (http.server on 127.0.0.1, random port)."""

    def __init__(self) -> None:
        self.received: list[dict] = []
        received = self.received

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["Content-Length"]))
                received.append(json.loads(body))
                self.send_response(204)
                self.end_headers()

            def log_message(self, *args) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_port}/alerts"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def webhook():
    hook = Webhook()
    yield hook
    hook.close()


@pytest.fixture(scope="module")
def server(mariadb_servers):
    srv = mariadb_servers.get("MINIMAL")
    with srv.connect() as conn, conn.cursor() as cur:
        cur.execute(f"DROP DATABASE IF EXISTS {DB}")
        cur.execute(f"CREATE DATABASE {DB}")
    return srv


def write(server, statements: list[str]) -> None:
    with server.connect(DB) as conn, conn.cursor() as cur:
        for sql in statements:
            cur.execute(sql)


def new_files(server, first: str) -> list[str]:
    return [str(f) for f in server.flush_logs() if str(f) >= str(server.binlog_dir / first)]


def options(lake, files, table: str, webhook=None, **quality) -> IngestOptions:
    alerts = AlertConfig(webhook_url=webhook.url if webhook else None)
    return IngestOptions(lake=str(lake), files=files, databases={DB}, tables=re.compile(rf"\.{table}$"),
                         quality=QualityConfig(alerts=alerts, **quality))


def current(lake, table: str) -> dict:
    rows = get_engine().read(LakeLayout(str(lake)).current_path(DB, table)).to_pylist()
    return {r["id"]: {k: (format(v, "f") if isinstance(v, Decimal) else v) for k, v in r.items()} for r in rows}


def server_rows(server, table: str) -> dict:
    with server.connect(DB) as conn, conn.cursor() as cur:
        cur.execute(f"SELECT * FROM `{table}`")
        names = [d[0] for d in cur.description]
        return {r[0]: {k: (format(v, "f") if isinstance(v, Decimal) else v) for k, v in zip(names, r, strict=True)}
                for r in cur.fetchall()}


def without_meta(rows: dict) -> dict:
    return {k: {c: v for c, v in r.items() if not c.startswith("_")} for k, r in rows.items()}


def control_rows(lake) -> dict:
    engine = get_engine()
    return {s.file: s for s in ControlTable(engine, LakeLayout(str(lake))).load().values()}


def history_ops(lake, table: str) -> dict:
    history = get_engine().read(LakeLayout(str(lake)).history_path(DB, table))
    return {r["_op"]: r["_op_count"] for r in history.group_by("_op").aggregate([("_op", "count")]).to_pylist()}


def assert_quarantined(lake, batch: int, before: dict, gate: str, webhook, table: str) -> None:
    """The batch is quarantined in the control table with its failures, and the watermark did not move."""
    after = control_rows(lake)
    pb = BatchStore(str(lake)).load(batch)
    assert pb.state == "quarantined"
    assert any(f["gate"] == gate for f in pb.quarantine["failures"])
    for f in pb.files:
        st = after[f["file"]]
        assert st.status == "quarantined" and st.batch_id == batch and gate in (st.last_error or "")
        assert st.end_pos == (before[f["file"]].end_pos if f["file"] in before else 4)  # watermark unmoved
    assert [b.batch for b in quarantined(str(lake))] == [batch]
    posted = [a for a in webhook.received if a["batch"] == batch]
    expected_table = table if table.startswith("(") else f"{DB}.{table}"  # "(batch)": a batch-wide check
    assert posted and posted[-1]["table"] == expected_table and posted[-1]["event"] == "binlake.gate_failed"
    assert any(f["gate"] == gate for f in posted[-1]["failures"])
    page = Path(posted[-1]["report"]).read_text()  # the batch's own HTML page, named in the alert
    assert f"batch {batch}" in page and "FAILED" in page and gate in page


def test_clean_batches_pass_in_spark_and_results_render(server, tmp_path, spark, webhook) -> None:
    from binlake.quality.report import write_report
    from binlake.spark import spark_executor

    first = server.binlog_files()[-1].name
    write(server, ["CREATE TABLE clean (id INT PRIMARY KEY, amount DECIMAL(8,2), status VARCHAR(10))",
                   *[f"INSERT INTO clean VALUES ({i}, {i * 1.5}, 'new')" for i in range(40)],
                   "UPDATE clean SET status = 'paid' WHERE id < 10", "DELETE FROM clean WHERE id >= 35",
                   "UPDATE clean SET id = 100 WHERE id = 20"])
    expectations = tmp_path / "expectations.yml"
    expectations.write_text(f"tables:\n  {DB}.clean:\n"
                            "    - expect_column_values_to_be_between: "
                            "{column: amount, min_value: 0, max_value: 1000}\n"
                            "    - expect_column_values_to_be_in_set: {column: status, value_set: [new, paid]}\n")
    lake = tmp_path / "lake"
    opts = options(lake, new_files(server, first), "clean", webhook, max_lag_seconds=3600,
                   expectations=str(expectations))
    summary = run_ingest(opts, executor=spark_executor(spark))
    assert summary.batch == 0
    assert without_meta(current(lake, "clean")) == server_rows(server, "clean")
    assert "gate before merge" in summary.seconds and "gate after merge" in summary.seconds
    results = read_validations(get_engine(), str(lake)).to_pylist()
    gates = {(r["stage"], r["gate"]) for r in results}
    assert all(r["success"] for r in results)
    for stage, gate in [("before merge", "pk_not_null"), ("before merge", "one_row_per_key"),
                        ("before merge", "seq_increasing"), ("before merge", "schema_version"),
                        ("before merge", "no_decode_errors"), ("before merge", "no_statement_dml"),
                        ("before merge", "history_tally"), ("before merge", "event_types_handled"),
                        ("before merge", "user:expect_column_values_to_be_between"),
                        ("before merge", "user:expect_column_values_to_be_in_set"),
                        ("after merge", "pk_unique"), ("after merge", "count_reconciles"),
                        ("after merge", "columns_match"), ("after merge", "freshness")]:
        assert (stage, gate) in gates, (stage, gate)
    assert webhook.received == []
    page = tmp_path / "report.html"
    assert write_report(get_engine(), str(lake), str(page)) == len(results)
    text = page.read_text()
    assert "<html>" in text and f"{DB}.clean" in text and "count_reconciles" in text and "FAILED" not in text
    assert run_ingest(opts).batch is None


def test_stages_run_one_by_one_like_airflow_tasks(server, tmp_path) -> None:
    """The contract's stages called separately (each with its own engine, state only in the lake)."""
    from binlake.lake import pipeline
    from binlake.quality import stages

    first = server.binlog_files()[-1].name
    write(server, ["CREATE TABLE staged (id INT PRIMARY KEY, v INT)",
                   *[f"INSERT INTO staged VALUES ({i}, {i})" for i in range(10)], "DELETE FROM staged WHERE id = 3"])
    opts = options(tmp_path / "lake", new_files(server, first), "staged")
    batch = pipeline.prepare_batch(opts)
    assert batch == 0 and pipeline.prepare_batch(opts) == 0  # unpublished: resumed, not a new batch
    with pytest.raises(pipeline.StageOrderError):
        pipeline.merge_batch(opts, batch)  # the before-merge gate has not passed yet
    assert stages.gate_before_merge(opts, batch).success
    merged = pipeline.merge_batch(opts, batch)
    assert merged[f"{DB}.staged"]["current"] == 1
    assert stages.gate_after_merge(opts, batch).success
    summary = pipeline.publish_batch(opts, batch)
    assert summary.rows[(f"{DB}.staged", "insert")] == 10
    assert pipeline.prepare_batch(opts) is None
    assert without_meta(current(tmp_path / "lake", "staged")) == server_rows(server, "staged")


def test_user_expectation_failure_quarantines_and_release_merges_once(server, tmp_path, webhook) -> None:
    first = server.binlog_files()[-1].name
    write(server, ["CREATE TABLE orders (id INT PRIMARY KEY, amount INT, status VARCHAR(10))",
                   *[f"INSERT INTO orders VALUES ({i}, {i}, 'new')" for i in range(20)]])
    lake = tmp_path / "lake"
    rules = tmp_path / "expectations.json"
    rules.write_text(json.dumps({"tables": {f"{DB}.orders": [
        {"expect_column_values_to_be_between": {"column": "amount", "min_value": 0, "max_value": 100}}]}}))
    files = new_files(server, first)
    run_ingest(options(lake, files, "orders", webhook, expectations=str(rules)))
    before_rows, before_control = current(lake, "orders"), control_rows(lake)

    second = server.binlog_files()[-1].name
    write(server, ["INSERT INTO orders VALUES (50, 5000, 'new')", "UPDATE orders SET amount = 7 WHERE id = 1",
                   "DELETE FROM orders WHERE id = 2"])
    files = files + [f for f in new_files(server, second) if f not in files]
    opts = options(lake, files, "orders", webhook, expectations=str(rules))
    with pytest.raises(GateFailed) as failed:
        run_ingest(opts)
    err = failed.value
    assert err.table == f"{DB}.orders" and err.batch == 1 and err.stage == "before merge"
    message = str(err)
    assert "batch 1" in message and f"{DB}.orders" in message and "expect_column_values_to_be_between" in message
    assert "5000" in message  # the failing value is shown
    copy = pickle.loads(pickle.dumps(err))  # crosses process boundaries (Airflow task runners) intact
    assert (copy.table, copy.batch, str(copy)) == (err.table, err.batch, message)
    assert current(lake, "orders") == before_rows
    assert_quarantined(lake, 1, before_control, "user:expect_column_values_to_be_between", webhook, "orders")
    history_during = history_ops(lake, "orders")
    assert history_during == {"insert": 21, "update": 1, "delete": 1}  # the history keeps the batch

    # While quarantined nothing new is ingested (it would decode the same changes again).
    with pytest.raises(BatchQuarantined, match="batch 1 is quarantined") as blocked:
        run_ingest(opts)
    assert pickle.loads(pickle.dumps(blocked.value)).batch == 1

    rules.write_text(json.dumps({"tables": {f"{DB}.orders": [
        {"expect_column_values_to_be_between": {"column": "amount", "min_value": 0, "max_value": 10000}}]}}))
    release_batch(opts, 1)
    summary = run_ingest(opts)
    assert summary.batch == 1
    assert "quality gates: before merge passed, after merge passed (released from quarantine)" in summary.text()
    assert without_meta(current(lake, "orders")) == server_rows(server, "orders")
    assert history_ops(lake, "orders") == history_during  # merged once, history not appended again
    states = control_rows(lake)
    assert all(states[f].status == "merged" and states[f].batch_id == 1 for f in states if f not in before_control)
    assert run_ingest(opts).batch is None
    assert quarantined(str(lake)) == []


def test_statement_dml_for_a_tracked_table_fails_before_merge(server, tmp_path, webhook) -> None:
    first = server.binlog_files()[-1].name
    write(server, ["CREATE TABLE stmt (id INT PRIMARY KEY, v INT)", "INSERT INTO stmt VALUES (1, 1)",
                   "SET SESSION binlog_format = 'STATEMENT'", "UPDATE stmt SET v = v + 1",
                   "SET SESSION binlog_format = 'ROW'"])
    lake = tmp_path / "lake"
    with pytest.raises(GateFailed, match="no_statement_dml"):
        run_ingest(options(lake, new_files(server, first), "stmt", webhook))
    assert not get_engine().exists(LakeLayout(str(lake)).current_path(DB, "stmt"))
    assert_quarantined(lake, 0, {}, "no_statement_dml", webhook, "stmt")


class DroppingDeletes:
    """The real delta-rs engine with a merge bug: it loses the first delete of a current table's merge input."""

    def __init__(self, table_path: str) -> None:
        self.inner = get_engine()
        self.path = table_path
        self.name = "faulty"

    def __getattr__(self, item):
        return getattr(self.inner, item)

    def merge(self, path, data, keys, app_id, batch):
        if path == self.path:
            deleted = data.column("_deleted").to_pylist()
            if True in deleted:
                i = deleted.index(True)
                data = pa.concat_tables([data.slice(0, i), data.slice(i + 1)])
        return self.inner.merge(path, data, keys, app_id, batch)


def test_count_that_does_not_reconcile_restores_the_merge(server, tmp_path, webhook) -> None:
    first = server.binlog_files()[-1].name
    write(server, ["CREATE TABLE cnt (id INT PRIMARY KEY, v INT)",
                   *[f"INSERT INTO cnt VALUES ({i}, {i})" for i in range(10)]])
    lake = tmp_path / "lake"
    files = new_files(server, first)
    run_ingest(options(lake, files, "cnt", webhook))
    before_rows, before_control = current(lake, "cnt"), control_rows(lake)
    second = server.binlog_files()[-1].name
    write(server, ["DELETE FROM cnt WHERE id IN (1, 2)", "INSERT INTO cnt VALUES (20, 20)",
                   "UPDATE cnt SET v = 99 WHERE id = 5"])
    files = files + [f for f in new_files(server, second) if f not in files]
    opts = options(lake, files, "cnt", webhook)
    path = LakeLayout(str(lake)).current_path(DB, "cnt")
    with pytest.raises(GateFailed, match="count_reconciles") as failed:
        run_ingest(opts, engine=DroppingDeletes(path))
    assert failed.value.stage == "after merge"
    assert [f.gate for f in failed.value.failures] == ["count_reconciles"]  # exactly this gate
    assert current(lake, "cnt") == before_rows  # the merge was undone
    assert_quarantined(lake, 1, before_control, "count_reconciles", webhook, "cnt")
    release_batch(opts, 1)
    summary = run_ingest(opts)  # the engine fixed (the real one)
    assert summary.batch == 1
    assert without_meta(current(lake, "cnt")) == server_rows(server, "cnt")
    assert history_ops(lake, "cnt") == {"insert": 11, "delete": 2, "update": 1}


def test_duplicate_keys_in_the_current_table_fail_pk_unique(server, tmp_path, webhook) -> None:
    from deltalake import write_deltalake

    first = server.binlog_files()[-1].name
    write(server, ["CREATE TABLE dup (id INT PRIMARY KEY, v INT)",
                   *[f"INSERT INTO dup VALUES ({i}, {i})" for i in range(5)]])
    lake = tmp_path / "lake"
    files = new_files(server, first)
    run_ingest(options(lake, files, "dup", webhook))
    path = LakeLayout(str(lake)).current_path(DB, "dup")
    engine = get_engine()
    table = engine.read(path)
    write_deltalake(path, table.slice(0, 1), mode="append")  # a foreign writer duplicates key 0
    before_rows, before_control = engine.read(path).num_rows, control_rows(lake)
    second = server.binlog_files()[-1].name
    write(server, ["INSERT INTO dup VALUES (9, 9)", "UPDATE dup SET v = 7 WHERE id = 3"])
    files = files + [f for f in new_files(server, second) if f not in files]
    with pytest.raises(GateFailed, match="pk_unique") as failed:
        run_ingest(options(lake, files, "dup", webhook))
    assert {f.gate for f in failed.value.failures} == {"pk_unique"}
    assert "[0]" in str(failed.value) or "0" in str(failed.value.failures[0].sample)
    after = engine.read(path)
    assert after.num_rows == before_rows and 9 not in after.column("id").to_pylist()
    assert_quarantined(lake, 1, before_control, "pk_unique", webhook, "dup")


def test_column_type_drift_fails_columns_match(server, tmp_path, webhook) -> None:
    """The lake's table no longer matches the schema version (its column type was changed outside binlake)."""
    first = server.binlog_files()[-1].name
    write(server, ["CREATE TABLE drift (id INT PRIMARY KEY, v INT)",
                   *[f"INSERT INTO drift VALUES ({i}, {i})" for i in range(5)]])
    lake = tmp_path / "lake"
    files = new_files(server, first)
    run_ingest(options(lake, files, "drift", webhook))
    path = LakeLayout(str(lake)).current_path(DB, "drift")
    engine = get_engine()
    engine.replace_schema(path, [ColumnChange.convert("v", pa.int64())], "foreign-alter", 1)
    before_rows, before_control = current(lake, "drift"), control_rows(lake)
    second = server.binlog_files()[-1].name
    write(server, ["INSERT INTO drift VALUES (7, 7)"])
    files = files + [f for f in new_files(server, second) if f not in files]
    with pytest.raises(GateFailed, match="columns_match") as failed:
        run_ingest(options(lake, files, "drift", webhook))
    assert {f.gate for f in failed.value.failures} == {"columns_match"}
    assert "int64" in str(failed.value)
    assert current(lake, "drift") == before_rows
    assert_quarantined(lake, 1, before_control, "columns_match", webhook, "drift")


def test_stale_batch_fails_freshness_and_release_without_it_merges(server, tmp_path, webhook, capsys) -> None:
    first = server.binlog_files()[-1].name
    write(server, ["CREATE TABLE stale (id INT PRIMARY KEY, v INT)", "SET TIMESTAMP = UNIX_TIMESTAMP('2020-01-02')",
                   *[f"INSERT INTO stale VALUES ({i}, {i})" for i in range(5)], "SET TIMESTAMP = DEFAULT"])
    lake = tmp_path / "lake"
    opts = options(lake, new_files(server, first), "stale", webhook, max_lag_seconds=86400)
    with pytest.raises(GateFailed, match="freshness") as failed:
        run_ingest(opts)
    assert {f.gate for f in failed.value.failures} == {"freshness"}
    assert current(lake, "stale") == {}  # the table the batch created is back to its empty creation
    assert_quarantined(lake, 0, {}, "freshness", webhook, "stale")
    # The operator inspects it and accepts the backfill: `binlake quarantine release` without --max-lag.
    assert main(["quarantine", "list", "--lake", str(lake)]) == 0
    listed = capsys.readouterr().out
    assert "batch 0: after merge gate failed" in listed and f"{DB}.stale" in listed
    assert main(["quarantine", "show", "0", "--lake", str(lake)]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["state"] == "quarantined" and shown["quarantine"]["failures"][0]["gate"] == "freshness"
    assert main(["quarantine", "show", "--lake", str(lake), "0"]) == 0  # options before the batch number too
    assert json.loads(capsys.readouterr().out) == shown
    assert main(["quarantine", "release", "0", "--lake", str(lake)]) == 0
    assert "batch 0:" in capsys.readouterr().out
    assert without_meta(current(lake, "stale")) == server_rows(server, "stale")
    assert history_ops(lake, "stale") == {"insert": 5}
    opts.quality.max_lag_seconds = None
    assert run_ingest(opts).batch is None
    assert main(["quality", "report", "--lake", str(lake), "--out", str(tmp_path / "q.html")]) == 0
    page = (tmp_path / "q.html").read_text()
    assert "FAILED" in page and "freshness" in page and "passed" in page  # the failed run and the released one
    # A file held back outside any batch (e.g. by the fetch stage's checksum check) is listed too.
    held = FileState("default", "default", "mysql-bin.999999", 999999, 10, "quarantined", last_error="checksum x")
    ControlTable(get_engine(), LakeLayout(str(lake))).record([held], 0, event=50)
    assert main(["quarantine", "list", "--lake", str(lake)]) == 0
    assert "file mysql-bin.999999 (default/default): quarantined outside a batch: checksum x" in capsys.readouterr().out


def test_ingest_command_exits_non_zero_naming_table_batch_and_expectation(server, tmp_path, capsys) -> None:
    first = server.binlog_files()[-1].name
    write(server, ["CREATE TABLE cli (id INT PRIMARY KEY, status VARCHAR(10))", "INSERT INTO cli VALUES (1, 'bogus')"])
    files = new_files(server, first)
    source = tmp_path / "binlogs"
    source.mkdir()
    for f in files:
        (source / Path(f).name).symlink_to(f)
    rules = tmp_path / "rules.yml"
    rules.write_text(f"tables:\n  {DB}.cli:\n    - expect_column_values_to_be_in_set: "
                     "{column: status, value_set: [new, paid]}\n")
    code = main(["ingest", "--source", f"local:{source}", "--lake", str(tmp_path / "lake"), "--databases", DB,
                 "--tables", r"\.cli$", "--expectations", str(rules)])
    err = capsys.readouterr().err
    assert code == 3
    assert "GateFailed" in err and "batch 0" in err and f"{DB}.cli" in err
    assert "expect_column_values_to_be_in_set" in err
    assert "bogus" in err


def test_the_documented_expectations_file_loads() -> None:
    from binlake.quality.config import ExpectationsFileError, load_expectations

    loaded = load_expectations(str(Path(__file__).resolve().parents[2] / "schemas" / "expectations.yml"))
    assert loaded["shop.customers"][0].name == "expect_column_values_to_be_between"
    bad = Path(__file__).resolve().parents[2] / "schemas" / "README.md"
    with pytest.raises(ExpectationsFileError, match=r"README\.md: not valid JSON"):
        load_expectations(str(bad))


class SmtpReceiver:
    """A minimal SMTP server on 127.0.0.1 (EHLO/HELO, MAIL, RCPT, DATA, QUIT) keeping each message's text."""

    def __init__(self) -> None:
        import socketserver

        messages = self.messages = []

        class Handler(socketserver.StreamRequestHandler):
            def handle(self) -> None:
                self.wfile.write(b"220 test ESMTP\r\n")
                while line := self.rfile.readline():
                    verb = line.decode().strip().split(" ")[0].upper()
                    if verb == "DATA":
                        self.wfile.write(b"354 go ahead\r\n")
                        body = []
                        while (data := self.rfile.readline()) not in (b".\r\n", b""):
                            body.append(data.decode())
                        messages.append("".join(body))
                        self.wfile.write(b"250 queued\r\n")
                    elif verb == "QUIT":
                        self.wfile.write(b"221 bye\r\n")
                        return
                    else:
                        self.wfile.write(b"250 ok\r\n")

        self.server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def test_alert_goes_to_log_webhook_and_email_and_a_dead_webhook_is_reported(webhook, caplog) -> None:
    from binlake.quality.alerts import Alert, send_alert

    smtp = SmtpReceiver()
    try:
        alert = Alert("shop.orders", 7, "after merge", [{"expectation": "expect_column_values_to_be_unique",
                                                          "gate": "pk_unique", "sample": [42]}], "/lake")
        config = AlertConfig(webhook_url=webhook.url, email_to=["ops@example.com"], smtp_host="127.0.0.1",
                             smtp_port=smtp.port)
        with caplog.at_level("ERROR", logger="binlake.alerts"):
            outcome = send_alert(config, alert)
        assert outcome == {"log": "sent", "webhook": "sent", "email": "sent"}
        assert "table shop.orders, batch 7, after merge: expect_column_values_to_be_unique" in caplog.text
        assert webhook.received[0]["batch"] == 7 and webhook.received[0]["failures"][0]["sample"] == [42]
        assert "Subject: binlake gate failed: table shop.orders, batch 7" in smtp.messages[0]
        assert "pk_unique" in smtp.messages[0]
    finally:
        smtp.close()
    dead = send_alert(AlertConfig(webhook_url="http://127.0.0.1:9/nothing", timeout_seconds=2), alert)
    assert dead["log"] == "sent" and dead["webhook"].startswith("failed:")


def test_a_key_column_renamed_inside_the_batch_passes_the_gates(server, tmp_path) -> None:
    """Rows before the rename hold the old key column: the key checks use each schema version's own key."""
    first = server.binlog_files()[-1].name
    write(server, ["CREATE TABLE pkr (id INT PRIMARY KEY, v INT)",
                   *[f"INSERT INTO pkr VALUES ({i}, {i})" for i in range(5)],
                   "ALTER TABLE pkr CHANGE id oid INT", "INSERT INTO pkr VALUES (9, 9)",
                   "DELETE FROM pkr WHERE oid = 1",
                   "UPDATE pkr SET v = 0 WHERE oid = 2"])
    lake = tmp_path / "lake"
    summary = run_ingest(options(lake, new_files(server, first), "pkr"))
    assert summary.batch == 0
    rows = get_engine().read(LakeLayout(str(lake)).current_path(DB, "pkr")).to_pylist()
    assert {r["oid"]: r["v"] for r in rows} == {k: r["v"] for k, r in server_rows(server, "pkr").items()}
    results = read_validations(get_engine(), str(lake)).to_pylist()
    assert all(r["success"] for r in results)
    assert any(r["gate"] == "pk_not_null" and "id" in r["kwargs"] and "oid" not in r["kwargs"] for r in results)


@pytest.mark.parametrize(("query", "session_db", "table", "writes"), [
    ("UPDATE stmt SET v = v + 1", "d", "stmt", True),
    ("INSERT INTO audit SELECT * FROM orders", "d", "orders", False),  # reads the tracked table, writes another
    ("INSERT INTO audit SELECT * FROM orders", "d", "audit", True),
    ("REPLACE INTO d.t VALUES (1)", "x", "t", True),  # unparsable for sqlglot: the table is named, so it counts
    ("UPDATE a JOIN b ON a.x = b.x SET b.v = 1", "d", "b", True),
    ("DELETE a, b FROM a JOIN b ON a.x = b.x", "d", "b", True),
    ("DELETE FROM other.x WHERE id = 1", "d", "x", False),
    ("DELETE FROM `x` WHERE id = 1", "d", "x", True),
])
def test_statement_dml_is_attributed_to_the_tables_it_writes(query, session_db, table, writes) -> None:
    from binlake.quality.gates import _mentions

    assert _mentions(query, session_db, "d", table) is writes


def _tamper_history(store: BatchStore, pb, change) -> None:
    """Rewrite the batch's decoded history as its intermediate files hold it: each staged piece (written aside and
    renamed over it, so the history table's data file linked from it keeps its rows) and, for rows kept in the
    pending batch, that copy; the merge inputs kept in memory from decoding are dropped with them."""
    import os

    import pyarrow.parquet as pq

    from binlake.lake.staging import forget_merge_inputs, piece_location

    stage = store.stage(pb.batch)
    forget_merge_inputs(stage)
    histories = {}
    for name, info in pb.tables.items():
        if "staged" not in info:
            histories[name] = change(store.read_history(pb, name))
            continue
        for piece in info["staged"]:
            path = piece_location(stage, piece)
            pq.write_table(change(pq.read_table(path)), path + ".tampered")
            os.replace(path + ".tampered", path)
    if histories:
        store.write_data(pb.batch, histories, store.read_table_maps(pb))


def _set(table: pa.Table, column: str, values: list) -> pa.Table:
    i = table.column_names.index(column)
    return table.set_column(i, column, pa.array(values, table.schema.field(column).type))


@pytest.mark.parametrize(("case", "gates"), [
    ("event decoded twice", {"seq_increasing", "history_tally"}),
    ("null key", {"pk_not_null"}),
    ("no schema version", {"schema_version"}),
    ("position outside the decoded range", {"seq_increasing"}),
    ("undecodable text", {"no_decode_errors"}),
    ("INCIDENT event", {"event_types_handled"}),
    ("unknown event type", {"event_types_handled"}),
])
def test_each_before_merge_gate_fails_on_a_batch_crafted_to_break_it(server, tmp_path, webhook, case, gates) -> None:
    """A decoded batch tampered with between the stages, as a bug or a bad intermediate file would: the gate
    that guards against it (and only the gates that must) fails, and nothing reaches the current table."""
    from binlake.lake import pipeline
    from binlake.quality import stages

    table = "craft_" + re.sub(r"\W", "_", case)
    first = server.binlog_files()[-1].name
    write(server, [f"CREATE TABLE {table} (id INT PRIMARY KEY, v VARCHAR(10))",
                   *[f"INSERT INTO {table} VALUES ({i}, 'v{i}')" for i in range(6)],
                   f"UPDATE {table} SET v = 'u' WHERE id < 3", f"DELETE FROM {table} WHERE id = 5"])
    lake = tmp_path / "lake"
    opts = options(lake, new_files(server, first), table, webhook)
    batch = pipeline.prepare_batch(opts)
    store = BatchStore(str(lake))
    pb = store.load(batch)
    n = pb.tables[f"{DB}.{table}"]["rows"]
    if case == "event decoded twice":
        _tamper_history(store, pb, lambda h: pa.concat_tables([h, h.slice(0, 1)]))
    elif case == "null key":
        _tamper_history(store, pb, lambda h: _set(h, "id", [None, *h.column("id").to_pylist()[1:]]))
    elif case == "no schema version":
        _tamper_history(store, pb, lambda h: _set(h, "_schema_version", [None] * n))
    elif case == "position outside the decoded range":
        _tamper_history(store, pb, lambda h: _set(h, "_pos", [p + 10**9 for p in h.column("_pos").to_pylist()]))
    elif case == "undecodable text":
        pb.conversions[f"undecodable_text:{DB}.{table}.v"] = 1
        store.save(pb)
    else:
        pb.event_types["INCIDENT" if case == "INCIDENT event" else "inner:type201"] = 1
        store.save(pb)
    with pytest.raises(GateFailed) as failed:
        stages.gate_before_merge(opts, batch)
    assert {f.gate for f in failed.value.failures} == gates
    assert not get_engine().exists(LakeLayout(str(lake)).current_path(DB, table))
    with pytest.raises(BatchQuarantined):
        pipeline.merge_batch(opts, batch)
    assert_quarantined(lake, batch, {}, sorted(gates)[0], webhook,
                       "(batch)" if gates == {"event_types_handled"} else table)  # a batch-wide check


def test_gates_switched_off_merge_without_results(server, tmp_path) -> None:
    first = server.binlog_files()[-1].name
    write(server, ["CREATE TABLE nogate (id INT PRIMARY KEY, v INT)", "INSERT INTO nogate VALUES (1, 1), (2, 2)"])
    lake = tmp_path / "lake"
    summary = run_ingest(options(lake, new_files(server, first), "nogate", enabled=False))
    assert summary.batch == 0 and not summary.gates and "gate before merge" not in summary.seconds
    assert without_meta(current(lake, "nogate")) == server_rows(server, "nogate")
    assert read_validations(get_engine(), str(lake)).num_rows == 0


def test_stale_snapshot_caught_by_a_user_expectation_then_discarded_and_decoded_again(server, tmp_path,
                                                                                       webhook) -> None:
    """MINIMAL row metadata and a stale snapshot that has two INT columns swapped: types cannot tell, the values
    land in the wrong columns, a user expectation notices. Releasing would merge the wrong values, so the batch is
    discarded, the snapshot fixed, and the next run decodes the same range again, once."""
    write(server, ["CREATE TABLE sw (id INT PRIMARY KEY, small INT, big INT)"])
    server.flush_logs()
    first = server.binlog_files()[-1].name
    write(server, [f"INSERT INTO sw VALUES ({i}, {i % 10}, {1000 + i})" for i in range(12)] +
          ["UPDATE sw SET small = 0 WHERE id < 3", "DELETE FROM sw WHERE id = 11"])
    files = new_files(server, first)
    schemas = tmp_path / "schemas"
    schemas.mkdir()
    (schemas / f"{DB}.sql").write_text("CREATE TABLE sw (id INT PRIMARY KEY, big INT, small INT);\n")  # stale
    rules = tmp_path / "rules.yml"
    rules.write_text(f"tables:\n  {DB}.sw:\n"
                     "    - expect_column_values_to_be_between: {column: small, min_value: 0, max_value: 9}\n")
    lake = tmp_path / "lake"
    opts = options(lake, files, "sw", webhook, expectations=str(rules))
    opts.schemas = str(schemas)
    with pytest.raises(GateFailed, match="small"):
        run_ingest(opts)
    assert history_ops(lake, "sw") == {"insert": 12, "update": 2, "delete": 1}  # the (wrong) batch's history

    assert main(["quarantine", "discard", "0", "--lake", str(lake)]) == 0
    assert history_ops(lake, "sw") == {}  # its append undone
    assert BatchStore(str(lake)).load(0).state == "discarded"
    (schemas / f"{DB}.sql").write_text("CREATE TABLE sw (id INT PRIMARY KEY, small INT, big INT);\n")  # fixed
    summary = run_ingest(opts)
    assert summary.batch == 1
    assert without_meta(current(lake, "sw")) == server_rows(server, "sw")
    assert history_ops(lake, "sw") == {"insert": 12, "update": 2, "delete": 1}  # once
    assert run_ingest(opts).batch is None
    assert main(["quarantine", "discard", "1", "--lake", str(lake)]) == 2  # published: refused


def test_a_batch_without_row_changes_passes_and_moves_the_watermark(server, tmp_path) -> None:
    first = server.binlog_files()[-1].name
    write(server, ["CREATE TABLE ddl_only (id INT PRIMARY KEY)", "ALTER TABLE ddl_only ADD COLUMN v INT"])
    files = new_files(server, first)
    lake = tmp_path / "lake"
    summary = run_ingest(options(lake, files, "ddl_only"))
    assert summary.batch == 0 and not summary.rows
    states = control_rows(lake)
    assert all(states[Path(f).name].end_pos == Path(f).stat().st_size for f in files)
    assert run_ingest(options(lake, files, "ddl_only")).batch is None


def test_bootstrap_refuses_while_a_batch_is_unpublished(server, tmp_path) -> None:
    """A bootstrap takes the next batch number from the control table; an unpublished batch has none there yet,
    so the two would share app-transaction versions."""
    from binlake.lake import pipeline
    from binlake.lake.bootstrap import BootstrapError, run_bootstrap

    first = server.binlog_files()[-1].name
    write(server, ["CREATE TABLE boot_wait (id INT PRIMARY KEY)", "INSERT INTO boot_wait VALUES (1)"])
    opts = options(tmp_path / "lake", new_files(server, first), "boot_wait")
    batch = pipeline.prepare_batch(opts)
    with pytest.raises(BootstrapError, match=f"batch {batch} of pipeline 'default' is still prepared"):
        run_bootstrap(server.uri, [(DB, "boot_wait")], str(tmp_path / "lake"))


def test_gates_run_on_spark_dataframes_with_delta_spark_and_a_failure_quarantines(server, tmp_path, spark,
                                                                                    webhook) -> None:
    """With the Spark executor and the delta-spark engine the decoded rows stay staged in the lake and the gates
    validate Spark DataFrames (Great Expectations' Spark execution engine and aggregates): a clean batch passes
    every check, a failing user expectation quarantines the next batch (current table untouched, its history
    kept), and released under a corrected rule it merges once."""
    from binlake.lake.engines.deltaspark import DeltaSparkEngine, available
    from binlake.spark import spark_executor

    ok, reason = available(spark)
    if not ok:
        skip_or_fail(f"delta-spark: {reason}")
    engine, executor = DeltaSparkEngine(spark), spark_executor(spark)
    first = server.binlog_files()[-1].name
    write(server, ["CREATE TABLE sgate (id INT PRIMARY KEY, amount INT, status VARCHAR(10))",
                   *[f"INSERT INTO sgate VALUES ({i}, {i * 3}, 'new')" for i in range(30)],
                   "UPDATE sgate SET status = 'paid' WHERE id < 8", "DELETE FROM sgate WHERE id >= 27",
                   "UPDATE sgate SET id = 100 WHERE id = 12"])
    lake = tmp_path / "lake"
    rules = tmp_path / "expectations.json"
    rules.write_text(json.dumps({"tables": {f"{DB}.sgate": [
        {"expect_column_values_to_be_between": {"column": "amount", "min_value": 0, "max_value": 100}},
        {"expect_column_values_to_be_in_set": {"column": "status", "value_set": ["new", "paid"]}}]}}))
    files = new_files(server, first)
    opts = options(lake, files, "sgate", webhook, max_lag_seconds=3600, expectations=str(rules))
    prepared = []

    def watching(tasks, batch, resolver, filters, stage=None):
        prepared.append(stage)
        return executor(tasks, batch, resolver, filters, stage)

    summary = run_ingest(opts, executor=watching, engine=engine)
    assert summary.batch == 0 and prepared
    assert without_meta(current(lake, "sgate")) == server_rows(server, "sgate")
    results = read_validations(get_engine(), str(lake)).to_pylist()
    assert results and all(r["success"] for r in results), [r for r in results if not r["success"]]
    gates = {(r["stage"], r["gate"]) for r in results}
    for gate in ("pk_not_null", "one_row_per_key", "seq_increasing", "schema_version", "history_tally",
                 "user:expect_column_values_to_be_between", "user:expect_column_values_to_be_in_set"):
        assert ("before merge", gate) in gates, gate
    for gate in ("pk_unique", "count_reconciles", "columns_match", "freshness"):
        assert ("after merge", gate) in gates, gate
    assert not (lake / "_binlake" / "staging" / "default" / "0").exists()  # dropped once published

    before_rows, before_control = current(lake, "sgate"), control_rows(lake)
    second = server.binlog_files()[-1].name
    write(server, ["INSERT INTO sgate VALUES (60, 5000, 'new')", "UPDATE sgate SET amount = 7 WHERE id = 1",
                   "DELETE FROM sgate WHERE id = 2"])
    files = files + [f for f in new_files(server, second) if f not in files]
    opts = options(lake, files, "sgate", webhook, max_lag_seconds=3600, expectations=str(rules))
    with pytest.raises(GateFailed) as failed:
        run_ingest(opts, executor=executor, engine=engine)
    assert failed.value.batch == 1 and "5000" in str(failed.value)
    pb = BatchStore(str(lake)).load(1)
    assert "staged" in pb.tables[f"{DB}.sgate"]  # the gate read staged rows: the Spark path
    assert current(lake, "sgate") == before_rows
    assert_quarantined(lake, 1, before_control, "user:expect_column_values_to_be_between", webhook, "sgate")
    during = history_ops(lake, "sgate")
    rules.write_text(json.dumps({"tables": {f"{DB}.sgate": [
        {"expect_column_values_to_be_between": {"column": "amount", "min_value": 0, "max_value": 10000}}]}}))
    release_batch(opts, 1)
    assert run_ingest(opts, executor=executor, engine=engine).batch == 1
    assert without_meta(current(lake, "sgate")) == server_rows(server, "sgate")
    assert history_ops(lake, "sgate") == during


def _tamper_pieces(store: BatchStore, pb, name: str, change) -> None:
    """Rewrite a staged table's pieces (as a bug would have written them): change(index, rows) -> rows."""
    import pyarrow.parquet as pq

    from binlake.lake import staging

    for i, piece in enumerate(pb.tables[name]["staged"]):
        path = staging.piece_location(store.stage(pb.batch), piece)
        pq.write_table(change(i, pq.read_table(path)), path)


@pytest.mark.parametrize("shape", ["int key", "text and int key"])
@pytest.mark.parametrize("case", ["clean", "null key", "event decoded twice", "user expectations fail"])
def test_a_staged_batch_is_gated_piece_by_piece_as_its_whole_history_would_be(server, tmp_path, monkeypatch, shape,
                                                                            case) -> None:
    """A staged table's before-merge checks read a piece at a time (the one-row-per-key check a bucket of keys
    at a time, the after-merge key check too): the same results, names to samples, as the history read whole."""
    from binlake.lake import decode_task, netbuckets, pipeline, staging
    from binlake.quality import gates, stages

    monkeypatch.setattr(decode_task, "KEEP_BYTES", 0)  # every range staged
    monkeypatch.setattr(staging, "_merge_inputs", {})  # merge inputs kept from decoding: this test's own
    monkeypatch.setattr(decode_task, "FLUSH_ROWS", 60)
    monkeypatch.setattr(netbuckets, "NET_BUCKET_ROWS", 40)
    table = "pw_" + re.sub(r"\W", "_", f"{shape}_{case}")
    key = "id" if shape == "int key" else "code, id"
    first = server.binlog_files()[-1].name
    write(server, [f"CREATE TABLE {table} (id INT, code VARCHAR(8), v INT, PRIMARY KEY ({key}))",
                   *[f"INSERT INTO {table} SELECT seq, CONCAT('c', seq % 7), seq FROM seq_{i * 50}_to_{i * 50 + 49}"
                     for i in range(4)],
                   f"UPDATE {table} SET v = v + 1000 WHERE id % 3 = 0", f"DELETE FROM {table} WHERE id % 5 = 0"])
    rules = tmp_path / "expectations.json"
    rules.write_text(json.dumps({"tables": {f"{DB}.{table}": [
        {"expect_column_values_to_be_between": {"column": "v", "min_value": 0,
                                                "max_value": 900 if case == "user expectations fail" else 10**6}},
        {"expect_column_values_to_be_unique": {"column": "code"}} if case == "user expectations fail" else
        {"expect_compound_columns_to_be_unique": {"column_list": ["id", "v"]}},
        {"expect_column_mean_to_be_between": {"column": "v", "max_value": 10 if case == "user expectations fail"
                                              else 10**6}}]}}))
    lake = tmp_path / "lake"
    opts = options(lake, new_files(server, first), table, expectations=str(rules))
    batch = pipeline.prepare_batch(opts)
    store = BatchStore(str(lake))
    pb = store.load(batch)
    name = f"{DB}.{table}"
    assert len(pb.tables[name]["staged"]) > 2
    if case == "null key":
        _tamper_pieces(store, pb, name, lambda i, h: _set(h, "id", [None, *h.column("id").to_pylist()[1:]])
                       if i in (1, 2) else h)
    elif case == "event decoded twice":  # a row again in its own piece, and a piece's first rows in the next one
        rows = {}
        _tamper_pieces(store, pb, name, lambda i, h: rows.setdefault(i, h))
        _tamper_pieces(store, pb, name, lambda i, h: pa.concat_tables(
            [h, h.slice(3, 1)] if i == 0 else [rows[i - 1].slice(0, 4), h] if i == 2 else [h]))
    monkeypatch.setattr(gates, "PIECEWISE", False)
    whole = gates.before_merge_gate(pb, store, opts)
    monkeypatch.setattr(gates, "PIECEWISE", True)
    pieces = gates.before_merge_gate(pb, store, opts)
    assert [r.gate for r in whole.results].count("user:expect_column_values_to_be_between") == 1
    assert pieces.results == whole.results
    assert whole.success is (case == "clean"), [r.line() for r in whole.failures]
    if case == "clean":  # and after the merge: the key check a bucket of keys at a time equals the whole one
        stages.gate_before_merge(opts, batch)
        pipeline.merge_batch(opts, batch)
        whole = stages.gate_after_merge(opts, batch)
        monkeypatch.setattr(gates, "PK_BUCKET_ROWS", 30)
        bucketed = stages.gate_after_merge(opts, batch)
        assert bucketed.results == whole.results and bucketed.success


@pytest.mark.parametrize("keys", [["id"], ["code", "id"]])
@pytest.mark.parametrize("repeats", [[], [3, 77, 150, 151, 420, 3, *range(10, 40)]])
@pytest.mark.parametrize("sample_size", [5, 50])
def test_pk_unique_a_bucket_of_keys_at_a_time_reports_as_the_whole_table(tmp_path, monkeypatch, keys, repeats,
                                                                         sample_size) -> None:
    """A large current table's key check runs a hash bucket of keys at a time: the same result as on the table
    read whole (success, unexpected count, the sample of the first repeated rows in table order)."""
    import datetime as dt

    from deltalake import write_deltalake

    from binlake.quality import gates

    ids = [*range(500), *repeats]
    ts = dt.datetime(2024, 1, 1, tzinfo=dt.UTC)
    table = pa.table({"id": pa.array(ids, pa.int32()), "code": [f"c{i % 7}" for i in ids],
                      "_commit_ts": pa.array([ts + dt.timedelta(seconds=i) for i in range(len(ids))],
                                             pa.timestamp("us", "UTC"))})
    path = str(tmp_path / "t")
    for at in range(0, table.num_rows, 120):  # several files
        write_deltalake(path, table.slice(at, 120), mode="append")
    engine, config = get_engine(), QualityConfig(sample_size=sample_size)
    whole = gates._pk_unique(engine, path, keys, [*keys, "_commit_ts"], "t", config)
    monkeypatch.setattr(gates, "PK_BUCKET_ROWS", 60)
    bucketed = gates._pk_unique(engine, path, keys, [*keys, "_commit_ts"], "t", config)
    assert bucketed == whole
    assert whole[0][0].success is not repeats and whole[1] == len(ids)
    assert len(whole[0][0].sample) == (min(sample_size, 20) if repeats else 0)
