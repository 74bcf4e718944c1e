"""Per-table isolation: a table whose changes cannot be applied is held back alone; every other table goes on.

A table is held back when its rows cannot be decoded (a TABLE_MAP the schema version does not describe, no
schema at all under MINIMAL metadata, values that do not convert) or its current table cannot take them (a
schema change or backfill that cannot be applied, partial row images, a failing merge). Then, in that batch:

- its rows are left out: nothing of the batch reaches its current table (a merge already begun is restored to
  the version before the batch, its registry entry kept), and a table held while decoding gets no history either;
- every other table is merged and the batch is published, so the watermark moves;
- the pending batch's manifest records the hold: table, error, first failing file and position, and the pieces
  of binlog it holds back (the batch's file ranges, and whether their history rows were already appended).

While a table is held, every later batch leaves it out too and adds its file ranges to the hold, so the table's
changes are never applied out of order and never lost: they stay in the binlog files (landing storage), named
by the holds. `held_tables` reads them back from the manifests. The run ends with TablesHeldBack (exit code
"quarantined"), one line per held table.

Catching up: fix the cause (a schema snapshot, a newer binlake), then `binlake quarantine release DB.TABLE`
runs a catch-up batch for that table alone (`binlake.quality.stages.release_table`): it decodes the held pieces again, in
binlog order, appends the history rows not yet appended, runs the gates and merges them, and closes the hold.
The control table does not change (those files were published long ago). A table that still fails is held again
with the same pieces.
"""

from __future__ import annotations

from ..exitcodes import ExitCode
from .pending import BatchStore, PendingBatch


def one_line(text: str) -> str:
    return " ".join(str(text).split())


def held_line(name: str, hold: dict) -> str:
    return f"{name}: held back at {hold.get('file')}:{hold.get('pos')}: {one_line(hold.get('error', ''))}"


class TablesHeldBack(RuntimeError):
    """Some tables of the batch were held back (the others were ingested). One line per table: db.table, file,
    position and the cause. `summary` is the batch's RunSummary."""

    exit_code = ExitCode.QUARANTINED

    def __init__(self, held: dict[str, dict], summary=None) -> None:
        self.held = held
        self.summary = summary
        lines = [held_line(name, h) for name, h in sorted(held.items())]
        super().__init__(f"{len(held)} table(s) held back, every other table was ingested; their changes are kept: "
                         "fix the cause, then `binlake quarantine release DB.TABLE`\n  " + "\n  ".join(lines))

    def __reduce__(self):  # picklable across processes
        return (TablesHeldBack, (self.held, None))


def batch_pieces(pb: PendingBatch, appended: bool) -> list[dict]:
    """The batch's file ranges as pieces of a hold."""
    return [{"file": f["file"], "file_seq": f["file_seq"], "start": f["start_pos"], "end": f["end_pos"],
             "appended": appended} for f in pb.files if f["end_pos"] > f["start_pos"]]


def held_tables(store: BatchStore) -> dict[str, dict]:
    """Tables held back now (published batches, in order): name -> the first hold's error, file, position and
    batch (`since`), and every piece of binlog held back since, in binlog order."""
    holds: dict[str, dict] = {}
    for pb in sorted(store.all(), key=lambda b: b.batch):
        if pb.state != "published":
            continue
        for name in pb.catchup:
            holds.pop(name, None)
        for name, hold in pb.held.items():
            prev = holds.get(name)
            if prev is None:
                holds[name] = {**hold, "since": pb.batch, "pieces": list(hold.get("pieces", []))}
            else:
                prev["pieces"] = prev["pieces"] + list(hold.get("pieces", []))
    return holds
