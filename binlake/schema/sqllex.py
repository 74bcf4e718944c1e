"""A MySQL/MariaDB tokenizer and token cursor for the DDL parser.

The lexer knows what sqlglot's does not: the content of executable comments (`/*!50100 ... */`, `/*!80023
INVISIBLE */`, MariaDB `/*M!100100 ... */`) is part of the statement whatever the version number, while `/* */`,
`/*+ hints */`, `-- ` and `#` comments are dropped. Strings are unescaped the way the server reads them with the
default sql_mode (backslash escapes on, `''` doubling); backquoted names have `` `` `` doubling.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

WORD, QIDENT, STRING, DSTRING, NUMBER, HEX, BIT, OP, VAR = (
    "word", "qident", "string", "dstring", "number", "hex", "bit", "op", "var",
)

# Identifier characters: 0-9 A-Z a-z _ $ and everything from U+0080 on, written as "not one of the other ASCII
# characters" (the same set; a class spanning U+0080-U+10FFFF took 10 ms of CPU to compile at every start-up).
_IDENT = r"[^\x00-#%-/:-@\[-^`{-\x7f]"
_WORD_RE = re.compile(rf"{_IDENT}+")
_NUMBER_RE = re.compile(rf"(?:\d+\.\d*|\.\d+|\d+)(?:[eE][+-]?\d+)?(?!{_IDENT})")
_HEXNUM_RE = re.compile(rf"0x[0-9A-Fa-f]+(?!{_IDENT})|0b[01]+(?!{_IDENT})")
_VERSIONED_RE = re.compile(r"/\*M?!\d*")
_OPS = ("<=>", "->>", "<=", ">=", "<>", "!=", ":=", "->", "||", "&&", "<<", ">>")
_ESCAPES = {"0": "\0", "b": "\b", "n": "\n", "r": "\r", "t": "\t", "Z": "\x1a", "%": "\\%", "_": "\\_"}


class SqlSyntaxError(ValueError):
    """The statement could not be tokenized or parsed; `pos` is the character offset where it went wrong."""

    def __init__(self, message: str, pos: int | None = None) -> None:
        self.pos = pos
        super().__init__(message if pos is None else f"{message} (at character {pos})")


@dataclass(frozen=True, slots=True)
class Token:
    kind: str
    value: str  # unescaped for strings and quoted names; as written otherwise
    start: int
    end: int

    @property
    def upper(self) -> str:
        return self.value.upper() if self.kind == WORD else ""


def _read_quoted(sql: str, i: int, quote: str, backslash: bool) -> tuple[str, int]:
    """Value and end offset of the quoted text starting at sql[i] (the opening quote)."""
    out: list[str] = []
    j = i + 1
    n = len(sql)
    while j < n:
        ch = sql[j]
        if ch == quote:
            if j + 1 < n and sql[j + 1] == quote:
                out.append(quote)
                j += 2
                continue
            return "".join(out), j + 1
        if ch == "\\" and backslash and j + 1 < n:
            nxt = sql[j + 1]
            out.append(_ESCAPES.get(nxt, nxt))
            j += 2
            continue
        out.append(ch)
        j += 1
    raise SqlSyntaxError(f"unterminated {quote}-quoted text", i)


def tokenize(sql: str) -> list[Token]:
    """Tokens of one statement (or several: `;` is an OP token)."""
    tokens: list[Token] = []
    i, n = 0, len(sql)
    in_exec = False  # inside /*! ... */: its closing */ is skipped, its content kept
    while i < n:
        ch = sql[i]
        if ch.isspace():
            i += 1
            continue
        if ch == "#" or (sql.startswith("--", i) and (i + 2 >= n or sql[i + 2].isspace() or ord(sql[i + 2]) < 32)):
            j = sql.find("\n", i)
            i = n if j < 0 else j + 1
            continue
        if sql.startswith("/*", i):
            m = _VERSIONED_RE.match(sql, i)
            if m and not in_exec:
                in_exec = True
                i = m.end()
                continue
            j = sql.find("*/", i + 2)
            if j < 0:
                raise SqlSyntaxError("unterminated /* comment", i)
            i = j + 2
            continue
        if in_exec and sql.startswith("*/", i):
            in_exec = False
            i += 2
            continue
        if ch in "xXbB" and i + 1 < n and sql[i + 1] == "'":
            value, end = _read_quoted(sql, i + 1, "'", False)
            tokens.append(Token(HEX if ch in "xX" else BIT, value, i, end))
            i = end
            continue
        if ch in "'\"":
            value, end = _read_quoted(sql, i, ch, True)
            tokens.append(Token(STRING if ch == "'" else DSTRING, value, i, end))
            i = end
            continue
        if ch == "`":
            value, end = _read_quoted(sql, i, "`", False)
            tokens.append(Token(QIDENT, value, i, end))
            i = end
            continue
        m = _HEXNUM_RE.match(sql, i) or _NUMBER_RE.match(sql, i)
        if m:
            tokens.append(Token(HEX if m.group().startswith(("0x", "0b")) else NUMBER, m.group(), i, m.end()))
            i = m.end()
            continue
        m = _WORD_RE.match(sql, i)
        if m:
            tokens.append(Token(WORD, m.group(), i, m.end()))
            i = m.end()
            continue
        if ch == "@":
            j = i + 1
            while j < n and sql[j] == "@":
                j += 1
            m = _WORD_RE.match(sql, j)
            if m and j - i <= 2:
                tokens.append(Token(VAR, sql[i : m.end()], i, m.end()))
                i = m.end()
                continue
        op = next((o for o in _OPS if sql.startswith(o, i)), ch)
        tokens.append(Token(OP, op, i, i + len(op)))
        i += len(op)
    return tokens


class Cursor:
    """A position in a token list with the small vocabulary a recursive-descent DDL parser needs."""

    def __init__(self, sql: str, tokens: list[Token] | None = None) -> None:
        self.sql = sql
        self.tokens = tokenize(sql) if tokens is None else tokens
        self.i = 0

    # -- looking --------------------------------------------------------------------------------------
    def peek(self, k: int = 0) -> Token | None:
        j = self.i + k
        return self.tokens[j] if j < len(self.tokens) else None

    def at_end(self) -> bool:
        t = self.peek()
        return t is None or (t.kind == OP and t.value == ";" and all(
            x.kind == OP and x.value == ";" for x in self.tokens[self.i :]))

    def at_word(self, *words: str, k: int = 0) -> bool:
        t = self.peek(k)
        return t is not None and t.kind == WORD and t.value.upper() in words

    def at_words(self, *seq: str) -> bool:
        return all(self.at_word(w, k=n) for n, w in enumerate(seq))

    def at_op(self, *ops: str, k: int = 0) -> bool:
        t = self.peek(k)
        return t is not None and t.kind == OP and t.value in ops

    def pos(self) -> int:
        t = self.peek()
        return t.start if t is not None else len(self.sql)

    # -- consuming ------------------------------------------------------------------------------------
    def next(self) -> Token:
        t = self.peek()
        if t is None:
            raise SqlSyntaxError("unexpected end of statement", len(self.sql))
        self.i += 1
        return t

    def accept(self, *seq: str) -> bool:
        """Consume the word sequence if it is next."""
        if self.at_words(*seq):
            self.i += len(seq)
            return True
        return False

    def accept_op(self, op: str) -> bool:
        if self.at_op(op):
            self.i += 1
            return True
        return False

    def expect(self, *seq: str) -> None:
        if not self.accept(*seq):
            raise SqlSyntaxError(f"expected {' '.join(seq)}, found {self.describe()}", self.pos())

    def expect_op(self, op: str) -> None:
        if not self.accept_op(op):
            raise SqlSyntaxError(f"expected {op!r}, found {self.describe()}", self.pos())

    def describe(self) -> str:
        t = self.peek()
        return "end of statement" if t is None else repr(self.sql[t.start : t.end])

    def ident(self, what: str = "a name") -> str:
        """An identifier: a bare word, a backquoted name, or a double-quoted one (ANSI_QUOTES)."""
        t = self.peek()
        if t is not None and t.kind in (WORD, QIDENT, DSTRING):
            self.i += 1
            return t.value
        raise SqlSyntaxError(f"expected {what}, found {self.describe()}", self.pos())

    def at_ident(self) -> bool:
        t = self.peek()
        return t is not None and t.kind in (WORD, QIDENT, DSTRING)

    def string(self, what: str = "a quoted string") -> str:
        t = self.peek()
        if t is not None and t.kind in (STRING, DSTRING):
            self.i += 1
            return t.value
        raise SqlSyntaxError(f"expected {what}, found {self.describe()}", self.pos())

    def name_or_string(self, what: str) -> str:
        t = self.peek()
        if t is not None and t.kind in (WORD, QIDENT, STRING, DSTRING):
            self.i += 1
            return t.value
        raise SqlSyntaxError(f"expected {what}, found {self.describe()}", self.pos())

    def integer(self, what: str = "a number") -> int:
        t = self.peek()
        if t is not None and t.kind == NUMBER and t.value.isdigit():
            self.i += 1
            return int(t.value)
        raise SqlSyntaxError(f"expected {what}, found {self.describe()}", self.pos())

    def skip_group(self) -> tuple[int, int]:
        """Skip a balanced (...) group at the cursor; returns the source span inside the parentheses."""
        open_tok = self.next()
        if open_tok.kind != OP or open_tok.value != "(":
            raise SqlSyntaxError(f"expected '(', found {self.sql[open_tok.start:open_tok.end]!r}", open_tok.start)
        depth = 1
        while True:
            t = self.next()
            if t.kind == OP and t.value == "(":
                depth += 1
            elif t.kind == OP and t.value == ")":
                depth -= 1
                if depth == 0:
                    return open_tok.end, t.start

    def skip_until_separator(self) -> None:
        """Skip to the next ',' or ')' at this nesting level (not consumed), or to the end."""
        while not self.at_end():
            if self.at_op(",", ")"):
                return
            if self.at_op("("):
                self.skip_group()
            else:
                self.i += 1

    def skip_rest(self) -> None:
        self.i = len(self.tokens)

    def text(self, start: int, end: int) -> str:
        return self.sql[start:end].strip()
