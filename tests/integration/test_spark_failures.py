"""The Spark ingest job (`spark_jobs/ingest.py --engine delta-spark`: decode tasks staging Parquet, history appended
and current tables merged by the executors) killed with SIGKILL at every stage in turn - while the tasks decode,
between the history and merge commits, inside a merge and between merges, at seeded points - then run again: the
lake equals the lake an uninterrupted in-process delta-rs run writes (current and history tables of every
generation, the catalog), no history row is there twice, and the staging area is gone.

The kill is real: the job runs as its own process group; a decode kill happens when the first staged piece lands
(the test kills the group), the others through the job's crash points ($BINLAKE_CRASH_AT, binlake.lake.crashpoints).
"""

from __future__ import annotations

import contextlib
import os
import random
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from binlake.cli import exit_code_for
from binlake.lake.crashpoints import CRASH_ENV
from binlake.lake.engines import get_engine
from binlake.lake.ingest import IngestOptions
from binlake.quality.stages import run_ingest
from binlake.settings import QualityConfig
from binlake.spark import delta_jars
from tests.conftest import skip_or_fail

from .test_lifecycle import fresh, lake_current, new_files, run, server_tables
from .test_spark_engine_parity import delta_tables, table_rows, workload

ROOT = Path(__file__).resolve().parents[2]
JOB = ROOT / "spark_jobs" / "ingest.py"


def _job(source: Path, lake: Path, dbs: list[str], env: dict) -> subprocess.Popen:
    cmd = [sys.executable, str(JOB), "--engine", "delta-spark", "--source", f"local:{source}", "--lake", str(lake),
           "--databases", ",".join(dbs), "--no-gates", "--no-progress"]
    return subprocess.Popen(cmd, env=env, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)


def _finish(proc: subprocess.Popen, timeout: float = 600) -> tuple[int, str]:
    try:
        _out, err = proc.communicate(timeout=timeout)
    finally:
        _kill_group(proc)
    return proc.returncode, err


def _kill_group(proc: subprocess.Popen) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)  # the job's own group: its JVM and Python workers too


def _cli(source: Path, lake: Path, dbs: list[str], env: dict) -> tuple[int, list[str]]:
    """`binlake ingest --spark` as users run it (gates off); its exit code and stderr lines."""
    done = subprocess.run([sys.executable, "-m", "binlake.cli", "ingest", "--spark", "--source", f"local:{source}",
                           "--lake", str(lake), "--databases", ",".join(dbs), "--no-progress", "--no-gates"], env=env,
                          cwd=ROOT, capture_output=True, text=True, timeout=600, start_new_session=True)
    return done.returncode, done.stderr.strip().splitlines()


def _merge_stage_failure(code: int, lines: list[str], lake: Path) -> re.Match:
    """The command line's end after a failure in the merge stage: exit code 6 (unavailable), no stack trace
    (Python's or the JVM's), and one last line naming the stage, a table of the lake and the positions."""
    from binlake.exitcodes import ExitCode

    assert code == ExitCode.UNAVAILABLE, (code, lines[-20:])
    assert not any("Traceback" in line or line.startswith("\tat ") or " ERROR " in line for line in lines), \
        "\n".join(lines[-60:])
    found = re.fullmatch(r"binlake: error: Spark merge stage failed for (\S+) \(changes at file seq (\d+) pos (\d+) "
                         r"to file seq (\d+) pos (\d+)\): (.+)", lines[-1])
    assert found and found.group(1).startswith(str(lake)), lines[-5:]
    assert (int(found.group(2)), int(found.group(3))) <= (int(found.group(4)), int(found.group(5))), lines[-1]
    return found


def _kill_when_staged(proc: subprocess.Popen, lake: Path, timeout: float = 600) -> bool:
    """Kill the job as soon as a decode task's first staged piece is in the lake; False if it finished first."""
    staging = lake / "_binlake" / "staging"
    deadline = time.monotonic() + timeout
    while proc.poll() is None and time.monotonic() < deadline:
        if staging.is_dir() and any(staging.rglob("*.parquet")):
            _kill_group(proc)
            proc.wait()
            return True
        time.sleep(0.02)
    _finish(proc)
    return False


def _history_duplicates(lake: Path) -> dict[str, int]:
    out = {}
    for name, path in delta_tables(lake).items():
        if "__history" in name:
            rows = get_engine().read(str(path), ["_file_seq", "_pos", "_sub", "_row", "_op"]).to_pylist()
            keys = [(r["_file_seq"], r["_pos"], r["_sub"], r["_row"], r["_op"]) for r in rows]
            out[name] = len(keys) - len(set(keys))
    return out


def assert_same_tables(lake: Path, clean: Path, context: str = "") -> None:
    """Every Delta table of `lake` equals `clean`'s (the validations tables aside: they hold run times), and no
    history row is there twice."""
    want, got = delta_tables(clean), delta_tables(lake)
    assert sorted(got) == sorted(want), context
    for name, path in sorted(want.items()):
        if not name.startswith("_binlake/validations"):
            own = name.startswith("_binlake")
            assert table_rows(got[name], own) == table_rows(path, own), f"{name} {context}"
    assert not any(_history_duplicates(lake).values()), context


def _commits(lake: Path, action: str, where: str) -> dict[str, int]:
    """Per table whose path contains `where`, how many commits binlake recorded as `action` (tables with one)."""
    counts = {name: sum(h["action"] == action for h in get_engine().history(str(path)))
              for name, path in delta_tables(lake).items() if where in name}
    return {name: n for name, n in counts.items() if n}


def test_spark_job_killed_at_every_stage_then_rerun_equals_uninterrupted(mariadb_full, tmp_path) -> None:
    """One lake, one job killed again and again, each run at a later stage than the one before (the re-runs resume
    the killed batch): while the decode tasks stage their pieces, after the last history append (between the
    history and the merge commits), between a merge's tombstone and MERGE commits (the t-th such merge, seeded),
    after a merge commit, and after every merge or before publishing (seeded); then a last run finishes. The
    numbers come from the uninterrupted lake (its history appends and tombstone commits), so every kill lands."""
    if not delta_jars():
        skip_or_fail("the Delta jars are not fetched (bash scripts/dev.sh setup)")
    server = mariadb_full
    dbs = fresh(server, "sp_kill_a", "sp_kill_b")
    first = server.binlog_files()[-1].name
    statements, _ = workload(dbs, seed=1616)
    source = tmp_path / "binlogs"
    source.mkdir()
    # Several files, so the job runs several decode tasks.
    chunk = max(1, len(statements) // 4)
    for i in range(0, len(statements), chunk):
        run(server, dbs[0], *statements[i:i + chunk])
        server.flush_logs()
    for f in new_files(server, first):
        (source / f.name).write_bytes(f.read_bytes())
    expected = server_tables(server, dbs)
    clean = tmp_path / "clean"
    run_ingest(IngestOptions(lake=str(clean), files=sorted(str(f) for f in source.iterdir()), databases=set(dbs),
                             quality=QualityConfig(enabled=False)))
    assert lake_current(clean, dbs) == expected
    # History tables the batch appends to (the `history` crash point counts one append each; a TRUNCATE's marker
    # row is appended later, in the merge stage).
    appends = len(_commits(clean, "append", "__history"))
    tombstone_merges = sum(_commits(clean, "tombstones", "_tombstones").values())
    assert appends > 1 and tombstone_merges >= 1, (appends, tombstone_merges)

    rng = random.Random(16)
    points = ["decode", f"history:{appends}", f"merge-tombstones:{rng.randint(1, tombstone_merges)}", "merge:1",
              rng.choice(["merged", "publish"])]
    env = {**os.environ, "SPARK_LOCAL_IP": "127.0.0.1", "BINLAKE_SPARK_MASTER": "local[2]",
           "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    lake = tmp_path / "lake"
    for point in points:
        if point == "decode":
            assert _kill_when_staged(_job(source, lake, dbs, env), lake), "the job finished before it was killed"
            continue
        code, err = _finish(_job(source, lake, dbs, {**env, CRASH_ENV: point}))
        assert code == -signal.SIGKILL, f"not killed at {point}: exit {code}: {err[-2000:]}"
    code, err = _finish(_job(source, lake, dbs, env))
    assert code == 0, f"re-run after kills at {points}: exit {code}: {err[-2000:]}"
    assert lake_current(lake, dbs) == expected, points
    assert_same_tables(lake, clean, f"after kills at {points}")
    staging = lake / "_binlake" / "staging" / "default"
    assert not staging.exists() or not any(staging.iterdir()), f"staging left after kills at {points}"
    # Each history append made once, as uninterrupted.
    assert _commits(lake, "append", "__history") == _commits(clean, "append", "__history")


@pytest.fixture(autouse=True)
def _no_stray_crash_env(monkeypatch) -> None:
    monkeypatch.delenv(CRASH_ENV, raising=False)


def test_a_decode_tasks_own_error_keeps_the_exit_code_the_command_line_gives_it() -> None:
    """A decode task's error comes back to the driver as one line (TaskError) with the exit code the same error
    gets from an in-process run: damaged data 4 (every decoder error: a checksum, a corrupt event), a schema
    mismatch 5, a bad value 4, anything else Spark's own 6."""
    from binlake.binlog.errors import ChecksumMismatch, CorruptEvent, SchemaMismatch, TruncatedFile
    from binlake.exitcodes import ExitCode
    from binlake.spark import TaskError

    task = ("/x/mysql-bin.000007", "mysql-bin.000007", 7, 4, None)
    for exc, code in ((ChecksumMismatch("CRC32 0 does not match", "mysql-bin.000007", 120), ExitCode.BAD_DATA),
                      (CorruptEvent("event length 3 is impossible", "mysql-bin.000007", 9), ExitCode.BAD_DATA),
                      (TruncatedFile("ends inside an event", "mysql-bin.000007", 99), ExitCode.BAD_DATA),
                      (SchemaMismatch("2 columns, 3 expected", "mysql-bin.000007", 50, "d.t"),
                       ExitCode.SCHEMA_MISMATCH),
                      (RuntimeError("executor lost"), ExitCode.UNAVAILABLE)):
        failed = TaskError(task, exc).error()
        assert failed.exit_code == code, (exc, failed.exit_code)
        if code != ExitCode.UNAVAILABLE:
            assert exit_code_for(failed) == exit_code_for(exc)
        assert str(failed).startswith("Spark decode stage failed at mysql-bin.000007 [4, end): "), str(failed)


def test_a_failing_decode_task_is_one_line_naming_file_and_range_and_nothing_is_committed(mariadb_full, tmp_path,
                                                                                            spark) -> None:
    """A damaged binlog under the Spark path ends the run with one line naming the file and position (a decode task
    failing on an executor: "Spark decode stage failed at FILE [start, stop): ..."; damage the driver's schema scan
    meets first: that scan's own line), with the exit code the in-process run gives the same damage; the lake gets
    no table and no control row; the command line prints that line and no traceback."""
    from binlake.lake.engines.deltaspark import DeltaSparkEngine, available
    from binlake.spark import SparkTaskFailed, spark_executor

    ok, reason = available(spark)
    if not ok:
        skip_or_fail(f"delta-spark: {reason}")
    server = mariadb_full
    db = fresh(server, "sp_fail")[0]
    first = server.binlog_files()[-1].name
    rng = random.Random(1606)
    run(server, db, "CREATE TABLE t (id INT PRIMARY KEY, v VARCHAR(40))",
        *[f"INSERT INTO t VALUES ({i}, '{'x' * rng.randint(1, 40)}')" for i in range(200)])
    source = tmp_path / "binlogs"
    source.mkdir()
    for f in new_files(server, first):
        (source / f.name).write_bytes(f.read_bytes())
    damaged = max(source.iterdir(), key=lambda p: p.stat().st_size)
    data = bytearray(damaged.read_bytes())
    at = rng.randint(len(data) // 3, 2 * len(data) // 3)
    data[at:at + 24] = bytes(rng.randrange(256) for _ in range(24))
    damaged.write_bytes(bytes(data))
    files = sorted(str(f) for f in source.iterdir())
    opts = dict(files=files, databases={db}, quality=QualityConfig(enabled=False))
    with pytest.raises(Exception) as local:
        run_ingest(IngestOptions(lake=str(tmp_path / "local"), **opts))
    lake = tmp_path / "spark"
    with pytest.raises(Exception) as failed:
        run_ingest(IngestOptions(lake=str(lake), **opts), executor=spark_executor(spark), engine=DeltaSparkEngine(spark))
    message = str(failed.value)
    assert "\n" not in message and "Traceback" not in message and damaged.name in message, message
    if isinstance(failed.value, SparkTaskFailed):
        assert message.startswith(f"Spark decode stage failed at {damaged.name} ["), message
    else:
        assert str(local.value) == message
    code = exit_code_for(local.value)
    assert exit_code_for(failed.value) == code, (message, local.value)
    assert not (lake / db).exists() and not (lake / "_binlake" / "control").exists()

    env = {**os.environ, "SPARK_LOCAL_IP": "127.0.0.1", "BINLAKE_SPARK_MASTER": "local[2]",
           "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    cli = subprocess.run([sys.executable, "-m", "binlake.cli", "ingest", "--spark", "--source", f"local:{source}",
                          "--lake", str(tmp_path / "cli"), "--no-progress", "--no-gates"], env=env, cwd=ROOT,
                         capture_output=True, text=True, timeout=600, start_new_session=True)
    assert cli.returncode == int(code), cli.stderr[-2000:]
    assert "Traceback" not in cli.stderr and damaged.name in cli.stderr.strip().splitlines()[-1], cli.stderr[-2000:]


def test_executor_failures_and_missing_jars_are_one_line_nothing_committed_and_a_rerun_converges(
        mariadb_full, tmp_path) -> None:
    """`binlake ingest --spark` (the command line, as users run it) when things outside binlake fail: the Delta jar
    missing (BINLAKE_DELTA_JARS at an empty folder: the line names the jar and the setup command, before any Spark
    starts), an executor's Python worker killed inside a decode task, and a decode task running out of memory
    (crash point `decode-task`, binlake.lake.crashpoints). Each ends with exit code 6 (unavailable) and one line on
    stderr naming the stage, a binlog file of the batch and the task's position range, no traceback; nothing is
    committed (no table, no control row). Then the JVM itself runs out of memory in the merge stage (a real
    java.lang.OutOfMemoryError: crash point `merge-tombstones` with `jvm-memory`): exit 6, one line naming the merge
    stage, the table and the positions, the batch unpublished. Then a plain run writes the lake an uninterrupted
    in-process run writes."""
    from binlake.exitcodes import ExitCode
    from binlake.spark import delta_jar_name, delta_jars_dir

    if not delta_jars():
        skip_or_fail("the Delta jars are not fetched (bash scripts/dev.sh setup)")
    assert (delta_jars_dir() / delta_jar_name()).is_file(), "the jar the error names is the one setup fetches"
    server = mariadb_full
    dbs = fresh(server, "sp_err_a", "sp_err_b")
    first = server.binlog_files()[-1].name
    statements, _ = workload(dbs, seed=1626)
    source = tmp_path / "binlogs"
    source.mkdir()
    half = len(statements) // 2
    for part in (statements[:half], statements[half:]):  # two files: two decode tasks
        run(server, dbs[0], *part)
        server.flush_logs()
    for f in new_files(server, first):
        (source / f.name).write_bytes(f.read_bytes())
    names = {f.name for f in source.iterdir()}
    clean = tmp_path / "clean"
    run_ingest(IngestOptions(lake=str(clean), files=sorted(str(f) for f in source.iterdir()), databases=set(dbs),
                             quality=QualityConfig(enabled=False)))
    assert lake_current(clean, dbs) == server_tables(server, dbs)

    lake = tmp_path / "lake"
    env = {**os.environ, "SPARK_LOCAL_IP": "127.0.0.1", "BINLAKE_SPARK_MASTER": "local[2]",
           "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    env.pop("BINLAKE_DEBUG", None)

    def cli(extra_env: dict) -> tuple[int, list[str]]:
        return _cli(source, lake, dbs, {**env, **extra_env})

    empty = tmp_path / "no-jars"
    empty.mkdir()
    code, lines = cli({"BINLAKE_DELTA_JARS": str(empty)})
    assert code == ExitCode.UNAVAILABLE and len(lines) == 1, (code, lines)
    assert lines[0].startswith("binlake: error: --engine delta-spark: ") and str(empty) in lines[0], lines
    assert f"no {delta_jar_name()}" in lines[0] and "bash scripts/dev.sh setup" in lines[0], lines
    assert not lake.exists()

    for crash, cause in (("decode-task:1", "Python worker exited unexpectedly (crashed"),
                         ("decode-task:1:memory", "MemoryError: crash point decode-task")):
        code, lines = cli({CRASH_ENV: crash})
        assert code == ExitCode.UNAVAILABLE, (crash, code, lines[-20:])
        # No stack trace, Python's or the JVM's (Spark's task-failure logs are binlake's one line here).
        assert not any("Traceback" in line or line.startswith("\tat ") or " ERROR " in line for line in lines), \
            (crash, lines[-40:])
        found = re.fullmatch(r"binlake: error: Spark decode stage failed at (\S+) \[(\d+), (\d+|end)\): (.+)",
                             lines[-1])
        assert found and found.group(1) in names and cause in found.group(4), (crash, lines[-5:])
        assert not (lake / dbs[0]).exists() and not (lake / "_binlake" / "control").exists(), crash

    # A real java.lang.OutOfMemoryError in the merge stage: a Spark task asks the local JVM (driver and executor
    # in one) for more than its heap, between a staged merge's tombstone and MERGE commits; Spark ends that JVM
    # with its out-of-memory exit code. The line names the stage, the table and the batch's positions.
    assert _commits(clean, "tombstones", "_tombstones"), "the workload has no tombstone merge to fail in"
    found = _merge_stage_failure(*cli({CRASH_ENV: "merge-tombstones:1:jvm-memory"}), lake)
    # the job's own failure when it reached the driver first, else the JVM's end and its exit code
    assert found.group(6) in ("java.lang.OutOfMemoryError: Java heap space", "the Spark JVM ran out of memory "
                              "(java.lang.OutOfMemoryError; it exited with code 52)"), found.group(0)
    assert not (lake / "_binlake" / "control").exists()  # the batch is not published

    code, lines = cli({})
    assert code == 0, lines[-20:]
    assert lake_current(lake, dbs) == lake_current(clean, dbs)
    assert_same_tables(lake, clean)


def test_a_merge_task_killed_between_its_commits_is_one_line_and_a_rerun_converges(mariadb_full, tmp_path) -> None:
    """The hourly steady state under a kill: the second batch into filled current tables, which the job merges in
    Python tasks (binlake.lake.engines.netreduce.merge_segment), killed inside such a merge between its tombstone
    and MERGE commits (crash point `tombstones-committed`: the executor's Python worker dies there). The command
    line ends with exit code 6 and one line naming the merge stage, a table and its positions, no traceback; the
    batch is not published. A plain re-run then writes the lake two uninterrupted in-process runs write, with no
    history row twice."""

    if not delta_jars():
        skip_or_fail("the Delta jars are not fetched (bash scripts/dev.sh setup)")
    server = mariadb_full
    dbs = fresh(server, "sp_task_a", "sp_task_b")
    first = server.binlog_files()[-1].name
    batches = workload(dbs, seed=1627)
    source = tmp_path / "binlogs"
    source.mkdir()
    env = {**os.environ, "SPARK_LOCAL_IP": "127.0.0.1", "BINLAKE_SPARK_MASTER": "local[2]",
           "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    env.pop("BINLAKE_DEBUG", None)
    lake, clean = tmp_path / "lake", tmp_path / "clean"

    def cli(extra_env: dict) -> tuple[int, list[str]]:
        return _cli(source, lake, dbs, {**env, **extra_env})

    for n, statements in enumerate(batches):
        run(server, dbs[0], *statements)
        for f in new_files(server, first):
            (source / f.name).write_bytes(f.read_bytes())
        run_ingest(IngestOptions(lake=str(clean), files=sorted(str(f) for f in source.iterdir()),
                                 databases=set(dbs), quality=QualityConfig(enabled=False)))
        if n == 0:
            code, lines = cli({})
            assert code == 0, lines[-20:]
            tombstones, merges = _commits(lake, "tombstones", "_tombstones"), _commits(lake, "merge", "")
    assert lake_current(clean, dbs) == server_tables(server, dbs)

    code, lines = cli({CRASH_ENV: "tombstones-committed:1"})
    found = _merge_stage_failure(code, lines, lake)
    assert "Python worker exited unexpectedly" in found.group(6), lines[-1]
    # The killed merge's tombstones are in, its MERGE is not; the batch is not published (no control commit).
    name = str(Path(found.group(1)).relative_to(lake))
    now = _commits(lake, "tombstones", "_tombstones")
    assert now.get(f"{name}/_binlake_tombstones", 0) == tombstones.get(f"{name}/_binlake_tombstones", 0) + 1, now
    after = _commits(lake, "merge", "")
    assert after.get(name) == merges.get(name) and after.get("_binlake/control") == merges.get("_binlake/control")

    code, lines = cli({})
    assert code == 0, lines[-20:]
    assert lake_current(lake, dbs) == lake_current(clean, dbs)
    assert_same_tables(lake, clean)
