"""The OSS source: binlog objects under `oss://bucket/prefix`, listed, streamed and landed through oss2.

What is listed: the objects directly under the prefix (a `/` delimiter; deeper "folders" are not descended)
whose name looks like a binlog (`<base>.<digits>`, optionally `.gz`), ordered by sequence number. Other names are
kept in `skipped` (and logged) for the caller to report. A binlog-named object without the binlog magic is listed
all the same, so that decoding stops on it with BadMagic rather than the file silently going missing.

Time span of a file: `x-oss-meta-binlog-begin` / `x-oss-meta-binlog-end` (ISO 8601 UTC) when the object carries
them (binlake's own landing uploads do). Otherwise `begin` is the timestamp of the file's first event (its
FORMAT_DESCRIPTION, read with a small Range GET; none for gzip objects) and `end` is the earlier of the object's
Last-Modified time (the object was written after its last event) and the next file's `begin` (a server opens the
next file when it rotates). Both are conservative: a file that overlaps a window is never left out.

Fetching verifies the size and OSS's CRC-64 (`x-oss-hash-crc64ecma`), downloads under a temp name, resumes a
dropped transfer with Range (If-Match the listed ETag, so a replaced object is never spliced), then renames.
A landing location `oss://...` stores the file in OSS instead (`upload_landed` does it for a local file).
"""

from __future__ import annotations

import hashlib
import io
import itertools
import logging
import os
import re
import struct
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from pathlib import Path
from typing import BinaryIO

import oss2

from ..binlog.constants import MAGIC
from ..storage.oss_client import OssLocation, OssSettings, describe, is_transient, with_retries
from .base import ChecksumMismatchError, SourceError, SourceFile, safe_file_name
from .checksum import Crc64, crc64_file
from .landing import already_landed, commit_landed, landed_path, part_path

GZIP_MAGIC = b"\x1f\x8b"
BINLOG_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*\.\d+(\.gz)?$")
META_BEGIN, META_END = "x-oss-meta-binlog-begin", "x-oss-meta-binlog-end"
CHUNK = 1 << 20
PROBES = 8  # concurrent head reads while listing
log = logging.getLogger(__name__)
PIECE = 64 << 10  # read from the network in pieces this size, so a drop loses at most one piece


def _utc(ts: float) -> datetime:
    return datetime.fromtimestamp(ts, UTC)


def _parse_time(text: str | None, origin: str) -> datetime | None:
    if not text:
        return None
    try:
        value = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise SourceError(f"{origin}: metadata time {text!r} is not ISO 8601") from None
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


class OssSource:
    """`Source` over an OSS prefix. Credentials and endpoint: arguments, else the OSS_* environment."""

    kind = "oss"

    def __init__(self, location: str, settings: OssSettings | None = None, instance: str | None = None, *,
                 endpoint: str | None = None, access_key_id: str | None = None, access_key_secret: str | None = None,
                 auth_version: str | None = None, region: str | None = None, region_id: str | None = None,
                 security_token: str | None = None, path_style: bool | None = None) -> None:
        self.location = OssLocation.parse(location)
        self.settings = settings or OssSettings.from_env(endpoint, access_key_id, access_key_secret, auth_version,
                                                         region or region_id, security_token, path_style)
        self.bucket = self.settings.bucket(self.location.bucket)
        tail = self.location.prefix.rstrip("/").rsplit("/", 1)[-1] or self.location.bucket
        self.instance = instance or re.sub(r"[^A-Za-z0-9_.-]", "_", tail)
        self.skipped: list[str] = []

    def __repr__(self) -> str:
        return f"OssSource({self.location.url()!r}, {self.settings!r})"

    # listing
    def list_files(self, start: datetime | None = None, end: datetime | None = None) -> list[SourceFile]:
        objects = with_retries(f"listing {self.location.url()}", lambda: list(oss2.ObjectIteratorV2(
            self.bucket, prefix=self.location.prefix, delimiter="/", max_keys=1000)), self.settings.retries)
        self.skipped = []
        candidates = []
        for obj in objects:
            if obj.is_prefix():
                continue
            name = obj.key[len(self.location.prefix):]
            if not BINLOG_NAME.match(name):
                self.skipped.append(name)
                continue
            safe_file_name(name, self.location.url(obj.key))
            if start is not None and _utc(obj.last_modified) < start:
                continue  # written before the window opened: its events are all older
            candidates.append(obj)
        with ThreadPoolExecutor(max_workers=PROBES) as pool:  # one small Range GET per object, a few at a time
            files = list(pool.map(self._describe, candidates))
        if self.skipped:
            log.info("%s: not binlog files, left out: %s", self.location.url(), ", ".join(self.skipped))
        files.sort(key=lambda f: (f.seq, f.name))
        for f, after in itertools.pairwise(files):
            if not f.extra.get("end_from_meta") and after.begin is not None and f.end is not None:
                f.end = max(min(f.end, after.begin), f.begin or after.begin)
        return [f for f in files if (end is None or f.begin is None or f.begin < end)
                and (start is None or f.end is None or f.end >= start)]

    def _describe(self, obj: oss2.models.SimplifiedObjectInfo) -> SourceFile:
        """The file as a SourceFile, from one Range GET of its first 8 bytes (magic, first event's timestamp,
        and the object's headers: CRC-64, metadata). An object named like a binlog but without the magic is
        still listed: decoding it fails loudly (BadMagic) instead of the file going missing."""
        url = self.location.url(obj.key)
        name = obj.key[len(self.location.prefix):]

        def probe() -> tuple[bytes, dict]:
            if obj.size == 0:
                return b"", dict(self.bucket.head_object(obj.key).headers)
            result = self.bucket.get_object(obj.key, byte_range=(0, min(obj.size, 8) - 1))
            return result.read(), dict(result.headers)

        head, headers = with_retries(f"reading the head of {url}", probe, self.settings.retries)
        headers = {k.lower(): v for k, v in headers.items()}
        if head[:4] != MAGIC and head[:2] != GZIP_MAGIC:
            log.warning("%s is named like a binlog but does not start with the binlog magic", url)
        begin = _parse_time(headers.get(META_BEGIN), url)
        end = _parse_time(headers.get(META_END), url)
        if begin is None and head[:4] == MAGIC and len(head) >= 8:
            begin = _utc(struct.unpack_from("<I", head, 4)[0])
        end_from_meta = end is not None
        if end is None:
            end = _utc(obj.last_modified)
        return SourceFile(name=name, size=obj.size, begin=begin, end=end, checksum=headers.get("x-oss-hash-crc64ecma"),
                          location=url, extra={"key": obj.key, "etag": obj.etag, "object_type": obj.type,
                                               "last_modified": obj.last_modified,
                                               "end_from_meta": end_from_meta,
                                               "meta": {k: v for k, v in headers.items() if k.startswith("x-oss-meta-")}})

    # streaming
    def open(self, f: SourceFile) -> BinaryIO:
        """The object's bytes as a buffered stream; a dropped connection resumes with Range where it broke."""
        return io.BufferedReader(ResumingObjectReader(self.bucket, f.extra.get("key") or self.location.key(f.name),
                                                      f.extra.get("etag"), f.size, self.settings.retries),
                                 buffer_size=CHUNK)

    # landing
    def fetch(self, f: SourceFile, landing: str) -> str:
        if landing.startswith("oss://"):
            return self._fetch_to_oss(f, OssLocation.parse(landing))
        return self._fetch_local(f, Path(landing))

    def _fetch_local(self, f: SourceFile, landing: Path) -> str:
        """Into `LANDING/<instance>/<lineage>/<file>` (the landing layout shared by every source)."""
        safe_file_name(f.name, f.location or self.location.url())
        target = landed_path(landing, self.instance, f)
        if target.exists():
            if already_landed(target, f):
                return str(target)
            problem = _verify(target, f)
            if problem:
                raise ChecksumMismatchError(f"{target} is already landed but differs from {f.location}: {problem}; "
                                            "not overwriting it (move it away to fetch again)")
            return str(target)
        target.parent.mkdir(parents=True, exist_ok=True)
        part = part_path(target)
        if part.exists() and f.size is not None and part.stat().st_size > f.size:
            part.unlink()
        key = f.extra.get("key") or self.location.key(f.name)
        reader = ResumingObjectReader(self.bucket, key, f.extra.get("etag"), f.size, self.settings.retries,
                                      offset=part.stat().st_size if part.exists() else 0)
        try:
            with open(part, "ab") as out:
                while block := reader.read(CHUNK):
                    out.write(block)
                out.flush()
                os.fsync(out.fileno())
        except ChecksumMismatchError:
            part.unlink()
            raise
        f.checksum = f.checksum or reader.crc64
        problem = _verify(part, f)
        if problem:
            part.unlink()
            raise ChecksumMismatchError(f"{f.location}: downloaded bytes fail verification: {problem} "
                                        "(temp file removed; the next fetch starts over)")
        return str(commit_landed(part, target, f))

    def _fetch_to_oss(self, f: SourceFile, dest: OssLocation) -> str:
        """Into `oss://bucket/prefix/<instance>/<lineage>/<file>`, streamed (no local copy)."""
        name = _landing_name(self.instance, f)
        target = _landed_object(self.settings, dest, name, f)
        if target is not None:
            return target
        reader = ResumingObjectReader(self.bucket, f.extra.get("key") or self.location.key(f.name),
                                      f.extra.get("etag"), f.size, self.settings.retries)
        return _put_landed(self.settings, dest, name, f, _SizedStream(reader, f.size))


def _landing_name(instance: str, f: SourceFile) -> str:
    """`<instance>/<lineage>/<file>`, each part checked like a local landing path."""
    origin = f.location or f.name
    return "/".join((safe_file_name(instance, "instance id"), safe_file_name(f.lineage, "lineage"),
                     safe_file_name(f.name, origin)))


def upload_landed(path: str | Path, landing: str, f: SourceFile | None = None, settings: OssSettings | None = None,
                  instance: str = "default") -> str:
    """Store a verified local landed file under an OSS landing prefix, as `<instance>/<lineage>/<file>` with its
    time span as metadata; returns its `oss://` location. Idempotent: an identical object already there is kept."""
    path = Path(path)
    settings = settings or OssSettings.from_env()
    dest = OssLocation.parse(landing)
    f = f or SourceFile(name=safe_file_name(path.name, str(path)), location=str(path))
    name = _landing_name(instance, f)
    f.size = path.stat().st_size
    f.checksum = crc64_file(path)
    existing = _landed_object(settings, dest, name, f)
    if existing is not None:
        return existing
    with open(path, "rb") as data:
        return _put_landed(settings, dest, name, f, data)


def _landed_object(settings: OssSettings, dest: OssLocation, name: str, f: SourceFile) -> str | None:
    """The landing object's location when it is already there and identical; raises when it differs."""
    bucket = settings.bucket(dest.bucket)
    key = dest.key(name)

    def head() -> dict | None:
        try:
            return {k.lower(): v for k, v in bucket.head_object(key).headers.items()}
        except oss2.exceptions.NotFound:
            return None

    headers = with_retries(f"checking {dest.url(key)}", head, settings.retries)
    if headers is None:
        return None
    size, crc = int(headers.get("content-length", -1)), headers.get("x-oss-hash-crc64ecma")
    if (f.size is not None and size != f.size) or (f.checksum and crc != f.checksum):
        raise ChecksumMismatchError(f"{dest.url(key)} is already landed but differs from {f.location} (size {size} "
                                    f"vs {f.size}, crc64 {crc} vs {f.checksum}); not overwriting it")
    return dest.url(key)


def _put_landed(settings: OssSettings, dest: OssLocation, name: str, f: SourceFile, data: BinaryIO) -> str:
    bucket = settings.bucket(dest.bucket)
    key = dest.key(name)
    headers = {"x-oss-forbid-overwrite": "true", "x-oss-meta-binlake-source": f.location or name}
    if f.size is not None:
        headers["Content-Length"] = str(f.size)
    if f.begin is not None:
        headers[META_BEGIN] = f.begin.isoformat()
    if f.end is not None:
        headers[META_END] = f.end.isoformat()
    try:
        result = bucket.put_object(key, data, headers=headers)  # oss2 checks the CRC-64 it sent against OSS's
    except Exception as exc:
        raise SourceError(f"uploading {f.location or name} to {dest.url(key)}: {describe(exc)}") from exc
    if f.checksum and str(result.crc) != f.checksum:
        bucket.delete_object(key)
        raise ChecksumMismatchError(f"{dest.url(key)}: stored CRC-64 {result.crc} differs from the source's "
                                    f"{f.checksum}; landing object removed")
    return dest.url(key)


class _SizedStream:
    """A forward-only stream with a known length: what oss2 needs to upload without seeking."""

    def __init__(self, raw: io.RawIOBase, size: int | None) -> None:
        self.raw, self.len = raw, size

    def read(self, n: int = -1) -> bytes:
        return self.raw.read(n if n is not None and n >= 0 else CHUNK) or b""


def _verify(path: Path, f: SourceFile) -> str | None:
    """What is wrong with a local copy of `f` (size, CRC-64, and the MD5 a simple upload's ETag is), or None."""
    size = path.stat().st_size
    if f.size is not None and size != f.size:
        return f"size {size} != {f.size}"
    etag = (f.extra.get("etag") or "").strip('"').lower()
    md5_etag = f.extra.get("object_type") == "Normal" and re.fullmatch(r"[0-9a-f]{32}", etag) is not None
    if not f.checksum and not md5_etag:
        return None
    crc, md5 = Crc64(), hashlib.md5()
    with open(path, "rb") as data:
        while block := data.read(CHUNK):
            crc.update(block)
            md5.update(block)
    if f.checksum and crc.value != f.checksum:
        return f"crc64 {crc.value} != {f.checksum}"
    if md5_etag and md5.hexdigest() != etag:
        return f"md5 {md5.hexdigest()} != ETag {etag}"
    return None


class ResumingObjectReader(io.RawIOBase):
    """Reads an OSS object from `offset` to its end; on a dropped connection or a transient error it asks again
    with a Range from where it stopped, pinned to `etag` (If-Match) so bytes of two versions are never mixed.
    `crc64` is the object's CRC-64 as OSS announced it."""

    def __init__(self, bucket: oss2.Bucket, key: str, etag: str | None, size: int | None, retries: int = 5,
                 offset: int = 0) -> None:
        super().__init__()
        self.bucket, self.key, self.etag, self.size, self.retries = bucket, key, etag, size, retries
        self.offset = offset
        self.crc64: str | None = None
        self._body = None
        self._failures = 0
        self._crc = Crc64() if offset == 0 else None  # whole-object reads are checked against OSS's CRC-64

    def readable(self) -> bool:
        return True

    def _url(self) -> str:
        return f"oss://{self.bucket.bucket_name}/{self.key}"

    def _open(self) -> None:
        headers = {"If-Match": f'"{self.etag}"'} if self.etag else None
        if self.size is not None and self.offset >= self.size:
            self._body = io.BytesIO(b"")
            return

        def call():
            return self.bucket.get_object(self.key, byte_range=(self.offset, None) if self.offset else None,
                                          headers=headers)

        try:
            result = with_retries(f"reading {self._url()} from byte {self.offset}", call, self.retries)
        except SourceError as exc:
            if isinstance(exc.__cause__, oss2.exceptions.PreconditionFailed):
                raise SourceError(f"{self._url()} changed while it was being read (ETag is no longer "
                                  f"{self.etag}); fetch it again") from exc
            raise
        self.crc64 = result.headers.get("x-oss-hash-crc64ecma")
        self._body = result

    def readinto(self, buffer: memoryview) -> int:  # type: ignore[override]
        while True:
            if self._body is None:
                self._open()
            try:
                data = self._body.read(min(len(buffer), PIECE))
            except Exception as exc:
                if not is_transient(exc) or self._failures >= self.retries:
                    raise SourceError(f"reading {self._url()} at byte {self.offset}: {describe(exc)}") from exc
                self._failures += 1
                self._body = None
                continue
            if not data and self.size is not None and self.offset < self.size:
                if self._failures >= self.retries:
                    raise SourceError(f"{self._url()}: stream ended at byte {self.offset} of {self.size}")
                self._failures += 1
                self._body = None
                continue
            n = len(data)
            if self._crc is not None:
                self._crc.update(data)
                if n == 0 and self.crc64 and self._crc.value != self.crc64:
                    raise ChecksumMismatchError(f"{self._url()}: the bytes read have CRC-64 {self._crc.value}, "
                                                f"OSS announced {self.crc64}")
            buffer[:n] = data
            self.offset += n
            return n
