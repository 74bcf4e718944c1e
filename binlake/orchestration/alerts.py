"""Alert contents for the orchestrated pipeline: task failures, gate failures and lag beyond the SLA.

Every alert names the instance, the table (when one is known), the interval and the reason. Delivery is the
Airflow notifiers' job (plugins/binlake_airflow/notifiers.py): a log line always, the webhook and email when
configured, through `binlake.quality.alerts.post_json`.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

KINDS = ("task_failed", "dq_gate_failed", "lag_beyond_sla", "table_held_back")


@dataclass
class PipelineAlert:
    kind: str  # one of KINDS
    instance: str | None
    interval: tuple[str | None, str | None]  # UTC ISO times [start, end)
    reason: str
    table: str | None = None
    dag_id: str | None = None
    task_id: str | None = None
    run_id: str | None = None
    try_number: int | None = None
    details: dict[str, Any] = field(default_factory=dict)

    @property
    def summary(self) -> str:
        where = f"instance {self.instance or '?'}" + (f", table {self.table}" if self.table else "")
        return f"binlake {self.kind.replace('_', ' ')}: {where}, interval {self.interval[0]} .. {self.interval[1]}: " \
            f"{self.reason}"

    def payload(self) -> dict[str, Any]:
        return {"event": f"binlake.{self.kind}", "summary": self.summary, **asdict(self)}


def held_alert(instance: str, interval: tuple[str | None, str | None], table: str, line: str,
               **context: Any) -> PipelineAlert:
    """A table held back by the batch (binlake.lake.holds): the others were published; release it after the fix."""
    return PipelineAlert("table_held_back", instance, interval,
                         f"{line}; every other table was published; fix the cause, then `binlake quarantine "
                         f"release {table}`", table=table, **context)


def lag_alert(instance: str, interval: tuple[str | None, str | None], lag_seconds: float, sla_minutes: int,
              newest: str | None, **context: Any) -> PipelineAlert:
    return PipelineAlert("lag_beyond_sla", instance, interval,
                         f"the lake is {lag_seconds / 60:.0f} min behind the interval end (newest change {newest}); "
                         f"the SLA is {sla_minutes} min", details={"lag_seconds": lag_seconds}, **context)
