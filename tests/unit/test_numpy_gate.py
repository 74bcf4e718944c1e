"""Temporal and DECIMAL columns converted one by one while numpy is not worth importing (vectorized.numpy_ready)
give exactly the values of the whole-column numpy path: seeded random DATETIME/TIMESTAMP/TIME at fsp 0, 3 and 6,
DATE, zero dates, negative TIMEs and DECIMALs of several layouts, below the threshold (a fresh interpreter that
never imports numpy), across it (numpy imported part way, then used at once) and with numpy already imported."""

from __future__ import annotations

import json
import random
import subprocess
import sys
from pathlib import Path

import numpy  # noqa: F401  (this process takes the whole-column path at once, as any process that loaded numpy)

from binlake.binlog import vectorized
from binlake.binlog.coltypes import plan_column
from binlake.binlog.constants import ColumnType as T
from binlake.binlog.tablemap import Column
from binlake.binlog.values import decimal_groups
from tests.valuegen import random_decimals

ROOT = Path(__file__).resolve().parents[2]


def _datetime2(rng: random.Random, fsp: int) -> bytes:
    nb = (fsp + 1) // 2
    if rng.random() < 0.05:  # the zero date, or a partial one
        ym, day = rng.choice([(0, 0), (2020 * 13, 0), (0, 5)])
    else:
        ym, day = rng.randrange(1, 10000) * 13 + rng.randrange(1, 13), rng.randrange(1, 32)
    h, m, s = rng.randrange(24), rng.randrange(60), rng.randrange(60)
    frac = rng.randrange(10**fsp) * 10 ** (2 * nb - fsp) if fsp else 0
    packed = 1 << 39 | (ym << 5 | day) << 17 | h << 12 | m << 6 | s
    return packed.to_bytes(5, "big") + frac.to_bytes(nb, "big")


def _timestamp2(rng: random.Random, fsp: int) -> bytes:
    nb = (fsp + 1) // 2
    secs = 0 if rng.random() < 0.05 else rng.randrange(1, 1 << 32)  # second 0: the zero date
    frac = rng.randrange(10**fsp) * 10 ** (2 * nb - fsp) if fsp and secs else 0
    return secs.to_bytes(4, "big") + frac.to_bytes(nb, "big")


def _time2(rng: random.Random, fsp: int) -> bytes:
    nb = (fsp + 1) // 2
    hour = rng.choice([rng.randrange(24), rng.randrange(839)])
    m, s = rng.randrange(60), rng.randrange(60)
    frac = rng.randrange(10**fsp) * 10 ** (2 * nb - fsp) if fsp else 0
    negative = rng.random() < 0.4
    if fsp >= 5:
        value = (hour << 12 | m << 6 | s) << 24 | frac
        return ((-value if negative else value) + 0x800000000000).to_bytes(6, "big")
    ipart, fpart = hour << 12 | m << 6 | s, frac
    if negative:  # as the server stores it: the integer part and the fraction borrow
        if fpart:
            ipart += 1
            fpart = (1 << 8 * nb) - fpart
        ipart = -ipart
    return (ipart + 0x800000).to_bytes(3, "big") + fpart.to_bytes(nb, "big")


def _date(rng: random.Random) -> bytes:
    if rng.random() < 0.05:
        return (0).to_bytes(3, "little")
    return (rng.randrange(1, 10000) << 9 | rng.randrange(1, 13) << 5 | rng.randrange(1, 32)).to_bytes(3, "little")


def _cases(seed: int, n: int) -> list[tuple[int, int, list[str]]]:
    """(column type, metadata, hex raw fields) of every kind the gate covers."""
    rng = random.Random(seed)
    cases = []
    for fsp in (0, 3, 6):
        cases.append((T.DATETIME2, fsp, [_datetime2(rng, fsp).hex() for _ in range(n)]))
        cases.append((T.TIMESTAMP2, fsp, [_timestamp2(rng, fsp).hex() for _ in range(n)]))
        cases.append((T.TIME2, fsp, [_time2(rng, fsp).hex() for _ in range(n)]))
    cases.append((T.DATE, 0, [_date(rng).hex() for _ in range(n)]))
    for p, s in ((5, 0), (12, 2), (18, 4), (30, 10), (38, 3), (65, 30)):
        cases.append((T.NEWDECIMAL, p << 8 | s, [r.hex() for r in random_decimals(rng, *decimal_groups(p, s)[::2], n)]))
    return cases


# Run in a fresh interpreter (no numpy): each case's raws converted through the planned column's vec in parts of
# CHUNK, with vectorized.FIXED_BEFORE_NUMPY as given; prints the values' texts and when numpy got imported.
_CHILD = """
import json, sys
from binlake.binlog import vectorized
from binlake.binlog.coltypes import plan_column
from binlake.binlog.tablemap import Column
cases, threshold, chunk = json.load(sys.stdin)
vectorized.FIXED_BEFORE_NUMPY = threshold
out = []
for typ, meta, raws in cases:
    raws = [bytes.fromhex(r) for r in raws]
    plan = plan_column(Column(0, typ, meta), 1)
    values, loaded = [], []
    for at in range(0, len(raws), chunk):
        values += [str(v) for v in plan.vec([raws[at:at + chunk]])]
        loaded.append("numpy" in sys.modules)
    out.append((values, loaded))
print(json.dumps([out, vectorized._fixed_one_by_one]))
"""


def _in_child(cases, threshold: int, chunk: int) -> tuple[list, int]:
    done = subprocess.run([sys.executable, "-c", _CHILD], input=json.dumps([cases, threshold, chunk]),
                          capture_output=True, text=True, check=True, cwd=ROOT)
    out, counted = json.loads(done.stdout)
    return out, counted


def _whole(cases) -> list[list[str]]:
    assert "numpy" in sys.modules
    return [[str(v) for v in plan_column(Column(0, typ, meta), 1).vec([[bytes.fromhex(r) for r in raws]])]
            for typ, meta, raws in cases]


def test_values_below_the_threshold_equal_the_whole_column() -> None:
    cases = _cases(17, 300)
    out, counted = _in_child(cases, 10**9, 100)
    assert not any(any(loaded) for _, loaded in out)  # one by one throughout: numpy never imported
    assert counted == sum(len(raws) for *_, raws in cases)
    assert [values for values, _ in out] == _whole(cases)
    assert vectorized.np is not None  # this process, which has numpy, converted whole columns


def test_numpy_imported_past_the_threshold_and_used_at_once() -> None:
    cases = _cases(71, 200)
    out, counted = _in_child(cases, 1000, 50)
    loaded = [flag for _, flags in out for flag in flags]
    # 1,000 values went one by one (20 parts of 50), then numpy came in and every later part used it.
    assert loaded == [False] * 20 + [True] * (len(loaded) - 20)
    assert counted == 1000
    assert [values for values, _ in out] == _whole(cases)


def test_a_process_with_numpy_converts_whole_columns_at_once(monkeypatch) -> None:
    monkeypatch.setattr(vectorized, "_fixed_one_by_one", 0)
    monkeypatch.setattr(vectorized, "FIXED_BEFORE_NUMPY", 10**9)
    assert vectorized.numpy_ready(100)
    assert vectorized._fixed_one_by_one == 0


def test_large_inputs_take_numpy_at_once(monkeypatch) -> None:
    monkeypatch.setattr(vectorized, "_fixed_one_by_one", 0)
    vectorized.expect_bytes(vectorized.BYTES_FOR_NUMPY - 1)
    assert vectorized._fixed_one_by_one == 0  # a small input: values go one by one first
    vectorized.expect_bytes(vectorized.BYTES_FOR_NUMPY)
    assert vectorized._fixed_one_by_one >= vectorized.FIXED_BEFORE_NUMPY  # numpy_ready: numpy at the first column
