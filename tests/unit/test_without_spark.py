"""pyspark (and delta-spark) are the optional `spark` extra: the decoder and the command line run without them.

Each check runs `binlake` in a child process whose import system refuses pyspark, py4j and delta, as on a machine
where they are not installed, and compares with the same command in a normal process.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from deltalake import DeltaTable

from binlake.exitcodes import ExitCode
from tests.conftest import PROJECT_ROOT, SHARED_BINLOGS

BB = SHARED_BINLOGS / "blackbeam__rust_mysql_common"
SMALL = BB / "mariadb-bin.000001"  # FULL metadata, 2 inserts into toddy_test.outbox
SAKILA = SHARED_BINLOGS / "osheroff__mysql-binlog-connector-java/mysql-bin.sakila.gz"

pytestmark = pytest.mark.skipif(not SMALL.exists(), reason=f"fixture binlogs not found at {SHARED_BINLOGS}")

SPARK_PACKAGES = ("pyspark", "py4j", "delta")

CHILD = """
import importlib.abc, json, sys

BLOCKED = {blocked!r}


class NoSpark(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in BLOCKED:
            raise ModuleNotFoundError(f"No module named {{name!r}}", name=name)
        return None


if sys.argv[1] == "block":
    sys.meta_path.insert(0, NoSpark())
from binlake.cli import main

code = main(sys.argv[2:])
sys.stdout.flush()
loaded = sorted(m for m in sys.modules if m.split(".")[0] in BLOCKED)
print(json.dumps({{"code": int(code), "loaded": loaded}}), file=sys.stderr)
"""


def binlake(mode: str, *args: str) -> tuple[int, str, str, list[str]]:
    """Run `binlake ARGS` in a child process (`block`: pyspark & co. cannot be imported); exit code, stdout, the
    stderr lines before the child's own report, and the Spark modules that ended up loaded."""
    env = {**os.environ, "PYTHONPATH": str(PROJECT_ROOT)}
    proc = subprocess.run([sys.executable, "-c", CHILD.format(blocked=SPARK_PACKAGES), mode, *args],
                          capture_output=True, text=True, env=env, cwd=PROJECT_ROOT, timeout=600)
    *err, report = proc.stderr.splitlines()
    result = json.loads(report)
    assert proc.returncode == 0, proc.stderr
    return result["code"], proc.stdout, "\n".join(err), result["loaded"]


def test_ingest_spark_without_pyspark_is_one_line(tmp_path: Path) -> None:
    """`ingest --spark` without pyspark: one line naming the extra, nothing written (this also shows that the
    child's hook really refuses the packages, else the checks below would prove nothing)."""
    code, _out, err, loaded = binlake("block", "ingest", "--spark", "--source", f"local:{BB}",
                                      "--lake", str(tmp_path / "lake"))
    assert loaded == [] and not (tmp_path / "lake").exists()
    assert code == ExitCode.UNAVAILABLE, err
    assert err.count("\n") == 0 and "binlake[spark]" in err and "pyspark" in err


@pytest.mark.parametrize("args", [
    ["decode", "--format", "sql", str(SMALL)],
    ["decode", str(SAKILA)],
    ["stats", "--json", str(SAKILA)],
])
def test_decode_and_stats_run_without_pyspark(args: list[str]) -> None:
    if not Path(args[-1]).exists():
        pytest.skip(f"fixture binlogs not found at {args[-1]}")
    code, out, err, loaded = binlake("block", *args)
    assert code == 0, err
    assert loaded == []
    assert out.strip(), "no output"
    normal_code, normal_out, _, _ = binlake("normal", *args)
    assert (code, comparable(args, out)) == (normal_code, comparable(args, normal_out))


def comparable(args: list[str], out: str) -> object:
    """The output without its timings (stats reports decode speed)."""
    if args[0] != "stats":
        return out
    data = json.loads(out)
    for key in ("decode_seconds", "rows_per_second", "mb_per_second"):
        assert key in data
        del data[key]
    return data


def test_ingest_with_gates_runs_without_pyspark(tmp_path: Path) -> None:
    """The delta-rs lake, gates included (Great Expectations looks for pyspark and must do without it)."""
    lake = tmp_path / "lake"
    code, out, err, loaded = binlake("block", "ingest", "--source", f"local:{SMALL}", "--lake", str(lake),
                                     "--no-progress")
    assert code == 0, err
    assert loaded == []
    assert "before merge passed, after merge passed" in out
    _, decoded, _, _ = binlake("block", "decode", str(SMALL))
    changes = [json.loads(line) for line in decoded.splitlines()]
    current = DeltaTable(str(lake / "toddy_test" / "outbox")).to_pyarrow_table()
    assert sorted(r["id"] for r in current.to_pylist()) == sorted(c["after"]["id"] for c in changes)
