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
from dataclasses import dataclass, field
from datetime import datetime

import pyarrow as pa
import pyarrow.compute as pc

from ..exitcodes import ExitCode
from ..lake.current import current_schema, merge_input, merge_schema, segments
from ..lake.engines import SEQ
from ..lake.ingest import TableRegistry
from ..lake.staging import staged_segments
from ..settings import QualityConfig
from .config import UserExpectation, expectation_class, load_expectations
from .runner import Check, ExpectationResult, ensure_context, validate

BEFORE, AFTER = "before merge", "after merge"
BATCH_TABLE = "(batch)"
ORDER_COLUMNS = ["_file_seq", "_pos", "_sub", "_row"]
UNHANDLED_EVENTS = ["LOAD", "NEW_LOAD", "CREATE_FILE", "APPEND_BLOCK", "EXEC_LOAD", "DELETE_FILE",
                    "BEGIN_LOAD_QUERY", "EXECUTE_LOAD_QUERY", "INCIDENT"]
DECODE_ERRORS = ("undecodable_text",)


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


def _history_checks(name: str, history: pa.Table, versions: dict, keys: list[str], ranges: dict,
                    user: list[UserExpectation], config: QualityConfig) -> list[ExpectationResult]:
    e = _gx()
    user_columns = {u.kwargs[k] for u in user for k in ("column", "column_A", "column_B") if k in u.kwargs}
    user_columns |= {c for u in user for c in u.kwargs.get("column_list", [])}
    all_keys = [k for tm in versions.values() for k in _keys(tm)] if keys else []
    wanted = [*keys, *all_keys, *ORDER_COLUMNS, "_schema_version", "_op", *sorted(user_columns - set(keys))]
    cols = [c for c in dict.fromkeys(wanted) if c in history.column_names]
    data = history.select(cols)
    # Rows whose columns the server named (FULL metadata, no timeline) have no schema version and need none.
    server_named = [v for v, tm in versions.items() if v is None and tm.names_from_server]
    named_by = data.column("_schema_version")
    if server_named:
        named_by = pc.fill_null(named_by, "server")
    # Low-cardinality strings as categoricals: cheaper to hand to pandas and for GE to hash and scan.
    data = data.drop_columns(["_schema_version"]).append_column("_named_by", pc.dictionary_encode(named_by))
    data = data.set_column(data.column_names.index("_op"), "_op", pc.dictionary_encode(data.column("_op")))
    frame = data.to_pandas()
    key_checks = [Check("pk_not_null", f"primary key column {k} is not null",
                        e.ExpectColumnValuesToNotBeNull(column=k)) for k in keys]
    checks = [Check("seq_increasing", "change positions strictly increase within each file",
                    e.ExpectCompoundColumnsToBeUnique(column_list=ORDER_COLUMNS)),
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
    # Per file: the positions lie inside the range this batch decoded (no event from an earlier batch again).
    spans = data.group_by("_file_seq").aggregate([("_pos", "min"), ("_pos", "max")]).to_pylist()
    results += _validate_spans([(r["_file_seq"], r["_pos_min"], r["_pos_max"]) for r in spans], ranges, name,
                               config)
    if user:
        rows = frame[frame["_op"] != "delete"]
        user_checks = [Check(f"user:{u.name}", "user expectation (schemas/expectations)",
                             expectation_class(u.name)(**u.kwargs)) for u in user]
        results += validate(rows, user_checks, BEFORE, name, config.sample_size)
    return results


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
    import pandas as pd

    written = {r["_op"]: r["_op_count"] for r in history.group_by("_op").aggregate([("_op", "count")]).to_pylist()}
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
                    frame, _rows, _newest = _current(engine, path, keys)
                    report.results += validate(frame, [Check("pk_unique", "primary key unique in the current table",
                                                             _unique(keys))], AFTER, name, config.sample_size)
            continue
        schema = _table_schema(engine, path)
        frame, rows, newest = _current(engine, path, [c for c in [*keys, "_commit_ts"] if c in schema.names])
        results = validate(frame, [Check("pk_unique", "primary key unique in the current table", _unique(keys))],
                           AFTER, name, config.sample_size)
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
