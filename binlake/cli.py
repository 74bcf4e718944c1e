"""The `binlake` command line. Each subcommand parses its options and calls one service function."""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import sys
from collections.abc import Sequence
from pathlib import Path

from . import __version__
from .binlog.errors import BinlogError
from .binlog.output import OutputError
from .exitcodes import ExitCode, UnavailableError, UsageError

# binlake does no linear algebra, yet numpy's OpenBLAS starts a thread per core when numpy is imported: about 0.05 s
# of CPU per process on two cores, more on larger machines. One thread then, unless the user chose otherwise
# (numpy is not imported above, so this holds for this process and the processes it starts).
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

ENGINES = ("delta-rs", "delta-spark")  # binlake.lake.engines.factory.ENGINE_NAMES (not imported: startup time)


class _Parser(argparse.ArgumentParser):
    """argparse with one-line usage errors (exit code 2, ExitCode.USAGE)."""

    def error(self, message: str):  # type: ignore[override]
        self.exit(ExitCode.USAGE, f"binlake: error: {self.prog}: {message} (see --help)\n")


def _spark_conf(text: str) -> tuple[str, str]:
    """An argparse type: KEY=VALUE, a Spark conf."""
    key, sep, value = text.partition("=")
    if not sep or not key.strip().startswith("spark."):
        raise argparse.ArgumentTypeError(f"expected spark.KEY=VALUE, not {text!r}")
    return key.strip(), value


def _count(minimum: int):
    """An argparse type: an integer >= minimum."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"must be at least {minimum}, not {value}")
        return value

    parse.__name__ = "integer"
    return parse


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not value >= 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"must be a finite number of seconds >= 0, not {text}")
    return value


def _smtp_host(text: str) -> str:
    host, sep, port = text.rpartition(":") if ":" in text else (text, "", "")
    if not host or (sep and not (port.isdigit() and 0 < int(port) < 65536)):
        raise argparse.ArgumentTypeError(f"expected HOST or HOST:PORT, not {text!r}")
    return text


def _megabytes(text: str) -> float:
    """An argparse type: a positive size in MB (fractions allowed: 0.25 is 256 KB)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not value > 0 or value != value or value == float("inf"):
        raise argparse.ArgumentTypeError(f"must be a positive number of MB, not {text!r}")
    return value


def _regex(text: str) -> str:
    try:
        re.compile(text)
    except re.error as exc:
        raise argparse.ArgumentTypeError(f"not a regular expression ({exc}): {text!r}") from None
    return text


def _add_decode_filters(p: argparse.ArgumentParser) -> None:
    p.add_argument("files", nargs="+", help="binlog files (plain or gzip), read in the order given")
    p.add_argument("--sort", action="store_true", help="read the files in binlog sequence-number order")
    p.add_argument("--start-position", type=_count(0), help="first event position to read (applies to the first file)")
    p.add_argument("--stop-position", type=_count(0), help="stop before the event at this position (last file)")
    p.add_argument("--start-time", help="skip events before this ISO 8601 time (UTC unless a zone is given)")
    p.add_argument("--stop-time", help="skip events at or after this ISO 8601 time")
    p.add_argument("--databases", help="comma-separated databases to keep")
    p.add_argument("--tables", type=_regex, help="regular expression on db.table to keep")
    p.add_argument("--ops", help="comma-separated operations to keep: insert,update,delete")
    p.add_argument("--schemas", help="DDL snapshot store, or a directory of <db>.sql files: name and check "
                   "every rows event against the schema valid at its position")
    p.add_argument("--instance", default="default", help="instance name inside the snapshot store")
    p.add_argument("--binlog-ddl", action="store_true",
                   help="resolve rows against the DDL found in the files themselves (implied by --schemas)")
    p.add_argument("--on-schema-mismatch", choices=("stop", "skip"), default="stop",
                   help="stop (default, non-zero exit) or skip the table's events, reporting each one")
    p.add_argument("--no-progress", action="store_true", help="no progress bar/lines on stderr")


def _options_from(args: argparse.Namespace, files: list[str], all_events: bool = False):
    from .binlog.api import build_options

    opts = build_options(
        start_position=args.start_position,
        stop_position=args.stop_position,
        start_time=args.start_time,
        stop_time=args.stop_time,
        databases=args.databases,
        tables=args.tables,
        ops=args.ops,
        all_events=all_events,
    )
    opts.on_schema_mismatch = args.on_schema_mismatch
    if args.schemas or args.binlog_ddl:
        from .schema.api import build_resolver

        opts.table_resolver = build_resolver(files, args.schemas, args.instance)
    return opts


def _report_schema(opts, decoder) -> None:
    """Tell the operator what the schema timeline noticed: name disagreements, unknown tables, skipped events."""
    resolver = opts.table_resolver
    if resolver is not None:
        for d in resolver.disagreements:
            print(f"binlake: warning: {_printable(str(d))} (the binlog's names are used)", file=sys.stderr)
        for table, (file, pos) in sorted(resolver.missing.items()):
            print(f"binlake: warning: no schema knows {_printable(table)} (first seen at {_printable(file)}:{pos}); "
                  "its columns keep the binlog's names or @N", file=sys.stderr)
        for ev, why in resolver.timeline.unparsed:
            print(f"binlake: warning: DDL at {ev.file}:{ev.pos} not understood ({why}): {ev.sql[:120]!r}",
                  file=sys.stderr)
    for sk in decoder.skipped:
        print(f"binlake: skipped {_printable(sk.table)} at {_printable(sk.file)}:{sk.pos}: {_printable(sk.reason)}",
              file=sys.stderr)


def _file_progress(args: argparse.Namespace, files: list[str], label: str, to_stdout: bool = False):
    """A bytes-read progress bar over `files` and the (file, pos) callback feeding it; (None, None) with
    --no-progress, or when the records themselves go to the terminal."""
    if getattr(args, "no_progress", False) or (to_stdout and sys.stdout.isatty()):
        return None, None
    from .progress import FilePositions, ProgressBar

    bar = ProgressBar(label)
    return bar, FilePositions(files, bar)


def cmd_decode(args: argparse.Namespace) -> int:
    from .binlog.api import decode_to, order_files

    files = order_files(args.files, args.sort)
    opts = _options_from(args, files, all_events=args.all_events)
    # -o: written to a temporary name beside the target and renamed when complete; removed on any error.
    tmp = f"{args.output}.{os.getpid()}.part" if args.output else None
    out = open(tmp, "w", encoding="utf-8") if tmp else sys.stdout  # noqa: SIM115
    bar, where = _file_progress(args, files, "decode", to_stdout=not args.output)
    ok = False
    try:
        n, decoder = decode_to(files, out, args.format, opts, progress=where)
        if bar:
            bar.finish()
        ok = True
    finally:
        if bar:
            bar.close()
        if tmp:
            out.close()
            if ok:
                os.replace(tmp, args.output)
            else:
                os.unlink(tmp)
    _report_schema(opts, decoder)
    for r in decoder.results:
        if r.end is not None and r.end.status != "complete":
            print(f"binlake: {_printable(r.name)}: read ended at position {r.end.pos} ({r.end.status})",
                  file=sys.stderr)
    if args.output:
        print(f"binlake: wrote {n} records to {args.output}", file=sys.stderr)
    if decoder.table_errors:
        from .binlog.api import table_error_lines
        from .terminal import print_error

        for line in table_error_lines(decoder.table_errors):
            print_error("binlake: error:", f"UnreadableTableMap: {line}")
        return ExitCode.BAD_DATA
    return 0


def cmd_stats(args: argparse.Namespace) -> int:
    from .binlog.api import compute_stats, order_files
    from .binlog.stats import render_rich, render_text
    from .terminal import print_error, print_report

    files = order_files(args.files, args.sort)
    bar, where = _file_progress(args, files, "stats")
    try:
        report = compute_stats(files, _options_from(args, files), top=args.top, progress=where)
        if bar:
            bar.finish()
    finally:
        if bar:
            bar.close()
    if args.html:
        from .report.api import write_stats_html

        print(f"binlake: wrote {write_stats_html(report, args.html)}", file=sys.stderr)
    if args.json:
        json.dump(report, sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        print_report(render_text(report), lambda: render_rich(report))
    if report["table_errors"]:
        for line in report["table_errors"]:
            print_error("binlake: error:", f"UnreadableTableMap: {line}")
        return ExitCode.BAD_DATA
    return 0


def cmd_report(args: argparse.Namespace) -> int:
    from .report.api import write_lake_html

    path = write_lake_html(args.lake, args.out, batch=args.batch, engine=args.engine, pipeline=args.pipeline)
    print(f"binlake: wrote {path}", file=sys.stderr)
    return 0


def cmd_schema_snapshot(args: argparse.Namespace) -> int:
    from .schema.api import changed_tables, take_snapshot
    from .schema.store import SnapshotStore

    try:
        stored, name, snap = take_snapshot(args.mysql, args.out, args.instance, args.include, args.exclude)
    except Exception as exc:
        if type(exc).__module__.startswith("pymysql"):
            raise _mysql_failed(args.mysql, exc) from exc
        raise
    summary = {"stored": stored, "snapshot": name, "tables": len(snap.ddl), "binlog_file": snap.binlog_file,
               "binlog_pos": snap.binlog_pos}
    if stored:
        summary["changes"] = changed_tables(SnapshotStore.at(args.out, args.instance), snap)
    print(json.dumps(summary, indent=2))
    return 0


def _ingest_options(args: argparse.Namespace):
    """IngestOptions from `binlake ingest` arguments (binlake.orchestration.stages.ingest_options: from the
    deployment config)."""
    from .lake.ingest import IngestOptions
    from .sources.fetch import ingest_inputs

    if args.databases is not None and not args.databases.replace(",", "").strip():  # before any fetch
        raise ValueError("--databases is empty: name at least one (or leave the option out)")
    files, instance, lineage = ingest_inputs(args)
    if not files:
        raise ValueError(f"--source {args.source}: no binlog files there")
    return IngestOptions(
        lake=args.lake, files=files, schemas=args.schemas, instance=instance, lineage=lineage, engine=args.engine,
        pipeline=args.pipeline, tables=re.compile(args.tables) if args.tables else None,
        databases={d.strip() for d in args.databases.split(",") if d.strip()} if args.databases else None,
        split_bytes=args.split_mb << 20, quality=quality_config(args),
        helper_tables=getattr(args, "helper_tables", None) or None, ddl_cache=getattr(args, "ddl_cache", None),
    )


def _add_quality_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--expectations", help="user expectations file (schemas/expectations.yml format)")
    p.add_argument("--max-lag", type=_seconds, help="freshness gate: newest change at most this many seconds older "
                   "than the batch end (default: not checked)")
    p.add_argument("--alert-webhook", help="URL that gate-failure alerts are POSTed to (JSON)")
    p.add_argument("--alert-email", action="append", default=[], help="alert recipient (needs --smtp-host)")
    p.add_argument("--smtp-host", type=_smtp_host, help="SMTP server for alert emails (host or host:port)")
    p.add_argument("--no-gates", action="store_true", help="skip the quality gates")


def quality_config(args: argparse.Namespace):
    """The gates' settings from `_add_quality_options` arguments (GatesOff with --no-gates)."""
    if getattr(args, "no_gates", False):
        from .lake.ingest import GatesOff

        return GatesOff()
    from .settings import AlertConfig, QualityConfig

    host, _, port = (getattr(args, "smtp_host", None) or "").partition(":")
    alerts = AlertConfig(webhook_url=getattr(args, "alert_webhook", None), email_to=getattr(args, "alert_email", []),
                         smtp_host=host or None, smtp_port=int(port or 25))
    return QualityConfig(enabled=not getattr(args, "no_gates", False), max_lag_seconds=getattr(args, "max_lag", None),
                         expectations=getattr(args, "expectations", None), alerts=alerts)


def _batch_or_table(text: str) -> int | str:
    """An argparse type: a batch number, or a held-back table as db.table."""
    if text.isdigit():
        return int(text)
    if "." not in text.strip(".") or any(c.isspace() for c in text):
        raise argparse.ArgumentTypeError(f"not a batch number or a db.table name: {text!r}")
    return text


def _held_back(exc, bar=None) -> int:
    """Tables held back (binlake.lake.holds.TablesHeldBack): what went in on stdout, one line per held-back table
    on stderr, exit code "quarantined"."""
    from .lake.holds import held_line
    from .terminal import print_error, print_report

    if exc.summary is not None:
        print_report(exc.summary.text(), exc.summary.rich)
    print_error("binlake: error:", f"{len(exc.held)} table(s) held back, every other table was ingested; fix the "
                "cause, then `binlake quarantine release DB.TABLE --lake LAKE --source SOURCE [--schemas STORE]`:")
    for name, hold in sorted(exc.held.items()):
        print(f"  {held_line(name, hold)}", file=sys.stderr)
    return int(ExitCode.QUARANTINED)


def cmd_tail(args: argparse.Namespace) -> int:
    from .sources.tail_run import run_tail

    start_file = None
    if args.start_from:
        start_file, _, pos = args.start_from.partition(":")
        if not start_file or (pos and not pos.isdigit()):
            raise UsageError(f"--from takes FILE or FILE:POS, not {args.start_from!r}")
    stopping: list[int] = []

    def on_signal(signum, _frame) -> None:
        if stopping:  # a second signal: leave now (the next start cuts any partial transaction)
            raise KeyboardInterrupt
        stopping.append(signum)

    import signal  # (not at the top: start-up time)

    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, on_signal)
    stats = run_tail(args.mysql, args.landing, server_id=args.server_id or 0, start_file=start_file, gtid=args.gtid,
                     heartbeat=args.heartbeat or 5.0, resume_by=args.resume_by, stop=lambda: bool(stopping),
                     log=lambda m: print(f"[tail] {_printable(_redacted(m))}", file=sys.stderr))
    print(json.dumps(stats, indent=2))
    return 0


def cmd_ingest(args: argparse.Namespace) -> int:
    if args.follow:
        return _follow(args)
    return _ingest_once(args)


def _follow(args: argparse.Namespace) -> int:
    """`ingest --follow`: one ingest per interval while the landing grows (skipped when nothing changed)."""
    from .orchestration.follow import follow
    from .schema.timeline import DdlScanCache

    args.ddl_cache = DdlScanCache()  # each round reads only new and grown files for the schema timeline

    def once() -> None:
        code = _ingest_once(args)
        if code not in (0, ExitCode.QUARANTINED):  # held-back tables stay held; every other table keeps following
            raise _FollowStopped(code)

    try:
        follow(lambda: _source_files(args), once, args.interval,
               log=lambda m: print(f"[follow] {m}", file=sys.stderr))
    except _FollowStopped as exc:
        return exc.code
    return 0


class _FollowStopped(Exception):
    def __init__(self, code: int) -> None:
        super().__init__(code)
        self.code = code


def _source_files(args: argparse.Namespace) -> list[str] | None:
    from .sources.local import resolve_source

    if args.source.startswith("rds:") or "://" in args.source:
        return None  # listed by the source on each run
    return resolve_source(args.source)


class _NoPandas:
    """A meta path finder under which `import pandas` fails (see _arrow_without_pandas)."""

    @staticmethod
    def find_spec(name: str, path=None, target=None):
        if name == "pandas" or name.startswith("pandas."):
            raise ImportError("pandas left out of pyarrow's first pandas check (binlake.cli._arrow_without_pandas)")
        return None


def _arrow_without_pandas() -> None:
    """pyarrow imports pandas (about 0.35 s of CPU) the first time it checks whether a value is a pandas object:
    the first `pa.array` of a Python list, or importing pyarrow.dataset. The in-process ingest without gates and
    the in-process bootstrap give it no pandas object, so that first check is made here with pandas out of reach;
    pyarrow then takes values as non-pandas until a pandas conversion (to_pandas, from_pandas), which imports pandas as usual."""
    if "pandas" in sys.modules:
        return
    blocker = _NoPandas()
    sys.meta_path.insert(0, blocker)
    try:
        import pyarrow as pa

        pa.array([0])
    finally:
        sys.meta_path.remove(blocker)


def _keep_freed_memory() -> None:
    """Keep freed memory for reuse in this process. glibc gives each freed block over its mmap threshold (128 KiB
    at first) back to the kernel and trims the top of its heap past twice that, so the next batch of column buffers
    is faulted in and zeroed again: ingest and bootstrap allocate and free such buffers in cycles (5-10% of a small
    ingest's CPU went to it). Blocks under 4 MiB come from the heap, and up to 128 MiB of free heap is kept; larger
    blocks and more free heap go back as before, so the peak RSS stays as it was (measured with and without the
    gates). Nothing off glibc."""
    try:
        import ctypes

        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return
    mallopt(-3, 4 << 20)  # M_MMAP_THRESHOLD
    mallopt(-1, 128 << 20)  # M_TRIM_THRESHOLD


def _ingest_once(args: argparse.Namespace) -> int:
    if not args.spark:
        _keep_freed_memory()
    if getattr(args, "no_gates", False) and not args.spark:
        _arrow_without_pandas()
    from .lake.holds import TablesHeldBack
    from .quality.stages import run_ingest
    from .terminal import print_report

    opts = _ingest_options(args)
    executor = spark = None
    if args.spark:
        from .spark import build_spark_session, spark_executor

        spark = build_spark_session("binlake-ingest", extra_conf=dict(args.spark_conf or []))
        executor = spark_executor(spark)
    bar = None
    if not getattr(args, "no_progress", False):
        from .lake.decode_task import tracked_executor
        from .progress import ProgressBar

        bar = ProgressBar("ingest decode")
        executor = executor or tracked_executor(bar.update)  # Spark tasks report nothing back while they run
    kwargs = {"executor": executor} if executor else {}
    try:
        summary = run_ingest(opts, progress=lambda msg: _say(bar, f"[ingest] {msg}"), **kwargs)
    except TablesHeldBack as exc:
        if bar:
            bar.close()
            bar = None
        return _held_back(exc)
    finally:
        if bar:
            bar.close()
        if spark is not None:
            from .spark import stop_session

            stop_session(spark)
    print_report(summary.text(), summary.rich)
    return 0


def cmd_publish(args: argparse.Namespace) -> int:
    from .sinks.kafka import KafkaSinkOptions, publish
    from .sources.fetch import ingest_inputs

    if args.databases is not None and not args.databases.replace(",", "").strip():
        raise UsageError("--databases is empty: name at least one (or leave the option out)")
    extra = {}
    for item in args.kafka_config:
        key, eq, value = item.partition("=")
        if not eq or not key.strip():
            raise UsageError(f"--kafka-config {item!r}: give KEY=VALUE (a librdkafka setting)")
        extra[key.strip()] = value
    args.lake = None  # publish keeps its position in Kafka, not in a lake's control table
    files, instance, _lineage = ingest_inputs(args)
    if not files:
        raise UsageError(f"--source {args.source}: no binlog files there")
    opts = KafkaSinkOptions(
        bootstrap=args.kafka, topic_prefix=args.topic_prefix, files=files, schemas=args.schemas,
        name=args.name or instance, tables=re.compile(args.tables) if args.tables else None,
        databases={d.strip() for d in args.databases.split(",") if d.strip()} if args.databases else None,
        tombstones=not args.no_tombstones, partitions=args.partitions,
        batch_bytes=max(1, int(args.batch_mb * (1 << 20))),
        producer_config=extra, timeout=float(args.kafka_timeout))
    quiet = getattr(args, "no_progress", False)
    summary = publish(opts, progress=None if quiet else lambda msg: print(f"[publish] {msg}", file=sys.stderr),
                      release=args.release)
    print(summary.text())
    if summary.held:
        from .terminal import print_error

        print_error("binlake: error:", f"{len(summary.held)} table(s) held back, every other table was published; "
                    "fix the cause (e.g. --schemas), then run the same command with --release DB.TABLE:")
        for name, hold in sorted(summary.held.items()):
            print(f"  {name}: {hold['error']} ({hold['file']}:{hold['pos']}); held from "
                  f"{hold['from_file']}:{hold['from_pos']}", file=sys.stderr)
        return int(ExitCode.QUARANTINED)
    return 0


def _say(bar, message: str) -> None:
    """A progress message on stderr (through the bar, so that a redrawn bar is not broken by it)."""
    if bar is not None:
        bar.note(message)
    else:
        print(message, file=sys.stderr)


def cmd_bootstrap(args: argparse.Namespace) -> int:
    if not getattr(args, "spark", False):
        _keep_freed_memory()
        _arrow_without_pandas()  # bootstrap gives pyarrow no pandas object (no gates here)
    from .lake.bootstrap import run_bootstrap

    tables = [tuple(t.split(".", 1)) for t in args.tables.split(",")]
    if any(len(t) != 2 for t in tables):
        raise ValueError("--tables takes db.table names separated by commas")
    bar = None
    if not getattr(args, "no_progress", False):
        from .progress import ProgressBar

        bar = ProgressBar("bootstrap", unit="chunks")

    def progress(done: int, total: int, what: str) -> None:
        if bar is not None:
            bar.label = f"bootstrap ({what})"
            bar.update(done, total)

    try:
        summary = _bootstrap(args, run_bootstrap, tables, progress)
    finally:
        if bar:
            bar.close()
    print(json.dumps(summary, indent=2))
    return 0


def _bootstrap(args, run_bootstrap, tables, progress):
    spark = stager = None
    if getattr(args, "spark", False):
        from .spark import bootstrap_stager, build_spark_session

        spark = build_spark_session("binlake-bootstrap")
        stager = bootstrap_stager(spark)
    try:
        return run_bootstrap(args.mysql, tables, args.lake, instance=args.instance, chunk_rows=args.chunk_rows,
                             pipeline=args.pipeline, method=args.method, watermark_table=args.watermark_table,
                             progress=progress, readers=args.readers, stager=stager)
    except Exception as exc:
        if type(exc).__module__.startswith("pymysql"):
            raise _mysql_failed(args.mysql, exc) from exc
        raise
    finally:
        if spark is not None:
            from .spark import stop_session

            stop_session(spark)


def cmd_trace(args: argparse.Namespace) -> int:
    from .lake.query import trace

    if any("=" not in kv for kv in args.key):
        raise UsageError(f"--key takes column=value, not {next(kv for kv in args.key if '=' not in kv)!r}")
    if args.table.count(".") != 1 or not all(args.table.split(".")):
        raise UsageError(f"--table takes db.table, not {args.table!r}")
    rows = trace(args.lake, args.table, dict(kv.split("=", 1) for kv in args.key), engine=args.engine)
    if not rows:
        print(f"no change of {args.table} with {' '.join(args.key)} in the lake")
        return ExitCode.NOT_FOUND
    for r in rows:
        print(r)
    return 0


def cmd_query(args: argparse.Namespace) -> int:
    from .lake.query import run_query

    table = run_query(args.lake, args.sql, dropped=args.dropped)
    if not table.num_rows:
        print("(no rows)")
        return 0
    frame = table.to_pandas()
    frame.columns = [_printable(str(c)) for c in frame.columns]
    for i in range(frame.shape[1]):  # text from the source must not drive the terminal (by position: names repeat)
        if frame.dtypes.iloc[i].kind == "O":
            frame.isetitem(i, frame.iloc[:, i].map(lambda v: _printable(v) if isinstance(v, str) else v))
    print(frame.to_string(index=False))
    return 0


def _printable(text: str) -> str:
    """Control characters (terminal escape sequences, newlines) shown as escapes."""
    return text if text.isprintable() else "".join(ch if ch.isprintable() else repr(ch)[1:-1] for ch in text)


def cmd_quarantine(args: argparse.Namespace) -> int:
    from .lake.ingest import IngestOptions
    from .lake.pending import BatchStore
    from .quality.quarantine import discard_batch, quarantined, quarantined_files, release_batch
    from .quality.stages import run_ingest
    from .terminal import print_report

    if args.action == "list":
        for pb in quarantined(args.lake, args.pipeline):
            q = pb.quarantine or {}
            tables = sorted({f["table"] for f in q.get("failures", [])})
            print(f"batch {pb.batch}: {q.get('stage')} gate failed at {q.get('at')}; tables {', '.join(tables)}; "
                  f"files {', '.join(f['file'] for f in pb.files)}")
        for st in quarantined_files(args.lake, args.pipeline):
            print(f"file {st.file} ({st.instance}/{st.lineage}): quarantined outside a batch: {st.last_error}")
        from .lake.holds import held_line, held_tables

        for name, hold in sorted(held_tables(BatchStore(args.lake, args.pipeline)).items()):
            print(f"table {held_line(name, hold)} (since batch {hold['since']}, {len(hold['pieces'])} piece(s); "
                  f"release with: binlake quarantine release {name} --source ...)")
        return 0
    if isinstance(args.batch, str):
        return _release_table(args)
    if args.action == "show":
        pb = BatchStore(args.lake, args.pipeline).load(args.batch)
        print(json.dumps({"batch": pb.batch, "state": pb.state, "files": pb.files, "quarantine": pb.quarantine,
                          "tables": pb.tables, "gates": pb.gates}, indent=2, default=str))
        return 0
    opts = IngestOptions(lake=args.lake, files=[], engine=args.engine, pipeline=args.pipeline,
                         quality=quality_config(args))
    if args.action == "discard":
        restored = discard_batch(opts, args.batch)
        print(f"batch {args.batch} discarded (history restored: {', '.join(restored) or 'none'}); the next ingest "
              "decodes its range again")
        return 0
    release_batch(opts, args.batch)
    if args.no_run:
        print(f"batch {args.batch} released; the next ingest runs it")
        return 0
    summary = run_ingest(opts, progress=lambda msg: print(f"[release] {msg}", file=sys.stderr))
    print_report(summary.text(), summary.rich)
    return 0


def _release_table(args: argparse.Namespace) -> int:
    """`binlake quarantine release DB.TABLE`: catch a held-back table up from the source's files."""
    from .lake.holds import TablesHeldBack
    from .quality.stages import release_table
    from .terminal import print_report

    if args.action != "release":
        raise ValueError(f"quarantine {args.action} takes a batch number; a held-back table is only released")
    if not args.source:
        raise ValueError(f"releasing {args.batch} decodes its held-back changes again: give --source (and "
                         "--schemas when the binlogs have MINIMAL row metadata)")
    for name, default in (("landing", None), ("window_from", None), ("window_to", None), ("rds_endpoint", None),
                          ("lineage", None), ("public_link", False), ("tables", None), ("databases", None),
                          ("split_mb", 64)):
        if not hasattr(args, name):
            setattr(args, name, default)
    opts = _ingest_options(args)
    try:
        summary = release_table(opts, args.batch, progress=lambda msg: print(f"[release] {msg}", file=sys.stderr))
    except TablesHeldBack as exc:
        return _held_back(exc)
    print_report(summary.text(), summary.rich)
    return 0


def cmd_quality_report(args: argparse.Namespace) -> int:
    from .lake.engines import get_engine
    from .quality.report import write_report

    n = write_report(get_engine(args.engine), args.lake, args.out, args.batch)
    print(f"{args.out}: {n} expectation result(s)")
    return 0


def cmd_demo(args: argparse.Namespace) -> int:
    from .demo import run_demo

    return run_demo(args.workdir)


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="binlake",
        description="MySQL/MariaDB binary logs into Delta Lake: decode, inspect and ingest binlog files.",
    )
    parser.add_argument("--version", action="version", version=f"binlake {__version__}")
    parser.add_argument("--debug", action="store_true", help="print the traceback of an internal error "
                        "(also BINLAKE_DEBUG=1)")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    p = sub.add_parser("decode", help="decode binlog files to JSON lines, SQL or rollback SQL")
    _add_decode_filters(p)
    p.add_argument("--format", choices=("jsonl", "sql", "rollback"), default="jsonl")
    p.add_argument("--all-events", action="store_true", help="also emit non-row events (statements, DDL, GTIDs...)")
    p.add_argument("-o", "--output", help="write to this file instead of standard output")
    p.set_defaults(func=cmd_decode)

    p = sub.add_parser("stats", help="row counts per table and operation, transactions, throughput over time")
    _add_decode_filters(p)
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.add_argument("--top", type=_count(0), default=10, help="how many largest/longest transactions to list")
    p.add_argument("--html", metavar="OUT", help="also write the report as one self-contained HTML page with charts")
    p.set_defaults(func=cmd_stats)

    p = sub.add_parser("report", help="HTML page with charts for a lake batch: volume, transactions/s, lag")
    p.add_argument("--lake", required=True, help="lake root directory")
    p.add_argument("--batch", type=_count(0), help="batch id (default: every batch)")
    p.add_argument("--out", required=True, help="HTML file to write")
    p.add_argument("--engine", default=None, choices=ENGINES)
    p.add_argument("--pipeline", default="default")
    p.set_defaults(func=cmd_report)

    p = sub.add_parser("schema", help="DDL snapshots")
    schema_sub = p.add_subparsers(dest="schema_command", metavar="SUBCOMMAND", required=True)
    p = schema_sub.add_parser("snapshot", help="capture tracked tables' DDL and the binlog position it is valid at")
    p.add_argument("--mysql", required=True, help="mysql://user:password@host:port/")
    p.add_argument("--out", required=True, help="snapshot store directory")
    p.add_argument("--instance", default="default", help="instance name inside the store")
    p.add_argument("--include", action="append", default=[], help="db.table glob to track (repeatable)")
    p.add_argument("--exclude", action="append", default=[], help="db.table glob to leave out (repeatable)")
    p.set_defaults(func=cmd_schema_snapshot)

    p = sub.add_parser("ingest", help="decode new binlog data into the lake's history and current tables")
    p.add_argument("--source", required=True, help="local:DIR (a directory or glob of binlog files), "
                   "rds:INSTANCE (RDS OpenAPI), or oss://bucket/prefix")
    p.add_argument("--lake", required=True, help="lake root directory")
    p.add_argument("--landing", help="landing directory for fetched files (needed for rds:/oss:)")
    p.add_argument("--from", dest="window_from", help="UTC window start (rds:/oss:), e.g. 2024-05-01T00:00:00Z")
    p.add_argument("--to", dest="window_to", help="UTC window end, exclusive (rds:/oss:)")
    p.add_argument("--rds-endpoint", help="RDS OpenAPI endpoint (default rds.aliyuncs.com; http://host:port for "
                   "a local server); credentials from ALIBABA_CLOUD_ACCESS_KEY_ID/_SECRET")
    p.add_argument("--lineage", help="RDS HostInstanceID to read (default: the one already ingested, else the "
                   "primary)")
    p.add_argument("--public-link", action="store_true", help="download through the public link (default intranet)")
    p.add_argument("--schemas", help="DDL snapshot store or directory of <db>.sql files")
    p.add_argument("--instance", default="default", help="source instance name (snapshot store, control table)")
    p.add_argument("--engine", default=None, choices=ENGINES, help="delta-rs (default; delta-spark with --spark) "
                   "or delta-spark")
    p.add_argument("--pipeline", default="default", help="pipeline name (part of every commit's app id)")
    p.add_argument("--tables", type=_regex, help="regular expression on db.table to ingest")
    p.add_argument("--databases", help="comma-separated databases to ingest")
    p.add_argument("--split-mb", type=_count(1), default=64, help="decode files larger than this as several ranges")
    p.add_argument("--spark", action="store_true", help="decode in Spark tasks (local[*] unless configured) that "
                   "stage Parquet in the lake; the commits run on the executors too (delta-spark engine)")
    p.add_argument("--spark-conf", action="append", type=_spark_conf, metavar="KEY=VALUE",
                   help="with --spark: a Spark conf for the session (repeat), e.g. spark.executor.memory=4g or "
                   "spark.binlake.taskMergeMaxMB=0 (docs/engines.md)")
    p.add_argument("--helper-tables", action="append", metavar="REGEX",
                   help="table names of online-schema-change helper tables, never listed as lake tables (repeat; "
                   "default: gh-ost's _t_gho/_t_ghc/_t_del and pt-online-schema-change's _t_new/_t_old)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar/lines on stderr")
    p.add_argument("--follow", action="store_true", help="keep ingesting the source in micro-batches (a landing "
                   "directory `binlake tail` writes: the growing file up to its last complete transaction) until "
                   "interrupted")
    p.add_argument("--interval", type=_seconds, default=10.0, help="with --follow: seconds between batches (10)")
    _add_quality_options(p)
    p.set_defaults(func=cmd_ingest)

    p = sub.add_parser("publish", help="publish row changes to Kafka as Debezium-style change events, exactly once "
                       "(docs/kafka.md)")
    p.add_argument("--source", required=True, help="local:DIR (a directory or glob of binlog files), "
                   "rds:INSTANCE or oss://bucket/prefix (as for ingest)")
    p.add_argument("--kafka", required=True, help="bootstrap servers, host:port[,host:port...]")
    p.add_argument("--topic-prefix", required=True, help="topics are PREFIX.db.table, PREFIX.schema-changes and "
                   "PREFIX.binlake-offsets (the committed positions)")
    p.add_argument("--name", help="publisher name: its offsets record and transactional.id (default: --instance)")
    p.add_argument("--landing", help="landing directory for fetched files (needed for rds:/oss:)")
    p.add_argument("--from", dest="window_from", help="UTC window start (rds:/oss:)")
    p.add_argument("--to", dest="window_to", help="UTC window end, exclusive (rds:/oss:)")
    p.add_argument("--schemas", help="DDL snapshot store or directory of <db>.sql files")
    p.add_argument("--instance", default="default", help="source instance name (snapshot store)")
    p.add_argument("--pipeline", default="default", help=argparse.SUPPRESS)
    p.add_argument("--tables", type=_regex, help="regular expression on db.table to publish")
    p.add_argument("--databases", help="comma-separated databases to publish")
    p.add_argument("--no-tombstones", action="store_true", help="no tombstone (key, null) after each delete")
    p.add_argument("--partitions", type=_count(1), default=3, help="partitions of the table topics binlake "
                   "creates (default 3)")
    p.add_argument("--batch-mb", type=_megabytes, default=16, help="one Kafka transaction per range of about "
                   "this many binlog MB (default 16; fractions allowed)")
    p.add_argument("--release", action="append", default=[], metavar="DB.TABLE",
                   help="a held-back table whose cause is fixed: publish its changes from where it was held, then "
                   "go on with the others (repeatable)")
    p.add_argument("--kafka-timeout", type=_count(1), default=60, help="seconds to wait for the broker "
                   "(metadata, transactions) before giving up with exit 6 (default 60)")
    p.add_argument("--kafka-config", action="append", default=[], metavar="KEY=VALUE",
                   help="extra librdkafka setting for every client (repeatable), e.g. security.protocol=SSL")
    p.add_argument("--no-progress", action="store_true", help="no progress lines on stderr")
    p.set_defaults(func=cmd_publish)

    p = sub.add_parser("tail", help="follow a live server as a replica and land its binlog files byte-identical "
                       "to the server's, until interrupted")
    p.add_argument("--mysql", required=True, help="mysql://user:password@host:port/ (needs REPLICATION SLAVE)")
    p.add_argument("--landing", required=True, help="directory, or oss://bucket/prefix (OSS_* environment), the "
                   "binlog files are landed in (server's names)")
    p.add_argument("--server-id", type=_count(1), help="replica server id, unique among the server's replicas "
                   "(default: derived from the landing location, the same on every restart)")
    start = p.add_mutually_exclusive_group()
    start.add_argument("--from", dest="start_from", metavar="FILE[:POS]", help="first binlog file to land when the "
                       "landing directory is empty (landed whole from its start; default: the server's oldest)")
    start.add_argument("--gtid", metavar="SET", help="start at the file holding this GTID state when the landing "
                       "directory is empty (MariaDB domain-server-seq list, or a MySQL GTID set)")
    p.add_argument("--resume-by", choices=("auto", "gtid", "position"), default="auto",
                   help="how a restart continues: MariaDB GTID state where the landed files carry it (auto), or "
                   "FILE:POS")
    p.add_argument("--heartbeat", type=_seconds, default=5.0, help="heartbeat period asked from the server; "
                   "3 missed beats mean a dead connection (5)")
    p.set_defaults(func=cmd_tail)

    p = sub.add_parser("bootstrap", help="load existing rows (consistent snapshots, chunked by key); ingest "
                       "then continues at the matching binlog position")
    p.add_argument("--mysql", required=True, help="mysql://user:password@host:port/")
    p.add_argument("--tables", required=True, help="db.table,db.table,...")
    p.add_argument("--lake", required=True)
    p.add_argument("--instance", default="default")
    p.add_argument("--pipeline", default="default")
    p.add_argument("--chunk-rows", type=_count(1), default=50_000, help="rows per chunk (integer primary keys)")
    p.add_argument("--readers", type=_count(1), default=2, help="chunks read at the same time (threads), while "
                   "the main thread commits")
    p.add_argument("--spark", action="store_true", help="read chunks in Spark tasks, which write Parquet into "
                   "the lake and return manifests (local[*] unless configured)")
    p.add_argument("--method", choices=("auto", "snapshot", "watermark"), default="auto",
                   help="snapshot: MariaDB's binlog_snapshot_file/position; watermark: binlog positions observed "
                   "around each chunk (MySQL, RDS); auto: snapshot where the server reports it")
    p.add_argument("--watermark-table", help="db.table the watermark method writes one row to per chunk (created "
                   "if missing), which makes every change before the low watermark visible to the chunk's read")
    p.add_argument("--no-progress", action="store_true", help="no progress bar/lines on stderr")
    p.set_defaults(func=cmd_bootstrap)

    p = sub.add_parser("trace", help="a row's full change timeline: when, which op, old -> new, file:pos, GTID")
    p.add_argument("--lake", required=True)
    p.add_argument("--table", required=True, help="db.table")
    p.add_argument("--key", action="append", required=True, help="column=value (repeat for composite keys)")
    p.add_argument("--engine", default=None, choices=ENGINES)
    p.set_defaults(func=cmd_trace)

    p = sub.add_parser("query", help="SQL over the lake's tables (db.table, db.table__history)")
    p.add_argument("--lake", required=True)
    p.add_argument("--dropped", action="store_true", help="also dropped and renamed-away tables and every history "
                   "generation of a re-used name (db.t__history__g1, ...); _binlake.catalog lists them")
    p.add_argument("sql")
    p.set_defaults(func=cmd_query)

    p = sub.add_parser("quarantine", help="batches held back by a failed quality gate: list, show, release, "
                       "discard")
    quarantine_sub = p.add_subparsers(dest="action", required=True)
    for action, text in (("list", "quarantined batches and files"), ("show", "one batch's files, tables and gates"),
                         ("release", "run the batch again as decoded (after the fix)"),
                         ("discard", "undo the batch; the next ingest decodes its range again")):
        q = quarantine_sub.add_parser(action, help=text)
        if action == "release":
            q.add_argument("batch", type=_batch_or_table, metavar="BATCH_OR_TABLE",
                           help="batch number, or a held-back table (db.table)")
        elif action != "list":
            q.add_argument("batch", type=_count(0), help="batch number")
        q.add_argument("--lake", required=True)
        q.add_argument("--pipeline", default="default")
        q.add_argument("--engine", default=None, choices=ENGINES)
        if action == "release":
            q.add_argument("--no-run", action="store_true", help="only release; the next ingest runs the batch")
            q.add_argument("--source", help="a held-back table: where its binlog files are (as for ingest)")
            q.add_argument("--schemas", help="a held-back table: DDL snapshot store or directory of <db>.sql files")
            q.add_argument("--instance", default="default", help="a held-back table: the source instance name")
        if action in ("release", "discard"):
            _add_quality_options(q)
        q.set_defaults(func=cmd_quarantine, batch=None, no_run=False)

    p = sub.add_parser("quality", help="quality gate results")
    quality_sub = p.add_subparsers(dest="quality_command", required=True)
    p = quality_sub.add_parser("report", help="render every gate's results as one self-contained HTML page")
    p.add_argument("--lake", required=True)
    p.add_argument("--out", required=True, help="HTML file to write")
    p.add_argument("--batch", type=_count(0), help="only this batch")
    p.add_argument("--engine", default=None, choices=ENGINES)
    p.set_defaults(func=cmd_quality_report)

    p = sub.add_parser("demo", help="write sample binlogs and decode them (no server, no network)")
    p.add_argument("--workdir", default=".binlake-demo", help="where the demo writes its files")
    p.set_defaults(func=cmd_demo)
    _add_debug(sub)
    return parser


def _add_debug(sub: argparse._SubParsersAction) -> None:
    """--debug after any subcommand too (`binlake decode --debug f`)."""
    for p in set(sub.choices.values()):
        p.add_argument("--debug", action="store_true", default=argparse.SUPPRESS, help=argparse.SUPPRESS)
        for action in p._actions:
            if isinstance(action, argparse._SubParsersAction):
                _add_debug(action)


_LAKE_WRITERS = {"ingest", "bootstrap"}


def _is_remote(path: str) -> bool:
    return "://" in path


def _input_file(path: str, what: str) -> None:
    if not os.path.exists(path):  # also a symbolic link to nothing
        raise UsageError(f"{what} {path}: no such file")
    if os.path.isdir(path):
        raise UsageError(f"{what} {path}: is a directory, not a file")
    if not os.path.isfile(path):  # opening a FIFO blocks until a writer comes; devices and sockets are no files
        raise UsageError(f"{what} {path}: not a regular file (a pipe, device or socket); binlogs are read from files")
    try:
        with open(path, "rb"):
            pass
    except OSError as exc:
        raise UnavailableError(f"{what} {path}: {exc.strerror or exc}") from None


def _output_file(path: str, what: str) -> None:
    """A file the command will write: its directory must exist and be writable; it must not be a directory."""
    if os.path.isdir(path):
        raise UsageError(f"{what} {path}: is a directory")
    parent = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(parent):
        raise UsageError(f"{what} {path}: directory {parent} does not exist")
    if not os.access(parent, os.W_OK):
        raise UnavailableError(f"{what} {path}: directory {parent} is not writable (read-only or no permission)")


def _writable_dir(path: str, what: str) -> None:
    """A directory the command writes into (created if missing): the nearest existing ancestor must be a writable
    directory, and the directory itself, when it exists, too."""
    probe = os.path.abspath(path)
    while not os.path.lexists(probe):
        probe = os.path.dirname(probe)
    if not os.path.isdir(probe):
        raise UsageError(f"{what} {path}: {probe} is a file, not a directory")
    for sub in (probe, os.path.join(probe, "_binlake")):
        if os.path.isdir(sub) and not os.access(sub, os.W_OK):
            raise UnavailableError(f"{what} {path}: {sub} is not writable (read-only or no permission)")


def _lake_to_read(path: str) -> None:
    if not os.path.lexists(path):
        raise UsageError(f"--lake {path}: no such directory")
    if not os.path.isdir(path):
        raise UsageError(f"--lake {path}: not a directory")
    root = Path(path)
    if not (root / "_binlake").is_dir() and not any(root.glob("*/*/_delta_log")):
        raise UsageError(f"--lake {path}: not a binlake lake (no _binlake directory, no Delta tables)")


def check_arguments(args: argparse.Namespace) -> None:
    """Paths named on the command line, checked before anything is read or written: one line naming the option."""
    command = args.command
    for f in getattr(args, "files", None) or []:
        _input_file(f, "input")
    for opt in ("schemas",):
        value = getattr(args, opt, None)
        if value and not _is_remote(value) and not os.path.exists(value):
            raise UsageError(f"--{opt} {value}: no such file or directory")
    if getattr(args, "expectations", None) and not _is_remote(args.expectations):
        _input_file(args.expectations, "--expectations")
    for opt, value in (("--output", getattr(args, "output", None)), ("--html", getattr(args, "html", None))):
        if value:
            _output_file(value, opt)
            for f in getattr(args, "files", None) or []:
                if os.path.exists(value) and os.path.samefile(value, f):
                    raise UsageError(f"{opt} {value}: is also an input file (it would be overwritten)")
    if command in ("report", "quality") and getattr(args, "out", None):
        _output_file(args.out, "--out")
    if command == "schema" and not _is_remote(args.out):
        _writable_dir(args.out, "--out")
    if command == "demo":
        _writable_dir(args.workdir, "--workdir")
    lake = getattr(args, "lake", None)
    if lake and not _is_remote(lake):
        writes = command in _LAKE_WRITERS or getattr(args, "action", None) in ("release", "discard")
        if writes:
            _writable_dir(lake, "--lake")
            if getattr(args, "action", None):
                _lake_to_read(lake)
        else:
            _lake_to_read(lake)
    if command == "ingest":
        from .sources.fetch import parse_utc

        parse_utc(args.window_from, "--from")
        parse_utc(args.window_to, "--to")
    landing = getattr(args, "landing", None)
    if landing and not _is_remote(landing):
        _writable_dir(landing, "--landing")


def _redacted(url: str) -> str:
    """A connection URL without its password, for messages."""
    return re.sub(r"(\w://[^:/@\s]*:)\S*@", r"\1***@", url)


def _mysql_failed(url: str, exc: Exception) -> UnavailableError:
    return UnavailableError(f"--mysql {_redacted(url)}: {_one_line(exc)}")


def exit_code_for(exc: BaseException) -> ExitCode:
    """The documented exit code for an exception that reached the command line (docs/cli.md: Exit codes)."""
    code = getattr(exc, "exit_code", None)
    if isinstance(code, int):
        return ExitCode(code)
    if isinstance(exc, OutputError):  # (decoder errors carry theirs: BinlogError.exit_code)
        return ExitCode.BAD_DATA
    if isinstance(exc, (FileNotFoundError, IsADirectoryError, NotADirectoryError)):
        return ExitCode.USAGE
    if isinstance(exc, (OSError, ConnectionError, TimeoutError)):
        return ExitCode.UNAVAILABLE  # permission denied, read-only or full disk, network errors
    if isinstance(exc, re.error) or (isinstance(exc, ValueError) and (
            type(exc).__module__ in ("builtins", "argparse") or type(exc).__module__.startswith("binlake"))):
        return ExitCode.USAGE  # binlake raises ValueError for bad values; a library's (pyarrow's, ...) is a bug
    mod = type(exc).__module__ or ""
    if mod.startswith(("binlake.sources", "oss2", "urllib3", "requests", "http.client", "pymysql", "MySQLdb",
                       "alibabacloud", "Tea")):
        return ExitCode.UNAVAILABLE
    return ExitCode.INTERNAL


def _one_line(exc: BaseException) -> str:
    """The exception's message on one line (multi-line engine errors folded), control characters escaped."""
    text = str(exc) or type(exc).__name__
    if isinstance(exc, OSError) and exc.filename is not None and exc.strerror:
        text = f"{exc.filename}: {exc.strerror}"
    text = " ".join(text.split())
    text = "".join(ch if ch.isprintable() else repr(ch)[1:-1] for ch in text)
    text = _redacted(text)  # a connection URL echoed by any layer never shows its password
    return text if len(text) <= 2000 else text[:2000] + " ..."


def _debug_wanted(argv: Sequence[str] | None) -> bool:
    args = sys.argv[1:] if argv is None else list(argv)
    return "--debug" in args or os.environ.get("BINLAKE_DEBUG", "") not in ("", "0")


def _broken_pipe() -> int:
    """stdout was closed by its reader: leave quietly with 141 (as a process SIGPIPE killed), and point stdout
    at /dev/null so the interpreter's final flush does not complain again."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):
        pass
    return ExitCode.BROKEN_PIPE


def main(argv: Sequence[str] | None = None) -> int:
    if argv is None:  # the process's command (console script, python -m binlake.cli), not a call from Python
        _skip_exit_collections()
        code = _main(argv)
        _end_process(code)
        return code
    return _main(argv)


def _main(argv: Sequence[str] | None) -> int:
    parser = build_parser()
    debug = _debug_wanted(argv)
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # argparse: --help/--version (0) or a usage error (2), already printed
        return int(exc.code or 0)
    if not getattr(args, "func", None):
        parser.print_help(sys.stderr)
        return ExitCode.USAGE
    return guarded(lambda: _run(args), debug)


def _end_process(code: int) -> None:
    """End the command's process as the interpreter's exit would, without its teardown: the atexit handlers run
    (logging's, Spark's gateway, temporary directories), the standard streams are flushed and the process exits
    with `code`; what is skipped is freeing the objects of numpy's, pyarrow's, deltalake's and binlake's modules
    one by one (about 0.03 s of CPU after an ingest). While a thread the interpreter would wait for is still alive
    (none that binlake leaves), this returns and the interpreter exits as usual."""
    import atexit
    import threading

    if any(t is not threading.main_thread() and not t.daemon and t.is_alive() for t in threading.enumerate()):
        return
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):  # a closed pipe or stream: what was written is out or lost
            stream.flush()
    os._exit(int(code))


def _skip_exit_collections() -> None:
    """At exit, after the atexit handlers before it, every object still alive moves to the collector's permanent
    generation (gc.freeze), so the collections of the interpreter's shutdown do not scan the whole heap again
    (pyarrow's, numpy's, deltalake's and binlake's modules and what they hold: about 0.04 s of CPU after an
    ingest). Files are closed where they are used and the standard streams are flushed at exit as before; only
    reference cycles still alive at exit are left to the operating system instead of being collected."""
    import atexit
    import gc

    atexit.register(gc.freeze)  # registered first, so it runs after the handlers registered later


def _run(args: argparse.Namespace) -> int:
    check_arguments(args)
    if getattr(args, "func", None) is cmd_ingest and args.spark and not args.engine:
        # `ingest --spark`: the executors also write (history appends, merges, gates), so the driver's memory does
        # not grow with the batch; `--engine delta-rs` keeps the commits in this process.
        args.engine = "delta-spark"
    if (getattr(args, "engine", None) or "").strip().lower() == "delta-spark":
        _start_delta_spark()
    return args.func(args)


def _start_delta_spark() -> None:
    """`--engine delta-spark`: binlake's SparkSession with the Delta jars setup fetched, for get_engine to use."""
    from .lake.engines import EngineUnavailable, use_spark
    from .spark import SparkUnavailable, build_spark_session

    try:
        use_spark(build_spark_session("binlake", delta=True))
    except (EngineUnavailable, SparkUnavailable) as exc:
        raise EngineUnavailable(f"--engine delta-spark: {exc}") from None


def guarded(work, debug: bool = False) -> int:
    """Run `work()` (returning an exit code) as the command line does: expected failures as one line on stderr
    with their documented exit code, anything else as an internal error (the traceback only with `debug`), a
    closed stdout as 141."""
    try:
        code = work()
        sys.stdout.flush()  # output lost to a closed pipe must not pass for success
        return code
    except BrokenPipeError:
        return _broken_pipe()
    except KeyboardInterrupt:
        print("binlake: interrupted", file=sys.stderr)
        return ExitCode.INTERRUPTED
    except Exception as exc:
        code = exit_code_for(exc)
        if debug:
            import traceback

            traceback.print_exc()
        from .terminal import print_error

        try:
            if code == ExitCode.INTERNAL:
                print_error("binlake: internal error:", f"{type(exc).__name__}: {_one_line(exc)} (re-run with --debug "
                            "or BINLAKE_DEBUG=1 for the traceback)")
            elif isinstance(exc, BinlogError) or type(exc).__module__.startswith("binlake.quality") \
                    or type(exc).__name__ == "BatchQuarantined":  # a gate's refusal (in binlake.lake.pending)
                print_error("binlake: error:", f"{type(exc).__name__}: {_one_line(exc)}")
            else:
                print_error("binlake: error:", _one_line(exc))
        except BrokenPipeError:
            pass
        return code

if __name__ == "__main__":
    sys.exit(main())
