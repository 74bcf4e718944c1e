"""Parsers for the bodies of non-rows events. Each returns a small dataclass; rows events live in rows.py."""

from __future__ import annotations

import struct
import zlib
from dataclasses import dataclass

from .charsets import decode_text
from .constants import ET
from .fde import FormatDescription
from .packing import BodyError, need, packed_int, take

U16 = struct.Struct("<H")
U32 = struct.Struct("<I")
U64 = struct.Struct("<Q")
QUERY_POST = struct.Struct("<IIBHH")  # thread id, exec time, db length, error code, status vars length


@dataclass
class QueryEvent:
    thread_id: int
    exec_time: int
    error_code: int
    database: str
    query: str
    flags2: int | None = None
    sql_mode: int | None = None
    charset_client: int | None = None
    collation_connection: int | None = None
    collation_server: int | None = None
    time_zone: str | None = None
    auto_increment: tuple[int, int] | None = None
    updated_dbs: list[str] | None = None
    ddl_xid: int | None = None
    microseconds: int | None = None
    status_complete: bool = True  # False when an unknown status variable stopped parsing early


@dataclass
class RotateEvent:
    position: int
    next_file: str


@dataclass
class XidEvent:
    xid: int


@dataclass
class IntvarEvent:
    kind: int  # 1 LAST_INSERT_ID, 2 INSERT_ID
    value: int


@dataclass
class RandEvent:
    seed1: int
    seed2: int


@dataclass
class UserVarEvent:
    name: str
    is_null: bool
    value_type: int | None = None
    charset: int | None = None
    value: bytes | None = None
    flags: int | None = None


@dataclass
class GtidEvent:
    """MySQL GTID / ANONYMOUS_GTID / GTID_TAGGED. `gtid` is None for anonymous transactions."""

    flags: int
    sid: str
    gno: int
    tag: str | None = None
    last_committed: int | None = None
    sequence_number: int | None = None
    immediate_commit_ts_us: int | None = None
    original_commit_ts_us: int | None = None
    transaction_length: int | None = None
    anonymous: bool = False

    @property
    def gtid(self) -> str | None:
        if self.anonymous:
            return None
        return f"{self.sid}:{self.tag}:{self.gno}" if self.tag else f"{self.sid}:{self.gno}"


@dataclass
class PreviousGtidsEvent:
    gtid_set: dict[str, list[tuple[int, int]]]  # "uuid" or "uuid:tag" -> [(start, end_exclusive)]

    def text(self) -> str:
        parts = []
        for sid, intervals in self.gtid_set.items():
            ranges = ":".join(f"{s}" if e - s == 1 else f"{s}-{e - 1}" for s, e in intervals)
            parts.append(f"{sid}:{ranges}")
        return ",".join(parts)


@dataclass
class MariaGtidEvent:
    seq_no: int
    domain_id: int
    server_id: int
    flags: int
    commit_id: int | None = None

    @property
    def gtid(self) -> str:
        return f"{self.domain_id}-{self.server_id}-{self.seq_no}"

    @property
    def standalone(self) -> bool:
        return bool(self.flags & 0x01)


@dataclass
class MariaGtidListEvent:
    gtids: list[str]


@dataclass
class TextEvent:
    """ROWS_QUERY, MariaDB ANNOTATE_ROWS, BINLOG_CHECKPOINT, HEARTBEAT: one piece of text."""

    text: str


@dataclass
class IncidentEvent:
    kind: int
    message: str


@dataclass
class PayloadEvent:
    compression: int  # 0 zstd, 255 none
    payload_size: int
    uncompressed_size: int
    data_start: int
    data_end: int


@dataclass
class XaPrepareEvent:
    one_phase: bool
    format_id: int
    xid: bytes


# -- status variables ------------------------------------------------------------------------------------

_FIXED_STATUS = {0: 4, 1: 8, 3: 4, 4: 6, 7: 2, 8: 2, 9: 8, 10: 4, 13: 3, 16: 1, 17: 8, 18: 2, 19: 1, 20: 1}
_FIXED_STATUS.update({128: 3, 129: 8, 130: 1})  # MariaDB: HRNOW, XID, GTID_FLAGS3


def _parse_status(q: QueryEvent, buf: bytes, off: int, end: int) -> None:
    while off < end:
        code = buf[off]
        off += 1
        if code in _FIXED_STATUS:
            n = _FIXED_STATUS[code]
            need(off, n, end)
            if code == 0:
                q.flags2 = U32.unpack_from(buf, off)[0]
            elif code == 1:
                q.sql_mode = U64.unpack_from(buf, off)[0]
            elif code == 3:
                q.auto_increment = (U16.unpack_from(buf, off)[0], U16.unpack_from(buf, off + 2)[0])
            elif code == 4:
                q.charset_client, q.collation_connection, q.collation_server = struct.unpack_from("<HHH", buf, off)
            elif code == 13:
                q.microseconds = int.from_bytes(buf[off : off + 3], "little")
            elif code == 17 or code == 129:
                q.ddl_xid = U64.unpack_from(buf, off)[0]
            off += n
        elif code in (2, 5, 6):  # catalog (len + str + NUL), time zone, catalog without NUL
            need(off, 1, end)
            n = buf[off]
            value, off = take(buf, off + 1, n, end)
            if code == 2:
                off += 1
            if code == 5:
                q.time_zone = value.decode("ascii", "replace")
        elif code == 11:  # invoker: user, host
            need(off, 1, end)
            n = buf[off]
            _, off = take(buf, off + 1, n, end)
            need(off, 1, end)
            n = buf[off]
            _, off = take(buf, off + 1, n, end)
        elif code == 12:  # updated db names
            need(off, 1, end)
            count = buf[off]
            off += 1
            names: list[str] = []
            if count != 254:
                for _ in range(count):
                    stop = bytes(buf[off:end]).find(b"\0")
                    if stop < 0:
                        raise BodyError("unterminated database name in status variables")
                    names.append(bytes(buf[off : off + stop]).decode("utf-8", "replace"))
                    off += stop + 1
            q.updated_dbs = names
        else:
            # An unknown status variable: its length is unknown, so the rest cannot be read. The database
            # and query text do not depend on it (their offsets come from the post-header).
            q.status_complete = False
            return


def parse_query(buf: bytes, body: int, end: int, fde: FormatDescription, event_type: int) -> QueryEvent:
    post = fde.post_header_len(event_type) or 13
    need(body, post, end)
    if post >= 13:
        thread_id, exec_time, db_len, error_code, status_len = QUERY_POST.unpack_from(buf, body)
    else:
        thread_id, exec_time, db_len, error_code = struct.unpack_from("<IIBH", buf, body)
        status_len = 0
    off = body + post
    q = QueryEvent(thread_id, exec_time, error_code, "", "")
    need(off, status_len, end)
    _parse_status(q, buf, off, off + status_len)
    off += status_len
    db, off = take(buf, off, db_len, end)
    off += 1  # NUL after the database name
    if off > end:
        raise BodyError("database name runs past the event")
    q.database = db.decode("utf-8", "replace")
    raw = bytes(buf[off:end])
    if event_type == ET.MARIA_QUERY_COMPRESSED:
        raw = maria_uncompress(raw)
    elif event_type == ET.EXECUTE_LOAD_QUERY:
        pass
    q.query = decode_text(raw, q.charset_client)
    return q


def maria_uncompress(raw: bytes) -> bytes:
    """MariaDB log_bin_compress: a header byte 0x8N (N = bytes of length), the length, zlib data."""
    if not raw:
        raise BodyError("empty compressed payload")
    head = raw[0]
    if head & 0x80 == 0 or (head & 0x07) not in (1, 2, 3, 4):
        raise BodyError(f"bad MariaDB compression header byte {head:#x}")
    nlen = head & 0x07
    if len(raw) < 1 + nlen:
        raise BodyError("compressed payload shorter than its length field")
    size = int.from_bytes(raw[1 : 1 + nlen], "big")
    try:
        out = zlib.decompress(raw[1 + nlen :])
    except zlib.error as exc:
        raise BodyError(f"zlib: {exc}") from None
    if len(out) != size:
        raise BodyError(f"decompressed {len(out)} bytes, header says {size}")
    return out


def parse_rotate(buf: bytes, body: int, end: int, fde: FormatDescription) -> RotateEvent:
    post = fde.post_header_len(ET.ROTATE) or 8
    need(body, post, end)
    position = U64.unpack_from(buf, body)[0] if post >= 8 else 4
    return RotateEvent(position, bytes(buf[body + post : end]).decode("utf-8", "replace"))


def parse_xid(buf: bytes, body: int, end: int) -> XidEvent:
    need(body, 8, end)
    return XidEvent(U64.unpack_from(buf, body)[0])


def parse_intvar(buf: bytes, body: int, end: int) -> IntvarEvent:
    need(body, 9, end)
    return IntvarEvent(buf[body], U64.unpack_from(buf, body + 1)[0])


def parse_rand(buf: bytes, body: int, end: int) -> RandEvent:
    need(body, 16, end)
    return RandEvent(U64.unpack_from(buf, body)[0], U64.unpack_from(buf, body + 8)[0])


def parse_user_var(buf: bytes, body: int, end: int) -> UserVarEvent:
    need(body, 4, end)
    n = U32.unpack_from(buf, body)[0]
    name, off = take(buf, body + 4, n, end)
    need(off, 1, end)
    ev = UserVarEvent(name.decode("utf-8", "replace"), bool(buf[off]))
    off += 1
    if not ev.is_null:
        need(off, 9, end)
        ev.value_type = buf[off]
        ev.charset = U32.unpack_from(buf, off + 1)[0]
        vlen = U32.unpack_from(buf, off + 5)[0]
        ev.value, off = take(buf, off + 9, vlen, end)
        if off < end:
            ev.flags = buf[off]
    return ev


def _sid(raw: bytes) -> str:
    """A 16-byte server UUID in its text form (8-4-4-4-12 lower-case hex digits, as str(uuid.UUID) writes it)."""
    h = bytes(raw).hex()
    if len(h) != 32:
        raise ValueError(f"a UUID is 16 bytes, not {len(h) // 2}")
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


def parse_gtid(buf: bytes, body: int, end: int, event_type: int) -> GtidEvent:
    if event_type == ET.GTID_TAGGED:
        return _parse_tagged_gtid(buf, body, end)
    need(body, 25, end)
    flags = buf[body]
    sid = _sid(buf[body + 1 : body + 17])
    gno = U64.unpack_from(buf, body + 17)[0]
    ev = GtidEvent(flags, sid, gno, anonymous=event_type == ET.ANONYMOUS_GTID)
    off = body + 25
    if off < end and buf[off] == 2:  # logical clock type code
        need(off, 17, end)
        ev.last_committed = U64.unpack_from(buf, off + 1)[0]
        ev.sequence_number = U64.unpack_from(buf, off + 9)[0]
        off += 17
        if off + 7 <= end:
            ts = int.from_bytes(buf[off : off + 7], "little")
            off += 7
            if ts & (1 << 55):
                ts &= ~(1 << 55)
                need(off, 7, end)
                ev.original_commit_ts_us = int.from_bytes(buf[off : off + 7], "little")
                off += 7
            else:
                ev.original_commit_ts_us = ts
            ev.immediate_commit_ts_us = ts
            if off < end:
                ev.transaction_length, off = packed_int(buf, off, end)
    return ev


def varlen_uint(buf: bytes, off: int, end: int) -> tuple[int, int]:
    """MySQL serialization-library integer: trailing 1-bits of the first byte give the extra byte count."""
    need(off, 1, end)
    first = buf[off]
    if first == 0xFF:
        need(off, 9, end)
        return U64.unpack_from(buf, off + 1)[0], off + 9
    n = 1
    while first & (1 << (n - 1)):
        n += 1
    need(off, n, end)
    return int.from_bytes(buf[off : off + n], "little") >> n, off + n


def varlen_int(buf: bytes, off: int, end: int) -> tuple[int, int]:
    raw, off = varlen_uint(buf, off, end)
    return (-(raw >> 1) - 1 if raw & 1 else raw >> 1), off


def _parse_tagged_gtid(buf: bytes, body: int, end: int) -> GtidEvent:
    need(body, 1, end)
    version = buf[body]
    if version != 2:
        raise BodyError(f"GTID_TAGGED serialization version {version} is not known")
    off = body + 1
    payload_size, off = varlen_uint(buf, off, end)
    last_non_ignorable, off = varlen_uint(buf, off, end)
    stop = body + payload_size
    if stop > end or stop < off:
        raise BodyError(f"GTID_TAGGED payload size {payload_size} does not fit the event")
    ev = GtidEvent(0, "", 0)
    while off < stop:
        fid, off = varlen_uint(buf, off, stop)
        if fid == 0:
            ev.flags, off = varlen_uint(buf, off, stop)
        elif fid == 1:
            sid = bytearray()
            for _ in range(16):
                b, off = varlen_uint(buf, off, stop)
                sid.append(b & 0xFF)
            ev.sid = _sid(bytes(sid))
        elif fid == 2:
            ev.gno, off = varlen_int(buf, off, stop)
        elif fid == 3:
            n, off = varlen_uint(buf, off, stop)
            tag, off = take(buf, off, n, stop)
            ev.tag = tag.decode("utf-8", "replace")
        elif fid == 4:
            ev.last_committed, off = varlen_int(buf, off, stop)
        elif fid == 5:
            ev.sequence_number, off = varlen_int(buf, off, stop)
        elif fid == 6:
            ev.immediate_commit_ts_us, off = varlen_uint(buf, off, stop)
        elif fid == 7:
            ev.original_commit_ts_us, off = varlen_uint(buf, off, stop)
        elif fid == 8:
            ev.transaction_length, off = varlen_uint(buf, off, stop)
        elif fid in (9, 10, 11):
            _, off = varlen_uint(buf, off, stop)
        elif fid <= last_non_ignorable:
            raise BodyError(f"GTID_TAGGED has unknown non-ignorable field {fid}")
        else:
            break
    if ev.original_commit_ts_us is None:
        ev.original_commit_ts_us = ev.immediate_commit_ts_us
    return ev


def parse_previous_gtids(buf: bytes, body: int, end: int) -> PreviousGtidsEvent:
    need(body, 8, end)
    raw = U64.unpack_from(buf, body)[0]
    tagged = (raw >> 56) != 0  # MySQL 8.3+: format byte on top, n_sids in bits 8-55
    n_sids = (raw >> 8) & ((1 << 48) - 1) if tagged else raw & ((1 << 56) - 1)
    off = body + 8
    result: dict[str, list[tuple[int, int]]] = {}
    for _ in range(n_sids):
        need(off, 16, end)
        sid = _sid(buf[off : off + 16])
        off += 16
        if tagged:
            tlen, off = varlen_uint(buf, off, end)
            tag, off = take(buf, off, tlen, end)
            if tag:
                sid = f"{sid}:{tag.decode('utf-8', 'replace')}"
        need(off, 8, end)
        n_int = U64.unpack_from(buf, off)[0]
        off += 8
        need(off, 16 * n_int, end)
        intervals = []
        for _ in range(n_int):
            intervals.append((U64.unpack_from(buf, off)[0], U64.unpack_from(buf, off + 8)[0]))
            off += 16
        result[sid] = intervals
    return PreviousGtidsEvent(result)


def parse_maria_gtid(buf: bytes, body: int, end: int, server_id: int) -> MariaGtidEvent:
    need(body, 13, end)
    seq = U64.unpack_from(buf, body)[0]
    domain = U32.unpack_from(buf, body + 8)[0]
    flags = buf[body + 12]
    ev = MariaGtidEvent(seq, domain, server_id, flags)
    if flags & 0x02 and body + 21 <= end:  # FL_GROUP_COMMIT_ID
        ev.commit_id = U64.unpack_from(buf, body + 13)[0]
    return ev


def parse_maria_gtid_list(buf: bytes, body: int, end: int) -> MariaGtidListEvent:
    need(body, 4, end)
    count = U32.unpack_from(buf, body)[0] & 0x0FFFFFFF
    off = body + 4
    need(off, 16 * count, end)
    gtids = []
    for _ in range(count):
        domain, server = struct.unpack_from("<II", buf, off)
        seq = U64.unpack_from(buf, off + 8)[0]
        gtids.append(f"{domain}-{server}-{seq}")
        off += 16
    return MariaGtidListEvent(gtids)


def parse_binlog_checkpoint(buf: bytes, body: int, end: int) -> TextEvent:
    need(body, 4, end)
    n = U32.unpack_from(buf, body)[0]
    name, _ = take(buf, body + 4, n, end)
    return TextEvent(name.decode("utf-8", "replace"))


def parse_rows_query(buf: bytes, body: int, end: int) -> TextEvent:
    need(body, 1, end)
    return TextEvent(bytes(buf[body + 1 : end]).decode("utf-8", "replace"))


def parse_incident(buf: bytes, body: int, end: int) -> IncidentEvent:
    need(body, 3, end)
    kind = U16.unpack_from(buf, body)[0]
    n = buf[body + 2]
    msg, _ = take(buf, body + 3, n, end)
    return IncidentEvent(kind, msg.decode("utf-8", "replace"))


def parse_transaction_payload(buf: bytes, body: int, end: int) -> PayloadEvent:
    off = body
    compression, payload_size, uncompressed = 255, None, 0
    while off < end:
        ftype, off = packed_int(buf, off, end)
        if ftype == 0:  # end mark
            break
        flen, off = packed_int(buf, off, end)
        need(off, flen, end)
        value = packed_int(buf, off, off + flen)[0] if flen else 0
        if ftype == 1:
            payload_size = value
        elif ftype == 2:
            compression = value
        elif ftype == 3:
            uncompressed = value
        off += flen
    if payload_size is None:
        payload_size = end - off
    if off + payload_size != end:
        raise BodyError(f"payload size {payload_size} does not match the {end - off} bytes left in the event")
    return PayloadEvent(compression, payload_size, uncompressed, off, end)


def parse_xa_prepare(buf: bytes, body: int, end: int) -> XaPrepareEvent:
    need(body, 13, end)
    one_phase = bool(buf[body])
    format_id, gtrid_len, bqual_len = struct.unpack_from("<iII", buf, body + 1)
    data, _ = take(buf, body + 13, gtrid_len + bqual_len, end)
    return XaPrepareEvent(one_phase, format_id, data)
