"""Binlog format constants: magic, event type codes, column type codes, flags (facts from the format spec)."""

from __future__ import annotations

from enum import IntEnum
from types import SimpleNamespace

MAGIC = b"\xfebin"
HEADER_LEN = 19  # v4 common header
OLD_HEADER_LEN = 13  # v1 (MySQL 3.23) header, not supported beyond detection
CHECKSUM_LEN = 4

LOG_EVENT_BINLOG_IN_USE_F = 0x1
LOG_EVENT_IGNORABLE_F = 0x80
STMT_END_F = 0x1

BINLOG_CHECKSUM_ALG_OFF = 0
BINLOG_CHECKSUM_ALG_CRC32 = 1
BINLOG_CHECKSUM_ALG_UNDEF = 255


class EventType(IntEnum):
    UNKNOWN = 0
    START_V3 = 1
    QUERY = 2
    STOP = 3
    ROTATE = 4
    INTVAR = 5
    LOAD = 6
    SLAVE = 7
    CREATE_FILE = 8
    APPEND_BLOCK = 9
    EXEC_LOAD = 10
    DELETE_FILE = 11
    NEW_LOAD = 12
    RAND = 13
    USER_VAR = 14
    FORMAT_DESCRIPTION = 15
    XID = 16
    BEGIN_LOAD_QUERY = 17
    EXECUTE_LOAD_QUERY = 18
    TABLE_MAP = 19
    PRE_GA_WRITE_ROWS = 20
    PRE_GA_UPDATE_ROWS = 21
    PRE_GA_DELETE_ROWS = 22
    WRITE_ROWS_V1 = 23
    UPDATE_ROWS_V1 = 24
    DELETE_ROWS_V1 = 25
    INCIDENT = 26
    HEARTBEAT = 27
    IGNORABLE = 28
    ROWS_QUERY = 29
    WRITE_ROWS_V2 = 30
    UPDATE_ROWS_V2 = 31
    DELETE_ROWS_V2 = 32
    GTID = 33
    ANONYMOUS_GTID = 34
    PREVIOUS_GTIDS = 35
    TRANSACTION_CONTEXT = 36
    VIEW_CHANGE = 37
    XA_PREPARE = 38
    PARTIAL_UPDATE_ROWS = 39
    TRANSACTION_PAYLOAD = 40
    HEARTBEAT_V2 = 41
    GTID_TAGGED = 42
    # MariaDB
    MARIA_ANNOTATE_ROWS = 160
    MARIA_BINLOG_CHECKPOINT = 161
    MARIA_GTID = 162
    MARIA_GTID_LIST = 163
    MARIA_START_ENCRYPTION = 164
    MARIA_QUERY_COMPRESSED = 165
    MARIA_WRITE_ROWS_COMPRESSED_V1 = 166
    MARIA_UPDATE_ROWS_COMPRESSED_V1 = 167
    MARIA_DELETE_ROWS_COMPRESSED_V1 = 168
    MARIA_WRITE_ROWS_COMPRESSED = 169
    MARIA_UPDATE_ROWS_COMPRESSED = 170
    MARIA_DELETE_ROWS_COMPRESSED = 171
    MARIA_PARTIAL_ROW_DATA = 172


EVENT_NAMES: dict[int, str] = {int(e): e.name for e in EventType}


def event_name(code: int) -> str:
    name = EVENT_NAMES.get(code)
    return name if name is not None else f"type{code}"


class RowsKind(IntEnum):
    """What a rows event does; the value is used in output ('insert', 'update', 'delete')."""

    WRITE = 1
    UPDATE = 2
    DELETE = 3


def _plain(enum: type[IntEnum]) -> SimpleNamespace:
    return SimpleNamespace(**{m.name: int(m) for m in enum})


# The members as plain ints, for the decoder's per-event code: reading a member off an IntEnum class costs about
# 250 ns in CPython 3.11 (a descriptor call), off a namespace about 20 ns; the values compare and hash the same.
ET = _plain(EventType)
RK = _plain(RowsKind)

ROWS_EVENTS: dict[int, tuple[RowsKind, int, bool]] = {
    # type code -> (kind, version, compressed)
    EventType.PRE_GA_WRITE_ROWS: (RowsKind.WRITE, 0, False),
    EventType.PRE_GA_UPDATE_ROWS: (RowsKind.UPDATE, 0, False),
    EventType.PRE_GA_DELETE_ROWS: (RowsKind.DELETE, 0, False),
    EventType.WRITE_ROWS_V1: (RowsKind.WRITE, 1, False),
    EventType.UPDATE_ROWS_V1: (RowsKind.UPDATE, 1, False),
    EventType.DELETE_ROWS_V1: (RowsKind.DELETE, 1, False),
    EventType.WRITE_ROWS_V2: (RowsKind.WRITE, 2, False),
    EventType.UPDATE_ROWS_V2: (RowsKind.UPDATE, 2, False),
    EventType.DELETE_ROWS_V2: (RowsKind.DELETE, 2, False),
    EventType.PARTIAL_UPDATE_ROWS: (RowsKind.UPDATE, 2, False),
    EventType.MARIA_WRITE_ROWS_COMPRESSED_V1: (RowsKind.WRITE, 1, True),
    EventType.MARIA_UPDATE_ROWS_COMPRESSED_V1: (RowsKind.UPDATE, 1, True),
    EventType.MARIA_DELETE_ROWS_COMPRESSED_V1: (RowsKind.DELETE, 1, True),
    EventType.MARIA_WRITE_ROWS_COMPRESSED: (RowsKind.WRITE, 2, True),
    EventType.MARIA_UPDATE_ROWS_COMPRESSED: (RowsKind.UPDATE, 2, True),
    EventType.MARIA_DELETE_ROWS_COMPRESSED: (RowsKind.DELETE, 2, True),
}


class ColumnType(IntEnum):
    DECIMAL = 0
    TINY = 1
    SHORT = 2
    LONG = 3
    FLOAT = 4
    DOUBLE = 5
    NULL = 6
    TIMESTAMP = 7
    LONGLONG = 8
    INT24 = 9
    DATE = 10
    TIME = 11
    DATETIME = 12
    YEAR = 13
    NEWDATE = 14
    VARCHAR = 15
    BIT = 16
    TIMESTAMP2 = 17
    DATETIME2 = 18
    TIME2 = 19
    TYPED_ARRAY = 20
    # MariaDB: COMPRESSED columns (field_comp.cc), as TEXT/BLOB and VARCHAR/VARBINARY with a compression header
    BLOB_COMPRESSED = 140
    VARCHAR_COMPRESSED = 141
    VECTOR = 242
    INVALID = 243
    BOOL = 244
    JSON = 245
    NEWDECIMAL = 246
    ENUM = 247
    SET = 248
    TINY_BLOB = 249
    MEDIUM_BLOB = 250
    LONG_BLOB = 251
    BLOB = 252
    VAR_STRING = 253
    STRING = 254
    GEOMETRY = 255


class TableMapMeta(IntEnum):
    """Optional metadata field types in TABLE_MAP (binlog_row_metadata)."""

    SIGNEDNESS = 1
    DEFAULT_CHARSET = 2
    COLUMN_CHARSET = 3
    COLUMN_NAME = 4
    SET_STR_VALUE = 5
    ENUM_STR_VALUE = 6
    GEOMETRY_TYPE = 7
    SIMPLE_PRIMARY_KEY = 8
    PRIMARY_KEY_WITH_PREFIX = 9
    ENUM_AND_SET_DEFAULT_CHARSET = 10
    ENUM_AND_SET_COLUMN_CHARSET = 11
    COLUMN_VISIBILITY = 12
    VECTOR_DIMENSIONALITY = 13


BINARY_COLLATION = 63
