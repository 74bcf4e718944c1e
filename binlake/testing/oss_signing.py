"""Verification of the two OSS request signatures the local OSS server accepts, from the documented algorithms.

V1 (`Authorization: OSS <AccessKeyId>:<Signature>`): base64 HMAC-SHA1 over
    VERB \\n Content-MD5 \\n Content-Type \\n Date \\n CanonicalizedOSSHeaders CanonicalizedResource
where the OSS headers are the `x-oss-*` headers, lower-cased and sorted, one `name:value\\n` each, and the resource is
`/bucket/key` (the decoded key) plus the sorted sub-resource parameters (`?acl`, `?continuation-token=...`).

V4 (`Authorization: OSS4-HMAC-SHA256 Credential=<ak>/<yyyymmdd>/<region>/oss/aliyun_v4_request,
Signature=<hex>[, AdditionalHeaders=a;b]`): hex HMAC-SHA256, with a key derived from `aliyun_v4` + secret through
date, region, product and `aliyun_v4_request`, over
    OSS4-HMAC-SHA256 \\n <x-oss-date> \\n <scope> \\n hex(SHA256(CanonicalRequest))
and CanonicalRequest = VERB \\n URI-encoded `/bucket/key` (slashes kept) \\n sorted URI-encoded query \\n
canonical headers (x-oss-*, content-type, content-md5 and the additional ones) \\n additional header names \\n
the `x-oss-content-sha256` value.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import re
from collections.abc import Mapping
from dataclasses import dataclass
from urllib.parse import quote

# Query parameters that are part of the V1 canonical resource (the documented sub-resources this server can see).
V1_SUBRESOURCES = frozenset({
    "acl", "append", "bucketInfo", "cname", "comp", "continuation-token", "cors", "delete", "encryption",
    "endTime", "lifecycle", "live", "location", "logging", "objectMeta", "partNumber", "policy", "position",
    "qos", "referer", "replication", "response-cache-control", "response-content-disposition",
    "response-content-encoding", "response-content-language", "response-content-type", "response-expires",
    "restore", "security-token", "startTime", "stat", "status", "symlink", "tagging", "uploadId", "uploads",
    "versionId", "versioning", "versions", "website", "x-oss-process",
})
V4_ALGORITHM = "OSS4-HMAC-SHA256"
V4_ALWAYS_SIGNED = ("content-type", "content-md5")
_V4_AUTH = re.compile(r"^OSS4-HMAC-SHA256\s+(.*)$")
_V1_AUTH = re.compile(r"^OSS ([^:\s]+):(\S+)$")


class SignatureError(Exception):
    """A request whose signature cannot be checked or does not match. `code` is the OSS error code."""

    def __init__(self, code: str, message: str, string_to_sign: str = "", access_key_id: str = "") -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.string_to_sign = string_to_sign
        self.access_key_id = access_key_id


@dataclass
class SignedRequest:
    """What a signature covers, as the server received it (key decoded, headers with lower-case names)."""

    method: str
    bucket: str
    key: str
    query: list[tuple[str, str]]
    headers: Mapping[str, str]


@dataclass
class AuthHeader:
    version: str  # "v1" or "v4"
    access_key_id: str
    signature: str
    date: str = ""  # V4 scope date
    region: str = ""
    product: str = ""
    additional: tuple[str, ...] = ()


def parse_authorization(value: str) -> AuthHeader:
    m = _V1_AUTH.match(value.strip())
    if m:
        return AuthHeader("v1", m.group(1), m.group(2))
    m = _V4_AUTH.match(value.strip())
    if not m:
        raise SignatureError("InvalidArgument", f"Authorization header is invalid: {value[:40]!r}")
    fields: dict[str, str] = {}
    for part in m.group(1).split(","):
        name, _, val = part.strip().partition("=")
        fields[name] = val
    try:
        ak, date, region, product, terminator = fields["Credential"].split("/")
        signature = fields["Signature"]
    except (KeyError, ValueError):
        raise SignatureError("InvalidArgument", "Authorization header (V4) lacks Credential or Signature") from None
    if terminator != "aliyun_v4_request":
        raise SignatureError("InvalidArgument", f"V4 credential scope must end with aliyun_v4_request: {terminator}")
    extra = tuple(h for h in fields.get("AdditionalHeaders", "").split(";") if h)
    return AuthHeader("v4", ak, signature, date, region, product, extra)


def v1_string_to_sign(req: SignedRequest) -> str:
    oss_headers = sorted((k, v) for k, v in req.headers.items() if k.startswith("x-oss-"))
    subresources = sorted((k, v) for k, v in req.query if k in V1_SUBRESOURCES)
    resource = f"/{req.bucket}/{req.key}" if req.bucket else "/"
    if subresources:
        resource += "?" + "&".join(f"{k}={v}" if v else k for k, v in subresources)
    date = req.headers.get("x-oss-date") or req.headers.get("date", "")
    lines = [req.method, req.headers.get("content-md5", ""), req.headers.get("content-type", ""), date]
    return "\n".join(lines) + "\n" + "".join(f"{k}:{v}\n" for k, v in oss_headers) + resource


def v1_signature(secret: str, string_to_sign: str) -> str:
    digest = hmac.new(secret.encode(), string_to_sign.encode("utf-8"), hashlib.sha1).digest()
    return base64.b64encode(digest).decode()


def _uri_encode(text: str, keep_slash: bool) -> str:
    return quote(text.encode("utf-8"), safe="/~" if keep_slash else "~")


def v4_canonical_request(req: SignedRequest, additional: tuple[str, ...]) -> str:
    uri = _uri_encode(f"/{req.bucket}/{req.key}" if req.bucket else "/", keep_slash=True)
    params = sorted((_uri_encode(k, False), _uri_encode(v, False)) for k, v in req.query)
    query = "&".join(f"{k}={v}" if v else k for k, v in params)
    signed = set(additional) | set(V4_ALWAYS_SIGNED)
    headers = sorted((k, v) for k, v in req.headers.items() if k.startswith("x-oss-") or k in signed)
    canonical_headers = "".join(f"{k}:{v}\n" for k, v in headers)
    payload = req.headers.get("x-oss-content-sha256", "UNSIGNED-PAYLOAD")
    return "\n".join([req.method, uri, query, canonical_headers, ";".join(sorted(additional)), payload])


def v4_string_to_sign(req: SignedRequest, auth: AuthHeader) -> str:
    scope = f"{auth.date}/{auth.region}/{auth.product}/aliyun_v4_request"
    digest = hashlib.sha256(v4_canonical_request(req, auth.additional).encode("utf-8")).hexdigest()
    return "\n".join([V4_ALGORITHM, req.headers.get("x-oss-date", ""), scope, digest])


def v4_signature(secret: str, auth: AuthHeader, string_to_sign: str) -> str:
    key = ("aliyun_v4" + secret).encode()
    for part in (auth.date, auth.region, auth.product, "aliyun_v4_request"):
        key = hmac.new(key, part.encode(), hashlib.sha256).digest()
    return hmac.new(key, string_to_sign.encode("utf-8"), hashlib.sha256).hexdigest()


def verify(req: SignedRequest, auth: AuthHeader, secret: str, region: str) -> None:
    """Raise SignatureError unless `auth` is a valid signature of `req` with `secret` (V4: for `region`)."""
    if auth.version == "v1":
        string_to_sign = v1_string_to_sign(req)
        expected = v1_signature(secret, string_to_sign)
    else:
        if auth.product != "oss":
            raise SignatureError("InvalidArgument", f"V4 credential scope names product {auth.product!r}, not oss")
        if auth.region != region:
            raise SignatureError("InvalidArgument", f"V4 credential scope region {auth.region!r} is not {region!r}")
        if not req.headers.get("x-oss-date", "").startswith(auth.date):
            raise SignatureError("InvalidArgument", "x-oss-date does not match the V4 credential scope date")
        string_to_sign = v4_string_to_sign(req, auth)
        expected = v4_signature(secret, auth, string_to_sign)
    if not hmac.compare_digest(expected, auth.signature):
        raise SignatureError("SignatureDoesNotMatch", "The request signature we calculated does not match the "
                             "signature you provided. Check your key and signing method.", string_to_sign,
                             auth.access_key_id)
