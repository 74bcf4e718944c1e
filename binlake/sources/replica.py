"""A replica connection: log in with pymysql (authentication, TLS), then speak the replication protocol.

After the login the connection asks for checksummed events and heartbeats, registers as a replica
(COM_REGISTER_SLAVE) and starts a dump: COM_BINLOG_DUMP from FILE:POS, or with a GTID state (MariaDB:
`@slave_connect_state` then COM_BINLOG_DUMP; MySQL: COM_BINLOG_DUMP_GTID with the encoded GTID set). Events are
then read as packets straight from the socket (each packet: 0x00 and one whole event; 0xFF an error; 0xFE the end
of a non-blocking dump). A connection that stays silent for `dead_after` seconds (a few missed heartbeats) is dead.

Facts from the MySQL/MariaDB client/server protocol documentation; no code from other projects.
"""

from __future__ import annotations

import re
import socket
import struct
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from urllib.parse import unquote, urlparse

import pymysql

from .base import SourceError

COM_BINLOG_DUMP = 0x12
COM_REGISTER_SLAVE = 0x15
COM_BINLOG_DUMP_GTID = 0x1E
BINLOG_SEND_ANNOTATE_ROWS_EVENT = 0x02  # MariaDB: send ANNOTATE_ROWS events as they are in the file
MARIA_SLAVE_CAPABILITY_GTID = 4  # MariaDB: GTID events sent as written (not rewritten into BEGIN queries)
MAX_PACKET = 0xFFFFFF

# Server error codes that mean "what you asked for is not (or no longer) on the server": no retry helps.
ER_MASTER_FATAL_ERROR_READING_BINLOG = 1236
ER_MASTER_HAS_PURGED_REQUIRED_GTIDS = 1789
ER_GTID_POSITION_NOT_FOUND_IN_BINLOG = 1945
ER_GTID_START_FROM_BINLOG_HOLE = 1951
FATAL_ERRORS = frozenset({ER_MASTER_FATAL_ERROR_READING_BINLOG, ER_MASTER_HAS_PURGED_REQUIRED_GTIDS,
                          ER_GTID_POSITION_NOT_FOUND_IN_BINLOG, ER_GTID_START_FROM_BINLOG_HOLE})


class ReplicaLost(SourceError):
    """The replication connection ended or fell silent; reconnecting may help."""


class ReplicaRefused(SourceError):
    """The server refused the dump (the start position or GTID state is not on it); reconnecting will not help."""

    def __init__(self, message: str, errno: int, server_message: str) -> None:
        super().__init__(message)
        self.errno = errno
        self.server_message = server_message


@dataclass
class ServerFacts:
    version: str
    mariadb: bool
    checksum: str  # binlog_checksum: NONE or CRC32
    server_id: int
    files: list[tuple[str, int]]  # SHOW BINARY LOGS: (name, size), oldest first


@dataclass
class StartAt:
    """Where a dump starts: FILE:POS, or a GTID state (with `file` empty)."""

    file: str = ""
    pos: int = 4
    gtid: str | None = None

    def describe(self) -> str:
        return f"GTID state {self.gtid}" if self.gtid is not None else f"{self.file}:{self.pos}"


def parse_url(url: str) -> dict:
    u = urlparse(url)
    if u.scheme not in ("mysql", "mariadb") or not u.hostname:
        raise ValueError(f"--mysql {url!r}: expected mysql://user:password@host:port/")
    return {"host": u.hostname, "port": u.port or 3306, "user": unquote(u.username or "root"),
            "password": unquote(u.password or "")}


def encode_mysql_gtid_set(text: str) -> bytes:
    """A MySQL GTID set ('uuid:1-5:7,uuid2:1-3') in COM_BINLOG_DUMP_GTID's binary form (untagged GTIDs)."""
    sids = []
    for part in (p.strip() for p in text.replace("\n", "").split(",")):
        if not part:
            continue
        sid, *ranges = part.split(":")
        try:
            u = uuid.UUID(sid.strip())
        except ValueError:
            raise ValueError(f"--gtid {text!r}: {sid!r} is not a server UUID") from None
        intervals = []
        for r in ranges:
            if not re.fullmatch(r"\d+(-\d+)?", r.strip()):
                raise ValueError(f"--gtid {text!r}: {r!r} is not a GTID interval (N or N-M)")
            a, _, b = r.strip().partition("-")
            intervals.append((int(a), int(b or a) + 1))  # the protocol's intervals end exclusive
        sids.append(u.bytes + struct.pack("<Q", len(intervals))
                    + b"".join(struct.pack("<QQ", a, b) for a, b in intervals))
    return struct.pack("<Q", len(sids)) + b"".join(sids)


def check_maria_gtid_state(text: str) -> str:
    """A MariaDB GTID state 'domain-server-seq,...' (one per domain), normalised; ValueError otherwise."""
    parts = [p.strip() for p in text.split(",") if p.strip()]
    if not all(re.fullmatch(r"\d+-\d+-\d+", p) for p in parts):
        raise ValueError(f"--gtid {text!r}: expected MariaDB GTIDs domain-server-sequence separated by commas")
    domains = [p.split("-")[0] for p in parts]
    if len(set(domains)) != len(domains):
        raise ValueError(f"--gtid {text!r}: one GTID per replication domain")
    return ",".join(parts)


class ReplicaConnection:
    """One replication session. `open()` logs in; `dump(start)` starts the stream; `events()` yields raw events."""

    def __init__(self, url: str, server_id: int, heartbeat: float = 5.0, missed_beats: int = 3,
                 connect_timeout: float = 10.0) -> None:
        self.url = url
        self.params = parse_url(url)
        self.server_id = server_id
        self.heartbeat = heartbeat
        self.dead_after = heartbeat * missed_beats + 1.0
        self.connect_timeout = connect_timeout
        self.conn: pymysql.connections.Connection | None = None
        self.facts: ServerFacts | None = None
        self._buf = bytearray()
        self._off = 0
        self.bytes_read = 0

    # -- session ---------------------------------------------------------------------------------------------

    def open(self) -> ServerFacts:
        p = self.params
        self.conn = pymysql.connect(host=p["host"], port=p["port"], user=p["user"], password=p["password"],
                                    autocommit=True, connect_timeout=self.connect_timeout, charset="utf8mb4")
        with self.conn.cursor() as cur:
            cur.execute("SELECT VERSION(), @@global.binlog_checksum, @@global.server_id")
            version, checksum, sid = cur.fetchone()
            cur.execute("SHOW BINARY LOGS")
            files = [(r[0], int(r[1])) for r in cur.fetchall()]
        mariadb = "mariadb" in str(version).lower()
        self.facts = ServerFacts(str(version), mariadb, str(checksum).upper(), int(sid), files)
        return self.facts

    def _set(self, statements: list[str], optional: bool = False) -> None:
        assert self.conn is not None
        with self.conn.cursor() as cur:
            for sql in statements:
                try:
                    cur.execute(sql)
                except pymysql.err.MySQLError:
                    if not optional:
                        raise

    def dump(self, start: StartAt, gtid_strict: bool = True) -> None:
        """Negotiate checksums and heartbeats, register, and start the dump at `start`."""
        assert self.conn is not None and self.facts is not None
        facts = self.facts
        period_ns = int(self.heartbeat * 1e9)
        # Both the old and the new variable names (MySQL 8.0.26 renamed master_* to source_*); unknown ones are
        # harmless user variables.
        replica_uuid = uuid.UUID(int=(0x62696E6C616B65 << 64) | self.server_id)  # one per replica id
        self._set([f"SET @slave_uuid = '{replica_uuid}'", f"SET @replica_uuid = '{replica_uuid}'",
                   "SET @master_binlog_checksum = @@global.binlog_checksum",
                   "SET @source_binlog_checksum = @@global.binlog_checksum",
                   f"SET @master_heartbeat_period = {period_ns}",
                   f"SET @source_heartbeat_period = {period_ns}"])
        if facts.mariadb:
            self._set([f"SET @mariadb_slave_capability = {MARIA_SLAVE_CAPABILITY_GTID}"])
            if start.gtid is not None:
                state = start.gtid.replace("'", "")
                self._set([f"SET @slave_connect_state = '{state}'",
                           f"SET @slave_gtid_strict_mode = {1 if gtid_strict else 0}",
                           "SET @slave_gtid_ignore_duplicates = 0"])
        self._register()
        flags = BINLOG_SEND_ANNOTATE_ROWS_EVENT if facts.mariadb else 0
        if start.gtid is not None and not facts.mariadb:
            name = start.file.encode()
            data = encode_mysql_gtid_set(start.gtid)
            payload = (struct.pack("<HII", 0x04, self.server_id, len(name)) + name   # 0x04: through a GTID set
                       + struct.pack("<QI", start.pos if start.file else 4, len(data)) + data)
            self._command(COM_BINLOG_DUMP_GTID, payload)
        else:
            name = b"" if start.gtid is not None else start.file.encode()
            pos = 4 if start.gtid is not None else start.pos
            self._command(COM_BINLOG_DUMP, struct.pack("<IHI", pos, flags, self.server_id) + name)
        sock = self.conn._sock
        assert sock is not None
        sock.settimeout(self.dead_after)

    def _register(self) -> None:
        host = socket.gethostname().encode()[:60]
        user = self.params["user"].encode()[:60]
        payload = (struct.pack("<I", self.server_id) + bytes([len(host)]) + host + bytes([len(user)]) + user
                   + b"\x00" + struct.pack("<HII", 0, 0, 0))
        self._command(COM_REGISTER_SLAVE, payload)
        assert self.conn is not None
        self.conn._read_ok_packet()

    def _command(self, command: int, payload: bytes) -> None:
        assert self.conn is not None
        self.conn._execute_command(command, payload)

    def close(self) -> None:
        if self.conn is not None:
            self.conn._force_close()  # a dump cannot be ended politely (COM_QUIT would wait behind events)
            self.conn = None

    # -- the event stream ------------------------------------------------------------------------------------

    def _fill(self, need: int) -> None:
        """Make at least `need` unread bytes available in the buffer (blocking, at most `dead_after` silent)."""
        assert self.conn is not None and self.conn._sock is not None
        sock = self.conn._sock
        while len(self._buf) - self._off < need:
            if self._off > (1 << 20):
                del self._buf[:self._off]
                self._off = 0
            try:
                chunk = sock.recv(1 << 18)
            except TimeoutError:
                raise ReplicaLost(f"no event and no heartbeat for {self.dead_after:.0f} s "
                                  f"(heartbeat period {self.heartbeat:g} s): connection treated as dead") from None
            except OSError as exc:
                raise ReplicaLost(f"connection lost: {exc.strerror or exc}") from None
            if not chunk:
                raise ReplicaLost("connection closed by the server")
            self._buf += chunk
            self.bytes_read += len(chunk)

    def pending(self) -> bool:
        """True when bytes already received wait in the buffer (more events can be read without blocking)."""
        return len(self._buf) > self._off

    def _packet(self) -> bytes:
        out = b""
        while True:
            self._fill(4)
            length = int.from_bytes(self._buf[self._off:self._off + 3], "little")
            self._fill(4 + length)
            start = self._off + 4
            out += bytes(self._buf[start:start + length])
            self._off = start + length
            if length < MAX_PACKET:
                return out

    def events(self) -> Iterator[bytes]:
        """Raw events (header, body and checksum as the server wrote them) until the stream ends."""
        while True:
            if len(self._buf) - self._off < 4:
                self._fill(4)
            buf, off = self._buf, self._off
            length = buf[off] | buf[off + 1] << 8 | buf[off + 2] << 16
            if 0 < length < MAX_PACKET:  # the common case: one packet, read straight from the buffer
                if len(buf) - off < 4 + length:
                    self._fill(4 + length)
                    buf, off = self._buf, self._off
                if buf[off + 4] == 0x00:
                    self._off = off + 4 + length
                    yield bytes(buf[off + 5:off + 4 + length])
                    continue
            packet = self._packet()
            if not packet:
                raise ReplicaLost("empty packet from the server")
            head = packet[0]
            if head == 0x00:
                yield packet[1:]
            elif head == 0xFF:
                errno = struct.unpack_from("<H", packet, 1)[0]
                text = packet[3:]
                if text[:1] == b"#":
                    text = text[6:]
                message = text.decode("utf-8", "replace")
                if errno in FATAL_ERRORS:
                    raise ReplicaRefused(f"server error {errno}: {message}", errno, message)
                raise ReplicaLost(f"server error {errno}: {message}")
            elif head == 0xFE and len(packet) < 9:
                raise ReplicaLost("the server ended the dump")
            else:
                raise ReplicaLost(f"unexpected packet starting with 0x{head:02x} in the dump")
