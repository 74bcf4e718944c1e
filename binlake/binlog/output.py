"""Output formats for decoded changes: JSON lines, forward SQL and rollback SQL."""

from __future__ import annotations

import json
import os
import struct
import time
from collections.abc import Callable, Iterable
from decimal import Decimal
from typing import Any, TextIO

from . import coltypes as ct
from .charsets import BINARY, charset_of, codec_of, encode_mysql_latin1
from .coltypes import LOGICAL, TYPES, value_kind
from .records import OP_DELETE, OP_INSERT, OP_UPDATE, EventRecord, RowChange
from .rows import JsonPatch
from .tablemap import Column, TableMap
from .values import ABSENT

_F32 = struct.Struct("<f")


class OutputError(Exception):
    """A change cannot be written in the requested format (for example SQL without column names)."""


def float32_value(x: float) -> float:
    """The shortest decimal that reads back as the same 4-byte float (what MySQL prints for FLOAT)."""
    if x != x or x in (float("inf"), float("-inf")):
        return x
    packed = _F32.pack(x)
    for digits in range(6, 10):
        candidate = float(f"{x:.{digits}g}")
        if _F32.pack(candidate) == packed:
            return candidate
    return x


def format_ts(ts: int) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(ts))


# -- JSON lines -------------------------------------------------------------------------------------------


def _json_formatter(col: Column) -> Callable[[Any], Any] | None:
    """How a column's values go into JSON, by what they are (coltypes.value_kind); None: as they come."""
    return _JSON_FORMATTERS.get(value_kind(col))


class RawJson(str):
    """JSON text to embed as a JSON value, not as a string: parsing it would turn DECIMAL 9.00 into 9.0."""


def _json_patch(value: JsonPatch) -> dict:
    return {"json_diff": [{k if k != "value_json" else "value": (RawJson(v) if k == "value_json" else v)
                           for k, v in d.items()} for d in value.as_list()]}


_JSON_FORMATTERS: dict[str | None, Callable[[Any], Any]] = {
    ct.FLOAT32: float32_value,
    ct.VECTOR: lambda v: [float32_value(x) for x in v],
    ct.JSON: lambda v: _json_patch(v) if type(v) is JsonPatch else RawJson(v),
}


def _generic_json(value: Any) -> Any:
    if type(value) is JsonPatch:
        return _json_patch(value)
    if isinstance(value, Decimal):
        return format(value, "f")
    if isinstance(value, (bytes, bytearray, memoryview)):
        return {"hex": bytes(value).hex()}
    return value


def _json_plan(table: TableMap) -> list[tuple[str, Callable | None]]:
    plan = getattr(table, "_json_plan", None)
    if plan is None:
        plan = [(c.key, _json_formatter(c)) for c in table.columns]
        table._json_plan = plan  # type: ignore[attr-defined]
    return plan


def image_to_dict(table: TableMap, values: list | None) -> dict | None:
    if values is None:
        return None
    out = {}
    for (key, fmt), v in zip(_json_plan(table), values, strict=False):
        if v is ABSENT:
            continue
        if v is None:
            out[key] = None
        elif fmt is not None:
            out[key] = fmt(v)
        else:
            out[key] = _generic_json(v)
    return out


def change_to_dict(c: RowChange) -> dict:
    return {
        "file": c.file,
        "pos": c.pos,
        "txn_pos": c.txn_pos,
        "sub": c.sub,
        "row": c.row,
        "ts": format_ts(c.ts),
        "gtid": c.gtid,
        "db": c.table.database,
        "table": c.table.table,
        "op": c.op,
        "before": image_to_dict(c.table, c.before),
        "after": image_to_dict(c.table, c.after),
    }


def event_to_dict(e: EventRecord) -> dict:
    info = {}
    for k, v in e.info.items():
        if k == "summary":
            info[k] = {"rows": v.rows, "bytes": v.bytes, "first_ts": format_ts(v.first_ts),
                       "last_ts": format_ts(v.last_ts), "tables": v.tables}
        else:
            info[k] = v
    return {
        "file": e.file, "pos": e.pos, "txn_pos": e.txn_pos, "sub": e.sub, "ts": format_ts(e.ts), "gtid": e.gtid,
        "event": e.kind, "type": e.event_type, **info,
    }


class _JsonlEncoder:
    """json.dumps for records, with RawJson values spliced in verbatim (through unique placeholders)."""

    def __init__(self) -> None:
        self.token = "\ue000" + os.urandom(16).hex()
        self.raw: list[str] = []
        self.encoder = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), default=self._default)

    def _default(self, value: Any) -> Any:
        raise TypeError(f"cannot write {type(value).__name__} as JSON")

    def _swap(self, value: Any) -> Any:
        if isinstance(value, RawJson):
            self.raw.append(str(value))
            return f"{self.token}{len(self.raw) - 1}{self.token}"
        if isinstance(value, dict):
            return {k: self._swap(v) for k, v in value.items()}
        if isinstance(value, list):
            return [self._swap(v) for v in value]
        return value

    def encode(self, doc: dict) -> str:
        self.raw.clear()
        text = self.encoder.encode(self._swap(doc) if self._has_raw(doc) else doc)
        for i, raw in enumerate(self.raw):
            text = text.replace(f'"{self.token}{i}{self.token}"', raw, 1)
        return text

    @staticmethod
    def _has_raw(doc: Any) -> bool:
        if isinstance(doc, RawJson):
            return True
        if isinstance(doc, dict):
            return any(_JsonlEncoder._has_raw(v) for v in doc.values())
        if isinstance(doc, list):
            return any(_JsonlEncoder._has_raw(v) for v in doc)
        return False


def write_jsonl(records: Iterable[RowChange | EventRecord], out: TextIO) -> int:
    n = 0
    dumps = _JsonlEncoder().encode
    write = out.write
    for r in records:
        write(dumps(change_to_dict(r) if isinstance(r, RowChange) else event_to_dict(r)))
        write("\n")
        n += 1
    return n


# -- SQL --------------------------------------------------------------------------------------------------


def _char_type(col: Column) -> bool:
    """Values are text in the column's charset (bytes for the binary collation): CHAR, VARCHAR, TEXT, BLOB."""
    spec = TYPES.get(col.type)
    return spec is not None and spec.charset


def _text_form(col: Column) -> bool:
    """MariaDB INET4/INET6/UUID: stored as binary, decoded to text, written and compared as text (the server
    converts)."""
    logical = LOGICAL.get(col.logical) if col.logical else None
    return logical is not None and logical.text

_LABELLED = (ct.ENUM, ct.SET)
_UTF8_CHARSETS = ("utf8mb4", "utf8mb3", "utf8")
_WIDE_CHARSETS = ("ucs2", "utf16", "utf16le", "utf32")


def quote_ident(name: str) -> str:
    """A backtick-quoted identifier: backticks doubled, so nothing in a name can leave its quoting."""
    return "`" + name.replace("`", "``") + "`"


def _plain(text: str) -> bool:
    """Text that is safe and exact as a '...' literal with only quotes doubled: printable, no backslash (so
    the statement means the same with or without NO_BACKSLASH_ESCAPES and in every client)."""
    return "\\" not in text and text.isprintable()


def text_literal(text: str) -> str:
    """A utf8mb4 string literal: readable when plain, else the UTF-8 bytes in hex with the charset introducer."""
    if _plain(text):
        return "'" + text.replace("'", "''") + "'"
    return "_utf8mb4 X'" + text.encode("utf-8", "surrogatepass").hex() + "'"


def float_literal(value: float) -> str:
    """The exact double as a DOUBLE literal (with an exponent, so the server parses it as a double, not a
    DECIMAL): a FLOAT column read as a double compares equal to it, where the float's short form would not."""
    text = repr(float(value))
    return text if "e" in text or "n" in text else text + "e0"


def sql_literal(value: Any, col_type: int | None = None) -> str:
    """A literal for a value of the decoder's contract (no column context: see value_sql for exact ones)."""
    if value is None:
        return "NULL"
    if isinstance(value, bool):
        return "1" if value else "0"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, Decimal):
        return format(value, "f")
    if isinstance(value, float):
        spec = TYPES.get(col_type) if col_type is not None else None
        return repr(float32_value(value) if spec is not None and spec.value == ct.FLOAT32 else value)
    if isinstance(value, (bytes, bytearray, memoryview)):
        return "X'" + bytes(value).hex() + "'"
    if isinstance(value, list):  # a vector: its exact bytes (little-endian 4-byte floats), which both servers take
        return "X'" + struct.pack(f"<{len(value)}f", *value).hex() + "'"
    return text_literal(str(value))


def _charset(col: Column) -> str | None:
    return charset_of(col.collation)


def stored_bytes(col: Column, value: str | bytes) -> bytes | None:
    """The bytes the server stores for a character value: the text encoded back with the column's charset
    (UTF-8 when unknown: the decoder only guesses text for valid UTF-8); None when that is impossible."""
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value)
    codec = codec_of(col.collation) or "utf-8"
    try:
        return encode_mysql_latin1(value) if codec == "mysql-latin1" else value.encode(codec)
    except (UnicodeError, LookupError):
        return None


def _label_number(col: Column, value: Any) -> int | None:
    """ENUM index (1-based) or SET bitmask of a label value; None when the labels do not say."""
    if isinstance(value, int):
        return value
    kind = value_kind(col)
    if kind == ct.ENUM and col.enum_labels is not None:
        if value in col.enum_labels:
            return col.enum_labels.index(value) + 1
        return 0 if value == "" else None
    if kind == ct.SET and col.set_labels is not None:
        mask = 0
        for label in value.split(",") if value else []:
            if label not in col.set_labels:
                return None
            mask |= 1 << col.set_labels.index(label)
        return mask
    return None


def value_sql(col: Column, value: Any) -> str:
    """A literal that stores exactly `value` in `col` (INSERT values, UPDATE SET)."""
    if value is None or isinstance(value, (bool, int, Decimal, float, list)):
        return sql_literal(value, col.type)
    if _text_form(col) and isinstance(value, str):
        return text_literal(value)
    if value_kind(col) in _LABELLED:
        number = _label_number(col, value)
        return str(number) if number is not None else sql_literal(value)
    charset = _charset(col)
    if _char_type(col) and isinstance(value, str) and charset not in _UTF8_CHARSETS and not (
            charset is not None and charset not in _WIDE_CHARSETS and value.isascii() and _plain(value)):
        # latin1, ucs2, ... or an unknown charset: the stored bytes as a binary string, which the server copies
        # into the column unchanged (a utf8mb4 text literal would be converted, and guessed text mis-stored).
        # Plain ASCII text in a known ASCII-compatible charset stays readable: it converts to the same bytes.
        raw = stored_bytes(col, value)
        if raw is not None:
            return "X'" + raw.hex() + "'"
    return sql_literal(value, col.type)


def match_sql(col: Column, name: str, value: Any) -> str:
    """A condition true exactly for rows whose `col` holds `value`, byte for byte, whatever the collation:
    'ABC' = 'abc', 'x ' = 'x' and different emoji are equal under MariaDB's collations, so text is compared as
    its stored bytes (CAST(col AS BINARY)); FLOAT as the exact double; ENUM/SET by index/bitmask."""
    q = quote_ident(name)
    if value is None:
        return f"{q} IS NULL"
    if isinstance(value, float):
        return f"{q}={float_literal(value)}"
    kind = value_kind(col)
    if kind in _LABELLED:
        number = _label_number(col, value)
        if number is not None and number >= 1 << 63:
            # The 64th member of a SET: MariaDB's col+0 is a signed BIGINT (negative here), so the bitmask is
            # matched as either reading of the same 64 bits.
            return f"{q}+0 IN ({number}, {number - (1 << 64)})"
        if number is not None:
            return f"{q}+0={number}"
    if _text_form(col) and isinstance(value, str):
        return f"{q}={text_literal(value)}"
    if kind == ct.JSON and isinstance(value, str):  # MySQL's binary JSON: compared as JSON values
        return f"{q}=CAST({text_literal(value)} AS JSON)"
    char_type = _char_type(col)
    if isinstance(value, (str, bytes, bytearray, memoryview)) and (char_type or not isinstance(value, str)):
        raw = stored_bytes(col, value)
        if raw is not None:
            if col.collation == BINARY and char_type:
                return f"{q}=X'{raw.hex()}'"  # binary collation: every byte counts, and the index can be used
            return f"CAST({q} AS BINARY)=X'{raw.hex()}'"
    return f"{q}={value_sql(col, value)}"


def _names(table: TableMap) -> list[str]:
    if any(c.name is None for c in table.columns):
        raise OutputError(
            f"SQL output for {table.qualified_name} needs column names: the binlog has no names for it "
            "(use binlog_row_metadata=FULL on the server or supply --schemas)"
        )
    return [c.name for c in table.columns]  # type: ignore[misc]


def _present(table: TableMap, values: list) -> list[tuple[str, Any, Any]]:
    """(name, column, value) of every value the row image holds (a partial image leaves some ABSENT)."""
    return [(n, c, v) for n, c, v in zip(_names(table), table.columns, values, strict=False) if v is not ABSENT]


def _assignments(table: TableMap, values: list) -> str:
    return ", ".join(f"{quote_ident(name)}="
                     + (json_patch_sql(quote_ident(name), v) if type(v) is JsonPatch else value_sql(col, v))
                     for name, col, v in _present(table, values))


def _conditions(table: TableMap, values: list, keyed: bool) -> str:
    parts = []
    for name, col, v in _present(table, values):
        if type(v) is JsonPatch:
            raise OutputError(f"{table.qualified_name}: a partial JSON update cannot identify a row")
        exact = match_sql(col, name, v)
        if keyed and exact.startswith("CAST(") and isinstance(v, str) and _char_type(col):
            # a key column: compare under its collation too, so that the key's index finds the row
            exact = f"{quote_ident(name)}={value_sql(col, v)} AND {exact}"
        parts.append(exact)
    return " AND ".join(parts)


def json_patch_sql(target: str, patch: JsonPatch) -> str:
    """The diffs as nested JSON_REPLACE / JSON_INSERT / JSON_ARRAY_INSERT / JSON_REMOVE calls on `target`."""
    expr = target
    for d in patch.as_list():
        path = sql_literal(d["path"])
        if d["op"] == "remove":
            expr = f"JSON_REMOVE({expr}, {path})"
            continue
        value = f"CAST({sql_literal(d['value_json'])} AS JSON)"
        fn = {"replace": "JSON_REPLACE", "insert": "JSON_ARRAY_INSERT" if d["path"].endswith("]") else "JSON_INSERT"}
        expr = f"{fn[d['op']]}({expr}, {path}, {value})"
    return expr


def _where(table: TableMap, values: list) -> str:
    """Identifies the row exactly: by the primary key when the table map names one, else by every column."""
    if table.primary_key and all(values[i] is not ABSENT for i in table.primary_key):
        keyed = [v if i in table.primary_key else ABSENT for i, v in enumerate(values)]
        return _conditions(table, keyed, True)
    return _conditions(table, values, False)


def _insert(table: TableMap, values: list) -> str:
    cols = _present(table, values)
    return (
        f"INSERT INTO {quote_ident(table.database)}.{quote_ident(table.table)} "
        f"({', '.join(quote_ident(n) for n, _, _ in cols)}) VALUES ({', '.join(value_sql(c, v) for _, c, v in cols)});"
    )


def _update(table: TableMap, new: list, old: list) -> str:
    return (
        f"UPDATE {quote_ident(table.database)}.{quote_ident(table.table)} SET {_assignments(table, new)} "
        f"WHERE {_where(table, old)} LIMIT 1;"
    )


def _delete(table: TableMap, old: list) -> str:
    return f"DELETE FROM {quote_ident(table.database)}.{quote_ident(table.table)} WHERE {_where(table, old)} LIMIT 1;"


def forward_sql(c: RowChange) -> str:
    if c.op == OP_INSERT:
        return _insert(c.table, c.after)
    if c.op == OP_DELETE:
        return _delete(c.table, c.before)
    return _update(c.table, c.after, c.before)


def rollback_sql(c: RowChange) -> str:
    if c.after is not None and any(type(v) is JsonPatch for v in c.after):
        raise OutputError(f"{c.file}:{c.pos}: a partial JSON update logged without its before image "
                          "(binlog_row_image=MINIMAL) cannot be undone")
    if c.op == OP_INSERT:
        return _delete(c.table, c.after)
    if c.op == OP_DELETE:
        _need_old_values(c, range(len(c.before)))
        return _insert(c.table, c.before)
    if c.op == OP_UPDATE:
        _need_old_values(c, [i for i, v in enumerate(c.after) if v is not ABSENT])
        return _update(c.table, c.before, c.after)
    raise OutputError(f"unknown operation {c.op}")


def _need_old_values(c: RowChange, columns) -> None:
    """Undoing needs the old value of every column the change wrote (all of them for a delete); a row image
    without them (binlog_row_image=MINIMAL or NOBLOB) cannot be undone exactly, and is not undone wrongly."""
    missing = [c.table.columns[i].key for i in columns if i >= len(c.before) or c.before[i] is ABSENT]
    if missing:
        raise OutputError(f"{c.file}:{c.pos}: {c.table.qualified_name}: undoing this {c.op} needs the old value of "
                          f"{', '.join(missing[:5])}{' ...' if len(missing) > 5 else ''}, which the binlog does not "
                          "carry (binlog_row_image=MINIMAL/NOBLOB; rollback needs FULL)")


def comment_text(text: str) -> str:
    """Text for a `# ...` comment line: anything that is not printable (newlines above all), `%` and `\\` are
    percent-encoded (UTF-8 bytes), so a file name can never end the comment and start a statement."""
    return "".join(ch if ch.isprintable() and ch not in "%\\" else "".join(f"%{b:02X}" for b in ch.encode(
        "utf-8", "surrogatepass")) for ch in text)


# Values are written as the server stored them: UTC timestamps, zero dates allowed, explicit zeros kept.
SQL_HEADER = "SET time_zone='+00:00';\nSET NAMES utf8mb4;\nSET SESSION sql_mode='NO_AUTO_VALUE_ON_ZERO';\n"


def write_sql(records: Iterable[RowChange | EventRecord], out: TextIO) -> int:
    out.write(SQL_HEADER)
    n = 0
    for r in records:
        if isinstance(r, RowChange):
            out.write(f"# {comment_text(r.file)}:{r.pos} {format_ts(r.ts)}\n{forward_sql(r)}\n")
            n += 1
    return n


def write_rollback(records: Iterable[RowChange | EventRecord], out: TextIO) -> int:
    """Statements undoing the changes, newest first. Spooled to a temp file so memory stays flat."""
    import tempfile  # (here: start-up time)

    offsets: list[int] = []

    with tempfile.TemporaryFile("w+b") as spool:
        for r in records:
            if isinstance(r, RowChange):
                offsets.append(spool.tell())
                spool.write(f"# undo {comment_text(r.file)}:{r.pos}#{r.row}\n{rollback_sql(r)}\n".encode())
        end = spool.tell()
        out.write(SQL_HEADER)
        for start in reversed(offsets):
            spool.seek(start)
            out.write(spool.read(end - start).decode())
            end = start
    return len(offsets)
