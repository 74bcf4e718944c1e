"""The Kafka sink: row changes as Debezium-compatible change events, published exactly once.

Fed by what the lake ingest decodes (`binlake.lake.decode_task.decode_range`: whole transactions, each TABLE_MAP
named and checked by the schema timeline, values already in the lake's Arrow types), so a topic carries exactly
the changes the lake's history gets, with the same value mapping (docs/kafka.md):

- one topic per table, `PREFIX.db.table` (characters Kafka does not allow in names become `_`); key = the row
  identity's columns (primary key, else the first UNIQUE NOT NULL key) as a JSON object, null for tables with
  neither (those go to partition 0, in binlog order); value = `{before, after, source, op, ts_ms}`; every change
  of a key goes to one partition (murmur2 of the key, as Java clients hash), in binlog order;
- an update that changes the key is a delete of the old key and a create of the new one (as Debezium does);
- a tombstone (key, null value) follows every delete unless turned off;
- TRUNCATE is op `t` with a null key, on every partition of the table's topic;
- DDL goes to `PREFIX.schema-changes` (one partition, binlog order) with the statement and each changed table's
  resolved columns.

Exactly once: one transactional producer (idempotence on, `transactional.id` = binlake-PREFIX-NAME) and one Kafka
transaction per batch (a range of whole binlog transactions). The batch's end position is written inside the
same transaction to the compacted topic `PREFIX.binlake-offsets` (key = the publisher name), and a run starts
where the last committed record says. `init_transactions` fences an older instance and aborts its open
transaction, so a publisher killed at any point and run again publishes each change once to a `read_committed`
consumer; running it again over the same files publishes nothing.

A table whose changes cannot be decoded is held back alone (the others go on); the hold is part of the offsets
record, and `release` publishes its changes from there once the cause is fixed (docs/kafka.md).
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import re
import signal
import time
from collections import Counter, deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from itertools import chain, pairwise, repeat
from operator import itemgetter, length_hint
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from .. import __version__
from ..binlog.api import sequence_number
from ..binlog.coltypes import value_kind
from ..exitcodes import ExitCode, UnavailableError, UsageError
from ..lake.convert import TEXT_KINDS, value_text
from ..lake.decode_task import RangeResult, cyclic_gc_paused, decode_range
from ..lake.split import plan_ranges, transaction_starts
from ..schema.api import build_resolver
from ..schema.lifecycle import lifecycle_of
from ..schema.timeline import TableVersion, TimelineResolver

SCHEMA_TOPIC = "schema-changes"
OFFSETS_TOPIC = "binlake-offsets"
KILL_AT_ENV = "BINLAKE_FAULT_KILL_AT"
SLICE_BYTES = 1 << 20  # a batch is decoded, encoded and produced this many binlog bytes at a time
OPS = {"insert": "c", "update": "u", "delete": "d"}
_BAD_TOPIC_CHARS = re.compile(r"[^a-zA-Z0-9._-]")


class PublishError(Exception):
    """The batch could not be published (held tables, a refused message, a broker error): nothing of it was
    committed; the message names the table, file and position, or the broker's error."""

    exit_code = ExitCode.UNAVAILABLE


class HeldTables(PublishError):
    """A released table's changes still cannot be decoded (schema mismatch, no schema, unconvertible values)."""

    exit_code = ExitCode.SCHEMA_MISMATCH


@dataclass
class KafkaSinkOptions:
    bootstrap: str
    topic_prefix: str
    files: Sequence[str]
    schemas: str | None = None
    name: str = "default"  # the publisher: key of its offsets record, part of its transactional.id
    tables: object = None  # compiled regex on db.table
    databases: set[str] | None = None
    tombstones: bool = True
    partitions: int = 3  # for the table topics binlake creates (existing topics keep theirs)
    replication: int = -1  # replication factor of created topics; -1: the broker's default
    batch_bytes: int = 16 << 20  # one Kafka transaction per range of about this many binlog bytes
    slice_bytes: int = SLICE_BYTES  # a batch is decoded, encoded and produced this many binlog bytes at a time
    producer_config: dict = field(default_factory=dict)  # extra librdkafka settings
    timeout: float = 60.0  # seconds for broker calls (metadata, init, commit)


@dataclass
class PublishSummary:
    batches: int = 0
    changes: Counter = field(default_factory=Counter)  # (db.table, op letter) -> events
    messages: int = 0  # every record produced: changes, tombstones, truncates, schema changes, offsets
    schema_changes: int = 0
    start: dict | None = None  # the committed position the run started from
    end: dict | None = None  # the committed position it ended at
    seconds: dict = field(default_factory=dict)  # wall seconds per stage
    cpu_seconds: dict = field(default_factory=dict)  # CPU seconds of the process (librdkafka's threads too) per stage
    held: dict = field(default_factory=dict)  # db.table -> its hold: held back alone, the others published
    released: list = field(default_factory=list)

    def text(self) -> str:
        if not self.batches:
            where = f" (at {self.start['file']}:{self.start['pos']})" if self.start else ""
            return f"nothing new to publish{where}"
        lines = [f"published {self.batches} batch(es), {sum(self.changes.values())} change events, "
                 f"{self.schema_changes} schema changes; committed position {self.end['file']}:{self.end['pos']}"]
        for table in sorted({t for t, _ in self.changes}):
            lines.append(f"  {table}: " + ", ".join(f"{op} {self.changes[(table, op)]}" for op in "cudt"
                                                   if self.changes[(table, op)]))
        for table in self.released:
            lines.append(f"  released {table}: its held-back changes published")
        lines.append("  time: " + ", ".join(f"{k} {v:.2f} s" for k, v in self.seconds.items()))
        return "\n".join(lines)


def topic_name(*parts: str) -> str:
    """`prefix.db.table` with characters Kafka refuses in topic names replaced by `_` (as Debezium does)."""
    return _BAD_TOPIC_CHARS.sub("_", ".".join(parts))


def transactional_id(prefix: str, name: str) -> str:
    return f"binlake-{prefix}-{name}"


# -- values: Arrow columns (the lake's types) -> JSON text fragments, a column at a time ----------------------------

def _quote(strings: pa.Array) -> pa.Array:
    return pc.binary_join_element_wise('"', strings, '"', "")


def _needs_escape(arr: pa.Array) -> bool:
    """Whether any text of a string array may need JSON escapes (a control character, a quote or a backslash): a
    byte scan of its data (null slots' bytes too: at worst a needless careful pass)."""
    offsets, data = arr.buffers()[1:3]
    if data is None:
        return False
    ends = np.frombuffer(offsets, np.int64 if pa.types.is_large_string(arr.type) else np.int32,
                         len(arr) + 1, arr.offset * (8 if pa.types.is_large_string(arr.type) else 4))
    raw = np.frombuffer(data, np.uint8)[ends[0]:ends[-1]]
    return bool(raw.size) and bool(((raw < 0x20) | (raw == 0x22) | (raw == 0x5C)).any())


def _json_text(arr: pa.Array) -> tuple:
    """Text as the parts of JSON string literals (null stays null): `('"', text, '"')` when nothing needs escaping
    (the quotes join the literals around), else the escaped literals. Backslash, quote and common controls are
    escaped in Arrow; a column holding other control characters is encoded by the json module."""
    if not len(arr) or not _needs_escape(arr):
        return ('"', arr, '"')  # nothing to escape (the common case)
    if pc.any(pc.match_substring_regex(arr, "[\\x00-\\x08\\x0b\\x0c\\x0e-\\x1f]")).as_py():
        return (pa.array([None if v is None else json.dumps(v, ensure_ascii=False) for v in arr.to_pylist()],
                         pa.string()),)
    s = pc.replace_substring(arr, "\\", "\\\\")
    s = pc.replace_substring(s, '"', '\\"')
    s = pc.replace_substring(s, "\n", "\\n")
    s = pc.replace_substring(s, "\r", "\\r")
    s = pc.replace_substring(s, "\t", "\\t")
    return ('"', s, '"')


def _json_strings(arr) -> pa.Array:
    """Text as JSON string literals, one per row (null stays null)."""
    if isinstance(arr, pa.ChunkedArray):
        arr = arr.combine_chunks()
    parts = _json_text(arr)
    return parts[0] if len(parts) == 1 else _join(*parts)


def value_parts(arr, plain: bool = False) -> tuple:
    """One column as JSON text per row, as join parts: literal strings and arrays whose concatenation is each row's
    JSON value (`null` for nulls), by the lake's value mapping: integers and floats as numbers, DECIMAL (and BIGINT
    UNSIGNED, BIT(64)) as strings, DATE `YYYY-MM-DD`, DATETIME `YYYY-MM-DDTHH:MM:SS.ffffff`, TIMESTAMP the same in
    UTC with `Z`, TIME and text as strings, binary as base64, VECTOR as an array of numbers. Quotes around a column
    without nulls are literal parts (they merge with the literals around them: no pass of their own); a column of
    nulls only is the literal `null`. `plain`: text known to need no JSON escape (the decoder's DECIMAL and
    temporal text, history_table's `text`)."""
    if isinstance(arr, pa.ChunkedArray):
        arr = arr.combine_chunks()
    if len(arr) and arr.null_count == len(arr):
        return ("null",)
    t = arr.type
    if plain and pa.types.is_string(t):
        parts: tuple = ('"', arr, '"')
    elif pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_boolean(t):
        parts = (arr.cast(pa.string()),)
    elif pa.types.is_decimal(t) or pa.types.is_date(t):
        parts = ('"', value_text(arr), '"')
    elif pa.types.is_timestamp(t):  # a zone-aware (UTC) one is written as its UTC wall time with Z
        text = pc.replace_substring(arr.cast(pa.timestamp(t.unit)).cast(pa.string()), " ", "T", max_replacements=1)
        parts = ('"', text, '"' if t.tz is None else 'Z"')
    elif pa.types.is_string(t) or pa.types.is_large_string(t):
        parts = _json_text(arr)
    elif pa.types.is_binary(t) or pa.types.is_large_binary(t):
        parts = (pa.array([None if v is None else '"' + base64.b64encode(v).decode() + '"' for v in arr.to_pylist()],
                          pa.string()),)
    else:  # lists (VECTOR) and anything else: the json module
        parts = (pa.array([None if v is None else json.dumps(v, ensure_ascii=False, default=str)
                           for v in arr.to_pylist()], pa.string()),)
    if arr.null_count:  # one string per row, `null` where null
        return (pc.fill_null(parts[0] if len(parts) == 1 else _join(*parts), "null"),)
    return parts


def json_fragments(arr) -> pa.Array:
    """One column as JSON text per row (`null` for nulls): see value_parts."""
    return _join(*value_parts(arr), rows=len(arr))


def _take(parts: tuple, how: str, rows: pa.Array) -> tuple:
    """The parts with their arrays' rows selected (`how`: "filter" by a mask, "take" by indexes)."""
    return tuple(p if isinstance(p, str) else getattr(p, how)(rows) for p in parts)


def _object_parts(names: Sequence[str], fragments: Sequence[tuple]) -> list:
    """The arguments of _join that write rows as JSON objects {name: value, ...}: literal pieces between the
    columns' value parts, so one join can write a whole event."""
    if not names:
        return ["{}"]
    parts: list = []
    for i, (name, frag) in enumerate(zip(names, fragments, strict=True)):
        parts.append(("{" if i == 0 else ",") + json.dumps(name, ensure_ascii=False) + ":")
        parts.extend(frag)
    parts.append("}")
    return parts


def _join(*parts, rows: int | None = None) -> pa.Array:
    """Concatenate literal strings and per-row strings (adjacent literals merged first); `rows`: the row count, for
    parts that may all be literals (a column of nulls only is one)."""
    merged: list = []
    for part in parts:
        if isinstance(part, pa.Scalar):
            part = part.as_py()
        if isinstance(part, str) and merged and isinstance(merged[-1], str):
            merged[-1] += part
        else:
            merged.append(part)
    if all(isinstance(p, str) for p in merged):
        if rows is None:
            raise ValueError("nothing per row to join")
        return pa.repeat(pa.scalar("".join(merged)), rows)
    return pc.binary_join_element_wise(*[pa.scalar(p) if isinstance(p, str) else p for p in merged],
                                       pa.scalar(""))


# -- one decoded range -> ordered messages ---------------------------------------------------------------------------

@dataclass
class Chunk:
    """Records of one topic: keys and values (bytes-like or None), a fixed partition (None: by key) and each
    record's order key (file sequence, position, offset in a payload, row, then k for several records of one row:
    one number for the chunk, or one per record)."""

    topic: str
    keys: list
    values: list
    partition: int | None
    seq: np.ndarray
    pos: np.ndarray
    sub: np.ndarray
    row: np.ndarray
    k: int | np.ndarray = 0

    def __len__(self) -> int:
        return len(self.values)

    def order_keys(self) -> tuple[np.ndarray, ...]:
        """(seq, pos, sub, row, k) per record."""
        k = self.k if isinstance(self.k, np.ndarray) else np.full(len(self), self.k, np.int64)
        return self.seq, self.pos, self.sub, self.row, k

    def first(self) -> tuple:
        return tuple(int(a[0]) for a in self.order_keys())

    def last(self) -> tuple:
        return tuple(int(a[-1]) for a in self.order_keys())

    def increasing(self) -> bool:
        """Whether the records' order keys strictly increase (the chunk is in binlog order by itself)."""
        if len(self) < 2:
            return True
        later = np.zeros(len(self) - 1, bool)
        same = np.ones(len(self) - 1, bool)
        for a in self.order_keys():
            later |= same & (a[1:] > a[:-1])
            same &= a[1:] == a[:-1]
        return bool(later.all())


@dataclass
class Messages:
    """A batch's records, in chunks; `ordered()` gives them in binlog order."""

    chunks: list[Chunk] = field(default_factory=list)
    counts: Counter = field(default_factory=Counter)  # (db.table, op) -> change events
    table_topics: dict = field(default_factory=dict)  # topic -> db.table
    schema_changes: int = 0

    def __len__(self) -> int:
        return sum(len(c) for c in self.chunks)

    def runs(self) -> list[Chunk] | None:
        """The chunks in binlog order when their records need no sort (the usual case), else None."""
        return _runs_in_order([c for c in self.chunks if len(c)])

    def ordered(self) -> tuple[Sequence, Sequence, Sequence, Sequence]:
        """(topics, keys, values, partitions) of every record, in binlog order."""
        runs = self.runs()
        if runs is not None:  # each chunk in order, none overlapping another: no sort
            return (list(chain.from_iterable(repeat(c.topic, len(c)) for c in runs)),
                    list(chain.from_iterable(c.keys for c in runs)),
                    list(chain.from_iterable(c.values for c in runs)),
                    list(chain.from_iterable(repeat(c.partition, len(c)) for c in runs)))
        return self.sorted_records()

    def sorted_records(self) -> tuple[Sequence, Sequence, Sequence, Sequence]:
        """(topics, keys, values, partitions) of every record, sorted into binlog order."""
        chunks = [c for c in self.chunks if len(c)]
        if not chunks:
            return [], [], [], []
        sizes = [len(c) for c in chunks]
        keys5 = [c.order_keys() for c in chunks]
        order = np.lexsort(tuple(np.concatenate([k[i] for k in keys5]) for i in (4, 3, 2, 1, 0)))
        topics = list(chain.from_iterable([c.topic] * n for c, n in zip(chunks, sizes, strict=True)))
        keys = list(chain.from_iterable(c.keys for c in chunks))
        values = list(chain.from_iterable(c.values for c in chunks))
        parts = list(chain.from_iterable([c.partition] * n for c, n in zip(chunks, sizes, strict=True)))
        if len(order) == 1:
            return topics, keys, values, parts
        pick = itemgetter(*order.tolist())  # the records in order, picked in C
        return pick(topics), pick(keys), pick(values), pick(parts)


def _runs_in_order(chunks: list[Chunk]) -> list[Chunk] | None:
    """The chunks in binlog order when each is in order by itself and none overlaps another (their records then
    follow chunk after chunk: the same order a sort of all records gives), else None."""
    if not all(c.increasing() for c in chunks):
        return None
    runs = sorted(chunks, key=Chunk.first)
    if any(a.last() >= b.first() for a, b in pairwise(runs)):
        return None
    return runs


def _with_tombstones(chunk: Chunk) -> Chunk:
    """A chunk of deletes with each delete's tombstone (same key, null value) right after it: one run in order."""
    n = len(chunk)
    return Chunk(chunk.topic, list(chain.from_iterable(zip(chunk.keys, chunk.keys, strict=True))),
                 list(chain.from_iterable(zip(chunk.values, repeat(None, n), strict=True))), chunk.partition,
                 np.repeat(chunk.seq, 2), np.repeat(chunk.pos, 2), np.repeat(chunk.sub, 2), np.repeat(chunk.row, 2),
                 np.tile(np.asarray([chunk.k, chunk.k + 1], np.int64), n))


class _ServerIds:
    """server_id of the event at a position, read from the event header (bytes 5..8)."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.cache: dict[int, int] = {}

    def at(self, positions: np.ndarray) -> np.ndarray:
        uniq, inverse = np.unique(positions, return_inverse=True)
        with open(self.path, "rb") as f:
            ids = []
            for p in uniq.tolist():
                sid = self.cache.get(p)
                if sid is None:
                    f.seek(p + 5)
                    sid = self.cache[p] = int.from_bytes(f.read(4), "little")
                ids.append(sid)
        return np.asarray(ids, np.int64)[inverse]


def _one(value: int) -> np.ndarray:
    return np.asarray([value], np.int64)


class Encoder:
    """Turns decoded ranges into change-event records (docs/kafka.md describes the format)."""

    def __init__(self, prefix: str, tombstones: bool, resolver: TimelineResolver | None, tables=None,
                 databases: set[str] | None = None) -> None:
        self.prefix = prefix
        self.tombstones = tombstones
        self.resolver = resolver
        self.tables = tables  # the publish filters, as the decoder applies them to rows
        self.databases = databases
        self.prefix_json = json.dumps(prefix, ensure_ascii=False)

    def encode(self, result: RangeResult, path: str, truncate_partitions: Callable[[str], int],
               skip: frozenset | set = frozenset(), catch_up: str | None = None) -> Messages:
        """The range's records, leaving out the tables in `skip` (held back). `catch_up`: only that table's changes
        and TRUNCATEs (a released table's catch-up; its schema changes were published in their own batches)."""
        out = Messages()
        server_ids = _ServerIds(path)
        now_ms = str(int(time.time() * 1000))
        for table, entry in result.tables.items():
            if table in skip or (catch_up is not None and table != catch_up):
                continue
            db, _, name = table.partition(".")
            topic = topic_name(self.prefix, db, name)
            out.table_topics[topic] = table
            for piece in entry.history:
                if piece.num_rows:
                    tm = entry.versions.get(piece.column("_schema_version")[0].as_py(), entry.table_map)
                    self._table_piece(out, piece, tm, db, name, topic, server_ids, now_ms)
        for ddl in result.ddl:
            self._ddl(out, ddl, server_ids, now_ms, truncate_partitions, skip, catch_up)
        return out

    def _source_parts(self, db: str, table: str, part: pa.Table, server_ids: _ServerIds) -> list:
        """The source block's parts: literal text between per-row columns (server_id, ts_ms, gtid, pos, row, sub),
        all of them joined once with the rest of the event."""
        pos = part.column("_pos").to_numpy()
        uniq, inverse = np.unique(pos, return_inverse=True)
        sid = pa.array(server_ids.at(uniq)[inverse.reshape(-1)]).cast(pa.string())
        ts = pc.divide(part.column("_commit_ts").cast(pa.int64()), 1000).cast(pa.string())
        gtid = part.column("_gtid").combine_chunks()
        if gtid.null_count:
            gtid_parts: tuple = (pc.fill_null(_json_strings(gtid), "null"),)
        else:
            gtid_parts = _json_text(gtid)
        file = json.dumps(part.column("_binlog_file")[0].as_py(), ensure_ascii=False)
        return ['{"version":"' + __version__ + '","connector":"binlake","name":' + self.prefix_json + ',"server_id":',
                sid, ',"ts_ms":', ts, ',"snapshot":"false","db":' + json.dumps(db, ensure_ascii=False) +
                ',"table":' + json.dumps(table, ensure_ascii=False) + ',"gtid":', *gtid_parts,
                ',"file":' + file + ',"pos":', pa.array(pos).cast(pa.string()), ',"row":',
                part.column("_row").cast(pa.string()), ',"sub":', part.column("_sub").cast(pa.string()), "}"]

    def _event(self, before: list | None, after: list | None, source: list, op: str, now_ms: str) -> list:
        """A change event's text per row (before/after: object parts, None for null)."""
        return _join('{"before":', *(before or ["null"]), ',"after":', *(after or ["null"]), ',"source":', *source,
                     ',"op":"' + op + '","ts_ms":' + now_ms + ',"transaction":null}').cast(pa.binary()).to_pylist()

    def _table_piece(self, out: Messages, piece: pa.Table, tm, db: str, name: str, topic: str,
                     server_ids: _ServerIds, now_ms: str) -> None:
        table = f"{db}.{name}"
        cols = [c.key for c in tm.columns] if tm is not None else [
            f for f in piece.column_names if not f.startswith("_")]
        key_cols = [tm.columns[i].key for i in tm.primary_key] if tm is not None and tm.primary_key else []
        plain = {c.key for c in tm.columns if value_kind(c) in TEXT_KINDS} if tm is not None else set()
        partition = None if key_cols else 0
        op = piece.column("_op")

        def chunk(part: pa.Table, keys: list, values: list, k: int = 0) -> Chunk:
            return Chunk(topic, keys, values, partition, part.column("_file_seq").to_numpy(),
                         part.column("_pos").to_numpy(), part.column("_sub").to_numpy(),
                         part.column("_row").to_numpy(), k)

        for op_name, letter in (("insert", "c"), ("delete", "d"), ("update", "u")):
            mask = pc.equal(op, op_name)
            n = pc.sum(mask.cast(pa.int64())).as_py() or 0
            if not n:
                continue
            part = piece.filter(mask) if n < piece.num_rows else piece
            frags = {c: value_parts(part.column(c), c in plain) for c in cols}
            row = _object_parts(cols, [frags[c] for c in cols])
            key_texts = _join(*_object_parts(key_cols, [frags[c] for c in key_cols]), rows=n) if key_cols else None
            keys = key_texts.cast(pa.binary()).to_pylist() if key_cols else [None] * n
            if op_name != "update":
                values = self._event(None if letter == "c" else row, row if letter == "c" else None,
                                     self._source_parts(db, name, part, server_ids), letter, now_ms)
                if letter == "d" and self.tombstones and key_cols:
                    out.chunks.append(_with_tombstones(chunk(part, keys, values)))  # each delete, then its tombstone
                else:
                    out.chunks.append(chunk(part, keys, values))
                out.counts[(table, letter)] += n
                continue
            befores = part.column("_before").combine_chunks()
            bfrags = {c: value_parts(befores.field(c), c in plain) for c in cols}
            has_before = befores.is_valid()
            moved = np.zeros(n, bool)
            if key_cols:
                old = _join(*_object_parts(key_cols, [bfrags[c] for c in key_cols]), rows=n)
                moved = pc.fill_null(pc.and_(has_before, pc.not_equal(old, key_texts)),
                                     False).to_numpy(zero_copy_only=False)
            stay = ~moved
            if stay.any():
                self._updates(out, part, stay, cols, frags, bfrags, has_before, keys, db, name, server_ids,
                              now_ms, chunk)
            if moved.any():
                # The key changed: a delete of the old key (and its tombstone), then a create of the new one.
                idx = pa.array(np.flatnonzero(moved))
                sub_part = part.take(idx)
                src = self._source_parts(db, name, sub_part, server_ids)
                after = _object_parts(cols, [_take(frags[c], "take", idx) for c in cols])
                before = _object_parts(cols, [_take(bfrags[c], "take", idx) for c in cols])
                old_keys = old.take(idx).cast(pa.binary()).to_pylist()
                new_keys = [keys[i] for i in idx.to_pylist()]
                m = len(new_keys)
                out.chunks.append(chunk(sub_part, old_keys, self._event(before, None, src, "d", now_ms), 0))
                if self.tombstones:
                    out.chunks.append(chunk(sub_part, old_keys, [None] * m, 1))
                out.chunks.append(chunk(sub_part, new_keys, self._event(None, after, src, "c", now_ms), 2))
                out.counts[(table, "d")] += m
                out.counts[(table, "c")] += m

    def _updates(self, out: Messages, part: pa.Table, stay: np.ndarray, cols: list, frags: dict, bfrags: dict,
                 has_before: pa.Array, keys: list, db: str, name: str, server_ids: _ServerIds, now_ms: str,
                 chunk: Callable) -> None:
        if not stay.all():
            sel = pa.array(stay)
            part = part.filter(sel)
            frags = {c: _take(f, "filter", sel) for c, f in frags.items()}
            bfrags = {c: _take(f, "filter", sel) for c, f in bfrags.items()}
            has_before = has_before.filter(sel)
            keys = [k for k, s in zip(keys, stay.tolist(), strict=True) if s]
        after = _object_parts(cols, [frags[c] for c in cols])
        before = _object_parts(cols, [bfrags[c] for c in cols])
        if not pc.all(has_before).as_py():  # updates without a before image (partial JSON, MINIMAL): null
            before = [pc.if_else(has_before, _join(*before, rows=len(has_before)), pa.scalar("null"))]
        values = self._event(before, after, self._source_parts(db, name, part, server_ids), "u", now_ms)
        out.chunks.append(chunk(part, keys, values))
        out.counts[(f"{db}.{name}", "u")] += len(values)

    def wanted(self, qualified: str) -> bool:
        db = qualified.partition(".")[0]
        if self.databases is not None and db not in self.databases:
            return False
        return self.tables is None or self.tables.search(qualified) is not None

    def _ddl(self, out: Messages, ddl: dict, server_ids: _ServerIds, now_ms: str,
             truncate_partitions: Callable[[str], int], skip: frozenset | set = frozenset(),
             catch_up: str | None = None) -> None:
        seq, pos = ddl["file_seq"], ddl["pos"]
        sql = ddl["query"] or ""
        db = ddl.get("database") or ""
        op = lifecycle_of(sql, db or None)
        sid = int(server_ids.at(np.asarray([pos]))[0])
        source = {"version": __version__, "connector": "binlake", "name": self.prefix, "server_id": sid,
                  "ts_ms": int(ddl["ts"]) * 1000, "snapshot": "false", "db": db, "table": None, "gtid": None,
                  "file": ddl["file"], "pos": pos, "row": 0, "sub": 0}
        if catch_up is not None:
            if op is not None and op.kind == "truncate" and catch_up in op.tables:
                tdb, _, tname = catch_up.partition(".")
                source = {"version": __version__, "connector": "binlake", "name": self.prefix,
                          "server_id": int(server_ids.at(np.asarray([pos]))[0]), "ts_ms": int(ddl["ts"]) * 1000,
                          "snapshot": "false", "db": tdb, "table": None, "gtid": None, "file": ddl["file"],
                          "pos": pos, "row": 0, "sub": 0}
                self._truncate(out, tdb, tname, source, now_ms, truncate_partitions, seq, pos)
            return
        changes = []
        timeline = self.resolver.timeline if self.resolver is not None else None
        for qualified, version in (timeline.changed_at((seq, pos)) if timeline is not None else []):
            changes.append(_table_change(qualified, version, timeline, (seq, pos)))
        named = [c["id"] for c in changes] + (op.tables + [n for pair in op.renames for n in pair] if op else [])
        if (named and not any(self.wanted(n) for n in named)) or (
                not named and db and self.databases is not None and db not in self.databases):
            return  # a statement about tables (or a database) the publish leaves out
        changes = [c for c in changes if self.wanted(c["id"])]
        if not db and changes:
            db = changes[0]["id"].partition(".")[0]
            source["db"] = db
        value = {"source": source, "ts_ms": int(now_ms), "databaseName": db, "schemaName": None, "ddl": sql,
                 "tableChanges": changes}
        out.chunks.append(Chunk(topic_name(self.prefix, SCHEMA_TOPIC), [_compact({"databaseName": db})],
                                [_compact(value)], 0, _one(seq), _one(pos), _one(0), _one(-1), 0))
        out.schema_changes += 1
        if op is not None and op.kind == "truncate":
            for qualified in (t for t in op.tables if self.wanted(t) and t not in skip):
                tdb, _, tname = qualified.partition(".")
                self._truncate(out, tdb, tname, source, now_ms, truncate_partitions, seq, pos)

    def _truncate(self, out: Messages, db: str, name: str, source: dict, now_ms: str,
                  truncate_partitions: Callable[[str], int], seq: int, pos: int) -> None:
        topic = topic_name(self.prefix, db, name)
        value = _compact({"before": None, "after": None, "source": {**source, "db": db, "table": name},
                          "op": "t", "ts_ms": int(now_ms), "transaction": None})
        for p in range(truncate_partitions(topic)):
            out.chunks.append(Chunk(topic, [None], [value], p, _one(seq), _one(pos), _one(0), _one(-1), 1 + p))
        out.table_topics.setdefault(topic, f"{db}.{name}")
        out.counts[(f"{db}.{name}", "t")] += 1


def _text(data: bytes | str) -> str:
    return data.decode(errors="replace") if isinstance(data, bytes) else data


def _compact(value) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def _table_change(qualified: str, version: TableVersion, timeline, key) -> dict:
    db, _, name = qualified.partition(".")
    table = version.table
    if table is None:
        return {"type": "DROP", "id": qualified, "table": None}
    before = timeline.at(db, name, (key[0], key[1] - 1))
    kind = "CREATE" if before is None or before.table is None else "ALTER"
    columns = []
    for i, c in enumerate(table.columns, 1):
        columns.append({"name": c.name, "typeName": c.data_type.upper(), "position": i, "optional": c.nullable,
                        "length": c.length if c.length is not None else c.precision, "scale": c.scale,
                        "fsp": c.fsp, "unsigned": c.unsigned, "charsetName": c.charset,
                        "enumValues": c.labels, "autoIncremented": c.auto_increment,
                        "generated": c.generated is not None, "default": c.default})
    return {"type": kind, "id": f"{table.database}.{table.name}",
            "table": {"defaultCharsetName": table.charset, "primaryKeyColumnNames": table.row_key(),
                      "columns": columns}}


# -- the publisher -----------------------------------------------------------------------------------------------------

class KafkaPublisher:
    """Publishes binlog files to Kafka in transactions (see the module docstring)."""

    def __init__(self, opts: KafkaSinkOptions) -> None:
        if not opts.topic_prefix or _BAD_TOPIC_CHARS.search(opts.topic_prefix):
            raise UsageError(f"--topic-prefix {opts.topic_prefix!r}: use letters, digits, '.', '_' and '-' only")
        self.opts = opts
        self.offsets_topic = topic_name(opts.topic_prefix, OFFSETS_TOPIC)
        self.schema_topic = topic_name(opts.topic_prefix, SCHEMA_TOPIC)
        self.admin = AdminClient({"bootstrap.servers": opts.bootstrap, **_common(opts.producer_config)})
        self._partitions: dict[str, int] = {}
        self._delivery_error: str | None = None
        self.producer: Producer | None = None
        self._in_transaction = False
        self._producer_topics: set[str] = set()  # topics whose metadata the producer has
        # Fault injection for the crash tests (docs/kafka.md): SIGKILL this process at the Nth step, a step being
        # each record produced and the moments just before and just after each commit.
        kill_at = os.environ.get(KILL_AT_ENV)
        self._kill_at = int(kill_at) if kill_at else None
        self._steps = 0

    def _step(self) -> None:
        self._steps += 1
        if self._steps == self._kill_at:
            os.kill(os.getpid(), signal.SIGKILL)

    # topics
    def _load_topics(self) -> None:
        try:
            md = self.admin.list_topics(timeout=self.opts.timeout)
        except KafkaException as exc:
            raise UnavailableError(f"--kafka {self.opts.bootstrap}: {_kafka_text(exc)}") from None
        self._partitions = {name: len(t.partitions) for name, t in md.topics.items() if not t.error}

    def _ensure_topics(self, wanted: dict[str, tuple[int, dict]]) -> None:
        missing = {t: spec for t, spec in wanted.items() if t not in self._partitions}
        if not missing:
            return
        new = [NewTopic(t, num_partitions=p, replication_factor=self.opts.replication, config=cfg)
               for t, (p, cfg) in missing.items()]
        for topic, fut in self.admin.create_topics(new, request_timeout=self.opts.timeout).items():
            try:
                fut.result()
            except KafkaException as exc:
                if exc.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
                    raise UnavailableError(f"Kafka topic {topic}: cannot create it: {_kafka_text(exc)}") from None
        deadline = time.monotonic() + self.opts.timeout
        while True:  # until the metadata lists them with their partitions
            self._load_topics()
            if all(t in self._partitions for t in missing) or time.monotonic() > deadline:
                break
            time.sleep(0.1)
        for t in missing:
            if t not in self._partitions:
                raise UnavailableError(f"Kafka topic {t}: created but not listed by the broker in time")

    def partitions_of(self, topic: str) -> int:
        return self._partitions.get(topic, self.opts.partitions)

    # the committed position
    def committed_position(self) -> dict | None:
        """The last position committed for this publisher (read_committed), or None before the first batch."""
        consumer = Consumer({"bootstrap.servers": self.opts.bootstrap, "group.id": f"binlake-offsets-{time.time()}",
                             "isolation.level": "read_committed", "enable.auto.commit": False,
                             "enable.partition.eof": True, "auto.offset.reset": "earliest",
                             # the end of a partition is reported after a fetch that found nothing more, and the
                             # broker holds such a fetch for fetch.wait.max.ms (500 ms by default) first
                             "fetch.wait.max.ms": 10,
                             **_common(self.opts.producer_config)})
        last = None
        try:
            tps = [TopicPartition(self.offsets_topic, p, 0) for p in range(self.partitions_of(self.offsets_topic))]
            consumer.assign(tps)
            pending = {tp.partition for tp in tps}
            deadline = time.monotonic() + self.opts.timeout
            while pending:
                if time.monotonic() > deadline:
                    raise UnavailableError(f"Kafka topic {self.offsets_topic}: not read to its end within "
                                           f"{self.opts.timeout:.0f} s")
                msg = consumer.poll(1.0)
                if msg is None:
                    continue
                if msg.error():
                    if msg.error().code() == KafkaError._PARTITION_EOF:
                        pending.discard(msg.partition())
                        continue
                    raise UnavailableError(f"Kafka topic {self.offsets_topic}: {msg.error().str()}")
                if msg.key() and json.loads(msg.key()).get("publisher") == self.opts.name and msg.value():
                    last = json.loads(msg.value())
        finally:
            consumer.close()
        return last

    def _on_delivery(self, err, msg) -> None:
        if err is not None and self._delivery_error is None:
            key = msg.key().decode(errors="replace")[:200] if msg.key() else "null"
            self._delivery_error = f"Kafka topic {msg.topic()} key {key}: {err.str()}"

    def _start_producer(self) -> None:
        conf = {
            "bootstrap.servers": self.opts.bootstrap,
            "transactional.id": transactional_id(self.opts.topic_prefix, self.opts.name),
            "enable.idempotence": True,
            "acks": "all",
            "partitioner": "murmur2_random",  # keys hash as Java clients (and Debezium) hash them
            "linger.ms": 50,
            "batch.size": 1_000_000,
            "compression.type": "lz4",
            "queue.buffering.max.messages": 2_000_000,
            "queue.buffering.max.kbytes": 2_097_151,
            "transaction.timeout.ms": 600_000,
            # init_transactions retries while the coordinator's connection comes up and the broker finishes the
            # previous instance's transaction: at librdkafka's default backoffs (100 ms, growing) a start often
            # waited 0.5 s; both still grow exponentially on repeated failures (up to their .max.ms settings)
            "retry.backoff.ms": 10,
            "reconnect.backoff.ms": 10,
            "on_delivery": self._on_delivery,
            "delivery.report.only.error": True,  # a Python callback per failed record only, not per record
            **_common(self.opts.producer_config),
            **{k: v for k, v in self.opts.producer_config.items() if k not in _CLIENT_KEYS},
        }
        self.producer = Producer(conf)
        try:
            self.producer.init_transactions(self.opts.timeout)  # fences an older instance, ends its transaction
        except KafkaException as exc:
            raise UnavailableError(f"--kafka {self.opts.bootstrap}: cannot start the transactional producer: "
                                   f"{_kafka_text(exc)}") from None

    def run(self, progress: Callable[[str], None] | None = None, release: Sequence[str] = ()) -> PublishSummary:
        opts = self.opts
        say = progress or (lambda _m: None)
        summary = PublishSummary()
        started, started_cpu = time.perf_counter(), time.process_time()
        files = sorted((str(f) for f in opts.files), key=lambda p: (sequence_number(p), Path(p).name))
        self._load_topics()
        self._ensure_topics({self.offsets_topic: (1, {"cleanup.policy": "compact"}),
                             self.schema_topic: (1, {})})
        self._start_producer()
        position = self.committed_position()
        summary.start = summary.end = position
        held: dict = dict((position or {}).get("held") or {})
        for table in release:
            if table not in held:
                raise UsageError(f"--release {table}: not held back (held back: {', '.join(sorted(held)) or 'none'})")
        resolver = build_resolver(files, opts.schemas)
        summary.seconds["start"] = time.perf_counter() - started
        summary.cpu_seconds["start"] = time.process_time() - started_cpu
        encoder = Encoder(opts.topic_prefix, opts.tombstones, resolver, opts.tables, opts.databases)
        self._batch = (position or {}).get("batch", 0)
        self._keys = {Path(f).name: seq for f, seq in zip(files, _file_seqs(files), strict=True)}
        for table in release:
            position = self._catch_up(table, held, position, files, resolver, encoder, summary, say)
        counts, batch_messages, schema_changes = Counter(), 0, 0  # of the open batch
        for path in files:
            name = Path(path).name
            seq = self._keys[name]
            start = 4
            if position is not None:
                done_seq = position["file_seq"]
                if seq < done_seq or (seq == done_seq and position.get("complete")):
                    continue
                if seq == done_seq:
                    start = position["pos"]
            starts, _end = transaction_starts(path, name, start)
            for range_start, stop in plan_ranges(path, name, start, opts.batch_bytes):
                # One Kafka transaction per batch, decoded, encoded and produced a slice (about slice_bytes of
                # binlog, whole transactions) at a time: little memory at once, reused slice after slice, and
                # librdkafka sends one slice while the next is decoded.
                ddl = new = False
                result = None
                try:
                    for slice_start, slice_stop in _slices(starts, range_start, stop, opts.slice_bytes):
                        t0, c0 = time.perf_counter(), time.process_time()
                        result = decode_range(path, name, seq, slice_start, slice_stop, self._batch + 1, resolver,
                                              opts.tables, opts.databases, text=True)
                        _add(summary, "decode", t0, c0)
                        fresh = {t: h for t, h in result.held.items() if t not in held}
                        for table, hold in sorted(fresh.items()):
                            # Held back alone from the start of this slice (the decode left out all its rows here);
                            # the other tables go on. `--release` publishes its changes from there once the cause is
                            # fixed.
                            held[table] = {"error": hold["error"], "file": hold["file"], "pos": hold["pos"],
                                           "from_file": name, "from_seq": seq, "from_pos": slice_start}
                            say(f"held back {table}: {hold['error']} ({hold['file']}:{hold['pos']})")
                        new = new or bool(fresh)
                        ddl = ddl or bool(result.ddl)
                        with cyclic_gc_paused():  # no reference cycles made here: no collection rescans the heap
                            t0, c0 = time.perf_counter(), time.process_time()
                            messages = encoder.encode(result, path, self.partitions_of, skip=set(held))
                            _add(summary, "encode", t0, c0)
                            t0, c0 = time.perf_counter(), time.process_time()
                            self._produce(messages, f"{name}:{range_start}")
                            _add(summary, "produce and commit", t0, c0)
                        counts.update(messages.counts)
                        batch_messages += len(messages)
                        schema_changes += messages.schema_changes
                except BaseException:  # a slice that cannot be decoded or produced: nothing of the batch is committed
                    self._abort()
                    raise
                end = {"publisher": opts.name, "file": name, "file_seq": seq, "pos": result.end,
                       "complete": bool(result.reached_file_end and stop is None), "batch": self._batch + 1,
                       "held": dict(held)}
                if (end["pos"] == range_start and not end["complete"] and not ddl and not new) or (
                        position is not None and not new and (end["file_seq"], end["pos"], end["complete"]) == (
                        position["file_seq"], position["pos"], position.get("complete"))):
                    self._abort()  # nothing new in this range (an in-use file with no new transaction)
                else:
                    position = self._commit(end, summary, counts, batch_messages, schema_changes)
                    say(f"batch {self._batch}: {name} {range_start}..{result.end}, {sum(counts.values())} changes")
                counts, batch_messages, schema_changes = Counter(), 0, 0
        self.producer.flush(opts.timeout)
        summary.held = held
        summary.seconds["total"] = time.perf_counter() - started
        summary.cpu_seconds["total"] = time.process_time() - started_cpu
        return summary

    def _commit(self, end: dict, summary: PublishSummary, counts: Counter, messages: int,
                schema_changes: int) -> dict:
        """Commit the open batch (its records produced) with its end position."""
        t0, c0 = time.perf_counter(), time.process_time()
        self._finish(end)
        _add(summary, "produce and commit", t0, c0)
        self._batch += 1
        summary.batches += 1
        summary.end = end
        summary.changes.update(counts)
        summary.schema_changes += schema_changes
        summary.messages += messages + 1
        return end

    def _catch_up(self, table: str, held: dict, position: dict, files: list[str], resolver, encoder: Encoder,
                  summary: PublishSummary, say: Callable[[str], None]) -> dict:
        """A released table's changes from where it was held back up to the committed position, in batches of
        its own (the offsets record carries how far it got), then the hold is dropped."""
        only = re.compile("^" + re.escape(table) + "$")
        for path in files:
            name = Path(path).name
            seq = self._keys[name]
            hold = held[table]
            if seq < hold["from_seq"] or seq > position["file_seq"]:
                continue
            start = hold["from_pos"] if seq == hold["from_seq"] else 4
            limit = position["pos"] if seq == position["file_seq"] and not position.get("complete") else None
            if limit is not None and start >= limit:
                continue
            ranges = [(a, b if b is not None else limit) for a, b in plan_ranges(path, name, start,
                                                                                 self.opts.batch_bytes)
                      if limit is None or a < limit]
            ranges = [(a, min(b, limit) if limit is not None and b is not None else b) for a, b in ranges]
            for range_start, stop in ranges:
                result = decode_range(path, name, seq, range_start, stop, self._batch + 1, resolver, only, None,
                                      text=True)
                if result.held:
                    error = result.held[table]
                    raise HeldTables(f"--release {table}: still {error['error']} ({error['file']}:{error['pos']}); "
                                     "nothing of it was published")
                held[table] = {**hold, "from_file": name, "from_seq": seq, "from_pos": result.end}
                if result.reached_file_end and stop is None:
                    held[table] = {**hold, "from_file": name, "from_seq": seq + 1, "from_pos": 4}
                end = {**position, "batch": self._batch + 1, "held": dict(held)}
                messages = encoder.encode(result, path, self.partitions_of, catch_up=table)
                self._produce(messages, f"{name}:{range_start}")
                position = self._commit(end, summary, messages.counts, len(messages), messages.schema_changes)
                say(f"batch {self._batch}: {table} caught up {name} {range_start}..{result.end}")
        del held[table]
        position = self._commit({**position, "batch": self._batch + 1, "held": dict(held)}, summary, Counter(), 0, 0)
        summary.released.append(table)
        say(f"released {table}")
        return position

    def _produce(self, messages: Messages, batch: str) -> None:
        """Produce records into the open batch's Kafka transaction (begun by the first records of a batch). Any
        failure aborts the transaction: nothing of the batch is committed."""
        if not len(messages):
            return
        try:
            self._ensure_topics({t: (self.opts.partitions, {}) for t in messages.table_topics})
            self._known_to_producer({c.topic for c in messages.chunks})
            producer = self.producer
            if not self._in_transaction:
                self._delivery_error = None
                producer.begin_transaction()
                self._in_transaction = True
            produce = producer.produce
            runs = messages.runs() if self._kill_at is None else None
            if runs is not None:  # the usual case: chunk after chunk, each produced in one C loop
                for run in runs:
                    self._produce_run(run, batch)
            elif self._kill_at is None:
                for topic, key, value, part in zip(*messages.sorted_records(), strict=True):
                    try:
                        if part is None:
                            produce(topic, value, key)
                        else:
                            produce(topic, value, key, part)
                    except (BufferError, KafkaException):  # retried, or the error named (below)
                        self._produce_one(topic, value, key, part, batch)
            else:  # a crash test: a step before each record
                for topic, key, value, part in zip(*messages.ordered(), strict=True):
                    self._step()
                    self._produce_one(topic, value, key, part, batch)
        except BaseException:
            self._abort()
            raise

    def _known_to_producer(self, topics: set[str]) -> None:
        """The producer's metadata for topics it has not produced to yet, fetched before their first record: it then
        partitions every record as it is produced (no record waits unassigned for the topic's partition count)."""
        for topic in sorted(topics - self._producer_topics):
            try:
                self.producer.list_topics(topic, timeout=self.opts.timeout)
            except KafkaException as exc:
                raise UnavailableError(f"Kafka topic {topic}: {_kafka_text(exc)}") from None
            self._producer_topics.add(topic)

    def _produce_run(self, run: Chunk, batch: str) -> None:
        """A chunk's records in order, produced by `map` (no Python loop per record); a record the producer does not
        take at once (a full local queue, or refused) goes through _produce_one, then the rest follow."""
        values, keys = iter(run.values), iter(run.keys)
        args = (repeat(run.topic), values, keys) if run.partition is None else (
            repeat(run.topic), values, keys, repeat(run.partition))
        while True:
            try:
                deque(map(self.producer.produce, *args), 0)
                return
            except (BufferError, KafkaException):  # the failed call took its value and key from the iterators
                i = len(run.values) - length_hint(values) - 1
                self._produce_one(run.topic, run.values[i], run.keys[i], run.partition, batch)

    def _produce_one(self, topic: str, value, key, part: int | None, batch: str) -> None:
        """One record, waiting while the local queue is full; a record the client refuses is named."""
        while True:
            try:
                if part is None:
                    self.producer.produce(topic, value, key)
                else:
                    self.producer.produce(topic, value, key, part)
                return
            except BufferError:  # the local queue is full: let librdkafka send some
                self.producer.poll(0.05)
            except KafkaException as exc:  # refused before sending (e.g. larger than message.max.bytes)
                raise PublishError(f"Kafka topic {topic} key {_text(key)[:200] if key else 'null'}: {_kafka_text(exc)}; "
                                   f"the batch from {batch} was not published") from None

    def _finish(self, end: dict) -> None:
        """Write the batch's end position into its transaction and commit it (a batch without records too)."""
        producer = self.producer
        step = self._step if self._kill_at is not None else None
        try:
            if not self._in_transaction:
                self._delivery_error = None
                producer.begin_transaction()
                self._in_transaction = True
            self._produce_one(self.offsets_topic, _compact(end), _compact({"publisher": self.opts.name}), 0,
                              f"{end['file']}:{end['pos']}")  # waits while the local queue is full
            producer.flush(self.opts.timeout)
            if self._delivery_error:
                raise PublishError(self._delivery_error)
            if step is not None:
                step()
            producer.commit_transaction(self.opts.timeout)
            self._in_transaction = False
            if step is not None:
                step()
        except BaseException as exc:
            self._abort()
            if isinstance(exc, KafkaException):
                raise PublishError(f"batch ending at {end['file']}:{end['pos']} not published: "
                                   f"{_kafka_text(exc)}") from None
            raise

    def _abort(self) -> None:
        """Abort the open Kafka transaction, if any: none of its records become visible."""
        if self._in_transaction:
            self._in_transaction = False
            with contextlib.suppress(KafkaException):
                self.producer.abort_transaction(self.opts.timeout)


def _slices(starts: list[int], start: int, stop: int | None, size: int) -> list[tuple[int, int | None]]:
    """[start, stop) cut into pieces of about `size` bytes at transaction starts (the last one ends at `stop`)."""
    bounds = [start]
    for pos in starts:
        if stop is not None and pos >= stop:
            break
        if pos - bounds[-1] >= size:
            bounds.append(pos)
    return [(a, b) for a, b in zip(bounds, [*bounds[1:], stop], strict=True)]


def _add(summary: PublishSummary, stage: str, wall0: float, cpu0: float) -> None:
    """Add the wall and CPU seconds since (wall0, cpu0) to a stage's totals."""
    summary.seconds[stage] = summary.seconds.get(stage, 0.0) + time.perf_counter() - wall0
    summary.cpu_seconds[stage] = summary.cpu_seconds.get(stage, 0.0) + time.process_time() - cpu0


def _file_seqs(files: Sequence[str]) -> list[int]:
    """Each file's sequence number (its numeric suffix; the list order for files without one), as the lake
    numbers them."""
    return [s if (s := sequence_number(f)) >= 0 else i for i, f in enumerate(files)]


_CLIENT_KEYS = {"log_level", "security.protocol", "sasl.mechanism", "sasl.mechanisms", "sasl.username", "sasl.password",
                "ssl.ca.location", "ssl.certificate.location", "ssl.key.location", "ssl.key.password",
                "client.id", "socket.timeout.ms"}


def _common(extra: dict) -> dict:
    """The settings every client (admin, consumer, producer) of the publisher shares: connection and security.
    librdkafka's own log lines (a refused connection is logged on every retry) are off unless `log_level` is
    given: failures reach the command line as one line through the exceptions."""
    return {"log_level": 2, **{k: v for k, v in extra.items() if k in _CLIENT_KEYS}}


def _kafka_text(exc: KafkaException) -> str:
    err = exc.args[0] if exc.args else None
    return err.str() if hasattr(err, "str") else str(exc)


def publish(opts: KafkaSinkOptions, progress: Callable[[str], None] | None = None,
            release: Sequence[str] = ()) -> PublishSummary:
    """Publish `opts.files` from the committed position on (the service function the CLI and DAG call); tables in
    `release` that were held back get their changes published first (catch-up), then go on with the others."""
    return KafkaPublisher(opts).run(progress, release)
