"""Decoded values (binlake's value contract) to Arrow columns, by this mapping (also docs/lake.md, "Values").

| MySQL | Arrow / Delta |
|---|---|
| TINYINT..BIGINT | int8..int64; unsigned widened (TINYINT UNSIGNED int16, SMALLINT UNSIGNED int32, MEDIUMINT int32, INT UNSIGNED int64, BIGINT UNSIGNED decimal(20,0)) |
| DECIMAL(p,s) | decimal128(p,s) when p <= 38, else string |
| FLOAT, DOUBLE | float32, float64 |
| BIT(n) | int64 (decimal(20,0) for BIT(64), whose values exceed int64) |
| YEAR | int16 |
| DATE | date32 (zero and partial dates -> null, counted) |
| DATETIME | timestamp[us] without zone (zero -> null, counted) |
| TIMESTAMP | timestamp[us, UTC] (zero -> null, counted) |
| TIME | string `[-]HHH:MM:SS[.f]` |
| CHAR..TEXT, ENUM, SET, JSON | string (ENUM/SET without known labels: the index or bitmask as text, counted) |
| BINARY..BLOB, GEOMETRY | binary |
| VECTOR (MySQL 9; MariaDB 11.7+ known from the schema) | list<float32> |
| MariaDB INET4, INET6, UUID (known from the schema) | string, as the server prints them |
| MariaDB `... COMPRESSED` columns | as the same column uncompressed (string, or binary for binary ones) |
"""

from __future__ import annotations

import functools
import json
from collections import Counter
from collections.abc import Sequence
from decimal import Decimal
from itertools import chain, groupby
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..binlog import coltypes as ct
from ..binlog.coltypes import arrow_spelling, value_kind
from ..binlog.rows import JsonPatch
from ..binlog.tablemap import Column
from ..binlog.values import ABSENT, vector_floats
from ..binlog.vectorized import TextColumn

UINT64_DECIMAL = pa.decimal128(20, 0)
VECTOR = pa.list_(pa.field("element", pa.float32()))  # Delta's (Parquet's) name for a list's items


def np_array(values: np.ndarray, typ: pa.DataType | None = None, valid: np.ndarray | None = None) -> pa.Array:
    """pa.array(values[, typ][, mask=~valid]) for a 1-D numpy array of numbers or booleans: the same array, built
    from its buffers, without pa.array's check for numpy masked arrays, whose import (numpy.ma, about 15 ms of CPU)
    is otherwise most of a small batch's conversion cost. `valid`: a boolean array, False where the value is NULL."""
    kind = values.dtype.kind
    own = pa.from_numpy_dtype(values.dtype) if kind in "biuf" else None
    if values.ndim != 1 or own is None or not values.dtype.isnative or (typ is not None and typ != own):
        return pa.array(values, typ) if valid is None else pa.array(values, typ, mask=~valid)
    nulls = len(values) - int(np.count_nonzero(valid)) if valid is not None else 0
    bitmap = pa.py_buffer(np.packbits(valid, bitorder="little")) if nulls else None
    data = np.packbits(values, bitorder="little") if kind == "b" else np.ascontiguousarray(values)
    return pa.Array.from_buffers(own, len(values), [bitmap, pa.py_buffer(data)], null_count=nulls)


@functools.lru_cache(maxsize=256)
def arrow_of(spelling: str) -> pa.DataType:
    """The Arrow type a column-type registry entry spells (binlake/binlog/coltypes.py `arrow`)."""
    if spelling == "list<float32>":
        return VECTOR
    if spelling == "timestamp[us, UTC]":
        return pa.timestamp("us", tz="UTC")
    if spelling.startswith("decimal128("):
        precision, scale = spelling[len("decimal128("):-1].split(",")
        return pa.decimal128(int(precision), int(scale))
    return pa.type_for_alias(spelling)


def arrow_type(col: Column) -> pa.DataType:
    """The Arrow/Delta type of a column (the registry's spelling; ValueError when the type has none)."""
    return arrow_of(arrow_spelling(col))


class ConversionStats(Counter):
    """Counts of values that could not be represented as-is: 'zero_date:db.t.col', 'unlabeled_enum:...', ..."""


TEMPORAL = frozenset({ct.DATE, ct.DATETIME, ct.TIMESTAMP})  # value kinds converted from their text
FAST_TYPES = (pa.int8(), pa.int16(), pa.int32(), pa.int64(), pa.float32(), pa.float64(), pa.binary())


class _NotPlain(Exception):
    """The fast conversion met a value that needs the careful path (absent, unlabeled, undecodable, patch)."""


def to_arrow(values: Sequence[Any], col: Column, where: str, stats: ConversionStats) -> pa.Array:
    """One column's values (ABSENT treated as null) as an Arrow array of the mapped type.

    The common case (every value plain and present) is converted by Arrow in one call; anything else, including
    every error, goes through the careful path, which counts what it changes and raises what it cannot convert.
    """
    typ = arrow_type(col)
    try:
        return _plain(values, col, typ)
    except (_NotPlain, pa.ArrowInvalid, pa.ArrowTypeError, TypeError, ValueError, OverflowError):
        return _careful(values, col, typ, where, stats)


TEXT_KINDS = frozenset({ct.DECIMAL, ct.DATE, ct.DATETIME, ct.TIMESTAMP})  # given as text by to_text


def value_text(arr: pa.Array) -> pa.Array:
    """A DECIMAL, DATE or TIMESTAMP column of the lake's types as the text of its values: the DECIMAL with its scale
    (`12.50`), `YYYY-MM-DD`, `YYYY-MM-DDTHH:MM:SS.ffffff` (six fraction digits; a zone-aware one as its UTC wall time
    with `Z`); null stays null, anything else (DECIMAL(p>38) is already text) is returned as it is."""
    t = arr.type
    if pa.types.is_decimal(t):
        text = arr.cast(pa.string())
        if t.scale > 6:  # Arrow writes |values| under 1e-6 in exponent form ('1E-9'): those in plain form
            sci = pc.fill_null(pc.match_substring(text, "E"), False)
            if pc.any(sci).as_py():
                plain = [format(v, "f") for v in arr.filter(sci).to_pylist()]
                text = pc.replace_with_mask(text, sci, pa.array(plain, pa.string()))
        return text
    if pa.types.is_date(t):
        return arr.cast(pa.string())
    if pa.types.is_timestamp(t):
        text = pc.replace_substring(arr.cast(pa.timestamp(t.unit)).cast(pa.string()), " ", "T", max_replacements=1)
        return pc.binary_join_element_wise(text, "Z", "") if t.tz is not None else text
    return arr


def _arrow_text(parts: list[TextColumn]) -> pa.Array:
    """Decoder TextColumns, one after the other, as one string array (no copy of the text when they are slices
    of one column that follow each other)."""
    column = TextColumn.join(parts)
    n = len(column)
    valid = None if column.valid is None else pa.py_buffer(np.packbits(column.valid, bitorder="little"))
    nulls = 0 if column.valid is None else n - int(column.valid.sum())
    offsets = column.offsets
    typ = pa.large_string()
    if offsets[-1] < 1 << 31:
        offsets, typ = offsets.astype(np.int32), pa.string()
    return pa.Array.from_buffers(typ, n, [valid, pa.py_buffer(offsets), pa.py_buffer(column.data)], nulls
                                 ).cast(pa.string())


def from_texts(parts: Sequence[Sequence[Any]], col: Column, where: str, stats: ConversionStats) -> pa.Array | None:
    """A column given (at least partly) as decoder TextColumns of the decoder's own text (DATE/DATETIME/TIMESTAMP,
    TIME, UTF-8 text): the lake's array made from that text in one buffer (what to_arrow makes of the same values
    as str), or None when a list part holds anything but text and NULL (to_arrow then takes the values one by
    one)."""
    kind = value_kind(col)
    if kind == ct.DECIMAL or (kind not in TEMPORAL and arrow_type(col) != pa.string()):
        return None
    arrays: list[pa.Array] = []
    for is_text, group in groupby(parts, key=lambda p: type(p) is TextColumn):
        run = list(group)
        if is_text:
            arrays.append(_arrow_text(run))
        else:
            values = list(chain.from_iterable(run))
            if not all(type(v) is str or v is None for v in values):
                return None
            arrays.append(pa.array(values, pa.string()))
    strings = arrays[0] if len(arrays) == 1 else pa.concat_arrays(arrays)
    if kind not in TEMPORAL:
        return strings
    return _temporal(strings, arrow_type(col), where, stats)


def to_text(parts: Sequence[Sequence[Any]], col: Column, where: str, stats: ConversionStats) -> pa.Array:
    """A TEXT_KINDS column's values, given as consecutive parts (value lists, or decoder TextColumns: DecodeOptions
    .text_values), as one string array of value_text's text: TextColumns as they are (the decoder wrote that text),
    lists through to_arrow (the lake's conversion, zero dates to null) and value_text."""
    arrays: list[pa.Array] = []
    values: list = []  # list parts in a row
    texts: list[TextColumn] = []  # TextColumns in a row
    for part in parts:
        if type(part) is TextColumn:
            if values:
                arrays.append(value_text(to_arrow(values, col, where, stats)))
                values = []
            texts.append(part)
        else:
            if texts:
                arrays.append(_arrow_text(texts))
                texts = []
            values.extend(part)
    if texts:
        arrays.append(_arrow_text(texts))
    if values or not arrays:
        arrays.append(value_text(to_arrow(values, col, where, stats)))
    return arrays[0] if len(arrays) == 1 else pa.concat_arrays(arrays)


def _plain(values: Sequence[Any], col: Column, typ: pa.DataType) -> pa.Array:
    if value_kind(col) in TEMPORAL:
        # Year 0000 parses, so it is looked for; a zero month or day fails the cast (ArrowInvalid), and the careful
        # path then finds and counts it.
        strings = pa.array(values, pa.string())
        if pc.any(pc.starts_with(strings, "0000")).as_py():
            raise _NotPlain
        if typ == pa.date32():
            return strings.cast(pa.date32())
        naive = strings.cast(pa.timestamp("us"))
        return naive.cast(typ) if typ.tz else naive
    if typ == pa.string():
        arr = pa.array(values)  # inferred: text only if every value is str (bytes, ints, patches are not plain)
        if arr.type == pa.string():
            return arr
        if arr.type == pa.null():
            return arr.cast(pa.string())
        raise _NotPlain
    if typ in FAST_TYPES or pa.types.is_decimal(typ) or typ == VECTOR:
        return pa.array(values, typ)
    raise _NotPlain


def _temporal(strings: pa.Array, typ: pa.DataType, where: str | None, stats: ConversionStats | None) -> pa.Array:
    # Zero and partial dates ('0000-00-00', '2020-00-15') have no Delta form: null, and counted.
    invalid = pc.or_(pc.or_(pc.starts_with(strings, "0000"),
                            pc.equal(pc.utf8_slice_codeunits(strings, 5, 7), "00")),
                     pc.equal(pc.utf8_slice_codeunits(strings, 8, 10), "00"))
    invalid = pc.fill_null(invalid, False)
    if pc.any(invalid).as_py():
        if stats is None:
            raise _NotPlain
        stats[f"zero_date:{where}"] += pc.sum(pc.cast(invalid, pa.int64())).as_py()
        strings = pc.if_else(invalid, pa.scalar(None, pa.string()), strings)
    if typ == pa.date32():
        return strings.cast(pa.date32())
    naive = strings.cast(pa.timestamp("us"))
    return naive.cast(typ) if typ.tz else naive


def _careful(values: Sequence[Any], col: Column, typ: pa.DataType, where: str, stats: ConversionStats) -> pa.Array:
    absent = values.count(ABSENT)
    if absent:
        # A partial row image (binlog_row_image=MINIMAL/NOBLOB): the column was not logged for these rows.
        stats[f"absent:{where}"] += absent
        vals = [None if v is ABSENT else v for v in values]
    else:
        vals = values
    kind = value_kind(col)
    if kind in TEMPORAL:
        return _temporal(pa.array(vals, pa.string()), typ, where, stats)
    if typ == UINT64_DECIMAL:
        return pa.array([None if v is None else Decimal(v) for v in vals], typ)
    if kind == ct.DECIMAL and typ == pa.string():
        return pa.array([None if v is None else format(v, "f") for v in vals], typ)
    if kind in (ct.ENUM, ct.SET):
        out = []
        for v in vals:
            if isinstance(v, int):
                stats[f"unlabeled_{kind}:{where}"] += 1
                v = str(v)
            out.append(v)
        return pa.array(out, typ)
    if typ == pa.string():
        out = []
        for v in vals:
            if type(v) is JsonPatch:
                stats[f"json_patch:{where}"] += 1

                v = json.dumps({"json_diff": v.as_list()})
            elif isinstance(v, (bytes, bytearray)):
                stats[f"undecodable_text:{where}"] += 1
                v = bytes(v).decode("utf-8", "replace")
            out.append(v)
        return pa.array(out, typ)
    if typ == pa.binary():
        return pa.array([v.encode("utf-8") if isinstance(v, str) else v for v in vals], typ)
    if typ == VECTOR:  # a snapshot's SELECT gives a vector's bytes
        return pa.array([vector_floats(v) if isinstance(v, (bytes, bytearray)) else v for v in vals], typ)
    return pa.array(vals, typ)
