"""The column-type registry (binlake/binlog/coltypes.py): every type code the decoder knows has a complete entry,
the entries agree with each other and with the decoders, and the consumers read the registry instead of keeping
their own per-type chains."""

from __future__ import annotations

import ast
import dataclasses
import random
import struct
from pathlib import Path

import pyarrow as pa
import pytest

from binlake.binlog import coltypes
from binlake.binlog.coltypes import LOGICAL, TYPES, Meta, codecs_for, column_decoder, plan_column
from binlake.binlog.constants import ColumnType as T
from binlake.binlog.fde import default_format_description
from binlake.binlog.output import image_to_dict
from binlake.binlog.rowcodegen import compile_image_decoder
from binlake.binlog.rows import parse_table_map
from binlake.binlog.tablemap import Column, TableMap
from binlake.binlog.values import ValueError_
from binlake.lake.convert import arrow_type
from binlake.schema.binlog_types import binlog_shape, table_map_for
from binlake.schema.ddl import parse_create_table
from binlake.testing.binlog_writer import ENCODERS, _table_map_body
from tests.conftest import PROJECT_ROOT

DECODED = {code: spec for code, spec in TYPES.items() if spec.decodable}
# Codes the TABLE_MAP can name that binlake reads the metadata of but cannot decode values of (a clear error).
NOT_DECODED = {T.DECIMAL, T.NULL, T.TYPED_ARRAY}


def _column(code: int, rnd: random.Random, index: int = 0) -> Column:
    """A column of type `code` with metadata a server writes, varied (signedness, sizes, charsets, labels)."""
    meta = {
        T.NEWDECIMAL: rnd.choice([(10 << 8) | 2, (5 << 8), (38 << 8) | 10, (65 << 8) | 30, (1 << 8)]),
        T.FLOAT: 4, T.DOUBLE: 8,
        T.TIME2: rnd.randint(0, 6), T.DATETIME2: rnd.randint(0, 6), T.TIMESTAMP2: rnd.randint(0, 6),
        T.TIME: rnd.randint(0, 6), T.DATETIME: rnd.randint(0, 6), T.TIMESTAMP: rnd.randint(0, 6),
        T.BIT: rnd.choice([0x0001, 0x0100, 0x0803, 0x0800, 0x0007]),
        T.VARCHAR: rnd.choice([10, 255, 256, 4000]), T.VAR_STRING: rnd.choice([10, 300]),
        T.VARCHAR_COMPRESSED: rnd.choice([11, 301]),
        T.STRING: rnd.choice([0, 4, 16, 255, 300]),
        T.ENUM: rnd.choice([1, 2]), T.SET: rnd.choice([1, 2, 3, 4, 8]),
        T.BLOB: rnd.randint(1, 4), T.TINY_BLOB: 1, T.MEDIUM_BLOB: 3, T.LONG_BLOB: 4,
        T.BLOB_COMPRESSED: rnd.randint(1, 4), T.JSON: 4, T.GEOMETRY: 4, T.VECTOR: 4,
    }.get(code, 0)
    labels = [f"l{i}" for i in range(rnd.randint(1, 5))]
    return Column(index, code, meta, signed=rnd.choice([None, True, False]),
                  collation=rnd.choice([None, 63, 45, 8]), enum_labels=labels, set_labels=labels)


def test_every_known_type_code_has_a_complete_entry() -> None:
    assert set(TYPES) - set(DECODED) == NOT_DECODED
    for code, spec in TYPES.items():
        assert spec.code == code and isinstance(spec.meta, Meta) and spec.name
        if code in NOT_DECODED:
            assert spec.value is None and spec.columnar is None and spec.rowgen is None and spec.arrow is None
            continue
        missing = [f for f in ("value", "reference", "columnar", "rowgen", "arrow") if getattr(spec, f) is None]
        assert not missing, f"{spec.name}: no {missing}"
        # A value is either fixed-width (its width known) or length-prefixed (its prefix known), never both.
        assert (spec.width is None) != (spec.prefix is None), spec.name
        assert bool(spec.ddl) == (spec.ddl_meta is not None), spec.name  # DDL names and their metadata
        if spec.struct is not None:
            assert spec.width is not None and all(struct.calcsize("<" + c) == spec.width(Column(0, code)) for c in
                                                  spec.struct), spec.name
    # Every code of the decoder's type enum is either in the registry or one no server writes in a TABLE_MAP.
    assert {int(t) for t in T} - set(TYPES) == {T.INVALID, T.BOOL}


@pytest.mark.parametrize("code", sorted(DECODED), ids=lambda c: T(c).name)
def test_every_entry_decodes_plans_and_maps(code: int) -> None:
    """For varied columns of each type: the reference decoder, the columnar plan and the generated decoder are
    built, the Arrow type resolves, and a fixed-width value's bytes decode to exactly its width."""
    rnd = random.Random(code)
    for _ in range(12):
        col = _column(code, rnd)
        decode = column_decoder(col)
        plan = plan_column(col, 1)
        assert isinstance(arrow_type(col), pa.DataType)
        codec = codecs_for(TableMap(1, "db", "t", [col]))[0]
        if codec.width is not None and codec.wrapped is None:
            raw = bytes(rnd.randrange(256) for _ in range(codec.width))
            try:
                _value, end = decode(raw + b"\xff" * 8, 0)
            except ValueError_:
                continue  # an impossible stored value (a DECIMAL digit group over 9 digits, ...)
            assert end == codec.width
            assert plan.codes is not None and struct.calcsize("<" + "".join(plan.codes)) == codec.width
        else:
            assert plan.codes is None and plan.prefix == codec.prefix
        fn = compile_image_decoder(TableMap(1, "db", "t", [col]), 1, codecs=[codec])
        assert fn.get(0).source.startswith("def image(")


def test_logical_types_map_to_arrow() -> None:
    for name, logical in LOGICAL.items():
        col = Column(0, T.STRING if name != "vector" else T.VARCHAR, 16)
        col.logical = name
        assert str(arrow_type(col)) in ("string", "list<element: float>")
        assert logical.text == (arrow_type(col) == pa.string())


def test_impossible_metadata_is_rejected_by_the_entry() -> None:
    for col in (Column(0, T.DATETIME2, 7), Column(0, T.BLOB, 5), Column(0, T.ENUM, 3), Column(0, T.SET, 9),
                Column(0, T.BIT, 0x0908), Column(0, T.BLOB_COMPRESSED, 0)):
        with pytest.raises(ValueError_, match="impossible metadata"):
            column_decoder(col)
    for code in [*sorted(NOT_DECODED), T.INVALID, 100]:
        with pytest.raises(ValueError_, match="cannot be decoded"):
            column_decoder(Column(0, code))


# -- the consumers read the registry -----------------------------------------------------------------------

# Modules that once spelled out per-type chains; each now reads binlake/binlog/coltypes.py.
CONSUMERS = ["binlake/binlog/rows.py", "binlake/binlog/values.py", "binlake/binlog/columnar.py",
             "binlake/binlog/rowcodegen.py", "binlake/binlog/output.py", "binlake/binlog/decoder.py",
             "binlake/binlog/tablemap.py", "binlake/lake/convert.py", "binlake/schema/guard.py",
             "binlake/schema/binlog_types.py"]


def _type_code_tests(path: Path) -> list[str]:
    """Comparisons with a column type code constant (`t == T.JSON`, `col.type in (T.ENUM, T.SET)`) in a module:
    the per-type chains the registry replaces."""
    found = []
    tree = ast.parse(path.read_text(encoding="utf-8"))
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare):
            names = {n.value.id for n in ast.walk(node)
                     if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name) and n.attr.isupper()}
            if names & {"T", "ColumnType"}:
                found.append(f"{path.name}:{node.lineno}: {ast.unparse(node)}")
    return found


@pytest.mark.parametrize("module", CONSUMERS)
def test_consumers_keep_no_type_code_chains(module: str) -> None:
    found = _type_code_tests(PROJECT_ROOT / module)
    # rows.py: the TABLE_MAP's optional metadata is laid out by type (labels of ENUM and SET columns, geometry
    # types, vector dimensions, JSON diffs, MariaDB's YEAR signedness bit: the metadata format's own structure).
    allowed = {"rows.py": ("ENUM", "SET", "JSON", "T.YEAR", "T.GEOMETRY", "T.VECTOR")}
    left = [f for f in found if not any(a in f for a in allowed.get(Path(module).name, ()))]
    assert not left, f"{module} tests column type codes itself; read binlake/binlog/coltypes.py instead: {left}"


def test_the_test_writer_encodes_registry_types() -> None:
    """The test binlog writer (binlake/testing, above the product's layers, so it keeps its own encoder table)
    encodes only types the registry decodes, and writes their metadata by the registry's layout: a TABLE_MAP it
    writes reads back with the same types and metadata."""
    assert set(ENCODERS) <= set(DECODED)
    rnd = random.Random(3)
    cols = [_column(code, rnd, i) for i, code in enumerate(sorted(ENCODERS))]
    for c in cols:
        c.name = f"c{c.index}"
        if c.type in (T.JSON, T.GEOMETRY):
            c.meta = 4
        if c.type == T.SET and c.meta not in (1, 2, 3, 4, 8):
            c.meta = 8
        if c.type == T.BIT:
            c.meta = 0x0803
        if c.type == T.STRING:
            c.meta = min(c.meta, 255) or 4
    body = _table_map_body(TableMap(7, "db", "t", cols), full=True)
    tm = parse_table_map(body, 0, len(body), default_format_description())
    assert [(c.type, c.meta) for c in tm.columns] == [(c.type, c.meta) for c in cols]


def test_the_registry_is_read_when_a_table_map_is_compiled_not_per_row() -> None:
    """The decoders' hot loops never consult the registry: the generated code and the columnar plans hold the
    resolved functions only."""
    rnd = random.Random(7)
    table = TableMap(1, "db", "t", [_column(code, rnd, i) for i, code in enumerate(sorted(DECODED))])
    codecs = codecs_for(table)
    present = (1 << len(table.columns)) - 1
    fn = compile_image_decoder(table, present, codecs=codecs)
    source = fn.get(0).source
    assert "TYPES" not in source and "coltypes" not in source and "spec" not in source
    assert all(coltypes.TYPES[c.type] is codec.spec for c, codec in zip(table.columns, codecs, strict=True))


@pytest.mark.parametrize("name", sorted(coltypes.DDL_TYPES))
def test_ddl_spelling_parses_and_maps_back_to_the_entry(name: str) -> None:
    """Each DDL type an entry names is one the DDL parser reads, and MySQL's binlog shape of such a column is the
    entry's code, its decoded values the entry's Arrow type."""
    args = {"varchar": "(20)", "varbinary": "(20)", "enum": "('a','b')", "set": "('a','b')", "decimal": "(12,3)",
            "numeric": "(12,3)", "bit": "(9)", "vector": "(3)", "datetime": "(3)", "time": "(2)", "char": "(5)"}
    table = parse_create_table(f"CREATE TABLE t (c {name.upper()}{args.get(name, '')}) DEFAULT CHARSET=utf8mb4",
                               "db")
    cdef = table.columns[0]
    shape = binlog_shape(cdef, mariadb=False)
    assert shape.type == coltypes.DDL_TYPES[name], (name, cdef.data_type)
    tm = table_map_for(table, mariadb=False)
    assert tm.columns[0].type == shape.type
    assert isinstance(arrow_type(tm.columns[0]), pa.DataType)
    column_decoder(tm.columns[0])


def test_consumers_follow_a_changed_entry(monkeypatch: pytest.MonkeyPatch) -> None:
    """Changing one entry changes what every consumer does with the type: proof that they read the registry."""
    year = Column(0, T.YEAR, 0, name="y")
    table = TableMap(1, "db", "t", [year])
    assert str(arrow_type(year)) == "int16" and column_decoder(year)(b"\x7b", 0) == (2023, 1)
    patched = dataclasses.replace(TYPES[T.YEAR], arrow=lambda col: "int32", value=coltypes.INT,
                                  reference=lambda col: lambda buf, off: (buf[off], off + 1),
                                  columnar=lambda codec, bit: plan_column(Column(0, T.TINY, signed=False), bit),
                                  rowgen=TYPES[T.TINY].rowgen, merge_fix=None)
    monkeypatch.setitem(TYPES, T.YEAR, patched)
    assert str(arrow_type(year)) == "int32"  # lake/convert.py
    assert column_decoder(year)(b"\x7b", 0) == (123, 1)  # the reference decoder
    assert plan_column(year, 1).vec([[123]]) == [123]  # the columnar planner
    row = compile_image_decoder(table, 1, codecs=codecs_for(table))(b"\x00\x7b", 0)[0]
    assert row == [123]  # the generated decoder
    float_col = Column(0, T.FLOAT, 4, name="f")
    assert image_to_dict(TableMap(1, "db", "t", [float_col]), [0.1 + 2**-30])["f"] == 0.1  # FLOAT: float32 text
    monkeypatch.setitem(TYPES, T.FLOAT, dataclasses.replace(TYPES[T.FLOAT], value=coltypes.FLOAT64))
    assert image_to_dict(TableMap(1, "db", "t", [float_col]), [0.1 + 2**-30])["f"] == 0.1 + 2**-30  # output.py
    cdef = parse_create_table("CREATE TABLE t (y YEAR)", "db").columns[0]
    monkeypatch.setitem(TYPES, T.YEAR, dataclasses.replace(patched, ddl_meta=lambda c, size: 7))
    assert binlog_shape(cdef).meta == 7  # schema/binlog_types.py
