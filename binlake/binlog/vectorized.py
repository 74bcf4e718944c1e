"""Whole-column conversions with numpy: temporal texts and DECIMALs from a column's raw fields (numpy is imported
by the first conversion: the decoder starts without it; latin1 text: columnar.latin1_texts).

Each function takes the raw field of every image of one column (bytes of the column's fixed width; NULLs left
out by the caller) and returns the column's values, exactly as the row-at-a-time decoders make them, or None
when some value is outside what the vector path formats (a year past 9999, a negative or oversized fraction,
a DECIMAL digit group out of range): the caller then converts that column value by value, which formats or
rejects such values as before. The work is a fixed number of numpy operations per column, whatever the values:
no cache to miss. Texts are written as ASCII digits into one byte matrix and decoded by one C-level map.

With `iso=True` (the Kafka sink's decoding, DecodeOptions.text_values) DATE/DATETIME/TIMESTAMP and DECIMAL come as a
TextColumn instead: the column's JSON-ready text (ISO 8601 with six fraction digits, `Z` for TIMESTAMP; DECIMAL with
its scale) in one buffer, no Python object per value, exactly the text the lake's Arrow value formats to. Only
columns whose every value is a valid calendar date and time (year 1..9999) are written so: any other value (a
zero or partial date, February 30) returns None, and the caller makes the column's usual values, which the lake
converts (zero dates to null) or rejects as it always does.
"""

from __future__ import annotations

import sys
from itertools import pairwise
from typing import Any

from .rowcodegen import _DECIMAL_CONTEXT

# numpy and its tables, set by _load() on the first conversion (a binlog without such columns never imports numpy).
np: Any = None
_U8 = _I64 = _D1 = _D2 = _D3 = _LE2 = _D2U = _D1U = None
_BE: dict = {}  # big-endian unsigned dtypes by width


def _load() -> None:
    global np, _U8, _I64, _D1, _D2, _D3, _LE2, _D2U, _D1U
    if np is not None:
        return
    import numpy

    _U8, _I64 = numpy.uint8, numpy.int64
    _BE.update({2: numpy.dtype(">u2"), 4: numpy.dtype(">u4")})
    # Digits of 0..9, 0..99 and 0..999 as ASCII rows.
    _D1 = numpy.array([[48 + i] for i in range(10)], dtype=_U8)
    _D2 = numpy.array([[48 + i // 10, 48 + i % 10] for i in range(100)], dtype=_U8)
    _D3 = numpy.array([[48 + i // 100, 48 + i // 10 % 10, 48 + i % 10] for i in range(1000)], dtype=_U8)
    _BE.update({1: numpy.dtype(numpy.uint8)})
    _LE2 = numpy.dtype("<u2")
    _D2U = _D2.reshape(-1).view(_LE2)  # 0..99 as two ASCII digits in one 16-bit store
    _D1U = _D1.reshape(-1)
    np = numpy


def _matrix(raws, width: int) -> np.ndarray:
    """(n, width) uint8: the raw fields stacked (each exactly `width` bytes)."""
    return np.frombuffer(b"".join(raws), dtype=_U8).reshape(-1, width)


def _be(m: np.ndarray, a: int, b: int) -> np.ndarray:
    """Big-endian unsigned integer of bytes a..b of every row, as int64 (read in place: strided big-endian views)."""
    n, width = m.shape
    if not m.flags.c_contiguous or not n:
        m = np.ascontiguousarray(m)
        if not n:
            return np.zeros(0, dtype=_I64)
    v = None
    while a < b:
        k = 4 if b - a >= 4 else 2 if b - a >= 2 else 1
        part = np.ndarray((n,), dtype=_BE[k], buffer=m, offset=a, strides=(width,)).astype(_I64)
        v = part if v is None else v << 8 * k | part
        a += k
    return v


def _mod(value: np.ndarray, d: int) -> tuple[np.ndarray, np.ndarray]:
    """(value // d, value % d) for value >= 0 (numpy's integer % is several times slower than // and a multiply)."""
    q = value // d
    return q, value - q * d


def _digits(out: np.ndarray, at: int, value: np.ndarray, n: int) -> None:
    """Write `value` (0 <= value < 10**n) as n ASCII digits at column `at` of `out` (C-contiguous), two digits per
    16-bit store."""
    rows, width = out.shape
    while n > 0 and rows:
        if n >= 2:
            n -= 2
            value, r = _mod(value, 100)
            np.ndarray((rows,), dtype=_LE2, buffer=out, offset=at + n, strides=(width,))[:] = _D2U[r]
        else:
            n -= 1
            value, r = _mod(value, 10)
            np.ndarray((rows,), dtype=_U8, buffer=out, offset=at + n, strides=(width,))[:] = _D1U[r]


def _texts(out: np.ndarray) -> list[str]:
    width = out.shape[1]
    return list(map(bytes.decode, np.ascontiguousarray(out).view(f"S{width}").reshape(-1).tolist()))


_TEMPLATE = b"0000-00-00 00:00:00.000000"


def _datetime_texts(year, month, day, hour, minute, second, frac, fsp: int) -> TextColumn:
    n = len(year)
    width = 19 + (fsp + 1 if fsp else 0)
    return TextColumn.fixed(_datetime_bytes(_TEMPLATE[:width], n, year, month, day, hour, minute, second, frac, fsp))


def _datetime_bytes(template: bytes, n: int, year, month, day, hour, minute, second, frac, fsp: int) -> np.ndarray:
    """n rows of `template` (a date and time text, 'YYYY-MM-DD?HH:MM:SS' then, with fsp, '.' and the fraction)
    with each row's fields written in: the digits of DATETIME texts and ISO texts alike."""
    out = np.empty((n, len(template)), dtype=_U8)
    out[:] = np.frombuffer(template, dtype=_U8)
    _digits(out, 0, year, 4)
    for at, field in ((5, month), (8, day), (11, hour), (14, minute), (17, second)):
        _digits(out, at, field, 2)
    if fsp:
        _digits(out, 20, frac, fsp)
    return out


def _strings(data, offsets, valid) -> list:
    """The str of each value (None where `valid` is False) of UTF-8 text held as TextColumn holds it: one pyarrow
    conversion (faster than decoding a bytes object per value)."""
    import pyarrow as pa

    n = len(offsets) - 1
    validity = None
    nulls = 0
    if valid is not None:
        nulls = n - int(np.count_nonzero(valid))
        if nulls:
            validity = pa.py_buffer(np.packbits(valid, bitorder="little"))
    buffers = [validity, pa.py_buffer(np.ascontiguousarray(offsets, dtype=_I64)),
               pa.py_buffer(np.ascontiguousarray(data))]
    return pa.Array.from_buffers(pa.large_string(), n, buffers, nulls).to_pylist()


class TextColumn:
    """A column's values as text in one buffer: `data` (uint8) and `offsets` (int64, len + 1, value i is
    data[offsets[i]:offsets[i + 1]]), `valid` (bool per value, None: no NULL). Sliced without copying; iterating
    gives str (None for NULL). The lake turns it into an Arrow string array without a Python object per value.

    Slices share their column's str list (`_whole`: [the column's values as str once made, its offsets, its
    validity]; `_at`: the slice's first value in it): the first slice read (a row consumer reading one event's rows,
    cut from the events converted together) makes the str of every value of the column in one pyarrow call, the
    other slices take their part of that list."""

    __slots__ = ("_at", "_whole", "data", "offsets", "valid")

    def __init__(self, data, offsets, valid=None, _whole=None, _at=0) -> None:
        self.data = data
        self.offsets = offsets
        self.valid = valid
        self._whole = [None, offsets, valid] if _whole is None else _whole
        self._at = _at

    @classmethod
    def fixed(cls, out: np.ndarray) -> TextColumn:
        """From an (n, width) matrix of ASCII rows."""
        n, width = out.shape
        return cls(out.reshape(-1), np.arange(0, (n + 1) * width, width, dtype=_I64))

    def __len__(self) -> int:
        return len(self.offsets) - 1

    def __getitem__(self, i):
        if type(i) is slice:
            start, stop, step = i.indices(len(self.offsets) - 1)
            if step != 1:
                return self.tolist()[i]
            stop = max(start, stop)
            return TextColumn(self.data, self.offsets[start:stop + 1],
                              None if self.valid is None else self.valid[start:stop], self._whole, self._at + start)
        if i < 0:
            i += len(self)
        if self.valid is not None and not self.valid[i]:
            return None
        return self.data[self.offsets[i]:self.offsets[i + 1]].tobytes().decode()

    def tolist(self) -> list:
        """The values as str (None for NULL)."""
        whole = self._whole
        texts = whole[0]
        if texts is None:
            texts = whole[0] = _strings(self.data, whole[1], whole[2])
        return texts[self._at:self._at + len(self.offsets) - 1]

    def __iter__(self):
        return iter(self.tolist())

    def __eq__(self, other: object) -> bool:
        return list(self) == (list(other) if isinstance(other, (TextColumn, list, tuple)) else other)

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"TextColumn({list(self)!r})"

    @staticmethod
    def join(parts: list[TextColumn]) -> TextColumn:
        """The columns one after the other, as one (slices of one column that follow each other share its data)."""
        if len(parts) == 1:
            return parts[0]
        first = parts[0]
        if all(p.data is first.data for p in parts) and all(
                a.offsets[-1] == b.offsets[0] for a, b in pairwise(parts)):
            offsets = np.concatenate([first.offsets, *(p.offsets[1:] for p in parts[1:])])
            data = first.data
        else:
            data = np.concatenate([p.data[p.offsets[0]:p.offsets[-1]] for p in parts])
            ends = np.cumsum([0] + [int(p.offsets[-1] - p.offsets[0]) for p in parts])
            offsets = np.concatenate([np.zeros(1, dtype=_I64),
                                      *(p.offsets[1:] - p.offsets[0] + at for p, at in zip(parts, ends, strict=False))])
        valid = None
        if any(p.valid is not None for p in parts):
            valid = np.concatenate([p.valid if p.valid is not None else np.ones(len(p), dtype=bool) for p in parts])
        return TextColumn(data, offsets, valid)

    def same(self, other) -> bool:
        """Whether `other` is a TextColumn of the very same values (slices of one column at the same places)."""
        return type(other) is TextColumn and (self is other or (
            self.data is other.data and np.array_equal(self.offsets, other.offsets) and (
                (self.valid is None and other.valid is None) or (
                    self.valid is not None and other.valid is not None and np.array_equal(self.valid, other.valid)))))

    def with_valid(self, present: list) -> TextColumn:
        """This column with the values `present` marks valid, the others NULL."""
        return TextColumn(self.data, self.offsets, np.asarray(present, dtype=bool))

    def spread(self, present: list) -> TextColumn:
        """This column's values at the places `present` marks, NULL elsewhere."""
        mask = np.asarray(present, dtype=bool)
        at = np.concatenate([np.zeros(1, dtype=_I64), np.cumsum(mask, dtype=_I64)])
        return TextColumn(self.data, self.offsets[at], mask)


# Non-ASCII text values decoded one by one, in a process without numpy, before numpy's import (about 0.06 s CPU) is
# made for them: the whole-column path saves about 30 ns per such value (less for ASCII text, whose values the
# interpreter decodes fastest, and which is not counted), so below about two million of them (a binlog read by `stats`)
# the import costs more than the path saves.
_UTF8_BEFORE_NUMPY = 1_000_000
_utf8_one_by_one = 0


def _numpy_worth_it(raws) -> bool:
    """Whether to convert these UTF-8 text fields as a whole column: numpy is loaded (or is now, once enough non-ASCII
    values went one by one; a column counts as such when its first values are)."""
    global _utf8_one_by_one
    if np is None:
        if "numpy" not in sys.modules and _utf8_one_by_one < _UTF8_BEFORE_NUMPY:
            if not b"".join(raws[:64]).isascii():
                _utf8_one_by_one += len(raws)
            return False
        _load()
    return True


# Temporal and DECIMAL values converted one by one (the planners' `one`, columnar._whole), in a process without numpy,
# before numpy's import is made for them. Measured (`stats`, one core): `one` costs 1-4 us a distinct value (0.5-1 us
# more than the whole column for DECIMAL, about 1.6 us for temporal), the import 0.04-0.1 s, so numpy pays past about
# 25,000 temporal or 70,000 DECIMAL values (about 2.5 MB of a temporal-only binlog): below 10,000 values a small
# binlog saves up to 0.03 s (a 7,500-value one: 0.193 -> 0.166 s), and files of BYTES_FOR_NUMPY or more (expect_bytes)
# take numpy at once, as a gate at 10,000 values cost the 1-row matrix cells (117,000-150,000 values) 0.01-0.04 s.
FIXED_BEFORE_NUMPY = 10_000
BYTES_FOR_NUMPY = 2 << 20
_fixed_one_by_one = 0


def expect_bytes(size: int) -> None:
    """The decoder is about to read binlog files of `size` bytes: from BYTES_FOR_NUMPY on, temporal and DECIMAL
    columns take numpy at once (numpy_ready)."""
    global _fixed_one_by_one
    if size >= BYTES_FOR_NUMPY:
        _fixed_one_by_one = max(_fixed_one_by_one, FIXED_BEFORE_NUMPY)


def numpy_ready(n: int) -> bool:
    """Whether to convert n temporal or DECIMAL fields as a whole column: numpy is imported (by anything: then it is
    used at once) or is now, once FIXED_BEFORE_NUMPY such values went one by one."""
    global _fixed_one_by_one
    if np is None:
        if "numpy" not in sys.modules and _fixed_one_by_one < FIXED_BEFORE_NUMPY:
            _fixed_one_by_one += n
            return False
        _load()
    return True


def _offsets(raws) -> np.ndarray:
    offsets = np.zeros(len(raws) + 1, dtype=_I64)
    np.cumsum(np.fromiter(map(len, raws), dtype=_I64, count=len(raws)), out=offsets[1:])
    return offsets


def _valid_utf8(data: bytes) -> bool:
    """Whether `data` is valid UTF-8: ASCII at once; else pyarrow's validation when pyarrow is loaded anyway (no str
    made), else the interpreter's decoder."""
    if data.isascii():
        return True
    pa = sys.modules.get("pyarrow")
    if pa is not None:
        try:
            pa.Array.from_buffers(pa.large_string(), 1, [None, pa.py_buffer(np.array([0, len(data)], dtype=_I64)),
                                                         pa.py_buffer(data)]).validate(full=True)
        except pa.ArrowInvalid:
            return False
        return True
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def utf8_texts(raws) -> TextColumn | None:
    """UTF-8 text fields as a TextColumn (the bytes as they are), or None when a value is not valid UTF-8 on its own,
    or while numpy is not worth importing for them (the caller then decodes value by value, as before)."""
    if not _numpy_worth_it(raws):
        return None
    data = b"".join(raws)
    # The whole buffer at once; a value cut inside a character makes the next value start with a continuation byte.
    if not _valid_utf8(data):
        return None
    offsets = _offsets(raws)
    buf = np.frombuffer(data, dtype=_U8)
    if not data.isascii():
        starts = offsets[:-1][offsets[1:] > offsets[:-1]]
        if ((buf[starts] & 0xC0) == 0x80).any():
            return None
    return TextColumn(buf, offsets)


_DAYS_IN = None


def _valid_dates(year, month, day) -> bool:
    """Whether every (year, month, day) is a real calendar date of years 1..9999."""
    global _DAYS_IN
    if _DAYS_IN is None:
        _DAYS_IN = np.array([0, 31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31, 0, 0, 0], dtype=_I64)
    if not len(year):
        return True
    if year.min() < 1 or year.max() > 9999 or month.min() < 1 or month.max() > 12 or day.min() < 1:
        return False
    leap = (year % 4 == 0) & ((year % 100 != 0) | (year % 400 == 0))
    return bool((day <= _DAYS_IN[month] + (leap & (month == 2))).all())


_ISO = b"0000-00-00T00:00:00.000000Z"


def _iso_column(year, month, day, hour, minute, second, frac, fsp: int, zone: bool) -> TextColumn | None:
    """'YYYY-MM-DDTHH:MM:SS.ffffff' (six fraction digits; `zone`: a trailing Z) for valid values, else None."""
    if not _valid_dates(year, month, day) or (len(hour) and (hour.max() > 23 or minute.max() > 59
                                                             or second.max() > 59)):
        return None
    width = 27 if zone else 26
    return TextColumn.fixed(_datetime_bytes(_ISO[:width], len(year), year, month, day, hour, minute, second, frac,
                                            fsp))


def _frac_bytes(fsp: int) -> tuple[int, int]:
    return {0: (0, 0), 1: (1, 10000), 2: (1, 10000), 3: (2, 100), 4: (2, 100), 5: (3, 1), 6: (3, 1)}[fsp]


def _fraction(m: np.ndarray, at: int, fsp: int, signed: bool) -> np.ndarray | None:
    """The fraction field in units of 10**-fsp, or None when one is negative or has more than fsp digits."""
    nb, mult = _frac_bytes(fsp)
    v = _be(m, at, at + nb)
    if signed:
        v = np.where(v >= 1 << (8 * nb - 1), v - (1 << 8 * nb), v)
    v = v * mult // 10 ** (6 - fsp)
    if len(v) and (v.min() < 0 or v.max() >= 10**fsp):
        return None
    return v


def datetime2_texts(raws, fsp: int, iso: bool = False) -> TextColumn | None:
    """DATETIME2(fsp) fields (5 bytes + fraction) -> 'YYYY-MM-DD HH:MM:SS[.f]' (iso: a TextColumn, see above)."""
    _load()
    nb = (fsp + 1) // 2
    m = _matrix(raws, 5 + nb)
    packed = _be(m, 0, 5) - 0x8000000000
    ymd = packed >> 17
    ym = ymd >> 5
    year = ym // 13
    if len(packed) and (packed.min() < 0 or year.max() > 9999):
        return None
    hms = packed & 0x1FFFF
    frac = None
    if fsp:
        frac = _fraction(m, 5, fsp, signed=True)
        if frac is None:
            return None
    if iso:
        return _iso_column(year, ym - year * 13, ymd & 31, hms >> 12, (hms >> 6) & 63, hms & 63, frac, fsp, False)
    return _datetime_texts(year, ym - year * 13, ymd & 31, hms >> 12, (hms >> 6) & 63, hms & 63, frac, fsp)


def _civil(days: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Proleptic Gregorian (year, month, day) of days since 1970-01-01 (days >= 0)."""
    z = days + 719468
    era = z // 146097
    doe = z - era * 146097
    yoe = (doe - doe // 1460 + doe // 36524 - doe // 146096) // 365
    doy = doe - (365 * yoe + yoe // 4 - yoe // 100)
    mp = (5 * doy + 2) // 153
    day = doy - (153 * mp + 2) // 5 + 1
    month = np.where(mp < 10, mp + 3, mp - 9)
    year = yoe + era * 400 + (month <= 2)
    return year, month, day


def timestamp2_texts(raws, fsp: int, iso: bool = False) -> TextColumn | None:
    """TIMESTAMP2(fsp) fields (4 bytes of epoch seconds + fraction) -> UTC text; second 0 is the zero date (iso: a
    TextColumn ending in Z, see above; None when a value is the zero date)."""
    _load()
    nb = (fsp + 1) // 2
    m = _matrix(raws, 4 + nb)
    secs = _be(m, 0, 4)
    frac = None
    if fsp:
        frac = _fraction(m, 4, fsp, signed=False)
        if frac is None:
            return None
    days, rest = _mod(secs, 86400)
    year, month, day = _civil(days)
    zero = secs == 0
    minutes, second = _mod(rest, 60)
    hour, minute = _mod(minutes, 60)
    if iso:
        return None if zero.any() else _iso_column(year, month, day, hour, minute, second, frac, fsp, True)
    if zero.any():
        year, month, day = np.where(zero, 0, year), np.where(zero, 0, month), np.where(zero, 0, day)
    return _datetime_texts(year, month, day, hour, minute, second, frac, fsp)


def date_texts(raws, iso: bool = False) -> TextColumn | None:
    """DATE fields (3 bytes little-endian: year << 9 | month << 5 | day) -> 'YYYY-MM-DD' (iso: a TextColumn of
    valid dates only, see above)."""
    _load()
    m = _matrix(raws, 3)
    n = len(m)
    v = np.ndarray((n,), dtype="<u2", buffer=m, offset=0, strides=(3,)).astype(_I64) | m[:, 2].astype(_I64) << 16 \
        if n else np.zeros(0, dtype=_I64)
    year = v >> 9
    if len(v) and year.max() > 9999:
        return None
    if iso and not _valid_dates(year, (v >> 5) & 15, v & 31):
        return None
    out = np.empty((len(v), 10), dtype=_U8)
    out[:] = np.frombuffer(b"0000-00-00", dtype=_U8)
    _digits(out, 0, year, 4)
    _digits(out, 5, (v >> 5) & 15, 2)
    _digits(out, 8, v & 31, 2)
    return TextColumn.fixed(out)


def _group_values(raws, groups: list[tuple[int, int]], size: int) -> tuple[list, np.ndarray] | None:
    """The digit groups of DECIMAL fields: (one int64 array per group, in storage order, of its digits' value; which
    values are negative), read from the bytes in place (one strided big-endian view per group), or None when a group
    holds more than its digits allow."""
    n = len(raws)
    if not n:
        return [np.zeros(0, dtype=_I64) for _ in groups], np.zeros(0, dtype=bool)
    buf = np.frombuffer(b"".join(raws), dtype=_U8)
    negative = buf[0::size] < 0x80
    vals = []
    at = 0
    flips: dict[int, np.ndarray] = {}
    for i, (nb, nd) in enumerate(groups):
        if nb == 1:
            g = buf[at::size].astype(_I64)
        else:
            g = np.ndarray((n,), dtype=_BE[4 if nb == 4 else 2], buffer=buf, offset=at,
                           strides=(size,)).astype(_I64)
            if nb == 3:
                g = g << 8 | buf[at + 2::size]
        if i == 0:
            g ^= 1 << (8 * nb - 1)  # the sign bit
        flip = flips.get(nb)
        if flip is None:
            flip = flips[nb] = negative * _I64((1 << 8 * nb) - 1)
        g ^= flip  # negative values have every bit inverted
        at += nb
        if int(g.max()) >= 10**nd:
            return None
        vals.append(g)
    return vals, negative


def _decimal_matrix(vals: list, negative: np.ndarray, groups: list[tuple[int, int]], n_int: int, scale: int
                    ) -> tuple[np.ndarray, int, np.ndarray]:
    """The values as fixed-width text rows ('+000123.45', one integer digit kept even when zero; integer digits that
    are zero in every value left out), the integer digits written, and which values are negative and not zero."""
    n = len(negative)
    int_digits = sum(nd for nb, nd in groups[:n_int])
    width = 1 + int_digits + (1 + scale if scale else 0)
    out = np.empty((n, width), dtype=_U8)
    if scale:
        out[:, 1 + int_digits] = ord(".")
    col = 1
    nonzero = np.zeros(n, dtype=bool)
    lead = 0  # leading integer digits that are zero in every value (dropped: a shorter text parses faster)
    leading = True
    for i, ((_nb, nd), g) in enumerate(zip(groups, vals, strict=True)):
        top = int(g.max())
        if i == n_int:
            col += 1  # the point
        if leading and i < n_int:
            lead += nd - len(str(top)) if top else nd
            leading = not top
            if not top and i < n_int - 1:  # zero in every value, and dropped below: not written
                col += nd
                continue
        nonzero |= g != 0
        _digits(out, col, g, nd)
        col += nd
    lead = min(lead, int_digits - 1) if int_digits else 0  # one integer digit stays, even a zero
    minus = negative & nonzero
    out[:, lead] = np.where(minus, ord("-"), ord("+"))
    return out[:, lead:], int_digits - lead, minus


def _decimals(vals: list, negative: np.ndarray, groups: list[tuple[int, int]], n_int: int, scale: int) -> list:
    """Decimal objects of digit groups (exactly `scale` digits after the point): fixed-width texts parsed by the
    decimal module in C."""
    out, _int_digits, _minus = _decimal_matrix(vals, negative, groups, n_int, scale)
    return list(map(_DECIMAL_CONTEXT.create_decimal, _texts(out)))


def decimal_values(raws, groups: list[tuple[int, int]], n_int: int, size: int, scale: int, iso: bool = False
                   ) -> list | TextColumn | None:
    """DECIMAL fields -> Decimal with exactly `scale` digits after the point (groups: (bytes, digits) in storage
    order, the first n_int of them integer digits). iso: a TextColumn of that text as the lake writes a DECIMAL
    ('123.45', '-0.50', '0': no '+', no leading zero but the units')."""
    _load()
    if not len(raws):
        return []
    parts = _group_values(raws, groups, size)
    if parts is None:
        return None
    if not iso:
        return _decimals(*parts, groups, n_int, scale)
    out, int_digits, minus = _decimal_matrix(*parts, groups, n_int, scale)
    return _decimal_text(out, int_digits, minus)


def decimal_column(raws, precision: int, scale: int, groups: list[tuple[int, int]], n_int: int, size: int
                   ) -> DecimalColumn | None:
    """DECIMAL fields as a DecimalColumn (their digit groups, checked), or None when a group holds more than its
    digits allow (the caller then converts value by value, which raises)."""
    _load()
    parts = _group_values(raws, groups, size)
    if parts is None:
        return None
    vals, negative = parts
    return DecimalColumn(_DecimalData(vals, negative, precision, scale, groups, n_int), 0, len(negative))


class _DecimalData:
    """The digit groups of a column of DECIMAL(p,s) values (see DecimalColumn), and their Decimals once made."""

    __slots__ = ("_all", "groups", "n_int", "negative", "precision", "scale", "vals")

    def __init__(self, vals: list, negative, precision: int, scale: int, groups: list, n_int: int) -> None:
        self._all: list | None = None  # the Decimals of every value, once a slice's were asked for
        self.vals = vals
        self.negative = negative
        self.precision = precision
        self.scale = scale
        self.groups = groups
        self.n_int = n_int

    def all_decimals(self) -> list:
        """The Decimals of every value, made once: the slices of one column (a row consumer reading one event's
        rows, cut from the events converted together) share them instead of paying numpy's fixed costs each."""
        if self._all is None:
            self._all = self.decimals(0, len(self.negative))
        return self._all

    def decimals(self, start: int, stop: int) -> list:
        """The Decimals of values start..stop (exactly those of the row-at-a-time decoder). Mostly repeating
        values (DECIMAL(p<=18)) are each made once."""
        vals = [g[start:stop] for g in self.vals]
        negative = self.negative[start:stop]
        n = stop - start
        if n > 64 and self.precision <= 18:
            keys = self.unscaled(start, stop)
            sample = keys[:1024]
            if len(np.unique(sample)) * 2 < len(sample):  # mostly repeating: convert each distinct value once
                _uniq, first, inverse = np.unique(keys, return_index=True, return_inverse=True)
                made = _decimals([g[first] for g in vals], negative[first], self.groups, self.n_int, self.scale)
                return list(map(made.__getitem__, inverse.tolist()))
        return _decimals(vals, negative, self.groups, self.n_int, self.scale) if n else []

    def unscaled(self, start: int, stop: int) -> np.ndarray:
        """The values times 10**scale as int64 (precision <= 18 only)."""
        x = np.zeros(stop - start, dtype=_I64)
        for (_nb, nd), g in zip(self.groups, self.vals, strict=True):
            x *= 10**nd
            x += g[start:stop]
        return np.where(self.negative[start:stop], -x, x)

    def decimal128(self, start: int, stop: int) -> np.ndarray:
        """The values as Arrow decimal128 data: 16-byte little-endian two's complement integers of the value times
        10**scale, as an (n, 2) uint64 array (precision <= 38)."""
        n = stop - start
        if self.precision <= 18:
            x = self.unscaled(start, stop)
            out = np.empty((n, 2), dtype=_I64)
            out[:, 0] = x
            out[:, 1] = x >> 63
            return out.view(np.uint64)
        # Four 32-bit limbs (least significant first), each held in a uint64: limb * 10**9 + carry stays below 2**63.
        u64 = np.uint64
        mask = u64(0xFFFFFFFF)
        limbs = [np.zeros(n, dtype=u64) for _ in range(4)]
        for (_nb, nd), g in zip(self.groups, self.vals, strict=True):
            carry = g[start:stop].astype(u64)
            mul = u64(10**nd)
            for k in range(4):
                t = limbs[k] * mul + carry
                limbs[k] = t & mask
                carry = t >> u64(32)
        negative = self.negative[start:stop]
        if negative.any():  # two's complement: every bit inverted, plus one
            carry = negative.astype(u64)
            for k in range(4):
                t = np.where(negative, limbs[k] ^ mask, limbs[k]) + carry
                limbs[k] = t & mask
                carry = t >> u64(32)
        out = np.empty((n, 2), dtype=u64)
        out[:, 0] = limbs[0] | limbs[1] << u64(32)
        out[:, 1] = limbs[2] | limbs[3] << u64(32)
        return out


class DecimalColumn:
    """A column of DECIMAL(p,s) values held as their checked digit groups (numpy, no Python object per value): a
    sequence of Decimal (None for NULL), each made when first read, exactly as the row-at-a-time decoder makes
    it. Values start..stop of `data`; `valid` (bool per value, None: no NULL). Sliced without copying. The lake
    reads it as Arrow decimal128 data without making the Decimals (`arrow`)."""

    __slots__ = ("_list", "data", "start", "stop", "valid")

    def __init__(self, data: _DecimalData, start: int, stop: int, valid=None) -> None:
        self.data = data
        self.start = start
        self.stop = stop
        self.valid = valid
        self._list: list | None = None

    def __len__(self) -> int:
        return self.stop - self.start

    def tolist(self) -> list:
        if self._list is None:
            values = self.data.all_decimals()[self.start:self.stop]
            if self.valid is not None:
                values = [v if ok else None for v, ok in zip(values, self.valid.tolist(), strict=True)]
            self._list = values
        return self._list

    def __iter__(self):
        return iter(self.tolist())

    def __getitem__(self, i):
        if type(i) is slice:
            start, stop, step = i.indices(len(self))
            if step != 1:
                return self.tolist()[i]
            stop = max(start, stop)
            return DecimalColumn(self.data, self.start + start, self.start + stop,
                                 None if self.valid is None else self.valid[start:stop])
        return self.tolist()[i]

    def __eq__(self, other: object) -> bool:
        return self.tolist() == (list(other) if isinstance(other, (DecimalColumn, list, tuple)) else other)

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"DecimalColumn({self.tolist()!r})"

    def same(self, other) -> bool:
        """Whether `other` is a DecimalColumn of the very same values (slices of one column at the same places)."""
        return type(other) is DecimalColumn and (self is other or (
            self.data is other.data and self.start == other.start and self.stop == other.stop and (
                (self.valid is None and other.valid is None) or (
                    self.valid is not None and other.valid is not None and np.array_equal(self.valid, other.valid)))))

    def spread(self, present: list) -> DecimalColumn:
        """This column's values at the places `present` marks, NULL elsewhere (the NULLs hold zero)."""
        mask = np.asarray(present, dtype=bool)
        d = self.data
        a, b = self.start, self.stop
        vals = []
        for g in d.vals:
            full = np.zeros(len(mask), dtype=_I64)
            full[mask] = g[a:b]
            vals.append(full)
        negative = np.zeros(len(mask), dtype=bool)
        negative[mask] = d.negative[a:b]
        return DecimalColumn(_DecimalData(vals, negative, d.precision, d.scale, d.groups, d.n_int), 0, len(mask),
                             mask)

    @staticmethod
    def join(parts: list[DecimalColumn]) -> DecimalColumn:
        """The columns (of one DECIMAL(p,s)) one after the other, as one."""
        if len(parts) == 1:
            return parts[0]
        first = parts[0]
        valid = None
        if any(p.valid is not None for p in parts):
            valid = np.concatenate([p.valid if p.valid is not None else np.ones(len(p), dtype=bool) for p in parts])
        if all(p.data is first.data for p in parts) and all(a.stop == b.start for a, b in pairwise(parts)):
            return DecimalColumn(first.data, first.start, parts[-1].stop, valid)
        d = first.data
        vals = [np.concatenate([p.data.vals[k][p.start:p.stop] for p in parts]) for k in range(len(d.vals))]
        negative = np.concatenate([p.data.negative[p.start:p.stop] for p in parts])
        return DecimalColumn(_DecimalData(vals, negative, d.precision, d.scale, d.groups, d.n_int), 0,
                             len(negative), valid)

    def arrow(self, typ) -> Any:
        """As a pyarrow decimal128 array of `typ` (this DECIMAL(p,s) with p <= 38): the same array pa.array makes
        of the Decimals (a NULL's slot holds zero)."""
        import pyarrow as pa

        n = len(self)
        data = self.data.decimal128(self.start, self.stop)
        validity = None
        nulls = 0
        if self.valid is not None:
            nulls = n - int(self.valid.sum())
            if nulls:
                data = np.where(self.valid[:, None], data, np.uint64(0))
                validity = pa.py_buffer(np.packbits(self.valid, bitorder="little"))
        return pa.Array.from_buffers(typ, n, [validity, pa.py_buffer(np.ascontiguousarray(data))], nulls)


def _decimal_text(out: np.ndarray, int_digits: int, minus: np.ndarray) -> TextColumn:
    """The fixed-width texts ('+000123.45') without the '+' and the integer part's leading zeros (its units digit
    kept; '0' added when the type has no integer digit), as one buffer."""
    n, width = out.shape
    if int_digits == 0:  # DECIMAL(s,s): '+.05' -> '+0.05'
        out = np.concatenate([out[:, :1], np.full((n, 1), ord("0"), dtype=_U8), out[:, 1:]], axis=1)
        int_digits, width = 1, width + 1
    zeros = np.cumprod(out[:, 1:int_digits] == ord("0"), axis=1, dtype=_I64).sum(axis=1) if int_digits > 1 else \
        np.zeros(n, dtype=_I64)
    keep = np.ones((n, width), dtype=bool)
    keep[:, 0] = minus
    keep[:, 1:int_digits] = np.arange(int_digits - 1) >= zeros[:, None]
    lengths = keep.sum(axis=1, dtype=_I64)
    offsets = np.zeros(n + 1, dtype=_I64)
    np.cumsum(lengths, out=offsets[1:])
    return TextColumn(out[keep], offsets)


def time2_texts(raws, fsp: int) -> TextColumn | None:
    """TIME2(fsp) fields (3 bytes + fraction) -> '[-]HH:MM:SS[.f]' (the hour takes 2 to 4 digits)."""
    _load()
    nb, mult = _frac_bytes(fsp)
    m = _matrix(raws, 3 + nb)
    if fsp >= 5:
        packed = _be(m, 0, 6) - 0x800000000000
    else:
        intpart = _be(m, 0, 3) - 0x800000
        if nb:
            frac = _be(m, 3, 3 + nb)
            carry = (intpart < 0) & (frac != 0)
            packed = ((intpart + carry) << 24) + (frac - carry * (1 << 8 * nb)) * mult
        else:
            packed = intpart << 24
    negative = packed < 0
    packed = np.abs(packed)
    hms = packed >> 24
    us = (packed & 0xFFFFFF) // 10 ** (6 - fsp)
    if len(us) and us.max() >= 10**fsp:
        return None
    hour = (hms >> 12) & 1023
    width = 11 + (fsp + 1 if fsp else 0)  # sign, 4 hour digits, ':MM:SS', the fraction
    out = np.empty((len(hms), width), dtype=_U8)
    out[:] = np.frombuffer((b" 0000:00:00.000000")[:width], dtype=_U8)
    _digits(out, 1, hour, 4)
    _digits(out, 6, (hms >> 6) & 63, 2)
    _digits(out, 9, hms & 63, 2)
    if fsp:
        _digits(out, 12, us, fsp)
    # The hour's leading zeros beyond two digits become spaces, the sign goes just before the first digit.
    lead = np.where(hour >= 1000, 1, np.where(hour >= 100, 2, 3))
    if not negative.any() and (lead == 3).all():
        return TextColumn.fixed(np.ascontiguousarray(out[:, 3:]))
    # Each value starts at its first hour digit, or the sign just before it.
    start = lead - negative
    n = len(hms)
    rows = np.arange(n)
    out[rows[negative], start[negative]] = ord("-")
    keep = np.arange(width) >= start[:, None]
    offsets = np.zeros(n + 1, dtype=_I64)
    np.cumsum(width - start, out=offsets[1:])
    return TextColumn(out[keep], offsets)
