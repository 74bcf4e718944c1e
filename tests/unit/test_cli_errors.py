"""Bad input to every subcommand: one line on stderr naming what is wrong, the documented exit code (binlake.exitcodes),
nothing written. Run in-process through `binlake.cli.main`, and as a real process where pipes and tracebacks matter."""

from __future__ import annotations

import hashlib
import os
import random
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from binlake.cli import main
from binlake.exitcodes import ExitCode
from tests.conftest import SHARED_BINLOGS

BB = SHARED_BINLOGS / "blackbeam__rust_mysql_common"
SMALL = BB / "mariadb-bin.000001"  # FULL metadata, 2 inserts into toddy_test.outbox
SAKILA = SHARED_BINLOGS / "osheroff__mysql-binlog-connector-java/mysql-bin.sakila.gz"
ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.skipif(not BB.exists(), reason=f"fixture binlogs not found at {SHARED_BINLOGS}")


def tree(path: Path) -> dict[str, str]:
    """Every file under `path` with a hash of its bytes (directories as entries too)."""
    out = {}
    for p in sorted(path.rglob("*")):
        out[str(p.relative_to(path))] = hashlib.sha256(p.read_bytes()).hexdigest() if p.is_file() else "dir"
    return out


@pytest.fixture(scope="module")
def lake(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("lake") / "lake"
    assert main(["ingest", "--source", f"local:{SMALL}", "--lake", str(root), "--no-progress", "--no-gates"]) == 0
    return root


def fails(capsys, work: Path, code: ExitCode, *args: str, says: str = "") -> str:
    """Run, and check: the exit code, exactly one stderr line (naming `says`), nothing on stdout, no file under
    `work` created or changed."""
    before = tree(work)
    got = main(list(args))
    out, err = capsys.readouterr()
    assert got == code, (args, got, err)
    assert out == "", (args, out)
    lines = err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("binlake: "), (args, err)
    assert "Traceback" not in err
    assert says in lines[0], (args, lines[0])
    assert tree(work) == before, args
    return lines[0]


def test_decode_bad_files(capsys, tmp_path: Path) -> None:
    good = tmp_path / "good.000001"
    shutil.copy(SMALL, good)
    fails(capsys, tmp_path, ExitCode.USAGE, "decode", str(tmp_path / "missing.000001"), says="missing.000001")
    fails(capsys, tmp_path, ExitCode.USAGE, "decode", str(good), str(tmp_path), says=str(tmp_path))
    fails(capsys, tmp_path, ExitCode.USAGE, "stats", str(tmp_path / "nope"), says="nope")
    # gzip whose body is cut short, and one with damaged compressed bytes (seeded: the damage varies by seed)
    data = SAKILA.read_bytes()
    (tmp_path / "cut.000002.gz").write_bytes(data[: len(data) // 2])
    fails(capsys, tmp_path, ExitCode.BAD_DATA, "stats", str(tmp_path / "cut.000002.gz"), says="cut.000002.gz")
    rng = random.Random(14)
    bad = bytearray(data)
    for _ in range(8):
        i = rng.randrange(200, len(bad) - 200)
        bad[i] ^= 0xFF
    (tmp_path / "bad.000003.gz").write_bytes(bytes(bad))
    fails(capsys, tmp_path, ExitCode.BAD_DATA, "stats", str(tmp_path / "bad.000003.gz"), says="bad.000003.gz")
    (tmp_path / "text.000004").write_text("hello\n")
    fails(capsys, tmp_path, ExitCode.BAD_DATA, "stats", str(tmp_path / "text.000004"), says="BadMagic")


def test_decode_inputs_that_are_no_regular_files(capsys, tmp_path: Path) -> None:
    """A FIFO (opening it blocked until a writer came: a hang), a device and a symbolic link to nothing: usage
    errors naming the input, before anything is read."""
    (tmp_path / "dangling.000001").symlink_to(tmp_path / "gone.000001")
    fails(capsys, tmp_path, ExitCode.USAGE, "decode", str(tmp_path / "dangling.000001"), says="no such file")
    fails(capsys, tmp_path, ExitCode.USAGE, "stats", os.devnull, says=f"{os.devnull}: not a regular file")
    fifo = tmp_path / "pipe.000001"
    os.mkfifo(fifo)
    for command in ("decode", "stats"):
        # In a child with a generous bound only because the failure mode is a hang.
        done = _binlake(command, str(fifo), timeout=120)
        lines = done.stderr.decode().splitlines()
        assert done.returncode == ExitCode.USAGE and done.stdout == b"", done
        assert len(lines) == 1 and f"{fifo}: not a regular file" in lines[0], lines


def test_decode_bad_options(capsys, tmp_path: Path) -> None:
    f = str(SMALL)
    fails(capsys, tmp_path, ExitCode.USAGE, "decode", "--start-position", "-1", f, says="--start-position")
    fails(capsys, tmp_path, ExitCode.USAGE, "decode", "--start-position", "x", f, says="--start-position")
    fails(capsys, tmp_path, ExitCode.USAGE, "decode", "--tables", "(", f, says="--tables")
    fails(capsys, tmp_path, ExitCode.USAGE, "decode", "--ops", "upsert", f, says="--ops")
    fails(capsys, tmp_path, ExitCode.USAGE, "decode", "--stop-time", "soon", f, says="soon")
    # empty filters kept nothing (exit 0, no output); empty times were ignored
    for opt, values in (("--databases", ("", " ", ",")), ("--ops", ("", ", ,")), ("--stop-time", ("", " ")),
                        ("--start-time", ("",))):
        for value in values:
            fails(capsys, tmp_path, ExitCode.USAGE, "decode", f"{opt}={value}", f, says=f"{opt} is empty")
            fails(capsys, tmp_path, ExitCode.USAGE, "stats", f"{opt}={value}", f, says=f"{opt} is empty")
    fails(capsys, tmp_path, ExitCode.USAGE, "decode", "--format", "xml", f, says="--format")
    fails(capsys, tmp_path, ExitCode.USAGE, "decode", "--no-such-option", f, says="--no-such-option")
    fails(capsys, tmp_path, ExitCode.USAGE, "decode", says="files")
    fails(capsys, tmp_path, ExitCode.USAGE, "decode", "--schemas", str(tmp_path / "none"), f, says="--schemas")
    fails(capsys, tmp_path, ExitCode.USAGE, "decode", "-o", str(tmp_path / "no" / "x.json"), f, says="--output")
    fails(capsys, tmp_path, ExitCode.USAGE, "decode", "-o", str(tmp_path), f, says="--output")
    mine = tmp_path / "mine.000001"
    shutil.copy(SMALL, mine)
    fails(capsys, tmp_path, ExitCode.USAGE, "decode", "-o", str(mine), str(mine), says="input")
    fails(capsys, tmp_path, ExitCode.USAGE, "stats", "--html", str(mine), str(mine), says="input")
    fails(capsys, tmp_path, ExitCode.USAGE, "stats", "--top", "-3", f, says="--top")
    fails(capsys, tmp_path, ExitCode.USAGE, "stats", "--html", str(tmp_path / "no" / "x.html"), f, says="--html")
    fails(capsys, tmp_path, ExitCode.USAGE, "no-such-command", says="no-such-command")
    # a data error while writing -o: the partial file is removed, nothing is left behind
    fails(capsys, tmp_path, ExitCode.BAD_DATA, "decode", "--format", "sql", "-o", str(tmp_path / "out.sql"), str(SAKILA),
          says="needs column names")


def test_local_source_never_skips_a_damaged_binlog(capsys, tmp_path: Path) -> None:
    """A file named like a binlog but without the magic (a flipped first byte, an empty copy, the UTF-8-mangled
    binlog of a real project) between good ones was left out with exit 0; now BadMagic naming it, nothing written.
    Index files, hidden downloads (.name.part) and other names are still left out."""
    src = tmp_path / "src"
    src.mkdir()
    shutil.copy(SMALL, src / "mysql-bin.000001")
    (src / "mysql-bin.index").write_text("./mysql-bin.000001\n")
    (src / ".mysql-bin.000002.part").write_bytes(b"")
    (src / "notes.txt").write_text("x")
    lake = tmp_path / "lake"
    good = SMALL.read_bytes()
    for damaged in (bytes([good[0] ^ 0xFF]) + good[1:], b"",
                    (SHARED_BINLOGS / "alibaba__canal/tsdb/mysql-bin.000001").read_bytes()):
        (src / "mysql-bin.000002").write_bytes(damaged)
        line = fails(capsys, tmp_path, ExitCode.BAD_DATA, "ingest", "--source", f"local:{src}", "--lake", str(lake),
                     "--no-progress", "--no-gates", says="BadMagic")
        assert "mysql-bin.000002" in line and not lake.exists()
    (src / "mysql-bin.000002").unlink()
    for empty in ("", " , "):  # an empty filter ingested every database
        fails(capsys, tmp_path, ExitCode.USAGE, "ingest", "--source", f"local:{src}", "--lake", str(lake),
              f"--databases={empty}", "--no-progress", "--no-gates", says="--databases is empty")
    assert main(["ingest", "--source", f"local:{src}", "--lake", str(lake), "--no-progress", "--no-gates"]) == 0
    capsys.readouterr()


def test_sources(capsys, tmp_path: Path, monkeypatch) -> None:
    for k in ("ALIBABA_CLOUD_ACCESS_KEY_ID", "ALIBABA_CLOUD_ACCESS_KEY_SECRET", "OSS_ENDPOINT", "OSS_REGION",
              "OSS_ACCESS_KEY_ID", "OSS_ACCESS_KEY_SECRET"):
        monkeypatch.delenv(k, raising=False)
    lake, land = str(tmp_path / "lake"), str(tmp_path / "landing")
    fails(capsys, tmp_path, ExitCode.USAGE, "ingest", "--source", "ftp://x", "--lake", lake, says="ftp://x")
    fails(capsys, tmp_path, ExitCode.USAGE, "ingest", "--source", "rds:", "--lake", lake, "--landing", land,
          says="instance")
    fails(capsys, tmp_path, ExitCode.USAGE, "ingest", "--source", "rds:rm-x", "--lake", lake, "--landing", land,
          says="credentials")
    fails(capsys, tmp_path, ExitCode.USAGE, "ingest", "--source", "oss://bkt-x/p", "--lake", lake, "--landing", land,
          says="OSS_ENDPOINT")
    fails(capsys, tmp_path, ExitCode.USAGE, "ingest", "--source", f"local:{tmp_path / 'none'}", "--lake", lake,
          says="no binlog files")
    fails(capsys, tmp_path, ExitCode.USAGE, "ingest", "--source", f"local:{SMALL}", "--lake", lake, "--from", "x",
          says="--from")
    fails(capsys, tmp_path, ExitCode.USAGE, "ingest", "--source", f"local:{SMALL}", "--lake", lake, "--split-mb", "0",
          says="--split-mb")
    fails(capsys, tmp_path, ExitCode.USAGE, "ingest", "--source", f"local:{SMALL}", "--lake", lake, "--expectations",
          str(tmp_path / "none.yml"), says="--expectations")
    monkeypatch.setenv("ALIBABA_CLOUD_ACCESS_KEY_ID", "ak")
    monkeypatch.setenv("ALIBABA_CLOUD_ACCESS_KEY_SECRET", "sk")
    fails(capsys, tmp_path, ExitCode.USAGE, "ingest", "--source", "rds:../../etc", "--lake", lake, "--landing", land,
          says="instance id")
    fails(capsys, tmp_path, ExitCode.USAGE, "ingest", "--source", "rds:rm-x", "--lake", lake, "--landing", land,
          "--rds-endpoint", "not a url", says="endpoint")
    monkeypatch.setenv("OSS_ENDPOINT", "not a url")
    monkeypatch.setenv("OSS_ACCESS_KEY_ID", "ak")
    monkeypatch.setenv("OSS_ACCESS_KEY_SECRET", "sk")
    fails(capsys, tmp_path, ExitCode.USAGE, "ingest", "--source", "oss://bkt-x/p", "--lake", lake, "--landing", land,
          says="OSS_ENDPOINT")
    # an OSS endpoint nobody listens on (a port of ours, closed again): unavailable, after the retries
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    monkeypatch.setenv("OSS_ENDPOINT", f"http://127.0.0.1:{port}")
    monkeypatch.setenv("OSS_ACCESS_KEY_ID", "ak")
    monkeypatch.setenv("OSS_ACCESS_KEY_SECRET", "sk")
    monkeypatch.setenv("OSS_AUTH_VERSION", "v1")
    line = fails(capsys, tmp_path, ExitCode.UNAVAILABLE, "ingest", "--source", "oss://bkt-x/p", "--lake", lake,
                 "--landing", land, says="oss://bkt-x/p")
    assert "sk" not in line.split("oss://bkt-x/p", 1)[0]


def test_lake_arguments(capsys, tmp_path: Path, lake: Path) -> None:
    afile = tmp_path / "afile"
    afile.write_text("x")
    fails(capsys, tmp_path, ExitCode.USAGE, "ingest", "--source", f"local:{SMALL}", "--lake", str(afile), says="afile")
    fails(capsys, tmp_path, ExitCode.USAGE, "ingest", "--source", f"local:{SMALL}", "--lake", str(afile / "sub"),
          says="afile")
    for lk in (str(afile), str(tmp_path / "missing")):
        fails(capsys, tmp_path, ExitCode.USAGE, "query", "--lake", lk, "SELECT 1", says=lk)
        fails(capsys, tmp_path, ExitCode.USAGE, "trace", "--lake", lk, "--table", "a.b", "--key", "id=1", says=lk)
        fails(capsys, tmp_path, ExitCode.USAGE, "quarantine", "list", "--lake", lk, says=lk)
        fails(capsys, tmp_path, ExitCode.USAGE, "report", "--lake", lk, "--out", str(tmp_path / "r.html"), says=lk)
    (tmp_path / "empty").mkdir()
    fails(capsys, tmp_path, ExitCode.USAGE, "query", "--lake", str(tmp_path / "empty"), "SELECT 1",
          says="not a binlake lake")
    before = tree(lake)
    fails(capsys, tmp_path, ExitCode.USAGE, "trace", "--lake", str(lake), "--table", "toddy_test.outbox", "--key", "id",
          says="--key")
    fails(capsys, tmp_path, ExitCode.USAGE, "trace", "--lake", str(lake), "--table", "outbox", "--key", "id=1",
          says="--table")
    fails(capsys, tmp_path, ExitCode.USAGE, "trace", "--lake", str(lake), "--table", "toddy_test.outbox", "--key",
          "id=abc", says="id=abc")
    fails(capsys, tmp_path, ExitCode.USAGE, "trace", "--lake", str(lake), "--table", "toddy_test.outbox", "--key",
          "nope=1", says="nope")
    for action in ("show", "release", "discard"):
        fails(capsys, tmp_path, ExitCode.USAGE, "quarantine", action, "99", "--lake", str(lake), says="99")
    fails(capsys, tmp_path, ExitCode.USAGE, "quarantine", "show", "-1", "--lake", str(lake), says="batch")
    fails(capsys, tmp_path, ExitCode.USAGE, "bootstrap", "--mysql", "mysql://u:p@127.0.0.1:1/", "--tables", "nodot",
          "--lake", str(tmp_path / "l2"), says="--tables")
    fails(capsys, tmp_path, ExitCode.USAGE, "schema", "snapshot", "--mysql", "not-a-url", "--out",
          str(tmp_path / "s"), says="--mysql")
    line = fails(capsys, tmp_path, ExitCode.USAGE, "schema", "snapshot", "--mysql", "mysqll://u:top@secret@h/",
                 "--out", str(tmp_path / "s"), says="--mysql")
    assert "top" not in line and "secret" not in line
    fails(capsys, tmp_path, ExitCode.USAGE, "demo", "--workdir", str(afile), says="afile")
    # a directory the demo did not make is never emptied
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "precious.txt").write_text("keep me")
    fails(capsys, tmp_path, ExitCode.USAGE, "demo", "--workdir", str(mine), says="not made by binlake demo")
    assert tree(lake) == before


def test_option_values(capsys, tmp_path: Path, lake: Path) -> None:
    from binlake.cli import ENGINES
    from binlake.lake.engines.factory import ENGINE_NAMES

    assert ENGINES == ENGINE_NAMES
    src = f"local:{SMALL}"
    for args in (["ingest", "--source", src, "--lake", str(tmp_path / "l"), "--engine", "nosuch"],
                 ["trace", "--lake", str(lake), "--table", "toddy_test.outbox", "--key", "id=1", "--engine", "x"]):
        fails(capsys, tmp_path, ExitCode.USAGE, *args, says="--engine")
    for bad in ("h:notaport", "h:0", ":25", "h:99999"):
        fails(capsys, tmp_path, ExitCode.USAGE, "ingest", "--source", src, "--lake", str(tmp_path / "l"),
              "--smtp-host", bad, says="--smtp-host")
    for bad in ("spark.executor.memory", "executor.memory=4g", "=1"):
        fails(capsys, tmp_path, ExitCode.USAGE, "ingest", "--source", src, "--lake", str(tmp_path / "l"), "--spark",
              "--spark-conf", bad, says="--spark-conf")
    for cmd in (["quarantine"], ["schema"], ["quality"], ["quarantine", "list"], ["query", "--lake", str(lake)]):
        fails(capsys, tmp_path, ExitCode.USAGE, *cmd, says="required")


def test_unreachable_server_names_the_option_without_the_password(capsys, tmp_path: Path) -> None:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    url = f"mysql://user:s3cret-pw@127.0.0.1:{port}/"
    line = fails(capsys, tmp_path, ExitCode.UNAVAILABLE, "bootstrap", "--mysql", url, "--tables", "a.b", "--lake",
                 str(tmp_path / "lake"), says="--mysql")
    assert "s3cret-pw" not in line
    line = fails(capsys, tmp_path, ExitCode.UNAVAILABLE, "schema", "snapshot", "--mysql", url, "--out",
                 str(tmp_path / "store"), says="--mysql")
    assert "s3cret-pw" not in line


def test_read_only_lake(capsys, tmp_path: Path, lake: Path) -> None:
    ro = tmp_path / "ro"
    shutil.copytree(lake, tmp_path / "copy")
    ro.mkdir()
    if os.geteuid() != 0:
        for p in [tmp_path / "copy", *(tmp_path / "copy").rglob("*")]:
            if p.is_dir():
                p.chmod(0o555)
        ro = tmp_path / "copy"
        unmount = None
    else:  # root ignores permission bits: a read-only bind mount
        done = subprocess.run(["mount", "--bind", str(tmp_path / "copy"), str(ro)], capture_output=True)
        if done.returncode != 0:
            pytest.skip(f"cannot make a read-only mount as root here: {done.stderr.decode().strip()}")
        subprocess.run(["mount", "-o", "remount,ro,bind", str(ro)], check=True)
        unmount = ro
    try:
        before = tree(ro)
        assert main(["ingest", "--source", f"local:{BB / 'json.binlog.000001'}", "--lake", str(ro),
                     "--no-progress"]) == ExitCode.UNAVAILABLE
        err = capsys.readouterr().err
        assert len(err.splitlines()) == 1 and "not writable" in err and str(ro) in err
        assert tree(ro) == before
        # reading a read-only lake is fine
        assert main(["query", "--lake", str(ro), "SELECT count(*) AS n FROM toddy_test.outbox__history"]) == 0
        assert capsys.readouterr().out.split() == ["n", "2"]
    finally:
        if unmount is not None:
            subprocess.run(["umount", str(unmount)], check=True)


def _binlake(*args: str, env: dict | None = None, **kw) -> subprocess.CompletedProcess:
    e = {**os.environ, "PYTHONPATH": str(ROOT), **(env or {})}
    return subprocess.run([sys.executable, "-m", "binlake.cli", *args], env=e, capture_output=True, cwd=ROOT, **kw)


def test_broken_pipe_is_quiet_and_not_success(tmp_path: Path) -> None:
    # the reader takes one line and closes the pipe (`| head -1`): no traceback, and never exit 0 with output lost
    e = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen([sys.executable, "-m", "binlake.cli", "decode", "--no-progress", str(SAKILA)], env=e,
                            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proc.stdout is not None and proc.stderr is not None
    assert proc.stdout.readline().startswith(b"{")
    proc.stdout.close()
    err = proc.stderr.read().decode()
    assert proc.wait() == ExitCode.BROKEN_PIPE, err
    assert err == ""
    # a reader gone before the summary is printed (`| true`): the lake was written, the summary lost: not 0
    lake = tmp_path / "lake"
    proc = subprocess.Popen([sys.executable, "-m", "binlake.cli", "ingest", "--source", f"local:{SMALL}", "--lake",
                             str(lake), "--no-progress", "--no-gates"], env=e, cwd=ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.close()
    err = proc.stderr.read().decode()
    assert proc.wait() == ExitCode.BROKEN_PIPE, err
    assert "Traceback" not in err and "error" not in err
    assert (lake / "toddy_test" / "outbox__history").is_dir()


def test_internal_error_one_line_and_debug_traceback(tmp_path: Path) -> None:
    # a bug stand-in: a decode whose output writer is broken from the inside (a sitecustomize-free way: -c)
    code = ("import sys, binlake.binlog.api as a; from binlake.cli import main\n"
            "def boom(*x, **k): raise ZeroDivisionError('boom')\n"
            "a.decode_to = boom\n"
            "sys.exit(main(sys.argv[1:]))")
    e = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-c", code, "decode", str(SMALL)], env=e, capture_output=True, cwd=ROOT)
    err = done.stderr.decode()
    assert done.returncode == ExitCode.INTERNAL
    assert len(err.splitlines()) == 1 and "internal error" in err and "ZeroDivisionError" in err
    assert "--debug" in err and "BINLAKE_DEBUG=1" in err
    done = subprocess.run([sys.executable, "-c", code, "decode", "--debug", str(SMALL)], env=e, capture_output=True,
                          cwd=ROOT)
    assert done.returncode == ExitCode.INTERNAL and "Traceback" in done.stderr.decode()
    done = subprocess.run([sys.executable, "-c", code, "decode", str(SMALL)], env={**e, "BINLAKE_DEBUG": "1"},
                          capture_output=True, cwd=ROOT)
    assert done.returncode == ExitCode.INTERNAL and "Traceback" in done.stderr.decode()


def test_exit_codes_are_documented() -> None:
    readme = (ROOT / "docs" / "cli.md").read_text()
    section = readme.split("## Exit codes", 1)[1].split("\n## ", 1)[0]
    for code in ExitCode:
        assert f"| {int(code)} |" in section, code


def test_spark_job_entry_point_reports_like_the_cli(capsys, tmp_path: Path) -> None:
    from spark_jobs.ingest import main as spark_main

    # bad input fails before a Spark session is started: one line, the documented code
    before = tree(tmp_path)
    assert spark_main(["--source", "ftp://x", "--lake", str(tmp_path / "lake")]) == ExitCode.USAGE
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1 and "ftp://x" in err
    assert spark_main(["--source", f"local:{SMALL}", "--lake", str(tmp_path / "lake"), "--nope"]) == ExitCode.USAGE
    assert "--nope" in capsys.readouterr().err
    assert tree(tmp_path) == before


def test_damaged_gzip_delivers_every_event_before_the_damage(tmp_path: Path) -> None:
    """A gzip cut short or damaged mid-body: every complete event before the damage is decoded, then the typed
    error names the file and the position of the first event it could not read."""
    from binlake.binlog.decoder import BinlogDecoder, DecodeOptions
    from binlake.binlog.errors import CorruptEvent, TruncatedFile
    from binlake.binlog.records import RowChange

    raw = __import__("gzip").open(SAKILA).read()
    everything = [(r.pos, r.row) for r in BinlogDecoder(DecodeOptions()).decode_files([str(SAKILA)])
                  if isinstance(r, RowChange)]
    rng = random.Random(3)
    packed = SAKILA.read_bytes()
    for cut in sorted(rng.sample(range(len(packed) // 4, len(packed) - 64), 3)):
        for damage in ("cut", "flip"):
            data = packed[:cut] if damage == "cut" else packed[:cut] + bytes([packed[cut] ^ 0x55]) + packed[cut + 1:]
            path = tmp_path / f"{damage}-{cut}.000001.gz"
            path.write_bytes(data)
            got = []
            with pytest.raises((TruncatedFile, CorruptEvent)) as err:
                for r in BinlogDecoder(DecodeOptions()).decode_files([str(path)]):
                    if isinstance(r, RowChange):
                        got.append((r.pos, r.row))
            assert err.value.file == path.name
            if damage == "flip":  # inflated garbage may be caught by the decoder before gzip's own check
                continue
            stop = err.value.pos
            assert "gzip body ends early" in str(err.value) and 0 < stop <= len(raw)
            # every change of the intact file in the events before the reported position, and nothing else
            assert got == [x for x in everything if x[0] < stop]
            assert len(raw) * cut // len(packed) - stop < 1 << 17  # what is lost is at most a piece or two
