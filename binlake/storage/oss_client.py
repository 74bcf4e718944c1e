"""OSS locations (`oss://bucket/prefix`), connection settings from arguments or the environment, and the oss2
bucket handle built from them. Shared by the OSS source, OSS landing storage and the snapshot store's OssTree.

Environment: OSS_ENDPOINT (e.g. https://oss-cn-hangzhou-internal.aliyuncs.com), OSS_ACCESS_KEY_ID,
OSS_ACCESS_KEY_SECRET, OSS_SECURITY_TOKEN (optional, STS), OSS_REGION (e.g. cn-hangzhou; needed for V4) and
OSS_AUTH_VERSION (`v1` or `v4`; default `v4` when a region is known, else `v1`) and OSS_PATH_STYLE (`true`: bucket
in the path, for OSS-compatible servers; by default only IP and single-label hosts such as `http://oss:8091` use
it). Secrets are never logged or put into error messages.
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar
from urllib.parse import urlparse

import oss2

from .errors import SourceConfigError, SourceError

T = TypeVar("T")
_BUCKET = re.compile(r"^[a-z0-9][a-z0-9-]{1,61}[a-z0-9]$")


@dataclass(frozen=True)
class OssLocation:
    """`oss://bucket/prefix`; `prefix` is empty or ends with '/'."""

    bucket: str
    prefix: str

    @classmethod
    def parse(cls, url: str) -> OssLocation:
        if not url.startswith("oss://"):
            raise ValueError(f"{url!r} is not an oss://bucket/prefix location")
        bucket, _, prefix = url[len("oss://"):].partition("/")
        if not _BUCKET.match(bucket):
            raise ValueError(f"{url!r}: {bucket!r} is not a valid OSS bucket name")
        prefix = prefix.strip("/")
        if any(part in ("", ".", "..") for part in prefix.split("/")) and prefix:
            raise ValueError(f"{url!r}: the prefix may not hold empty, '.' or '..' segments")
        return cls(bucket, prefix + "/" if prefix else "")

    def key(self, name: str) -> str:
        return self.prefix + name

    def url(self, key: str | None = None) -> str:
        return f"oss://{self.bucket}/{self.prefix if key is None else key}"


@dataclass(frozen=True)
class OssSettings:
    endpoint: str
    access_key_id: str
    access_key_secret: str
    auth_version: str = "v1"
    region: str | None = None
    security_token: str | None = None
    retries: int = 5
    path_style: bool | None = None  # None: path style for IP and single-label hosts (http://oss:8091), else not

    def __repr__(self) -> str:  # keep the secret out of logs and tracebacks
        return f"OssSettings(endpoint={self.endpoint!r}, access_key_id={self.access_key_id!r}, " \
               f"auth_version={self.auth_version!r}, region={self.region!r})"

    @classmethod
    def from_env(cls, endpoint: str | None = None, access_key_id: str | None = None,
                 access_key_secret: str | None = None, auth_version: str | None = None,
                 region: str | None = None, security_token: str | None = None,
                 path_style: bool | None = None) -> OssSettings:
        """Arguments win; what is missing comes from the OSS_* environment variables."""
        env = os.environ
        if path_style is None and env.get("OSS_PATH_STYLE"):
            path_style = env["OSS_PATH_STYLE"].strip().lower() in ("1", "true", "yes")
        endpoint = endpoint or env.get("OSS_ENDPOINT")
        ak = access_key_id or env.get("OSS_ACCESS_KEY_ID")
        secret = access_key_secret or env.get("OSS_ACCESS_KEY_SECRET")
        region = region or env.get("OSS_REGION") or None
        version = (auth_version or env.get("OSS_AUTH_VERSION") or ("v4" if region else "v1")).lower()
        for value, name in ((endpoint, "OSS_ENDPOINT"), (ak, "OSS_ACCESS_KEY_ID"), (secret, "OSS_ACCESS_KEY_SECRET")):
            if not value:
                raise SourceConfigError(f"OSS: {name} is not set (pass it or set the environment variable)")
        scheme, _sep, host = endpoint.partition("://") if "://" in endpoint else ("https", "", endpoint)
        if scheme not in ("http", "https") or not re.match(r"^(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9.-]+)(:[0-9]{1,5})?/?$", host):
            raise SourceConfigError(f"OSS: OSS_ENDPOINT {endpoint!r} is not HOST[:PORT] or http(s)://HOST[:PORT]")
        if version not in ("v1", "v4"):
            raise SourceConfigError(f"OSS: OSS_AUTH_VERSION must be v1 or v4, not {version!r}")
        if version == "v4" and not region:
            raise SourceConfigError("OSS: signature V4 needs a region (OSS_REGION, e.g. cn-hangzhou)")
        assert endpoint and ak and secret
        return cls(endpoint, ak, secret, version, region, security_token or env.get("OSS_SECURITY_TOKEN") or None,
                   path_style=path_style)

    def bucket(self, name: str) -> oss2.Bucket:
        if self.security_token:
            auth = oss2.StsAuth(self.access_key_id, self.access_key_secret, self.security_token,
                                auth_version=self.auth_version)
        elif self.auth_version == "v4":
            auth = oss2.AuthV4(self.access_key_id, self.access_key_secret)
        else:
            auth = oss2.Auth(self.access_key_id, self.access_key_secret)
        path_style = self.path_style
        if path_style is None:
            host = urlparse(self.endpoint if "://" in self.endpoint else f"http://{self.endpoint}").hostname or ""
            path_style = "." not in host
        return oss2.Bucket(auth, self.endpoint, name, region=self.region, connect_timeout=30,
                           is_path_style=path_style)


def is_transient(exc: BaseException) -> bool:
    """Connection trouble, throttling and 5xx: worth retrying. Everything else is reported."""
    if isinstance(exc, oss2.exceptions.RequestError):
        return True
    if isinstance(exc, oss2.exceptions.ServerError):
        return exc.status >= 500 or exc.status == 429 or exc.code in ("Throttling", "RequestTimeTooSkewed")
    return isinstance(exc, (OSError, EOFError)) or type(exc).__module__.startswith(("urllib3", "requests", "http."))


def describe(exc: BaseException) -> str:
    """An OSS error's code, message and request id (what support asks for), or the exception text."""
    if isinstance(exc, oss2.exceptions.OssError) and getattr(exc, "code", None):
        return f"{exc.code} (HTTP {exc.status}): {exc.message} [request id {exc.request_id}]"
    return f"{type(exc).__name__}: {exc}"


def with_retries(what: str, call: Callable[[], T], retries: int = 5, pause: float = 0.2) -> T:
    """`call()`, retried with backoff on transient errors; a SourceError naming `what` when it keeps failing."""
    for attempt in range(retries + 1):
        try:
            return call()
        except Exception as exc:
            if not is_transient(exc):
                raise SourceError(f"{what}: {describe(exc)}") from exc
            if attempt == retries:
                raise SourceError(f"{what}: still failing after {retries + 1} attempts: {describe(exc)}") from exc
            time.sleep(min(pause * 2 ** attempt, 5.0))
    raise AssertionError("unreachable")
