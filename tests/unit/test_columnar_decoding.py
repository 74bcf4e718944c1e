"""The column-at-a-time fast path (binlog/columnar.py) decodes exactly what the row-at-a-time decoders do, and
`binlake stats` (which runs it) produces every value `binlake decode` prints."""

from __future__ import annotations

import hashlib
import io
import json
import random
import struct
from pathlib import Path

import numpy  # noqa: F401  (whole-column conversions at once: vectorized.numpy_ready; test_numpy_gate.py covers the rest)
import pytest

from binlake.binlog import columnar, rows
from binlake.binlog.api import compute_stats, decode_to
from binlake.binlog.coltypes import codecs_for, plan_column
from binlake.binlog.constants import ColumnType as T
from binlake.binlog.constants import RowsKind
from binlake.binlog.decoder import BinlogDecoder, DecodeOptions, RowBatch
from binlake.binlog.errors import BinlogError
from binlake.binlog.output import _JsonlEncoder, image_to_dict
from binlake.binlog.packing import BodyError
from binlake.binlog.rowcodegen import make_fast_decimal
from binlake.binlog.stream import EventStream, open_binlog
from binlake.binlog.tablemap import Column
from binlake.binlog.values import ValueError_, decimal_groups, make_timestamp2
from tests.conftest import SHARED_BINLOGS
from tests.fixture_manifest import read_manifest

ENTRIES = [e for e in read_manifest(SHARED_BINLOGS) if not e.is_text] if SHARED_BINLOGS.exists() else []
NO_FIXTURES = pytest.mark.skipif(not ENTRIES, reason=f"fixture binlogs not found at {SHARED_BINLOGS}")


def as_lists(pairs: list) -> list:
    """The fast path's images are tuples, the row-at-a-time path's lists: compare their values."""
    return [tuple(None if image is None else list(image) for image in pair) for pair in pairs]


def decoded_batches(path: Path, columnar: bool, monkeypatch: pytest.MonkeyPatch, data: bytes | None = None,
                    ) -> tuple[list, tuple | None]:
    """(pos, table, op, pairs) of every rows event, and how the decode ended with an error (type, position)."""
    monkeypatch.setattr(rows, "COLUMNAR", columnar)
    opts = DecodeOptions(allow_truncated=True, verify_checksums=data is None)
    decoder = BinlogDecoder(opts)
    out: list = []
    try:
        if data is None:
            items = decoder.decode_files_batched([path])
        else:
            items = decoder.decode_stream_batched(io.BytesIO(data), path.name)
        for item in items:
            if type(item) is RowBatch:
                out.append((item.pos, item.table.qualified_name, item.op, as_lists(item.pairs)))
    except BinlogError as exc:
        return out, (type(exc).__name__, exc.pos)
    return out, None


@NO_FIXTURES
@pytest.mark.parametrize("entry", ENTRIES, ids=[str(e.path.relative_to(SHARED_BINLOGS)) for e in ENTRIES])
def test_fixture_rows_equal_row_at_a_time(entry, monkeypatch: pytest.MonkeyPatch) -> None:
    reference = decoded_batches(entry.path, False, monkeypatch)
    fast = decoded_batches(entry.path, True, monkeypatch)
    assert fast == reference


@NO_FIXTURES
def test_fixture_records_equal_row_at_a_time(monkeypatch: pytest.MonkeyPatch) -> None:
    """decode_files' row changes (columnar plans for consumers of row tuples: UTF-8 text as str lists, DECIMAL and
    temporal columns read from whole-column conversions one event slice at a time) equal the row-at-a-time path's."""
    checked = 0
    for entry in ENTRIES:
        reference, ended = decoded_batches(entry.path, False, monkeypatch)
        monkeypatch.setattr(rows, "COLUMNAR", True)
        decoder = BinlogDecoder(DecodeOptions(allow_truncated=True))
        got: list = []
        try:
            for r in decoder.decode_files([entry.path]):
                got.append((r.pos, r.table.qualified_name, r.op,
                            tuple(None if i is None else list(i) for i in (r.before, r.after))))
        except BinlogError as exc:
            assert ended == (type(exc).__name__, exc.pos), entry.path
        else:
            assert ended is None, entry.path
        assert got == [(pos, table, op, pair) for pos, table, op, pairs in reference for pair in pairs], entry.path
        checked += len(got)
    assert checked > 1000


def _rows_event_spans(path: Path) -> list[tuple[int, int]]:
    """(start, end) of the bodies of the file's rows events."""
    spans = []
    for ev in EventStream(open_binlog(str(path)), path.name, allow_truncated=True):
        if ev.type in (23, 24, 25, 30, 31, 32):
            spans.append((ev.pos + (ev.body - ev.start), ev.pos + (ev.body_end - ev.start)))
    return spans


@NO_FIXTURES
def test_damaged_rows_events_fail_alike(monkeypatch: pytest.MonkeyPatch) -> None:
    """Bytes flipped inside rows events: both paths decode the same values or stop with the same typed error at
    the same event."""
    candidates = [e.path for e in ENTRIES if not e.bad_magic and not e.truncated]
    files = sorted((p for p in candidates if len(_rows_event_spans(p)) >= 3), key=lambda p: p.stat().st_size)[:6]
    assert files, "no fixture with rows events"
    rng = random.Random(20261123)
    tried = 0
    for path in files:
        original = path.read_bytes()
        spans = _rows_event_spans(path)
        for _ in range(25):
            start, end = rng.choice(spans)
            data = bytearray(original)
            for _ in range(rng.randint(1, 3)):
                data[rng.randrange(start, end)] = rng.randrange(256)
            reference = decoded_batches(path, False, monkeypatch, bytes(data))
            fast = decoded_batches(path, True, monkeypatch, bytes(data))
            assert fast == reference, f"{path.name}: damaged copy decodes differently"
            tried += 1
    assert tried >= 25


def _split(raw: bytes, codes: list[str]) -> tuple:
    return struct.unpack("<" + "".join(codes), raw)


def test_decimal_every_precision_and_scale() -> None:
    rng = random.Random(7)
    checked = 0
    for p in range(1, 66):
        for s in range(0, min(p, 30) + 1):
            col = plan_column(Column(0, T.NEWDECIMAL, p << 8 | s), 1)
            reference = make_fast_decimal(p, s)
            groups, _, size = decimal_groups(p, s)
            for _ in range(12):
                x = 0
                for nb, nd in groups:
                    x = x << 8 * nb | rng.choice([0, rng.randrange(10**nd), 10**nd - 1])
                x |= 1 << (8 * size - 1)
                if rng.random() < 0.5:
                    x ^= (1 << 8 * size) - 1  # negative: every bit inverted
                fields = _split(x.to_bytes(size, "big"), col.codes)
                want = reference(x.to_bytes(size, "big"))
                got = col.vec([[f] for f in fields])[0]
                assert str(got) == str(want) and str(col.one(*fields)) == str(want), (p, s, hex(x))
                checked += 1
    assert checked == 18960  # every (p, s) of DECIMAL(1..65, 0..30), 12 values each


def test_decimal_values_stay_exact_past_the_cache_bound() -> None:
    """More integer parts than the cache holds (entries evicted and refilled), positive and negative."""
    col = plan_column(Column(0, T.NEWDECIMAL, 10 << 8 | 2), 1)
    reference = make_fast_decimal(10, 2)
    raws = []
    for v in range(0, 3 * columnar.DECIMAL_INT_PARTS * 100, 37):
        x = (v // 100) << 8 | v % 100 | 1 << 39  # 8 integer digits in 4 bytes, 2 fraction digits in 1
        raws.append(x.to_bytes(5, "big"))
        raws.append((x ^ (1 << 40) - 1).to_bytes(5, "big"))
    assert decimal_groups(10, 2) == ([(4, 8), (1, 2)], 1, 5)
    fields = list(zip(*(_split(r, col.codes) for r in raws), strict=True))
    got = col.vec(fields)
    assert [str(v) for v in got] == [str(reference(r)) for r in raws]


def test_decimal_digit_group_out_of_range_is_an_error() -> None:
    col = plan_column(Column(0, T.NEWDECIMAL, 12 << 8 | 2), 1)  # groups: 1 digit, 9 digits | 2 digits
    bad_fraction = bytes([0x80, 0, 0, 0, 1, 100])  # 100 in a 2-digit group
    bad_integer = bytes([0x8A, 0, 0, 0, 1, 5])  # 10 in a 1-digit group
    for raw in (bad_fraction, bad_integer):
        with pytest.raises(ValueError_):
            make_fast_decimal(12, 2)(raw)
        with pytest.raises(ValueError_):
            col.vec([[f] for f in _split(raw, col.codes)])


def _datetime2_text(raw: bytes, fsp: int) -> str:
    """DATETIME2 text computed from the storage format's definition (sign, year*13+month, day, h, m, s, frac)."""
    x = int.from_bytes(raw[:5], "big") - 0x8000000000
    ymd, hms = x >> 17, x & 0x1FFFF
    ym = ymd >> 5
    text = "%04d-%02d-%02d %02d:%02d:%02d" % (ym // 13, ym % 13, ymd & 31, hms >> 12, (hms >> 6) & 63, hms & 63)
    if fsp:
        nb = (fsp + 1) // 2
        frac = int.from_bytes(raw[5 : 5 + nb], "big")
        text += "." + str(frac * 10 ** (6 - 2 * nb) // 10 ** (6 - fsp)).zfill(fsp)
    return text


@pytest.mark.parametrize("fsp", range(7))
def test_datetime2_and_timestamp2_texts(fsp: int) -> None:
    rng = random.Random(fsp)
    nb = (fsp + 1) // 2
    dt = plan_column(Column(0, T.DATETIME2, fsp), 1)
    ts = plan_column(Column(0, T.TIMESTAMP2, fsp), 1)
    ts_reference = make_timestamp2(fsp)
    for _ in range(3000):
        ym, day = rng.randrange(13 * 10000), rng.randrange(32)
        h, m, s = rng.randrange(24), rng.randrange(60), rng.randrange(60)
        packed = 1 << 39 | (ym << 5 | day) << 17 | h << 12 | m << 6 | s
        frac = rng.randrange(10 ** (2 * nb)) if nb else 0
        raw = packed.to_bytes(5, "big") + frac.to_bytes(nb, "big")
        fields = _split(raw, dt.codes)
        assert dt.vec([[f] for f in fields])[0] == dt.one(*fields) == _datetime2_text(raw, fsp)
        raw_ts = rng.randrange(1 << 31).to_bytes(4, "big") + frac.to_bytes(nb, "big")
        fields = _split(raw_ts, ts.codes)
        assert ts.vec([[f] for f in fields])[0] == ts.one(*fields) == ts_reference(raw_ts, 0)[0]


def _digest(images) -> str:
    h = hashlib.sha256()
    for image in images:
        h.update(json.dumps(image, sort_keys=True, ensure_ascii=False).encode())
    return h.hexdigest()


@NO_FIXTURES
def test_stats_produces_every_value_decode_prints(monkeypatch: pytest.MonkeyPatch) -> None:
    """A checksum over the values `binlake stats` decodes equals one over the values `binlake decode` prints."""
    files = sorted({e.path for e in ENTRIES if not e.bad_magic and not e.truncated
                    and e.path.name != "corrupt-relay-bin.000624" and _rows_event_spans(e.path)})
    seen: list = []
    original = BinlogDecoder.decode_files_batched
    encode = _JsonlEncoder().encode  # what `binlake decode` writes a record with

    def as_printed(table, image):
        return json.loads(encode({"image": image_to_dict(table, image)}))["image"]

    def teed(self, paths):
        for item in original(self, paths):
            if type(item) is RowBatch:
                for before, after in item.pairs:
                    seen.append(as_printed(item.table, before))
                    seen.append(as_printed(item.table, after))
            yield item

    checked = 0
    for path in files:
        seen.clear()
        with monkeypatch.context() as m:
            m.setattr(BinlogDecoder, "decode_files_batched", teed)
            try:
                report = compute_stats([path])
            except BinlogError:
                continue
        out = io.StringIO()
        decode_to([path], out, "jsonl")
        printed = []
        for line in out.getvalue().splitlines():
            doc = json.loads(line)
            printed += [doc["before"], doc["after"]]
        assert report["rows"] * 2 == len(seen) == len(printed), path.name
        assert _digest(seen) == _digest(printed), path.name
        checked += report["rows"]
    assert checked > 1000


@NO_FIXTURES
def test_events_over_the_size_bound_go_row_by_row(monkeypatch: pytest.MonkeyPatch) -> None:
    path = max((e.path for e in ENTRIES if not e.bad_magic and not e.truncated
                and e.path.name != "corrupt-relay-bin.000624" and _rows_event_spans(e.path)),
               key=lambda p: len(_rows_event_spans(p)))
    fast = decoded_batches(path, True, monkeypatch)
    monkeypatch.setattr(rows, "COLUMNAR_MAX_BYTES", 0)
    monkeypatch.setattr(rows, "COLUMNAR", True)
    decoder = BinlogDecoder(DecodeOptions(allow_truncated=True))
    images = [image for b in decoder.decode_files_batched([path]) if type(b) is RowBatch
              for pair in b.pairs for image in pair if image is not None]
    assert images and all(type(image) is list for image in images)  # the row-at-a-time decoders' lists
    assert decoded_batches(path, True, monkeypatch) == fast


def test_look_ahead_past_the_buffer_end_falls_back() -> None:
    """The walker reads the first NULL pattern's value length ahead; a shorter image of another pattern at the
    very end of the buffer makes that read run past it, and the event must still decode exactly."""
    from binlake.binlog.columnar import EventPlan, decode_event
    from binlake.binlog.rows import RowImageDecoder
    from binlake.binlog.tablemap import TableMap

    table = TableMap(1, "db", "t", [Column(0, T.LONGLONG, 0), Column(1, T.LONGLONG, 0), Column(2, T.VARCHAR, 10)])
    full = bytes([0]) + (7).to_bytes(8, "little") + (9).to_bytes(8, "little") + bytes([3]) + b"abc"
    short = bytes([0b011]) + bytes([1]) + b"x"  # both BIGINTs NULL: 3 bytes
    buf = full * 3 + short
    plan = EventPlan(table, 0b111, codecs_for(table))
    expected = [((7, 9, "abc"),) * 3, ((None, None, "x"),)]
    for _ in range(2):  # the second pass runs the walker generated with the first pattern inline
        pairs = decode_event(plan, buf, 0, len(buf), RowsKind.WRITE)
        assert [after for _, after in pairs] == [*expected[0], *expected[1]]
    assert plan._exact is not None  # the look-ahead ran past the buffer and the exact walker took over
    row_path = RowImageDecoder(table).plan(0b111)
    off, images = 0, []
    while off < len(buf):
        image, off = row_path(buf, off)
        images.append(tuple(image))
    assert images == [after for _, after in pairs]


def _random_text_table(rng: random.Random, ncols: int) -> tuple[list[Column], list]:
    """Columns in random order: BIGINT, INT, VARCHAR with 1- and 2-byte lengths, BLOB/TEXT with 1- to 4-byte
    lengths; UTF-8 text, latin1 text or binary. Returns the columns and, per column, how to encode a value."""
    cols: list[Column] = []
    encoders: list = []
    for i in range(ncols):
        kind = rng.choice(["bigint", "int", "varchar1", "varchar2", "blob"])
        collation = rng.choice([45, 8, 63])  # utf8mb4_general_ci, latin1_swedish_ci, binary
        if kind == "bigint":
            cols.append(Column(i, T.LONGLONG, 0))
            encoders.append(lambda r: r.randrange(-2**63, 2**63).to_bytes(8, "little", signed=True))
            continue
        if kind == "int":
            cols.append(Column(i, T.LONG, 0))
            encoders.append(lambda r: r.randrange(2**32).to_bytes(4, "little"))
            continue
        if kind == "blob":
            prefix = rng.choice([1, 2, 3, 4])
            cols.append(Column(i, T.BLOB, prefix, collation=collation))
            limit = min(255 if prefix == 1 else 700, 2 ** (8 * prefix) - 1)
        else:
            prefix = 1 if kind == "varchar1" else 2
            meta = rng.randrange(1, 256) if prefix == 1 else rng.randrange(256, 2000)
            cols.append(Column(i, T.VARCHAR, meta, collation=collation))
            limit = meta

        def encode(r: random.Random, prefix=prefix, limit=limit, collation=collation) -> bytes:
            size = r.choice([0, 1, r.randrange(limit + 1), limit])
            if collation == 45:
                raw = "".join(r.choice("ab é€日🙂") for _ in range(size)).encode()
                while len(raw) > limit:
                    raw = raw.decode()[:-1].encode()
            else:
                raw = bytes(r.randrange(256) for _ in range(size))
            return len(raw).to_bytes(prefix, "little") + raw

        encoders.append(encode)
    return cols, encoders


def test_walker_over_random_text_layouts() -> None:
    """The generated event walker (NULL patterns inline, each variable value's codes looked up by its length, the
    first length read with the NULL bitmap) gives exactly the row-at-a-time decoder's rows: seeded random tables of
    fixed and length-prefixed columns in random order, 1- to 4-byte lengths, empty values, NULL densities from none
    to most, more NULL patterns than the walker inlines, one and two bitmap bytes."""
    from binlake.binlog.columnar import EventPlan, decode_event
    from binlake.binlog.rows import RowImageDecoder
    from binlake.binlog.tablemap import TableMap

    rng = random.Random(1717)
    checked = 0
    for trial in range(60):
        ncols = rng.randrange(1, 13)
        cols, encoders = _random_text_table(rng, ncols)
        table = TableMap(1, "db", "t", cols)
        present = (1 << ncols) - 1
        nb = (ncols + 7) // 8
        density = rng.choice([0.0, 0.05, 0.3, 0.8])
        patterns = [sum(1 << i for i in range(ncols) if rng.random() < density) for _ in range(rng.choice([1, 3, 12]))]
        plan = EventPlan(table, present, codecs_for(table))
        row_path = RowImageDecoder(table).plan(present)
        for _event in range(3):  # later events run the walker generated with the patterns seen first inline
            images = []
            for _ in range(rng.randrange(1, 60)):
                nulls = rng.choice(patterns)
                images.append(nulls.to_bytes(nb, "little") + b"".join(
                    encode(rng) for i, encode in enumerate(encoders) if not nulls >> i & 1))
            buf = b"".join(images) + bytes(rng.randrange(256) for _ in range(4))  # what follows: a checksum
            end = len(buf) - 4
            got = [after for _, after in decode_event(plan, buf, 0, end, RowsKind.WRITE)]
            off, want = 0, []
            while off < end:
                image, off = row_path(buf, off)
                want.append(tuple(image))
            assert got == want, trial
            checked += len(want)
            if len(images[-1]) > 1:  # (a one-byte image, every column NULL, cut off leaves a shorter valid event)
                with pytest.raises((BodyError, ValueError_, struct.error, IndexError)):
                    decode_event(plan, buf, 0, end - 1, RowsKind.WRITE)  # the last image cut short
    assert checked > 2000
