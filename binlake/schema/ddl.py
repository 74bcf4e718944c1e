"""The DDL parser: CREATE TABLE text -> TableDef, and DDL statements applied in order to a Catalog.

A hand-written tokenizer (sqllex) and recursive-descent parser (this module, column definitions in coldef) cover
the statements that change table layouts; sqlglot names the output columns of CREATE TABLE ... SELECT, where it
is right and a hand-written SELECT parser would not be. docs/ddl-parser.md says why sqlglot is not used for
the rest (it drops the content of `/*!50100 ... */` comments, fails on MariaDB syntax, and turns RENAME TABLE,
CONVERT TO CHARACTER SET and ADD COLUMN (...) into opaque Command nodes).

A statement is parsed completely before the catalog is touched, so one that is not understood changes nothing
but the tables it names, which become unknown. `apply_ddl` never raises.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field

from .catalog import VERSIONING_COLUMNS, AlterOp, Catalog, DdlError, apply_alter, check_unique, pk_names
from .coldef import (
    ColumnSpec,
    charset_of_collation,
    expression_text,
    key_columns,
    key_parts,
    norm_charset,
    norm_collation,
    parse_column,
    resolve_charset,
)
from .keys import named, unique_key, with_columns
from .model import ColumnDef, TableDef
from .sqllex import WORD, Cursor, SqlSyntaxError, tokenize

KINDS = ("create_table", "alter_table", "rename_table", "drop_table", "truncate", "create_database",
         "drop_database", "ignored", "unparsed")

# Statements that never change a table layout, by first word.
IGNORED_STATEMENTS = frozenset({
    "GRANT", "REVOKE", "ANALYZE", "OPTIMIZE", "REPAIR", "CHECK", "CHECKSUM", "FLUSH", "SET", "INSTALL",
    "UNINSTALL", "RESET", "PURGE", "CACHE", "KILL", "SHOW", "LOCK", "UNLOCK", "USE", "HANDLER", "HELP", "SIGNAL",
    "RESIGNAL", "DO", "BACKUP", "SHUTDOWN", "RESTART", "CHANGE", "START", "STOP", "DEALLOCATE", "PREPARE",
    "EXECUTE", "XA", "SAVEPOINT", "RELEASE",
})
# Objects of CREATE/ALTER/DROP that are not tables.
IGNORED_OBJECTS = frozenset({
    "VIEW", "TRIGGER", "PROCEDURE", "FUNCTION", "EVENT", "INDEX", "USER", "ROLE", "SERVER", "TABLESPACE",
    "LOGFILE", "RESOURCE", "PACKAGE", "SPATIAL", "UNDO", "INSTANCE", "DEFINER", "SYNONYM",
})
CONSTRAINT_WORDS = ("PRIMARY", "KEY", "INDEX", "UNIQUE", "FULLTEXT", "SPATIAL", "FOREIGN", "CONSTRAINT", "CHECK")
# Table options that take a value (`NAME [=] value`); any `name = value` is accepted too (engine options).
VALUE_OPTIONS = frozenset({
    "AUTO_INCREMENT", "AVG_ROW_LENGTH", "CHECKSUM", "TABLE_CHECKSUM", "COMMENT", "COMPRESSION", "CONNECTION",
    "DELAY_KEY_WRITE", "ENCRYPTION", "ENCRYPTED", "ENCRYPTION_KEY_ID", "ENGINE_ATTRIBUTE", "SECONDARY_ENGINE",
    "SECONDARY_ENGINE_ATTRIBUTE", "INSERT_METHOD", "KEY_BLOCK_SIZE", "MAX_ROWS", "MIN_ROWS", "PACK_KEYS",
    "PASSWORD", "ROW_FORMAT", "STATS_AUTO_RECALC", "STATS_PERSISTENT", "STATS_SAMPLE_PAGES", "TABLESPACE",
    "STORAGE", "UNION", "PAGE_CHECKSUM", "PAGE_COMPRESSED", "PAGE_COMPRESSION_LEVEL", "TRANSACTIONAL",
    "SEQUENCE", "AUTOEXTEND_SIZE", "ALGORITHM", "LOCK", "IETF_QUOTES",
})
# ALTER TABLE clauses without a value and without a layout effect.
FLAG_CLAUSES = (("FORCE",), ("ENABLE", "KEYS"), ("DISABLE", "KEYS"), ("DISCARD", "TABLESPACE"),
                ("IMPORT", "TABLESPACE"), ("WITH", "VALIDATION"), ("WITHOUT", "VALIDATION"),
                ("START", "TRANSACTION"), ("UPGRADE", "PARTITIONING"))
PARTITION_CLAUSES = ("ADD", "DROP", "TRUNCATE", "COALESCE", "REORGANIZE", "EXCHANGE", "ANALYZE", "CHECK",
                     "OPTIMIZE", "REBUILD", "REPAIR", "DISCARD", "IMPORT", "REMOVE")

# MariaDB: the columns of a SEQUENCE (a table with one row, logged like one).
SEQUENCE_COLUMNS = [
    ColumnDef("next_not_cached_value", "bigint", length=21, nullable=False),
    ColumnDef("minimum_value", "bigint", length=21, nullable=False),
    ColumnDef("maximum_value", "bigint", length=21, nullable=False),
    ColumnDef("start_value", "bigint", length=21, nullable=False),
    ColumnDef("increment", "bigint", length=21, nullable=False),
    ColumnDef("cache_size", "bigint", length=21, unsigned=True, nullable=False),
    ColumnDef("cycle_option", "tinyint", length=1, unsigned=True, nullable=False),
    ColumnDef("cycle_count", "bigint", length=21, nullable=False),
]


@dataclass
class DdlEffect:
    """What one statement did. `tables`: qualified names whose definition changed, or that were created, dropped
    or renamed (old and new); for "truncate" the truncated table (its layout is unchanged); for "unparsed" the
    tables the statement names, which are now unknown."""

    kind: str
    tables: list[str] = field(default_factory=list)
    renames: list[tuple[str, str]] = field(default_factory=list)
    error: str | None = None


@dataclass(frozen=True)
class TableName:
    db: str
    name: str

    @property
    def key(self) -> tuple[str, str]:
        return self.db.lower(), self.name.lower()

    @property
    def qualified(self) -> str:
        return f"{self.db}.{self.name}"


# -- statements ------------------------------------------------------------------------------------------------


class _Statement:
    """One statement being parsed and applied. `targets` collects the tables it changes as they are parsed, so
    a statement that fails half-way still names them."""

    def __init__(self, catalog: Catalog, cur: Cursor, default_db: str | None) -> None:
        self.cat = catalog
        self.cur = cur
        self.default_db = default_db
        self.targets: list[TableName] = []

    # -- helpers ----------------------------------------------------------------------------------------
    def table_name(self, target: bool = True) -> TableName:
        c = self.cur
        first = c.ident("a table name")
        if c.accept_op("."):
            tn = TableName(first, c.ident("a table name"))
        elif self.default_db is None:
            raise DdlError(f"table {first!r} is not qualified and there is no default database")
        else:
            tn = TableName(self.default_db, first)
        if target:
            self.targets.append(tn)
        return tn

    def display(self, tn: TableName) -> str:
        """db.table with the case the catalog knows it by."""
        t = self.cat.get(tn.db, tn.name)
        return t.qualified_name if t is not None else tn.qualified

    def end(self) -> None:
        if not self.cur.at_end():
            raise SqlSyntaxError(f"unexpected {self.cur.describe()}", self.cur.pos())

    def object_word(self, limit: int = 12) -> str | None:
        """The first non-table object word (VIEW, TRIGGER, ...) among the next tokens, if any."""
        for k in range(limit):
            t = self.cur.peek(k)
            if t is None:
                return None
            if t.kind == WORD and t.value.upper() in IGNORED_OBJECTS:
                return t.value.upper()
        return None

    # -- dispatch -----------------------------------------------------------------------------------------
    def run(self) -> DdlEffect:
        c = self.cur
        if c.at_end():
            return DdlEffect("ignored")
        word = c.next().upper
        handler = {"CREATE": self.create, "ALTER": self.alter, "DROP": self.drop, "RENAME": self.rename,
                   "TRUNCATE": self.truncate}.get(word)
        if handler is not None:
            return handler()
        if word in IGNORED_STATEMENTS:
            return DdlEffect("ignored")
        raise DdlError(f"not a statement the DDL parser knows: {word or c.sql.strip()[:20]!r}")

    def create(self) -> DdlEffect:
        c = self.cur
        replace = c.accept("OR", "REPLACE")
        if c.accept("TEMPORARY"):
            c.expect("TABLE")  # temporary tables are not in ROW-format binlogs; not tracked
            return DdlEffect("ignored")
        if c.accept("TABLE"):
            return self.create_table(replace)
        if c.accept("DATABASE") or c.accept("SCHEMA"):
            return self.create_database(replace)
        if c.accept("SEQUENCE"):
            return self.create_sequence()
        if c.accept("UNIQUE", "INDEX"):
            return self.create_unique_index(replace)
        if self.object_word():
            return DdlEffect("ignored")
        raise DdlError(f"CREATE {c.describe()} is not understood")

    def create_unique_index(self, replace: bool) -> DdlEffect:
        """CREATE [OR REPLACE] UNIQUE INDEX [IF NOT EXISTS] name [USING ...] ON t (parts) ...: the key can be a
        table's row identity (TableDef.row_key)."""
        c = self.cur
        c.accept("IF", "NOT", "EXISTS")
        name = c.ident("an index name")
        hashed = False
        while not c.at_end() and not c.at_word("ON"):
            hashed = hashed or c.next().upper == "HASH"
        c.expect("ON")
        tn = self.table_name()
        cols, plain = key_parts(c)
        hashed = hashed or any(t.kind == WORD and t.value.upper() == "HASH" for t in c.tokens[c.i:])
        c.skip_rest()
        ops = [AlterOp("drop_index", value=name)] if replace else []
        ops.append(AlterOp("add_unique", value=unique_key(name, cols, plain and not hashed)))
        return self.alter_keys(tn, ops)

    def drop_index(self) -> DdlEffect:
        """DROP INDEX [IF EXISTS] name ON t ..."""
        c = self.cur
        c.accept("IF", "EXISTS")
        name = c.ident("an index name")
        c.expect("ON")
        tn = self.table_name()
        c.skip_rest()
        return self.alter_keys(tn, [AlterOp("drop_pk") if name.upper() == "PRIMARY" else
                                    AlterOp("drop_index", value=name)])

    def alter_keys(self, tn: TableName, ops: list[AlterOp]) -> DdlEffect:
        table = self.cat.get(tn.db, tn.name)
        if table is None:
            return DdlEffect("ignored")  # keys of a table whose layout is unknown: nothing to keep
        new = apply_alter(table, ops)
        if new == table:
            return DdlEffect("alter_table")
        self.cat.put(new)
        return DdlEffect("alter_table", [new.qualified_name])

    def alter(self) -> DdlEffect:
        c = self.cur
        while c.accept("ONLINE") or c.accept("OFFLINE") or c.accept("IGNORE"):
            pass
        if c.accept("TABLE"):
            return self.alter_table()
        if c.accept("DATABASE") or c.accept("SCHEMA"):
            return self.alter_database()
        if c.accept("SEQUENCE") or self.object_word():
            return DdlEffect("ignored")
        raise DdlError(f"ALTER {c.describe()} is not understood")

    def drop(self) -> DdlEffect:
        c = self.cur
        if c.accept("TEMPORARY"):
            return DdlEffect("ignored")
        if c.accept("TABLE") or c.accept("TABLES") or c.accept("SEQUENCE"):
            return self.drop_tables()
        if c.accept("DATABASE") or c.accept("SCHEMA"):
            c.accept("IF", "EXISTS")
            db = c.ident("a database name")
            self.end()
            return DdlEffect("drop_database", self.cat.drop_database(db))
        if c.accept("INDEX"):
            return self.drop_index()
        if self.object_word():
            return DdlEffect("ignored")
        raise DdlError(f"DROP {c.describe()} is not understood")

    # -- CREATE TABLE -----------------------------------------------------------------------------------
    def create_table(self, replace: bool = False) -> DdlEffect:
        if_not_exists = self.cur.accept("IF", "NOT", "EXISTS")
        tn = self.table_name()
        if if_not_exists and not replace and (self.cat.get(tn.db, tn.name) or tn.key in self.cat.unknown):
            return DdlEffect("create_table")  # the server did nothing
        table = self.table_body(tn)
        self.cat.put(table)
        return DdlEffect("create_table", [table.qualified_name])

    def table_body(self, tn: TableName) -> TableDef:
        c = self.cur
        if c.at_word("LIKE") or (c.at_op("(") and c.at_word("LIKE", k=1)):
            paren = c.accept_op("(")
            c.expect("LIKE")
            src = self.table_name(target=False)
            if paren:
                c.expect_op(")")
            self.end()
            source = self.cat.get(src.db, src.name)
            if source is None:
                raise DdlError(f"CREATE TABLE {tn.qualified} LIKE {src.qualified}: the layout of "
                               f"{src.qualified} is unknown")
            table = source.copy()
            table.database, table.name = tn.db, tn.name
            return table
        specs: list[ColumnSpec] = []
        pk: list[str] = []
        uniques: list[dict] = []
        if c.at_op("(") and not self.at_select():
            specs, pk, uniques = self.elements()
        opts = self.table_options()
        if not c.at_end():
            specs = self.select_columns(specs)
        self.end()
        if not specs:
            raise DdlError(f"CREATE TABLE {tn.qualified} has no columns")
        table = self.build_table(tn, specs, pk, opts)
        table.unique_keys = with_columns(table, named(uniques))
        return table

    def at_select(self, k: int = 0) -> bool:
        """At the SELECT of CREATE TABLE ... SELECT (also `(SELECT`, WITH, VALUES, TABLE t)."""
        c = self.cur
        while c.at_op("(", k=k):
            k += 1
        return c.at_word("SELECT", "WITH", "VALUES", "TABLE", k=k) and not c.at_words("WITH", "SYSTEM")

    def elements(self) -> tuple[list[ColumnSpec], list[str], list[dict]]:
        """Column specs, primary key columns and UNIQUE keys (in definition order, a column's inline UNIQUE
        where the column is)."""
        c = self.cur
        c.expect_op("(")
        specs: list[ColumnSpec] = []
        pk: list[str] = []
        uniques: list[dict] = []
        while True:
            if c.at_word(*CONSTRAINT_WORDS) or c.at_words("PERIOD", "FOR"):
                got = self.constraint()
                if got is not None and got[0] == "primary":
                    pk = got[1]
                elif got is not None:
                    uniques.append(unique_key(got[2], got[1], got[3]))
            else:
                specs.append(parse_column(c))
                if specs[-1].unique:
                    uniques.append(unique_key(None, [specs[-1].col.name]))
            if c.accept_op(")"):
                return specs, pk, uniques
            c.expect_op(",")

    def constraint(self) -> tuple[str, list[str], str | None, bool] | None:
        """An index/key/constraint element: ("primary" or "unique", key columns, index name, whether every part
        is a whole column) for the PRIMARY KEY and UNIQUE keys, None for the others."""
        c = self.cur
        symbol = None
        if c.accept("CONSTRAINT"):
            c.accept("IF", "NOT", "EXISTS")
            if not c.at_word("PRIMARY", "UNIQUE", "FOREIGN", "CHECK"):
                symbol = c.ident("a constraint name")
        if c.accept("PRIMARY", "KEY"):
            while not c.at_op("(") and not c.at_end():
                c.next()  # USING BTREE, or a name
            cols = key_columns(c)
            c.skip_until_separator()
            return "primary", cols, None, True
        if c.accept("UNIQUE"):
            c.accept("KEY") or c.accept("INDEX")
            c.accept("IF", "NOT", "EXISTS")
            name = symbol
            if not c.at_op("(") and not c.at_word("USING"):
                name = c.ident("an index name")
            hashed = False
            while not c.at_op("(") and not c.at_end():
                hashed = hashed or c.next().upper == "HASH"  # USING HASH: a hash key, never the primary one
            cols, plain = key_parts(c)
            while not c.at_end() and not c.at_op(",", ")"):
                if c.at_op("("):
                    c.skip_group()
                else:
                    hashed = hashed or c.next().upper == "HASH"
            return "unique", cols, name, plain and not hashed
        c.skip_until_separator()
        return None

    def key_op(self, ops: list[AlterOp], got: tuple | None) -> None:
        if got is not None and got[0] == "primary":
            ops.append(AlterOp("add_pk", value=got[1]))
        elif got is not None:
            ops.append(AlterOp("add_unique", value=unique_key(got[2], got[1], got[3])))

    def table_options(self) -> dict[str, object]:
        c = self.cur
        opts: dict[str, object] = {}
        while not c.at_end():
            c.accept_op(",")
            if c.at_end() or self.at_select() or c.at_word("AS", "IGNORE", "REPLACE"):
                break
            if c.accept("PARTITION", "BY"):
                while not c.at_end() and not self.at_select() and not c.at_word("AS", "IGNORE", "REPLACE"):
                    c.skip_group() if c.at_op("(") else c.next()
                continue
            if not self.table_option(opts):
                raise SqlSyntaxError(f"unexpected {c.describe()} in table options", c.pos())
        return opts

    def table_option(self, opts: dict[str, object]) -> bool:
        """One table option (also used by ALTER TABLE); False when the cursor is not at one."""
        c = self.cur
        mark = c.i
        c.accept("DEFAULT")
        if c.accept("CHARACTER", "SET") or c.accept("CHARSET") or c.accept("CHAR", "SET"):
            c.accept_op("=")
            opts["charset"] = norm_charset(c.name_or_string("a character set"))
        elif c.accept("COLLATE"):
            c.accept_op("=")
            opts["collation"] = norm_collation(c.name_or_string("a collation"))
        elif c.i != mark:
            raise SqlSyntaxError(f"unexpected {c.describe()} after DEFAULT", c.pos())
        elif c.accept("ENGINE") or c.accept("TYPE"):
            c.accept_op("=")
            opts["engine"] = c.name_or_string("an engine name")
        elif c.accept("WITH", "SYSTEM", "VERSIONING"):
            opts["versioning"] = True
        elif c.accept("START", "TRANSACTION"):
            pass
        elif c.at_word("DATA", "INDEX") and c.at_word("DIRECTORY", k=1):
            c.next(), c.next()
            c.accept_op("=")
            c.string("a directory")
        elif (c.at_word(*VALUE_OPTIONS) and not c.at_op(",", k=1) and c.peek(1) is not None) or (
                c.at_ident() and c.at_op("=", k=1)):
            c.next()
            c.accept_op("=")
            c.skip_group() if c.at_op("(") else c.next()
        else:
            return False
        return True

    def select_columns(self, specs: list[ColumnSpec]) -> list[ColumnSpec]:
        """CREATE TABLE ... [IGNORE|REPLACE] [AS] SELECT: the server puts the declared columns the SELECT does not
        produce first, then one column per SELECT output (typed by the declaration of the same name). Known only
        when every output is named and declared."""
        c = self.cur
        c.accept("IGNORE") or c.accept("REPLACE")
        c.accept("AS")
        names = select_output_names(c.sql[c.pos():])
        c.skip_rest()
        if names is None:
            raise DdlError("CREATE TABLE ... SELECT: the SELECT's output columns cannot be named (`*`, unaliased "
                           "expressions, or not a plain SELECT)")
        declared = {s.col.name.lower(): s for s in specs}
        missing = [n for n in names if n.lower() not in declared]
        if missing:
            raise DdlError(f"CREATE TABLE ... SELECT: the types of {', '.join(missing)} come from the SELECT")
        wanted = list(dict.fromkeys(n.lower() for n in names))
        return [s for s in specs if s.col.name.lower() not in wanted] + [declared[n] for n in wanted]

    def build_table(self, tn: TableName, specs: list[ColumnSpec], pk: list[str], opts: dict) -> TableDef:
        charset, collation = opts.get("charset"), opts.get("collation")
        if collation and not charset:
            charset = charset_of_collation(str(collation))
        if not charset:
            charset, collation = self.cat.db_default(tn.db)
        table = TableDef(tn.db, tn.name, [resolve_charset(s, charset, collation) for s in specs], [],
                         charset, collation, opts.get("engine"))
        inline = [s.col.name for s in specs if s.primary]
        if opts.get("versioning") and not any(c.generated == "ROW START" for c in table.columns):
            table.columns.extend(c.copy() for c in VERSIONING_COLUMNS)
        check_unique(table)
        table.primary_key = pk_names(table, pk or inline[:1])
        return table

    def create_sequence(self) -> DdlEffect:
        c = self.cur
        if_not_exists = c.accept("IF", "NOT", "EXISTS")
        tn = self.table_name()
        c.skip_rest()
        if if_not_exists and self.cat.get(tn.db, tn.name):
            return DdlEffect("create_table")
        self.cat.put(TableDef(tn.db, tn.name, [col.copy() for col in SEQUENCE_COLUMNS], engine="sequence"))
        return DdlEffect("create_table", [tn.qualified])

    # -- databases ----------------------------------------------------------------------------------------
    def database_options(self) -> tuple[str | None, str | None]:
        c = self.cur
        charset = collation = None
        while not c.at_end():
            c.accept("DEFAULT")
            if c.accept("CHARACTER", "SET") or c.accept("CHARSET"):
                c.accept_op("=")
                charset = norm_charset(c.name_or_string("a character set"))
            elif c.accept("COLLATE"):
                c.accept_op("=")
                collation = norm_collation(c.name_or_string("a collation"))
            elif c.at_word("ENCRYPTION", "COMMENT", "READ"):
                c.accept("READ")
                c.next()
                c.accept_op("=")
                c.next()
            else:
                raise SqlSyntaxError(f"unexpected {c.describe()} in database options", c.pos())
        return charset, collation

    def create_database(self, replace: bool) -> DdlEffect:
        c = self.cur
        if_not_exists = c.accept("IF", "NOT", "EXISTS")
        db = c.ident("a database name")
        charset, collation = self.database_options()
        dropped = self.cat.drop_database(db) if replace else []
        if not charset and not collation:
            charset, collation = self.cat.server_charset, self.cat.server_collation
        if not (if_not_exists and db.lower() in self.cat.db_charsets):
            self.cat.set_db_default(db, charset, collation)
        return DdlEffect("create_database", dropped)

    def alter_database(self) -> DdlEffect:
        c = self.cur
        db = self.default_db
        if c.at_ident() and not c.at_word("DEFAULT", "CHARACTER", "CHARSET", "COLLATE", "ENCRYPTION", "READ",
                                          "COMMENT", "UPGRADE"):
            db = c.ident("a database name")
        if c.at_word("UPGRADE"):
            c.skip_rest()
            return DdlEffect("ignored")
        charset, collation = self.database_options()
        if db is not None and (charset or collation):
            self.cat.set_db_default(db, charset, collation)  # a charset alone: its default collation, unknown
        return DdlEffect("ignored")

    # -- DROP / RENAME / TRUNCATE -------------------------------------------------------------------------
    def drop_tables(self) -> DdlEffect:
        c = self.cur
        c.accept("IF", "EXISTS")
        names = [self.table_name()]
        while c.accept_op(","):
            names.append(self.table_name())
        if c.accept("WAIT"):
            c.integer()
        c.accept("NOWAIT")
        c.accept("RESTRICT") or c.accept("CASCADE")
        self.end()
        shown = [self.display(tn) for tn in names]
        for tn in names:
            self.cat.drop(tn.db, tn.name)
        return DdlEffect("drop_table", list(dict.fromkeys(shown)))

    def rename(self) -> DdlEffect:
        c = self.cur
        if not (c.accept("TABLE") or c.accept("TABLES")):
            if self.object_word(2):
                return DdlEffect("ignored")
            raise DdlError(f"RENAME {c.describe()} is not understood")
        if_exists = c.accept("IF", "EXISTS")
        pairs = self.rename_pairs()
        self.end()
        return self.apply_renames(pairs, if_exists)

    def rename_pairs(self) -> list[tuple[TableName, TableName]]:
        """`a [WAIT n | NOWAIT] TO b [, c TO d ...]` of a RENAME TABLE, after its IF EXISTS."""
        c = self.cur
        pairs: list[tuple[TableName, TableName]] = []
        while True:
            src = self.table_name()
            if c.accept("WAIT"):
                c.integer()
            c.accept("NOWAIT")
            c.expect("TO")
            pairs.append((src, self.table_name()))
            if not c.accept_op(","):
                return pairs

    def apply_renames(self, pairs: list[tuple[TableName, TableName]], if_exists: bool = False) -> DdlEffect:
        """Renames applied in order on an overlay, so `t TO t_old, t_new TO t` swaps."""
        overlay: dict[tuple[str, str], TableDef | None] = {}
        effect = DdlEffect("rename_table")
        for src, dst in pairs:
            table = overlay[src.key] if src.key in overlay else self.cat.get(src.db, src.name)
            if table is None:
                if if_exists and src.key not in self.cat.unknown and src.key not in overlay:
                    continue
                raise DdlError(f"RENAME TABLE {src.qualified}: its layout is unknown")
            old = table.qualified_name
            moved = table.copy()
            moved.database, moved.name = dst.db, dst.name
            overlay[src.key] = None
            overlay[dst.key] = moved
            effect.renames.append((old, moved.qualified_name))
            effect.tables += [old, moved.qualified_name]
        for (db, name), table in overlay.items():
            if table is None:
                self.cat.drop(db, name)
        for table in overlay.values():
            if table is not None:
                self.cat.put(table)
        effect.tables = list(dict.fromkeys(effect.tables))
        return effect

    def truncate(self) -> DdlEffect:
        c = self.cur
        c.accept("TABLE")
        tn = self.table_name()
        if c.accept("WAIT"):
            c.integer()
        c.accept("NOWAIT")
        self.end()
        return DdlEffect("truncate", [self.display(tn)])

    # -- ALTER TABLE ----------------------------------------------------------------------------------------
    def alter_parts(self) -> tuple[TableName, list[AlterOp], dict[str, object]]:
        """After `ALTER [ONLINE|IGNORE] TABLE`: the table, its clauses and its table options (gathered:
        `COLLATE x, CHARACTER SET y` is one change). The lake's lifecycle reader (lifecycle.py) uses it too."""
        c = self.cur
        c.accept("IF", "EXISTS")
        tn = self.table_name()
        if c.accept("WAIT"):
            c.integer()
        c.accept("NOWAIT")
        ops: list[AlterOp] = []
        opts: dict[str, object] = {}
        while not c.at_end():
            if not c.accept_op(","):
                self.alter_clause(ops, opts)
        return tn, ops, opts

    def alter_table(self) -> DdlEffect:
        tn, ops, opts = self.alter_parts()
        if "charset" in opts or "collation" in opts:
            cs, coll = opts.get("charset"), opts.get("collation")
            if coll and cs and charset_of_collation(str(coll)) not in (None, cs):
                coll = None
            ops.append(AlterOp("charset", value=(cs or charset_of_collation(str(coll)), coll)))
        if "engine" in opts:
            ops.append(AlterOp("engine", value=opts["engine"]))
        if opts.get("versioning"):
            ops.append(AlterOp("add_versioning"))
        for op in ops:
            if op.kind == "convert" and op.value == "DEFAULT":
                cs, coll = self.cat.db_default(tn.db)
                if cs is None:
                    raise DdlError("CONVERT TO CHARACTER SET DEFAULT: the database default charset is unknown")
                op.value = (cs, coll)
        table = self.cat.get(tn.db, tn.name)
        layout_ops = [op for op in ops if op.kind != "engine"]
        if table is None:
            if not layout_ops:
                return DdlEffect("alter_table")
            raise DdlError(f"ALTER TABLE {tn.qualified}: the table's layout is unknown (no snapshot or CREATE "
                           "TABLE before this point, or an earlier statement about it was not understood)")
        new = apply_alter(table, ops)
        rename = next((op for op in reversed(ops) if op.kind == "rename_table"), None)
        if rename is not None:
            dst: TableName = rename.value
            new.database, new.name = dst.db, dst.name
        if new == table:
            return DdlEffect("alter_table")
        if rename is None:
            self.cat.put(new)
            return DdlEffect("alter_table", [new.qualified_name])
        self.cat.drop(tn.db, tn.name)
        self.cat.put(new)
        only_rename = all(op.kind in ("rename_table", "engine") for op in ops)
        return DdlEffect("rename_table" if only_rename else "alter_table",
                         list(dict.fromkeys([table.qualified_name, new.qualified_name])),
                         [(table.qualified_name, new.qualified_name)])

    def alter_clause(self, ops: list[AlterOp], opts: dict[str, object]) -> None:
        c = self.cur
        if c.accept("ADD"):
            self.alter_add(ops)
        elif c.accept("DROP"):
            self.alter_drop(ops)
        elif c.accept("MODIFY"):
            c.accept("COLUMN")
            if_exists = c.accept("IF", "EXISTS")
            spec = parse_column(c)
            ops.append(AlterOp("change", spec.col.name, spec, if_exists=if_exists))
        elif c.accept("CHANGE"):
            c.accept("COLUMN")
            if_exists = c.accept("IF", "EXISTS")
            old = c.ident("a column name")
            ops.append(AlterOp("change", old, parse_column(c), if_exists=if_exists))
        elif c.accept("RENAME"):
            self.alter_rename(ops)
        elif c.accept("ALTER"):
            self.alter_alter(ops)
        elif c.accept("CONVERT", "TO"):
            if not (c.accept("CHARACTER", "SET") or c.accept("CHARSET")):
                raise SqlSyntaxError(f"expected CHARACTER SET, found {c.describe()}", c.pos())
            c.accept_op("=")
            cs = "DEFAULT" if c.accept("DEFAULT") else norm_charset(c.name_or_string("a character set"))
            coll = None
            if c.accept("COLLATE"):
                c.accept_op("=")
                coll = norm_collation(c.name_or_string("a collation"))
            ops.append(AlterOp("convert", value=cs if cs == "DEFAULT" else (cs, coll)))
        elif c.accept("ORDER", "BY"):
            c.skip_rest()  # ORDER BY a, b: commas of its own; it is the last clause in practice
        elif any(c.accept(*flag) for flag in FLAG_CLAUSES):
            pass
        elif c.at_word(*PARTITION_CLAUSES) and c.at_word("PARTITION", "PARTITIONING", k=1):
            c.skip_rest()  # partition maintenance: layouts do not change; it is always the last clause
        elif c.accept("PARTITION", "BY"):
            c.skip_rest()
        elif c.at_words("CONVERT", "PARTITION") or c.at_words("CONVERT", "TABLE"):
            raise DdlError("ALTER TABLE ... CONVERT PARTITION/TABLE (moves a partition to a table) is not supported")
        elif not self.table_option(opts):
            raise SqlSyntaxError(f"unexpected {c.describe()} in ALTER TABLE", c.pos())

    def alter_add(self, ops: list[AlterOp]) -> None:
        c = self.cur
        column = c.accept("COLUMN")
        if not column and (c.at_word(*CONSTRAINT_WORDS) or c.at_words("PERIOD", "FOR")):
            self.key_op(ops, self.constraint())
            return
        if not column and c.accept("SYSTEM", "VERSIONING"):
            ops.append(AlterOp("add_versioning"))
            return
        if not column and c.at_word("PARTITION"):
            c.skip_rest()
            return
        if_not_exists = c.accept("IF", "NOT", "EXISTS")
        if c.accept_op("("):
            while True:
                if c.at_word(*CONSTRAINT_WORDS):
                    self.key_op(ops, self.constraint())
                else:
                    spec = parse_column(c)
                    ops.append(AlterOp("add", spec.col.name, spec, if_exists=if_not_exists))
                if c.accept_op(")"):
                    return
                c.expect_op(",")
        spec = parse_column(c)
        ops.append(AlterOp("add", spec.col.name, spec, if_exists=if_not_exists))

    def alter_drop(self, ops: list[AlterOp]) -> None:
        c = self.cur
        if c.accept("PRIMARY", "KEY"):
            ops.append(AlterOp("drop_pk"))
        elif c.accept("SYSTEM", "VERSIONING"):
            ops.append(AlterOp("drop_versioning"))
        elif c.accept("INDEX") or c.accept("KEY") or c.accept("CONSTRAINT"):
            c.accept("IF", "EXISTS")
            name = c.ident("an index name")
            c.skip_until_separator()
            ops.append(AlterOp("drop_pk") if name.upper() == "PRIMARY" else AlterOp("drop_index", value=name))
        elif c.at_word("FOREIGN", "CHECK") or c.at_words("PERIOD", "FOR"):
            c.skip_until_separator()
        elif c.at_word("PARTITION"):
            c.skip_rest()
        else:
            c.accept("COLUMN")
            if_exists = c.accept("IF", "EXISTS")
            name = c.ident("a column name")
            c.accept("RESTRICT") or c.accept("CASCADE")
            ops.append(AlterOp("drop", name, if_exists=if_exists))

    def alter_rename(self, ops: list[AlterOp]) -> None:
        c = self.cur
        if c.accept("COLUMN"):
            if_exists = c.accept("IF", "EXISTS")
            old = c.ident("a column name")
            c.expect("TO")
            ops.append(AlterOp("rename_col", old, value=c.ident("a column name"), if_exists=if_exists))
        elif c.accept("INDEX") or c.accept("KEY"):
            old = c.ident("an index name")
            c.expect("TO")
            ops.append(AlterOp("rename_index", value=(old, c.ident("an index name"))))
        else:
            c.accept("TO") or c.accept("AS")
            ops.append(AlterOp("rename_table", value=self.table_name()))

    def alter_alter(self, ops: list[AlterOp]) -> None:
        c = self.cur
        if not c.at_word("COLUMN") and c.at_word("INDEX", "KEY", "CHECK", "CONSTRAINT"):
            c.skip_until_separator()
            return
        c.accept("COLUMN")
        if_exists = c.accept("IF", "EXISTS")
        name = c.ident("a column name")
        if c.accept("SET", "DEFAULT"):
            start = c.pos()
            if c.at_op("("):
                c.skip_group()
            else:
                expression_text(c)
            value: tuple[str, str | None] = ("default", c.text(start, c.tokens[c.i - 1].end))
        elif c.accept("DROP", "DEFAULT"):
            value = ("default", None)
        elif c.accept("SET", "VISIBLE") or c.accept("SET", "INVISIBLE"):
            value = ("invisible", c.tokens[c.i - 1].value.lower())
        else:
            raise SqlSyntaxError(f"unexpected {c.describe()} in ALTER COLUMN", c.pos())
        ops.append(AlterOp("alter_col", name, value=value, if_exists=if_exists))


def select_output_names(sql: str) -> list[str] | None:
    """Output column names of a SELECT (sqlglot parses it); None when one is not a plain named column/alias."""
    # sqlglot takes about half a second to import: only a statement holding a SELECT needs it.
    import sqlglot
    from sqlglot import exp

    try:
        tree = sqlglot.parse_one(sql.strip().rstrip(";"), read="mysql")
    except sqlglot.errors.SqlglotError:
        return None
    while isinstance(tree, (exp.Subquery, exp.Paren)):
        tree = tree.this
    if not isinstance(tree, exp.Query):
        return None
    names = []
    for proj in tree.selects:
        if isinstance(proj, exp.Star) or proj.is_star or not isinstance(proj, (exp.Alias, exp.Column)):
            return None
        names.append(proj.alias_or_name)
    return names if all(names) else None


# -- public API -------------------------------------------------------------------------------------------------


def _targets_of_broken(sql: str, err: SqlSyntaxError, default_db: str | None) -> list[TableName]:
    """When even tokenizing fails (e.g. an unterminated string), the tables the statement's head names."""
    try:
        tokens = tokenize(sql[: err.pos or 0])
    except SqlSyntaxError:
        return []
    st = _Statement(Catalog(), Cursor(sql, tokens), default_db)  # a scratch catalog: only the names matter
    with contextlib.suppress(SqlSyntaxError, DdlError):
        st.run()
    return st.targets


def apply_ddl(catalog: Catalog, sql: str, default_db: str | None) -> DdlEffect:
    """Apply one statement to `catalog`. Never raises: what is not understood comes back as kind "unparsed" with
    the error, and the tables it names (now unknown in the catalog); no other table changes."""
    targets: list[TableName] = []
    try:
        try:
            cur = Cursor(sql)
        except SqlSyntaxError as exc:
            targets = _targets_of_broken(sql, exc, default_db)
            raise
        st = _Statement(catalog, cur, default_db)
        try:
            return st.run()
        finally:
            targets = st.targets
    except (SqlSyntaxError, DdlError) as exc:
        error = str(exc)
    except Exception as exc:  # a parser bug must not stop ingestion; the named tables become unknown
        error = f"internal error {type(exc).__name__}: {exc}"
    names = list(dict.fromkeys(t.qualified for t in targets))
    for tn in dict.fromkeys(targets):
        catalog.mark_unknown(tn.db, tn.name, error)
    return DdlEffect("unparsed", names, [], error)


def parse_create_table(sql: str, default_db: str | None = None, db_charsets: dict[str, str] | None = None,
                       db_collations: dict[str, str] | None = None) -> TableDef:
    """A TableDef from CREATE TABLE text (SHOW CREATE TABLE output or hand-written). An unqualified name gets
    `default_db` (or "" without one). Raises DdlError when the text is not a CREATE TABLE it understands."""
    catalog = Catalog(db_charsets, db_collations)
    try:
        cur = Cursor(sql)
        st = _Statement(catalog, cur, default_db or "")
        if not cur.accept("CREATE"):
            raise DdlError("not a CREATE TABLE statement")
        cur.accept("OR", "REPLACE")
        cur.accept("TEMPORARY")
        cur.expect("TABLE")
        cur.accept("IF", "NOT", "EXISTS")
        return st.table_body(st.table_name())
    except DdlError:
        raise
    except SqlSyntaxError as exc:
        raise DdlError(f"cannot parse CREATE TABLE: {exc}") from None
    except Exception as exc:  # a parser bug: still one exception type for callers
        raise DdlError(f"cannot parse CREATE TABLE: internal error {type(exc).__name__}: {exc}") from exc


__all__ = ["KINDS", "Catalog", "DdlEffect", "DdlError", "TableName", "apply_ddl", "parse_create_table"]
