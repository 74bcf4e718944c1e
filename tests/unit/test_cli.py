"""The `binlake decode` and `binlake stats` commands, run in-process through `binlake.cli.main`."""

from __future__ import annotations

import json
import platform
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from binlake.cli import main
from binlake.exitcodes import ExitCode
from tests.conftest import SHARED_BINLOGS

BB = SHARED_BINLOGS / "blackbeam__rust_mysql_common"
ZALORA = SHARED_BINLOGS / "zalora__binlog-parser"
SAKILA = SHARED_BINLOGS / "osheroff__mysql-binlog-connector-java/mysql-bin.sakila.gz"

pytestmark = pytest.mark.skipif(not BB.exists(), reason=f"fixture binlogs not found at {SHARED_BINLOGS}")


def run(capsys, *args: str) -> tuple[int, str, str]:
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def jsonl(text: str) -> list[dict]:
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def test_decode_jsonl_contract(capsys) -> None:
    code, out, _ = run(capsys, "decode", str(BB / "mariadb-bin.000001"))
    assert code == 0
    rows = jsonl(out)
    assert len(rows) == 2
    first = rows[0]
    assert set(first) == {"file", "pos", "txn_pos", "sub", "row", "ts", "gtid", "db", "table", "op", "before", "after"}
    assert first["op"] == "insert" and first["before"] is None
    assert first["gtid"].startswith("0-") and first["ts"].endswith("Z")
    assert all(not k.startswith("@") for k in first["after"])  # FULL metadata: real names
    assert first["txn_pos"] < first["pos"]


def test_decode_filters(capsys) -> None:
    path = str(ZALORA / "gtid-fixtures/mysql-bin.01")
    _, out, _ = run(capsys, "decode", path)
    everything = jsonl(out)
    _, out, _ = run(capsys, "decode", "--ops", "update,delete", path)
    assert {r["op"] for r in jsonl(out)} == {"update", "delete"}
    assert len(jsonl(out)) == sum(1 for r in everything if r["op"] != "insert")
    table = everything[0]["table"]
    _, out, _ = run(capsys, "decode", "--tables", rf"\.{table}$", path)
    assert {r["table"] for r in jsonl(out)} == {table}
    _, out, _ = run(capsys, "decode", "--databases", "no_such_db", path)
    assert out == ""


def test_decode_time_window(capsys) -> None:
    path = str(ZALORA / "mysql-bin.01")
    _, out, _ = run(capsys, "decode", path)
    rows = jsonl(out)
    times = sorted({r["ts"] for r in rows})
    assert len(times) >= 2
    _, out, _ = run(capsys, "decode", "--start-time", times[1], path)
    assert [r["ts"] for r in jsonl(out)] == [r["ts"] for r in rows if r["ts"] >= times[1]]
    _, out, _ = run(capsys, "decode", "--stop-time", times[1].replace("Z", "+00:00"), path)
    assert [r["ts"] for r in jsonl(out)] == [r["ts"] for r in rows if r["ts"] < times[1]]


def test_sort_orders_files_by_sequence(capsys, tmp_path: Path) -> None:
    a, b = tmp_path / "mysql-bin.000010", tmp_path / "mysql-bin.000009"
    shutil.copy(ZALORA / "mysql-bin.01", a)
    shutil.copy(ZALORA / "mysql-bin.02", b)
    _, out, _ = run(capsys, "decode", "--sort", str(a), str(b))
    files = [r["file"] for r in jsonl(out)]
    assert files == sorted(files) and set(files) == {a.name, b.name}
    _, out, _ = run(capsys, "decode", str(a), str(b))
    assert next(r["file"] for r in jsonl(out)) == a.name


def test_decode_sql_and_rollback(capsys) -> None:
    path = str(BB / "mariadb-bin.000001")
    code, out, _ = run(capsys, "decode", "--format", "sql", path)
    assert code == 0
    statements = [line for line in out.splitlines() if line.startswith("INSERT")]
    assert len(statements) == 2 and "SET time_zone='+00:00';" in out
    code, out, _ = run(capsys, "decode", "--format", "rollback", path)
    undo = [line for line in out.splitlines() if line.startswith("DELETE")]
    assert len(undo) == 2 and all(s.endswith("LIMIT 1;") for s in undo)


def test_sql_without_column_names_is_a_clear_error(capsys) -> None:
    code, _, err = run(capsys, "decode", "--format", "sql", str(ZALORA / "mysql-bin.01"))
    assert code == ExitCode.BAD_DATA
    assert "needs column names" in err and "test_db.buildings" in err


def test_bad_magic_is_reported_with_file_and_position(capsys) -> None:
    code, _, err = run(capsys, "decode", str(SHARED_BINLOGS / "apecloud__mysql-binlog-connector-rust/non-binlog"))
    assert code == ExitCode.BAD_DATA
    assert "BadMagic" in err and "non-binlog at position 0" in err


def test_in_use_truncation_is_reported_not_fatal(capsys) -> None:
    code, _, err = run(capsys, "decode", str(BB / "binlog_truncated_prev_gtid_event.000001"))
    assert code == 0
    assert "ended at position 120 (in use, incomplete)" in err


def test_stats_json_counts_match_decode(capsys) -> None:
    code, out, _ = run(capsys, "stats", "--json", str(SAKILA))
    assert code == 0
    report = json.loads(out)
    assert report["rows"] == 47273
    assert report["tables"]["sakila.payment"] == {"insert": 16049}
    assert report["event_types"]["WRITE_ROWS_V1"] == 1374
    largest = report["largest_transactions"][0]
    assert largest["rows"] == 16049 and largest["bytes"] > 0
    assert sum(e["events"] for e in report["events_over_time"]) == report["events"]


def test_stats_text(capsys) -> None:
    code, out, _ = run(capsys, "stats", str(ZALORA / "gtid-fixtures/mysql-bin.01"))
    assert code == 0
    assert "largest transactions" in out and "events over time" in out


def test_bad_option_value(capsys) -> None:
    code, _, err = run(capsys, "decode", "--ops", "upsert", str(ZALORA / "mysql-bin.01"))
    assert code == 2 and "--ops" in err
    code, _, err = run(capsys, "decode", "--start-time", "yesterday", str(ZALORA / "mysql-bin.01"))
    assert code == 2 and "ISO 8601" in err


def test_stats_text_escapes_c0_and_c1_controls_json_keeps_them(capsys, tmp_path: Path) -> None:
    """Database, table and file names holding C0 (ESC) and C1 (U+009B, a terminal's CSI) controls: the human text
    shows them as escapes, the JSON report as they are."""
    from binlake.testing.binlog_writer import BinlogWriter, column

    db, table = "d\x9b31mb", "t\x1b[31mred\x9b2J\x85"
    path = tmp_path / "f\x9b2J\x07name.000001"
    with open(path, "wb") as f:
        w = BinlogWriter(f, checksum=True, row_metadata="FULL", timestamp=1_700_000_000,
                         start_gtid="3e11fa47-71ca-11e1-9e33-c80aa9429562:1")
        tm = w.define_table(10, db, table, [column("int", "c", 0, nullable=False)], [0])
        with w.transaction(timestamp=1_700_000_100) as tx:
            tx.insert(tm, [[1], [2]])
        w.rotate("f.000002", timestamp=1_700_000_200)
    code, out, _ = run(capsys, "stats", str(path))
    assert code == 0
    assert all(ch.isprintable() for line in out.splitlines() for ch in line), out
    assert "d\\x9b31mb.t\\x1b[31mred\\x9b2J\\x85" in out
    assert out.count("f\\x9b2J\\x07name.000001") == 3  # file list, largest and longest transactions
    code, out, _ = run(capsys, "stats", "--json", str(path))
    report = json.loads(out)
    assert report["tables"] == {f"{db}.{table}": {"insert": 2}}
    assert report["files"][0]["file"] == path.name


@pytest.mark.parametrize("as_process", [True, False])
def test_the_process_command_ends_its_process_once_the_exit_handlers_ran(as_process: bool, tmp_path: Path) -> None:
    """`main()` as the process's command (argv from sys.argv) ends the process itself: the atexit handlers run (the
    collector frozen before the ones registered earlier, so the shutdown's collections would skip its objects),
    buffered output is flushed and the exit code is the command's; the interpreter's teardown is skipped, so code
    after main() never runs. `main(argv)` called from Python returns the same code and leaves the collector and
    the process as they were."""
    import subprocess
    import sys

    missing = str(tmp_path / "absent.000001")
    expected = main(["stats", missing])
    assert expected != 0
    call = "cli.main()" if as_process else f"cli.main(['stats', {missing!r}])"
    code = ("import atexit, gc, sys\n"
            f"sys.argv = ['binlake', 'stats', {missing!r}]\n"
            "from binlake import cli\n"
            "atexit.register(lambda: sys.stdout.write(f'handler frozen={gc.get_freeze_count() > 0}'))\n"
            "sys.stdout.write('buffered ')\n"
            f"rc = {call}\n"
            "print('returned', rc)\n"
            "sys.exit(99)\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          cwd=Path(__file__).resolve().parents[2])
    assert "absent.000001" in done.stderr and "Traceback" not in done.stderr
    if as_process:
        assert done.returncode == expected
        assert done.stdout == "buffered handler frozen=True"
    else:
        assert done.returncode == 99
        assert done.stdout == f"buffered returned {expected}\nhandler frozen=False"


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="glibc's allocator only")
def test_ingest_keeps_freed_blocks_under_4_mib_for_reuse_and_still_maps_larger_ones() -> None:
    """After _keep_freed_memory (ingest, bootstrap), a 2 MiB block comes from the heap (no new mmap'd block, so
    freeing it returns nothing to the kernel) while an 8 MiB one is still mmap'd (and given back when freed)."""
    probe = """
import ctypes
from binlake.cli import _keep_freed_memory

class Info(ctypes.Structure):
    _fields_ = [(n, ctypes.c_size_t) for n in ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks",
                                               "fsmblks", "uordblks", "fordblks", "keepcost")]

mallinfo2 = ctypes.CDLL(None).mallinfo2
mallinfo2.restype = Info
def mapped(n):
    before = mallinfo2().hblks
    block = bytearray(n)
    return mallinfo2().hblks - before
print(mapped(2 << 20), mapped(8 << 20))
_keep_freed_memory()
print(mapped(2 << 20), mapped(8 << 20))
"""
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout.split()
    assert out[2:] == ["0", "1"], out  # kept under 4 MiB, mapped above
    assert out[1] == "1"  # 8 MiB blocks are mmap'd either way: the probe sees mappings
