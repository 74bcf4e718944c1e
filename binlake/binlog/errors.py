"""Typed decoder errors. Every one names the file and the byte position it refers to."""

from __future__ import annotations


class BinlogError(Exception):
    """Base of every error the binlog decoder raises; `file` and `pos` say where."""

    def __init__(self, message: str, file: str = "?", pos: int | None = None) -> None:
        self.file = file
        self.pos = pos
        self.detail = message
        where = f"{file}" if pos is None else f"{file} at position {pos}"
        super().__init__(f"{where}: {message}")


class BadMagic(BinlogError):
    """The file does not start with the binlog magic bytes (not a binlog, or mangled)."""


class TruncatedFile(BinlogError):
    """The file ends inside an event. `in_use` tells whether the server had the file open (still written)."""

    def __init__(self, message: str, file: str = "?", pos: int | None = None, in_use: bool = False) -> None:
        self.in_use = in_use
        super().__init__(message, file, pos)


class ChecksumMismatch(BinlogError):
    """An event's stored CRC32 does not match its bytes."""


class CorruptEvent(BinlogError):
    """An event's header or body is inconsistent (bad length, fields running past the event, bad values)."""


class UnknownEvent(BinlogError):
    """An event type this decoder does not know, without the ignorable flag."""


class UnsupportedFeature(BinlogError):
    """Valid binlog content that cannot be decoded here (encrypted binlogs, unknown compression)."""


class MissingTableMap(BinlogError):
    """A rows event refers to a table id with no TABLE_MAP in the current transaction."""


class SchemaMismatch(BinlogError):
    """A TABLE_MAP does not match the schema version its position resolves to (see binlake.schema.guard)."""

    def __init__(self, message: str, file: str, pos: int | None, table: str, column: str | None = None) -> None:
        self.table = table
        self.column = column
        super().__init__(message, file, pos)
