"""Forward/rollback SQL text: nothing from a file name, a name or a value leaves its comment, identifier or literal;
comparisons are byte-exact. (The server-side proof is tests/integration/test_sql_roundtrip.py.)"""

from __future__ import annotations

import io
import random
from decimal import Decimal

import pytest
import sqlglot
from sqlglot import exp

from binlake.binlog.constants import ColumnType as T
from binlake.binlog.output import (
    OutputError,
    comment_text,
    float_literal,
    forward_sql,
    match_sql,
    rollback_sql,
    text_literal,
    value_sql,
    write_rollback,
    write_sql,
)
from binlake.binlog.records import OP_DELETE, OP_INSERT, OP_UPDATE, RowChange
from binlake.binlog.tablemap import Column, TableMap
from binlake.binlog.values import ABSENT

UTF8_CI, LATIN1_CI, BINARY = 45, 8, 63  # utf8mb4_general_ci, latin1_swedish_ci, binary


def table(name: str = "t`'\" x", db: str = "d`b; DROP", pk: list[int] | None = None) -> TableMap:
    cols = [Column(0, T.LONG, name="id`"), Column(1, T.VARCHAR, 80, collation=UTF8_CI, name="s'\"; --"),
            Column(2, T.VARCHAR, 20, collation=LATIN1_CI, name="l 1"), Column(3, T.BLOB, 2, collation=BINARY,
                                                                             name="b"),
            Column(4, T.FLOAT, 4, name="f"), Column(5, T.ENUM, name="e", enum_labels=["a", "B", "ç"]),
            Column(6, T.SET, name="st", set_labels=["x", "y", "z"]), Column(7, T.NEWDECIMAL, name="dec")]
    return TableMap(1, db, name, cols, primary_key=pk)


def change(tm: TableMap, op: str, before, after, file: str = "mysql-bin.000001") -> RowChange:
    return RowChange(file=file, pos=4, txn_pos=4, sub=0, row=0, ts=0, gtid=None, table=tm, op=op, before=before,
                     after=after)


HOSTILE = ["it's", "a\\b", "\\'; DROP TABLE t; --", "\x00", "new\nline\r\n", "\x1a", "😀", "x  ", "", "'",
           "\u2028", "ABC", "é", "`", '"', "/* x */", "#"]


def statements(sql: str) -> list[exp.Expression]:
    """Parsed with MySQL rules (a real parser, not a pattern): how many statements, and of which kind."""
    return [s for s in sqlglot.parse(sql, read="mysql") if s is not None]


def test_values_never_leave_their_literal() -> None:
    rng = random.Random(7)
    tm = table()
    for _ in range(200):
        text = "".join(rng.choice(HOSTILE) for _ in range(3))
        row = [1, text, text.encode("utf-8")[:5].decode("latin-1"), bytes(rng.randrange(256) for _ in range(9)),
               1.1, "ç", "x,z", Decimal("-1.50")]
        other = [2, text[::-1], "E", b"", 0.1, "B", "", Decimal("0.00")]
        for c in (change(tm, OP_INSERT, None, row), change(tm, OP_DELETE, row, None),
                  change(tm, OP_UPDATE, row, other)):
            for sql in (forward_sql(c), rollback_sql(c)):
                parsed = statements(sql)
                assert len(parsed) == 1 and isinstance(parsed[0], (exp.Insert, exp.Delete, exp.Update)), sql
                assert "\n" not in sql and "\\" not in sql  # no backslash escapes: same meaning in every sql_mode
                literals = {lit.this for lit in parsed[0].find_all(exp.Literal) if lit.is_string}
                if text and "\\" not in text and text.isprintable() and isinstance(parsed[0], exp.Insert):
                    assert text in literals  # readable when it can be, and then exactly the value


def test_identifiers_stay_quoted() -> None:
    tm = table()
    sql = forward_sql(change(tm, OP_INSERT, None, [1, "a", "b", b"", 1.0, "a", "", Decimal("1")]))
    parsed = statements(sql)[0]
    names = {t.name for t in parsed.find_all(exp.Table)} | {t.db for t in parsed.find_all(exp.Table)}
    assert names == {"t`'\" x", "d`b; DROP"}
    assert {i.this for i in parsed.find_all(exp.Identifier)} >= {"id`", "s'\"; --", "l 1"}


def test_comparisons_are_exact() -> None:
    tm = table()
    cols = tm.columns
    assert match_sql(cols[1], "s", "ABC") == "CAST(`s` AS BINARY)=X'414243'"
    assert match_sql(cols[1], "s", "x  ") == "CAST(`s` AS BINARY)=X'782020'"
    assert match_sql(cols[1], "s", None) == "`s` IS NULL"
    assert match_sql(cols[2], "l", "é") == "CAST(`l` AS BINARY)=X'e9'"  # the latin1 byte, not UTF-8
    assert match_sql(cols[3], "b", b"\x00a") == "`b`=X'0061'"  # binary collation: every byte counts already
    assert match_sql(cols[4], "f", 1.100000023841858) == "`f`=1.100000023841858e0"  # FLOAT: the exact double
    assert match_sql(cols[5], "e", "ç") == "`e`+0=3" and match_sql(cols[6], "st", "x,z") == "`st`+0=5"
    # a keyed table: the key compared under its collation (index) and as bytes (exact)
    keyed = TableMap(2, "d", "k", [Column(0, T.VARCHAR, 40, collation=UTF8_CI, name="k"),
                                   Column(1, T.LONG, name="v")], primary_key=[0])
    sql = forward_sql(change(keyed, OP_DELETE, ["Ab", 1], None))
    assert sql == "DELETE FROM `d`.`k` WHERE `k`='Ab' AND CAST(`k` AS BINARY)=X'4162' LIMIT 1;"


def test_values_store_the_same_bytes() -> None:
    cols = table().columns
    assert value_sql(cols[1], "it's") == "'it''s'"
    assert value_sql(cols[1], "a\\b\n") == "_utf8mb4 X'615c620a'"
    assert value_sql(cols[2], "é€") == "X'e980'"  # MySQL latin1 is cp1252 with every byte defined
    assert value_sql(cols[2], "plain") == "'plain'"
    assert value_sql(cols[4], 1.100000023841858) == "1.1"  # stored as a FLOAT: the shortest form is exact
    assert value_sql(cols[5], "B") == "2" and value_sql(cols[6], "y,z") == "6"
    unknown = Column(9, T.VARCHAR, 10, name="u")  # no charset known: the bytes as they were
    assert value_sql(unknown, "é") == "X'c3a9'"
    assert float_literal(0.30000000000000004) == "0.30000000000000004e0" and float_literal(1e300) == "1e+300"
    assert text_literal("😀") == "'😀'" and text_literal("\x00") == "_utf8mb4 X'00'"


def test_file_names_stay_in_their_comment() -> None:
    tm = table()
    evil = "x\nDROP DATABASE mysql; -- \r\u2028\\%"
    c = change(tm, OP_INSERT, None, [1, "a", "b", b"", 1.0, "a", "", Decimal("1")], file=evil)
    for writer in (write_sql, write_rollback):
        out = io.StringIO()
        writer([c], out)
        lines = out.getvalue().splitlines()
        assert not any(line.startswith("DROP") for line in lines)
        comments = [line for line in lines if line.startswith("#")]
        assert len(comments) == 1 and comment_text(evil) in comments[0]
        assert [type(s).__name__ for s in statements(out.getvalue())][-1] in ("Insert", "Delete")
        assert not any(isinstance(s, exp.Drop) for s in statements(out.getvalue()))
    assert comment_text(evil) == "x%0ADROP DATABASE mysql; -- %0D%E2%80%A8%5C%25"


def test_rollback_refuses_row_images_without_the_old_values() -> None:
    keyed = table(pk=[0])
    full = [1, "a", "b", b"", 1.0, "a", "", Decimal("1")]
    # binlog_row_image=MINIMAL: the before image holds the key only, the after image the changed columns
    before = [1] + [ABSENT] * 7
    after = [ABSENT, "new", *[ABSENT] * 6]
    update = change(keyed, OP_UPDATE, before, after)
    assert forward_sql(update).startswith("UPDATE")  # forward needs only the key and the new values
    with pytest.raises(OutputError, match=r"mysql-bin.000001:4: .*needs the old value of s'\"; --"):
        rollback_sql(update)
    with pytest.raises(OutputError, match="undoing this delete"):
        rollback_sql(change(keyed, OP_DELETE, before, None))
    # with FULL images both directions work
    assert rollback_sql(change(keyed, OP_UPDATE, full, [1, "new", *full[2:]])).startswith("UPDATE")
    out = io.StringIO()
    with pytest.raises(OutputError):
        write_rollback([change(keyed, OP_DELETE, full, None), update], out)
    assert out.getvalue() == ""  # nothing written: the rollback is spooled before any output
