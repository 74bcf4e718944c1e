"""The gates: Great Expectations suites run on every batch, before the merge (on the decoded batch) and after it
(on the merged current tables). A failing gate stops the batch (see pipeline.py and quarantine.py).

Before merge, per table:
  pk_not_null            primary key columns are not null
  one_row_per_key        the net-change reduction (merge input) holds one row per key in each schema segment
  seq_increasing         change positions strictly increase within each file (no event twice) and lie inside
                         the range of the file this batch decoded
  schema_version         every row was named by a schema version (or by the server's column names)
  no_decode_errors       no value the decoder could not decode (undecodable text)
  no_statement_dml       no statement-based DML touching the table (it cannot become rows)
  history_tally          history rows written per op equal the decoder's own count
  user:<expectation>     the table's entries of the user expectations file (rows after each insert/update)
and batch-wide: event_types_handled (no unknown, LOAD DATA or INCIDENT events).
After merge, per table with a primary key:
  pk_unique              the primary key is unique in the current table
  count_reconciles       rows now = rows before + net inserts - net deletes of the batch (by the merge rule)
  columns_match          columns and types equal the schema version the table mirrors (the registry's)
  freshness              newest `_commit_ts` within `max_lag_seconds` of the batch end (when configured)

Great Expectations, pandas and sqlglot (seconds to import together) are imported inside the checks that use them:
every `binlake ingest` imports this module, and a run with the gates off never loads them.
"""

from __future__ import annotations

import logging
import re
import time
from dataclasses import dataclass, field, replace
from datetime import datetime

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.fs as pafs

from ..exitcodes import ExitCode
from ..lake.current import SEQ_FILE_SHIFT, current_schema, merge_input, merge_schema, segments
from ..lake.engines import DELETED, SEQ
from ..lake.engines.mergeplan import NewestPerKey
from ..lake.ingest import TableRegistry
from ..lake.netbuckets import BucketWriter, bucket_count, bucketer, key_hash
from ..lake.staging import (
    entry_pieces,
    net_bucket_folder,
    piece_schema,
    read_piece,
    read_piece_keys,
    staged_segments,
    unified_schema,
)
from ..settings import QualityConfig
from .config import UserExpectation, expectation_class, load_expectations
from .runner import Check, ExpectationResult, ensure_context, validate

BEFORE, AFTER = "before merge", "after merge"
BATCH_TABLE = "(batch)"
ORDER_COLUMNS = ["_file_seq", "_pos", "_sub", "_row"]
UNHANDLED_EVENTS = ["LOAD", "NEW_LOAD", "CREATE_FILE", "APPEND_BLOCK", "EXEC_LOAD", "DELETE_FILE",
                    "BEGIN_LOAD_QUERY", "EXECUTE_LOAD_QUERY", "INCIDENT"]
DECODE_ERRORS = ("undecodable_text",)
PIECEWISE = True  # a staged table's before-merge checks read a piece at a time (False: its history whole)
PK_BUCKET_ROWS = 1 << 20  # current table rows above which pk_unique runs a bucket of keys at a time


@dataclass
class GateReport:
    batch: int
    stage: str
    results: list[ExpectationResult] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def success(self) -> bool:
        return all(r.success for r in self.results)

    @property
    def failures(self) -> list[ExpectationResult]:
        return [r for r in self.results if not r.success]


class GateFailed(Exception):
    """A gate failed: carries the table (the first failing one), the batch and the failing expectations."""

    exit_code = ExitCode.QUARANTINED

    def __init__(self, report: GateReport) -> None:
        self.report = report
        self.batch = report.batch
        self.stage = report.stage
        self.failures = report.failures
        self.table = self.failures[0].table if self.failures else None
        tables = sorted({f.table for f in self.failures})
        lines = "\n".join("  " + f.line() for f in self.failures)
        super().__init__(f"quality gate {report.stage} failed: batch {report.batch}, table(s) {', '.join(tables)}; "
                         f"the batch is quarantined (binlake quarantine show {report.batch}):\n{lines}")

    def __reduce__(self):  # picklable across processes (the default would call __init__ with the message)
        return (GateFailed, (self.report,))


def _gx():
    import great_expectations as gx

    ensure_context()  # GE objects need an active (ephemeral) context
    return gx.expectations


def _unique(columns: list[str]):
    e = _gx()
    if len(columns) == 1:
        return e.ExpectColumnValuesToBeUnique(column=columns[0])
    return e.ExpectCompoundColumnsToBeUnique(column_list=columns)


def _keys(tm) -> list[str]:
    return [tm.columns[i].key for i in (tm.primary_key or [])]


# -- before merge -------------------------------------------------------------------------------------------

def before_merge_gate(pb, store, opts, engine=None) -> GateReport:
    """Run every before-merge expectation on the pending batch `pb` (binlake.lake.pending). A table whose rows
    are staged (binlake.lake.staging) is checked where they are when `engine` reads staged rows as Spark
    DataFrames (delta-spark): Great Expectations' Spark execution engine and aggregates, nothing collected."""
    t0 = time.perf_counter()
    config: QualityConfig = opts.quality
    user = load_expectations(config.expectations)
    report = GateReport(pb.batch, BEFORE)
    report.results += _event_checks(pb, config)
    table_maps = store.read_table_maps(pb)
    tally = {(t, op): n for t, op, n in pb.counts}
    ranges = {f["file_seq"]: (f["start_pos"], f["end_pos"]) for f in pb.files}
    for name, info in sorted(pb.tables.items()):
        versions, last_tm = table_maps[name]
        if "staged" in info and hasattr(engine, "staged_frame"):
            report.results += _staged_checks(engine, store.stage(pb.batch), name, info, versions, last_tm, ranges,
                                             user.get(name, []), tally, pb, config)
            continue
        if "staged" in info and PIECEWISE and entry_pieces(info):  # read a piece at a time, never whole
            report.results += _staged_piece_checks(store.stage(pb.batch), name, info, versions, last_tm, ranges,
                                                   user.get(name, []), tally, pb, config)
            continue
        history = store.read_history(pb, name)
        keys = _keys(last_tm) if info["has_pk"] else []
        report.results += _history_checks(name, history, versions, keys, ranges, user.get(name, []), config)
        if keys:
            by_key: dict[tuple, list[pa.Table]] = {}  # segments grouped by their key columns (renames)
            for i, seg in enumerate(segments(history)):
                tm = versions.get(seg.version)
                if tm is None:  # rows no schema version named: the schema_version expectation reports them
                    continue
                data = merge_input(seg.rows, tm).select(_keys(tm))
                by_key.setdefault(tuple(_keys(tm)), []).append(
                    data.append_column("_segment", pa.array([i] * data.num_rows, pa.int32())))
            for seg_keys, parts in by_key.items():
                frame = pa.concat_tables(parts).to_pandas()
                report.results += validate(frame, [Check("one_row_per_key", "one row per key after the net-change "
                                                         "reduction", _unique(["_segment", *seg_keys]))],
                                           BEFORE, name, config.sample_size)
        report.results += _tally_checks(name, history, tally, config)
        report.results += _problem_checks(name, info, pb, config)
    report.seconds = time.perf_counter() - t0
    return report


def _event_checks(pb, config: QualityConfig) -> list[ExpectationResult]:
    import pandas as pd

    e = _gx()
    names = sorted(pb.event_types)
    frame = pd.DataFrame({"event_type": pd.Series(names, dtype=object)})
    return validate(frame, [
        Check("event_types_handled", "no LOAD DATA or INCIDENT events (changes that cannot become rows)",
              e.ExpectColumnValuesToNotBeInSet(column="event_type", value_set=UNHANDLED_EVENTS)),
        Check("event_types_handled", "no unknown (ignorable-flagged) event types",
              e.ExpectColumnValuesToNotMatchRegex(column="event_type", regex=r"^(?:inner:)?type\d+$")),
    ], BEFORE, BATCH_TABLE, config.sample_size)


def _history_columns(column_names, versions: dict, keys: list[str], user: list[UserExpectation]) -> list[str]:
    """The history columns the row checks read: keys (every version's), the order columns, `_schema_version`,
    `_op` and the columns user expectations name."""
    user_columns = {u.kwargs[k] for u in user for k in ("column", "column_A", "column_B") if k in u.kwargs}
    user_columns |= {c for u in user for c in u.kwargs.get("column_list", [])}
    all_keys = [k for tm in versions.values() for k in _keys(tm)] if keys else []
    wanted = [*keys, *all_keys, *ORDER_COLUMNS, "_schema_version", "_op", *sorted(user_columns - set(keys))]
    return [c for c in dict.fromkeys(wanted) if c in column_names]


def _row_frame(data: pa.Table, versions: dict):
    """History columns as the pandas frame the row checks validate: `_schema_version` as `_named_by` (rows whose
    columns the server named, FULL metadata without a timeline, have no schema version and need none)."""
    server_named = [v for v, tm in versions.items() if v is None and tm.names_from_server]
    named_by = data.column("_schema_version")
    if server_named:
        named_by = pc.fill_null(named_by, "server")
    # Low-cardinality strings as categoricals: cheaper to hand to pandas and for GE to hash and scan.
    data = data.drop_columns(["_schema_version"]).append_column("_named_by", pc.dictionary_encode(named_by))
    data = data.set_column(data.column_names.index("_op"), "_op", pc.dictionary_encode(data.column("_op")))
    return data.to_pandas()


def _order_check() -> Check:
    return Check("seq_increasing", "change positions strictly increase within each file",
                 _gx().ExpectCompoundColumnsToBeUnique(column_list=ORDER_COLUMNS))


def _user_checks(user: list[UserExpectation]) -> list[Check]:
    return [Check(f"user:{u.name}", "user expectation (schemas/expectations)", expectation_class(u.name)(**u.kwargs))
            for u in user]


def _row_checks(frame, versions: dict, keys: list[str], user: list[UserExpectation], name: str,
                config: QualityConfig, order: bool = True) -> tuple[list, list]:
    """The checks of each history row on `frame` (_row_frame): the key and order checks with schema_version (in
    the report's order), and the user expectations' results. Without `order`, the order columns' uniqueness is
    left out (the staged path checks it over pieces whose positions overlap)."""
    e = _gx()
    key_checks = [Check("pk_not_null", f"primary key column {k} is not null",
                        e.ExpectColumnValuesToNotBeNull(column=k)) for k in keys]
    checks = [*([_order_check()] if order else []),
              Check("schema_version", "every row was named by a schema version",
                    e.ExpectColumnValuesToNotBeNull(column="_named_by"))]
    # Rows of a schema version whose key had other columns (a key column renamed in the batch) are checked by
    # the key they had: the history holds them with the later key columns null.
    other: dict[tuple, list] = {}
    for v, tm in versions.items():
        if v is not None and keys and _keys(tm) != keys:
            other.setdefault(tuple(_keys(tm)), []).append(v)
    if other:
        olds = [v for vs in other.values() for v in vs]
        results = validate(frame[~frame["_named_by"].isin(olds)], key_checks, BEFORE, name, config.sample_size)
        for old_keys, vs in other.items():
            results += validate(frame[frame["_named_by"].isin(vs)], [
                Check("pk_not_null", f"primary key column {k} (schema versions {', '.join(vs)}) is not null",
                      e.ExpectColumnValuesToNotBeNull(column=k)) for k in old_keys], BEFORE, name, config.sample_size)
        results += validate(frame, checks, BEFORE, name, config.sample_size)
    else:
        results = validate(frame, key_checks + checks, BEFORE, name, config.sample_size)
    users = validate(frame[frame["_op"] != "delete"], _user_checks(user), BEFORE, name, config.sample_size) \
        if user else []
    return results, users


def _history_checks(name: str, history: pa.Table, versions: dict, keys: list[str], ranges: dict,
                    user: list[UserExpectation], config: QualityConfig) -> list[ExpectationResult]:
    data = history.select(_history_columns(history.column_names, versions, keys, user))
    frame = _row_frame(data, versions)
    results, users = _row_checks(frame, versions, keys, user, name, config)
    # Per file: the positions lie inside the range this batch decoded (no event from an earlier batch again).
    spans = data.group_by("_file_seq").aggregate([("_pos", "min"), ("_pos", "max")]).to_pylist()
    results += _validate_spans([(r["_file_seq"], r["_pos_min"], r["_pos_max"]) for r in spans], ranges, name,
                               config)
    return results + users


def _validate_spans(spans: list, ranges: dict, name: str, config: QualityConfig) -> list[ExpectationResult]:
    """Per file: its changes' positions lie inside the range this batch decoded (no event from an earlier batch
    again). spans: (file_seq, first position, last position) per file."""
    import pandas as pd

    e = _gx()
    frame = pd.DataFrame({
        "file_seq": [r[0] for r in spans], "first_pos": [r[1] for r in spans], "last_pos": [r[2] for r in spans],
        "range_start": [ranges.get(r[0], (None, None))[0] for r in spans],
        "range_end": [ranges.get(r[0], (None, None))[1] for r in spans]})
    return validate(frame, [
        Check("seq_increasing", "first change position of each file at or after the range start",
              e.ExpectColumnPairValuesAToBeGreaterThanB(column_A="first_pos", column_B="range_start",
                                                        or_equal=True)),
        Check("seq_increasing", "last change position of each file before the range end",
              e.ExpectColumnPairValuesAToBeGreaterThanB(column_A="range_end", column_B="last_pos"))],
        BEFORE, name, config.sample_size)


def _tally_checks(name: str, history: pa.Table, tally: dict, config: QualityConfig) -> list[ExpectationResult]:
    written = {r["_op"]: r["_op_count"] for r in history.group_by("_op").aggregate([("_op", "count")]).to_pylist()}
    return _tally_figures(name, written, tally, config)


def _tally_figures(name: str, written: dict, tally: dict, config: QualityConfig) -> list[ExpectationResult]:
    """history_tally from the history rows written per op."""
    import pandas as pd

    ops = sorted(set(written) | {op for t, op in tally if t == name})
    frame = pd.DataFrame({"op": ops, "written": [written.get(op, 0) for op in ops],
                          "tally": [tally.get((name, op), 0) for op in ops]})
    return validate(frame, [Check("history_tally", "history rows per op equal the decoder's own count",
                                  _gx().ExpectColumnPairValuesToBeEqual(column_A="written", column_B="tally"))],
                    BEFORE, name, config.sample_size)


def _staged_checks(engine, stage: str, name: str, info: dict, versions: dict, last_tm, ranges: dict,
                   user: list[UserExpectation], tally: dict, pb, config: QualityConfig) -> list[ExpectationResult]:
    """The before-merge checks of one staged table on Spark DataFrames (the same expectations as the Arrow path:
    _history_checks, the one-row-per-key reduction, _tally_checks, _problem_checks); the engine builds the frames
    and the small aggregates (delta-spark's gate_inputs), nothing is collected but figures."""
    import pandas as pd

    e = _gx()
    keys = _keys(last_tm) if info["has_pk"] else []
    server_named = any(v is None and tm.names_from_server for v, tm in versions.items())
    other: dict[tuple, list] = {}
    for v, tm in versions.items():
        if v is not None and keys and _keys(tm) != keys:
            other.setdefault(tuple(_keys(tm)), []).append(v)
    by_key: dict[tuple, list] = {}
    if keys:
        for i, (_v, tm, seg) in enumerate(staged_segments(stage, info, versions, merge_schema)):
            by_key.setdefault(tuple(_keys(tm)), []).append((i, seg))
    got = engine.gate_inputs(stage, info, server_named, [list(vs) for vs in other.values()], by_key)
    key_checks = [Check("pk_not_null", f"primary key column {k} is not null",
                        e.ExpectColumnValuesToNotBeNull(column=k)) for k in keys]
    checks = [Check("seq_increasing", "change positions strictly increase within each file",
                    e.ExpectCompoundColumnsToBeUnique(column_list=ORDER_COLUMNS)),
              Check("schema_version", "every row was named by a schema version",
                    e.ExpectColumnValuesToNotBeNull(column="_named_by"))]
    if other:
        results = validate(got["current_key_rows"], key_checks, BEFORE, name, config.sample_size)
        for (old_keys, vs), rows in zip(other.items(), got["old_key_rows"], strict=True):
            results += validate(rows, [
                Check("pk_not_null", f"primary key column {k} (schema versions {', '.join(vs)}) is not null",
                      e.ExpectColumnValuesToNotBeNull(column=k)) for k in old_keys], BEFORE, name, config.sample_size)
        results += validate(got["data"], checks, BEFORE, name, config.sample_size)
    else:
        results = validate(got["data"], key_checks + checks, BEFORE, name, config.sample_size)
    results += _validate_spans(got["spans"], ranges, name, config)
    if user:
        user_checks = [Check(f"user:{u.name}", "user expectation (schemas/expectations)",
                             expectation_class(u.name)(**u.kwargs)) for u in user]
        results += validate(got["non_deletes"], user_checks, BEFORE, name, config.sample_size)
    for seg_keys, frame in got["key_frames"].items():
        results += validate(frame, [Check("one_row_per_key", "one row per key after the net-change reduction",
                                          _unique(["_segment", *seg_keys]))], BEFORE, name, config.sample_size)
    written = got["ops"]
    ops = sorted(set(written) | {op for t, op in tally if t == name})
    frame = pd.DataFrame({"op": ops, "written": [written.get(op, 0) for op in ops],
                          "tally": [tally.get((name, op), 0) for op in ops]})
    results += validate(frame, [Check("history_tally", "history rows per op equal the decoder's own count",
                                      e.ExpectColumnPairValuesToBeEqual(column_A="written", column_B="tally"))],
                        BEFORE, name, config.sample_size)
    results += _problem_checks(name, info, pb, config)
    return results


# -- before merge, a staged table piece by piece ------------------------------------------------------------
# A table whose history is staged (binlake.lake.staging: one transaction of millions of rows) is checked without
# its history in memory: the same expectations, run on each piece's columns they need and combined as one run on
# the whole history would report them (success of every part, unexpected counts summed, samples in row order up
# to what Great Expectations keeps). Checks that compare rows with each other run where rows can meet: the order
# columns' uniqueness over pieces whose positions overlap, the one-row-per-key check on each bucket of keys.

GX_PARTIAL = 20  # Great Expectations' partial_unexpected_list holds at most this many values (result format BASIC)
_ACROSS_ROWS = ("unique", "increasing", "decreasing")  # map expectations whose rows are not judged one by one


def _combine(parts: list[list[ExpectationResult]], sample_size: int) -> list[ExpectationResult]:
    """Results of the same checks on parts of the rows (in row order) as one run on all of them reports them."""
    cap = min(sample_size, GX_PARTIAL)
    out = []
    for rs in zip(*parts, strict=True):
        counts = [r.unexpected_count for r in rs if r.unexpected_count is not None]
        sample = [v for r in rs for v in r.sample][:cap]
        out.append(replace(rs[0], success=all(r.success for r in rs), unexpected_count=sum(counts) if counts else None,
                           sample=sample, error=next((r.error for r in rs if r.error), None)))
    return out


def _row_local(u: UserExpectation) -> bool:
    """Whether a user expectation judges each row alone with no share of the rows allowed to fail (a column map
    expectation without `mostly` below 1): then its results over pieces combine into the whole's."""
    from great_expectations.expectations.expectation import (
        ColumnMapExpectation,
        ColumnPairMapExpectation,
        MulticolumnMapExpectation,
    )

    cls = expectation_class(u.name)
    if not issubclass(cls, (ColumnMapExpectation, ColumnPairMapExpectation, MulticolumnMapExpectation)):
        return False
    if any(w in u.name.lower() for w in _ACROSS_ROWS) and "within_record" not in u.name.lower():
        return False
    return u.kwargs.get("mostly", 1) in (1, 1.0, None)


def _piece_tables(stage: str, info: dict, columns: list[str], schema: pa.Schema):
    """Each piece's rows inside the entry's bounds, `columns` of them under the pieces' unified `schema` (a column
    a piece's schema version lacks is null there, as in the history read whole)."""
    lo, hi = info.get("seq_from"), info.get("seq_to")
    for p in entry_pieces(info):
        have = set(piece_schema(stage, p).names)
        rows = read_piece(stage, p, lo, hi, [c for c in columns if c in have])
        yield pa.table({c: (rows.column(c).cast(schema.field(c).type) if c in have
                            else pa.nulls(rows.num_rows, schema.field(c).type)) for c in columns},
                       schema=pa.schema([schema.field(c) for c in columns]))
        del rows
        pa.default_memory_pool().release_unused()


def _overlapping(pieces: list[tuple[dict, int, int]]) -> list[list[dict]]:
    """Pieces (each with the first and last change position, `_seq`, its rows hold) in groups whose positions
    overlap; no two groups share a position, so equal order columns can only be found within a group. Groups,
    and the pieces in each, in the pieces' order."""
    groups: list[list[tuple[int, dict]]] = []
    top = None
    for i, (p, lo, hi) in sorted(enumerate(pieces), key=lambda x: (x[1][1], x[0])):
        if groups and top is not None and lo <= top:
            groups[-1].append((i, p))
            top = max(top, hi)
        else:
            groups.append([(i, p)])
            top = hi
    groups.sort(key=lambda g: min(i for i, _ in g))
    return [[p for _, p in sorted(g, key=lambda ip: ip[0])] for g in groups]


def _null_safe(assign, keys: list[str]):
    """A key-hash bucketer that takes null keys too (a null key column hashes as its type's zero)."""
    def assign_rows(rows: pa.Table):
        for k in keys:
            col = rows.column(k)
            if col.null_count:
                zero = "" if pa.types.is_string(col.type) or pa.types.is_large_string(col.type) else \
                    b"" if pa.types.is_binary(col.type) or pa.types.is_large_binary(col.type) else 0
                rows = rows.set_column(rows.column_names.index(k), k, pc.fill_null(col, pa.scalar(zero, col.type)))
        return assign(rows)
    return assign_rows


def _staged_net_keys(stage: str, name: str, info: dict, versions: dict):
    """(key columns, frame) of each segment's net-change reduction, one bucket of keys at a time
    (binlake.lake.netbuckets; the merge's reduction, its key columns only): a `_segment` column and the keys."""
    runs = {**info, "runs": [r for r in info.get("runs", []) if r[0] in versions]}
    for index, (_v, tm, seg) in enumerate(staged_segments(stage, runs, versions, merge_schema)):
        keys = _keys(tm)
        columns = [*(f.name for f in current_schema(tm)), "_file_seq", "_pos", "_op"]
        narrow = pa.schema([*(seg.schema.field(k) for k in keys), seg.schema.field(SEQ), seg.schema.field(DELETED)])
        count = bucket_count(seg.num_rows)
        fs, folder = net_bucket_folder(stage, f"_gate/{name}", index)
        newest = BucketWriter(fs, folder, count, _null_safe(bucketer(keys, count, None), keys), narrow) if count > 1 \
            else NewestPerKey(keys)
        for piece in sorted(seg.pieces, key=lambda p: (p["min_seq"], p["path"])):
            rows = read_piece_keys(stage, piece, seg.lo, seg.hi, columns, keys)
            if rows.num_rows:
                newest.add(merge_input(rows, tm).select(narrow.names))
            del rows
            pa.default_memory_pool().release_unused()
        if isinstance(newest, BucketWriter):
            buckets = newest.close(keys).buckets()
        else:
            buckets = iter([newest.result()] if newest.parts else [])
        for rows in buckets:
            if rows.num_rows:
                data = rows.select(keys)
                yield tuple(keys), data.append_column("_segment", pa.array([index] * data.num_rows, pa.int32()))
        if isinstance(newest, BucketWriter) and fs.get_file_info(folder).type == pafs.FileType.Directory:
            fs.delete_dir(folder)


def _staged_piece_checks(stage: str, name: str, info: dict, versions: dict, last_tm, ranges: dict,
                         user: list[UserExpectation], tally: dict, pb, config: QualityConfig) -> list[ExpectationResult]:
    """The before-merge checks of a staged table (as _history_checks, the one-row-per-key reduction,
    _tally_checks and _problem_checks report them on its history read whole), reading a piece at a time."""
    keys = _keys(last_tm) if info["has_pk"] else []
    schema = unified_schema(stage, entry_pieces(info))
    local = [u for u in user if _row_local(u)]
    whole = [u for u in user if not _row_local(u)]
    cols = _history_columns(schema.names, versions, keys, local)
    per_piece, per_piece_user, spans, written = [], [], {}, {}
    pieces = entry_pieces(info)
    seqs = []
    empty = None
    for piece, data in zip(pieces, _piece_tables(stage, info, cols, schema), strict=True):
        if not data.num_rows:  # no rows inside the bounds: checked only when no piece has any (as the whole is)
            empty = data
            continue
        mm = pc.min_max(pc.add(pc.shift_left(data.column("_file_seq").cast(pa.int64()), SEQ_FILE_SHIFT),
                               data.column("_pos").cast(pa.int64()))).as_py()
        seqs.append((piece, mm["min"], mm["max"]))
        frame = _row_frame(data, versions)
        results, users = _row_checks(frame, versions, keys, local, name, config, order=False)
        per_piece.append(results)
        per_piece_user.append(users)
        for r in data.group_by("_file_seq").aggregate([("_pos", "min"), ("_pos", "max")]).to_pylist():
            lo, hi = spans.get(r["_file_seq"], (r["_pos_min"], r["_pos_max"]))
            spans[r["_file_seq"]] = (min(lo, r["_pos_min"]), max(hi, r["_pos_max"]))
        for r in data.group_by("_op").aggregate([("_op", "count")]).to_pylist():
            written[r["_op"]] = written.get(r["_op"], 0) + r["_op_count"]
        del data, frame
    if not per_piece:
        frame = _row_frame(empty, versions)
        results, users = _row_checks(frame, versions, keys, local, name, config, order=False)
        per_piece, per_piece_user = [results], [users]
    rows = _combine(per_piece, config.sample_size)
    # The order columns' uniqueness: within each group of pieces whose positions overlap (usually one piece).
    order = _combine([validate(pa.concat_tables(list(_piece_tables(stage, {**info, "staged": group}, ORDER_COLUMNS,
                                                                   schema))).to_pandas(),
                               [_order_check()], BEFORE, name, config.sample_size)
                      for group in _overlapping(seqs)] or [[_order_check_empty(name, config)]],
                     config.sample_size)
    results = [*rows[:-1], *order, rows[-1]]  # ... key checks, seq_increasing, schema_version
    results += _validate_spans([(f, lo, hi) for f, (lo, hi) in spans.items()], ranges, name, config)
    users = dict(zip([id(u) for u in local], _combine(per_piece_user, config.sample_size) if local else [],
                     strict=True))
    for u in whole:  # other expectations: on only the columns they name (every column the checks read if none)
        named = [c for c in schema.names if c in _named(u)]
        if named:
            data = pa.concat_tables(list(_piece_tables(stage, info, list(dict.fromkeys([*named, "_op"])), schema)))
            frame = data.set_column(data.column_names.index("_op"), "_op",
                                    pc.dictionary_encode(data.column("_op"))).to_pandas()
        else:
            data = pa.concat_tables(list(_piece_tables(stage, info, _history_columns(schema.names, versions, keys,
                                                                                     user), schema)))
            frame = _row_frame(data, versions)
        users[id(u)] = validate(frame[frame["_op"] != "delete"], _user_checks([u]), BEFORE, name,
                                config.sample_size)[0]
        del data, frame
    results += [users[id(u)] for u in user]
    if keys:
        frames: dict[tuple, list] = {}
        for seg_keys, data in _staged_net_keys(stage, name, info, versions):
            frames.setdefault(seg_keys, []).append(validate(data.to_pandas(), [Check(
                "one_row_per_key", "one row per key after the net-change reduction", _unique(["_segment", *seg_keys]))],
                BEFORE, name, config.sample_size))
        for parts in frames.values():
            results += _combine(parts, config.sample_size)
    results += _tally_figures(name, written, tally, config)
    results += _problem_checks(name, info, pb, config)
    return results


def _order_check_empty(name: str, config: QualityConfig) -> ExpectationResult:
    """seq_increasing on no rows (a staged table whose pieces hold none inside its bounds)."""
    frame = pa.table({c: pa.array([], pa.int64()) for c in ORDER_COLUMNS}).to_pandas()
    return validate(frame, [_order_check()], BEFORE, name, config.sample_size)[0]


def _named(u: UserExpectation) -> set[str]:
    named = {u.kwargs[k] for k in ("column", "column_A", "column_B") if k in u.kwargs}
    return named | set(u.kwargs.get("column_list", []))


def _dml_targets(query: str, database: str | None) -> set[tuple[str, str]] | None:
    """The tables a statement-based DML writes, when sqlglot can tell for sure; None when it cannot."""
    import sqlglot
    from sqlglot import exp

    quiet = logging.getLogger("sqlglot")
    level = quiet.level
    quiet.setLevel(logging.ERROR)
    try:
        tree = sqlglot.parse_one(query, read="mysql")
    except Exception:
        return None
    finally:
        quiet.setLevel(level)
    def single(t) -> bool:  # one table, no joins: a multi-table statement's targets are not read from it
        return isinstance(t, exp.Table) and not t.args.get("joins")

    if isinstance(tree, exp.Insert):
        found = [tree.this if isinstance(tree.this, exp.Table) else tree.this.find(exp.Table)]
    elif isinstance(tree, exp.Delete) and tree.args.get("tables"):
        found = list(tree.args["tables"])
    elif isinstance(tree, (exp.Delete, exp.Update)) and single(tree.this) and not tree.args.get("using") \
            and not tree.args.get("from") and not tree.args.get("joins"):
        found = [tree.this]
    else:
        return None
    if not found or not all(isinstance(t, exp.Table) and t.name for t in found):
        return None
    return {((t.db or database or "").lower(), t.name.lower()) for t in found}


def _mentions(query: str | None, database: str | None, db: str, table: str) -> bool:
    """Does the statement write db.table? By its parsed targets, or (unparsable) by naming the table at all."""
    if not query:
        return False
    targets = _dml_targets(query, database)
    if targets is not None:
        return (db.lower(), table.lower()) in targets
    q = query.replace("`", "")
    if re.search(rf"\b{re.escape(db)}\s*\.\s*{re.escape(table)}\b", q, re.I):
        return True
    return database == db and re.search(rf"\b{re.escape(table)}\b", q, re.I) is not None


def _problem_checks(name: str, info: dict, pb, config: QualityConfig) -> list[ExpectationResult]:
    import pandas as pd

    e = _gx()
    db, table = info["database"], info["table"]
    errors = [f"{k} x{n}" for k, n in sorted(pb.conversions.items())
              if k.split(":", 1)[0] in DECODE_ERRORS and k.split(":", 1)[1].startswith(name + ".")]
    statements = [f"{s['file']}:{s['pos']}: {s.get('query')}" for s in pb.statements
                  if _mentions(s.get("query"), s.get("database"), db, table)]
    results = validate(pd.DataFrame({"problem": pd.Series(errors, dtype=object)}),
                       [Check("no_decode_errors", "no values the decoder could not decode",
                              e.ExpectTableRowCountToEqual(value=0))], BEFORE, name, config.sample_size)
    results += validate(pd.DataFrame({"statement": pd.Series(statements, dtype=object)}),
                        [Check("no_statement_dml", "no statement-based DML for the table (cannot become rows)",
                               e.ExpectTableRowCountToEqual(value=0))], BEFORE, name, config.sample_size)
    for r, found in ((results[0], errors), (results[1], statements)):
        if found:
            r.sample = found[:config.sample_size]
    return results


# -- after merge --------------------------------------------------------------------------------------------

def after_merge_gate(pb, store, opts, engine, layout) -> GateReport:
    """Run every after-merge expectation on the current tables the batch merged into."""
    import pandas as pd

    t0 = time.perf_counter()
    config: QualityConfig = opts.quality
    e = _gx()
    report = GateReport(pb.batch, AFTER)
    table_maps = store.read_table_maps(pb)
    registry = TableRegistry(engine, layout)
    batch_end = datetime.fromisoformat(pb.prepared_at)
    for name, info in sorted(pb.tables.items()):
        if not info["has_pk"]:
            continue
        versions, last_tm = table_maps[name]
        # The schema version the table mirrors now (the registry): the batch's last one, or a newer one the table
        # already had when the batch is a backfill of older changes evolved forward.
        recorded, definition = registry.get(name)
        mirror = versions.get(recorded) if recorded is not None else last_tm
        if mirror is not None:
            expected = pa.schema([*current_schema(mirror), pa.field(SEQ, pa.int64())])
            keys, names, what = _keys(mirror), expected.names, f"version {recorded}"
        else:  # only the definition is at hand: names and key, not Arrow types
            expected = None
            keys = definition.row_key() if definition else _keys(last_tm)
            names = [c.name for c in definition.columns] + ["_commit_ts", SEQ] if definition else []
            what = f"version {recorded} (names)"
        path = layout.current_path(info["database"], info["table"])
        if info.get("lifecycle"):
            # Renamed, truncated, dropped or created again in the batch (binlake.lake.lifecycle): the table may hold
            # another table's rows and layout now; only the key is checked, where the table exists.
            if engine.exists(path):
                schema = _table_schema(engine, path)
                keys = [k for k in keys if k in schema.names]
                if keys:
                    report.results += _pk_unique(engine, path, keys, keys, name, config)[0]
            continue
        schema = _table_schema(engine, path)
        results, rows, newest = _pk_unique(engine, path, keys, [c for c in [*keys, "_commit_ts"] if c in schema.names],
                                           name, config)
        results += validate(pd.DataFrame({c: [] for c in schema.names}), [Check(
            "columns_match", f"columns equal the schema version the table mirrors ({what})",
            e.ExpectTableColumnsToMatchSet(column_set=names, exact_match=True))], AFTER, name, config.sample_size)
        if expected is not None:
            types = [(f.name, str(f.type), str(schema.field(f.name).type)) for f in expected
                     if f.name in schema.names]
            results += validate(pd.DataFrame(types, columns=["column", "expected_type", "actual_type"]),
                                [Check("columns_match", "column types equal the schema version's",
                                       e.ExpectColumnPairValuesToBeEqual(column_A="expected_type",
                                                                         column_B="actual_type"))],
                                AFTER, name, config.sample_size)
        pre = pb.premerge.get("tables", {}).get(name, {})
        if pre.get("inserts") is not None:
            want = pre["count"] + pre["inserts"] - pre["deletes"]
            figures = pd.DataFrame({"rows": [rows], "expected": [want]})
            results += validate(figures, [Check(
                "count_reconciles", f"rows = {pre['count']} before + {pre['inserts']} net inserts - "
                f"{pre['deletes']} net deletes", e.ExpectColumnPairValuesToBeEqual(column_A="rows",
                                                                                  column_B="expected"))],
                AFTER, name, config.sample_size)
        if config.max_lag_seconds is not None and rows and newest is not None:
            lag = (batch_end - newest).total_seconds()
            results += validate(pd.DataFrame({"lag_seconds": [lag]}), [Check(
                "freshness", f"newest _commit_ts ({newest.isoformat()}) within {config.max_lag_seconds:g} s of the "
                f"batch end ({batch_end.isoformat()})",
                e.ExpectColumnValuesToBeBetween(column="lag_seconds", max_value=config.max_lag_seconds))],
                AFTER, name, config.sample_size)
        report.results += results
    report.seconds = time.perf_counter() - t0
    return report


def _pk_unique(engine, path: str, keys: list[str], columns: list[str], name: str,
               config: QualityConfig) -> tuple[list[ExpectationResult], int, datetime | None]:
    """pk_unique on a current table, its row count and newest `_commit_ts`. A table of more than PK_BUCKET_ROWS
    rows (an engine that streams its columns) is checked a bucket of keys at a time (a key's rows are all in one
    bucket, so the results combine into the whole table's), never whole."""
    check = [Check("pk_unique", "primary key unique in the current table", _unique(keys))]
    stream = getattr(engine, "read_batches", None)
    rows, newest = 0, None
    if stream is not None:
        for b in stream(path, columns):
            rows += b.num_rows
            if "_commit_ts" in columns and b.num_rows:
                top = pc.max(b.column("_commit_ts")).as_py()
                newest = top if newest is None or (top is not None and top > newest) else newest
    if stream is None or rows <= PK_BUCKET_ROWS:
        frame, rows, newest = _current(engine, path, columns)
        return validate(frame, check, AFTER, name, config.sample_size), rows, newest
    count = -(-rows // PK_BUCKET_ROWS)
    parts, repeated = [], []
    for i in range(count):
        found = [b.filter(pa.array(key_hash(b, keys) % np.uint64(count) == np.uint64(i))) for b in stream(path, keys)]
        bucket = pa.concat_tables(found) if found else pa.table({k: [] for k in keys})
        del found
        parts.append(validate(bucket.to_pandas(), check, AFTER, name, config.sample_size))
        if not parts[-1][0].success:
            counted = bucket.group_by(keys, use_threads=False).aggregate([([], "count_all")])
            repeated.append(counted.filter(pc.greater(counted.column("count_all"), 1)).select(keys))
        del bucket
        pa.default_memory_pool().release_unused()
    results = _combine(parts, config.sample_size)
    if repeated:  # the sample as the whole table's run reports it: its first repeated keys' rows in table order
        results[0] = replace(results[0], sample=_pk_sample(stream, path, keys, pa.concat_tables(repeated), check,
                                                           name, config))
    return results, rows, newest


def _rows_of(stream, path: str, keys: list[str], wanted: pa.Table, limit: int | None = None) -> pa.Table:
    """The rows (key columns) of a table whose key is one of `wanted`'s, in table order (the first `limit`)."""
    hashes = key_hash(wanted, keys)
    targets = set(zip(*(wanted.column(k).to_pylist() for k in keys), strict=True))
    out, n = [], 0
    for b in stream(path, keys):
        b = b.filter(pa.array(np.isin(key_hash(b, keys), hashes)))
        if b.num_rows:
            hit = [t in targets for t in zip(*(b.column(k).to_pylist() for k in keys), strict=True)]
            b = b.filter(pa.array(hit, pa.bool_()))
            out.append(b)
            n += b.num_rows
        if limit is not None and n >= limit:
            break
    rows = pa.concat_tables(out) if out else wanted.slice(0, 0)
    return rows.slice(0, limit) if limit is not None else rows


def _pk_sample(stream, path: str, keys: list[str], repeated: pa.Table, check: list[Check], name: str,
               config: QualityConfig) -> list:
    """pk_unique's sample on the whole table (the first repeated rows in table order), from the repeated keys:
    all rows of the keys of the first rows that repeat a key hold those rows, in the same order."""
    first = _rows_of(stream, path, keys, repeated, min(config.sample_size, GX_PARTIAL))
    rows = _rows_of(stream, path, keys, first.group_by(keys, use_threads=False).aggregate([]))
    return validate(rows.to_pandas(), check, AFTER, name, config.sample_size)[0].sample


def _current(engine, path: str, columns: list[str]) -> tuple[object, int, datetime | None]:
    """A current table's columns to validate (a Spark DataFrame when the engine reads them as one: Great
    Expectations' Spark engine then runs on the executors), its row count and newest `_commit_ts`."""
    figures = getattr(engine, "table_figures", None)
    if figures is not None:  # delta-spark: a DataFrame, its count and newest commit by aggregates
        return figures(path, columns)
    table = engine.read(path, columns)
    newest = pc.max(table.column("_commit_ts")).as_py() if "_commit_ts" in columns and table.num_rows else None
    return table.to_pandas(), table.num_rows, newest


def _table_schema(engine, path: str) -> pa.Schema:
    getter = getattr(engine, "table_schema", None)
    if getter is not None:
        return getter(path)
    return engine.read(path).schema
