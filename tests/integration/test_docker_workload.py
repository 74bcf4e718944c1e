"""docker/workload.py, the compose stack's writer, against a real server and the OSS-compatible store: it writes
row changes (with the mid-stream ALTER that moves a column), rotates the binlog, ships each closed file to OSS
once, and what it shipped ingests into a lake whose current tables equal the server's tables."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from binlake.lake.ingest import IngestOptions
from binlake.lake.query import run_query
from binlake.quality.stages import run_ingest
from binlake.testing.oss_server import OssServer

ROOT = Path(__file__).resolve().parents[2]


def test_workload_writes_ships_and_ingests(mariadb_minimal, tmp_path) -> None:
    server = mariadb_minimal
    with server.connect() as conn, conn.cursor() as cur:
        cur.execute("DROP DATABASE IF EXISTS shop")
        cur.execute("DROP DATABASE IF EXISTS crm")
    earlier = {f.name for f in server.flush_logs()}  # other tests' files: shipped too, but not ingested here
    with OssServer(access_key_id="demo-ak", access_key_secret="demo-sk", buckets=()) as oss:
        cmd = [sys.executable, str(ROOT / "docker" / "workload.py"), "--host=127.0.0.1", f"--port={server.port}",
               "--rounds=40", "--interval=0", "--flush-every=15", "--alter-at=20", f"--binlog-dir={server.binlog_dir}",
               f"--oss-endpoint={oss.endpoint}", "--oss-bucket=binlake-binlogs", "--oss-prefix=mysql8/"]
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stderr
        assert "done after 40 rounds" in done.stdout
        shipped = dict(oss.buckets["binlake-binlogs"].items())
        closed = server.binlog_files()[:-1]
        # every closed file is in OSS, byte for byte, under the prefix
        for f in closed:
            assert shipped[f"mysql8/{f.name}"].data == f.read_bytes()
        # a second run ships nothing twice (HEAD finds them) and continues the data
        again = subprocess.run([*cmd[:4], "--rounds=3", *cmd[5:]], capture_output=True, text=True, timeout=300)
        assert again.returncode == 0, again.stderr
        assert len(oss.buckets["binlake-binlogs"]) == len(server.binlog_files()) - 1
        objects = oss.buckets["binlake-binlogs"]
        landing = tmp_path / "landing"
        landing.mkdir()
        files = []
        for key in sorted(objects):
            if key.removeprefix("mysql8/") in earlier:
                continue
            path = landing / key.removeprefix("mysql8/")
            path.write_bytes(objects[key].data)
            files.append(str(path))

    with server.connect() as conn, conn.cursor() as cur:
        cur.execute("SELECT ordinal_position FROM information_schema.columns WHERE table_schema = 'shop' "
                    "AND table_name = 'customers' AND column_name = 'city'")
        assert cur.fetchone()[0] == 2  # the ALTER ran
        cur.execute("SELECT id, name, city, balance FROM shop.customers ORDER BY id")
        customers = [tuple(str(v) if v is not None else None for v in r) for r in cur.fetchall()]
        cur.execute("SELECT id, status, amount FROM shop.orders ORDER BY id")
        orders = [tuple(str(v) for v in r) for r in cur.fetchall()]
        cur.execute("SELECT count(*) FROM crm.contacts")
        contacts = cur.fetchone()[0]
    assert len(customers) > 20 and len(orders) > 40

    lake = tmp_path / "lake"
    summary = run_ingest(IngestOptions(lake=str(lake), files=files, databases={"shop", "crm"}))
    assert summary.batch is not None
    got = run_query(str(lake), "SELECT id, name, city, balance FROM shop.customers ORDER BY id").to_pylist()
    assert [tuple(str(v) if v is not None else None for v in r.values()) for r in got] == customers
    got = run_query(str(lake), "SELECT id, status, amount FROM shop.orders ORDER BY id").to_pylist()
    assert [tuple(str(v) for v in r.values()) for r in got] == orders
    assert run_query(str(lake), "SELECT count(*) AS n FROM crm.contacts").to_pylist() == [{"n": contacts}]
