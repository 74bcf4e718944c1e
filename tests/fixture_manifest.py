"""Reads ../shared/fixtures/binlogs/MANIFEST.md: per file, the event counts, checksum and what it predicts."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path


@dataclass
class ManifestEntry:
    path: Path
    flavor: str
    checksum: str
    events: dict[str, int] = field(default_factory=dict)
    content: str = ""
    notes: str = ""

    @property
    def is_text(self) -> bool:
        return self.checksum == "n/a" and "text" in self.flavor

    @property
    def bad_magic(self) -> bool:
        return "no binlog magic" in self.content or "bad magic" in self.notes.lower()

    @property
    def truncated(self) -> bool:
        return "TRUNCATED" in self.content or "TRUNCATED" in self.notes

    @property
    def fde_in_use(self) -> bool:
        return "FDE in-use flag set" in self.content


_COUNT = re.compile(r"^([A-Za-z0-9_:]+)x(\d+)$")


def read_manifest(binlogs_dir: Path) -> list[ManifestEntry]:
    text = (binlogs_dir / "MANIFEST.md").read_text()
    entries = []
    for line in text.splitlines():
        if not line.startswith("| fixtures/binlogs/"):
            continue
        cells = [c.strip() for c in line.strip().strip("|").split(" | ")]
        local, flavor, checksum, content, notes = cells[0], cells[5], cells[6], cells[7], cells[9]
        rel = local.removeprefix("fixtures/binlogs/")
        entry = ManifestEntry(binlogs_dir / rel, flavor, checksum, content=content, notes=notes)
        counts_part = content.split(" / ", 1)[0]
        for item in counts_part.split(","):
            m = _COUNT.match(item.strip())
            if m:
                entry.events[m.group(1)] = int(m.group(2))
        entries.append(entry)
    return entries
