"""Column definitions of CREATE/ALTER TABLE: data types, synonyms, attributes, and charset resolution.

`parse_column` reads `name type [attributes]` into a `ColumnSpec` (a ColumnDef plus what was written about
charset, keys and position). `resolve_charset` then applies the table default the way the server does, which can
change the type: CHAR(n) CHARACTER SET binary is BINARY(n), TEXT(n) becomes the smallest TEXT type that holds n
characters of the charset.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..binlog import coltypes as ct
from ..binlog.charsets import COLLATION_CHARSET, COLLATION_IDS
from ..binlog.coltypes import ddl_names
from .binlog_types import MBMAXLEN
from .model import ColumnDef
from .sqllex import BIT, DSTRING, HEX, NUMBER, QIDENT, STRING, WORD, Cursor, SqlSyntaxError, Token

INTEGER_TYPES = ddl_names(ct.INT)
TEXT_TYPES = ("tinytext", "text", "mediumtext", "longtext")
BLOB_TYPES = ("tinyblob", "blob", "mediumblob", "longblob")
LOB_BYTES = (255, 65535, 16777215, 4294967295)  # max bytes of tiny/-/medium/long TEXT and BLOB
CHARACTER_TYPES = {"char", "varchar", *TEXT_TYPES, "enum", "set"}
BINARY_TYPES = {"binary", "varbinary", *BLOB_TYPES}
TO_BINARY = {"char": "binary", "varchar": "varbinary", **dict(zip(TEXT_TYPES, BLOB_TYPES, strict=True))}
TIME_TYPES = {"time", "datetime", "timestamp"}
SPATIAL_TYPES = ddl_names(ct.GEOMETRY)
PLAIN_TYPES = {"date", "year", "json", "bool", "boolean", "serial", "inet4", "inet6", "uuid", "vector",
               *SPATIAL_TYPES, *TIME_TYPES, *BLOB_TYPES, *TEXT_TYPES, "binary", "varbinary", "bit"}
SYNONYMS = {
    "integer": "int", "int1": "tinyint", "int2": "smallint", "int3": "mediumint", "int4": "int", "int8": "bigint",
    "middleint": "mediumint", "dec": "decimal", "numeric": "decimal", "fixed": "decimal", "float4": "float",
    "float8": "double", "real": "double", "varcharacter": "varchar",
}
KNOWN_CHARSETS = sorted(set(COLLATION_CHARSET.values()) | {"utf8"}, key=len, reverse=True)


def norm_charset(name: str | None) -> str | None:
    """Lower-case charset name; utf8 means utf8mb3."""
    if name is None:
        return None
    low = name.lower()
    return "utf8mb3" if low == "utf8" else low


def norm_collation(name: str | None) -> str | None:
    if name is None:
        return None
    low = name.lower()
    return "utf8mb3" + low[4:] if low.startswith("utf8_") else low


def charset_of_collation(collation: str) -> str | None:
    """The charset a collation name belongs to: from the id table, else from the name's prefix."""
    cid = COLLATION_IDS.get(collation)
    if cid is not None and cid in COLLATION_CHARSET:
        return COLLATION_CHARSET[cid]
    if collation == "binary":
        return "binary"
    for cs in KNOWN_CHARSETS:
        if collation.startswith(cs + "_"):
            return norm_charset(cs)
    return None


def mbmaxlen(charset: str | None) -> int:
    return MBMAXLEN.get(charset or "", 1) if charset else 4


def lob_type(family: tuple[str, ...], max_bytes: int) -> str:
    """The smallest TEXT/BLOB type of `family` holding `max_bytes` bytes."""
    for name, limit in zip(family, LOB_BYTES, strict=True):
        if max_bytes <= limit:
            return name
    return family[-1]


@dataclass
class ColumnSpec:
    """A parsed column definition, before the table's default charset is applied."""

    col: ColumnDef
    charset: str | None = None  # as written (CHARACTER SET / ASCII / UNICODE / NATIONAL)
    collation: str | None = None  # as written (COLLATE)
    binary_attr: bool = False  # the BINARY attribute: the charset's _bin collation
    lob_length: int | None = None  # TEXT(n) / BLOB(n)
    primary: bool = False  # inline PRIMARY KEY / KEY
    unique: bool = False
    position: tuple[str, str | None] | None = None  # ("first", None) or ("after", column)


def resolve_charset(spec: ColumnSpec, table_charset: str | None, table_collation: str | None) -> ColumnDef:
    """Apply the table default to a character column (and the type changes charsets cause); returns spec.col."""
    col = spec.col
    if col.data_type in CHARACTER_TYPES:
        cs, coll = spec.charset, spec.collation
        if coll and not cs:
            cs = charset_of_collation(coll)
        if not cs:
            cs = table_charset
            same = table_collation and charset_of_collation(table_collation) in (None, table_charset)
            coll = table_collation if same else None
        if spec.binary_attr and cs and cs != "binary":
            coll = f"{cs}_bin"
        col.charset, col.collation = cs, coll
        if cs == "binary":
            col.data_type = TO_BINARY.get(col.data_type, col.data_type)
    if col.data_type in BINARY_TYPES:
        col.charset, col.collation = "binary", "binary"
    if spec.lob_length is not None:
        if col.data_type in TEXT_TYPES:
            col.data_type = lob_type(TEXT_TYPES, spec.lob_length * mbmaxlen(col.charset))
        elif col.data_type in BLOB_TYPES:
            col.data_type = lob_type(BLOB_TYPES, spec.lob_length)
    return col


# -- types ------------------------------------------------------------------------------------------------


def _params(cur: Cursor) -> list[int]:
    """(n) or (p, s); empty when there are none."""
    if not cur.at_op("("):
        return []
    cur.next()
    out = [cur.integer("a length")]
    while cur.accept_op(","):
        out.append(cur.integer("a scale"))
    cur.expect_op(")")
    return out


def _labels(cur: Cursor) -> list[str]:
    cur.expect_op("(")
    labels = [cur.string("an ENUM/SET label")]
    while cur.accept_op(","):
        labels.append(cur.string("an ENUM/SET label"))
    cur.expect_op(")")
    return labels


def _type_name(cur: Cursor, spec: ColumnSpec) -> str:
    """The base type name, with multi-word synonyms folded (NATIONAL CHAR, LONG VARCHAR, DOUBLE PRECISION...)."""
    t = cur.next()
    if t.kind != WORD:
        raise SqlSyntaxError(f"expected a data type, found {cur.sql[t.start:t.end]!r}", t.start)
    name = t.value.lower()
    if name == "national":
        spec.charset = "utf8mb3"
        name = cur.next().value.lower()
        if name not in ("char", "character", "varchar", "varcharacter"):
            raise SqlSyntaxError(f"NATIONAL {name.upper()} is not a type", t.start)
    elif name in ("nchar", "nvarchar"):
        spec.charset = "utf8mb3"
        name = "char" if name == "nchar" else "varchar"
    if name in ("char", "character"):
        name = "varchar" if cur.accept("VARYING") else "char"
    elif name == "long":
        if cur.accept("VARBINARY"):
            return "mediumblob"
        if cur.accept("CHAR", "VARYING") or cur.accept("VARCHAR"):
            return "mediumtext"
        return "mediumtext"
    elif name == "double":
        cur.accept("PRECISION")
    return SYNONYMS.get(name, name)


def parse_type(cur: Cursor, spec: ColumnSpec) -> None:
    col = spec.col
    name = _type_name(cur, spec)
    if name in ("enum", "set"):
        col.data_type, col.labels = name, _labels(cur)
        return
    params = _params(cur)
    if name in ("bool", "boolean"):
        col.data_type, col.length = "tinyint", 1
    elif name == "serial":
        col.data_type, col.unsigned, col.nullable, col.auto_increment = "bigint", True, False, True
        spec.unique = True
    elif name in INTEGER_TYPES or name in ("bit", "year", "char", "binary", "varchar", "varbinary", "vector"):
        col.data_type = name
        col.length = params[0] if params else (1 if name in ("bit", "char", "binary") else None)
        if name in ("varchar", "varbinary") and not params:
            raise SqlSyntaxError(f"{name.upper()} needs a length", cur.pos())
    elif name == "decimal":
        col.data_type = "decimal"
        col.precision = params[0] if params else 10
        col.scale = params[1] if len(params) > 1 else 0
    elif name in ("float", "double"):
        col.data_type = name
        if len(params) == 1:  # FLOAT(p): precision in bits picks FLOAT or DOUBLE
            col.data_type = "float" if params[0] <= 24 else "double"
        elif len(params) == 2:
            col.precision, col.scale = params
    elif name in TIME_TYPES:
        col.data_type, col.fsp = name, params[0] if params else 0
    elif name in TEXT_TYPES or name in BLOB_TYPES:
        col.data_type = name
        if params and name in ("text", "blob"):
            spec.lob_length = params[0]
    elif name in PLAIN_TYPES:
        col.data_type = name
    else:
        raise SqlSyntaxError(f"unknown data type {name.upper()}", cur.pos())


# -- attributes -----------------------------------------------------------------------------------------


def expression_text(cur: Cursor) -> str:
    """The text of a DEFAULT / ON UPDATE value: a signed literal, a (parenthesized expression), a function call,
    NEXT VALUE FOR seq. Binary operators need parentheses there (the server rejects `DEFAULT 1 + 2`), so a
    following word such as NOT (of NOT NULL) or COLLATE is the next column attribute."""
    start = cur.pos()
    while cur.at_op("+", "-", "~", "!"):
        cur.next()
    t = cur.peek()
    if t is None:
        raise SqlSyntaxError("expected a value", len(cur.sql))
    if cur.at_op("("):
        cur.skip_group()
    elif cur.accept("NEXT", "VALUE", "FOR") or cur.accept("PREVIOUS", "VALUE", "FOR"):
        cur.ident("a sequence name")
        if cur.accept_op("."):
            cur.ident("a sequence name")
    else:
        _literal_or_call(cur, t)
    return cur.text(start, cur.tokens[cur.i - 1].end)


def _literal_or_call(cur: Cursor, t: Token) -> None:
    cur.next()
    if t.kind == WORD:
        if t.value.startswith("_") and cur.peek() is not None and cur.peek().kind in (STRING, HEX, BIT):
            cur.next()  # charset introducer: _utf8mb4'text'
        elif cur.at_op("("):
            cur.skip_group()  # function call
    elif t.kind in (STRING, DSTRING):
        while cur.peek() is not None and cur.peek().kind in (STRING, DSTRING):
            cur.next()  # 'adjacent' 'strings'
    elif t.kind not in (NUMBER, HEX, BIT, QIDENT):
        raise SqlSyntaxError(f"unexpected {cur.sql[t.start:t.end]!r} in a DEFAULT value", t.start)


def _skip_references(cur: Cursor) -> None:
    """REFERENCES tbl (cols) [MATCH x] [ON DELETE|UPDATE action]..."""
    cur.ident("a table name")
    if cur.accept_op("."):
        cur.ident("a table name")
    if cur.at_op("("):
        cur.skip_group()
    while True:
        if cur.accept("MATCH"):
            cur.next()
        elif cur.accept("ON"):
            cur.next()  # DELETE | UPDATE
            if not (cur.accept("SET", "NULL") or cur.accept("SET", "DEFAULT") or cur.accept("NO", "ACTION")):
                cur.next()  # RESTRICT | CASCADE
        else:
            return


def _skip_option_value(cur: Cursor) -> None:
    cur.accept_op("=")
    if cur.at_op("("):
        cur.skip_group()
    else:
        cur.next()


def _generated(cur: Cursor, col: ColumnDef) -> None:
    """After [GENERATED ALWAYS] AS: (expr) [VIRTUAL|STORED|PERSISTENT], or MariaDB's ROW START|END."""
    if cur.at_word("ROW") and cur.at_word("START", "END", k=1):
        cur.next()
        col.generated, col.stored, col.nullable = f"ROW {cur.next().value.upper()}", True, False
        return
    start, end = cur.skip_group()
    col.generated = cur.text(start, end)
    if cur.accept("STORED") or cur.accept("PERSISTENT"):
        col.stored = True
    else:
        cur.accept("VIRTUAL")


def _attribute(cur: Cursor, spec: ColumnSpec) -> bool:
    """One column attribute; False when the cursor is not at one (end of this column definition)."""
    col = spec.col
    if cur.accept("NOT", "NULL"):
        col.nullable = False
    elif cur.accept("NULL"):
        col.nullable = True
    elif cur.accept("DEFAULT"):
        col.default = expression_text(cur)
    elif cur.accept("ON", "UPDATE"):
        expression_text(cur)
    elif cur.accept("AUTO_INCREMENT"):
        col.auto_increment = True
    elif cur.accept("UNSIGNED"):
        col.unsigned = True
    elif cur.accept("SIGNED"):
        col.unsigned = False
    elif cur.accept("ZEROFILL"):
        col.zerofill = col.unsigned = True
    elif cur.accept("PRIMARY", "KEY") or cur.accept("KEY"):
        spec.primary = True
        col.nullable = False
    elif cur.accept("UNIQUE"):
        cur.accept("KEY")
        spec.unique = True
    elif cur.accept("SERIAL", "DEFAULT", "VALUE"):
        col.nullable, col.auto_increment, spec.unique = False, True, True
    elif cur.accept("COMMENT"):
        col.comment = cur.string("a comment")
    elif cur.accept("CHARACTER", "SET") or cur.accept("CHARSET"):
        cur.accept_op("=")
        spec.charset = norm_charset(cur.name_or_string("a character set"))
    elif cur.accept("COLLATE"):
        cur.accept_op("=")
        spec.collation = norm_collation(cur.name_or_string("a collation"))
    elif cur.accept("BINARY"):
        spec.binary_attr = True
    elif cur.accept("BYTE"):
        spec.charset = "binary"
    elif cur.accept("ASCII"):
        spec.charset = "latin1"
    elif cur.accept("UNICODE"):
        spec.charset = "ucs2"
    elif cur.accept("GENERATED", "ALWAYS", "AS") or cur.accept("AS"):
        _generated(cur, col)
    elif cur.accept("INVISIBLE"):
        col.invisible = True
    elif cur.accept("VISIBLE"):
        col.invisible = False
    elif cur.accept("REFERENCES"):
        _skip_references(cur)
    elif cur.at_word("CONSTRAINT", "CHECK"):
        if cur.accept("CONSTRAINT") and not cur.at_word("CHECK"):
            cur.ident("a constraint name")
        cur.expect("CHECK")
        cur.skip_group()
        cur.accept("NOT", "ENFORCED") or cur.accept("ENFORCED")
    elif cur.accept("FIRST"):
        spec.position = ("first", None)
    elif cur.accept("AFTER"):
        spec.position = ("after", cur.ident("a column name"))
    elif cur.at_word("COLUMN_FORMAT", "STORAGE", "SRID", "ENGINE_ATTRIBUTE", "SECONDARY_ENGINE_ATTRIBUTE",
                     "REF_SYSTEM_ID"):
        cur.next()
        _skip_option_value(cur)
    elif cur.accept("COMPRESSED"):
        col.compressed = True
        if cur.accept_op("="):
            cur.next()
    elif any(cur.accept(*words) for words in (("WITH", "SYSTEM", "VERSIONING"), ("WITHOUT", "SYSTEM", "VERSIONING"),
                                               ("NOT", "SECONDARY"))):
        pass
    elif cur.at_ident() and cur.at_op("=", k=1):  # MariaDB engine-defined attribute: `name`=value
        cur.next()
        _skip_option_value(cur)
    else:
        return False
    return True


def parse_column(cur: Cursor) -> ColumnSpec:
    """`name type [attributes]` up to the next ',' or ')' or the end of the statement."""
    spec = ColumnSpec(ColumnDef(name=cur.ident("a column name"), data_type=""))
    parse_type(cur, spec)
    while not cur.at_end() and not cur.at_op(",", ")"):
        if not _attribute(cur, spec):
            raise SqlSyntaxError(f"unexpected {cur.describe()} in the definition of column {spec.col.name!r}",
                                 cur.pos())
    return spec


def key_columns(cur: Cursor) -> list[str]:
    """(a, b(10) DESC, (expr)) -> column names of the key parts that are plain columns."""
    return key_parts(cur)[0]


def key_parts(cur: Cursor) -> tuple[list[str], bool]:
    """(a, b(10) DESC, (expr)) -> (column names of the parts that are columns, whether every part is a whole
    column: no prefix length, no expression)."""
    cur.expect_op("(")
    names: list[str] = []
    plain = True
    while True:
        if cur.at_op("("):
            cur.skip_group()  # functional key part
            plain = False
        else:
            names.append(cur.ident("a key column"))
            if cur.at_op("("):
                cur.skip_group()  # prefix length
                plain = False
        cur.accept("ASC") or cur.accept("DESC")
        if cur.accept_op(")"):
            return names, plain
        cur.expect_op(",")

