"""A private MariaDB server in a temp directory, for tests, benchmarks and the demo.

The server writes row-based binary logs on a random loopback port and is torn down by `stop()`.
It never touches the machine's own MariaDB configuration (`--no-defaults`).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import pymysql

from .processes import free_port, stop_server

SERVER_NAMES = ("mariadbd", "mysqld")
SERVER_DIRS = ("/usr/sbin", "/usr/local/sbin", "/usr/bin", "/usr/local/bin", "/usr/libexec")


class ServerError(RuntimeError):
    """The private server could not be started; the message carries its log."""


def find_server_binary() -> str | None:
    """Path of a mariadbd/mysqld binary, or None when none is installed."""
    for name in SERVER_NAMES:
        found = shutil.which(name)
        if found:
            return found
        for d in SERVER_DIRS:
            p = Path(d) / name
            if p.exists() and os.access(p, os.X_OK):
                return str(p)
    return None


def _install_db_binary(server: str) -> str | None:
    for name in ("mariadb-install-db", "mysql_install_db"):
        found = shutil.which(name)
        if found:
            return found
        p = Path(server).parent.parent / "bin" / name
        if p.exists():
            return str(p)
    return None


@dataclass
class PrivateMariaDB:
    """A running private server. Create with `start()`; always `stop()` it."""

    base_dir: Path
    port: int
    row_metadata: str
    process: subprocess.Popen | None = None
    log_path: Path = field(init=False)
    args: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.log_path = self.base_dir / "server.log"

    @property
    def datadir(self) -> Path:
        return self.base_dir / "data"

    @property
    def binlog_dir(self) -> Path:
        return self.base_dir / "binlog"

    @property
    def tmp_dir(self) -> Path:
        return self.base_dir / "tmp"

    @property
    def socket_path(self) -> Path:
        return self.base_dir / "mysqld.sock"

    @property
    def uri(self) -> str:
        return f"mysql://root@127.0.0.1:{self.port}/"

    @classmethod
    def start(
        cls,
        row_metadata: str = "FULL",
        base_dir: str | Path | None = None,
        extra_args: tuple[str, ...] = (),
        timeout: float = 60.0,
    ) -> PrivateMariaDB:
        server = find_server_binary()
        if server is None:
            raise ServerError("no mariadbd or mysqld binary found (apt-get install -y mariadb-server)")
        base = Path(base_dir) if base_dir else Path(tempfile.mkdtemp(prefix="binlake-mariadb-"))
        base.mkdir(parents=True, exist_ok=True)
        self = cls(base_dir=base, port=free_port(), row_metadata=row_metadata.upper())
        self.binlog_dir.mkdir(exist_ok=True)
        self._install(server)
        args = [
            server,
            "--no-defaults",
            f"--datadir={self.datadir}",
            f"--socket={self.socket_path}",
            f"--pid-file={self.base_dir / 'mysqld.pid'}",
            f"--tmpdir={self.tmp_dir}",
            f"--port={self.port}",
            "--bind-address=127.0.0.1",
            "--skip-name-resolve",
            f"--log-error={self.log_path}",
            "--user=root",
            "--server-id=1",
            f"--log-bin={self.binlog_dir / 'mysql-bin'}",
            "--binlog-format=ROW",
            "--binlog-row-image=FULL",
            f"--binlog-row-metadata={self.row_metadata}",
            "--binlog-checksum=CRC32",
            "--character-set-server=utf8mb4",
            "--collation-server=utf8mb4_general_ci",
            "--default-time-zone=+00:00",
            "--innodb-buffer-pool-size=128M",
            "--innodb-log-file-size=64M",
            "--innodb-flush-log-at-trx-commit=2",
            "--sync-binlog=0",
            "--max-connections=50",
            "--skip-symbolic-links",
            *extra_args,
        ]
        self.args = args
        self.process = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
        self._wait(timeout)
        return self

    def restart(self, timeout: float = 60.0) -> None:
        """Shut the server down cleanly (it closes its binlog with a STOP event) and start it again on the same
        port and directories (it opens the next binlog file)."""
        self.stop(remove=False)
        self.process = subprocess.Popen(self.args, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
        self._wait(timeout)

    def _wait(self, timeout: float) -> None:
        assert self.process is not None
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise ServerError(f"mariadbd exited with {self.process.returncode}:\n{self.server_log()}")
            try:
                self.connect().close()
                return
            except pymysql.err.OperationalError:
                time.sleep(0.1)
        self.stop()
        raise ServerError(f"mariadbd did not accept connections within {timeout}s:\n{self.server_log()}")

    def _install(self, server: str) -> None:
        install = _install_db_binary(server)
        if install is None:
            raise ServerError("mariadb-install-db not found next to the server binary")
        cmd = [
            install,
            "--no-defaults",
            f"--datadir={self.datadir}",
            "--user=root",
            "--auth-root-authentication-method=normal",
            "--skip-test-db",
        ]
        self.tmp_dir.mkdir(parents=True, exist_ok=True)
        cmd.append(f"--tmpdir={self.tmp_dir}")  # passed on to the bootstrap server: no shared /tmp names
        for attempt in (1, 2):
            done = subprocess.run(cmd, capture_output=True, text=True)
            if done.returncode == 0:
                return
            if attempt == 1:  # a bootstrap that fails under heavy load once is retried from an empty datadir
                shutil.rmtree(self.datadir, ignore_errors=True)
        raise ServerError(f"{' '.join(cmd)} failed:\n{done.stdout}\n{done.stderr}")

    def connect(self, database: str | None = None, **kwargs) -> pymysql.connections.Connection:
        """A pymysql connection as root over TCP, autocommit on, session time zone UTC."""
        return pymysql.connect(
            host="127.0.0.1",
            port=self.port,
            user="root",
            password="",
            database=database,
            autocommit=True,
            charset="utf8mb4",
            init_command="SET time_zone='+00:00'",
            **kwargs,
        )

    def binlog_files(self) -> list[Path]:
        """The binlog files the server has written, in order (from its index file)."""
        index = self.binlog_dir / "mysql-bin.index"
        if not index.exists():
            return []
        names = [line.strip() for line in index.read_text().splitlines() if line.strip()]
        return [self.binlog_dir / Path(n).name for n in names]

    def flush_logs(self) -> list[Path]:
        """Rotate the binlog; returns the files that are now closed (all but the new active one)."""
        with self.connect() as conn, conn.cursor() as cur:
            cur.execute("FLUSH BINARY LOGS")
        return self.binlog_files()[:-1]

    def server_log(self, tail: int = 80) -> str:
        if not self.log_path.exists():
            return "(no server log)"
        lines = self.log_path.read_text(errors="replace").splitlines()
        return "\n".join(lines[-tail:])

    def stop(self, remove: bool = True) -> None:
        stop_server(self.process, self.base_dir, remove)
