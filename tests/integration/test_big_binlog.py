"""The benchmarks' large-binlog generator (benchmarks/big_binlog.py), scaled down: binlake decodes what it writes
(per table and operation counts equal the generator's, the largest transaction is the one big UPDATE) and an
in-process ingest ends with the current tables the generator's own state says (every row's values)."""

from __future__ import annotations

import decimal
import json
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks.big_binlog import generate
from binlake.lake.engines import get_engine
from binlake.lake.ingest import IngestOptions
from binlake.lake.layout import LakeLayout
from binlake.quality.stages import run_ingest
from binlake.settings import QualityConfig

ROOT = Path(__file__).resolve().parents[2]


def _norm(v):
    if isinstance(v, decimal.Decimal):
        return str(v)
    return v.isoformat(sep=" ", timespec="milliseconds") if hasattr(v, "isoformat") else v


@pytest.mark.parametrize(("seed", "mb", "big", "files"), [(16, 3, 11000, 1), (5, 4, 25000, 3)])
def test_generated_binlog_decodes_and_ingests(tmp_path, seed, mb, big, files) -> None:
    path = tmp_path / "mysql-bin.000001"
    info = generate(path, mb, big_tx_rows=big, seed=seed, keep_state=True, files=files)
    paths = [tmp_path / n for n in info["files"]]
    assert len(paths) == files and sorted(p.name for p in tmp_path.iterdir()) == info["files"]
    assert info["bytes"] == sum(p.stat().st_size for p in paths) >= mb << 20
    stats = subprocess.run([sys.executable, "-m", "binlake.cli", "stats", "--json", *map(str, paths)],
                           capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert stats.returncode == 0, stats.stderr
    report = json.loads(stats.stdout)
    assert [f["end"] for f in report["files"]] == ["complete"] * files, report["files"]
    want = {t: {op: n for op, n in ops.items() if n} for t, ops in info["rows"].items()}
    assert report["tables"] == want
    assert report["rows"] == info["changes"] > 0
    # the largest transaction is the big UPDATE (others have at most 10,001 changes)
    assert report["largest_transactions"][0]["rows"] == info["big_tx_changes"] > big

    lake = tmp_path / "lake"
    run_ingest(IngestOptions(lake=str(lake), files=[str(p) for p in paths], quality=QualityConfig(enabled=False)))
    layout = LakeLayout(str(lake))
    events = get_engine().read(layout.current_path("bench", "events"))
    cols = ["id", "account", "amount", "status", "created", "note"]
    got = sorted(tuple(_norm(r[c]) for c in cols) for r in events.select(cols).to_pylist())
    assert got == sorted(tuple(_norm(v) for v in row) for row in info["events_rows"])
    accounts = get_engine().read(layout.current_path("bench", "accounts")).select(["id", "balance", "name"])
    assert sorted(tuple(r.values()) for r in accounts.to_pylist()) == sorted(map(tuple, info["accounts_rows"]))
