"""Framing: turn any binary file object into a stream of complete, checksum-verified events.

The stream owns the FORMAT_DESCRIPTION state because framing depends on it (checksum algorithm, header
length, post-header lengths). Reads may return any number of bytes; events are only handed out whole.
"""

from __future__ import annotations

import gzip
import struct
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import BinaryIO

from .constants import (
    BINLOG_CHECKSUM_ALG_CRC32,
    BINLOG_CHECKSUM_ALG_OFF,
    BINLOG_CHECKSUM_ALG_UNDEF,
    ET,
    HEADER_LEN,
    LOG_EVENT_BINLOG_IN_USE_F,
    LOG_EVENT_IGNORABLE_F,
    MAGIC,
    EventType,
)
from .errors import (
    BadMagic,
    BinlogError,
    ChecksumMismatch,
    CorruptEvent,
    TruncatedFile,
    UnknownEvent,
    UnsupportedFeature,
)
from .fde import FormatDescription, default_format_description, parse_format_description

HEADER = struct.Struct("<IBIIIH")  # timestamp, type, server_id, event_size, log_pos, flags
_U32 = struct.Struct("<I")
# The CRC32 of any bytes followed by their own CRC32 (little-endian): one crc32 call checks an event and its checksum.
CRC32_RESIDUE = 0x2144DF1C
_FDE, _ROTATE, _STOP, _START_ENCRYPTION = ET.FORMAT_DESCRIPTION, ET.ROTATE, ET.STOP, ET.MARIA_START_ENCRYPTION
CHUNK = 1 << 20
MAX_EVENT_SIZE = 1 << 31  # larger than any real event (max_allowed_packet is 1 GiB)

END_COMPLETE = "complete"  # the file ended exactly at an event boundary
END_IN_USE = "in use, incomplete"  # the tail is cut but the server still had the file open
END_TRUNCATED = "truncated"  # the tail is cut and the file was closed: damage
END_UNCLOSED = "closed without ROTATE/STOP"  # a closed file that ends at an event boundary but not at its end
LOG_EVENT_RELAY_LOG_F = 0x40  # events a replica wrote into its relay log
READ_LIMIT = 1 << 24  # bytes asked of the file object at once (a damaged event length must not size a read)


@dataclass
class StreamEnd:
    """Where and why a stream stopped: `pos` is the end of the last complete event."""

    pos: int
    status: str
    trailing_bytes: int = 0


class RawEvent:
    """One complete event. `buf[start:end]` is the whole event; the body is `buf[body:body_end]`."""

    __slots__ = ("body", "body_end", "buf", "flags", "log_pos", "pos", "server_id", "size", "start", "timestamp", "type")

    def __init__(self, pos, timestamp, type_, server_id, size, log_pos, flags, buf, start, body, body_end) -> None:
        self.pos = pos
        self.timestamp = timestamp
        self.type = type_
        self.server_id = server_id
        self.size = size
        self.log_pos = log_pos
        self.flags = flags
        self.buf = buf
        self.start = start
        self.body = body
        self.body_end = body_end

    @property
    def end_pos(self) -> int:
        return self.pos + self.size


_GZIP_PIECE = 1 << 16


def open_binlog(path: str) -> BinaryIO:
    """Open a local binlog file, transparently gunzipping `.gz` or gzip-magic files."""
    raw = open(path, "rb")  # noqa: SIM115 - returned to the caller
    head = raw.read(2)
    raw.seek(0)
    if head == b"\x1f\x8b":
        return gzip.GzipFile(fileobj=raw, mode="rb")  # type: ignore[return-value]
    return raw


class EventStream:
    """Iterate complete events of one binlog file.

    `name` is used in errors and output. `verify_checksums` may be turned off only for diagnosis.
    After iteration, `end` says where and why the stream stopped; a closed file cut inside an event raises
    TruncatedFile after every complete event was yielded (pass `allow_truncated=True` to only report it).
    """

    def __init__(
        self,
        fileobj: BinaryIO,
        name: str = "?",
        verify_checksums: bool = True,
        allow_truncated: bool = False,
        start_position: int | None = None,
        reuse_events: bool = False,
        verify_types: frozenset[int] | None = None,
    ) -> None:
        self.f = fileobj
        # With verify_checksums, the event types whose CRC32 is verified (None: all). A reader that looks at a few
        # types only (the DDL scan) leaves the others' to the decoding that reads them.
        self.verify_types = verify_types
        # The fast lane yields one RawEvent, refilled for each event, instead of a new one per event: for a consumer
        # that is done with each event before asking for the next (the decoder).
        self.reuse_events = reuse_events
        self.name = name
        self.verify = verify_checksums
        self.allow_truncated = allow_truncated
        self.start_position = start_position
        self.fde: FormatDescription = default_format_description()
        self.first_fde: FormatDescription | None = None
        self.in_use = False
        self.end: StreamEnd | None = None
        self.encrypted = False
        self._buf = b""
        self._off = 0
        self._base = 0  # file position of _buf[0]
        self._eof = False
        # Positions: the header's next-position field is the event's end in this file ("local"), or refers to
        # another file (relay logs carry the source's positions; a dump that started mid-file): not checked.
        self.local_positions = True
        self.exact_positions = False  # servers that never write a smaller next-position (no cache-relative ones)
        self.zero_is_damage = False  # MySQL writes no 0 next-position in its own binlogs (MariaDB 11.4+ does)
        self.last_type: int | None = None
        self.closed_at: int | None = None  # end of the ROTATE/STOP that closed the file
        self._probe_crc = False
        self._read_total = 0  # bytes read from the (decompressed) file so far
        # gzip is read in pieces, so that a damaged or cut compressed body loses no complete event before it: the
        # error waits in _gzip_error until the events read so far are delivered.
        self._piece = _GZIP_PIECE if isinstance(fileobj, gzip.GzipFile) else None
        self._gzip_error: tuple[type[BinlogError], str] | None = None

    # -- buffer management -------------------------------------------------------------------------------
    def _read_some(self, n: int) -> bytes:
        """Read up to n bytes, looping over short reads until n bytes or EOF."""
        parts = []
        want = n
        while want > 0 and self._gzip_error is None:
            try:
                chunk = self.f.read(min(want, READ_LIMIT if self._piece is None else self._piece))
            except (EOFError, zlib.error, gzip.BadGzipFile) as exc:
                # A gzip file whose compressed body is cut short or damaged: raised where the next event would
                # start, once every complete event before the damage was delivered (_raise_gzip_error).
                kind = TruncatedFile if isinstance(exc, EOFError) else CorruptEvent
                what = "ends early" if kind is TruncatedFile else "is corrupt"
                self._gzip_error = (kind, f"gzip body {what} after {self._read_total} decompressed bytes ({exc})")
                break
            if not chunk:
                self._eof = True
                break
            parts.append(chunk)
            want -= len(chunk)
            self._read_total += len(chunk)
        return b"".join(parts)

    def _ensure(self, n: int) -> bool:
        """Make at least n bytes available from the current offset; False if the file ends first."""
        have = len(self._buf) - self._off
        if have >= n:
            return True
        if self._eof:
            return False
        more = self._read_some(max(CHUNK, n - have))
        self._base += self._off
        self._buf = self._buf[self._off :] + more
        self._off = 0
        if len(self._buf) < n and self._gzip_error is not None:
            self._raise_gzip_error()
        return len(self._buf) >= n

    def _raise_gzip_error(self) -> None:
        kind, message = self._gzip_error  # type: ignore[misc]
        raise kind(message, self.name, self._base + self._off)

    def _skip_to(self, target: int) -> None:
        """Advance the read position to file offset `target` (used for --start-position)."""
        while self._base + len(self._buf) < target and not self._eof:
            self._base += len(self._buf)
            self._off = 0
            self._buf = self._read_some(CHUNK)
            if self._gzip_error is not None and self._base + len(self._buf) < target:
                self._off = len(self._buf)
                self._raise_gzip_error()
        self._off = target - self._base
        if self._off > len(self._buf):
            raise CorruptEvent(f"start position {target} is beyond the end of the file", self.name, target)

    # -- iteration ---------------------------------------------------------------------------------------
    def __iter__(self) -> Iterator[RawEvent]:
        name = self.name
        if not self._ensure(4):
            got = len(self._buf)
            if got and MAGIC[:got] != self._buf[:got]:
                raise BadMagic(f"not a binlog file (starts with {self._buf[:got].hex()})", name, 0)
            raise TruncatedFile(f"file too short for the binlog magic ({got} bytes)", name, 0)
        if self._buf[:4] != MAGIC:
            raise BadMagic(f"not a binlog file (starts with {self._buf[:8].hex()}, expected fe62696e)", name, 0)
        self._off = 4
        header_unpack = HEADER.unpack_from
        crc_unpack = _U32.unpack_from
        crc32 = zlib.crc32
        first = True
        check_boundary = False
        # What the current FORMAT_DESCRIPTION says, as locals (refreshed at each FORMAT_DESCRIPTION).
        perm = self.fde.permutation
        known = len(self.fde.post_header)
        has_crc = self.fde.has_crc
        verify = self.verify
        verify_types = self.verify_types
        every_crc = verify_types is None
        view_of, view = None, None  # a memoryview of the buffer, made once per buffer (for the CRC32s)
        plain = _plain_types(known)
        while True:
            if (not first and perm is None and not check_boundary and not self._probe_crc
                    and (self.closed_at is None or not self.local_positions)):
                # The fast lane: ordinary events that are whole in the buffer, whose next-position field is their
                # end (or not checked) and whose CRC32 holds, with every other check of the loop below already
                # known to pass. The first event it does not take goes through the loop below, which checks it in
                # full (and raises, or takes it and comes back here).
                buf = self._buf
                off = self._off
                base = self._base
                buf_len = len(buf)
                limit = buf_len - HEADER_LEN
                local = self.local_positions
                zero_bad = self.zero_is_damage
                crc_len = 4 if has_crc else 0
                min_size = HEADER_LEN + crc_len
                check_crc = has_crc and verify
                if view_of is not buf:
                    view_of, view = buf, memoryview(buf)
                last = None
                max_size, residue = MAX_EVENT_SIZE, CRC32_RESIDUE
                # The decoder is done with each event before it asks for the next: one RawEvent refilled.
                reuse = self.reuse_events
                ev = RawEvent(0, 0, 0, 0, 0, 0, 0, buf, 0, 0, 0)
                while off <= limit:
                    ts, etype, server_id, size, log_pos, flags = header_unpack(buf, off)
                    end = off + size
                    if (etype not in plain or end > buf_len or size < min_size or size > max_size
                            or (log_pos != base + end and local and (log_pos or zero_bad))
                            or (check_crc and (every_crc or etype in verify_types)
                                and crc32(view[off:end]) != residue)):
                        break
                    last = etype
                    if reuse:
                        ev.pos = base + off
                        ev.timestamp = ts
                        ev.type = etype
                        ev.server_id = server_id
                        ev.size = size
                        ev.log_pos = log_pos
                        ev.flags = flags
                        ev.start = off
                        ev.body = off + HEADER_LEN
                        ev.body_end = end - crc_len
                        yield ev
                    else:
                        yield RawEvent(base + off, ts, etype, server_id, size, log_pos, flags, buf, off,
                                       off + HEADER_LEN, end - crc_len)
                    off = end
                self._off = off
                if last is not None:
                    self.last_type = last
            if self._off + HEADER_LEN > len(self._buf) and not self._ensure(HEADER_LEN):
                self._finish(len(self._buf) - self._off)
                return
            buf = self._buf
            off = self._off
            pos = self._base + off
            ts, etype, server_id, size, log_pos, flags = header_unpack(buf, off)
            if perm is not None:
                etype = perm.get(etype, etype)
            if check_boundary:
                # Right after a jump to --start-position: in a binlog, each header's next-position field is the
                # event's end, which tells a real event boundary from arbitrary bytes.
                check_boundary = False
                if log_pos != pos + size:
                    raise CorruptEvent(f"start position {pos} is not an event boundary", name, pos)
            if size < HEADER_LEN or size > MAX_EVENT_SIZE:
                raise CorruptEvent(f"event length {size} is impossible (type {etype})", name, pos)
            if first and etype != _FDE:
                if etype == ET.START_V3:
                    raise UnsupportedFeature("binlog format v1/v3 (MySQL 4.x and older) is not supported", name, pos)
                raise CorruptEvent(f"the first event is {_type_name(etype)}, not a FORMAT_DESCRIPTION", name, pos)
            if self.closed_at is not None and self.local_positions:
                raise CorruptEvent(
                    f"{_type_name(etype)} event after the {_type_name(self.last_type)} that closed the file", name, pos)
            if etype > known and not first and not flags & LOG_EVENT_IGNORABLE_F:
                # The FORMAT_DESCRIPTION lists a post-header length for every event type its server writes.
                raise UnknownEvent(
                    f"event type {etype} is not one that server version {self.fde.server_version} writes (it knows "
                    f"{len(self.fde.post_header)} types)", name, pos)
            if etype == _ROTATE and log_pos == 0 and not first:
                # The artificial ROTATE a source sends first: a relay log, whose events from here on carry the
                # source's positions.
                self.local_positions = False
            if (log_pos != pos + size and self.local_positions and (log_pos or self.zero_is_damage)
                    and etype != _FDE):
                self._position_mismatch(etype, pos, size, log_pos)
            if off + size > len(buf):
                if not self._ensure(size):
                    if not _known_type(etype) and not flags & LOG_EVENT_IGNORABLE_F:
                        raise CorruptEvent(f"the last event, cut short, has unknown type {etype}: not an event "
                                           "header (damaged bytes before the end of the file)", name, pos)
                    self._finish(len(self._buf) - self._off, declared=size)
                    return
                buf = self._buf
                off = self._off
            end = off + size
            if etype == _FDE:
                fde = parse_format_description(buf, off + HEADER_LEN, end, name, pos)
                if fde.checksum_alg not in (BINLOG_CHECKSUM_ALG_OFF, BINLOG_CHECKSUM_ALG_CRC32, BINLOG_CHECKSUM_ALG_UNDEF):
                    raise UnsupportedFeature(f"unknown checksum algorithm {fde.checksum_alg}", name, pos)
                # Servers that write the algorithm byte always checksum the FDE itself, also with checksums off:
                # this guards the algorithm byte.
                if fde.has_checksum_byte and self.verify and buf[end - 5] != BINLOG_CHECKSUM_ALG_UNDEF:
                    stored = int.from_bytes(buf[end - 4 : end], "little")
                    data = bytearray(buf[off : end - 4])
                    data[17] &= ~LOG_EVENT_BINLOG_IN_USE_F & 0xFF
                    if crc32(data) != stored:
                        raise ChecksumMismatch(
                            f"FORMAT_DESCRIPTION CRC32 {stored:08x} does not match its bytes", name, pos
                        )
                self.fde = fde
                perm = fde.permutation
                known = len(fde.post_header)
                plain = _plain_types(known)
                has_crc = fde.has_crc
                self._probe_crc = fde.has_checksum_byte and not fde.has_crc
                if self.first_fde is None:
                    self.first_fde = fde
                    self.in_use = bool(flags & LOG_EVENT_BINLOG_IN_USE_F)
                    self.exact_positions = _exact_positions(fde)
                    # MariaDB 11.4+ writes 0 for the events of a transaction; earlier MariaDB wrote positions.
                    self.zero_is_damage = self.exact_positions and (not fde.is_mariadb or fde.version_tuple < (11, 0, 0))
                    if flags & LOG_EVENT_RELAY_LOG_F or log_pos == 0:
                        self.local_positions = False  # a relay log, or a dump that began mid-file
                    elif log_pos != pos + size:
                        raise CorruptEvent(
                            f"FORMAT_DESCRIPTION ends at {pos + size} but its header says {log_pos}", name, pos)
                else:
                    # A second FDE: a relay log, whose events from here on carry the source's positions.
                    self.local_positions = False
                body_end = end - 4 if fde.checksum_alg == BINLOG_CHECKSUM_ALG_CRC32 else end
            else:
                if first and etype == ET.START_V3:
                    raise UnsupportedFeature("binlog format v1/v3 (MySQL 4.x and older) is not supported", name, pos)
                if has_crc:
                    body_end = end - 4
                    if body_end < off + HEADER_LEN:
                        raise CorruptEvent(f"event length {size} leaves no room for its checksum", name, pos)
                    if verify and (every_crc or etype in verify_types):
                        stored = crc_unpack(buf, body_end)[0]
                        if view_of is not buf:
                            view_of, view = buf, memoryview(buf)
                        if crc32(view[off:body_end]) != stored:
                            raise ChecksumMismatch(
                                f"CRC32 {stored:08x} does not match the bytes of the {_type_name(etype)} event",
                                name,
                                pos,
                            )
                else:
                    body_end = end
                    # Checksums are declared off: an event ending in a valid CRC32 of its bytes says the
                    # FORMAT_DESCRIPTION's algorithm byte was damaged (CRC bytes would be read as data).
                    if (self._probe_crc and self.verify and size >= HEADER_LEN + 4
                            and crc32(memoryview(buf)[off : end - 4]) == int.from_bytes(buf[end - 4 : end], "little")):
                        raise CorruptEvent(
                            "the FORMAT_DESCRIPTION says checksums are off, but events carry a valid CRC32", name, pos)
                    self._probe_crc = False
            self._off = end
            self.last_type = etype
            if etype in (_ROTATE, _STOP) and log_pos:
                self.closed_at = pos + size
            ev = RawEvent(pos, ts, etype, server_id, size, log_pos, flags, buf, off, off + HEADER_LEN, body_end)
            yield ev
            if first:
                first = False
                target = self.start_position
                if target is not None and target not in (0, 4) and target < end:
                    raise CorruptEvent(f"start position {target} is not an event boundary: it is inside the "
                                       f"FORMAT_DESCRIPTION event (4 to {end}); start at 4 or at {end}", name, target)
                if target is not None and target > end:
                    # The FDE is always read (it decides framing); then jump straight to the requested event.
                    self._skip_to(target)
                    check_boundary = True
            if etype == _START_ENCRYPTION:
                raise UnsupportedFeature(
                    "the binlog is encrypted (MariaDB START_ENCRYPTION); decrypt it with the server first",
                    name,
                    pos,
                )

    def _position_mismatch(self, etype: int, pos: int, size: int, log_pos: int) -> None:
        end = pos + size
        if log_pos == 0:
            raise CorruptEvent(f"{_type_name(etype)} event's next-position field is 0, which this server never "
                               "writes in its own binlog", self.name, pos)
        if log_pos > end:
            raise CorruptEvent(
                f"{_type_name(etype)} event ends at {end}, but its header says the next event starts at {log_pos}: "
                f"{log_pos - end} bytes are missing (or its length is damaged)", self.name, pos)
        if self.exact_positions or log_pos > pos:
            # (Positions relative to a transaction cache, which old servers wrote, end before the event starts.)
            raise CorruptEvent(
                f"{_type_name(etype)} event ends at {end}, but its header says the next event starts at {log_pos} "
                "(bytes added, or its length is damaged)", self.name, pos)
        # Older servers wrote positions relative to the transaction cache for events inside transactions.

    def _finish(self, trailing: int, declared: int | None = None) -> None:
        pos = self._base + self._off
        if trailing == 0:
            if self.first_fde is None:
                self.end = StreamEnd(pos, END_TRUNCATED)
                if not self.allow_truncated:
                    raise TruncatedFile("file ends after the magic bytes, before its FORMAT_DESCRIPTION", self.name,
                                        pos, in_use=False)
                return
            if self.in_use or not self.local_positions or self.closed_at == pos:
                self.end = StreamEnd(pos, END_COMPLETE)
                return
            # The server clears the in-use flag only after writing ROTATE (rotation) or STOP (shutdown) at the end.
            self.end = StreamEnd(pos, END_UNCLOSED)
            if not self.allow_truncated:
                last = _type_name(self.last_type) if self.last_type is not None else "nothing"
                raise TruncatedFile(
                    f"file ends after {last} without the ROTATE or STOP event a closed binlog ends with (its in-use "
                    "flag is clear): events are missing from its end", self.name, pos, in_use=False)
            return
        what = (
            f"{trailing} bytes left, less than an event header"
            if declared is None
            else f"event declares {declared} bytes but only {trailing} remain"
        )
        if self.in_use:
            found = self._complete_event_after(self._off + 1) if declared is not None else None
            if found is not None:
                raise CorruptEvent(
                    f"event declares {declared} bytes, past the end of the file, but a complete event follows at "
                    f"{found}: its length is damaged (only the last event of a file in use may be cut short)",
                    self.name, pos)
            self.end = StreamEnd(pos, END_IN_USE, trailing)
            return
        self.end = StreamEnd(pos, END_TRUNCATED, trailing)
        if not self.allow_truncated:
            raise TruncatedFile(f"file is truncated: {what}", self.name, pos, in_use=False)


    def _complete_event_after(self, start: int) -> int | None:
        """File position of a whole event inside the bytes that follow a "torn" last event, or None. A server tears
        only the event it was writing, so a complete event after it (its next-position field is its end and its
        CRC32 matches) means the torn event's length was damaged. Scanned in bounded slices with numpy; needs
        checksums and the file's own positions (a relay log's are the source's)."""
        if not (self.fde.has_crc and self.local_positions and self.exact_positions):
            return None
        import numpy as np  # only here: the decoder's start-up does without it
        buf, base = self._buf, self._base
        n = len(buf)
        step = 8 << 20
        for lo in range(start, n - HEADER_LEN, step):
            hi = min(n - HEADER_LEN, lo + step)  # candidate header offsets lo..hi-1
            b = np.frombuffer(memoryview(buf)[lo : hi + HEADER_LEN], dtype=np.uint8).astype(np.uint64)
            m = hi - lo

            def u32(at: int, b=b, m=m) -> np.ndarray:
                return b[at : at + m] | (b[at + 1 : at + 1 + m] << 8) | (b[at + 2 : at + 2 + m] << 16) | (
                    b[at + 3 : at + 3 + m] << 24)

            size = u32(9)
            offs = np.arange(lo, hi, dtype=np.uint64)
            ok = (size >= HEADER_LEN + 4) & (offs + size <= n) & (u32(13) == offs + size + base)
            for q in np.flatnonzero(ok):
                q = lo + int(q)
                end = q + int(size[q - lo])
                if zlib.crc32(memoryview(buf)[q : end - 4]) == int.from_bytes(buf[end - 4 : end], "little"):
                    return base + q
        return None


def _plain_types(known: int) -> frozenset[int]:
    """The event types the fast lane of EventStream.__iter__ takes: those the FORMAT_DESCRIPTION lists, but for the
    ones framing itself looks at (FORMAT_DESCRIPTION, ROTATE, STOP, START_ENCRYPTION, START_V3)."""
    return frozenset(range(known + 1)) - {_FDE, _ROTATE, _STOP, _START_ENCRYPTION, ET.START_V3}


def _exact_positions(fde: FormatDescription) -> bool:
    """Whether every next-position field this server writes is 0 or the event's end. MySQL before 5.0.38 and
    5.1.16 (and the pre-GA 5.1/5.2 trees) wrote positions relative to the transaction cache for the events of a
    transaction (MySQL bug 22540); those end before the event starts."""
    if fde.is_mariadb:
        return True
    if fde.permutation is not None:
        return False
    v = fde.version_tuple
    return v >= (5, 1, 16) or (5, 0, 38) <= v < (5, 1, 0)


def _known_type(code: int) -> bool:
    try:
        EventType(code)
    except ValueError:
        return False
    return True


def _type_name(code: int) -> str:
    try:
        return EventType(code).name
    except ValueError:
        return f"type {code}"


def is_ignorable(flags: int) -> bool:
    return bool(flags & LOG_EVENT_IGNORABLE_F)
