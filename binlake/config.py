"""The deployment config: one file per deployment (TOML or YAML) naming the instances to track, where their
binlogs come from, where the landing area and the lake are, how Spark runs, the quality gates and the alerts.

Secrets never live here: the file names Airflow Connections (MySQL, Alibaba Cloud AK/SK, OSS) by id. Every key is
documented in docs/configuration.md. Loading validates everything and names the offending key in the error.
"""

from __future__ import annotations

import fnmatch
import os
import re
import tomllib
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

CONFIG_ENV = "BINLAKE_CONFIG"
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_\-]{0,62}$")
SPARK_MODES = ("local", "submit", "in-process")
ENGINES = ("delta-rs", "delta-spark")
SOURCE_KINDS = ("rds:", "oss://", "local:")


class ConfigError(ValueError):
    """The deployment config is missing, unreadable or invalid; the message names the file and the key."""


@dataclass
class InstanceConfig:
    name: str
    source: str  # rds:INSTANCE_ID | oss://bucket/prefix | local:DIR
    tables: list[str] = field(default_factory=list)  # db.table globs to track (empty: every table)
    exclude: list[str] = field(default_factory=list)
    mysql_conn_id: str | None = None  # Airflow Connection for the DDL snapshots
    aliyun_conn_id: str | None = None  # Airflow Connection holding the Alibaba Cloud AK/SK (rds: sources)
    oss_conn_id: str | None = None  # Airflow Connection holding the OSS AK/SK (oss:// sources)
    source_options: dict[str, Any] = field(default_factory=dict)  # passed to binlake.sources.open_source

    @property
    def table_regex(self) -> re.Pattern | None:
        """The include/exclude globs as one regular expression on db.table (None: every table)."""
        if not self.tables and not self.exclude:
            return None
        include = "|".join(fnmatch.translate(p) for p in self.tables) or r"(?s:.*)\Z"
        exclude = "|".join(fnmatch.translate(p) for p in self.exclude)
        return re.compile(f"^(?!{exclude})(?:{include})" if exclude else f"^(?:{include})")

    def tracks(self, qualified: str) -> bool:
        regex = self.table_regex
        return regex is None or regex.search(qualified) is not None


@dataclass
class SparkConfig:
    mode: str = "local"  # local: Spark job in a subprocess on local[*]; submit: spark-submit; in-process: no Spark
    master: str = "local[*]"
    spark_submit: str = "spark-submit"
    deploy_mode: str = "client"
    conf: dict[str, str] = field(default_factory=dict)
    submit_args: list[str] = field(default_factory=list)
    python: str | None = None  # interpreter of the job (default: the worker's)
    timeout_minutes: int = 120


@dataclass
class QualityConfig:
    enabled: bool = True
    freshness_lag_minutes: int | None = None  # gate: newest change of a batch older than this fails (None: off)
    expectations: str | None = None  # user expectation suites (file or directory)


@dataclass
class AlertConfig:
    webhook_url: str | None = None
    webhook_conn_id: str | None = None  # an Airflow Connection whose host/extra hold the URL (keeps tokens secret)
    email_to: list[str] = field(default_factory=list)
    email_from: str | None = None
    smtp_conn_id: str = "smtp_default"
    sla_lag_minutes: int | None = 180  # alert when an instance's lake lags its interval end by more (0/None: off)
    timeout_seconds: int = 10


@dataclass
class DeploymentConfig:
    path: str
    lake: str
    landing: str
    instances: list[InstanceConfig]
    schemas: str = ""
    engine: str = "delta-rs"
    pipeline: str = "default"
    start_date: datetime = datetime(2026, 1, 1, tzinfo=UTC)
    split_mb: int = 64
    lookback_hours: int = 6  # hourly runs also fetch files of the hours before (late backup uploads)
    pool: str | None = None  # Airflow pool (one slot) serializing lake writes across DAGs
    retries: int = 2
    retry_delay_minutes: int = 5
    spark: SparkConfig = field(default_factory=SparkConfig)
    quality: QualityConfig = field(default_factory=QualityConfig)
    alerts: AlertConfig = field(default_factory=AlertConfig)

    def instance(self, name: str) -> InstanceConfig:
        for inst in self.instances:
            if inst.name == name:
                return inst
        raise ConfigError(f"{self.path}: no instance named {name!r} (instances: "
                          f"{', '.join(i.name for i in self.instances)})")

    def landing_dir(self, instance: str, lineage: str = "default") -> str:
        """Where an instance's files of one host lineage land (primary and standby files share names)."""
        return os.path.join(self.landing, instance, lineage)


def config_path(path: str | os.PathLike | None = None) -> str:
    chosen = str(path) if path else os.environ.get(CONFIG_ENV)
    if not chosen:
        raise ConfigError(f"no deployment config: set ${CONFIG_ENV} to the path of the binlake config file")
    return chosen


def load_config(path: str | os.PathLike | None = None) -> DeploymentConfig:
    """Read and validate a deployment config (TOML, or YAML for .yaml/.yml); `path` defaults to $BINLAKE_CONFIG."""
    chosen = config_path(path)
    p = Path(chosen)
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"{chosen}: cannot read the deployment config ({exc.strerror})") from exc
    try:
        if p.suffix.lower() in (".yaml", ".yml"):
            import yaml

            raw = yaml.safe_load(text)
        else:
            raw = tomllib.loads(text)
    except Exception as exc:
        raise ConfigError(f"{chosen}: not valid {'YAML' if p.suffix.lower() in ('.yaml', '.yml') else 'TOML'}: "
                          f"{exc}") from exc
    return parse_config(raw, chosen)


class _Reader:
    """Takes keys out of one mapping, checking types; whatever is left at the end is an unknown key."""

    def __init__(self, data: Any, where: str, prefix: str) -> None:
        if not isinstance(data, dict):
            raise ConfigError(f"{where}: `{prefix or 'top level'}` must be a table/mapping")
        self.data, self.where, self.prefix = dict(data), where, prefix

    def key(self, name: str) -> str:
        return f"{self.prefix}.{name}" if self.prefix else name

    def fail(self, name: str, why: str) -> ConfigError:
        return ConfigError(f"{self.where}: `{self.key(name)}` {why}")

    def get(self, name: str, kind: type | tuple, default: Any = None, required: bool = False) -> Any:
        if name not in self.data or self.data[name] is None:
            self.data.pop(name, None)
            if required:
                raise self.fail(name, "is required")
            return default
        value = self.data.pop(name)
        if kind is int and isinstance(value, bool):
            raise self.fail(name, f"must be an integer, not {value!r}")
        if not isinstance(value, kind):
            names = "/".join(k.__name__ for k in (kind if isinstance(kind, tuple) else (kind,)))
            raise self.fail(name, f"must be {names}, not {type(value).__name__} {value!r}")
        return value

    def text(self, name: str, default: str | None = None, required: bool = False) -> str | None:
        value = self.get(name, str, default, required)
        if required and not value.strip():
            raise self.fail(name, "must not be empty")
        return value

    def strings(self, name: str) -> list[str]:
        value = self.get(name, list, [])
        if not all(isinstance(v, str) and v for v in value):
            raise self.fail(name, "must be a list of non-empty strings")
        return value

    def positive(self, name: str, default: int | None) -> int | None:
        value = self.get(name, int, default)
        if value is not None and value <= 0:
            raise self.fail(name, f"must be a positive integer, not {value}")
        return value

    def section(self, name: str) -> _Reader:
        return _Reader(self.get(name, dict, {}), self.where, self.key(name))

    def done(self) -> None:
        if self.data:
            raise self.fail(sorted(self.data)[0], "is not a known key (see docs/configuration.md)")


def _parse_time(r: _Reader, name: str, default: datetime) -> datetime:
    value = r.get(name, (str, datetime), None)
    if value is None:
        return default
    if isinstance(value, str):
        try:
            value = datetime.fromisoformat(value.replace("Z", "+00:00"))
        except ValueError as exc:
            raise r.fail(name, f"must be an ISO 8601 time such as 2026-01-01T00:00:00Z, not {value!r}") from exc
    return value if value.tzinfo else value.replace(tzinfo=UTC)


def _parse_instance(data: Any, where: str, index: int, base: str) -> InstanceConfig:
    r = _Reader(data, where, f"instances[{index}]")
    name = r.text("name", required=True)
    if not _NAME.match(name):
        raise r.fail("name", f"must be letters, digits, '_' or '-' (it names task groups and directories), "
                     f"not {name!r}")
    source = r.text("source", required=True)
    if not source.startswith(SOURCE_KINDS):
        raise r.fail("source", f"must start with one of {', '.join(SOURCE_KINDS)}, not {source!r}")
    if source.startswith("local:"):
        local = source[len("local:"):]
        source = "local:" + str((Path(base) / local).resolve() if not os.path.isabs(local) else local)
    inst = InstanceConfig(
        name=name, source=source, tables=r.strings("tables"), exclude=r.strings("exclude"),
        mysql_conn_id=r.text("mysql_conn_id"), aliyun_conn_id=r.text("aliyun_conn_id"),
        oss_conn_id=r.text("oss_conn_id"), source_options=r.get("source_options", dict, {}))
    r.done()
    return inst


def _resolve(base: str, path: str | None) -> str | None:
    """Relative local paths are relative to the config file; URIs (s3://, oss://) are kept as they are."""
    if path is None or "://" in path or os.path.isabs(path):
        return path
    return str((Path(base) / path).resolve())


def parse_config(raw: Any, where: str = "<config>") -> DeploymentConfig:
    """Validate a parsed config mapping; every error names the key."""
    base = str(Path(where).resolve().parent) if where != "<config>" else os.getcwd()
    r = _Reader(raw, where, "")
    lake = _resolve(base, r.text("lake", required=True))
    landing = _resolve(base, r.text("landing", required=True))
    if "://" in landing:
        raise r.fail("landing", "must be a local directory (the Spark job and the decoder read files from it)")
    schemas = _resolve(base, r.text("schemas")) or os.path.join(landing, "_schemas")
    engine = r.text("engine", "delta-rs")
    if engine not in ENGINES:
        raise r.fail("engine", f"must be one of {', '.join(ENGINES)}, not {engine!r}")
    pipeline = r.text("pipeline", "default")
    if not _NAME.match(pipeline):
        raise r.fail("pipeline", f"must be letters, digits, '_' or '-', not {pipeline!r}")
    start_date = _parse_time(r, "start_date", datetime(2026, 1, 1, tzinfo=UTC))
    split_mb = r.positive("split_mb", 64)
    lookback = r.get("lookback_hours", int, 6)
    if lookback < 0:
        raise r.fail("lookback_hours", f"must be 0 or more, not {lookback}")
    pool = r.text("pool")
    retries = r.get("retries", int, 2)
    if retries < 0:
        raise r.fail("retries", "must be 0 or more")
    retry_delay = r.positive("retry_delay_minutes", 5)

    s = r.section("spark")
    spark = SparkConfig(mode=s.text("mode", "local"), master=s.text("master", "local[*]"),
                        spark_submit=s.text("spark_submit", "spark-submit"),
                        deploy_mode=s.text("deploy_mode", "client"), conf=s.get("conf", dict, {}),
                        submit_args=s.strings("submit_args"), python=s.text("python"),
                        timeout_minutes=s.positive("timeout_minutes", 120))
    if spark.mode not in SPARK_MODES:
        raise s.fail("mode", f"must be one of {', '.join(SPARK_MODES)}, not {spark.mode!r}")
    if spark.deploy_mode not in ("client", "cluster"):
        raise s.fail("deploy_mode", f"must be client or cluster, not {spark.deploy_mode!r}")
    bad = [k for k, v in spark.conf.items() if not isinstance(v, (str, int, float, bool))]
    if bad:
        raise s.fail(f"conf.{bad[0]}", "must be a string, number or boolean")
    spark.conf = {k: str(v).lower() if isinstance(v, bool) else str(v) for k, v in spark.conf.items()}
    s.done()

    q = r.section("quality")
    quality = QualityConfig(enabled=q.get("enabled", bool, True),
                            freshness_lag_minutes=q.positive("freshness_lag_minutes", None),
                            expectations=_resolve(base, q.text("expectations")))
    q.done()

    a = r.section("alerts")
    alerts = AlertConfig(webhook_url=a.text("webhook_url"), webhook_conn_id=a.text("webhook_conn_id"),
                         email_to=a.strings("email_to"), email_from=a.text("email_from"),
                         smtp_conn_id=a.text("smtp_conn_id", "smtp_default"),
                         sla_lag_minutes=a.get("sla_lag_minutes", int, 180) or None,
                         timeout_seconds=a.positive("timeout_seconds", 10))
    if alerts.sla_lag_minutes is not None and alerts.sla_lag_minutes < 0:
        raise a.fail("sla_lag_minutes", f"must be 0 (off) or a positive number of minutes, not {alerts.sla_lag_minutes}")
    if alerts.webhook_url and not alerts.webhook_url.startswith(("http://", "https://")):
        raise a.fail("webhook_url", f"must be an http:// or https:// URL, not {alerts.webhook_url!r}")
    a.done()

    items = r.get("instances", list, None, required=True)
    if not items:
        raise r.fail("instances", "must list at least one instance")
    instances = [_parse_instance(item, where, i, base) for i, item in enumerate(items)]
    seen: set[str] = set()
    for i, inst in enumerate(instances):
        if inst.name in seen:
            raise ConfigError(f"{where}: `instances[{i}].name` {inst.name!r} is used twice")
        seen.add(inst.name)
    r.done()
    return DeploymentConfig(path=where, lake=lake, landing=landing, instances=instances, schemas=schemas,
                            engine=engine, pipeline=pipeline, start_date=start_date, split_mb=split_mb,
                            lookback_hours=lookback, pool=pool,
                            retries=retries, retry_delay_minutes=retry_delay, spark=spark, quality=quality,
                            alerts=alerts)
