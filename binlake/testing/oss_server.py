"""An OSS-compatible object server on 127.0.0.1, for tests and the demo, driven through the real oss2 SDK.

Path-style addressing (what oss2 uses for IP endpoints: `http://127.0.0.1:PORT/bucket/key`). Objects live in
memory. What it speaks: PUT/GET/HEAD/DELETE object (Content-MD5 checked, `x-oss-meta-*` kept, ETag = MD5,
`x-oss-hash-crc64ecma`, AppendObject with its position check, Range GET with 206/416, If-Match/If-None-Match), PUT bucket, ListObjects (v1, marker)
and ListObjectsV2 (prefix, delimiter, max-keys, continuation-token, start-after, encoding-type=url); every request
must carry a valid V1 or V4 signature (`oss_signing`), and errors are OSS XML bodies (Code, Message, RequestId).

Faults for tests (`inject`): drop the connection after N body bytes of a GET, serve a body with one byte flipped
(headers still announce the true ETag/CRC64), or answer with an error status.
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import os
import socket
import threading
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from email.utils import formatdate, parsedate_to_datetime
from http.server import BaseHTTPRequestHandler
from urllib.parse import parse_qsl, quote, unquote
from xml.sax.saxutils import escape

import crcmod

from .background_http import BackgroundHttpServer
from .oss_signing import SignatureError, SignedRequest, parse_authorization, verify

crc64_ecma = crcmod.mkCrcFun(0x142F0E1EBA9EA3693, initCrc=0, rev=True, xorOut=0xFFFFFFFFFFFFFFFF)
MAX_SKEW_SECONDS = 15 * 60


@dataclass
class StoredObject:
    data: bytes
    content_type: str = "application/octet-stream"
    meta: dict[str, str] = field(default_factory=dict)  # x-oss-meta-* headers, lower-case names
    modified: float = field(default_factory=time.time)
    appendable: bool = False  # created by AppendObject ("Appendable"); PutObject makes a "Normal" object

    @property
    def object_type(self) -> str:
        return "Appendable" if self.appendable else "Normal"

    @property
    def etag(self) -> str:
        return '"' + hashlib.md5(self.data).hexdigest().upper() + '"'

    @property
    def crc64(self) -> str:
        return str(crc64_ecma(self.data))


@dataclass
class Fault:
    kind: str  # "drop" | "corrupt" | "error"
    times: int = 1
    after: int = 0  # drop: body bytes sent before the connection is cut; corrupt: index of the flipped byte
    status: int = 503
    code: str = "ServiceUnavailable"


@dataclass
class RequestRecord:
    method: str
    bucket: str
    key: str
    auth_version: str  # "v1", "v4" or "" (refused before it was parsed)
    status: int
    range: str = ""


class OssError(Exception):
    def __init__(self, status: int, code: str, message: str, **extra: str) -> None:
        super().__init__(message)
        self.status, self.code, self.message, self.extra = status, code, message, extra
        self.headers: dict[str, str] = {}  # extra response headers (x-oss-next-append-position)


class OssServer(BackgroundHttpServer):
    """Start with `OssServer(...).start()` or as a context manager; `endpoint` is the URL to give oss2."""

    def __init__(self, access_key_id: str = "test-ak", access_key_secret: str = "test-secret",
                 region: str = "cn-hangzhou", buckets: tuple[str, ...] = ("binlake",), host: str = "127.0.0.1",
                 port: int = 0) -> None:
        self.region, self.host, self.port = region, host, port
        self.users: dict[str, tuple[str, set[str] | None]] = {access_key_id: (access_key_secret, None)}
        self.buckets: dict[str, dict[str, StoredObject]] = {b: {} for b in buckets}
        self.faults: dict[tuple[str, str], list[Fault]] = {}
        self.requests: list[RequestRecord] = []
        self.crc64_headers = True  # False: behave like a store that announces no CRC-64 (only the ETag)
        self.lock = threading.Lock()

    # lifecycle
    def start(self) -> OssServer:
        self._serve(type("BoundOssHandler", (_Handler,), {"oss": self}), self.host, self.port, "oss-server")
        return self

    @property
    def endpoint(self) -> str:
        assert self._httpd is not None, "server not started"
        host = "127.0.0.1" if self.host in ("0.0.0.0", "") else self.host
        return f"http://{host}:{self._httpd.server_address[1]}"

    # test controls
    def add_user(self, access_key_id: str, secret: str, buckets: set[str] | None = None) -> None:
        """Another credential; `buckets` limits what it may touch (others answer AccessDenied)."""
        self.users[access_key_id] = (secret, buckets)

    def put(self, bucket: str, key: str, data: bytes, meta: dict[str, str] | None = None) -> None:
        """Store an object directly (no HTTP), e.g. to seed a bucket."""
        with self.lock:
            self.buckets.setdefault(bucket, {})[key] = StoredObject(
                data, meta={f"x-oss-meta-{k.lower()}": v for k, v in (meta or {}).items()})

    def get(self, bucket: str, key: str) -> StoredObject | None:
        with self.lock:
            return self.buckets.get(bucket, {}).get(key)

    def inject(self, bucket: str, key: str, kind: str, times: int = 1, after: int = 0, status: int = 503,
               code: str = "ServiceUnavailable") -> None:
        """The next `times` GETs of the object fail: `drop` after `after` body bytes, `corrupt` (byte `after`
        flipped), or `error` (status and code)."""
        if kind not in ("drop", "corrupt", "error"):
            raise ValueError(f"unknown fault {kind!r}")
        with self.lock:
            self.faults.setdefault((bucket, key), []).append(Fault(kind, times, after, status, code))

    def _take_fault(self, bucket: str, key: str) -> Fault | None:
        with self.lock:
            queue = self.faults.get((bucket, key))
            if not queue:
                return None
            fault = queue[0]
            fault.times -= 1
            if fault.times <= 0:
                queue.pop(0)
            return fault


def _request_id() -> str:
    return os.urandom(12).hex().upper()


def _iso(ts: float) -> str:
    return datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%dT%H:%M:%S.000Z")


def _parse_range(value: str, size: int) -> tuple[int, int] | None:
    """(first, last) inclusive for `bytes=a-b`, `bytes=a-`, `bytes=-n`; None when not satisfiable."""
    spec = value.strip()
    if not spec.startswith("bytes=") or "," in spec:
        raise OssError(400, "InvalidArgument", f"unsupported Range header {value!r}")
    first_s, _, last_s = spec[6:].partition("-")
    try:
        if first_s == "":
            n = int(last_s)
            return (max(size - n, 0), size - 1) if n > 0 and size > 0 else None
        first = int(first_s)
        last = int(last_s) if last_s else size - 1
    except ValueError:
        raise OssError(400, "InvalidArgument", f"malformed Range header {value!r}") from None
    if first >= size or last < first:
        return None
    return first, min(last, size - 1)


class _Handler(BaseHTTPRequestHandler):
    oss: OssServer
    protocol_version = "HTTP/1.1"
    server_version = "AliyunOSS"
    sys_version = ""

    def log_message(self, format: str, *args: object) -> None:
        pass

    def do_GET(self) -> None:
        self._serve("GET")

    def do_HEAD(self) -> None:
        self._serve("HEAD")

    def do_PUT(self) -> None:
        self._serve("PUT")

    def do_DELETE(self) -> None:
        self._serve("DELETE")

    def do_POST(self) -> None:
        self._serve("POST")

    # request plumbing
    def _serve(self, method: str) -> None:
        self.request_id = _request_id()
        raw_path, _, raw_query = self.path.partition("?")
        bucket_raw, _, key_raw = raw_path.lstrip("/").partition("/")
        self.bucket, self.key = unquote(bucket_raw), unquote(key_raw)
        self.query = parse_qsl(raw_query, keep_blank_values=True)
        self.params = dict(self.query)
        self.lower_headers = {k.lower(): v.strip() for k, v in self.headers.items()}
        self.auth_version = ""
        self.status = 0
        body = b""
        try:
            if method in ("PUT", "POST"):
                body = self._read_body()
            self._authenticate(method)
            if not self.bucket:
                raise OssError(501, "NotImplemented", "service-level requests (ListBuckets) are not supported")
            if self.bucket not in self.oss.buckets and not (method == "PUT" and not self.key):
                raise OssError(404, "NoSuchBucket", "The specified bucket does not exist.", BucketName=self.bucket)
            handler = getattr(self, f"_{method.lower()}_{'object' if self.key else 'bucket'}", None)
            if handler is None:
                raise OssError(405, "MethodNotAllowed", f"{method} is not allowed here")
            if method in ("PUT", "POST"):
                handler(body)
            else:
                handler()
        except OssError as e:
            self._error(e)
        except SignatureError as e:
            extra = {"StringToSign": e.string_to_sign, "OSSAccessKeyId": e.access_key_id} if e.string_to_sign else {}
            self._error(OssError(403 if e.code == "SignatureDoesNotMatch" else 400, e.code, e.message, **extra))
        except Exception as e:  # a server bug: answer like OSS would rather than dropping the connection
            self._error(OssError(500, "InternalError", f"{type(e).__name__}: {e}"))

    def _record(self, status: int) -> None:
        """Log the request before its response goes out, so a client that got the answer sees the record."""
        self.status = status
        with self.oss.lock:
            self.oss.requests.append(RequestRecord(self.command, self.bucket, self.key, self.auth_version, status,
                                                   self.lower_headers.get("range", "")))

    def _read_body(self) -> bytes:
        if self.lower_headers.get("transfer-encoding", "").lower() == "chunked":
            parts = []
            while True:
                size = int(self.rfile.readline().split(b";")[0].strip(), 16)
                if size == 0:
                    while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                        pass
                    return b"".join(parts)
                parts.append(self.rfile.read(size))
                self.rfile.readline()
        length = int(self.lower_headers.get("content-length", "0") or 0)
        return self.rfile.read(length) if length else b""

    def _authenticate(self, method: str) -> None:
        value = self.lower_headers.get("authorization")
        if not value:
            raise OssError(403, "AccessDenied", "AccessDenied: anonymous access is not allowed on this bucket.")
        auth = parse_authorization(value)
        self.auth_version = auth.version
        user = self.oss.users.get(auth.access_key_id)
        if user is None:
            raise OssError(403, "InvalidAccessKeyId", "The OSS Access Key Id you provided does not exist in our "
                           "records.", OSSAccessKeyId=auth.access_key_id)
        secret, allowed = user
        self._check_clock(auth.version)
        verify(SignedRequest(method, self.bucket, self.key, self.query, self.lower_headers), auth, secret,
               self.oss.region)
        if allowed is not None and self.bucket not in allowed:
            raise OssError(403, "AccessDenied", f"You have no right to access bucket {self.bucket!r}.")

    def _check_clock(self, version: str) -> None:
        if version == "v4":
            stamp = self.lower_headers.get("x-oss-date", "")
            try:
                when = datetime.strptime(stamp, "%Y%m%dT%H%M%SZ").replace(tzinfo=UTC).timestamp()
            except ValueError:
                raise OssError(400, "InvalidArgument", f"x-oss-date {stamp!r} is not yyyymmddTHHMMSSZ") from None
        else:
            try:
                when = parsedate_to_datetime(self.lower_headers.get("date", "")).timestamp()
            except (TypeError, ValueError):
                raise OssError(403, "AccessDenied", "the Date header is missing or malformed") from None
        if abs(when - time.time()) > MAX_SKEW_SECONDS:
            raise OssError(403, "RequestTimeTooSkewed", "The difference between the request time and the current "
                           "time is too large.")

    # responses
    def _send(self, status: int, headers: dict[str, str], body: bytes = b"", head: bool = False) -> None:
        self._record(status)
        self.send_response(status)
        self.send_header("x-oss-request-id", self.request_id)
        self.send_header("Date", formatdate(usegmt=True))
        for k, v in headers.items():
            self.send_header(k, v)
        if "Content-Length" not in headers:
            self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if not head and body:
            self.wfile.write(body)

    def _error(self, e: OssError) -> None:
        fields = {"Code": e.code, "Message": e.message, "RequestId": self.request_id,
                  "HostId": f"{self.bucket or 'oss'}.127.0.0.1", **e.extra}
        if e.code == "NoSuchKey":
            fields["Key"] = self.key
        xml = ('<?xml version="1.0" encoding="UTF-8"?>\n<Error>\n'
               + "".join(f"  <{k}>{escape(str(v))}</{k}>\n" for k, v in fields.items()) + "</Error>\n").encode()
        headers = {"Content-Type": "application/xml", "x-oss-ec": "0000-00000000", **e.headers}
        if self.command == "HEAD":  # no body on HEAD: the error travels base64-encoded in a header
            headers["x-oss-err"] = base64.b64encode(xml).decode()
            self._send(e.status, headers, xml, head=True)
        else:
            self._send(e.status, headers, xml)

    def _object(self) -> StoredObject:
        obj = self.oss.get(self.bucket, self.key)
        if obj is None:
            raise OssError(404, "NoSuchKey", "The specified key does not exist.")
        return obj

    def _object_headers(self, obj: StoredObject) -> dict[str, str]:
        headers = {"Content-Type": obj.content_type, "ETag": obj.etag, "x-oss-hash-crc64ecma": obj.crc64,
                   "Last-Modified": formatdate(obj.modified, usegmt=True), "Accept-Ranges": "bytes",
                   "x-oss-object-type": obj.object_type, "x-oss-storage-class": "Standard", **obj.meta}
        if not self.oss.crc64_headers:
            del headers["x-oss-hash-crc64ecma"]
        return headers

    def _check_conditions(self, obj: StoredObject) -> bool:
        """False when If-None-Match matched (304); raises PreconditionFailed on an If-Match mismatch."""
        if_match = self.lower_headers.get("if-match")
        if if_match and if_match.strip('"').upper() != obj.etag.strip('"'):
            raise OssError(412, "PreconditionFailed", "At least one of the pre-conditions you specified did not "
                           "hold", Condition="If-Match")
        none_match = self.lower_headers.get("if-none-match")
        return not (none_match and none_match.strip('"').upper() == obj.etag.strip('"'))

    # objects
    def _get_object(self) -> None:
        obj = self._object()
        headers = self._object_headers(obj)
        if not self._check_conditions(obj):
            self._send(304, headers)
            return
        data, status = obj.data, 200
        if "range" in self.lower_headers:
            span = _parse_range(self.lower_headers["range"], len(obj.data))
            if span is None:
                raise OssError(416, "InvalidRange", "The requested range cannot be satisfied.",
                               ActualObjectSize=str(len(obj.data)))
            first, last = span
            data, status = obj.data[first:last + 1], 206
            headers["Content-Range"] = f"bytes {first}-{last}/{len(obj.data)}"
        fault = self.oss._take_fault(self.bucket, self.key)
        if fault is not None and fault.kind == "error":
            raise OssError(fault.status, fault.code, f"injected fault: {fault.code}")
        if fault is not None and fault.kind == "corrupt" and data:
            i = min(fault.after, len(data) - 1)
            data = data[:i] + bytes([data[i] ^ 0xFF]) + data[i + 1:]
        if fault is not None and fault.kind == "drop":
            self._record(status)
            self.send_response(status)
            self.send_header("x-oss-request-id", self.request_id)
            for k, v in headers.items():
                self.send_header(k, v)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data[:fault.after])
            self.wfile.flush()
            self.close_connection = True
            self.connection.shutdown(socket.SHUT_WR)  # FIN after the bytes sent: a clean cut mid-body
            return
        self._send(status, headers, data)

    def _head_object(self) -> None:
        obj = self._object()
        headers = self._object_headers(obj)
        status = 200 if self._check_conditions(obj) else 304
        headers["Content-Length"] = str(len(obj.data))
        self._send(status, headers, head=True)

    def _put_object(self, body: bytes) -> None:
        md5 = self.lower_headers.get("content-md5")
        if md5 and base64.b64encode(hashlib.md5(body).digest()).decode() != md5:
            raise OssError(400, "InvalidDigest", "The Content-MD5 you specified was invalid.")
        if "x-oss-copy-source" in self.lower_headers:
            raise OssError(501, "NotImplemented", "CopyObject is not supported by this server")
        with self.oss.lock:
            objects = self.oss.buckets[self.bucket]
            if self.lower_headers.get("x-oss-forbid-overwrite", "").lower() == "true" and self.key in objects:
                raise OssError(409, "FileAlreadyExists", "The object you specified already exists and can not be "
                               "overwritten.")
            obj = StoredObject(body, self.lower_headers.get("content-type") or "application/octet-stream",
                               {k: v for k, v in self.lower_headers.items() if k.startswith("x-oss-meta-")})
            objects[self.key] = obj
        self._send(200, {"ETag": obj.etag, "x-oss-hash-crc64ecma": obj.crc64})

    def _post_object(self, body: bytes) -> None:
        """AppendObject (`POST ?append&position=N`): creates an appendable object at position 0, else appends when
        `position` equals the object's length (409 PositionNotEqualToLength with the length otherwise) and refuses
        a Normal object (409 ObjectNotAppendable), as OSS does."""
        if "append" not in self.params:
            raise OssError(501, "NotImplemented", "only AppendObject is supported with POST on an object")
        try:
            position = int(self.params.get("position", ""))
        except ValueError:
            raise OssError(400, "InvalidArgument", "position is not a number", ArgumentName="position") from None
        md5 = self.lower_headers.get("content-md5")
        if md5 and base64.b64encode(hashlib.md5(body).digest()).decode() != md5:
            raise OssError(400, "InvalidDigest", "The Content-MD5 you specified was invalid.")
        with self.oss.lock:
            objects = self.oss.buckets[self.bucket]
            obj = objects.get(self.key)
            if obj is not None and not obj.appendable:
                raise OssError(409, "ObjectNotAppendable", "The object is not appendable")
            length = 0 if obj is None else len(obj.data)
            if position != length:
                e = OssError(409, "PositionNotEqualToLength", "Position is not equal to file length")
                e.headers = {"x-oss-next-append-position": str(length)}
                raise e
            if obj is None:
                obj = StoredObject(body, self.lower_headers.get("content-type") or "application/octet-stream",
                                   {k: v for k, v in self.lower_headers.items() if k.startswith("x-oss-meta-")},
                                   appendable=True)
                objects[self.key] = obj
            else:
                obj.data += body
                obj.modified = time.time()
        self._send(200, {"ETag": obj.etag, "x-oss-hash-crc64ecma": obj.crc64,
                         "x-oss-next-append-position": str(len(obj.data))})

    def _delete_object(self) -> None:
        with self.oss.lock:
            self.oss.buckets[self.bucket].pop(self.key, None)
        self._send(204, {})

    # buckets
    def _put_bucket(self, body: bytes) -> None:
        if self.query:
            raise OssError(501, "NotImplemented", f"bucket sub-resource {self.query[0][0]!r} is not supported")
        with self.oss.lock:
            self.oss.buckets.setdefault(self.bucket, {})
        self._send(200, {"Location": f"/{self.bucket}"})

    def _get_bucket(self) -> None:
        v2 = self.params.get("list-type") == "2"
        if not v2 and any(k not in ("prefix", "delimiter", "marker", "max-keys", "encoding-type")
                          for k, _ in self.query):
            raise OssError(501, "NotImplemented", f"bucket sub-resource {self.query[0][0]!r} is not supported")
        prefix = self.params.get("prefix", "")
        delimiter = self.params.get("delimiter", "")
        try:
            max_keys = int(self.params.get("max-keys", "100"))
        except ValueError:
            max_keys = -1
        if not 1 <= max_keys <= 1000:
            raise OssError(400, "InvalidArgument", "max-keys must be between 1 and 1000", ArgumentName="max-keys")
        if v2:
            token = self.params.get("continuation-token")
            after, after_prefix = _decode_token(token) if token else (self.params.get("start-after", ""), False)
        else:
            after, after_prefix = self.params.get("marker", ""), False
        contents, prefixes, truncated, last = _list(self.oss, self.bucket, prefix, delimiter, max_keys, after,
                                                    after_prefix)
        url = self.params.get("encoding-type") == "url"

        def enc(text: str) -> str:
            return escape(quote(text, safe="") if url else text)

        out = ['<?xml version="1.0" encoding="UTF-8"?>\n<ListBucketResult>', f"<Name>{escape(self.bucket)}</Name>",
               f"<Prefix>{enc(prefix)}</Prefix>", f"<MaxKeys>{max_keys}</MaxKeys>",
               f"<Delimiter>{enc(delimiter)}</Delimiter>", f"<IsTruncated>{str(truncated).lower()}</IsTruncated>"]
        if url:
            out.append("<EncodingType>url</EncodingType>")
        if v2:
            out.append(f"<KeyCount>{len(contents) + len(prefixes)}</KeyCount>")
            if token:
                out.append(f"<ContinuationToken>{enc(token)}</ContinuationToken>")
            if truncated and last is not None:
                out.append(f"<NextContinuationToken>{enc(_encode_token(*last))}</NextContinuationToken>")
        else:
            out.append(f"<Marker>{enc(after)}</Marker>")
            if truncated and last is not None:
                out.append(f"<NextMarker>{enc(last[0])}</NextMarker>")
        for key, obj in contents:
            out.append(f"<Contents><Key>{enc(key)}</Key><LastModified>{_iso(obj.modified)}</LastModified>"
                       f"<ETag>{escape(obj.etag)}</ETag><Type>{obj.object_type}</Type><Size>{len(obj.data)}</Size>"
                       f"<StorageClass>Standard</StorageClass></Contents>")
        for p in prefixes:
            out.append(f"<CommonPrefixes><Prefix>{enc(p)}</Prefix></CommonPrefixes>")
        out.append("</ListBucketResult>\n")
        self._send(200, {"Content-Type": "application/xml"}, "".join(out).encode())

    def _delete_bucket(self) -> None:
        with self.oss.lock:
            if self.oss.buckets.get(self.bucket):
                raise OssError(409, "BucketNotEmpty", "The bucket you tried to delete is not empty.")
            self.oss.buckets.pop(self.bucket, None)
        self._send(204, {})


def _encode_token(marker: str, is_prefix: bool) -> str:
    return base64.urlsafe_b64encode((("p:" if is_prefix else "k:") + marker).encode()).decode()


def _decode_token(token: str) -> tuple[str, bool]:
    try:
        text = base64.urlsafe_b64decode(token.encode()).decode()
    except (ValueError, UnicodeDecodeError):
        raise OssError(400, "InvalidArgument", "The continuation-token is not valid.",
                       ArgumentName="continuation-token") from None
    if text[:2] not in ("k:", "p:"):
        raise OssError(400, "InvalidArgument", "The continuation-token is not valid.",
                       ArgumentName="continuation-token")
    return text[2:], text.startswith("p:")


def _list(oss: OssServer, bucket: str, prefix: str, delimiter: str, max_keys: int, after: str,
          after_prefix: bool) -> tuple[list[tuple[str, StoredObject]], list[str], bool, tuple[str, bool] | None]:
    """One page: (objects, common prefixes, truncated, (last key or prefix returned, is_prefix))."""
    with oss.lock:
        items = sorted(oss.buckets[bucket].items())
    contents: list[tuple[str, StoredObject]] = []
    prefixes: list[str] = []
    last: tuple[str, bool] | None = None
    for key, obj in items:
        if not key.startswith(prefix) or key <= after or (after_prefix and key.startswith(after)):
            continue
        rest = key[len(prefix):]
        common = prefix + rest[:rest.index(delimiter) + len(delimiter)] if delimiter and delimiter in rest else None
        if common is not None and prefixes and prefixes[-1] == common:
            continue
        if len(contents) + len(prefixes) == max_keys:
            return contents, prefixes, True, last
        if common is not None:
            prefixes.append(common)
            last = (common, True)
        else:
            contents.append((key, obj))
            last = (key, False)
    return contents, prefixes, False, last


def main(argv: list[str] | None = None) -> int:
    """`python -m binlake.testing.oss_server`: serve until interrupted (the compose stack's `oss` service)."""
    p = argparse.ArgumentParser(description="OSS-compatible object server for trying binlake (in memory)")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8091)
    p.add_argument("--bucket", action="append", help="bucket to create (repeatable; default binlake)")
    p.add_argument("--access-key-id", default="test-ak")
    p.add_argument("--access-key-secret", default="test-secret")
    p.add_argument("--region", default="cn-hangzhou", help="region V4 signatures must name")
    args = p.parse_args(argv)
    server = OssServer(args.access_key_id, args.access_key_secret, args.region, tuple(args.bucket or ["binlake"]),
                       args.host, args.port).start()
    port = server._httpd.server_address[1] if server._httpd else args.port
    print(f"oss server on {args.host}:{port}, buckets {', '.join(server.buckets)}", flush=True)
    try:
        threading.Event().wait()
    except KeyboardInterrupt:
        pass
    finally:
        server.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
