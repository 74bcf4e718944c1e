"""Generated columns whose values the binlog does not carry.

Rows events carry every column of the row image (binlog_row_image=FULL), STORED and VIRTUAL generated columns
included: those values are taken as they are. What no rows event carries is the value the server computes for
the rows already in a table when an ALTER adds a generated column or changes its expression. For those rows the
expression is evaluated here: parsed with sqlglot (MySQL dialect) and translated to pyarrow compute, which both
engines' schema changes run (engines/schema_change.py). An expression outside the translated subset (or one
whose evaluation fails, e.g. an overflow) gives null for those rows, and a warning goes into the run summary and
the table's properties (`binlake.warnings`).

Translated: column references, numeric and string literals, NULL, + - * and DIV, unary minus, comparisons, AND,
OR, NOT, IF, CASE, COALESCE/IFNULL, CONCAT, UPPER/LOWER, LENGTH (bytes)/CHAR_LENGTH, ABS. Not translated (MySQL's
semantics differ from Arrow's or need the server's context): `/` (decimal division with div_precision_increment),
MOD, string and date functions beyond those, CAST, JSON functions, user functions.
"""

from __future__ import annotations

from collections.abc import Callable
from decimal import Decimal

import pyarrow as pa
import pyarrow.compute as pc

Compute = Callable[[pa.RecordBatch], pa.Array]


class Untranslatable(ValueError):
    """The expression uses something the translation does not cover."""


def compile_expression(sql: str, target: pa.DataType) -> Compute:
    """A function computing the expression over a record batch (columns by name, case-insensitive), cast to
    `target`. Raises Untranslatable."""
    # sqlglot takes about half a second to import: only tables with generated columns need it.
    import sqlglot
    from sqlglot import exp

    try:
        tree = sqlglot.parse_one(sql, read="mysql")
    except sqlglot.errors.ParseError as exc:
        raise Untranslatable(f"cannot parse: {exc}") from exc
    _check(tree, exp)

    def compute(batch: pa.RecordBatch) -> pa.Array:
        value = _eval(tree, batch, exp)
        if isinstance(value, pa.Scalar):
            value = pa.repeat(value, batch.num_rows)
        if isinstance(value, pa.ChunkedArray):
            value = value.combine_chunks()
        if pa.types.is_boolean(value.type) and not pa.types.is_boolean(target):
            value = value.cast(pa.int8())
        return value.cast(target, safe=True)

    return compute


_BINARY = {"Add": "add_checked", "Sub": "subtract_checked", "Mul": "multiply_checked", "EQ": "equal",
           "NEQ": "not_equal", "GT": "greater", "GTE": "greater_equal", "LT": "less", "LTE": "less_equal",
           "And": "and_kleene", "Or": "or_kleene", "IntDiv": "divide_checked"}
_FUNCS = {"Upper": "utf8_upper", "Lower": "utf8_lower", "Abs": "abs_checked"}
_ALLOWED = {*_BINARY, *_FUNCS, "Column", "Identifier", "Literal", "Null", "Paren", "Neg", "Not", "If", "Case",
            "Coalesce", "Concat", "Boolean", "Length"}


def _check(tree, exp) -> None:
    for node in tree.walk():
        name = type(node).__name__
        if name not in _ALLOWED:
            raise Untranslatable(f"{node.sql(dialect='mysql')!r} ({name}) is not translated")


def _column(batch: pa.RecordBatch, name: str) -> pa.Array:
    for i, field in enumerate(batch.schema):
        if field.name.lower() == name.lower():
            return batch.column(i)
    raise Untranslatable(f"column {name!r} is not in the table")


def _literal(node) -> pa.Scalar:
    if node.is_string:
        return pa.scalar(node.this, pa.string())
    text = node.this
    if text.lstrip("-").isdigit():
        return pa.scalar(int(text), pa.int64())
    if "e" in text.lower():
        return pa.scalar(float(text), pa.float64())
    return pa.scalar(Decimal(text))


def _text(value):
    """CONCAT's arguments as text: integers, decimals and strings convert as MySQL prints them."""
    t = value.type
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        return value
    if pa.types.is_integer(t) or pa.types.is_decimal(t):
        return pc.cast(value, pa.string())
    raise Untranslatable(f"CONCAT of a {t} value is not translated")


def _eval(node, batch: pa.RecordBatch, exp):
    name = type(node).__name__
    if name == "Column":
        return _column(batch, node.name)
    if name == "Literal":
        return _literal(node)
    if name == "Null":
        return pa.scalar(None)
    if name == "Boolean":
        return pa.scalar(bool(node.this))
    if name == "Paren":
        return _eval(node.this, batch, exp)
    if name == "Neg":
        return pc.negate_checked(_eval(node.this, batch, exp))
    if name == "Not":
        return pc.invert(_bool(_eval(node.this, batch, exp)))
    if name in _BINARY:
        left, right = _eval(node.left, batch, exp), _eval(node.expression, batch, exp)
        if name in ("And", "Or"):
            left, right = _bool(left), _bool(right)
        return getattr(pc, _BINARY[name])(left, right)
    if name in _FUNCS:
        return getattr(pc, _FUNCS[name])(_eval(node.this, batch, exp))
    if name == "Length":  # LENGTH counts bytes, CHAR_LENGTH characters
        fn = pc.binary_length if node.args.get("binary") else pc.utf8_length
        return fn(_eval(node.this, batch, exp))
    if name == "If":  # IF(NULL, a, b) is b
        return pc.if_else(pc.fill_null(_bool(_eval(node.this, batch, exp)), False), _eval(node.args["true"], batch, exp),
                          _eval(node.args.get("false") or exp.Null(), batch, exp))
    if name == "Case":
        default = _eval(node.args.get("default") or exp.Null(), batch, exp)
        out = default
        subject = node.this
        for when in reversed(node.args.get("ifs") or []):
            cond = _eval(when.this, batch, exp)
            if subject is not None:
                cond = pc.equal(_eval(subject, batch, exp), cond)
            out = pc.if_else(pc.fill_null(_bool(cond), False), _eval(when.args["true"], batch, exp), out)
        return out
    if name == "Coalesce":
        return pc.coalesce(_eval(node.this, batch, exp), *(_eval(e, batch, exp) for e in node.expressions))
    if name == "Concat":
        parts = [_text(_eval(e, batch, exp)) for e in node.expressions]
        return pc.binary_join_element_wise(*parts, "", null_handling="emit_null")
    raise Untranslatable(f"{name} is not translated")


def _bool(value):
    """MySQL truth: non-zero numbers are true."""
    if pa.types.is_boolean(value.type):
        return value
    if pa.types.is_null(value.type):
        return pc.cast(value, pa.bool_())
    return pc.not_equal(value, pa.scalar(0, value.type) if not pa.types.is_decimal(value.type) else 0)
