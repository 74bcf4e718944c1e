"""`binlake demo`: the main job on the embedded default.

A private MariaDB (temp directory, loopback port, binlog_row_metadata=MINIMAL so rows carry no column names)
writes sample binlogs that include an ALTER TABLE moving a column mid-stream; binlake ingests them from a local
directory into a local Delta lake and prints table counts and one row's change timeline. No credentials, no
network.
"""

from __future__ import annotations

import random
import shutil
from pathlib import Path

from .exitcodes import UnavailableError, UsageError
from .lake.ingest import IngestOptions
from .lake.query import lake_tables, run_query, trace
from .quality.stages import run_ingest
from .terminal import print_report
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


DEMO_MARKER = ".binlake-demo"


def write_sample_binlogs(workdir: Path) -> list[Path]:
    """Run a small shop workload and the all-types workload; return the closed binlog files (copied)."""
    server = PrivateMariaDB.start("MINIMAL", base_dir=workdir / "server")
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
    if find_server_binary() is None:
        raise UnavailableError("binlake demo needs a local MariaDB server binary (scripts/dev.sh setup installs "
                               "mariadb-server)")
    if work.exists():
        # Only a directory an earlier demo made (it carries the marker) is emptied: `--workdir ~` deletes nothing.
        # (Demo directories from before the marker hold only binlogs/ and lake/.)
        if not {p.name for p in work.iterdir()} <= {DEMO_MARKER, "binlogs", "lake"}:
            raise UsageError(f"--workdir {workdir}: exists and was not made by binlake demo (no {DEMO_MARKER}); "
                             "give a new or empty directory")
        shutil.rmtree(work)
    binlogs = work / "binlogs"
    binlogs.mkdir(parents=True)
    (work / DEMO_MARKER).write_text("made by binlake demo; the next demo run empties this directory\n")
    print(f"[demo] writing sample binlogs with a private MariaDB (MINIMAL row metadata) under {work}")
    try:
        files = write_sample_binlogs(binlogs)
    except ServerError as exc:
        raise UnavailableError(f"binlake demo: could not start the private server: {exc}") from None
    print(f"[demo] {len(files)} binlog file(s): {', '.join(f.name for f in files)}\n")
    lake = work / "lake"
    print(f"[demo] binlake ingest --source local:{binlogs} --lake {lake}")
    summary = run_ingest(IngestOptions(lake=str(lake), files=[str(f) for f in files]),
                         progress=lambda msg: print(f"[ingest] {msg}"))
    print_report(summary.text(), summary.rich)
    print("\n[demo] table counts:")
    counts = run_query(str(lake), " UNION ALL ".join(f"SELECT '{name}' AS t, count(*) AS n FROM {name}"
                                                     for name in sorted(lake_tables(str(lake)))) + " ORDER BY t")
    for row in counts.to_pylist():
        print(f"  {row['t']:28} {row['n']}")
    print("\n[demo] shop.customers now (city moved before name by an ALTER mid-stream; names follow it):")
    current = run_query(str(lake), "SELECT id, city, name, balance FROM shop.customers ORDER BY id")
    for row in current.to_pylist():
        print(f"  {row}")
    print("\n[demo] binlake trace --table shop.customers --key id=40   (who changed this row, and when)")
    for line in trace(str(lake), "shop.customers", {"id": "40"}):
        print(f"  {line}")
    again = run_ingest(IngestOptions(lake=str(lake), files=[str(f) for f in files]))
    print(f"\n[demo] running ingest again: {again.text()}")
    print(f"[demo] lake kept in {lake}; try: .venv/bin/binlake query --lake {lake} "
          "\"SELECT * FROM shop.customers__history\"")
    return 0
