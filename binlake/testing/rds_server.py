"""A local Alibaba Cloud RDS OpenAPI server for tests and the demo (127.0.0.1, random port, one thread).

It speaks the protocol the real SDK (`alibabacloud_rds20140815` over `alibabacloud_tea_openapi`) uses: RPC style
POST to `/` with the action in `x-acs-action`, signed with ACS3-HMAC-SHA256 (canonical request of method, path,
sorted RFC 3986 query, the signed headers, and the hex SHA-256 of the body; HMAC-SHA256 with the AccessKey
secret). Every signature is verified here from those rules; a bad one gets the API's error JSON. Errors have the
API's shape: `{"RequestId", "HostId", "Code", "Message", "Recommend"}`.

Served: DescribeBinlogFiles from registered binlog files (paging, host lineages, every response field), and the
download links it hands out (public and intranet flavours, both served here, signed and expiring, optionally
packed as .tar). Faults are injected through `faults`: throttling and 5xx answers, connections dropped mid-body,
wrong checksums; `advance_clock()` makes issued links expire.

`serve_directory()` (and `python -m binlake.testing.rds_server --dir=...`, the compose stack's `rds` service)
announces the closed binlog files of a directory, such as a MySQL datadir, as one host lineage, re-reading the
directory on every DescribeBinlogFiles call. Download links name the host the client reached (the request's Host
header) unless a public host is configured, so they work from other containers when the server binds 0.0.0.0.
"""

from __future__ import annotations

import argparse
import hashlib
import hmac
import io
import json
import logging
import re
import signal
import socket
import struct
import sys
import tarfile
import threading
import time
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from urllib.parse import parse_qsl, quote, urlsplit

from ..binlog.constants import MAGIC
from ..sources.checksum import crc64_bytes
from .background_http import BackgroundHttpServer

ALGORITHM = "ACS3-HMAC-SHA256"
HOST_ID = "rds.aliyuncs.com"
MAX_CLOCK_SKEW = 15 * 60  # seconds; the API refuses older or newer x-acs-date values
BINLOG_FILE = re.compile(r"^(?P<base>[A-Za-z0-9][A-Za-z0-9._-]*)\.(?P<seq>\d{6,})$")  # mysql-bin.000042
HOST_PORT = re.compile(r"^(?:[A-Za-z0-9](?:[A-Za-z0-9.-]*[A-Za-z0-9])?|\[[0-9A-Fa-f:.]+\])(?::\d{1,5})?$")
UNREACHABLE_HOSTS = ("0.0.0.0", "[::]", "")

log = logging.getLogger(__name__)


@dataclass
class ServedFile:
    """One binlog backup file of an instance, as the server announces and serves it."""

    instance: str
    host: str  # HostInstanceID
    name: str  # LogFileName
    data: bytes  # the binlog's bytes
    begin: datetime
    end: datetime
    tar: bool = False
    remote_status: str = "Completed"

    @property
    def payload(self) -> bytes:
        """What the download link serves: the file, or a .tar holding it under its name."""
        if not self.tar:
            return self.data
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w", format=tarfile.USTAR_FORMAT) as tar:
            info = tarfile.TarInfo(self.name)
            info.size = len(self.data)
            info.mtime = int(self.end.timestamp())
            tar.addfile(info, io.BytesIO(self.data))
        return buf.getvalue()


@dataclass
class Faults:
    """Fault injection. Counters are consumed one per request; lists one entry per download request."""

    throttle: int = 0  # next N API calls answer Throttling (HTTP 400)
    unavailable: int = 0  # next N API calls answer ServiceUnavailable (HTTP 503)
    drops: dict[str, list[int]] = field(default_factory=dict)  # file name -> bytes to send before cutting, per GET
    wrong_checksum: set[str] = field(default_factory=set)  # file names announced with a wrong Checksum
    expire_on_drop: bool = False  # a cut connection also moves the clock past every issued link's expiry


def binlog_time_span(data: bytes) -> tuple[datetime, datetime]:
    """First and last event timestamps of a binlog's bytes (headers only)."""
    pos, first, last = 4, None, None
    while pos + 19 <= len(data):
        ts, size = struct.unpack_from("<I", data, pos)[0], struct.unpack_from("<I", data, pos + 9)[0]
        if size < 19:
            break
        if ts:
            first = ts if first is None else first
            last = ts
        pos += size
    if first is None:
        raise ValueError("no dated event in the binlog")
    return datetime.fromtimestamp(first, UTC), datetime.fromtimestamp(last, UTC)


@dataclass
class BinlogDirectory:
    """A directory whose binlog files one host lineage announces, read again on every listing.

    Files are named BASE.NNNNNN (MySQL's `mysql-bin.000042`, MariaDB's `mariadb-bin.000042`, `HOST-bin.000042`)
    and start with the binlog magic; other files named like that (`aria_log.00000001`) are left out and logged
    once. Relay logs (`*relay-bin`) are another stream and are not served unless `basename` names them. The file
    with the highest number is still being written and is left out unless `include_open`.
    """

    path: Path
    instance: str
    host: str  # HostInstanceID
    include_open: bool = False
    basename: str | None = None
    registered: dict[str, tuple[int, int]] = field(default_factory=dict)  # name -> (size, mtime_ns) when read
    reported: set[str] = field(default_factory=set)  # names already logged as left out

    def scan(self) -> list[Path]:
        """The files to announce, by number."""
        try:
            entries = [e for e in self.path.iterdir() if e.is_file()]
        except OSError as err:
            raise ApiError(500, "InternalError", f"cannot read the binlog directory {self.path}: {err}") from None
        by_base: dict[str, list[tuple[int, Path]]] = {}
        for entry in entries:
            m = BINLOG_FILE.match(entry.name)
            if m is None or (self.basename is not None and m["base"] != self.basename) or (
                    self.basename is None and m["base"].endswith("relay-bin")):
                continue
            by_base.setdefault(m["base"], []).append((int(m["seq"]), entry))
        # The newest of each base is the open one, whatever it holds yet (it may still be empty).
        for base, files in by_base.items():
            files.sort()
            if not self.include_open:
                files.pop()
            by_base[base] = [(seq, f) for seq, f in files if self._has_magic(f)]
        bases = sorted(b for b, files in by_base.items() if files)
        if len(bases) > 1:
            raise ApiError(500, "InternalError", f"{self.path} holds binlogs of several base names "
                                                 f"({', '.join(bases)}): start the server with --basename")
        return [f for _, f in by_base[bases[0]]] if bases else []

    def _has_magic(self, f: Path) -> bool:
        try:
            with open(f, "rb") as fh:
                head = fh.read(len(MAGIC))
        except FileNotFoundError:  # purged since the directory was read
            return False
        if head == MAGIC:
            return True
        if f.name not in self.reported:
            self.reported.add(f.name)
            log.warning("%s: named like a binlog but without the binlog magic, not served", f)
        return False


def _iso(t: datetime) -> str:
    return t.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _parse_iso(text: str) -> datetime:
    return datetime.strptime(text, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC)


def _rfc3986(text: str) -> str:
    return quote(text, safe="-_.~")


class ApiError(Exception):
    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(code)
        self.status, self.code, self.message = status, code, message


class LocalRdsServer(BackgroundHttpServer):
    """The server. Use as a context manager or call start()/stop()."""

    def __init__(self, access_key_id: str = "LTAI-binlake-test", access_key_secret: str = "binlake-test-secret",
                 link_ttl: int = 3600, region: str = "cn-hangzhou", host: str = "127.0.0.1", port: int = 0,
                 public_host: str | None = None) -> None:
        self.credentials = {access_key_id: access_key_secret}
        self.access_key_id, self.access_key_secret = access_key_id, access_key_secret
        self.link_ttl = link_ttl
        self.region = region
        self.host, self.requested_port = host, port
        if public_host is not None and (not HOST_PORT.match(public_host) or public_host in UNREACHABLE_HOSTS):
            raise ValueError(f"public host {public_host!r} is not a host[:port] clients can reach")
        self.public_host = public_host  # host[:port] download links name; None: the host each request reached
        self.directories: list[BinlogDirectory] = []
        self.files: list[ServedFile] = []
        self.faults = Faults()
        self.clock_offset = 0.0
        self.api_calls: list[tuple[str, str]] = []  # (action, "OK" or error code)
        self.downloads: list[dict] = []  # one per download GET: name, flavour, start, status, sent
        self._nonces: set[str] = set()
        self._link_key = uuid.uuid4().bytes
        self._lock = threading.Lock()
        self._scan_lock = threading.Lock()
        self._request = threading.local()  # .host: the host[:port] the request being answered reached

    # -- set-up -----------------------------------------------------------------------------------------------

    def add_file(self, instance: str, host: str, name: str, data: bytes, begin: datetime | None = None,
                 end: datetime | None = None, tar: bool = False, remote_status: str = "Completed") -> ServedFile:
        if begin is None or end is None:
            b, e = binlog_time_span(data)
            begin, end = begin or b, end or e
        f = ServedFile(instance, host, name, data, begin, end, tar, remote_status)
        with self._lock:
            self.files = [x for x in self.files if (x.instance, x.host, x.name) != (instance, host, name)] + [f]
        return f

    def add_path(self, instance: str, host: str, path: str | Path, **kwargs) -> ServedFile:
        p = Path(path)
        return self.add_file(instance, host, p.name, p.read_bytes(), **kwargs)

    def serve_directory(self, path: str | Path, instance: str, host: str, include_open: bool = False,
                        basename: str | None = None) -> BinlogDirectory:
        """Announces the binlog files of `path` as lineage `host` of `instance`, read again on every listing:
        new files appear, purged ones go. See BinlogDirectory for which files count."""
        d = BinlogDirectory(Path(path), instance, host, include_open, basename)
        self.directories.append(d)
        self.rescan()
        return d

    def rescan(self) -> None:
        """Brings the files served from directories up to date (a file is read again when its size or mtime
        changed)."""
        with self._scan_lock:
            for d in self.directories:
                self._rescan(d)

    def _rescan(self, d: BinlogDirectory) -> None:
        current: dict[str, tuple[Path, tuple[int, int]]] = {}
        for f in d.scan():
            try:
                st = f.stat()
            except FileNotFoundError:
                continue  # purged since the scan
            current[f.name] = (f, (st.st_size, st.st_mtime_ns))
        gone = set(d.registered) - set(current)
        if gone:
            with self._lock:
                self.files = [x for x in self.files if not (x.instance == d.instance and x.host == d.host
                                                            and x.name in gone)]
        for name in gone:
            del d.registered[name]
        for name, (f, stamp) in current.items():
            if d.registered.get(name) == stamp:
                continue
            try:
                data = f.read_bytes()
            except FileNotFoundError:
                continue
            try:
                begin, end = binlog_time_span(data)
            except ValueError:  # still listed: decoding it reports what is wrong
                begin = end = datetime.fromtimestamp(stamp[1] / 1e9, UTC)
                log.warning("%s: no dated event, announced with its modification time", f)
            self.add_file(d.instance, d.host, name, data, begin=begin, end=end)
            d.registered[name] = stamp

    def now(self) -> float:
        return time.time() + self.clock_offset

    def advance_clock(self, seconds: float) -> None:
        """Moves the server's clock: links issued before now expire once their lifetime is past."""
        self.clock_offset += seconds

    @property
    def port(self) -> int:
        assert self._httpd is not None, "server not started"
        return self._httpd.server_address[1]

    @property
    def endpoint(self) -> str:
        """host:port to reach the server at (127.0.0.1 when it binds every address)."""
        host = "127.0.0.1" if self.host in UNREACHABLE_HOSTS else self.host
        return f"{host}:{self.port}"

    def start(self) -> LocalRdsServer:
        server = self

        class Handler(_Handler):
            rds = server

        self._serve(Handler, self.host, self.requested_port, "local-rds")
        return self

    # -- the API ------------------------------------------------------------------------------------------------

    def verify_signature(self, method: str, path: str, query: list[tuple[str, str]], headers: dict[str, list[str]],
                         body: bytes) -> None:
        auth = (headers.get("authorization") or [""])[0]
        algorithm, _, rest = auth.partition(" ")
        if algorithm != ALGORITHM:
            raise ApiError(400, "IncompleteSignature", f"The request signature does not conform to Aliyun "
                                                        f"standards: algorithm {algorithm or 'missing'!r}.")
        parts = dict(p.strip().partition("=")[::2] for p in rest.split(","))
        key_id, signed, signature = parts.get("Credential"), parts.get("SignedHeaders"), parts.get("Signature")
        if not key_id or not signed or not signature:
            raise ApiError(400, "IncompleteSignature", "The request signature does not conform to Aliyun "
                                                       "standards: Credential, SignedHeaders and Signature needed.")
        secret = self.credentials.get(key_id)
        if secret is None:
            raise ApiError(404, "InvalidAccessKeyId.NotFound", "Specified access key is not found.")
        names = signed.split(";")
        if names != sorted(names) or "host" not in names or any(
                h.startswith("x-acs-") and h not in names for h in headers):
            raise ApiError(400, "IncompleteSignature", "The request signature does not conform to Aliyun "
                                                       "standards: host and every x-acs-* header must be signed.")
        payload_hash = hashlib.sha256(body).hexdigest()
        if (headers.get("x-acs-content-sha256") or [""])[0] != payload_hash:
            raise ApiError(400, "IncompleteSignature", "x-acs-content-sha256 does not match the request body.")
        canonical_query = "&".join(f"{_rfc3986(k)}={_rfc3986(v)}" for k, v in sorted(query))
        canonical_headers = "".join(
            f"{n}:{','.join(sorted(v.strip() for v in headers.get(n, [])))}\n" for n in names)
        canonical = "\n".join([method, path or "/", canonical_query, canonical_headers, signed, payload_hash])
        to_sign = f"{ALGORITHM}\n{hashlib.sha256(canonical.encode()).hexdigest()}"
        expected = hmac.new(secret.encode(), to_sign.encode(), hashlib.sha256).hexdigest()
        if not hmac.compare_digest(expected, signature):
            raise ApiError(400, "SignatureDoesNotMatch", "Specified signature is not matched with our calculation.")
        date = (headers.get("x-acs-date") or [""])[0]
        try:
            sent = _parse_iso(date).timestamp()
        except ValueError:
            raise ApiError(400, "InvalidTimeStamp.Format", f"Specified time stamp {date!r} is not valid.") from None
        if abs(sent - time.time()) > MAX_CLOCK_SKEW:
            raise ApiError(400, "InvalidTimeStamp.Expired", "Specified time stamp or date value is expired.")
        nonce = (headers.get("x-acs-signature-nonce") or [""])[0]
        with self._lock:
            if not nonce or nonce in self._nonces:
                raise ApiError(400, "SignatureNonceUsed", "Specified signature nonce was used already.")
            self._nonces.add(nonce)

    def call(self, action: str, params: dict[str, str]) -> dict:
        with self._lock:
            if self.faults.throttle > 0:
                self.faults.throttle -= 1
                raise ApiError(400, "Throttling", "Request was denied due to request throttling.")
            if self.faults.unavailable > 0:
                self.faults.unavailable -= 1
                raise ApiError(503, "ServiceUnavailable",
                               "The request has failed due to a temporary failure of the server.")
        if action != "DescribeBinlogFiles":
            raise ApiError(404, "InvalidAction.NotFound", f"Specified api {action} is not found.")
        self.rescan()
        return self.describe_binlog_files(params)

    def describe_binlog_files(self, params: dict[str, str]) -> dict:
        for name in ("DBInstanceId", "StartTime", "EndTime"):
            if not params.get(name):
                raise ApiError(400, "MissingParameter", f"The input parameter \"{name}\" that is mandatory for "
                                                        "processing this request is not supplied.")
        instance = params["DBInstanceId"]
        try:
            start = _parse_iso(params["StartTime"])
        except ValueError:
            raise ApiError(400, "InvalidStartTime.Malformed", "Specified parameter StartTime is not valid.") from None
        try:
            end = _parse_iso(params["EndTime"])
        except ValueError:
            raise ApiError(400, "InvalidEndTime.Malformed", "Specified parameter EndTime is not valid.") from None
        if end <= start:
            raise ApiError(400, "InvalidParameter", "EndTime must be later than StartTime.")
        try:
            size = int(params.get("PageSize") or 30)
            number = int(params.get("PageNumber") or 1)
        except ValueError:
            raise ApiError(400, "InvalidParameter", "PageSize and PageNumber must be integers.") from None
        if not 30 <= size <= 100:
            raise ApiError(400, "InvalidPageSize.Malformed", "Specified parameter PageSize is not valid (30-100).")
        if number < 1:
            raise ApiError(400, "InvalidPageNumber.Malformed", "Specified parameter PageNumber is not valid.")
        with self._lock:
            mine = [f for f in self.files if f.instance == instance]
        if not mine:
            raise ApiError(404, "InvalidDBInstanceId.NotFound", "The specified instance is not found.")
        # Files whose records end after the query start and begin before the query end.
        hits = sorted((f for f in mine if f.end >= start and f.begin <= end), key=lambda f: (f.begin, f.host, f.name))
        page = hits[(number - 1) * size: number * size]
        now = self.now()
        items = [self._item(f, now) for f in page]
        return {"TotalRecordCount": len(hits), "PageNumber": number, "PageRecordCount": len(items),
                "TotalFileSize": sum(len(f.payload) for f in hits), "Items": {"BinLogFile": items}}

    def _item(self, f: ServedFile, now: float) -> dict:
        payload = f.payload
        checksum = crc64_bytes(payload)
        if f.name in self.faults.wrong_checksum:
            checksum = str((int(checksum) + 1) % (1 << 64))
        expires = int(now) + self.link_ttl
        return {
            "LogFileName": f.name, "FileSize": len(payload), "LogBeginTime": _iso(f.begin),
            "LogEndTime": _iso(f.end), "DownloadLink": self.link(f, "public", expires),
            "IntranetDownloadLink": self.link(f, "intranet", expires),
            "LinkExpiredTime": _iso(datetime.fromtimestamp(expires, UTC)), "Checksum": checksum,
            "HostInstanceID": f.host, "RemoteStatus": f.remote_status,
        }

    # -- download links -------------------------------------------------------------------------------------------

    def _link_path(self, f: ServedFile, flavour: str) -> str:
        suffix = ".tar" if f.tar else ""
        return f"/{flavour}/{quote(f.instance)}/{quote(f.host)}/{quote(f.name)}{suffix}"

    def _link_signature(self, path: str, expires: int) -> str:
        return hmac.new(self._link_key, f"{path}\n{expires}".encode(), hashlib.sha256).hexdigest()

    def link_host(self) -> str:
        """The host[:port] download links name: the public host if set, else the one the request reached."""
        return self.public_host or getattr(self._request, "host", None) or self.endpoint

    def link(self, f: ServedFile, flavour: str, expires: int) -> str:
        path = self._link_path(f, flavour)
        return (f"http://{self.link_host()}{path}?OSSAccessKeyId={quote(self.access_key_id)}"
                f"&Expires={expires}&Signature={self._link_signature(path, expires)}")

    def find_download(self, path: str, query: dict[str, str]) -> tuple[ServedFile, str]:
        try:
            expires = int(query.get("Expires", ""))
        except ValueError:
            raise ApiError(403, "AccessDenied", "Expires is missing or not a number.") from None
        if not hmac.compare_digest(self._link_signature(path, expires), query.get("Signature", "")):
            raise ApiError(403, "SignatureDoesNotMatch", "The download link's signature is not valid.")
        if expires < self.now():
            raise ApiError(403, "AccessDenied", "Request has expired.")
        with self._lock:
            for f in self.files:
                for flavour in ("public", "intranet"):
                    if self._link_path(f, flavour) == path:
                        return f, flavour
        raise ApiError(404, "NoSuchKey", "The specified key does not exist.")


class _Handler(BaseHTTPRequestHandler):
    rds: LocalRdsServer
    protocol_version = "HTTP/1.1"

    def log_message(self, *args) -> None:  # quiet
        pass

    def _headers(self) -> dict[str, list[str]]:
        out: dict[str, list[str]] = {}
        for k, v in self.headers.items():
            out.setdefault(k.lower(), []).append(v)
        return out

    def _send_json(self, status: int, doc: dict, extra: dict | None = None) -> None:
        body = json.dumps(doc).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json;charset=utf-8")
        self.send_header("Content-Length", str(len(body)))
        for k, v in (extra or {}).items():
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(body)

    def _send_error(self, err: ApiError, request_id: str) -> None:
        self._send_json(err.status, {"RequestId": request_id, "HostId": HOST_ID, "Code": err.code,
                                     "Message": err.message,
                                     "Recommend": f"https://api.aliyun.com/troubleshoot?q={err.code}"})

    def do_POST(self) -> None:
        self._api("POST")

    def do_GET(self) -> None:
        url = urlsplit(self.path)
        if url.path.startswith(("/public/", "/intranet/")):
            self._download(url.path, dict(parse_qsl(url.query, keep_blank_values=True)))
        else:
            self._api("GET")

    def _api(self, method: str) -> None:
        request_id = str(uuid.uuid4()).upper()
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        url = urlsplit(self.path)
        query = parse_qsl(url.query, keep_blank_values=True)
        headers = self._headers()
        action = (headers.get("x-acs-action") or [""])[0]
        self.rds._request.host = self._reached_host()
        try:
            self.rds.verify_signature(method, url.path, query, headers, body)
            params = dict(query)
            if body and "x-www-form-urlencoded" in (headers.get("content-type") or [""])[0]:
                params.update(parse_qsl(body.decode(), keep_blank_values=True))
            doc = self.rds.call(action, params)
        except ApiError as err:
            self.rds.api_calls.append((action, err.code))
            self._send_error(err, request_id)
            return
        self.rds.api_calls.append((action, "OK"))
        self._send_json(200, {"RequestId": request_id, **doc})

    def _reached_host(self) -> str:
        """host[:port] the client reached: its Host header, else (none, malformed, or 0.0.0.0) the socket's own
        address, never an address other machines cannot connect to."""
        host = (self.headers.get("Host") or "").strip()
        if HOST_PORT.match(host) and re.sub(r":\d+$", "", host) not in UNREACHABLE_HOSTS:
            return host
        address, port = self.connection.getsockname()[:2]
        return f"[{address}]:{port}" if ":" in address else f"{address}:{port}"

    def _download(self, path: str, query: dict[str, str]) -> None:
        rds = self.rds
        asked = (self.headers.get("Range") or "").strip().removeprefix("bytes=").partition("-")[0]
        record = {"path": path, "start": int(asked) if asked.isdigit() else 0, "status": 0, "sent": 0}
        rds.downloads.append(record)
        try:
            f, flavour = rds.find_download(path, query)
        except ApiError as err:
            record["status"] = err.status
            body = (f"<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<Error><Code>{err.code}</Code>"
                    f"<Message>{err.message}</Message><RequestId>{uuid.uuid4().hex.upper()}</RequestId>"
                    f"<HostId>127.0.0.1</HostId></Error>").encode()
            self.send_response(err.status)
            self.send_header("Content-Type", "application/xml")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
            return
        record.update(name=f.name, flavour=flavour)
        payload = f.payload
        start, end = 0, len(payload) - 1
        rng = self.headers.get("Range")
        status = 200
        if rng:
            spec = rng.strip().removeprefix("bytes=")
            lo, _, hi = spec.partition("-")
            if not lo.isdigit() or int(lo) >= len(payload):
                self.send_response(416)
                self.send_header("Content-Range", f"bytes */{len(payload)}")
                self.send_header("Content-Length", "0")
                self.end_headers()
                record["status"] = 416
                return
            start, end = int(lo), min(int(hi), end) if hi.isdigit() else end
            status = 206
        record.update(start=start, status=status)
        self.send_response(status)
        self.send_header("Content-Type", "application/octet-stream")
        self.send_header("Content-Length", str(end - start + 1))
        self.send_header("Accept-Ranges", "bytes")
        self.send_header("x-oss-hash-crc64ecma", crc64_bytes(payload))
        if status == 206:
            self.send_header("Content-Range", f"bytes {start}-{end}/{len(payload)}")
        self.end_headers()
        body = payload[start:end + 1]
        with rds._lock:
            drops = rds.faults.drops.get(f.name)
            cut = drops.pop(0) if drops else None
        if cut is not None and cut < len(body):
            self.wfile.write(body[:cut])
            self.wfile.flush()
            record["sent"] = cut
            if rds.faults.expire_on_drop:
                rds.advance_clock(rds.link_ttl + 1)
            # Cut the connection abruptly: the client sees a short body.
            self.connection.shutdown(socket.SHUT_RDWR)
            self.close_connection = True
            return
        self.wfile.write(body)
        record["sent"] = len(body)


def main(argv: list[str] | None = None) -> int:
    """`python -m binlake.testing.rds_server`: serve a directory's binlogs until SIGTERM/SIGINT (the compose stack's
    `rds` service)."""
    p = argparse.ArgumentParser(prog="python -m binlake.testing.rds_server",
                                description="RDS OpenAPI server for trying binlake: DescribeBinlogFiles and signed "
                                            "download links over the binlog files of a directory")
    p.add_argument("--host", default="127.0.0.1", help="address to bind (0.0.0.0: every interface)")
    p.add_argument("--port", type=int, default=8090, help="port to bind (0: any free port)")
    p.add_argument("--dir", required=True, help="directory holding the binlog files (e.g. the MySQL datadir)")
    p.add_argument("--instance", required=True, help="DBInstanceId the files are announced under")
    p.add_argument("--host-instance-id", help="HostInstanceID of the files' lineage (default: INSTANCE-primary)")
    p.add_argument("--basename", help="serve only BASENAME.NNNNNN files (needed when the directory holds several)")
    p.add_argument("--include-open", action="store_true",
                   help="also announce the newest file, which the server is still writing")
    p.add_argument("--public-host", help="host[:port] download links name (default: the Host each request reached)")
    p.add_argument("--access-key-id", default="test-ak")
    p.add_argument("--access-key-secret", default="test-secret")
    p.add_argument("--region", default="cn-hangzhou")
    p.add_argument("--link-ttl", type=int, default=3600, help="seconds a download link stays valid")
    args = p.parse_args(argv)
    directory = Path(args.dir)
    if not directory.is_dir():
        p.error(f"--dir {args.dir}: not a directory")
    if args.public_host is not None and (not HOST_PORT.match(args.public_host)
                                         or re.sub(r":\d+$", "", args.public_host) in UNREACHABLE_HOSTS):
        p.error(f"--public-host {args.public_host!r}: expected a host[:port] clients can reach")
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s", stream=sys.stderr)
    lineage = args.host_instance_id or f"{args.instance}-primary"
    server = LocalRdsServer(args.access_key_id, args.access_key_secret, args.link_ttl, args.region, args.host,
                            args.port, args.public_host)
    try:
        served = server.serve_directory(directory, args.instance, lineage, args.include_open, args.basename)
    except ApiError as err:
        print(f"rds server: {err.message}", file=sys.stderr)
        return 2
    stop = threading.Event()

    def on_signal(signum: int, frame) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    server.start()
    print(f"rds server on {args.host}:{server.port}, instance {args.instance} lineage {lineage}, "
          f"{len(served.registered)} binlog files in {directory}", flush=True)
    try:
        while not stop.wait(0.5):
            pass
    finally:
        server.stop()
    print("rds server stopped", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
