"""The checksum RDS announces for a binlog backup file: CRC-64/ECMA-182 as OSS computes it, as a decimal string.

RDS keeps log backups in OSS, and the DescribeBinlogFiles reference shows `Checksum` values such as
`18358304393468701857`: a 64-bit unsigned decimal, the form of OSS's `x-oss-hash-crc64ecma`. That CRC is
CRC-64/XZ (polynomial 0x42F0E1EBA9EA3693 reflected, init and final xor all ones; check value of "123456789" is
0x995DC9BBDF1939FA). It covers the bytes of the object as downloaded (the .tar when a backup is packed).
"""

from __future__ import annotations

from pathlib import Path

import crcmod

_POLY = 0x142F0E1EBA9EA3693  # x^64 + the ECMA-182 polynomial, in crcmod's notation


class Crc64:
    """Incremental CRC-64/XZ; `value` is the announced form (decimal text)."""

    def __init__(self) -> None:
        self._crc = crcmod.Crc(_POLY, initCrc=0, xorOut=0xFFFFFFFFFFFFFFFF, rev=True)

    def update(self, data: bytes) -> None:
        self._crc.update(data)

    @property
    def value(self) -> str:
        return str(self._crc.crcValue)


def crc64_bytes(data: bytes) -> str:
    c = Crc64()
    c.update(data)
    return c.value


def crc64_file(path: str | Path, chunk: int = 1 << 20) -> str:
    c = Crc64()
    with open(path, "rb") as f:
        while block := f.read(chunk):
            c.update(block)
    return c.value
