"""TABLE_MAP parsing and rows-event decoding (WRITE/UPDATE/DELETE v0/v1/v2, PARTIAL_UPDATE, MariaDB compressed)."""

from __future__ import annotations

import struct
from collections.abc import Iterator
from typing import Any

from .charsets import decode_text
from .coltypes import TYPES, Meta, character_types, codecs_for, signedness_types
from .columnar import ColumnarPairs, EventPlan, decode_event, defer_event
from .constants import ET, RK, TableMapMeta
from .constants import ColumnType as T
from .events import maria_uncompress
from .fde import FormatDescription
from .jsonb import apply_json_diffs, decode_jsonb, parse_json_diffs, to_json_text
from .packing import BodyError, need, packed_int, take
from .rowcodegen import compile_image_decoder
from .tablemap import Column, TableMap
from .values import ABSENT, ValueError_, string_real_type

U16 = struct.Struct("<H")
_TID4_FLAGS = struct.Struct("<IH")  # a rows event's 4-byte table id and its flags
_TID6_FLAGS = struct.Struct("<IHH")  # a 6-byte table id (low 4 bytes, high 2) and the flags
COLUMNAR = True  # decode whole events column by column (columnar.py); False: row by row (rowcodegen.py)
# Larger rows events (a raised binlog_row_event_max_size) go row by row: one struct format and one tuple of all
# their fields would hold several copies of the event at once.
COLUMNAR_MAX_BYTES = 4 << 20
SMALL_EVENT_BYTES = 1024  # rows events up to this size are converted in groups whatever their column types

_FSP_FROM_SCHEMA = frozenset(code for code, spec in TYPES.items() if spec.fsp_from_schema)


class JsonPatch:
    """A partial JSON update (PARTIAL_UPDATE_ROWS) whose before document is not in the binlog
    (binlog_row_image=MINIMAL): the column's new value is its current value with `diffs` applied."""

    __slots__ = ("diffs",)

    def __init__(self, diffs: list) -> None:
        self.diffs = diffs

    def as_list(self) -> list[dict]:
        out = []
        for d in self.diffs:
            item = {"op": d.op.name.lower(), "path": d.path}
            if d.op.name != "REMOVE":
                item["value_json"] = to_json_text(d.value)
            out.append(item)
        return out

    def __eq__(self, other: object) -> bool:
        return isinstance(other, JsonPatch) and self.as_list() == other.as_list()

    def __repr__(self) -> str:
        return f"JsonPatch({self.as_list()})"

def _read_type_meta(t: int, buf: bytes, off: int, end: int) -> tuple[int, int, int]:
    """Returns (resolved type, meta, new offset) for one column's type metadata (its layout: coltypes.TYPES)."""
    spec = TYPES.get(t)
    layout = spec.meta if spec is not None else Meta.NONE
    if layout is Meta.NONE:
        return t, 0, off
    if layout is Meta.BYTE:
        need(off, 1, end)
        return t, buf[off], off + 1
    if layout is Meta.LE16:
        need(off, 2, end)
        return t, U16.unpack_from(buf, off)[0], off + 2
    if layout is Meta.TYPED:
        need(off, 1, end)
        _sub, meta, off = _read_type_meta(buf[off], buf, off + 1, end)
        return t, meta, off
    need(off, 2, end)
    meta = buf[off] << 8 | buf[off + 1]
    if layout is Meta.STRING:
        real, length = string_real_type(meta)
        if real in (T.ENUM, T.SET):
            return real, meta & 0xFF, off + 2
        return T.STRING, length, off + 2
    return t, meta, off + 2


def _msb_bits(data: bytes, count: int) -> list[bool]:
    return [bool(data[i // 8] & (0x80 >> (i % 8))) for i in range(count)] if len(data) * 8 >= count else []


def parse_table_map(buf: bytes, body: int, end: int, fde: FormatDescription) -> TableMap:
    post = fde.post_header_len(ET.TABLE_MAP) or 8
    need(body, post, end)
    if post == 6:
        table_id = int.from_bytes(buf[body : body + 4], "little")
    else:
        table_id = int.from_bytes(buf[body : body + 6], "little")
    flags = U16.unpack_from(buf, body + post - 2)[0]
    off = body + post
    need(off, 1, end)
    db, off = take(buf, off + 1, buf[off], end)
    off += 1
    need(off, 1, end)
    tbl, off = take(buf, off + 1, buf[off], end)
    off += 1
    ncols, off = packed_int(buf, off, end)
    types, off = take(buf, off, ncols, end)
    if off == end:
        # Pre-GA 5.1 trees wrote no metadata block and no null bitmap.
        return TableMap(table_id, db.decode("utf-8", "replace"), tbl.decode("utf-8", "replace"),
                        [Column(i, t) for i, t in enumerate(types)], flags)
    meta_len, off = packed_int(buf, off, end)
    meta_end = off + meta_len
    need(off, meta_len, end)
    columns: list[Column] = []
    for i, t in enumerate(types):
        rt, meta, off = _read_type_meta(t, buf, off, meta_end)
        columns.append(Column(i, rt, meta))
    if off != meta_end:
        unknown = [f"{t} (column {i + 1})" for i, t in enumerate(types) if t not in TYPES]
        raise BodyError(f"column metadata is {meta_len} bytes but the types use {off - (meta_end - meta_len)}"
                        + (f"; unknown column type {', '.join(unknown)}" if unknown else ""))
    nbytes = (ncols + 7) // 8
    nulls, off = take(buf, off, nbytes, end)
    for i, col in enumerate(columns):
        col.nullable = bool(nulls[i // 8] & (1 << (i % 8)))
    tm = TableMap(table_id, db.decode("utf-8", "replace"), tbl.decode("utf-8", "replace"), columns, flags)
    _parse_optional_metadata(tm, buf, off, end, fde.is_mariadb)
    return tm


def _parse_optional_metadata(tm: TableMap, buf: bytes, off: int, end: int, mariadb: bool) -> None:
    cols = tm.columns
    covered = signedness_types(mariadb)
    numeric = [c for c in cols if c.type in covered]
    character = [c for c in cols if c.type in character_types(mariadb)]
    enum_set = [c for c in cols if c.type in (T.ENUM, T.SET)]
    enums = [c for c in cols if c.type == T.ENUM]
    sets = [c for c in cols if c.type == T.SET]
    geoms = [c for c in cols if c.type == T.GEOMETRY]
    vectors = [c for c in cols if c.type == T.VECTOR]
    label_charset: dict[int, int] = {}
    raw_labels: dict[int, list[bytes]] = {}
    while off < end:
        ftype = buf[off]
        flen, off = packed_int(buf, off + 1, end)
        need(off, flen, end)
        fend = off + flen
        tm.metadata_fields.append(ftype)
        if ftype == TableMapMeta.SIGNEDNESS:
            bits = _msb_bits(bytes(buf[off:fend]), len(numeric))
            for c, unsigned in zip(numeric, bits, strict=False):
                if c.type != T.YEAR:  # MariaDB's YEAR takes a bit (always unsigned) that says nothing new
                    c.signed = not unsigned
            tm.signedness_known = True
        elif ftype in (TableMapMeta.DEFAULT_CHARSET, TableMapMeta.ENUM_AND_SET_DEFAULT_CHARSET):
            targets = character if ftype == TableMapMeta.DEFAULT_CHARSET else enum_set
            default, p = packed_int(buf, off, fend)
            chosen = dict.fromkeys(range(len(targets)), default)
            while p < fend:
                idx, p = packed_int(buf, p, fend)
                coll, p = packed_int(buf, p, fend)
                chosen[idx] = coll
            for i, c in enumerate(targets):
                if ftype == TableMapMeta.DEFAULT_CHARSET:
                    c.collation = chosen[i]
                else:
                    label_charset[c.index] = chosen[i]
            tm.charsets_known = tm.charsets_known or ftype == TableMapMeta.DEFAULT_CHARSET
        elif ftype in (TableMapMeta.COLUMN_CHARSET, TableMapMeta.ENUM_AND_SET_COLUMN_CHARSET):
            targets = character if ftype == TableMapMeta.COLUMN_CHARSET else enum_set
            p = off
            for c in targets:
                coll, p = packed_int(buf, p, fend)
                if ftype == TableMapMeta.COLUMN_CHARSET:
                    c.collation = coll
                else:
                    label_charset[c.index] = coll
            tm.charsets_known = tm.charsets_known or ftype == TableMapMeta.COLUMN_CHARSET
        elif ftype == TableMapMeta.COLUMN_NAME:
            p = off
            for c in cols:
                n, p = packed_int(buf, p, fend)
                name, p = take(buf, p, n, fend)
                c.name = name.decode("utf-8", "replace")
            tm.names_from_server = True
        elif ftype in (TableMapMeta.SET_STR_VALUE, TableMapMeta.ENUM_STR_VALUE):
            targets = sets if ftype == TableMapMeta.SET_STR_VALUE else enums
            p = off
            for c in targets:
                count, p = packed_int(buf, p, fend)
                labels = []
                for _ in range(count):
                    n, p = packed_int(buf, p, fend)
                    label, p = take(buf, p, n, fend)
                    labels.append(label)
                raw_labels[c.index] = labels
        elif ftype == TableMapMeta.GEOMETRY_TYPE:
            p = off
            for c in geoms:
                c.geometry_type, p = packed_int(buf, p, fend)
        elif ftype == TableMapMeta.SIMPLE_PRIMARY_KEY:
            p = off
            pk = []
            while p < fend:
                idx, p = packed_int(buf, p, fend)
                pk.append(idx)
            tm.primary_key = pk
        elif ftype == TableMapMeta.PRIMARY_KEY_WITH_PREFIX:
            p = off
            pk = []
            while p < fend:
                idx, p = packed_int(buf, p, fend)
                _prefix, p = packed_int(buf, p, fend)
                pk.append(idx)
            tm.primary_key = pk
        elif ftype == TableMapMeta.COLUMN_VISIBILITY:
            for c, visible in zip(cols, _msb_bits(bytes(buf[off:fend]), len(cols)), strict=False):
                c.visible = visible
        elif ftype == TableMapMeta.VECTOR_DIMENSIONALITY:
            p = off
            for c in vectors:
                c.vector_dimension, p = packed_int(buf, p, fend)
        off = fend
    for idx, labels in raw_labels.items():
        coll = label_charset.get(idx)
        decoded = [decode_text(raw, coll) for raw in labels]
        if cols[idx].type == T.ENUM:
            cols[idx].enum_labels = decoded
        else:
            cols[idx].set_labels = decoded


# -- rows events ------------------------------------------------------------------------------------------


class RowsEvent:
    """A parsed rows event header; iterate `images()` to decode its rows against the table map."""

    __slots__ = (
        "buf",
        "flags",
        "kind",
        "ncols",
        "partial",
        "present",
        "present_after",
        "rows_end",
        "rows_start",
        "table_id",
        "version",
    )

    def __init__(self, kind, table_id, flags, ncols, present, present_after, buf, rows_start, rows_end, partial,
                 version=2):
        self.version = version
        self.kind = kind
        self.table_id = table_id
        self.flags = flags
        self.ncols = ncols
        self.present = present
        self.present_after = present_after
        self.buf = buf
        self.rows_start = rows_start
        self.rows_end = rows_end
        self.partial = partial


def _bitmap(buf: bytes, off: int, n: int, end: int) -> tuple[int, int]:
    nbytes = (n + 7) // 8
    need(off, nbytes, end)
    return int.from_bytes(buf[off : off + nbytes], "little"), off + nbytes


def parse_rows_header(
    buf: bytes, body: int, end: int, fde: FormatDescription, event_type: int, kind: int, version: int, compressed: bool
) -> RowsEvent:
    post = fde.post_header_len(event_type)
    if post == 0:
        post = 10 if version == 2 else 8
    if body + post > end:
        raise BodyError(f"field of {post} bytes at offset {body} runs past the event end {end}")
    if post == 6:
        table_id, flags = _TID4_FLAGS.unpack_from(buf, body)
    else:
        low, high, flags = _TID6_FLAGS.unpack_from(buf, body)
        table_id = low | high << 32
    off = body + post
    if version == 2 and post >= 10:
        extra_len = U16.unpack_from(buf, body + 8)[0]
        if extra_len < 2:
            raise BodyError(f"rows event extra-data length {extra_len} is below its minimum of 2")
        need(off, extra_len - 2, end)
        off += extra_len - 2
    if off < end and buf[off] < 251:  # (packed_int's one-byte case inline)
        ncols = buf[off]
        off += 1
    else:
        ncols, off = packed_int(buf, off, end)
    nbytes = (ncols + 7) >> 3
    if off + nbytes > end:
        raise BodyError(f"field of {nbytes} bytes at offset {off} runs past the event end {end}")
    present = present_after = int.from_bytes(buf[off : off + nbytes], "little")
    off += nbytes
    if kind == RK.UPDATE and version > 0:  # pre-GA updates share one bitmap for both images
        present_after, off = _bitmap(buf, off, ncols, end)
    if compressed:
        data = maria_uncompress(bytes(buf[off:end]))
        buf, off, end = data, 0, len(data)
    return RowsEvent(kind, table_id, flags, ncols, present, present_after, buf, off, end,
                     event_type == ET.PARTIAL_UPDATE_ROWS, version)


class RowImageDecoder:
    """Decodes row images of one table map; plans per columns-present bitmap are cached."""

    def __init__(self, table: TableMap, json_structured: bool = False, text: bool = False, rows: bool = False,
                 arrays: bool = False) -> None:
        self.table = table
        self.text = text  # DecodeOptions.text_values: TextColumns where the columnar path can make them
        self.rows = rows  # the consumer reads row tuples (decoder.decode_files): columnar.EventPlan's `rows`
        self.arrays = arrays and not rows  # DecodeOptions.int_arrays: columnar.EventPlan's `arrays`
        self.ncols = len(table.columns)
        self.codecs = codecs_for(table)  # the column types' decoders (coltypes), compiled once per table map
        self.decoders = [c.decode for c in self.codecs]  # reference decoders (partial JSON path)
        self._plans: dict[int, Any] = {}
        self.json_indexes = [c.index for c in table.columns if c.type == T.JSON]
        self._structured: list | None = None
        self._event_plans: dict[int, EventPlan | None] = {}
        # Whether the decoder may convert this table's rows events in groups (decoder.GROUP_FIELDS): not with
        # MariaDB 5.3 temporal columns read without their precision, whose errors hold the table back instead.
        self.deferrable = not any(c.type in _FSP_FROM_SCHEMA and not c.meta for c in table.columns)

    def event_plan(self, present: int) -> EventPlan | None:
        """The column-at-a-time plan for this columns-present bitmap (None: no column is present)."""
        try:
            return self._event_plans[present]
        except KeyError:
            plan = EventPlan(self.table, present, self.codecs, self.text, self.rows, self.arrays) \
                if present & ((1 << self.ncols) - 1) else None
            self._event_plans[present] = plan
            return plan

    def plan(self, present: int, version: int = 2):
        """The compiled image decoder for this columns-present bitmap (see rowcodegen)."""
        key = present if version else -1 - present
        fn = self._plans.get(key)
        if fn is None:
            fn = compile_image_decoder(self.table, present, version, codecs=self.codecs)
            self._plans[key] = fn
        return fn

    def structured_decoders(self) -> list:
        """Decoders that keep JSON as a structure (needed to apply partial JSON diffs)."""
        if self._structured is None:
            out = list(self.decoders)
            for i in self.json_indexes:
                prefix = self.table.columns[i].meta or 4

                def dec(buf, off, _p=prefix):
                    n = int.from_bytes(buf[off : off + _p], "little")
                    raw = buf[off + _p : off + _p + n]
                    if len(raw) != n:
                        raise ValueError_("JSON value runs past the row")
                    return decode_jsonb(raw), off + _p + n

                out[i] = dec
            self._structured = out
        return self._structured


def decode_image(buf: bytes, off: int, plan: tuple, ncols: int) -> tuple[list, int]:
    cols, nbytes, partial, shift = plan
    nulls = int.from_bytes(buf[off : off + nbytes], "little") >> shift
    off += nbytes
    row = [ABSENT] * ncols if partial else [None] * ncols
    if nulls == 0:
        for idx, dec in cols:
            row[idx], off = dec(buf, off)
    else:
        bit = 1
        for idx, dec in cols:
            if nulls & bit:
                row[idx] = None
            else:
                row[idx], off = dec(buf, off)
            bit <<= 1
    return row, off


def _image_bytes(image) -> int:
    """The least bytes one image of this plan takes: its NULL bitmap (pre-GA v0 images: at least one byte)."""
    return 1 if image.bitmap_bytes < 0 else image.bitmap_bytes


def image_after_bytes(dec: RowImageDecoder, ev: RowsEvent) -> int:
    return dec.plan(ev.present_after, ev.version).bitmap_bytes


def decode_rows(ev: RowsEvent, dec: RowImageDecoder, defer: bool = False) -> list[tuple] | ColumnarPairs:
    """All rows of one event as (before, after) images: inserts (None, after), deletes (before, None), updates both.
    The columnar path returns them as ColumnarPairs (the event's columns; row tuples built when iterated); with
    `defer`, only walked and unpacked (columnar.defer_event: the caller converts them with columnar.convert_pending).

    A list, not a generator: an event is bounded in size, and the tight loops are the decoder's hot path.
    """
    buf, off, end, ncols = ev.buf, ev.rows_start, ev.rows_end, dec.ncols
    if ev.ncols != ncols:
        raise BodyError(f"rows event has {ev.ncols} columns but its table map has {ncols}")
    if ev.partial:
        return list(_iter_partial(ev, dec))
    kind = ev.kind
    if (ev.version and (kind != RK.UPDATE or ev.present_after == ev.present) and COLUMNAR
            and end - off <= COLUMNAR_MAX_BYTES):
        try:
            plan = dec._event_plans[ev.present]
        except KeyError:
            plan = dec.event_plan(ev.present)
        if plan is not None:
            # Deferred (converted with the next events of this plan and kind) when a column converts a whole
            # column with numpy, or when the event is small: a few rows (single-row transactions) cost mostly the
            # fixed cost of converting an event, which a group pays once.
            grouped = defer and (plan.groups or end - off <= SMALL_EVENT_BYTES)
            return (defer_event if grouped else decode_event)(plan, buf, off, end, kind)
    image = dec.plan(ev.present, ev.version)
    if off < end and _image_bytes(image) == 0 and (
            kind != RK.UPDATE or _image_bytes(dec.plan(ev.present_after, ev.version)) == 0):
        # No column present: every row would take 0 bytes, and the rows could never reach the event's end.
        raise BodyError(f"rows event lists no column, yet {end - off} bytes of rows follow")
    out = []
    append = out.append
    nb = image.bitmap_bytes
    if kind != RK.UPDATE and nb in (1, 2):
        # The common case, with the NULL-pattern dispatch inlined (one call per row instead of two).
        spec_get = image.specialized.get
        build = image.get
        write = kind == RK.WRITE
        while off < end:
            nulls = buf[off] if nb == 1 else buf[off] | buf[off + 1] << 8
            fn = spec_get(nulls) or build(nulls)
            values, off = fn(buf, off + nb)
            append((None, values) if write else (values, None))
    elif kind == RK.UPDATE and nb in (1, 2) and image_after_bytes(dec, ev) == nb:
        after_plan = dec.plan(ev.present_after, ev.version)
        get_b, build_b = image.specialized.get, image.get
        get_a, build_a = after_plan.specialized.get, after_plan.get
        while off < end:
            nulls = buf[off] if nb == 1 else buf[off] | buf[off + 1] << 8
            before, off = (get_b(nulls) or build_b(nulls))(buf, off + nb)
            nulls = buf[off] if nb == 1 else buf[off] | buf[off + 1] << 8
            after, off = (get_a(nulls) or build_a(nulls))(buf, off + nb)
            append((before, after))
    elif kind == RK.UPDATE:
        image_after = dec.plan(ev.present_after, ev.version)
        while off < end:
            before, off = image(buf, off)
            after, off = image_after(buf, off)
            append((before, after))
    elif kind == RK.WRITE:
        while off < end:
            after, off = image(buf, off)
            append((None, after))
    else:
        while off < end:
            before, off = image(buf, off)
            append((before, None))
    if off > end:
        raise BodyError("row image runs past the end of the event")
    return out


def _iter_partial(ev: RowsEvent, dec: RowImageDecoder) -> Iterator[tuple[list, list]]:
    """PARTIAL_UPDATE_ROWS: the after image may hold JSON diffs to apply to the before image's documents."""
    buf, off, end, ncols = ev.buf, ev.rows_start, ev.rows_end, dec.ncols
    decoders = dec.structured_decoders()
    cols = dec.table.columns
    before_cols = [(i, decoders[i]) for i in range(ncols) if ev.present >> i & 1]
    after_cols = [(i, decoders[i]) for i in range(ncols) if ev.present_after >> i & 1]
    before_plan = (before_cols, (len(before_cols) + 7) // 8, len(before_cols) != ncols, 0)
    json_after = [i for i, _ in after_cols if cols[i].type == T.JSON]
    while off < end:
        before, off = decode_image(buf, off, before_plan, ncols)
        options, off = packed_int(buf, off, end)
        partial_cols: set[int] = set()
        if options & 1 and dec.json_indexes:
            bits, off = _bitmap(buf, off, len(json_after), end)
            partial_cols = {i for n, i in enumerate(json_after) if bits >> n & 1}
        nbytes = (len(after_cols) + 7) // 8
        nulls = int.from_bytes(buf[off : off + nbytes], "little")
        off += nbytes
        after = [ABSENT] * ncols if len(after_cols) != ncols else [None] * ncols
        for bit, (idx, d) in enumerate(after_cols):
            if nulls >> bit & 1:
                after[idx] = None
            elif idx in partial_cols:
                prefix = cols[idx].meta or 4
                n = int.from_bytes(buf[off : off + prefix], "little")
                start = off + prefix
                need(start, n, end)
                diffs = parse_json_diffs(buf, start, start + n)
                base = before[idx]
                if base is ABSENT:
                    # binlog_row_image=MINIMAL: the document is not in the binlog; the change is the diff itself.
                    after[idx] = JsonPatch(diffs)
                else:
                    after[idx] = apply_json_diffs(base, diffs)
                off = start + n
            else:
                after[idx], off = d(buf, off)
        if off > end:
            raise BodyError("row image runs past the end of the event")
        for i in dec.json_indexes:
            if before[i] is not None and before[i] is not ABSENT:
                before[i] = to_json_text(before[i])
            if after[i] is not None and after[i] is not ABSENT and type(after[i]) is not JsonPatch:
                after[i] = to_json_text(after[i])
        yield before, after
