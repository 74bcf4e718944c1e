"""`binlake tail --landing oss://...` against a private MariaDB and the local OSS server (real oss2 SDK): the
objects are byte-identical to the server's binlog files across kill -9 of the tail at seeded random moments
(rotations too), the file being written is an Appendable object with the in-use flag set, finished files are
Normal objects with it clear, and `binlake ingest --source oss://...` of the objects equals SELECT *."""

from __future__ import annotations

import random
import signal
import subprocess
import sys
import time

import oss2
import pytest

from binlake.binlog.constants import LOG_EVENT_BINLOG_IN_USE_F
from binlake.testing.oss_server import OssServer
from tests.integration.test_tail import (  # noqa: F401
    DB,
    Writer,
    _check_restarts,
    _env,
    _lake_rows,
    _schema,
    _server_rows,
    server,
)

AK, SECRET, REGION, BUCKET, PREFIX = "tail-ak", "tail-secret", "cn-hangzhou", "binlake", "tail/srv1/"
FLAG_AT = 4 + 17


@pytest.fixture
def oss():
    with OssServer(AK, SECRET, REGION, buckets=(BUCKET,)) as srv:
        yield srv


def _oss_env(oss: OssServer) -> dict:
    return {**_env(), "OSS_ENDPOINT": oss.endpoint, "OSS_ACCESS_KEY_ID": AK, "OSS_ACCESS_KEY_SECRET": SECRET,
            "OSS_REGION": REGION, "OSS_AUTH_VERSION": "v4"}


def _objects(oss: OssServer) -> dict:
    with oss.lock:
        return {k[len(PREFIX):]: v for k, v in oss.buckets[BUCKET].items() if k.startswith(PREFIX)}


def _landed(oss: OssServer) -> int:
    return sum(len(o.data) for o in _objects(oss).values())


def _tail(db, oss: OssServer) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "binlake.cli", "tail", "--mysql", db.uri, "--landing",
                             f"oss://{BUCKET}/{PREFIX}", "--heartbeat", "1"], env=_oss_env(oss),
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)


def _wait_identical(db, oss: OssServer, timeout: float = 120.0) -> list:
    deadline = time.monotonic() + timeout
    while True:  # the server's bytes are read once a round: MariaDB may append a Binlog_checkpoint on its own
        files, objects = db.binlog_files(), _objects(oss)
        on_server = {f.name: f.read_bytes() for f in files}
        if all(f.name in objects and objects[f.name].data == on_server[f.name] for f in files) \
                or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    for f in files:
        assert f.name in objects, f"{f.name} not landed; objects: {sorted(objects)}"
        got, want = objects[f.name].data, on_server[f.name]
        assert got == want, f"{f.name}: object {len(got)} bytes vs server file {len(want)} bytes differ"
    return files


@pytest.mark.slow  # about 60 s: 6 tail processes, a writer, one ingest
def test_oss_landing_kill9_identical_and_ingest_equals_select(server, oss, tmp_path):  # noqa: F811
    _schema(server)
    rng = random.Random(1919)
    logs, tail = [], None
    try:
        with Writer(server, seed=23, flush_every=30) as writer:
            for _kill in range(5):
                tail = _tail(server, oss)
                before, deadline = _landed(oss), time.monotonic() + 120
                while _landed(oss) <= before and tail.poll() is None and time.monotonic() < deadline:
                    time.sleep(0.01)
                time.sleep(rng.random() * 0.4)
                tail.send_signal(signal.SIGKILL)
                logs.append(tail.communicate()[1])
            tail = _tail(server, oss)
            writer.wait_commits(30)
        assert writer.error is None, writer.error
        files = _wait_identical(server, oss)
        assert len(files) >= 3, "the writer's FLUSH BINARY LOGS rotated the binlog"
        objects = _objects(oss)
        *closed, last = [objects[f.name] for f in files]
        assert last.appendable and last.data[FLAG_AT] & LOG_EVENT_BINLOG_IN_USE_F, "the open file is marked in use"
        assert all(not o.appendable and not o.data[FLAG_AT] & LOG_EVENT_BINLOG_IN_USE_F for o in closed)
    finally:
        if tail is not None and tail.poll() is None:
            tail.send_signal(signal.SIGTERM)
            logs.append(tail.communicate(timeout=60)[1])
    _check_restarts(logs, files)
    assert not [log for log in logs if "Traceback" in log], "".join(logs)

    lake = tmp_path / "lake"
    done = subprocess.run([sys.executable, "-m", "binlake.cli", "ingest", "--source", f"oss://{BUCKET}/{PREFIX}",
                           "--landing", str(tmp_path / "fetched"), "--lake", str(lake), "--databases", DB, "--no-progress", "--no-gates"],
                          env=_oss_env(oss), capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    assert _lake_rows(lake) == _server_rows(server)


def test_append_object_position_rules(oss):
    """The local server's AppendObject behaves as OSS documents: position must equal the length, a Normal
    object is not appendable, and the object type shows in HEAD."""
    bucket = oss2.Bucket(oss2.AuthV4(AK, SECRET), oss.endpoint, BUCKET, region=REGION)
    rng = random.Random(5)
    pieces = [rng.randbytes(rng.randint(1, 5000)) for _ in range(6)]
    pos = 0
    for piece in pieces:
        result = bucket.append_object("a", pos, piece)
        pos = result.next_position
    assert bucket.get_object("a").read() == b"".join(pieces)
    assert bucket.head_object("a").headers["x-oss-object-type"] == "Appendable"
    with pytest.raises(oss2.exceptions.PositionNotEqualToLength) as exc:
        bucket.append_object("a", pos - 1, b"x")
    assert exc.value.next_position == pos
    bucket.put_object("n", b"normal")
    with pytest.raises(oss2.exceptions.ObjectNotAppendable):
        bucket.append_object("n", 6, b"x")
