"""Vectors decode to lists of floats: MySQL 9's VECTOR type (a real server's file) and MariaDB 11.7+'s VECTOR(n),
which the binlog stores as VARBINARY(4n) so that only the schema (replayed DDL here) says it is a vector. JSON prints
the floats, SQL writes the exact bytes back, the lake maps them to list<float32>."""

from __future__ import annotations

import io
import json
import random
import struct

import pytest

from binlake.binlog import rows
from binlake.binlog.api import decode_to
from binlake.binlog.constants import ColumnType as T
from binlake.binlog.decoder import BinlogDecoder, DecodeOptions
from binlake.binlog.output import float32_value
from binlake.binlog.records import RowChange
from binlake.lake.convert import VECTOR, ConversionStats, arrow_type, to_arrow
from binlake.schema.api import build_resolver
from binlake.testing.binlog_writer import BinlogWriter, column


def _f32(x: float) -> float:
    return struct.unpack("<f", struct.pack("<f", x))[0]


@pytest.mark.parametrize("columnar", [True, False])
def test_mysql9_vector_fixture(fixture_binlogs, monkeypatch, columnar: bool) -> None:
    monkeypatch.setattr(rows, "COLUMNAR", columnar)
    path = fixture_binlogs / "blackbeam__rust_mysql_common" / "vector.binlog"
    raw = path.read_bytes()
    changes = [c for c in BinlogDecoder().decode_files([path]) if isinstance(c, RowChange)]
    assert changes
    vectors = 0
    for c in changes:
        image = c.after if c.after is not None else c.before
        for col, value in zip(c.table.columns, image, strict=True):
            if col.type != T.VECTOR or value is None:
                continue
            vectors += 1
            # As many floats as the TABLE_MAP's VECTOR_DIMENSIONALITY declares for the column ...
            assert isinstance(value, list) and len(value) == col.vector_dimension
            # ... whose little-endian bytes are in the file as stored ...
            assert struct.pack(f"<{len(value)}f", *value) in raw
            # ... and which are the short decimals a person typed (another byte order would give no such numbers).
            assert all(len(repr(float32_value(x)).replace("-", "").replace(".", "").strip("0")) <= 4 for x in value)
            assert arrow_type(col) == VECTOR
    assert vectors >= 10
    # JSON: lists of numbers; SQL: the vector's exact bytes.
    out = io.StringIO()
    decode_to([path], out, "jsonl")
    docs = [json.loads(line) for line in out.getvalue().splitlines()]
    assert [d["after"]["vector_column"] for d in docs if d["after"]] == [
        [float32_value(x) for x in c.after[1]] for c in changes if c.after is not None]
    sql = io.StringIO()
    decode_to([path], sql, "sql")
    first = changes[0].after[1]
    assert "X'" + struct.pack(f"<{len(first)}f", *first).hex() + "'" in sql.getvalue()


@pytest.mark.parametrize("metadata", ["FULL", "MINIMAL"])
@pytest.mark.parametrize("columnar", [True, False])
def test_mariadb_vector_known_from_the_schema(tmp_path, monkeypatch, metadata: str, columnar: bool) -> None:
    monkeypatch.setattr(rows, "COLUMNAR", columnar)
    rng = random.Random(f"vector-{metadata}")
    dims = rng.randint(1, 40)
    path = tmp_path / "mariadb-bin.000001"
    expected = []
    with BinlogWriter(str(path), server_version="11.8.2-MariaDB-log", row_metadata=metadata,
                      timestamp=1_700_000_000) as w:
        w.query(f"CREATE TABLE emb (id INT NOT NULL PRIMARY KEY, e VECTOR({dims}) NOT NULL, label VARCHAR(10))",
                "ai")
        tm = w.define_table(7, "ai", "emb", [column("int", "id", 0, False),
                                             column(f"varbinary({4 * dims})", "e", 1, False),
                                             column("varchar(10)", "label", 2)], [0])
        with w.transaction() as tx:
            for key in range(1, 30):
                vec = [_f32(rng.choice([rng.uniform(-1, 1), rng.uniform(-1e30, 1e30), 0.0, -0.0]))
                       for _ in range(dims)]
                expected.append([key, vec, rng.choice([None, f"l{key}"])])
                tx.insert(tm, [[k, struct.pack(f"<{dims}f", *v), lbl] for k, v, lbl in [expected[-1]]])
    resolver = build_resolver([path])
    changes = [c for c in BinlogDecoder(DecodeOptions(table_resolver=resolver)).decode_files([path])
               if isinstance(c, RowChange)]
    assert [list(c.after) for c in changes] == expected
    col = changes[0].table.columns[1]
    assert col.logical == "vector"
    arr = to_arrow([c.after[1] for c in changes], col, "ai.emb.e", ConversionStats())
    assert arr.type == VECTOR and arr.to_pylist() == [e[1] for e in expected]
    sql = io.StringIO()
    decode_to([path], sql, "sql", DecodeOptions(table_resolver=build_resolver([path])))
    assert "X'" + struct.pack(f"<{dims}f", *expected[0][1]).hex() + "'" in sql.getvalue()
    # Without a schema nothing says it is a vector: the stored bytes.
    if metadata == "FULL":
        plain = [c for c in BinlogDecoder().decode_files([path]) if isinstance(c, RowChange)]
        assert plain[0].after[1] == struct.pack(f"<{dims}f", *expected[0][1])
