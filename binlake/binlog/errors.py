"""Typed decoder errors. Every one names the file and the byte position it refers to."""

from __future__ import annotations

from ..exitcodes import ExitCode


class BinlogError(Exception):
    """Base of every error the binlog decoder raises; `file` and `pos` say where. Bad input data: its exit code
    wherever it ends a run (the command line, a Spark decode task's error)."""

    exit_code = ExitCode.BAD_DATA

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

    exit_code = ExitCode.SCHEMA_MISMATCH

    def __init__(self, message: str, file: str, pos: int | None, table: str, column: str | None = None) -> None:
        self.table = table
        self.column = column
        super().__init__(message, file, pos)


class UnreadableTableMap(BinlogError):
    """A rows event of a table whose TABLE_MAP this decoder cannot read (an unknown column type, metadata that does
    not parse). Only that table is held back: the decoder reports each of its rows events with this error
    (`file`, `pos` of the rows event, `db`, `table`, `reason`) and reads on; other tables are decoded as usual."""

    def __init__(self, file: str, pos: int | None, db: str, table: str, reason: str, table_map_pos: int | None = None
                 ) -> None:
        self.db = db
        self.table = table
        self.reason = reason
        self.table_map_pos = table_map_pos
        super().__init__(f"rows event of {db}.{table} held back: its TABLE_MAP"
                         f"{'' if table_map_pos is None else f' at {table_map_pos}'} cannot be read ({reason})",
                         file, pos)
