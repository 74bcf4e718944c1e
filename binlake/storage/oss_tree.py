"""`FileTree` over an OSS prefix, so the DDL snapshot store works on `oss://bucket/prefix` as on a directory.

Directories are key prefixes ending in '/'; `list_dirs`/`list_files` list one level (a '/' delimiter). Every
object is written whole by one PUT, so a reader never sees a half-written file.
"""

from __future__ import annotations

import oss2

from .oss_client import OssLocation, OssSettings, with_retries


class OssTree:
    def __init__(self, location: str, settings: OssSettings | None = None) -> None:
        self.location = OssLocation.parse(location)
        self.settings = settings or OssSettings.from_env()
        self.bucket = self.settings.bucket(self.location.bucket)

    def __repr__(self) -> str:
        return f"OssTree({self.location.url()!r})"

    def _key(self, path: str) -> str:
        parts = path.strip("/").split("/") if path.strip("/") else []
        if path.startswith("/") or "\\" in path or any(p in ("", ".", "..") for p in parts):
            raise ValueError(f"path {path!r} escapes the store {self.location.url()}")
        return self.location.prefix + "/".join(parts)

    def read_text(self, path: str) -> str:
        key = self._key(path)

        def get() -> bytes | None:
            try:
                return self.bucket.get_object(key).read()
            except oss2.exceptions.NoSuchKey:
                return None

        data = with_retries(f"reading {self.location.url(key)}", get, self.settings.retries)
        if data is None:
            raise FileNotFoundError(f"{self.location.url(key)} does not exist")
        return data.decode("utf-8")

    def write_text(self, path: str, text: str) -> None:
        key = self._key(path)
        with_retries(f"writing {self.location.url(key)}",
                     lambda: self.bucket.put_object(key, text.encode("utf-8"),
                                                    headers={"Content-Type": "text/plain; charset=utf-8"}),
                     self.settings.retries)

    def exists(self, path: str) -> bool:
        key = self._key(path)
        if with_retries(f"checking {self.location.url(key)}", lambda: self.bucket.object_exists(key),
                        self.settings.retries):
            return True
        dirs, files = self._level(path)
        return bool(dirs or files)

    def _level(self, path: str) -> tuple[list[str], list[str]]:
        """(sub-directory names, file names) directly under `path`."""
        base = self._key(path)
        base = base + "/" if base and not base.endswith("/") else base
        entries = with_retries(f"listing {self.location.url(base)}", lambda: list(oss2.ObjectIteratorV2(
            self.bucket, prefix=base, delimiter="/", max_keys=1000)), self.settings.retries)
        dirs = sorted(e.key[len(base):].rstrip("/") for e in entries if e.is_prefix())
        files = sorted(e.key[len(base):] for e in entries if not e.is_prefix() and e.key != base)
        return dirs, files

    def list_dirs(self, path: str) -> list[str]:
        return self._level(path)[0]

    def list_files(self, path: str) -> list[str]:
        return self._level(path)[1]
