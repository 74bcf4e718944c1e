"""The DDL snapshot store: where snapshots live and how they are laid out (local directory or OSS).

Layout (one tree per source instance):

    STORE/<instance>/snapshots/<captured YYYYmmddTHHMMSSZ>__<binlog file>__<binlog pos>/
        manifest.json   capture time (UTC), binlog position, server facts, per-table DDL hashes, content hash
        <db>.sql        that database's CREATE TABLE statements, for people
        tables.json     the parsed column lists, for code
    STORE/<instance>/latest.json   the newest snapshot's directory name and content hash

A snapshot is written only when its content hash (the DDL with AUTO_INCREMENT counters removed, plus the server
facts that decide decoding) differs from the latest one. A plain directory of `<db>.sql` files is also accepted
as a store: one snapshot valid from the start of whatever is decoded.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from ..binlog.api import sequence_number
from .ddl import Catalog, apply_ddl, parse_create_table

_AUTO_INC = re.compile(r"\s+AUTO_INCREMENT=\d+", re.I)
DECODING_FACTS = ("binlog_format", "binlog_row_image", "binlog_row_metadata", "binlog_row_value_options",
                  "character_set_server", "collation_server", "time_zone", "version")


class FileTree(Protocol):
    """The little a store needs from a file system: local directories now, OSS buckets through the sources."""

    def read_text(self, path: str) -> str: ...
    def write_text(self, path: str, text: str) -> None: ...
    def exists(self, path: str) -> bool: ...
    def list_dirs(self, path: str) -> list[str]: ...
    def list_files(self, path: str) -> list[str]: ...


class LocalTree:
    def __init__(self, root: str | Path) -> None:
        self.root = Path(root)

    def _p(self, path: str) -> Path:
        p = (self.root / path).resolve()
        if self.root.resolve() not in (p, *p.parents):
            raise ValueError(f"path {path!r} escapes the store {self.root}")
        return p

    def read_text(self, path: str) -> str:
        return self._p(path).read_text(encoding="utf-8")

    def write_text(self, path: str, text: str) -> None:
        target = self._p(path)
        target.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=".tmp-")
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        os.replace(tmp, target)

    def exists(self, path: str) -> bool:
        return self._p(path).exists()

    def list_dirs(self, path: str) -> list[str]:
        p = self._p(path)
        return sorted(d.name for d in p.iterdir() if d.is_dir()) if p.is_dir() else []

    def list_files(self, path: str) -> list[str]:
        p = self._p(path)
        return sorted(f.name for f in p.iterdir() if f.is_file()) if p.is_dir() else []


@dataclass
class Snapshot:
    """The DDL of a set of tables at one binlog position. `binlog_file` None: valid from the start of any range."""

    captured_at: str
    binlog_file: str | None
    binlog_pos: int | None
    ddl: dict[str, str]  # "db.table" -> CREATE TABLE text
    server: dict[str, Any] = field(default_factory=dict)
    db_charsets: dict[str, str] = field(default_factory=dict)
    name: str = ""

    @property
    def position(self) -> tuple[int, int] | None:
        if self.binlog_file is None or self.binlog_pos is None:
            return None
        return sequence_number(self.binlog_file), self.binlog_pos

    def table_hashes(self) -> dict[str, str]:
        return {t: hashlib.sha256(normalize_ddl(sql).encode()).hexdigest()[:16] for t, sql in sorted(self.ddl.items())}

    def content_hash(self) -> str:
        facts = {k: self.server.get(k) for k in DECODING_FACTS}
        payload = json.dumps({"tables": self.table_hashes(), "facts": facts}, sort_keys=True)
        return hashlib.sha256(payload.encode()).hexdigest()[:24]

    @property
    def is_mariadb(self) -> bool | None:
        version = self.server.get("version")
        return None if version is None else "mariadb" in str(version).lower()


def normalize_ddl(sql: str) -> str:
    return _AUTO_INC.sub("", sql.strip())


def _dir_name(s: Snapshot) -> str:
    stamp = s.captured_at.replace("-", "").replace(":", "").split(".")[0].replace("+0000", "Z")
    if not stamp.endswith("Z"):
        stamp += "Z"
    return f"{stamp}__{s.binlog_file or 'start'}__{s.binlog_pos or 0}"


class SnapshotStore:
    def __init__(self, tree: FileTree, instance: str = "default") -> None:
        if not re.fullmatch(r"[A-Za-z0-9_.-]+", instance):
            raise ValueError(f"instance name {instance!r} may hold letters, digits, '.', '_' and '-' only")
        self.tree = tree
        self.instance = instance

    @classmethod
    def at(cls, location: str | Path, instance: str = "default") -> SnapshotStore:
        """A store in a local directory, or on OSS for `oss://bucket/prefix` (endpoint and keys from OSS_*)."""
        if str(location).startswith("oss://"):
            from ..storage.oss_tree import OssTree  # loads oss2 (about a second): only for OSS stores

            return cls(OssTree(str(location)), instance)
        return cls(LocalTree(location), instance)

    def _base(self) -> str:
        return f"{self.instance}/snapshots"

    def latest_info(self) -> dict | None:
        path = f"{self.instance}/latest.json"
        return json.loads(self.tree.read_text(path)) if self.tree.exists(path) else None

    def save(self, snapshot: Snapshot) -> tuple[bool, str]:
        """Store the snapshot unless nothing changed since the latest; returns (stored, directory name)."""
        latest = self.latest_info()
        digest = snapshot.content_hash()
        if latest and latest.get("content_hash") == digest:
            return False, latest["name"]
        name = _dir_name(snapshot)
        base = f"{self._base()}/{name}"
        by_db: dict[str, list[str]] = {}
        for qualified, sql in sorted(snapshot.ddl.items()):
            db = qualified.split(".", 1)[0]
            by_db.setdefault(db, []).append(normalize_ddl(sql).rstrip(";") + ";\n")
        for db, statements in by_db.items():
            self.tree.write_text(f"{base}/{_safe_file(db)}.sql", f"-- database {db}\n" + "\n".join(statements))
        tables = {}
        for qualified, sql in sorted(snapshot.ddl.items()):
            db = qualified.split(".", 1)[0]
            tables[qualified] = parse_create_table(sql, db, snapshot.db_charsets).to_dict()
        self.tree.write_text(f"{base}/tables.json", json.dumps(tables, indent=1, sort_keys=True))
        manifest = {
            "name": name,
            "captured_at": snapshot.captured_at,
            "binlog_file": snapshot.binlog_file,
            "binlog_pos": snapshot.binlog_pos,
            "server": snapshot.server,
            "db_charsets": snapshot.db_charsets,
            "tables": snapshot.table_hashes(),
            "content_hash": digest,
            "ddl": {t: normalize_ddl(sql) for t, sql in sorted(snapshot.ddl.items())},
        }
        self.tree.write_text(f"{base}/manifest.json", json.dumps(manifest, indent=1, sort_keys=True))
        self.tree.write_text(f"{self.instance}/latest.json", json.dumps({"name": name, "content_hash": digest}))
        return True, name

    def names(self) -> list[str]:
        return self.tree.list_dirs(self._base())

    def load(self, name: str) -> Snapshot:
        m = json.loads(self.tree.read_text(f"{self._base()}/{name}/manifest.json"))
        return Snapshot(m["captured_at"], m["binlog_file"], m["binlog_pos"], m["ddl"], m.get("server", {}),
                        m.get("db_charsets", {}), name)

    def all(self) -> list[Snapshot]:
        snaps = [self.load(n) for n in self.names()]
        return sorted(snaps, key=lambda s: (s.position or (-1, -1), s.captured_at))


def _safe_file(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]", "_", name)


def load_sql_dir(path: str | Path) -> Snapshot:
    """A directory of `<db>.sql` files of CREATE TABLE statements: one snapshot valid from the start."""
    root = Path(path)
    files = sorted(root.glob("*.sql"))
    if not files:
        raise ValueError(f"--schemas {path}: no <db>.sql files and no snapshot store found there")
    return _sql_snapshot([(str(f), f.stem, f.read_text(encoding="utf-8")) for f in files], root.name)


def load_sql_tree(tree: FileTree, label: str) -> Snapshot:
    """`load_sql_dir` for the top level of any FileTree (e.g. an OSS prefix)."""
    names = [n for n in tree.list_files("") if n.endswith(".sql")]
    if not names:
        raise ValueError(f"--schemas {label}: no <db>.sql files and no snapshot store found there")
    return _sql_snapshot([(f"{label}/{n}", n[:-4], tree.read_text(n)) for n in names], label.rstrip("/"))


def _sql_snapshot(sources: list[tuple[str, str, str]], label: str) -> Snapshot:
    """One snapshot from (origin, database, SQL text) triples of CREATE TABLE statements."""
    ddl: dict[str, str] = {}
    for origin, db, text in sources:
        catalog = Catalog()
        for statement in split_statements(text):
            effect = apply_ddl(catalog, statement, db)
            if effect.kind == "unparsed":
                raise ValueError(f"{origin}: cannot parse {statement[:80]!r}: {effect.error}")
            if effect.kind == "create_table":
                for qualified in effect.tables:
                    ddl[qualified] = statement
    return Snapshot("1970-01-01T00:00:00Z", None, None, ddl, {}, {}, f"sql-dir:{label}")


def split_statements(text: str) -> list[str]:
    """Split SQL text on semicolons outside quotes and comments."""
    out, buf, i, n = [], [], 0, len(text)
    quote = None
    while i < n:
        ch = text[i]
        if quote:
            buf.append(ch)
            if ch == "\\" and quote != "`" and i + 1 < n:
                buf.append(text[i + 1])
                i += 1
            elif ch == quote:
                quote = None
        elif ch in "'\"`":
            quote = ch
            buf.append(ch)
        elif text.startswith("--", i) or ch == "#":
            j = text.find("\n", i)
            i = n if j < 0 else j
            continue
        elif text.startswith("/*", i) and not text.startswith("/*!", i):
            j = text.find("*/", i + 2)
            i = n if j < 0 else j + 2
            continue
        elif ch == ";":
            stmt = "".join(buf).strip()
            if stmt:
                out.append(stmt)
            buf = []
        else:
            buf.append(ch)
        i += 1
    stmt = "".join(buf).strip()
    if stmt:
        out.append(stmt)
    return out


def open_schemas(location: str | Path, instance: str = "default") -> list[Snapshot]:
    """Every snapshot at `location`: a snapshot store, or a plain directory of `<db>.sql` files (either may be
    an `oss://bucket/prefix`)."""
    if str(location).startswith("oss://"):
        oss_store = SnapshotStore.at(str(location), instance)
        return oss_store.all() if oss_store.names() else [load_sql_tree(oss_store.tree, str(location))]
    root = Path(location)
    store = SnapshotStore.at(root, instance)
    if (root / instance / "snapshots").is_dir():
        return store.all()
    return [load_sql_dir(root)]
