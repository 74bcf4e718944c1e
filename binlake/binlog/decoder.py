"""The decoder: events in binlog order -> row changes with exact positions, grouped by transaction.

Pure Python, no Spark or Airflow. One `BinlogDecoder` reads one or more files in order; table ids are
resolved per transaction and per file, never across a FORMAT_DESCRIPTION or a rotation.
"""

from __future__ import annotations

import gc
import io
import os
import re
import struct
from collections import Counter
from collections.abc import Hashable, Iterable, Iterator
from contextlib import contextmanager, suppress
from contextvars import ContextVar
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO, Protocol

from . import rows as _rows_module
from .coltypes import TYPES
from .columnar import ColumnarPairs, convert_pending, defer_event
from .constants import ET, HEADER_LEN, RK, ROWS_EVENTS, event_name
from .errors import (
    BinlogError,
    CorruptEvent,
    MissingTableMap,
    SchemaMismatch,
    UnknownEvent,
    UnreadableTableMap,
    UnsupportedFeature,
)
from .events import (
    parse_binlog_checkpoint,
    parse_gtid,
    parse_incident,
    parse_intvar,
    parse_maria_gtid,
    parse_maria_gtid_list,
    parse_previous_gtids,
    parse_query,
    parse_rand,
    parse_rotate,
    parse_rows_query,
    parse_transaction_payload,
    parse_user_var,
    parse_xa_prepare,
)
from .fde import FormatDescription
from .packing import BodyError
from .records import OP_DELETE, OP_INSERT, OP_UPDATE, EventRecord, RowChange, TransactionSummary
from .rows import (
    COLUMNAR_MAX_BYTES,
    SMALL_EVENT_BYTES,
    RowImageDecoder,
    decode_rows,
    parse_rows_header,
    parse_table_map,
)
from .stream import END_COMPLETE, EventStream, RawEvent, StreamEnd, is_ignorable, open_binlog
from .tablemap import TableMap
from .values import ValueError_
from .vectorized import expect_bytes

OPS = {RK.WRITE: OP_INSERT, RK.UPDATE: OP_UPDATE, RK.DELETE: OP_DELETE}
HEADER = struct.Struct("<IBIIIH")
_U64 = struct.Struct("<Q")
_MARIA_GTID_HEAD = struct.Struct("<QI")  # sequence number, domain id (then the flags byte)
_TID6_FLAGS = struct.Struct("<IHH")  # a rows event's 6-byte table id (low 4 bytes, high 2) and its flags
_from_bytes = int.from_bytes

SKIPPED = "skipped"
_GTID_TYPES = frozenset({ET.GTID, ET.ANONYMOUS_GTID, ET.GTID_TAGGED, ET.MARIA_GTID})
_MYSQL_GTID_TYPES = frozenset({ET.GTID, ET.ANONYMOUS_GTID, ET.GTID_TAGGED})
_QUERY_TYPES = frozenset({ET.QUERY, ET.MARIA_QUERY_COMPRESSED, ET.EXECUTE_LOAD_QUERY})
# What BinlogDecoder.statement_records decodes and checksums (the rest is only framed).
_STATEMENT_SCAN = _QUERY_TYPES | {ET.TRANSACTION_PAYLOAD, ET.FORMAT_DESCRIPTION, ET.ROTATE}
_TABLE_MAP, _XID, _MARIA_GTID, _ANNOTATE_ROWS = ET.TABLE_MAP, ET.XID, ET.MARIA_GTID, ET.MARIA_ANNOTATE_ROWS
# The types _FileState._check_order looks at (besides any event after a TABLE_MAP).
_ORDER_CHECKED = frozenset({ET.TABLE_MAP, ET.BEGIN_LOAD_QUERY, ET.APPEND_BLOCK, ET.EXECUTE_LOAD_QUERY,
                            ET.DELETE_FILE, ET.XID, ET.INCIDENT})
# Written only by MySQL 4.x (binlog format v3): a version-4 binlog never holds them.
_PRE_V4_TYPES = frozenset({ET.LOAD, ET.SLAVE, ET.CREATE_FILE, ET.EXEC_LOAD,
                           ET.NEW_LOAD})
# Types checked for a wrong version (pre-v4) or a missing ignorable flag.
_FLAG_CHECKED = _PRE_V4_TYPES | {ET.IGNORABLE, ET.ROWS_QUERY}
# MariaDB 5.3 hires TIME/DATETIME/TIMESTAMP: their precision comes from the schema, not the TABLE_MAP.
_OLD_TEMPORAL = frozenset(code for code, spec in TYPES.items() if spec.fsp_from_schema)
# Consecutive rows events of one table and kind are converted together (columnar.convert_pending), up to this many
# raw fields held at once (about 40 bytes each plus their values): enough values per numpy call for its fixed cost
# to vanish, few enough that a large transaction decodes in the memory of a small one.
GROUP_FIELDS = 1 << 16
GROUP_ITEMS = 8192  # and at most this many rows events and commit records waiting with them


class _Unreadable:
    """The decoder slot of a TABLE_MAP that cannot be read: why, and where that TABLE_MAP was."""

    __slots__ = ("pos", "reason")

    def __init__(self, reason: str, pos: int) -> None:
        self.reason = reason
        self.pos = pos


class TableResolver(Protocol):
    """Names and checks TABLE_MAPs against a schema (see binlake.schema.timeline.TimelineResolver)."""

    def version_key(self, database: str, table: str, file: str, pos: int) -> Hashable: ...

    def resolve(self, tm: TableMap, file: str, pos: int, mariadb: bool) -> TableMap: ...


@dataclass
class SkippedEvent:
    """An event not decoded because its table's schema did not match (with --on-schema-mismatch skip)."""

    file: str
    pos: int
    table: str
    reason: str


def table_map_names(buf: bytes, off: int, end: int) -> tuple[str, str]:
    """Database and table of a TABLE_MAP, read without parsing the rest (off: just after table id and flags)."""
    if off >= end:
        raise BodyError("TABLE_MAP ends before its database name")
    n = buf[off]
    db = bytes(buf[off + 1 : off + 1 + n]).decode("utf-8", "replace")
    off += n + 2
    if off >= end:
        raise BodyError("TABLE_MAP ends before its table name")
    m = buf[off]
    return db, bytes(buf[off + 1 : off + 1 + m]).decode("utf-8", "replace")

_LEADING_COMMENT = re.compile(r"^(\s+|/\*.*?\*/|#[^\n]*\n|--[^\n]*\n)+", re.S)
_DDL_WORDS = frozenset(
    {"CREATE", "ALTER", "DROP", "RENAME", "TRUNCATE", "GRANT", "REVOKE", "ANALYZE", "OPTIMIZE", "REPAIR", "FLUSH",
     "INSTALL", "UNINSTALL"}
)
_DML_WORDS = frozenset({"INSERT", "UPDATE", "DELETE", "REPLACE", "LOAD", "CALL", "DO", "SELECT", "WITH"})


def classify_statement(sql: str) -> str:
    """begin | commit | rollback | savepoint | xa | ddl | statement | other, from the statement's first words."""
    text = _LEADING_COMMENT.sub("", sql, count=1)
    head = text[:40].upper()
    word = head.split(None, 1)[0] if head.split() else ""
    word = word.rstrip(";")
    if word == "BEGIN" or head.startswith("START TRANSACTION"):
        return "begin"
    if word == "COMMIT":
        return "commit"
    if word == "ROLLBACK":
        return "savepoint" if " TO " in head else "rollback"
    if word in ("SAVEPOINT", "RELEASE"):
        return "savepoint"
    if word == "XA":
        return "xa"
    if word in _DML_WORDS:
        return "statement"
    if word in _DDL_WORDS:
        return "ddl"
    return "other"


# Whether DecodeOptions made now ask for integer columns as numpy arrays (integer_arrays()).
_INT_ARRAYS: ContextVar[bool] = ContextVar("binlake_int_arrays", default=False)


@contextmanager
def integer_arrays() -> Iterator[None]:
    """DecodeOptions made inside ask for integer columns as numpy arrays (DecodeOptions.int_arrays): what the
    lake's decode tasks, whose options binlake.lake.decode_task makes, run in (binlake.lake.ingest.run_task)."""
    token = _INT_ARRAYS.set(True)
    try:
        yield
    finally:
        _INT_ARRAYS.reset(token)


@dataclass
class DecodeOptions:
    """What to read and what to yield. Positions apply to the first/last file; times are epoch seconds (UTC)."""

    start_position: int | None = None
    stop_position: int | None = None
    start_time: int | None = None
    stop_time: int | None = None
    databases: set[str] | None = None
    tables: re.Pattern | None = None
    ops: set[str] | None = None
    all_events: bool = False
    commits: bool = False  # also yield commit, DDL and statement records (the lake and stats need them)
    verify_checksums: bool = True
    allow_truncated: bool = False
    table_resolver: TableResolver | None = None
    on_schema_mismatch: str = "stop"  # or "skip": leave the table out, reporting every skipped event
    # DECIMAL and DATE/DATETIME/TIMESTAMP columns of the columnar path as vectorized.TextColumn (their lake text, no
    # Python object per value) where every value of the column formats; the Kafka sink's decoding.
    text_values: bool = False
    # TINYINT..BIGINT, MEDIUMINT, FLOAT and DOUBLE columns of the columnar path as numpy arrays of their stored
    # width rather than Python numbers (columnar.EventPlan's `arrays`; columnar.NullableArray in the events where
    # some images hold NULL; runs of NOT NULL ones cut from one field per image): converted while the event's
    # values are at hand, and held in a tenth of the memory until the lake's history reads them (lake.history).
    # Row tuples (decode_files) always hold Python numbers. Default: inside integer_arrays().
    int_arrays: bool = field(default_factory=_INT_ARRAYS.get)


@dataclass
class FileResult:
    """How one file's read ended (see stream.StreamEnd), with counts."""

    name: str
    end: StreamEnd | None
    events: int = 0
    rows: int = 0
    server_version: str = ""
    in_use: bool = False
    last_commit_end: int | None = None


class _Txn:
    """The open transaction (one made per transaction: a plain class, cheaper to make than a dataclass)."""

    __slots__ = ("bytes", "explicit", "first_ts", "gtid", "last_ts", "maria_standalone", "pos", "rows", "tables")

    def __init__(self, pos: int | None = None, gtid: str | None = None, first_ts: int = 0, bytes: int = 0,
                 maria_standalone: bool = False, explicit: bool = False) -> None:
        self.pos = pos
        self.gtid = gtid
        self.explicit = explicit  # a BEGIN was seen
        self.rows = 0
        self.bytes = bytes
        self.first_ts = first_ts
        self.last_ts = 0
        self.tables: dict[str, int] = {}
        self.maria_standalone = maria_standalone

    def start(self, ev: RawEvent) -> None:
        """The transaction starts at this event unless one has: its bytes then count the event itself (the per-event
        count skips an event that finds no transaction open)."""
        if self.pos is None:
            self.pos, self.first_ts, self.bytes = ev.pos, ev.timestamp, ev.size

    def add(self, ev: RawEvent) -> None:
        """An event of the open transaction, or the one that starts it."""
        if self.pos is None:
            self.pos, self.first_ts, self.bytes = ev.pos, ev.timestamp, ev.size
        else:
            self.bytes += ev.size


class RowBatch:
    """The rows of one rows event (same table, operation, position and time), decoded.

    Values are decoded eagerly (`pairs`: (before, after) value sequences); the RowChange objects are made only when
    iterated, so per-event consumers (stats, the lake) do not pay for them."""

    __slots__ = ("_rows", "file", "gtid", "op", "pairs", "pos", "sub", "table", "ts", "txn_pos")

    def __init__(self, file, pos, txn_pos, sub, ts, gtid, table, op, pairs) -> None:
        self.file = file
        self.pos = pos
        self.txn_pos = txn_pos
        self.sub = sub
        self.ts = ts
        self.gtid = gtid
        self.table = table
        self.op = op
        self.pairs = pairs
        self._rows = None

    @property
    def rows(self) -> list[RowChange]:
        if self._rows is None:
            f, p, t, s, ts, g, tm, op = self.file, self.pos, self.txn_pos, self.sub, self.ts, self.gtid, self.table, self.op
            self._rows = [RowChange(f, p, t, s, i, ts, g, tm, op, b, a) for i, (b, a) in enumerate(self.pairs)]
        return self._rows

    def __len__(self) -> int:
        return len(self.pairs)

    def __iter__(self):
        return iter(self.rows)

    def __getitem__(self, i):
        return self.rows[i]


# What a damaged event body raises while it is decoded: each becomes one CorruptEvent naming the event and position.
_EVENT_ERRORS = (BodyError, ValueError_, struct.error, IndexError, UnicodeDecodeError, OverflowError)


def _corrupt_event(exc: Exception, etype: int, name: str, pos: int) -> CorruptEvent:
    if isinstance(exc, (BodyError, ValueError_)):  # their messages say what is wrong
        return CorruptEvent(f"{event_name(etype)} event: {exc}", name, pos)
    return CorruptEvent(f"{event_name(etype)} event is malformed ({exc})", name, pos)


class BinlogDecoder:
    """Decode files in order. Iterate `decode_files(paths)` or `decode_stream(fileobj, name)`."""

    def __init__(self, options: DecodeOptions | None = None) -> None:
        self.options = options or DecodeOptions()
        self.results: list[FileResult] = []
        self.skipped: list[SkippedEvent] = []
        # Rows events of tables whose TABLE_MAP could not be read, one error each, in binlog order (the read goes
        # on; with `commits`/`all_events` each also comes as a "table_error" record in the stream).
        self.table_errors: list[UnreadableTableMap] = []
        # Event tallies by type name ("inner:NAME" inside TRANSACTION_PAYLOAD) and by header second.
        self.event_counts: Counter = Counter()
        self.events_per_second: Counter = Counter()
        self._decoder_cache: dict[bytes, tuple[TableMap, RowImageDecoder | None]] = {}
        # Whether the consumer reads row tuples (decode_files, decode_stream): the columnar plans then make the
        # values such consumers read fastest (columnar.EventPlan's `rows`).
        self._rows = False

    def _for_rows(self) -> None:
        if not self._rows:
            self._rows = True
            self._decoder_cache.clear()  # plans made for batched consumers

    # -- public entry points ---------------------------------------------------------------------------
    def decode_files(self, paths: Iterable[str | Path]) -> Iterator[RowChange | EventRecord]:
        """Row changes and (as options ask) other records of the files, in binlog order."""
        self._for_rows()
        for item in self.decode_files_batched(paths):
            if type(item) is RowBatch:
                yield from item
            else:
                yield item

    def decode_files_batched(self, paths: Iterable[str | Path]) -> Iterator[RowBatch | EventRecord]:
        """Like decode_files, but the rows of each rows event come as one RowBatch (a list): much cheaper to
        consume for callers that work per event (stats, the lake)."""
        paths = list(paths)
        with suppress(OSError):  # a missing file: opening it reports that
            expect_bytes(sum(os.path.getsize(p) for p in paths))
        for i, path in enumerate(paths):
            with open_binlog(str(path)) as f:
                yield from self.decode_stream_batched(f, Path(path).name, first=i == 0, last=i == len(paths) - 1)

    def statement_records(self, paths: Iterable[str | Path]) -> Iterator[EventRecord]:
        """The records of the files' QUERY events (DDL, statements, BEGIN/COMMIT, as `commits` asks) and of the
        QUERY events inside transaction payloads, in binlog order, for a scan of the DDL before the rows are decoded.

        Every event is framed as in decode_files, but only QUERY events and transaction payloads are decoded and
        have their checksum verified: rows, TABLE_MAP, GTID and XID bodies are not read, their checksums not
        computed and the order of events is not checked (decoding the same files does all three). On binlogs of
        small transactions this reads about five times faster than decode_files."""
        opts = self.options
        paths = list(paths)
        for i, path in enumerate(paths):
            name = Path(path).name
            with open_binlog(str(path)) as f:
                start = opts.start_position if i == 0 else None
                stop = opts.stop_position if i == len(paths) - 1 else None
                stream = EventStream(f, name, verify_checksums=opts.verify_checksums,
                                     allow_truncated=opts.allow_truncated, start_position=start,
                                     verify_types=_STATEMENT_SCAN)
                result = FileResult(name, None)
                self.results.append(result)
                state = _FileState(self, stream, name, result)
                state.check_order = False
                for ev in stream:
                    if stop is not None and ev.pos >= stop:
                        break
                    etype = ev.type
                    if etype not in _STATEMENT_SCAN:
                        continue
                    try:
                        for item in state.handle(ev, ev.buf, ev.body, ev.body_end, etype, 0, stream.fde):
                            if type(item) is EventRecord:
                                yield item
                    except _EVENT_ERRORS as exc:
                        raise _corrupt_event(exc, etype, name, ev.pos) from None

    def decode_stream(
        self, fileobj: BinaryIO, name: str, first: bool = True, last: bool = True
    ) -> Iterator[RowChange | EventRecord]:
        self._for_rows()
        for item in self.decode_stream_batched(fileobj, name, first, last):
            if type(item) is RowBatch:
                yield from item
            else:
                yield item

    def decode_stream_batched(
        self, fileobj: BinaryIO, name: str, first: bool = True, last: bool = True
    ) -> Iterator[RowBatch | EventRecord]:
        opts = self.options
        start = opts.start_position if first else None
        stop = opts.stop_position if last else None
        stream = EventStream(
            fileobj, name, verify_checksums=opts.verify_checksums, allow_truncated=opts.allow_truncated,
            start_position=start, reuse_events=True,
        )
        result = FileResult(name, None)
        self.results.append(result)
        state = _FileState(self, stream, name, result)
        counts = self.event_counts
        per_second = self.events_per_second
        # Rows events decoded only up to their raw fields (columnar.defer_event), waiting to be converted together
        # with the other ones of the same plan and kind (`groups`); `held` is everything read since the first of
        # them, in binlog order: those rows events and the commit records between them, so that the rows of many
        # small transactions, over several tables and kinds, convert together. Any other item first yields them.
        groups: dict = {}
        held: list = []
        held_fields = 0
        handle = state.handle
        # The common events of a transaction go straight to their own handlers (_FileState.fast_handlers).
        fast = state.fast_handlers().get if state.check_order and not opts.all_events else {}.get
        # The tallies, kept in locals and added to `counts`, `per_second` and `result` when the file's read ends:
        # per type code (a list: codes are one byte), and per header second as runs of equal seconds.
        by_type = [0] * 256
        second, run = None, 0
        # The read makes many containers and no reference cycles: the cyclic collector, which would only rescan the
        # items held for conversion, is off while it runs (as it was, whenever the consumer has the items).
        collecting = gc.isenabled()
        gc.disable()
        live = True  # the collector is this generator's to restore (False while the consumer has the items)
        try:
            for ev in stream:
                etype = ev.type
                if stop is not None and ev.pos >= stop:
                    result.end = StreamEnd(ev.pos, "stop position")
                    break
                if not by_type[etype]:
                    counts.setdefault(etype, 0)  # (the order of first appearance, as counted one by one)
                by_type[etype] += 1
                if ev.timestamp == second:
                    run += 1
                else:
                    if run:
                        per_second[second] += run
                    second, run = ev.timestamp, 1
                try:
                    h = fast(etype)
                    items = handle(ev, ev.buf, ev.body, ev.body_end, etype, 0, stream.fde) if h is None else h(ev)
                    if not items:  # most events: () or []
                        continue
                    out: list = []  # what this event lets out, in order
                    error = None  # a bad value found converting held events (after the items before it)
                    for item in items:
                        if type(item) is RowBatch:
                            rows = item.pairs
                            if type(rows) is ColumnarPairs and rows.pending is not None:
                                if held_fields >= GROUP_FIELDS or len(held) >= GROUP_ITEMS:
                                    done, error = _converted(groups, held)
                                    out += done
                                    held_fields = 0
                                    if error is not None:
                                        break
                                pending = rows.pending
                                key = (pending[0], pending[1])  # what events must share to convert together
                                group = groups.get(key)
                                if group is None:
                                    groups[key] = [item]
                                else:
                                    group.append(item)
                                held.append(item)
                                held_fields += len(pending[2])
                                continue
                        elif held and item.kind == "commit":
                            held.append(item)
                            continue
                        if held:
                            done, error = _converted(groups, held)
                            out += done
                            held_fields = 0
                            if error is not None:
                                break
                        out.append(item)
                    if out or error is not None:
                        if collecting:
                            gc.enable()
                        live = False
                        yield from out
                        if error is not None:
                            raise error
                        collecting = gc.isenabled()
                        gc.disable()
                        live = True
                except _EVENT_ERRORS as exc:
                    raise _corrupt_event(exc, ev.type, name, ev.pos) from None
        except Exception:
            if live:
                live = False
                if collecting:
                    gc.enable()
            if held:  # what was read before the error comes out before it, as it would undeferred
                done, error = _converted(groups, held)
                yield from done
                if error is not None:
                    raise error from None
            raise
        finally:
            if live and collecting:
                gc.enable()
            live = False
            if run:
                per_second[second] += run
            for code, n in enumerate(by_type):
                if n:
                    counts[code] += n
                    result.events += n
        if held:
            done, error = _converted(groups, held)
            yield from done
            if error is not None:
                raise error
        if result.end is None:
            result.end = stream.end or StreamEnd(0, END_COMPLETE)
        if stream.first_fde is not None:
            result.server_version = stream.first_fde.server_version
        result.in_use = stream.in_use


def _converted(groups: dict, held: list) -> tuple[list, BaseException | None]:
    """Convert the deferred rows events of each group (one plan and kind: columnar.convert_pending) and return
    `held` (those events and the commit records read between them) in order, and None; both emptied.

    A bad value is reported at its own event, as when the events are decoded alone: then the items before the first
    event (in binlog order) that fails are returned, with its error (for the caller to raise once they are out)."""
    parts = list(groups.values())
    items = held[:]
    groups.clear()
    held.clear()
    failed = []
    # The conversion makes many containers and no reference cycles: the cyclic collector would only rescan the
    # live heap (about a tenth of the conversion time).
    collecting = gc.isenabled()
    gc.disable()
    try:
        for part in parts:
            try:
                convert_pending([b.pairs for b in part])
            except Exception as exc:  # convert_pending leaves the failing event and those after it pending
                failed.append((next(b for b in part if b.pairs.pending is not None), exc))
    finally:
        if collecting:
            gc.enable()
    if not failed:
        return items, None
    at = {id(item): i for i, item in enumerate(items)}
    bad, exc = min(failed, key=lambda f: at[id(f[0])])
    where = f"rows event for {bad.table.qualified_name}"
    if isinstance(exc, (ValueError_, BodyError)):
        exc = CorruptEvent(f"{where}: {exc}", bad.file, bad.pos)
    elif isinstance(exc, (struct.error, IndexError, UnicodeDecodeError, OverflowError)):
        exc = CorruptEvent(f"{where} is malformed ({exc})", bad.file, bad.pos)
    return items[: at[id(bad)]], exc


def event_type_counts(counts: Counter) -> dict[str, int]:
    """Name the decoder's per-type tallies: 'QUERY', 'inner:WRITE_ROWS_V2', 'type100' for unknown codes."""
    out: dict[str, int] = {}
    for key, n in counts.items():
        name = f"inner:{event_name(key[1])}" if isinstance(key, tuple) else event_name(key)
        out[name] = out.get(name, 0) + n
    return out


class _FileState:
    """Per-file decoding state: current format, table maps, the open transaction."""

    def __init__(self, decoder: BinlogDecoder, stream: EventStream, name: str, result: FileResult) -> None:
        self.d = decoder
        self.opts = decoder.options
        self.stream = stream
        self.name = name
        self.result = result
        self.tables: dict[int, tuple[TableMap, RowImageDecoder | None]] = {}
        self.txn = _Txn()
        self.in_payload = False
        # Event-order checks (see _check_order); off after a jump to --start-position (it may land mid-transaction).
        self.check_order = stream.start_position is None
        self._map_pending: int | None = None  # a TABLE_MAP group waiting for its rows event
        self._gtid_pending: int | None = None  # a GTID waiting for its transaction's first event
        self._load_open = False  # a LOAD DATA's BEGIN_LOAD_QUERY seen, its EXECUTE_LOAD_QUERY not yet
        o = self.opts
        self.plain_rows = o.ops is None and o.start_time is None and o.stop_time is None  # (see _fast_rows)
        self._post_fde: FormatDescription | None = None
        self._post: dict[int, int] = {}  # rows event type -> post-header length, under _post_fde
        # Per rows event type, what _fast_rows read from the last such event's header (table id, flags, columns and
        # their bitmaps: the bytes up to its rows): (header length, header bytes, table id, table entry, plan, kind).
        # An event with the same header bytes, whose table id maps to the same entry, takes them as they are (a
        # table's single-row transactions repeat one header). Emptied with _post at a new FORMAT_DESCRIPTION.
        self._rows_head: dict[int, tuple] = {}
        self._map_fde: FormatDescription | None = None
        self._map_id_len = 6  # a TABLE_MAP's table id length, under _map_fde

    # -- helpers ---------------------------------------------------------------------------------------
    def _record(self, kind: str, ev: RawEvent, sub: int, /, **info) -> EventRecord:
        return EventRecord(
            kind, self.name, ev.pos, ev.timestamp, event_name(ev.type), self.txn.pos, sub, self.txn.gtid,
            ev.pos + ev.size, info,
        )

    def _end_txn(self, kind: str, ev: RawEvent, sub: int, info: dict) -> list[EventRecord]:
        t = self.txn
        out = []
        if self.opts.commits or self.opts.all_events:
            rec = EventRecord(kind, self.name, ev.pos, ev.timestamp, event_name(ev.type), t.pos, sub, t.gtid,
                              ev.pos + ev.size, info)
            # (t.tables itself: the transaction is over, and the next one gets a new _Txn.)
            rec.info["summary"] = TransactionSummary(
                t.rows, t.bytes, t.first_ts or ev.timestamp, ev.timestamp,
                t.tables,
            )
            out.append(rec)
        self.result.last_commit_end = ev.pos + ev.size
        self.txn = _Txn()
        self.tables.clear()
        return out

    def _time_ok(self, ts: int) -> bool:
        o = self.opts
        return (o.start_time is None or ts >= o.start_time) and (o.stop_time is None or ts < o.stop_time)

    # -- dispatch --------------------------------------------------------------------------------------
    def handle(
        self, ev: RawEvent, buf: bytes, body: int, end: int, etype: int, sub: int, fde: FormatDescription
    ) -> Iterable[RowBatch | EventRecord]:
        """The items of one event, as an iterable to go through at once (most events have none: `()`). Not a
        generator: the per-event cost of small transactions is mostly such fixed costs."""
        t = self.txn
        if t.pos is not None and not self.in_payload:
            t.bytes += ev.size
        rows_info = ROWS_EVENTS.get(etype)
        if etype in _FLAG_CHECKED:
            if etype in _PRE_V4_TYPES:
                raise CorruptEvent(f"{event_name(etype)} event (MySQL 4.x LOAD DATA) in a version-4 binlog",
                                   self.name, ev.pos)
            if not is_ignorable(ev.flags):
                raise CorruptEvent(f"{event_name(etype)} event without the ignorable flag its servers always set",
                                   self.name, ev.pos)
        if self.check_order:
            if etype in _GTID_TYPES:
                # Even a relay log's partial transaction is never just a GTID directly followed by another.
                if self._gtid_pending is not None:
                    raise CorruptEvent(f"the GTID at {self._gtid_pending} starts a transaction with no events",
                                       self.name, ev.pos)
                self._gtid_pending = ev.pos
            elif self._gtid_pending is not None:
                self._gtid_pending = None
            if self.stream.local_positions:
                # _check_order's two commonest cases inline (a TABLE_MAP, then its rows event): a call less for each.
                if self._map_pending is not None:
                    if etype != _TABLE_MAP:
                        if rows_info is None:
                            self._check_order(ev, etype, False)  # raises
                        self._map_pending = None
                elif etype == _TABLE_MAP:
                    self._map_pending = ev.pos
                elif etype in _ORDER_CHECKED:
                    self._check_order(ev, etype, rows_info is not None)
        if rows_info is not None:
            return self._rows(ev, buf, body, end, etype, sub, fde, rows_info)
        if etype == _TABLE_MAP:
            t.start(ev)
            self._table_map(ev, buf, body, end, fde)
            if self.opts.all_events:
                tm = self.tables.get(int.from_bytes(buf[body : body + 6], "little"))
                return (self._record("table_map", ev, sub, table=tm[0].qualified_name if tm else None),)
            return ()
        if etype == _XID:  # (parse_xid and _start_txn inline: one per transaction)
            if body + 8 > end:
                raise BodyError(f"field of 8 bytes at offset {body} runs past the event end {end}")
            t.start(ev)
            return self._end_txn("commit", ev, sub, {"xid": _U64.unpack_from(buf, body)[0]})
        if etype == _MARIA_GTID:
            if self.opts.all_events:
                g = parse_maria_gtid(buf, body, end, ev.server_id)
                gtid, standalone = g.gtid, g.standalone
            else:  # parse_maria_gtid's fields inline (the group commit id is not used)
                if body + 13 > end:
                    raise BodyError(f"field of 13 bytes at offset {body} runs past the event end {end}")
                seq, domain = _MARIA_GTID_HEAD.unpack_from(buf, body)
                gtid, standalone = f"{domain}-{ev.server_id}-{seq}", bool(buf[body + 12] & 1)
            if t.pos is None:  # the _Txn a commit left (nothing set yet): filled rather than made again
                t.pos, t.gtid, t.first_ts, t.bytes = ev.pos, gtid, ev.timestamp, ev.size
                t.maria_standalone, t.explicit = standalone, not standalone
            else:
                self.txn = _Txn(pos=ev.pos, gtid=gtid, first_ts=ev.timestamp, bytes=ev.size,
                                maria_standalone=standalone, explicit=not standalone)
            self.tables.clear()
            if self.opts.all_events:
                return (self._record("gtid", ev, sub, gtid=gtid, standalone=standalone),)
            return ()
        if etype in _QUERY_TYPES:
            return self._query(ev, buf, body, end, etype, sub, fde)
        if etype == _ANNOTATE_ROWS and not self.opts.all_events:
            return ()  # MariaDB's statement text before each rows event (any bytes decode: nothing to check)
        if etype in _MYSQL_GTID_TYPES:
            g = parse_gtid(buf, body, end, etype)
            self.txn = _Txn(pos=ev.pos, gtid=g.gtid, first_ts=ev.timestamp, bytes=ev.size)
            self.tables.clear()
            if self.opts.all_events:
                return (self._record(
                    "gtid", ev, sub, gtid=g.gtid, last_committed=g.last_committed,
                    sequence_number=g.sequence_number, commit_ts_us=g.immediate_commit_ts_us,
                    transaction_length=g.transaction_length,
                ),)
            return ()
        if etype == ET.TRANSACTION_PAYLOAD:
            return self._payload(ev, buf, body, end, fde)
        if etype == ET.FORMAT_DESCRIPTION:
            self.tables.clear()
            if self.opts.all_events:
                f = self.stream.fde
                return (self._record("format", ev, sub, server_version=f.server_version, checksum=f.checksum_alg,
                                     in_use=bool(ev.flags & 1)),)
            return ()
        if etype == ET.ROTATE:
            r = parse_rotate(buf, body, end, fde)
            self.tables.clear()
            if self.opts.all_events:
                return (self._record("rotate", ev, sub, next_file=r.next_file, position=r.position),)
            return ()
        if etype == ET.XA_PREPARE:
            x = parse_xa_prepare(buf, body, end)
            self.txn.start(ev)
            return self._end_txn("commit", ev, sub, {"xa_prepare": True, "one_phase": x.one_phase})
        return self._other(ev, buf, body, end, etype, sub)

    # -- the common events, outside a TRANSACTION_PAYLOAD, with check_order on and all_events off --------------
    def fast_handlers(self) -> dict:
        """Handlers of the commonest event types, by type: each does what `handle` does for its type (order checks,
        the transaction's bytes, the event itself) with check_order on and all_events off, outside a
        TRANSACTION_PAYLOAD, without going through the checks of the other types."""
        out = {_MARIA_GTID: self._fast_maria_gtid, _ANNOTATE_ROWS: self._fast_annotate, _TABLE_MAP: self._fast_table_map,
               _XID: self._fast_xid}
        for code, (_kind, version, compressed) in ROWS_EVENTS.items():
            if version and not compressed and code != ET.PARTIAL_UPDATE_ROWS:
                out[code] = self._fast_rows
        return out

    def _fast_maria_gtid(self, ev: RawEvent) -> tuple:
        pos = ev.pos
        if self._gtid_pending is not None:
            raise CorruptEvent(f"the GTID at {self._gtid_pending} starts a transaction with no events", self.name, pos)
        self._gtid_pending = pos
        if self._map_pending is not None and self.stream.local_positions:
            self._check_order(ev, _MARIA_GTID, False)  # raises
        buf, body, end = ev.buf, ev.body, ev.body_end
        if body + 13 > end:
            raise BodyError(f"field of 13 bytes at offset {body} runs past the event end {end}")
        seq, domain = _MARIA_GTID_HEAD.unpack_from(buf, body)
        standalone = bool(buf[body + 12] & 1)
        t = self.txn
        if t.pos is None:  # the _Txn a commit left (nothing set yet): filled rather than made again
            t.pos, t.gtid, t.first_ts, t.bytes = pos, f"{domain}-{ev.server_id}-{seq}", ev.timestamp, ev.size
            t.maria_standalone, t.explicit = standalone, not standalone
        else:
            self.txn = _Txn(pos=pos, gtid=f"{domain}-{ev.server_id}-{seq}", first_ts=ev.timestamp, bytes=ev.size,
                            maria_standalone=standalone, explicit=not standalone)
        self.tables.clear()
        return ()

    def _fast_annotate(self, ev: RawEvent) -> tuple:
        self._gtid_pending = None
        if self._map_pending is not None and self.stream.local_positions:
            self._check_order(ev, _ANNOTATE_ROWS, False)  # raises
        t = self.txn
        if t.pos is not None:
            t.bytes += ev.size
        return ()

    def _fast_table_map(self, ev: RawEvent) -> tuple:
        self._gtid_pending = None
        if self._map_pending is None and self.stream.local_positions:
            self._map_pending = ev.pos
        t = self.txn
        t.add(ev)
        fde = self.stream.fde
        if self.opts.table_resolver is None:  # (_table_map's cache hit, inline)
            if fde is not self._map_fde:
                self._map_fde = fde
                self._map_id_len = 4 if (fde.post_header_len(_TABLE_MAP) or 8) == 6 else 6
            buf, body, id_len = ev.buf, ev.body, self._map_id_len
            cached = self.d._decoder_cache.get((buf[body + id_len : ev.body_end], fde.is_mariadb))
            if cached is not None:
                table_id = _from_bytes(buf[body : body + id_len], "little")
                cached[0].table_id = table_id
                self.tables[table_id] = cached
                return ()
        self._table_map(ev, ev.buf, ev.body, ev.body_end, fde)
        return ()

    def _fast_xid(self, ev: RawEvent) -> list:
        self._gtid_pending = None
        t = self.txn
        if t.pos is not None:
            t.bytes += ev.size
        if (self._map_pending is not None or t.pos is None) and self.stream.local_positions:
            self._check_order(ev, _XID, False)  # raises
        buf, body, end = ev.buf, ev.body, ev.body_end
        if body + 8 > end:
            raise BodyError(f"field of 8 bytes at offset {body} runs past the event end {end}")
        t.start(ev)
        # (_end_txn inline)
        pos, ts, size = ev.pos, ev.timestamp, ev.size
        self.result.last_commit_end = pos + size
        self.tables.clear()
        out: tuple | list = ()
        if self.opts.commits:
            summary = TransactionSummary(t.rows, t.bytes, t.first_ts or ts, ts, t.tables)
            out = [EventRecord("commit", self.name, pos, ts, "XID", t.pos, 0, t.gtid, pos + size,
                               {"xid": _U64.unpack_from(buf, body)[0], "summary": summary})]
        # The next transaction's _Txn: this one, emptied (nothing else holds it; its tables dict went to the summary).
        t.pos = t.gtid = None
        t.explicit = t.maria_standalone = False
        t.rows = t.bytes = t.first_ts = t.last_ts = 0
        t.tables = {}
        return out

    def _fast_rows(self, ev: RawEvent) -> list:
        self._gtid_pending = None
        self._map_pending = None  # (only looked at while the file's positions are its own: it never goes back)
        t = self.txn
        if t.pos is None:  # (_Txn.add inline)
            t.pos, t.first_ts, t.bytes = ev.pos, ev.timestamp, ev.size
        else:
            t.bytes += ev.size
        etype = ev.type
        buf, body, end = ev.buf, ev.body, ev.body_end
        fde = self.stream.fde
        if fde is self._post_fde:
            head = self._rows_head.get(etype)
            if (head is not None and buf[body : body + head[0]] == head[1] and self.tables.get(head[2]) is head[3]
                    and _rows_module.COLUMNAR):
                # The header of the last event of this type again (same table entry): its plan as it was.
                off = body + head[0]
                plan = head[4]
                if 0 <= end - off <= (COLUMNAR_MAX_BYTES if plan.groups else SMALL_EVENT_BYTES):
                    kind = head[5]
                    try:
                        rows = defer_event(plan, buf, off, end, kind)
                    except _EVENT_ERRORS:
                        return self._rows(ev, buf, body, end, etype, 0, fde, ROWS_EVENTS[etype])
                    n = rows.n
                    t.rows += n
                    ts = ev.timestamp
                    t.last_ts = ts
                    tm = head[3][0]
                    q = tm.qualified_name
                    t.tables[q] = t.tables.get(q, 0) + n
                    self.result.rows += n
                    return [RowBatch(self.name, ev.pos, t.pos, 0, ts, t.gtid, tm, OPS[kind], rows)]
        else:
            self._post_fde = fde
            self._post = {code: fde.post_header_len(code) for code in ROWS_EVENTS}
            self._rows_head = {}
        info = ROWS_EVENTS[etype]
        # What parse_rows_header, _rows and decode_rows do for the common case, inline: a 6-byte table id, no
        # extra data, fewer than 251 columns, a deferrable rows event of a table that is read. Any other case (and
        # any error, which they report) goes through _rows from the start.
        post = self._post[etype]
        kind = info[0]
        if (post == 8 or (post == 10 and info[1] == 2)) and self.plain_rows:
            off = body + post
            if off < end:
                low, high, _flags = _TID6_FLAGS.unpack_from(buf, body)
                if post == 8 or buf[body + 8] | buf[body + 9] << 8 == 2:
                    ncols = buf[off]
                    nbytes = (ncols + 7) >> 3
                    off += 1
                    present = _from_bytes(buf[off : off + nbytes], "little")
                    off += nbytes
                    if kind == RK.UPDATE:
                        present_after = _from_bytes(buf[off : off + nbytes], "little")
                        off += nbytes
                    else:
                        present_after = present
                    entry = self.tables.get(low | high << 32)
                    if entry is not None and off <= end and ncols < 251 and present_after == present:
                        tm, dec = entry
                        if (type(dec) is RowImageDecoder and dec.deferrable and ncols == dec.ncols
                                and end - off <= COLUMNAR_MAX_BYTES and _rows_module.COLUMNAR):
                            plan = dec._event_plans.get(present)
                            if plan is not None and (plan.groups or end - off <= SMALL_EVENT_BYTES):
                                try:
                                    rows = defer_event(plan, buf, off, end, kind)
                                except _EVENT_ERRORS:
                                    return self._rows(ev, buf, body, end, etype, 0, fde, info)
                                self._rows_head[etype] = (off - body, buf[body:off], low | high << 32, entry, plan, kind)
                                n = rows.n
                                t.rows += n
                                ts = ev.timestamp
                                t.last_ts = ts
                                q = tm.qualified_name
                                t.tables[q] = t.tables.get(q, 0) + n
                                self.result.rows += n
                                return [RowBatch(self.name, ev.pos, t.pos, 0, ts, t.gtid, tm, OPS[kind], rows)]
        return self._rows(ev, buf, body, end, etype, 0, fde, info)

    def _check_order(self, ev: RawEvent, etype: int, is_rows: bool) -> None:
        """Orders and flags every server writes, so that a damaged event type (with a matching CRC, or none) cannot
        turn an event into another that is silently skipped. Relay logs (which may hold a partial transaction) are
        exempt."""
        name, pos = self.name, ev.pos
        if self._map_pending is not None and etype != ET.TABLE_MAP:
            if not is_rows:
                raise CorruptEvent(f"the TABLE_MAP at {self._map_pending} is followed by {event_name(etype)}, not by "
                                   "a rows event", name, pos)
            self._map_pending = None
        if etype == ET.TABLE_MAP and self._map_pending is None:
            self._map_pending = pos
        if etype == ET.BEGIN_LOAD_QUERY:
            self._load_open = True
        elif etype == ET.APPEND_BLOCK and not self._load_open:
            raise CorruptEvent("APPEND_BLOCK event without the BEGIN_LOAD_QUERY that starts its LOAD DATA", name, pos)
        elif etype in (ET.EXECUTE_LOAD_QUERY, ET.DELETE_FILE):
            self._load_open = False
        if etype == ET.XID and self.txn.pos is None:
            raise CorruptEvent("XID event ends no transaction (nothing since the last commit)", name, pos)
        if etype == ET.INCIDENT and (self.txn.explicit or self.txn.rows):
            # Servers write an INCIDENT straight to the binlog, between transactions (after one's COMMIT/XID, with
            # its own GTID): one after BEGIN or rows is a damaged type (e.g. a rows event's, whose rows it drops).
            raise CorruptEvent("INCIDENT event inside a transaction (after its BEGIN or rows); servers write "
                               "incidents between transactions", name, pos)

    def _other(self, ev: RawEvent, buf: bytes, body: int, end: int, etype: int, sub: int) -> Iterator[EventRecord]:
        want = self.opts.all_events
        if etype == ET.STOP:
            if want:
                yield self._record("stop", ev, sub)
        elif etype == ET.PREVIOUS_GTIDS:
            p = parse_previous_gtids(buf, body, end)
            if want:
                yield self._record("previous_gtids", ev, sub, gtid_set=p.text())
        elif etype == ET.INTVAR:
            x = parse_intvar(buf, body, end)
            if want:
                yield self._record("intvar", ev, sub, kind=x.kind, value=x.value)
        elif etype == ET.RAND:
            x = parse_rand(buf, body, end)
            if want:
                yield self._record("rand", ev, sub, seed1=x.seed1, seed2=x.seed2)
        elif etype == ET.USER_VAR:
            x = parse_user_var(buf, body, end)
            if want:
                yield self._record("user_var", ev, sub, name=x.name, is_null=x.is_null,
                                   value=x.value.hex() if x.value is not None else None)
        elif etype in (ET.ROWS_QUERY, ET.MARIA_ANNOTATE_ROWS):
            text = (parse_rows_query(buf, body, end).text if etype == ET.ROWS_QUERY
                    else bytes(buf[body:end]).decode("utf-8", "replace"))
            if want:
                yield self._record("rows_query", ev, sub, query=text)
        elif etype == ET.INCIDENT:
            x = parse_incident(buf, body, end)
            if want:
                yield self._record("incident", ev, sub, incident=x.kind, message=x.message)
        elif etype in (ET.HEARTBEAT, ET.HEARTBEAT_V2):
            if want:
                yield self._record("heartbeat", ev, sub)
        elif etype == ET.MARIA_GTID_LIST:
            x = parse_maria_gtid_list(buf, body, end)
            if want:
                yield self._record("gtid_list", ev, sub, gtids=x.gtids)
        elif etype == ET.MARIA_BINLOG_CHECKPOINT:
            x = parse_binlog_checkpoint(buf, body, end)
            if want:
                yield self._record("checkpoint", ev, sub, checkpoint_file=x.text)
        elif etype == ET.MARIA_START_ENCRYPTION:
            if want:
                yield self._record("other", ev, sub, encrypted=True)
        elif etype in (ET.BEGIN_LOAD_QUERY, ET.APPEND_BLOCK, ET.CREATE_FILE,
                       ET.EXEC_LOAD, ET.DELETE_FILE, ET.LOAD, ET.NEW_LOAD):
            self.txn.start(ev)
            if want:
                yield self._record("load_data", ev, sub, bytes=end - body)
        elif etype in (ET.IGNORABLE, ET.TRANSACTION_CONTEXT, ET.VIEW_CHANGE,
                       ET.MARIA_PARTIAL_ROW_DATA, ET.SLAVE):
            if want:
                yield self._record("other", ev, sub)
        elif etype == ET.START_V3:
            raise UnsupportedFeature("START_EVENT_V3 (MySQL 4.x binlog) is not supported", self.name, ev.pos)
        elif is_ignorable(ev.flags):
            if want:
                yield self._record("ignored", ev, sub, type_code=etype)
        else:
            raise UnknownEvent(
                f"unknown event type {etype} without the ignorable flag ({ev.size} bytes)", self.name, ev.pos
            )

    # -- QUERY -----------------------------------------------------------------------------------------
    def _query(self, ev: RawEvent, buf, body, end, etype, sub, fde) -> Iterator[RowChange | EventRecord]:
        q = parse_query(buf, body, end, fde, etype)
        kind = classify_statement(q.query)
        t = self.txn
        if kind == "begin":
            self.txn.start(ev)
            t.explicit = True
            if self.opts.all_events:
                yield self._record("begin", ev, sub, database=q.database)
            return
        if kind in ("commit", "rollback") or (kind == "xa" and re.match(r"\s*XA\s+(COMMIT|ROLLBACK)", q.query, re.I)):
            if kind == "commit" and t.pos is None and self.check_order and self.stream.local_positions:
                raise CorruptEvent("COMMIT ends no transaction (nothing since the last commit)", self.name, ev.pos)
            self.txn.start(ev)
            yield from self._end_txn(kind if kind != "xa" else "commit", ev, sub, {"query": q.query})
            return
        self.txn.start(ev)
        if self.opts.all_events or (self.opts.commits and kind in ("ddl", "statement", "other")):
            yield self._record(
                kind, ev, sub, database=q.database, query=q.query, time_zone=q.time_zone,
                charset=q.charset_client, error_code=q.error_code,
            )
        if not t.explicit and kind not in ("savepoint", "xa"):
            # An autocommitted statement (DDL, or DML outside BEGIN) is a transaction on its own.
            yield from self._end_txn("commit", ev, sub, {"implicit": True})

    # -- TABLE_MAP -------------------------------------------------------------------------------------
    def _table_map(self, ev: RawEvent, buf, body, end, fde) -> None:
        post = fde.post_header_len(ET.TABLE_MAP) or 8
        id_len = 4 if post == 6 else 6
        table_id = int.from_bytes(buf[body : body + id_len], "little")
        raw = bytes(buf[body + id_len : end])
        resolver = self.opts.table_resolver
        # The same bytes decode differently on MariaDB (which types SIGNEDNESS covers) and under different schema
        # versions: both are in the key.
        key: object = (raw, fde.is_mariadb)
        if resolver is not None:
            db, table = table_map_names(buf, body + id_len + 2, end)
            key = (raw, fde.is_mariadb, resolver.version_key(db, table, self.name, ev.pos))
        cache = self.d._decoder_cache
        cached = cache.get(key)
        if cached is None:
            dec: RowImageDecoder | str | _Unreadable | None = None
            try:
                tm = parse_table_map(buf, body, end, fde)
            except (BodyError, ValueError_, struct.error, IndexError, UnicodeDecodeError, OverflowError) as exc:
                # Only this table is held back, when its names can be read (else the event is corrupt).
                db, table = table_map_names(buf, body + id_len + 2, end)
                tm = TableMap(table_id, db, table, [])
                dec = _Unreadable(str(exc), ev.pos)
            wanted = self._wanted(tm)
            # A table outside --databases/--tables is never resolved: its schema cannot stop the read.
            if wanted and resolver is not None and dec is None:
                try:
                    tm = resolver.resolve(tm, self.name, ev.pos, fde.is_mariadb)
                except SchemaMismatch as exc:
                    if self.opts.on_schema_mismatch != "skip":
                        raise
                    self.d.skipped.append(SkippedEvent(self.name, ev.pos, tm.qualified_name, str(exc)))
                    dec = SKIPPED
            if dec is None and wanted:
                try:
                    dec = RowImageDecoder(tm, text=self.opts.text_values, rows=self.d._rows,
                                          arrays=self.opts.int_arrays)
                except ValueError_ as exc:  # a column type or its metadata this decoder cannot decode
                    dec = _Unreadable(str(exc), ev.pos)
            elif not wanted:
                dec = None
            cached = (tm, dec)
            if dec is not SKIPPED and type(dec) is not _Unreadable:
                if len(cache) > 10000:
                    cache.clear()
                cache[key] = cached
        cached[0].table_id = table_id
        self.tables[table_id] = cached

    def _wanted(self, tm: TableMap) -> bool:
        o = self.opts
        if o.databases is not None and tm.database not in o.databases:
            return False
        return not (o.tables is not None and not o.tables.search(tm.qualified_name))

    # -- rows ------------------------------------------------------------------------------------------
    def _rows(self, ev: RawEvent, buf, body, end, etype, sub, fde, info) -> list:
        """The event's RowBatch (or its table_error record), in a list."""
        kind, version, compressed = info
        rh = parse_rows_header(buf, body, end, fde, etype, kind, version, compressed)
        entry = self.tables.get(rh.table_id)
        if entry is None:
            raise MissingTableMap(
                f"{event_name(etype)} refers to table id {rh.table_id}, which no TABLE_MAP in this transaction "
                "defined", self.name, ev.pos,
            )
        tm, dec = entry
        t = self.txn
        t.start(ev)
        if dec is None:  # filtered out by --databases/--tables
            return []
        if dec is SKIPPED:  # --on-schema-mismatch skip: every skipped event is reported
            self.d.skipped.append(SkippedEvent(self.name, ev.pos, tm.qualified_name, "rows event skipped"))
            return []
        if type(dec) is _Unreadable:  # held back with a per-table error; the read goes on
            err = UnreadableTableMap(self.name, ev.pos, tm.database, tm.table, dec.reason,
                                     dec.pos if not self.in_payload else None)
            self.d.table_errors.append(err)
            if self.opts.commits or self.opts.all_events:
                return [self._record("table_error", ev, sub, table=tm.qualified_name, error=str(err))]
            return []
        op = OPS[kind]
        opts = self.opts
        if opts.ops is not None and op not in opts.ops:
            return []
        if (opts.start_time is not None or opts.stop_time is not None) and not self._time_ok(ev.timestamp):
            return []
        name, pos, txn_pos, ts, gtid = self.name, ev.pos, t.pos, ev.timestamp, t.gtid
        try:
            rows = decode_rows(rh, dec, defer=dec.deferrable)
        except (ValueError_, BodyError, struct.error, IndexError, OverflowError, UnicodeDecodeError) as exc:
            if fde.is_mariadb and any(c.type in _OLD_TEMPORAL and not c.meta for c in tm.columns):
                # Not damage (the event's CRC held): the TABLE_MAP cannot say how wide these columns are. Only
                # this table is held back, as for a TABLE_MAP that cannot be read.
                reason = (f"{exc}; MariaDB TIME/DATETIME/TIMESTAMP columns with fractional seconds in the 5.3 "
                          "format (mysql56_temporal_format=OFF) carry no precision in the binlog: decode with the "
                          "schema (--schemas or --binlog-ddl)")
                err = UnreadableTableMap(name, pos, tm.database, tm.table, reason)
                self.d.table_errors.append(err)
                if opts.commits or opts.all_events:
                    return [self._record("table_error", ev, sub, table=tm.qualified_name, error=str(err))]
                return []
            if not isinstance(exc, (ValueError_, BodyError)):
                raise  # reported as a malformed event by the caller
            raise CorruptEvent(f"{event_name(etype)} for {tm.qualified_name}: {exc}", name, pos) from None
        n = len(rows)
        t.rows += n
        t.last_ts = ts
        q = tm.qualified_name
        t.tables[q] = t.tables.get(q, 0) + n
        self.result.rows += n
        return [RowBatch(name, pos, txn_pos, sub, ts, gtid, tm, op, rows)]

    # -- TRANSACTION_PAYLOAD ---------------------------------------------------------------------------
    def _payload(self, ev: RawEvent, buf, body, end, fde) -> Iterator[RowChange | EventRecord]:
        p = parse_transaction_payload(buf, body, end)
        data = bytes(buf[p.data_start : p.data_end])
        if p.compression == 0:
            import zstandard  # (here: start-up time; only MySQL's compressed transactions need it)

            reader = zstandard.ZstdDecompressor().stream_reader(data)
        elif p.compression == 255:
            reader = io.BytesIO(data)
        else:
            raise UnsupportedFeature(f"TRANSACTION_PAYLOAD compression type {p.compression}", self.name, ev.pos)
        if self.opts.all_events:
            yield self._record("payload", ev, 0, compressed_size=p.payload_size, uncompressed_size=p.uncompressed_size)
        inner_fde = FormatDescription(fde.binlog_version, fde.server_version, fde.created, fde.header_length,
                                      fde.post_header, 0)
        offset = 0
        try:
            while True:
                header = _read_exact(reader, HEADER_LEN)
                if not header:
                    break
                if len(header) < HEADER_LEN:
                    raise CorruptEvent(f"TRANSACTION_PAYLOAD ends inside an inner event header at offset {offset}",
                                       self.name, ev.pos)
                ts, itype, server_id, size, log_pos, flags = HEADER.unpack_from(header, 0)
                if size < HEADER_LEN:
                    raise CorruptEvent(f"inner event at payload offset {offset} has length {size}", self.name, ev.pos)
                rest = _read_exact(reader, size - HEADER_LEN)
                if len(rest) != size - HEADER_LEN:
                    raise CorruptEvent(f"TRANSACTION_PAYLOAD ends inside the inner event at offset {offset}",
                                       self.name, ev.pos)
                inner_buf = header + rest
                # Inner events report the payload's position and size; `sub` is their offset in the payload.
                inner = RawEvent(ev.pos, ts, itype, server_id, ev.size, log_pos, flags, inner_buf, 0, HEADER_LEN,
                                 size)
                self.in_payload = True
                self.d.event_counts[("inner", itype)] += 1
                yield from self.handle(inner, inner_buf, HEADER_LEN, size, itype, offset, inner_fde)
                offset += size
            if p.uncompressed_size and offset != p.uncompressed_size:
                raise CorruptEvent(f"TRANSACTION_PAYLOAD holds {offset} bytes of events, but its header says "
                                   f"{p.uncompressed_size}", self.name, ev.pos)
        except BodyError as exc:
            raise CorruptEvent(f"inner event at payload offset {offset}: {exc}", self.name, ev.pos) from None
        except BinlogError:
            raise
        except Exception as exc:
            if type(exc).__module__.startswith("zstandard") or "zstd" in type(exc).__name__.lower():
                raise CorruptEvent(f"TRANSACTION_PAYLOAD does not decompress: {exc}", self.name, ev.pos) from None
            raise
        finally:
            self.in_payload = False


def _read_exact(reader, n: int) -> bytes:
    parts = []
    while n > 0:
        chunk = reader.read(n)
        if not chunk:
            break
        parts.append(chunk)
        n -= len(chunk)
    return b"".join(parts)
