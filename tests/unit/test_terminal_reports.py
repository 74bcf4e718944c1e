"""`binlake ingest` and `binlake stats` on a terminal print rich tables; to a pipe or a file they print the plain text
scripts parse (unchanged), and `--json` is the same either way. Run in-process through `binlake.cli.main` with
stdout replaced by a stream that says it is a terminal."""

from __future__ import annotations

import io
import json
import random
import re
from pathlib import Path

import pytest

from binlake.cli import main
from binlake.testing.binlog_writer import BinlogWriter, column

ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
OPS = ("insert", "update", "delete")


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def run(monkeypatch, capsys, args: list[str], tty: bool) -> tuple[int, str]:
    """Exit code and stdout of `binlake ARGS` (ANSI codes removed when stdout is a terminal)."""
    capsys.readouterr()
    if not tty:
        code = main(args)
        return code, capsys.readouterr().out
    out = Terminal()
    with monkeypatch.context() as m:
        m.setenv("COLUMNS", "220")
        m.setattr("sys.stdout", out)
        code = main(args)
    return code, ANSI.sub("", out.getvalue())


def body_rows(text: str) -> list[list[str]]:
    """The cells of every body row of the rich tables in `text`."""
    return [[c.strip() for c in line.strip("│").split("│")] for line in text.splitlines() if line.startswith("│")]


def table_rows(text: str) -> dict[str, list[str]]:
    """First cell -> the other cells (first cells that name one row only)."""
    return {cells[0]: cells[1:] for cells in body_rows(text)}


def write_binlog(path: Path, seed: int) -> dict[str, dict[str, int]]:
    """Random inserts, updates and deletes over a few tables with integer keys; returns db.table -> op -> rows."""
    rnd = random.Random(seed)
    counts: dict[str, dict[str, int]] = {}
    with BinlogWriter(str(path), checksum=True, row_metadata="FULL", timestamp=1_700_000_000) as w:
        tables = []
        for i in range(rnd.randint(2, 5)):
            name = f"t{i}_{rnd.choice(['orders', 'users', 'x'])}"
            tm = w.define_table(100 + i, "shop", name, [column("int", "id", 0, nullable=False),
                                                        column("varchar(20)", "v", 1)], [0])
            tables.append((f"shop.{name}", tm, []))
        for n in range(rnd.randint(5, 25)):
            qualified, tm, keys = rnd.choice(tables)
            op = rnd.choice(OPS) if keys else "insert"
            with w.transaction(timestamp=1_700_000_001 + n) as tx:
                if op == "insert":
                    new = [len(keys) + k for k in range(rnd.randint(1, 4))]
                    keys.extend(new)
                    tx.insert(tm, [[k, f"v{k}"] for k in new])
                    rows = len(new)
                elif op == "update":
                    tx.update(tm, [([keys[0], f"v{keys[0]}"], [keys[0], "u"])])
                    rows = 1
                else:
                    tx.delete(tm, [[keys[-1], f"v{keys[-1]}"]])
                    keys.pop()
                    rows = 1
            counts.setdefault(qualified, dict.fromkeys(OPS, 0))[op] += rows
    return counts


@pytest.mark.parametrize("seed", [1, 2])
def test_ingest_summary_is_a_table_on_a_terminal_and_plain_text_otherwise(monkeypatch, capsys, tmp_path, seed):
    binlog = tmp_path / "src" / "mysql-bin.000001"
    binlog.parent.mkdir()
    counts = write_binlog(binlog, seed)
    args = ["ingest", "--source", f"local:{binlog.parent}", "--no-progress", "--no-gates", "--lake"]

    code, plain = run(monkeypatch, capsys, [*args, str(tmp_path / "plain")], tty=False)
    assert code == 0
    assert "│" not in plain and "\x1b" not in plain
    assert plain.splitlines()[0] == f"batch 0: 1 file(s), {sum(sum(c.values()) for c in counts.values())} row changes"
    for table, ops in counts.items():
        assert f"  {table}: insert {ops['insert']}, update {ops['update']}, delete {ops['delete']}" in plain

    code, shown = run(monkeypatch, capsys, [*args, str(tmp_path / "tty")], tty=True)
    assert code == 0
    rows = table_rows(shown)
    for table, ops in counts.items():
        assert rows[table] == [str(ops[op]) for op in OPS]
    assert plain.splitlines()[0] in shown  # the headline is the table's title
    assert "total" in rows and float(rows["total"][0]) >= 0  # the time table

    code, again = run(monkeypatch, capsys, [*args, str(tmp_path / "tty")], tty=True)
    assert code == 0 and again.strip() == "nothing new to ingest"


def test_stats_tables_on_a_terminal_match_the_json_report(monkeypatch, capsys, tmp_path):
    binlog = tmp_path / "mysql-bin.000001"
    counts = write_binlog(binlog, 7)
    code, out = run(monkeypatch, capsys, ["stats", "--no-progress", "--json", str(binlog)], tty=True)
    assert code == 0
    report = json.loads(out)  # --json stays JSON on a terminal
    assert report["tables"] == {t: {op: n for op, n in ops.items() if n} for t, ops in counts.items()}

    code, shown = run(monkeypatch, capsys, ["stats", "--no-progress", str(binlog)], tty=True)
    assert code == 0
    rows = table_rows(shown)
    for table, ops in counts.items():
        assert rows[table] == [str(ops[op]) for op in OPS]
    assert rows[binlog.name][1:3] == [str(report["files"][0]["events"]), str(report["files"][0]["rows"])]
    assert f"events: {report['events']}" in shown and f"rows: {report['rows']}" in shown
    largest, longest = report["largest_transactions"][0], report["longest_transactions"][0]
    assert [f"{largest['file']}:{largest['pos']}", str(largest["rows"]), str(largest["bytes"]), largest["start"],
            ""] in body_rows(shown)
    assert [f"{longest['file']}:{longest['pos']}", str(longest["duration_s"]), str(longest["rows"]),
            longest["start"]] in body_rows(shown)

    code, plain = run(monkeypatch, capsys, ["stats", "--no-progress", str(binlog)], tty=False)
    assert code == 0 and "│" not in plain
    assert "largest transactions (rows, bytes):" in plain and f"rows: {report['rows']}" in plain


def test_stats_table_escapes_control_characters(monkeypatch, capsys, tmp_path):
    db, table = "d\x9b31mb", "t\x1b[31mred\x07"
    path = tmp_path / "f\x1b[2Jname.000001"
    with BinlogWriter(str(path), checksum=True, row_metadata="FULL", timestamp=1_700_000_000) as w:
        tm = w.define_table(10, db, table, [column("int", "c", 0, nullable=False)], [0])
        with w.transaction(timestamp=1_700_000_100) as tx:
            tx.insert(tm, [[1], [2], [3]])
    out = Terminal()
    with monkeypatch.context() as m:
        m.setenv("COLUMNS", "220")
        m.setattr("sys.stdout", out)
        assert main(["stats", "--no-progress", str(path)]) == 0
    text = out.getvalue()
    assert "\x1b[31mred" not in text and "\x9b" not in text and "\x07" not in text and "\x1b[2J" not in text
    rows = table_rows(ANSI.sub("", text))
    assert rows["d\\x9b31mb.t\\x1b[31mred\\x07"] == ["3", "0", "0"]
