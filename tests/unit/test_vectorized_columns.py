"""Whole-column conversions (binlog/vectorized.py, used by the columnar planners) give exactly the reference
decoders' values for whole columns of random raw fields: distinct and repeating values, edge values, and values the
vector path leaves to the per-value path (years past 9999, out-of-range fractions and digit groups)."""

from __future__ import annotations

import itertools
import random
from decimal import Context, Decimal

import numpy  # noqa: F401  (whole-column conversions at once: vectorized.numpy_ready; test_numpy_gate.py covers the rest)
import pytest

from binlake.binlog.charsets import decode_mysql_latin1
from binlake.binlog.coltypes import column_decoder, plan_column
from binlake.binlog.constants import ColumnType as T
from binlake.binlog.rowcodegen import make_fast_decimal
from binlake.binlog.tablemap import Column
from binlake.binlog.values import ValueError_, decimal_groups
from tests.valuegen import random_decimals


def _column(col: Column, raws: list[bytes]) -> list:
    plan = plan_column(col, 1)
    assert plan.nfields == 1
    return plan.vec([raws])


def _reference(col: Column, raws: list[bytes]) -> list:
    dec = column_decoder(col)
    return [dec(raw, 0)[0] for raw in raws]


def _repeating(rng: random.Random, raws: list[bytes]) -> list[bytes]:
    pool = raws[:5]
    return [rng.choice(pool) for _ in range(len(raws))]


@pytest.mark.parametrize("fsp", range(7))
def test_temporal_columns(fsp: int) -> None:
    rng = random.Random(fsp)
    nb = (fsp + 1) // 2
    n = 2000
    dt, ts, tm = [], [], []
    for i in range(n):
        ym, day = rng.choice([0, rng.randrange(13 * 10000)]), rng.randrange(32)
        h, m, s = rng.randrange(24), rng.randrange(60), rng.randrange(60)
        frac = rng.choice([0, rng.randrange(10 ** (2 * nb)) if nb else 0])
        dt.append((1 << 39 | (ym << 5 | day) << 17 | h << 12 | m << 6 | s).to_bytes(5, "big") + frac.to_bytes(nb, "big"))
        secs = 0 if i % 97 == 0 else rng.randrange(1 << 32)
        # Second 0 is the zero date (with no fraction: the server writes no other value at second 0).
        ts.append(secs.to_bytes(4, "big") + (frac if secs else 0).to_bytes(nb, "big"))
        hour = rng.choice([rng.randrange(24), rng.randrange(839), rng.randrange(1024)])
        value = (hour << 12 | m << 6 | s) << 24 | frac * (10 ** (6 - 2 * nb) if nb else 0)
        if rng.random() < 0.3:
            value = -value
        if fsp >= 5:
            raw = (value + 0x800000000000).to_bytes(6, "big")
        else:
            raw = ((value >> 24) + 0x800000).to_bytes(3, "big") + frac.to_bytes(nb, "big") if value >= 0 else None
            if raw is None:  # a negative time as the server stores it: integer part and fraction borrow
                ipart, fpart = -(-value >> 24), frac
                if fpart:
                    ipart += 1
                    fpart = (1 << 8 * nb) - fpart
                raw = (0x800000 - ipart).to_bytes(3, "big") + fpart.to_bytes(nb, "big")
        tm.append(raw)
    for col, raws in ((Column(0, T.DATETIME2, fsp), dt), (Column(0, T.TIMESTAMP2, fsp), ts),
                      (Column(0, T.TIME2, fsp), tm)):
        for values in (raws, _repeating(rng, raws)):
            assert _column(col, values) == _reference(col, values), (col.type, fsp)
    # A fraction field past fsp digits (no server writes one) leaves the column to the per-value path.
    if nb and fsp != 3:
        big = [(1 << 39).to_bytes(5, "big") + b"\x7f" * nb] * 3
        plan = plan_column(Column(0, T.DATETIME2, fsp), 1)
        assert _column(Column(0, T.DATETIME2, fsp), big) == [plan.one(r) for r in big]


def test_date_and_mediumint_columns() -> None:
    rng = random.Random(3)
    dates = [(rng.randrange(10000) << 9 | rng.randrange(13) << 5 | rng.randrange(32)).to_bytes(3, "little")
             for _ in range(3000)]
    dates.append((12000 << 9 | 1 << 5 | 1).to_bytes(3, "little"))  # past year 9999: the per-value path
    assert _column(Column(0, T.DATE, 0), dates) == _reference(Column(0, T.DATE, 0), dates)
    ints = [rng.randrange(1 << 24).to_bytes(3, "little") for _ in range(3000)] + [b"\xff\xff\x7f", b"\0\0\x80"]
    for signed in (True, False):
        col = Column(0, T.INT24, 0, signed=signed)
        assert _column(col, ints) == _reference(col, ints)


@pytest.mark.parametrize(("p", "s"), [(1, 0), (1, 1), (5, 0), (10, 2), (12, 2), (18, 4), (18, 18), (19, 0),
                                      (30, 10), (38, 3), (65, 30), (65, 0)])
def test_decimal_columns(p: int, s: int) -> None:
    rng = random.Random(p * 100 + s)
    groups, _, size = decimal_groups(p, s)
    raws = random_decimals(rng, groups, size, 1500)
    col = Column(0, T.NEWDECIMAL, p << 8 | s)
    ref = make_fast_decimal(p, s)  # the generated decoders' values (a negative zero is zero)
    for values in (raws, _repeating(rng, raws)):
        got = _column(col, values)
        assert [str(v) for v in got] == [str(ref(raw)) for raw in values]
    bad = bytearray(raws[0])
    bad[-1] = 0xFF if groups[-1][1] < 3 else bad[-1]  # a digit group out of range, where one byte can hold it
    if groups[-1] == (1, 2) or groups[-1] == (1, 1):
        bad[0] |= 0x80
        with pytest.raises(ValueError_):
            _column(col, [*raws[:10], bytes(bad)])


WIDE = Context(prec=100)


@pytest.mark.parametrize(("p", "s"), [(38, 3), (65, 30), (20, 6), (30, 10), (12, 2), (10, 0), (9, 9)])
def test_decimal_columns_of_small_values(p: int, s: int) -> None:
    """Values far narrower than the type (the usual case): the integer digits that are zero in every value are
    left out of the texts the decimal module parses, and whole zero digit groups are not written."""
    rng = random.Random(p * 1000 + s)
    groups, n_int, size = decimal_groups(p, s)
    ref = make_fast_decimal(p, s)
    col = Column(0, T.NEWDECIMAL, p << 8 | s)
    int_digits = sum(nd for _, nd in groups[:n_int])

    def encode(value: int) -> bytes:  # value: the unscaled integer (digits before and after the point)
        ipart, fpart = divmod(abs(value), 10**s)
        digits = (str(ipart).zfill(int_digits) if int_digits else "") + (str(fpart).zfill(s) if s else "")
        x, at = 0, 0
        for nb, nd in groups:
            x = x << 8 * nb | int(digits[at:at + nd] or 0)
            at += nd
        x |= 1 << (8 * size - 1)
        if value < 0:
            x ^= (1 << 8 * size) - 1
        return x.to_bytes(size, "big")

    for top in (10, 10**5, 10**(min(p, 18) - 1), 10**p - 1):
        values = [rng.randrange(-top, top) for _ in range(300)] + [0, -1, 1, top - 1, -(top - 1)]
        raws = [encode(v) for v in values]
        assert [ref(raw) for raw in raws] == [Decimal(v).scaleb(-s, WIDE) for v in values]  # the encoder is right
        got = _column(col, raws)
        assert [str(v) for v in got] == [str(ref(raw)) for raw in raws], top
    zeros = [encode(0)] * 40
    assert [str(v) for v in _column(col, zeros)] == [str(ref(raw)) for raw in zeros]


def test_latin1_text_column() -> None:
    """MySQL's latin1 is Windows-1252 with its five gaps mapped to the C1 controls: every byte decodes."""
    rng = random.Random(5)
    expected = {b: bytes([b]).decode("cp1252", errors="ignore") or chr(b) for b in range(256)}
    col = Column(0, T.VARCHAR, 200, collation=8)  # latin1_swedish_ci
    everything = [bytes(rng.randrange(256) for _ in range(rng.randrange(40))) for _ in range(2000)]
    no_c1 = [bytes(rng.choice([*range(0x80), *range(0xA0, 0x100)]) for _ in range(rng.randrange(40)))
             for _ in range(2000)]
    for raws in (everything, no_c1, [*no_c1, b"\x80\x81"]):
        want = ["".join(expected[b] for b in r) for r in raws]
        assert _column(col, raws) == want
        assert [decode_mysql_latin1(r) for r in raws] == want


def test_decimal_column_as_arrow_equals_the_decimals() -> None:
    """A DECIMAL column's digit groups (vectorized.DecimalColumn) as Arrow decimal128 data equal pa.array of the
    row-at-a-time decoder's Decimals, for every DECIMAL(p<=38, s): mixed signs, zeros, the largest values, NULLs
    spread between the values, slices and joins in and out of order."""
    import pyarrow as pa

    from binlake.binlog.vectorized import DecimalColumn, decimal_column

    rng = random.Random(38)
    for p in range(1, 39):
        for s in range(0, min(p, 30) + 1):
            groups, n_int, size = decimal_groups(p, s)
            raws = random_decimals(rng, groups, size, rng.choice([1, 7, 60]))
            ref = make_fast_decimal(p, s)
            want = [ref(raw) for raw in raws]
            typ = pa.decimal128(p, s)
            column = decimal_column(raws, p, s, groups, n_int, size)
            assert [str(v) for v in column] == [str(v) for v in want], (p, s)
            assert column.arrow(typ).equals(pa.array(want, typ)), (p, s)
            k = rng.randrange(len(raws) + 1)
            assert DecimalColumn.join([column[:k], column[k:]]).arrow(typ).equals(pa.array(want, typ))
            assert DecimalColumn.join([column[k:], column[:k]]).arrow(typ).equals(pa.array(want[k:] + want[:k], typ))
            present = [rng.random() < 0.6 for _ in raws]
            kept = [raw for raw, ok in zip(raws, present, strict=True) if ok]
            if kept:
                spread = decimal_column(kept, p, s, groups, n_int, size).spread(present)
                with_nulls = [w if ok else None for w, ok in zip(want, present, strict=True)]
                assert list(spread) == with_nulls
                assert spread.arrow(typ).equals(pa.array(with_nulls, typ))
                assert spread[1:].arrow(typ).equals(pa.array(with_nulls[1:], typ))


def _random_texts(rng: random.Random, n: int) -> list[str]:
    alphabet = "az09 ,'\"\\\n\t" + "éßø€日本語🙂\u0300\x00"
    return [rng.choice(["", "".join(rng.choice(alphabet) for _ in range(rng.randrange(1, 300)))])
            if rng.random() < 0.2 else "".join(rng.choice(alphabet) for _ in range(rng.randrange(12)))
            for _ in range(n)]


def test_text_column_slices_read_in_any_order() -> None:
    """A TextColumn's values, and those of its slices read in random order (a row consumer reading each event's
    rows cut from the events converted together: the slices share one conversion of the whole column), equal the
    texts, with NULLs (with_valid, spread) and after join."""
    from binlake.binlog.vectorized import TextColumn, utf8_texts

    rng = random.Random(17)
    for trial in range(40):
        texts = _random_texts(rng, rng.choice([24, 100, 1000]))
        raws = [t.encode() for t in texts]
        density = rng.choice([0.0, 0.1, 0.5, 0.95])
        present = [rng.random() >= density for _ in texts]
        want = [t if ok else None for t, ok in zip(texts, present, strict=True)]
        whole = utf8_texts(raws)
        assert whole is not None
        kept = [r for r, ok in zip(raws, present, strict=True) if ok]
        columns = [whole.with_valid(present), utf8_texts(kept).spread(present) if kept else None]
        for column in columns:
            if column is None:
                continue
            cuts = sorted({0, len(texts), *(rng.randrange(len(texts) + 1) for _ in range(rng.randrange(8)))})
            spans = list(itertools.pairwise(cuts))
            rng.shuffle(spans)
            for a, b in spans:
                piece = column[a:b]
                assert piece.tolist() == want[a:b], (trial, a, b)
                assert list(piece[1:]) == want[a + 1:b]
                if b > a:
                    assert piece[b - a - 1] == want[b - 1]
            assert list(column) == want
            parts = [column[a:b] for a, b in itertools.pairwise(cuts)]
            assert list(TextColumn.join(parts)) == want
            assert list(TextColumn.join(parts[::-1])) == [v for a, b in itertools.pairwise(cuts[::-1])
                                                          for v in want[b:a]]


def test_decimal_column_slices_read_in_any_order() -> None:
    """A DecimalColumn's slices, read in random order, share one conversion of the column and give the row-at-a-time
    decoder's Decimals (NULLs spread between them)."""
    from binlake.binlog.vectorized import decimal_column

    rng = random.Random(18)
    for p, s in [(5, 2), (12, 2), (18, 0), (38, 3), (30, 30)]:
        groups, n_int, size = decimal_groups(p, s)
        raws = random_decimals(rng, groups, size, 500)
        ref = make_fast_decimal(p, s)
        present = [rng.random() < 0.7 for _ in raws]
        kept = [raw for raw, ok in zip(raws, present, strict=True) if ok]
        want = [str(ref(raw)) if ok else None for raw, ok in zip(raws, present, strict=True)]
        for column in (decimal_column(raws, p, s, groups, n_int, size),
                       decimal_column(kept, p, s, groups, n_int, size).spread(present)):
            expect = want if column.valid is not None else [str(ref(raw)) for raw in raws]
            cuts = sorted({0, len(raws), *(rng.randrange(len(raws)) for _ in range(6))})
            spans = list(itertools.pairwise(cuts))
            rng.shuffle(spans)
            for a, b in spans:
                assert [None if v is None else str(v) for v in column[a:b]] == expect[a:b], (p, s, a, b)


@pytest.mark.parametrize("validator", ["pyarrow", "decode"])
def test_utf8_texts_takes_only_values_valid_on_their_own(validator: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """utf8_texts makes a TextColumn of exactly the values when each is valid UTF-8 on its own, and None (the caller
    decodes value by value, which rejects or replaces as the row path does) when a value is cut inside a character
    (the whole buffer still valid), holds a byte no UTF-8 has, or is an overlong or surrogate form; ASCII-only
    columns and columns with empty values, checked with pyarrow's validation and with the interpreter's decoder."""
    import sys
    from types import SimpleNamespace

    import pyarrow  # noqa: F401

    from binlake.binlog import vectorized

    if validator == "decode":  # as in a process that has not loaded pyarrow
        monkeypatch.setattr(vectorized, "sys", SimpleNamespace(
            modules={k: v for k, v in sys.modules.items() if k != "pyarrow"}))
    rng = random.Random(99)
    for _ in range(30):
        texts = _random_texts(rng, rng.choice([24, 200]))
        if rng.random() < 0.3:
            texts = [t.encode("ascii", "ignore").decode() for t in texts]
        raws = [t.encode() for t in texts]
        column = vectorized.utf8_texts(raws)
        assert column is not None and list(column) == texts
        multi = [i for i, r in enumerate(raws) if len(r) != len(r.decode())]
        if multi and len(raws) > 1:
            i = rng.choice(multi)
            raw = raws[i]
            cut = next(k for k in range(1, len(raw)) if (raw[k] & 0xC0) == 0x80)
            bad = [*raws[:i], raw[:cut], raw[cut:], *raws[i + 1:]]  # the same bytes, one character split in two
            assert vectorized.utf8_texts(bad) is None
        for junk in (b"\xff", b"\xc0\xaf", b"\xed\xa0\x80", b"a\xe6\xb3"):
            k = rng.randrange(len(raws))
            assert vectorized.utf8_texts([*raws[:k], junk, *raws[k:]]) is None
