"""Validated settings shared by several layers: the gates' `QualityConfig` (carried by `IngestOptions.quality` in
the lake layer, run by `binlake.quality`), the alert channels (`AlertConfig`) and the base of every deployment
config model (`binlake.config`). Only pydantic here, so the lowest layer that carries them may import them.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, field_validator

NonEmpty = Annotated[str, StringConstraints(min_length=1)]


class ConfigModel(BaseModel):
    """Settings validated as given: unknown keys are errors and values are not coerced (no "5" for 5)."""

    model_config = ConfigDict(extra="forbid", strict=True)


class AlertConfig(ConfigModel):
    """Where alerts go besides the log line: an HTTP webhook (JSON POST) and/or email. The deployment config's
    `[alerts]` (Airflow: SMTP through `smtp_conn_id`, the webhook URL possibly in `webhook_conn_id`) and the
    command line's gates (`smtp_host`/`smtp_port`) share it."""

    webhook_url: str | None = None
    webhook_conn_id: str | None = None  # an Airflow Connection whose host/extra hold the URL (keeps tokens secret)
    email_to: list[NonEmpty] = Field(default_factory=list)
    email_from: str | None = None  # None: the SMTP connection's sender (Airflow), binlake@localhost (smtp_host)
    smtp_conn_id: str = "smtp_default"
    smtp_host: str | None = None  # SMTP server used directly (the command line's --smtp-host)
    smtp_port: int = 25
    sla_lag_minutes: int | None = 180  # alert when an instance's lake lags its interval end by more (0/None: off)
    timeout_seconds: float = Field(10.0, gt=0)  # webhook and SMTP timeout

    @field_validator("webhook_url")
    @classmethod
    def _http_url(cls, url: str | None) -> str | None:
        if url and not url.startswith(("http://", "https://")):
            raise ValueError(f"must be an http:// or https:// URL, not {url!r}")
        return url

    @field_validator("sla_lag_minutes")
    @classmethod
    def _sla(cls, minutes: int | None) -> int | None:
        if minutes is not None and minutes < 0:
            raise ValueError(f"must be 0 (off) or a positive number of minutes, not {minutes}")
        return minutes or None


class QualityConfig(ConfigModel):
    """Gate settings (`IngestOptions.quality`, the deployment config's `[quality]`). `max_lag_seconds` None disables
    the freshness expectation (a backfill of old binlogs would otherwise always fail it); `expectations` is the
    user expectations file (None: none)."""

    enabled: bool = True
    max_lag_seconds: float | None = Field(None, gt=0)
    expectations: str | None = None
    alerts: AlertConfig = Field(default_factory=AlertConfig)
    sample_size: int = Field(20, gt=0)  # failing values kept per expectation in results and alerts
