"""The bootstrap's value mapping is the binlog path's: seeded random rows over many column types (integers signed
and unsigned at their limits, DECIMAL up to 65 digits, FLOAT/DOUBLE, BIT, YEAR, DATE/DATETIME/TIMESTAMP/TIME with
fractions, zero and partial dates, text in several character sets, binary, ENUM/SET, JSON, INET4/INET6/UUID,
NULLs) are written once; a lake bootstrapped from the table (Arrow reader and row reader) and a lake ingested
from the binlog that wrote them must hold the same Delta types and the same values."""

from __future__ import annotations

import datetime as dt
import json
import random
from pathlib import Path

import pytest

import binlake.lake.chunkread as chunkread
from binlake.lake.bootstrap import run_bootstrap
from binlake.lake.engines import get_engine
from binlake.lake.ingest import IngestOptions
from binlake.lake.layout import LakeLayout
from binlake.quality.stages import run_ingest
from binlake.settings import QualityConfig

DB = "boot_values"
COLUMNS = [
    ("ti", "TINYINT", lambda r: r.choice([-128, 127, 0, r.randint(-128, 127)])),
    ("tiu", "TINYINT UNSIGNED", lambda r: r.choice([0, 255, r.randint(0, 255)])),
    ("si", "SMALLINT", lambda r: r.randint(-32768, 32767)),
    ("siu", "SMALLINT UNSIGNED", lambda r: r.choice([65535, r.randint(0, 65535)])),
    ("mi", "MEDIUMINT", lambda r: r.choice([-8388608, r.randint(-8388608, 8388607)])),
    ("miu", "MEDIUMINT UNSIGNED", lambda r: r.choice([16777215, r.randint(0, 16777215)])),
    ("i", "INT", lambda r: r.choice([-2**31, 2**31 - 1, r.randint(-2**31, 2**31 - 1)])),
    ("iu", "INT UNSIGNED", lambda r: r.choice([2**32 - 1, r.randint(0, 2**32 - 1)])),
    ("bi", "BIGINT", lambda r: r.choice([-2**63, 2**63 - 1, r.randint(-2**63, 2**63 - 1)])),
    ("biu", "BIGINT UNSIGNED", lambda r: r.choice([2**64 - 1, 2**63, r.randint(0, 2**64 - 1)])),
    ("d1", "DECIMAL(10,2)", lambda r: f"{r.randint(-10**8 + 1, 10**8 - 1)}.{r.randint(0, 99):02d}"),
    ("d2", "DECIMAL(38,10)", lambda r: f"{r.choice('-+')}{r.randint(0, 10**28 - 1)}.{r.randint(0, 10**10 - 1):010d}"),
    ("d3", "DECIMAL(65,30)", lambda r: f"{r.choice('-+')}{r.randint(0, 10**35 - 1)}.{r.randint(0, 10**30 - 1):030d}"),
    ("d4", "DECIMAL(5,0) UNSIGNED", lambda r: r.randint(0, 99999)),
    ("f", "FLOAT", lambda r: r.choice([0.1, -3.4e38, 1.17549435e-38, r.uniform(-1e6, 1e6), r.random()])),
    ("db", "DOUBLE", lambda r: r.choice([0.1, 1e308, -2.2250738585072014e-308, r.uniform(-1e15, 1e15)])),
    ("b1", "BIT(1)", lambda r: r.randint(0, 1)),
    ("b13", "BIT(13)", lambda r: r.randint(0, 2**13 - 1)),
    ("b64", "BIT(64)", lambda r: r.choice([2**64 - 1, r.randint(0, 2**64 - 1)])),
    ("y", "YEAR", lambda r: r.choice([1901, 2155, r.randint(1901, 2155)])),
    ("dd", "DATE", lambda r: r.choice(["0000-00-00", "2020-00-15", "2020-03-00", "1000-01-01", "9999-12-31",
                                       _date(r)])),
    ("dt0", "DATETIME", lambda r: r.choice(["0000-00-00 00:00:00", f"{_date(r)} {_clock(r)}"])),
    ("dt6", "DATETIME(6)", lambda r: f"{_date(r)} {_clock(r)}.{r.randint(0, 999999):06d}"),
    ("ts3", "TIMESTAMP(3) NULL", lambda r: r.choice(["0000-00-00 00:00:00", "2038-01-19 03:14:07.999",
                                                    _timestamp(r)])),
    ("tm", "TIME", lambda r: f"{r.choice('-+')}{r.randint(0, 838)}:{r.randint(0, 59):02d}:{r.randint(0, 59):02d}"),
    ("tm4", "TIME(4)", lambda r: f"{r.choice('-+')}{r.randint(0, 838)}:{r.randint(0, 59):02d}:"
                                 f"{r.randint(0, 59):02d}.{r.randint(0, 9999):04d}"),
    ("c", "CHAR(10)", lambda r: _text(r, 10, "abc éü")),
    ("vu", "VARCHAR(40)", lambda r: _text(r, 40, "aZ09 \t\n\\'\"é漢字😀")),
    ("vl", "VARCHAR(20) CHARACTER SET latin1", lambda r: _text(r, 20, "abcéèàç ")),
    ("vg", "VARCHAR(20) CHARACTER SET gbk", lambda r: _text(r, 20, "ab漢字中文")),
    ("tx", "TEXT", lambda r: _text(r, 300, "lorem ipsum ü\n")),
    ("bn", "BINARY(6)", lambda r: bytes(r.randint(0, 255) for _ in range(r.randint(0, 6)))),
    ("vb", "VARBINARY(30)", lambda r: bytes(r.randint(0, 255) for _ in range(r.randint(0, 30)))),
    ("bl", "BLOB", lambda r: bytes(r.randint(0, 255) for _ in range(r.randint(0, 500)))),
    ("en", "ENUM('red','green','blue','ü')", lambda r: r.choice(["red", "green", "blue", "ü"])),
    ("st", "SET('a','b','c','d')", lambda r: ",".join(x for x in "abcd" if r.random() < 0.5)),
    ("js", "JSON", lambda r: json.dumps({"k": r.randint(0, 99), "s": _text(r, 8, "xyé"), "l": [1, None, True]})),
    ("ip4", "INET4", lambda r: ".".join(str(r.randint(0, 255)) for _ in range(4))),
    ("ip6", "INET6", lambda r: ":".join(f"{r.randint(0, 65535):x}" for _ in range(8))),
    ("uu", "UUID", lambda r: "%08x-%04x-%04x-%04x-%012x" % (r.getrandbits(32), r.getrandbits(16),
                                                            r.getrandbits(16), r.getrandbits(16),
                                                            r.getrandbits(48))),
]


def _date(r: random.Random) -> str:
    return (dt.date(1000, 1, 1) + dt.timedelta(days=r.randint(0, 3_287_000))).isoformat()


def _clock(r: random.Random) -> str:
    return f"{r.randint(0, 23):02d}:{r.randint(0, 59):02d}:{r.randint(0, 59):02d}"


def _timestamp(r: random.Random) -> str:
    at = dt.datetime(1970, 1, 2) + dt.timedelta(seconds=r.randint(0, 2_140_000_000))
    return f"{at:%Y-%m-%d %H:%M:%S}.{r.randint(0, 999):03d}"


def _text(r: random.Random, n: int, alphabet: str) -> str:
    return "".join(r.choice(alphabet) for _ in range(r.randint(0, n)))


def _fill(server, seed: int, rows: int) -> None:
    rng = random.Random(seed)
    names = [n for n, _, _ in COLUMNS]
    with server.connect() as conn, conn.cursor() as cur:
        cur.execute("SET SESSION sql_mode = ''")  # zero and partial dates, as legacy applications write them
        cur.execute(f"CREATE TABLE {DB}.vals (id INT PRIMARY KEY, "
                    + ", ".join(f"`{n}` {t}" for n, t, _ in COLUMNS) + ") DEFAULT CHARSET utf8mb4")
        sql = (f"INSERT INTO {DB}.vals (id, {', '.join(f'`{n}`' for n in names)}) "
               f"VALUES (%s, {', '.join(['%s'] * len(names))})")
        for i in range(1, rows + 1):
            null_share = rng.choice([0.0, 0.2, 1.0])
            cur.execute(sql, [i, *(None if rng.random() < null_share else make(rng) for _, _, make in COLUMNS)])


def _lake_table(lake, table: str = "vals", history: bool = False):
    layout = LakeLayout(str(lake))
    path = layout.history_path(DB, table) if history else layout.current_path(DB, table)
    return get_engine().read(path)


def _typed(table, names):
    """The typed columns, rows ordered by id (metadata columns differ by design: position, op, commit time)."""
    return table.select(["id", *names]).sort_by("id")


@pytest.mark.parametrize("seed", [3, 41])
def test_bootstrapped_rows_equal_the_same_rows_written_through_the_binlog(mariadb_servers, tmp_path, monkeypatch,
                                                                         seed) -> None:
    server = mariadb_servers.get("FULL")
    with server.connect() as conn, conn.cursor() as cur:
        cur.execute(f"DROP DATABASE IF EXISTS {DB}")
        cur.execute(f"CREATE DATABASE {DB}")
    first = server.flush_logs()[-1]
    _fill(server, seed, 300)
    files = [str(f) for f in server.flush_logs() if str(f) >= str(first)]
    run_ingest(IngestOptions(lake=str(tmp_path / "binlog"), files=files, databases={DB},
                             quality=QualityConfig(enabled=False)))
    fast = run_bootstrap(server.uri, [(DB, "vals")], str(tmp_path / "arrow"), chunk_rows=30, part_rows=20,
                         readers=4)  # readers count conversions at once
    monkeypatch.setattr(chunkread, "connectorx", None)  # the row-by-row reader
    slow = run_bootstrap(server.uri, [(DB, "vals")], str(tmp_path / "rows"), chunk_rows=1000)
    assert fast["rows"] == slow["rows"] == 300 and fast["chunks"] >= 4
    # Zero and partial dates have no Delta form on either path: null, and counted.
    assert fast["conversions"] == slow["conversions"] and fast["conversions"]["zero_date:boot_values.vals.dd"] > 0

    names = [n for n, _, _ in COLUMNS]
    binlog = _lake_table(tmp_path / "binlog")
    assert binlog.num_rows == 300
    for lake in ("arrow", "rows"):
        loaded = _lake_table(tmp_path / lake)
        assert loaded.schema == binlog.schema, lake  # same Delta types, same metadata columns
        expected, got = _typed(binlog, names), _typed(loaded, names)
        for name in names:  # column by column, for a readable failure
            assert got.column(name).to_pylist() == expected.column(name).to_pylist(), f"{lake}: {name}"
        history = _lake_table(tmp_path / lake, history=True)
        assert history.schema == _lake_table(tmp_path / "binlog", history=True).schema, lake
        assert set(history.column("_op").to_pylist()) == {"snapshot"}
        assert _typed(history, names) == expected


def test_files_mixing_codecs_read_the_same_in_delta_rs_and_delta_spark(mariadb_servers, tmp_path, spark) -> None:
    """A bootstrap leaves uncompressed the columns snappy does not shrink (staging.ColumnCodecs: hex digests here)
    and keeps snappy on the others, and leaves the all-null `_before` out of its history files: both Delta readers
    read those files, and read the server's values (and `_before` as null)."""
    import pyarrow.parquet as pq

    from binlake.lake.engines.deltaspark import DeltaSparkEngine

    server = mariadb_servers.get("FULL")
    rng = random.Random(5)
    with server.connect() as conn, conn.cursor() as cur:
        cur.execute(f"DROP DATABASE IF EXISTS {DB}")
        cur.execute(f"CREATE DATABASE {DB}")
        cur.execute(f"CREATE TABLE {DB}.mixed (id INT PRIMARY KEY, digest CHAR(32), words VARCHAR(200), "
                    "amount DECIMAL(10,2), at DATETIME(6))")
        cur.executemany(f"INSERT INTO {DB}.mixed VALUES (%s, %s, %s, %s, %s)", [
            (i, f"{rng.getrandbits(128):032x}", rng.choice(["ab ", "cd "]) * rng.randint(10, 60),
             f"{rng.randint(-10**7, 10**7)}.{rng.randint(0, 99):02d}", f"{_date(rng)} {_clock(rng)}.123456")
            for i in range(1, 401)])
    run_bootstrap(server.uri, [(DB, "mixed")], str(tmp_path), chunk_rows=100, part_rows=50, readers=1)
    layout = LakeLayout(str(tmp_path))
    delta_spark = DeltaSparkEngine(spark)
    with server.connect(DB) as conn, conn.cursor() as cur:
        cur.execute("SELECT id, digest, words, amount, at FROM mixed ORDER BY id")
        expected = [dict(zip(["id", "digest", "words", "amount", "at"], r, strict=True)) for r in cur.fetchall()]
    for path in (layout.current_path(DB, "mixed"), layout.history_path(DB, "mixed")):
        codecs = []
        for f in Path(path).rglob("*.parquet"):
            meta = pq.ParquetFile(f).metadata.row_group(0)
            codecs.append({meta.column(c).path_in_schema: meta.column(c).compression for c in range(meta.num_columns)})
        assert {c["words"] for c in codecs} == {"SNAPPY"}
        assert {c["digest"] for c in codecs} == {"SNAPPY", "UNCOMPRESSED"}, path
        assert not any(name.startswith("_before") for c in codecs for name in c)
        rs = get_engine().read(path).sort_by("id")
        assert delta_spark.read(path).sort_by("id").to_pylist() == rs.to_pylist()
        if path == layout.history_path(DB, "mixed"):
            assert rs.column("_before").null_count == rs.num_rows == 400
        got = rs.select(["id", "digest", "words", "amount", "at"]).to_pylist()
        assert got == expected, path


def test_packed_temporal_reads_equal_the_text_reads(mariadb_servers) -> None:
    """DATE, DATETIME and TIMESTAMP read as the server's packed integers (chunkread.packed_temporal) give the values
    and conversion counts their text gives (the binlog path's conversion): the calendar's edges, fractions of
    every width, NULLs, zero and partial dates and year 0, in seeded random rows; a day past its month's end
    (allowed by ALLOW_INVALID_DATES) fails on both."""
    import pyarrow as pa

    from binlake.lake.convert import ConversionStats
    from binlake.schema.binlog_types import table_map_for
    from binlake.schema.ddl import parse_create_table

    server = mariadb_servers.get("FULL")
    rng = random.Random(8)
    odd_dates = ["0000-00-00", "2020-00-15", "2020-03-00", "0000-01-01", "0000-02-29", "0001-01-01", "9999-12-31",
                 "1582-10-10", "2000-02-29", "1900-02-28", "2024-12-31"]

    def stamp(fraction: int) -> str:
        day = rng.choice(odd_dates + [_date(rng)] * 6)
        clock = rng.choice(["00:00:00", "23:59:59", _clock(rng)])
        return f"{day} {clock}.{rng.randint(0, 10**fraction - 1):0{fraction}d}" if fraction else f"{day} {clock}"

    columns = {"d": ("DATE", lambda: rng.choice(odd_dates + [_date(rng)] * 6)), "t0": ("DATETIME", lambda: stamp(0)),
               "t3": ("DATETIME(3)", lambda: stamp(3)), "t6": ("DATETIME(6)", lambda: stamp(6)),
               "s0": ("TIMESTAMP NULL", lambda: rng.choice(["0000-00-00 00:00:00", "1970-01-01 00:00:01",
                                                            "2038-01-19 03:14:07", _timestamp(rng)[:19]])),
               "s6": ("TIMESTAMP(6) NULL", lambda: rng.choice(["0000-00-00 00:00:00", _timestamp(rng) + "123"]))}
    with server.connect() as conn, conn.cursor() as cur:
        cur.execute(f"DROP DATABASE IF EXISTS {DB}")
        cur.execute(f"CREATE DATABASE {DB}")
        cur.execute("SET SESSION sql_mode = ''")
        cur.execute("SET SESSION time_zone = '+00:00'")
        cur.execute(f"CREATE TABLE {DB}.times (id INT PRIMARY KEY, "
                    + ", ".join(f"{n} {t}" for n, (t, _) in columns.items()) + ")")
        cur.executemany(f"INSERT INTO {DB}.times VALUES (%s{', %s' * len(columns)})",
                        [(i, *(None if rng.random() < 0.1 else make() for _, make in columns.values()))
                         for i in range(1, 2001)])
        cur.execute(f"SHOW CREATE TABLE {DB}.times")
        ddl = cur.fetchone()[1]
    tdef = parse_create_table(ddl, DB)
    tm = table_map_for(tdef, mariadb=True)

    def read(packed: bool, table: str = "times"):
        sql = chunkread.chunk_sql(tdef, DB, table, None, None, False, mariadb=packed)
        batch = pa.Table.from_batches(list(chunkread.stream_select(server.uri, DB, sql, False, 10_000)))
        stats = ConversionStats()
        return chunkread.lake_columns(batch.combine_chunks().to_batches()[0], tm, stats), stats

    (packed, packed_stats), (text, text_stats) = read(True), read(False)
    assert "CAST(`t6` AS UNSIGNED)" in chunkread.chunk_sql(tdef, DB, "times", None, None, False)
    for name in columns:
        assert packed[name].type == text[name].type, name
        assert packed[name].to_pylist() == text[name].to_pylist(), name
    assert packed_stats == text_stats and text_stats["zero_date:boot_values.times.d"] > 0

    with server.connect() as conn, conn.cursor() as cur:
        cur.execute("SET SESSION sql_mode = 'ALLOW_INVALID_DATES'")
        cur.execute(f"CREATE TABLE {DB}.invalid LIKE {DB}.times")
        cur.execute(f"INSERT INTO {DB}.invalid (id, d, t6) VALUES (1, '2021-02-30', '2021-04-31 10:00:00.5')")
    for packed_read in (True, False):
        with pytest.raises(pa.ArrowInvalid, match=r"2021-0[24]-3[01]"):
            read(packed_read, "invalid")
