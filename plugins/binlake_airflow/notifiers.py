"""Alert delivery through Airflow notifiers: a log line always, an HTTP webhook and email when configured.

`BinlakeFailureNotifier` is every binlake task's `on_failure_callback`: it turns the failed task's context into
an alert naming instance, table (for gate failures), interval and reason. `deliver` is also used directly by
the publish task for lag beyond the SLA. A broken channel is logged and never hides the failure itself.
"""

from __future__ import annotations

import html
import json
import logging
from datetime import timedelta
from typing import Any

from airflow.sdk import BaseHook, BaseNotifier

from binlake.config import AlertConfig, DeploymentConfig, load_config
from binlake.orchestration.alerts import PipelineAlert
from binlake.quality.alerts import post_json

log = logging.getLogger("binlake.alerts")


def webhook_url(cfg: AlertConfig) -> str | None:
    """The configured URL, or the one kept in an Airflow Connection (host with scheme, or extra `url`)."""
    if cfg.webhook_url:
        return cfg.webhook_url
    if not cfg.webhook_conn_id:
        return None
    conn = BaseHook.get_connection(cfg.webhook_conn_id)
    url = (conn.extra_dejson or {}).get("url")
    if url:
        return url
    host = conn.host or ""
    base = host if "://" in host else f"https://{host}"
    return base + (f":{conn.port}" if conn.port else "") + (f"/{conn.schema.lstrip('/')}" if conn.schema else "")


def deliver(cfg: AlertConfig, alert: PipelineAlert, context: dict[str, Any] | None = None) -> dict[str, str]:
    """Send `alert` on every configured channel; returns channel -> "sent" or the error text."""
    log.error("%s", alert.summary)
    outcome = {"log": "sent"}
    payload = alert.payload()
    try:
        url = webhook_url(cfg)
    except Exception as exc:
        url, outcome["webhook"] = None, f"failed: {exc}"
        log.error("alert webhook connection %s: %s", cfg.webhook_conn_id, exc)
    if url:
        try:
            status = post_json(url, payload, cfg.timeout_seconds)
            outcome["webhook"] = "sent" if 200 <= status < 300 else f"HTTP {status}"
        except Exception as exc:
            outcome["webhook"] = f"failed: {exc}"
            log.error("alert webhook failed: %s", exc)
    if cfg.email_to:
        try:
            from airflow.providers.smtp.notifications.smtp import SmtpNotifier

            body = "<pre>" + html.escape(json.dumps(payload, indent=2, default=str)) + "</pre>"
            SmtpNotifier(to=cfg.email_to, from_email=cfg.email_from, subject=alert.summary[:200],
                         html_content=body, smtp_conn_id=cfg.smtp_conn_id).notify(dict(context or {}))
            outcome["email"] = "sent"
        except Exception as exc:
            outcome["email"] = f"failed: {exc}"
            log.error("alert email failed: %s", exc)
    return outcome


def _iso(value: Any) -> str | None:
    return value.isoformat() if hasattr(value, "isoformat") else (str(value) if value is not None else None)


def task_context(context: dict[str, Any]) -> dict[str, Any]:
    """dag_id, task_id, run_id and try number of the task a context belongs to."""
    ti = context.get("ti") or context.get("task_instance")
    return {"dag_id": getattr(ti, "dag_id", None), "task_id": getattr(ti, "task_id", None),
            "run_id": getattr(ti, "run_id", None), "try_number": getattr(ti, "try_number", None)}


def instance_of(context: dict[str, Any]) -> str | None:
    """The instance a task works on: the backfill's param, else its task group (named after the instance)."""
    params = context.get("params") or {}
    if params.get("instance"):
        return str(params["instance"])
    task_id = task_context(context)["task_id"] or ""
    return task_id.split(".", 1)[0] if "." in task_id else None


def interval_of(context: dict[str, Any]) -> tuple[str | None, str | None]:
    params = context.get("params") or {}
    if params.get("start") and params.get("end"):
        return str(params["start"]), str(params["end"])
    return _iso(context.get("data_interval_start")), _iso(context.get("data_interval_end"))


def alert_from_context(context: dict[str, Any]) -> PipelineAlert:
    exc = context.get("exception")
    gate = getattr(exc, "kind", "") == "GateFailed" or type(exc).__name__ in ("GateFailed", "GateFailedError")
    details: dict[str, Any] = {}
    if getattr(exc, "batch", None) is not None:
        details["batch"] = exc.batch
    if getattr(exc, "failures", None):
        details["failures"] = exc.failures
    return PipelineAlert("dq_gate_failed" if gate else "task_failed", instance_of(context), interval_of(context),
                         f"{type(exc).__name__}: {exc}" if exc is not None else "task failed",
                         table=getattr(exc, "table", None), details=details, **task_context(context))


class BinlakeFailureNotifier(BaseNotifier):
    """on_failure_callback of every binlake task: log line, webhook and email as the deployment config says."""

    def __init__(self, config_path: str) -> None:
        super().__init__()
        self.config_path = config_path

    def notify(self, context: dict[str, Any]) -> None:
        deliver(load_config(self.config_path).alerts, alert_from_context(context), context)


def dag_defaults(cfg: DeploymentConfig) -> dict[str, Any]:
    """`default_args` of every binlake DAG: the config's retries and retry delay, this notifier on failure."""
    return {"retries": cfg.retries, "retry_delay": timedelta(minutes=cfg.retry_delay_minutes),
            "on_failure_callback": BinlakeFailureNotifier(cfg.path)}
