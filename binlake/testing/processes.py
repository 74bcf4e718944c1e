"""What the private test servers (MariaDB, Kafka, Spark) share: a free loopback port, and stopping a server
process and removing its folder."""

from __future__ import annotations

import shutil
import socket
import subprocess
from pathlib import Path

LOOPBACK = "127.0.0.1"


def free_port() -> int:
    """A TCP port on loopback that nothing listens on now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((LOOPBACK, 0))
        return s.getsockname()[1]


def stop_server(process: subprocess.Popen | None, base_dir: Path, remove: bool = True) -> None:
    """Terminate the server (killed if it has not exited after 30 s), then remove its folder if asked."""
    if process is not None and process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
    if remove:
        shutil.rmtree(base_dir, ignore_errors=True)
