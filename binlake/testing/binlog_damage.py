"""Damaged binlogs for robustness tests: seeded mutants of real files, each decoded under a time and memory bound.

A mutant is a real file with one kind of damage: a flipped bit, a few overwritten bytes, a truncation (anywhere or
exactly at an event boundary), a chunk spliced out (whole events or arbitrary bytes) or a chunk duplicated. With
`fix_crc`, a flipped or overwritten event gets its CRC32 recomputed, so the parsers see the damage instead of the
checksum check. Every mutant is decoded in a worker process (RLIMIT_AS and a per-case timer), and its outcome is
checked against the intact file:

- a typed error (`BinlogError`) is always acceptable;
- a clean end must deliver every change of the intact file (row changes plus statement and DDL records), except
  that a file the server still had open (in-use flag set; relay logs, whose flag old servers never set) may lose
  the changes after a truncation point (a cut there is indistinguishable from the file's current end), and a
  relay log those after a chunk spliced out (its events carry the source's positions, which may skip), as may
  an open file without checksums (a garbled event can read whole and leave a "torn" tail);
- anything else (an untyped exception, a hang, a memory blow-up, a clean end with changes lost) is a failure.

Used by tests/unit/test_decoder_damage.py (a few thousand cases) and scripts/fuzz_decoder.py (larger runs).
"""

from __future__ import annotations

import io
import multiprocessing
import os
import random
import resource
import signal
import zlib
from collections import Counter
from collections.abc import Iterable, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path

from binlake.binlog.constants import HEADER_LEN, LOG_EVENT_BINLOG_IN_USE_F, EventType
from binlake.binlog.decoder import BinlogDecoder, DecodeOptions
from binlake.binlog.errors import BinlogError
from binlake.binlog.records import RowChange
from binlake.binlog.stream import EventStream
from binlake.testing.binlog_writer import BinlogWriter, column

KINDS = ("flip", "overwrite", "truncate", "truncate_boundary", "splice_events", "splice_bytes", "duplicate")


@dataclass
class Intact:
    """A source file and what its intact decode delivers."""

    name: str
    data: bytes
    events: list[tuple[int, int]]  # (position, size) of every event
    crc: bool
    open_ended: bool  # in use, or a relay log (whose in-use flag old servers never set): may end anywhere
    relay: bool  # positions refer to another file: a chunk missing from the middle cannot be seen
    changes: int
    changes_by_end: list[tuple[int, int]]  # (event end, changes delivered by events ending there or before)

    def changes_before(self, offset: int) -> int:
        n = 0
        for end, count in self.changes_by_end:
            if end > offset:
                break
            n = count
        return n


@dataclass
class Mutant:
    source: str
    seed: int
    kind: str
    detail: str
    data: bytes
    cut: int | None = None  # a truncation: the offset the file now ends at


@dataclass
class Outcome:
    source: str
    seed: int
    kind: str
    detail: str
    fix_crc: bool
    result: str  # ok | typed | untyped | timeout | memory
    changes: int = 0
    expected: int = 0  # the least changes a clean end must deliver
    error: str = ""

    @property
    def failed(self) -> bool:
        return self.result in ("untyped", "timeout", "memory") or (self.result == "ok" and self.changes < self.expected)


def _changes(data: bytes, name: str) -> tuple[int, dict[int, int], BinlogDecoder]:
    decoder = BinlogDecoder(DecodeOptions(commits=True))
    n = 0
    by_start: dict[int, int] = {}
    for r in decoder.decode_stream(io.BytesIO(data), name):
        if type(r) is RowChange or r.kind in ("statement", "ddl", "other", "load_data"):
            n += 1
            by_start[r.pos] = n
    return n, by_start, decoder


def count_changes(data: bytes, name: str) -> tuple[int, list[tuple[int, int]], bool]:
    """(changes, per-event-end running counts, in-use flag) of a clean decode; raises BinlogError."""
    n, by_start, decoder = _changes(data, name)
    # A change belongs to the event at r.pos: map event starts to their ends.
    stream = EventStream(io.BytesIO(data), name, allow_truncated=True)
    ends = {ev.pos: ev.pos + ev.size for ev in stream}
    running = sorted((ends.get(pos, pos), count) for pos, count in by_start.items())
    return n, running, decoder.results[-1].in_use


def load_intact(name: str, data: bytes) -> Intact:
    stream = EventStream(io.BytesIO(data), name, allow_truncated=True)
    events = [(ev.pos, ev.size) for ev in stream]
    crc = bool(stream.first_fde and stream.first_fde.has_crc)
    changes, by_end, in_use = count_changes(data, name)
    relay = not stream.local_positions
    return Intact(name, data, events, crc, in_use or relay, relay, changes, by_end)


def _fix_crc(buf: bytearray, pos: int, size: int) -> None:
    end = pos + size
    if end > len(buf) or size < HEADER_LEN + 4:
        return
    data = bytearray(buf[pos : end - 4])
    if data[4] == EventType.FORMAT_DESCRIPTION:
        data[17] &= ~LOG_EVENT_BINLOG_IN_USE_F & 0xFF
    buf[end - 4 : end] = zlib.crc32(data).to_bytes(4, "little")


def mutate(src: Intact, seed: int, fix_crc: bool, kind: str | None = None) -> Mutant:
    """One seeded mutant of `src` (kind chosen by the seed unless given)."""
    rng = random.Random(f"{src.name}/{seed}/{fix_crc}")
    kind = kind or rng.choice(KINDS)
    data = bytearray(src.data)
    events = src.events or [(4, max(0, len(data) - 4))]
    if kind in ("flip", "overwrite"):
        pos, size = rng.choice(events)
        # Headers and the first bytes of a body (lengths, bitmaps, post-headers) hold most of the structure.
        span = min(size, HEADER_LEN + 24) if rng.random() < 0.6 else size
        at = pos + rng.randrange(max(1, span))
        if kind == "flip":
            bit = rng.randrange(8)
            data[at] ^= 1 << bit
            detail = f"bit {bit} of byte {at} (event at {pos})"
        else:
            n = rng.randint(1, 8)
            data[at : at + n] = bytes(rng.randrange(256) for _ in range(len(data[at : at + n])))
            detail = f"{n} bytes at {at} (event at {pos})"
        if fix_crc and src.crc:
            _fix_crc(data, pos, size)
        return Mutant(src.name, seed, kind, detail, bytes(data))
    if kind == "truncate":
        cut = rng.randrange(4, len(data)) if len(data) > 4 else len(data)
        return Mutant(src.name, seed, kind, f"cut at {cut}", bytes(data[:cut]), cut)
    if kind == "truncate_boundary":
        cut = rng.choice(events)[0] if len(events) > 1 else len(data)
        return Mutant(src.name, seed, kind, f"cut at event boundary {cut}", bytes(data[:cut]), cut)
    if kind == "splice_events":
        if len(events) < 3:
            return mutate(src, seed, fix_crc, "splice_bytes")
        i = rng.randrange(1, len(events) - 1)
        j = rng.randrange(i + 1, min(len(events), i + 4) + 1)
        a = events[i][0]
        b = events[j][0] if j < len(events) else len(data)
        return Mutant(src.name, seed, kind, f"events {i}..{j - 1} ({a}:{b}) removed", bytes(data[:a] + data[b:]),
                      a if b == len(data) or src.relay else None)
    if kind == "splice_bytes":
        a = rng.randrange(4, max(5, len(data) - 1))
        b = min(len(data), a + rng.randint(1, 300))
        out = bytes(data[:a] + data[b:])
        # The event the cut starts in now runs past the end of the file: a torn last event (a truncation).
        # (Without checksums, an open file whose event at the cut reads whole, garbled, and leaves less than a
        # header behind looks just like one whose last event is torn.)
        loose = src.relay or (src.open_ended and not src.crc)
        torn = next((p for p, n in events if p <= a < p + n and (p + n > len(out) or loose)), None)
        return Mutant(src.name, seed, kind, f"bytes {a}:{b} removed", out, torn)
    if kind == "duplicate":
        if len(events) < 2:
            return mutate(src, seed, fix_crc, "flip")
        i = rng.randrange(1, len(events))
        a, size = events[i]
        return Mutant(src.name, seed, kind, f"event at {a} written twice", bytes(data[: a + size] + data[a:]))
    raise ValueError(f"unknown mutation kind {kind!r}")


def expected_changes(src: Intact, m: Mutant) -> int:
    """The least changes a clean decode of the mutant must deliver."""
    if m.cut is not None and src.open_ended:
        return src.changes_before(m.cut)
    return src.changes


# -- bounded execution ------------------------------------------------------------------------------------------


class _CaseTimeout(BaseException):
    pass


def _alarm(_signum, _frame):
    raise _CaseTimeout()


_CORPUS: dict[str, Intact] = {}


def _init_worker(corpus: dict[str, Intact], mem_bytes: int) -> None:
    _CORPUS.clear()
    _CORPUS.update(corpus)
    if mem_bytes:
        resource.setrlimit(resource.RLIMIT_AS, (mem_bytes, mem_bytes))
    signal.signal(signal.SIGALRM, _alarm)


def decode_outcome(data: bytes, name: str) -> tuple[str, int, str]:
    """(ok | typed | untyped, changes delivered, error text) of one decode through the in-process API."""
    try:
        n, _, decoder = _changes(data, name)
        if decoder.table_errors:  # a table held back (its TABLE_MAP unreadable): decode and stats exit non-zero
            exc = decoder.table_errors[0]
            return "typed", n, f"{type(exc).__name__}: {exc}"
    except BinlogError as exc:
        return "typed", 0, f"{type(exc).__name__}: {exc}"
    except MemoryError:
        raise
    except Exception as exc:
        return "untyped", 0, f"{type(exc).__name__}: {exc}"
    return "ok", n, ""


def _run_batch(source: str, seeds: Sequence[int], fix_crc: bool, timeout: float) -> list[Outcome]:
    src = _CORPUS[source]
    out = []
    for seed in seeds:
        m = mutate(src, seed, fix_crc)
        o = Outcome(source, seed, m.kind, m.detail, fix_crc, "ok", expected=expected_changes(src, m))
        signal.setitimer(signal.ITIMER_REAL, timeout)
        try:
            o.result, o.changes, o.error = decode_outcome(m.data, source)
        except _CaseTimeout:
            o.result, o.error = "timeout", f"no result within {timeout} s"
        except MemoryError:
            o.result, o.error = "memory", "MemoryError under the address-space limit"
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
        out.append(o)
    return out


@dataclass
class Report:
    outcomes: list[Outcome] = field(default_factory=list)

    @property
    def failures(self) -> list[Outcome]:
        return [o for o in self.outcomes if o.failed]

    def counts(self) -> dict[str, int]:
        c = Counter(o.result for o in self.outcomes)
        c["lossy_ok"] = sum(1 for o in self.outcomes if o.result == "ok" and o.changes < o.expected)
        return dict(c)

    def errors_by_type(self) -> dict[str, int]:
        return dict(Counter(o.error.split(":", 1)[0] for o in self.outcomes if o.result == "typed"))


def run_mutants(corpus: Iterable[Intact], cases_per_source: int, seed: int = 0, workers: int = 2,
                timeout: float = 20.0, mem_bytes: int = 1 << 30, batch: int = 40) -> Report:
    """Decode `cases_per_source` mutants of each source, with and without recomputed CRCs (half each)."""
    corpus = {s.name: s for s in corpus}
    tasks = []
    for name in corpus:
        seeds = [seed * 1_000_003 + k for k in range(cases_per_source)]
        for fix_crc in (False, True):
            half = seeds[fix_crc::2]
            for k in range(0, len(half), batch):
                tasks.append((name, half[k : k + batch], fix_crc))
    report = Report()

    ctx = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(workers, mp_context=ctx, initializer=_init_worker,
                             initargs=(corpus, mem_bytes)) as pool:
        futures = [(t, pool.submit(_run_batch, *t, timeout)) for t in tasks]
        for (name, seeds, fix_crc), fut in futures:
            try:
                report.outcomes.extend(fut.result(timeout=timeout * len(seeds) + 60))
            except Exception as exc:  # a worker died (e.g. killed by the memory limit inside C code)
                report.outcomes.extend(Outcome(name, s, "?", "", fix_crc, "memory", error=repr(exc)) for s in seeds)
    return report


def fixture_corpus(root: os.PathLike, max_bytes: int = 200_000) -> list[Intact]:
    """Every fixture binlog under `root` that decodes cleanly and is at most `max_bytes` long."""
    out = []
    for path in sorted(Path(root).rglob("*")):
        if not path.is_file() or path.suffix in (".md", ".json", ".gz") or "plaintext" in path.name:
            continue
        data = path.read_bytes()
        if len(data) > max_bytes or len(data) < 4:
            continue
        name = str(path.relative_to(root))
        try:
            out.append(load_intact(name, data))
        except BinlogError:
            continue
    return out


def _one(data: bytes, name: str, timeout: float) -> tuple[str, int, str]:
    signal.setitimer(signal.ITIMER_REAL, timeout)
    try:
        return decode_outcome(data, name)
    except _CaseTimeout:
        return "timeout", 0, f"no result within {timeout} s"
    except MemoryError:
        return "memory", 0, "MemoryError under the address-space limit"
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)


def bounded_outcome(data: bytes, name: str = "damaged.bin", timeout: float = 60.0, mem_bytes: int = 1 << 30
                    ) -> tuple[str, int, str]:
    """decode_outcome of one file in a fresh worker process under the time and address-space limits."""
    ctx = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(1, mp_context=ctx, initializer=_init_worker, initargs=({}, mem_bytes)) as pool:
        try:
            return pool.submit(_one, data, name, timeout).result(timeout=timeout + 60)
        except Exception as exc:  # the worker died
            return "memory", 0, repr(exc)


def writer_corpus(seed: int = 0) -> list[Intact]:
    """Files the project's binlog writer makes (MySQL 8.0 layout): row changes of varied column types, closed by
    ROTATE or STOP or still in use, CRC32 or not, FULL or MINIMAL metadata, GTIDs or anonymous."""
    rng = random.Random(seed)
    types = ["int", "bigint unsigned", "tinyint", "smallint", "mediumint", "decimal(12,3)", "double", "float",
             "varchar(40)", "char(8)", "text", "blob", "datetime(3)", "timestamp(6)", "date", "time(2)", "year",
             "json", "enum('a','bb','ccc')", "set('x','y','z')", "bit(5)", "varbinary(16)"]

    def value(sql: str, i: int):
        if rng.random() < 0.15:
            return None
        if sql.startswith(("int", "tinyint", "smallint", "mediumint")):
            return rng.randint(-100, 100)
        if sql.startswith("bigint"):
            return rng.randint(0, 2**63)
        if sql.startswith("decimal"):
            return Decimal(f"{rng.randint(-99999, 99999)}.{rng.randint(0, 999):03d}")
        if sql in ("double", "float"):
            return rng.choice([0.5, -1.25, 3.0])
        if sql.startswith(("varchar", "char", "text")):
            return "".join(rng.choice("abcdé") for _ in range(rng.randint(0, 8)))
        if sql.startswith(("blob", "varbinary")):
            return bytes(rng.randrange(256) for _ in range(rng.randint(0, 10)))
        if sql.startswith("datetime"):
            return f"2024-0{rng.randint(1, 9)}-1{rng.randint(0, 9)} 12:34:56.{rng.randint(0, 999):03d}"
        if sql.startswith("timestamp"):
            return f"2024-05-0{rng.randint(1, 9)} 01:02:03.{rng.randint(0, 999999):06d}"
        if sql == "date":
            return f"2023-1{rng.randint(0, 2)}-0{rng.randint(1, 9)}"
        if sql.startswith("time"):
            return f"{rng.randint(0, 23):02d}:15:00.{rng.randint(0, 99):02d}"
        if sql == "year":
            return rng.randint(1901, 2155)
        if sql == "json":
            return rng.choice(['{"a": 1}', "[1, 2, 3]", '"s"', "null"])
        if sql.startswith("enum"):
            return rng.choice(["a", "bb", "ccc"])
        if sql.startswith("set"):
            return rng.choice(["", "x", "x,z"])
        if sql.startswith("bit"):
            return rng.randint(0, 31)
        return i

    out = []
    for n, (ending, checksum, metadata, gtid) in enumerate(
            [("rotate", True, "FULL", True), ("stop", False, "MINIMAL", False), ("open", True, "FULL", False),
             ("stop", True, "MINIMAL", True)]):
        buf = io.BytesIO()
        w = BinlogWriter(buf, checksum=checksum, row_metadata=metadata, timestamp=1_700_000_000 + n,
                         start_gtid="3e11fa47-71ca-11e1-9e33-c80aa9429562:1" if gtid else None)
        tables = []
        for t in range(3):
            sqls = ["int", *rng.sample(types, 5)]
            cols = [column(s, f"c{i}", i, nullable=i > 0) for i, s in enumerate(sqls)]
            tables.append((w.define_table(10 + t, "shop", f"t{t}", cols, [0]), sqls))
        w.query("CREATE TABLE shop.t0 (c0 int primary key)", database="shop", timestamp=1_700_000_100)
        for k in range(8):
            tm, sqls = rng.choice(tables)
            with w.transaction(timestamp=1_700_000_200 + k) as tx:
                rows = [[k * 100 + i] + [value(s, i) for s in sqls[1:]] for i in range(rng.randint(1, 6))]
                tx.insert(tm, rows)
                if rng.random() < 0.5:
                    tx.update(tm, [(r, [r[0]] + [value(s, 0) for s in sqls[1:]]) for r in rows[:2]])
                if rng.random() < 0.4:
                    tx.delete(tm, rows[-1:])
        if ending == "rotate":
            w.rotate("mysql-bin.000002", timestamp=1_700_000_900)
        elif ending == "stop":
            w.stop(timestamp=1_700_000_900)
        else:
            w.flush()
        out.append(load_intact(f"writer-{n}-{ending}.000001", buf.getvalue()))
    return out
