"""Seeded workloads for a private server: every column type, extremes, NULLs, multibyte text, big and
multi-table transactions, primary-key changes. Used by tests, the benchmarks and the demo."""

from __future__ import annotations

import random
from dataclasses import dataclass
from decimal import Decimal

# (column name, SQL type). The `id` primary key is added by the table builder.
ALL_TYPES: list[tuple[str, str]] = [
    ("c_tiny", "TINYINT"),
    ("c_tiny_u", "TINYINT UNSIGNED"),
    ("c_small", "SMALLINT"),
    ("c_small_u", "SMALLINT UNSIGNED"),
    ("c_medium", "MEDIUMINT"),
    ("c_medium_u", "MEDIUMINT UNSIGNED"),
    ("c_int", "INT"),
    ("c_int_u", "INT UNSIGNED"),
    ("c_big", "BIGINT"),
    ("c_big_u", "BIGINT UNSIGNED"),
    ("c_dec_small", "DECIMAL(5,0)"),
    ("c_dec", "DECIMAL(12,4)"),
    ("c_dec_wide", "DECIMAL(65,30)"),
    ("c_float", "FLOAT"),
    ("c_double", "DOUBLE"),
    ("c_bit1", "BIT(1)"),
    ("c_bit13", "BIT(13)"),
    ("c_bit64", "BIT(64)"),
    ("c_year", "YEAR"),
    ("c_date", "DATE"),
    ("c_time", "TIME"),
    ("c_time3", "TIME(3)"),
    ("c_time6", "TIME(6)"),
    ("c_dt", "DATETIME"),
    ("c_dt1", "DATETIME(1)"),
    ("c_dt6", "DATETIME(6)"),
    ("c_ts", "TIMESTAMP NULL DEFAULT NULL"),
    ("c_ts2", "TIMESTAMP(2) NULL DEFAULT NULL"),
    ("c_ts6", "TIMESTAMP(6) NULL DEFAULT NULL"),
    ("c_char", "CHAR(10)"),
    ("c_varchar", "VARCHAR(300)"),
    ("c_latin1", "VARCHAR(50) CHARACTER SET latin1"),
    ("c_gbk", "VARCHAR(50) CHARACTER SET gbk"),
    ("c_utf8mb3", "CHAR(20) CHARACTER SET utf8mb3"),
    ("c_text", "TEXT"),
    ("c_mediumtext", "MEDIUMTEXT"),
    ("c_longtext_latin1", "LONGTEXT CHARACTER SET latin1"),
    ("c_tinyblob", "TINYBLOB"),
    ("c_blob", "BLOB"),
    ("c_binary", "BINARY(4)"),
    ("c_varbinary", "VARBINARY(20)"),
    ("c_enum", "ENUM('small','medium','large','x''quote')"),
    ("c_set", "SET('a','b','c','dd')"),
    ("c_json", "JSON"),
    ("c_geom", "GEOMETRY"),
]

INT_RANGES = {
    "TINYINT": (-128, 127),
    "TINYINT UNSIGNED": (0, 255),
    "SMALLINT": (-32768, 32767),
    "SMALLINT UNSIGNED": (0, 65535),
    "MEDIUMINT": (-8388608, 8388607),
    "MEDIUMINT UNSIGNED": (0, 16777215),
    "INT": (-(2**31), 2**31 - 1),
    "INT UNSIGNED": (0, 2**32 - 1),
    "BIGINT": (-(2**63), 2**63 - 1),
    "BIGINT UNSIGNED": (0, 2**64 - 1),
}

TEXT_SAMPLES = ["", "a", "plain ascii", "tab\there", "quote ' and \\ backslash", "naïve café", "日本語のテキスト",
                "emoji 🎉🚀", "𝄞 music", "line\nbreak", "null\x00byte", "中文字符"]
LATIN1_SAMPLES = ["", "abc", "café", "Grüße", "€ euro", "‚ƒ„…†‡", "Ñandú"]
GBK_SAMPLES = ["", "中文", "简体字测试", "abc混合"]


def create_table_sql(table: str, columns: list[tuple[str, str]] = ALL_TYPES) -> str:
    cols = ",\n  ".join(f"`{n}` {t}" for n, t in columns)
    return f"CREATE TABLE `{table}` (\n  `id` BIGINT NOT NULL,\n  {cols},\n  PRIMARY KEY (`id`)\n) ENGINE=InnoDB"


@dataclass
class ValueGen:
    rng: random.Random
    null_rate: float = 0.1

    def value(self, sql_type: str):
        """A random value for the type, as a SQL literal fragment (str) or a Python value for pymysql."""
        r = self.rng
        if r.random() < self.null_rate:
            return None
        t = sql_type.split(" NULL")[0]
        if t in INT_RANGES:
            lo, hi = INT_RANGES[t]
            return r.choice([lo, hi, 0, -1 if lo < 0 else 1, r.randint(lo, hi)])
        if t.startswith("DECIMAL"):
            p, s = (int(x) for x in t[8:-1].split(","))
            intg = p - s
            digits = r.choice([intg, r.randint(0, intg)])
            ip = r.randint(0, 10**digits - 1) if digits else 0
            fp = r.randint(0, 10**s - 1) if s else 0
            sign = r.choice(["", "-"])
            text = f"{sign}{ip}" + (f".{str(fp).zfill(s)}" if s else "")
            return Decimal(text)
        if t == "FLOAT":
            return r.choice([0.0, 1.5, -3.25, 3.4e38, -1.17e-38, round(r.uniform(-1e6, 1e6), 3)])
        if t == "DOUBLE":
            return r.choice([0.0, 1.7976931348623157e308, -2.2250738585072014e-308, r.uniform(-1e12, 1e12)])
        if t.startswith("BIT"):
            n = int(t[4:-1])
            return r.choice([0, 2**n - 1, r.randint(0, 2**n - 1)]).to_bytes((n + 7) // 8, "big")
        if t == "YEAR":
            return r.choice([1901, 2155, 0, r.randint(1901, 2155)])
        if t == "DATE":
            return r.choice(["1000-01-01", "9999-12-31", "0000-00-00", "2020-00-15", "2024-02-29",
                             f"{r.randint(1000, 9999)}-{r.randint(1, 12):02d}-{r.randint(1, 28):02d}"])
        if t.startswith("TIME") and not t.startswith("TIMESTAMP"):
            fsp = int(t[5:-1]) if "(" in t else 0
            frac = f".{r.randint(0, 10**fsp - 1):0{fsp}d}" if fsp else ""
            return r.choice([f"-838:59:59{'.' + '0' * fsp if fsp else ''}", f"838:59:59{'.' + '0' * fsp if fsp else ''}",
                             "00:00:00", f"{r.choice(['-', ''])}{r.randint(0, 837)}:{r.randint(0, 59):02d}:"
                             f"{r.randint(0, 59):02d}{frac}"])
        if t.startswith("DATETIME"):
            fsp = int(t[9:-1]) if "(" in t else 0
            frac = f".{r.randint(0, 10**fsp - 1):0{fsp}d}" if fsp else ""
            return r.choice(["1000-01-01 00:00:00", "9999-12-31 23:59:59", "0000-00-00 00:00:00",
                             f"{r.randint(1000, 9999)}-{r.randint(1, 12):02d}-{r.randint(1, 28):02d} "
                             f"{r.randint(0, 23):02d}:{r.randint(0, 59):02d}:{r.randint(0, 59):02d}{frac}"])
        if t.startswith("TIMESTAMP"):
            fsp = int(t[10:-1]) if "(" in t else 0
            frac = f".{r.randint(0, 10**fsp - 1):0{fsp}d}" if fsp else ""
            return r.choice(["1970-01-01 00:00:01", "2038-01-19 03:14:07",
                             f"{r.randint(1971, 2037)}-{r.randint(1, 12):02d}-{r.randint(1, 28):02d} "
                             f"{r.randint(0, 23):02d}:{r.randint(0, 59):02d}:{r.randint(0, 59):02d}{frac}"])
        if "latin1" in t:
            return r.choice(LATIN1_SAMPLES) * (r.randint(1, 3) if "LONGTEXT" in t else 1)
        if "gbk" in t:
            return r.choice(GBK_SAMPLES)
        if t.startswith("CHAR(10)"):
            return r.choice(["", "x", "abc", "日本", "🎉", "ten chars!"])
        if t.startswith("CHAR(20)"):
            return r.choice(["", "utf8mb3 ä", "日本語"])
        if t.startswith("VARCHAR") or t in ("TEXT", "MEDIUMTEXT"):
            s = r.choice(TEXT_SAMPLES)
            return s * r.randint(1, 20) if t != "VARCHAR(300)" else s[:300]
        if t in ("TINYBLOB", "BLOB"):
            return bytes(r.randrange(256) for _ in range(r.choice([0, 1, 10, 255 if t == "TINYBLOB" else 3000])))
        if t == "BINARY(4)":
            return bytes(r.randrange(256) for _ in range(r.randint(0, 4)))
        if t == "VARBINARY(20)":
            return bytes(r.randrange(256) for _ in range(r.randint(0, 20)))
        if t.startswith("ENUM"):
            return r.choice(["small", "medium", "large", "x'quote"])
        if t.startswith("SET"):
            return ",".join(x for x in ("a", "b", "c", "dd") if r.random() < 0.5)
        if t == "JSON":
            return r.choice(['{"a": 1, "b": [1, 2, "x"]}', "[]", '"text"', "null", '{"nested": {"k": "ü"}}'])
        if t == "GEOMETRY":
            return ("POINT", r.uniform(-180, 180), r.uniform(-90, 90))
        raise ValueError(f"no generator for {sql_type}")


def insert_sql(table: str, columns: list[tuple[str, str]]) -> str:
    names = ", ".join(["`id`", *[f"`{n}`" for n, _ in columns]])
    marks = ", ".join(["%s", *["ST_GeomFromText(%s)" if t == "GEOMETRY" else "%s" for _, t in columns]])
    return f"INSERT INTO `{table}` ({names}) VALUES ({marks})"


def params(values: list) -> list:
    out = []
    for v in values:
        if isinstance(v, tuple) and v and v[0] == "POINT":
            out.append(f"POINT({v[1]!r} {v[2]!r})")
        else:
            out.append(v)
    return out


def run_all_types_workload(conn, table: str, rng: random.Random, rows: int = 200, columns=ALL_TYPES) -> dict:
    """Insert, update (some changing the primary key) and delete rows; returns counts per operation."""
    gen = ValueGen(rng)
    cur = conn.cursor()
    cur.execute("SET SESSION sql_mode='ERROR_FOR_DIVISION_BY_ZERO,NO_ENGINE_SUBSTITUTION'")
    cur.execute(create_table_sql(table, columns))
    counts = {"insert": 0, "update": 0, "delete": 0}
    ids: list[int] = []
    ins = insert_sql(table, columns)
    next_id = 1
    # Extremes first: a row of all NULLs and rows of generated values.
    cur.execute(f"INSERT INTO `{table}` (`id`) VALUES (%s)", (next_id,))
    ids.append(next_id)
    next_id += 1
    counts["insert"] += 1
    conn.begin()
    for _ in range(rows):
        cur.execute(ins, [next_id, *params([gen.value(t) for _, t in columns])])
        ids.append(next_id)
        next_id += 1
        counts["insert"] += 1
    conn.commit()
    for _ in range(rows // 2):
        target = rng.choice(ids)
        name, sql_type = rng.choice(columns)
        value = params([gen.value(sql_type)])[0]
        expr = "ST_GeomFromText(%s)" if sql_type == "GEOMETRY" else "%s"
        cur.execute(f"UPDATE `{table}` SET `{name}`={expr} WHERE `id`=%s", (value, target))
        counts["update"] += cur.rowcount
    # Primary-key changing updates inside one multi-statement transaction.
    conn.begin()
    for _ in range(5):
        old = rng.choice(ids)
        cur.execute(f"UPDATE `{table}` SET `id`=%s WHERE `id`=%s", (next_id, old))
        counts["update"] += cur.rowcount
        ids[ids.index(old)] = next_id
        next_id += 1
    conn.commit()
    for _ in range(rows // 10):
        target = rng.choice(ids)
        cur.execute(f"DELETE FROM `{table}` WHERE `id`=%s", (target,))
        counts["delete"] += cur.rowcount
        ids.remove(target)
    return counts
