"""Reading a download link as one byte stream that survives dropped connections and expired links.

`RangeReader` is a raw binary stream over HTTP GET. When the connection drops mid-body it reconnects with
`Range: bytes=<offset>-` and continues; when the link answers 403 (an expired signed URL) it asks its link provider
for a fresh one and continues at the same offset. At the end it checks the total size and, when the source
announced one, the CRC-64 checksum (`ChecksumMismatchError`). Used for landing (copied into a temp file) and for
decoding straight from the source (no landing copy).
"""

from __future__ import annotations

import http.client
import io
import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from urllib.parse import urlsplit

from .base import ChecksumMismatchError, SourceError
from .checksum import Crc64

LinkProvider = Callable[[bool], str]  # refresh -> URL (refresh=True: ask the source for a new link)


@dataclass
class RetryPolicy:
    """Attempts without progress before giving up, and the exponential backoff between them (seconds)."""

    attempts: int = 6
    backoff: float = 0.5
    max_backoff: float = 20.0
    link_refreshes: int = 3
    timeout: float = 60.0

    def delay(self, failures: int) -> float:
        return min(self.max_backoff, self.backoff * (2 ** max(0, failures - 1)))


class RangeReader(io.RawIOBase):
    """Bytes [offset, size) of the object behind a link, as a readable stream (see the module doc)."""

    def __init__(self, links: LinkProvider, name: str, size: int | None, checksum: str | None = None,
                 offset: int = 0, crc: Crc64 | None = None, policy: RetryPolicy | None = None) -> None:
        super().__init__()
        self.links, self.name, self.size, self.checksum = links, name, size, checksum
        self.offset = offset
        self.crc = crc if crc is not None else (Crc64() if offset == 0 else None)
        self.policy = policy or RetryPolicy()
        self.reconnects = 0
        self.refreshes = 0
        self._url = links(False)
        self._conn: http.client.HTTPConnection | None = None
        self._resp: http.client.HTTPResponse | None = None
        self._remaining = 0
        self._done = False

    def readable(self) -> bool:
        return True

    def close(self) -> None:
        self._drop()
        super().close()

    def _drop(self) -> None:
        if self._conn is not None:
            self._conn.close()
        self._conn = self._resp = None

    def _connect(self) -> None:
        """Open a GET at the current offset; handles expired links and transient failures."""
        failures = 0
        while True:
            url = urlsplit(self._url)
            cls = http.client.HTTPSConnection if url.scheme == "https" else http.client.HTTPConnection
            conn = cls(url.hostname, url.port, timeout=self.policy.timeout)
            target = url.path + (f"?{url.query}" if url.query else "")
            headers = {"Range": f"bytes={self.offset}-"} if self.offset else {}
            try:
                conn.request("GET", target, headers=headers)
                resp = conn.getresponse()
            except (OSError, http.client.HTTPException) as exc:
                conn.close()
                failures += 1
                self._give_up_after(failures, f"connection failed: {exc}")
                time.sleep(self.policy.delay(failures))
                continue
            if resp.status in (200, 206):
                if resp.status == 200 and self.offset:
                    conn.close()  # the server ignored Range: cannot resume without re-reading; refuse clearly
                    raise SourceError(f"{self.name}: server ignored the Range request at offset {self.offset}")
                if resp.status == 206 and not (resp.getheader("Content-Range") or "").startswith(
                        f"bytes {self.offset}-"):
                    conn.close()
                    raise SourceError(f"{self.name}: server answered range {resp.getheader('Content-Range')!r} "
                                      f"for offset {self.offset}")
                self._conn, self._resp = conn, resp
                self._remaining = int(resp.getheader("Content-Length") or -1)
                return
            body = resp.read(2048).decode("utf-8", "replace")
            conn.close()
            if resp.status == 416 and self.size is not None and self.offset >= self.size:
                self._remaining = 0
                self._done = True
                return
            if resp.status == 403:
                # A signed link past its expiry time (or revoked): ask the source for a fresh one.
                self.refreshes += 1
                if self.refreshes > self.policy.link_refreshes:
                    raise SourceError(f"{self.name}: download link refused (HTTP 403) after {self.refreshes - 1} "
                                      f"refreshes: {_xml_code(body)}")
                self._url = self.links(True)
                continue
            if resp.status >= 500 or resp.status == 429:
                failures += 1
                self._give_up_after(failures, f"HTTP {resp.status} {_xml_code(body)}")
                time.sleep(self.policy.delay(failures))
                continue
            raise SourceError(f"{self.name}: download failed with HTTP {resp.status}: {_xml_code(body)}")

    def _give_up_after(self, failures: int, what: str) -> None:
        if failures >= self.policy.attempts:
            raise SourceError(f"{self.name}: giving up at byte {self.offset} after {failures} attempts: {what}")

    def readinto(self, b) -> int:
        if self._done or len(b) == 0:
            return 0
        failures = 0
        while True:
            if self._resp is None:
                self._connect()
                if self._done:
                    return self._finish()
            try:
                n = self._resp.readinto(b)
            except (OSError, http.client.HTTPException):
                n = -1
            if n > 0:
                if self.crc is not None:
                    self.crc.update(bytes(memoryview(b)[:n]))
                self.offset += n
                if self._remaining > 0:
                    self._remaining -= n
                return n
            # End of this response: complete, or a drop (fewer bytes than Content-Length / than the file).
            short = self._remaining > 0 or (n < 0) or (self.size is not None and self.offset < self.size)
            self._drop()
            if not short:
                return self._finish()
            failures += 1
            self.reconnects += 1
            self._give_up_after(failures, "connection dropped mid-body")
            time.sleep(self.policy.delay(failures))

    def _finish(self) -> int:
        self._done = True
        if self.size is not None and self.offset != self.size:
            raise ChecksumMismatchError(f"{self.name}: received {self.offset} bytes, the source announced "
                                        f"{self.size}")
        if self.checksum and self.crc is not None and self.crc.value != str(self.checksum):
            raise ChecksumMismatchError(f"{self.name}: CRC-64 of the downloaded bytes is {self.crc.value}, the "
                                        f"source announced {self.checksum}")
        return 0


def _xml_code(body: str) -> str:
    """`Code: Message` out of an OSS-style XML error body, or the body's start."""
    code = re.search(r"<Code>([^<]*)</Code>", body)
    msg = re.search(r"<Message>([^<]*)</Message>", body)
    if code:
        return f"{code[1]}: {msg[1] if msg else ''}".strip()
    return body[:200]
