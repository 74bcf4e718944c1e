"""binlake_ingest: every hour, for each instance in turn: discover -> fetch -> prepare (decode + history) ->
gate -> merge -> gate -> publish over the run's data interval. One Asset event per current table that changed."""

from __future__ import annotations

from airflow.sdk import CronDataIntervalTimetable, chain, dag
from binlake_airflow.notifiers import dag_defaults
from binlake_airflow.tasks import ingest_chain

from binlake.config import load_config

CONFIG = load_config()


@dag(
    dag_id="binlake_ingest",
    schedule=CronDataIntervalTimetable("0 * * * *", timezone="UTC"),
    start_date=CONFIG.start_date,
    catchup=True,
    max_active_runs=1,
    tags=["binlake"],
    default_args=dag_defaults(CONFIG),
    doc_md=__doc__,
)
def binlake_ingest():
    # Instances one after the other: they share the lake's control table.
    chain(*[ingest_chain(CONFIG, inst.name) for inst in CONFIG.instances])


binlake_ingest()
