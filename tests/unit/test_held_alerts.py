"""Tables held back by a published batch reach the alert channels from the Airflow publish task: one alert each,
naming instance, table, interval and the one-line cause, delivered to a real local webhook."""

from __future__ import annotations

import json
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import SimpleNamespace

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def receiver():
    got: list[dict] = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            got.append(json.loads(self.rfile.read(int(self.headers["Content-Length"]))))
            self.send_response(200)
            self.end_headers()

        def log_message(self, *args) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}/hook", got
    server.shutdown()
    server.server_close()


def test_each_held_back_table_is_alerted_and_the_task_succeeds(monkeypatch, receiver) -> None:
    pytest.importorskip("airflow.sdk", reason="Airflow is not installed")
    monkeypatch.syspath_prepend(str(ROOT / "plugins"))
    sys.modules.pop("binlake_airflow.tasks", None)
    from binlake_airflow import tasks

    from binlake.settings import AlertConfig

    url, got = receiver
    ctx = {"params": {"start": "2026-03-01T00:00:00+00:00", "end": "2026-03-01T01:00:00+00:00"},
           "ti": SimpleNamespace(dag_id="binlake_ingest", task_id="publish", run_id="r1", try_number=1)}
    monkeypatch.setattr(tasks, "get_current_context", lambda: ctx)
    cfg = SimpleNamespace(alerts=AlertConfig(webhook_url=url))
    held = {"shop.bad": "shop.bad: held back at mysql-bin.000007:4711: SchemaMismatch: column 3 ...",
            "shop.worse": "shop.worse: held back at mysql-bin.000007:9000: UnreadableTableMap: ..."}
    tasks.alert_held(cfg, "orders", held)
    assert sorted(a["table"] for a in got) == ["shop.bad", "shop.worse"]
    for alert in got:
        assert alert["event"] == "binlake.table_held_back" and alert["instance"] == "orders"
        assert alert["interval"] == [ctx["params"]["start"], ctx["params"]["end"]]
        assert held[alert["table"]] in alert["reason"] and f"quarantine release {alert['table']}" in alert["reason"]
        assert alert["task_id"] == "publish"
