"""FORMAT_DESCRIPTION_EVENT: binlog version, server version, post-header lengths, checksum algorithm."""

from __future__ import annotations

import re
import struct
from dataclasses import dataclass
from functools import cached_property

from .constants import BINLOG_CHECKSUM_ALG_CRC32, BINLOG_CHECKSUM_ALG_OFF, BINLOG_CHECKSUM_ALG_UNDEF, EventType
from .errors import CorruptEvent

_FDE_HEAD = struct.Struct("<H50sIB")  # binlog version, server version, create timestamp, header length

# Post-header lengths used when a reader starts without an FDE (MySQL 5.0+ defaults for the types we parse).
_DEFAULT_POST_HEADER = {
    EventType.QUERY: 13,
    EventType.ROTATE: 8,
    EventType.TABLE_MAP: 8,
    EventType.WRITE_ROWS_V1: 8,
    EventType.UPDATE_ROWS_V1: 8,
    EventType.DELETE_ROWS_V1: 8,
    EventType.WRITE_ROWS_V2: 10,
    EventType.UPDATE_ROWS_V2: 10,
    EventType.DELETE_ROWS_V2: 10,
}


@dataclass
class FormatDescription:
    binlog_version: int
    server_version: str
    created: int
    header_length: int
    post_header: bytes  # index = event type - 1
    checksum_alg: int
    permutation: dict[int, int] | None = None  # type-code remapping for pre-GA 5.1/5.2 "a_drop" trees
    has_checksum_byte: bool = False  # the FDE carries the algorithm byte and its own CRC32 (5.6.1+, MariaDB 5.3+)

    @property
    def has_crc(self) -> bool:
        return self.checksum_alg == BINLOG_CHECKSUM_ALG_CRC32

    @cached_property  # asked per TABLE_MAP and rows event
    def is_mariadb(self) -> bool:
        return "mariadb" in self.server_version.lower()

    def post_header_len(self, event_type: int) -> int:
        if 0 < event_type <= len(self.post_header):
            return self.post_header[event_type - 1]
        return _DEFAULT_POST_HEADER.get(event_type, 0)

    @property
    def version_tuple(self) -> tuple[int, int, int]:
        return version_tuple(self.server_version)


def version_tuple(version: str) -> tuple[int, int, int]:
    m = re.match(r"(\d+)\.(\d+)\.(\d+)", version)
    if not m:
        return (0, 0, 0)
    return int(m.group(1)), int(m.group(2)), int(m.group(3))


def _has_checksum_byte(server_version: str) -> bool:
    """Servers from MySQL 5.6.1 and MariaDB 5.3 on append the checksum algorithm byte to the FDE."""
    v = version_tuple(server_version)
    if "mariadb" in server_version.lower():
        return v >= (5, 3, 0)
    return v >= (5, 6, 1)


def default_format_description() -> FormatDescription:
    return FormatDescription(4, "", 0, 19, b"", BINLOG_CHECKSUM_ALG_OFF)


# Post-header lengths a server may declare for the event types whose fields we read (0: "not used", the parsers'
# defaults apply). Anything else is a damaged FORMAT_DESCRIPTION: it would shift every field of those events.
_KNOWN_POST_HEADER = {
    EventType.QUERY: (0, 11, 13),
    EventType.ROTATE: (0, 8),
    EventType.TABLE_MAP: (0, 6, 8),
    EventType.PRE_GA_WRITE_ROWS: (0, 6, 8),
    EventType.PRE_GA_UPDATE_ROWS: (0, 6, 8),
    EventType.PRE_GA_DELETE_ROWS: (0, 6, 8),
    EventType.WRITE_ROWS_V1: (0, 6, 8),
    EventType.UPDATE_ROWS_V1: (0, 6, 8),
    EventType.DELETE_ROWS_V1: (0, 6, 8),
    EventType.WRITE_ROWS_V2: (0, 10),
    EventType.UPDATE_ROWS_V2: (0, 10),
    EventType.DELETE_ROWS_V2: (0, 10),
}
_FDE_FIXED = _FDE_HEAD.size  # binlog version, server version, create time, header length: 57 bytes


def parse_format_description(buf: bytes, body: int, end: int, name: str, pos: int) -> FormatDescription:
    """Parse an FDE whose body spans buf[body:end] (checksum bytes, if any, still included).

    The layout is cross-checked so that one damaged byte cannot silently change how the file is read: the FDE's
    own post-header length (57 + the number of post-header lengths, a format fact) and the event's length say
    whether the checksum-algorithm byte and a CRC32 follow, and the server version must say the same."""
    if end - body < _FDE_HEAD.size:
        raise CorruptEvent("FORMAT_DESCRIPTION event is too short", name, pos)
    binlog_version, raw_version, created, header_length = _FDE_HEAD.unpack_from(buf, body)
    server_version = raw_version.split(b"\0", 1)[0].decode("ascii", "replace")
    if binlog_version != 4:
        raise CorruptEvent(f"FORMAT_DESCRIPTION says binlog version {binlog_version}; only 4 is known", name, pos)
    if header_length != 19:
        raise CorruptEvent(f"FORMAT_DESCRIPTION header length {header_length}; expected 19", name, pos)
    if not re.match(r"\d+\.\d+\.\d+", server_version):
        raise CorruptEvent(f"FORMAT_DESCRIPTION server version {server_version!r} is not a version", name, pos)
    rest = bytes(buf[body + _FDE_HEAD.size : end])
    expect_alg = _has_checksum_byte(server_version)
    own = rest[EventType.FORMAT_DESCRIPTION - 1] if len(rest) >= EventType.FORMAT_DESCRIPTION else -1
    if own == _FDE_FIXED + len(rest):
        has_alg = False
    elif own == _FDE_FIXED + len(rest) - 5:
        has_alg = True
    else:
        raise CorruptEvent(
            f"FORMAT_DESCRIPTION is {end - body} bytes long but declares a {own}-byte post-header", name, pos)
    if has_alg != expect_alg:
        raise CorruptEvent(
            f"FORMAT_DESCRIPTION of server version {server_version!r} "
            f"{'carries' if has_alg else 'lacks'} a checksum-algorithm byte (damaged version or length)", name, pos)
    alg = BINLOG_CHECKSUM_ALG_OFF
    if has_alg:
        # Checksum-aware servers always reserve the algorithm byte and 4 checksum bytes here.
        alg = rest[-5]
        post = rest[:-5]
        if alg not in (BINLOG_CHECKSUM_ALG_OFF, BINLOG_CHECKSUM_ALG_CRC32, BINLOG_CHECKSUM_ALG_UNDEF):
            raise CorruptEvent(f"FORMAT_DESCRIPTION names checksum algorithm {alg}, which no server writes", name,
                               pos)
        if alg == BINLOG_CHECKSUM_ALG_UNDEF:
            alg = BINLOG_CHECKSUM_ALG_OFF
    else:
        post = rest
    perm = None
    if _PRE_GA_TREE.match(server_version):
        # The 5.1/5.2 "a_drop5p/6p" development trees numbered row-based events differently; the server maps
        # them on read. Their post-header array is indexed by those codes, so it is permuted too.
        perm = dict(_PRE_GA_PERMUTATION)
        remapped = bytearray(max(len(post), 22))
        remapped[: len(post)] = post
        for old, new in perm.items():
            if old - 1 < len(post):
                remapped[new - 1] = post[old - 1]
        post = bytes(remapped)
    for etype, allowed in _KNOWN_POST_HEADER.items():
        if etype <= len(post) and post[etype - 1] not in allowed:
            raise CorruptEvent(
                f"FORMAT_DESCRIPTION declares a {post[etype - 1]}-byte post-header for {etype.name}", name, pos)
    return FormatDescription(binlog_version, server_version, created, header_length, post, alg, perm,
                             has_alg)


_PRE_GA_TREE = re.compile(r"^5\.(1\.[1-5]-a_drop5p|1\.4-a_drop6p|2\.[0-2]-a_drop6p)")
# old code -> current code: TABLE_MAP, PRE_GA WRITE/UPDATE/DELETE, XID, BEGIN_LOAD_QUERY, EXECUTE_LOAD_QUERY
_PRE_GA_PERMUTATION = {16: 19, 17: 20, 18: 21, 19: 22, 20: 16, 21: 17, 22: 18}
