"""The Kafka sink's value text (DecodeOptions.text_values: DECIMAL and DATE/DATETIME/TIMESTAMP written as their JSON
text straight from the row bytes, UTF-8 text kept as its bytes) against a real MariaDB binlog: seeded random values
over DECIMAL(p,s) shapes (scale 0, DECIMAL(s,s), DECIMAL(65,30), negatives, zero), DATETIME and TIMESTAMP with fsp
0/3/6, DATE, years 1 to 9999, NULLs, zero and partial dates, a February 30 (ALLOW_INVALID_DATES), utf8mb4 VARCHAR,
CHAR and TEXT with multibyte characters and characters JSON escapes. The change events must be byte for byte
those of the lake's own conversion (decode_range without `text`), every clean column must really have taken the
text path, and each inserted value's JSON must be the text the value mapping (docs/kafka.md) gives it."""

from __future__ import annotations

import datetime as dt
import json
import random
import re
from decimal import Context, Decimal
from pathlib import Path

from binlake.binlog.decoder import BinlogDecoder, DecodeOptions, RowBatch
from binlake.binlog.vectorized import TextColumn
from binlake.lake.decode_task import decode_range
from binlake.schema.api import build_resolver
from binlake.sinks.kafka import Encoder
from binlake.testing.mariadb import PrivateMariaDB

DECIMALS = {"d0": (10, 0), "d2": (5, 2), "dss": (4, 4), "d9": (18, 9), "dbig": (65, 30)}
DATETIMES = {"dt0": 0, "dt3": 3, "dt6": 6}
STAMPS = {"ts0": 0, "ts3": 3, "ts6": 6}
COLUMNS = ("id INT NOT NULL PRIMARY KEY, "
           + ", ".join(f"{c} DECIMAL({p},{s})" for c, (p, s) in DECIMALS.items()) + ", "
           + ", ".join(f"{c} DATETIME({f})" for c, f in DATETIMES.items()) + ", "
           + ", ".join(f"{c} TIMESTAMP({f}) NULL DEFAULT NULL" for c, f in STAMPS.items()) + ", dd DATE, "
           "s VARCHAR(40) CHARACTER SET utf8mb4, c CHAR(6) CHARACTER SET utf8mb4, t TEXT CHARACTER SET utf8mb4")
STRINGS = ["", "plain", 'quote " and \\ back', "line\nbreak\ttab\rcr", "ctrl \x01\x1f end", "ünï 中文 😀", "a'b"]
TEXT_COLUMNS = [*DECIMALS, *DATETIMES, *STAMPS, "dd", "s", "c", "t"]
ZEROS = ["dd", "dt0", "dt3", "dt6", "ts0", "ts6"]  # columns given a zero (or partial) date in some events
WIDE = Context(prec=100)  # DECIMAL(65,30) without rounding


def _decimal(rng: random.Random, p: int, s: int) -> Decimal:
    digits = rng.choice([1, 2, p // 2 or 1, p])
    value = Decimal(rng.randrange(10 ** digits)).scaleb(-s, WIDE)
    if rng.random() < 0.1:
        value = Decimal(0)
    return -value if value and rng.random() < 0.4 else value


def _fraction(rng: random.Random, fsp: int) -> int:
    return rng.randrange(10 ** fsp) * 10 ** (6 - fsp) if fsp else 0


def _datetime(rng: random.Random, fsp: int, years=(1, 9999)) -> dt.datetime:
    day = dt.date(rng.randint(*years), 1, 1) + dt.timedelta(days=rng.randrange(365))
    return dt.datetime(day.year, day.month, day.day, rng.randrange(24), rng.randrange(60), rng.randrange(60),
                       _fraction(rng, fsp))


def _row(rng: random.Random, i: int, zero: str | None = None) -> dict:
    row: dict = {"id": i}
    for c, (p, s) in DECIMALS.items():
        row[c] = None if rng.random() < 0.05 else _decimal(rng, p, s)
    for c, fsp in DATETIMES.items():
        row[c] = None if rng.random() < 0.05 else _datetime(rng, fsp)
    for c, fsp in STAMPS.items():
        row[c] = None if rng.random() < 0.05 else _datetime(rng, fsp, (1971, 2037))
    row["dd"] = None if rng.random() < 0.05 else _datetime(rng, 0).date()
    for c in ("s", "c", "t"):
        row[c] = None if rng.random() < 0.1 else rng.choice(STRINGS)[:6 if c == "c" else 40]
    if row["c"] is not None:
        row["c"] = row["c"].rstrip(" ")  # CHAR: the server drops trailing spaces
    if zero is not None:  # a zero or partial date in one column of this row (the lake writes null)
        row[zero] = "0000-00-00" if zero == "dd" else rng.choice(["0000-00-00 00:00:00", "2020-00-15 01:02:03"]) \
            if zero.startswith("dt") else "0000-00-00 00:00:00"
    return row


def _expected(column: str, value) -> str | None:
    """The JSON of one inserted value by the documented mapping, from the Python value sent to the server."""
    if column in ("s", "c", "t"):
        return None if value is None else json.dumps(value)
    if value is None or isinstance(value, str):  # NULL, or a zero/partial date: null
        return None
    if column in DECIMALS:
        return json.dumps(format(value.quantize(Decimal(1).scaleb(-DECIMALS[column][1]), context=WIDE), "f"))
    if column == "dd":
        return json.dumps(value.isoformat())
    text = value.isoformat(timespec="microseconds")
    return json.dumps(text + ("Z" if column in STAMPS else ""))


def _insert(conn, table: str, rows: list[dict]) -> None:
    names = list(rows[0])
    with conn.cursor() as cur:
        cur.executemany(f"INSERT INTO {table} ({', '.join(names)}) VALUES ({', '.join(['%s'] * len(names))})",
                        [[r[n] for n in names] for r in rows])


def _records(path: Path, resolver, text: bool) -> tuple[list, dict]:
    result = decode_range(str(path), path.name, 1, None, None, 1, resolver, text=text)
    messages = Encoder("p", True, resolver).encode(result, str(path), lambda _t: 3)
    topics, keys, values, parts = messages.ordered()
    values = [v if v is None or isinstance(v, bytes) else v.encode() for v in values]
    return list(zip(topics, keys, values, parts, strict=True)), dict(result.held)


def _same_event(record: tuple) -> tuple:
    """The record without the publish time (ts_ms after op, which differs from run to run)."""
    topic, key, value, part = record
    return topic, key, value and re.sub(rb',"ts_ms":\d+,"(transaction|databaseName)"', b"", value), part


def test_value_text_equals_the_lake_conversion(mariadb_full: PrivateMariaDB, fresh_database, tmp_path: Path) -> None:
    db = fresh_database(mariadb_full)
    rng = random.Random(2026)
    mariadb_full.flush_logs()
    first = len(mariadb_full.binlog_files()) - 1
    inserted: dict[int, dict] = {}
    with mariadb_full.connect(db) as conn, conn.cursor() as cur:
        cur.execute("SET SESSION sql_mode = 'NO_ENGINE_SUBSTITUTION'")  # zero and partial dates allowed
        cur.execute(f"CREATE TABLE vals ({COLUMNS})")
        cur.execute("CREATE TABLE bad (id INT NOT NULL PRIMARY KEY, d DATE)")
        next_id = 1
        for batch in range(12):
            rows = []
            for k in range(rng.choice([30, 60, 200])):  # many rows per event: the whole-column path
                zero = ZEROS[k - 5] if batch % 4 == 3 and 5 <= k < 5 + len(ZEROS) else None
                rows.append(_row(rng, next_id, zero))
                next_id += 1
            _insert(conn, "vals", rows)
            inserted.update({r["id"]: r for r in rows})
            lo = rng.randrange(1, max(2, next_id - 40))
            cur.execute("UPDATE vals SET d2 = -d2, dt3 = IF(YEAR(dt3) < 9999, dt3 + INTERVAL 1 DAY, dt3), ts0 = NULL "
                        "WHERE id BETWEEN %s AND %s", (lo, lo + 35))
        cur.execute("DELETE FROM vals WHERE id % 7 = 0")
        cur.execute("SET SESSION sql_mode = 'ALLOW_INVALID_DATES'")
        cur.execute("INSERT INTO bad SELECT seq, '2024-01-01' + INTERVAL seq DAY FROM seq_1_to_40")
        # a date that is no calendar date among valid ones: the lake holds the table back
        cur.execute("INSERT INTO bad SELECT seq, IF(seq = 120, '2024-02-30', '2024-01-01' + INTERVAL seq DAY) "
                    "FROM seq_100_to_140")
    files = mariadb_full.flush_logs()[first:]
    assert len(files) == 1
    path = tmp_path / files[0].name
    path.write_bytes(files[0].read_bytes())
    resolver = build_resolver([str(path)], None)

    lake, lake_held = _records(path, resolver, text=False)
    text, text_held = _records(path, resolver, text=True)
    assert len(text) == len(lake)
    for got, want in zip(text, lake, strict=True):
        assert _same_event(got) == _same_event(want)
    assert text_held == lake_held and set(lake_held) == {f"{db}.bad"}

    # The text path was taken for every such column (in some events at least: zero dates and short events not).
    seen = set()
    opts = DecodeOptions(text_values=True)
    for item in BinlogDecoder(opts).decode_files_batched([path]):
        if type(item) is RowBatch and item.table.table == "vals":
            for image in (getattr(item.pairs, "before", None), getattr(item.pairs, "after", None)):
                for col, values in zip(item.table.columns, image or [], strict=False):
                    if type(values) is TextColumn:
                        seen.add(col.name)
    assert seen == set(TEXT_COLUMNS)

    # Inserts carry each value as the documented mapping writes it.
    checked = 0
    for topic, _key, value, _part in lake:
        event = value and json.loads(value)
        if not event or topic != f"p.{db}.vals" or event["op"] != "c":
            continue
        row = inserted[event["after"]["id"]]
        for column in TEXT_COLUMNS:
            got = event["after"][column]
            assert (None if got is None else json.dumps(got)) == _expected(column, row[column]), (column, row)
            checked += 1
    assert checked == len(inserted) * len(TEXT_COLUMNS)
