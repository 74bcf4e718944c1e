"""binlake.binlog.jsonb: MySQL binary JSON, its canonical text, and PARTIAL_JSON diffs.

Formatting expectations come from MySQL's sql-common/json_dom.cc (wrapper_to_string, double_quote),
strings/dtoa.cc (my_gcvt), mysys/base64.cc and my_time.cc; layouts from json_binary.cc and json_diff.cc.
"""

from __future__ import annotations

import contextlib
import copy
import datetime as dt
import json
import struct
import time
from decimal import Decimal
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from binlake.binlog.errors import CorruptEvent
from binlake.binlog.jsonb import (
    MAX_DEPTH,
    JsonDiff,
    JsonDiffOp,
    JsonOpaque,
    apply_json_diffs,
    decode_jsonb,
    decode_jsonb_text,
    encode_json_diffs,
    encode_jsonb,
    format_double,
    format_json_path,
    parse_json_diffs,
    parse_json_path,
    to_json_text,
)

# -- strategies and helpers ---------------------------------------------------------------------------------

INT_BOUNDARIES = [
    -(2**63), -(2**63) + 1, -(2**31) - 1, -(2**31), -32769, -32768, -1, 0, 1, 32767, 32768, 65535, 65536,
    2**31 - 1, 2**31, 2**32 - 1, 2**32, 2**63 - 1, 2**63, 2**64 - 1,
]
ints = st.one_of(st.sampled_from(INT_BOUNDARIES), st.integers(min_value=-(2**63), max_value=2**64 - 1))
doubles = st.floats(allow_nan=False, allow_infinity=False)
# Default text excludes surrogates (not representable in utf8mb4); the explicit alphabet forces 4-byte chars.
texts = st.one_of(st.text(max_size=20), st.text(alphabet="a\u00e9\u20ac\U0001f600\x00\"\\\n", max_size=10))
plain_scalars = st.one_of(st.none(), st.booleans(), ints, doubles, texts)
plain_json = st.recursive(
    plain_scalars,
    lambda children: st.one_of(st.lists(children, max_size=6), st.dictionaries(texts, children, max_size=6)),
    max_leaves=40,
)
# Built from text so that no context rounding happens: any value of up to 31 + 30 digits with scale 0..30.
decimals = st.tuples(st.integers(-(10**31) + 1, 10**31 - 1), st.integers(0, 30)).map(
    lambda t: Decimal(f"{t[0]}E-{t[1]}")
)
opaques = st.one_of(
    st.builds(JsonOpaque, st.sampled_from([15, 16, 249, 252, 255]), st.binary(max_size=120)),
    st.datetimes(min_value=dt.datetime(1000, 1, 1)).map(JsonOpaque.temporal),
    st.dates(min_value=dt.date(1000, 1, 1)).map(JsonOpaque.temporal),
    st.times().map(JsonOpaque.temporal),
)
mysql_json = st.recursive(
    st.one_of(plain_scalars, decimals, opaques),
    lambda children: st.one_of(st.lists(children, max_size=6), st.dictionaries(texts, children, max_size=6)),
    max_leaves=40,
)


def same(a: object, b: object) -> bool:
    """Equality that also compares types (1 vs 1.0 vs True) and the sign of zero."""
    if type(a) is not type(b):
        return False
    if type(a) is float:
        return struct.pack("<d", a) == struct.pack("<d", b)
    if type(a) is list:
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    if type(a) is dict:
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if type(a) is Decimal:
        return a.as_tuple() == b.as_tuple()  # same digits and scale
    return a == b


def mysql_key_order(keys: list[str]) -> list[str]:
    return sorted(keys, key=lambda k: (len(k.encode()), k.encode()))


def key_order_holds(value: object) -> bool:
    if isinstance(value, dict):
        return list(value) == mysql_key_order(list(value)) and all(key_order_holds(v) for v in value.values())
    if isinstance(value, list):
        return all(key_order_holds(v) for v in value)
    return True


# -- round trips --------------------------------------------------------------------------------------------


@given(mysql_json)
def test_encode_decode_roundtrip_keeps_values_types_and_key_order(value):
    decoded = decode_jsonb(encode_jsonb(value))
    assert same(decoded, value)
    assert key_order_holds(decoded)


@given(plain_json)
def test_text_is_json_that_parses_back_to_the_same_value(value):
    text = to_json_text(value)
    assert same(json.loads(text), value)
    assert decode_jsonb_text(encode_jsonb(value)) == text


@given(mysql_json)
def test_text_from_binary_equals_text_from_decoded_value(value):
    raw = encode_jsonb(value)
    assert decode_jsonb_text(raw) == to_json_text(decode_jsonb(raw)) == to_json_text(value)


@given(plain_json)
def test_text_prints_keys_in_mysql_order_whatever_the_dict_order(value):
    def reorder(v):  # reverse every dict's insertion order
        if isinstance(v, dict):
            return {k: reorder(v[k]) for k in reversed(list(v))}
        if isinstance(v, list):
            return [reorder(x) for x in v]
        return v

    text = to_json_text(reorder(value))
    assert text == to_json_text(value)
    assert key_order_holds(json.loads(text, object_pairs_hook=dict))


@given(mysql_json)
def test_encoding_is_stable_under_decode(value):
    raw = encode_jsonb(value)
    assert encode_jsonb(decode_jsonb(raw)) == raw


# -- canonical text facts -----------------------------------------------------------------------------------


def test_separators_nesting_and_key_order():
    assert to_json_text({"b": [1, 2, "x"], "a": 1}) == '{"a": 1, "b": [1, 2, "x"]}'
    assert to_json_text({"b": 1, "aa": 2, "a": 3, "\u00e9": 4, "z": 5, "ab": 6}) == (
        '{"a": 3, "b": 1, "z": 5, "aa": 2, "ab": 6, "\u00e9": 4}'  # by UTF-8 length, then bytes
    )
    assert to_json_text({"x": {}, "y": [], "z": [{}, [[]]]}) == '{"x": {}, "y": [], "z": [{}, [[]]]}'
    assert to_json_text([None, True, False, 0, -5]) == "[null, true, false, 0, -5]"
    assert to_json_text(18446744073709551615) == "18446744073709551615"


def expected_escape(ch: str) -> str:
    """MySQL double_quote/escape_character: \\b \\t \\n \\f \\r, \\" and \\\\, other C0 as \\u00xx."""
    named = {"\b": "\\b", "\t": "\\t", "\n": "\\n", "\f": "\\f", "\r": "\\r", '"': '\\"', "\\": "\\\\"}
    if ch in named:
        return named[ch]
    if ord(ch) < 0x20:
        return "\\u00%02x" % ord(ch)
    return ch


def test_string_escaping_matches_mysql_for_every_ascii_char_and_keeps_unicode():
    chars = [chr(i) for i in range(0x80)] + ["\u00e9", "\u20ac", "\U0001f600", "\u2028"]
    for ch in chars:
        assert to_json_text(ch) == '"' + expected_escape(ch) + '"', repr(ch)
        assert to_json_text({ch: ch}) == '{"%s": "%s"}' % (expected_escape(ch), expected_escape(ch))
    assert to_json_text("\x1f\x7f") == '"\\u001f\x7f"'


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (1.5, "1.5"), (0.1, "0.1"), (-0.0, "-0.0"), (0.0, "0.0"), (1.0, "1.0"), (-2.0, "-2.0"), (100.0, "100.0"),
        (1e20, "1e20"), (1.5e20, "1.5e20"), (-1e20, "-1e20"), (1e15, "1e15"), (1e14, "100000000000000.0"),
        (123456789012345.0, "123456789012345.0"), (1234567890123456.0, "1.234567890123456e15"),
        (1234567890123456.8, "1234567890123456.8"), (0.0001, "0.0001"), (1e-5, "0.00001"),
        (1.5e-7, "0.00000015"), (1e-15, "0.000000000000001"), (1e-16, "1e-16"), (1.25e-100, "1.25e-100"),
        (5e-324, "5e-324"), (1.7976931348623157e308, "1.7976931348623157e308"), (3.141592653589793, "3.141592653589793"),
    ],
)
def test_double_formatting_follows_my_gcvt(value, text):
    assert format_double(value) == text
    assert to_json_text([value]) == "[" + text + "]"
    assert decode_jsonb_text(encode_jsonb(value)) == text


def reference_double(x: float) -> str:
    """my_gcvt's choice written independently: plain for -14 <= decpt <= 0, fractions, integers < 1e15."""
    sign = "-" if str(x).startswith("-") else ""
    if x == 0:
        return sign + "0.0"
    _, digit_tuple, exponent = Decimal(repr(abs(x))).normalize().as_tuple()
    digits = "".join(map(str, digit_tuple))
    decpt = exponent + len(digits)
    if decpt <= 0 and decpt >= -14:
        return sign + "0." + "0" * -decpt + digits
    if 0 < decpt < len(digits):
        return sign + digits[:decpt] + "." + digits[decpt:]
    if len(digits) <= decpt <= 15:
        return sign + digits + "0" * (decpt - len(digits)) + ".0"
    mantissa = digits[0] + ("." + digits[1:] if len(digits) > 1 else "")
    return sign + mantissa + "e" + str(decpt - 1)


@given(doubles)
def test_double_text_matches_reference_and_round_trips(x):
    text = format_double(x)
    assert text == reference_double(x)
    assert float(text) == x
    assert "." in text or "e" in text  # never mistakable for an integer


def test_non_finite_doubles_are_refused():
    for x in (float("nan"), float("inf"), float("-inf")):
        with pytest.raises(ValueError):
            to_json_text(x)
        with pytest.raises(ValueError):
            encode_jsonb([x])
    with pytest.raises(CorruptEvent):
        decode_jsonb(b"\x0b" + struct.pack("<d", float("nan")))


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (Decimal("1.50"), "1.50"), (Decimal("-0.05"), "-0.05"), (Decimal("100"), "100"), (Decimal("1E+2"), "100"),
        (Decimal("0.0000001"), "0.0000001"), (Decimal("123456789012345678901234567890.123"),
                                              "123456789012345678901234567890.123"),
        (Decimal("-999999999.999999999"), "-999999999.999999999"), (Decimal("9.00"), "9.00"),
    ],
)
def test_decimals_keep_their_scale(value, text):
    assert to_json_text(value) == text
    decoded = decode_jsonb(encode_jsonb(value))
    assert type(decoded) is Decimal and decoded == value and to_json_text(decoded) == text


def test_decimal_binary_layout_matches_mysql():
    # DECIMAL(6,3) 123.456: precision, scale, then 2 bytes for 3 int digits and 2 bytes for 3 fraction digits,
    # first byte's top bit flipped for positive numbers (the bytes MySQL 9.0.1 wrote in json-opaque.binlog).
    assert encode_jsonb(Decimal("123.456")) == b"\x0f\xf6\x06\x06\x03\x80\x7b\x01\xc8"
    # Negative numbers have all bits inverted.
    assert encode_jsonb(Decimal("-123.456")) == b"\x0f\xf6\x06\x06\x03" + bytes(b ^ 0xFF for b in b"\x80\x7b\x01\xc8")


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (dt.datetime(2015, 1, 15, 23, 24, 25), "2015-01-15 23:24:25.000000"),
        (dt.datetime(2015, 1, 15, 23, 24, 25, 123), "2015-01-15 23:24:25.000123"),
        (dt.date(2020, 1, 2), "2020-01-02"),
        (dt.time(12, 34, 56), "12:34:56.000000"),
        (dt.time(1, 2, 3, 999999), "01:02:03.999999"),
        (dt.timedelta(hours=838, minutes=59, seconds=59), "838:59:59.000000"),
        (-dt.timedelta(hours=1, microseconds=5), "-01:00:00.000005"),
    ],
)
def test_temporal_opaques_print_like_my_time_to_str_with_6_digits(value, text):
    opaque = JsonOpaque.temporal(value)
    assert opaque.text == text
    assert to_json_text({"t": opaque}) == '{"t": "%s"}' % text
    assert decode_jsonb_text(encode_jsonb([opaque])) == '["%s"]' % text


def test_timestamp_opaque_prints_as_datetime():
    stamp = JsonOpaque.temporal(dt.datetime(2001, 2, 3, 4, 5, 6), field_type=7)
    assert stamp.field_type == 7 and stamp.text == "2001-02-03 04:05:06.000000"
    with pytest.raises(ValueError):
        JsonOpaque.temporal(dt.date(2001, 2, 3), field_type=15)


def test_other_opaques_print_as_base64_with_mysql_line_breaks():
    assert to_json_text(JsonOpaque(15, b"U")) == '"base64:type15:VQ=="'
    assert to_json_text(JsonOpaque(16, b"")) == '"base64:type16:"'
    exactly_76 = to_json_text(JsonOpaque(252, bytes(57)))  # 57 bytes -> 76 base64 chars, no line break
    assert "\\n" not in exactly_76 and exactly_76 == '"base64:type252:' + "A" * 76 + '"'
    wrapped = JsonOpaque(252, bytes(range(120))).text  # 160 chars -> lines of 76, 76, 8
    lines = wrapped.removeprefix("base64:type252:").split("\n")
    assert [len(line) for line in lines] == [76, 76, 8]
    assert to_json_text(JsonOpaque(252, bytes(120))).count("\\n") == 2  # newlines are escaped in JSON text


def test_var_string_opaque_prints_as_a_plain_string():
    assert to_json_text(JsonOpaque(253, "h\u00e9\"".encode())) == '"h\u00e9\\""'


def test_to_json_text_rejects_non_json_values():
    with pytest.raises(TypeError):
        to_json_text({1: "a"})
    with pytest.raises(TypeError):
        to_json_text(object())
    deep: list = []
    for _ in range(MAX_DEPTH):
        deep = [deep]
    with pytest.raises(ValueError):
        to_json_text(deep)


# -- binary layout facts ------------------------------------------------------------------------------------


def test_small_object_layout_with_inlined_int16():
    # type, count, size, key entry (offset 11, length 1), value entry (INT16 inlined: 1), key "a"
    assert encode_jsonb({"a": 1}) == b"\x00\x01\x00\x0c\x00\x0b\x00\x01\x00\x05\x01\x00a"
    assert decode_jsonb(b"\x00\x01\x00\x0c\x00\x0b\x00\x01\x00\x05\x01\x00a") == {"a": 1}


@pytest.mark.parametrize(
    ("value", "type_byte"),
    [
        (0, 0x05), (32767, 0x05), (-32768, 0x05), (32768, 0x07), (-32769, 0x07), (65535, 0x07),
        (2**31 - 1, 0x07), (2**31, 0x09), (-(2**31) - 1, 0x09), (2**32 - 1, 0x09), (2**32, 0x0A),
        (2**63 - 1, 0x0A), (2**64 - 1, 0x0A), (-(2**63), 0x09), (1.0, 0x0B), ("", 0x0C), (None, 0x04),
    ],
)
def test_scalar_types_follow_mysqls_json_parser(value, type_byte):
    raw = encode_jsonb(value)
    assert raw[0] == type_byte
    assert same(decode_jsonb(raw), value)


def test_integers_outside_64_bits_are_refused():
    for bad in (2**64, -(2**63) - 1):
        with pytest.raises(ValueError):
            encode_jsonb(bad)


def test_int32_is_inlined_only_in_large_containers():
    small = encode_jsonb([40000])
    assert small[0] == 0x02 and small[5] == 0x07  # entry type INT32 with an offset
    assert struct.unpack_from("<H", small, 6)[0] == 7  # value stored right after the header
    large = encode_jsonb([40000, "x" * 70000])
    assert large[0] == 0x03
    assert large[9] == 0x07 and struct.unpack_from("<i", large, 10)[0] == 40000  # inlined in the entry
    assert decode_jsonb(large) == [40000, "x" * 70000]


def test_small_format_overflow_grows_the_outermost_container_then_retries_children():
    big = "x" * 70000
    nested = encode_jsonb({"a": [big]})
    assert nested[0] == 0x01  # the object had to grow ...
    assert nested[1 + 8 + 6] == 0x03  # ... and so did its array (retried small first, still too big)
    sibling = encode_jsonb({"a": [1, 2], "b": big})
    assert sibling[0] == 0x01
    assert sibling[1 + 8 + 2 * 6] == 0x02  # the small array fits the small format inside a large object
    assert decode_jsonb(sibling) == {"a": [1, 2], "b": big}


def test_binary_keys_are_sorted_by_length_then_bytes():
    raw = encode_jsonb({"bb": 1, "c": 2, "ab": 3, "\u00e9": 4})
    count = struct.unpack_from("<H", raw, 1)[0]
    keys = []
    for i in range(count):
        offset, length = struct.unpack_from("<HH", raw, 5 + 4 * i)
        keys.append(raw[1 + offset : 1 + offset + length])
    assert keys == [b"c", b"ab", b"bb", "\u00e9".encode()]


def test_empty_value_is_json_null():
    assert decode_jsonb(b"") is None
    assert decode_jsonb(memoryview(b"")) is None
    assert decode_jsonb_text(b"") == "null"


def test_memoryview_and_bytearray_inputs():
    raw = encode_jsonb({"k": [1, "v", 2.5]})
    assert decode_jsonb(memoryview(raw)) == decode_jsonb(bytearray(raw)) == {"k": [1, "v", 2.5]}
    assert decode_jsonb_text(memoryview(b"xx" + raw)[2:]) == '{"k": [1, "v", 2.5]}'


# -- malformed input ----------------------------------------------------------------------------------------


def small_array(*entries: bytes, tail: bytes = b"") -> bytes:
    size = 4 + 3 * len(entries) + len(tail)
    return b"\x02" + struct.pack("<HH", len(entries), size) + b"".join(entries) + tail


def small_object(keys: list[bytes], entries: list[bytes], tail: bytes = b"") -> bytes:
    header = 4 + 7 * len(keys)
    key_entries, offset = b"", header
    for key in keys:
        key_entries += struct.pack("<HH", offset, len(key))
        offset += len(key)
    size = header + sum(map(len, keys)) + len(tail)
    return b"\x00" + struct.pack("<HH", len(keys), size) + key_entries + b"".join(entries) + b"".join(keys) + tail


CORRUPT = {
    "unknown type": b"\x0d\x00",
    "unknown literal": b"\x04\x03",
    "unknown inlined literal": small_array(b"\x04\x07\x00"),
    "truncated int16": b"\x05\x01",
    "truncated double": b"\x0b" + bytes(7),
    "string past end": b"\x0c\x05abc",
    "length of 6 bytes": b"\x0c\x80\x80\x80\x80\x80\x00",
    "length over 32 bits": b"\x0c\xff\xff\xff\xff\x7f",
    "bad utf-8 string": b"\x0c\x02\xc3\x28",
    "bad utf-8 key": small_object([b"\xff"], [b"\x04\x00\x00"]),
    "keys out of order": small_object([b"b", b"a"], [b"\x04\x00\x00", b"\x04\x00\x00"]),
    "longer key first": small_object([b"aa", b"b"], [b"\x04\x00\x00", b"\x04\x00\x00"]),
    "duplicate keys": small_object([b"a", b"a"], [b"\x04\x00\x00", b"\x04\x00\x00"]),
    "size past buffer": b"\x02\x01\x00\xff\x00\x04\x00\x00",
    "header past size": b"\x02\x05\x00\x07\x00\x04\x00\x00",
    "truncated header": b"\x03\x01\x00\x00",
    "value offset into its own entry": small_array(b"\x0c\x04\x00", tail=b"\x00"),
    "value offset past size": small_array(b"\x0c\x09\x00", tail=b"\x00"),
    "key offset into header": b"\x00\x01\x00\x0c\x00\x02\x00\x01\x00\x04\x00\x00a",
    "key past size": b"\x00\x01\x00\x0c\x00\x0b\x00\x05\x00\x04\x00\x00a",
    "temporal of 7 bytes": b"\x0f\x0c\x07" + bytes(7),
    "decimal too short": b"\x0f\xf6\x01\x05",
    "decimal wrong size": b"\x0f\xf6\x04\x06\x03\x80\x7b",
    "decimal scale over precision": b"\x0f\xf6\x03\x02\x05\x80",
    "decimal precision over 65": b"\x0f\xf6\x04\x42\x00\x80\x00",
    "decimal digit group over 999999999": b"\x0f\xf6\x06\x09\x00" + bytes((0xBB, 0x9A, 0xCA, 0x00)),
    "opaque past end": b"\x0f\xfc\x05ab",
    "opaque without type": b"\x0f",
}


@pytest.mark.parametrize("raw", CORRUPT.values(), ids=CORRUPT.keys())
def test_malformed_documents_raise_corrupt_event(raw):
    with pytest.raises(CorruptEvent):
        decode_jsonb(raw)
    with pytest.raises(CorruptEvent):
        decode_jsonb_text(raw)


def nested_arrays(depth: int) -> bytes:
    raw = b"\x02\x00\x00\x04\x00"  # empty small array (type byte included)
    for _ in range(depth - 1):
        inner = raw[1:]
        raw = b"\x02" + struct.pack("<HH", 1, 7 + len(inner)) + b"\x02\x07\x00" + inner
    return raw


def test_nesting_limit_is_mysqls():
    assert to_json_text(decode_jsonb(nested_arrays(MAX_DEPTH))) == "[" * MAX_DEPTH + "]" * MAX_DEPTH
    with pytest.raises(CorruptEvent):
        decode_jsonb(nested_arrays(MAX_DEPTH + 1))
    start = time.perf_counter()
    with pytest.raises(CorruptEvent):
        decode_jsonb_text(nested_arrays(5000))  # never a RecursionError
    assert time.perf_counter() - start < 2


def test_value_entries_sharing_one_nested_value_cannot_blow_up():
    # 10000 entries all pointing at one array of 10000 int16s would be 1e8 values to decode.
    n = 10000
    inner = struct.pack("<HH", n, 4 + 3 * n) + b"\x05\x01\x00" * n
    offset = 4 + 3 * n
    outer = b"\x02" + struct.pack("<HH", n, offset + len(inner)) + (b"\x02" + struct.pack("<H", offset)) * n
    start = time.perf_counter()
    with pytest.raises(CorruptEvent):
        decode_jsonb(outer + inner)
    # Same with one long string referenced 10000 times.
    text = b"\x0c" + b"\xc0\xbb\x01" + b"s" * 24000
    string_bomb = b"\x02" + struct.pack("<HH", n, offset + len(text) - 1) + (b"\x0c" + struct.pack("<H", offset)) * n
    with pytest.raises(CorruptEvent):
        decode_jsonb_text(string_bomb + text[1:])
    assert time.perf_counter() - start < 2


@settings(max_examples=300, deadline=500)
@given(mysql_json)
def test_every_truncation_of_a_document_is_corrupt(value):
    raw = encode_jsonb(value)
    for cut in range(1, len(raw), max(1, len(raw) // 40)):
        with pytest.raises(CorruptEvent):
            decode_jsonb(raw[:cut])


@settings(max_examples=500, deadline=500)
@given(st.binary(max_size=300))
def test_random_bytes_only_ever_raise_corrupt_event(raw):
    for decode in (decode_jsonb, decode_jsonb_text):
        with contextlib.suppress(CorruptEvent):
            decode(raw)


@settings(max_examples=500, deadline=500, suppress_health_check=[HealthCheck.too_slow])
@given(mysql_json, st.data())
def test_mutated_documents_only_ever_raise_corrupt_event(value, data):
    raw = bytearray(encode_jsonb(value))
    for _ in range(data.draw(st.integers(1, 4))):
        action = data.draw(st.sampled_from(["flip", "set", "insert", "delete"]))
        pos = data.draw(st.integers(0, max(0, len(raw) - 1)))
        if action == "flip" and raw:
            raw[pos] ^= 1 << data.draw(st.integers(0, 7))
        elif action == "set" and raw:
            raw[pos] = data.draw(st.integers(0, 255))
        elif action == "insert":
            raw[pos:pos] = data.draw(st.binary(min_size=1, max_size=4))
        elif raw:
            del raw[pos]
    for decode in (decode_jsonb, decode_jsonb_text):
        try:
            decoded = decode(bytes(raw))
        except CorruptEvent:
            continue
        if decode is decode_jsonb:
            to_json_text(decoded)  # whatever decodes also renders


# -- JSON paths ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("path", "legs"),
    [
        ("$", ()),
        ("$.a", ("a",)),
        ('$.a[2]."b c"', ("a", (2, False), "b c")),
        (" $ . a [ last - 3 ] ", ("a", (3, True))),
        ("$[last]", ((0, True),)),
        ("$[last-0]", ((0, True),)),
        ("$[4294967295]", ((4294967295, False),)),
        ('$."a\\"b"', ('a"b',)),
        ('$."\\u00e9\\n"', ("\u00e9\n",)),
        ('$.""', ("",)),
        ("$.\\u0061bc", ("abc",)),
        ("$.$_x9", ("$_x9",)),
        ("$.\u00e9t\u00e9[0][1]", ("\u00e9t\u00e9", (0, False), (1, False))),
    ],
)
def test_json_path_parsing(path, legs):
    assert parse_json_path(path) == legs


@pytest.mark.parametrize(
    "path",
    ["", "a", "$.", "$a", "$.*", "$[*]", "$**.a", "$[1 to 2]", "$[-1]", "$[4294967296]", '$."open', "$.a b",
     "$[1", "$[last -]", "$[lasts]", '$.a"b', "$.[0]", "$[0]]"],
)
def test_malformed_json_paths_raise_corrupt_event(path):
    with pytest.raises(CorruptEvent):
        parse_json_path(path)


path_legs = st.lists(
    st.one_of(texts, st.tuples(st.integers(0, 2**32 - 1), st.booleans())), max_size=6
).map(tuple)


@given(path_legs)
def test_formatted_paths_parse_back(legs):
    text = format_json_path(legs)
    assert text.startswith("$")
    assert parse_json_path(text) == legs


def test_path_formatting_matches_mysql_to_string():
    assert format_json_path(("a", (2, False), "b c", (0, True), (3, True))) == '$.a[2]."b c"[last][last-3]'


# -- JSON diffs: wire format --------------------------------------------------------------------------------

diffs_strategy = st.lists(
    st.builds(
        lambda op, legs, value: JsonDiff(op, format_json_path(legs), None if op == JsonDiffOp.REMOVE else value),
        st.sampled_from(list(JsonDiffOp)),
        path_legs.filter(bool),
        mysql_json,
    ),
    max_size=5,
)


@given(diffs_strategy)
def test_diff_lists_round_trip(diffs):
    raw = encode_json_diffs(diffs)
    assert struct.unpack_from("<I", raw)[0] == len(raw) - 4
    for parsed in (parse_json_diffs(raw), parse_json_diffs(raw, 4, len(raw)), parse_json_diffs(b"pad" + raw, 3)):
        assert [(d.op, d.path) for d in parsed] == [(d.op, d.path) for d in diffs]
        assert all(same(p.value, d.value) for p, d in zip(parsed, diffs, strict=True))


def test_diff_wire_layout():
    raw = encode_json_diffs([JsonDiff(JsonDiffOp.REPLACE, "$.age", 26), JsonDiff(JsonDiffOp.REMOVE, "$[0]")])
    body = b"\x00\x05$.age\x03\x05\x1a\x00" + b"\x02\x04$[0]"
    assert raw == struct.pack("<I", len(body)) + body
    long_path = "$." + "k" * 300
    raw = encode_json_diffs([JsonDiff(JsonDiffOp.REMOVE, long_path)])
    assert raw[4:8] == b"\x02\xfc" + struct.pack("<H", 302)  # packed integer with the 0xfc marker
    assert parse_json_diffs(raw)[0].path == long_path


DIFF_CORRUPT = {
    "unknown operation": b"\x03\x01$",
    "path past end": b"\x02\x09$.a",
    "NULL marker as length": b"\x02\xfb",
    "truncated packed length": b"\x02\xfc\x01",
    "bad utf-8 path": b"\x02\x03$.\xff",
    "bad path syntax": b"\x02\x03$.*",
    "missing value length": b"\x00\x03$.a",
    "value past end": b"\x00\x03$.a\x05\x05\x01",
    "corrupt value": b"\x00\x03$.a\x02\x0d\x00",
}


@pytest.mark.parametrize("raw", DIFF_CORRUPT.values(), ids=DIFF_CORRUPT.keys())
def test_malformed_diffs_raise_corrupt_event(raw):
    with pytest.raises(CorruptEvent):
        parse_json_diffs(raw, 0, len(raw))
    with pytest.raises(CorruptEvent):
        parse_json_diffs(struct.pack("<I", len(raw)) + raw)


def test_diff_list_bounds_are_checked():
    with pytest.raises(CorruptEvent):
        parse_json_diffs(b"\x05\x00\x00\x00\x02")  # length says 5, 1 byte follows
    with pytest.raises(CorruptEvent):
        parse_json_diffs(b"\x01\x00")  # no room for the length
    with pytest.raises(CorruptEvent):
        parse_json_diffs(b"\x02\x01$", 2, 10)
    assert parse_json_diffs(b"\x00\x00\x00\x00") == []


@settings(max_examples=500, deadline=500)
@given(st.binary(max_size=200))
def test_random_diff_bytes_only_ever_raise_corrupt_event(raw):
    for args in ((raw,), (raw, 0, len(raw))):
        with contextlib.suppress(CorruptEvent):
            parse_json_diffs(*args)


# -- JSON diffs: applying -----------------------------------------------------------------------------------

REP, INS, REM = JsonDiffOp.REPLACE, JsonDiffOp.INSERT, JsonDiffOp.REMOVE
BASE = {"a": 1, "ccc": [10, 20, 30], "b": {"x": "y"}}


@pytest.mark.parametrize(
    ("diffs", "text"),
    [
        ([JsonDiff(REP, "$.a", "new")], '{"a": "new", "b": {"x": "y"}, "ccc": [10, 20, 30]}'),
        ([JsonDiff(REP, "$.ccc[1]", None)], '{"a": 1, "b": {"x": "y"}, "ccc": [10, null, 30]}'),
        ([JsonDiff(REP, "$.ccc[last]", 0)], '{"a": 1, "b": {"x": "y"}, "ccc": [10, 20, 0]}'),
        ([JsonDiff(REP, '$."b".x', [1])], '{"a": 1, "b": {"x": [1]}, "ccc": [10, 20, 30]}'),
        ([JsonDiff(INS, "$.bb", True)], '{"a": 1, "b": {"x": "y"}, "bb": true, "ccc": [10, 20, 30]}'),
        ([JsonDiff(INS, "$.ccc[0]", 5)], '{"a": 1, "b": {"x": "y"}, "ccc": [5, 10, 20, 30]}'),
        ([JsonDiff(INS, "$.ccc[99]", 5)], '{"a": 1, "b": {"x": "y"}, "ccc": [10, 20, 30, 5]}'),
        ([JsonDiff(INS, "$.ccc[last]", 5)], '{"a": 1, "b": {"x": "y"}, "ccc": [10, 20, 5, 30]}'),
        ([JsonDiff(INS, "$.ccc[last-9]", 5)], '{"a": 1, "b": {"x": "y"}, "ccc": [5, 10, 20, 30]}'),
        ([JsonDiff(REM, "$.a")], '{"b": {"x": "y"}, "ccc": [10, 20, 30]}'),
        ([JsonDiff(REM, "$.ccc[last-1]")], '{"a": 1, "b": {"x": "y"}, "ccc": [10, 30]}'),
        ([JsonDiff(INS, "$.b.z", 1), JsonDiff(REP, "$.b.z", 2), JsonDiff(REM, "$.b.x")],
         '{"a": 1, "b": {"z": 2}, "ccc": [10, 20, 30]}'),
        ([JsonDiff(REM, "$.ccc[0]"), JsonDiff(REM, "$.ccc[0]"), JsonDiff(INS, "$.ccc[5]", "end")],
         '{"a": 1, "b": {"x": "y"}, "ccc": [30, "end"]}'),
        ([], '{"a": 1, "b": {"x": "y"}, "ccc": [10, 20, 30]}'),
    ],
)
def test_apply_follows_mysql_diff_semantics(diffs, text):
    before = copy.deepcopy(BASE)
    result = apply_json_diffs(before, diffs)
    assert to_json_text(result) == text
    assert before == BASE  # the before image is left alone


@pytest.mark.parametrize(
    "diff",
    [
        JsonDiff(REP, "$.missing", 1), JsonDiff(REP, "$.ccc[3]", 1), JsonDiff(REP, "$.a.x", 1), JsonDiff(REP, "$.ccc.x", 1),
        JsonDiff(REP, "$[0]", 1), JsonDiff(INS, "$.a", 2), JsonDiff(INS, "$.ccc.x", 2), JsonDiff(INS, "$.b[0]", 2),
        JsonDiff(INS, "$.a[0]", 2), JsonDiff(INS, "$.nope.x", 2), JsonDiff(REM, "$.missing"), JsonDiff(REM, "$.ccc[3]"),
        JsonDiff(REM, "$.ccc[last-3]"), JsonDiff(REM, "$.a[0]"), JsonDiff(REM, "$.b[0]"), JsonDiff(REP, "$", 1),
        JsonDiff(REM, "$"), JsonDiff(REP, "$.*", 1),
    ],
)
def test_diffs_that_do_not_fit_raise_corrupt_event(diff):
    with pytest.raises(CorruptEvent):
        apply_json_diffs(copy.deepcopy(BASE), [diff])


def test_apply_on_scalar_or_missing_document_is_rejected():
    for doc in (None, 5, "text"):
        with pytest.raises(CorruptEvent):
            apply_json_diffs(doc, [JsonDiff(REP, "$.a", 1)])


def test_apply_copies_only_the_changed_path():
    before = {"keep": {"deep": [1, 2]}, "change": {"x": [1, 2]}}
    after = apply_json_diffs(before, [JsonDiff(REP, "$.change.x[0]", 9), JsonDiff(INS, "$.change.y", 3)])
    assert after == {"keep": {"deep": [1, 2]}, "change": {"x": [9, 2], "y": 3}}
    assert before == {"keep": {"deep": [1, 2]}, "change": {"x": [1, 2]}}
    assert after["keep"] is before["keep"]  # untouched subtree shared
    assert after["change"] is not before["change"]


def test_inserted_member_takes_its_mysql_key_position():
    result = apply_json_diffs({"a": 1, "ccc": 3, "dddd": 4}, [JsonDiff(INS, "$.bb", 2), JsonDiff(INS, "$.e", 5)])
    assert list(result) == ["a", "e", "bb", "ccc", "dddd"]


def test_apply_refuses_to_exceed_mysqls_depth():
    deep: object = 1
    for _ in range(MAX_DEPTH - 1):
        deep = [deep]
    assert apply_json_diffs({"a": 0}, [JsonDiff(REP, "$.a", deep)])["a"] == deep  # depth 1 + 99 = 100
    with pytest.raises(CorruptEvent):
        apply_json_diffs({"a": 0}, [JsonDiff(REP, "$.a", [deep])])


def existing_paths(value: object, prefix: tuple = ()) -> list[tuple]:
    paths = [prefix]
    if isinstance(value, dict):
        for key, item in value.items():
            paths += existing_paths(item, (*prefix, key))
    elif isinstance(value, list):
        for i, item in enumerate(value):
            paths += existing_paths(item, (*prefix, (i, False)))
    return paths


def reference_apply(doc: object, diffs: list[JsonDiff]) -> object:
    """A naive model of MySQL's diff semantics: deep copy, then mutate; None when a diff is rejected."""
    def index(leg: tuple[int, bool], length: int) -> int:  # "[last-N]" counts from the end
        n, from_end = leg
        return max(length - 1 - n, 0) if from_end else n

    doc = copy.deepcopy(doc)
    for diff in diffs:
        legs = parse_json_path(diff.path)
        parent = doc
        for leg in legs[:-1]:
            if isinstance(leg, str) and isinstance(parent, dict) and leg in parent:
                parent = parent[leg]
            elif isinstance(leg, tuple) and isinstance(parent, list) and leg[0] < len(parent):
                parent = parent[index(leg, len(parent))]
            else:
                return None
        last = legs[-1]
        exists = (isinstance(last, str) and isinstance(parent, dict) and last in parent) or (
            isinstance(last, tuple) and isinstance(parent, list) and last[0] < len(parent))
        if diff.op == JsonDiffOp.INSERT:
            if isinstance(last, str) and isinstance(parent, dict) and not exists:
                parent[last] = copy.deepcopy(diff.value)
                items = sorted(parent.items(), key=lambda kv: (len(kv[0].encode()), kv[0].encode()))
                parent.clear()
                parent.update(items)
            elif isinstance(last, tuple) and isinstance(parent, list):
                parent.insert(index(last, len(parent)), copy.deepcopy(diff.value))
            else:
                return None
        elif not exists:
            return None
        elif diff.op == JsonDiffOp.REPLACE:
            parent[last if isinstance(last, str) else index(last, len(parent))] = copy.deepcopy(diff.value)
        else:
            del parent[last if isinstance(last, str) else index(last, len(parent))]
    return doc


@st.composite
def doc_and_diffs(draw):
    """A document and diffs whose paths mostly exist (or whose parents do), so most diffs apply."""
    # Documents come from decode_jsonb, so their dicts are in MySQL's key order.
    doc = decode_jsonb(encode_jsonb(draw(plain_json.filter(lambda v: isinstance(v, (dict, list))))))
    diffs = []
    for _ in range(draw(st.integers(1, 4))):
        paths = [p for p in existing_paths(reference_apply(doc, diffs) or doc) if p]
        op = draw(st.sampled_from(list(JsonDiffOp)))
        if paths and draw(st.integers(0, 9)) > 0:  # mostly real paths, sometimes arbitrary ones
            legs = draw(st.sampled_from(paths))
            if op == JsonDiffOp.INSERT:  # a new member or index next to an existing one
                last = legs[-1]
                legs = (*legs[:-1], last + "_new" if isinstance(last, str) else (draw(st.integers(0, 5)), False))
        else:
            legs = draw(path_legs.filter(bool))
        value = None if op == JsonDiffOp.REMOVE else decode_jsonb(encode_jsonb(draw(plain_json)))
        diffs.append(JsonDiff(op, format_json_path(legs), value))
    return doc, diffs


@settings(max_examples=300, deadline=500)
@given(doc_and_diffs())
def test_applying_diffs_matches_a_naive_model(case):
    doc, diffs = case
    snapshot = copy.deepcopy(doc)
    expected = reference_apply(doc, diffs)
    if expected is None:
        with pytest.raises(CorruptEvent):
            apply_json_diffs(doc, diffs)
    else:
        result = apply_json_diffs(doc, diffs)
        assert same(result, expected)
        assert to_json_text(result) == to_json_text(expected)
        assert key_order_holds(result)  # inserted members land at their MySQL key position
    assert same(doc, snapshot)  # the before image is never modified


@given(plain_json.filter(lambda v: isinstance(v, dict) and v), st.data())
def test_replacing_an_existing_member_matches_plain_assignment(doc, data):
    key = data.draw(st.sampled_from(sorted(doc)))
    value = data.draw(plain_json)
    result = apply_json_diffs(doc, [JsonDiff(REP, format_json_path((key,)), value)])
    expected = dict(doc)
    expected[key] = value
    assert same(result, expected)


# -- real binlogs ---------------------------------------------------------------------------------------------
# A deliberately small, test-only walker for two fixture files (tables of LONG, JSON and VARCHAR columns).
# It is not the project's binlog reader: it only knows what these files contain.

_EVENT_HEADER = struct.Struct("<IBIIIH")
FDE, TABLE_MAP, WRITE_ROWS_V2, UPDATE_ROWS_V2, PARTIAL_UPDATE_ROWS = 15, 19, 30, 31, 39
T_LONG, T_VARCHAR, T_JSON = 3, 15, 245


def _packed(buf: bytes, pos: int) -> tuple[int, int]:
    if buf[pos] < 251:
        return buf[pos], pos + 1
    width = {252: 2, 253: 3, 254: 8}[buf[pos]]
    return int.from_bytes(buf[pos + 1 : pos + 1 + width], "little"), pos + 1 + width


def _events(path: Path):
    data = path.read_bytes()
    assert data[:4] == b"\xfebin"
    pos, crc = 4, 0
    while pos < len(data):
        _ts, etype, _server, size, _next, _flags = _EVENT_HEADER.unpack_from(data, pos)
        body = data[pos + 19 : pos + size]
        if etype == FDE:
            crc = 4 if body[-5] == 1 else 0  # checksum algorithm byte, then the FDE's own CRC
            body = body[:-5]
        yield etype, body[: len(body) - crc] if etype != FDE else body
        pos += size


def _table_columns(body: bytes) -> list[tuple[int, int]]:
    pos = 8  # table id, flags
    pos += 1 + body[pos] + 1  # schema name
    pos += 1 + body[pos] + 1  # table name
    ncols, pos = _packed(body, pos)
    types = list(body[pos : pos + ncols])
    _, pos = _packed(body, pos + ncols)
    columns = []
    for t in types:
        if t == T_JSON:
            columns.append((t, body[pos]))
            pos += 1
        elif t == T_VARCHAR:
            columns.append((t, struct.unpack_from("<H", body, pos)[0]))
            pos += 2
        else:
            assert t == T_LONG, f"walker does not know column type {t}"
            columns.append((t, 0))
    return columns


def _row_image(buf: bytes, pos: int, columns, present: int, partial=frozenset()):
    shown = [i for i in range(len(columns)) if present >> i & 1]
    nbytes = (len(shown) + 7) // 8
    nulls = int.from_bytes(buf[pos : pos + nbytes], "little")
    pos += nbytes
    row: dict[int, object] = {}
    for bit, i in enumerate(shown):
        t, meta = columns[i]
        if nulls >> bit & 1:
            row[i] = None
        elif t == T_LONG:
            row[i] = struct.unpack_from("<i", buf, pos)[0]
            pos += 4
        else:
            width = meta if t == T_JSON else (1 if meta < 256 else 2)
            n = int.from_bytes(buf[pos : pos + width], "little")
            raw = buf[pos + width : pos + width + n]
            row[i] = raw.decode() if t == T_VARCHAR else (("diffs", raw) if i in partial else raw)
            pos += width + n
    return row, pos


def rows_events(path: Path):
    """(event type, [(before, after)]) for each rows event; rows map column index to value (JSON: raw bytes)."""
    tables = {}
    for etype, body in _events(path):
        if etype == TABLE_MAP:
            tables[body[:6]] = _table_columns(body)
        elif etype in (WRITE_ROWS_V2, UPDATE_ROWS_V2, PARTIAL_UPDATE_ROWS):
            columns = tables[body[:6]]
            pos = 8 + struct.unpack_from("<H", body, 8)[0]  # post-header, extra data
            ncols, pos = _packed(body, pos)
            nbytes = (ncols + 7) // 8
            before_cols = after_cols = int.from_bytes(body[pos : pos + nbytes], "little")
            pos += nbytes
            if etype != WRITE_ROWS_V2:
                after_cols = int.from_bytes(body[pos : pos + nbytes], "little")
                pos += nbytes
            rows = []
            while pos < len(body):
                before = None
                if etype != WRITE_ROWS_V2:
                    before, pos = _row_image(body, pos, columns, before_cols)
                partial: frozenset[int] = frozenset()
                if etype == PARTIAL_UPDATE_ROWS:
                    options, pos = _packed(body, pos)
                    if options & 1:  # PARTIAL_JSON_UPDATES: one bit per JSON column of the after image
                        json_cols = [i for i, c in enumerate(columns) if c[0] == T_JSON and after_cols >> i & 1]
                        bits = int.from_bytes(body[pos : pos + (len(json_cols) + 7) // 8], "little")
                        pos += (len(json_cols) + 7) // 8
                        partial = frozenset(i for n, i in enumerate(json_cols) if bits >> n & 1)
                after, pos = _row_image(body, pos, columns, after_cols, partial)
                rows.append((before, after))
            assert pos == len(body)
            yield etype, rows


@pytest.fixture(scope="module")
def blackbeam(fixture_binlogs: Path) -> Path:
    return fixture_binlogs / "blackbeam__rust_mysql_common"


# Values of JSON_OBJECT(...) with opaque members, as MySQL 9.0.1 prints them: a BIT value, a DATE, a
# DATETIME, a TIME, two DECIMALs (scale kept), an array of ints and literals, and a null.
JSON_OPAQUE_TEXTS = [
    '{"a": "base64:type15:VQ=="}',
    '{"b": "2012-03-18"}',
    '{"c": "2012-03-18 11:30:45.000000"}',
    '{"c": "87:31:46.654321"}',
    '{"d": 123.456}',
    '{"e": 9.00}',
    '{"e": [0, 1, true, false]}',
    '{"e": null}',
]


def test_json_opaque_binlog_values(blackbeam: Path):
    events = list(rows_events(blackbeam / "json-opaque.binlog"))
    assert [etype for etype, _ in events] == [WRITE_ROWS_V2] * 8
    docs = [rows[0][1][0] for _, rows in events]
    assert [decode_jsonb_text(raw) for raw in docs] == JSON_OPAQUE_TEXTS
    decoded = [decode_jsonb(raw) for raw in docs]
    assert decoded[0] == {"a": JsonOpaque(15, b"U")}
    assert decoded[1]["b"] == JsonOpaque.temporal(dt.date(2012, 3, 18))
    assert decoded[2]["c"] == JsonOpaque.temporal(dt.datetime(2012, 3, 18, 11, 30, 45))
    assert decoded[3]["c"] == JsonOpaque.temporal(dt.timedelta(hours=87, minutes=31, seconds=46, microseconds=654321))
    assert same(decoded[4]["d"], Decimal("123.456")) and same(decoded[5]["e"], Decimal("9.00"))
    # The encoder reproduces what the server wrote, byte for byte, except for the precision byte of a
    # DECIMAL: the server stored 9.00 as DECIMAL(11,2) (the source column's type), a Decimal only knows 9.00.
    assert docs[5][13:17] == b"\xf6\x07\x0b\x02"  # NEWDECIMAL, 7 bytes: precision 11, scale 2, binary
    reencoded = [encode_jsonb(value) for value in decoded]
    assert reencoded[:5] + reencoded[6:] == docs[:5] + docs[6:]
    assert reencoded[5][15:17] == bytes((3, 2)) and same(decode_jsonb(reencoded[5]), decoded[5])
    assert encode_jsonb({"e": JsonOpaque(246, docs[5][15:])}) == docs[5]  # exact bytes via a raw opaque


def test_json_binlog_rows_and_partial_update(blackbeam: Path):
    events = list(rows_events(blackbeam / "json.binlog.000001"))
    assert [etype for etype, _ in events] == [WRITE_ROWS_V2] * 4 + [UPDATE_ROWS_V2, PARTIAL_UPDATE_ROWS]
    people = {"Joe": "xxxxxxxxxx", "Sue": "yyyyyyyyyy", "Pete": "zzzzzzzzzz"}

    def check_full_image(row):
        # Columns: id LONG, doc JSON, name VARCHAR, age LONG; the JSON repeats name and age.
        doc = decode_jsonb(row[1])
        assert decode_jsonb_text(row[1]) == '{"age": %d, "data": "%s", "name": "%s"}' % (
            row[3], people[row[2]], row[2])
        assert doc == {"age": row[3], "data": people[row[2]], "name": row[2]}
        assert encode_jsonb(doc) == row[1]
        return doc

    inserted = [after for _, rows in events[:4] for _, after in rows]
    assert [(r[0], r[2], r[3]) for r in inserted] == [
        (1, "Joe", 24), (2, "Sue", 32), (3, "Pete", 40), (4, "Joe", 24), (5, "Sue", 32), (6, "Pete", 40)]
    for row in inserted:
        check_full_image(row)

    latest = {}
    for before, after in events[4][1]:  # full UPDATE: age + 1 in both the column and the document
        check_full_image(before)
        latest[after[0]] = check_full_image(after)
        assert after[3] == before[3] + 1
    assert sorted(latest) == [1, 2, 3, 4, 5, 6]

    for before, after in events[5][1]:
        # binlog_row_image=MINIMAL: the before image is the primary key only, so the document the
        # diffs apply to is the one the previous UPDATE left behind.
        assert set(before) == {0}
        marker, raw_diffs = after[1]
        assert marker == "diffs"
        diffs = parse_json_diffs(raw_diffs, 0, len(raw_diffs))
        assert diffs == [JsonDiff(JsonDiffOp.REPLACE, "$.age", after[3])]
        base = latest[before[0]]
        result = apply_json_diffs(base, diffs)
        assert to_json_text(result) == '{"age": %d, "data": "%s", "name": "%s"}' % (
            after[3], people[after[2]], after[2])
        assert result["age"] == base["age"] + 1
        assert latest[before[0]]["age"] == base["age"]  # the base document was not modified
    assert [(b[0], a[3]) for b, a in events[5][1]] == [(1, 26), (2, 34), (3, 42), (4, 26), (5, 34), (6, 42)]


def test_fixture_walker_strips_checksums(blackbeam: Path):
    # Guards the helper itself: every event of both files ends on its own CRC32.
    import zlib

    for name in ("json-opaque.binlog", "json.binlog.000001"):
        data = (blackbeam / name).read_bytes()
        pos = 4
        while pos < len(data):
            _ts, etype, _server, size, _next, flags = _EVENT_HEADER.unpack_from(data, pos)
            event = bytearray(data[pos : pos + size])
            if etype == FDE:  # the server checksums its FDE with the "binlog in use" flag cleared
                struct.pack_into("<H", event, 17, flags & ~1)
            assert zlib.crc32(event[:-4]) == struct.unpack("<I", event[-4:])[0]
            pos += size
        assert pos == len(data)

