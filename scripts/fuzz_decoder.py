"""A larger damaged-binlog run than the suite's (tests/unit/test_decoder_damage.py): fixture files, writer-made
files and files a private MariaDB writes (FULL and MINIMAL row metadata, CRC32 and none, a varied workload; closed
by ROTATE and STOP, and the active file copied while the server still has it open).

    .venv/bin/python scripts/fuzz_decoder.py --cases 300 --seed 1 [--no-mariadb] [--json out.json]

Prints the outcome counts; exits 1 when any case failed (a hang, a memory blow-up, an untyped exception, or a clean
end that lost changes), listing each failure with its seed so it can be replayed with binlog_damage.mutate().
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from binlake.testing.binlog_damage import Intact, fixture_corpus, load_intact, run_mutants, writer_corpus  # noqa: E402


def mariadb_corpus(seed: int) -> list[Intact]:
    from binlake.testing.mariadb import PrivateMariaDB
    from binlake.testing.workload import run_all_types_workload

    out: list[Intact] = []
    for metadata, checksum in (("FULL", "CRC32"), ("MINIMAL", "NONE")):
        base = Path(tempfile.mkdtemp(prefix="binlake-fuzz-"))
        server = PrivateMariaDB.start(row_metadata=metadata, base_dir=base,
                                      extra_args=(f"--binlog-checksum={checksum}",))
        try:
            rng = random.Random(seed)
            with server.connect() as conn:
                conn.cursor().execute("CREATE DATABASE IF NOT EXISTS fuzz")
                conn.select_db("fuzz")
                run_all_types_workload(conn, "t1", rng, rows=60)
                conn.commit()
            server.flush_logs()  # closed by ROTATE
            with server.connect("fuzz") as conn:
                run_all_types_workload(conn, "t2", rng, rows=60)
                conn.commit()
            active = server.binlog_files()[-1]
            snapshot = active.read_bytes()  # in use: the server still has it open
            out.append(load_intact(f"mariadb-{metadata}-{checksum}-open", snapshot))
        finally:
            server.stop(remove=False)
        for path in server.binlog_files():  # after shutdown: ROTATE-closed files and the STOP-closed last one
            data = path.read_bytes()
            if len(data) > 4:
                out.append(load_intact(f"mariadb-{metadata}-{checksum}-{path.name}", data))
        shutil.rmtree(base, ignore_errors=True)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cases", type=int, default=300, help="mutants per source file (half with CRCs recomputed)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--no-mariadb", action="store_true", help="skip the files a private MariaDB writes")
    ap.add_argument("--json", help="write the counts and failures to this file")
    args = ap.parse_args()
    corpus = fixture_corpus(ROOT.parent / "shared" / "fixtures" / "binlogs") + writer_corpus(seed=args.seed)
    if not args.no_mariadb:
        corpus += mariadb_corpus(args.seed)
    print(f"{len(corpus)} source files, {sum(s.changes for s in corpus)} changes; {args.cases} mutants each",
          flush=True)
    started = time.perf_counter()
    report = run_mutants(corpus, args.cases, seed=args.seed, workers=args.workers, timeout=60)
    elapsed = time.perf_counter() - started
    counts = report.counts()
    kinds = Counter(o.kind for o in report.outcomes)
    print(f"{len(report.outcomes)} mutants in {elapsed:.0f} s: {counts}")
    print(f"typed errors: {report.errors_by_type()}")
    print(f"mutation kinds: {dict(kinds)}")
    for o in report.failures:
        print(f"FAIL {o.source} seed={o.seed} fix_crc={o.fix_crc} {o.kind} ({o.detail}): {o.result} "
              f"{o.changes}/{o.expected} {o.error}")
    if args.json:
        Path(args.json).write_text(json.dumps({
            "cases": len(report.outcomes), "counts": counts, "errors": report.errors_by_type(),
            "failures": [o.__dict__ for o in report.failures]}, indent=1))
    return 1 if report.failures else 0


if __name__ == "__main__":
    sys.exit(main())
