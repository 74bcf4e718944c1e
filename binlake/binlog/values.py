"""Column value decoders: one function per column, built once per TABLE_MAP, `f(buf, off) -> (value, off)`.

Value contract (what rows come out as, before any output formatting):
- TINY..LONGLONG: int (unsigned when the column is known unsigned). BIT: int. YEAR: int (0 for the zero year).
- NEWDECIMAL: decimal.Decimal with exactly the column's scale. FLOAT/DOUBLE: float.
- DATE 'YYYY-MM-DD'; DATETIME 'YYYY-MM-DD HH:MM:SS[.f]'; TIMESTAMP the same, in UTC; TIME '[-]HH:MM:SS[.f]';
  f has exactly the column's fsp digits; zero and partial dates come out as written ('0000-00-00').
- Character columns: str decoded with the column charset; binary-collation columns: bytes. When the charset is
  unknown (no metadata, no schema) a value that is valid UTF-8 is a str, else bytes.
- ENUM: label (str) when labels are known, else the 1-based index (int). SET: comma-joined labels, else bitmask.
- JSON: canonical JSON text (str). GEOMETRY: bytes as stored. NULL: None.
- VECTOR (MySQL 9's type; MariaDB's when the schema says so): list of float (each a 4-byte float).
- MariaDB INET4, INET6, UUID (BINARY storage; known from the schema): their text as the server prints it.
- MariaDB COMPRESSED columns: the text (or bytes) they hold, decompressed.
"""

from __future__ import annotations

import struct
import time
import zlib
from collections.abc import Callable
from decimal import Decimal
from typing import Any

from .charsets import BINARY, decoder_for
from .constants import ColumnType as T
from .jsonb import decode_jsonb_text
from .tablemap import Column

Decoder = Callable[[bytes, int], tuple[Any, int]]

_S_H = struct.Struct("<h").unpack_from
_S_UH = struct.Struct("<H").unpack_from
_S_I = struct.Struct("<i").unpack_from
_S_UI = struct.Struct("<I").unpack_from
_S_Q = struct.Struct("<q").unpack_from
_S_UQ = struct.Struct("<Q").unpack_from
_S_F = struct.Struct("<f").unpack_from
_S_D = struct.Struct("<d").unpack_from
_S_BE_I = struct.Struct(">I").unpack_from
_gmtime = time.gmtime

DIG2BYTES = (0, 1, 1, 2, 2, 3, 3, 4, 4, 4)


class ValueError_(Exception):
    """A stored value that cannot be valid for its column (turned into CorruptEvent by the caller)."""


# -- integers ---------------------------------------------------------------------------------------------


def _tiny_s(buf, off):
    v = buf[off]
    return (v - 256 if v > 127 else v), off + 1


def _tiny_u(buf, off):
    return buf[off], off + 1


def _short_s(buf, off):
    return _S_H(buf, off)[0], off + 2


def _short_u(buf, off):
    return _S_UH(buf, off)[0], off + 2


def _int24_s(buf, off):
    v = buf[off] | buf[off + 1] << 8 | buf[off + 2] << 16
    return (v - 0x1000000 if v & 0x800000 else v), off + 3


def _int24_u(buf, off):
    return buf[off] | buf[off + 1] << 8 | buf[off + 2] << 16, off + 3


def _long_s(buf, off):
    return _S_I(buf, off)[0], off + 4


def _long_u(buf, off):
    return _S_UI(buf, off)[0], off + 4


def _longlong_s(buf, off):
    return _S_Q(buf, off)[0], off + 8


def _longlong_u(buf, off):
    return _S_UQ(buf, off)[0], off + 8


def _float(buf, off):
    return _S_F(buf, off)[0], off + 4


def _double(buf, off):
    return _S_D(buf, off)[0], off + 8


def _year(buf, off):
    v = buf[off]
    return (1900 + v if v else 0), off + 1


# -- DECIMAL ----------------------------------------------------------------------------------------------


def decimal_groups(precision: int, scale: int) -> tuple[list[tuple[int, int]], int, int]:
    """(bytes, digits) of each digit group in storage order, how many are integer groups, and the total bytes."""
    intg = precision - scale
    groups: list[tuple[int, int]] = []
    if intg % 9:
        groups.append((DIG2BYTES[intg % 9], intg % 9))
    groups += [(4, 9)] * (intg // 9)
    n_int = len(groups)
    groups += [(4, 9)] * (scale // 9)
    if scale % 9:
        groups.append((DIG2BYTES[scale % 9], scale % 9))
    return groups, n_int, sum(b for b, _ in groups)


def make_decimal(precision: int, scale: int) -> Decoder:
    """MySQL binary DECIMAL: 9 digits per 4 bytes, big-endian, sign in the top bit, negatives inverted."""
    if precision < 1 or precision > 65 or scale > 30 or scale > precision:
        raise ValueError_(f"impossible DECIMAL({precision},{scale}) metadata")
    groups, n_int, size = decimal_groups(precision, scale)
    quantum = Decimal(1).scaleb(-scale)

    def dec(buf, off):
        raw = bytearray(buf[off : off + size])
        if len(raw) != size:
            raise ValueError_("DECIMAL runs past the row")
        negative = not raw[0] & 0x80
        raw[0] ^= 0x80
        if negative:
            raw = bytearray(b ^ 0xFF for b in raw)
        parts = []
        p = 0
        for i, (nb, nd) in enumerate(groups):
            v = int.from_bytes(raw[p : p + nb], "big")
            p += nb
            if v >= 10**nd:
                raise ValueError_(f"DECIMAL digit group {v} exceeds {nd} digits")
            parts.append(str(v) if i < n_int and not parts else str(v).zfill(nd))
        int_part = "".join(parts[:n_int]) or "0"
        frac_part = "".join(parts[n_int:])
        text = f"{'-' if negative else ''}{int_part}.{frac_part}" if scale else f"{'-' if negative else ''}{int_part}"
        value = Decimal(text)
        if value.as_tuple().exponent != -scale:
            value = value.quantize(quantum)
        return value, off + size

    return dec


# -- temporal ---------------------------------------------------------------------------------------------


def _frac_reader(fsp: int):
    """(bytes, multiplier to microseconds) for the fractional part of TIME2/DATETIME2/TIMESTAMP2."""
    return {0: (0, 0), 1: (1, 10000), 2: (1, 10000), 3: (2, 100), 4: (2, 100), 5: (3, 1), 6: (3, 1)}[fsp]


def _frac_text(us: int, fsp: int) -> str:
    return "." + str(us // 10 ** (6 - fsp)).zfill(fsp) if fsp else ""


def _date(buf, off):
    v = buf[off] | buf[off + 1] << 8 | buf[off + 2] << 16
    return f"{v >> 9:04d}-{(v >> 5) & 15:02d}-{v & 31:02d}", off + 3


def _datetime_old(buf, off):
    v = _S_UQ(buf, off)[0]
    d, t = divmod(v, 1000000)
    y, md = divmod(d, 10000)
    mo, da = divmod(md, 100)
    h, ms = divmod(t, 10000)
    mi, s = divmod(ms, 100)
    if y > 9999 or mo > 12 or da > 31 or h > 23 or mi > 59 or s > 59:
        # Not a YYYYMMDDhhmmss number: most likely a MariaDB DATETIME(6) in the 5.3 format read without its schema
        raise ValueError_(f"DATETIME value {v} is not a date and time")
    return f"{y:04d}-{mo:02d}-{da:02d} {h:02d}:{mi:02d}:{s:02d}", off + 8


def _time_old(buf, off):
    v = buf[off] | buf[off + 1] << 8 | buf[off + 2] << 16
    if v & 0x800000:
        v -= 0x1000000
    sign = "-" if v < 0 else ""
    v = abs(v)
    h, ms = divmod(v, 10000)
    mi, s = divmod(ms, 100)
    return f"{sign}{h:02d}:{mi:02d}:{s:02d}", off + 3


def _timestamp_text(secs: int, us: int, fsp: int) -> str:
    if secs == 0 and us == 0:
        return "0000-00-00 00:00:00" + ("." + "0" * fsp if fsp else "")
    t = _gmtime(secs)
    return (
        f"{t.tm_year:04d}-{t.tm_mon:02d}-{t.tm_mday:02d} {t.tm_hour:02d}:{t.tm_min:02d}:{t.tm_sec:02d}"
        + _frac_text(us, fsp)
    )


def _timestamp_old(buf, off):
    return _timestamp_text(_S_UI(buf, off)[0], 0, 0), off + 4


def make_timestamp2(fsp: int) -> Decoder:
    nb, mult = _frac_reader(fsp)

    def dec(buf, off):
        secs = _S_BE_I(buf, off)[0]
        us = int.from_bytes(buf[off + 4 : off + 4 + nb], "big") * mult if nb else 0
        return _timestamp_text(secs, us, fsp), off + 4 + nb

    return dec


def make_datetime2(fsp: int) -> Decoder:
    nb, mult = _frac_reader(fsp)
    size = 5 + nb

    def dec(buf, off):
        intpart = int.from_bytes(buf[off : off + 5], "big") - 0x8000000000
        frac = int.from_bytes(buf[off + 5 : off + size], "big", signed=True) * mult if nb else 0
        ymd = intpart >> 17
        ym = ymd >> 5
        hms = intpart & 0x1FFFF
        text = (
            f"{ym // 13:04d}-{ym % 13:02d}-{ymd & 31:02d} {hms >> 12:02d}:{(hms >> 6) & 63:02d}:{hms & 63:02d}"
        )
        return text + _frac_text(frac, fsp) if fsp else text, off + size

    return dec


def make_time2(fsp: int) -> Decoder:
    nb, mult = _frac_reader(fsp)
    size = 3 + nb

    def dec(buf, off):
        if fsp >= 5:
            packed = int.from_bytes(buf[off : off + 6], "big") - 0x800000000000
        else:
            intpart = int.from_bytes(buf[off : off + 3], "big") - 0x800000
            if nb:
                frac = int.from_bytes(buf[off + 3 : off + size], "big")
                if intpart < 0 and frac:
                    intpart += 1
                    frac -= 1 << (8 * nb)
                packed = (intpart << 24) + frac * mult
            else:
                packed = intpart << 24
        sign = ""
        if packed < 0:
            sign = "-"
            packed = -packed
        hms = packed >> 24
        us = packed & 0xFFFFFF
        text = f"{sign}{(hms >> 12) & 1023:02d}:{(hms >> 6) & 63:02d}:{hms & 63:02d}"
        return text + _frac_text(us, fsp) if fsp else text, off + size

    return dec


# MariaDB 5.3 high-resolution TIME(n)/DATETIME(n)/TIMESTAMP(n) (mysql56_temporal_format=OFF): the old type codes,
# no TABLE_MAP metadata (the precision comes from the schema, in Column.meta), big-endian packed values.
MARIA_TIME_BYTES = (3, 4, 4, 5, 5, 5, 6)
MARIA_DATETIME_BYTES = (8, 6, 6, 7, 7, 7, 8)
MARIA_TIMESTAMP_BYTES = (4, 5, 5, 6, 6, 7, 7)
_TIME_ZERO_SECONDS = 838 * 3600 + 59 * 60 + 59 + 1  # the stored TIME value is offset by (TIME max + 1) seconds


def make_maria_time_hires(fsp: int) -> Decoder:
    """(seconds * 10^fsp + fraction) + (TIME max + 1 second) * 10^fsp, big-endian in MARIA_TIME_BYTES[fsp]."""
    size, scale, zero = MARIA_TIME_BYTES[fsp], 10**fsp, _TIME_ZERO_SECONDS * 10**fsp

    def dec(buf, off):
        v = int.from_bytes(buf[off : off + size], "big") - zero
        sign = "-" if v < 0 else ""
        secs, frac = divmod(abs(v), scale)
        h, rest = divmod(secs, 3600)
        text = f"{sign}{h:02d}:{rest // 60:02d}:{rest % 60:02d}.{frac:0{fsp}d}"
        return text, off + size

    return dec


def make_maria_datetime_hires(fsp: int) -> Decoder:
    """((((((year*13+month)*32+day)*24+hour)*60+minute)*60+second)*10^6 + microseconds) / 10^(6-fsp), big-endian
    in MARIA_DATETIME_BYTES[fsp]."""
    size, scale = MARIA_DATETIME_BYTES[fsp], 10**fsp

    def dec(buf, off):
        v = int.from_bytes(buf[off : off + size], "big")
        rest, frac = divmod(v, scale)
        rest, sec = divmod(rest, 60)
        rest, mi = divmod(rest, 60)
        rest, h = divmod(rest, 24)
        rest, d = divmod(rest, 32)
        y, mo = divmod(rest, 13)
        return f"{y:04d}-{mo:02d}-{d:02d} {h:02d}:{mi:02d}:{sec:02d}.{frac:0{fsp}d}", off + size

    return dec


def make_maria_timestamp_hires(fsp: int) -> Decoder:
    """Seconds (4 bytes) then the fraction in units of 10^-fsp (not TIMESTAMP2's even-digit units), big-endian."""
    size = MARIA_TIMESTAMP_BYTES[fsp]

    def dec(buf, off):
        secs = _S_BE_I(buf, off)[0]
        frac = int.from_bytes(buf[off + 4 : off + size], "big")
        return _timestamp_text(secs, frac * 10 ** (6 - fsp), fsp), off + size

    return dec


# -- strings and blobs ------------------------------------------------------------------------------------


def _text_converter(col: Column):
    """bytes -> value for a character column: str via its charset, bytes for binary, guessed when unknown."""
    if col.collation == BINARY:
        return None
    decode = decoder_for(col.collation)
    return decode if decode is not None else guess_text


def guess_text(raw: bytes):
    """A value of unknown charset: text when it is valid UTF-8, else the bytes as they are."""
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        return raw


def make_length_prefixed(prefix: int, convert) -> Decoder:
    if prefix == 1:

        def dec(buf, off):
            n = buf[off]
            end = off + 1 + n
            raw = buf[off + 1 : end]
            if len(raw) != n:
                raise ValueError_("string runs past the row")
            return (convert(raw) if convert else raw), end

        return dec

    def dec_n(buf, off):
        n = int.from_bytes(buf[off : off + prefix], "little")
        start = off + prefix
        raw = buf[start : start + n]
        if len(raw) != n:
            raise ValueError_(f"value of {n} bytes runs past the row")
        return (convert(raw) if convert else raw), start + n

    return dec_n


def make_bit(meta: int) -> Decoder:
    nbytes = (meta >> 8) + (1 if meta & 0xFF else 0)

    def dec(buf, off):
        return int.from_bytes(buf[off : off + nbytes], "big"), off + nbytes

    return dec


def make_enum(size: int, labels: list[str] | None) -> Decoder:
    def dec(buf, off):
        idx = int.from_bytes(buf[off : off + size], "little")
        if labels is None:
            return idx, off + size
        if idx == 0:
            return "", off + size
        if idx > len(labels):
            raise ValueError_(f"ENUM index {idx} beyond its {len(labels)} labels")
        return labels[idx - 1], off + size

    return dec


def make_set(size: int, labels: list[str] | None) -> Decoder:
    def dec(buf, off):
        mask = int.from_bytes(buf[off : off + size], "little")
        if labels is None:
            return mask, off + size
        if mask >> len(labels):
            raise ValueError_(f"SET bitmask {mask:#x} has bits beyond its {len(labels)} labels")
        return ",".join(label for i, label in enumerate(labels) if mask >> i & 1), off + size

    return dec


class _Absent:
    """Marks a column that is not part of a row image (minimal row images, NDB partial rows)."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "ABSENT"

    def __bool__(self) -> bool:
        return False


ABSENT: Any = _Absent()


def make_json(prefix: int) -> Decoder:
    def dec(buf, off):
        n = int.from_bytes(buf[off : off + prefix], "little")
        start = off + prefix
        raw = buf[start : start + n]
        if len(raw) != n:
            raise ValueError_("JSON value runs past the row")
        return decode_jsonb_text(raw), start + n

    return dec


def string_real_type(meta: int) -> tuple[int, int]:
    """STRING metadata -> (real type, max byte length), undoing the CHAR(>255) length packing."""
    byte0, byte1 = meta >> 8, meta & 0xFF
    if byte0 and (byte0 & 0x30) != 0x30:
        return byte0 | 0x30, byte1 | (((byte0 & 0x30) ^ 0x30) << 4)
    return (byte0 or T.STRING), byte1


# -- MariaDB INET4/INET6/UUID, vectors, COMPRESSED columns -------------------------------------------------


def inet4_text(raw: bytes) -> str:
    """INET4's 4 bytes (network order; trailing zero bytes stripped in row images) as dotted quad."""
    b = bytes(raw).ljust(4, b"\0")
    if len(b) != 4:
        raise ValueError_(f"INET4 value of {len(raw)} bytes")
    return f"{b[0]}.{b[1]}.{b[2]}.{b[3]}"


def inet6_text(raw: bytes) -> str:
    """INET6's 16 bytes as the server prints them: lower-case hex groups without leading zeros, the first longest
    run of zero groups (even a single one) as '::', IPv4-compatible (::a.b.c.d) and IPv4-mapped (::ffff:a.b.c.d)
    addresses with a dotted quad."""
    b = bytes(raw).ljust(16, b"\0")
    if len(b) != 16:
        raise ValueError_(f"INET6 value of {len(raw)} bytes")
    words = [b[i] << 8 | b[i + 1] for i in range(0, 16, 2)]
    gap_pos, gap_len, run_pos, run_len = -1, 0, -1, 0
    for i, w in enumerate(words):
        if w == 0:
            if run_pos < 0:
                run_pos, run_len = i, 0
            run_len += 1
            if run_len > gap_len:
                gap_pos, gap_len = run_pos, run_len
        else:
            run_pos = -1
    out = []
    i = 0
    while i < 8:
        if i == gap_pos:
            out.append("::" if i == 0 else ":")
            i += gap_len
            continue
        if i == 6 and gap_pos == 0 and (gap_len == 6 or (gap_len == 5 and words[5] == 0xFFFF)):
            out.append(inet4_text(b[12:]))
            break
        out.append(f"{words[i]:x}" + (":" if i != 7 else ""))
        i += 1
    return "".join(out)


def uuid_text(raw: bytes) -> str:
    """UUID's 16 bytes (in text order in row images; trailing zero bytes stripped) as 8-4-4-4-12 lower-case hex."""
    b = bytes(raw).ljust(16, b"\0")
    if len(b) != 16:
        raise ValueError_(f"UUID value of {len(raw)} bytes")
    h = b.hex()
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


def vector_floats(raw: bytes) -> list[float]:
    """A vector's bytes (little-endian 4-byte floats, MySQL 9 and MariaDB alike) as a list of floats."""
    n = len(raw)
    if n % 4:
        raise ValueError_(f"VECTOR value of {n} bytes is not a whole number of 4-byte floats")
    return list(struct.unpack(f"<{n // 4}f", raw))


def maria_uncompressed(raw: bytes) -> bytes:
    """A MariaDB COMPRESSED column's stored value as the bytes it holds: empty stays empty; else one header byte,
    then the bytes as they are (top bit clear) or, top bit set, the original length (big-endian, in the header's
    low 3 bits of bytes) and a raw deflate stream."""
    if not raw:
        return b""
    head = raw[0]
    if not head & 0x80:
        return bytes(raw[1:])
    nlen = head & 7
    if not 1 <= nlen <= 4 or len(raw) < 1 + nlen:
        raise ValueError_(f"COMPRESSED value header {head:#x} is not one MariaDB writes")
    size = int.from_bytes(raw[1 : 1 + nlen], "big")

    try:
        out = zlib.decompressobj(-15).decompress(bytes(raw[1 + nlen :]), size + 1)
    except zlib.error as exc:
        raise ValueError_(f"COMPRESSED value does not inflate ({exc})") from None
    if len(out) != size:
        raise ValueError_(f"COMPRESSED value inflates to {len(out)} bytes, its header says {size}")
    return out
