"""Low-level readers shared by event parsers: packed (length-encoded) integers and bounded slices."""

from __future__ import annotations

from .errors import CorruptEvent


class BodyError(Exception):
    """Raised inside parsers when a field runs past its event; the caller turns it into CorruptEvent."""


def packed_int(buf: bytes, off: int, end: int) -> tuple[int, int]:
    """Read a MySQL length-encoded integer at buf[off]; returns (value, new offset)."""
    if off >= end:
        raise BodyError("packed integer runs past the event")
    first = buf[off]
    if first < 251:
        return first, off + 1
    if first == 252:
        width = 2
    elif first == 253:
        width = 3
    elif first == 254:
        width = 8
    else:
        raise BodyError(f"invalid packed integer prefix {first}")
    if off + 1 + width > end:
        raise BodyError("packed integer runs past the event")
    return int.from_bytes(buf[off + 1 : off + 1 + width], "little"), off + 1 + width


def encode_packed_int(n: int) -> bytes:
    """MySQL's length-encoded integer (net_store_length), the inverse of packed_int."""
    if n < 251:
        return bytes((n,))
    if n < 1 << 16:
        return b"\xfc" + n.to_bytes(2, "little")
    if n < 1 << 24:
        return b"\xfd" + n.to_bytes(3, "little")
    return b"\xfe" + n.to_bytes(8, "little")


def take(buf: bytes, off: int, n: int, end: int) -> tuple[bytes, int]:
    """Return buf[off:off+n] and the new offset, checking the event bound."""
    if n < 0 or off + n > end:
        raise BodyError(f"field of {n} bytes at offset {off} runs past the event end {end}")
    return bytes(buf[off : off + n]), off + n


def need(off: int, n: int, end: int) -> None:
    if off + n > end:
        raise BodyError(f"field of {n} bytes at offset {off} runs past the event end {end}")


def corrupt(exc: Exception, what: str, name: str, pos: int) -> CorruptEvent:
    return CorruptEvent(f"{what}: {exc}", name, pos)
