"""staging.moved_keys: the count of a history piece's updates that changed the key, which lets the delta-spark
merge skip reading a piece a second time for the old keys' deletes. Checked against the merge's own rule (an
update row whose `_before` key field differs from the new one, a null on either side not counting) on seeded
random pieces of several key shapes; a piece the count cannot be told for says None (it is then read)."""

from __future__ import annotations

import random

import pyarrow as pa
import pytest

from binlake.lake.staging import moved_keys

SHAPES = {
    "int": [("id", pa.int64())],
    "text": [("code", pa.string())],
    "composite": [("a", pa.int32()), ("b", pa.string())],
}


def _value(rng: random.Random, typ: pa.DataType):
    if rng.random() < 0.1:
        return None
    n = rng.randint(0, 4)
    return n if pa.types.is_integer(typ) else f"k{n}"


def _piece(rng: random.Random, keys: list[tuple[str, pa.DataType]], n: int) -> pa.Table:
    fields = [*keys, ("v", pa.int64())]
    before_type = pa.struct([pa.field(name, typ) for name, typ in fields])
    ops = [rng.choice(["insert", "update", "update", "delete"]) for _ in range(n)]
    cols = {name: [_value(rng, typ) for _ in range(n)] for name, typ in fields}
    befores = []
    for i, op in enumerate(ops):
        if op != "update" or rng.random() < 0.1:
            befores.append(None)
            continue
        # mostly the same key (an update of other columns), sometimes a moved one
        befores.append({name: (cols[name][i] if rng.random() < 0.7 else _value(rng, typ)) for name, typ in fields})
    arrays = {name: pa.array(cols[name], typ) for name, typ in fields}
    return pa.table({**arrays, "_op": pa.array(ops), "_before": pa.array(befores, before_type)})


def _expected(piece: pa.Table, keys: list[str]) -> int:
    moved = 0
    for row in piece.to_pylist():
        before = row["_before"]
        if row["_op"] == "update" and before is not None and any(
                before[k] is not None and row[k] is not None and before[k] != row[k] for k in keys):
            moved += 1
    return moved


@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_moved_keys_counts_key_changing_updates(shape: str) -> None:
    rng = random.Random(f"moved-{shape}")
    keys = SHAPES[shape]
    names = [name for name, _ in keys]
    seen = set()
    for _ in range(40):
        piece = _piece(rng, keys, rng.randint(1, 60))
        got = moved_keys(piece, names)
        assert got == _expected(piece, names)
        seen.add(got > 0)
        # chunked pieces count the same
        halves = pa.concat_tables([piece.slice(0, piece.num_rows // 2), piece.slice(piece.num_rows // 2)])
        assert moved_keys(halves, names) == got
    assert seen == {True, False}, "the seeded pieces should include pieces with and without moved keys"


def test_moved_keys_without_images_or_updates_is_zero_and_unknown_is_none() -> None:
    rng = random.Random(7)
    piece = _piece(rng, SHAPES["int"], 30)
    assert moved_keys(piece.drop_columns(["_before"]), ["id"]) == 0  # no old images: no key delete derived
    inserts = piece.filter(pa.compute.equal(piece.column("_op"), "insert"))
    assert moved_keys(inserts, ["id"]) == 0
    # an old image without the key field reads as null in the merge: not a move
    assert moved_keys(piece, ["missing"]) == 0
    # a key whose old and new types cannot be compared: not told here (the merge then reads the piece)
    odd = piece.set_column(0, "id", pa.array([b"x"] * piece.num_rows, pa.binary()))
    assert moved_keys(odd, ["id"]) is None
