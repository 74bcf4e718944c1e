"""binlake_ddl_snapshot: daily DDL snapshot of every tracked table, one mapped task per instance."""

from __future__ import annotations

from datetime import timedelta

from airflow.sdk import dag
from binlake_airflow.notifiers import BinlakeFailureNotifier
from binlake_airflow.tasks import snapshot_ddl

from binlake.config import load_config

CONFIG = load_config()


@dag(
    dag_id="binlake_ddl_snapshot",
    schedule="@daily",
    start_date=CONFIG.start_date,
    catchup=False,
    max_active_runs=1,
    tags=["binlake"],
    default_args={"retries": CONFIG.retries, "retry_delay": timedelta(minutes=CONFIG.retry_delay_minutes),
                  "on_failure_callback": BinlakeFailureNotifier(CONFIG.path)},
    doc_md=__doc__,
)
def binlake_ddl_snapshot():
    snapshot_ddl.partial(config=CONFIG.path).expand(instance=[i.name for i in CONFIG.instances])


binlake_ddl_snapshot()
