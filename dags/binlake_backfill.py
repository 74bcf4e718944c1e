"""binlake_backfill (manual): replay [start, end) of one instance in hourly chunks through the ingest's tasks.
Chunks are discovered and fetched one mapped task each; the lake stages then ingest what landed, once. An
overlap with ingested data changes nothing; a gap converges to the in-order result."""

from __future__ import annotations

from airflow.sdk import Param, dag
from binlake_airflow.notifiers import dag_defaults
from binlake_airflow.tasks import (
    discover,
    fetch,
    gate_after_merge,
    gate_before_merge,
    merge,
    plan_backfill,
    prepare,
    publish,
)

from binlake.config import load_config

CONFIG = load_config()
LAKE = {"pool": CONFIG.pool} if CONFIG.pool else {}


@dag(
    dag_id="binlake_backfill",
    schedule=None,
    start_date=CONFIG.start_date,
    catchup=False,
    max_active_runs=1,
    tags=["binlake"],
    params={
        "instance": Param(CONFIG.instances[0].name, type="string", enum=[i.name for i in CONFIG.instances],
                          description="instance to replay"),
        "start": Param("", type="string", description="UTC start, ISO 8601 (2026-01-01T00:00:00Z)"),
        "end": Param("", type="string", description="UTC end (exclusive), ISO 8601"),
        "tables": Param([], type="array", items={"type": "string"},
                        description="db.table names the backfill is about (checked against the tracked tables; "
                                    "files are ingested for every tracked table)"),
    },
    default_args=dag_defaults(CONFIG),
    doc_md=__doc__,
)
def binlake_backfill():
    chunks = plan_backfill(CONFIG.path)
    listed = discover.partial(config=CONFIG.path).expand(window=chunks)
    # One chunk at a time: fetching records new files in the lake's control table.
    landed = fetch.override(max_active_tis_per_dagrun=1).partial(config=CONFIG.path).expand(window=chunks)
    listed >> landed
    state = prepare.override(**LAKE)(CONFIG.path, landed)
    state = gate_before_merge.override(**LAKE)(CONFIG.path, state)
    state = merge.override(**LAKE)(CONFIG.path, state)
    state = gate_after_merge.override(**LAKE)(CONFIG.path, state)
    publish.override(**LAKE)(CONFIG.path, state)


binlake_backfill()
