"""Column-at-a-time decoding of a whole rows event: the decoder's fast path.

One Python pass walks the row images only to find their NULL bitmaps and variable lengths; from that walk one
struct format covering every image of the event is built and unpacked in a single call. Each column's raw
fields are then turned into values a whole column at a time with C-level `map` over caches keyed by the raw
bytes (DECIMAL, temporal types) or over codecs (text), so most values never cost a Python-level call.

The values are exactly those of the row-at-a-time decoders (rowcodegen, values): the same formatting
functions fill the caches. A NULL column is unpacked as empty placeholder fields ("0s") so that every image
of an event has the same number of fields and columns are plain strided slices of the unpacked tuple. An event
comes out as ColumnarPairs: its columns, with row tuples built only for a consumer that iterates the pairs (the
lake's history reads the columns). In an update, after-image columns the update did not change reuse the before
image's values.
Events this module does not plan (pre-GA v0 images, PARTIAL_UPDATE_ROWS, updates whose two images list
different columns, events over rows.COLUMNAR_MAX_BYTES) stay on the row-at-a-time path.
"""

from __future__ import annotations

import struct
from collections import deque
from collections.abc import Callable
from itertools import chain, compress, repeat
from operator import and_, not_
from typing import Any

from .charsets import BINARY, codec_of, decode_mysql_latin1, decoder_for
from .constants import RK
from .jsonb import decode_jsonb_text
from .packing import BodyError
from .rowcodegen import FRAC3, date_part, make_fast_decimal, timestamp_base
from .tablemap import Column, TableMap
from .values import (
    ABSENT,
    ValueError_,
    _frac_reader,
    decimal_groups,
    guess_text,
)
from .vectorized import (
    DecimalColumn,
    TextColumn,
    date_texts,
    datetime2_texts,
    decimal_column,
    decimal_values,
    numpy_ready,
    time2_texts,
    timestamp2_texts,
    utf8_texts,
)

CACHE_LIMIT = 65_536
DECIMAL_INT_PARTS = 512  # integer parts cached per DECIMAL(p,s), each with its values (memory bound)
DECIMAL_PREFILL_SCALE = 2  # up to this scale, all fractions of an integer part are made at once
_unpack_from = struct.unpack_from


class RawCache(dict):
    """raw field -> decoded value, computed by `fn` on a miss; emptied when it reaches CACHE_LIMIT entries.

    Looked up with `map(cache.__getitem__, raws)`: hits never leave C."""

    __slots__ = ("fn", "limit")

    def __init__(self, fn: Callable[[Any], Any], limit: int = CACHE_LIMIT) -> None:
        super().__init__()
        self.fn = fn
        self.limit = limit

    def __missing__(self, key: Any) -> Any:
        value = self.fn(key)
        if len(self) >= self.limit:
            self.clear()
        self[key] = value
        return value


class SteadyCache(RawCache):
    """A RawCache that, when full, drops its newest entry instead of everything: values cycling through more
    keys than it holds still find the older part of the cycle (used where a miss is expensive)."""

    __slots__ = ()

    def __missing__(self, key: Any) -> Any:
        value = self.fn(key)
        if len(self) >= self.limit:
            self.popitem()
        self[key] = value
        return value


# Caches shared by every table: the same DECIMAL(p,s) or fsp reads the same bytes the same way.
_shared: dict[tuple, RawCache] = {}


def _shared_cache(key: tuple, fn: Callable[[Any], Any], limit: int = CACHE_LIMIT, kind: type = RawCache
                  ) -> RawCache:
    cache = _shared.get(key)
    if cache is None:
        cache = _shared[key] = kind(fn, limit)
    return cache


def _date_text(k3: bytes) -> str:
    """'YYYY-MM-DD ' from DATETIME2's first three bytes (sign, year*13+month, day, the hour's top bit)."""
    return date_part((int.from_bytes(k3, "big") - 0x800000) >> 1) + " "


_TIME_LISTS: list[list[str] | None] = [None, None]


def _times_for(k3: bytes) -> list[str]:
    """'HH:MM:SS' for every little-endian 16-bit key of DATETIME2's last two bytes, for the hour's top bit in
    the third byte; built whole on first use (65,536 texts: cheaper than filling a cache one miss at a time)."""
    top = k3[2] & 1
    table = _TIME_LISTS[top]
    if table is None:
        # Key = b3 | b4 << 8: hour = top << 4 | b3 >> 4, minute = (b3 & 15) << 2 | b4 >> 6, second = b4 & 63.
        hour_minute = ["%02d:%02d:" % (h, m) for h in range(32) for m in range(64)]
        by_minute_low = [[hour_minute[(top << 4 | b3 >> 4) * 64 + ((b3 & 15) << 2 | low)] for b3 in range(256)]
                         for low in range(4)]
        table = []
        for b4 in range(256):
            second = "%02d" % (b4 & 63)
            table += [prefix + second for prefix in by_minute_low[b4 >> 6]]
        _TIME_LISTS[top] = table
    return table


_DATES = _shared_cache(("date",), _date_text)
_HOUR_TOP = _shared_cache(("hour_top",), _times_for)
_STAMPS = _shared_cache(("stamp",), lambda k4: timestamp_base(int.from_bytes(k4, "big")))


def _frac_cache(fsp: int, signed: bool) -> RawCache:
    """'.fff' text of a fractional-seconds field, as the generated decoders format it."""
    _nb, mult = _frac_reader(fsp)
    div = 10 ** (6 - fsp)

    def text(raw: bytes) -> str:
        v = int.from_bytes(raw, "big", signed=signed) * mult // div
        return FRAC3[v] if fsp == 3 else "." + "%0*d" % (fsp, v)

    return _shared_cache(("frac", fsp, signed), text)


class _Col:
    """How one present column is unpacked and converted.

    `codes`: struct codes of its fixed fields, or None for a length-prefixed value (`prefix` bytes of length).
    `vec(fields)`: the values of a whole column with no NULLs (fields: one sequence per struct field).
    `one(*field values)`: the value of one image (used where a column is NULL in some images only)."""

    __slots__ = ("bit", "codes", "index", "members", "nfields", "one", "prefix", "tolerant", "vec", "whole")

    def __init__(self, index: int, bit: int, codes: list[str] | None, prefix: int, vec, one) -> None:
        self.index = index
        # A run of NOT NULL integer columns read as one field (_integer_runs): (table column index, its bit, numpy
        # dtype, width in bytes, offset in the run, signed MEDIUMINT?) per column; None for any other column.
        self.members: list[tuple] | None = None
        self.bit = bit
        self.codes = codes
        self.prefix = prefix
        self.nfields = len(codes) if codes is not None else 1
        self.vec = vec
        self.one = one
        # Whether vec accepts the empty placeholder a NULL leaves (one field, and no cache keyed by it).
        self.tolerant = codes is None or vec is _first
        # Whether vec is a whole-column numpy conversion (vectorized.py), whose fixed cost per call makes it worth
        # converting several rows events together (convert_pending).
        self.whole = False


WHOLE_MIN = 24  # fewer values than this go value by value (`one`): a numpy call costs about a microsecond


def _whole(col: _Col, gated: bool = True) -> _Col:
    """Mark a column whose vec converts a whole column with numpy; a few values go through `one` instead, and so do
    all while numpy is not worth importing for them (`gated`: vectorized.numpy_ready; text has its own gate)."""
    vec, one = col.vec, col.one

    def whole_or_few(fields):
        raws = fields[0]
        if len(raws) < WHOLE_MIN or (gated and not numpy_ready(len(raws))):
            return list(map(one, raws))
        return vec(fields)

    col.vec = whole_or_few
    col.whole = True
    return col


def _first(fields):
    return fields[0]


# struct codes of integers and floats (plan_struct) -> numpy dtypes of the same width and kind (EventPlan's
# `arrays`)
_INT_DTYPES = {"b": "int8", "B": "uint8", "h": "int16", "H": "uint16", "i": "int32", "I": "uint32", "q": "int64",
               "Q": "uint64", "f": "float32", "d": "float64"}
_np: Any = None  # numpy, once some EventPlan gives integer columns as arrays
_ndarray: type | None = None


def _numpy_arrays() -> None:
    """Import numpy for integer columns as arrays (only then: stats and row consumers never pay for it)."""
    global _np, _ndarray
    if _np is None:
        import numpy as np

        _np, _ndarray = np, np.ndarray


class NullableArray:
    """A numeric column with NULLs in some images, as numpy arrays (DecodeOptions.int_arrays): `values` (0 where
    NULL) and `valid` (False where NULL)."""

    __slots__ = ("valid", "values")

    def __init__(self, values, valid) -> None:
        self.values = values
        self.valid = valid

    def __len__(self) -> int:
        return len(self.values)

    def __getitem__(self, i):
        if isinstance(i, slice):
            return NullableArray(self.values[i], self.valid[i])
        return int(self.values[i]) if self.valid[i] else None

    def tolist(self) -> list:
        return [v if ok else None for v, ok in zip(self.values.tolist(), self.valid.tolist(), strict=True)]

    def __iter__(self):
        return iter(self.tolist())

    def __eq__(self, other: object) -> bool:
        return self.tolist() == (other.tolist() if isinstance(other, NullableArray) else other)

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"NullableArray({self.tolist()!r})"


def _plain_columns(columns: list) -> list:
    """Columns as value sequences of Python objects (integer arrays as lists of ints) for row tuples."""
    if _ndarray is None:
        return columns
    return [c.tolist() if type(c) is _ndarray or type(c) is NullableArray else c for c in columns]


def _int24_array(raws, signed: bool):
    """MEDIUMINT values (3-byte little-endian fields) as one int32 array: one join, a few numpy operations."""
    return _int24_of(_np.frombuffer(b"".join(raws), _np.uint8).reshape(-1, 3), signed)


def _int24_of(a, signed: bool):
    """MEDIUMINT values of an (n, 3) uint8 array of little-endian fields as an int32 array."""
    a = a.astype(_np.int32)
    v = a[:, 0] | a[:, 1] << 8 | a[:, 2] << 16
    return (v ^ 0x800000) - 0x800000 if signed else v


_RUN_MIN = 2  # consecutive NOT NULL integer columns read as one field from this many on


def _integer_runs(cols: list[_Col], arrays: dict, table: TableMap) -> list[_Col]:
    """The planned columns, each run of at least _RUN_MIN consecutive NOT NULL integer columns given as numpy
    arrays replaced by one column read as one bytes field per image: the event's fields of a run are joined and
    cut into the columns' arrays by numpy (one C-level call per column instead of a Python int per value, then
    a numpy array of them). A NULL in a run (which the server never writes for a NOT NULL column) is read image
    by image. The runs' columns leave `arrays` (EventPlan.columns reads them through their run)."""
    out: list[_Col] = []
    run: list[_Col] = []

    def close() -> None:
        if len(run) < _RUN_MIN:
            out.extend(run)
        else:
            members, at = [], 0
            for c in run:
                dtype, int24 = arrays[c.index]
                width = 3 if int24 is not None else struct.calcsize("<" + c.codes[0])
                members.append((c.index, c.bit, _np.dtype(dtype).newbyteorder("<"), width, at, int24))
                at += width
            merged = _Col(run[0].index, 0, [f"{at}s"], 0, None, None)
            merged.members = members
            for c in run:
                merged.bit |= c.bit
                del arrays[c.index]
            out.append(merged)
        run.clear()

    for c in cols:
        if c.index in arrays and table.columns[c.index].nullable is False:
            run.append(c)
        else:
            close()
            out.append(c)
    close()
    return out


def _run_arrays(run: _Col, raws: tuple, nulls, some_null: int, n: int, out: list) -> None:
    """The columns of a run of NOT NULL integers (`raws`: each image's bytes of the run) into `out`."""
    members = run.members
    if not some_null & run.bit:
        width = sum(m[3] for m in members)
        a = _np.frombuffer(b"".join(raws), _np.uint8).reshape(n, width)
        for index, _bit, dtype, w, at, int24 in members:
            part = a[:, at : at + w]
            out[index] = _int24_of(part, int24) if int24 is not None else \
                _np.ascontiguousarray(part).view(dtype).reshape(n)
        return
    # NULL in some image: each image's values in turn (a value NULL there has no bytes in it)
    columns: list[list] = [[] for _ in members]
    for raw, m in zip(raws, nulls, strict=True):
        at = 0
        for vals, (_index, bit, dtype, w, _at, int24) in zip(columns, members, strict=True):
            if m & bit:
                vals.append(None)
            else:
                vals.append(int.from_bytes(raw[at : at + w], "little", signed=int24) if int24 is not None else
                            _np.frombuffer(raw[at : at + w], dtype)[0].item())
                at += w
    for vals, member in zip(columns, members, strict=True):
        out[member[0]] = vals


def _same(v):
    return v


def _mapped(fn) -> tuple[Callable, Callable]:
    return (lambda fields: list(map(fn, fields[0]))), fn


_YEARS = [0, *range(1901, 2156)]


_C1 = bytes(range(0x80, 0xA0))


def latin1_texts(raws, decode) -> list[str]:
    """MySQL latin1 values: where no byte of the column is in 0x80-0x9F (where MySQL's latin1, Windows-1252,
    differs from ISO latin-1), the interpreter's own latin-1 decoder, called from C for each value; else `decode`."""
    data = b"".join(raws)
    if data.isascii() or len(data.translate(None, _C1)) == len(data):
        return list(map(bytes.decode, raws, repeat("latin-1")))
    return list(map(decode, raws))


def _text_fn(col: Column):
    """bytes -> value for a character column, as rowcodegen decodes it (None: keep the bytes)."""
    if col.collation == BINARY:
        return None
    decode = decoder_for(col.collation)
    if decode is None:
        return guess_text
    if codec_of(col.collation) == "utf-8":
        return bytes.decode
    return decode


# -- per-type planners (binlake/binlog/coltypes.py names one per column type) ----------------------------------
# plan(codec, bit) -> _Col, where `codec` (coltypes.ColumnCodec) holds the column, its reference decoder, its
# length prefix, its struct code and its fixed width. Raise ValueError_ on metadata they cannot plan.


def plan_wrapped(codec: Any, bit: int, wrapped: Callable) -> _Col:
    """INET4/INET6/UUID, vectors, COMPRESSED: length-prefixed bytes, then one more step (values.wrapped_value)."""
    vec, one = _mapped(wrapped)
    return _Col(codec.col.index, bit, None, codec.prefix, vec, one)


def plan_struct(codec: Any, bit: int) -> _Col:
    """A fixed-width number unpacked as it is by its struct code."""
    return _Col(codec.col.index, bit, [codec.struct], 0, _first, _same)


def plan_year(codec: Any, bit: int) -> _Col:
    vec, one = _mapped(_YEARS.__getitem__)
    return _Col(codec.col.index, bit, ["B"], 0, vec, one)


def plan_decimal(codec: Any, bit: int, iso: bool = False) -> _Col:
    return _decimal_column(codec.col, bit, iso)


def plan_datetime2(codec: Any, bit: int, iso: bool = False) -> _Col:
    """A whole column at a time with numpy (vectorized.datetime2_texts; iso: as a TextColumn); `one` (by cached date
    and time of day) converts a column holding a value the vector path does not format."""
    col = codec.col
    fsp = col.meta
    size = 5 + (fsp + 1) // 2
    dates, tops = _DATES.__getitem__, _HOUR_TOP.__getitem__
    fracs = _frac_cache(fsp, signed=True).__getitem__ if fsp else None

    def one(raw):
        text = dates(raw[:3]) + tops(raw[:3])[raw[3] | raw[4] << 8]
        return text + fracs(raw[5:]) if fracs else text

    def vec(f):
        values = datetime2_texts(f[0], fsp, iso)
        return values if values is not None else list(map(one, f[0]))

    return _whole(_Col(col.index, bit, [f"{size}s"], 0, vec, one))


def plan_timestamp2(codec: Any, bit: int, iso: bool = False) -> _Col:
    """A whole column at a time with numpy (vectorized.timestamp2_texts); `one` as plan_datetime2's."""
    col = codec.col
    fsp = col.meta
    size = 4 + (fsp + 1) // 2
    stamps = _STAMPS.__getitem__
    fracs = _frac_cache(fsp, signed=False).__getitem__ if fsp else None

    def one(raw):
        return stamps(raw[:4]) + fracs(raw[4:]) if fracs else stamps(raw)

    def vec(f):
        values = timestamp2_texts(f[0], fsp, iso)
        return values if values is not None else list(map(one, f[0]))

    return _whole(_Col(col.index, bit, [f"{size}s"], 0, vec, one))


def plan_enum(codec: Any, bit: int) -> _Col:
    col = codec.col
    if not (col.enum_labels is not None and col.meta == 1):
        return plan_cached(codec, bit)
    labels = ("", *col.enum_labels)

    def label(i: int) -> str:
        if i >= len(labels):
            raise ValueError_(f"ENUM index {i} beyond its {len(labels) - 1} labels")
        return labels[i]

    cache = RawCache(label)
    vec, one = _mapped(cache.__getitem__)
    return _Col(col.index, bit, ["B"], 0, vec, one)


def plan_text(codec: Any, bit: int, iso: bool = False, rows: bool = False) -> _Col:
    """A length-prefixed value decoded with the column's charset (bytes for the binary collation; UTF-8 text as a
    TextColumn, see vectorized.utf8_texts, unless `rows`: a consumer of row tuples, for which a str per value made
    straight from the raw fields is cheaper than a TextColumn made and then read)."""
    col = codec.col
    fn = _text_fn(col)
    if fn is None:
        return _Col(col.index, bit, None, codec.prefix, _first, _same)
    if fn is bytes.decode and not rows:

        def utf8(f):
            raws = f[0]
            values = utf8_texts(raws) if len(raws) >= WHOLE_MIN else None
            return values if values is not None else list(map(fn, raws))

        return _whole(_Col(col.index, bit, None, codec.prefix, utf8, fn), gated=False)
    if fn is decode_mysql_latin1:  # ISO latin-1's C decoder where the bytes allow
        return _Col(col.index, bit, None, codec.prefix, lambda f: latin1_texts(f[0], fn), fn)
    vec, one = _mapped(fn)
    return _Col(col.index, bit, None, codec.prefix, vec, one)


def plan_string(codec: Any, bit: int, iso: bool = False, rows: bool = False) -> _Col:
    col = codec.col
    if not (col.collation == BINARY and col.meta):
        return plan_text(codec, bit, iso, rows)
    # BINARY(n): the server strips trailing zero bytes in row images; SELECT returns them padded.
    width = col.meta

    def one(raw: bytes) -> bytes:
        return raw.ljust(width, b"\0")

    def vec(fields) -> list:  # bytes.ljust called from C for each value (a full-width value is kept as it is)
        return list(map(bytes.ljust, fields[0], repeat(width), repeat(b"\0")))

    return _Col(col.index, bit, None, 1 if width < 256 else 2, vec, one)


def plan_json(codec: Any, bit: int) -> _Col:
    vec, one = _mapped(decode_jsonb_text)
    return _Col(codec.col.index, bit, None, codec.prefix, vec, one)


def plan_bytes(codec: Any, bit: int) -> _Col:
    """A length-prefixed value kept as its bytes (GEOMETRY, VECTOR)."""
    return _Col(codec.col.index, bit, None, codec.prefix, _first, _same)


def plan_date(codec: Any, bit: int, iso: bool = False) -> _Col:
    """DATE, a whole column at a time with numpy (vectorized.date_texts)."""
    reference = codec.decode

    def one(raw):
        return reference(raw, 0)[0]

    def vec(f):
        values = date_texts(f[0], iso)
        return values if values is not None else list(map(one, f[0]))

    return _whole(_Col(codec.col.index, bit, ["3s"], 0, vec, one))


def plan_int24(codec: Any, bit: int) -> _Col:
    """MEDIUMINT: int.from_bytes per value (about 75 ns, not much more than numpy's whole-column conversion, whose
    import would cost as much as 1.5 million of them)."""
    signed = codec.col.signed is not False
    from_bytes = int.from_bytes

    def one(raw):
        return from_bytes(raw, "little", signed=signed)

    return _Col(codec.col.index, bit, ["3s"], 0, lambda f: [from_bytes(r, "little", signed=signed) for r in f[0]], one)


def plan_time2(codec: Any, bit: int) -> _Col:
    """TIME2, a whole column at a time with numpy (vectorized.time2_texts)."""
    reference = codec.decode
    fsp = codec.col.meta

    def one(raw):
        return reference(raw, 0)[0]

    def vec(f):
        values = time2_texts(f[0], fsp)
        return values if values is not None else list(map(one, f[0]))

    return _whole(_Col(codec.col.index, bit, [f"{codec.width}s"], 0, vec, one))


def plan_cached(codec: Any, bit: int) -> _Col:
    """A fixed-width value (codec.width bytes) the reference decoder converts, cached by its raw bytes."""
    reference = codec.decode
    cache = RawCache(lambda raw: reference(raw, 0)[0])
    vec, one = _mapped(cache.__getitem__)
    return _Col(codec.col.index, bit, [f"{codec.width}s"], 0, vec, one)


def _decimal_column(col: Column, bit: int, iso: bool = False) -> _Col:
    """DECIMAL(p,s), a whole column at a time with numpy: a vectorized.DecimalColumn (its checked digit groups, the
    Decimals made only when read; iso: vectorized.decimal_values' text). A column with a digit group out of range is
    converted value by value, which raises."""
    p, s = col.precision, col.scale
    groups, n_int, size = decimal_groups(p, s)
    one = make_fast_decimal(p, s)

    if iso:
        def vec(f):
            values = decimal_values(f[0], groups, n_int, size, s, True)
            return values if values is not None else list(map(one, f[0]))
    else:
        def vec(f):
            values = decimal_column(f[0], p, s, groups, n_int, size)
            return values if values is not None else list(map(one, f[0]))

    return _whole(_Col(col.index, bit, [f"{size}s"], 0, vec, one))


# Planners with a text form (EventPlan's `text`: vectorized.TextColumn for columns whose values all format).
_ISO_PLANNERS = {plan_decimal, plan_datetime2, plan_timestamp2, plan_date, plan_text, plan_string}
# Planners with a form for consumers of row tuples (EventPlan's `rows`).
_ROWS_PLANNERS = {plan_text, plan_string}


def _plan(codec: Any, bit: int, text: bool, rows: bool = False) -> _Col:
    if codec.wrapped is None and codec.spec is not None:
        if text and codec.spec.columnar in _ISO_PLANNERS:
            return codec.spec.columnar(codec, bit, iso=True)
        if rows and codec.spec.columnar in _ROWS_PLANNERS:
            return codec.spec.columnar(codec, bit, rows=True)
    return codec.plan(bit)


class _Layout:
    """The images of one NULL pattern: fixed size, and where the length prefixes of variable values sit.

    `var_at`: -1 when the images have no variable value (`fmt` is their format); for one value with a 1- or
    2-byte length prefix, the prefix's offset in the image (plus 0x10000 for a 2-byte prefix), `pieces[n]`
    being the image's format when the value has n bytes; -2 otherwise (`segments` and `tail` describe it)."""

    __slots__ = ("fmt", "pieces", "segments", "size", "tail", "var_at")

    def __init__(self, nb: int, cols: list[_Col], nulls: int) -> None:
        parts: list[str] = [_BITMAP_CODES.get(nb, f"{nb}s")]  # the NULL bitmap is the first field
        # (bytes from the previous variable value's end to this one's length prefix, prefix width, codes so far)
        segments: list[tuple[int, int, str]] = []
        size = nb
        since = nb
        for c in cols:
            if c.members is not None:  # one field: the bytes of the run's columns that are not NULL here
                n = sum(m[3] for m in c.members if not nulls & m[1])
                parts.append(f"{n}s")
                size += n
                since += n
            elif nulls & c.bit:
                parts.append("0s" * c.nfields)
            elif c.codes is None:
                parts.append(f"{c.prefix}x")
                segments.append((since, c.prefix, "".join(parts)))
                parts = []
                size += c.prefix
                since = 0
            else:
                codes = "".join(c.codes)
                parts.append(codes)
                n = struct.calcsize("<" + codes)
                size += n
                since += n
        tail = "".join(parts)
        self.size = size
        self.tail = tail
        self.segments = tuple(segments)
        self.fmt = tail
        self.pieces = None
        if not segments:
            self.var_at = -1
        elif len(segments) == 1 and segments[0][1] in (1, 2):
            at, prefix, head = segments[0]
            self.var_at = at if prefix == 1 else at + 0x10000
            self.pieces = RawCache(lambda n: f"{head}{n}s{tail}")
        else:
            self.var_at = -2


_BITMAP_CODES = {1: "B", 2: "H"}
# A little-endian length prefix of 1 to 4 bytes at buf[p], as generated walker code.
_READ_LENGTH = {1: "buf[p]", 2: "buf[p] | buf[p + 1] << 8", 3: "buf[p] | buf[p + 1] << 8 | buf[p + 2] << 16",
                4: "buf[p] | buf[p + 1] << 8 | buf[p + 2] << 16 | buf[p + 3] << 24"}
MAX_INLINED = 8  # NULL patterns a generated walker tests inline
_LENGTH_CODES = {1: "B", 2: "H", 4: "I"}
_U4 = struct.Struct("<I").unpack_from


def _first_length(lay: _Layout) -> tuple[int, int] | None:
    """(offset in the image, width) of the length of an image's first variable value, when a struct code reads it."""
    if lay.var_at >= 0x10000:
        return lay.var_at - 0x10000, 2
    if lay.var_at >= 0:
        return lay.var_at, 1
    if lay.var_at == -2 and lay.segments[0][1] in _LENGTH_CODES:
        return lay.segments[0][0], lay.segments[0][1]
    return None


def _piece(cache: dict, head: str, n: int) -> str:
    """A walker's codes for one variable value of n bytes (`head` % n), kept in `cache` while it is small."""
    text = head % n
    if len(cache) < 4096:
        cache[n] = text
    return text


class EventPlan:
    """Column-at-a-time decoding of the images of one table map with one columns-present bitmap."""

    def __init__(self, table: TableMap, present: int, codecs: list, text: bool = False, rows: bool = False,
                 arrays: bool = False) -> None:
        """`codecs`: the table's columns as coltypes.ColumnCodec (each plans its own column). `text`: DECIMAL and
        DATE/DATETIME/TIMESTAMP columns whose values all format come as vectorized.TextColumn (DecodeOptions
        .text_values). `rows`: the consumer reads row tuples (decoder.decode_files): UTF-8 text comes as str lists,
        not TextColumn (see plan_text). `arrays`: TINYINT..BIGINT, MEDIUMINT, FLOAT and DOUBLE columns come as numpy
        arrays of their stored width, NullableArray where some images hold NULL (DecodeOptions.int_arrays)."""
        cols = [c for c in table.columns if present >> c.index & 1]
        self.ncols = len(table.columns)
        self.nb = (len(cols) + 7) // 8
        self.cols = [_plan(codecs[c.index], 1 << i, text, rows) for i, c in enumerate(cols)]
        # column index -> (numpy dtype, signed MEDIUMINT?) of the integer columns given as numpy arrays (plain struct
        # values: plan_struct; MEDIUMINT: plan_int24), NullableArray where some images hold NULL
        self.arrays: dict[int, tuple[str, bool | None]] = {}
        if arrays:
            for c in self.cols:
                if c.vec is _first and c.codes and c.codes[0] in _INT_DTYPES:
                    self.arrays[c.index] = (_INT_DTYPES[c.codes[0]], None)
                elif getattr(codecs[c.index].spec, "columnar", None) is plan_int24:
                    self.arrays[c.index] = ("int32", codecs[c.index].col.signed is not False)
        # the table columns given as numpy arrays (or NullableArray), runs included
        self.array_columns = frozenset(self.arrays)
        if self.arrays:
            _numpy_arrays()
            self.cols = _integer_runs(self.cols, self.arrays, table)
        # Events of this plan wait to be converted together only when a column converts a whole column with numpy
        # (for the others, joining and cutting the events' columns costs more than it saves).
        self.groups = any(c.whole for c in self.cols)
        self.nfields = 1 + sum(c.nfields for c in self.cols)  # the NULL bitmap, then the columns' fields
        self.absent = [i for i in range(self.ncols) if not present >> i & 1]
        self.layouts: dict[int, _Layout] = {}
        self._inlined: list[int] = []
        self._exact: tuple | None = None
        self.walk = self._compile_walker()

    def layout(self, nulls: int) -> _Layout:
        lay = self.layouts.get(nulls)
        if lay is None:
            if len(self.layouts) >= 4096:
                self.layouts.clear()
            lay = self.layouts[nulls] = _Layout(self.nb, self.cols, nulls)
        return lay

    def walk_exact(self, buf, off: int, end: int) -> str:
        """Like walk, without the first pattern's look-ahead read (which may run past the buffer's end when a
        shorter image of another pattern ends it)."""
        key = tuple(self._inlined)
        if self._exact is None or self._exact[0] != key:
            self._exact = (key, self._compile_walker(look_ahead=False))
        return self._exact[1](buf, off, end)

    def _compile_walker(self, look_ahead: bool = True) -> Callable:
        """walk(buf, off, end) -> (the NULL bitmap of every image, one struct format for all of them).

        Generated: the NULL patterns seen first (up to MAX_INLINED) are tested inline with their layout's
        offsets and sizes as constants; any other pattern goes through `_step`."""
        nb = self.nb
        if nb == 1:
            read = "nulls = buf[off]"
        elif nb == 2:
            read = "nulls = buf[off] | buf[off + 1] << 8"
        else:
            read = f"nulls = _from_bytes(buf[off:off + {nb}], 'little')"
        env: dict[str, Any] = {"BodyError": BodyError, "_from_bytes": int.from_bytes, "step": self._step,
                               "walk_general": self._walk_general}
        env["piece"] = _piece
        env["U4"] = _U4
        # The first pattern's bitmap and first value length in one struct call (`first_len`: that length's offset in
        # the image and its width); patterns whose first value sits elsewhere read their length again.
        first_len = _first_length(self.layout(self._inlined[0])) if look_ahead and self._inlined and nb in (1, 2) \
            else None
        if first_len is not None:
            at, width = first_len
            env["first"] = struct.Struct(f"<{'B' if nb == 1 else 'H'}{at - nb}x{_LENGTH_CODES[width]}").unpack_from
            read = "nulls, n = first(buf, off)"
        lines = ["def walk(buf, off, end):", "    fmts = ['<']", "    add_fmt = fmts.append", "    ext = fmts.extend",
                 "    while off < end:", f"        {read}"]
        for i, nulls in enumerate(self._inlined):
            lay = self.layout(nulls)
            lines.append(f"        {'if' if i == 0 else 'elif'} nulls == {nulls}:")
            at = lay.var_at
            have_n = first_len is not None and _first_length(lay) == first_len  # n already read
            if at >= 0 and not have_n:
                if at >= 0x10000:
                    lines.append(f"            n = buf[off + {at - 0x10000}] | buf[off + {at - 0x10000 + 1}] << 8")
                else:
                    lines.append(f"            n = buf[off + {at}]")
            if at == -1:
                env[f"F{i}"] = lay.fmt
                lines += [f"            add_fmt(F{i})", f"            off += {lay.size}"]
            elif at >= 0:
                env[f"P{i}"] = lay.pieces
                # A plain dict lookup (the interpreter specializes it); a length not seen yet is added once.
                env[f"D{i}"] = {}
                lines += ["            try:", f"                add_fmt(D{i}[n])", "            except KeyError:",
                          f"                add_fmt(P{i}[n])", f"                if len(D{i}) < 4096:",
                          f"                    D{i}[n] = P{i}[n]", f"            off += {lay.size} + n"]
            elif all(prefix in _READ_LENGTH for _, prefix, _ in lay.segments):
                # Several variable values (or one with a 3- or 4-byte length: BLOB, JSON): read each length in turn;
                # each value's codes (those before it, its length's skip and its `Ns`; the last one's with the codes
                # after it) come from a dict by its length: no %-format per image.
                last = len(lay.segments) - 1
                names = []
                for j, (since, prefix, head) in enumerate(lay.segments):
                    if j == 0:
                        lines.append(f"            p = off + {since}")
                    else:
                        lines.append(f"            p += n{j - 1} + {lay.segments[j - 1][1] + since}")
                    if j == 0 and have_n:
                        lines.append("            n0 = n")
                    elif prefix == 4:
                        lines.append(f"            n{j} = U4(buf, p)[0]")
                    else:
                        lines.append(f"            n{j} = {_READ_LENGTH[prefix]}")
                    env[f"H{i}_{j}"] = f"{head}%ds" + (lay.tail if j == last else "")
                    env[f"D{i}_{j}"] = {}
                    lines += ["            try:", f"                s{j} = D{i}_{j}[n{j}]", "            except KeyError:",
                              f"                s{j} = piece(D{i}_{j}, H{i}_{j}, n{j})"]
                    names.append(f"s{j}")
                tail_bytes = lay.size - sum(since + prefix for since, prefix, _ in lay.segments)
                lines.append(f"            ext(({', '.join(names)},))" if last else "            add_fmt(s0)")
                lines.append(f"            off = p + n{last} + {lay.segments[last][1] + tail_bytes}")
            else:
                env[f"L{i}"] = lay
                lines.append(f"            off = walk_general(buf, off, L{i}, add_fmt)")
        if self._inlined:
            lines += ["        else:", "            off = step(buf, off, nulls, add_fmt)"]
        else:
            lines.append("        off = step(buf, off, nulls, add_fmt)")
        lines += ["    if off > end:", "        raise BodyError('row image runs past the end of the event')",
                  "    return ''.join(fmts)"]
        exec(compile("\n".join(lines), "<binlake event walker>", "exec"), env)
        return env["walk"]

    def _step(self, buf, off: int, nulls: int, add_fmt) -> int:
        """One image of a pattern the walker does not inline (yet); returns its end."""
        lay = self.layout(nulls)
        if len(self._inlined) < MAX_INLINED and nulls not in self._inlined:
            self._inlined.append(nulls)
            self.walk = self._compile_walker()  # used from the next event on
        at = lay.var_at
        if at == -1:
            add_fmt(lay.fmt)
            return off + lay.size
        if at >= 0x10000:
            p = off + at - 0x10000
            n = buf[p] | buf[p + 1] << 8
        elif at >= 0:
            n = buf[off + at]
        else:
            return self._walk_general(buf, off, lay, add_fmt)
        add_fmt(lay.pieces[n])
        return off + lay.size + n

    @staticmethod
    def _walk_general(buf, off: int, lay: _Layout, add_fmt) -> int:
        """One image with several variable-length values (or 3/4-byte length prefixes); returns its end."""
        parts = []
        total = 0
        p = off
        for since, prefix, head in lay.segments:
            p += since
            n = int.from_bytes(buf[p : p + prefix], "little")
            parts.append(f"{head}{n}s")
            p += prefix + n
            total += n
        parts.append(lay.tail)
        add_fmt("".join(parts))
        return off + lay.size + total

    def images(self, flat: tuple, start: int, step: int, reuse: dict | None = None) -> list[tuple]:
        """Rows (value tuples in table column order) of images start, start+step, ... of the event."""
        return list(zip(*self.columns(flat, start, step, reuse), strict=True))

    def columns(self, flat: tuple, start: int, step: int, reuse: dict | None = None) -> list[list | tuple]:
        """Columns (one value sequence per table column, in table column order) of images start, start+step, ...
        of the event.

        `reuse` (updates): a dict shared by the before and the after images. The before images record each
        NULL-free converted column's raw fields and values in it; an after-image column with the same raw fields
        (a column the update did not change) takes the same values instead of converting them again."""
        nf = self.nfields
        stride = nf * step
        i = start * nf
        nulls = flat[i::stride]
        if self.nb > 2:
            nulls = list(map(int.from_bytes, nulls, repeat("little")))
        i += 1
        n = len(nulls)
        patterns = set(nulls)
        some_null = 0
        all_null = -1
        for p in patterns:
            some_null |= p
            all_null &= p
        out: list = [None] * self.ncols
        arrays = self.arrays
        for c in self.cols:
            k = c.nfields
            bit = c.bit
            if c.members is not None:
                _run_arrays(c, flat[i::stride], nulls, some_null, n, out)
                i += 1
                continue
            if arrays and c.index in arrays:
                out[c.index] = self._int_array(arrays[c.index], flat[i::stride], nulls, bit, all_null, some_null, n)
                i += k
                continue
            if all_null & bit:
                out[c.index] = [None] * n
            elif some_null & bit:
                one = c.one
                if c.tolerant:
                    # Convert the whole column, placeholders included, then blank the NULL images.
                    vals = c.vec([flat[i::stride]])
                    if type(vals) is TextColumn:  # the NULLs' placeholders are empty texts: marked not valid
                        vals = vals.with_valid(list(map(not_, map(and_, nulls, repeat(bit)))))
                    else:
                        if type(vals) is not list:
                            vals = list(vals)
                        for r in compress(range(n), map(and_, nulls, repeat(bit))):
                            vals[r] = None
                    out[c.index] = vals
                elif k == 1:
                    # Convert the present values as a column, then put them back between the NULLs.
                    present = list(map(not_, map(and_, nulls, repeat(bit))))
                    got = c.vec([list(compress(flat[i::stride], present))])
                    if type(got) is TextColumn or type(got) is DecimalColumn:
                        out[c.index] = got.spread(present)
                    else:
                        vals = [None] * n
                        deque(map(vals.__setitem__, compress(range(n), present), got), 0)
                        out[c.index] = vals
                else:
                    fields = [flat[i + j::stride] for j in range(k)]
                    out[c.index] = [None if m & bit else one(*v) for m, *v in zip(nulls, *fields, strict=True)]
            else:
                fields = [flat[i + j::stride] for j in range(k)]
                if reuse is None or c.vec is _first:
                    out[c.index] = c.vec(fields)
                else:
                    seen = reuse.get(c.index)
                    if seen is not None and seen[0] == fields:
                        out[c.index] = seen[1]
                    else:
                        out[c.index] = vals = c.vec(fields)
                        reuse[c.index] = (fields, vals)
            i += k
        if self.absent:
            for a in self.absent:
                out[a] = [ABSENT] * n
        for j, vals in enumerate(out):
            if type(vals) is not list and type(vals) is not tuple and type(vals) is not TextColumn and \
                    type(vals) is not DecimalColumn and j not in self.array_columns:
                # a one-shot iterator from a converter
                out[j] = list(vals)
        return out

    @staticmethod
    def _int_array(spec: tuple, raws: tuple, nulls, bit: int, all_null: int, some_null: int, n: int):
        """An integer column of the images as a numpy array, or NullableArray when some images hold NULL (their
        placeholders left out before the conversion, then zeros in their places)."""
        dtype, int24 = spec
        if all_null & bit:
            return NullableArray(_np.zeros(n, dtype), _np.zeros(n, bool))
        if some_null & bit:
            present = list(map(not_, map(and_, nulls, repeat(bit))))
            raws = list(compress(raws, present))
        values = _np.array(raws, dtype) if int24 is None else _int24_array(raws, int24)
        if not some_null & bit:
            return values
        valid = _np.array(present, bool)
        full = _np.zeros(n, values.dtype)
        full[valid] = values
        return NullableArray(full, valid)


def _cut_first(attr: str) -> property:
    """A side's columns (before or after images) of a ColumnarPairs: cut from the columns of the events it was
    converted with (convert_pending) when first read or set."""

    def get(self) -> list | None:
        if self._whole is not None:
            self._cut()
        return getattr(self, attr)

    def put(self, value: list | None) -> None:
        if self._whole is not None:
            self._cut()
        setattr(self, attr, value)

    return property(get, put)


class ColumnarPairs:
    """The (before, after) pairs of one rows event, held as the event's decoded columns (`before`, `after`: one
    value sequence per table column, None for an image kind the event lacks). The row tuples are built only when
    a consumer iterates or indexes the pairs; the lake's history reads the columns and never builds them."""

    __slots__ = ("_after", "_before", "_pairs", "_whole", "n", "pending")

    def __init__(self, before: list | None, after: list | None, n: int) -> None:
        self._before = before
        self._after = after
        self.n = n
        self._pairs: list | None = None
        self.pending: tuple | None = None  # (plan, kind, flat, images): not converted yet (defer_event)
        # (before columns, after columns, first image) of the events converted together with this one
        # (convert_pending): this event's own columns are cut from them when first asked for.
        self._whole: tuple | None = None

    before = _cut_first("_before")
    after = _cut_first("_after")

    def span(self) -> tuple | None:
        """(before columns, after columns, first image) of the events this one was converted with, whose images
        at..at+n are its rows, while its own columns are not cut from them yet (convert_pending); else None. A
        consumer of several such events in a row may take their columns in one slice (lake.history)."""
        return self._whole

    def _cut(self) -> None:
        before, after, at = self._whole  # type: ignore[misc]
        end = at + self.n
        self._before = None if before is None else [c[at:end] for c in before]
        self._after = None if after is None else [c[at:end] for c in after]
        self._whole = None

    def pairs(self) -> list[tuple]:
        if self._pairs is None:
            # Every column holds n values, so zip(*columns) makes exactly n row tuples.
            before, after = self.before, self.after
            before = zip(*_plain_columns(before), strict=True) if before is not None else repeat(None, self.n)
            after = zip(*_plain_columns(after), strict=True) if after is not None else repeat(None, self.n)
            self._pairs = list(zip(before, after, strict=True))
        return self._pairs

    def __len__(self) -> int:
        return self.n

    def __bool__(self) -> bool:
        return self.n > 0

    def __iter__(self):
        return iter(self.pairs())

    def __getitem__(self, i):
        return self.pairs()[i]

    def __eq__(self, other: object) -> bool:
        return self.pairs() == (other.pairs() if isinstance(other, ColumnarPairs) else other)

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"ColumnarPairs({self.pairs()!r})"


def unpack_event(plan: EventPlan, buf, off: int, end: int, kind: int) -> tuple[tuple, int]:
    """The event's images unpacked into one flat tuple of raw fields, and the number of images."""
    try:
        fmt = plan.walk(buf, off, end)
    except struct.error:
        fmt = plan.walk_exact(buf, off, end)
    flat = _unpack_from(fmt, buf, off)
    n = len(flat) // plan.nfields
    if kind == RK.UPDATE and n % 2:
        raise BodyError("the last updated row has no after image")
    return flat, n


def convert_images(plan: EventPlan, flat: tuple, n: int, kind: int) -> ColumnarPairs:
    """The (before, after) pairs of unpacked images (n of them; updates alternate before and after images)."""
    if kind == RK.UPDATE:
        reuse: dict = {}
        before = plan.columns(flat, 0, 2, reuse)
        return ColumnarPairs(before, plan.columns(flat, 1, 2, reuse), n // 2)
    cols = plan.columns(flat, 0, 1)
    if kind == RK.WRITE:
        return ColumnarPairs(None, cols, n)
    return ColumnarPairs(cols, None, n)


def decode_event(plan: EventPlan, buf, off: int, end: int, kind: int) -> ColumnarPairs:
    """(before, after) pairs of one rows event (kind: RowsKind; updates alternate before and after images), kept
    as columns until a consumer asks for the row tuples."""
    flat, n = unpack_event(plan, buf, off, end, kind)
    return convert_images(plan, flat, n, kind)


def defer_event(plan: EventPlan, buf, off: int, end: int, kind: int) -> ColumnarPairs:
    """Like decode_event, but only walked and unpacked: its columns are converted by convert_pending, together with
    the events of the same plan and kind that follow it (a statement's rows come in events of a few KiB, too
    few values for whole-column conversion to pay off one event at a time)."""
    flat, n = unpack_event(plan, buf, off, end, kind)
    pairs = ColumnarPairs(None, None, n // 2 if kind == RK.UPDATE else n)
    pairs.pending = (plan, kind, flat, n)
    return pairs


def convert_pending(group: list[ColumnarPairs]) -> None:
    """Convert deferred events of one plan and kind together, filling each one's columns.

    Raises what converting the first failing event alone raises, with the events before it filled and every
    later one still pending: the caller reports the error at that event."""
    if len(group) > 1:
        plan, kind = group[0].pending[:2]
        try:
            whole = convert_images(plan, tuple(chain.from_iterable(g.pending[2] for g in group)),
                                   sum(g.pending[3] for g in group), kind)
        except Exception:  # some event's values are bad: convert one by one, so the error names its event
            whole = None
        if whole is not None:
            # Each event's columns are cut from the whole ones when a consumer first asks for them (stats never
            # does).
            before, after = whole.before, whole.after
            at = 0
            for g in group:
                g._whole = (before, after, at)
                g.pending = None
                at += g.n
            return
    for g in group:
        plan, kind, flat, n = g.pending
        one = convert_images(plan, flat, n, kind)
        g.before, g.after, g.pending = one.before, one.after, None
