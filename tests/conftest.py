"""Shared fixtures: private MariaDB servers, one Spark session per run, temp lakes, the fixture binlogs."""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import NoReturn

import pytest

from binlake.testing.kafka import PrivateKafka, unavailable_reason
from binlake.testing.mariadb import PrivateMariaDB, find_server_binary

PROJECT_ROOT = Path(__file__).resolve().parents[1]
SHARED_BINLOGS = PROJECT_ROOT.parent / "shared" / "fixtures" / "binlogs"


@pytest.fixture(scope="session")
def fixture_binlogs() -> Path:
    """The real binlog files in ../shared/fixtures/binlogs (read in place, never copied)."""
    if not (SHARED_BINLOGS / "MANIFEST.md").exists():
        pytest.skip(f"fixture binlogs not found at {SHARED_BINLOGS} (only present inside the workplace)")
    return SHARED_BINLOGS


class MariaDBServers:
    """Starts at most one private server per binlog_row_metadata mode, lazily, for the whole run."""

    def __init__(self, base: Path) -> None:
        self.base = base
        self.servers: dict[str, PrivateMariaDB] = {}

    def get(self, row_metadata: str = "FULL", extra_args: tuple[str, ...] = ()) -> PrivateMariaDB:
        """The server for a binlog_row_metadata mode (FULL, MINIMAL, NO_LOG), with extra server options if given
        (each distinct set of options is its own server)."""
        mode = row_metadata.upper()
        key = " ".join((mode, *extra_args))
        if key not in self.servers:
            name = "".join(c if c.isalnum() else "_" for c in key.lower())[:60]
            self.servers[key] = PrivateMariaDB.start(row_metadata=mode, base_dir=self.base / name,
                                                     extra_args=extra_args)
        return self.servers[key]

    def stop_all(self) -> None:
        for server in self.servers.values():
            server.stop()


@pytest.fixture(scope="session")
def mariadb_servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MariaDBServers]:
    if find_server_binary() is None:
        pytest.skip("no mariadbd/mysqld binary installed (apt-get install -y mariadb-server); .ci/run installs it")
    servers = MariaDBServers(tmp_path_factory.mktemp("mariadb"))
    yield servers
    servers.stop_all()


@pytest.fixture(scope="session")
def mariadb_full(mariadb_servers: MariaDBServers) -> PrivateMariaDB:
    """The private server writing binlog_row_metadata=FULL."""
    return mariadb_servers.get("FULL")


@pytest.fixture(scope="session")
def mariadb_minimal(mariadb_servers: MariaDBServers) -> PrivateMariaDB:
    """The private server writing binlog_row_metadata=MINIMAL."""
    return mariadb_servers.get("MINIMAL")


@pytest.fixture
def fresh_database(request: pytest.FixtureRequest) -> Callable[[PrivateMariaDB], str]:
    """Returns a function that creates an empty, uniquely named database on a server."""

    def make(server: PrivateMariaDB) -> str:
        name = "t_" + "".join(c if c.isalnum() else "_" for c in request.node.name)[:50].lower()
        with server.connect() as conn, conn.cursor() as cur:
            cur.execute(f"DROP DATABASE IF EXISTS `{name}`")
            cur.execute(f"CREATE DATABASE `{name}`")
        return name

    return make


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo) -> Iterator:
    """On a failing test that used a private server, attach the server's log to the report."""
    report = yield
    if report.when == "call" and report.failed:
        servers = item.funcargs.get("mariadb_servers") if hasattr(item, "funcargs") else None
        if servers is None and hasattr(item, "funcargs"):
            for value in item.funcargs.values():
                if isinstance(value, PrivateMariaDB):
                    report.sections.append(("mariadb server log", value.server_log()))
        elif servers is not None:
            for mode, server in servers.servers.items():
                report.sections.append((f"mariadb server log ({mode})", server.server_log()))
    return report


REQUIRE_DELTA_SPARK = "BINLAKE_REQUIRE_DELTA_SPARK"


def skip_or_fail(reason: str) -> NoReturn:
    """Skip a delta-spark test for a missing engine, or fail it where the engine must be there (CI sets
    BINLAKE_REQUIRE_DELTA_SPARK after fetching the jars)."""
    if os.environ.get(REQUIRE_DELTA_SPARK):
        pytest.fail(f"{reason} ({REQUIRE_DELTA_SPARK} is set: the delta-spark tests must run)", pytrace=False)
    pytest.skip(reason)


@pytest.fixture(scope="session")
def spark():
    """One local Spark session (local[2], UI off) shared by the whole run; it takes seconds to start. It has the
    Delta jars, extension and catalog when `scripts/dev.sh setup` fetched them (binlake/spark.py)."""
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from binlake.spark import build_spark_session

    session = build_spark_session(app_name="binlake-tests", master="local[2]")
    yield session
    session.stop()
    # py4j logs "Closing down clientserver connection" from __del__ at interpreter exit, after pytest closed
    # its capture streams: a traceback after the summary line, not a failure. Keep it quiet.
    for name in ("py4j", "py4j.clientserver", "py4j.java_gateway"):
        logging.getLogger(name).setLevel(logging.WARNING)


@pytest.fixture
def lake_dir(tmp_path: Path) -> Path:
    """An empty directory to hold a test's Delta lake."""
    path = tmp_path / "lake"
    path.mkdir()
    return path


REQUIRE_KAFKA = "BINLAKE_REQUIRE_KAFKA"


@pytest.fixture(scope="session")
def kafka_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PrivateKafka]:
    """One private single-node KRaft Kafka broker on loopback for the whole run (binlake/testing/kafka.py), run with
    Java from the jars `scripts/dev.sh setup` fetches; skipped without them, failed where they must be there (CI
    sets BINLAKE_REQUIRE_KAFKA)."""
    reason = unavailable_reason()
    if reason is not None:
        if os.environ.get(REQUIRE_KAFKA):
            pytest.fail(f"{reason} ({REQUIRE_KAFKA} is set: the Kafka tests must run)", pytrace=False)
        pytest.skip(reason)
    broker = PrivateKafka.start(base_dir=tmp_path_factory.mktemp("kafka"))
    yield broker
    broker.stop()
