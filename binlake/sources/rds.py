"""The RDS source: binlog backup files of an ApsaraDB RDS instance, through the OpenAPI (DescribeBinlogFiles).

Listing pages through every page of the window; the API returns the files of every host of the instance (primary
and standby copies, told apart by HostInstanceID, which becomes `SourceFile.lineage`), and one lineage is used per
run (`lineage=`; see `binlake.sources.fetch` for how the default is chosen). Downloads use the intranet link unless
`public_link=True`. Throttling and 5xx answers are retried with exponential backoff; any other API error is a
`SourceError` carrying the API's code and message. Credentials come from the arguments or from
ALIBABA_CLOUD_ACCESS_KEY_ID / ALIBABA_CLOUD_ACCESS_KEY_SECRET, and never appear in messages or reprs.
"""

from __future__ import annotations

import io
import os
import re
import tarfile
import time
from datetime import UTC, datetime, timedelta
from typing import BinaryIO
from urllib.parse import urlsplit

from alibabacloud_rds20140815 import models
from alibabacloud_rds20140815.client import Client
from alibabacloud_tea_openapi.exceptions import AlibabaCloudException
from alibabacloud_tea_openapi.models import Config

from .base import SourceConfigError, SourceError, SourceFile, safe_file_name
from .checksum import Crc64
from .http import RangeReader, RetryPolicy
from .landing import already_landed, commit_landed, landed_path, part_path

DEFAULT_ENDPOINT = "rds.aliyuncs.com"
EPOCH = datetime(2000, 1, 1, tzinfo=UTC)  # the API needs a StartTime; this is before any RDS binlog


_INSTANCE_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]{0,127}$")
_ENDPOINT = re.compile(r"^(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9.-]+)(:[0-9]{1,5})?/?$")


class RdsApiError(SourceError):
    """An error answer of the RDS OpenAPI: `code` and `api_message` as the API sent them."""

    def __init__(self, instance: str, code: str, message: str, status: int | None) -> None:
        super().__init__(f"RDS DescribeBinlogFiles for {instance}: {code}: {message}"
                         + (f" (HTTP {status})" if status else ""))
        self.code, self.api_message, self.status = code, message, status


def _iso(t: datetime) -> str:
    return t.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _parse_time(text: str | None) -> datetime | None:
    if not text:
        return None
    return datetime.strptime(text, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC)


def _retryable(code: str, status: int | None) -> bool:
    return code.startswith("Throttling") or code in ("ServiceUnavailable", "InternalError") or (
        status is not None and status >= 500)


class RdsSource:
    kind = "rds"

    def __init__(self, instance: str, *, endpoint: str | None = None, access_key_id: str | None = None,
                 access_key_secret: str | None = None, lineage: str | None = None, public_link: bool = False,
                 page_size: int = 100, region_id: str | None = None, policy: RetryPolicy | None = None) -> None:
        if not instance:
            raise SourceConfigError("rds source: an instance id is needed (rds:INSTANCE)")
        if not _INSTANCE_ID.match(instance):
            raise SourceConfigError(f"rds source: {instance!r} is not an RDS instance id (letters, digits, - and _)")
        if not 30 <= page_size <= 100:
            raise SourceConfigError(f"rds source: page_size must be 30..100, not {page_size}")
        self.instance = instance
        self.lineage = lineage
        self.public_link = public_link
        self.page_size = page_size
        self.policy = policy or RetryPolicy()
        self.api_calls = 0
        key_id = access_key_id or os.environ.get("ALIBABA_CLOUD_ACCESS_KEY_ID")
        secret = access_key_secret or os.environ.get("ALIBABA_CLOUD_ACCESS_KEY_SECRET")
        if not key_id or not secret:
            raise SourceConfigError("rds source: no credentials (set ALIBABA_CLOUD_ACCESS_KEY_ID and "
                              "ALIBABA_CLOUD_ACCESS_KEY_SECRET, or pass them from a connection)")
        endpoint = endpoint or DEFAULT_ENDPOINT
        protocol = "https"
        if "://" in endpoint:
            protocol, _, endpoint = endpoint.partition("://")
        if protocol not in ("http", "https") or not _ENDPOINT.match(endpoint):
            raise SourceConfigError(f"rds source: endpoint {endpoint!r} is not HOST[:PORT] or http(s)://HOST[:PORT]")

        self.endpoint = endpoint
        self._client = Client(Config(access_key_id=key_id, access_key_secret=secret, endpoint=endpoint,
                                     protocol=protocol, region_id=region_id))

    def __repr__(self) -> str:
        return f"RdsSource(instance={self.instance!r}, endpoint={self.endpoint!r}, lineage={self.lineage!r})"

    # -- listing ----------------------------------------------------------------------------------------------

    def _page(self, start: datetime, end: datetime, number: int) -> dict:
        request = models.DescribeBinlogFilesRequest(
            dbinstance_id=self.instance, start_time=_iso(start), end_time=_iso(end), page_size=self.page_size,
            page_number=number)
        failures = 0
        while True:
            self.api_calls += 1
            try:
                return self._client.describe_binlog_files(request).body.to_map()
            except AlibabaCloudException as exc:
                data = exc.data if isinstance(getattr(exc, "data", None), dict) else {}
                code = str(data.get("Code") or exc.code)
                message = str(data.get("Message") or exc.message)
                status = getattr(exc, "status_code", None)
                if not _retryable(code, status):
                    raise RdsApiError(self.instance, code, message, status) from None
                what = f"{code}: {message}"
            except Exception as exc:
                what = f"{type(exc).__name__}: {exc}"
            failures += 1
            if failures >= self.policy.attempts:
                raise SourceError(f"RDS DescribeBinlogFiles for {self.instance}: giving up after {failures} "
                                  f"attempts: {what}")
            time.sleep(self.policy.delay(failures))

    def list_all(self, start: datetime | None = None, end: datetime | None = None) -> list[SourceFile]:
        """Files of every lineage whose [LogBeginTime, LogEndTime] overlaps [start, end), each (host, name) once,
        ordered by lineage then sequence."""
        lo = start or EPOCH
        hi = end or datetime.now(UTC) + timedelta(days=1)
        # The API works in whole seconds: widen to them, then cut exactly here.
        q_lo = lo.replace(microsecond=0)
        q_hi = hi.replace(microsecond=0) + (timedelta(seconds=1) if hi.microsecond else timedelta(0))
        for _attempt in range(3):
            seen: dict[tuple[str, str], SourceFile] = {}
            total, number = None, 1
            while True:
                body = self._page(q_lo, q_hi, number)
                total = int(body.get("TotalRecordCount") or 0)
                items = (body.get("Items") or {}).get("BinLogFile") or []
                for item in items:
                    f = self._file(item)
                    seen.setdefault((f.lineage, f.name), f)
                if not items or number * self.page_size >= total:
                    break
                number += 1
            if len(seen) == total:
                break
            # The list moved while paging (files added or expired): page through again.
        else:
            raise SourceError(f"RDS DescribeBinlogFiles for {self.instance}: the listing kept changing while paging "
                              f"({len(seen)} distinct files for TotalRecordCount {total})")
        out = [f for f in seen.values()
               if (f.end is None or f.end >= lo) and (f.begin is None or f.begin < hi)]
        return sorted(out, key=lambda f: (f.lineage, f.seq, f.name))

    def list_files(self, start: datetime | None = None, end: datetime | None = None) -> list[SourceFile]:
        """The pinned lineage's files (every lineage's when none is pinned yet)."""
        files = self.list_all(start, end)
        if self.lineage is not None:
            files = [f for f in files if f.lineage == self.lineage]
        return files

    def _file(self, item: dict) -> SourceFile:
        name = safe_file_name(str(item.get("LogFileName") or ""), f"RDS {self.instance} LogFileName")
        host = safe_file_name(str(item.get("HostInstanceID") or "unknown"), f"RDS {self.instance} HostInstanceID")
        link = item.get("DownloadLink") if self.public_link else (
            item.get("IntranetDownloadLink") or item.get("DownloadLink"))
        size = item.get("FileSize")
        extra = dict(item)
        extra["packed"] = bool(link) and urlsplit(link).path.lower().endswith(".tar")
        return SourceFile(name=name, size=int(size) if size is not None else None,
                          begin=_parse_time(item.get("LogBeginTime")), end=_parse_time(item.get("LogEndTime")),
                          checksum=str(item["Checksum"]) if item.get("Checksum") not in (None, "") else None,
                          lineage=host, location=link or "", extra=extra)

    # -- links ------------------------------------------------------------------------------------------------

    def refresh(self, f: SourceFile) -> SourceFile:
        """Ask the API again for this file (new download links); updates `f` in place."""
        lo = (f.begin or EPOCH) - timedelta(seconds=1)
        hi = (f.end or datetime.now(UTC)) + timedelta(seconds=1)
        for g in self.list_all(lo, hi):
            if (g.lineage, g.name) == (f.lineage, f.name):
                if (g.size, g.checksum) != (f.size, f.checksum):
                    raise SourceError(f"{f.name} ({f.lineage}): the source now announces size {g.size} checksum "
                                      f"{g.checksum}, it said {f.size} {f.checksum}")
                f.location, f.extra = g.location, g.extra
                return f
        raise SourceError(f"{f.name} ({f.lineage}): no longer listed by DescribeBinlogFiles (expired backup?)")

    def _links(self, f: SourceFile):
        if not f.location:
            raise SourceError(f"{f.name} ({f.lineage}): the API gave no {'public' if self.public_link else 'intranet'}"
                              " download link")

        def provide(refresh: bool) -> str:
            if refresh:
                self.refresh(f)
            return f.location

        return provide

    # -- reading ----------------------------------------------------------------------------------------------

    def open(self, f: SourceFile) -> BinaryIO:
        """The binlog's bytes straight from the download link (unpacked when the backup is a .tar); size and
        checksum are verified when the stream reaches its end."""
        raw = RangeReader(self._links(f), f.name, f.size, f.checksum, policy=self.policy)
        stream = io.BufferedReader(raw, 1 << 20)
        if not f.extra.get("packed"):
            return stream
        return _TarMember(stream, f.name)

    def fetch(self, f: SourceFile, landing: str) -> str:
        path = landed_path(landing, self.instance, f)
        if already_landed(path, f):
            return str(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = part_path(path)
        offset = tmp.stat().st_size if tmp.exists() else 0
        if f.size is not None and offset > f.size:
            tmp.unlink()
            offset = 0
        crc = Crc64()
        if offset:
            with open(tmp, "rb") as done:
                while block := done.read(1 << 20):
                    crc.update(block)
        reader = RangeReader(self._links(f), f.name, f.size, f.checksum, offset=offset, crc=crc, policy=self.policy)
        try:
            with reader, open(tmp, "ab") as out:
                while block := reader.read(1 << 20):
                    out.write(block)
        except SourceError:
            if f.size is not None and tmp.exists() and tmp.stat().st_size >= f.size:
                tmp.unlink()  # complete but wrong: never resume from these bytes
            raise
        return str(commit_landed(tmp, path, f))


class _TarMember(io.RawIOBase):
    """The member called `name` of a tar archive read as a stream (no seeking); the archive is drained at close
    so the underlying reader verifies size and checksum."""

    def __init__(self, stream: BinaryIO, name: str) -> None:
        super().__init__()
        self._stream = stream
        self._tar = tarfile.open(fileobj=stream, mode="r|")  # noqa: SIM115 - lives as long as this stream
        self._member = None
        for m in self._tar:
            if m.isfile() and m.name.lstrip("./") == name:
                self._member = self._tar.extractfile(m)
                break
        if self._member is None:
            raise SourceError(f"{name}: the downloaded archive holds no member {name!r}")

    def readable(self) -> bool:
        return True

    def readinto(self, b) -> int:
        data = self._member.read(len(b))
        b[:len(data)] = data
        if not data:
            while self._stream.read(1 << 20):  # to the archive's end: size and checksum get checked
                pass
        return len(data)

    def close(self) -> None:
        if not self.closed:
            self._stream.close()
        super().close()
