"""The deployment config: defaults, relative paths, table globs, and errors that name the file and the key."""

from __future__ import annotations

from pathlib import Path

import pytest

from binlake.config import ConfigError, load_config, parse_config

ROOT = Path(__file__).resolve().parents[2]
MINIMAL = 'lake = "lake"\nlanding = "landing"\n[[instances]]\nname = "a"\nsource = "local:binlogs"\n'


def top(line: str) -> str:
    """MINIMAL with a top-level key (before the [[instances]] table)."""
    return line + "\n" + MINIMAL


def write(tmp_path: Path, text: str, name: str = "binlake.toml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def test_example_config_loads() -> None:
    cfg = load_config(ROOT / "docs" / "binlake.example.toml")
    assert [i.name for i in cfg.instances] == ["orders", "billing"]
    orders = cfg.instance("orders")
    assert orders.tracks("shop.orders") and not orders.tracks("shop.tmp_1") and not orders.tracks("other.orders")
    assert cfg.instance("billing").tracks("billing.payments") and not cfg.instance("billing").tracks("billing.x")
    assert cfg.spark.mode == "local" and cfg.alerts.sla_lag_minutes == 180


def test_defaults_and_relative_paths(tmp_path: Path) -> None:
    cfg = load_config(write(tmp_path, MINIMAL))
    assert cfg.lake == str(tmp_path / "lake") and cfg.landing == str(tmp_path / "landing")
    assert cfg.schemas == str(tmp_path / "landing" / "_schemas")
    assert cfg.instances[0].source == f"local:{tmp_path / 'binlogs'}"
    assert cfg.instances[0].table_regex is None and cfg.instances[0].tracks("any.table")
    assert (cfg.engine, cfg.spark.mode, cfg.spark.master, cfg.retries, cfg.pool) == \
        ("delta-rs", "local", "local[*]", 2, None)
    assert cfg.quality.enabled and cfg.quality.max_lag_seconds is None and cfg.quality.sample_size == 20
    assert cfg.landing_dir("a", "h1") == str(tmp_path / "landing" / "a" / "h1")
    assert cfg.lookback_hours == 6 and cfg.alerts.sla_lag_minutes == 180
    assert load_config(write(tmp_path, MINIMAL + "[alerts]\nsla_lag_minutes = 0\n")).alerts.sla_lag_minutes is None


def test_yaml_config(tmp_path: Path) -> None:
    path = write(tmp_path, "lake: s3://bucket/lake\nlanding: /data/landing\nspark: {mode: submit, master: yarn}\n"
                           "instances:\n  - {name: x, source: 'rds:rm-1', tables: ['db.*']}\n", "binlake.yaml")
    cfg = load_config(path)
    assert cfg.lake == "s3://bucket/lake" and cfg.spark.mode == "submit" and cfg.instances[0].tables == ["db.*"]


@pytest.mark.parametrize(("text", "message"), [
    ('landing = "x"\n[[instances]]\nname = "a"\nsource = "local:x"\n', "`lake` is required"),
    (top('engine = "duckdb"'), "`engine` must be one of delta-rs, delta-spark"),
    (top("retries = true"), "`retries` must be an integer"),
    (top('colour = "blue"'), "`colour` is not a known key"),
    (MINIMAL + '[spark]\nmode = "yarn"\n', "`spark.mode` must be one of local, submit, in-process"),
    (MINIMAL + "[spark]\nconf = { a = [1] }\n", "`spark.conf.a` must be a string, number or boolean"),
    (MINIMAL + '[alerts]\nwebhook_url = "ftp://x"\n', "`alerts.webhook_url` must be an http:// or https:// URL"),
    (MINIMAL + "[alerts]\nsla_lag_minutes = -5\n", "`alerts.sla_lag_minutes` must be 0 (off) or a positive"),
    (top("lookback_hours = -1"), "`lookback_hours` must be 0 or more"),
    (top('helper_tables = ["_(gho"]'), "`helper_tables` '_(gho' is not a regular expression"),
    (MINIMAL + "[quality]\nfreshness = 3\n", "`quality.freshness` is not a known key"),
    (MINIMAL.replace('"local:binlogs"', '"ftp://x"'), "`instances[0].source` must start with one of"),
    (MINIMAL.replace('name = "a"', 'name = "a b"'), "`instances[0].name` must be letters"),
    (MINIMAL + '[[instances]]\nname = "a"\nsource = "local:y"\n', "`instances[1].name` 'a' is used twice"),
    (MINIMAL + '[[instances]]\nname = "b"\nsource = "local:y"\ntables = "db.*"\n',
     "`instances[1].tables` must be list"),
    (top('start_date = "yesterday"'), "`start_date` must be an ISO 8601 time"),
    ('lake = "l"\nlanding = "s3://b/x"\ninstances = []\n', "`landing` must be a local directory"),
    ('lake = "l"\nlanding = "x"\ninstances = []\n', "`instances` must list at least one instance"),
])
def test_errors_name_the_key(tmp_path: Path, text: str, message: str) -> None:
    path = write(tmp_path, text)
    with pytest.raises(ConfigError) as err:
        load_config(path)
    assert str(path) in str(err.value) and message in str(err.value)


def test_unreadable_and_invalid_files(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("BINLAKE_CONFIG", raising=False)
    with pytest.raises(ConfigError, match=r"set \$BINLAKE_CONFIG"):
        load_config()
    with pytest.raises(ConfigError, match="cannot read the deployment config"):
        load_config(tmp_path / "missing.toml")
    with pytest.raises(ConfigError, match="not valid TOML"):
        load_config(write(tmp_path, "lake = \n"))
    with pytest.raises(ConfigError, match="no instance named 'zz'"):
        parse_config({"lake": "l", "landing": "/x", "instances": [{"name": "a", "source": "local:/x"}]}).instance("zz")


@pytest.mark.parametrize(("text", "message"), [
    (top('retries = "5"'), "`retries` must be an integer, not str '5'"),  # values are not coerced
    (MINIMAL + "[quality]\nfreshness_lag_minutes = 0\n", "`quality.freshness_lag_minutes` must be a positive integer"),
    (MINIMAL + "[quality]\nsample_size = 0\n", "`quality.sample_size` must be a positive number"),
    (MINIMAL + "[quality.alerts]\nwebhook_url = \"http://x\"\n", "`quality.alerts` is not a known key"),
    (MINIMAL + "[quality]\nmax_lag_seconds = 60\n", "`quality.max_lag_seconds` is not a known key"),
    (MINIMAL + '[alerts]\nsmtp_host = "mail"\n', "`alerts.smtp_host` is not a known key"),
    (MINIMAL + '[alerts]\ntimeout_seconds = "x"\n', "`alerts.timeout_seconds` must be a number"),
    (MINIMAL + "[alerts]\nemail_to = [\"\"]\n", "`alerts.email_to` must be a list of non-empty strings"),
    (top("spark = 3"), "`spark` must be a table/mapping"),
    (MINIMAL + "source_options = [1]\n", "`instances[0].source_options` must be a table/mapping"),
    (top('lake = ""').replace('lake = "lake"\n', ""), "`lake` must not be empty"),
    # a source without its instance, bucket or directory failed only when the DAG ran
    (MINIMAL.replace('"local:binlogs"', '"rds:"'), "`instances[0].source` 'rds:' lacks an instance id"),
    (MINIMAL.replace('"local:binlogs"', '"oss:///"'), "`instances[0].source` 'oss:///' lacks a bucket"),
    (MINIMAL.replace('"local:binlogs"', '"local:"'), "`instances[0].source` 'local:' lacks a directory"),
])
def test_more_errors_name_the_key(tmp_path: Path, text: str, message: str) -> None:
    path = write(tmp_path, text)
    with pytest.raises(ConfigError) as err:
        load_config(path)
    assert str(err.value).startswith(f"{path}: ") and message in str(err.value)


def test_one_gate_and_alert_model_for_the_file_and_the_gates(tmp_path: Path) -> None:
    """The file's [quality]/[alerts] are the models the gates and alerts take (binlake.settings)."""
    from binlake.settings import AlertConfig, QualityConfig

    cfg = load_config(write(tmp_path, MINIMAL + '[quality]\nfreshness_lag_minutes = 7\nexpectations = "e.yml"\n'
                                      'sample_size = 5\n[alerts]\ntimeout_seconds = 3\nemail_to = ["a@b.c"]\n'
                                      '[spark]\nconf = { "x.y" = true, n = 4 }\n'))
    assert isinstance(cfg.quality, QualityConfig) and isinstance(cfg.alerts, AlertConfig)
    assert (cfg.quality.max_lag_seconds, cfg.quality.sample_size) == (420, 5)
    assert cfg.quality.expectations == str(tmp_path / "e.yml")
    assert cfg.quality.alerts == AlertConfig()  # the gates' own channel stays log-only under Airflow
    assert (cfg.alerts.timeout_seconds, cfg.alerts.email_to, cfg.alerts.email_from) == (3, ["a@b.c"], None)
    assert cfg.spark.conf == {"x.y": "true", "n": "4"}
    from binlake.orchestration.stages import quality_options

    assert quality_options(cfg) == cfg.quality and quality_options(cfg) is not cfg.quality
    # the command line's gates build the same models directly
    gates = QualityConfig(max_lag_seconds=30, alerts=AlertConfig(smtp_host="127.0.0.1", smtp_port=2525))
    assert gates.alerts.smtp_port == 2525 and gates.alerts.sla_lag_minutes == 180
