"""A private single-node Apache Kafka broker (KRaft, combined broker + controller) in a temp directory.

Run with Java from the Kafka jars `scripts/dev.sh setup` fetches from Maven Central into `.venv/jars/kafka`
(scripts/maven/kafka-pom.xml; $BINLAKE_KAFKA_JARS overrides the folder). The storage directory is formatted with
`kafka.tools.StorageTool format` (what `kafka-storage.sh format` runs), then `kafka.Kafka` serves a generated
server.properties on two free loopback ports (client and controller), with every internal topic (offsets,
transaction state) at replication 1 so that transactions work on one broker. `stop()` ends it and removes the
directory. Used by the tests (a pytest fixture), the Kafka benchmark and the Redis consumer example's test.
"""

from __future__ import annotations

import base64
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from confluent_kafka import Consumer, KafkaError, TopicPartition
from confluent_kafka.admin import AdminClient

from .processes import free_port, stop_server

KAFKA_JARS_ENV = "BINLAKE_KAFKA_JARS"
SETUP_COMMAND = "scripts/dev.sh setup"


class KafkaUnavailable(RuntimeError):
    """No Java or no Kafka jars on this machine: the message says what to install."""


class BrokerError(RuntimeError):
    """The broker could not be started; the message carries its log."""


def kafka_jars_dir() -> Path:
    """Where the Kafka jars are looked for: $BINLAKE_KAFKA_JARS, else `<venv>/jars/kafka`."""
    return Path(os.environ.get(KAFKA_JARS_ENV) or Path(sys.prefix) / "jars" / "kafka")


def kafka_jars(folder: Path | None = None) -> list[str]:
    """The jars of `folder` (default kafka_jars_dir()), or [] when it holds no kafka_2.13 broker jar."""
    folder = folder or kafka_jars_dir()
    jars = sorted(str(p) for p in folder.glob("*.jar")) if folder.is_dir() else []
    return jars if any(Path(j).name.startswith("kafka_2.13-") for j in jars) else []


def java_binary() -> str | None:
    home = os.environ.get("JAVA_HOME")
    if home and (Path(home) / "bin" / "java").exists():
        return str(Path(home) / "bin" / "java")
    return shutil.which("java")


def unavailable_reason() -> str | None:
    """Why a broker cannot be started here (one line), or None when Java and the jars are in place."""
    if java_binary() is None:
        return "no java binary (apt-get install -y openjdk-17-jre-headless); scripts/dev.sh setup installs it"
    if not kafka_jars():
        return (f"the Kafka jars are not in {kafka_jars_dir()}: fetch them with `{SETUP_COMMAND}` "
                f"(or set {KAFKA_JARS_ENV} to a folder holding them)")
    return None


def _cluster_id() -> str:
    """A Kafka cluster id: a random UUID as 22 characters of URL-safe base64 (what `random-uuid` prints)."""
    return base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")


LOG4J2 = """\
Configuration:
  name: binlake-kafka
  Appenders:
    File:
      name: file
      fileName: "{log}"
      PatternLayout:
        pattern: "[%d] %p %m (%c)%n"
  Loggers:
    Root:
      level: WARN
      AppenderRef:
        - ref: file
    Logger:
      - name: kafka.server.KafkaServer
        level: INFO
      - name: kafka.server.BrokerServer
        level: INFO
"""


@dataclass
class PrivateKafka:
    """A running private broker. Create with `start()`; always `stop()` it."""

    base_dir: Path
    port: int
    controller_port: int
    process: subprocess.Popen | None = None
    log_path: Path = field(init=False)

    def __post_init__(self) -> None:
        self.log_path = self.base_dir / "server.log"

    @property
    def bootstrap(self) -> str:
        """The client address, host:port."""
        return f"127.0.0.1:{self.port}"

    @property
    def data_dir(self) -> Path:
        return self.base_dir / "data"

    @property
    def config_path(self) -> Path:
        return self.base_dir / "server.properties"

    def properties(self) -> dict[str, str]:
        return {
            "process.roles": "broker,controller",
            "node.id": "1",
            "controller.quorum.voters": f"1@127.0.0.1:{self.controller_port}",
            "listeners": f"PLAINTEXT://127.0.0.1:{self.port},CONTROLLER://127.0.0.1:{self.controller_port}",
            "advertised.listeners": f"PLAINTEXT://127.0.0.1:{self.port}",
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
            "controller.listener.names": "CONTROLLER",
            "inter.broker.listener.name": "PLAINTEXT",
            "log.dirs": str(self.data_dir),
            "num.partitions": "1",
            "offsets.topic.replication.factor": "1",
            "offsets.topic.num.partitions": "4",
            "transaction.state.log.replication.factor": "1",
            "transaction.state.log.min.isr": "1",
            "transaction.state.log.num.partitions": "4",
            "share.coordinator.state.topic.replication.factor": "1",
            "share.coordinator.state.topic.min.isr": "1",
            "group.initial.rebalance.delay.ms": "0",
            "auto.create.topics.enable": "true",
            "log.flush.interval.messages": "9223372036854775807",
            "log.retention.hours": "-1",
        }

    @classmethod
    def start(cls, base_dir: str | Path | None = None, timeout: float = 120.0, heap: str = "512m") -> PrivateKafka:
        reason = unavailable_reason()
        if reason is not None:
            raise KafkaUnavailable(reason)
        base = Path(base_dir) if base_dir else Path(tempfile.mkdtemp(prefix="binlake-kafka-"))
        base.mkdir(parents=True, exist_ok=True)
        port = free_port()
        controller = free_port()
        while controller == port:
            controller = free_port()
        self = cls(base_dir=base, port=port, controller_port=controller)
        self.config_path.write_text("".join(f"{k}={v}\n" for k, v in self.properties().items()))
        (base / "log4j2.yaml").write_text(LOG4J2.format(log=self.log_path))
        java = self._java_command(heap)
        fmt = subprocess.run([*java, "kafka.tools.StorageTool", "format", "-t", _cluster_id(),
                              "-c", str(self.config_path), "--ignore-formatted"],
                             capture_output=True, text=True, timeout=timeout)
        if fmt.returncode != 0:
            raise BrokerError(f"kafka.tools.StorageTool format failed ({fmt.returncode}):\n{fmt.stdout}\n{fmt.stderr}")
        out = open(base / "stdout.log", "wb")  # noqa: SIM115 (the broker keeps writing to it)
        self.process = subprocess.Popen([*java, "kafka.Kafka", str(self.config_path)], stdout=out,
                                        stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        out.close()
        try:
            self._wait_ready(timeout)
        except BaseException:
            self.stop(remove=False)
            raise
        return self

    def _java_command(self, heap: str) -> list[str]:
        java = java_binary()
        assert java is not None
        classpath = os.pathsep.join(kafka_jars())
        return [java, f"-Xmx{heap}", f"-Xms{heap}", "-XX:+UseG1GC", "-Djava.awt.headless=true",
                f"-Dlog4j2.configurationFile={self.base_dir / 'log4j2.yaml'}",
                f"-Djava.io.tmpdir={self.base_dir}", "-cp", classpath]

    def _wait_ready(self, timeout: float) -> None:
        """Until the broker accepts connections and lists itself in its metadata."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:  # the port first: the client logs every refused connection
            self._check_alive()
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                break
            except OSError:
                time.sleep(0.2)
        admin = AdminClient({"bootstrap.servers": self.bootstrap, "socket.timeout.ms": 2000})
        while time.monotonic() < deadline:
            self._check_alive()
            try:
                md = admin.list_topics(timeout=2)
                if md.brokers:
                    return
            except Exception:  # not up yet: keep polling until the deadline
                pass
            time.sleep(0.2)
        raise BrokerError(f"the Kafka broker did not answer within {timeout}s:\n{self.server_log()}")

    def _check_alive(self) -> None:
        if self.process is not None and self.process.poll() is not None:
            raise BrokerError(f"kafka.Kafka exited with {self.process.returncode}:\n{self.server_log()}")

    def server_log(self, tail: int = 60) -> str:
        lines: list[str] = []
        for p in (self.base_dir / "stdout.log", self.log_path):
            if p.exists():
                lines += p.read_text(errors="replace").splitlines()[-tail:]
        return "\n".join(lines) or "(no broker log)"

    def stop(self, remove: bool = True) -> None:
        stop_server(self.process, self.base_dir, remove)


@dataclass
class Record:
    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None


def read_topics(bootstrap: str, prefix: str, isolation: str = "read_committed", timeout: float = 120.0,
                include_offsets: bool = False) -> list[Record]:
    """Every record of the topics named `prefix.*`, each partition read from its start to its end (for
    read_committed: to the last stable offset), in partition order. The offsets topic is left out unless asked."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"binlake-read-{uuid.uuid4()}",
                         "isolation.level": isolation, "enable.auto.commit": False, "enable.partition.eof": True,
                         "auto.offset.reset": "earliest"})
    try:
        md = consumer.list_topics(timeout=30)
        tps = [TopicPartition(name, p, 0) for name, t in sorted(md.topics.items())
               if name.startswith(prefix + ".") and (include_offsets or not name.endswith(".binlake-offsets"))
               for p in sorted(t.partitions)]
        out: list[Record] = []
        if not tps:
            return out
        consumer.assign(tps)
        pending = {(tp.topic, tp.partition) for tp in tps}
        deadline = time.monotonic() + timeout
        while pending:
            if time.monotonic() > deadline:
                raise TimeoutError(f"topics {prefix}.* not read to their end within {timeout}s (left: {pending})")
            for msg in consumer.consume(10_000, 1.0):
                err = msg.error()
                if err is not None:
                    if err.code() == KafkaError._PARTITION_EOF:
                        pending.discard((msg.topic(), msg.partition()))
                        continue
                    raise RuntimeError(f"{msg.topic()}[{msg.partition()}]: {err.str()}")
                out.append(Record(msg.topic(), msg.partition(), msg.offset(), msg.key(), msg.value()))
        return out
    finally:
        consumer.close()
