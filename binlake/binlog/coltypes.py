"""The column-type registry: one entry per binlog column type code, holding everything binlake does with a type.

`TYPES[code]` (a `TypeSpec`) says how the TABLE_MAP writes the type's metadata (and which metadata a server can
write, which optional metadata covers it), which functions decode its values (the reference decoder of values.py,
the column-at-a-time planner of columnar.py, the code emitter of rowcodegen.py), its Arrow/Delta type, what its
decoded values are (JSON and SQL output follow from that), and the DDL types the server logs under this code with
their metadata. Every consumer reads this table: rows.py and decoder.py (TABLE_MAP metadata), the three decoders,
output.py, lake/convert.py, schema/binlog_types.py and schema/guard.py, and the test binlog writer. To add a type:
one entry here plus its tests (docs/architecture.md, "To add a column type"; tests/unit/test_coltypes.py).

The registry is read when a table map is compiled (`codecs_for`: one `ColumnCodec` per column), never per row.

A column's `logical` type (MariaDB INET4/INET6/UUID/VECTOR stored as binary, known from the schema) and MariaDB's
COMPRESSED columns decode as length-prefixed bytes plus one more step (`wrapped_value`); their Arrow type
and rendering are in `LOGICAL`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum
from typing import Any

from . import columnar, rowcodegen, values
from .charsets import BINARY
from .constants import ColumnType as T
from .tablemap import Column, TableMap
from .values import Decoder, ValueError_


class Meta(Enum):
    """How a type's metadata is written in the TABLE_MAP's metadata block."""

    NONE = 0  # no metadata bytes
    BYTE = 1  # one byte (pack length, fsp, float size)
    LE16 = 2  # two bytes little-endian (VARCHAR max length, BIT bytes and bits)
    BE16 = 3  # two bytes big-endian (precision, scale; ENUM/SET real type and size)
    STRING = 4  # STRING's two big-endian bytes: real type (ENUM, SET, STRING) and a packed max length
    TYPED = 5  # TYPED_ARRAY: the element's type code, then the element type's metadata


# What a decoded value is (the value contract of values.py); output and conversion follow from it.
INT, DECIMAL, FLOAT32, FLOAT64, BIT = "int", "decimal", "float32", "float64", "bit"
DATE, DATETIME, TIMESTAMP, TIME, YEAR = "date", "datetime", "timestamp", "time", "year"
TEXT, ENUM, SET, JSON, GEOMETRY, VECTOR = "text", "enum", "set", "json", "geometry", "vector"


@dataclass(frozen=True)
class TypeSpec:
    """Everything binlake does with one binlog column type. The callables take the `Column` (or its codec)."""

    code: int
    name: str  # as in docs and messages
    meta: Meta  # TABLE_MAP metadata layout
    value: str | None  # what its values decode to (INT, DECIMAL, TEXT, ...); None: binlake cannot decode it
    reference: Callable[[Column], Decoder] | None = None  # values.py: f(buf, off) -> (value, off); None: undecodable
    columnar: Callable[[ColumnCodec, int], Any] | None = None  # columnar.py planner: (codec, bit) -> _Col
    rowgen: Callable | None = None  # rowcodegen.py emitter: (g, codec, v, ind)
    arrow: Callable[[Column], str] | None = None  # Arrow type spelling (lake/convert.py arrow_of)
    meta_ok: Callable[[int], bool] | None = None  # metadata a server can write (else the event is corrupt)
    struct: tuple[str, str] | None = None  # struct codes (signed, unsigned) of a number read as it is
    merge_fix: str | None = None  # rowcodegen: code fixing a value read in a merged struct run ({v}: the name)
    width: Callable[[Column], int] | None = None  # bytes of a fixed-width value
    prefix: Callable[[Column], int] | None = None  # bytes of a variable-length value's length
    charset: bool = False  # values are text in the column's charset (bytes for the binary collation)
    # TABLE_MAP optional metadata, (MySQL, MariaDB): whether a column of this type takes a bit of SIGNEDNESS and an
    # entry of DEFAULT_CHARSET/COLUMN_CHARSET. MySQL: its is_numeric_type() (integers, FLOAT, DOUBLE, NEWDECIMAL;
    # not YEAR or BIT) and is_character_type() (VECTOR since 9.0; not GEOMETRY). MariaDB: every numeric field
    # (Field_num: also YEAR and the pre-5.0 DECIMAL) and every field with a character set (also GEOMETRY and the
    # COMPRESSED columns, not VECTOR); checked on MariaDB 10.11.
    signedness: tuple[bool, bool] = (False, False)
    charset_meta: tuple[bool, bool] = (False, False)
    fsp_from_schema: bool = False  # MariaDB 5.3 hires TIME/DATETIME/TIMESTAMP: precision not in the TABLE_MAP
    # Stored bytes that need one more step (wrapped_value): MariaDB COMPRESSED columns are inflated; a column of
    # a type with a `logical` type (VECTOR) or given one by the schema is converted by it; `padded`: row images
    # strip the trailing zero bytes of a fixed-width binary value (BINARY(n)), put back before converting.
    compressed: bool = False
    logical: str | None = None
    padded: bool = False
    ddl: tuple[str, ...] = ()  # DDL data types (as the DDL parser names them) MySQL logs with this code
    # The TABLE_MAP metadata of such a column: f(column definition (schema.model.ColumnDef), its max bytes or None).
    ddl_meta: Callable[[Any, int | None], int | None] | None = None
    ddl_alias: int | None = None  # another code a server may log such a column with, with the same metadata
    ddl_old: int | None = None  # the pre-5.6 code (no metadata) of a temporal type without fsp, or on MariaDB

    @property
    def decodable(self) -> bool:
        return self.reference is not None


# -- small helpers for the table ---------------------------------------------------------------------------


def _const(value: Any) -> Callable[[Column], Any]:
    return lambda col: value


def _signed(signed: Any, unsigned: Any) -> Callable[[Column], Any]:
    return lambda col: unsigned if col.signed is False else signed


def _char_prefix(col: Column) -> int:
    return 1 if col.meta < 256 else 2


def _meta_prefix(col: Column) -> int:
    return col.meta


def _meta_or_4(col: Column) -> int:
    return col.meta or 4


def _ddl_fixed(meta: int) -> Callable[[Any, int | None], int]:
    return lambda cdef, size: meta


def _ddl_size(cdef: Any, size: int | None) -> int | None:
    return size


def _ddl_fsp(cdef: Any, size: int | None) -> int:
    return cdef.fsp or 0


def _ddl_decimal(cdef: Any, size: int | None) -> int:
    return (cdef.precision or 10) << 8 | (cdef.scale or 0)


def _ddl_bit(cdef: Any, size: int | None) -> int:
    n = cdef.length or 1
    return (n // 8) << 8 | (n % 8)


def _ddl_set(cdef: Any, size: int | None) -> int:
    return {0: 1, 1: 1, 2: 2, 3: 3, 4: 4}.get((len(cdef.labels or ()) + 7) // 8, 8)


# Bytes of a TEXT/BLOB value's length, by DDL type (the BLOB code's metadata).
BLOB_PACK = {"tinyblob": 1, "tinytext": 1, "blob": 2, "text": 2, "mediumblob": 3, "mediumtext": 3, "longblob": 4,
             "longtext": 4}


def _fsp_ok(m: int) -> bool:
    return m <= 6


def _pack_ok(m: int) -> bool:
    return m <= 4


def _text_or_binary(col: Column) -> str:
    return "binary" if col.is_binary else "string"


def _bit_width(col: Column) -> int:
    return (col.meta >> 8) + (1 if col.meta & 0xFF else 0)


def _text_reference(col: Column) -> Decoder:
    return values.make_length_prefixed(_char_prefix(col), values._text_converter(col))


def _string_reference(col: Column) -> Decoder:
    if col.collation == BINARY and col.meta:
        # The server strips BINARY(n)'s trailing zero bytes in row images; SELECT returns them padded.
        width = col.meta
        return values.make_length_prefixed(1 if width < 256 else 2, lambda raw: bytes(raw).ljust(width, b"\0"))
    return _text_reference(col)


def _blob_reference(col: Column) -> Decoder:
    return values.make_length_prefixed(col.meta, values._text_converter(col))


def _wrapped_reference(col: Column) -> Decoder:
    """Length-prefixed bytes, then one more step (wrapped_value: inflate, INET/UUID text, floats)."""
    return values.make_length_prefixed(value_prefix(col), wrapped_value(col))


def _integer(code: int, name: str, s: Any, u: Any, codes: tuple[str, str] | None, size: int,
             arrow: tuple[str, str], ddl: tuple[str, ...], rowgen: Callable) -> TypeSpec:
    return TypeSpec(code, name, Meta.NONE, INT, reference=_signed(s, u),
                      columnar=columnar.plan_struct if codes else columnar.plan_int24, rowgen=rowgen,
                      arrow=_signed(*arrow), struct=codes, width=_const(size), ddl=ddl, signedness=_BOTH,
                      ddl_meta=_ddl_fixed(0))


def _blob(code: int, name: str) -> TypeSpec:
    return TypeSpec(code, name, Meta.BYTE, TEXT, reference=_blob_reference, columnar=columnar.plan_text,
                      rowgen=rowcodegen.emit_blob, arrow=_text_or_binary, meta_ok=_pack_ok, prefix=_meta_prefix,
                      charset=True, charset_meta=_BOTH)


_REF = rowcodegen.emit_reference
_BOTH, _MYSQL, _MARIADB = (True, True), (True, False), (False, True)

_ENTRIES = [
    TypeSpec(T.DECIMAL, "DECIMAL (pre-5.0)", Meta.BE16, None, signedness=_MARIADB),  # never written by a supported server
    _integer(T.TINY, "TINYINT", values._tiny_s, values._tiny_u, ("b", "B"), 1, ("int8", "int16"),
             ("tinyint",), rowcodegen.emit_tiny),
    _integer(T.SHORT, "SMALLINT", values._short_s, values._short_u, ("h", "H"), 2, ("int16", "int32"),
             ("smallint",), rowcodegen.emit_struct),
    _integer(T.INT24, "MEDIUMINT", values._int24_s, values._int24_u, None, 3, ("int32", "int32"),
             ("mediumint",), rowcodegen.emit_int24),
    _integer(T.LONG, "INT", values._long_s, values._long_u, ("i", "I"), 4, ("int32", "int64"),
             ("int",), rowcodegen.emit_struct),
    _integer(T.LONGLONG, "BIGINT", values._longlong_s, values._longlong_u, ("q", "Q"), 8,
             ("int64", "decimal128(20, 0)"), ("bigint",), rowcodegen.emit_struct),
    TypeSpec(T.NEWDECIMAL, "DECIMAL", Meta.BE16, DECIMAL,
               reference=lambda col: values.make_decimal(col.precision, col.scale),
               columnar=columnar.plan_decimal, rowgen=rowcodegen.emit_decimal,
               arrow=lambda col: f"decimal128({col.precision}, {col.scale})" if col.precision <= 38 else "string",
               width=lambda col: values.decimal_groups(col.precision, col.scale)[2], ddl=("decimal", "numeric"),
               signedness=_BOTH, ddl_meta=_ddl_decimal),
    TypeSpec(T.FLOAT, "FLOAT", Meta.BYTE, FLOAT32, reference=_const(values._float), columnar=columnar.plan_struct,
               rowgen=rowcodegen.emit_struct, arrow=_const("float32"), struct=("f", "f"), width=_const(4),
               ddl=("float",), signedness=_BOTH, ddl_meta=_ddl_fixed(4)),
    TypeSpec(T.DOUBLE, "DOUBLE", Meta.BYTE, FLOAT64, reference=_const(values._double),
               columnar=columnar.plan_struct, rowgen=rowcodegen.emit_struct, arrow=_const("float64"),
               struct=("d", "d"), width=_const(8), ddl=("double", "real"), signedness=_BOTH,
               ddl_meta=_ddl_fixed(8)),
    TypeSpec(T.NULL, "NULL", Meta.NONE, None),  # a NULL-typed column (never in a table)
    TypeSpec(T.YEAR, "YEAR", Meta.NONE, YEAR, reference=_const(values._year), columnar=columnar.plan_year,
               rowgen=rowcodegen.emit_year, arrow=_const("int16"), struct=("B", "B"),
               merge_fix="if {v}: {v} += 1900", width=_const(1), ddl=("year",), signedness=_MARIADB,
               ddl_meta=_ddl_fixed(0)),
    TypeSpec(T.DATE, "DATE", Meta.NONE, DATE, reference=_const(values._date), columnar=columnar.plan_date,
               rowgen=rowcodegen.emit_date, arrow=_const("date32"), width=_const(3), ddl=("date",),
               ddl_meta=_ddl_fixed(0), ddl_alias=T.NEWDATE),
    TypeSpec(T.NEWDATE, "DATE (NEWDATE)", Meta.NONE, DATE, reference=_const(values._date),
               columnar=columnar.plan_date, rowgen=rowcodegen.emit_date, arrow=_const("date32"), width=_const(3)),
    # The pre-5.6 temporal types; MariaDB's TIME(n)/DATETIME(n)/TIMESTAMP(n) with mysql56_temporal_format=OFF keep
    # these codes with no metadata, the precision coming from the schema (in Column.meta).
    TypeSpec(T.TIME, "TIME (old)", Meta.NONE, TIME,
               reference=lambda col: values.make_maria_time_hires(col.meta) if col.meta else values._time_old,
               columnar=columnar.plan_cached, rowgen=_REF, arrow=_const("string"), meta_ok=_fsp_ok,
               width=lambda col: values.MARIA_TIME_BYTES[col.meta], fsp_from_schema=True),
    TypeSpec(T.DATETIME, "DATETIME (old)", Meta.NONE, DATETIME,
               reference=lambda col: (values.make_maria_datetime_hires(col.meta) if col.meta
                                      else values._datetime_old),
               columnar=columnar.plan_cached, rowgen=_REF, arrow=_const("timestamp[us]"), meta_ok=_fsp_ok,
               width=lambda col: values.MARIA_DATETIME_BYTES[col.meta], fsp_from_schema=True),
    TypeSpec(T.TIMESTAMP, "TIMESTAMP (old)", Meta.NONE, TIMESTAMP,
               reference=lambda col: (values.make_maria_timestamp_hires(col.meta) if col.meta
                                      else values._timestamp_old),
               columnar=columnar.plan_cached, rowgen=_REF, arrow=_const("timestamp[us, UTC]"), meta_ok=_fsp_ok,
               width=lambda col: values.MARIA_TIMESTAMP_BYTES[col.meta], fsp_from_schema=True),
    TypeSpec(T.TIME2, "TIME", Meta.BYTE, TIME, reference=lambda col: values.make_time2(col.meta),
               columnar=columnar.plan_time2, rowgen=_REF, arrow=_const("string"), meta_ok=_fsp_ok,
               width=lambda col: 3 + (col.meta + 1) // 2, ddl=("time",), ddl_meta=_ddl_fsp, ddl_old=T.TIME),
    TypeSpec(T.DATETIME2, "DATETIME", Meta.BYTE, DATETIME, reference=lambda col: values.make_datetime2(col.meta),
               columnar=columnar.plan_datetime2, rowgen=rowcodegen.emit_datetime2, arrow=_const("timestamp[us]"),
               meta_ok=_fsp_ok, width=lambda col: 5 + (col.meta + 1) // 2, ddl=("datetime",), ddl_meta=_ddl_fsp,
               ddl_old=T.DATETIME),
    TypeSpec(T.TIMESTAMP2, "TIMESTAMP", Meta.BYTE, TIMESTAMP,
               reference=lambda col: values.make_timestamp2(col.meta), columnar=columnar.plan_timestamp2,
               rowgen=rowcodegen.emit_timestamp2, arrow=_const("timestamp[us, UTC]"), meta_ok=_fsp_ok,
               width=lambda col: 4 + (col.meta + 1) // 2, ddl=("timestamp",), ddl_meta=_ddl_fsp,
               ddl_old=T.TIMESTAMP),
    TypeSpec(T.BIT, "BIT", Meta.LE16, BIT, reference=lambda col: values.make_bit(col.meta),
               columnar=columnar.plan_cached, rowgen=_REF,
               arrow=lambda col: ("decimal128(20, 0)" if (col.meta >> 8) * 8 + (col.meta & 0xFF) >= 64
                                  else "int64"),
               meta_ok=lambda m: (m >> 8) <= 8 and (m & 0xFF) <= 7, width=_bit_width, ddl=("bit",), ddl_meta=_ddl_bit),
    TypeSpec(T.VARCHAR, "VARCHAR", Meta.LE16, TEXT, reference=_text_reference, columnar=columnar.plan_text,
               rowgen=rowcodegen.emit_text, arrow=_text_or_binary, prefix=_char_prefix, charset=True,
               charset_meta=_BOTH, ddl=("varchar", "varbinary"), ddl_meta=_ddl_size, ddl_alias=T.VAR_STRING),
    TypeSpec(T.VAR_STRING, "VARCHAR (VAR_STRING)", Meta.LE16, TEXT, reference=_text_reference,
               columnar=columnar.plan_text, rowgen=rowcodegen.emit_text, arrow=_text_or_binary,
               prefix=_char_prefix, charset=True, charset_meta=_BOTH),
    TypeSpec(T.STRING, "CHAR", Meta.STRING, TEXT, reference=_string_reference, columnar=columnar.plan_string,
               rowgen=rowcodegen.emit_string, arrow=_text_or_binary, prefix=_char_prefix, charset=True,
               charset_meta=_BOTH, ddl=("char", "binary"), ddl_meta=_ddl_size, padded=True),
    TypeSpec(T.ENUM, "ENUM", Meta.BE16, ENUM, reference=lambda col: values.make_enum(col.meta, col.enum_labels),
               columnar=columnar.plan_enum, rowgen=rowcodegen.emit_enum, arrow=_const("string"),
               meta_ok=lambda m: m in (1, 2), width=_meta_prefix, ddl=("enum",),
               ddl_meta=lambda cdef, size: 2 if len(cdef.labels or ()) > 255 else 1),
    TypeSpec(T.SET, "SET", Meta.BE16, SET, reference=lambda col: values.make_set(col.meta, col.set_labels),
               columnar=columnar.plan_cached, rowgen=_REF, arrow=_const("string"), meta_ok=lambda m: 1 <= m <= 8,
               width=_meta_prefix, ddl=("set",), ddl_meta=_ddl_set),
    _blob(T.TINY_BLOB, "TINYBLOB"),
    _blob(T.MEDIUM_BLOB, "MEDIUMBLOB"),
    _blob(T.LONG_BLOB, "LONGBLOB"),
    TypeSpec(T.BLOB, "BLOB/TEXT", Meta.BYTE, TEXT, reference=_blob_reference, columnar=columnar.plan_text,
               rowgen=rowcodegen.emit_blob, arrow=_text_or_binary, meta_ok=_pack_ok, prefix=_meta_prefix,
               charset=True, charset_meta=_BOTH, ddl=tuple(BLOB_PACK),
               ddl_meta=lambda cdef, size: BLOB_PACK[cdef.data_type]),
    TypeSpec(T.JSON, "JSON", Meta.BYTE, JSON, reference=lambda col: values.make_json(col.meta or 4),
               columnar=columnar.plan_json, rowgen=_REF, arrow=_const("string"), meta_ok=_pack_ok,
               prefix=_meta_or_4, ddl=("json",), ddl_meta=_ddl_fixed(4), ddl_alias=T.BLOB),
    TypeSpec(T.GEOMETRY, "GEOMETRY", Meta.BYTE, GEOMETRY,
               reference=lambda col: values.make_length_prefixed(col.meta or 4, None), columnar=columnar.plan_bytes,
               rowgen=_REF, arrow=_const("binary"), meta_ok=_pack_ok, prefix=_meta_or_4, charset_meta=_MARIADB,
               ddl=("geometry", "point", "linestring", "polygon", "multipoint", "multilinestring", "multipolygon",
                    "geometrycollection", "geomcollection"), ddl_meta=_ddl_fixed(4)),
    # MySQL 9's VECTOR (MariaDB's vectors are VARBINARY with the logical type "vector"): always wrapped.
    TypeSpec(T.VECTOR, "VECTOR", Meta.BYTE, VECTOR, reference=_wrapped_reference, columnar=columnar.plan_bytes,
               rowgen=_REF, arrow=_const("list<float32>"), meta_ok=_pack_ok, prefix=_meta_or_4, ddl=("vector",),
               charset_meta=_MYSQL, ddl_meta=_ddl_fixed(4), logical="vector"),
    # MariaDB COMPRESSED columns: always wrapped (the bytes are inflated, then decoded as text or kept as bytes).
    TypeSpec(T.BLOB_COMPRESSED, "BLOB/TEXT COMPRESSED", Meta.BYTE, TEXT, reference=_wrapped_reference,
               columnar=columnar.plan_text, rowgen=_REF, arrow=_text_or_binary, meta_ok=lambda m: 1 <= m <= 4,
               prefix=_meta_prefix, charset=True, charset_meta=_MARIADB, compressed=True),
    TypeSpec(T.VARCHAR_COMPRESSED, "VARCHAR COMPRESSED", Meta.LE16, TEXT, reference=_wrapped_reference,
               columnar=columnar.plan_text, rowgen=_REF, arrow=_text_or_binary, prefix=_char_prefix, charset=True,
               charset_meta=_MARIADB, compressed=True),
    TypeSpec(T.TYPED_ARRAY, "TYPED_ARRAY", Meta.TYPED, None),  # MySQL multi-valued index arrays: not decoded
]

TYPES: dict[int, TypeSpec] = {e.code: e for e in _ENTRIES}
# DDL data type -> the code MySQL logs it with (schema/binlog_types.py adds MariaDB's and old servers' variations).
DDL_TYPES: dict[str, int] = {name: e.code for e in _ENTRIES for name in e.ddl}


_SIGNEDNESS = tuple(frozenset(e.code for e in _ENTRIES if e.signedness[m]) for m in (0, 1))
_CHARSET_META = tuple(frozenset(e.code for e in _ENTRIES if e.charset_meta[m]) for m in (0, 1))


def signedness_types(mariadb: bool) -> frozenset[int]:
    """The column types the SIGNEDNESS bitmap has a bit for, on MariaDB or on MySQL (in column order)."""
    return _SIGNEDNESS[mariadb]


def character_types(mariadb: bool) -> frozenset[int]:
    """The column types the charset metadata has an entry for, on MariaDB or on MySQL (ENUM/SET are separate)."""
    return _CHARSET_META[mariadb]


def ddl_names(value: str) -> frozenset[str]:
    """The DDL data types whose values decode to `value` (INT: tinyint .. bigint, GEOMETRY: geometry, point ...)."""
    return frozenset(name for e in _ENTRIES if e.value == value for name in e.ddl)


@dataclass(frozen=True)
class LogicalType:
    """A type the schema names on top of a binary column (MariaDB INET4/INET6/UUID, vectors), also a DDL type."""

    name: str
    decode: Callable[[bytes], Any]  # the stored bytes -> the value (values.py)
    arrow: str
    text: bool  # values are text, written and compared as text in SQL (the server converts)


LOGICAL: dict[str, LogicalType] = {
    "inet4": LogicalType("inet4", values.inet4_text, "string", True),
    "inet6": LogicalType("inet6", values.inet6_text, "string", True),
    "uuid": LogicalType("uuid", values.uuid_text, "string", True),
    "vector": LogicalType("vector", values.vector_floats, "list<float32>", False),
}


def wrapped_value(col: Column) -> Callable[[bytes], Any] | None:
    """bytes -> value for a column whose stored bytes need one more step (see TypeSpec.compressed), else None.
    Every decoder path (values, rowcodegen, columnar) reads these as length-prefixed bytes and calls this."""
    spec = TYPES.get(col.type)
    if spec is not None and spec.compressed:
        text = values._text_converter(col)
        inflate = values.maria_uncompressed
        return (lambda raw: text(inflate(raw))) if text else inflate
    logical = col.logical or (spec.logical if spec is not None else None)
    if logical is None:
        return None
    fn = LOGICAL[logical].decode
    if spec is not None and spec.padded:
        width = col.meta
        return lambda raw: fn(bytes(raw).ljust(width, b"\0"))
    return fn


def type_of(code: int) -> TypeSpec | None:
    return TYPES.get(code)


def value_kind(col: Column) -> str | None:
    """What `col`'s decoded values are (INT, TEXT, VECTOR, ...; a logical type's name), None if unknown."""
    if col.logical is not None:
        return col.logical
    spec = TYPES.get(col.type)
    return spec.value if spec is not None else None


def arrow_spelling(col: Column) -> str:
    """The Arrow type of `col`'s values, spelled as lake/convert.py reads it (ValueError: no Delta type)."""
    logical = LOGICAL.get(col.logical) if col.logical else None
    if logical is not None:
        return logical.arrow
    spec = TYPES.get(col.type)
    if spec is None or spec.arrow is None:
        raise ValueError(f"column {col.key}: no Delta type for binlog type {col.type}")
    return spec.arrow(col)


# -- decoding: a table map's columns compiled once ---------------------------------------------------------


def _check_meta(col: Column, spec: TypeSpec) -> None:
    """Reject type metadata no server writes, before it shapes a decoder."""
    if spec.meta_ok is not None and not spec.meta_ok(col.meta):
        raise ValueError_(f"column {col.index + 1} has impossible metadata {col.meta} for type {col.type}")


def value_prefix(col: Column) -> int:
    """Bytes of the length in front of a variable-length column's value."""
    spec = TYPES.get(col.type)
    return spec.prefix(col) if spec is not None and spec.prefix is not None else col.meta or 4


def column_decoder(col: Column) -> Decoder:
    """The reference decoder of one column (its type already resolved from STRING metadata by the table map)."""
    spec = TYPES.get(col.type)
    if spec is not None:
        _check_meta(col, spec)
    wrapped = wrapped_value(col)
    if wrapped is not None:
        return values.make_length_prefixed(value_prefix(col), wrapped)
    if spec is None or spec.reference is None:
        raise ValueError_(f"column type {col.type} cannot be decoded")
    return spec.reference(col)


class ColumnCodec:
    """One column of a table map with its type's decoders resolved: the reference decoder (`decode`, built and
    its metadata checked at once), the column-at-a-time plan (`plan(bit)`) and the generated code (`emit`)."""

    __slots__ = ("col", "decode", "merge", "merge_fix", "prefix", "spec", "struct", "width", "wrapped")

    def __init__(self, col: Column) -> None:
        self.col = col
        self.decode = column_decoder(col)  # raises ValueError_ on impossible metadata or an undecodable type
        spec = self.spec = TYPES.get(col.type)  # None only for a wrapped column of an unknown type
        self.wrapped = wrapped_value(col)
        self.prefix = value_prefix(col)
        self.struct = spec.struct[col.signed is False] if spec is not None and spec.struct is not None else None
        self.width = spec.width(col) if spec is not None and spec.width is not None else None
        # rowcodegen reads runs of fixed-width numbers with one struct call
        self.merge = self.struct if self.wrapped is None else None
        self.merge_fix = spec.merge_fix if spec is not None else None

    def plan(self, bit: int) -> Any:
        """columnar._Col: how this column is unpacked and converted when it is present at `bit`."""
        if self.wrapped is not None:
            return columnar.plan_wrapped(self, bit, self.wrapped)
        return self.spec.columnar(self, bit)  # type: ignore[misc]

    def emit(self, g: Any, v: str, ind: int) -> None:
        """rowcodegen: code setting `v` from buf at off and advancing off."""
        if self.wrapped is not None:
            rowcodegen.emit_reference(g, self, v, ind)
        else:
            self.spec.rowgen(g, self, v, ind)  # type: ignore[misc]


def codecs_for(table: TableMap) -> list[ColumnCodec]:
    """The columns of a table map compiled (raises ValueError_ on a column that cannot be decoded)."""
    return [ColumnCodec(c) for c in table.columns]


def plan_column(col: Column, bit: int) -> Any:
    """The columnar plan of one column (raises ValueError_ on impossible metadata)."""
    return ColumnCodec(col).plan(bit)
