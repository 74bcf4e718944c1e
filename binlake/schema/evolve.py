"""Carry existing rows across a schema change the way the server does (values in binlake's value contract).

An ALTER TABLE rewrites every row without logging it: a current-state copy has to do the same. Columns are
matched by identity (a CHANGE/RENAME keeps the column), new columns take the DDL default the server filled in
(the implicit one for NOT NULL columns without DEFAULT), dropped columns disappear and changed types are
converted, or the change is refused with a message when binlake cannot reproduce the server's conversion.
"""

from __future__ import annotations

import re
from decimal import ROUND_HALF_UP, Decimal, InvalidOperation
from typing import Any

from .model import ColumnDef, TableDef

INTEGER_RANGES = {
    ("tinyint", False): (-128, 127), ("tinyint", True): (0, 255),
    ("smallint", False): (-32768, 32767), ("smallint", True): (0, 65535),
    ("mediumint", False): (-8388608, 8388607), ("mediumint", True): (0, 16777215),
    ("int", False): (-(2**31), 2**31 - 1), ("int", True): (0, 2**32 - 1),
    ("bigint", False): (-(2**63), 2**63 - 1), ("bigint", True): (0, 2**64 - 1),
}
STRING_TYPES = {"char", "varchar", "tinytext", "text", "mediumtext", "longtext", "enum", "set", "json"}
BINARY_TYPES = {"binary", "varbinary", "tinyblob", "blob", "mediumblob", "longblob"}
TEMPORAL = {"date", "datetime", "timestamp", "time", "year"}


class EvolveError(ValueError):
    """A schema change binlake cannot apply to existing rows exactly as the server did."""


def column_mapping(old: TableDef, new: TableDef) -> dict[str, str | None]:
    """New column name -> the old column it continues (None: added). Identity within one lineage, else name.

    Identities are given in column order when a lineage begins (a snapshot, a CREATE TABLE), so two lineages'
    identities say nothing about each other: a snapshot taken after an ALTER numbers the moved columns afresh."""
    by_uid = {c.uid: c.name for c in old.columns if c.uid is not None}
    old_names = {c.name.lower(): c.name for c in old.columns}
    same_lineage = old.lineage == new.lineage and bool(by_uid) and any(c.uid in by_uid for c in new.columns)
    mapping = {}
    for c in new.columns:
        if same_lineage:
            mapping[c.name] = by_uid.get(c.uid)
        else:
            mapping[c.name] = old_names.get(c.name.lower())
    return mapping


def evolve_row(row: dict[str, Any], old: TableDef, new: TableDef, ddl_time: str | None = None) -> dict[str, Any]:
    """`row` (old layout, by column name) as the server holds it after the change to `new`."""
    mapping = column_mapping(old, new)
    old_cols = {c.name: c for c in old.columns}
    out = {}
    for col in new.columns:
        src = mapping[col.name]
        if src is None:
            out[col.name] = default_value(col, ddl_time)
        else:
            out[col.name] = convert(row.get(src), old_cols[src], col)
    return out


# -- defaults ---------------------------------------------------------------------------------------------

_NOW = re.compile(r"^(current_timestamp|now|localtimestamp|localtime)\s*(\(\s*\d*\s*\))?$", re.I)


def default_value(col: ColumnDef, ddl_time: str | None = None) -> Any:
    """The value the server gives existing rows for a new column."""
    if col.generated is not None:
        raise EvolveError(f"column {col.name} is generated ({col.generated}); binlake does not evaluate "
                          "expressions, take a snapshot or rewrite the rows")
    text = col.default
    if text is None or text.strip().upper() == "NULL":
        if col.nullable:
            return None
        return implicit_default(col)
    text = text.strip()
    if _NOW.match(text):
        if ddl_time is None:
            raise EvolveError(f"column {col.name} defaults to {text}: the ALTER's time is needed")
        return _fit_temporal(ddl_time, col)
    return convert(_literal(text, col), None, col)


def implicit_default(col: ColumnDef) -> Any:
    dt = col.data_type
    if (dt, col.unsigned) in INTEGER_RANGES or dt in ("bit", "year"):
        return 0
    if dt in ("decimal", "numeric"):
        return Decimal(0).quantize(Decimal(1).scaleb(-(col.scale or 0)))
    if dt in ("float", "double", "real"):
        return 0.0
    if dt == "date":
        return "0000-00-00"
    if dt in ("datetime", "timestamp"):
        return "0000-00-00 00:00:00" + _frac_zero(col.fsp)
    if dt == "time":
        return "00:00:00" + _frac_zero(col.fsp)
    if dt == "enum":
        return (col.labels or [""])[0]
    if dt in BINARY_TYPES:
        return b"\0" * (col.length or 0) if dt == "binary" else b""
    return ""


def _frac_zero(fsp: int | None) -> str:
    return "." + "0" * fsp if fsp else ""


def _literal(text: str, col: ColumnDef) -> Any:
    """A DEFAULT clause's literal as a Python value (before fitting it to the column)."""
    if text[:1] in ("'", '"'):
        body = text[1:-1]
        return re.sub(r"\\(.)|''", lambda m: {"n": "\n", "t": "\t", "0": "\0", "r": "\r", "Z": "\x1a"}.get(
            m.group(1), m.group(1)) if m.group(1) is not None else "'", body)
    low = text.lower()
    if low.startswith("b'"):
        return int(text[2:-1] or "0", 2)
    if low.startswith("x'"):
        return bytes.fromhex(text[2:-1])
    if low.startswith("0x"):
        return bytes.fromhex(text[2:])
    if low in ("true", "false"):
        return 1 if low == "true" else 0
    try:
        return Decimal(text)
    except InvalidOperation:
        raise EvolveError(f"column {col.name}: DEFAULT {text} is an expression binlake does not evaluate") from None


# -- conversion -------------------------------------------------------------------------------------------


def convert(value: Any, old: ColumnDef | None, new: ColumnDef) -> Any:
    """`value` (of column `old`, or a literal when old is None) converted to column `new` as the server does."""
    if value is None:
        return None
    dt = new.data_type
    where = f"column {new.name}: {old.data_type if old else 'literal'} {value!r} -> {dt}"
    if (dt, new.unsigned) in INTEGER_RANGES:
        n = _to_number(value, where)
        n = int(n.to_integral_value(rounding=ROUND_HALF_UP))
        lo, hi = INTEGER_RANGES[(dt, new.unsigned)]
        if not lo <= n <= hi:
            raise EvolveError(f"{where}: out of range (the server would clip or refuse)")
        return n
    if dt in ("decimal", "numeric"):
        n = _to_number(value, where)
        q = n.quantize(Decimal(1).scaleb(-(new.scale or 0)), rounding=ROUND_HALF_UP)
        if len(q.as_tuple().digits) - (new.scale or 0) > (new.precision or 10) - (new.scale or 0) and q != 0:
            raise EvolveError(f"{where}: does not fit DECIMAL({new.precision},{new.scale})")
        return q
    if dt in ("float", "double", "real"):
        return float(_to_number(value, where))
    if dt == "bit" or dt == "year":
        return int(_to_number(value, where))
    if dt in STRING_TYPES:
        text = _to_text(value, old)
        if new.length is not None and dt in ("char", "varchar") and len(text) > new.length:
            raise EvolveError(f"{where}: longer than {new.length} characters")
        if dt == "char":
            text = text.rstrip(" ")
        if dt == "enum" and new.labels is not None and text not in new.labels and text != "":
            raise EvolveError(f"{where}: not one of the ENUM labels")
        return text
    if dt in BINARY_TYPES:
        raw = value if isinstance(value, (bytes, bytearray)) else _to_text(value, old).encode("utf-8")
        if dt == "binary" and new.length is not None:
            if len(raw) > new.length:
                raise EvolveError(f"{where}: longer than {new.length} bytes")
            raw = bytes(raw).ljust(new.length, b"\0")
        return bytes(raw)
    if dt in TEMPORAL:
        return _fit_temporal(_to_text(value, old), new)
    raise EvolveError(f"{where}: binlake does not convert to this type")


def _to_number(value: Any, where: str) -> Decimal:
    if isinstance(value, Decimal):
        return value
    if isinstance(value, (int, float)):
        return Decimal(repr(value)) if isinstance(value, float) else Decimal(value)
    if isinstance(value, str):
        try:
            return Decimal(value.strip() or "0")
        except InvalidOperation:
            raise EvolveError(f"{where}: not a number") from None
    raise EvolveError(f"{where}: not a number")


def _to_text(value: Any, old: ColumnDef | None) -> str:
    if isinstance(value, Decimal):
        return format(value, "f")
    if isinstance(value, (bytes, bytearray)):
        return bytes(value).decode("utf-8", "replace")
    if isinstance(value, float):
        return repr(value)
    return str(value)


def _fit_temporal(text: str, col: ColumnDef) -> str:
    """Text of a temporal value with the column's fractional digits (rounded as the server does)."""
    dt = col.data_type
    text = text.strip().replace("T", " ")
    if dt == "date":
        return text[:10]
    if dt == "year":
        return text[:4]
    fsp = col.fsp or 0
    whole, _, frac = text.partition(".")
    if dt in ("datetime", "timestamp") and len(whole) == 10:
        whole += " 00:00:00"
    if not frac:
        return whole + _frac_zero(fsp)
    digits = (frac + "000000")[:6]
    if fsp == 6 or int(digits[fsp:] or 0) == 0:
        return whole + ("." + digits[:fsp] if fsp else "")
    raise EvolveError(f"column {col.name}: rounding {text!r} to {fsp} fractional digits changes the value "
                      "in ways that depend on the server's settings (time_truncate_fractional)")
