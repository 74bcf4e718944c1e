"""binlake_ddl_snapshot: daily DDL snapshot of every tracked table, one mapped task per instance."""

from __future__ import annotations

from airflow.sdk import dag
from binlake_airflow.notifiers import dag_defaults
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
    default_args=dag_defaults(CONFIG),
    doc_md=__doc__,
)
def binlake_ddl_snapshot():
    snapshot_ddl.partial(config=CONFIG.path).expand(instance=[i.name for i in CONFIG.instances])


binlake_ddl_snapshot()
