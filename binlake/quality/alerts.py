"""Alerts on gate failures: always a log line; optionally an HTTP webhook (JSON POST) and an email (smtplib).

A delivery failure of an optional channel is logged and reported in the return value, never raised: the gate
failure itself is what the run reports, and it must not be masked by a broken webhook.
"""

from __future__ import annotations

import json
import logging
import smtplib
import urllib.request
from dataclasses import asdict, dataclass, field
from email.message import EmailMessage

from ..settings import AlertConfig

log = logging.getLogger("binlake.alerts")


@dataclass
class Alert:
    table: str
    batch: int
    stage: str  # "before merge" | "after merge"
    failures: list[dict] = field(default_factory=list)  # expectation, column, details
    lake: str = ""
    pipeline: str = "default"
    report: str | None = None  # the batch's HTML page of gate results

    @property
    def summary(self) -> str:
        names = ", ".join(sorted({f["expectation"] for f in self.failures}))
        return f"binlake gate failed: table {self.table}, batch {self.batch}, {self.stage}: {names}"

    def payload(self) -> dict:
        return {"event": "binlake.gate_failed", "summary": self.summary, **asdict(self)}


def post_json(url: str, payload: dict, timeout: float) -> int:
    """POST the payload as JSON; returns the HTTP status (raises on connection errors and HTTP errors). The
    webhook call of every binlake alert (gates here, the Airflow notifiers)."""
    body = json.dumps(payload, default=str).encode()
    req = urllib.request.Request(url, data=body, method="POST", headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=timeout) as resp:
        return resp.status


def send_alert(config: AlertConfig | None, alert: Alert) -> dict[str, str]:
    """Deliver `alert` on every configured channel; returns channel -> "sent" or the error text."""
    config = config or AlertConfig()
    log.error("%s (lake %s)", alert.summary, alert.lake)
    outcome = {"log": "sent"}
    if config.webhook_url:
        try:
            status = post_json(config.webhook_url, alert.payload(), config.timeout_seconds)
            outcome["webhook"] = "sent" if 200 <= status < 300 else f"HTTP {status}"
        except Exception as exc:
            outcome["webhook"] = f"failed: {exc}"
            log.error("alert webhook %s failed: %s", config.webhook_url, exc)
    if config.email_to and config.smtp_host:
        try:
            msg = EmailMessage()
            msg["Subject"], msg["To"] = alert.summary, ", ".join(config.email_to)
            msg["From"] = config.email_from or "binlake@localhost"
            msg.set_content(json.dumps(alert.payload(), indent=2, default=str))
            with smtplib.SMTP(config.smtp_host, config.smtp_port, timeout=config.timeout_seconds) as smtp:
                smtp.send_message(msg)
            outcome["email"] = "sent"
        except Exception as exc:
            outcome["email"] = f"failed: {exc}"
            log.error("alert email via %s failed: %s", config.smtp_host, exc)
    return outcome
