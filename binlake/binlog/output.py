"""Output formats for decoded changes: JSON lines, forward SQL and rollback SQL."""

from __future__ import annotations

import json
import struct
import time
from collections.abc import Callable, Iterable, Iterator
from decimal import Decimal
from typing import Any, TextIO

from .constants import ColumnType as T
from .records import OP_DELETE, OP_INSERT, OP_UPDATE, EventRecord, RowChange
from .rows import ABSENT, JsonPatch
from .tablemap import TableMap

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


def _json_formatter(col_type: int) -> Callable[[Any], Any] | None:
    if col_type == T.FLOAT:
        return float32_value
    if col_type == T.JSON:
        return lambda v: _json_patch(v) if type(v) is JsonPatch else RawJson(v)
    return None


class RawJson(str):
    """JSON text to embed as a JSON value, not as a string: parsing it would turn DECIMAL 9.00 into 9.0."""


def _json_patch(value: JsonPatch) -> dict:
    return {"json_diff": [{k if k != "value_json" else "value": (RawJson(v) if k == "value_json" else v)
                           for k, v in d.items()} for d in value.as_list()]}


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
        plan = [(c.key, _json_formatter(c.type)) for c in table.columns]
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
        import uuid  # here, not at module level: `binlake stats` imports this module and never needs it

        self.token = "\ue000" + uuid.uuid4().hex
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

_ESCAPES = str.maketrans({"\\": "\\\\", "'": "\\'", "\0": "\\0", "\n": "\\n", "\r": "\\r", "\x1a": "\\Z"})


def quote_ident(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


def sql_literal(value: Any, col_type: int | None = None) -> str:
    if value is None:
        return "NULL"
    if isinstance(value, bool):
        return "1" if value else "0"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, Decimal):
        return format(value, "f")
    if isinstance(value, float):
        return repr(float32_value(value) if col_type == T.FLOAT else value)
    if isinstance(value, (bytes, bytearray, memoryview)):
        return "X'" + bytes(value).hex() + "'"
    return "'" + str(value).translate(_ESCAPES) + "'"


def _names(table: TableMap) -> list[str]:
    if any(c.name is None for c in table.columns):
        raise OutputError(
            f"SQL output for {table.qualified_name} needs column names: the binlog has no names for it "
            "(use binlog_row_metadata=FULL on the server or supply --schemas)"
        )
    return [c.name for c in table.columns]  # type: ignore[misc]


def _assignments(table: TableMap, values: list, sep: str, for_where: bool) -> str:
    names = _names(table)
    parts = []
    for i, (name, v) in enumerate(zip(names, values, strict=False)):
        if v is ABSENT:
            continue
        col = table.columns[i]
        if type(v) is JsonPatch:
            if for_where:
                raise OutputError(f"{table.qualified_name}: a partial JSON update cannot identify a row")
            parts.append(f"{quote_ident(name)}={json_patch_sql(quote_ident(name), v)}")
            continue
        if for_where and v is None:
            parts.append(f"{quote_ident(name)} IS NULL")
        else:
            parts.append(f"{quote_ident(name)}={sql_literal(v, col.type)}")
    return sep.join(parts)


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
    if table.primary_key and all(values[i] is not ABSENT for i in table.primary_key):
        keyed = [v if i in table.primary_key else ABSENT for i, v in enumerate(values)]
        return _assignments(table, keyed, " AND ", True)
    return _assignments(table, values, " AND ", True)


def _insert(table: TableMap, values: list) -> str:
    names = _names(table)
    cols = [(n, v, c.type) for n, v, c in zip(names, values, table.columns, strict=False) if v is not ABSENT]
    return (
        f"INSERT INTO {quote_ident(table.database)}.{quote_ident(table.table)} "
        f"({', '.join(quote_ident(n) for n, _, _ in cols)}) VALUES ({', '.join(sql_literal(v, t) for _, v, t in cols)});"
    )


def _update(table: TableMap, new: list, old: list) -> str:
    return (
        f"UPDATE {quote_ident(table.database)}.{quote_ident(table.table)} SET {_assignments(table, new, ', ', False)} "
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
        return _insert(c.table, c.before)
    if c.op == OP_UPDATE:
        return _update(c.table, c.before, c.after)
    raise OutputError(f"unknown operation {c.op}")


# Values are written as the server stored them: UTC timestamps, zero dates allowed, explicit zeros kept.
SQL_HEADER = "SET time_zone='+00:00';\nSET NAMES utf8mb4;\nSET SESSION sql_mode='NO_AUTO_VALUE_ON_ZERO';\n"


def write_sql(records: Iterable[RowChange | EventRecord], out: TextIO) -> int:
    out.write(SQL_HEADER)
    n = 0
    for r in records:
        if isinstance(r, RowChange):
            out.write(f"# {r.file}:{r.pos} {format_ts(r.ts)}\n{forward_sql(r)}\n")
            n += 1
    return n


def write_rollback(records: Iterable[RowChange | EventRecord], out: TextIO) -> int:
    """Statements undoing the changes, newest first. Spooled to a temp file so memory stays flat."""
    offsets: list[int] = []
    import tempfile

    with tempfile.TemporaryFile("w+b") as spool:
        for r in records:
            if isinstance(r, RowChange):
                offsets.append(spool.tell())
                spool.write(f"# undo {r.file}:{r.pos}#{r.row}\n{rollback_sql(r)}\n".encode())
        end = spool.tell()
        out.write(SQL_HEADER)
        for start in reversed(offsets):
            spool.seek(start)
            out.write(spool.read(end - start).decode())
            end = start
    return len(offsets)


def iter_sql(records: Iterable[RowChange]) -> Iterator[str]:
    for r in records:
        yield forward_sql(r)
