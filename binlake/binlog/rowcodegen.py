"""Fast row-image decoding: one generated Python function per (table map, columns-present bitmap).

Decoding column by column through a function per value costs more than the decoding itself in CPython. For each
table map and image shape we generate straight-line code with the null checks and the common types inlined,
then `exec` it once. Types with involved formats call the helpers in values.py. The output is identical to the
reference decoders in values.py (the tests decode real files both ways).
"""

from __future__ import annotations

import struct
import time
from collections.abc import Callable
from decimal import Context, Decimal
from typing import Any

from .charsets import BINARY, codec_of, decoder_for
from .tablemap import Column, TableMap
from .values import ABSENT, ValueError_, _frac_reader, decimal_groups, guess_text

_gmtime = time.gmtime
_ts_cache: dict[int, str] = {}


def timestamp_base(secs: int) -> str:
    """'YYYY-MM-DD HH:MM:SS' in UTC for epoch seconds, cached: row events cluster around the same seconds."""
    text = _ts_cache.get(secs)
    if text is None:
        if secs == 0:
            text = "0000-00-00 00:00:00"
        else:
            t = _gmtime(secs)
            text = "%04d-%02d-%02d %02d:%02d:%02d" % (t.tm_year, t.tm_mon, t.tm_mday, t.tm_hour, t.tm_min, t.tm_sec)
        if len(_ts_cache) > 65_536:
            _ts_cache.clear()
        _ts_cache[secs] = text
    return text


# Formatting seven integers costs more than everything else in a DATETIME; dates and times of day repeat, so
# their text is cached by their packed integers (each cache is cleared when it reaches 65,536 entries).
_date_cache: dict[int, str] = {}
_time_cache: dict[int, str] = {}
FRAC3 = [".%03d" % i for i in range(1000)]


def date_part(ymd: int) -> str:
    """'YYYY-MM-DD' for DATETIME2's packed year*13+month / day integer."""
    text = _date_cache.get(ymd)
    if text is None:
        ym = ymd >> 5
        text = "%04d-%02d-%02d" % (ym // 13, ym % 13, ymd & 31)
        if len(_date_cache) > 65_536:
            _date_cache.clear()
        _date_cache[ymd] = text
    return text


def time_part(hms: int) -> str:
    """'HH:MM:SS' for a packed hour<<12 | minute<<6 | second integer."""
    text = _time_cache.get(hms)
    if text is None:
        text = "%02d:%02d:%02d" % (hms >> 12, (hms >> 6) & 63, hms & 63)
        _time_cache[hms] = text
    return text


def old_date(x: int) -> str:
    """'YYYY-MM-DD' for DATE's 3-byte year<<9 | month<<5 | day integer."""
    key = -1 - x
    text = _date_cache.get(key)
    if text is None:
        text = "%04d-%02d-%02d" % (x >> 9, (x >> 5) & 15, x & 31)
        if len(_date_cache) > 65_536:
            _date_cache.clear()
        _date_cache[key] = text
    return text


_DECIMAL_CONTEXT = Context(prec=80)  # wide enough for DECIMAL(65,30): scaleb never rounds


def decimal_code(precision: int, scale: int, src: str, dst: str) -> tuple[list[str], int]:
    """Python lines computing Decimal `dst` from the DECIMAL(p,s) bytes in `src`, and the byte size.

    One big-endian integer and arithmetic on its digit groups; the sign is the top bit (set for positive) and
    negative numbers have every bit inverted. Needs Decimal, CTX and ValueError_ in scope."""
    if precision < 1 or precision > 65 or scale > 30 or scale > precision:
        raise ValueError_(f"impossible DECIMAL({precision},{scale}) metadata")
    groups, _n_int, size = decimal_groups(precision, scale)
    sign_bit = 1 << (8 * size - 1)
    mask = (1 << (8 * size)) - 1
    lines = [f"x = _from_bytes({src}, 'big')",
             f"negative = not x & {sign_bit}",
             f"x ^= {mask ^ sign_bit} if negative else {sign_bit}"]
    shift = 8 * size
    for i, (nb, nd) in enumerate(groups):
        shift -= 8 * nb
        lines.append(f"g{i} = (x >> {shift}) & {(1 << (8 * nb)) - 1}")
        lines.append(f"if g{i} >= {10 ** nd}: raise ValueError_('DECIMAL digit group out of range')")
    expr = "g0"
    for i, (_nb, nd) in enumerate(groups[1:], start=1):
        expr = f"({expr}) * {10 ** nd} + g{i}"
    lines.append(f"{dst} = Decimal(-({expr}) if negative else {expr}).scaleb({-scale}, CTX)")
    return lines, size


def make_fast_decimal(precision: int, scale: int) -> Callable[[bytes], Any]:
    """A function raw bytes -> Decimal for DECIMAL(p,s)."""
    body, _ = decimal_code(precision, scale, "raw", "value")
    source = "def dec(raw):\n" + "\n".join("    " + line for line in body) + "\n    return value"
    ns = {"Decimal": Decimal, "ValueError_": ValueError_, "CTX": _DECIMAL_CONTEXT, "_from_bytes": int.from_bytes}
    exec(source, ns)
    return ns["dec"]


class _Gen:
    """Accumulates the generated source and the objects it refers to."""

    def __init__(self) -> None:
        self.lines: list[str] = []
        self.env: dict[str, Any] = {
            "ValueError_": ValueError_,
            "timestamp_base": timestamp_base,
            "date_part": date_part,
            "time_part": time_part,
            "old_date": old_date,
            "FRAC3": FRAC3,
            "_dates": _date_cache,
            "_times": _time_cache,
            "_stamps": _ts_cache,
            "Decimal": Decimal,
            "CTX": _DECIMAL_CONTEXT,
            "ABSENT": None,
            "_from_bytes": int.from_bytes,
        }
        self._n = 0

    def ref(self, obj: Any, hint: str = "h") -> str:
        self._n += 1
        name = f"_{hint}{self._n}"
        self.env[name] = obj
        return name

    def emit(self, indent: int, text: str) -> None:
        self.lines.append("    " * indent + text)


def _scaled(expr: str, mult: int, div: int) -> str:
    """Code for expr * mult // div, simplified (the stored fraction to the column's fsp digits)."""
    if mult == div:
        return expr
    if mult > div:
        return f"{expr} * {mult // div}"
    return f"{expr} // {div // mult}"


def _frac_suffix(fsp: int, at: int, signed: bool) -> str:
    """Code appending '.' and `fsp` fraction digits, read from the bytes after the `at` integer-part bytes."""
    if not fsp:
        return ""
    nb, mult = _frac_reader(fsp)
    frac = f"_from_bytes(buf[off + {at}:off + {at + nb}], 'big'{', signed=True' if signed else ''})"
    scaled = _scaled(frac, mult, 10 ** (6 - fsp))
    return f" + FRAC3[{scaled}]" if fsp == 3 else f" + '.%0{fsp}d' % ({scaled})"


# -- per-type emitters (binlake/binlog/coltypes.py names one per column type) ---------------------------------
# An emitter writes code that sets `v` from buf at off and advances off: emit(g, codec, v, ind), where `codec`
# (coltypes.ColumnCodec) holds the column, its reference decoder, its length prefix and its struct code.


def emit_reference(g: _Gen, codec: Any, v: str, ind: int) -> None:
    """A call of the column's reference decoder (values.py): types with involved formats."""
    fn = g.ref(codec.decode, "col")
    g.emit(ind, f"{v}, off = {fn}(buf, off)")


def emit_tiny(g: _Gen, codec: Any, v: str, ind: int) -> None:
    e = g.emit
    e(ind, f"{v} = buf[off]")
    if codec.col.signed is not False:
        e(ind, f"if {v} > 127: {v} -= 256")
    e(ind, "off += 1")


def emit_struct(g: _Gen, codec: Any, v: str, ind: int) -> None:
    """A fixed-width number read by its struct code (SMALLINT, INT, BIGINT, FLOAT, DOUBLE)."""
    fn = g.ref(struct.Struct("<" + codec.struct).unpack_from, "s")
    g.emit(ind, f"{v} = {fn}(buf, off)[0]")
    g.emit(ind, f"off += {struct.calcsize('<' + codec.struct)}")


def emit_int24(g: _Gen, codec: Any, v: str, ind: int) -> None:
    e = g.emit
    e(ind, f"{v} = buf[off] | buf[off + 1] << 8 | buf[off + 2] << 16")
    if codec.col.signed is not False:
        e(ind, f"if {v} & 0x800000: {v} -= 0x1000000")
    e(ind, "off += 3")


def emit_year(g: _Gen, codec: Any, v: str, ind: int) -> None:
    e = g.emit
    e(ind, f"{v} = buf[off]")
    e(ind, f"if {v}: {v} += 1900")
    e(ind, "off += 1")


def emit_decimal(g: _Gen, codec: Any, v: str, ind: int) -> None:
    # Cached on the raw bytes (amounts and prices repeat); computed inline on a miss.
    e = g.emit
    col = codec.col
    body, size = decimal_code(col.precision, col.scale, "raw", v)
    cache = g.ref({}, "dcache")
    e(ind, f"raw = buf[off:off + {size}]")
    e(ind, f"{v} = {cache}.get(raw)")
    e(ind, f"if {v} is None:")
    for line in body:
        e(ind + 1, line)
    e(ind + 1, f"if len({cache}) >= 65536: {cache}.clear()")
    e(ind + 1, f"{cache}[raw] = {v}")
    e(ind, f"off += {size}")


def emit_datetime2(g: _Gen, codec: Any, v: str, ind: int) -> None:
    e = g.emit
    fsp = codec.col.meta
    nb = (fsp + 1) // 2
    e(ind, "x = _from_bytes(buf[off:off + 5], 'big') - 0x8000000000")
    e(ind, "d = x >> 17")
    e(ind, "t = x & 0x1FFFF")
    base = "(_dates.get(d) or date_part(d)) + ' ' + (_times.get(t) or time_part(t))"
    e(ind, f"{v} = {base}{_frac_suffix(fsp, 5, signed=True)}")
    e(ind, f"off += {5 + nb}")


def emit_timestamp2(g: _Gen, codec: Any, v: str, ind: int) -> None:
    e = g.emit
    fsp = codec.col.meta
    nb = (fsp + 1) // 2
    e(ind, "x = _from_bytes(buf[off:off + 4], 'big')")
    e(ind, f"{v} = (_stamps.get(x) or timestamp_base(x)){_frac_suffix(fsp, 4, signed=False)}")
    e(ind, f"off += {4 + nb}")


def emit_text(g: _Gen, codec: Any, v: str, ind: int) -> None:
    """A CHAR/VARCHAR value (1 or 2 bytes of length) decoded with the column's charset."""
    e = g.emit
    if codec.prefix == 1:
        e(ind, "n = buf[off]")
        e(ind, "off += 1")
    else:
        e(ind, "n = buf[off] | buf[off + 1] << 8")
        e(ind, "off += 2")
    _emit_text(g, codec.col, v, ind)


def emit_blob(g: _Gen, codec: Any, v: str, ind: int) -> None:
    """A TEXT/BLOB value (codec.prefix bytes of length) decoded with the column's charset."""
    e = g.emit
    prefix = codec.prefix
    if prefix == 1:
        e(ind, "n = buf[off]")
    else:
        e(ind, f"n = _from_bytes(buf[off:off + {prefix}], 'little')")
    e(ind, f"off += {prefix}")
    _emit_text(g, codec.col, v, ind)


def emit_string(g: _Gen, codec: Any, v: str, ind: int) -> None:
    """CHAR: text; BINARY(n) (padded back to n bytes): the reference decoder."""
    col = codec.col
    if col.collation == BINARY and col.meta:
        emit_reference(g, codec, v, ind)
    else:
        emit_text(g, codec, v, ind)


def emit_date(g: _Gen, codec: Any, v: str, ind: int) -> None:
    g.emit(ind, f"{v} = old_date(buf[off] | buf[off + 1] << 8 | buf[off + 2] << 16)")
    g.emit(ind, "off += 3")


def emit_enum(g: _Gen, codec: Any, v: str, ind: int) -> None:
    col = codec.col
    if col.enum_labels is not None and col.meta == 1:
        labels = g.ref(("", *col.enum_labels), "labels")
        g.emit(ind, f"{v} = {labels}[buf[off]]")
        g.emit(ind, "off += 1")
    else:
        emit_reference(g, codec, v, ind)


def _emit_text(g: _Gen, col: Column, v: str, ind: int) -> None:
    e = g.emit
    # A value cut short by the buffer's end leaves `off` past the event end, which the caller rejects.
    e(ind, f"{v} = buf[off:off + n]")
    e(ind, "off += n")
    if col.collation == BINARY:
        return
    decode = decoder_for(col.collation)
    if decode is None:
        fn = g.ref(guess_text, "guess")
        e(ind, f"{v} = {fn}({v})")
    elif codec_of(col.collation) == "utf-8":
        e(ind, f"{v} = {v}.decode('utf-8')")
    else:
        fn = g.ref(decode, "text")
        e(ind, f"{v} = {fn}({v})")


def _emit_values(g: _Gen, cols: list[Column], names: dict[int, str], nulls: int | None, ind: int,
                 codecs: list) -> None:
    """Straight-line code for the non-NULL columns of a known NULL pattern (None: test each bit at run time)."""
    if nulls is None:
        for bit, col in enumerate(cols):
            v = names[col.index]
            g.emit(ind, f"if nulls & {1 << bit}:")
            g.emit(ind + 1, f"{v} = None")
            g.emit(ind, "else:")
            codecs[col.index].emit(g, v, ind + 1)
        return
    live = []
    for bit, col in enumerate(cols):
        if nulls >> bit & 1:
            g.emit(ind, f"{names[col.index]} = None")
        else:
            live.append(col)
    i = 0
    while i < len(live):
        run = []
        while i < len(live) and codecs[live[i].index].merge is not None:
            run.append(live[i])
            i += 1
        if len(run) > 1:
            # Consecutive fixed-width numbers: one struct call.
            codes = "".join(codecs[c.index].merge for c in run)
            fn = g.ref(struct.Struct("<" + codes).unpack_from, "run")
            g.emit(ind, f"{', '.join(names[c.index] for c in run)} = {fn}(buf, off)")
            g.emit(ind, f"off += {struct.calcsize('<' + codes)}")
            for c in run:
                fix = codecs[c.index].merge_fix
                if fix:
                    g.emit(ind, fix.format(v=names[c.index]))
        elif run:
            codecs[run[0].index].emit(g, names[run[0].index], ind)
        else:
            codecs[live[i].index].emit(g, names[live[i].index], ind)
            i += 1


MAX_NULL_PATTERNS = 256


def _compile(g: _Gen, name: str) -> Callable:
    source = "\n".join(g.lines)
    exec(compile(source, "<binlake row decoder>", "exec"), g.env)
    fn = g.env[name]
    fn.source = source  # type: ignore[attr-defined]
    return fn


def compile_image_decoder(table: TableMap, present: int, version: int = 2, *, codecs: list) -> Callable:
    """A function (buf, off) -> (row list, new off) for images of `table` with the given present-columns bitmap.
    `codecs`: the table's columns as coltypes.ColumnCodec (each emits its own code).

    Each NULL pattern seen gets its own straight-line function (up to MAX_NULL_PATTERNS; beyond that a general
    one that tests every bit). The returned dispatcher reads the NULL bitmap and calls the right one.
    """
    cols = [c for c in table.columns if present >> c.index & 1]
    ncols = len(table.columns)
    shift = 1 if version == 0 else 0
    nbytes = (len(cols) + 7 + shift) // 8
    names = {col.index: f"v{col.index}" for col in cols}
    row = ", ".join(names.get(i, "ABSENT") for i in range(ncols))

    def build(nulls: int | None) -> Callable:
        g = _Gen()
        g.env["ABSENT"] = ABSENT
        g.emit(0, "def image(buf, off, nulls):" if nulls is None else "def image(buf, off):")
        _emit_values(g, cols, names, nulls, 1, codecs)
        g.emit(1, f"return [{row}], off")
        return _compile(g, "image")

    general = build(None)
    specialized: dict[int, Callable] = {}

    if nbytes == 0:
        read = "nulls = 0"
    elif nbytes == 1:
        read = f"nulls = buf[off]{' >> 1' if shift else ''}"
    else:
        read = f"nulls = _from_bytes(buf[off:off + {nbytes}], 'little'){' >> 1' if shift else ''}"
    g = _Gen()
    g.env.update(specialized=specialized, general=general, build=build, MAX=MAX_NULL_PATTERNS)
    g.emit(0, "def decode_image(buf, off):")
    g.emit(1, read)
    g.emit(1, "fn = specialized.get(nulls)")
    g.emit(1, "if fn is None:")
    g.emit(2, "if len(specialized) >= MAX:")
    g.emit(3, f"return general(buf, off + {nbytes}, nulls)")
    g.emit(2, "fn = specialized[nulls] = build(nulls)")
    g.emit(1, f"return fn(buf, off + {nbytes})")
    dispatcher = _compile(g, "decode_image")

    def get(nulls: int) -> Callable:
        """The function for a NULL pattern (reads start after the bitmap)."""
        fn = specialized.get(nulls)
        if fn is None:
            if len(specialized) >= MAX_NULL_PATTERNS:
                return lambda buf, off: general(buf, off, nulls)
            fn = specialized[nulls] = build(nulls)
        return fn

    # Exposed so that row loops can dispatch inline without a call per image.
    dispatcher.specialized = specialized  # type: ignore[attr-defined]
    dispatcher.get = get  # type: ignore[attr-defined]
    dispatcher.bitmap_bytes = nbytes if not shift else -1  # type: ignore[attr-defined]
    return dispatcher
