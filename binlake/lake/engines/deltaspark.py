"""The cluster engine: delta-spark (DataFrame writes and DeltaTable.merge) on a SparkSession with the Delta jars.

pyspark and delta are imported lazily, inside methods. `binlake.spark.build_spark_session` builds sessions
with the jars `scripts/dev.sh setup` fetched, `spark.sql.extensions=io.delta.sql.DeltaSparkSessionExtension` and
`spark.sql.catalog.spark_catalog=org.apache.spark.sql.delta.catalog.DeltaCatalog`.

Exactly-once:
- appends and rewrites pass the DataFrame writer options `txnAppId`/`txnVersion` (Delta skips a write whose
  version is <= the one recorded for the app id, silently, and its conflict checker fails a commit that races a
  winning commit with the same app id); a per-write token in the commit metadata tells whether this write is the
  one that committed;
- MERGE has no writer options; delta-spark (since 2.4, delta-io/delta#1555) takes the same pair from the session
  confs `spark.databricks.delta.write.txnAppId` / `spark.databricks.delta.write.txnVersion`. Delta leaves them set
  after the commit (autoReset is off by default), so they are set and unset around each merge under a lock, and
  the commit metadata JSON goes to `spark.databricks.delta.commitInfo.userMetadata` the same way.
- The log is read with delta-rs (same path; pass `storage_options` for object stores): Delta Spark has no public
  API returning a txn version, and its history hides delta-rs's commit metadata. Restore is delta-rs's, the one
  way to lower txn versions in the RESTORE commit (Delta Spark's writes refuse a lower version: "already
  committed").
Verified with delta-spark 4.4.0 on Spark 4.2.0 by tests/integration/test_engines.py; see docs/engines.md.
"""

from __future__ import annotations

import json
import random
import re
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, date, datetime
from functools import reduce
from typing import Any, TypeVar

import pyarrow as pa

from ..crashpoints import crash_point
from ..staging import (
    DATE,
    SEQ_FILE_SHIFT,
    StagedSegment,
    entry_pieces,
    linkable,
    local_lake,
    net_location,
    net_pieces,
    net_schema,
    piece_location,
    piece_schema,
    unified_schema,
)
from .base import (
    DELETED,
    SEQ,
    ColumnChange,
    EngineError,
    EngineUnavailable,
    HistoryEntry,
    MergeInputError,
    check_batch,
    is_committed,
)
from .commitmeta import commit_meta, meta_of
from .deltars import DeltaRsEngine
from .mergeplan import MergeSpec, current_spec, delete_older_spec, quote, tombstone_spec
from .netreduce import bucket_count, merge_segment, reduce_bucket
from .schema_change import apply_changes, plan, renamed
from .tombstones import (
    check_merge_columns,
    copy_with_tombstones,
    merge_with_tombstones,
    replace_schema_with_tombstones,
    role_app_id,
    tombstone_path,
)

T = TypeVar("T")

DELTA_TABLE_CLASS = "io.delta.tables.DeltaTable"
DELTA_EXTENSION = "io.delta.sql.DeltaSparkSessionExtension"
DELTA_CATALOG = "org.apache.spark.sql.delta.catalog.DeltaCatalog"
TXN_APP_ID_CONF = "spark.databricks.delta.write.txnAppId"
TXN_VERSION_CONF = "spark.databricks.delta.write.txnVersion"
USER_METADATA_CONF = "spark.databricks.delta.commitInfo.userMetadata"
MATERIALIZE_CONF = "spark.databricks.delta.merge.materializeSource"


def available(spark: Any) -> tuple[bool, str]:
    """Whether delta-spark can run on `spark`, and why not."""
    if spark is None:
        return False, "the delta-spark engine needs a SparkSession and none was given"
    try:
        import delta.tables  # noqa: F401
    except ImportError:
        return False, "the delta-spark Python package is not installed (pip install 'binlake[delta-spark]')"
    jvm = getattr(spark, "_jvm", None)
    if jvm is None:
        return False, "the delta-spark engine needs a classic (JVM) SparkSession, not Spark Connect"
    try:
        loader = jvm.java.lang.Thread.currentThread().getContextClassLoader()
        jvm.java.lang.Class.forName(DELTA_TABLE_CLASS, False, loader)
    except Exception:
        return False, (f"the Delta jars are not on Spark's classpath (JVM class {DELTA_TABLE_CLASS} not found): "
                       "`bash scripts/dev.sh setup` fetches them and binlake.spark.build_spark_session adds them "
                       "to the sessions it builds")
    extensions = spark.conf.get("spark.sql.extensions", "") or ""
    catalog = spark.conf.get("spark.sql.catalog.spark_catalog", "") or ""
    if DELTA_EXTENSION not in extensions or catalog != DELTA_CATALOG:
        return False, (f"the session is not configured for Delta: set spark.sql.extensions={DELTA_EXTENSION} and "
                       f"spark.sql.catalog.spark_catalog={DELTA_CATALOG}")
    return True, "delta-spark is available"


def _has_ntz(schema: pa.Schema | pa.DataType) -> bool:
    if isinstance(schema, pa.Schema):
        return any(_has_ntz(f.type) for f in schema)
    if pa.types.is_timestamp(schema):
        return schema.tz is None
    if pa.types.is_struct(schema):
        return any(_has_ntz(schema.field(i).type) for i in range(schema.num_fields))
    if pa.types.is_list(schema) or pa.types.is_large_list(schema):
        return _has_ntz(schema.value_type)
    return False


UNSTORABLE_NAME_CHARS = " ,;{}()\n\t="
"""Characters Delta Spark refuses in column names unless the table uses column mapping. Column-mapped tables are
not an option: delta-rs (the default engine, and this engine's log reader) reads their columns as nulls."""


def check_column_names(schema: pa.Schema | pa.DataType, where: str) -> None:
    """EngineError naming the first column (or struct field) Delta Spark cannot store without column mapping."""
    if isinstance(schema, pa.Schema):
        fields = list(schema)
    elif pa.types.is_struct(schema):
        fields = [schema.field(i) for i in range(schema.num_fields)]
    elif pa.types.is_list(schema) or pa.types.is_large_list(schema):
        fields = [schema.value_field]
    else:
        fields = []
    for f in fields:
        bad = sorted({c for c in f.name if c in UNSTORABLE_NAME_CHARS})
        if bad:
            raise EngineError(f"{where}: column {f.name!r} contains {''.join(bad)!r}, which Delta Spark stores only in "
                              "tables with column mapping (that delta-rs cannot read); use the delta-rs engine for it")
        check_column_names(f.type, where)


def _conform(col, have, want):
    """Column `col` (Spark type `have`, None when absent) as type `want`: struct fields matched by name (a piece
    of an older schema version lacks the `_before` fields later versions added), other types cast."""
    from pyspark.sql import functions as F
    from pyspark.sql.types import StructType

    if have is None:
        return F.lit(None).cast(want)
    if isinstance(want, StructType) and isinstance(have, StructType) and have != want:
        fields = {f.name: f.dataType for f in have.fields}
        inner = F.struct(*[_conform(col.getField(f.name) if f.name in fields else None, fields.get(f.name),
                                    f.dataType).alias(f.name) for f in want.fields])
        return F.when(col.isNull(), F.lit(None).cast(want)).otherwise(inner)
    return col.cast(want) if have != want else col


SPARK_OOM_EXIT = 52  # Spark's exit code for a JVM (executor, or local driver) ended by an OutOfMemoryError


def jvm_exit_code(wait: float = 0.0) -> int | None:
    """The exit code of the Spark JVM this process launched (local mode: driver and executors), once it has
    exited; None while it runs, or when spark-submit launched it. `wait`: seconds to give a dying JVM to end."""
    context = getattr(sys.modules.get("pyspark"), "SparkContext", None)
    proc = getattr(getattr(context, "_gateway", None), "proc", None)
    if proc is None:
        return None
    try:
        return proc.wait(timeout=wait) if wait else proc.poll()
    except subprocess.TimeoutExpired:
        return None


def is_spark_failure(exc: BaseException) -> bool:
    """Whether an exception from a Spark call is Spark's (a failed job, or the JVM gone: py4j's connection to it
    reset or refused) rather than binlake's own."""
    if type(exc).__module__.startswith(("py4j", "pyspark")):
        return True
    return isinstance(exc, ConnectionError) and "pyspark" in sys.modules


def _jvm_exit_cause(code: int) -> str:
    if code == SPARK_OOM_EXIT:
        return f"the Spark JVM ran out of memory (java.lang.OutOfMemoryError; it exited with code {code})"
    return f"the Spark JVM exited with code {code}"


def spark_error_text(exc: BaseException) -> str | None:
    """str(exc), or None when that fails because the JVM is gone (a Py4JJavaError asks the JVM for its text)."""
    try:
        return str(exc)
    except Exception:
        return None


def spark_cause(exc: BaseException) -> str:
    """The cause of a failed Spark job in one line: the Spark JVM's end (out of memory, killed), the executor's
    exception, an OutOfMemoryError, a lost executor, else the first line of the error."""
    text = spark_error_text(exc)
    lost = text is None or isinstance(exc, ConnectionError) or type(exc).__name__ == "Py4JNetworkError" or \
        "because SparkContext was shut down" in text  # the JVM is ending (its shutdown stops the running jobs)
    code = jvm_exit_code(wait=60.0 if lost else 0.0)
    if code is not None:
        return _jvm_exit_cause(code)
    if lost:
        return f"the connection to the Spark JVM was lost ({type(exc).__name__}: {' '.join((text or '').split())[:200]})"
    if "Python worker exited unexpectedly (crashed)" in text and "OutOfMemoryError" not in text:
        return "an executor's Python worker exited unexpectedly (crashed: killed, or out of memory)"
    for pattern in (r"(java\.lang\.OutOfMemoryError[^\n]*)", r"(ExecutorLostFailure[^\n]*)",
                    r"\n(\w+(?:Error|Exception|Mismatch|Missing): [^\n]*)\n", r"(SparkException: [^\n]*)"):
        m = re.search(pattern, text)
        if m:
            cause = " ".join(m.group(1).split())[:400]
            if "OutOfMemoryError" not in cause and re.search(rf"(?:exit code|exited with code) {SPARK_OOM_EXIT}\b",
                                                             cause):
                cause += " (the executor ran out of memory: java.lang.OutOfMemoryError)"
            return cause
    first = text.strip().splitlines()[0] if text.strip() else type(exc).__name__
    return " ".join(first.split())[:400]


class SparkStageFailed(EngineUnavailable):
    """A Spark job of a commit stage failed (an executor's error, out of memory, a lost executor): one line naming
    the stage, the table and the binlog positions. Nothing of it is committed; a re-run converges."""


@contextmanager
def _stage(stage: str, path: str, pieces: list[dict]):
    """Spark failures inside a staged commit as one line (binlake's own errors pass through)."""
    try:
        yield
    except (EngineError, ValueError, TypeError, KeyError):
        raise
    except Exception as exc:
        if not is_spark_failure(exc):
            raise
        seqs = [(p["min_seq"], p["max_seq"]) for p in pieces] or [(0, 0)]
        lo, hi = min(a for a, _ in seqs), max(b for _, b in seqs)
        where = (f"file seq {lo >> SEQ_FILE_SHIFT} pos {lo & ((1 << SEQ_FILE_SHIFT) - 1)} to file seq "
                 f"{hi >> SEQ_FILE_SHIFT} pos {hi & ((1 << SEQ_FILE_SHIFT) - 1)}")
        raise SparkStageFailed(f"Spark {stage} stage failed for {path} (changes at {where}): "
                               f"{spark_cause(exc)}") from None


class DeltaSparkEngine:
    """DeltaEngine on delta-spark; see the module docstring for how each commit is made exactly once."""

    name = "delta-spark"
    commit_threads = 4
    """Independent commits (one per table: the history appends) a batch may run at once from driver threads: each is
    a few small Spark jobs, mostly fixed cost (planning, Delta's log and snapshot work), which overlap."""
    TASK_MERGE_CONF = "spark.binlake.taskMergeMaxMB"
    TASK_MERGE_MB = 256
    """A staged segment into an existing current table whose pieces' net files total at most this many MB (Parquet
    on disk; the task holds a few times that) is merged by one Python task (_merge_in_task), a larger one by a Delta
    MERGE on the executors. The Spark conf TASK_MERGE_CONF overrides it (0: always the Delta MERGE)."""

    def __init__(self, spark: Any, storage_options: dict[str, str] | None = None, max_attempts: int = 6) -> None:
        ok, reason = available(spark)
        if not ok:
            raise EngineUnavailable(f"engine 'delta-spark' is unavailable: {reason}")
        self.spark = spark
        self.max_attempts = max_attempts
        self._log = DeltaRsEngine(storage_options)
        # binlake's own tables (control, registry, catalog: a few rows the driver builds) are read and committed
        # by the driver with delta-rs (base.bookkeeping_engine): through Spark each read and MERGE was a few
        # Spark jobs and Delta's snapshot work, seconds of fixed cost per batch in local mode.
        self.bookkeeping = self._log
        self._conf_lock = threading.Lock()
        self._read_schemas: dict[tuple[str, bool], Any] = {}  # staged pieces' Arrow schema -> Spark's inferred

    # -- plumbing ---------------------------------------------------------------------------------------------

    def _table(self, path: str):
        from delta.tables import DeltaTable

        return DeltaTable.forPath(self.spark, str(path))

    def _df(self, data: pa.Table):
        from pyspark.sql.pandas.types import from_arrow_schema

        # An explicit schema keeps Arrow timestamps without zone as TIMESTAMP_NTZ (the default would make them
        # session-local TIMESTAMPs).
        return self.spark.createDataFrame(data, schema=from_arrow_schema(data.schema, prefer_timestamp_ntz=True))

    def _writer(self, df, mode: str, app_id: str, batch: int, meta: dict[str, Any]):
        return (df.write.format("delta").mode(mode).option("txnAppId", app_id).option("txnVersion", str(batch))
                .option("userMetadata", json.dumps(meta)))

    def _ensure_ntz_feature(self, path: str, schema: pa.Schema) -> None:
        """Delta Spark enables the timestampNtz table feature when it creates a table with such a column, but not
        when one is added to an existing table (append with mergeSchema, rewrite): enable it first then. A
        protocol-only commit, idempotent by nature (the one commit here without a txn)."""
        if not (self.exists(path) and _has_ntz(schema)):
            return
        if "timestampNtz" in (self._log._dt(path).protocol().writer_features or []):
            return
        location = str(path).replace("`", "``")
        self.spark.sql(f"ALTER TABLE delta.`{location}` SET TBLPROPERTIES ('delta.feature.timestampNtz' = 'supported')")

    def _retry(self, attempt: Callable[[], T]) -> T:
        import delta.exceptions as dx

        # The Python conflict classes are siblings (not subclasses of DeltaConcurrentModificationException).
        conflicts = (dx.DeltaConcurrentModificationException, dx.ConcurrentWriteException,
                     dx.MetadataChangedException, dx.ProtocolChangedException, dx.ConcurrentAppendException,
                     dx.ConcurrentDeleteReadException, dx.ConcurrentDeleteDeleteException,
                     dx.ConcurrentTransactionException)
        for n in range(self.max_attempts):
            try:
                return attempt()
            except conflicts:
                if n == self.max_attempts - 1:
                    raise
                time.sleep(0.1 * 2**n * (1 + random.random()))
        raise AssertionError("unreachable")

    @contextmanager
    def _session_txn(self, meta: dict[str, Any], extra: dict[str, str] | None = None) -> Iterator[None]:
        """Session confs that make the next DML commit carry the txn (and `extra` ones); restored afterwards."""
        txn = meta["txns"][0]
        wanted = {TXN_APP_ID_CONF: txn["appId"], TXN_VERSION_CONF: str(txn["version"]),
                  USER_METADATA_CONF: json.dumps(meta), **(extra or {})}
        with self._conf_lock:
            conf = self.spark.conf
            saved = {k: conf.get(k, None) for k in wanted}
            for k, v in wanted.items():
                conf.set(k, v)
            try:
                yield
            finally:
                for k, v in saved.items():
                    if v is None:
                        conf.unset(k)
                    else:
                        conf.set(k, v)

    # -- reads ------------------------------------------------------------------------------------------------

    def exists(self, path: str) -> bool:
        # Not DeltaTable.isDeltaTable: it walks up to the nearest `_delta_log`, so the tombstone table's path
        # (nested in its current table) would "exist" before it is created. A table is its own `_delta_log`.
        return self._log.exists(path)

    def version(self, path: str) -> int | None:
        if not self.exists(path):
            return None
        return self._log.version(path)

    def txn_version(self, path: str, app_id: str) -> int | None:
        return self._log.txn_version(path, app_id)

    def table_schema(self, path: str) -> pa.Schema:
        from pyspark.sql.pandas.types import to_arrow_schema

        return to_arrow_schema(self.spark.read.format("delta").load(str(path)).schema, timezone="UTC")

    def table_figures(self, path: str, columns: list[str]):
        """Some columns of a table as a DataFrame (the after-merge gate validates it on the executors), its row
        count and newest `_commit_ts` (aggregates; None without that column)."""
        from pyspark.sql import functions as F

        df = self.spark.read.format("delta").load(str(path)).select(*[F.col(quote(c)) for c in columns])
        newest = F.max(F.unix_micros(F.col("_commit_ts"))) if "_commit_ts" in columns else F.lit(None)
        got = df.agg(F.count(F.lit(1)), newest).first()
        return df, got[0], (datetime.fromtimestamp(got[1] / 1e6, UTC) if got[1] is not None else None)

    def gate_inputs(self, stage: str, info: dict, server_named: bool, old_versions: list[list[str]],
                    key_groups: dict[tuple, list[tuple[int, StagedSegment]]]) -> dict:
        """What the before-merge gate checks on a staged table, as DataFrames and small aggregates: `data` (the
        history with `_named_by`: its schema version, 'server' for server-named rows when `server_named`),
        `current_key_rows` / `old_key_rows` (rows of the other versions' key, per entry of `old_versions`),
        `non_deletes`, `spans` [(file seq, first, last position)], `ops` {op: rows}, `key_frames` {keys: each
        segment's reduced keys with `_segment`}."""
        from pyspark.sql import functions as F

        history = self.staged_frame(stage, info)
        named = F.col("_schema_version")
        data = history.withColumn("_named_by", F.coalesce(named, F.lit("server")) if server_named else named)
        olds = [v for vs in old_versions for v in vs]
        spans = data.groupBy("_file_seq").agg(F.min("_pos"), F.max("_pos")).collect()
        key_frames = {}
        for keys, segs in key_groups.items():
            parts = [self.merge_frame(seg).select(*[F.col(quote(k)) for k in keys]).withColumn("_segment", F.lit(i))
                     for i, seg in segs]
            key_frames[keys] = reduce(lambda a, b: a.unionByName(b), parts)
        return {"data": data, "current_key_rows": data.where(~F.col("_named_by").isin(olds)),
                "old_key_rows": [data.where(F.col("_named_by").isin(vs)) for vs in old_versions],
                "non_deletes": data.where(F.col("_op") != "delete"),
                "spans": [(r[0], r[1], r[2]) for r in spans],
                "ops": {r["_op"]: r["count"] for r in history.groupBy("_op").count().collect()},
                "key_frames": key_frames}

    def read(self, path: str, columns: list[str] | None = None) -> pa.Table:
        from pyspark.sql import functions as F

        df = self.spark.read.format("delta").load(str(path))
        if columns is not None:
            df = df.select(*[F.col(quote(c)) for c in columns])
        schema = self.table_schema(path)
        if columns is not None:
            schema = pa.schema([schema.field(c) for c in columns])
        return df.toArrow().cast(schema)

    def history(self, path: str) -> list[HistoryEntry]:
        # Read with delta-rs: Spark's DESCRIBE HISTORY hides the commit-info key delta-rs records binlake's
        # metadata under, so a table delta-rs wrote would show no txns here.
        return self._log.history(path)

    def _history_meta(self, path: str) -> list[tuple[int, dict[str, Any] | None]]:
        return self._log._history_meta(path)

    def _wrote(self, path: str, before: int | None, token: str) -> bool:
        """Whether the commit a write tagged with `token` exists after version `before`. Delta Spark skips a write
        whose txn the table already has without an error, and a racing writer may have committed meanwhile, so
        a changed version alone does not say that this write committed."""
        dt = self._log._dt(path)
        newer = dt.version() - (-1 if before is None else before)
        return newer > 0 and any((meta_of(h) or {}).get("writer") == token for h in dt.history(newer))

    # -- writes -----------------------------------------------------------------------------------------------

    def create_empty(self, path: str, schema: pa.Schema, partition_by: list[str] | None = None) -> None:
        """An empty table: one metadata-only commit (protocol, schema, partition columns), written with delta-rs
        (the log reader): the same commit as Spark's empty-DataFrame write without its Spark jobs, which cost seconds
        of CPU per table in local mode. Spark reads and writes it as its own (timestamp without zone columns get
        the timestampNtz table feature either way)."""
        if self.exists(path):
            return
        check_column_names(schema, f"create {path}")
        self._log.create_empty(path, schema, partition_by)

    def _create(self, path: str, spark_schema, partition_by: list[str] | None = None) -> None:
        """The empty version 0 (no txn) binlake writes before a table's first commit, as the delta-rs engine does:
        both engines give a table the same versions (the catalog records them: `final_version`)."""
        df = self.spark.createDataFrame([], spark_schema)
        writer = df.write.format("delta").mode("ignore")
        if partition_by:
            writer = writer.partitionBy(*partition_by)
        try:
            writer.save(str(path))
        except Exception:
            if not self.exists(path):  # lost a creation race: fine; anything else is a real error
                raise

    def append(self, path: str, data: pa.Table, app_id: str, batch: int,
               partition_by: list[str] | None = None) -> bool:
        check_batch(app_id, batch)
        check_column_names(data.schema, f"append {path}")
        meta = commit_meta("append", [(app_id, batch)])

        def attempt() -> bool:
            self.create_empty(path, data.schema, partition_by)
            if is_committed(self.txn_version(path, app_id), batch):
                return False
            self._ensure_ntz_feature(path, data.schema)
            before, token = self.version(path), uuid.uuid4().hex
            self._writer(self._df(data), "append", app_id, batch, {**meta, "writer": token}).option(
                "mergeSchema", "true").save(str(path))
            return self._wrote(path, before, token)

        return self._retry(attempt)

    def staged_frame(self, stage: str, info: dict, schema: pa.Schema | None = None):
        """A batch entry's staged history pieces (binlake.lake.staging) as one DataFrame read by the executors:
        each piece conformed to the entries' unified schema, rows outside the entry's seq bounds left out."""
        from pyspark.sql import functions as F
        from pyspark.sql.pandas.types import from_arrow_schema

        pieces = entry_pieces(info)
        schema = schema or unified_schema(stage, pieces)
        target = from_arrow_schema(schema, prefer_timestamp_ntz=True)
        lo, hi = info.get("seq_from"), info.get("seq_to")
        # Pieces of one Parquet schema (a schema version's) are read as one scan: one plan branch, and Spark packs
        # small files into fewer tasks.
        groups: dict[tuple[str, str], list[str]] = {}
        for p in pieces:
            # Pieces of one commit date leave it out of their files (binlake.lake.staging): grouped by date too.
            date_only = p.get("commit_date") or ""
            groups.setdefault((str(piece_schema(stage, p)), date_only), []).append(piece_location(stage, p))
        frames = []
        for (key, date_only), locations in groups.items():
            # Spark infers a Parquet schema with a job; a schema it inferred before is given instead (the history
            # append and the merge read the same pieces).
            known = self._read_schemas.get((key, bool(date_only)))
            df = (self.spark.read.schema(known) if known is not None else self.spark.read).parquet(*locations)
            if known is None:
                self._read_schemas[(key, bool(date_only))] = df.schema
            if date_only and DATE not in df.columns:  # pieces of one commit date: not in their files
                df = df.withColumn(DATE, F.lit(date.fromisoformat(date_only)))
            have = {f.name: f.dataType for f in df.schema.fields}
            df = df.select(*[_conform(F.col(quote(f.name)), have.get(f.name), f.dataType).alias(f.name)
                             for f in target.fields])
            seq = F.shiftleft(F.col("_file_seq"), SEQ_FILE_SHIFT) + F.col("_pos")
            if lo is not None:
                df = df.where(seq >= F.lit(lo))
            if hi is not None:
                df = df.where(seq < F.lit(hi))
            frames.append(df)
        return reduce(lambda a, b: a.unionByName(b), frames)

    def append_staged(self, path: str, stage: str, info: dict, app_id: str, batch: int,
                      partition_by: list[str] | None = None) -> bool:
        """Append a batch entry's staged history pieces in one commit. When every piece already is a data file of
        the table as it stands (a local lake, one commit date each, the table's very columns:
        binlake.lake.staging.linkable), the pieces are linked into the table folder and committed as they are, in
        one metadata-only commit carrying (app_id, batch) (the delta-rs log writer's append_files): no row is read
        again. Otherwise the executors read the Parquet pieces and write the Delta files; the driver only commits
        (txnAppId/txnVersion make a retry a no-op)."""
        check_batch(app_id, batch)
        pieces = entry_pieces(info)
        if not pieces:
            return False
        schema = unified_schema(stage, pieces)
        check_column_names(schema, f"append {path}")
        if self._pieces_are_files(path, stage, info, schema, partition_by):
            with _stage("history append", path, pieces):
                return self._log._append_as_files(path, None, schema, app_id, batch, partition_by, (stage, info))
        meta = commit_meta("append", [(app_id, batch)])

        def attempt() -> bool:
            self.create_empty(path, schema, partition_by)
            if is_committed(self.txn_version(path, app_id), batch):
                return False
            self._ensure_ntz_feature(path, schema)
            before, token = self.version(path), uuid.uuid4().hex
            self._writer(self.staged_frame(stage, info, schema), "append", app_id, batch,
                         {**meta, "writer": token}).option("mergeSchema", "true").save(str(path))
            return self._wrote(path, before, token)

        with _stage("history append", path, pieces):
            return self._retry(attempt)

    def _pieces_are_files(self, path: str, stage: str, info: dict, schema: pa.Schema,
                          partition_by: list[str] | None) -> bool:
        """Whether every staged piece of the entry can be linked into the table at `path` as one of its data files
        (the table, or the one created, partitioned by commit date alone, with exactly the pieces' columns)."""
        if not self._log._files_fit(path, schema):
            return False
        parts = list(self._log._dt(path).metadata().partition_columns) if self.exists(path) else partition_by
        lo, hi = info.get("seq_from"), info.get("seq_to")
        return list(parts or []) == [DATE] and all(linkable(stage, p, lo, hi, schema) for p in entry_pieces(info))

    def run_merge(self, path: str, source: pa.Table, spec: MergeSpec, app_id: str, batch: int,
                  meta: dict[str, Any], check_txn: bool) -> bool:
        if check_txn and is_committed(self.txn_version(path, app_id), batch):
            return False
        frame = source if not isinstance(source, pa.Table) else self._df(source)
        merger = self._table(path).alias("t").merge(frame.alias("s"), spec.on)
        for clause in spec.clauses:
            assignments = dict(clause.assignments)
            if clause.kind == "matched_delete":
                merger = merger.whenMatchedDelete(condition=clause.predicate)
            elif clause.kind == "matched_update":
                merger = merger.whenMatchedUpdate(condition=clause.predicate, set=assignments)
            else:
                merger = merger.whenNotMatchedInsert(condition=clause.predicate, values=assignments)
        before, token = self.version(path), uuid.uuid4().hex
        meta = {**meta, "writer": token}
        # A source from driver memory (a local relation: a few control, registry or catalog rows) is deterministic
        # and read once: Delta need not copy it first (materializeSource "auto" does, one more job). Not for
        # DataFrame sources: Delta refuses "none" for a source with a cached part (DELTA_MERGE_SOURCE_CACHED_...).
        local = {MATERIALIZE_CONF: "none"} if isinstance(source, pa.Table) else None
        with self._session_txn(meta, local):
            merger.execute()
        if not check_txn or self._wrote(path, before, token):
            return True
        if is_committed(self.txn_version(path, app_id), batch):
            return False  # a racing writer committed the batch first; Delta skipped this merge silently
        # The merge changed nothing and made no commit: record the txn with an empty append.
        empty = self.spark.read.format("delta").load(str(path)).limit(0)
        before = self.version(path)
        self._writer(empty, "append", app_id, batch, meta).save(str(path))
        return self._wrote(path, before, token)

    def merge(self, path: str, data: pa.Table | StagedSegment, keys: list[str], app_id: str, batch: int) -> bool:
        check_batch(app_id, batch)
        check_column_names(data.schema, f"merge {path}")
        if isinstance(data, StagedSegment):
            with _stage("merge", path, data.pieces):
                return self._retry(lambda: self._merge_staged(path, data, keys, app_id, batch))
        return self._retry(lambda: merge_with_tombstones(self, path, data, keys, app_id, batch))

    # -- staged rows: reduced and merged on the executors ----------------------------------------------------

    def column_max(self, path: str, column: str):
        """The largest value of a column, aggregated by the executors."""
        from pyspark.sql import functions as F

        return self.spark.read.format("delta").load(str(path)).agg(F.max(F.col(quote(column)))).first()[0]

    def _segment_rows(self, seg: StagedSegment):
        info = {"staged": seg.pieces, "seq_from": seg.lo, "seq_to": seg.hi}
        return self.staged_frame(seg.stage, info) if entry_pieces(info) else None

    def _net_rows(self, seg: StagedSegment):
        """A staged segment's net changes as one DataFrame: the files the decode tasks wrote beside its pieces
        (binlake.lake.staging.write_net), when every piece has one of the segment's merge input schema and lies
        wholly inside the segment; else None (the pieces are reduced instead)."""
        from pyspark.sql.pandas.types import from_arrow_schema

        base = seg.base_schema or seg.schema
        if not net_pieces(seg.pieces, seg.lo, seg.hi) or any(net_schema(seg.stage, p) != base for p in seg.pieces):
            return None
        target = from_arrow_schema(base, prefer_timestamp_ntz=True)
        return self.spark.read.schema(target).parquet(*[net_location(seg.stage, p) for p in seg.pieces])

    def staged_span(self, seg: StagedSegment) -> tuple[int | None, int | None]:
        """The first and last `_seq` of a staged segment's rows (an aggregate)."""
        from pyspark.sql import functions as F

        rows = self._segment_rows(seg)
        if rows is None:
            return None, None
        seq = F.shiftleft(F.col("_file_seq"), SEQ_FILE_SHIFT) + F.col("_pos")
        got = rows.agg(F.min(seq), F.max(seq)).first()
        return got[0], got[1]

    def merge_frame(self, seg: StagedSegment):
        """A staged segment's merge input as a DataFrame: its last change per key (binlake.lake.current
        merge_input, computed by the executors): a window `row_number() over (partition by key order by binlog
        order desc)`; an update that changes the key also deletes the old key, ordered just before it."""
        from pyspark.sql import Window
        from pyspark.sql import functions as F
        from pyspark.sql.pandas.types import from_arrow_schema

        base = seg.base_schema or seg.schema
        spark_types = {f.name: f.dataType for f in from_arrow_schema(base, prefer_timestamp_ntz=True).fields}
        values = [f.name for f in base if f.name not in (SEQ, DELETED)]
        order = ["_file_seq", "_pos", "_sub", "_row"]
        net = self._net_rows(seg)
        rows = self._segment_rows(seg) if net is None else None
        if net is not None:
            # The pieces' net changes (one row per key and piece, written by the decode tasks): a key's newest row
            # is the one with the largest `_seq` (a key's rows in different pieces come from different events).
            frame = net
            if len(seg.pieces) > 1:
                latest = Window.partitionBy(*[F.col(quote(k)) for k in seg.keys]).orderBy(F.col(SEQ).desc())
                frame = frame.withColumn("__rn", F.row_number().over(latest)).where(F.col("__rn") == 1)
            frame = frame.select(*[F.col(quote(c)) for c in [*values, SEQ, DELETED]])
        elif rows is None:
            frame = self.spark.createDataFrame([], from_arrow_schema(base, prefer_timestamp_ntz=True))
        else:
            seq = (F.shiftleft(F.col("_file_seq"), SEQ_FILE_SHIFT) + F.col("_pos")).alias(SEQ)
            main = rows.select(*[F.col(quote(c)).cast(spark_types[c]).alias(c) for c in values], seq,
                               (F.col("_op") == "delete").alias(DELETED), *order, F.lit(1).alias("__kind"))
            rows = main
            # Only pieces whose updates changed a key (their manifests count them: staging.moved_keys; a piece
            # written without the count is read) are read a second time, for the old keys' deletes.
            full = {"staged": seg.pieces, "seq_from": seg.lo, "seq_to": seg.hi}
            movers = {**full, "staged": [p for p in seg.pieces if p.get("moved_keys") != 0]}
            if entry_pieces(movers):
                moving = self.staged_frame(seg.stage, movers, unified_schema(seg.stage, entry_pieces(full)))
                before = F.col("_before")
                moved = reduce(lambda a, b: a | b, [F.coalesce(before.getField(k) != F.col(quote(k)), F.lit(False))
                                                    for k in seg.keys])
                tombs = moving.where((F.col("_op") == "update") & moved).select(
                    *[(before.getField(c) if c in seg.keys else F.lit(None)).cast(spark_types[c]).alias(c)
                      for c in values], seq, F.lit(True).alias(DELETED), *order, F.lit(0).alias("__kind"))
                rows = main.unionByName(tombs)
            latest = Window.partitionBy(*[F.col(quote(k)) for k in seg.keys]).orderBy(
                *[F.col(c).desc() for c in order], F.col("__kind").desc())
            frame = (rows.withColumn("__rn", F.row_number().over(latest))
                     .where(F.col("__rn") == 1).select(*[F.col(quote(c)) for c in [*values, SEQ, DELETED]]))
        if seg.changes:  # a backfill: the rows evolved forward to the table's layout, as the server's ALTERs did
            changes = list(seg.changes)
            evolved = plan(base, changes)

            def evolve(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
                for b in batches:
                    yield apply_changes(b, changes)

            frame = frame.mapInArrow(evolve, from_arrow_schema(evolved, prefer_timestamp_ntz=True))
            target = {f.name: f.dataType for f in from_arrow_schema(seg.schema, prefer_timestamp_ntz=True).fields}
            frame = frame.select(*[F.col(quote(c)).cast(target[c]).alias(c) for c in seg.schema.names])
        return frame

    def _merge_staged(self, path: str, seg: StagedSegment, keys: list[str], app_id: str, batch: int) -> bool:
        """binlake.lake.engines.tombstones' merge, its steps on DataFrames (nothing is collected but counts).

        The reduced input is computed once (persisted), with its null keys and delete / upsert counts taken by one
        aggregate. A table this call creates is empty, so its MERGE is an append of the input's upserts (current
        table) or deletes (tombstones), the same rows in one write job instead of a join and a rewrite; and with no
        tombstone table before this segment, its upserts (one row per key, other keys than its deletes) cannot
        meet a tombstone, so the repair and prune step has nothing to do and is skipped."""
        from pyspark import StorageLevel
        from pyspark.sql import functions as F

        columns = [c for c in seg.schema.names if c != DELETED]
        fresh = not self.exists(path)
        if fresh and self._net_files_fit(path, seg):
            return self._merge_new_table(path, seg, keys, app_id, batch)
        if not fresh and self._task_merge_fits(path, seg):
            return self._merge_in_task(path, seg, keys, app_id, batch)
        if fresh:
            self.create_empty(path, pa.schema([seg.schema.field(c) for c in columns]))
        else:
            check_merge_columns(self, path, columns)
        if is_committed(self.txn_version(path, app_id), batch):
            return False
        key_schema = pa.schema([seg.schema.field(k) for k in keys] + [pa.field(SEQ, pa.int64())])
        tpath = tombstone_path(path)
        had_tombs = self.exists(tpath)
        if had_tombs and set(self.table_schema(tpath).names) != set(key_schema.names):
            self.reset(tpath, key_schema, role_app_id(app_id, "reset"), batch)  # the key changed (see tombstones)
        data = self.merge_frame(seg)
        key_cols = [F.col(quote(k)) for k in keys]
        if had_tombs:  # 1. rows older than their key's tombstone never apply
            tombs = self.spark.read.format("delta").load(str(tpath)).select(
                *key_cols, F.col(quote(SEQ)).alias("__tseq"))
            data = data.join(tombs, keys, "left").where(
                F.col("__tseq").isNull() | (F.col(quote(SEQ)) >= F.col("__tseq"))).drop("__tseq")
        source = data.persist(StorageLevel.MEMORY_AND_DISK)
        try:
            got = source.agg(*[F.sum(F.col(quote(c)).isNull().cast("long")).alias(f"n{i}")
                               for i, c in enumerate([*keys, SEQ])],
                             F.sum(F.col(DELETED).cast("long")).alias("deletes"),
                             F.sum((~F.col(DELETED)).cast("long")).alias("upserts")).first()
            bad = [c for i, c in enumerate([*keys, SEQ]) if got[f"n{i}"]]
            if bad:
                raise MergeInputError(f"merge input column {bad[0]!r} has nulls")
            n_deletes, n_upserts = got["deletes"] or 0, got["upserts"] or 0
            if n_deletes:  # 2. deletes remembered first
                deletes = source.where(F.col(DELETED)).select(*key_cols, F.col(quote(SEQ)))
                meta = commit_meta("tombstones", [(app_id, batch)])
                if not self.exists(tpath):
                    self.create_empty(tpath, key_schema)
                    self._append_once(tpath, deletes, app_id, batch, meta)
                else:
                    self.run_merge(tpath, deletes, tombstone_spec(keys), app_id, batch, meta, check_txn=False)
                crash_point("merge-tombstones")
            meta = commit_meta("merge", [(app_id, batch)], tombstonesVersion=self.version(tpath))
            if fresh:  # 3. the MERGE into the empty table this call created: its upserts appended
                upserts = source.where(~F.col(DELETED)).select(*[F.col(quote(c)) for c in columns])
                if not self._append_once(path, upserts, app_id, batch, meta):
                    return False
            elif not self.run_merge(path, source, current_spec(columns, keys), app_id, batch, meta, check_txn=True):
                return False  # 3. the MERGE (skipped when the txn is in)
            if had_tombs and n_upserts:  # 4. repair and prune
                upserts = source.where(~F.col(DELETED)).select(*key_cols, F.col(quote(SEQ)))
                tombs = self.spark.read.format("delta").load(str(tpath)).select(
                    *key_cols, F.col(quote(SEQ)).alias("__tseq"))
                joined = upserts.join(tombs, keys, "inner").persist(StorageLevel.MEMORY_AND_DISK)
                try:
                    overtaken = joined.where(F.col("__tseq") > F.col(quote(SEQ))).select(
                        *key_cols, F.col("__tseq").alias(SEQ))
                    if not overtaken.isEmpty():
                        repair_id = role_app_id(app_id, "repair")
                        self.run_merge(path, overtaken, delete_older_spec(keys), repair_id, batch,
                                       commit_meta("repair", [(repair_id, batch)]), check_txn=False)
                    redundant = joined.where(F.col("__tseq") < F.col(quote(SEQ))).select(*key_cols, F.col(quote(SEQ)))
                    if not redundant.isEmpty():
                        prune_id = role_app_id(app_id, "prune")
                        self.run_merge(tpath, redundant, delete_older_spec(keys), prune_id, batch,
                                       commit_meta("prune", [(prune_id, batch)]), check_txn=False)
                finally:
                    joined.unpersist()
            return True
        finally:
            source.unpersist()

    def _net_files_fit(self, path: str, seg: StagedSegment) -> bool:
        """Whether a segment merged into a current table it creates can be reduced by Python tasks into the table's
        data files (_merge_new_table): a local lake and stage, no tombstone table yet, no backfill, and every piece's
        net changes written in the merge input's schema."""
        return (local_lake(path) and "://" not in seg.stage and not seg.changes and bool(seg.keys)
                and not self.exists(tombstone_path(path)) and net_pieces(seg.pieces, seg.lo, seg.hi)
                and all(net_schema(seg.stage, p) == seg.schema for p in seg.pieces))

    def _merge_new_table(self, path: str, seg: StagedSegment, keys: list[str], app_id: str, batch: int) -> bool:
        """The merge of a staged segment into the current table it creates (empty, no tombstones: the merge rule
        keeps the input's upserts, and its deletes become the tombstones). A Spark job of Python tasks, one per
        key-hash bucket (binlake.lake.engines.netreduce), reduces the pieces' net changes to one row per key and writes the
        upserts as data files of the table and the deletes as data files of its tombstone table; the driver commits
        them as they are (the delta-rs log writer's append_files, metadata only), the tombstones first, each commit
        carrying (app_id, batch), as the Spark path's appends do, and `reducedBy: spark` in binlake's commit record.
        No Spark SQL plan, no Delta snapshot job."""
        columns = [c for c in seg.schema.names if c != DELETED]
        current = pa.schema([seg.schema.field(c) for c in columns])
        key_schema = pa.schema([seg.schema.field(k) for k in keys] + [pa.field(SEQ, pa.int64())])
        tpath = tombstone_path(path)
        self.create_empty(path, current)
        if is_committed(self.txn_version(path, app_id), batch):
            return False
        pieces = sorted(seg.pieces, key=lambda p: (p["min_seq"], p["path"]))
        buckets = bucket_count(pieces, seg.schema, keys)
        tasks = [(seg.stage, pieces, keys, seg.schema, b, buckets, str(path), tpath) for b in range(buckets)]
        results = self.spark.sparkContext.parallelize(tasks, len(tasks)).map(reduce_bucket).collect()
        bad = next((r["nulls"] for r in results if r["nulls"]), None)
        if bad is not None:
            raise MergeInputError(f"merge input column {bad!r} has nulls")
        if any(r["deletes"] for r in results):
            self.create_empty(tpath, key_schema)
            self._log.append_files(tpath, [f for r in results for f in r["delete_files"]], key_schema, app_id,
                                   batch, meta=commit_meta("tombstones", [(app_id, batch)], reducedBy="spark"))
            crash_point("merge-tombstones")
        meta = commit_meta("merge", [(app_id, batch)], tombstonesVersion=self.version(tpath), reducedBy="spark")
        return self._log.append_files(path, [f for r in results for f in r["upsert_files"]], current, app_id, batch,
                                      meta=meta)

    def _task_merge_fits(self, path: str, seg: StagedSegment) -> bool:
        """Whether a segment merged into an existing current table can be merged by one Python task
        (_merge_in_task): a local lake and stage, every piece's net changes written in the segment's schema, at most
        `task_merge_bytes` of them, and a table whose protocol the embedded engine writes."""
        base = seg.base_schema or seg.schema
        return (local_lake(path) and "://" not in seg.stage and bool(seg.keys)
                and net_pieces(seg.pieces, seg.lo, seg.hi)
                and sum(p.get("net_bytes", 0) for p in seg.pieces) <= self.task_merge_bytes()
                and self._log.writes(path) and self._log.writes(tombstone_path(path))
                and all(net_schema(seg.stage, p) == base for p in seg.pieces))

    def task_merge_bytes(self) -> int:
        """TASK_MERGE_MB, or the session's TASK_MERGE_CONF, in bytes."""
        raw = self.spark.conf.get(self.TASK_MERGE_CONF, None)
        try:
            mb = float(raw) if raw not in (None, "") else self.TASK_MERGE_MB
        except ValueError:
            raise EngineError(f"Spark conf {self.TASK_MERGE_CONF}={raw!r}: expected a number of MB") from None
        return int(mb * (1 << 20))

    def _merge_in_task(self, path: str, seg: StagedSegment, keys: list[str], app_id: str, batch: int) -> bool:
        """The merge of a staged segment into an existing current table as one Spark task (a Python worker, on an
        executor): it reduces the pieces' net changes to one row per key and merges them with the embedded engine's
        `_seq`-ordered merge with tombstones (binlake.lake.engines.netreduce.merge_segment), its commits carrying
        (app_id, batch) and `reducedBy: spark`. No Spark SQL plan, no Delta snapshot job in the JVM: a Delta MERGE
        there costs seconds of fixed work per table in a fresh process, where most hourly batches change a small
        part of each table. The driver gets back a count."""
        task = (seg.stage, list(seg.pieces), keys, seg.base_schema or seg.schema, list(seg.changes), seg.schema,
                str(path), app_id, batch, self._log.storage_options)
        got = self.spark.sparkContext.parallelize([0], 1).map(lambda _: merge_segment(task)).collect()[0]
        if got["error"]:
            kind, message = got["error"]
            raise (MergeInputError if kind == "MergeInputError" else EngineError)(message)
        return got["merged"]

    def _append_once(self, path: str, frame, app_id: str, batch: int, meta: dict[str, Any]) -> bool:
        """Append `frame` to `path` in one commit carrying (app_id, batch); False when the table has that txn
        (committed before, or by a racing writer: Delta skips the write silently)."""
        if is_committed(self.txn_version(path, app_id), batch):
            return False
        before, token = self.version(path), uuid.uuid4().hex
        self._writer(frame, "append", app_id, batch, {**meta, "writer": token}).save(str(path))
        return self._wrote(path, before, token)

    def net_change_figures(self, path: str, segs: list[StagedSegment]) -> dict | None:
        """The figures binlake.lake.pipeline premerge_figures computes from Arrow, here by joins and aggregates:
        rows before the batch, and the net inserts and deletes its last change per key makes by the merge rule.
        None when the key columns change name inside the batch, or the table's keys do not fit them."""
        from pyspark.errors import AnalysisException
        from pyspark.sql import Window
        from pyspark.sql import functions as F

        keys = segs[-1].keys
        if any(s.keys != keys for s in segs):
            return None
        key_cols = [F.col(quote(k)) for k in keys]
        parts = [self.merge_frame(s).select(*key_cols, F.col(quote(SEQ)), F.col(DELETED), F.lit(i).alias("__seg"))
                 for i, s in enumerate(segs)]
        net = parts[0]
        for part in parts[1:]:
            net = net.unionByName(part)
        if len(parts) > 1:
            net = net.withColumn("__rn", F.row_number().over(Window.partitionBy(*key_cols).orderBy(
                F.col("__seg").desc()))).where(F.col("__rn") == 1)
        try:
            if self.exists(path):
                target = self.spark.read.format("delta").load(str(path)).select(*key_cols,
                                                                                F.col(quote(SEQ)).alias("__t"))
                count = target.count()
                joined = net.join(target, keys, "left")
            else:  # the batch creates the table
                count, joined = 0, net.withColumn("__t", F.lit(None).cast("long"))
            tpath = tombstone_path(path)
            if self.exists(tpath):
                tombs = self.spark.read.format("delta").load(str(tpath)).select(*key_cols,
                                                                                F.col(quote(SEQ)).alias("__d"))
                joined = joined.join(tombs, keys, "left")
            else:
                joined = joined.withColumn("__d", F.lit(None).cast("long"))
            seq, deleted = F.col(quote(SEQ)), F.col(DELETED)
            present = F.col("__t").isNotNull()
            superseded = F.coalesce(seq < F.col("__d"), F.lit(False))
            newer = F.coalesce(seq > F.col("__t"), F.lit(False))
            got = joined.agg(F.sum((~present & ~deleted & ~superseded).cast("long")).alias("inserts"),
                             F.sum((present & deleted & newer).cast("long")).alias("deletes")).first()
        except AnalysisException:
            return None  # the table's key columns are renamed or retyped by this batch: not evaluated
        return {"count": count, "inserts": got["inserts"] or 0, "deletes": got["deletes"] or 0}

    def reset(self, path: str, schema: pa.Schema, app_id: str, batch: int) -> None:
        from pyspark.sql.pandas.types import from_arrow_schema

        df = self.spark.createDataFrame([], from_arrow_schema(schema, prefer_timestamp_ntz=True))
        meta = commit_meta("reset", [(app_id, batch)])
        self._ensure_ntz_feature(path, schema)  # a re-created table gaining a DATETIME over an existing one
        self._writer(df, "overwrite", app_id, batch, meta).option("overwriteSchema", "true").save(str(path))

    def truncate(self, path: str, app_id: str, batch: int) -> bool:
        """Remove every row (schema, tombstones and txn versions stay) in one commit carrying (app_id, batch)."""
        check_batch(app_id, batch)
        meta = commit_meta("truncate", [(app_id, batch)])

        def attempt() -> bool:
            if is_committed(self.txn_version(path, app_id), batch):
                return False
            empty = self.spark.read.format("delta").load(str(path)).limit(0)
            self._writer(empty, "overwrite", app_id, batch, meta).save(str(path))
            return True

        return self._retry(attempt)

    def copy_table(self, src: str, version: int, dst: str, app_id: str, batch: int) -> bool:
        return copy_with_tombstones(self, src, version, dst, app_id, batch)

    def _overwrite_from(self, src: str | None, version: int | None, dst: str, app_id: str, batch: int,
                        meta: dict[str, Any], like: str | None = None, like_version: int | None = None) -> bool:
        """Overwrite `dst` with `src` at `version` (None: with no rows, keeping dst's columns typed as `like`'s
        columns of the same name at `like_version`)."""
        from pyspark.sql import functions as F

        if src is not None:
            df = self.spark.read.format("delta").option("versionAsOf", version).load(str(src))
        else:
            df = self.spark.read.format("delta").load(str(dst)).limit(0)
            if like is not None:
                types = dict(self.spark.read.format("delta").option("versionAsOf", like_version).load(str(like))
                             .dtypes)
                df = df.select(*[F.col(quote(c)).cast(types[c]).alias(c) if c in types else F.col(quote(c))
                                 for c in df.columns])

        def attempt() -> bool:
            if self.exists(dst) and is_committed(self.txn_version(dst, app_id), batch):
                return False
            if src is not None and not self.exists(dst):
                self._create(dst, df.schema)  # version 0 empty, the copy version 1 (as delta-rs's copy)
            if src is not None:
                self._ensure_ntz_feature(dst, self.table_schema(src))
            self._writer(df, "overwrite", app_id, batch, meta).option("overwriteSchema", "true").save(str(dst))
            return True

        return self._retry(attempt)

    def properties(self, path: str) -> dict[str, str]:
        return self._log.properties(path)

    def set_properties(self, path: str, props: dict[str, str]) -> bool:
        """Table properties as a metadata-only delta-rs commit (as the txn rollback of restore)."""
        return self._log.set_properties(path, props)

    def replace_schema(self, path: str, changes: Sequence[ColumnChange], app_id: str, batch: int) -> bool:
        return replace_schema_with_tombstones(self, path, changes, app_id, batch)

    def _rewrite(self, path: str, changes: list[ColumnChange], app_id: str, batch: int) -> bool:
        """Overwrite the table with itself changed (Arrow batches through mapInArrow), in one commit."""
        from pyspark.sql.pandas.types import from_arrow_schema

        if is_committed(self.txn_version(path, app_id), batch):
            return False
        new = plan(self.table_schema(path), changes)
        check_column_names(new, f"replace_schema {path}")
        self._ensure_ntz_feature(path, new)

        def convert(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
            for b in batches:
                yield apply_changes(b, changes)

        df = self.spark.read.format("delta").load(str(path))
        out = df.mapInArrow(convert, from_arrow_schema(new, prefer_timestamp_ntz=True))
        partitions = renamed(list(self._log._dt(path).metadata().partition_columns), changes)
        token = uuid.uuid4().hex
        meta = commit_meta("replace_schema", [(app_id, batch)], changes=[f"{c.kind} {c.column}" for c in changes],
                           writer=token)
        writer = self._writer(out, "overwrite", app_id, batch, meta).option("overwriteSchema", "true")
        if partitions:
            writer = writer.partitionBy(*partitions)
        before = self.version(path)
        try:
            writer.save(str(path))
        except Exception as exc:
            # A failed conversion inside mapInArrow reaches the driver wrapped in the task failure's Java trace.
            failed = re.search(r"EngineError: (.+)", str(exc))
            if failed:
                raise EngineError(f"replace_schema {path}: {failed.group(1).strip()}") from None
            raise
        return self._wrote(path, before, token)

    def restore(self, path: str, version: int) -> None:
        # One RESTORE commit that also puts the txn versions back, which only delta-rs can write: Delta Spark
        # refuses a txn version lower than the recorded one (it treats the write as done) and its RESTORE takes
        # no txn. The commit is a plain Delta RESTORE, which Spark reads like its own.
        self._log.restore(path, version)
