"""`binlake tail`: follow a live server as a replica and land its binlog files byte-identical to the server's.

What arrives on the replication stream is written as it is in the server's files, under the server's names:
- the artificial events a dump adds are not written: the ROTATE with timestamp 0 that names the file at the
  start of the stream and after each rotation, heartbeats, MariaDB's GTID_LIST flagged artificial, the
  FORMAT_DESCRIPTION sent again when a dump starts inside a file;
- a new file gets the binlog magic and its FORMAT_DESCRIPTION with LOG_EVENT_BINLOG_IN_USE_F set (the server sends
  it cleared; the server's own open file has it set, and its checksum is computed with the flag clear); the flag
  is cleared when the file is closed by its ROTATE or STOP event, as the server does;
- every event is checked against its place in the file (its next-position field): one already landed is skipped,
  one after a gap stops the tail with an error naming the file and both positions;
- only whole events are appended; the file is fsync'ed at transaction ends (at most every `sync_every` seconds
  while events keep arriving, and whenever the stream pauses).

Resume: the last landed file is cut back to the end of its last complete transaction (a partial transaction
or event left by a kill is removed) and the dump restarts there: by MariaDB GTID state when the files carry
MariaDB GTIDs (strict mode), else by FILE:POS. Lost connections are retried with a growing pause; a start position
the server no longer has is a `TailError` saying what is missing and what to do.
"""

from __future__ import annotations

import os
import re
import struct
import time
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from ..binlog.api import sequence_number
from ..binlog.constants import HEADER_LEN, LOG_EVENT_BINLOG_IN_USE_F, MAGIC, EventType
from .base import SourceError
from .replica import ReplicaConnection, ReplicaLost, ReplicaRefused, StartAt, check_maria_gtid_state

ARTIFICIAL = 0x20  # LOG_EVENT_ARTIFICIAL_F: made up by the dump, not in the file
FLAGS_AT = 17  # the flags field's offset in the common header
HEADER = struct.Struct("<IBIIIH")
PARTS = ".binlake-tail"  # new files are written here, then renamed into the landing directory
_NAME = re.compile(r"^[A-Za-z0-9_.\-]+\.\d+$")
_GTID_TYPES = frozenset({EventType.GTID, EventType.ANONYMOUS_GTID, EventType.GTID_TAGGED})
_ENDS_TXN = frozenset({EventType.XID, EventType.XA_PREPARE, EventType.TRANSACTION_PAYLOAD})
_HEARTBEATS = frozenset({EventType.HEARTBEAT, EventType.HEARTBEAT_V2})


class TailError(SourceError):
    """The tail cannot go on: the message names the file and position (or GTID state) and what to do."""


def query_text(ev: bytes, checksum: int) -> str:
    """The statement of a QUERY event (post-header of 13 bytes, status variables, database name)."""
    body = HEADER_LEN
    if len(ev) < body + 13:
        return ""
    db_len = ev[body + 8]
    status_len = struct.unpack_from("<H", ev, body + 11)[0]
    start = body + 13 + status_len + db_len + 1
    return ev[start:len(ev) - checksum].decode("utf-8", "replace")


_END_QUERY = re.compile(r"^\s*(COMMIT|ROLLBACK|XA\s+(COMMIT|ROLLBACK|END|PREPARE))\b(?!\s+TO\b)", re.I)


@dataclass
class Boundaries:
    """Follows transaction boundaries event by event: `feed` says whether the position after the event is
    outside any transaction (where a resume may start and where a fsync covers whole transactions)."""

    in_txn: bool = False
    standalone: bool = False
    after_gtid: bool = False  # MySQL: the event right after a GTID decides DDL (no BEGIN) vs transaction
    gtid: str | None = None  # the MariaDB GTID of the open transaction
    done_gtid: str | None = None  # set when `feed` completed a MariaDB GTID transaction

    def feed(self, etype: int, ev: bytes, checksum: int) -> bool:
        self.done_gtid = None
        if etype == EventType.MARIA_GTID:
            seq, domain = struct.unpack_from("<QI", ev, HEADER_LEN)
            flags = ev[HEADER_LEN + 12]
            server_id = struct.unpack_from("<I", ev, 5)[0]
            self.in_txn, self.standalone, self.after_gtid = True, bool(flags & 0x01), False
            self.gtid = f"{domain}-{server_id}-{seq}"
            return False
        if etype in _GTID_TYPES:
            self.in_txn, self.standalone, self.after_gtid, self.gtid = True, False, True, None
            return False
        after_gtid, self.after_gtid = self.after_gtid, False
        if etype in (EventType.QUERY, EventType.MARIA_QUERY_COMPRESSED):
            sql = query_text(ev, checksum) if etype == EventType.QUERY else ""
            head = sql.lstrip()[:9].upper()
            if head.startswith("BEGIN") or head.startswith("XA START") or head.startswith("XA BEGIN"):
                self.in_txn, self.standalone = True, False
                return False
            if not self.in_txn:
                return True  # a statement outside any transaction (servers without GTIDs: DDL)
            if self.standalone or after_gtid or _END_QUERY.match(sql):
                return self._end()
            return False
        if etype in _ENDS_TXN:
            return self._end() if self.in_txn else True
        return not self.in_txn

    def _end(self) -> bool:
        self.done_gtid = self.gtid
        self.in_txn, self.standalone, self.gtid = False, False, None
        return True


@dataclass
class LandedFile:
    name: str
    path: Path
    size: int
    closed: bool  # ends with the ROTATE or STOP that closes it (in-use flag clear)


@dataclass
class ResumePoint:
    file: str
    pos: int
    closed: bool
    maria_state: dict[int, str] = field(default_factory=dict)  # domain -> last GTID through `pos`
    cut: int = 0  # bytes removed from the file's end (a partial transaction or event)


def _events(data: bytes, start: int = 4):
    """(pos, type, flags, event bytes) of the whole events in `data` from `start`; stops at a partial event."""
    pos = start
    n = len(data)
    while pos + HEADER_LEN <= n:
        _ts, etype, _sid, size, _next, flags = HEADER.unpack_from(data, pos)
        if size < HEADER_LEN or pos + size > n:
            return
        yield pos, etype, flags, data[pos:pos + size]
        pos += size


def _checksum_len(data: bytes) -> int:
    """4 when the file's FORMAT_DESCRIPTION says CRC32 (its checksum algorithm byte), else 0."""
    if len(data) < 4 + HEADER_LEN:
        return 0
    size = struct.unpack_from("<I", data, 4 + 9)[0]
    if 4 + size > len(data) or size < HEADER_LEN + 57 + 5:
        return 0
    alg = data[4 + size - 5]  # algorithm byte, then the 4-byte checksum
    return 4 if alg == 1 else 0


def _maria_list(ev: bytes) -> dict[int, tuple[int, str]]:
    """domain -> (seq, 'd-s-n') of a MariaDB GTID_LIST event."""
    count = struct.unpack_from("<I", ev, HEADER_LEN)[0] & 0x0FFFFFFF
    out: dict[int, tuple[int, str]] = {}
    off = HEADER_LEN + 4
    for _ in range(count):
        if off + 16 > len(ev):
            break
        domain, server = struct.unpack_from("<II", ev, off)
        seq = struct.unpack_from("<Q", ev, off + 8)[0]
        if domain not in out or seq >= out[domain][0]:
            out[domain] = (seq, f"{domain}-{server}-{seq}")
        off += 16
    return out


class Landing:
    """The landing directory: the server's binlog files as landed, appended to one whole event at a time."""

    def __init__(self, directory: str | Path, sync_every: float = 0.2) -> None:
        self.dir = Path(directory)
        self.sync_every = sync_every
        self.fd: int | None = None
        self.name: str | None = None
        self.size = 0
        self.checksum = 4
        self.closed = False
        self.boundaries = Boundaries()
        self.unsynced = False
        self._last_sync = time.monotonic()
        self._buf = bytearray()  # whole events not yet written (written at transaction ends)
        self._whole = 0  # length of the buffer's whole transactions (its start up to the last transaction end)
        self._written = 0  # the file's size on disk (self.size includes the buffer)
        self.safe = 0  # the file's offset after its last complete transaction (what a copy may show)

    def where(self) -> str:
        """The landing location, the same on every restart (the default replica id is derived from it)."""
        return str(self.dir.resolve())

    # -- what is there ---------------------------------------------------------------------------------------

    def files(self) -> list[LandedFile]:
        if not self.dir.is_dir():
            return []
        out = []
        for p in self.dir.iterdir():
            if p.is_file() and _NAME.match(p.name) and not p.name.startswith("."):
                out.append(p)
        out.sort(key=lambda p: (sequence_number(p.name), p.name))
        return [LandedFile(p.name, p, p.stat().st_size, False) for p in out]

    def resume_point(self) -> ResumePoint | None:
        """Cut the last file back to its last complete transaction; where to continue (None: nothing landed)."""
        for part in (self.dir / PARTS).glob("*.part") if self.dir.is_dir() else []:
            part.unlink()  # a new file killed before its FORMAT_DESCRIPTION was on disk
        files = self.files()
        if not files:
            return None
        last = files[-1]
        data = last.path.read_bytes()
        if len(data) < 4 or data[:4] != MAGIC:
            if data and not MAGIC.startswith(data[:4]):
                raise TailError(f"{last.path}: does not start with the binlog magic; it is not a file this tail "
                                "landed (move it away)")
            self._truncate(last.path, 0)  # killed before the magic was complete: the file starts again
            return ResumePoint(last.name, 4, False, cut=len(data))
        checksum = _checksum_len(data)
        track = Boundaries()
        state: dict[int, tuple[int, str]] = {}
        safe = 4
        closed = False
        for pos, etype, flags, ev in _events(data):
            if etype == EventType.MARIA_GTID_LIST and not flags & ARTIFICIAL:
                for domain, val in _maria_list(ev).items():
                    if domain not in state or val[0] >= state[domain][0]:
                        state[domain] = val
            at_boundary = track.feed(etype, ev, checksum)
            if etype == EventType.FORMAT_DESCRIPTION and pos == 4:
                checksum = _checksum_len(data)
            if track.done_gtid:
                domain, _server, seq = (int(x) for x in track.done_gtid.split("-"))
                state[domain] = (seq, track.done_gtid)
            if at_boundary:
                safe = pos + len(ev)
                closed = etype in (EventType.ROTATE, EventType.STOP)
        cut = len(data) - safe
        if cut:
            self._truncate(last.path, safe)
        elif closed and data[4 + FLAGS_AT] & LOG_EVENT_BINLOG_IN_USE_F:
            with open(last.path, "r+b") as fh:  # killed between landing the ROTATE/STOP and clearing the flag
                fh.seek(4 + FLAGS_AT)
                fh.write(bytes([data[4 + FLAGS_AT] & ~LOG_EVENT_BINLOG_IN_USE_F & 0xFF]))
                fh.flush()
                os.fsync(fh.fileno())
        return ResumePoint(last.name, max(safe, 4), closed and cut == 0,
                           {d: v[1] for d, v in sorted(state.items())}, cut)

    @staticmethod
    def _truncate(path: Path, size: int) -> None:
        with open(path, "r+b") as fh:
            fh.truncate(size)
            fh.flush()
            os.fsync(fh.fileno())

    # -- writing ---------------------------------------------------------------------------------------------

    def select(self, name: str, pos: int) -> None:
        """Continue writing `name` (the stream is at `pos` in it). A new file appears only once its magic and
        FORMAT_DESCRIPTION are on disk (`write_fde`), so a reader never sees a file without them."""
        if not _NAME.match(name):
            raise TailError(f"the server names a binlog file {name!r}: not a binlog file name")
        if self.name == name and (self.fd is not None or self.size == 4):
            return
        if self.fd is not None:
            self.release()  # the server went on without a ROTATE or STOP (it crashed): the file stays in use, as
            # the server's own copy does
        self.dir.mkdir(parents=True, exist_ok=True)
        path = self.dir / name
        self.name = name
        self.closed = False
        self.boundaries = Boundaries()
        self._buf = bytearray()
        self._whole = 0
        if not path.exists() or path.stat().st_size < 4:
            self.fd = None
            self.size = self._written = 4  # the magic, written with the FORMAT_DESCRIPTION
            self.safe = 0
            return
        self.fd = os.open(path, os.O_RDWR)
        self.size = self._written = self.safe = os.lseek(self.fd, 0, os.SEEK_END)
        with open(path, "rb") as fh:
            head = fh.read(4 + 1024)
        self.checksum = _checksum_len(head) if len(head) >= 4 + HEADER_LEN else 4

    def _sync_dir(self) -> None:
        fd = os.open(self.dir, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    def _append(self, data: bytes) -> None:
        self._buf += data

    def _write_out(self, upto: int | None = None) -> None:
        """Write the buffered events (or its first `upto` bytes, whole events) to the file."""
        data = memoryview(self._buf)[:upto] if upto is not None else memoryview(self._buf)
        if data and self.fd is not None:
            view = data
            while view:
                n = os.write(self.fd, view)
                view = view[n:]
            self._written += len(data)
            self.unsynced = True
        self._buf = bytearray()
        self._whole = 0

    def sync(self) -> None:
        self._write_out()
        if self.unsynced and self.fd is not None:
            os.fsync(self.fd)
            self.unsynced = False
        self._last_sync = time.monotonic()

    def write_fde(self, ev: bytes) -> None:
        """A new file: the magic and its FORMAT_DESCRIPTION, flagged in use while the file is written (the
        checksum covers the event with the flag clear, so it stays valid), written under a hidden name and renamed."""
        assert self.name is not None and self.fd is None
        event = bytearray(ev)
        event[FLAGS_AT] |= LOG_EVENT_BINLOG_IN_USE_F
        self.checksum = 4 if _checksum_len(MAGIC + bytes(event)) else 0
        path = self.dir / self.name
        part = self.dir / PARTS / f"{self.name}.part"  # a subdirectory: listing the landing never meets it
        part.parent.mkdir(exist_ok=True)
        fd = os.open(part, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            os.write(fd, MAGIC + bytes(event))
            os.fsync(fd)
        except BaseException:
            os.close(fd)
            raise
        os.replace(part, path)
        self._sync_dir()
        self.fd = fd
        self.size = self._written = self.safe = 4 + len(event)
        self._last_sync = time.monotonic()

    def append(self, etype: int, ev: bytes, more_waiting: bool) -> bool:
        """Append one whole event; returns True at a transaction end (or outside any transaction)."""
        self._append(ev)
        self.size += len(ev)
        boundary = self.boundaries.feed(etype, ev, self.checksum)
        if boundary:
            self.safe = self.size
        if etype in (EventType.ROTATE, EventType.STOP):
            self.finish()
            return True
        if boundary:
            # Whole transactions go out together: when the stream pauses, every `sync_every` seconds, or per MiB.
            self._whole = len(self._buf)
            if (not more_waiting or len(self._buf) >= (1 << 20)
                    or time.monotonic() - self._last_sync >= self.sync_every):
                self.sync()
        elif len(self._buf) >= (8 << 20):  # a big transaction: whole events go out in pieces
            self._write_out()
        return boundary

    def finish(self) -> None:
        """The file is complete (ROTATE or STOP written, or the server moved on): clear the in-use flag."""
        if self.fd is None:
            return
        self.sync()
        if self._written >= 4 + HEADER_LEN:
            flags = os.pread(self.fd, 1, 4 + FLAGS_AT)
            if flags and flags[0] & LOG_EVENT_BINLOG_IN_USE_F:
                os.pwrite(self.fd, bytes([flags[0] & ~LOG_EVENT_BINLOG_IN_USE_F & 0xFF]), 4 + FLAGS_AT)
                os.fsync(self.fd)
        os.close(self.fd)
        self.fd = None
        self.closed = True

    def release(self) -> None:
        """Stop writing without closing the file as finished (the server still writes it): whole transactions
        written and synced, a partial one dropped from the buffer (the resume cuts it anyway)."""
        if self.fd is not None:
            self._write_out(None if not self.boundaries.in_txn else self._whole)
            self.sync()
            os.close(self.fd)
        self.fd = None
        self._buf = bytearray()
        self.name = None


@dataclass
class TailStats:
    events: int = 0
    bytes: int = 0
    transactions: int = 0
    connects: int = 0
    heartbeats: int = 0
    files: list[str] = field(default_factory=list)


def _truncated_at_end(server_message: str) -> bool:
    """The server's copy of a file ends inside an event (what a crash mid-write leaves behind)."""
    return "truncated in the middle of event" in server_message.lower()


def purged_message(start: StartAt, server_message: str, first_file: str | None) -> str:
    have = f"; the server's oldest binlog is {first_file}" if first_file else ""
    return (f"the server no longer has the binlog at {start.describe()} (purged{have}; server: "
            f"{server_message.strip()}): bootstrap the lake again (binlake bootstrap) and start the tail at the "
            "server's current binlog, or fetch the missing files from the RDS backups (binlake ingest --source "
            "rds:INSTANCE --landing ...) and start the tail with --from at the server's oldest binlog")


class Tail:
    """The tail loop: connect, dump, land; reconnect with backoff until `stop` returns True."""

    def __init__(self, url: str, landing: str | Path | Landing, server_id: int = 0, start_file: str | None = None,
                 gtid: str | None = None, heartbeat: float = 5.0, resume_by: str = "auto",
                 log: Callable[[str], None] = lambda _m: None, stop: Callable[[], bool] = lambda: False,
                 max_backoff: float = 30.0) -> None:
        self.url = url
        self.landing = landing if isinstance(landing, Landing) else Landing(landing)
        # The default replica id comes from the landing location: a restarted tail registers under the same id,
        # so the server replaces the dump thread a killed tail left behind.
        self.server_id = server_id or (0x5B000000 | (zlib.crc32(self.landing.where().encode()) & 0xFFFFFF))
        self.start_file = start_file
        self.gtid = gtid
        self.heartbeat = heartbeat
        self.resume_by = resume_by
        self.log = log
        self.stop = stop
        self.max_backoff = max_backoff
        self.stats = TailStats()
        self._use_gtid = True
        self._expect: tuple[str, int] | None = None
        self._crashed: dict[tuple[str, int], str] = {}  # (file, landed end) -> the next file to go on with

    def _start_point(self, conn: ReplicaConnection) -> StartAt:
        facts = conn.facts
        assert facts is not None
        resume = self.landing.resume_point()
        if resume is not None:
            if resume.cut:
                self.log(f"{resume.file}: removed {resume.cut} byte(s) after the last complete transaction")
            after = self._crashed.get((resume.file, resume.pos))
            if after is not None:
                self._expect = (resume.file, resume.pos)
                return StartAt(after, 4)
            gtid_ok = (facts.mariadb and self.resume_by in ("auto", "gtid") and resume.maria_state
                       and self._use_gtid and not resume.closed)
            if self.resume_by == "gtid" and not (facts.mariadb and resume.maria_state):
                raise TailError(f"--resume-by gtid: the landed files carry no MariaDB GTID state "
                                f"({resume.file}:{resume.pos}); resume by position")
            if gtid_ok:
                state = ",".join(resume.maria_state.values())
                self._expect = (resume.file, resume.pos)
                return StartAt(file=resume.file, pos=resume.pos, gtid=state)
            self._expect = (resume.file, resume.pos)
            return StartAt(resume.file, resume.pos)
        self._expect = None
        if self.start_file:
            return StartAt(self.start_file, 4)
        if self.gtid:
            return StartAt(gtid=check_maria_gtid_state(self.gtid) if facts.mariadb else self.gtid)
        if not facts.files:
            raise TailError("the server has binary logging off (SHOW BINARY LOGS is empty): nothing to tail")
        return StartAt(facts.files[0][0], 4)

    def run(self) -> TailStats:
        backoff = 0.5
        while not self.stop():
            conn = ReplicaConnection(self.url, self.server_id, self.heartbeat)
            start = None
            try:
                facts = conn.open()
                start = self._start_point(conn)
                self.log(f"connected to {facts.version} as replica {self.server_id}; dump from {start.describe()}")
                conn.dump(start)
                self.stats.connects += 1
                if self._land(conn, start):
                    backoff = 0.5
            except ReplicaRefused as exc:
                if self._expect is not None and start is not None and start.gtid is not None:
                    self.log(f"GTID resume refused ({exc.server_message.strip()}); resuming by position")
                    self._use_gtid = False
                    continue
                files = [name for name, _size in conn.facts.files] if conn.facts else []
                if start is not None and start.file and _truncated_at_end(exc.server_message):
                    later = [n for n in files if sequence_number(n) > sequence_number(start.file)]
                    if not later:
                        raise TailError(f"{start.file}: the server's copy ends inside an event after {start.pos} "
                                        f"and no later binlog exists (server: {exc.server_message.strip()})"
                                        ) from None
                    # A crash mid-write: every whole event before the partial one was sent and landed, and what
                    # follows the last landed transaction end was never committed (no XID or COMMIT can follow a
                    # partial event). The server went on in a new file; so does the tail.
                    self.landing.release()
                    landed = self.landing.resume_point()
                    end = landed.pos if landed is not None else start.pos
                    self.log(f"{start.file}: the server's copy ends in a partial event (a crash mid-write); landed "
                             f"up to {end}, the end of its last committed transaction; going on with {later[0]}")
                    self._crashed[(start.file, end)] = later[0]
                    continue
                first = files[0] if files else None
                raise TailError(purged_message(start or StartAt(), exc.server_message, first)) from None
            except _Reposition as exc:
                self.log(str(exc))
                self._use_gtid = False
                backoff = 0.5
                continue
            except (ReplicaLost, OSError, EOFError) as exc:
                self.log(f"replication connection lost: {exc}; reconnecting in {backoff:g} s")
            except Exception as exc:
                if type(exc).__module__.startswith("pymysql"):
                    self.log(f"server unavailable: {exc}; reconnecting in {backoff:g} s")
                else:
                    raise
            finally:
                self.landing.release()
                conn.close()
            deadline = time.monotonic() + backoff
            while time.monotonic() < deadline and not self.stop():
                time.sleep(min(0.1, backoff))
            backoff = min(backoff * 2, self.max_backoff)
        return self.stats

    def _land(self, conn: ReplicaConnection, start: StartAt) -> bool:
        """Land events until the stream ends or `stop`; True when at least one event was landed."""
        landing = self.landing
        got = False
        first_real = True
        for ev in conn.events():
            _ts, etype, _sid, size, next_pos, flags = HEADER.unpack_from(ev, 0)
            if etype in _HEARTBEATS:
                self.stats.heartbeats += 1
                if not landing.boundaries.in_txn:
                    landing.sync()
                if self.stop():
                    return got
                continue
            if etype == EventType.ROTATE and (flags & ARTIFICIAL or next_pos == 0):
                name = ev[HEADER_LEN + 8:len(ev) - (4 if self._crc(conn) else 0)].decode("utf-8", "replace")
                pos = struct.unpack_from("<Q", ev, HEADER_LEN)[0]
                if (landing.name is not None and landing.name != name and not landing.closed
                        and start.gtid is not None):
                    raise _Reposition(f"the GTID dump starts in {name} while {landing.name} is not closed; "
                                      "resuming by position")
                if self._expect is not None and first_real and name != self._expect[0]:
                    exp_file, _exp_pos = self._expect
                    if not (start.gtid is None and sequence_number(name) > sequence_number(exp_file)):
                        raise _Reposition(f"the dump starts in {name}, the landed files end in {exp_file}; "
                                          "resuming by position")
                landing.select(name, pos)
                if name not in self.stats.files:
                    self.stats.files.append(name)
                continue
            if flags & ARTIFICIAL:
                continue
            if landing.name is None:
                raise TailError(f"event of type {etype} before the dump named its file: the server's stream does "
                                "not start with a ROTATE")
            if etype == EventType.FORMAT_DESCRIPTION:
                if landing.fd is None:
                    landing.write_fde(ev)
                continue
            if landing.fd is None:
                raise TailError(f"{landing.name}: the server sends an event of type {etype} before the file's "
                                "FORMAT_DESCRIPTION")
            where = next_pos - size
            if next_pos == 0 or where < landing.size:
                continue  # already landed (a resumed dump sends a file's head again)
            if where > landing.size:
                if start.gtid is not None:
                    raise _Reposition(f"{landing.name}: the GTID dump continues at {where}, the landed file ends "
                                      f"at {landing.size}; resuming by position")
                raise TailError(f"{landing.name}: the server sends the event at position {where} but the landed "
                                f"file ends at {landing.size}: events between are missing from the stream")
            first_real = False
            landing.append(etype, ev, conn.pending())
            got = True
            self.stats.events += 1
            self.stats.bytes += len(ev)
            if self.stop() and not landing.boundaries.in_txn:
                landing.sync()
                return got
        return got

    @staticmethod
    def _crc(conn: ReplicaConnection) -> bool:
        return bool(conn.facts and conn.facts.checksum == "CRC32")


class _Reposition(Exception):
    """The GTID dump does not continue the landed files where they end: reconnect by position."""
