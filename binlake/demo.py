"""`binlake demo`: write sample binlogs with a private MariaDB and show what binlake makes of them.

No credentials and no network: the server runs from a temp directory on a loopback port and is removed after.
"""

from __future__ import annotations

import io
import json
import random
import re
import shutil
from pathlib import Path

from .binlog.api import compute_stats, decode_to
from .binlog.decoder import DecodeOptions
from .binlog.stats import render_text
from .testing.mariadb import PrivateMariaDB, ServerError, find_server_binary
from .testing.workload import run_all_types_workload

SHOP_SQL = [
    "CREATE TABLE customers (id INT PRIMARY KEY, name VARCHAR(50), city VARCHAR(30), balance DECIMAL(10,2))",
    "INSERT INTO customers VALUES (1, 'Ada', 'London', 10.50), (2, 'Grace', 'New York', 0.00), (3, '李雷', '北京', 99.99)",
    "UPDATE customers SET balance = balance + 5 WHERE id = 2",
    # The hazard binlake exists for: a column moves; older rows in the binlog still have the old order.
    "ALTER TABLE customers MODIFY city VARCHAR(30) AFTER id",
    "INSERT INTO customers VALUES (4, 'Zürich', 'Linus', 1.00)",
    "UPDATE customers SET id = 40 WHERE id = 4",
    "DELETE FROM customers WHERE id = 1",
]


def write_sample_binlogs(workdir: Path) -> list[Path]:
    """Run a small shop workload and the all-types workload; return the closed binlog files (copied)."""
    server = PrivateMariaDB.start("FULL", base_dir=workdir / "server")
    try:
        with server.connect() as conn, conn.cursor() as cur:
            cur.execute("CREATE DATABASE shop")
            cur.execute("USE shop")
            for sql in SHOP_SQL:
                cur.execute(sql)
            run_all_types_workload(conn, "all_types", random.Random(1), rows=40)
        closed = server.flush_logs()
        out = []
        for f in closed:
            target = workdir / f.name
            shutil.copy(f, target)
            out.append(target)
        return out
    finally:
        server.stop(remove=True)


def run_demo(workdir: str | Path) -> int:
    work = Path(workdir).resolve()
    if work.exists():
        shutil.rmtree(work)
    work.mkdir(parents=True)
    if find_server_binary() is None:
        print("binlake demo needs a local MariaDB server binary (scripts/dev.sh setup installs mariadb-server).")
        return 1
    print(f"[demo] writing sample binlogs with a private MariaDB under {work}")
    try:
        files = write_sample_binlogs(work)
    except ServerError as exc:
        print(f"[demo] could not start the private server: {exc}")
        return 1
    print(f"[demo] {len(files)} binlog file(s): {', '.join(f.name for f in files)}\n")
    print("[demo] binlake stats:")
    print(render_text(compute_stats(files)))
    buf = io.StringIO()
    decode_to(files, buf, "jsonl", DecodeOptions(tables=re.compile(r"^shop\.customers$")))
    print("\n[demo] binlake decode --tables '^shop\\.customers$' (JSON lines):")
    for line in buf.getvalue().splitlines():
        doc = json.loads(line)
        print(f"  {doc['file']}:{doc['pos']} {doc['op']:6} {doc['db']}.{doc['table']} "
              f"before={json.dumps(doc['before'], ensure_ascii=False)} after={json.dumps(doc['after'], ensure_ascii=False)}")
    print("\n[demo] Note the rows after the ALTER: the server wrote FULL metadata, so names follow the new column order.")
    print(f"[demo] files kept in {work}; try: binlake decode --format sql {files[0]}")
    return 0
