"""`binlake query`'s guard: exactly one read-only SELECT over lake tables, checked and rewritten on sqlglot's parse
tree (never by pattern matching), so literals stay untouched and nothing that writes or reads files gets through."""

from __future__ import annotations

import logging
import re

import sqlglot
from sqlglot import exp

from ..exitcodes import ExitCode


class QueryRefused(ValueError):
    """`binlake query` accepts exactly one read-only SELECT over lake tables; anything else is refused."""

    exit_code = ExitCode.USAGE


# Statements and clauses that change or reach outside the lake (anywhere in the tree, CTEs and subqueries too).
_FORBIDDEN = tuple(getattr(exp, name) for name in (
    "DDL", "DML", "Command", "Set", "Copy", "Into", "Use", "Transaction", "Commit", "Rollback", "Pragma",
    "Describe", "Show", "LoadData", "Analyze", "Refresh", "Cache", "Uncache", "Grant", "Revoke", "Drop", "Alter",
    "TruncateTable", "Merge", "Kill", "Summarize", "Attach", "Detach", "Install", "Export", "Declare", "Create",
    "Insert", "Update", "Delete", "Lock", "Comprehension", "Put", "Get",
) if hasattr(exp, name))
# Function names that read or write files or URLs in some engine: refused whatever the engine does with them.
_FILE_FUNCTION = re.compile(r"(^|_)(read|write|load|copy|file|files|url|http|glob|scan|parquet|csv|json_file|avro|"
                            r"arrow_ipc|ndjson|delta|iceberg|metadata|system|shell|exec|import|export|attach)(_|$)",
                            re.IGNORECASE)
_DIALECT = "postgres"  # closest to DataFusion's SQL: double-quoted identifiers, '' in strings, 1-based arrays
_ALIAS_PREFIX = "__binlake_t"


def _refuse(why: str) -> QueryRefused:
    return QueryRefused(f"query refused: {why} (binlake query runs exactly one SELECT over db.table / "
                        "db.table__history)")


def _parse_select(sql: str) -> exp.Expression:
    """Exactly one SELECT (WITH, UNION/INTERSECT/EXCEPT and subqueries allowed), nothing that writes or reads
    files; raises QueryRefused otherwise."""
    level = logging.getLogger("sqlglot").level
    logging.getLogger("sqlglot").setLevel(logging.ERROR)  # its fallback-to-Command warnings: we refuse those
    try:
        statements = [t for t in sqlglot.parse(sql, read=_DIALECT) if t is not None]
    except sqlglot.errors.SqlglotError as exc:
        errors = getattr(exc, "errors", None)
        if errors:  # the parser's own text underlines the spot with terminal escape codes: name it instead
            e = errors[0]
            what = f"{e.get('description')} at line {e.get('line')}, column {e.get('col')} ({e.get('highlight')!r})"
        else:
            what = str(exc)
        raise _refuse(f"not valid SQL: {' '.join(what.split())[:300]}") from None
    finally:
        logging.getLogger("sqlglot").setLevel(level)
    if len(statements) != 1:
        raise _refuse(f"{len(statements)} statements given, exactly one SELECT is accepted")
    tree = statements[0]
    root = tree
    while isinstance(root, exp.Subquery):
        root = root.this
    if not isinstance(root, (exp.Select, exp.SetOperation)):
        raise _refuse(f"{_kind(tree)} is not a SELECT")
    for node in tree.walk():
        if isinstance(node, _FORBIDDEN):
            raise _refuse(f"{_kind(node)} is not allowed inside a SELECT")
        if isinstance(node, exp.Func):
            name = node.name if isinstance(node, exp.Anonymous) else node.sql_name()
            if _FILE_FUNCTION.search(name or ""):
                raise _refuse(f"function {name} may read or write files")
        if isinstance(node, exp.Table) and not isinstance(node.this, exp.Identifier):
            raise _refuse(f"table function or expression {node.this.sql(_DIALECT)[:80]} in FROM (only lake tables "
                          "and WITH names)")
    return tree


def _kind(node: exp.Expression) -> str:
    if isinstance(node, exp.Command):
        return f"{str(node.this).upper()} statement"
    return f"{type(node).__name__.upper()} statement" if not isinstance(node, exp.Into) else "SELECT ... INTO"


def _resolve(name: str, quoted: bool, names: dict[str, str]) -> str | None:
    """A lake table name as written -> its key in `names`; unquoted names also match case-insensitively (once)."""
    if name in names:
        return name
    if not quoted:
        hits = [n for n in names if n.lower() == name.lower()]
        if len(hits) == 1:
            return hits[0]
    return None


def rewrite_query(sql: str, tables: dict[str, str]) -> tuple[str, dict[str, str]]:
    """Check `sql` (see _parse_select) and rewrite its lake table references on the parse tree.

    `tables` maps 'db.table' to its Delta path. Returns the SQL to run (comments dropped, literals untouched) and
    the registrations it needs: internal name -> Delta path. A table written `db.t` becomes the internal name
    with alias `t` (unless it has one), so `t.col` and `db.t.col` keep working."""
    tree = _parse_select(sql)
    ctes = {c.alias_or_name for c in tree.find_all(exp.CTE)}
    if any(c.lower().startswith(_ALIAS_PREFIX) for c in ctes):
        raise _refuse(f"names starting with {_ALIAS_PREFIX} are reserved")
    used: dict[str, str] = {}  # lake name -> internal name
    qualified: dict[tuple[str, str], str] = {}  # (db, table) as written -> alias the table now has

    for table in list(tree.find_all(exp.Table)):
        if table.args.get("catalog"):
            raise _refuse(f"unknown table {table.sql(_DIALECT)} (three-part names are not lake tables)")
        db = table.args.get("db")
        ident = table.this
        if db is None:
            if ident.name in ctes or (not ident.quoted and ident.name.lower() in {c.lower() for c in ctes}):
                continue
            raise _refuse(f"unknown table {ident.name!r}: name lake tables as db.table or db.table__history")
        name = _resolve(f"{db.name}.{ident.name}", db.quoted or ident.quoted, tables)
        if name is None:
            raise _refuse(f"no table {db.name}.{ident.name} in the lake")
        internal = used.setdefault(name, f"{_ALIAS_PREFIX}{len(used)}")
        alias = table.alias or ident.name
        qualified[(db.name, ident.name)] = alias
        table.replace(exp.Table(this=exp.to_identifier(internal, quoted=True),
                                alias=table.args.get("alias") or exp.TableAlias(
                                    this=exp.to_identifier(alias, quoted=True))))
    for col in list(tree.find_all(exp.Column)):
        db, tbl = col.args.get("db"), col.args.get("table")
        if col.args.get("catalog"):
            raise _refuse(f"column reference {col.sql(_DIALECT)} has too many parts")
        if db is not None and tbl is not None:
            alias = qualified.get((db.name, tbl.name))
            if alias is None:
                raise _refuse(f"column {col.sql(_DIALECT)} names table {db.name}.{tbl.name}, which the query does "
                              "not read")
            col.set("db", None)
            col.set("table", exp.to_identifier(alias, quoted=True))
    return tree.sql(_DIALECT, comments=False), {internal: tables[name] for name, internal in used.items()}
