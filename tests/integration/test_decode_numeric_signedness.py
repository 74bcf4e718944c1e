"""Signedness of every numeric column, in many column orders, against the server's own SELECT.

MariaDB's SIGNEDNESS metadata has a bit for YEAR (MySQL's does not): a decoder that assumes MySQL's set shifts
the signedness of every numeric column after a YEAR by one. Each table here holds every numeric type, signed and
unsigned, around YEAR, BIT, DECIMAL, FLOAT and DOUBLE, in a seeded random order (plus the order of the report);
rows hold each type's minimum, maximum, zero, random values and NULLs. Both decoder paths (column at a time and
row at a time) must give exactly what SELECT gives, with FULL and MINIMAL metadata (signedness from the TABLE_MAP)
and with NO_LOG metadata (signedness from the CREATE TABLE in the binlog, through the schema timeline).
"""

from __future__ import annotations

import random
import struct
from decimal import Decimal
from pathlib import Path

import pytest

from binlake.binlog import rows
from binlake.binlog.decoder import BinlogDecoder, DecodeOptions
from binlake.binlog.records import RowChange
from binlake.schema.api import build_resolver


def _int_range(bits: int, unsigned: bool) -> tuple[int, int]:
    return (0, (1 << bits) - 1) if unsigned else (-(1 << (bits - 1)), (1 << (bits - 1)) - 1)


def _dec(p: int, s: int, unsigned: bool) -> tuple[Decimal, Decimal]:
    top = "9" * (p - s) + ("." + "9" * s if s else "")
    return (Decimal(0) if unsigned else Decimal("-" + top), Decimal(top))  # no arithmetic: 28-digit context


# (sql type, minimum, maximum, kind)
NUMERIC: list[tuple[str, object, object, str]] = []
for _name, _bits in (("TINYINT", 8), ("SMALLINT", 16), ("MEDIUMINT", 24), ("INT", 32), ("BIGINT", 64)):
    NUMERIC.append((_name, *_int_range(_bits, False), "int"))
    NUMERIC.append((f"{_name} UNSIGNED", *_int_range(_bits, True), "int"))
NUMERIC += [
    ("YEAR", 1901, 2155, "year"),
    ("BIT(1)", 0, 1, "bit"),
    ("BIT(13)", 0, (1 << 13) - 1, "bit"),
    ("BIT(64)", 0, (1 << 64) - 1, "bit"),
    ("DECIMAL(10,2)", *_dec(10, 2, False), "decimal"),
    ("DECIMAL(10,2) UNSIGNED", *_dec(10, 2, True), "decimal"),
    ("DECIMAL(65,30)", *_dec(65, 30, False), "decimal"),
    ("DECIMAL(20,0) UNSIGNED", *_dec(20, 0, True), "decimal"),
    ("FLOAT", -3.4e38, 3.4e38, "float"),
    ("FLOAT UNSIGNED", 0.0, 3.4e38, "float"),
    ("DOUBLE", -1.7976931348623157e308, 1.7976931348623157e308, "double"),
    ("DOUBLE UNSIGNED", 0.0, 1.7976931348623157e308, "double"),
]

# The shape of the report: YEAR, FLOAT, DOUBLE, then integers whose signedness came out shifted by one.
REPORTED_ORDER = ["YEAR", "FLOAT", "DOUBLE", "SMALLINT", "TINYINT UNSIGNED", "MEDIUMINT", "BIGINT UNSIGNED"]


def _random_value(rng: random.Random, lo, hi, kind: str):
    if kind == "decimal":
        scale = -lo.as_tuple().exponent if lo else -hi.as_tuple().exponent
        digits = "".join(rng.choice("0123456789") for _ in range(len(hi.as_tuple().digits)))
        value = Decimal(digits).scaleb(-scale)
        return value if lo == 0 or rng.random() < 0.5 else value.copy_negate()
    if kind in ("float", "double"):
        sign = rng.choice((-1, 1)) if lo < 0 else 1  # (hi - lo) of DOUBLE's range overflows: draw a magnitude
        return sign * rng.choice([rng.uniform(0.0, hi), rng.uniform(0.0, 1e6), hi / 3])
    if kind == "year":
        return rng.choice([0, rng.randint(lo, hi)])
    return rng.choice([rng.randint(lo, hi), rng.randint(max(lo, -300), min(hi, 300))])


def _zero(kind: str):
    return Decimal(0) if kind == "decimal" else 0


def _tables(rng: random.Random, count: int) -> list[list[int]]:
    """Column orders as indexes into NUMERIC: the reported one, then seeded shuffles of all types."""
    types = [t for t, *_ in NUMERIC]
    orders = [[types.index(t) for t in REPORTED_ORDER]]
    for _ in range(count):
        order = list(range(len(NUMERIC)))
        rng.shuffle(order)
        orders.append(order)
    return orders


def _select_expr(name: str, kind: str) -> str:
    if kind == "bit":
        return f"CAST(`{name}` AS UNSIGNED)"
    if kind == "float":
        return f"CAST(`{name}` AS DOUBLE)"
    return f"`{name}`"


def _comparable(value, kind: str):
    if kind == "float" and value is not None:
        return struct.unpack("<f", struct.pack("<f", value))[0]
    return value


def _write_workload(server, db: str, orders: list[list[int]], rng: random.Random) -> dict[str, list]:
    """Creates and fills one table per order; returns each table's columns as (name, kind) with id first."""
    layouts: dict[str, list] = {}
    with server.connect(db) as conn, conn.cursor() as cur:
        for t, order in enumerate(orders):
            table = f"nums{t}"
            cols = [(f"c{i}_{NUMERIC[i][0].split('(')[0].split()[0].lower()}", i) for i in order]
            at = rng.randrange(len(cols) + 1)  # the key column lands anywhere too
            defs = [f"`{n}` {NUMERIC[i][0]} NULL" for n, i in cols]
            defs.insert(at, "`id` INT NOT NULL PRIMARY KEY")
            cur.execute(f"CREATE TABLE `{table}` ({', '.join(defs)})")
            names = [n for n, _ in cols]
            names.insert(at, "id")
            kinds = [NUMERIC[i][3] for _, i in cols]
            kinds.insert(at, "int")
            layouts[table] = list(zip(names, kinds, strict=True))
            specs = [NUMERIC[i] for _, i in cols]
            rowsets = [
                [lo for _, lo, _, _ in specs],
                [hi for _, _, hi, _ in specs],
                [_zero(k) for *_, k in specs],
                [None] * len(specs),
                *[[_random_value(rng, lo, hi, k) for _, lo, hi, k in specs] for _ in range(6)],
            ]
            placeholders = ", ".join(["%s"] * (len(specs) + 1))
            quoted = ", ".join(f"`{n}`" for n in [*(n for n, _ in cols), "id"])
            sql = f"INSERT INTO `{table}` ({quoted}) VALUES ({placeholders})"
            for key, values in enumerate(rowsets, start=1):
                cur.execute(sql, [*values, key])
            # Updates swap extremes (before and after images), a delete leaves a before image only.
            sets = ", ".join(f"`{n}` = %s" for n, _ in cols)
            cur.execute(f"UPDATE `{table}` SET {sets} WHERE id = 1", [hi for _, _, hi, _ in specs])
            cur.execute(f"UPDATE `{table}` SET {sets} WHERE id = 2", [lo for _, lo, _, _ in specs])
            cur.execute(f"DELETE FROM `{table}` WHERE id = %s", [rng.randint(5, len(rowsets))])
    return layouts


def _server_rows(server, db: str, table: str, layout: list) -> dict[int, list]:
    exprs = ", ".join(_select_expr(n, k) for n, k in layout)
    key = [n for n, _ in layout].index("id")
    with server.connect(db) as conn, conn.cursor() as cur:
        cur.execute(f"SELECT {exprs} FROM `{table}`")
        return {row[key]: list(row) for row in cur.fetchall()}


def _replay(changes: list[RowChange], table: str, key: int) -> dict[int, list]:
    state: dict[int, list] = {}
    for c in changes:
        if c.table.table != table:
            continue
        if c.before is not None:
            assert list(c.before) == state.pop(c.before[key]), f"{c}: before image differs from the row inserted"
        if c.after is not None:
            state[c.after[key]] = list(c.after)
    return state


def _decode(files: list[Path], start: int, db: str, resolver, columnar: bool, monkeypatch) -> list[RowChange]:
    monkeypatch.setattr(rows, "COLUMNAR", columnar)
    opts = DecodeOptions(start_position=start, databases={db}, table_resolver=resolver)
    return [r for r in BinlogDecoder(opts).decode_files(files) if isinstance(r, RowChange)]


@pytest.mark.parametrize("metadata", ["FULL", "MINIMAL", "NO_LOG"])
def test_numeric_signedness_in_every_column_order_equals_select(mariadb_servers, metadata: str, tmp_path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    server = mariadb_servers.get(metadata)
    db = f"signedness_{metadata.lower()}"
    with server.connect() as conn, conn.cursor() as cur:
        cur.execute(f"DROP DATABASE IF EXISTS `{db}`")
        cur.execute(f"CREATE DATABASE `{db}`")
        cur.execute("SHOW MASTER STATUS")
        start_file, start_pos = cur.fetchone()[:2]
    rng = random.Random(f"signedness-{metadata}")
    layouts = _write_workload(server, db, _tables(rng, 5), rng)
    files = server.flush_logs()
    files = files[[f.name for f in files].index(start_file):]

    # NO_LOG writes no SIGNEDNESS: the CREATE TABLEs in the binlog (the schema timeline) or the server's own
    # SHOW CREATE TABLE (a directory of <db>.sql as --schemas) must give it.
    sql_dir = tmp_path / "schemas"
    sql_dir.mkdir()
    with server.connect(db) as conn, conn.cursor() as cur:
        ddl = []
        for table in layouts:
            cur.execute(f"SHOW CREATE TABLE `{table}`")
            ddl.append(cur.fetchone()[1] + ";")
    (sql_dir / f"{db}.sql").write_text("\n".join(ddl))
    resolvers = [build_resolver(files), build_resolver(files, sql_dir)]
    if metadata != "NO_LOG":
        resolvers.append(None)
    for resolver in resolvers:
        for columnar in (True, False):
            changes = _decode(files, start_pos, db, resolver, columnar, monkeypatch)
            assert {c.table.table for c in changes} == set(layouts)
            for table, layout in layouts.items():
                kinds = [k for _, k in layout]
                key = [n for n, _ in layout].index("id")
                decoded = _replay(changes, table, key)
                expected = _server_rows(server, db, table, layout)
                assert decoded.keys() == expected.keys()
                for k, row in expected.items():
                    ours = [_comparable(v, kind) for v, kind in zip(decoded[k], kinds, strict=True)]
                    diffs = {layout[i][0]: (ours[i], row[i]) for i in range(len(row)) if ours[i] != row[i]}
                    assert not diffs, (f"{metadata} columnar={columnar} resolver={resolver is not None} "
                                       f"{table} id={k}: (decoded, server) differ: {diffs}")
