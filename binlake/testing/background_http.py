"""A stdlib HTTP server on a background thread, the base of the local RDS and OSS servers."""

from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Self


class BackgroundHttpServer:
    """Serves one handler class on (host, port) from a daemon thread; start/stop, or use it as a context manager."""

    _httpd: ThreadingHTTPServer | None = None
    _thread: threading.Thread | None = None

    def _serve(self, handler: type[BaseHTTPRequestHandler], host: str, port: int, name: str) -> None:
        self._httpd = ThreadingHTTPServer((host, port), handler)
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(target=self._httpd.serve_forever, name=name, daemon=True)
        self._thread.start()

    def start(self) -> Self:
        raise NotImplementedError

    def stop(self) -> None:
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
            self._httpd = None

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
