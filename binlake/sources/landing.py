"""Landing storage on a local directory: where fetched binlog files are put, verified, and found again.

Layout: `LANDING/<instance>/<lineage>/<file>` (lineages are kept apart: primary and standby files share names).
A download goes to `.<file>.part` next to its final place (resumed from its length on the next attempt), is
verified, unpacked when it is a .tar, then renamed; `<file>.source.json` beside it keeps what the source
announced, so a second fetch of the same file is a no-op.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

from .base import SourceError, SourceFile, safe_file_name


def landing_dir(landing: str | Path, instance: str, lineage: str) -> Path:
    root = Path(landing).resolve()
    d = (root / safe_file_name(instance, "instance id") / safe_file_name(lineage, "lineage")).resolve()
    if root not in d.parents:
        raise SourceError(f"landing: {d} is outside {root}")
    return d


def landed_path(landing: str | Path, instance: str, f: SourceFile) -> Path:
    return landing_dir(landing, instance, f.lineage) / safe_file_name(f.name, f"{instance} file list")


def _sidecar(path: Path) -> Path:
    return path.with_name(path.name + ".source.json")


def announced(f: SourceFile) -> dict:
    return {"name": f.name, "lineage": f.lineage, "size": f.size, "checksum": f.checksum,
            "packed": f.extra.get("packed", False)}


def already_landed(path: Path, f: SourceFile) -> bool:
    """True when `path` holds this very file, verified on an earlier fetch (same announced size and checksum)."""
    side = _sidecar(path)
    if not path.exists() or not side.exists():
        return False
    try:
        seen = json.loads(side.read_text())
    except ValueError:
        return False
    return {k: seen.get(k) for k in ("size", "checksum")} == {"size": f.size, "checksum": f.checksum}


def part_path(path: Path) -> Path:
    return path.with_name(f".{path.name}.part")


def unpack_tar(archive: Path, name: str, out: Path) -> None:
    """Extract the one member called `name` (a regular file) from `archive` into `out`."""
    import tarfile  # here: only packed downloads need it (an ingest of local files never does)

    try:
        with tarfile.open(archive, mode="r:*") as tar:
            members = [m for m in tar.getmembers() if m.isfile()]
            for m in members:
                if os.path.basename(m.name) != m.name.lstrip("./") or ".." in Path(m.name).parts:
                    raise SourceError(f"{archive.name}: refusing archive member {m.name!r} (a path, not a name)")
            match = [m for m in members if m.name.lstrip("./") == name]
            if not match:
                found = ", ".join(m.name for m in members) or "nothing"
                raise SourceError(f"{archive.name}: no member {name!r} in the archive (it holds {found})")
            src = tar.extractfile(match[0])
            assert src is not None
            with src, open(out, "wb") as dst:
                shutil.copyfileobj(src, dst, 1 << 20)
    except tarfile.TarError as exc:
        raise SourceError(f"{archive.name}: not a readable tar archive: {exc}") from None


def commit_landed(tmp: Path, path: Path, f: SourceFile) -> Path:
    """Verified download `tmp` -> its final `path` (unpacking a .tar), plus the sidecar; returns `path`."""
    if f.extra.get("packed"):
        unpacked = path.with_name(f".{path.name}.unpacked")
        unpack_tar(tmp, f.name, unpacked)
        os.replace(unpacked, path)
        tmp.unlink()
    else:
        os.replace(tmp, path)
    _sidecar(path).write_text(json.dumps({**announced(f), "landed_size": path.stat().st_size}, sort_keys=True))
    return path
