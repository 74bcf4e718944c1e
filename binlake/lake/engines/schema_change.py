"""Applying a list of ColumnChange to Arrow data, batch by batch (used by both engines' replace_schema)."""

from __future__ import annotations

from collections.abc import Sequence

import pyarrow as pa
import pyarrow.compute as pc

from .base import SEQ, ColumnChange, EngineError


def _default_array(change: ColumnChange, n: int) -> pa.Array:
    assert change.type is not None
    if change.default is None:
        return pa.nulls(n, change.type)
    value = change.default if isinstance(change.default, pa.Scalar) else pa.scalar(change.default)
    if not value.is_valid:
        return pa.nulls(n, change.type)
    return pa.repeat(value.cast(change.type), n)


def _check(change: ColumnChange, names: list[str]) -> None:
    if change.column == SEQ or change.new_name == SEQ:
        raise EngineError(f"replace_schema cannot {change.kind} the {SEQ} order column")
    if change.kind == "add":
        if change.type is None:
            raise EngineError(f"add {change.column!r}: a type is required")
        if change.column in names:
            raise EngineError(f"add {change.column!r}: the column already exists")
        return
    if change.column not in names:
        raise EngineError(f"{change.kind} {change.column!r}: no such column (columns: {names})")
    if change.kind == "rename" and (not change.new_name or change.new_name in names):
        raise EngineError(f"rename {change.column!r} -> {change.new_name!r}: missing or existing target name")
    if change.kind == "convert" and change.type is None:
        raise EngineError(f"convert {change.column!r}: a type is required")


def apply_changes(batch: pa.RecordBatch, changes: Sequence[ColumnChange]) -> pa.RecordBatch:
    """The batch with every change applied in order; raises EngineError on an impossible change or conversion."""
    fields, arrays = list(batch.schema), list(batch.columns)
    for change in changes:
        names = [f.name for f in fields]
        _check(change, names)
        if change.kind == "add":
            pos = len(fields) if change.position is None else change.position
            if change.compute is not None:
                values = change.compute(pa.RecordBatch.from_arrays(arrays, schema=pa.schema(fields)))
            else:
                values = _default_array(change, batch.num_rows)
            fields.insert(pos, pa.field(change.column, change.type))
            arrays.insert(pos, values)
            continue
        i = names.index(change.column)
        if change.kind == "drop":
            del fields[i], arrays[i]
        elif change.kind == "rename":
            fields[i] = fields[i].with_name(change.new_name)
        else:
            assert change.type is not None
            try:
                out = change.converter(arrays[i]) if change.converter else pc.cast(arrays[i], change.type, safe=True)
                if out.type != change.type:
                    out = pc.cast(out, change.type, safe=True)
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError) as exc:
                raise EngineError(f"convert {change.column!r} to {change.type}: {exc}") from exc
            if len(out) != batch.num_rows:
                raise EngineError(f"convert {change.column!r}: the converter changed the row count")
            fields[i], arrays[i] = fields[i].with_type(change.type), out
    return pa.RecordBatch.from_arrays(arrays, schema=pa.schema(fields))


def plan(schema: pa.Schema, changes: Sequence[ColumnChange]) -> pa.Schema:
    """The schema after `changes` (validates them on an empty batch before any data is read)."""
    empty = pa.RecordBatch.from_arrays([pa.array([], f.type) for f in schema], schema=schema)
    return apply_changes(empty, changes).schema


def renamed(names: list[str], changes: Sequence[ColumnChange]) -> list[str]:
    """`names` followed through renames; dropped names disappear (e.g. partition columns)."""
    out = list(names)
    for change in changes:
        if change.kind == "drop" and change.column in out:
            out.remove(change.column)
        elif change.kind == "rename" and change.column in out:
            out[out.index(change.column)] = change.new_name or change.column
    return out


def relevant(changes: Sequence[ColumnChange], columns: list[str]) -> list[ColumnChange]:
    """The subset of changes that touch `columns` (adds excluded), followed through renames."""
    tracked, out = set(columns), []
    for change in changes:
        if change.kind != "add" and change.column in tracked:
            out.append(change)
            if change.kind == "drop":
                tracked.discard(change.column)
            elif change.kind == "rename":
                tracked.discard(change.column)
                tracked.add(change.new_name or change.column)
    return out
