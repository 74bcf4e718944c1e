"""The deployment config: one file per deployment (TOML or YAML) naming the instances to track, where their
binlogs come from, where the landing area and the lake are, how Spark runs, the quality gates and the alerts.

Secrets never live here: the file names Airflow Connections (MySQL, Alibaba Cloud AK/SK, OSS) by id. Every key is
documented in docs/configuration.md. Loading validates everything (pydantic models) and names the file and the
offending key in the error.
"""

from __future__ import annotations

import fnmatch
import os
import re
import tomllib
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from pydantic import Field, ValidationError, ValidationInfo, field_validator, model_validator

from .settings import AlertConfig, ConfigModel, NonEmpty, QualityConfig

__all__ = ["AlertConfig", "ConfigError", "DeploymentConfig", "InstanceConfig", "KafkaSinkConfig", "QualityConfig",
           "SinkConfig", "SparkConfig",
           "config_path", "load_config", "parse_config"]

CONFIG_ENV = "BINLAKE_CONFIG"
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_\-]{0,62}$")
SPARK_MODES = ("local", "submit", "in-process")
ENGINES = ("delta-rs", "delta-spark")
SOURCE_KINDS = ("rds:", "oss://", "local:")
# Keys of the shared gate/alert models that the deployment file does not take: under Airflow the gates' own alerts
# stay log-only (the task notifiers deliver them through [alerts]) and email goes through `smtp_conn_id`.
_NOT_IN_FILE = {"quality": ("alerts", "max_lag_seconds"), "alerts": ("smtp_host", "smtp_port")}


class ConfigError(ValueError):
    """The deployment config is missing, unreadable or invalid; the message names the file and the key."""


class KeyProblem(ValueError):
    """A validator's complaint about a key below the one it validates (`sub`: the rest of the path)."""

    def __init__(self, sub: tuple, message: str) -> None:
        super().__init__(message)
        self.sub = sub


def _base(info: ValidationInfo) -> str:
    return (info.context or {}).get("base") or os.getcwd()


def _resolve(base: str, path: str | None) -> str | None:
    """Relative local paths are relative to the config file; URIs (s3://, oss://) are kept as they are."""
    if path is None or "://" in path or os.path.isabs(path):
        return path
    return str((Path(base) / path).resolve())


def _one_of(value: str, choices: tuple[str, ...]) -> str:
    if value not in choices:
        raise ValueError(f"must be one of {', '.join(choices)}, not {value!r}")
    return value


class InstanceConfig(ConfigModel):
    name: str
    source: str  # rds:INSTANCE_ID | oss://bucket/prefix | local:DIR
    tables: list[NonEmpty] = Field(default_factory=list)  # db.table globs to track (empty: every table)
    exclude: list[NonEmpty] = Field(default_factory=list)
    mysql_conn_id: str | None = None  # Airflow Connection for the DDL snapshots
    aliyun_conn_id: str | None = None  # Airflow Connection holding the Alibaba Cloud AK/SK (rds: sources)
    oss_conn_id: str | None = None  # Airflow Connection holding the OSS AK/SK (oss:// sources)
    source_options: dict[str, Any] = Field(default_factory=dict)  # passed to binlake.sources.open_source

    @field_validator("name")
    @classmethod
    def _name(cls, name: str) -> str:
        if not _NAME.match(name):
            raise ValueError(f"must be letters, digits, '_' or '-' (it names task groups and directories), "
                             f"not {name!r}")
        return name

    @field_validator("source")
    @classmethod
    def _source(cls, source: str, info: ValidationInfo) -> str:
        if not source.startswith(SOURCE_KINDS):
            raise ValueError(f"must start with one of {', '.join(SOURCE_KINDS)}, not {source!r}")
        kind = next(k for k in SOURCE_KINDS if source.startswith(k))
        if not source[len(kind):].strip("/ "):  # checked here, not first when the DAG runs
            what = {"rds:": "an instance id", "oss://": "a bucket"}.get(kind, "a directory or glob")
            raise ValueError(f"{source!r} lacks {what}")
        if source.startswith("local:"):
            source = "local:" + _resolve(_base(info), source[len("local:"):])
        return source

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


class SparkConfig(ConfigModel):
    mode: str = "local"  # local: Spark job in a subprocess on local[*]; submit: spark-submit; in-process: no Spark
    master: str = "local[*]"
    spark_submit: str = "spark-submit"
    deploy_mode: str = "client"
    conf: dict[str, Any] = Field(default_factory=dict)
    submit_args: list[NonEmpty] = Field(default_factory=list)
    python: str | None = None  # interpreter of the job (default: the worker's)
    timeout_minutes: int = Field(120, gt=0)

    @field_validator("mode")
    @classmethod
    def _mode(cls, mode: str) -> str:
        return _one_of(mode, SPARK_MODES)

    @field_validator("deploy_mode")
    @classmethod
    def _deploy_mode(cls, mode: str) -> str:
        if mode not in ("client", "cluster"):
            raise ValueError(f"must be client or cluster, not {mode!r}")
        return mode

    @field_validator("conf")
    @classmethod
    def _conf(cls, conf: dict[str, Any]) -> dict[str, str]:
        for k, v in conf.items():
            if not isinstance(v, (str, int, float, bool)):
                raise KeyProblem((k,), "must be a string, number or boolean")
        return {k: str(v).lower() if isinstance(v, bool) else str(v) for k, v in conf.items()}


_TOPIC_PREFIX = re.compile(r"^[A-Za-z0-9._-]+$")


class KafkaSinkConfig(ConfigModel):
    """`[sink.kafka]`: publish every instance's changes to Kafka beside the lake (binlake.sinks.kafka,
    docs/kafka.md). The ingest DAG runs it after fetch, one transactional publisher per instance."""

    bootstrap_servers: NonEmpty  # host:port[,host:port...]
    topic_prefix: NonEmpty  # topics are PREFIX.db.table, PREFIX.schema-changes, PREFIX.binlake-offsets
    tombstones: bool = True  # a tombstone (key, null) after each delete, for compacted topics
    partitions: int = Field(3, gt=0)  # partitions of the table topics binlake creates
    replication_factor: int = Field(-1, ge=-1)  # of the topics binlake creates; -1: the broker's default
    batch_mb: int = Field(16, gt=0)  # one Kafka transaction per range of about this many binlog bytes
    producer: dict[str, Any] = Field(default_factory=dict)  # extra librdkafka settings (security, client.id...)

    @field_validator("topic_prefix")
    @classmethod
    def _prefix(cls, prefix: str) -> str:
        if not _TOPIC_PREFIX.match(prefix):
            raise ValueError(f"must be letters, digits, '.', '_' or '-' (a Kafka topic name part), not {prefix!r}")
        return prefix

    @field_validator("producer")
    @classmethod
    def _producer(cls, conf: dict[str, Any]) -> dict[str, Any]:
        for k, v in conf.items():
            if not isinstance(v, (str, int, float, bool)):
                raise KeyProblem((k,), "must be a string, number or boolean")
        return conf


class SinkConfig(ConfigModel):
    """`[sink]`: where changes go besides the lake."""

    kafka: KafkaSinkConfig | None = None


class DeploymentConfig(ConfigModel):
    path: str = "<config>"  # the file it was read from (not a key of the file)
    lake: NonEmpty
    landing: NonEmpty
    instances: list[InstanceConfig]
    schemas: str = ""  # default: LANDING/_schemas
    engine: str = "delta-rs"
    pipeline: str = "default"
    start_date: datetime = datetime(2026, 1, 1, tzinfo=UTC)
    split_mb: int = Field(64, gt=0)
    # Online-schema-change helper tables (regexes on the table name); None: gh-ost's and pt-osc's own names
    helper_tables: list[str] | None = None
    lookback_hours: int = Field(6, ge=0)  # hourly runs also fetch files of the hours before (late backup uploads)
    pool: str | None = None  # Airflow pool (one slot) serializing lake writes across DAGs
    retries: int = Field(2, ge=0)
    retry_delay_minutes: int = Field(5, gt=0)
    spark: SparkConfig = Field(default_factory=SparkConfig)
    quality: QualityConfig = Field(default_factory=QualityConfig)
    alerts: AlertConfig = Field(default_factory=AlertConfig)
    sink: SinkConfig = Field(default_factory=SinkConfig)

    @field_validator("helper_tables")
    @classmethod
    def _helper_patterns(cls, value: list[str] | None) -> list[str] | None:
        for pattern in value or []:
            try:
                re.compile(pattern)
            except re.error as exc:
                raise ValueError(f"{pattern!r} is not a regular expression: {exc}") from None
        return value

    @model_validator(mode="before")
    @classmethod
    def _file_keys(cls, data: Any) -> Any:
        """The file's [quality] takes `freshness_lag_minutes` (the gates' `max_lag_seconds`); keys of the shared
        models that the file does not take are unknown keys."""
        if not isinstance(data, dict):
            return data
        data = dict(data)
        for section, keys in _NOT_IN_FILE.items():
            given = data.get(section)
            if isinstance(given, dict) and any(k in given for k in keys):
                bad = next(k for k in keys if k in given)
                raise KeyProblem((section, bad), "is not a known key (see docs/configuration.md)")
        quality = data.get("quality")
        if isinstance(quality, dict) and "freshness_lag_minutes" in quality:
            quality = dict(quality)
            minutes = quality.pop("freshness_lag_minutes")
            if minutes is not None:
                if isinstance(minutes, bool) or not isinstance(minutes, int) or minutes <= 0:
                    raise KeyProblem(("quality", "freshness_lag_minutes"),
                                     f"must be a positive integer, not {minutes!r}")
                quality["max_lag_seconds"] = float(minutes * 60)
            data["quality"] = quality
        return data

    @field_validator("lake", "landing", "schemas")
    @classmethod
    def _paths(cls, path: str, info: ValidationInfo) -> str:
        if info.field_name == "landing" and "://" in path:
            raise ValueError("must be a local directory (the Spark job and the decoder read files from it)")
        return _resolve(_base(info), path) if path else path

    @field_validator("quality")
    @classmethod
    def _expectations(cls, quality: QualityConfig, info: ValidationInfo) -> QualityConfig:
        return quality.model_copy(update={"expectations": _resolve(_base(info), quality.expectations)})

    @field_validator("engine")
    @classmethod
    def _engine(cls, engine: str) -> str:
        return _one_of(engine, ENGINES)

    @field_validator("pipeline")
    @classmethod
    def _pipeline(cls, pipeline: str) -> str:
        if not _NAME.match(pipeline):
            raise ValueError(f"must be letters, digits, '_' or '-', not {pipeline!r}")
        return pipeline

    @field_validator("start_date", mode="before")
    @classmethod
    def _start_date(cls, value: Any) -> Any:
        if isinstance(value, str):
            try:
                value = datetime.fromisoformat(value.replace("Z", "+00:00"))
            except ValueError:
                raise ValueError(f"must be an ISO 8601 time such as 2026-01-01T00:00:00Z, not {value!r}") from None
        if isinstance(value, datetime) and value.tzinfo is None:
            value = value.replace(tzinfo=UTC)
        return value

    @field_validator("instances")
    @classmethod
    def _instances(cls, instances: list[InstanceConfig]) -> list[InstanceConfig]:
        if not instances:
            raise ValueError("must list at least one instance")
        seen: set[str] = set()
        for i, inst in enumerate(instances):
            if inst.name in seen:
                raise KeyProblem((i, "name"), f"{inst.name!r} is used twice")
            seen.add(inst.name)
        return instances

    @model_validator(mode="after")
    def _default_schemas(self) -> DeploymentConfig:
        if not self.schemas:
            self.schemas = os.path.join(self.landing, "_schemas")
        return self

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
            import yaml  # PyYAML: only for YAML configs (it comes with Airflow; TOML needs nothing)

            raw = yaml.safe_load(text)
        else:
            raw = tomllib.loads(text)
    except Exception as exc:
        raise ConfigError(f"{chosen}: not valid {'YAML' if p.suffix.lower() in ('.yaml', '.yml') else 'TOML'}: "
                          f"{exc}") from exc
    return parse_config(raw, chosen)


def _key(loc: tuple) -> str:
    """("instances", 1, "tables") -> instances[1].tables"""
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


_TYPE_NAMES = {"string_type": "str", "int_type": "an integer", "bool_type": "bool", "list_type": "list",
               "float_type": "a number", "dict_type": "a table/mapping", "model_type": "a table/mapping", "datetime_type": "an ISO 8601 time"}


def _problem(error: dict) -> tuple[str, str]:
    """One pydantic error as (key, what is wrong with it)."""
    loc, kind, ctx = tuple(error["loc"]), error["type"], error.get("ctx") or {}
    value = error.get("input")
    if kind == "value_error" and isinstance(ctx.get("error"), KeyProblem):
        return _key(loc + ctx["error"].sub), str(ctx["error"])
    if kind == "value_error":
        return _key(loc), str(ctx.get("error", error["msg"]))
    if kind == "missing":
        return _key(loc), "is required"
    if kind == "extra_forbidden":
        return _key(loc), "is not a known key (see docs/configuration.md)"
    if loc and isinstance(loc[-1], int) and kind in ("string_type", "string_too_short"):
        return _key(loc[:-1]), "must be a list of non-empty strings"
    if kind == "string_too_short":
        return _key(loc), "must not be empty"
    if kind == "greater_than":
        return _key(loc), f"must be a positive number, not {value!r}"
    if kind == "greater_than_equal":
        return _key(loc), f"must be 0 or more, not {value!r}"
    if kind in _TYPE_NAMES:
        return _key(loc), f"must be {_TYPE_NAMES[kind]}, not {type(value).__name__} {value!r}"
    return _key(loc), error["msg"]


def parse_config(raw: Any, where: str = "<config>") -> DeploymentConfig:
    """Validate a parsed config mapping; the error names the file and the key."""
    if not isinstance(raw, dict):
        raise ConfigError(f"{where}: `top level` must be a table/mapping")
    if "path" in raw:
        raise ConfigError(f"{where}: `path` is not a known key (see docs/configuration.md)")
    base = str(Path(where).resolve().parent) if where != "<config>" else os.getcwd()
    try:
        return DeploymentConfig.model_validate({**raw, "path": where}, context={"base": base})
    except ValidationError as exc:
        error = exc.errors(include_url=False)[0]
        key, why = _problem(error)
        raise ConfigError(f"{where}: `{key or 'top level'}` {why}") from None
    except KeyProblem as exc:  # raised by a before-validator of the whole file
        raise ConfigError(f"{where}: `{_key(exc.sub)}` {exc}") from None
