"""Crash points' `pause` (the first process of all to get there waits to be killed; the others pass on) and the
one line of a decode job that failed as a whole (the Spark JVM gone: every range it was decoding is named, and the
JVM's exit code read as out of memory)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from binlake.lake.crashpoints import CRASH_ENV, PAUSE_FILE_ENV

ROOT = Path(__file__).resolve().parents[2]
PASS = "from binlake.lake.crashpoints import crash_point; crash_point('decode-task'); print('passed')"


def test_pause_holds_the_first_process_only(tmp_path: Path) -> None:
    mark = tmp_path / "paused"
    env = {**os.environ, CRASH_ENV: "decode-task:1:pause", PAUSE_FILE_ENV: str(mark),
           "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    first = subprocess.Popen([sys.executable, "-c", PASS], env=env, stdout=subprocess.PIPE, text=True)
    try:
        while not mark.exists():  # the file appears with the pid in it (linked in whole)
            assert first.poll() is None, first.communicate()
            time.sleep(0.01)
        assert int(mark.read_text()) == first.pid
        second = subprocess.run([sys.executable, "-c", PASS], env=env, capture_output=True, text=True, timeout=120)
        assert (second.returncode, second.stdout) == (0, "passed\n"), second.stderr
        assert first.poll() is None  # still waiting at the point
        assert sorted(p.name for p in tmp_path.iterdir()) == ["paused"]  # no temporary file left
    finally:
        first.send_signal(signal.SIGKILL)
        first.wait()
    assert first.returncode == -signal.SIGKILL


def test_a_whole_decode_job_lost_names_every_range(monkeypatch) -> None:
    from binlake.lake.engines import deltaspark
    from binlake.spark import _task_failure

    # the local Spark JVM ended with Spark's out-of-memory exit code (whatever JVM this process may run)
    monkeypatch.setattr(deltaspark, "jvm_exit_code", lambda wait=0.0: 52)

    tasks = [("/b/f.000007", "f.000007", 7, 4, 900), ("/b/f.000007", "f.000007", 7, 900, None),
             ("/b/f.000008", "f.000008", 8, 4, None)]
    lost = ConnectionRefusedError(111, "Connection refused")
    message = str(_task_failure(lost, tasks))
    assert message.startswith("Spark decode stage failed at f.000007 [4, ...) to f.000008 [..., end): "), message
    assert message.endswith(": the Spark JVM ran out of memory (java.lang.OutOfMemoryError; it exited with code 52)")
    assert "\n" not in message
    assert str(_task_failure(lost, tasks[:1])).startswith("Spark decode stage failed at f.000007 [4, 900): ")
