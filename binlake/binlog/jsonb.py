"""MySQL binary JSON (the JSON column format of MySQL 5.7+/8.x) and the PARTIAL_JSON diffs of MySQL 8.

Format facts follow MySQL's sql-common/json_binary.cc, json_dom.cc, json_diff.cc and json_path.cc:

* A document is a type byte followed by the value. Objects and arrays come in a small (16-bit offsets and
  counts) and a large (32-bit) variant: element count, byte size, key entries (objects: offset + u16 length),
  value entries (type byte + offset, or the value itself when it is inlined: literals and 16-bit ints always,
  32-bit ints in the large variant), then the keys, then the values. Keys are sorted by length, then bytewise.
* Strings carry a variable-length length (7 bits a byte, low bits first, at most 5 bytes).
* OPAQUE values carry a MySQL column type byte and a variable-length length: DECIMAL is precision, scale and the
  binary decimal; DATE/TIME/DATETIME/TIMESTAMP are an 8-byte packed int64; anything else is raw bytes.
* An empty column value is JSON null.

Decoded values are plain Python: dict (in MySQL's stored key order), list, str, int, float, bool, None,
decimal.Decimal for DECIMAL and JsonOpaque for the other opaque values. ``to_json_text`` renders them exactly
like ``SELECT json_col`` does on MySQL 8.
"""

from __future__ import annotations

import base64
import datetime as _dt
import math
import struct
from dataclasses import dataclass
from decimal import Decimal
from enum import IntEnum
from functools import lru_cache
from json import loads as _json_loads
from json.encoder import encode_basestring as _quote  # C accelerated; escapes exactly what MySQL escapes

from .errors import CorruptEvent
from .packing import encode_packed_int

__all__ = [
    "MAX_DEPTH",
    "JsonDiff",
    "JsonDiffOp",
    "JsonOpaque",
    "apply_json_diffs",
    "decode_jsonb",
    "decode_jsonb_text",
    "encode_json_diffs",
    "encode_jsonb",
    "format_double",
    "format_json_path",
    "parse_json_diffs",
    "parse_json_path",
    "to_json_text",
]

# -- format constants ---------------------------------------------------------------------------------------

SMALL_OBJECT = 0x00
LARGE_OBJECT = 0x01
SMALL_ARRAY = 0x02
LARGE_ARRAY = 0x03
LITERAL = 0x04
INT16 = 0x05
UINT16 = 0x06
INT32 = 0x07
UINT32 = 0x08
INT64 = 0x09
UINT64 = 0x0A
DOUBLE = 0x0B
STRING = 0x0C
OPAQUE = 0x0F

LITERAL_NULL = 0x00
LITERAL_TRUE = 0x01
LITERAL_FALSE = 0x02

# MySQL column types that matter inside opaque values (enum_field_types).
MYSQL_TYPE_TIMESTAMP = 7
MYSQL_TYPE_DATE = 10
MYSQL_TYPE_TIME = 11
MYSQL_TYPE_DATETIME = 12
MYSQL_TYPE_NEWDECIMAL = 246
MYSQL_TYPE_VAR_STRING = 253
_TEMPORAL_TYPES = frozenset((MYSQL_TYPE_TIMESTAMP, MYSQL_TYPE_DATE, MYSQL_TYPE_TIME, MYSQL_TYPE_DATETIME))

#: Deepest container nesting MySQL accepts (JSON_DOCUMENT_MAX_DEPTH); deeper input is corrupt here.
MAX_DEPTH = 100

_UINT16_MAX = 0xFFFF
_UINT32_MAX = 0xFFFFFFFF
_INT64_MIN = -(1 << 63)
_UINT64_MAX = (1 << 64) - 1

_u16 = struct.Struct("<H").unpack_from
_u32 = struct.Struct("<I").unpack_from
_i16 = struct.Struct("<h").unpack_from
_i32 = struct.Struct("<i").unpack_from
_i64 = struct.Struct("<q").unpack_from
_u64 = struct.Struct("<Q").unpack_from
_f64 = struct.Struct("<d").unpack_from
_u16_u16 = struct.Struct("<HH").unpack_from
_u32_u32 = struct.Struct("<II").unpack_from
_pack_u16 = struct.Struct("<H").pack
_pack_u32 = struct.Struct("<I").pack
_pack_i16 = struct.Struct("<h").pack
_pack_i32 = struct.Struct("<i").pack
_pack_i64 = struct.Struct("<q").pack
_pack_u64 = struct.Struct("<Q").pack
_pack_f64 = struct.Struct("<d").pack


_MISSING = object()


def _corrupt(message: str) -> CorruptEvent:
    return CorruptEvent(f"binary JSON: {message}")


# -- opaque values ------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class JsonOpaque:
    """An opaque JSON scalar: a MySQL column type and its raw bytes.

    Temporal types (DATE, TIME, DATETIME, TIMESTAMP) hold MySQL's 8-byte packed "longlong" representation;
    ``text`` is how MySQL prints the value inside JSON text (without the quotes).
    """

    field_type: int
    data: bytes

    @property
    def text(self) -> str:
        ft = self.field_type
        if ft in _TEMPORAL_TYPES:
            return _temporal_text(ft, self.data)
        if ft == MYSQL_TYPE_VAR_STRING:
            # json_dom.cc prints strings stored as opaque VAR_STRING as plain JSON strings.
            return self.data.decode("utf-8", "replace")
        return _base64_text(ft, self.data)

    @classmethod
    def temporal(cls, value: _dt.date | _dt.time | _dt.timedelta, field_type: int | None = None) -> JsonOpaque:
        """The opaque JSON form MySQL stores for a date, datetime, time or timedelta (TIME) value."""
        if isinstance(value, _dt.datetime):
            ft = MYSQL_TYPE_DATETIME if field_type is None else field_type
            packed = _pack_datetime(value.year, value.month, value.day, value.hour, value.minute, value.second,
                                    value.microsecond)
        elif isinstance(value, _dt.date):
            ft = MYSQL_TYPE_DATE if field_type is None else field_type
            packed = _pack_datetime(value.year, value.month, value.day, 0, 0, 0, 0)
        elif isinstance(value, _dt.time):
            ft = MYSQL_TYPE_TIME if field_type is None else field_type
            packed = _pack_time(False, value.hour, value.minute, value.second, value.microsecond)
        elif isinstance(value, _dt.timedelta):
            ft = MYSQL_TYPE_TIME if field_type is None else field_type
            micros = abs(value) // _dt.timedelta(microseconds=1)
            seconds, frac = divmod(micros, 1_000_000)
            packed = _pack_time(value < _dt.timedelta(0), seconds // 3600, seconds // 60 % 60, seconds % 60, frac)
        else:
            raise TypeError(f"not a temporal value: {value!r}")
        if ft not in _TEMPORAL_TYPES:
            raise ValueError(f"field type {ft} is not a temporal type")
        return cls(ft, _pack_i64(packed))


def _pack_datetime(year: int, month: int, day: int, hour: int, minute: int, second: int, micro: int) -> int:
    ymd = ((year * 13 + month) << 5) | day
    hms = (hour << 12) | (minute << 6) | second
    return (((ymd << 17) | hms) << 24) + micro


def _pack_time(neg: bool, hour: int, minute: int, second: int, micro: int) -> int:
    packed = (((hour << 12) | (minute << 6) | second) << 24) + micro
    return -packed if neg else packed


def _two(value: int) -> str:
    """my_time.cc format_two_digits: out-of-range parts print as 00."""
    return "%02d" % value if 0 <= value < 100 else "00"


def _temporal_text(field_type: int, data: bytes) -> str:
    """my_TIME_to_str(t, 6) of the unpacked value: dates bare, times and datetimes with 6 fraction digits."""
    packed = _i64(data)[0]
    neg = packed < 0
    packed = -packed if neg else packed
    frac = "%06d" % (packed % (1 << 24) % 1_000_000)
    hms_all = packed >> 24
    if field_type == MYSQL_TYPE_TIME:
        hour = (hms_all >> 12) % (1 << 10)
        return "%s%02d:%s:%s.%s" % ("-" if neg else "", hour, _two((hms_all >> 6) % 64), _two(hms_all % 64), frac)
    ymd = hms_all >> 17
    ym = ymd >> 5
    year = ym // 13
    date = "%s%s-%s-%s" % (_two(year // 100), _two(year % 100), _two(ym % 13), _two(ymd % 32))
    if field_type == MYSQL_TYPE_DATE:
        return date
    hms = hms_all % (1 << 17)
    return "%s %s:%s:%s.%s" % (date, _two(hms >> 12), _two((hms >> 6) % 64), _two(hms % 64), frac)


def _base64_text(field_type: int, data: bytes) -> str:
    """MySQL's base64:typeNN:... rendering; MySQL's base64_encode breaks lines every 76 characters."""
    encoded = base64.b64encode(data).decode("ascii")
    if len(encoded) > 76:
        encoded = "\n".join(encoded[i : i + 76] for i in range(0, len(encoded), 76))
    return "base64:type%d:%s" % (field_type, encoded)


# -- binary decimal -----------------------------------------------------------------------------------------

_DIG2BYTES = (0, 1, 1, 2, 2, 3, 3, 4, 4, 4)
_DECIMAL_MAX_PRECISION = 65
_DECIMAL_MAX_SCALE = 30


def _decimal_bin_size(precision: int, scale: int) -> int:
    intg = precision - scale
    return intg // 9 * 4 + _DIG2BYTES[intg % 9] + scale // 9 * 4 + _DIG2BYTES[scale % 9]


def _digit_groups(precision: int, scale: int) -> list[int]:
    """Digit counts of the stored groups, most significant first (leading partial, 9s, 9s, trailing partial)."""
    intg = precision - scale
    groups = [intg % 9] if intg % 9 else []
    groups += [9] * (intg // 9) + [9] * (scale // 9)
    if scale % 9:
        groups.append(scale % 9)
    return groups


def _decode_decimal(data: bytes) -> Decimal:
    if len(data) < 2:
        raise _corrupt("DECIMAL value shorter than its precision and scale")
    precision, scale = data[0], data[1]
    if precision > _DECIMAL_MAX_PRECISION or scale > _DECIMAL_MAX_SCALE or scale > precision:
        raise _corrupt(f"DECIMAL precision/scale {precision}/{scale} out of range")
    raw = bytearray(data[2:])
    if len(raw) != _decimal_bin_size(precision, scale):
        raise _corrupt(f"DECIMAL({precision},{scale}) has {len(raw)} bytes")
    if not raw:
        return Decimal(0)
    negative = not raw[0] & 0x80
    raw[0] ^= 0x80
    if negative:
        raw = bytearray(b ^ 0xFF for b in raw)
    intg = precision - scale
    int_digits: list[str] = []
    frac_digits: list[str] = []
    pos = 0
    done = 0
    for ndig in _digit_groups(precision, scale):
        nbytes = _DIG2BYTES[ndig]
        value = int.from_bytes(raw[pos : pos + nbytes], "big")
        if value >= 10**ndig:
            raise _corrupt("DECIMAL digit group out of range")
        (int_digits if done < intg else frac_digits).append("%0*d" % (ndig, value))
        pos += nbytes
        done += ndig
    text = ("".join(int_digits).lstrip("0") or "0") + ("." + "".join(frac_digits) if scale else "")
    return Decimal(("-" if negative else "") + text)


def _encode_decimal(value: Decimal) -> bytes:
    if not value.is_finite():
        raise ValueError(f"cannot store {value} in JSON")
    sign, digits, exponent = value.as_tuple()
    assert isinstance(exponent, int)
    scale = max(0, -exponent)
    # All digits of the value with at least one integer digit: "0.05" is 0,0,5 with scale 2.
    all_digits = ("".join(map(str, digits)) + "0" * max(0, exponent)).rjust(scale + 1, "0")
    int_part = all_digits[: len(all_digits) - scale].lstrip("0")
    frac_part = all_digits[len(all_digits) - scale :]
    precision = max(len(int_part) + scale, 1)
    if precision > _DECIMAL_MAX_PRECISION or scale > _DECIMAL_MAX_SCALE:
        raise ValueError(f"DECIMAL {value} exceeds MySQL's precision {_DECIMAL_MAX_PRECISION}/scale 30")
    int_part = int_part.rjust(precision - scale, "0")
    digits_text = int_part + frac_part
    out = bytearray()
    pos = 0
    for ndig in _digit_groups(precision, scale):
        out += int(digits_text[pos : pos + ndig]).to_bytes(_DIG2BYTES[ndig], "big")
        pos += ndig
    if sign:
        out = bytearray(b ^ 0xFF for b in out)
    out[0] ^= 0x80
    return bytes((precision, scale)) + bytes(out)


# -- decoding -----------------------------------------------------------------------------------------------

_UNDECODABLE = (IndexError, struct.error, UnicodeDecodeError, RecursionError, ValueError, OverflowError)


def decode_jsonb(data: bytes | bytearray | memoryview) -> object:
    """Decode one binary JSON document (a whole JSON column value, type byte first).

    Raises CorruptEvent for any malformed input: offsets or lengths outside their container, unknown type
    or literal bytes, invalid UTF-8, object keys not in MySQL's order (or duplicated), non-finite doubles,
    nesting deeper than MAX_DEPTH, and value entries that share bytes (see the work budget below).
    """
    return _decode(data, False)


def decode_jsonb_text(data: bytes | bytearray | memoryview) -> str:
    """MySQL's canonical text of one binary JSON document; equals to_json_text(decode_jsonb(data)).

    Renders straight from the binary form (no intermediate dicts): this is the decoder's hot path.
    """
    if not data:
        return "null"
    return _decode(data, True)  # type: ignore[return-value]


def _decode(data: bytes | bytearray | memoryview, text: bool) -> object:
    buf = data if type(data) is bytes else bytes(data)
    if not buf:
        return None  # MySQL reads an empty JSON value as the null literal (json_binary::parse_binary)
    try:
        return _value(buf, buf[0], 1, len(buf), 0, [len(buf)], text)
    except CorruptEvent:
        raise
    except _UNDECODABLE as exc:
        raise _corrupt(f"undecodable document ({type(exc).__name__}: {exc})") from None


def _varlen(buf: bytes, pos: int, end: int) -> tuple[int, int]:
    """A variable-length length: 7 bits a byte, low bits first, at most 5 bytes, at most 32 bits."""
    if pos >= end:
        raise _corrupt(f"length runs past the end at byte {pos}")
    b = buf[pos]
    if b < 0x80:
        return b, pos + 1
    value = b & 0x7F
    for i in range(1, 5):
        if pos + i >= end:
            break
        b = buf[pos + i]
        value |= (b & 0x7F) << (7 * i)
        if b < 0x80:
            if value > _UINT32_MAX:
                break
            return value, pos + i + 1
    raise _corrupt(f"bad variable-length length at byte {pos}")


# Work budget. In a document MySQL wrote, every value has bytes of its own, so decoding visits at most
# len(document) values and copies at most len(document) string bytes. Value entries of a corrupt document
# can all point at the same nested value, which would make decoding exponential; the budget (one unit per
# value, plus the length of long strings and opaque data) stops that.
_CHARGE_ABOVE = 64


def _charge(budget: list[int], units: int, pos: int) -> None:
    budget[0] -= units
    if budget[0] < 0:
        raise _corrupt(f"values overlap (more values than the document has bytes) at byte {pos}")


def _string(buf: bytes, pos: int, end: int, budget: list[int]) -> str:
    if pos >= end:
        raise _corrupt(f"string at byte {pos} runs past its container")
    n = buf[pos]
    p = pos + 1
    if n >= 0x80:
        n, p = _varlen(buf, pos, end)
    if p + n > end:
        raise _corrupt(f"string at byte {pos} runs past its container")
    if n > _CHARGE_ABOVE:
        _charge(budget, n, pos)
    return buf[p : p + n].decode()


_SCALAR_WIDTH = {INT16: 2, UINT16: 2, INT32: 4, UINT32: 4, INT64: 8, UINT64: 8, DOUBLE: 8}
_SCALAR_READER = {INT16: _i16, UINT16: _u16, INT32: _i32, UINT32: _u32, INT64: _i64, UINT64: _u64, DOUBLE: _f64}
_LITERALS = {LITERAL_NULL: None, LITERAL_TRUE: True, LITERAL_FALSE: False}
_LITERAL_TEXT = {LITERAL_NULL: "null", LITERAL_TRUE: "true", LITERAL_FALSE: "false"}


def _value(buf: bytes, t: int, pos: int, end: int, depth: int, budget: list[int], text: bool) -> object:
    """The value of type t stored at buf[pos:], which must not reach past end (as text when text is set)."""
    if t == STRING:
        s = _string(buf, pos, end, budget)
        return _quote(s) if text else s
    if t <= LARGE_ARRAY:
        return _container(buf, t, pos, end, depth, budget, text)
    if t == LITERAL:
        if pos >= end:
            raise _corrupt(f"literal at byte {pos} runs past its container")
        return _literal(buf[pos], pos, text)
    width = _SCALAR_WIDTH.get(t)
    if width is not None:
        if pos + width > end:
            raise _corrupt(f"number at byte {pos} runs past its container")
        value = _SCALAR_READER[t](buf, pos)[0]
        if t == DOUBLE:
            if not math.isfinite(value):
                raise _corrupt(f"non-finite double at byte {pos}")  # MySQL JSON never holds NaN or infinities
            return format_double(value) if text else value
        return str(value) if text else value
    if t == OPAQUE:
        value = _opaque(buf, pos, end, budget)
        if not text:
            return value
        return format(value, "f") if type(value) is Decimal else _quote(value.text)
    raise _corrupt(f"unknown value type 0x{t:02x} at byte {pos}")


def _literal(b: int, pos: int, text: bool) -> object:
    if b not in _LITERALS:
        raise _corrupt(f"unknown literal 0x{b:02x} at byte {pos}")
    return _LITERAL_TEXT[b] if text else _LITERALS[b]


def _opaque(buf: bytes, pos: int, end: int, budget: list[int]) -> Decimal | JsonOpaque:
    if pos >= end:
        raise _corrupt(f"opaque value at byte {pos} runs past its container")
    field_type = buf[pos]
    n, p = _varlen(buf, pos + 1, end)
    if p + n > end:
        raise _corrupt(f"opaque value at byte {pos} runs past its container")
    if n > _CHARGE_ABOVE:
        _charge(budget, n, pos)
    data = buf[p : p + n]
    if field_type == MYSQL_TYPE_NEWDECIMAL:
        return _decode_decimal(data)
    if field_type in _TEMPORAL_TYPES and n != 8:
        raise _corrupt(f"temporal opaque value at byte {pos} has {n} bytes, not 8")
    return JsonOpaque(field_type, data)


_SMALL_ENTRIES = struct.Struct("<BH").iter_unpack
_LARGE_ENTRIES = struct.Struct("<BI").iter_unpack
_SMALL_KEYS = struct.Struct("<HH").iter_unpack
_LARGE_KEYS = struct.Struct("<IH").iter_unpack


def _container(buf: bytes, t: int, pos: int, end: int, depth: int, budget: list[int], text: bool) -> object:
    depth += 1
    if depth > MAX_DEPTH:
        raise _corrupt(f"nesting deeper than {MAX_DEPTH} at byte {pos}")
    large = t & 1
    is_object = t < SMALL_ARRAY
    if large:
        hdr, key_size, entry_size = 8, 6, 5
        if pos + 8 > end:
            raise _corrupt(f"container header at byte {pos} runs past the end")
        count, size = _u32_u32(buf, pos)
    else:
        hdr, key_size, entry_size = 4, 4, 3
        if pos + 4 > end:
            raise _corrupt(f"container header at byte {pos} runs past the end")
        count, size = _u16_u16(buf, pos)
    if size > end - pos:
        raise _corrupt(f"container at byte {pos} claims {size} bytes, only {end - pos} left")
    entries = pos + hdr + (count * key_size if is_object else 0)
    header_size = entries - pos + count * entry_size
    if header_size > size:
        raise _corrupt(f"container at byte {pos} is too small for its {count} entries")
    budget[0] -= count
    if budget[0] < 0:
        _charge(budget, 0, pos)
    cend = pos + size
    values = []
    append = values.append
    literals = _LITERAL_TEXT if text else _LITERALS
    # Each entry is a type byte and an offset field. Inlined scalars sit in the offset field: literals and
    # 16-bit ints always, 32-bit ints in large containers. Literal type codes below keep the loop fast:
    # 0x0C STRING, 0x05 INT16, 0x04 LITERAL, 0x06 UINT16, 0x07 INT32, 0x08 UINT32.
    rel = entries - pos + entry_size  # json_binary.cc Value::element: a value lies after its own entry
    for vt, field in (_LARGE_ENTRIES if large else _SMALL_ENTRIES)(buf[entries : entries + count * entry_size]):
        if vt == 0x0C:
            if field > size or field < rel:
                raise _corrupt(f"value offset {field} out of range in container at byte {pos}")
            s = _string(buf, pos + field, cend, budget)
            append(_quote(s) if text else s)
        elif vt == 0x05:
            v = (field & 0xFFFF) - 0x10000 if field & 0x8000 else field & 0xFFFF
            append(str(v) if text else v)
        elif vt == 0x04:
            v = literals.get(field & 0xFF, _MISSING)
            if v is _MISSING:
                raise _corrupt(f"unknown literal 0x{field & 0xFF:02x} in container at byte {pos}")
            append(v)
        elif vt == 0x06:
            append(str(field & 0xFFFF) if text else field & 0xFFFF)
        elif large and vt == 0x07:
            v = field - 0x100000000 if field & 0x80000000 else field
            append(str(v) if text else v)
        elif large and vt == 0x08:
            append(str(field) if text else field)
        elif field > size or field < rel:
            raise _corrupt(f"value offset {field} out of range in container at byte {pos}")
        else:
            append(_value(buf, vt, pos + field, cend, depth, budget, text))
        rel += entry_size
    if is_object:
        keys = _keys(buf, pos, count, large, hdr, header_size, size, text)
        if text:
            return "{" + ", ".join([k + ": " + v for k, v in zip(keys, values, strict=True)]) + "}"
        return dict(zip(keys, values, strict=True))
    if text:
        return "[" + ", ".join(values) + "]"
    return values


# Decoded (and quoted) keys by their bytes: the same keys recur in every row of a table.
_KEY_CACHE_LIMIT = 4096
_key_str: dict[bytes, str] = {}
_key_text: dict[bytes, str] = {}


def _keys(buf: bytes, pos: int, count: int, large: int, hdr: int, header_size: int, size: int,
          text: bool) -> list[str]:
    keys = []
    prev = b""
    first = pos + hdr
    cache = _key_text if text else _key_str
    key_entries = buf[first : first + count * (6 if large else 4)]
    for offset, length in (_LARGE_KEYS if large else _SMALL_KEYS)(key_entries):
        if offset < header_size or offset + length > size:
            raise _corrupt(f"key offset {offset} out of range in object at byte {pos}")
        raw = buf[pos + offset : pos + offset + length]
        # MySQL writes keys sorted by length, then bytewise, without duplicates (Value::is_valid checks this).
        if keys and (length < len(prev) or (length == len(prev) and raw <= prev)):
            raise _corrupt(f"object keys out of order or duplicated in object at byte {pos}")
        prev = raw
        key = cache.get(raw)
        if key is None:
            key = _quote(raw.decode()) if text else raw.decode()
            if len(cache) >= _KEY_CACHE_LIMIT:
                cache.clear()
            cache[raw] = key
        keys.append(key)
    return keys


# -- canonical text -----------------------------------------------------------------------------------------


def to_json_text(value: object) -> str:
    """MySQL's canonical text of a JSON value, as ``SELECT json_col`` prints it on MySQL 8.

    Object keys are printed in MySQL's order (length, then bytewise), whatever the dict's order.
    Raises TypeError for values JSON cannot hold and ValueError for non-finite floats or nesting deeper
    than MAX_DEPTH.
    """
    parts: list[str] = []
    _render(value, parts.append, 0)
    return "".join(parts)


def _key_order(item: tuple[str, object]) -> tuple[int, str]:
    key = item[0]
    if type(key) is not str:
        raise TypeError(f"JSON object keys must be str, not {type(key).__name__}")
    # UTF-8 byte order equals code point order, so only the length needs the encoded form.
    return (len(key) if key.isascii() else len(key.encode()), key)


def _render(v: object, out, depth: int) -> None:
    t = type(v)
    if t is str:
        out(_quote(v))
    elif t is dict:
        depth += 1
        if depth > MAX_DEPTH:
            raise ValueError(f"JSON nested deeper than {MAX_DEPTH}")
        items = sorted(v.items(), key=_key_order) if len(v) > 1 else v.items()
        out("{")
        first = True
        for key, item in items:
            if first:
                first = False
            else:
                out(", ")
            if type(key) is not str:
                raise TypeError(f"JSON object keys must be str, not {type(key).__name__}")
            out(_quote(key))
            out(": ")
            _render(item, out, depth)
        out("}")
    elif t is list or t is tuple:
        depth += 1
        if depth > MAX_DEPTH:
            raise ValueError(f"JSON nested deeper than {MAX_DEPTH}")
        out("[")
        first = True
        for item in v:
            if first:
                first = False
            else:
                out(", ")
            _render(item, out, depth)
        out("]")
    elif t is int:
        out(str(v))
    elif v is None:
        out("null")
    elif v is True:
        out("true")
    elif v is False:
        out("false")
    elif t is float:
        out(format_double(v))
    elif t is Decimal:
        out(format(v, "f"))
    elif t is JsonOpaque:
        out(_quote(v.text))
    else:
        _render(_plain(v), out, depth)


def _plain(v: object) -> object:
    """Subclasses of the supported types (OrderedDict, IntEnum, ...) render as their base type."""
    if isinstance(v, str):
        return str.__str__(v)  # str() of a (str, Enum) member would give its name
    for base in (int, float, Decimal, dict, list, tuple):
        if isinstance(v, base):
            return base(v)
    raise TypeError(f"{type(v).__name__} is not a JSON value")


def format_double(x: float) -> str:
    """A double as MySQL prints it in JSON text.

    json_dom.cc prints doubles with my_gcvt(MY_GCVT_MAX_FIELD_WIDTH) and appends ".0" when the result has
    neither a point nor an exponent. With that width my_gcvt keeps dtoa's shortest round-trip digits (the
    digits repr() gives) and uses plain notation for -14 <= decimal exponent <= 0, for non-integers, and
    for integers below 1e15; otherwise "1.5e20" / "1e-16" style (no "+", no leading zeros in the exponent).
    """
    if not math.isfinite(x):
        raise ValueError(f"MySQL JSON cannot hold {x}")
    text = repr(x)
    if "e" not in text and (not text.endswith(".0") or -1e15 < x < 1e15):
        # repr's plain notation (1e-4 <= |x| < 1e16) is MySQL's too, except for whole numbers >= 1e15.
        return text
    sign = ""
    if text[0] == "-":
        sign, text = "-", text[1:]
    mantissa, _, exp = text.partition("e")
    whole, _, frac = mantissa.partition(".")
    if exp:
        digits = (whole + frac).rstrip("0")
        decpt = int(exp) + len(whole)
    elif whole == "0":
        stripped = frac.lstrip("0")
        if not stripped:
            return sign + "0.0"
        digits = stripped.rstrip("0")
        decpt = len(stripped) - len(frac)
    else:
        digits = (whole + frac).rstrip("0")
        decpt = len(whole)
    n = len(digits)
    if -14 <= decpt <= 0:
        return sign + "0." + "0" * -decpt + digits
    if 0 < decpt < n:
        return sign + digits[:decpt] + "." + digits[decpt:]
    if n <= decpt <= 15:
        return sign + digits + "0" * (decpt - n) + ".0"
    return sign + digits[0] + ("." + digits[1:] if n > 1 else "") + "e" + str(decpt - 1)


# -- encoding -----------------------------------------------------------------------------------------------


class _TooBig(Exception):
    """A container does not fit the small format; MySQL then retries the outermost one it may grow."""


def encode_jsonb(value: object) -> bytes:
    """Encode a JSON value the way MySQL's json_binary::serialize does.

    Containers use the small format unless they (with everything nested in them) need 32-bit offsets;
    keys are sorted by length, then bytewise; literals and 16-bit ints (and 32-bit ints in large
    containers) are inlined. Integers are typed as MySQL types JSON text numbers: values up to 2**32-1
    and negatives are signed (INT16/INT32/INT64), larger positives UINT64. A Decimal is stored with the
    smallest precision that holds it (a server writes the precision of the value's SQL type, e.g. 11 for
    CAST(9 AS DECIMAL(11,2))); pass JsonOpaque(246, precision + scale + binary) for exact bytes.
    Raises ValueError/TypeError for values MySQL JSON cannot hold.
    """
    t, payload = _encode(value, False, 0)
    return bytes((t,)) + payload


def _encode(v: object, small_parent: bool, depth: int) -> tuple[int, bytes]:
    t = type(v)
    if t is str:
        raw = v.encode()
        return STRING, _varlen_bytes(len(raw)) + raw
    if v is None:
        return LITERAL, b"\x00"
    if v is True:
        return LITERAL, b"\x01"
    if v is False:
        return LITERAL, b"\x02"
    if t is int:
        return _encode_int(v)
    if t is float:
        if not math.isfinite(v):
            raise ValueError(f"MySQL JSON cannot hold {v}")
        return DOUBLE, _pack_f64(v)
    if t is Decimal:
        data = _encode_decimal(v)
        return OPAQUE, bytes((MYSQL_TYPE_NEWDECIMAL,)) + _varlen_bytes(len(data)) + data
    if t is JsonOpaque:
        if not 0 <= v.field_type <= 255:
            raise ValueError(f"opaque field type {v.field_type} does not fit a byte")
        return OPAQUE, bytes((v.field_type,)) + _varlen_bytes(len(v.data)) + bytes(v.data)
    if t is dict or t is list or t is tuple:
        is_object = t is dict
        try:
            return (SMALL_OBJECT if is_object else SMALL_ARRAY), _encode_container(v, is_object, False, depth)
        except _TooBig:
            if small_parent:
                raise
        return (LARGE_OBJECT if is_object else LARGE_ARRAY), _encode_container(v, is_object, True, depth)
    return _encode(_plain(v), small_parent, depth)


def _encode_int(v: int) -> tuple[int, bytes]:
    if v < _INT64_MIN or v > _UINT64_MAX:
        raise ValueError(f"integer {v} does not fit MySQL JSON's 64-bit integers")
    if v > _UINT32_MAX:
        # MySQL's JSON parser (RapidJSON) reports positives above 2**32-1 as unsigned 64-bit numbers.
        return UINT64, _pack_u64(v)
    if -0x8000 <= v <= 0x7FFF:
        return INT16, _pack_i16(v)
    if -0x80000000 <= v <= 0x7FFFFFFF:
        return INT32, _pack_i32(v)
    return INT64, _pack_i64(v)


def _inline_entry(v: object, large: bool) -> bytes | None:
    """The value entry of an inlined scalar, or None when the value is stored after the entries."""
    if v is None:
        code, t = LITERAL_NULL, LITERAL
    elif v is True:
        code, t = LITERAL_TRUE, LITERAL
    elif v is False:
        code, t = LITERAL_FALSE, LITERAL
    elif type(v) is int and -0x8000 <= v <= 0x7FFF:
        code, t = v, INT16
    elif large and type(v) is int and -0x80000000 <= v <= 0x7FFFFFFF:
        return bytes((INT32,)) + _pack_i32(v)
    else:
        return None
    return bytes((t,)) + (_pack_i32(code) if large else _pack_i16(code))


def _encode_container(v: dict | list | tuple, is_object: bool, large: bool, depth: int) -> bytes:
    depth += 1
    if depth > MAX_DEPTH:
        raise ValueError(f"JSON nested deeper than {MAX_DEPTH}")
    limit = _UINT32_MAX if large else _UINT16_MAX
    pack = _pack_u32 if large else _pack_u16
    offset_size = 4 if large else 2
    count = len(v)
    if count > limit:
        _too_big(large)
    if is_object:
        pairs = []
        for key, item in v.items():
            if type(key) is not str:
                raise TypeError(f"JSON object keys must be str, not {type(key).__name__}")
            pairs.append((key.encode(), item))
        pairs.sort(key=lambda kv: (len(kv[0]), kv[0]))
        keys = [k for k, _ in pairs]
        items = [item for _, item in pairs]
    else:
        keys, items = [], list(v)
    header = 2 * offset_size + count * ((offset_size + 2 if is_object else 0) + 1 + offset_size)
    key_entries = bytearray()
    offset = header
    for key in keys:
        if len(key) > _UINT16_MAX:
            raise ValueError("JSON object key longer than 65535 bytes")
        if offset > limit:
            _too_big(large)
        key_entries += pack(offset) + _pack_u16(len(key))
        offset += len(key)
    value_entries = bytearray()
    body = bytearray()
    for item in items:
        entry = _inline_entry(item, large)
        if entry is not None:
            value_entries += entry
            continue
        if offset > limit:
            _too_big(large)
        t, payload = _encode(item, not large, depth)
        value_entries += bytes((t,)) + pack(offset)
        body += payload
        offset += len(payload)
    if offset > limit:
        _too_big(large)
    return pack(count) + pack(offset) + key_entries + value_entries + b"".join(keys) + body


def _too_big(large: bool) -> None:
    if large:
        raise ValueError("JSON document larger than 4 GiB")
    raise _TooBig


def _varlen_bytes(n: int) -> bytes:
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        out.append(b | 0x80 if n else b)
        if not n:
            return bytes(out)


# -- JSON paths ---------------------------------------------------------------------------------------------

#: One step of a path: a member name (str) or an array cell as (index, from_end) ("[last-2]" is (2, True)).
PathLeg = str | tuple[int, bool]

_WHITESPACE = " \t\n\v\f\r"
_MEMBER_END = _WHITESPACE + "[.*"


@lru_cache(maxsize=1024)
def parse_json_path(path: str) -> tuple[PathLeg, ...]:
    """Parse a MySQL JSON path made of member and array-cell legs (what JSON diffs carry).

    Accepts ``$``, ``.name``, ``."quoted name"`` (JSON escapes), ``[N]``, ``[last]`` and ``[last-N]`` with
    MySQL's optional whitespace. Wildcards, ``**`` and ranges cannot address a single value and are refused,
    like any other malformed path, with CorruptEvent.
    """
    n = len(path)
    i = _skip_ws(path, 0)
    if i >= n or path[i] != "$":
        raise _corrupt(f"JSON path {path!r} does not start with $")
    legs: list[PathLeg] = []
    i = _skip_ws(path, i + 1)
    while i < n:
        c = path[i]
        if c == ".":
            leg, i = _member_leg(path, _skip_ws(path, i + 1))
        elif c == "[":
            leg, i = _array_leg(path, _skip_ws(path, i + 1))
        else:
            raise _corrupt(f"unexpected {c!r} at {i} in JSON path {path!r}")
        legs.append(leg)
        i = _skip_ws(path, i)
    return tuple(legs)


def _skip_ws(path: str, i: int) -> int:
    n = len(path)
    while i < n and path[i] in _WHITESPACE:
        i += 1
    return i


def _member_leg(path: str, i: int) -> tuple[str, int]:
    n = len(path)
    if i >= n or path[i] == "*":
        raise _corrupt(f"JSON path {path!r} has no usable member name at {i}")
    quoted = path[i] == '"'
    if quoted:
        j = i + 1
        while j < n and path[j] != '"':
            j += 2 if path[j] == "\\" else 1  # an escaped character never ends the name
        j = min(j + 1, n)
        token = path[i:j]
    else:
        j = i
        while j < n and path[j] not in _MEMBER_END:
            j += 1
        token = '"' + path[i:j] + '"'  # unquoted names may hold escapes too (json_path.cc parse_member_leg)
    try:
        name = _json_loads(token)
    except ValueError:
        name = None
    if type(name) is not str or (not quoted and not name):
        raise _corrupt(f"bad member name at {i} in JSON path {path!r}")
    return name, j


def _array_leg(path: str, i: int) -> tuple[tuple[int, bool], int]:
    n = len(path)
    from_end = path.startswith("last", i)
    if from_end:
        i = _skip_ws(path, i + 4)
        if i < n and path[i] == "-":
            i = _skip_ws(path, i + 1)
        else:
            i = _close_array(path, i)
            return (0, True), i
    j = i
    while j < n and "0" <= path[j] <= "9":
        j += 1
    if j == i or int(path[i:j]) > _UINT32_MAX:
        raise _corrupt(f"bad array index at {i} in JSON path {path!r}")
    return (int(path[i:j]), from_end), _close_array(path, _skip_ws(path, j))


def _close_array(path: str, i: int) -> int:
    if i >= len(path) or path[i] != "]":
        raise _corrupt(f"expected ] at {i} in JSON path {path!r}")
    return i + 1


def _is_plain_identifier(name: str) -> bool:
    return bool(name) and name.isascii() and (name[0].isalpha() or name[0] in "$_") and all(
        c.isalnum() or c in "$_" for c in name
    )


def format_json_path(legs: tuple[PathLeg, ...] | list[PathLeg]) -> str:
    """The text MySQL writes for a path (Json_path::to_string): ``$.a[3]."b c"[last-1]``."""
    parts = ["$"]
    for leg in legs:
        if isinstance(leg, str):
            parts.append("." + (leg if _is_plain_identifier(leg) else _quote(leg)))
        else:
            index, from_end = leg
            parts.append("[" + (("last" + (f"-{index}" if index else "")) if from_end else str(index)) + "]")
    return "".join(parts)


# -- JSON diffs ---------------------------------------------------------------------------------------------


class JsonDiffOp(IntEnum):
    """enum_json_diff_operation (json_diff.h)."""

    REPLACE = 0
    INSERT = 1
    REMOVE = 2


@dataclass(frozen=True, slots=True)
class JsonDiff:
    """One logical change of a partial JSON update; ``value`` is unused (None) for REMOVE."""

    op: JsonDiffOp
    path: str
    value: object = None


def _packed_int(buf: bytes, pos: int, end: int) -> tuple[int, int]:
    """net_field_length_checked: 1, 3, 4 or 9 bytes; 251 (the NULL marker) is no length."""
    if pos >= end:
        raise _corrupt(f"JSON diff length runs past the end at byte {pos}")
    b = buf[pos]
    if b < 251:
        return b, pos + 1
    width = {251: 0, 252: 2, 253: 3}.get(b, 8)
    if width == 0 or pos + 1 + width > end:
        raise _corrupt(f"bad JSON diff length at byte {pos}")
    return int.from_bytes(buf[pos + 1 : pos + 1 + width], "little"), pos + 1 + width


def parse_json_diffs(data: bytes | bytearray | memoryview, offset: int = 0, end: int | None = None) -> list[JsonDiff]:
    """Parse the JSON diffs of a partially updated JSON column (PARTIAL_UPDATE_ROWS after image).

    With ``end``, data[offset:end] holds the diffs themselves. Without it, data at ``offset`` is the column
    value as the server writes it: a 4-byte little-endian length, then that many bytes of diffs.
    Each diff is an operation byte, a packed-integer length and the path text, and (except for REMOVE)
    a packed-integer length and a binary JSON value.
    """
    try:
        if end is None:
            if offset < 0 or offset + 4 > len(data):
                raise _corrupt("JSON diff list length runs past the end")
            end = offset + 4 + _u32(data, offset)[0]
            offset += 4
        if not 0 <= offset <= end <= len(data):
            raise _corrupt(f"JSON diff list [{offset}, {end}) outside its {len(data)}-byte buffer")
        buf = bytes(data[offset:end])
        return _parse_diffs(buf)
    except CorruptEvent:
        raise
    except (IndexError, struct.error, UnicodeDecodeError, RecursionError, ValueError, OverflowError) as exc:
        raise _corrupt(f"undecodable JSON diffs ({type(exc).__name__}: {exc})") from None


def _parse_diffs(buf: bytes) -> list[JsonDiff]:
    diffs = []
    pos, end = 0, len(buf)
    while pos < end:
        op = buf[pos]
        if op > JsonDiffOp.REMOVE:
            raise _corrupt(f"unknown JSON diff operation {op} at byte {pos}")
        n, pos = _packed_int(buf, pos + 1, end)
        if n > end - pos:
            raise _corrupt(f"JSON diff path at byte {pos} runs past the end")
        path = buf[pos : pos + n].decode()
        parse_json_path(path)  # validate now rather than when applying
        pos += n
        value = None
        if op != JsonDiffOp.REMOVE:
            n, pos = _packed_int(buf, pos, end)
            if n > end - pos:
                raise _corrupt(f"JSON diff value at byte {pos} runs past the end")
            value = decode_jsonb(buf[pos : pos + n])
            pos += n
        diffs.append(JsonDiff(JsonDiffOp(op), path, value))
    return diffs


def encode_json_diffs(diffs: list[JsonDiff]) -> bytes:
    """The column value a server writes for these diffs: a 4-byte length, then the diffs (see parse_json_diffs)."""
    out = bytearray()
    for diff in diffs:
        path = diff.path.encode()
        out.append(int(diff.op))
        out += _packed_bytes(len(path)) + path
        if diff.op != JsonDiffOp.REMOVE:
            value = encode_jsonb(diff.value)
            out += _packed_bytes(len(value)) + value
    return _pack_u32(len(out)) + bytes(out)


_packed_bytes = encode_packed_int


def apply_json_diffs(doc: object, diffs: list[JsonDiff]) -> object:
    """Apply diffs in order to a document with MySQL's semantics (json_diff.cc apply_json_diff).

    REPLACE needs the path to exist; INSERT adds an absent member or inserts into an array at the index
    (clamped to the array's length); REMOVE deletes an existing member or array element. A diff that
    does not fit the document (MySQL's REJECTED) raises CorruptEvent. ``doc`` is not modified: the
    containers along each changed path are copied, untouched subtrees are shared with the result.
    """
    owned: dict[int, object] = {}  # containers copied by this call (kept alive so ids stay unique)
    for diff in diffs:
        doc = _apply_one(doc, diff, owned)
    return doc


def _own(container: dict | list, owned: dict[int, object]) -> dict | list:
    if id(container) in owned:
        return container
    copy = dict(container) if type(container) is dict else list(container)
    owned[id(copy)] = copy
    return copy


def _child(parent: object, leg: PathLeg) -> object:
    if type(leg) is str:
        return parent.get(leg, _MISSING) if type(parent) is dict else _MISSING
    if type(parent) is not list:
        return _MISSING
    index, from_end = leg
    if index >= len(parent):
        return _MISSING
    return parent[len(parent) - 1 - index if from_end else index]


def _array_position(leg: tuple[int, bool], length: int) -> int:
    """Json_array_index: from the end, or clamped to the length."""
    index, from_end = leg
    if from_end:
        return length - 1 - index if index < length else 0
    return min(index, length)


def _apply_one(doc: object, diff: JsonDiff, owned: dict[int, object]) -> object:
    legs = parse_json_path(diff.path)
    op = diff.op
    if not legs:
        raise _corrupt(f"JSON diff {op.name} on the whole document ({diff.path!r})")
    if type(doc) not in (dict, list):
        raise _rejected(diff)
    root = parent = _own(doc, owned)
    for leg in legs[:-1]:
        child = _child(parent, leg)
        if type(child) not in (dict, list):
            raise _rejected(diff)
        child = _own(child, owned)
        _set_child(parent, leg, child)
        parent = child
    last = legs[-1]
    if op != JsonDiffOp.REMOVE and len(legs) + _depth(diff.value) > MAX_DEPTH:
        raise _corrupt(f"JSON diff at {diff.path!r} nests the document deeper than {MAX_DEPTH}")
    if op == JsonDiffOp.REPLACE:
        if _child(parent, last) is _MISSING:
            raise _rejected(diff)
        _set_child(parent, last, diff.value)
    elif op == JsonDiffOp.INSERT:
        if type(parent) is dict and type(last) is str:
            if last in parent:
                raise _rejected(diff)
            _insert_member(parent, last, diff.value)
        elif type(parent) is list and type(last) is tuple:
            parent.insert(_array_position(last, len(parent)), diff.value)
        else:
            raise _rejected(diff)
    else:
        if _child(parent, last) is _MISSING:
            raise _rejected(diff)
        if type(last) is str:
            del parent[last]
        else:
            del parent[_array_position(last, len(parent))]
    return root


def _set_child(parent: dict | list, leg: PathLeg, value: object) -> None:
    if type(leg) is str:
        parent[leg] = value
    else:
        parent[_array_position(leg, len(parent))] = value


def _insert_member(obj: dict, key: str, value: object) -> None:
    """Add a member at its place in MySQL's key order, keeping the dict in that order."""
    new_key = _key_order((key, None))
    items = list(obj.items())
    obj.clear()
    placed = False
    for k, v in items:
        if not placed and _key_order((k, None)) > new_key:
            obj[key] = value
            placed = True
        obj[k] = v
    if not placed:
        obj[key] = value


def _depth(value: object) -> int:
    """Container nesting depth of a value (0 for scalars), without recursion."""
    deepest = 0
    stack = [(value, 1)]
    while stack:
        v, d = stack.pop()
        if type(v) is dict:
            children = v.values()
        elif type(v) is list:
            children = v
        else:
            continue
        deepest = max(deepest, d)
        if d <= MAX_DEPTH:
            stack.extend((c, d + 1) for c in children)
    return deepest


def _rejected(diff: JsonDiff) -> CorruptEvent:
    return _corrupt(f"JSON diff {diff.op.name} {diff.path!r} does not fit the before image")
