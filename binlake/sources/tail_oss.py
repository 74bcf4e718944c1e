"""`binlake tail --landing oss://bucket/prefix`: the tail's landing writer (`Landing`) with OSS as the truth.

The file being written is staged in a local directory by `Landing` itself (same events, boundaries, in-use flag)
and its whole transactions go to the object `prefix/<server's file name>` with AppendObject at the transaction-group
boundaries where the directory landing syncs: an append is all or nothing, and its `position` must equal the
object's length, so a retried or replayed append can neither duplicate nor skip bytes (a 409 whose bytes are
already ours is taken as done, anything else stops the tail naming the object and both positions). The object is
created by one append holding the magic and the FORMAT_DESCRIPTION with the in-use flag set (and is Appendable
while written); at the file's ROTATE or STOP it is replaced by a PutObject of the finished file, flag clear, so a
closed object is byte-identical to the server's file.

Resume reads what is in the bucket: the last object is downloaded into the (emptied) staging directory, cut back
to its last complete transaction by `Landing.resume_point`, and written back when that changed it (a finished
file: PutObject; an open one: deleted and appended again whole, so it stays appendable).
"""

from __future__ import annotations

import shutil
import tempfile
import zlib
from pathlib import Path

import oss2

from ..binlog.api import sequence_number
from ..binlog.constants import HEADER_LEN
from ..storage.oss_client import OssLocation, OssSettings, with_retries
from .checksum import crc64_file
from .tail import _NAME, Landing, ResumePoint, TailError


class OssLanding(Landing):
    """`Landing` staged locally, landed in OSS (settings from the OSS_* environment unless given)."""

    def __init__(self, url: str, settings: OssSettings | None = None, staging: str | Path | None = None,
                 sync_every: float = 0.2) -> None:
        self.location = OssLocation.parse(url)
        self.settings = settings or OssSettings.from_env()
        self.bucket = self.settings.bucket(self.location.bucket)
        tag = f"{zlib.crc32(self.location.url().encode()):08x}"
        super().__init__(staging or Path(tempfile.gettempdir()) / f"binlake-tail-{tag}", sync_every)
        self._uploaded = 0  # bytes of the current file in its object
        self._crc: int | None = None  # the object's CRC-64 (oss2 checks each append against it)

    def where(self) -> str:
        return self.location.url()

    def _key(self, name: str) -> str:
        return self.location.key(name)

    def _call(self, what: str, fn):
        """`fn()` with the OSS retries; a SourceError naming `what` when it keeps failing (the tail stops)."""
        return with_retries(what, fn, self.settings.retries)

    # -- resume from the bucket ------------------------------------------------------------------------------

    def resume_point(self) -> ResumePoint | None:
        shutil.rmtree(self.dir, ignore_errors=True)  # the bucket is the truth; the staging copy starts over
        self.dir.mkdir(parents=True, exist_ok=True)
        prefix = self.location.prefix
        objects = self._call(f"listing {self.location.url()}", lambda: list(oss2.ObjectIteratorV2(
            self.bucket, prefix=prefix, delimiter="/", max_keys=1000)))
        names = sorted((o.key[len(prefix):] for o in objects if not o.is_prefix() and _NAME.match(o.key[len(prefix):])),
                       key=lambda n: (sequence_number(n), n))
        if not names:
            return None
        name = names[-1]
        key, local = self._key(name), self.dir / name
        head = self._call(f"reading {self.location.url(key)}", lambda: self.bucket.get_object_to_file(key, str(local)))
        appendable = (head.headers.get("x-oss-object-type") or "") == "Appendable"
        before = local.read_bytes()[:4 + HEADER_LEN]
        remote_size = local.stat().st_size
        point = super().resume_point()
        assert point is not None
        data = local.read_bytes()
        if len(data) == 0:
            self._call(f"removing {self.location.url(key)}", lambda: self.bucket.delete_object(key))
        elif len(data) != remote_size or data[:4 + HEADER_LEN] != before or not (point.closed or appendable):
            self._rewrite(name, data, point.closed)
        return point

    def _rewrite(self, name: str, data: bytes, closed: bool) -> None:
        """Put the staged copy back: a finished file as a Normal object, an open one appendable again."""
        key = self._key(name)
        url = self.location.url(key)
        if closed:
            self._call(f"writing {url}", lambda: self.bucket.put_object(key, data))
            return
        self._call(f"removing {url}", lambda: self.bucket.delete_object(key))
        self._uploaded, self._crc, self.name = 0, None, name
        self._append_object(key, data)

    # -- writing ---------------------------------------------------------------------------------------------

    def select(self, name: str, pos: int) -> None:
        was = (self.name, self.fd)
        super().select(name, pos)
        if (self.name, self.fd) != was:
            self._uploaded = self._written if self.fd is not None else 0
            local = self.dir / name
            self._crc = int(crc64_file(local)) if self.fd is not None and local.exists() else None

    def write_fde(self, ev: bytes) -> None:
        super().write_fde(ev)
        self._upload()  # the object appears with its magic and FORMAT_DESCRIPTION, in one append

    def sync(self) -> None:
        super().sync()
        self._upload()

    def _upload(self) -> None:
        """Append the staged file's whole transactions not yet in the object."""
        if self.fd is None or self.name is None:
            return
        end = min(self.safe, self._written)
        if end <= self._uploaded:
            return
        with open(self.dir / self.name, "rb") as fh:
            fh.seek(self._uploaded)
            data = fh.read(end - self._uploaded)
        self._append_object(self._key(self.name), data)

    def _append_object(self, key: str, data: bytes) -> None:
        url = self.location.url(key)
        position = self._uploaded

        def append() -> int:
            try:
                result = self.bucket.append_object(key, position, data, init_crc=self._crc)
                self._crc = result.crc
                return int(result.next_position)
            except oss2.exceptions.PositionNotEqualToLength as exc:
                if exc.next_position == position + len(data):  # an earlier try went in and its answer was lost
                    got = self.bucket.get_object(key, byte_range=(position, exc.next_position - 1)).read()
                    if got == data:
                        self._crc = None
                        return exc.next_position
                raise TailError(f"{url}: appending at position {position} but the object's length is "
                                f"{exc.next_position}: something else writes this object (stop it, then restart "
                                "the tail)") from None

        after = self._call(f"appending {len(data)} bytes to {url} at position {position}", append)
        self._uploaded = after
        if self._crc is None:
            self._crc = int(self.bucket.head_object(key).headers.get("x-oss-hash-crc64ecma", "0")) or None

    def finish(self) -> None:
        if self.fd is None:
            return
        super().finish()  # the staged file is complete (ROTATE/STOP appended) and its in-use flag is clear
        assert self.name is not None
        local = self.dir / self.name
        key = self._key(self.name)
        data = local.read_bytes()
        self._call(f"writing {self.location.url(key)}", lambda: self.bucket.put_object(key, data))
        local.unlink()

