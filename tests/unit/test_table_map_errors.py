"""A TABLE_MAP the decoder cannot read (an unknown column type code, metadata no server writes) holds back only
its table: every rows event of that table becomes an UnreadableTableMap naming file, position and db.table, the
other tables (also inside the same transactions) decode completely, and `binlake decode` prints the error on
stderr and exits non-zero after writing everything else. Files are written with the project's BinlogWriter."""

from __future__ import annotations

import json
import random

import pytest

from binlake.binlog import rows
from binlake.binlog.constants import EventType as E
from binlake.binlog.decoder import BinlogDecoder, DecodeOptions
from binlake.binlog.errors import BinlogError, UnreadableTableMap
from binlake.binlog.records import EventRecord, RowChange
from binlake.binlog.stream import EventStream
from binlake.binlog.tablemap import Column
from binlake.cli import main
from binlake.testing.binlog_writer import BinlogWriter, column

# (column type code, TABLE_MAP metadata bytes, a stored value) that no decoder path can read
BAD_COLUMNS = {
    "unknown type with metadata": (200, b"\x07", b"\x01\x02"),
    "unknown type without metadata": (201, b"", b"\x05"),
    "impossible DATETIME2 fsp": (18, b"\x09", b"\x00" * 9),
}


def _write(path, rng: random.Random, bad_kind: str):
    """Tables good0..good2 and one unreadable table `bad`; transactions mix them in random order."""
    code, meta, stored = BAD_COLUMNS[bad_kind]
    written: dict[str, list] = {}
    bad_positions: list[int] = []
    with BinlogWriter(str(path), timestamp=1_700_000_000) as w:
        good = []
        for t in range(3):
            cols = [column("int", "id", 0), column("varchar(20)", "name", 1), column("bigint unsigned", "n", 2)]
            good.append(w.define_table(10 + t, "shop", f"good{t}", cols, [0]))
            written[f"good{t}"] = []
        bad_cols = [column("int", "id", 0), Column(1, code, name="mystery"), column("int", "after", 2)]
        bad = w.define_table(20, "shop", "bad", bad_cols, [0], raw_metadata={1: meta})
        key = 0
        for _ in range(12):
            with w.transaction() as tx:
                for _ in range(rng.randint(1, 4)):
                    if rng.random() < 0.35:
                        key += 1
                        tx.insert(bad, [[key, stored, rng.randint(-5, 5)]])
                    else:
                        tm = rng.choice(good)
                        key += 1
                        row = [key, f"n{rng.randint(0, 999)}", rng.randint(0, 2**64 - 1)]
                        tx.insert(tm, [row])
                        written[tm.table].append(row)
    # Where the bad table's rows events are, read with the plain event stream (not the decoder under test).
    with open(path, "rb") as f:
        maps = {}
        for ev in EventStream(f, path.name):
            if ev.type == E.TABLE_MAP:
                maps[int.from_bytes(ev.buf[ev.body:ev.body + 6], "little")] = ev.pos
            elif ev.type == E.WRITE_ROWS_V2 and int.from_bytes(ev.buf[ev.body:ev.body + 6], "little") == 20:
                bad_positions.append(ev.pos)
    return written, bad_positions


@pytest.mark.parametrize("bad_kind", sorted(BAD_COLUMNS))
@pytest.mark.parametrize("columnar", [True, False])
def test_unreadable_table_map_holds_back_only_its_table(tmp_path, monkeypatch, bad_kind: str, columnar: bool) -> None:
    monkeypatch.setattr(rows, "COLUMNAR", columnar)
    path = tmp_path / "mysql-bin.000001"
    written, bad_positions = _write(path, random.Random(bad_kind), bad_kind)
    assert bad_positions, "the random workload wrote no row of the bad table"
    decoder = BinlogDecoder(DecodeOptions(commits=True))
    out = list(decoder.decode_files([path]))
    changes = [r for r in out if isinstance(r, RowChange)]
    for table, expected in written.items():
        assert [list(c.after) for c in changes if c.table.table == table] == expected
    assert not [c for c in changes if c.table.table == "bad"]
    errors = decoder.table_errors
    assert [e.pos for e in errors] == bad_positions
    for e in errors:
        assert isinstance(e, UnreadableTableMap) and isinstance(e, BinlogError)
        assert (e.db, e.table, e.file) == ("shop", "bad", path.name)
        assert "shop.bad" in str(e) and path.name in str(e) and str(e.pos) in str(e) and "\n" not in str(e)
    records = [r for r in out if isinstance(r, EventRecord) and r.kind == "table_error"]
    assert [r.pos for r in records] == bad_positions
    assert all(r.info["table"] == "shop.bad" for r in records)
    # Every transaction still ends (commits are yielded), the file is read to its end.
    assert decoder.results[-1].end.status == "complete"


def test_unknown_type_is_named_in_the_error(tmp_path) -> None:
    path = tmp_path / "mysql-bin.000001"
    _write(path, random.Random(3), "unknown type with metadata")
    decoder = BinlogDecoder()
    list(decoder.decode_files([path]))
    assert "unknown column type 200 (column 2)" in decoder.table_errors[0].reason


def test_cli_decode_reports_the_table_and_exits_non_zero(tmp_path, capsys) -> None:
    path = tmp_path / "mysql-bin.000001"
    written, bad_positions = _write(path, random.Random(7), "unknown type without metadata")
    code = main(["decode", "--no-progress", str(path)])
    captured = capsys.readouterr()
    assert code == 4
    lines = [json.loads(line) for line in captured.out.splitlines()]
    for table, expected in written.items():
        assert [list(d["after"].values()) for d in lines if d["table"] == table] == expected
    errors = [line for line in captured.err.splitlines() if "UnreadableTableMap" in line]
    assert len(errors) == 1  # one line per table and file
    assert f"{path.name} at position {bad_positions[0]}" in errors[0] and "shop.bad" in errors[0]
    if len(bad_positions) > 1:
        assert f"{len(bad_positions)} rows events held back, the last at {bad_positions[-1]}" in errors[0]
    # Left out by the filter, the unreadable table stops nothing.
    assert main(["decode", "--no-progress", "--tables", r"^shop\.good", str(path)]) == 0
    assert "UnreadableTableMap" not in capsys.readouterr().err
    # stats counts the readable tables and reports the held-back one the same way.
    assert main(["stats", "--no-progress", "--json", str(path)]) == 4
    captured = capsys.readouterr()
    assert "shop.bad" in captured.err
