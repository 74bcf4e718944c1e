"""Gate settings carried by `IngestOptions.quality`, and the user expectations file (`schemas/expectations.yml`).

The expectations file maps `db.table` to a list of Great Expectations expectations, each written as its GE name
(snake case, as in GE's gallery) plus its keyword arguments; see schemas/expectations.md:

    tables:
      shop.orders:
        - expect_column_values_to_be_between: {column: amount, min_value: 0, max_value: 100000}
        - expect_column_values_to_be_in_set: {column: status, value_set: [new, paid, shipped]}

They are applied in the before-merge gate to the batch's rows (the row after each insert/update; deletes are
left out, the deleted row is no longer data the table holds).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, field_validator

from .runner import ensure_context

NonEmpty = Annotated[str, StringConstraints(min_length=1)]


class ExpectationsFileError(ValueError):
    """The user expectations file is malformed (names the file and the entry)."""


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


@dataclass(frozen=True)
class UserExpectation:
    table: str
    name: str  # GE snake-case name, e.g. expect_column_values_to_be_between
    kwargs: dict[str, Any]


def load_expectations(path: str | None) -> dict[str, list[UserExpectation]]:
    """`db.table` -> the user's expectations for it. YAML (.yml/.yaml) or JSON; validated against GE."""
    if not path:
        return {}
    p = Path(path)
    if not p.exists():
        raise ExpectationsFileError(f"expectations file {p} does not exist")
    text = p.read_text()
    try:
        if p.suffix in (".yml", ".yaml"):
            from ruamel.yaml import YAML  # a Great Expectations dependency: present wherever gates run

            doc = YAML(typ="safe", pure=True).load(text) or {}
        else:
            doc = json.loads(text)
    except Exception as exc:
        kind = "YAML" if p.suffix in (".yml", ".yaml") else "JSON"
        raise ExpectationsFileError(f"{p}: not valid {kind}: {exc}") from None
    tables = doc.get("tables") if isinstance(doc, dict) else None
    if not isinstance(tables, dict):
        raise ExpectationsFileError(f"{p}: expected a top-level 'tables:' mapping of db.table to a list")
    out: dict[str, list[UserExpectation]] = {}
    for table, entries in tables.items():
        if "." not in str(table):
            raise ExpectationsFileError(f"{p}: table key {table!r} must be db.table")
        if not isinstance(entries, list):
            raise ExpectationsFileError(f"{p}: tables.{table} must be a list of expectations")
        for i, entry in enumerate(entries):
            where = f"{p}: tables.{table}[{i}]"
            if not isinstance(entry, dict) or len(entry) != 1:
                raise ExpectationsFileError(f"{where}: each entry is one 'expect_...: {{kwargs}}' mapping")
            (name, kwargs), = entry.items()
            if not isinstance(kwargs, dict):
                raise ExpectationsFileError(f"{where}: arguments of {name} must be a mapping")
            try:  # fail now, not at the first batch
                expectation_class(name, where)(**kwargs)
            except ExpectationsFileError:
                raise
            except Exception as exc:
                raise ExpectationsFileError(f"{where}: {name}: invalid arguments {kwargs}: {exc}") from None
            out.setdefault(str(table), []).append(UserExpectation(str(table), str(name), dict(kwargs)))
    return out


def expectation_class(name: str, where: str = "") -> type:
    """The GE expectation class for a snake-case name (expect_column_values_to_be_between)."""
    import great_expectations as gx

    ensure_context()
    camel = "".join(part.capitalize() for part in str(name).split("_"))
    cls = getattr(gx.expectations, camel, None)
    if not str(name).startswith("expect_") or cls is None:
        raise ExpectationsFileError(f"{where}: {name!r} is not a Great Expectations expectation")
    return cls
