"""`ingest --follow` rounds build the schema timeline incrementally (binlake.schema.timeline.DdlScanCache): a
round decodes for the timeline only the files that are new or grew since the previous round, finds the same DDL
as a full scan, and the lake still equals SELECT * after rounds with DDL in old, growing and new files."""

from __future__ import annotations

import random
import shutil

from binlake.lake.ingest import IngestOptions
from binlake.quality.stages import run_ingest
from binlake.schema.timeline import DdlScanCache, file_keys, scan_ddl
from binlake.settings import QualityConfig
from tests.integration.test_tail import DB, Writer, _lake_rows, _schema, _server_rows, server  # noqa: F401


def _land(db, landing) -> tuple[list[str], set[str]]:
    """Copy the server's binlog files whose size changed (a file that did not change keeps its mtime); returns
    every landed path and the ones copied."""
    landing.mkdir(exist_ok=True)
    copied = set()
    for f in db.binlog_files():
        target = landing / f.name
        if not target.exists() or target.stat().st_size != f.stat().st_size:
            shutil.copyfile(f, target)
            copied.add(str(target))
    return sorted(str(p) for p in landing.iterdir()), copied


def _work(db, rng: random.Random, n: int, ddl: str | None = None, flush: bool = False) -> None:
    with db.connect(DB) as conn:
        for i in range(n):
            Writer.transaction(conn.cursor(), rng)
            if ddl and i == n // 2:
                conn.cursor().execute(ddl)
        if flush:
            conn.cursor().execute("FLUSH BINARY LOGS")


def test_follow_rounds_rescan_only_new_and_grown_files(server, tmp_path):  # noqa: F811
    _schema(server)
    rng = random.Random(4242)
    landing, lake = tmp_path / "landing", tmp_path / "lake"
    cache = DdlScanCache()
    alters = [1]

    def round_(files: list[str]) -> None:
        run_ingest(IngestOptions(lake=str(lake), files=files, databases={DB}, ddl_cache=cache,
                                 quality=QualityConfig(enabled=False)))
        assert _lake_rows(lake) == _server_rows(server)
        uncached = scan_ddl(files, file_keys(files))  # a full scan finds the same statements at the same places
        assert sum("ALTER TABLE" in e.sql for e in uncached) == alters[0]
        assert scan_ddl(files, file_keys(files), DdlScanCache()) == uncached
        assert [(e.file, e.pos, e.sql) for e in uncached] == \
            [(e.file, e.pos, e.sql) for e in scan_ddl(files, file_keys(files), _copy(cache))]

    _work(server, rng, 25, "ALTER TABLE items MODIFY name VARCHAR(350)", flush=True)
    _work(server, rng, 20)
    files, copied = _land(server, landing)
    round_(files)
    assert set(cache.scanned) == set(files)  # the first round reads every file

    for step in range(3):  # DDL in the growing file, then rotations with DDL in the new files
        alters[0] += 1
        _work(server, rng, rng.randint(10, 30), f"ALTER TABLE pairs MODIFY b VARCHAR({13 + step})",
              flush=step > 0)
        before = set(files)
        files, copied = _land(server, landing)
        round_(files)
        assert set(cache.scanned) == copied, "only new and grown files are read for the timeline"
        assert before - copied, "some files stayed unchanged (and were not read again)"


def _copy(cache: DdlScanCache) -> DdlScanCache:
    return DdlScanCache(dict(cache.files))
